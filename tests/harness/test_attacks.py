"""Attacks: metrics, each attack on known inputs, and the curious server end to end.

The end-to-end tests run the small federation (tests/conftest.py) in-process with
``attack=curious``. Without DP every attack succeeds; with central DP at epsilon = 1
the attacks on what an analyst sees are at chance, while the curious server, which
sees each client's reply, still reconstructs every client exactly: central DP does
not protect against a curious server.
"""

import json
import math

import numpy as np
import pytest
from conftest import SMALL
from scipy.stats import norm
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sklearn_roc_curve

from fedkmeans.attacks.differencing import difference_attack
from fedkmeans.attacks.game import chance_abs_cosine
from fedkmeans.attacks.label_inference import LabelOracle, label_inference_curve, sample_queries
from fedkmeans.attacks.membership import (
    cost_scores,
    gaussian_llr,
    laplace_llr,
    lira_scores,
    release_llr,
)
from fedkmeans.attacks.reconstruction import attack_client_reply, reconstruct_points
from fedkmeans.attacks.scoring import (
    cosine_similarity,
    membership_summary,
    relative_error,
    roc_auc,
    roc_curve,
    tpr_at_fpr,
)
from fedkmeans.clustering.client_stats import cluster_sums_counts
from fedkmeans.experiment.cli import run_flat
from fedkmeans.seeding import generator


# -- metrics --------------------------------------------------------------------------------
def test_cosine_and_relative_error():
    assert cosine_similarity([1, 0], [2, 0]) == 1.0
    assert cosine_similarity([1, 0], [0, 3]) == 0.0
    assert cosine_similarity([1, 1], [-1, -1]) == pytest.approx(-1.0)
    assert cosine_similarity([0, 0], [1, 1]) == 0.0
    assert relative_error([3, 4], [0, 5]) == pytest.approx(math.sqrt(10) / 5)
    with pytest.raises(ValueError, match="same size"):
        cosine_similarity([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="truth"):
        relative_error([1.0], [np.nan])


def test_auc_matches_sklearn_with_ties():
    rng = generator(0, "test", "auc")
    s_in = np.round(rng.normal(0.5, 1, 300), 1)  # rounding makes ties
    s_out = np.round(rng.normal(0.0, 1, 400), 1)
    expected = roc_auc_score(np.r_[np.ones(300), np.zeros(400)], np.r_[s_in, s_out])
    assert roc_auc(s_in, s_out) == pytest.approx(expected, abs=1e-12)
    assert roc_auc([1, 1], [1, 1]) == 0.5


def _score_cases():
    """(scores_in, scores_out): random with ties, and the degenerate cases."""
    rng = generator(0, "test", "roc-cases")
    cases = [
        ([1.0, 1.0], [1.0, 1.0]),                 # all scores equal
        ([3.0], [-2.0]),                          # one of each, separated
        ([-2.0], [3.0]),                          # one of each, reversed
        ([0.5] * 5, [0.5, 0.1, 0.9]),             # every IN score tied with an OUT one
        ([3.0, 2.0, 1.0], [3.0, 2.0, 1.0]),       # collinear operating points
        (np.arange(10.0), np.arange(10.0) + 10),  # perfectly reversed
        (np.arange(10.0) + 10, np.arange(10.0)),  # perfectly separated
    ]
    for n_in, n_out, decimals in ((300, 400, 1), (50, 7, 0), (1, 200, 2), (200, 1, 2)):
        cases.append((np.round(rng.normal(0.5, 1, n_in), decimals),
                      np.round(rng.normal(0.0, 1, n_out), decimals)))
    return cases


@pytest.mark.parametrize(("s_in", "s_out"), _score_cases())
def test_roc_auc_and_curve_equal_sklearn(s_in, s_out):
    y = np.r_[np.ones(len(s_in)), np.zeros(len(s_out))]
    scores = np.r_[s_in, s_out]
    assert roc_auc(s_in, s_out) == pytest.approx(roc_auc_score(y, scores), abs=1e-12)
    fpr, tpr = roc_curve(s_in, s_out)
    expected_fpr, expected_tpr, _ = sklearn_roc_curve(y, scores, drop_intermediate=False)
    np.testing.assert_array_equal(fpr, expected_fpr)
    np.testing.assert_array_equal(tpr, expected_tpr)


@pytest.mark.parametrize(("s_in", "s_out"), _score_cases())
def test_tpr_at_fpr_equals_every_threshold_by_brute_force(s_in, s_out):
    s_in, s_out = np.asarray(s_in), np.asarray(s_out)
    thresholds = np.r_[-np.inf, s_in, s_out]  # "score > t"; t = max gives (0, 0)
    rates = [(np.mean(s_out > t), np.mean(s_in > t)) for t in thresholds]
    for target in (0.0, 0.001, 0.01, 0.1, 0.5, 0.7, 1.0):
        expected = max(t for f, t in rates if f <= target)
        assert tpr_at_fpr(s_in, s_out, target) == expected


def test_roc_accepts_infinite_scores():
    # scikit-learn refuses them; the ROC only depends on the order of the scores.
    s_in, s_out = [np.inf, 1.0, 1.0], [-np.inf, 1.0, 0.0]
    expected = roc_auc_score([1, 1, 1, 0, 0, 0], [9.0, 1.0, 1.0, -9.0, 1.0, 0.0])
    assert roc_auc(s_in, s_out) == pytest.approx(expected, abs=1e-12)
    assert tpr_at_fpr(s_in, s_out, 0.0) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="NaN"):
        roc_auc([np.nan], [1.0])


