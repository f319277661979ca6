"""Streaming aggregation: the same release as the stacked path, memory flat in clients."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from conftest import run_server_inprocess
from flwr.app import Message

from fedkmeans.config import MessagingLimits
from fedkmeans.experiment.cli import run_flat
from fedkmeans.experiment.engines.inprocess import InProcessGrid
from fedkmeans.local_grid import new_run_id
from fedkmeans.server.aggregation import Fold, RunningSums, clipped_sum
from fedkmeans.server.context import ServerContext
from fedkmeans.server.pool import ClientPool
from fedkmeans.wire import TRIANGLE, pack, unpack

#: 1,000 clients on 10 nodes; messages of about 40 clients and 3 in flight, so every
#: node's clients arrive in several messages, out of client-id order.
THOUSAND = {
    "data.num-clients": 1000, "data.points-per-client": 20, "data.dim": 10,
    "data.components": 5, "k": 5, "data.server-points-per-component": 20,
    "data.server-uniform-points": 20, "privacy.max-points-per-client": 20,
    "privacy.lloyds-steps": 2, "federation.engine": "inprocess",
    "federation.num-nodes": 10, "federation.message-mb": 40 * 8 * 55 / 2**20,
    "federation.inflight-mb": 3 * 40 * 8 * 55 / 2**20, "privacy.reproducible-noise": True,
}


@pytest.mark.parametrize("level", ["datapoint", "client"])
def test_streaming_gives_the_stacked_path_s_centers_and_ledger(level, tmp_path, monkeypatch):
    flat = {**THOUSAND, "privacy.level": level}
    if level == "client":
        flat.update({"privacy.clip-covariance": 300.0, "privacy.clip-sums": 40.0,
                     "privacy.epsilon": 3.0})
    streamed = run_flat({**flat, "output-dir": str(tmp_path / "streamed")})
    built = ServerContext.of.__func__
    monkeypatch.setattr(ServerContext, "of", classmethod(
        lambda cls, *args, **kwargs: built(cls, *args, **{**kwargs, "streaming": False})))
    stacked = run_flat({**flat, "output-dir": str(tmp_path / "stacked")})
    a, b = np.asarray(streamed["centers"]), np.asarray(stacked["centers"])
    assert np.abs(a - b).max() <= 1e-9 * np.abs(b).max()
    assert streamed["privacy"]["releases"] == stacked["privacy"]["releases"]
    assert streamed["privacy"]["epsilon"] == stacked["privacy"]["epsilon"]
    assert streamed["federation"]["rounds"] == stacked["federation"]["rounds"]


def test_running_sums_clip_each_row_like_the_stacked_sum():
    rng = np.random.default_rng(3)
    rows = rng.normal(scale=5.0, size=(2500, 4, 3))  # most rows outside the bound
    sums = RunningSums({"s": (4, 3)}, {"s": Fold(2.0, "l2")})
    for start in range(0, 2500, 700):  # uneven messages
        sums.add({"s": rows[start:start + 700]})
    expected = clipped_sum(rows, 2.0, "l2")
    norms = np.linalg.norm(rows.reshape(2500, -1), axis=1)
    by_hand = (rows * np.minimum(1.0, 2.0 / norms)[:, None, None]).sum(axis=0)
    np.testing.assert_allclose(sums.totals["s"], expected, rtol=1e-12)
    np.testing.assert_allclose(sums.totals["s"], by_hand, rtol=1e-9)
    assert sums.count == 2500
    unclipped = RunningSums({"s": (4, 3)}, {"s": Fold()})
    unclipped.add({"s": rows})
    np.testing.assert_allclose(unclipped.totals["s"], rows.sum(axis=0), rtol=1e-12)


def _synthetic_app(num_nodes: int, clients_per_node: int, dim: int):
    """A ClientApp stand-in: hosts ids ``node + num_nodes * j``; rows made on demand."""
    size = dim * (dim + 1) // 2

    def app(msg: Message, context) -> Message:
        node = int(context.node_config["partition-id"])
        if msg.metadata.message_type == "query.register":
            ids = node + num_nodes * np.arange(clients_per_node)
            return Message(pack({"client_ids": ids}, {"dim": dim}), reply_to=msg)
        ids = unpack(msg.content)[0]["client_ids"]
        rows = np.random.default_rng(int(ids[0])).normal(size=(ids.size, size))
        return Message(pack({"client_ids": ids, "covariance" + TRIANGLE: rows}),
                       reply_to=msg)

    return app


class _CountingGrid(InProcessGrid):
    """Records the most messages ever outstanding and the largest request."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.most_outstanding = self.largest_request = 0

    def push_messages(self, messages):
        messages = list(messages)
        for msg in messages:
            ids = unpack(msg.content)[0].get("client_ids", np.zeros(0))
            self.largest_request = max(self.largest_request, int(ids.size))
        ids = super().push_messages(messages)
        if all(m.metadata.message_type == "query.covariance" for m in messages):
            self.most_outstanding = max(self.most_outstanding, len(self._pending))
        return ids


