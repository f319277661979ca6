"""The release audit fails when it should: three planted bugs, and clean code passes.

Hand-computed values (Delta = 11, B = 16 points at the cap, tau = Delta^2 / 2):

* data-point level: step 1 moves by ``Delta^2 = 121``; sums by ``Delta = 11``; the
  histogram and counts of a client at the cap by ``2 B / (B + 1) = 32 / 17`` in l1
  (server's radial l1 clip); the check's cost difference by ``tau = 60.5``;
* client level: every statistic by its client bound (6050, 50, 550, 50, and
  ``tau * max-points-per-client = 60.5 * 16 = 968`` for the check);
* the client-side clip turned off (B = 1000): one point of raw norm ``100 Delta =
  1100`` moves the sums by 1100 (below the server's clip ``B Delta``), the issue's
  example.
"""

import dataclasses
import functools
import logging
import math
from collections.abc import Mapping

import numpy as np
import pytest
from conftest import run_server_inprocess

from fedkmeans import node as node_module
from fedkmeans.attacks import sensitivity_audit as sa
from fedkmeans.attacks.audit_plan import budget_audit, run_plans
from fedkmeans.attacks.sensitivity_audit import AuditSetup, sensitivity_audit
from fedkmeans.experiment import audit as audit_cli
from fedkmeans.privacy.accountant import PrivacyLedger
from fedkmeans.stages import spec
from fedkmeans.tuning import plan as run_plan

FAST = ["--path", "release", "--max-points", "16", "--trials", "0", "--dim", "3"]
EXPECTED = {
    "datapoint": {"init-1/covariance": 121.0, "init-2/histogram": 32 / 17,
                  "init-3/sums": 11.0, "init-3/counts": 1.0, "lloyds-1/sums": 11.0,
                  "lloyds-1/counts": 1.0,
                  "check/cost_difference": 2 ** 0.5},  # (wide, narrow) in units of the clips
    "client": {"init-1/covariance": 6050.0, "init-2/histogram": 50.0, "init-3/sums": 550.0,
               "init-3/counts": 50.0, "lloyds-1/sums": 550.0, "lloyds-1/counts": 50.0,
               "check/cost_difference": 16.0 * 2 ** 0.5},
}


@pytest.fixture(autouse=True)
def _quiet():
    logging.disable(logging.WARNING)  # the nodes log every clipped point
    yield
    logging.disable(logging.NOTSET)


def _ours(rows):
    """The rows of the project's own stages (another test file may register a toy one)."""
    return [r for r in rows if spec.stage_of_round(r.release.split("/")[0]).client.__module__
            .startswith("fedkmeans.")]


def _failed(capsys) -> str:
    return capsys.readouterr().err


@pytest.mark.parametrize("level", ["datapoint", "client"])
def test_clean_code_passes_with_hand_computed_changes(level):
    setup = AuditSetup(level=level, dim=3, max_points=16)
    all_rows = sensitivity_audit(setup)
    # one row per planned release (a stage registered later adds its own rows)
    assert [r.release for r in all_rows] == [
        p.stage for p in sa.planned_releases(setup.config())]
    rows = _ours(all_rows)
    measured = {r.release: r.measured for r in rows if r.release in EXPECTED[level]}
    assert measured == pytest.approx(EXPECTED[level], rel=1e-9)
    assert [r.status for r in rows] == ["ok"] * len(rows)
    # the recorded sensitivities: the bounds the measured changes come within B / (B + 1)
    recorded = {r.release: r.recorded for r in rows}
    if level == "datapoint":  # the histogram's radial l1 clip; the counts' joint one
        assert recorded["init-2/histogram"] == 2.0
        assert recorded["init-3/counts"] == recorded["lloyds-1/counts"] == 1.0
    assert all(r.tightness >= 16 / 17 - 1e-12 for r in rows)


def test_every_planned_release_has_a_row_derived_from_the_registry():
    config = AuditSetup().config()
    plan = sa.planned_releases(config)
    assert set(EXPECTED["datapoint"]) <= {p.stage for p in plan}
    for known in spec.stages():
        for rule in known.releases:
            assert any(p.stage.endswith("/" + rule.statistic.name) for p in plan)


@pytest.mark.slow
def test_command_on_clean_code_returns(capsys):
    results = audit_cli.main([*FAST, "--level", "both"])
    planned = len(sa.planned_releases(AuditSetup().config()))
    plans = len(run_plans(AuditSetup().config()))  # one per private algorithm (4)
    # both count noises at client level (its counts rows twice; Gaussian at data-point),
    # and a budget row per plan and audited setup (three)
    assert len(results) == 2 * planned + 2 + 3 * plans
    assert not any(r.failed for r in results)
    assert "FAILED" not in capsys.readouterr().out


