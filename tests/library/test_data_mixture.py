"""Tests for the paper's Gaussian mixture (fedkmeans.data.mixture)."""

from __future__ import annotations

import numpy as np
import pytest

from fedkmeans.clustering.optimal import optimal_cost
from fedkmeans.data.mixture import (
    mixture_client,
    mixture_means,
    mixture_pooled,
    mixture_server,
)

SMALL = {"k": 3, "dim": 4, "n_points": 50}


def test_means_shape_range_and_determinism() -> None:
    means = mixture_means(0, 10, 100)
    assert means.shape == (10, 100)
    assert means.dtype == np.float64
    assert means.min() >= 0.0 and means.max() < 1.0
    assert np.array_equal(means, mixture_means(0, 10, 100))
    assert not np.array_equal(means, mixture_means(1, 10, 100))


def test_client_shapes_and_dtypes() -> None:
    x, y = mixture_client(0, 5, **SMALL)
    assert x.shape == (50, 4) and x.dtype == np.float64
    assert y.shape == (50,) and y.dtype == np.int64
    assert y.min() >= 0 and y.max() < 3


def test_client_determinism_bit_identical() -> None:
    x1, y1 = mixture_client(7, 3, **SMALL)
    x2, y2 = mixture_client(7, 3, **SMALL)
    assert x1.tobytes() == x2.tobytes()
    assert np.array_equal(y1, y2)


def test_different_clients_and_seeds_differ() -> None:
    x0, _ = mixture_client(0, 0, **SMALL)
    x1, _ = mixture_client(0, 1, **SMALL)
    x_other_seed, _ = mixture_client(1, 0, **SMALL)
    assert not np.array_equal(x0, x1)
    assert not np.array_equal(x0, x_other_seed)


def test_client_independent_of_other_clients() -> None:
    # Client 4 alone equals client 4 taken out of a pooled run with other clients.
    alone, y_alone = mixture_client(11, 4, **SMALL)
    x, y, client = mixture_pooled(11, [9, 4, 0], **SMALL)
    assert np.array_equal(x[client == 4], alone)
    assert np.array_equal(y[client == 4], y_alone)
    # Rows follow the given client order.
    assert np.array_equal(client[:50], np.full(50, 9))
    assert np.array_equal(x[50:100], alone)


def test_pooled_shapes() -> None:
    x, y, client = mixture_pooled(0, range(4), **SMALL)
    assert x.shape == (200, 4)
    assert y.shape == (200,) and client.shape == (200,)
    assert client.dtype == np.int64
    assert np.array_equal(np.bincount(client), [50, 50, 50, 50])


def test_iid_component_means_match() -> None:
    means = mixture_means(3, 4, 5)
    x, y = mixture_client(3, 0, k=4, dim=5, n_points=40_000, variance=0.5)
    counts = np.bincount(y, minlength=4)
    # Uniform over 4 components: each ~10,000 (std ~87).
    assert np.all(np.abs(counts - 10_000) < 500)
    for c in range(4):
        emp = x[y == c].mean(axis=0)
        # Standard error sqrt(0.5 / 10,000) ~ 0.007 per coordinate.
        assert np.max(np.abs(emp - means[c])) < 0.04
        emp_var = x[y == c].var(axis=0)
        assert np.all(np.abs(emp_var - 0.5) < 0.05)


def test_variance_scales_noise() -> None:
    means = mixture_means(0, 1, 3)
    x, _ = mixture_client(0, 0, k=1, dim=3, n_points=20_000, variance=4.0)
    assert np.allclose((x - means[0]).var(axis=0), 4.0, rtol=0.05)


def test_dirichlet_small_alpha_is_skewed() -> None:
    max_shares = []
    for client_id in range(20):
        _, y = mixture_client(
            0, client_id, k=10, dim=2, n_points=1000, partition="dirichlet", dirichlet_alpha=0.05
        )
        max_shares.append(np.bincount(y, minlength=10).max() / 1000)
    # Dirichlet(0.05 * 1_10) puts most mass on one component (expected max share ~0.8);
    # i.i.d. would give ~0.12.
    assert np.median(max_shares) > 0.5


