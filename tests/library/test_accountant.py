import json
import math

import dp_accounting
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy.stats import norm

from fedkmeans.privacy.accountant import PrivacyLedger, Release, gaussian_epsilon

DELTA = 1e-6


def _acc(*releases):
    acc = PrivacyLedger()
    for r in releases:
        acc.record(r)
    return acc


def test_gaussian_epsilon_solves_the_delta_equation():
    for z in (0.5, 1.0, 4.0, 10.0):
        eps = gaussian_epsilon(z, DELTA)
        # Balle & Wang delta(eps), evaluated naively with scipy.stats.norm
        d = norm.cdf(0.5 / z - eps * z) - math.exp(eps) * norm.cdf(-0.5 / z - eps * z)
        assert d == pytest.approx(DELTA, rel=1e-5)
    # docs/facts.md, "Analytic Gaussian values": sigma 4.225 <-> eps 1, 8.058 <-> eps 0.5
    assert gaussian_epsilon(4.225, DELTA) == pytest.approx(1.0, abs=1e-3)
    assert gaussian_epsilon(8.058, DELTA) == pytest.approx(0.5, abs=1e-3)
    assert gaussian_epsilon(1e4, 0.5) == 0.0


@pytest.mark.slow
def test_composed_gaussians_equal_z_eff():
    zs = [2.0, 3.0, 5.0, 1.5]
    sens = [1.7, 121.0, 1.0, 11.0]
    acc = _acc(
        *[
            Release(f"s{i}", "gaussian", s, s * z)
            for i, (s, z) in enumerate(zip(sens, zs, strict=True))
        ]
    )
    z_eff = sum(z**-2 for z in zs) ** -0.5
    expected = gaussian_epsilon(z_eff, DELTA)
    assert expected == pytest.approx(4.4428, abs=1e-3)
    assert acc.get_epsilon(DELTA) == pytest.approx(expected, abs=1e-3)
    # same numbers when two of them form one (unsampled) group
    grouped = _acc(
        Release("a", "gaussian", 1.0, 2.0),
        Release("b", "gaussian", 1.0, 3.0, group="g"),
        Release("c", "gaussian", 1.0, 5.0, group="g"),
        Release("d", "gaussian", 1.0, 1.5),
    )
    assert grouped.get_epsilon(DELTA) == pytest.approx(expected, abs=1e-3)


def test_single_gaussian_matches_closed_form():
    acc = _acc(Release("s", "gaussian", 2.0, 2.0 * 4.225))
    assert acc.get_epsilon(DELTA) == pytest.approx(gaussian_epsilon(4.225, DELTA), abs=1e-3)


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
def test_single_laplace(eps):
    acc = _acc(Release("counts", "laplace", 2.0, 2.0 / eps))
    got = acc.get_epsilon(DELTA)
    assert got <= eps + 1e-4  # pure eps-DP; pessimistic rounding at most one bin
    assert got == pytest.approx(eps, abs=1e-2)


@pytest.mark.slow
def test_sampled_joint_group_is_one_gaussian_with_z_eff():
    q, z_s, z_c = 0.01, 0.9, 1.2
    acc = _acc(
        Release("lloyd/sums", "gaussian", 11.0, 11.0 * z_s, q, "lloyd-0"),
        Release("lloyd/counts", "gaussian", 1.0, 1.0 * z_c, q, "lloyd-0"),
    )
    z_eff = (z_s**-2 + z_c**-2) ** -0.5
    expected = pld_lib.from_gaussian_mechanism(
        z_eff, sampling_prob=q, value_discretization_interval=1e-4
    ).get_epsilon_for_delta(DELTA)
    assert acc.get_epsilon(DELTA) == pytest.approx(expected, abs=1e-3)
    assert expected == pytest.approx(1.3413, abs=1e-3)
    # the subsampling trap: as independently sampled releases it would look much smaller
    separate = _acc(
        Release("lloyd/sums", "gaussian", 11.0, 11.0 * z_s, q),
        Release("lloyd/counts", "gaussian", 1.0, 1.0 * z_c, q),
    )
    assert separate.get_epsilon(DELTA) < 0.5 * expected


def test_laplace_in_sampled_multi_release_group_raises():
    acc = PrivacyLedger()
    acc.record(Release("lloyd/sums", "gaussian", 11.0, 10.0, 0.01, "lloyd-0"))
    with pytest.raises(ValueError, match="subsampling trap"):
        acc.record(Release("lloyd/counts", "laplace", 1.0, 0.5, 0.01, "lloyd-0"))
    assert len(acc.releases) == 1  # the bad release was not recorded
    # a single sampled Laplace release is fine
    single = _acc(Release("hist", "laplace", 1.0, 1.0, 0.01))
    assert 0.0 < single.get_epsilon(DELTA) < 1.0


