"""Vertical app: what epsilon_per_sample covers (issue 30, item 5).

- it counts the configured maximum number of iterations, not those run;
- a non-private release (``bound = 0``: the scale in clear) makes it infinite;
- the per-value accounting needs O(Q) memory, so ``levels = 10000`` runs.
"""

import logging
import math
import tracemalloc

import numpy as np
import pytest

from fedkmeans.seeding import generator
from fedkmeans.vertical import accounting as acc
from fedkmeans.vertical.config import DEFAULTS
from fedkmeans.vertical.defence import gap_rr_matrix, grr_matrix, truth_probability
from fedkmeans.vertical.experiment import run


@pytest.fixture(autouse=True)
def _quiet():
    logging.getLogger("fedkmeans").setLevel(logging.WARNING)


# The issue's example: iris, GRR at eps = 15, Q = 200, T = 30 (a public bound: finite).
ISSUE = {"dataset": "iris", "parties": 2, "defence": "full", "mechanism": "grr",
         "epsilon": 15.0, "levels": 200, "iterations": 30, "bound": 8.0}


def test_epsilon_per_sample_counts_the_configured_iterations_not_those_run():
    stopped = run(ISSUE)                                   # stop-when-stable: the default
    full = run({**ISSUE, "stop-when-stable": False})
    assert stopped["iterations_run"] < 30 == full["iterations_run"]
    for result in (stopped, full):
        privacy = result["privacy"]
        assert privacy["iterations_accounted"] == 30
        assert privacy["reports_per_sample_per_party"] == 3 * 30
        assert privacy["per_party_slice"]["claimed"]["basic"] == pytest.approx(1350.0)
        assert privacy["per_record"]["reports"] == 2 * 3 * 30
    assert stopped["privacy"]["epsilon_per_sample"] == full["privacy"]["epsilon_per_sample"]
    # By hand: of the 90 reports' composed loss only "all 90 truthful" (loss 90 x 15,
    # probability p^90) exceeds 1335, so on [1335, 1350] delta(E) = p^90 (1 - e^(E-1350))
    # and E = 1350 + ln(1 - delta / p^90).
    p90 = truth_probability(15.0, 200) ** 90
    expected = 1350.0 + math.log(1.0 - 1e-5 / p90)
    assert stopped["privacy"]["epsilon_per_sample"] == pytest.approx(expected, abs=1e-8)


def test_bound_zero_is_a_non_private_release_and_gives_infinite_epsilon():
    assert DEFAULTS["bound"] == 0.0
    private = {k: v for k, v in ISSUE.items() if k != "bound"}
    result = run({**private, "iterations": 3, "stop-when-stable": False})
    privacy = result["privacy"]
    assert any("scale" in item for item in privacy["non_private_releases"])
    assert privacy["epsilon_per_sample"] == "inf"
    reports_only = privacy["per_party_slice"]["actual"]["exact"]
    assert isinstance(reports_only, float) and reports_only < 9 * 15.0   # the reports alone
    public = run({**private, "iterations": 3, "stop-when-stable": False, "bound": 8.0})
    assert public["privacy"]["non_private_releases"] == []
    assert public["privacy"]["epsilon_per_sample"] == pytest.approx(reports_only)
    discretised = run({"dataset": "iris", "defence": "discretise", "iterations": 2})
    assert discretised["privacy"]["epsilon_per_sample"] == "inf"