def test_dirichlet_large_alpha_is_balanced() -> None:
    _, y = mixture_client(
        0, 0, k=5, dim=2, n_points=5000, partition="dirichlet", dirichlet_alpha=1000.0
    )
    assert np.bincount(y, minlength=5).max() / 5000 < 0.25


def test_dirichlet_differs_from_iid_and_is_deterministic() -> None:
    kw = {"k": 4, "dim": 3, "n_points": 100, "partition": "dirichlet", "dirichlet_alpha": 0.3}
    a = mixture_client(5, 2, **kw)
    b = mixture_client(5, 2, **kw)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_server_data_layout() -> None:
    x, y = mixture_server(0, k=10, dim=100)
    assert x.shape == (10 * 20 + 100, 100)
    assert y.dtype == np.int64
    assert np.array_equal(np.bincount(y[y >= 0]), np.full(10, 20))
    assert np.count_nonzero(y == -1) == 100
    uniform = x[y == -1]
    assert uniform.min() >= 0.0 and uniform.max() < 1.0
    x2, _ = mixture_server(0, k=10, dim=100)
    assert np.array_equal(x, x2)


def test_server_custom_counts_and_independent_of_clients() -> None:
    x, y = mixture_server(2, k=3, dim=2, per_component=5, uniform=0)
    assert x.shape == (15, 2)
    assert np.array_equal(y, np.repeat([0, 1, 2], 5))
    x_client, _ = mixture_client(2, 0, k=3, dim=2, n_points=15)
    assert not np.array_equal(x, x_client)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"k": 0}, "k"),
        ({"dim": 0}, "dim"),
        ({"n_points": 0}, "n_points"),
        ({"variance": 0.0}, "variance"),
        ({"variance": -1.0}, "variance"),
        ({"variance": float("nan")}, "variance"),
        ({"dirichlet_alpha": 0.0}, "dirichlet_alpha"),
        ({"partition": "shards"}, "partition"),
        ({"k": 2.5}, "k"),
    ],
)
def test_client_validation_names_argument(kwargs: dict, name: str) -> None:
    args = {**SMALL, **kwargs}
    with pytest.raises(ValueError, match=name):
        mixture_client(0, 0, **args)


def test_partition_error_lists_allowed_values() -> None:
    with pytest.raises(ValueError, match="iid.*dirichlet"):
        mixture_client(0, 0, **SMALL, partition="IID")


def test_seed_and_client_id_validation() -> None:
    with pytest.raises(ValueError, match="seed"):
        mixture_client(-1, 0, **SMALL)
    with pytest.raises(ValueError, match="client_id"):
        mixture_client(0, -3, **SMALL)
    with pytest.raises(ValueError, match="client_ids"):
        mixture_pooled(0, [], **SMALL)


def test_server_validation() -> None:
    with pytest.raises(ValueError, match="per_component"):
        mixture_server(0, k=2, dim=2, per_component=-1)
    with pytest.raises(ValueError, match="uniform"):
        mixture_server(0, k=2, dim=2, per_component=0, uniform=0)
    with pytest.raises(ValueError, match="k"):
        mixture_server(0, k=0, dim=2)


@pytest.mark.slow
def test_paper_setting_optimal_cost_and_radius() -> None:
    """K=10, d=100, 100 clients x 1000 points -> optimal cost 49.95 per point.

    See docs/facts.md, "The paper's mixture" and "Data radius of the mixture".

    Expected cost: each point pays ~variance * d = 50 around its true mean.
    The reference's data radius 10.57 is about the 99th percentile of point
    norms (E||x||^2 = d/3 + 0.5 d ~ 83.3, i.e. ||x|| ~ 9.1); the maximum
    over 100,000 points is ~11.9, so clipping at 11 touches ~0.1% of points.
    """
    x, _, _ = mixture_pooled(0, range(100), k=10, dim=100, n_points=1000)
    assert x.shape == (100_000, 100)
    cost, centers = optimal_cost(x, 10, seed=0)
    assert 49.5 <= cost <= 50.5
    assert centers.shape == (10, 100)
    norms = np.linalg.norm(x, axis=1)
    assert 10.3 < np.quantile(norms, 0.99) < 10.8
    assert norms.max() < 12.5
    assert np.mean(norms > 11.0) < 0.005
