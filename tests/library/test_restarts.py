"""``clustering.restarts``: every k-means restart at once, against hand values and scikit-learn."""

import numpy as np
import pytest

from fedkmeans.clustering import server_steps
from fedkmeans.clustering.restarts import MAX_BATCHED_WORK, _draw, _means, kmeans_restarts


def _cost(x, centers, w):
    d2 = ((x[:, None, :] - centers[None]) ** 2).sum(axis=2).min(axis=1)
    return float(d2 @ w)


def test_two_separated_groups_give_their_weighted_means():
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [10.0, 10.0], [12.0, 10.0]])
    w = np.array([1.0, 1.0, 2.0, 3.0, 1.0])
    centers = kmeans_restarts(x, 2, np.random.default_rng(0), sample_weight=w)
    centers = centers[np.argsort(centers[:, 0])]
    # (0*1 + 1*1 + 0*2) / 4 = 0.25, (0 + 0 + 2) / 4 = 0.5; (30 + 12) / 4 = 10.5, 10
    np.testing.assert_allclose(centers, [[0.25, 0.5], [10.5, 10.0]], rtol=0, atol=1e-12)


def test_points_of_zero_weight_move_no_center():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(size=(40, 3)), rng.normal(size=(40, 3)) + 6.0])
    far = np.full((5, 3), 1e3)
    w = np.concatenate([np.ones(80), np.zeros(5)])
    with_far = kmeans_restarts(np.concatenate([x, far]), 2, np.random.default_rng(2),
                               sample_weight=w)
    assert np.abs(with_far).max() < 50  # no center on (or pulled to) the far points
    alone = kmeans_restarts(x, 2, np.random.default_rng(2))
    order = lambda c: c[np.argsort(c[:, 0])]  # noqa: E731
    np.testing.assert_allclose(order(with_far), order(alone), rtol=0, atol=1e-12)


def test_an_empty_cluster_moves_to_the_point_of_largest_weighted_distance():
    x = np.array([[0.0], [1.0], [5.0], [9.0]])
    w = np.array([1.0, 1.0, 1.0, 2.0])
    labels = np.array([[0, 0, 0, 0]])  # center 1 has no point
    norms = (x * x).sum(axis=1)
    # scores ||c||^2 - 2 p.c for centers at 0 and 100: D^2 to center 0 is 0, 1, 25, 81
    scores = np.stack([np.zeros(4), 100.0**2 - 200.0 * x[:, 0]], axis=1)[None]
    means = _means(x, w, labels, scores, norms)
    # center 0: (0 + 1 + 5 + 18) / 5 = 4.8; center 1: the point 9 (w D^2 = 162)
    np.testing.assert_allclose(means, [[[4.8], [9.0]]], rtol=0, atol=1e-12)


def test_draws_follow_the_weights_and_skip_zero_weights():
    rng = np.random.default_rng(3)
    cumulative = np.cumsum(np.array([[1.0, 0.0, 3.0], [0.0, 0.0, 0.0]]), axis=1)
    draws = _draw(cumulative, rng, 40_000)
    assert not np.any(draws[0] == 1)
    assert abs(np.mean(draws[0] == 2) - 0.75) < 0.01  # 3 / (1 + 3)
    counts = np.bincount(draws[1], minlength=3) / 40_000  # zero total: uniform
    np.testing.assert_allclose(counts, [1 / 3] * 3, atol=0.01)


@pytest.mark.parametrize("m, d, k, seed", [(300, 10, 10, 0), (300, 100, 10, 1),
                                           (150, 64, 20, 3), (2000, 5, 8, 4)])
def test_as_good_as_scikit_learn_on_weighted_mixtures(m, d, k, seed):
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(seed)
    means = rng.normal(size=(k, d)) * 3
    x = means[rng.integers(k, size=m)] + rng.normal(size=(m, d))
    w = rng.exponential(size=m) * (rng.random(m) > 0.3)
    ours = [_cost(x, kmeans_restarts(x, k, np.random.default_rng(s), sample_weight=w), w)
            for s in range(5)]
    theirs = [_cost(x, KMeans(n_clusters=k, n_init=10, random_state=s)
                    .fit(x, sample_weight=w).cluster_centers_, w) for s in range(5)]
    assert np.median(ours) <= np.median(theirs) * (1 + 1e-3)
    assert max(ours) <= max(theirs) * 1.02


def test_server_kmeans_runs_small_problems_here_with_the_seed_as_a_generator():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(200, 4))
    w = rng.random(200)
    np.testing.assert_array_equal(
        server_steps.kmeans(x, 3, seed=11, sample_weight=w),
        kmeans_restarts(x, 3, np.random.default_rng(11), sample_weight=w))
    assert 10 * 200 * 3 * 4 <= MAX_BATCHED_WORK


def test_the_same_seed_gives_the_same_centers():
    x = np.random.default_rng(6).normal(size=(120, 3))
    a = kmeans_restarts(x, 4, np.random.default_rng(9))
    b = kmeans_restarts(x, 4, np.random.default_rng(9))
    np.testing.assert_array_equal(a, b)


def test_one_center_is_the_weighted_mean_and_k_points_are_their_own_centers():
    x = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 4.0]])
    w = np.array([1.0, 1.0, 2.0])
    one = kmeans_restarts(x, 1, np.random.default_rng(0), sample_weight=w)
    np.testing.assert_allclose(one, [[0.5, 2.0]], rtol=0, atol=1e-12)  # (2, 8) / 4
    every = kmeans_restarts(x, 3, np.random.default_rng(0))
    np.testing.assert_array_equal(every[np.lexsort(every.T[::-1])], x[np.lexsort(x.T[::-1])])
