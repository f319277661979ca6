"""A node's statistics for many clients at once equal the per-client definitions."""

from __future__ import annotations

import numpy as np
import pytest

from fedkmeans.clustering import cluster_sums_counts, projected_histogram
from fedkmeans.experiment.config import parse_config
from fedkmeans.node import NodeData, arithmetic
from fedkmeans.node.blocks import one_hot_sums, whole_client_blocks
from fedkmeans.privacy.clipping import clip_l1_nonnegative, clip_l2


def _node(level: str) -> NodeData:
    """Seven clients of 1 to 13 points in d = 5 (one with no points at all)."""
    rng = np.random.default_rng(11)
    config = parse_config({"privacy.level": level, "data.dim": 5, "k": 3,
                           "privacy.clip-sums": 4.0, "privacy.clip-counts": 3.0,
                           "privacy.clip-histogram": 2.0, "privacy.clip-covariance": 6.0})
    sizes = [1, 13, 4, 0, 9, 2, 7]
    points = {c: rng.normal(size=(n, 5)) for c, n in enumerate(sizes)}
    labels = {c: rng.integers(0, 3, size=n) for c, n in enumerate(sizes)}
    return NodeData(config, np.arange(len(sizes)), points, labels)


@pytest.mark.parametrize("level", ["datapoint", "client"])
def test_histogram_and_sums_equal_the_per_client_statistics(level):
    node = _node(level)
    rng = np.random.default_rng(5)
    basis = np.linalg.qr(rng.normal(size=(5, 3)))[0].T  # (3, 5), orthonormal rows
    server = rng.normal(size=(6, 3))
    centers = rng.normal(size=(3, 5))
    clients = [6, 0, 3, 4, 1]  # any order, an empty client included
    hist = node.arithmetic.histogram(clients, basis, server)["histogram"]
    stats = node.arithmetic.sums_counts(clients, centers)
    projected = node.arithmetic.sums_counts(clients, centers @ basis.T, basis)
    for row, c in enumerate(clients):
        h = projected_histogram(node.points[c], basis, server)
        s, n = cluster_sums_counts(node.points[c], centers)
        ps, pn = cluster_sums_counts(node.points[c], centers @ basis.T, basis)
        if level == "client":  # sums and counts scaled by one factor, ratios kept
            h = clip_l1_nonnegative(h, 2.0)
            f = min(1.0, 4.0 / max(np.linalg.norm(s), 1e-300), 3.0 / max(n.sum(), 1e-300))
            pf = min(1.0, 4.0 / max(np.linalg.norm(ps), 1e-300), 3.0 / max(pn.sum(), 1e-300))
            s, n, ps, pn = s * f, n * f, ps * pf, pn * pf
        np.testing.assert_array_equal(hist[row], h)
        np.testing.assert_allclose(stats["sums"][row], s, rtol=1e-14, atol=0)
        np.testing.assert_allclose(stats["counts"][row], n, rtol=1e-14, atol=0)
        np.testing.assert_allclose(projected["sums"][row], ps, rtol=1e-14, atol=0)
        np.testing.assert_allclose(projected["counts"][row], pn, rtol=1e-14, atol=0)
        if level == "client":
            assert np.linalg.norm(stats["sums"][row]) <= 4.0 * (1 + 1e-12)
            assert stats["counts"][row].sum() <= 3.0 * (1 + 1e-12)
    if level == "client":  # the clip bites: client 1 has 13 points
        assert np.abs(hist[4]).sum() == pytest.approx(2.0)


def test_evaluation_counts_every_point_once():
    node = _node("datapoint")
    centers = np.array([[0.0] * 5, [1.0] * 5, [-1.0] * 5])
    out = node.arithmetic.evaluate(centers)
    x = np.concatenate([node.points[c] for c in range(7)])
    y = np.concatenate([node.labels[c] for c in range(7)])
    d2 = ((x[:, None, :] - centers[None]) ** 2).sum(axis=2)
    assigned = d2.argmin(axis=1)
    assert out["num_points"][0] == 36
    assert out["cost_sum"][0] == pytest.approx(d2.min(axis=1).sum(), rel=1e-12)
    table = np.zeros((3, 3))
    np.add.at(table, (y, assigned), 1)
    np.testing.assert_array_equal(out["label_values"], [0, 1, 2])
    np.testing.assert_array_equal(out["table"], table)