def test_tpr_at_fpr_by_hand():
    s_out = np.arange(100.0)          # OUT scores 0..99
    s_in = np.array([98.5, 99.5, 120.0, 50.0])
    # FPR <= 1%: threshold 98 lets through one OUT (99): IN above 98 -> 3 of 4.
    assert tpr_at_fpr(s_in, s_out, 0.01) == 0.75
    # FPR = 0: threshold 99: IN above 99 -> 2 of 4.
    assert tpr_at_fpr(s_in, s_out, 0.0) == 0.5
    summary = membership_summary(s_in, s_out)
    assert summary["tpr_at_0.1pct_fpr"] == 0.5 and summary["n_out"] == 100
    with pytest.raises(ValueError, match="fpr"):
        tpr_at_fpr(s_in, s_out, 1.5)


def test_chance_level_of_cosine():
    assert chance_abs_cosine(2) == pytest.approx(2 / math.pi)
    assert chance_abs_cosine(3) == pytest.approx(0.5)
    assert chance_abs_cosine(100) == pytest.approx(0.0800, abs=1e-4)


# -- attacks on known inputs ------------------------------------------------------------
def test_client_reconstruction_and_one_point_clusters():
    rng = generator(0, "test", "reconstruction")
    centers = np.array([[0.0, 0.0], [10.0, 10.0], [-10.0, 10.0]])
    points = np.vstack([rng.normal(0, 1, (5, 2)), [[10.5, 9.5]]])  # cluster 1 has one point
    sums, counts = cluster_sums_counts(points, centers)
    rec = attack_client_reply(sums, counts, points, centers)
    assert rec.clusters == 2 and rec.points_recovered == 1
    np.testing.assert_allclose(rec.cosines, 1.0, atol=1e-12)
    np.testing.assert_allclose(rec.relative_errors, 0.0, atol=1e-12)
    np.testing.assert_array_equal(reconstruct_points(sums, counts), [[10.5, 9.5]])
    noisy = attack_client_reply(sums + 5.0, counts, points, centers)
    assert noisy.relative_errors.max() > 0.1 and noisy.points_recovered == 0


def test_differencing_reads_the_point():
    rng = generator(0, "test", "differencing")
    sums, counts = rng.normal(size=(4, 6)), rng.integers(5, 50, 4).astype(float)
    point = rng.normal(size=6)
    with_sums, with_counts = sums.copy(), counts.copy()
    with_sums[2] += point
    with_counts[2] += 1
    estimate, cluster = difference_attack(with_sums, with_counts, sums, counts)
    assert cluster == 2
    np.testing.assert_allclose(estimate, point, atol=1e-12)
    # Stacked trials: the same answer per row.
    est, clusters = difference_attack(with_sums[None].repeat(3, 0), with_counts[None].repeat(3, 0),
                                      sums[None].repeat(3, 0), counts[None].repeat(3, 0))
    assert clusters.tolist() == [2, 2, 2]
    with pytest.raises(ValueError, match="counts_with"):
        difference_attack(with_sums, with_counts[:3], sums, counts)


