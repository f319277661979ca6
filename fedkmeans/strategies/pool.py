"""The server's view of the federation: nodes, the clients they host, validated replies.

:class:`ClientPool` is the only place that talks to the Flower :class:`Grid`. It
sends one message per node that hosts a requested client, collects the replies, and
returns per-client statistics stacked in client-id order. Replies that are errors,
have the wrong shape, or contain NaN or inf are rejected and logged (never their
values); the round goes on while at least ``federation.min-replies`` of the
requested clients answered.

With ``privacy.aggregation = secagg`` (:attr:`ClientPool.secagg` set) the protocol
rounds go through Flower's SecAgg+ instead (:mod:`fedkmeans.strategies.secagg`): no
per-client row ever exists on the server, and :meth:`ClientPool.query` returns (and
shows its observers) only the noisy sums, as ``Replies(aggregated=True)``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from flwr.app import Message
from flwr.serverapp import Grid

from fedkmeans.clustering.client_stats import symmetric_from_upper
from fedkmeans.config import FederationConfig
from fedkmeans.wire import TRIANGLE, pack, unpack

LOG = logging.getLogger(__name__)


class FederationError(RuntimeError):
    """Too few nodes or replies to continue."""


@dataclass
class Replies:
    """Per-client statistics of one round, stacked in increasing client id.

    Attributes
    ----------
    client_ids : ndarray of shape (m,)
        Clients with a row in ``stats``; empty when ``aggregated``.
    stats : dict of str to ndarray of shape (m, ...)
        Per-client rows, or, when ``aggregated``, one row: the noisy sum.
    aggregated : bool
        Secure aggregation: ``stats`` hold the sums of the clients' clipped statistics
        plus their noise shares (already noisy); the server never saw a client's row.
    contributors : ndarray of shape (n,) or None
        ``aggregated`` only: the clients whose statistics are in the sums.
    noise_scales : dict of str to float
        ``aggregated`` only: effective standard deviation of the summed noise shares
        of each statistic (at least the calibrated sigma).
    """

    client_ids: np.ndarray
    stats: dict[str, np.ndarray]
    aggregated: bool = False
    contributors: np.ndarray | None = None
    noise_scales: dict[str, float] = field(default_factory=dict)


@dataclass
class ClientPool:
    """Nodes and the clients they host, as announced in the ``register`` stage."""

    grid: Grid
    federation: FederationConfig
    node_clients: dict[int, np.ndarray] = field(default_factory=dict)
    dim: int = 0
    rejected: list[dict] = field(default_factory=list)
    #: Per round: nodes and clients asked and those whose replies were accepted.
    answered: dict[str, dict] = field(default_factory=dict)
    observers: list = field(default_factory=list)
    #: :class:`~fedkmeans.strategies.secagg.SecAggAggregator` when
    #: ``privacy.aggregation = secagg``: protocol rounds are summed with SecAgg+.
    secagg: object | None = None

    # -- registration -------------------------------------------------------------
    def register(self, wait_seconds: float = 600.0) -> None:
        """Wait for ``federation.num-nodes`` nodes, then learn which clients each hosts.

        Raises
        ------
        FederationError
            Not enough nodes in time, a client id announced twice, or nodes
            disagreeing on the feature dimension.
        """
        wanted = self.federation.num_nodes
        deadline = time.monotonic() + wait_seconds
        node_ids = sorted(self.grid.get_node_ids())
        while wanted and len(node_ids) < wanted:
            if time.monotonic() > deadline:
                raise FederationError(
                    f"only {len(node_ids)} of federation.num-nodes={wanted} nodes connected "
                    f"within {wait_seconds:.0f} s"
                )
            time.sleep(1.0)
            node_ids = sorted(self.grid.get_node_ids())
        if not node_ids:
            raise FederationError("no node is connected to the SuperLink")
        replies = self._send({nid: pack({}) for nid in node_ids}, "register")
        dims: dict[int, int] = {}
        seen: dict[int, int] = {}
        for nid, reply in replies.items():
            arrays, config = unpack(reply.content)
            ids = np.asarray(arrays.get("client_ids", np.zeros(0)), dtype=np.int64)
            for cid in ids.tolist():
                if cid in seen:
                    raise FederationError(
                        f"client id {cid} is hosted by two nodes ({seen[cid]} and {nid})"
                    )
                seen[cid] = nid
            if ids.size:
                self.node_clients[nid] = np.sort(ids)
                dims[nid] = int(config.get("dim", 0))
        if not self.node_clients:
            raise FederationError("no node hosts any client")
        if len(set(dims.values())) != 1:
            raise FederationError(
                "nodes disagree on the feature dimension: "
                + ", ".join(f"node {n}: d={d}" for n, d in sorted(dims.items()))
            )
        self.dim = next(iter(dims.values()))
        LOG.info(
            "registered %d nodes hosting %d clients (d=%d)",
            len(self.node_clients), len(seen), self.dim,
        )

    @property
    def client_ids(self) -> np.ndarray:
        """All registered client ids, sorted."""
        return np.sort(np.concatenate(list(self.node_clients.values())))

    def sample(self, rate: float, rng: np.random.Generator) -> np.ndarray:
        """Poisson sampling: each client independently with probability ``rate``."""
        ids = self.client_ids
        if rate >= 1.0:
            return ids
        return ids[rng.random(ids.size) < rate]

    # -- rounds ---------------------------------------------------------------------
    def query(
        self,
        stage: str,
        clients: np.ndarray,
        arrays: Mapping[str, np.ndarray],
        expected: Mapping[str, tuple[int, ...]],
        config: Mapping | None = None,
        round_name: str | None = None,
    ) -> Replies:
        """Ask ``clients`` for the statistics of ``stage``; validate and stack replies.

        Parameters
        ----------
        stage : str
            ClientApp action (``query.<stage>``).
        clients : ndarray of int
            Requested (sampled) client ids.
        arrays, config : mapping
            Broadcast content (centers, basis, ...).
        expected : mapping of str to tuple
            Name and per-client shape of every statistic a reply must carry.
        round_name : str, optional
            Label of the round for logs and observers (default: ``stage``).

        Returns
        -------
        Replies
            Only the accepted clients, in increasing id; with secure aggregation the
            noisy sums (``aggregated = True``, one row, no client's own values).
        """
        round_name = round_name or stage
        wanted = set(np.asarray(clients).tolist())
        messages, requested = {}, {}
        for nid, hosted in self.node_clients.items():
            mine = hosted[np.isin(hosted, list(wanted))]
            if mine.size:
                requested[nid] = mine
                if self.secagg is None:
                    messages[nid] = pack({"client_ids": mine, **arrays}, config)
        for observer in self.observers:
            observer.on_broadcast(round_name, dict(arrays), np.asarray(sorted(wanted)))
        if self.secagg is not None:
            result = self.secagg.aggregate(self, stage, requested, arrays, expected, round_name)
            contributors = np.asarray(result.contributors if result.contributors is not None
                                      else np.zeros(0, np.int64))
            self._record_answers(round_name, requested, contributors)
            for observer in self.observers:
                observer.on_replies(round_name, result)
            return result
        replies = self._send(messages, stage, round_name)
        # One row per requested client, in increasing id, reserved up front: each node's
        # reply is written straight to its clients' rows and freed, so the peak memory
        # of a round is one copy of its replies (plus the undelivered messages).
        slots = np.sort(np.concatenate([np.zeros(0, np.int64), *requested.values()]))
        stats = {name: np.empty((slots.size, *shape)) for name, shape in expected.items()}
        filled = np.zeros(slots.size, dtype=bool)
        for nid in sorted(replies):
            got, _ = unpack(replies.pop(nid).content)  # free each message as we go
            ids, rows = self._validate(nid, round_name, got, requested[nid], expected)
            if ids.size:
                where = np.searchsorted(slots, ids)
                for name in expected:
                    stats[name][where] = rows[name]
                filled[where] = True
            del got, rows
        ids = slots[filled]
        self._record_answers(round_name, requested, ids)
        need = math.ceil(self.federation.min_replies * len(wanted))
        if ids.size < need:
            raise FederationError(
                f"round '{round_name}': {ids.size} of {len(wanted)} requested clients gave a "
                f"valid reply, federation.min-replies requires {need}"
            )
        if not filled.all():
            stats = {name: _keep_rows(value, filled) for name, value in stats.items()}
        result = Replies(ids, stats)
        for observer in self.observers:
            observer.on_replies(round_name, result)
        return result

    def _record_answers(
        self, round_name: str, requested: Mapping[int, np.ndarray], accepted: np.ndarray
    ) -> None:
        """Count the nodes and clients asked in a round and those that answered."""
        nodes = [nid for nid, ids in requested.items() if np.isin(ids, accepted).any()]
        self.answered[round_name] = {
            "nodes_asked": len(requested),
            "nodes_answered": len(nodes),
            "clients_asked": int(sum(ids.size for ids in requested.values())),
            "clients_answered": int(np.asarray(accepted).size),
        }

    def query_nodes(self, stage: str, arrays: Mapping[str, np.ndarray]) -> list[dict]:
        """Send ``arrays`` to every node; return each reply's arrays (node order)."""
        replies = self._send({nid: pack(arrays) for nid in self.node_clients}, stage)
        return [unpack(replies[nid].content)[0] for nid in sorted(replies)]

    def _validate(self, nid, round_name, got, requested, expected):
        ids = np.asarray(got.get("client_ids", np.zeros(0)))
        if ids.shape != requested.shape or not np.array_equal(ids, requested):
            return self._reject(nid, round_name, "client ids differ from the request")
        rows = {}
        for name, shape in expected.items():
            value = got.get(name)
            if value is None and name + TRIANGLE in got and len(shape) == 2:
                triangles, size = got[name + TRIANGLE], shape[0] * (shape[0] + 1) // 2
                if triangles.shape != (ids.size, size) or shape[0] != shape[1]:
                    return self._reject(
                        nid, round_name, f"'{name}{TRIANGLE}' has shape {triangles.shape}, "
                        f"expected {(ids.size, size)}"
                    )
                value = symmetric_from_upper(triangles, shape[0])
            if value is None or value.shape != (ids.size, *shape):
                found = None if value is None else value.shape
                return self._reject(
                    nid, round_name, f"'{name}' has shape {found}, expected {(ids.size, *shape)}"
                )
            rows[name] = value.astype(np.float64, copy=False)
        finite = np.ones(ids.size, dtype=bool)
        for value in rows.values():
            finite &= np.isfinite(value.reshape(ids.size, -1)).all(axis=1)
        if finite.all():
            return ids.astype(np.int64), rows
        self._reject(
            nid, round_name, f"{int((~finite).sum())} client rows contain NaN or inf",
            clients=ids[~finite].tolist(),
        )
        return ids[finite].astype(np.int64), {name: v[finite] for name, v in rows.items()}

    def _reject(self, nid, round_name, reason, clients=None):
        LOG.warning("round '%s': rejected reply of node %d: %s", round_name, nid, reason)
        self.rejected.append(
            {"round": round_name, "node": int(nid), "reason": reason, "clients": clients}
        )
        return np.zeros(0, np.int64), {}

    def _send(
        self, contents: dict[int, object], stage: str, round_name: str | None = None
    ) -> dict[int, Message]:
        if not contents:
            return {}
        round_name = round_name or stage
        messages = [
            Message(content, dst_node_id=nid, message_type=f"query.{stage}", group_id=stage)
            for nid, content in contents.items()
        ]
        out: dict[int, Message] = {}
        replies = self.grid.send_and_receive(messages, timeout=self.federation.round_timeout)
        # The grid gives every sent message its id. An error reply the SuperLink makes
        # for a lost node ("Node Unavailable") comes from the SuperLink's own node id,
        # so a reply is attributed to the node its request went to.
        sent_to = {m.metadata.message_id: m.metadata.dst_node_id for m in messages}
        for reply in replies:
            nid = sent_to.get(reply.metadata.reply_to_message_id, reply.metadata.src_node_id)
            if reply.has_error():
                self._reject(nid, round_name, f"error reply: {reply.error.reason}")
            else:
                out[nid] = reply
        missing = sorted(set(contents) - set(out))
        for nid in missing:
            if not any(r["node"] == nid and r["round"] == round_name for r in self.rejected):
                self._reject(nid, round_name, "no reply before federation.round-timeout")
        return out


def _keep_rows(stacked: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Rows of ``stacked`` where ``keep``, moved up in place (no second copy)."""
    rows = np.flatnonzero(keep)
    for target, source in enumerate(rows.tolist()):
        if target != source:
            stacked[target] = stacked[source]
    return stacked[: rows.size]
