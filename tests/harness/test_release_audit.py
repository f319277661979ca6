"""The statistical audit through the real path, and the sensitivities it checks.

The hand-computed values: a client at the cap of B = 1000 points, all in bin 0,
gains one point in bin 1. The server's radial l1 clip scales the new histogram
(B, 1) by B / (B + 1), so the clipped sum moves by (-B, B) / (B + 1): 2 B / (B + 1)
= 1.998002 in l1 and sqrt(2) B / (B + 1) = 1.412800 in l2.
"""

import logging
import math

import numpy as np
import pytest
from conftest import PAPER

from fedkmeans.attacks.audit_plan import BudgetRow, run_plans
from fedkmeans.attacks.release_audit import audit_release, legacy_derivation
from fedkmeans.attacks.sensitivity_audit import AuditSetup, SensitivityRow, planned_releases
from fedkmeans.experiment.audit import main
from fedkmeans.experiment.config import parse_config
from fedkmeans.server.aggregation import clipped_sum
from fedkmeans.stages import statistic_bounds


@pytest.fixture(autouse=True)
def _quiet():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def test_the_issue_example_moves_a_capped_histogram_by_the_recorded_sensitivity():
    bound = statistic_bounds(parse_config(PAPER).privacy)["histogram"]
    h = np.zeros(10)
    h[0] = 1000
    h2 = h.copy()
    h2[1] = 1
    change = clipped_sum(h2[None], bound.server_bound, bound.norm) - clipped_sum(
        h[None], bound.server_bound, bound.norm)
    assert np.abs(change).sum() == pytest.approx(2000 / 1001, rel=1e-12)
    assert np.linalg.norm(change) == pytest.approx(math.sqrt(2) * 1000 / 1001, rel=1e-12)
    assert bound.l1_sensitivity == 2.0 and bound.l2_sensitivity == math.sqrt(2.0)


def test_release_path_audit_catches_the_old_radial_clip_sensitivity():
    """Planted bug: the histogram calibrated to 1 (per point) instead of 2, in the
    derivation the plan and the server's release-time check both read."""
    setup = AuditSetup(level="datapoint", dim=3)
    with legacy_derivation():
        result = audit_release(setup, "init-2/histogram", trials=3000, selection=1000)
    assert result.claimed_sensitivity == 1.0
    assert result.measured_change == pytest.approx(2000 / 1001)
    assert result.failed and result.epsilon_lb > result.accountant_epsilon, result


@pytest.mark.parametrize("level", ["datapoint", "client"])
@pytest.mark.slow
def test_release_path_audit_stays_below_the_claim(level):
    """Random test (secret noise): at confidence 0.999 a correct mechanism fails a
    release with probability <= 0.1%."""
    setup = AuditSetup(level=level, dim=3, max_points=16)
    for planned in planned_releases(setup.config()):
        result = audit_release(setup, planned.stage, trials=800, selection=300,
                               confidence=0.999)
        assert result.measured_change <= result.claimed_sensitivity * (1 + 1e-12)
        assert result.accountant_epsilon <= 1.0
        assert not result.failed, result


def test_poisson_sampling_runs_through_the_server_context():
    setup = AuditSetup(level="client", dim=3, count_noise="gaussian", sampling_rate=0.5)
    result = audit_release(setup, "lloyds-1/counts", trials=300, selection=200)
    assert result.sampling_rate == 0.5 and result.probe == "clipped-client"
    assert result.measured_change == pytest.approx(50.0)
    assert not result.failed


def test_release_path_cli_prints_every_check(capsys):
    results = main(["--path", "release", "--mechanism", "counts", "--level", "client",
                    "--max-points", "16", "--dim", "3", "--trials", "200",
                    "--selection", "100"])
    sensitivity = [r for r in results if isinstance(r, SensitivityRow)]
    budget = [r for r in results if isinstance(r, BudgetRow)]
    rows = [(r.release, r.mechanism) for r in sensitivity]
    assert sorted(rows) == [("init-3/counts", "gaussian"), ("init-3/counts", "laplace"),
                            ("lloyds-1/counts", "gaussian"), ("lloyds-1/counts", "laplace")]
    # a budget row per count noise and run plan (one per private algorithm, and one for
    # the stages no algorithm runs when another test registered one)
    plans = list(run_plans(AuditSetup(level="client").config()))
    assert {"feddp-kmeans", "server-lloyds", "server-kmeans++", "sphere-packing"} <= set(plans)
    assert sorted((r.count_noise, r.plan) for r in budget) == sorted(
        (noise, name) for noise in ("laplace", "gaussian") for name in plans)
    assert len(results) == 4 + len(budget) + 4 and not any(r.failed for r in results)
    out = capsys.readouterr().out
    assert "measured/recorded" in out and "measured eps" in out and "eps_LB" in out
