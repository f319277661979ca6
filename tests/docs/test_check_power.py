"""benchmarks/check_power.py: the replay of the final choice on captured sums."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import check_power  # noqa: E402


def _row(wide, narrow, a_over_b=0.9):
    return {"set": "s", "seed": 0, "level": "client", "epsilon": 1.0, "wide_sum": wide,
            "narrow_sum": narrow, "unit": 1.0, "reach_sigmas": 1e6, "a_over_b": a_over_b,
            "chosen": ""}


def test_two_half_share_releases_had_more_noise_per_coordinate():
    # the calibration splits epsilon linearly in the weights: a half-share release has
    # about twice the noise of the whole share's, sqrt 2 of it back from the vector's
    # sensitivity; the composition's rescaling leaves 1.34
    assert check_power.split_factor(1.0, "client") == pytest.approx(1.34, abs=0.01)
    assert check_power.split_factor(1.0, "datapoint") == pytest.approx(1.34, abs=0.01)


def test_the_replay_by_hand():
    rows = check_power.replay([_row(-5.0, -5.0), _row(0.0, 0.0, 1.01)], draws=20000)
    strong, null = rows
    # both sums at -5 sigma: P(N(-5, 1) < -1.645)^2 = 0.9996^2 at the release's noise;
    # at 1.34 x the noise each is N(-3.72, 1): P = 0.981 per sum, about 0.963 for both
    assert strong["p_one"] == pytest.approx(0.9992, abs=0.003)
    assert 0.95 < strong["p_two"] < 0.98
    # nothing to choose: both below -z with probability 0.05^2, plus the strong branch
    # (P(N < -3.29) = 0.0005): never near the 5 % bound
    assert null["p_one"] < 0.01 and null["p_two"] < 0.01
    table = check_power.summary(rows, "# t")
    # one gain (A = 0.9 B) and one dearer run (A = 1.01 B), each counted once
    assert table[-1].startswith("| client | 1 | 2 | 1, ") and "| 1, " in table[-1]
