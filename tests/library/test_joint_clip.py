"""The data-point server clip of a client's cluster sums and counts: one factor, no bias."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import SMALL

from fedkmeans.config import parse_protocol, protocol_keys
from fedkmeans.node.secagg import SecAggEncoding
from fedkmeans.privacy.budget import joint_radius
from fedkmeans.privacy.clipping import clip_stacked, joint_clip_factors
from fedkmeans.server.aggregation import Fold, RunningSums, folded_sum
from fedkmeans.server.releaser import Releaser
from fedkmeans.stages import statistic_bounds

#: SMALL's protocol keys (its data.* keys are the harness's data set).
SMALL_PROTOCOL = {k: v for k, v in SMALL.items() if k in protocol_keys()}


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
    config = parse_protocol({"privacy.data-radius": radius_data,
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


# -- one joint clip on every path (issue 49) ---------------------------------------------
# At data-point level one point moves the clipped pair by at most L = sqrt((Delta /
# sigma_s)^2 + (1 / sigma_c)^2) noise standard deviations (fedkmeans.privacy.budget). The
# same test drives the server's fold (Releaser.folds, folded_sum) and a node's clip
# before its noise shares (SecAggEncoding.clipped, whose share scales are the releases'
# sigma over sqrt(n_min)); the node's former second clip (the counts in l1 to R sigma_c)
# breaks the bound.
DELTA, B, K, D = 4.0, 40, 4, 8  # SMALL: data-radius 4, max-points-per-client 40, k = d/2
SIGMA = {"sums": 30.0, "counts": 7.0}
N_MIN = 12  # a SecAgg round of 12 asked clients: shares sigma / sqrt(12)


def _central(rows):
    config = parse_protocol(SMALL_PROTOCOL)
    releases = {f"lloyds-1/{n}": SimpleNamespace(mechanism="gaussian", noise_scale=s)
                for n, s in SIGMA.items()}
    folds = Releaser(config.privacy, config.is_private, releases).folds("lloyds-1", rows)
    return {n: folded_sum(rows, n, folds) for n in rows}


def _node(rows, *, second_l1_clip=False):
    privacy = parse_protocol(SMALL_PROTOCOL).privacy
    shares = {n: s / math.sqrt(N_MIN) for n, s in SIGMA.items()}
    clipped = SecAggEncoding(privacy).clipped(rows, shares)
    if second_l1_clip:  # what the node did before issue 49, after the projection
        bounds = statistic_bounds(privacy)
        radius = math.hypot(bounds["sums"].server_bound / SIGMA["sums"],
                            bounds["counts"].server_bound / SIGMA["counts"])
        clipped["counts"] = clip_stacked(clipped["counts"], radius * SIGMA["counts"],
                                         "l1_nonnegative")
    return {n: v.sum(axis=0) for n, v in clipped.items()}


def _client(points, centers):
    """One client's cluster sums and counts (nearest center), rows of shape (1, ...)."""
    labels = np.argmin(((points[:, None, :] - centers[None]) ** 2).sum(-1), axis=1)
    sums = np.zeros((K, D))
    np.add.at(sums, labels, points)
    return sums[None], np.bincount(labels, minlength=K).astype(float)[None]


def _whitened_change(a, b):
    return math.hypot(np.linalg.norm(a["sums"] - b["sums"]) / SIGMA["sums"],
                      np.linalg.norm(a["counts"] - b["counts"]) / SIGMA["counts"])


L = math.hypot(DELTA / SIGMA["sums"], 1.0 / SIGMA["counts"])


def _neighbours(rng, centers):
    n = int(rng.choice([1, B // 2, B, 2 * B, 4 * B, 8 * B, 16 * B]))
    scale = rng.choice([0.0, 0.01, 0.1, 1.0])
    points = rng.normal(size=(n, D))
    points *= DELTA * scale * rng.uniform(0, 1, (n, 1)) / np.linalg.norm(points, axis=1,
                                                                          keepdims=True)
    new = rng.normal(size=(1, D))
    new *= DELTA / np.linalg.norm(new)
    out = dict(zip(("sums", "counts"), _client(points, centers), strict=True))
    into = dict(zip(("sums", "counts"), _client(np.vstack([points, new]), centers),
                    strict=True))
    return out, into


@pytest.mark.parametrize("path", [_central, _node])
def test_one_point_moves_the_clipped_pair_by_at_most_L_on_both_paths(path):
    rng = np.random.default_rng(49)
    centers = np.eye(K, D) * DELTA
    worst = 0.0
    for _ in range(400):
        out, into = _neighbours(rng, centers)
        worst = max(worst, _whitened_change(path(out), path(into)) / L)
    assert worst <= 1.0 + 1e-9
    # the random clients reach the bound's neighbourhood (the test is not vacuous)
    assert worst >= 0.9


def test_the_node_and_the_server_clip_alike_and_a_second_l1_clip_breaks_the_bound():
    """Hand-built: ``ceil(R sigma_c)`` points at the origin (cluster 0: ties go to the
    first center) gain one at ``Delta e_1`` (cluster 1). The projection moves the pair
    by at most L; clipping the counts again in l1 moves them by about sqrt(2) ``R
    sigma_c / (n + 1)`` in l2, past the bound."""
    bounds = statistic_bounds(parse_protocol(SMALL_PROTOCOL).privacy)
    radius = math.hypot(bounds["sums"].server_bound / SIGMA["sums"],
                        bounds["counts"].server_bound / SIGMA["counts"])
    n = math.ceil(radius * SIGMA["counts"])
    centers = np.eye(K, D) * DELTA
    points = np.zeros((n, D))
    out = dict(zip(("sums", "counts"), _client(points, centers), strict=True))
    into = dict(zip(("sums", "counts"), _client(np.vstack([points, centers[1:2]]), centers),
                    strict=True))
    central, node = (_whitened_change(f(out), f(into)) for f in (_central, _node))
    assert node == pytest.approx(central, rel=1e-12) and central <= L * (1 + 1e-12)
    legacy = _whitened_change(_node(out, second_l1_clip=True), _node(into, second_l1_clip=True))
    assert legacy > 1.2 * L
