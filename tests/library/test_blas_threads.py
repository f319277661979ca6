"""A node's BLAS threads: one while it computes; its block products get the process's
own count back only when the in-process Grid runs it alone; no nearest center changes."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_info

from fedkmeans import blas_threads
from fedkmeans.clustering.distances import center_scores


def _threads() -> int:
    return max(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas")


def test_block_products_get_the_process_s_threads_only_when_the_node_runs_alone():
    before = _threads()
    with blas_threads.one_blas_thread():
        assert _threads() == 1
        with blas_threads.block_product_threads():
            assert _threads() == 1  # under Flower: nodes share the cores
        with blas_threads.running_alone():
            with blas_threads.block_product_threads():
                assert _threads() == blas_threads._process_blas().threads == before
            assert _threads() == 1
    assert _threads() == before


def test_a_block_s_nearest_centers_are_the_same_on_one_thread_and_on_all():
    # What the threads may change: on some CPUs (OpenBLAS's SkylakeX kernels) a product
    # split over threads differs in the last bits, so the scores are compared to a
    # tolerance; the guarantee is on the nearest centers they decide (random data has
    # no exact ties).
    rng = np.random.default_rng(2)
    points, centers = rng.normal(size=(4096, 100)), rng.normal(size=(10, 100))
    projected, server = points @ rng.normal(size=(100, 10)), rng.normal(size=(300, 10))
    with blas_threads.one_blas_thread():
        one = [center_scores(points, centers), center_scores(projected, server)]
        with blas_threads.running_alone(), blas_threads.block_product_threads():
            every = [center_scores(points, centers), center_scores(projected, server)]
    for a, b in zip(one, every, strict=True):
        np.testing.assert_array_equal(a.argmin(axis=1), b.argmin(axis=1))
        # ~100 products summed: round-off far below 1e-12 of the largest score
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12 * np.abs(a).max())
