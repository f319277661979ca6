"""Pure maths of the client statistics and server steps, on hand-computed values."""

import numpy as np
import pytest

from fedkmeans.clustering import (
    centers_from_sums,
    cluster_sums_counts,
    kmeans,
    outer_product_sum,
    projected_histogram,
    sphere_packing_centers,
    top_eigenvectors,
    weighted_kmeans,
)
from fedkmeans.clustering.client_stats import nearest_center
from fedkmeans.clustering.distances import (
    center_scores,
    nearest_squared_distances,
    squared_distances,
)

POINTS = np.array([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0], [11.0, 1.0]])


def test_nearest_center_and_sums_counts_by_hand():
    centers = np.array([[0.5, 0.0], [10.0, 0.0], [100.0, 100.0]])
    assert nearest_center(POINTS, centers).tolist() == [0, 0, 1, 1]
    sums, counts = cluster_sums_counts(POINTS, centers)
    np.testing.assert_array_equal(sums, [[1.0, 0.0], [21.0, 1.0], [0.0, 0.0]])
    np.testing.assert_array_equal(counts, [2.0, 2.0, 0.0])


def test_the_distance_kernel():
    rng = np.random.default_rng(0)
    points, centers = rng.normal(size=(60, 7)) * 3.0, rng.normal(size=(5, 7))
    # The clients' scores, bit for bit (the nodes' assignments rest on them).
    np.testing.assert_array_equal(
        center_scores(points, centers),
        points @ (-2.0 * centers.T) + (centers * centers).sum(axis=1),
    )
    by_differences = ((points[:, None, :] - centers[None]) ** 2).sum(axis=-1)
    np.testing.assert_allclose(squared_distances(points, centers), by_differences, atol=1e-12)
    np.testing.assert_array_equal(
        nearest_center(points, centers), np.argmin(by_differences, axis=1)
    )
    # A point on a center: round-off clipped at zero, never negative.
    far = points * 1e4 + 1e6
    assert squared_distances(far, far[:3]).min() >= 0.0
    # One set of centers per point (the membership cost scores): same as row by row.
    per_point = rng.normal(size=(60, 5, 7))
    batched = squared_distances(points[:, None, :], per_point)[:, 0]
    rows = np.stack([squared_distances(points[i:i + 1], per_point[i])[0] for i in range(60)])
    np.testing.assert_allclose(batched, rows, rtol=1e-12, atol=1e-12)


def test_sums_counts_assign_in_projected_space_but_sum_in_original_space():
    basis = np.array([[1.0, 0.0]])  # keep the first coordinate
    projected_centers = np.array([[0.0], [11.0]])
    sums, counts = cluster_sums_counts(POINTS, projected_centers, basis)
    np.testing.assert_array_equal(sums, [[1.0, 0.0], [21.0, 1.0]])
    np.testing.assert_array_equal(counts, [2.0, 2.0])


def test_outer_product_sum_by_hand():
    expected = np.array([[0 + 1 + 100 + 121, 0 + 0 + 0 + 11], [11, 1]], dtype=float)
    np.testing.assert_array_equal(outer_product_sum(POINTS), expected)


def test_projected_histogram_counts_nearest_server_point():
    basis = np.array([[1.0, 0.0]])
    projected_server = np.array([[0.2], [5.0], [10.6]])
    hist = projected_histogram(POINTS, basis, projected_server)
    np.testing.assert_array_equal(hist, [2.0, 0.0, 2.0])


def test_top_eigenvectors_of_a_diagonal_matrix():
    basis = top_eigenvectors(np.diag([1.0, 5.0, 3.0]), 2)
    np.testing.assert_allclose(np.abs(basis), [[0, 1, 0], [0, 0, 1]], atol=1e-12)
    assert np.all(basis.max(axis=1) > 0)  # deterministic sign


def test_centers_from_sums_falls_back_for_small_zero_and_negative_counts():
    sums = np.array([[4.0, 2.0], [1.0, 1.0], [3.0, 3.0], [5.0, 5.0]])
    counts = np.array([2.0, 0.0, -3.0, 0.5])
    fallback = np.array([[9.0, 9.0], [7.0, 7.0], [8.0, 8.0], [6.0, 6.0]])
    centers, used = centers_from_sums(sums, counts, fallback, min_count=1.0)
    np.testing.assert_array_equal(centers, [[2.0, 1.0], [7.0, 7.0], [8.0, 8.0], [6.0, 6.0]])
    assert used.tolist() == [False, True, True, True]
    assert np.all(np.isfinite(centers))
    with pytest.raises(ValueError, match="min_count"):
        centers_from_sums(sums, counts, fallback, min_count=0.0)