@pytest.mark.parametrize("level", ["datapoint", "client"])
def test_step_one_triangles_equal_the_clipped_per_client_matrices(level):
    from fedkmeans.clustering.client_stats import outer_product_sum, upper_triangle

    node = _node(level)
    clients = [4, 3, 1, 0, 6, 2, 5]
    triangles = node.arithmetic.covariance_triangles(clients)["covariance"]
    for row, c in enumerate(clients):
        matrix = outer_product_sum(node.points[c])
        if level == "client":
            matrix = clip_l2(matrix, 6.0)
        np.testing.assert_allclose(triangles[row], upper_triangle(matrix), rtol=1e-12,
                                   atol=1e-12)
    full = node.arithmetic.covariance(clients)["covariance"]
    np.testing.assert_allclose(triangles, upper_triangle(full), rtol=1e-12, atol=1e-12)
    if level == "client":  # client 1 (13 points) is clipped to Frobenius norm 6
        one = node.arithmetic.covariance([1])["covariance"][0]
        assert np.linalg.norm(one) == pytest.approx(6.0)


def test_triangle_clipping_equals_clipping_the_full_matrix():
    from fedkmeans.clustering.client_stats import symmetric_from_upper, upper_triangle
    from fedkmeans.privacy.clipping import clip_stacked, clip_upper_triangles

    rng = np.random.default_rng(2)
    a = rng.normal(size=(50, 6, 6))
    full = a + a.transpose(0, 2, 1)  # symmetric
    clipped = clip_upper_triangles(upper_triangle(full), 3.0, 6)
    np.testing.assert_allclose(symmetric_from_upper(clipped, 6), clip_stacked(full, 3.0, "l2"),
                               rtol=1e-13, atol=1e-13)
    assert (np.linalg.norm(symmetric_from_upper(clipped, 6), axis=(1, 2)) <= 3.0 + 1e-12).all()


def test_a_bounded_node_cache_keeps_the_current_node_and_spills_the_others_to_files():
    from flwr.app import Context, RecordDict

    from fedkmeans import client_app

    flat = {"data.num-clients": 40, "data.points-per-client": 25, "data.dim": 4,
            "federation.node-cache-mb": 25 * 4 * 8 * 10 * 1.5 / 2**20}  # 1.5 nodes
    def context(node):
        return Context(run_id=1, node_id=node + 1, state=RecordDict(), run_config=flat,
                       node_config={"partition-id": node, "num-partitions": 4})

    try:
        client_app.forget_nodes()
        first = client_app.node_data(context(0))
        points = {c: x.copy() for c, x in first.points.items()}
        for node in (1, 2, 3):
            client_app.node_data(context(node))
            in_memory = [k for k, n in client_app._NODES.items() if not n.memory.spilled]
            assert in_memory == [(node, 4, "")]  # only the current one
        again = client_app.node_data(context(0))
        assert again is first and again.memory.spilled and not again.points  # in a file
        with again.resident():
            for c, x in points.items():
                np.testing.assert_array_equal(again.points[c], x)
        assert not again.points  # mapped only while a request runs
        auto = {**flat, "federation.node-cache-mb": 0.0}  # a share of the machine
        client_app.forget_nodes()
        for node in range(4):
            client_app.node_data(Context(run_id=1, node_id=node + 1, state=RecordDict(),
                                         run_config=auto,
                                         node_config={"partition-id": node,
                                                      "num-partitions": 4}))
        assert len(client_app._NODES) == 4
        assert not any(n.memory.spilled for n in client_app._NODES.values())
    finally:
        client_app.forget_nodes()


def test_evaluation_reads_clipped_clients_original_points_and_the_rest_in_place():
    """Points are stacked once; evaluation reads clipped clients' points before the clip."""
    from fedkmeans.data import load_client

    config = parse_config({"data.num-clients": 12, "data.points-per-client": 20,
                           "data.dim": 6, "k": 3, "data.components": 3,
                           "privacy.data-radius": 4.0})
    node = NodeData.load(config, 0, 2)
    ids = node.client_ids.tolist()
    assert 0 < len(node.clipped_clients) < len(ids)  # a mix of clipped and untouched
    original = np.concatenate([load_client(config, c)[0] for c in ids])
    assert not np.array_equal(original, np.concatenate([node.points[c] for c in ids]))
    centers = np.array([[0.0] * 6, [2.0] * 6, [-2.0] * 6])
    d2 = ((original[:, None, :] - centers[None]) ** 2).sum(axis=2)
    out = node.arithmetic.evaluate(centers)
    assert out["num_points"][0] == original.shape[0]
    assert out["cost_sum"][0] == pytest.approx(d2.min(axis=1).sum(), rel=1e-12)
    # consecutive clients are served as one view of the stacked points, not a copy
    pooled, owner = node.memory.pooled(ids[1:4])
    assert np.shares_memory(pooled, node.points[ids[1]])
    np.testing.assert_array_equal(pooled, np.concatenate([node.points[c] for c in ids[1:4]]))
    np.testing.assert_array_equal(owner, np.repeat([0, 1, 2], 20))


