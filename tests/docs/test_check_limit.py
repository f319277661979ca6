"""benchmarks/check_limit.py: the oracle margin and the share, by hand."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import check_limit  # noqa: E402


def test_oracle_margin_at_data_point_level_by_hand():
    # 99 points each 1 cheaper under A, one point 100 dearer: true sum -99 + 100 = +1.
    # With no tolerance no clip may move a term: tau = 100, sum = -0.99 + 1 = 0.01 > 0,
    # so no negative margin is allowed (the oracle must not turn B's gain into A's)
    diff = np.array([-1.0] * 99 + [100.0])
    owner = np.zeros(100, dtype=int)
    margin, clip = check_limit.oracle_margin(diff, owner, 1, unit=1.0, bound=None,
                                             tolerance=0.0)
    assert margin == 0.0 and math.isnan(clip)
    # 100 points each 1 cheaper under A: tau = 1 moves nothing; sum -100 in units of
    # tau, one point moves it by 1, so the noise of a lone release is unit / sqrt 2
    margin, clip = check_limit.oracle_margin(-np.ones(100), np.zeros(100, dtype=int), 1,
                                             unit=1.0, bound=None, tolerance=0.0)
    assert clip == pytest.approx(1.0)
    assert margin == pytest.approx(-100.0 * math.sqrt(2.0))


def test_oracle_margin_at_client_level_uses_the_largest_clients_sum():
    # two clients of 10 points each 1 cheaper under A: each client's sum is -10 in units
    # of tau = 1; the run's bound 16 (noise sqrt 2 * 16 * unit) becomes 10
    diff = -np.ones(20)
    owner = np.repeat([0, 1], 10)
    margin, _ = check_limit.oracle_margin(diff, owner, 2, unit=2.0, bound=16.0,
                                          tolerance=0.0)
    assert margin == pytest.approx(-20.0 * math.sqrt(2.0) * 16.0 / (2.0 * 10.0))


def test_share_for_ninety_percent():
    ratios = {0.1: 1.0, 0.2: 2.0, 0.5: 5.0}
    # z + z_0.9 = 2.926: a margin of -1 needs 2.926 x less noise, first at share 0.5
    assert check_limit.share_for(-1.0, ratios) == 0.5
    assert check_limit.share_for(-3.0, ratios) == 0.1
    assert math.isinf(check_limit.share_for(-0.1, ratios))
    assert math.isinf(check_limit.share_for(0.5, ratios))


def test_a_larger_share_has_less_noise():
    ratios = check_limit.noise_ratio(1.0, "client")
    assert ratios[0.1] == pytest.approx(1.0)
    values = [ratios[s] for s in check_limit.SHARES]
    assert values == sorted(values) and values[-1] > 5.0