@pytest.mark.parametrize("mechanism", ["gap-rr", "grr"])
def test_accounting_at_levels_10000_fits_in_linear_memory(mechanism):
    # the dense Q x Q x Q hockey-stick array of the old code: 8 TB at Q = 10,000
    tracemalloc.start()
    try:
        account = acc.per_sample_account(mechanism=mechanism, epsilon=1.0, levels=10000,
                                         l_ratio=0.5, reports=30, delta=1e-5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32e6                                      # one dense Q x Q is 800 MB
    if mechanism == "grr":
        assert account["actual"]["per_value"] == pytest.approx(1.0)
        assert account["actual"]["delta_at_claimed"] == pytest.approx(0.0, abs=1e-15)
    else:
        assert account["actual"]["per_value"] == math.inf
        assert account["actual"]["delta_at_claimed"] == 1.0


def test_levels_10000_runs_through_the_app():
    result = run({"dataset": "iris", "parties": 2, "defence": "full", "mechanism": "grr",
                  "levels": 10000, "iterations": 2, "stop-when-stable": False, "bound": 8.0})
    privacy = result["privacy"]
    assert privacy["per_party_slice"]["claimed"]["outputs"] == 10000
    assert privacy["epsilon_per_sample"] == pytest.approx(
        acc.rr_epsilon(1.0, 10000, 6, 1e-5))


def test_hockey_stick_delta_pinned_by_hand():
    e = math.e
    # Q = 4, l = 1: answer sets {0,1,2}, {0,1,2}, {1,2,3}, {1,2,3}. Inputs 0 and 3:
    # output 0 has P[0, 0] = p = e/(e+2) and P[3, 0] = 0; every other term is <= 0.
    gap4 = acc.ReportMechanism.gap_rr(4, 1.0, 1)
    assert acc.hockey_stick_delta(gap4, 1.0) == pytest.approx(e / (e + 2), abs=1e-15)
    assert acc.worst_case_epsilon(gap4) == math.inf
    # GRR at eps, checked at eps/2: only y = v is positive, p - e^(eps/2) q
    q20 = acc.ReportMechanism.grr(20, 0.8)
    expected = (math.exp(0.8) - math.exp(0.4)) / (math.exp(0.8) + 19)
    assert acc.hockey_stick_delta(q20, 0.4) == pytest.approx(expected, abs=1e-15)
    assert acc.worst_case_epsilon(acc.ReportMechanism.gap_rr(3, 0.7, 1)) == pytest.approx(0.7)


def test_structured_mechanism_equals_the_dense_matrix():
    for levels in range(3, 17):
        for epsilon in (0.1, 1.0, 3.0):
            pairs = [(acc.ReportMechanism.gap_rr(levels, epsilon, gap),
                      gap_rr_matrix(levels, epsilon, gap)) for gap in range(1, levels // 3 + 1)]
            pairs.append((acc.ReportMechanism.grr(levels, epsilon), grr_matrix(levels, epsilon)))
            for mech, dense in pairs:
                np.testing.assert_allclose(mech.dense(), dense, atol=1e-15)
                assert acc.worst_case_epsilon(mech) == pytest.approx(
                    acc.worst_case_epsilon(dense), abs=1e-12)
                for target in (0.0, epsilon / 2, epsilon, 2 * epsilon):
                    assert acc.hockey_stick_delta(mech, target) == pytest.approx(
                        acc.hockey_stick_delta(dense, target), abs=1e-12)


def test_structured_hockey_stick_on_random_mechanisms_equals_the_dense_one():
    """The pair-sharing shortcut holds for any floor + excess mechanism, not only ours."""
    rng = generator(7, "test", "random-mechanisms")
    for _ in range(200):
        levels = int(rng.integers(2, 12))
        width = int(rng.integers(1, levels + 1))
        support = np.stack([rng.permutation(levels)[:width] for _ in range(levels)])
        floor = float(rng.choice([0.0, rng.random() * 0.5 / levels]))
        excess = rng.random((levels, width))
        excess *= (1.0 - floor * levels) / excess.sum(axis=1, keepdims=True)
        mech = acc.ReportMechanism(floor, support, excess)
        assert acc.worst_case_epsilon(mech) == pytest.approx(
            acc.worst_case_epsilon(mech.dense()), abs=1e-12)
        for target in (0.0, 0.3, 1.0):
            assert acc.hockey_stick_delta(mech, target) == pytest.approx(
                acc.hockey_stick_delta(mech.dense(), target), abs=1e-12)


def test_report_mechanism_rejects_what_is_not_a_mechanism():
    with pytest.raises(ValueError, match="sum to 1"):
        acc.ReportMechanism(0.0, np.array([[0], [1]]), np.array([[0.5], [1.0]]))
    with pytest.raises(ValueError, match="distinct"):
        acc.ReportMechanism(0.0, np.array([[0, 0], [1, 0]]), np.full((2, 2), 0.5))
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        acc.ReportMechanism(0.0, np.array([[0], [2]]), np.ones((2, 1)))