def _halved(real, name):
    """``statistic_bounds`` deriving half the true l2 sensitivity of statistic ``name``.

    Planted at the one derivation every reader calls (the plan, the server's clip and
    its release-time check): the bounds the server clips with are unchanged, and the
    plan and the release agree with each other, not with what one unit's data can do.
    """
    class Halved(Mapping):  # lazy, as the real one: some bounds exist only once resolved
        def __init__(self, bounds):
            self.bounds = bounds

        def __getitem__(self, key):
            bound = self.bounds[key]
            return dataclasses.replace(bound, l2_sensitivity=bound.l2_sensitivity / 2) \
                if key == name else bound

        def __iter__(self):
            return iter(self.bounds)

        def __len__(self):
            return len(self.bounds)

    return lambda privacy: Halved(real(privacy))


def test_planted_half_sensitivity_fails_the_command(monkeypatch, capsys):
    """(a) The derivation gives half the sums' true l2 sensitivity: the ledger records
    it, and the release-time check agrees (the clients and the server's clip are
    unchanged); only the measured change shows it."""
    monkeypatch.setattr(spec, "statistic_bounds", _halved(spec.statistic_bounds, "sums"))
    with pytest.raises(SystemExit) as exit_info:
        audit_cli.main([*FAST, "--level", "datapoint"])
    assert exit_info.value.code == audit_cli.FAILED
    err = _failed(capsys)
    assert "init-3/sums" in err and "lloyds-1/sums" in err and "histogram" not in err
    assert "measured change 11 exceeds the recorded sensitivity 5.5" in err


def _halved_ledger(plan):
    """The ledger only: the sums' releases recorded at half their sensitivity."""
    return [dataclasses.replace(r, sensitivity=r.sensitivity / 2, noise_scale=r.noise_scale / 2)
            if r.stage.endswith("/sums") else r for r in plan]


def test_a_planted_ledger_only_bug_is_refused_at_release_and_fails_the_audit():
    """The plan-only form of (a): a ledger that records half the sums' sensitivity while
    the server clips with the true bound. The release refuses before drawing noise
    (naming the release and both values), and the audit's rows fail on it."""
    setup = AuditSetup(level="datapoint", dim=3, max_points=16)
    rows = {r.release: r for r in _ours(sensitivity_audit(setup, plan_hook=_halved_ledger))}
    failed = {name for name, r in rows.items() if r.failed}
    # the round is refused: its counts are not released either
    assert failed == {"init-3/sums", "init-3/counts", "lloyds-1/sums", "lloyds-1/counts"}
    for name in failed:
        group = name.split("/")[0]
        assert rows[name].status == "left out"
        assert (f"SensitivityMismatchError: release {group}/sums: the ledger would record "
                "sensitivity 5.5, but the bound the server clips sums with gives gaussian "
                "sensitivity 11.0") in rows[name].reason


def test_planted_client_clip_off_fails_the_command(monkeypatch, capsys):
    """(b) NodeData.load no longer clips the points to the data radius."""
    monkeypatch.setattr(node_module, "clip_rows_l2", lambda x, radius: x)
    rows = _ours(sensitivity_audit(AuditSetup(level="datapoint", dim=3, max_points=1000)))
    failed = {r.release: r.measured for r in rows if r.failed}
    # the counts fail too: the unclipped point pushes the client at the cap past the
    # joint clip's radius, whose one factor then moves its counts by 4.5 (> 1)
    assert set(failed) == {"init-1/covariance", "init-3/sums", "lloyds-1/sums",
                           "init-3/counts", "lloyds-1/counts"}
    # the example: one point of norm 100 Delta moves the sums by 1,100 (the
    # server's clip, B Delta = 11,000, does not reach it), against a ledger of 11
    assert failed["init-3/sums"] == failed["lloyds-1/sums"] == pytest.approx(1100.0)
    # step 1: (100 Delta)^2 = 1.21e6 before the server's clip to B Delta^2 = 121,000
    assert failed["init-1/covariance"] > 100 * 121.0
    with pytest.raises(SystemExit) as exit_info:
        audit_cli.main([*FAST, "--level", "datapoint"])
    assert exit_info.value.code == audit_cli.FAILED
    assert "init-1/covariance" in _failed(capsys)


def test_planted_release_left_out_fails_the_command(monkeypatch, capsys):
    """(c) The audit drives every planned release but the final check."""
    skip_check = functools.partial(
        sensitivity_audit, audited=lambda plan: [p for p in plan if p.group != "check"])
    monkeypatch.setattr(audit_cli, "sensitivity_audit", skip_check)
    with pytest.raises(SystemExit) as exit_info:
        audit_cli.main([*FAST, "--level", "client", "--count-noises", "gaussian"])
    assert exit_info.value.code == audit_cli.FAILED
    err = _failed(capsys)
    assert "check/cost_difference" in err and "left out of the audit" in err
    rows = skip_check(AuditSetup(level="client", dim=3, max_points=16))
    failed = [(r.release, r.status, math.isnan(r.measured)) for r in rows if r.failed]
    assert failed == [("check/cost_difference", "left out", True)]