def test_gaussian_likelihood_ratio_has_the_optimal_auc():
    # N(mu) vs N(0) in one coordinate: the optimal test has AUC = Phi(mu / sqrt(2)).
    rng = generator(0, "test", "llr")
    mean_in, mean_out, sigma = np.array([2.0, 0.0]), np.zeros(2), 2.0
    n = 20_000
    y_in = mean_in + rng.normal(0, sigma, (n, 2))
    y_out = mean_out + rng.normal(0, sigma, (n, 2))
    auc = roc_auc(gaussian_llr(y_in, mean_in, mean_out, sigma),
                  gaussian_llr(y_out, mean_in, mean_out, sigma))
    assert auc == pytest.approx(norm.cdf(1.0 / math.sqrt(2)), abs=0.01)
    # Laplace: the ratio is bounded by ||a - b||_1 / b.
    lap = laplace_llr(mean_in + rng.laplace(0, 1.0, (n, 2)), mean_in, mean_out, 1.0)
    assert lap.max() <= 2.0 + 1e-12 and lap.min() >= -2.0 - 1e-12
    with pytest.raises(ValueError, match="mechanism"):
        release_llr("uniform", 1.0, y_in, mean_in, mean_out)


def test_lira_scores_by_hand():
    # shadow IN ~ N(1, 2), OUT ~ N(-1, 2) (means and unbiased variances of two points)
    scores = lira_scores(np.array([1.0, 0.0, -1.0]), np.array([0.0, 2.0]), np.array([-2.0, 0.0]))
    np.testing.assert_allclose(scores, [1.0, 0.0, -1.0])
    with pytest.raises(ValueError, match="shadow_in must be >= 2 finite scores"):
        lira_scores(np.zeros(2), np.zeros(1), np.zeros(3))


def test_cost_scores():
    x = np.array([[0.0, 0.0], [4.0, 0.0]])
    observed = np.array([[1.0, 0.0], [10.0, 0.0]])
    reference = np.array([[2.0, 0.0], [10.0, 0.0]])
    np.testing.assert_allclose(cost_scores(x, observed), [-1.0, -9.0])
    np.testing.assert_allclose(cost_scores(x, observed, reference), [3.0, -5.0])


def test_label_inference_recovers_the_partition():
    rng = generator(0, "test", "labels")
    centers = rng.uniform(0, 1, (4, 5))
    test_points = centers[rng.integers(0, 4, 1000)] + rng.normal(0, 0.3, (1000, 5))
    lower, upper = np.full(5, -0.5), np.full(5, 1.5)
    for strategy in ("uniform", "distance", "stable"):
        curve = label_inference_curve(centers, test_points, lower, upper, strategy,
                                      [30, 300, 2000], generator(0, "test", strategy))
        assert [c["queries"] for c in curve] == [30, 300, 2000]
        assert curve[-1]["accuracy"] >= 0.9, strategy
        assert curve[-1]["accuracy"] >= curve[0]["accuracy"] - 0.05, strategy
    for strategy, exact in (("uniform", True), ("distance", True), ("stable", False)):
        oracle = LabelOracle(centers)
        x, y = sample_queries(oracle, strategy, 500, lower, upper, generator(1, strategy))
        assert oracle.queries == 500 if exact else oracle.queries <= 500
        np.testing.assert_array_equal(y, oracle.truth(x))  # labels are the model's own
    with pytest.raises(ValueError, match="strategy"):
        sample_queries(LabelOracle(centers), "grid", 10, lower, upper, rng)
    with pytest.raises(ValueError, match="budget"):
        sample_queries(LabelOracle(centers), "uniform", 0, lower, upper, rng)


# -- the curious server, end to end -----------------------------------------------------------
def _run(tmp_path_factory, **overrides):
    out = tmp_path_factory.mktemp("attack")
    flat = {**SMALL, "attack": "curious", "privacy.lloyds-steps": 1, "output-dir": str(out),
            "privacy.reproducible-noise": True, **overrides}
    return run_flat(flat)