def _server_peak(clients: int, dim: int = 40, num_nodes: int = 4) -> tuple[int, _CountingGrid]:
    """Peak bytes traced while the pool folds one covariance round of ``clients``."""
    federation = MessagingLimits(num_nodes=num_nodes, message_mb=0.25, inflight_mb=0.5)
    nodes = [{"partition-id": i, "num-partitions": num_nodes} for i in range(num_nodes)]
    run_id = new_run_id()
    grid = _CountingGrid(_synthetic_app(num_nodes, clients // num_nodes, dim), {}, nodes,
                         run_id)
    pool = ClientPool(grid, federation)
    pool.register(wait_seconds=1)
    fold = {"covariance": Fold(10.0, "l2")}
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        replies = pool.query("covariance", pool.client_ids, {}, {"covariance": (dim, dim)},
                             fold=fold)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert replies.folded and replies.stats["covariance"].shape == (1, dim, dim)
    assert replies.client_ids.size == clients
    return peak, grid


def test_the_server_s_memory_does_not_grow_with_the_number_of_clients():
    """Stacked rows of 4,000 clients (d = 40) would take 51 MB; the fold holds a window."""
    small, _ = _server_peak(500)
    large, grid = _server_peak(4000)
    stacked_bytes = 4000 * 40 * 40 * 8
    assert large < 1.5 * small + 2**20, (small, large)
    assert large < stacked_bytes / 4, (large, stacked_bytes)
    assert grid.most_outstanding <= 2
    row_bytes = 8 * 40 * 40  # the server sizes messages by the full (d, d) row
    assert grid.largest_request == math.floor(0.25 * 2**20 / row_bytes)


def test_a_curious_server_still_sees_every_client_s_row(small_config):
    """The observer keeps the rows itself; they equal the stacked path's."""
    from fedkmeans.attacks.curious import CuriousObserver
    from fedkmeans.experiment.config import parse_config

    flat = {**small_config, "privacy.reproducible-noise": True,
            "federation.message-mb": 5 * 8 * 64 / 2**20}  # 5 clients per message
    curious = CuriousObserver(parse_config(flat))
    run_server_inprocess(flat, [curious])
    seen = curious.replies["init-1"]
    assert not seen.folded and seen.stats["covariance"].shape == (12, 8, 8)
    assert np.array_equal(seen.client_ids, np.arange(12))
    # the same rows as the real client code computes, in client-id order
    from fedkmeans.data import load_server
    from fedkmeans.node import NodeData

    config = parse_config(flat)  # the nodes map their points by the run's public transform
    node = NodeData.load(config, 0, 1, transform=config.public_transform(load_server(config)[0]))
    expected = node.arithmetic.covariance(list(range(12)))["covariance"]
    np.testing.assert_allclose(seen.stats["covariance"], expected, rtol=1e-12)


class _ReversedGrid(InProcessGrid):
    """Answers the newest outstanding message first, one per pull (out of order)."""

    def pull_messages(self, message_ids):
        ids = [mid for mid in message_ids if mid in self._pending]
        return super().pull_messages(ids[-1:])

    def send_and_receive(self, messages, *, timeout=None):  # registration: all at once
        return InProcessGrid.pull_messages(self, self.push_messages(messages))


def _run_on(grid_class, flat, num_nodes=4):
    from fedkmeans import client_app
    from fedkmeans.experiment.config import parse_config
    from fedkmeans.experiment.runner import run_server

    run_id = new_run_id()
    nodes = [{"partition-id": i, "num-partitions": num_nodes} for i in range(num_nodes)]
    grid = grid_class(client_app.app, flat, nodes, run_id)
    return run_server(grid, parse_config(flat))


def test_the_order_of_arrival_does_not_change_a_bit(small_config, tmp_path):
    """Replies are folded in the order sent, so arrival order cannot change the sums."""
    flat = {**small_config, "privacy.reproducible-noise": True, "privacy.epsilon": "inf",
            "privacy.lloyds-steps": 1, "federation.num-nodes": 4,
            "federation.message-mb": 2 * 8 * 64 / 2**20,
            "federation.inflight-mb": 6 * 8 * 64 / 2**20}
    in_order = _run_on(InProcessGrid, {**flat, "output-dir": str(tmp_path / "a")})
    reversed_ = _run_on(_ReversedGrid, {**flat, "output-dir": str(tmp_path / "b")})
    np.testing.assert_array_equal(np.asarray(in_order["centers"]),
                                  np.asarray(reversed_["centers"]))


class _GarbledGrid(InProcessGrid):
    """Node 2 answers every query with bytes that are not a ``.npy`` payload."""

    def _deliver(self, msg):
        reply = super()._deliver(msg)
        if msg.metadata.dst_node_id == 2 and msg.metadata.message_type != "query.register":
            from flwr.app import Array

            record = reply.content.array_records["arrays"]
            for name in list(record):
                record[name] = Array(dtype="float64", shape=(1,), stype="numpy.ndarray",
                                     data=b"\x93NUMPY garbage")
        return reply


def test_a_malformed_reply_is_rejected_not_fatal(small_config, tmp_path):
    """The server reads replies in place; bytes it cannot parse reject that node only."""
    flat = {**small_config, "privacy.reproducible-noise": True, "federation.num-nodes": 4,
            "federation.min-replies": 0.5, "output-dir": str(tmp_path)}
    result = _run_on(_GarbledGrid, flat)
    rejected = result["federation"]["rejected_replies"]
    assert rejected and all(r["node"] == 2 and r["reason"].startswith("malformed content")
                            for r in rejected)
    assert np.isfinite(np.asarray(result["centers"])).all()