def test_planted_client_clip_off_also_raises_eps_lb():
    """The statistical check on the same planted bug: far above the claim."""
    from fedkmeans.attacks.release_audit import audit_release

    setup = AuditSetup(level="datapoint", dim=3, max_points=16)
    clean = audit_release(setup, "lloyds-1/sums", trials=300, selection=200)
    assert not clean.failed and clean.measured_change == pytest.approx(11.0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(node_module, "clip_rows_l2", lambda x, radius: x)
        planted = audit_release(setup, "lloyds-1/sums", trials=300, selection=200)
    # B = 16: the server's joint clip stops the point; a client at the cap (16 points at
    # Delta e_1) gaining it is scaled by one factor f (its sums and counts together) and
    # moves by |(1100 f, 176 f - 176)|; f lies between the factor of its sums alone,
    # s = 176 / sqrt(1100^2 + 176^2), and that of its counts alone, 16 / sqrt(16^2 + 1)
    s, c = 176 / math.hypot(1100, 176), 16 / math.hypot(16, 1)
    low, high = (math.hypot(1100 * f, 176 * f - 176) for f in (s, c))
    assert low <= planted.measured_change <= high
    assert planted.failed and planted.epsilon_lb > 3.0, planted


def _halved_estimate(real):
    """The estimate round's release with half its sensitivity, its noise calibrated to it
    (the runner's plan only: the release-time check still reads the true bound)."""
    def planted(privacy):
        release = real(privacy)
        return dataclasses.replace(release, sensitivity=release.sensitivity / 2,
                                   noise_scale=release.noise_scale / 2)

    return planted


def test_planted_half_estimate_sensitivity_in_the_runner_fails_the_command(monkeypatch, capsys):
    """(d) The estimate round's release, as the runner plans it, records half its
    sensitivity: sqrt(2) / 2 at data-point level (one point moves the histograms'
    l2 norm by sqrt(2): one rank bin and one norm bin). Planted in the derivation the
    runner's plan and the release both read; its noise follows, so the ledger still
    says epsilon <= 1."""
    monkeypatch.setattr(spec, "statistic_bounds", _halved(spec.statistic_bounds, "estimates"))
    with pytest.raises(SystemExit) as exit_info:
        audit_cli.main([*FAST, "--level", "datapoint"])
    assert exit_info.value.code == audit_cli.FAILED
    err = _failed(capsys)
    assert "measured change 1.41421 exceeds the recorded sensitivity 0.707107" in err
    config = AuditSetup(level="datapoint", dim=3, max_points=16).config()
    # its row and every run's plan with an estimate round (one per private algorithm
    # that releases anything; more when other tests registered algorithms or stages)
    with_estimates = [name for name, plan in run_plans(config).items() if plan.prior]
    assert {"feddp-kmeans", "server-lloyds"} <= set(with_estimates)
    assert err.count("estimate/estimates") == 1 + len(with_estimates), err
    assert "sums" not in err and "histogram" not in err
    # the budget row: the plan's ledger with the estimate round's true sensitivity, sqrt(2)
    [row] = [r for r in budget_audit(config, {"estimate/estimates": math.sqrt(2)})
             if r.plan == "feddp-kmeans"]
    ledger = run_plans(config)["feddp-kmeans"].ledger
    accountant = PrivacyLedger()
    for release in ledger:
        accountant.record(dataclasses.replace(release, sensitivity=math.sqrt(2))
                          if release.stage == "estimate/estimates" else release)
    assert ledger[0].sensitivity == pytest.approx(math.sqrt(2) / 2)
    assert row.recorded_epsilon <= 1.0 < row.measured_epsilon
    assert row.measured_epsilon == pytest.approx(accountant.get_epsilon(1e-6))
    assert f"epsilon at the measured sensitivities {row.measured_epsilon:.4f}" in err


def test_the_planted_estimate_release_is_the_one_a_real_run_records(monkeypatch, small_config):
    """The plant of (d) reaches release.json: the runner plans with the same derivation."""
    monkeypatch.setattr(spec, "statistic_bounds", _halved(spec.statistic_bounds, "estimates"))
    flat = {**small_config, "privacy.data-radius": "auto", "privacy.lloyds-steps": 1}
    result = run_server_inprocess(flat)
    ledger = result["privacy"]["releases"]
    assert ledger[0]["stage"] == "estimate/estimates"
    assert ledger[0]["sensitivity"] == pytest.approx(math.sqrt(2) / 2)
    assert result["privacy"]["epsilon"] <= 1.0  # the ledger cannot tell


def test_a_real_run_refuses_a_plan_that_records_less_than_its_clip(monkeypatch, small_config):
    """The runner's plan alone records half the estimate round's sensitivity (the plant
    of (d) before issue 51): the release-time check refuses the round, naming it."""
    from fedkmeans.server.releaser import SensitivityMismatchError

    monkeypatch.setattr(run_plan, "estimate_release", _halved_estimate(run_plan.estimate_release))
    flat = {**small_config, "privacy.data-radius": "auto", "privacy.lloyds-steps": 1}
    with pytest.raises(SensitivityMismatchError, match=(
            r"release estimate/estimates: the ledger would record sensitivity 0\.707106\d*, "
            r"but the bound the server clips estimates with gives gaussian sensitivity "
            r"1\.414213")):
        run_server_inprocess(flat)


def test_planted_estimate_round_left_out_of_the_calibration_fails_the_command(
        monkeypatch, capsys):
    """(e) The runner calibrates the other releases without the estimate round's
    (``prior`` dropped): every sensitivity is right, the ledger spends more than 1."""
    real = run_plan.calibrate
    monkeypatch.setattr(run_plan, "calibrate",
                        lambda planned, prior=(), **kw: real(planned, **kw))
    with pytest.raises(SystemExit) as exit_info:
        audit_cli.main([*FAST, "--level", "client", "--count-noises", "gaussian"])
    assert exit_info.value.code == audit_cli.FAILED
    err = _failed(capsys)
    assert "measured change" not in err
    config = AuditSetup(level="client", dim=3, max_points=16,
                        count_noise="gaussian").config()
    composed = [plan for plan in run_plans(config).values() if plan.prior and plan.releases]
    assert err.count("the ledger's epsilon") == len(composed) >= 4  # every such run's plan
    assert all(r.recorded_epsilon > 1.0 for r in budget_audit(config, {}))


# -- the joint clip (issue 49): planted in the one function both aggregations call --------
def _swapped_metric(real):
    """The projection taken in the swapped metric: sums whitened by the counts' noise
    scale and counts by the sums' (the radius unchanged)."""
    def planted(rows, scales, bound, nonnegative):
        return real(rows, list(reversed(scales)), bound, nonnegative)

    return planted


def _counts_reclipped_in_l1(real):
    """After the joint projection, the counts clipped again in l1 to ``R sigma_c`` (an
    l2 radius): the node's defect of issue 49."""
    def planted(rows, scales, bound, nonnegative):
        factors, prepared = real(rows, scales, bound, nonnegative)
        out = []
        for values, scale, counts in zip(prepared, scales, nonnegative, strict=True):
            if counts:
                shape = (-1, *([1] * (values.ndim - 1)))
                l1 = np.abs((values * factors.reshape(shape)).reshape(len(values), -1)).sum(1)
                values = values * np.minimum(1.0, bound * scale / np.maximum(l1, 1e-300)
                                             ).reshape(shape)
            out.append(values)
        return factors, out

    return planted


@pytest.mark.parametrize("aggregation", ["central", "secagg"])
@pytest.mark.parametrize("plant", [_swapped_metric, _counts_reclipped_in_l1])
def test_planted_joint_clip_bugs_fail_the_command_at_both_aggregations(
        monkeypatch, capsys, plant, aggregation):
    """The data-point probes whose sums and counts leave the ball in different
    proportions catch both plants, on the server's fold and on the SecAgg nodes."""
    from fedkmeans.privacy import clipping

    monkeypatch.setattr(clipping, "joint_clip_factors", plant(clipping.joint_clip_factors))
    with pytest.raises(SystemExit) as exit_info:
        audit_cli.main([*FAST, "--level", "datapoint", "--aggregation", aggregation])
    assert exit_info.value.code == audit_cli.FAILED
    err = _failed(capsys)
    assert "init-3/counts" in err and "lloyds-1/counts" in err and "joint-" in err
    assert "init-1/covariance" not in err and "histogram" not in err  # only the joint clip


@pytest.mark.parametrize("aggregation", ["central", "secagg"])
def test_clean_joint_clip_passes_with_the_joint_probes(aggregation):
    rows = _ours(sensitivity_audit(AuditSetup(level="datapoint", dim=3, max_points=16,
                                              aggregation=aggregation)))
    assert [r.status for r in rows] == ["ok"] * len(rows)
    probes = [p.name for p in sa.probes(AuditSetup(dim=3, max_points=16, aggregation=aggregation),
                                        sa.planned_releases(AuditSetup(dim=3).config()))]
    assert sum(p.startswith("joint-counts-") for p in probes) >= 1
    assert sum(p.startswith("joint-sums-") for p in probes) == 12