def test_group_must_share_sampling_rate():
    acc = PrivacyLedger()
    acc.record(Release("a", "gaussian", 1.0, 1.0, 0.5, "g"))
    with pytest.raises(ValueError, match="sampling_rate"):
        acc.record(Release("b", "gaussian", 1.0, 1.0, 0.25, "g"))


def test_unsampled_group_with_laplace_composes():
    acc = _acc(
        Release("sums", "gaussian", 1.0, 3.0, group="g"),
        Release("counts", "laplace", 1.0, 2.0, group="g"),
    )
    separate = _acc(Release("sums", "gaussian", 1.0, 3.0), Release("counts", "laplace", 1.0, 2.0))
    assert acc.get_epsilon(DELTA) == pytest.approx(separate.get_epsilon(DELTA), abs=1e-9)
    alone = gaussian_epsilon(3.0, DELTA)
    assert alone < acc.get_epsilon(DELTA) < alone + 0.5


def _unmerged_epsilon(acc, discretization=1e-4):
    """dp_accounting's own composition of the ledger's event: one PLD per release."""
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=discretization)
    pld.compose(acc.dp_event())
    return pld.get_epsilon(DELTA)


def test_unsampled_gaussians_are_one_pld_between_exact_and_unmerged():
    # z = 2, 2 (one group) and 1 (alone): z_eff = (1/4 + 1/4 + 1)^(-1/2) = 0.8165
    acc = _acc(
        Release("lloyd/sums", "gaussian", 3.0, 6.0, group="lloyd-1"),
        Release("lloyd/counts", "gaussian", 1.0, 2.0, group="lloyd-1"),
        Release("init-1", "gaussian", 5.0, 5.0),
    )
    z_eff = 1.5**-0.5
    assert z_eff == pytest.approx(0.81650, abs=1e-5)
    one = pld_lib.from_gaussian_mechanism(z_eff, value_discretization_interval=1e-4)
    assert acc.get_epsilon(DELTA) == pytest.approx(one.get_epsilon_for_delta(DELTA), rel=1e-9)
    exact = gaussian_epsilon(z_eff, DELTA)  # Balle & Wang, no discretisation
    unmerged = _unmerged_epsilon(acc)
    assert exact <= acc.get_epsilon(DELTA) <= unmerged  # a valid bound, never looser
    assert unmerged - acc.get_epsilon(DELTA) < 1e-4 * unmerged  # the same accountant
    # with Laplace releases beside them: one Gaussian PLD, then the Laplace one
    mixed = _acc(*acc.releases, Release("init-2", "laplace", 2.0, 4.0))
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dp_accounting.GaussianDpEvent(z_eff))
    pld.compose(dp_accounting.LaplaceDpEvent(2.0))
    assert mixed.get_epsilon(DELTA) == pytest.approx(pld.get_epsilon(DELTA), rel=1e-9)
    assert mixed.get_epsilon(DELTA) <= _unmerged_epsilon(mixed)


def test_sampled_groups_are_not_merged():
    # A Poisson-sampled round keeps its own (amplified) PLD; only the unsampled
    # Gaussian beside it is merged, so the result is dp_accounting's own composition.
    acc = _acc(
        Release("lloyd/sums", "gaussian", 11.0, 11.0 * 0.9, 0.01, "lloyd-0"),
        Release("lloyd/counts", "gaussian", 1.0, 1.2, 0.01, "lloyd-0"),
        Release("init-1", "gaussian", 1.0, 4.0),
    )
    assert acc.get_epsilon(DELTA, discretization=1e-3) == pytest.approx(
        _unmerged_epsilon(acc, 1e-3), rel=1e-9)  # the order of composition only


def test_get_delta_inverts_get_epsilon():
    acc = _acc(Release("a", "gaussian", 1.0, 3.0), Release("b", "laplace", 1.0, 2.0))
    epsilon = acc.get_epsilon(DELTA)
    assert acc.get_delta(epsilon) == pytest.approx(DELTA, rel=1e-2)
    assert acc.get_delta(epsilon + 0.5) < DELTA < acc.get_delta(epsilon - 0.5)
    assert PrivacyLedger().get_delta(1.0) == 0.0
    assert _acc(Release("a", "gaussian", 1.0, 0.0)).get_delta(1.0) == 1.0
    for bad in (-1.0, math.inf, math.nan, True):
        with pytest.raises(ValueError, match="epsilon"):
            acc.get_delta(bad)


