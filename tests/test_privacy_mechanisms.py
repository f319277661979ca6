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


def _laplace_cdf(t, b):
    return 0.5 * math.exp(t / b) if t < 0 else 1 - 0.5 * math.exp(-t / b)


def test_laplace_is_snapped_to_a_power_of_two_grid_with_the_exact_law():
    b = 0.7  # grid step: the smallest power of two >= b (1 + 1.9e-6) -> 1.0
    mech = LaplaceMechanism(1.0, b)
    assert mech.grid_step == 1.0
    out = mech.add_noise(np.full(N, 3.25), np.random.default_rng(2))
    np.testing.assert_array_equal(out, np.round(out))  # every release is on the grid
    # P(release = k) = P(k - 1/2 <= 3.25 + Z < k + 1/2), Z ~ Laplace(0, b)
    for k in (2, 3, 4, 5):
        p = _laplace_cdf(k + 0.5 - 3.25, b) - _laplace_cdf(k - 0.5 - 3.25, b)
        assert abs(np.mean(out == k) - p) < 4 * math.sqrt(p * (1 - p) / N), k
    # unbiased on the grid's centre: mean of round(Z) is 0
    centred = mech.add_noise(np.zeros(N), np.random.default_rng(3))
    assert abs(np.mean(centred)) < 4 * 1.1 * math.sqrt(2) * b / math.sqrt(N)


def test_laplace_grid_scales_with_the_sensitivity_and_clamps():
    mech = LaplaceMechanism(3.0, 5.0)  # unit scale 5/3 -> grid 2 units = 6.0
    assert mech.grid_step == 6.0
    out = mech.add_noise(np.array([1e20, -1e20, 10.0]), np.random.default_rng(0))
    np.testing.assert_array_equal(out[:2], [2.0**30 * 3.0, -(2.0**30) * 3.0])
    assert out[2] % 6.0 == 0.0
    with pytest.raises(ValueError, match="noise_scale / sensitivity"):
        LaplaceMechanism(1.0, 1e-6)


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
