"""k = auto: the elbow of the weighted server-data cost, and its use by FedDP-KMeans."""

from __future__ import annotations

import numpy as np
import pytest

from fedkmeans.clustering.elbow import choose_k, elbow_k, weighted_kmeans_costs


def _blobs(k: int, per: int = 30, dim: int = 5, seed: int = 0):
    rng = np.random.default_rng(seed)
    means = rng.uniform(-20, 20, (k, dim))
    x = np.concatenate([m + rng.normal(0, 1, (per, dim)) for m in means])
    return x, np.repeat(np.arange(k), per)


@pytest.mark.parametrize("k", [2, 4, 7])
def test_elbow_finds_the_number_of_separated_blobs(k):
    x, _ = _blobs(k, seed=k)
    chosen, costs = choose_k(x, np.ones(len(x)), 12, seed=0, n_init=3)
    assert chosen == k
    assert costs.shape == (12,) and np.all(np.diff(costs) <= 0)


def test_weights_decide_which_points_count():
    x, label = _blobs(5, seed=3)
    weights = np.where(label == 4, 0.0, 10.0)  # nobody is near blob 4
    weights[label == 3] = -5.0  # noise made these negative: they count as 0
    assert choose_k(x, weights, 10, seed=1)[0] == 3
    # min_weight drops small (noisy) weights too
    assert choose_k(x, np.where(label < 2, 100.0, 1.0), 10, seed=1, min_weight=50)[0] == 2


def test_elbow_edge_cases_and_determinism():
    assert elbow_k(np.array([5.0, 5.0, 5.0])) == 1  # flat: no structure
    assert elbow_k(np.array([5.0, 1.0])) == 1  # too short to have an elbow
    assert elbow_k(np.array([9.0, 1.0, 0.9, 0.85, 0.8])) == 2
    assert elbow_k(np.array([9.0, 2.0, 0.0, 0.0])) == 3  # a perfect fit at k = 3
    assert elbow_k(np.array([9.0, 1.0, 1.2, 0.8])) == 2  # non-monotone input is fixed
    x, _ = _blobs(3)
    a = weighted_kmeans_costs(x, np.ones(len(x)), 6, seed=7, n_init=3)
    b = weighted_kmeans_costs(x, np.ones(len(x)), 6, seed=7, n_init=3)
    np.testing.assert_array_equal(a, b)
    assert weighted_kmeans_costs(x[:4], np.ones(4), 6, seed=0).shape == (4,)  # k <= points
    with pytest.raises(ValueError):
        weighted_kmeans_costs(x, np.ones(len(x)), 0, seed=0)


def test_k_auto_run_reports_the_chosen_k(small_config):
    from fedkmeans.experiment.cli import run_flat

    # k-max < d = 8: with k-max >= d step 1 would be skipped (the subspace is the space)
    # reproducible noise: with secret noise the elbow picked 3 once in a suite run (and
    # 4 in 20 further runs); seeds 0-19 with reproducible noise: 4 in 16, 4 at seed 0
    result = run_flat({**small_config, "k": "auto", "k-max": 7, "privacy.epsilon": 4.0,
                       "data.variance": 0.05, "privacy.reproducible-noise": True})
    assert result["k"] == 4  # the small mixture has 4 components
    assert np.asarray(result["centers"]).shape == (4, 8)
    assert result["config"]["k"] == "auto"
    selection = result["k_selection"]
    assert selection["k_max"] == 7 and len(selection["costs"]) == 7
    assert result["metrics"]["optimal_cost"] < result["metrics"]["cost"] < 1.3 * result[
        "metrics"]["optimal_cost"]  # the optimal cost is taken with the chosen k
    # choosing k spent nothing extra: the same four releases as with a fixed k
    assert [r["stage"] for r in result["privacy"]["releases"]] == [
        "init-1/covariance", "init-2/histogram", "init-3/sums", "init-3/counts"]
    assert result["privacy"]["epsilon"] <= 4.0