def test_empty_and_noiseless():
    assert PrivacyLedger().get_epsilon(DELTA) == 0.0
    acc = _acc(Release("a", "gaussian", 1.0, 5.0), Release("b", "laplace", 1.0, 0.0))
    assert acc.get_epsilon(DELTA) == math.inf
    sampled = _acc(Release("a", "gaussian", 1.0, 0.0, 0.01))
    assert sampled.get_epsilon(DELTA) == math.inf


def test_empty_group_releases_are_separate_even_with_same_stage():
    q = 0.01
    merged = _acc(
        Release("lloyd", "gaussian", 1.0, 0.9, q, "r"),
        Release("lloyd", "gaussian", 1.0, 0.9, q, "r"),
    )
    separate = _acc(
        Release("lloyd", "gaussian", 1.0, 0.9, q), Release("lloyd", "gaussian", 1.0, 0.9, q)
    )
    coarse = dict(discretization=1e-3)
    assert separate.get_epsilon(DELTA, **coarse) < merged.get_epsilon(DELTA, **coarse)


def test_dp_event_structure():
    acc = _acc(
        Release("a", "gaussian", 2.0, 4.0),
        Release("b", "laplace", 1.0, 0.5, 0.1),
        Release("c", "gaussian", 1.0, 3.0, 0.1, "g"),
        Release("d", "gaussian", 1.0, 4.0, 0.1, "g"),
    )
    event = acc.dp_event()
    assert isinstance(event, dp_accounting.ComposedDpEvent)
    a, b, g = event.events
    assert a == dp_accounting.GaussianDpEvent(2.0)
    assert b == dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.LaplaceDpEvent(0.5))
    assert g.sampling_probability == 0.1
    assert g.event.noise_multiplier == pytest.approx(2.4)  # (3^-2 + 4^-2)^-1/2 = 12/5


def test_state_dict_round_trip():
    acc = _acc(
        Release("init/step1", "gaussian", 121.0, 500.0),
        Release("init/step2", "laplace", 1.0, 3.0),
        Release("lloyd/sums", "gaussian", 11.0, 30.0, 0.05, "lloyd-0"),
        Release("lloyd/counts", "gaussian", 1.0, 4.0, 0.05, "lloyd-0"),
    )
    state = json.loads(json.dumps(acc.state_dict()))
    back = PrivacyLedger.from_state_dict(state)
    assert back.releases == acc.releases
    coarse = dict(discretization=1e-3)
    assert back.get_epsilon(DELTA, **coarse) == acc.get_epsilon(DELTA, **coarse)
    assert state["releases"][2] == {
        "stage": "lloyd/sums",
        "mechanism": "gaussian",
        "sensitivity": 11.0,
        "noise_scale": 30.0,
        "sampling_rate": 0.05,
        "group": "lloyd-0",
    }
    with pytest.raises(ValueError, match="version"):
        PrivacyLedger.from_state_dict({"releases": []})


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(stage=""), "stage"),
        (dict(mechanism="exponential"), "mechanism"),
        (dict(sensitivity=0.0), "sensitivity"),
        (dict(sensitivity=math.inf), "sensitivity"),
        (dict(noise_scale=-1.0), "noise_scale"),
        (dict(noise_scale=math.nan), "noise_scale"),
        (dict(sampling_rate=0.0), "sampling_rate"),
        (dict(sampling_rate=1.5), "sampling_rate"),
        (dict(group=3), "group"),
    ],
)
def test_release_validation(kwargs, field):
    base = dict(stage="s", mechanism="gaussian", sensitivity=1.0, noise_scale=1.0)
    with pytest.raises(ValueError, match=field):
        Release(**{**base, **kwargs})


def test_get_epsilon_validation():
    acc = _acc(Release("a", "gaussian", 1.0, 1.0))
    for delta in (0.0, 1.0, -1e-6):
        with pytest.raises(ValueError, match="delta"):
            acc.get_epsilon(delta)
    with pytest.raises(ValueError, match="discretization"):
        acc.get_epsilon(DELTA, discretization=0.0)
    with pytest.raises(ValueError, match="noise_multiplier"):
        gaussian_epsilon(0.0, DELTA)