def test_weighted_kmeans_on_four_points_by_hand():
    points = np.array([[0.0, 0.0], [2.0, 0.0], [10.0, 0.0], [10.0, 4.0]])
    weights = np.array([3.0, 1.0, 1.0, 1.0])
    centers = weighted_kmeans(points, weights, 2, seed=0)
    centers = centers[np.argsort(centers[:, 0])]
    np.testing.assert_allclose(centers, [[0.5, 0.0], [10.0, 2.0]])


def test_weighted_kmeans_drops_negative_and_small_weights():
    points = np.array([[0.0], [1.0], [10.0], [50.0]])
    weights = np.array([1.0, 1.0, 2.0, -5.0])  # negative weight: the outlier is dropped
    centers = np.sort(weighted_kmeans(points, weights, 2, seed=0), axis=0)
    np.testing.assert_allclose(centers, [[0.5], [10.0]])
    centers = np.sort(weighted_kmeans(points, np.array([1, 1, 2, 1.5]), 2, seed=0,
                                      min_weight=1.8), axis=0)
    # only one point keeps weight >= 1.8 (< k): uniform weights over all points
    assert centers.shape == (2, 1) and np.all(np.isfinite(centers))


def test_kmeans_is_deterministic_for_a_seed():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    np.testing.assert_array_equal(kmeans(x, 4, seed=3), kmeans(x, 4, seed=3))


def test_sphere_packing_stays_in_the_box_and_is_seeded():
    lower, upper = np.zeros(5), np.ones(5)
    a = sphere_packing_centers(6, lower, upper, np.random.default_rng(1))
    b = sphere_packing_centers(6, lower, upper, np.random.default_rng(1))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (6, 5) and np.all(a >= 0) and np.all(a <= 1)
    dists = np.linalg.norm(a[:, None] - a[None], axis=2)[np.triu_indices(6, 1)]
    assert dists.min() > 0.1


def test_kmeans_on_a_small_problem_runs_on_one_openmp_thread_with_the_same_result():
    from sklearn.cluster import KMeans
    from threadpoolctl import ThreadpoolController

    from fedkmeans.clustering import server_steps

    seen = []

    class Recording(KMeans):
        def fit(self, *args, **kwargs):
            seen.append([p["num_threads"] for p in
                         ThreadpoolController().select(user_api="openmp").info()])
            return super().fit(*args, **kwargs)

    rng = np.random.default_rng(0)
    # beyond clustering.restarts' batched size (10 x 170,000 x 2 x 3 multiply-adds),
    # within one thread (510,000 values)
    points = np.concatenate([rng.normal(size=(85_000, 3)), rng.normal(size=(85_000, 3)) + 8.0])
    assert 10 * points.shape[0] * 2 * 3 > server_steps.MAX_BATCHED_WORK
    direct = KMeans(n_clusters=2, n_init=10, random_state=3).fit(points).cluster_centers_
    import sklearn.cluster

    original = sklearn.cluster.KMeans
    sklearn.cluster.KMeans = Recording
    try:
        centers = server_steps.kmeans(points, 2, seed=3)
    finally:
        sklearn.cluster.KMeans = original
    assert seen and all(n == 1 for n in seen[0])  # 510,000 values: one thread
    np.testing.assert_allclose(centers, direct, rtol=0, atol=1e-12)
    assert server_steps.ONE_THREAD_MAX_VALUES == 1_000_000
    # beyond the bound the default (no limit) is kept
    assert not hasattr(server_steps._threads_for(1_000_001), "restore_original_limits")


def test_nearest_squared_distances_are_the_bits_of_the_distances_minimum():
    # (0, 0) and (3, 4) against centers (0, 0), (3, 0): 0 and 16 (25 to the origin)
    points, centers = np.array([[0.0, 0.0], [3.0, 4.0]]), np.array([[0.0, 0.0], [3.0, 0.0]])
    np.testing.assert_array_equal(nearest_squared_distances(points, centers), [0.0, 16.0])
    rng = np.random.default_rng(3)
    for d, k in ((1, 3), (7, 5), (100, 10)):
        x, c = rng.normal(size=(500, d)) * 40, rng.normal(size=(k, d)) * 40
        x[:k] = c  # points on a center: where the expansion's round-off is clipped to 0
        expected = squared_distances(x, c).min(axis=1)
        np.testing.assert_array_equal(nearest_squared_distances(x, c), expected)
        norms = (x * x).sum(axis=-1)
        np.testing.assert_array_equal(nearest_squared_distances(x, c, norms), expected)
