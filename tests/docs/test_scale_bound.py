"""The scale benchmark's NumPy bound: its centers are means, and its passes run."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import scale  # noqa: E402


def test_the_bounds_centers_are_means_and_an_empty_cluster_keeps_its_sum():
    sums = np.array([[2.0, 4.0], [0.0, 0.0], [3.0, -6.0]])
    counts = np.array([2.0, 0.0, 3.0])
    np.testing.assert_array_equal(scale._means(sums, counts),
                                  [[1.0, 2.0], [0.0, 0.0], [1.0, -2.0]])


def test_both_bounds_run_every_pass_on_a_small_federation():
    rng = np.random.default_rng(0)
    m, n, d, k = 6, 5, 8, 3
    x = rng.normal(size=(m * n, d))
    q = rng.normal(size=(20, d))
    assert scale._client_level_passes(x, q, m, n, k, lloyds_steps=2, check=True) > 0
    assert scale._pooled_passes(x, q, k, lloyds_steps=2, check=True) > 0
