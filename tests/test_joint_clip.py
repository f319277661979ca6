"""The data-point server clip of a client's cluster sums and counts: one factor, no bias."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedkmeans.config import parse_config
from fedkmeans.privacy.budget import joint_radius
from fedkmeans.privacy.clipping import joint_clip_factors
from fedkmeans.server.aggregation import Fold, RunningSums, folded_sum
from fedkmeans.stages import statistic_bounds


def test_joint_factor_by_hand():
    # client 0: sums ((3, 4),) -> |S| = 5, counts (12,); whitened with scales (1, 4):
    # |(3, 4, 3)| = sqrt(34); radius 3 -> factor 3 / sqrt(34). Client 1 is inside.
    sums = np.array([[[3.0, 4.0]], [[0.3, 0.4]]])
    counts = np.array([[12.0], [1.0]])
    factors, (s, c) = joint_clip_factors([sums, counts], [1.0, 4.0], 3.0, [False, True])
    assert factors == pytest.approx([3 / math.sqrt(34), 1.0], rel=1e-15)
    assert factors[1] == 1.0  # exactly: an unclipped client stays bit-exact
    np.testing.assert_array_equal(s, sums)


def test_negative_counts_are_set_to_zero_before_the_clip_and_inputs_untouched():
    counts = np.array([[-5.0, 2.0]])
    sums = np.zeros((1, 2, 1))
    factors, (_, c) = joint_clip_factors([sums, counts], [1.0, 1.0], 1.0, [False, True])
    np.testing.assert_array_equal(c, [[0.0, 2.0]])
    assert factors == pytest.approx([0.5])
    assert counts[0, 0] == -5.0


def _datapoint_folds(n_max: int, radius_data: float, sigma_s: float, sigma_c: float):
    config = parse_config({"privacy.data-radius": radius_data,
                           "privacy.max-points-per-client": n_max})
    bounds = statistic_bounds(config.privacy)
    assert bounds["sums"].joint == bounds["counts"].joint == "clusters"
    radius = joint_radius([bounds["sums"], bounds["counts"]], [sigma_s, sigma_c])
    return {"sums": Fold(radius, "l2", "clusters", sigma_s),
            "counts": Fold(radius, "l1_nonnegative", "clusters", sigma_c)}


def test_a_client_above_the_cap_keeps_its_means_where_separate_clips_move_them():
    """The issue's bias: a client 4 x the cap, its points spread over two clusters."""
    rng = np.random.default_rng(0)
    n_max, delta = 50, 1.0
    points = rng.normal(size=(200, 3))
    points *= np.minimum(1.0, delta / np.linalg.norm(points, axis=1))[:, None]
    labels = (points[:, 0] > 0).astype(int)
    sums = np.stack([points[labels == r].sum(axis=0) for r in (0, 1)])[None]
    counts = np.bincount(labels, minlength=2).astype(float)[None]
    folds = _datapoint_folds(n_max, delta, sigma_s=3.0, sigma_c=2.0)
    running = RunningSums({"sums": (2, 3), "counts": (2,)}, folds)
    running.add({"sums": sums, "counts": counts})
    got = running.as_rows()
    np.testing.assert_allclose(got["sums"][0] / got["counts"][0][:, None],
                               sums[0] / counts[0][:, None], rtol=1e-12)
    assert got["counts"][0].sum() < counts.sum()  # it was clipped: weight, not bias
    # the stacked path clips the same way
    np.testing.assert_allclose(folded_sum({"sums": sums, "counts": counts}, "sums", folds),
                               got["sums"][0], rtol=1e-12)
    # the old separate clips (sums to n_max Delta in l2, counts to n_max in l1) move them
    separate_sums = sums[0] * min(1.0, n_max * delta / np.linalg.norm(sums))
    separate_counts = counts[0] * min(1.0, n_max / counts.sum())
    moved = separate_sums / separate_counts[:, None] - sums[0] / counts[0][:, None]
    assert np.abs(moved).max() > 0.1


def test_a_client_within_the_cap_is_not_scaled():
    folds = _datapoint_folds(10, 2.0, sigma_s=1.0, sigma_c=5.0)
    sums = np.full((1, 1, 4), 2.0 / 2.0 * 10 / 4)  # 10 points of norm <= 2, one cluster
    counts = np.array([[10.0]])
    assert np.linalg.norm(sums) <= 10 * 2.0
    np.testing.assert_array_equal(folded_sum({"sums": sums, "counts": counts}, "counts", folds),
                                  counts[0])


def test_the_joint_clip_is_one_lipschitz_in_the_noise_metric():
    """|clip(x + v) - clip(x)|_w <= |v|_w over random clients at and above the cap."""
    rng = np.random.default_rng(1)
    scales = [2.0, 0.5]
    for _ in range(500):
        n = rng.integers(1, 40)
        sums = rng.normal(size=(1, 3, 2)) * n
        counts = rng.uniform(0, n, size=(1, 3))
        v_sums = rng.normal(size=(1, 3, 2))
        v_counts = np.zeros((1, 3))
        v_counts[0, rng.integers(3)] = 1.0
        bound = float(rng.uniform(1, 30))
        out = []
        for s, c in ((sums, counts), (sums + v_sums, counts + v_counts)):
            f, (ps, pc) = joint_clip_factors([s, c], scales, bound, [False, True])
            out.append(np.concatenate([(ps * f[0]).ravel() / scales[0],
                                       (pc * f[0]).ravel() / scales[1]]))
        moved = np.linalg.norm(out[1] - out[0])
        step = math.hypot(np.linalg.norm(v_sums) / scales[0], 1 / scales[1])
        assert moved <= step * (1 + 1e-12)
