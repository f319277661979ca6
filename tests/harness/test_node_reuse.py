"""The estimate round's pass is reused: point norms for the clip, X^T X rows for step 1."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

from fedkmeans import client_app
from fedkmeans.data.transform import PublicTransform
from fedkmeans.experiment.cli import run_flat
from fedkmeans.experiment.config import parse_config
from fedkmeans.node import NodeData
from fedkmeans.privacy.clipping import row_norms

CLIENT = {"privacy.level": "client", "privacy.clip-covariance": 1e6, "privacy.clip-sums": 100.0,
          "privacy.clip-counts": 10.0, "data.dim": 2}


def _node(points: dict, flat: dict = CLIENT) -> NodeData:
    ids = np.array(sorted(points))
    return NodeData(parse_config(flat), ids, {c: np.array(x, float) for c, x in points.items()},
                    {c: None for c in points})


DATAPOINT = {"data.dim": 2}
POINTS = {0: [[3, 4], [0, 1]], 1: [[6, 8], [0, 0]], 2: [[1, 0], [0, 2]]}


def test_step_one_takes_the_estimate_round_s_rows_of_the_clients_the_clip_left_alone():
    node = _node(POINTS)
    node.arithmetic.estimates([0, 1, 2])
    np.testing.assert_array_equal(node.memory.norms, [5, 1, 10, 0, 1, 2])  # kept from that pass
    assert len(node.reusable) == 3
    node.clip_to(5.0)  # only client 1's point (norm 10) moves, to (3, 4)
    assert node.clipped_clients == {1} and len(node.reusable) == 2
    np.testing.assert_array_equal(node.raw_norms[1], [10, 0])
    rows = node.arithmetic.covariance_triangles([0, 1, 2])["covariance"]
    # upper triangles (xx, xy, yy) of X^T X: 9+0, 12+0, 16+1; 9, 12, 16 after the clip; 1, 0, 4
    np.testing.assert_array_equal(rows, [[9, 12, 17], [9, 12, 16], [1, 0, 4]])
    assert len(node.reusable) == 0 and node.reusable.nbytes == 0
    fresh = _node(POINTS)
    fresh.clip_to(5.0)
    np.testing.assert_array_equal(
        fresh.arithmetic.covariance_triangles([0, 1, 2])["covariance"], rows)


def test_a_client_with_fewer_points_than_dimensions_is_normed_by_its_gram_and_not_kept():
    # X = [[1, 2, 2], [0, 0, 3]]: X X^T = [[9, 6], [6, 9]], X^T X = [[1, 2, 2], [2, 4, 4],
    # [2, 4, 13]]; both have squared Frobenius norm 81 + 36 + 36 + 81 = 1 + 3 * 4 + 2 * 4
    # + 2 * 16 + 16 + 169 = 234
    node = NodeData(parse_config({**CLIENT, "data.dim": 3}), np.array([0, 1]),
                    {0: np.array([[1., 2, 2], [0, 0, 3]]), 1: np.eye(3)}, {0: None, 1: None})
    moments = node.arithmetic._second_moment_norms([0, 1])
    assert moments[0] == pytest.approx(np.sqrt(234), rel=1e-15)
    assert moments[1] == pytest.approx(np.sqrt(3), rel=1e-15)  # X^T X = I, kept
    assert len(node.reusable) == 1
    rows = node.arithmetic.covariance_triangles([0, 1])["covariance"]
    np.testing.assert_array_equal(rows, [[1, 2, 2, 4, 4, 13], [1, 0, 0, 1, 0, 1]])


def test_a_later_stage_drops_rows_step_one_did_not_take():
    node = _node(POINTS)
    node.arithmetic.estimates([0, 1, 2])
    node.arithmetic.covariance_triangles([2])  # a sampled step 1 asks only client 2
    assert len(node.reusable) == 2 and node.reusable.nbytes > 0
    node.arithmetic.sums_counts([0, 1, 2], np.zeros((1, 2)))
    assert len(node.reusable) == 0
    assert node.nbytes == node.memory.stacked.nbytes + node.memory.norms.nbytes


def test_a_mixture_node_built_once_answers_step_one_as_one_loaded_clipped():
    flat = {"data.num-clients": 40, "data.points-per-client": 12, "data.dim": 4,
            "data.components": 3, "k": 3, "privacy.level": "client",
            "privacy.clip-covariance": 50.0}
    unclipped = NodeData.load(parse_config({**flat, "privacy.data-radius": "auto"}), 1, 2)
    ids = unclipped.client_ids.tolist()
    unclipped.arithmetic.estimates(ids)
    radius = float(np.quantile(unclipped.memory.norms, 0.98))  # a few clients' points outside
    config = parse_config({**flat, "privacy.data-radius": radius})
    unclipped.config = config
    unclipped.clip_to(radius)
    assert 0 < len(unclipped.clipped_clients) < len(ids)
    assert len(unclipped.reusable) == len(ids) - len(unclipped.clipped_clients)
    direct = NodeData.load(config, 1, 2)
    assert direct.clipped_clients == unclipped.clipped_clients
    np.testing.assert_array_equal(unclipped.arithmetic.covariance_triangles(ids)["covariance"],
                                  direct.arithmetic.covariance_triangles(ids)["covariance"])
    np.testing.assert_array_equal(unclipped.arithmetic.estimates(ids)["estimates"],
                                  direct.arithmetic.estimates(ids)["estimates"])


def test_the_memory_bound_drops_kept_rows_least_recently_used_node_first(monkeypatch):
    first, second = _node(POINTS), _node(POINTS)
    for node in (first, second):
        node.arithmetic.estimates([0, 1, 2])
    rows = first.reusable.nbytes
    points = first.nbytes - rows
    monkeypatch.setattr(client_app, "_NODES", OrderedDict([("a", first), ("b", second)]))
    monkeypatch.setattr(client_app, "_CURRENT", client_app._CurrentRun(budget=2 * points + rows))
    client_app.keep_within_budget()
    assert (len(first.reusable), len(second.reusable)) == (0, 3)
    monkeypatch.setattr(client_app, "_CURRENT", client_app._CurrentRun(budget=2 * points))
    client_app.keep_within_budget()  # the current node's rows too; no point is spilled
    assert len(second.reusable) == 0 and not first.memory.spilled and not second.memory.spilled


def test_a_client_level_run_gives_the_same_bits_whether_its_nodes_keep_rows_or_spill(tmp_path):
    flat = {"data.num-clients": 200, "data.points-per-client": 10, "data.dim": 6,
            "data.components": 3, "k": 3, "federation.num-nodes": 8,
            "privacy.level": "client", "privacy.reproducible-noise": True,
            "privacy.lloyds-steps": 1}
    held = run_flat({**flat, "output-dir": str(tmp_path / "held")})
    spilled = run_flat({**flat, "federation.node-cache-mb": 1e-4,
                        "output-dir": str(tmp_path / "spilled")})
    assert held["centers"] == spilled["centers"]
    assert held["privacy"]["releases"] == spilled["privacy"]["releases"]


@pytest.mark.parametrize("n, d", [(50, 100), (300, 12), (7, 30), (1, 5)])
def test_a_client_s_triangle_is_the_same_bits_in_any_batch(n, d):
    # The guarantee: a node layout never changes a release, so a client's row may not
    # depend on which clients share its batched product. Bits are compared only
    # between two calls of one code path on one machine; against an independent BLAS
    # routine (dsyrk) the comparison is to a tolerance, since kernels differ in the
    # last bits across CPUs (OpenBLAS's SkylakeX kernels do).
    from scipy.linalg import blas

    rng = np.random.default_rng(n)
    # every seventh client one point larger: runs of equal sizes and runs of one
    points = {c: rng.normal(size=(n + (c % 7 == 0), d)) * 10 for c in range(40)}
    node = NodeData(parse_config({"data.dim": d}), np.arange(40), points,
                    dict.fromkeys(points))
    runs = [(i, j) for i, j, _ in node.memory.equal_size_runs(list(range(40)), 32)]
    assert (1, 7) in runs and (0, 1) in runs  # batched and single clients both
    batched = node.arithmetic.raw_covariance_triangles(list(range(40)))
    one_by_one = np.concatenate([node.arithmetic.raw_covariance_triangles([c]) for c in range(40)])
    np.testing.assert_array_equal(batched, one_by_one)
    np.testing.assert_array_equal(node.arithmetic.raw_covariance_triangles([5, 3, 4]),
                                  batched[[5, 3, 4]])
    rows, cols = np.triu_indices(d)
    reference = np.stack([blas.dsyrk(1.0, node.points[c], trans=1, lower=0).T.reshape(-1)[
        cols * d + rows] for c in range(40)])
    # sums of n + 1 products of size ~100: round-off far below 1e-12 of the largest entry
    np.testing.assert_allclose(batched, reference, rtol=0, atol=1e-12 * np.abs(reference).max())


def test_a_private_node_takes_its_points_norms_while_it_maps_them():
    points = {c: np.random.default_rng(c).normal(size=(3000, 5)) for c in range(2)}
    shift = PublicTransform(shift=np.arange(5.0))
    for private, expected in ((True, "norms"), (False, None)):
        config = parse_config({**CLIENT, "data.dim": 5,
                               **({} if private else {"privacy.epsilon": "inf"})})
        node = NodeData(config, np.array([0, 1]), {c: x.copy() for c, x in points.items()},
                        {0: None, 1: None})
        node.transform_to(shift)
        mapped = np.concatenate([points[0], points[1]]) - np.arange(5.0)
        np.testing.assert_array_equal(node.memory.stacked, mapped)
        if expected is None:
            assert node.memory.norms is None
        else:  # the bits of the norms of the mapped points, taken later
            np.testing.assert_array_equal(node.memory.norms, row_norms(mapped))
