"""The run's plan (tuning.plan.plan_run): estimate release first, the rest composed with it."""

import math

import pytest
from conftest import SMALL

from fedkmeans.experiment.config import parse_config
from fedkmeans.privacy.analytic_gaussian import analytic_gaussian_sigma
from fedkmeans.tuning.plan import RunPlan, needs_estimates, plan_run


def _plan(flat, resolved=None):
    asked = []

    def resolve(prior):
        asked.append(prior)
        return (resolved or parse_config(flat)).protocol, None

    return plan_run(parse_config(flat).protocol, subspace=True, resolve=resolve), asked


def test_hand_settings_plan_no_estimate_round_and_meet_the_target():
    flat = {**SMALL, "privacy.lloyds-steps": 1}
    plan, asked = _plan(flat)
    assert asked == [()] and plan.prior == ()
    assert [r.stage for r in plan.releases] == [
        "init-1/covariance", "init-2/histogram", "init-3/sums", "init-3/counts",
        "lloyds-1/sums", "lloyds-1/counts"]
    assert 0.99 <= plan.epsilon() <= 1.0


def test_an_auto_setting_plans_the_estimate_round_first_and_calibrates_the_rest_with_it():
    hand = {**SMALL, "privacy.lloyds-steps": 1}
    plan, asked = _plan({**hand, "privacy.split": "auto"}, resolved=parse_config(hand))
    [estimate] = plan.prior
    assert asked == [plan.prior]
    # data-point level: sensitivity sqrt(2); noise multiplier z / sqrt(0.05), z the
    # analytic Gaussian's multiplier of the whole (1, 1e-6) budget
    assert (estimate.stage, estimate.sensitivity) == ("estimate/estimates", math.sqrt(2))
    z = analytic_gaussian_sigma(1.0, 1e-6, 1.0) / math.sqrt(0.05)
    assert estimate.noise_scale == pytest.approx(z * math.sqrt(2), rel=1e-9)
    assert 0.99 <= plan.epsilon() <= 1.0  # the whole ledger, estimate round included
    alone, _ = _plan(hand)
    # the estimate round's share leaves more noise on every other release
    pairs = zip(plan.releases, alone.releases, strict=True)
    assert all(r.noise_scale > a.noise_scale for r, a in pairs)
    assert RunPlan.from_dict(plan.to_dict()) == plan


def test_no_estimate_round_without_a_release_or_without_privacy():
    base = {**SMALL, "privacy.split": "auto"}
    assert needs_estimates(parse_config(base))
    assert not needs_estimates(parse_config({**base, "privacy.epsilon": math.inf}))
    lloyd = parse_config({**SMALL, "algorithm": "server-lloyds", "privacy.data-radius": "auto"})
    assert not needs_estimates(lloyd)  # T = 0: k-means on Q asks the clients nothing


def test_a_run_times_the_calibration_apart_from_the_tuning(tmp_path, monkeypatch):
    import time

    from fedkmeans.experiment.cli import run_flat
    from fedkmeans.tuning import plan as plan_module

    calibrate = plan_module.calibrated_releases

    def slow(*args, **kwargs):  # a calibration of a known length
        time.sleep(2.0)
        return calibrate(*args, **kwargs)

    monkeypatch.setattr(plan_module, "calibrated_releases", slow)
    result = run_flat({**SMALL, "privacy.split": "auto", "output-dir": str(tmp_path)})
    timings = result["timings"]
    assert timings["calibrate"] >= 2.0
    # the estimate round and the simulation, without the calibration that follows them
    assert timings["estimate"] <= timings["tuning"] < 2.0
