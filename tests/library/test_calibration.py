import math
import time

import pytest

from fedkmeans.privacy.accountant import PrivacyLedger, Release
from fedkmeans.privacy.calibration import PlannedRelease, analytic_gaussian_sigma, calibrate

DELTA = 1e-6


def _datapoint_plan(lloyd_steps):
    plan = [
        PlannedRelease("init/step1", "gaussian", 121.0, 0.2),
        PlannedRelease("init/step2", "laplace", 1.0, 0.2),
        PlannedRelease("init/step3-sums", "gaussian", 11.0, 0.45, group="init-step3"),
        PlannedRelease("init/step3-counts", "laplace", 1.0, 0.15, group="init-step3"),
    ]
    for t in range(lloyd_steps):
        plan += [
            PlannedRelease(f"lloyd-{t}/sums", "gaussian", 11.0, 0.45, group=f"lloyd-{t}"),
            PlannedRelease(f"lloyd-{t}/counts", "laplace", 1.0, 0.15, group=f"lloyd-{t}"),
        ]
    return plan


CLIENT_PLAN = [
    PlannedRelease("init/step1", "gaussian", 121.0, 0.35),
    PlannedRelease("init/step2", "laplace", 50.0, 0.1),
    PlannedRelease("init/step3-sums", "gaussian", 11.0, 0.45, group="init-step3"),
    PlannedRelease("init/step3-counts", "laplace", 1.0, 0.1, group="init-step3"),
]

Q = 0.05
SAMPLED_PLAN = [
    PlannedRelease("init/step1", "gaussian", 121.0, 0.35, Q),
    PlannedRelease("init/step2", "laplace", 1.0, 0.1, Q),
    PlannedRelease("init/step3-sums", "gaussian", 11.0, 0.45, Q, "init-step3"),
    PlannedRelease("init/step3-counts", "gaussian", 1.0, 0.1, Q, "init-step3"),
    PlannedRelease("lloyd-0/sums", "gaussian", 11.0, 0.45, Q, "lloyd-0"),
    PlannedRelease("lloyd-0/counts", "gaussian", 1.0, 0.15, Q, "lloyd-0"),
]

PLANS = {
    "datapoint-T0": _datapoint_plan(0),
    "datapoint-T1": _datapoint_plan(1),
    "datapoint-T2": _datapoint_plan(2),
    "client": CLIENT_PLAN,
    "sampled": SAMPLED_PLAN,
}


def _epsilon(releases):
    acc = PrivacyLedger()
    for r in releases:
        acc.record(r)
    return acc.get_epsilon(DELTA)


@pytest.mark.parametrize("eps,sigma", [(0.5, 8.058), (1.0, 4.225), (2.0, 2.231), (4.0, 1.194)])
def test_analytic_gaussian_sigma_pinned(eps, sigma):
    assert analytic_gaussian_sigma(eps, DELTA) == pytest.approx(sigma, abs=1e-3)
    assert analytic_gaussian_sigma(eps, DELTA, sensitivity=11.0) == pytest.approx(
        11.0 * analytic_gaussian_sigma(eps, DELTA), rel=1e-9
    )


def test_analytic_gaussian_beats_classic_formula():
    for eps in (0.5, 1.0):  # classic sigma = sqrt(2 ln(1.25/delta)) / eps is valid for eps < 1
        assert analytic_gaussian_sigma(eps, DELTA) < math.sqrt(2 * math.log(1.25 / DELTA)) / eps


@pytest.mark.parametrize("name", list(PLANS))
@pytest.mark.parametrize("eps", [0.25, 1.0, 3.0])
@pytest.mark.slow
def test_calibrate_hits_target(name, eps):
    plan = PLANS[name]
    start = time.perf_counter()
    releases = calibrate(plan, epsilon=eps, delta=DELTA)
    assert time.perf_counter() - start < 10.0
    assert [(r.stage, r.mechanism, r.sensitivity, r.sampling_rate, r.group) for r in releases] == [
        (p.stage, p.mechanism, p.sensitivity, p.sampling_rate, p.group) for p in plan
    ]
    assert all(isinstance(r, Release) and r.noise_scale > 0 for r in releases)
    got = _epsilon(releases)
    assert 0.99 * eps <= got <= eps


def test_budget_shares_follow_weights():
    plan = [PlannedRelease("a", "laplace", 1.0, 1.0), PlannedRelease("b", "laplace", 2.0, 3.0)]
    a, b = calibrate(plan, epsilon=1.0, delta=DELTA)
    # standalone epsilons sens / b are in ratio 1 : 3
    assert (2.0 / b.noise_scale) / (1.0 / a.noise_scale) == pytest.approx(3.0)
    # two Laplace releases compose to about the sum of their epsilons
    assert 1.0 / a.noise_scale + 2.0 / b.noise_scale == pytest.approx(1.0, abs=0.02)