@pytest.mark.parametrize("radius, kept", [(4.0, True), (0.5, False)])
def test_the_check_rebuilds_clipped_clients_from_the_rows_the_clip_moved(monkeypatch, radius,
                                                                        kept):
    """The check's points before the clip: the same bits as reloading the clients.

    At radius 4 a few rows move and are kept (no reload); at 0.5 every row moves, more
    than the node keeps, and the clipped clients are reloaded as before.
    """
    from fedkmeans.data.transform import PublicTransform
    from fedkmeans.node import KEEP_UNCLIPPED_MAX_FRACTION

    config = parse_config({"data.num-clients": 12, "data.points-per-client": 20,
                           "data.dim": 6, "k": 3, "data.components": 3,
                           "privacy.data-radius": radius, "privacy.check-clip": 5.0})
    transform = PublicTransform(shift=np.full(6, 0.25), scale=np.linspace(0.5, 2.0, 6))
    node = NodeData.load(config, 0, 2, transform=transform)
    ids = node.client_ids.tolist()
    assert node.clipped_clients
    moved = sum(rows.size for rows, _ in node.unclipped_rows.values())
    assert (moved > 0) == kept
    assert moved <= KEEP_UNCLIPPED_MAX_FRACTION * sum(node.points[c].shape[0] for c in ids)
    a = np.array([[0.0] * 6, [1.0] * 6, [-1.0] * 6])
    b = np.array([[0.5] * 6, [1.5] * 6, [-2.0] * 6])
    rebuilt = node.arithmetic.cost_differences(ids, a, b)["cost_difference"]
    reloads, reload = [], NodeData._original
    monkeypatch.setattr(NodeData, "_original",
                        lambda self, c: reloads.append(c) or reload(self, c))
    node.arithmetic.cost_differences(ids, a, b)
    assert (reloads == []) == kept
    reloads.clear()
    node.unclipped_rows = {}  # forget them: every clipped client is reloaded
    reloaded = node.arithmetic.cost_differences(ids, a, b)["cost_difference"]
    assert sorted(reloads) == sorted(node.clipped_clients)
    np.testing.assert_array_equal(rebuilt, reloaded)


def test_a_node_parses_a_run_config_once_per_settings_and_still_refuses_a_bad_one():
    from flwr.app import Context, RecordDict

    from fedkmeans import client_app
    from fedkmeans.config import ConfigError
    from fedkmeans.experiment.config import parse_config

    flat = {"data.num-clients": 8, "data.points-per-client": 5, "data.dim": 3}

    def context(run_config):
        return Context(run_id=1, node_id=1, state=RecordDict(), run_config=run_config,
                       node_config={"partition-id": 0, "num-partitions": 2})

    try:
        client_app.forget_nodes()
        first = client_app.node_data(context(flat)).config
        again = client_app.node_data(context(dict(reversed(flat.items())))).config
        assert again is first and first == parse_config(flat).protocol  # parsed once
        radius = client_app.node_data(context(flat), {"privacy.data-radius": 2.5}).config
        assert radius is not first and radius.privacy.data_radius == 2.5
        for _ in range(2):  # an error is never cached as a config
            with pytest.raises(ConfigError, match="data.dim"):
                client_app.node_data(context({**flat, "data.dim": 0}))
    finally:
        client_app.forget_nodes()


def test_one_hot_sums_add_each_key_s_points_in_their_order_from_zero():
    points = np.array([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0], [0.5, 0.25]])
    np.testing.assert_array_equal(one_hot_sums(points, np.array([2, 0, 2, 2]), 4),
                                  [[10, 20], [0, 0], [101.5, 202.25], [0, 0]])
    # the bits of a loop over the points, which rounding makes order-sensitive
    rng = np.random.default_rng(5)
    points = rng.normal(size=(5000, 3)) * 10.0 ** rng.integers(-8, 8, size=(5000, 1))
    keys = rng.integers(0, 7, size=5000)
    expected = np.zeros((7, 3))
    for key, point in zip(keys, points, strict=True):
        expected[key] += point
    np.testing.assert_array_equal(one_hot_sums(points, keys, 7), expected)
    assert one_hot_sums(np.zeros((0, 3)), np.zeros(0, np.int64), 2).shape == (2, 3)


