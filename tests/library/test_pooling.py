"""Pooling a released center with the server's mean of its cell (clustering/pooling.py)."""

from __future__ import annotations

import numpy as np

from fedkmeans.clustering.pooling import pool_with_server


def _cell(rng, mean, m):
    """m server points of one cell around ``mean`` (unit variance per coordinate)."""
    return mean + rng.normal(size=(m, mean.size))


def test_without_noise_the_released_centers_come_back_unchanged():
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, 4))
    server = rng.normal(size=(30, 4))
    cells = rng.integers(0, 3, 30)
    out = pool_with_server(centers, np.full(3, 100.0), server, cells, 0.0, 0.0,
                           np.ones(3, bool))
    np.testing.assert_array_equal(out, centers)


def test_an_unbiased_server_lowers_the_squared_error_of_a_noisy_center():
    # truth 0 in d = 10; the clients' mean has noise sum_std / n per coordinate, the
    # server has 20 points drawn like the clients': pooling must beat the noisy center
    # by far and come near the oracle's inverse-variance combination (the estimated
    # bias, never negative, costs some of the server's weight)
    rng = np.random.default_rng(1)
    d, n, m, sum_std = 10, 200.0, 20, 100.0
    noisy_err, server_err, pooled_err = [], [], []
    for _ in range(400):
        truth = np.zeros(d)
        nu = truth + rng.normal(scale=sum_std / n, size=d)
        server = _cell(rng, truth, m)
        out = pool_with_server(nu[None], np.array([n]), server, np.zeros(m, int),
                               sum_std, 0.0, np.array([True]))
        noisy_err.append(nu @ nu)
        server_err.append(float(server.mean(axis=0) @ server.mean(axis=0)))
        pooled_err.append(float(out[0] @ out[0]))
    noisy, served = np.mean(noisy_err), np.mean(server_err)
    oracle = 1.0 / (1.0 / noisy + 1.0 / served)
    assert np.mean(pooled_err) < 0.3 * noisy
    assert np.mean(pooled_err) < 1.5 * oracle


def test_a_server_drawn_unlike_the_clients_gets_almost_no_weight():
    # the server's points of the cell sit 50 noise standard deviations away: the bias
    # estimate takes its weight to (almost) 0
    rng = np.random.default_rng(2)
    d, n, sum_std = 5, 500.0, 50.0
    nu = np.zeros((1, d))
    server = _cell(rng, np.full(d, 50 * sum_std / n), 40)
    out = pool_with_server(nu, np.array([n]), server, np.zeros(40, int), sum_std, 1.0,
                           np.array([True]))
    moved = float(np.linalg.norm(out[0] - nu[0]))
    gap = float(np.linalg.norm(server.mean(axis=0) - nu[0]))
    assert moved < 0.01 * gap


def test_the_weight_is_the_noise_over_noise_and_sampling_inflated_by_the_disagreement():
    # one cell, hand-checked per coordinate: lambda_j = V_j / ((V_j + W_j) kappa) with
    # kappa = max(1, mean_j gap_j / (V_j + W_j))
    centers = np.array([[0.0, 0.0]])
    server = np.array([[1.0, 0.0], [3.0, 0.0]])  # mean (2, 0); within (2, 0), 1 dof
    n, sum_std = 10.0, 4.0
    noise = sum_std**2 / n**2                      # 0.16 in each coordinate
    sampling = np.array([2.0 / (2 * 1), 0.0])      # (1.0, 0.0)
    gap = np.array([4.0, 0.0])
    kappa = max(1.0, float(np.mean(gap / (noise + sampling))))
    weight = noise / ((noise + sampling) * kappa)
    out = pool_with_server(centers, np.array([n]), server, np.zeros(2, int), sum_std, 0.0,
                           np.array([True]))
    np.testing.assert_allclose(out[0], weight * np.array([2.0, 0.0]))
    assert kappa > 1