def test_more_budget_less_noise():
    plan = PLANS["datapoint-T1"]
    low = calibrate(plan, epsilon=0.5, delta=DELTA)
    high = calibrate(plan, epsilon=2.0, delta=DELTA)
    assert all(h.noise_scale < lo.noise_scale for h, lo in zip(high, low, strict=True))


def test_infinite_epsilon_means_no_noise():
    releases = calibrate(PLANS["client"], epsilon=math.inf, delta=DELTA)
    assert [r.noise_scale for r in releases] == [0.0] * 4
    assert _epsilon(releases) == math.inf


def test_validation():
    plan = PLANS["datapoint-T0"]
    for eps in (0.0, -1.0, math.nan, 1e6):
        with pytest.raises(ValueError, match="epsilon"):
            calibrate(plan, epsilon=eps, delta=DELTA)
    for delta in (0.0, 1.0):
        with pytest.raises(ValueError, match="delta"):
            calibrate(plan, epsilon=1.0, delta=delta)
    with pytest.raises(ValueError, match="planned"):
        calibrate([], epsilon=1.0, delta=DELTA)
    with pytest.raises(ValueError, match="weight"):
        PlannedRelease("a", "gaussian", 1.0, 0.0)
    with pytest.raises(ValueError, match="sensitivity"):
        PlannedRelease("a", "gaussian", -1.0, 1.0)
    bad = [
        PlannedRelease("s", "gaussian", 1.0, 1.0, 0.1, "g"),
        PlannedRelease("c", "laplace", 1.0, 1.0, 0.1, "g"),
    ]
    with pytest.raises(ValueError, match="subsampling trap"):
        calibrate(bad, epsilon=1.0, delta=DELTA)
    with pytest.raises(ValueError, match="epsilon"):
        analytic_gaussian_sigma(0.0, DELTA)


def test_unreachable_target_raises():
    with pytest.raises(ValueError, match="epsilon=1e-05"):
        calibrate(PLANS["datapoint-T0"], epsilon=1e-5, delta=DELTA)


# The calibrated scales fix every reproducible result (privacy.reproducible-noise=true):
# another root search lands elsewhere in the accepted band. scipy.optimize.brentq
# (xtol 1e-3 on log c) gives scales up to 0.29% apart on these plans, and centers up to
# 2.4e-4 apart on the acceptance configs (fedkmeans/privacy/calibration.py). Pinned to
# 1e-9 (the search's own steps differ by > 1e-5). Since the accountant merges the
# unsampled Gaussian releases into one (fedkmeans/privacy/accountant.py), every scale is
# 2-3.3e-6 (relative) below the one pinned before: the merged PLD rounds once, not once
# per release.
PINNED_SCALES = {
    "datapoint-T1": [2539.4009474156614, 5.564187228264226, 108.08715053315066,
                     7.418916304352302, 108.08715053315066, 7.418916304352302],
    "client": [1028.5347607489562, 370.61704506131224, 73.94393989396839, 7.412340901226245],
}


@pytest.mark.parametrize("name", list(PINNED_SCALES))
def test_calibrated_scales_are_pinned(name):
    releases = calibrate(PLANS[name], epsilon=1.0, delta=DELTA)
    assert [r.noise_scale for r in releases] == pytest.approx(PINNED_SCALES[name], rel=1e-9)


def test_the_tunings_coarse_search_lands_on_the_analytic_gaussian():
    # One Gaussian release alone at (1, 1e-6): its exact sigma is 4.225 per unit
    # sensitivity (analytic Gaussian, Balle & Wang). The unverified search aims at a
    # PLD epsilon in [0.993, 0.999] of the target, so at discretization 1e-2 (the
    # tuning's candidates) sigma lies a little above 4.225, within 1 %, as at 1e-3.
    plan = [PlannedRelease("one", "gaussian", 2.0, 1.0)]
    for discretization in (1e-3, 1e-2):
        (release,) = calibrate(plan, epsilon=1.0, delta=DELTA, verify=False,
                               search_discretization=discretization)
        assert 4.225 * 2.0 <= release.noise_scale <= 1.01 * 4.225 * 2.0


def test_the_tunings_wider_band_stays_within_its_bounds_and_a_bad_band_is_refused():
    # The tuning's band (search.SEARCH_BAND, 0.985-1.0 of the target): one Gaussian at
    # (1, 1e-6) lands at or above its exact sigma 4.225 per unit sensitivity (the coarse
    # PLD is pessimistic and the band ends at the target), and within 2 % of it.
    from fedkmeans.tuning.search import SEARCH_BAND

    plan = [PlannedRelease("one", "gaussian", 2.0, 1.0)]
    (release,) = calibrate(plan, epsilon=1.0, delta=DELTA, verify=False,
                           search_discretization=1e-2, search_band=SEARCH_BAND)
    assert 4.225 * 2.0 <= release.noise_scale <= 1.02 * 4.225 * 2.0
    for band in ((0.99, 1.01), (0.999, 0.99), (0.0, 0.5)):
        with pytest.raises(ValueError, match="search_band"):
            calibrate(plan, epsilon=1.0, delta=DELTA, verify=False, search_band=band)