def test_whole_client_blocks_hold_whole_clients_of_at_most_a_block_of_points():
    offsets = np.array([0, 3, 3, 5, 12, 13, 14])  # sizes 3, 0, 2, 7, 1, 1
    assert list(whole_client_blocks(offsets, 5)) == [(0, 3), (3, 4), (4, 6)]
    assert list(whole_client_blocks(offsets, 100)) == [(0, 6)]
    assert list(whole_client_blocks(np.array([0]), 5)) == []


@pytest.mark.parametrize("level", ["datapoint", "client"])
def test_sums_read_in_blocks_of_whole_clients_are_the_bits_of_one_product(level, monkeypatch):
    centers = np.random.default_rng(3).normal(size=(3, 5))
    basis = np.linalg.qr(np.random.default_rng(4).normal(size=(5, 2)))[0].T
    clients = list(range(7))
    whole = [_node(level).arithmetic.sums_counts(clients, centers),
             _node(level).arithmetic.sums_counts(clients, centers[:, :2], basis)]
    monkeypatch.setattr(arithmetic, "BLOCK", 6)  # clients of 1, 13, 4, 0, 9, 2, 7 points
    blocks = list(whole_client_blocks(np.cumsum([0, 1, 13, 4, 0, 9, 2, 7]), 6))
    assert len(blocks) == 6  # (0,), (1,), (2, 3), (4,), (5,), (6,)
    split = [_node(level).arithmetic.sums_counts(clients, centers),
             _node(level).arithmetic.sums_counts(clients, centers[:, :2], basis)]
    for one, other in zip(whole, split, strict=True):
        for name in ("sums", "counts"):
            np.testing.assert_array_equal(one[name], other[name])


@pytest.mark.parametrize("level", ["datapoint", "client"])
def test_a_node_of_one_block_answers_as_the_node_of_its_slices(level):
    """``NodeData.of_block``: the statistics of the node built from the same slices."""
    node = _node(level)
    ids = node.client_ids
    stacked = np.concatenate([node.points[c] for c in ids.tolist()])
    offsets = np.concatenate([[0], np.cumsum([node.points[c].shape[0] for c in ids.tolist()])])
    block = NodeData.of_block(node.config, ids, stacked, offsets)
    assert all(np.shares_memory(block.points[c], stacked) for c in ids.tolist() if c != 3)
    rng = np.random.default_rng(2)
    basis = np.linalg.qr(rng.normal(size=(5, 3)))[0].T
    server, centers = rng.normal(size=(6, 3)), rng.normal(size=(3, 5))
    for clients in ([6, 0, 3, 4, 1], [1, 2, 3, 4], [5]):
        for name, value in node.arithmetic.histogram(clients, basis, server).items():
            np.testing.assert_array_equal(
                block.arithmetic.histogram(clients, basis, server)[name], value)
        for name, value in node.arithmetic.sums_counts(clients, centers).items():
            np.testing.assert_array_equal(
                block.arithmetic.sums_counts(clients, centers)[name], value)
    arithmetic = block.arithmetic
    arithmetic.clip_covariance_triangles(arithmetic.raw_covariance_triangles(ids.tolist()))
    np.testing.assert_array_equal(stacked, np.concatenate([node.points[c] for c in ids.tolist()]))


def test_pooled_points_of_consecutive_and_scattered_clients():
    node = _node("datapoint")  # sizes 1, 13, 4, 0, 9, 2, 7
    for clients, sizes in (([1, 2, 3, 4], [13, 4, 0, 9]), ([4, 1], [9, 13]), ([3], [0])):
        pooled, owner = node.memory.pooled(clients)
        np.testing.assert_array_equal(pooled, np.concatenate([node.points[c] for c in clients]))
        np.testing.assert_array_equal(owner, np.repeat(np.arange(len(clients)), sizes))
        assert owner.dtype == np.int64
    assert np.shares_memory(node.memory.pooled([1, 2, 3, 4])[0], node.points[1])  # a view
    pooled, owner = node.memory.pooled([])
    assert pooled.shape == (0, 5) and owner.shape == (0,)