def test_each_coordinate_gets_its_own_weight():
    # coordinate 0 on a scale of 100, coordinate 1 on a scale of 0.01: the server's mean
    # of 50 points is worthless in the first against noise 1 and exact in the second, so
    # pooling keeps the noisy center there and takes the server's here
    rng = np.random.default_rng(5)
    truth = np.zeros(2)
    server = truth + rng.normal(size=(50, 2)) * np.array([100.0, 0.01])
    nu = truth + rng.normal(scale=1.0, size=2)
    out = pool_with_server(nu[None], np.array([100.0]), server, np.zeros(50, int), 100.0,
                           0.0, np.array([True]))
    assert abs(out[0, 0] - nu[0]) < 0.1 * abs(server[:, 0].mean() - nu[0])
    assert abs(out[0, 1] - truth[1]) < 0.1 * abs(nu[1] - truth[1])


def test_fallback_centers_and_cells_without_server_points_are_kept():
    rng = np.random.default_rng(3)
    centers = rng.normal(size=(3, 2))
    server = rng.normal(size=(5, 2)) + 10
    cells = np.array([0, 0, 0, 0, 1])  # cell 2: no server point
    out = pool_with_server(centers, np.full(3, 5.0), server, cells, 10.0, 1.0,
                           np.array([False, False, True]))
    np.testing.assert_array_equal(out, centers)


def test_a_cell_with_one_server_point_takes_the_pooled_within_cell_variance():
    # cell 0: two points, within (2, 0) on 1 degree of freedom: pooled (2, 0); cell 1:
    # one point at (4, 0), released center at 0, no noise on the counts
    centers = np.array([[0.0, 0.0], [0.0, 0.0]])
    server = np.array([[1.0, 0.0], [3.0, 0.0], [4.0, 0.0]])
    n, sum_std = 10.0, 4.0
    noise, sampling, gap = sum_std**2 / n**2, np.array([2.0, 0.0]), np.array([16.0, 0.0])
    kappa = max(1.0, float(np.mean(gap / (noise + sampling))))
    weight = noise / ((noise + sampling) * kappa)
    out = pool_with_server(centers, np.array([n, n]), server, np.array([0, 0, 1]),
                           sum_std, 0.0, np.array([False, True]))
    np.testing.assert_allclose(out[1], weight * np.array([4.0, 0.0]))
    np.testing.assert_array_equal(out[0], centers[0])


def test_a_cluster_beyond_the_data_radius_gets_the_clip_shift_back():
    # a cluster at distance 20, radius 15: the clients' mean is of clipped points (about
    # 15 out), the server's 30 points are unclipped; pooling returns near the true mean,
    # where the clients' center alone is about 5 away
    rng = np.random.default_rng(4)
    d, radius, truth = 5, 15.0, np.r_[20.0, np.zeros(4)]
    clients = truth + rng.normal(size=(2000, d))
    clipped = clients * np.minimum(1, radius / np.linalg.norm(clients, axis=1))[:, None]
    nu = clipped.mean(axis=0) + rng.normal(scale=0.05, size=d)
    server = truth + rng.normal(size=(30, d))
    out = pool_with_server(nu[None], np.array([2000.0]), server, np.zeros(30, int), 100.0,
                           1.0, np.array([True]), radius=radius)
    assert np.linalg.norm(nu - truth) > 4.0
    assert np.linalg.norm(out[0] - truth) < 0.5


def test_a_few_far_server_points_do_not_shift_a_cell_whose_clients_lie_within_the_radius():
    # 20 server points of the cluster at distance 5 (within the radius 15) and 3 far
    # points of a server drawn unlike the clients: the clip's shift added back is their
    # median, 0, so the pooled center is pulled by the clipped means only
    rng = np.random.default_rng(6)
    d, radius, truth = 5, 15.0, np.r_[5.0, np.zeros(4)]
    server = np.vstack([truth + rng.normal(size=(20, d)), np.full((3, d), 40.0)])
    nu = truth + rng.normal(scale=0.05, size=d)
    out = pool_with_server(nu[None], np.array([2000.0]), server, np.zeros(23, int), 100.0,
                           1.0, np.array([True]), radius=radius)
    clipped = server * np.minimum(1, radius / np.linalg.norm(server, axis=1))[:, None]
    unshifted = pool_with_server(nu[None], np.array([2000.0]), clipped, np.zeros(23, int),
                                 100.0, 1.0, np.array([True]))
    np.testing.assert_allclose(out, unshifted)  # the clipped comparison, no shift added