@pytest.fixture(scope="module")
def no_dp(tmp_path_factory):
    return _run(tmp_path_factory, **{"privacy.epsilon": "inf"})


@pytest.fixture(scope="module")
def central_dp(tmp_path_factory):
    return _run(tmp_path_factory, **{"privacy.epsilon": 1.0})


def test_without_dp_every_attack_succeeds(no_dp):
    report = no_dp["attack"]
    rec = report["client_reconstruction"]
    assert set(rec["rounds"]) == {"init-3", "lloyds-1"}
    assert rec["cosine_min"] == pytest.approx(1.0, abs=1e-9)
    assert rec["relative_error_max"] <= 1e-9
    for view in ("analyst", "curious_server"):
        assert report["differencing"][view]["cosine_min"] >= 0.99
        assert report["membership_lr"][view]["auc"] >= 0.99
    assert report["membership_lr"]["analyst"]["tpr_at_0.1pct_fpr"] >= 0.99
    assert report["membership_lr"]["releases"] == [
        "init-1/covariance", "init-2/histogram", "init-3/sums", "init-3/counts",
        "lloyds-1/sums", "lloyds-1/counts",
    ]
    # strong adversary, exact reference: every member scores above every non-member but
    # the targets whose nearest final center is not the one they were summed into (they
    # move nothing: a tie, 3 % of the trials on this federation)
    assert report["membership_cost"]["auc"] >= 0.98
    assert report["membership_lira"]["auc"] >= 0.99


def test_central_dp_defeats_the_analyst_but_not_the_curious_server(central_dp):
    report = central_dp["attack"]
    assert central_dp["privacy"]["epsilon"] <= 1.0
    analyst = report["differencing"]["analyst"]
    # Chance: mean cosine ~ 0, mean |cosine| at the level of a random direction in d = 8.
    assert abs(analyst["cosine_mean"]) <= 0.1
    assert analyst["abs_cosine_mean"] <= analyst["abs_cosine_chance"] + 0.05
    assert report["membership_lr"]["analyst"]["auc"] <= 0.6
    assert report["membership_cost"]["auc"] <= 0.6
    assert report["membership_lira"]["auc"] <= 0.6
    assert report["membership_lira"]["shadow_models_per_world"] == 32
    # The curious server sees each reply: central DP does not help at all.
    assert report["client_reconstruction"]["cosine_min"] == pytest.approx(1.0, abs=1e-9)
    assert report["differencing"]["curious_server"]["cosine_min"] >= 0.99
    assert report["membership_lr"]["curious_server"]["auc"] >= 0.99


def test_report_holds_metrics_not_data(central_dp):
    dim = SMALL["data.dim"]

    def walk(node):
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            assert not (len(node) >= dim and all(isinstance(v, float) for v in node))
            for value in node:
                walk(value)

    walk(central_dp["attack"])
    assert len(json.dumps(central_dp["attack"])) < 20_000


def test_client_level_differencing_recovers_the_client_without_dp(tmp_path_factory):
    result = _run(tmp_path_factory, **{"privacy.epsilon": "inf", "privacy.level": "client"})
    report = result["attack"]
    assert report["differencing"]["unit"] == "client"
    assert report["differencing"]["analyst"]["cosine_min"] >= 0.99
    assert report["membership_lr"]["analyst"]["auc"] >= 0.99
    assert report["membership_cost"] is None  # a data-point test


def test_curious_server_does_not_change_the_run(tmp_path_factory, central_dp):
    honest = run_flat({**SMALL, "privacy.lloyds-steps": 1, "privacy.epsilon": 1.0,
                       "privacy.reproducible-noise": True,
                       "output-dir": str(tmp_path_factory.mktemp("honest"))})
    assert "attack" not in honest
    np.testing.assert_array_equal(honest["centers"], central_dp["centers"])
    assert honest["privacy"] == central_dp["privacy"]


def test_curious_run_prints_a_summary_table(central_dp):
    from fedkmeans.attacks.curious import summary_table

    lines = summary_table(central_dp["attack"])
    assert lines[0].split()[:2] == ["attack", "view"]
    rows = {tuple(line.split()[:3]) for line in lines[1:]}
    assert ("reconstruction", "curious", "server") in rows
    assert any(line.startswith("membership_lr") and "analyst" in line for line in lines)
