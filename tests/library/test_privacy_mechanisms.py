import math

import numpy as np
import pytest

from fedkmeans.privacy.mechanisms import GaussianMechanism, LaplaceMechanism

N = 200_000


def test_zero_noise_returns_exact_copy():
    x = np.array([[1.5, -2.0], [3.0, 4.0]])
    rng = np.random.default_rng(0)
    for mech in (GaussianMechanism(1.0, 0.0), LaplaceMechanism(1.0, 0.0)):
        out = mech.add_noise(x, rng)
        np.testing.assert_array_equal(out, x)
        assert not np.shares_memory(out, x)
    out = GaussianMechanism(1.0, 0.0).add_symmetric_noise(x, rng)
    np.testing.assert_array_equal(out, x)


def test_gaussian_std_and_input_untouched():
    x = np.full(N, 5.0)
    out = GaussianMechanism(2.0, 3.0).add_noise(x, np.random.default_rng(1))
    np.testing.assert_array_equal(x, 5.0)
    assert abs(np.std(out - 5.0) / 3.0 - 1.0) < 0.01
    assert abs(np.mean(out - 5.0)) < 4 * 3.0 / math.sqrt(N)


def test_laplace_std_and_grid():
    b = 0.7
    mech = LaplaceMechanism(1.0, b)
    out = mech.add_noise(np.zeros(N), np.random.default_rng(2))
    assert abs(np.std(out) / (math.sqrt(2) * b) - 1.0) < 0.01
    # Laplace: mean absolute deviation is b
    assert abs(np.mean(np.abs(out)) / b - 1.0) < 0.01
    # every release lies on the data-independent lattice gamma Z, gamma = 2**(-1 - 32)
    assert mech.granularity == 2.0**-33
    levels = out / mech.granularity
    np.testing.assert_array_equal(levels, np.round(levels))


@pytest.mark.parametrize("mechanism, sensitivity, scale, gamma", [
    (LaplaceMechanism, 50.0, 125.7, 2.0**-26),  # gamma = 2**(6 - 32)
    (GaussianMechanism, 11.0, 44.3, 2.0**-27),  # gamma = 2**(5 - 32)
])
def test_release_is_a_shift_of_integer_noise_on_the_grid(mechanism, sensitivity, scale, gamma):
    mech = mechanism(sensitivity, scale)
    assert mech.granularity == gamma
    value = np.array([1234.5 + gamma / 3, -7.0, 0.0])
    a = mech.add_noise(value, np.random.default_rng(5))
    b = mech.add_noise(value + sensitivity, np.random.default_rng(5))  # neighbouring world
    # same noise draws: the outputs differ by the rounded shift, exactly, on the grid
    np.testing.assert_array_equal((b - a) / gamma, np.full(3, sensitivity / gamma))
    assert np.all((a / gamma) == np.round(a / gamma))
    huge = mech.add_noise(np.array([1e300]), np.random.default_rng(0))
    assert np.isfinite(huge).all() and huge[0] <= 2.0**61 * gamma * (1 + 1e-9) + 1e4 * scale
    # exact copy without noise (epsilon = inf reproduces the non-private algorithm)
    exact = mechanism(1.0, 0.0).add_noise(value, np.random.default_rng(0))
    np.testing.assert_array_equal(exact, value)


def test_symmetric_gaussian_release_is_on_the_grid():
    mech = GaussianMechanism(11.0, 44.3)
    sym = mech.add_symmetric_noise(np.full((4, 4), 0.1), np.random.default_rng(1))
    np.testing.assert_array_equal(sym, sym.T)
    assert np.all((sym / mech.granularity) == np.round(sym / mech.granularity))


def test_symmetric_noise():
    d, sigma = 40, 2.5
    m = np.arange(d * d, dtype=float).reshape(d, d)
    m = m + m.T
    before = m.copy()
    rng = np.random.default_rng(3)
    draws = []
    for _ in range(250):  # 250 * 820 = 205k upper-triangle draws
        out = GaussianMechanism(1.0, sigma).add_symmetric_noise(m, rng)
        noise = out - m
        np.testing.assert_array_equal(noise, noise.T)
        draws.append(noise[np.triu_indices(d)])
    np.testing.assert_array_equal(m, before)
    draws = np.concatenate(draws)
    assert abs(np.std(draws) / sigma - 1.0) < 0.01
    # diagonal and off-diagonal both have variance sigma^2 (not 2 sigma^2 or sigma^2 / 2)
    noise = GaussianMechanism(1.0, sigma).add_symmetric_noise(np.zeros((600, 600)), rng)
    assert abs(np.std(np.diag(noise)) / sigma - 1.0) < 0.1
    assert abs(np.std(noise[np.triu_indices(600, 1)]) / sigma - 1.0) < 0.01


def test_same_seed_same_noise():
    x = np.zeros((4, 3))
    g = GaussianMechanism(1.0, 1.0)
    lap = LaplaceMechanism(1.0, 1.0)
    a = g.add_noise(x, np.random.default_rng(7))
    b = g.add_noise(x, np.random.default_rng(7))
    c = g.add_noise(x, np.random.default_rng(8))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    np.testing.assert_array_equal(
        lap.add_noise(x, np.random.default_rng(7)), lap.add_noise(x, np.random.default_rng(7))
    )
    s1 = g.add_symmetric_noise(np.zeros((3, 3)), np.random.default_rng(7))
    s2 = g.add_symmetric_noise(np.zeros((3, 3)), np.random.default_rng(7))
    np.testing.assert_array_equal(s1, s2)


def test_noise_multiplier():
    g = GaussianMechanism.from_noise_multiplier(4.0, sensitivity=121.0)
    assert g.noise_scale == pytest.approx(484.0)
    assert g.noise_multiplier == pytest.approx(4.0)
    assert LaplaceMechanism(2.0, 1.0).noise_multiplier == 0.5


@pytest.mark.parametrize("cls", [GaussianMechanism, LaplaceMechanism])
@pytest.mark.parametrize(
    "sens,scale,field",
    [
        (0.0, 1.0, "sensitivity"),
        (-1.0, 1.0, "sensitivity"),
        (math.inf, 1.0, "sensitivity"),
        (math.nan, 1.0, "sensitivity"),
        (1.0, -0.1, "noise_scale"),
        (1.0, math.inf, "noise_scale"),
        (1.0, math.nan, "noise_scale"),
    ],
)
def test_validation_mentions_field(cls, sens, scale, field):
    with pytest.raises(ValueError, match=field):
        cls(sens, scale)


def test_bad_rng_and_shape():
    with pytest.raises(TypeError, match="rng"):
        GaussianMechanism(1.0, 1.0).add_noise(np.zeros(2), np.random.RandomState(0))
    with pytest.raises(ValueError, match="square"):
        GaussianMechanism(1.0, 1.0).add_symmetric_noise(np.zeros((2, 3)), np.random.default_rng(0))
    with pytest.raises(ValueError, match="noise_multiplier"):
        GaussianMechanism.from_noise_multiplier(-1.0, 1.0)
