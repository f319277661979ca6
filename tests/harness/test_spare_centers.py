"""FedDP-Init's spare centers (``privacy.extra-centers``): the merge, the rule, end to end."""

import math

import numpy as np
import pytest

from fedkmeans import data as data_access
from fedkmeans.clustering import (
    centers_from_sums,
    cluster_sums_counts,
    eigen_gap,
    merge_centers,
    outer_product_sum,
    projected_histogram,
    top_eigenvectors,
    weighted_kmeans,
)
from fedkmeans.config import ConfigError
from fedkmeans.experiment.cli import run_flat
from fedkmeans.experiment.config import parse_config
from fedkmeans.seeding import integer_seed
from fedkmeans.server.thresholds import spare_centers


# -- hand-computed pieces ---------------------------------------------------------------
def test_merge_is_the_count_weighted_mean_of_each_group():
    centers = np.array([[0.0, 0.0], [2.0, 0.0], [10.0, 0.0]])
    counts = np.array([1.0, 3.0, 4.0])
    merged = merge_centers(centers, counts, 2, seed=0)
    # groups {0, 1} and {2}: (0 * 1 + 2 * 3) / 4 = 1.5
    np.testing.assert_allclose(merged[np.argsort(merged[:, 0])], [[1.5, 0.0], [10.0, 0.0]])


def test_merge_ignores_non_positive_noisy_counts_and_keeps_k_centers_as_they_are():
    centers = np.array([[0.0, 0.0], [2.0, 0.0], [10.0, 0.0]])
    merged = merge_centers(centers, np.array([-5.0, 3.0, 4.0]), 2, seed=0)
    np.testing.assert_allclose(merged[np.argsort(merged[:, 0])], [[2.0, 0.0], [10.0, 0.0]])
    assert merge_centers(centers, np.ones(3), 3, seed=0) is centers


def test_eigen_gap_by_hand():
    matrix = np.diag([1.0, 5.0, 3.0])  # eigenvalues 5, 3, 1
    assert eigen_gap(matrix, 1) == pytest.approx(2.0)
    assert eigen_gap(matrix, 2) == pytest.approx(2.0)
    assert eigen_gap(matrix, 3) == math.inf


@pytest.mark.parametrize("k,gap,noise,expected", [
    (10, 1.0, 2.0, 2),   # the k-th direction does not clear the noise: ceil(10 / 5)
    (11, 2.0, 2.0, 3),   # at the noise norm still uncertain: ceil(11 / 5)
    (10, 3.0, 2.0, 0),   # a clear gap
    (10, 0.0, 0.0, 0),   # no noise: the paper's FedDP-Init
])
def test_spare_centers_rule(k, gap, noise, expected):
    assert spare_centers(k, gap, noise) == expected


# -- configuration ----------------------------------------------------------------------
@pytest.mark.parametrize("flat,message", [
    ({"privacy.extra-centers": -1}, "'privacy.extra-centers' must be 'auto' or an integer >= 0"),
    ({"privacy.extra-centers": 2, "algorithm": "kfed"},
     "'privacy.extra-centers' must be 0 or 'auto' (= 0) unless algorithm is 'feddp-kmeans'"),
    # the mixture's server has 4 * 10 + 10 = 50 points; k = 4 leaves 46
    ({"privacy.extra-centers": 47},
     "'privacy.extra-centers' must be at most the number of server points minus k (46)"),
])
def test_bad_extra_centers_get_one_error_naming_the_key(small_config, flat, message):
    with pytest.raises(ConfigError) as error:
        parse_config({**small_config, **flat})
    assert message in str(error.value)


# -- end to end (in-process Flower runtime) -----------------------------------------------
def test_infinite_epsilon_with_spare_centers_is_the_non_private_algorithm(small_config):
    """Written directly on the pooled data: k + 2 centers in steps 2-3, then the merge."""
    flat = {**small_config, "privacy.epsilon": "inf", "privacy.extra-centers": 2}
    result = run_flat(flat)
    config = parse_config(flat)
    x, _ = data_access.load_pooled(config)
    q, _ = data_access.load_server(config)
    basis = top_eigenvectors(outer_product_sum(x), config.k)
    projected_server = q @ basis.T
    weights = projected_histogram(x, basis, projected_server)
    xi = weighted_kmeans(projected_server, weights, config.k + 2,
                         seed=integer_seed(config.seed, "init-2", "weighted-kmeans"))
    sums, counts = cluster_sums_counts(x, xi, basis)
    released, _ = centers_from_sums(sums, counts, xi @ basis, min_count=1.0)
    expected = merge_centers(released, counts, config.k,
                             seed=integer_seed(config.seed, "init-3", "merge"))
    assert expected.shape == (config.k, config.data.dim)
    np.testing.assert_allclose(result["centers"], expected, rtol=1e-10, atol=1e-10)
    assert result["spare_centers"]["extra_centers"] == 2


@pytest.mark.slow
def test_auto_adds_spare_centers_only_when_the_released_gap_is_within_the_noise(small_config):
    base = {**small_config, "privacy.extra-centers": "auto",
            "privacy.reproducible-noise": True}
    exact = run_flat({**base, "privacy.epsilon": "inf"})
    assert exact["spare_centers"]["extra_centers"] == 0  # no noise: the paper's init
    assert exact["spare_centers"]["noise_norm"] == 0
    paper = run_flat({**small_config, "privacy.epsilon": "inf",
                      "output-dir": small_config["output-dir"] + "-paper"})
    np.testing.assert_array_equal(exact["centers"], paper["centers"])
    # 60 clients: at epsilon = 100 the gap (~77) clears the noise norm (~26); at 0.5 the
    # noise norm (~2,700) swamps it
    for eps, clear in ((0.5, False), (100.0, True)):
        result = run_flat({**base, "data.num-clients": 60, "privacy.epsilon": eps,
                           "output-dir": small_config["output-dir"] + f"-{eps}"})
        spare = result["spare_centers"]
        assert (spare["eigen_gap"] > spare["noise_norm"]) == clear, spare
        assert spare["extra_centers"] == (0 if clear else 1), spare  # ceil(4 / 5) = 1
        assert len(result["centers"]) == 4
