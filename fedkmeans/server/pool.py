"""The server's view of the federation: nodes, the clients they host, validated replies.

:class:`ClientPool` is the only place that talks to the Flower :class:`Grid`. It
asks each node that hosts a requested client for their statistics, in messages of
bounded size with a bounded number in flight (``federation.message-mb``,
``federation.inflight-mb``), and handles each reply as it arrives: validated,
then either folded into running clipped sums (streaming aggregation, the protocol
rounds: memory independent of the number of clients) or stacked in client-id order
(k-FED, audits). Replies that are errors, have the wrong shape, or contain NaN or
inf are rejected and logged (never their values); the round goes on while at least
``federation.min-replies`` of the requested clients answered.

With ``privacy.aggregation = secagg`` (:attr:`ClientPool.secagg` set) the protocol
rounds go through Flower's SecAgg+ instead (:mod:`fedkmeans.server.secagg`): no
per-client row ever exists on the server, and :meth:`ClientPool.query` returns (and
shows its observers) only the noisy sums, as ``Replies(aggregated=True)``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
from flwr.app import Message
from flwr.serverapp import Grid

from fedkmeans.clustering.client_stats import symmetric_from_upper
from fedkmeans.config import MessagingLimits
from fedkmeans.console import DIAGNOSTICS_ENV, diagnostics_on_console, say
from fedkmeans.grid_io import NO_REPLY, ask_nodes, wait_for_nodes
from fedkmeans.server.aggregation import Fold
from fedkmeans.server.observer import RunObserver
from fedkmeans.server.replies import FoldingSink, Replies, Sink, StackingSink
from fedkmeans.wire import TRIANGLE, pack, unpack

LOG = logging.getLogger(__name__)


class FederationError(RuntimeError):
    """Too few nodes or replies to continue."""


def _refuse_duplicates(node_clients: Mapping[int, np.ndarray]) -> None:
    """Raise FederationError naming a client id two nodes announced (one sort, no loop)."""
    if not node_clients:
        return
    node_ids = list(node_clients)  # Flower's node ids may exceed int64: by position
    nodes = np.concatenate([np.full(ids.size, i, dtype=np.int64)
                            for i, ids in enumerate(node_clients.values())])
    ids = np.concatenate(list(node_clients.values()))
    order = np.argsort(ids, kind="stable")
    repeated = np.flatnonzero(np.diff(ids[order]) == 0)
    if repeated.size:
        first, second = order[repeated[0]], order[repeated[0] + 1]
        raise FederationError(f"client id {ids[first]} is hosted by two nodes "
                              f"({node_ids[nodes[first]]} and {node_ids[nodes[second]]})")


@dataclass
class ClientPool:
    """Nodes and the clients they host, as announced in the ``register`` stage."""

    grid: Grid
    federation: MessagingLimits
    node_clients: dict[int, np.ndarray] = field(default_factory=dict)
    dim: int = 0
    rejected: list[dict] = field(default_factory=list)
    #: Per round: nodes and clients asked and those whose replies were accepted.
    answered: dict[str, dict] = field(default_factory=dict)
    observers: list[RunObserver] = field(default_factory=list)
    #: :class:`~fedkmeans.server.secagg.SecAggAggregator` when
    #: ``privacy.aggregation = secagg``: protocol rounds are summed with SecAgg+.
    secagg: object | None = None
    #: Resolved settings the nodes clip with (``auto`` chosen on the server,
    #: :func:`fedkmeans.tuning.resolve.client_settings`): sent with every request.
    settings: dict = field(default_factory=dict)

    def sending(self, settings: Mapping, secagg: object | None) -> ClientPool:
        """This federation, sending ``settings`` with every request, summing with ``secagg``.

        A new view of the same registered nodes: it shares the Grid, the clients each
        node hosts, the rejection and answer logs and the observers; this pool is
        unchanged (the run's context after its plan, :meth:`fedkmeans.server.context.
        ServerContext.planned`).
        """
        return replace(self, settings=dict(settings), secagg=secagg)

    # -- registration -------------------------------------------------------------
    def register(self, wait_seconds: float = 600.0, settings: dict | None = None) -> None:
        """Wait for ``federation.num-nodes`` nodes, then learn which clients each hosts.

        ``settings``: what every later request carries (the run's node settings and
        public transform), sent with the request so that a node builds its points
        once, mapped, at registration.

        Raises
        ------
        FederationError
            Not enough nodes in time, a client id announced twice, or nodes
            disagreeing on the feature dimension.
        """
        wanted = self.federation.num_nodes
        node_ids = wait_for_nodes(self.grid, wanted, wait_seconds, lambda connected: (
            FederationError(f"only {connected} of federation.num-nodes={wanted} nodes "
                            f"connected within {wait_seconds:.0f} s")))
        if not node_ids:
            raise FederationError("no node is connected to the SuperLink")
        replies = self._send({nid: pack({}, settings) for nid in node_ids}, "register")
        dims: dict[int, int] = {}
        for nid, reply in replies.items():
            try:
                arrays, config = unpack(reply.content)
            except ValueError as exc:
                self._reject(nid, "register", f"malformed content: {exc}")
                continue
            ids = np.asarray(arrays.get("client_ids", np.zeros(0)), dtype=np.int64)
            if ids.size:
                self.node_clients[nid] = np.sort(ids)
                dims[nid] = int(config.get("dim", 0))
        hosted = sum(ids.size for ids in self.node_clients.values())
        _refuse_duplicates(self.node_clients)
        if not self.node_clients:
            raise FederationError("no node hosts any client")
        if len(set(dims.values())) != 1:
            raise FederationError(
                "nodes disagree on the feature dimension: "
                + ", ".join(f"node {n}: d={d}" for n, d in sorted(dims.items()))
            )
        self.dim = next(iter(dims.values()))
        # with one node per client (a file's default layout) the number of nodes is the
        # exact client count: a diagnostic, like the clients they host
        say(LOG, f"registered the nodes (d={self.dim}; how many: diagnostics.json)",
            f"registered {len(self.node_clients)} nodes hosting {hosted} clients "
            f"(d={self.dim})")

    @property
    def client_ids(self) -> np.ndarray:
        """All registered client ids, sorted."""
        return np.sort(np.concatenate(list(self.node_clients.values())))

    # -- rounds ---------------------------------------------------------------------
    def query(
        self,
        stage: str,
        clients: np.ndarray,
        arrays: Mapping[str, np.ndarray],
        expected: Mapping[str, tuple[int, ...]],
        config: Mapping | None = None,
        round_name: str | None = None,
        fold: Mapping[str, Fold] | None = None,
    ) -> Replies:
        """Ask ``clients`` for the statistics of ``stage``; validate and fold or stack.

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
        fold : mapping of str to Fold, optional
            Streaming aggregation: every accepted client's row is clipped and added to
            a running sum as its message arrives, then dropped; the server holds one
            array per statistic, not one row per client. Without it the rows are
            stacked (k-FED's local centers, the audits).

        Returns
        -------
        Replies
            The accepted clients in increasing id with their stacked rows, or the
            running sums (``folded``), or SecAgg+'s noisy sums (``aggregated``).

        Notes
        -----
        Each node's clients are asked in messages of at most ``federation.message-mb``
        of reply, outstanding only while their replies fit in ``federation.inflight-mb``
        (at least one): neither the SuperLink nor this process holds more. Observers
        with ``RunObserver.wants_client_rows`` see each accepted message's rows before
        they are dropped (a curious server keeps them at its own cost).
        """
        round_name = round_name or stage
        config = {**self.settings, **(config or {})}
        wanted_ids = np.unique(np.asarray(clients))  # once, not once per node
        requested = {}
        for nid, hosted in self.node_clients.items():
            mine = hosted[np.isin(hosted, wanted_ids)]
            if mine.size:
                requested[nid] = mine
        for observer in self.observers:
            observer.on_broadcast(round_name, dict(arrays), wanted_ids)
        if self.secagg is not None:
            result = self.secagg.aggregate(self, stage, requested, arrays, expected, round_name)
            contributors = np.asarray(result.contributors if result.contributors is not None
                                      else np.zeros(0, np.int64))
            self._record_answers(round_name, requested, contributors)
            for observer in self.observers:
                observer.on_replies(round_name, result)
            return result
        if fold is not None:
            sink: Sink = FoldingSink(expected, fold)
        else:
            sink = StackingSink(requested, expected)
        row_bytes = _row_bytes(expected)
        batch = max(1, int(self.federation.message_mb * 2**20 // row_bytes))
        batches = [
            (nid, ids[start:start + batch])
            for nid, ids in requested.items() for start in range(0, ids.size, batch)
        ]
        hooks = [o.on_client_rows for o in self.observers if o.wants_client_rows]
        for nid, ids, got in self._stream(batches, stage, round_name, arrays, config,
                                          row_bytes):
            # a folding sink takes symmetric statistics as upper triangles (no (m, d, d))
            ids, rows, triangles = self._validate(nid, round_name, got, ids, expected,
                                                  keep_triangles=fold is not None)
            del got
            if ids.size:
                if hooks:
                    full = {name: symmetric_from_upper(v, expected[name][0])
                            if name in triangles else v for name, v in rows.items()}
                    for hook in hooks:
                        hook(round_name, ids, full)
                    del full
                sink.add(ids, rows, triangles)
            del rows
        ids = sink.client_ids()
        self._record_answers(round_name, requested, ids)
        need = math.ceil(self.federation.min_replies * wanted_ids.size)
        if ids.size < need:  # the counts are client data: only with the opt-in
            raise FederationError(f"round '{round_name}': " + (
                f"{ids.size} of {wanted_ids.size} requested clients gave a valid reply, "
                f"federation.min-replies requires {need}" if diagnostics_on_console() else
                "too few requested clients gave a valid reply for federation.min-replies="
                f"{self.federation.min_replies:g} (the counts: {DIAGNOSTICS_ENV}=1)"))
        result = sink.replies()
        for observer in self.observers:
            observer.on_replies(round_name, result)
        return result

    def _stream(
        self,
        batches: list[tuple[int, np.ndarray]],
        stage: str,
        round_name: str,
        arrays: Mapping[str, np.ndarray],
        config: Mapping | None,
        row_bytes: int,
    ) -> Iterator[tuple[int, np.ndarray, dict]]:
        """Send ``batches`` (node, client ids) in a bounded window; yield the replies.

        Yields ``(node, asked client ids, reply arrays)`` in the order of ``batches``,
        whatever the order of arrival: a reply that comes early waits (at most the
        window) for those before it, so the sums are added in one fixed order and a
        run gives the same bits on either engine. Error replies and messages
        unanswered by ``federation.round-timeout`` are rejected (logged, never
        yielded).
        """
        deadline = time.monotonic() + self.federation.round_timeout
        budget = self.federation.inflight_mb * 2**20
        size = [ids.size * row_bytes for _, ids in batches]  # expected reply bytes
        in_flight: dict[str, int] = {}  # message id -> position in batches
        arrived: dict[int, dict | None] = {}  # position -> reply arrays (None: error)
        pushed = done = 0
        while done < len(batches) and time.monotonic() < deadline:
            held = sum(size[i] for i in in_flight.values()) + sum(size[i] for i in arrived)
            stop = pushed
            while stop < len(batches) and (held + size[stop] <= budget or held == 0):
                held += size[stop]
                stop += 1
            if stop > pushed:
                chunk = range(pushed, stop)
                messages = [
                    Message(pack({"client_ids": batches[i][1], **arrays}, config),
                            dst_node_id=batches[i][0], message_type=f"query.{stage}",
                            group_id=stage)
                    for i in chunk
                ]
                msg_ids = list(self.grid.push_messages(messages))
                msg_ids += [None] * (len(chunk) - len(msg_ids))  # Flower: [] if too large
                for msg_id, i in zip(msg_ids, chunk, strict=True):
                    if msg_id:
                        in_flight[str(msg_id)] = i
                    else:  # the SuperLink did not take it (e.g. payload too large)
                        self._reject(batches[i][0], round_name, "message could not be pushed")
                        arrived[i] = None
                pushed = chunk.stop
                del messages
            replies = list(self.grid.pull_messages(list(in_flight)))
            for reply in replies:
                i = in_flight.pop(reply.metadata.reply_to_message_id, None)
                if i is None:
                    continue
                if reply.has_error():
                    self._reject(batches[i][0], round_name,
                                 f"error reply: {reply.error.reason}")
                    arrived[i] = None
                    continue
                try:  # read-only views of the reply's bytes: the fold only reads them
                    arrived[i] = unpack(reply.content, copy=False)[0]
                except ValueError as exc:
                    self._reject(batches[i][0], round_name, f"malformed content: {exc}")
                    arrived[i] = None
            if not replies and in_flight:
                time.sleep(_POLL_SECONDS)
            del replies
            while done in arrived:
                got = arrived.pop(done)
                if got is not None:
                    yield batches[done][0], batches[done][1], got
                del got
                done += 1
        for i in sorted(arrived):  # the round timed out: what did arrive still counts
            if arrived[i] is not None:
                yield batches[i][0], batches[i][1], arrived[i]
        late = {batches[i][0] for i in in_flight.values()}
        late |= {batches[i][0] for i in range(pushed, len(batches))}
        for nid in sorted(late):
            self._reject(nid, round_name, "no reply before federation.round-timeout")

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
        replies = self._send(
            {nid: pack(arrays, self.settings) for nid in self.node_clients}, stage)
        out = []
        for nid in sorted(replies):
            try:
                out.append(unpack(replies[nid].content)[0])
            except ValueError as exc:
                self._reject(nid, stage, f"malformed content: {exc}")
        return out

    def _validate(self, nid, round_name, got, requested, expected, keep_triangles=False):
        """Accepted client ids and their rows (finite, right shapes) of one reply.

        Returns ``(ids, rows, triangles)``: ``triangles`` names the statistics left as
        upper triangles (``keep_triangles``); the others are unfolded to full rows.
        """
        ids = np.asarray(got.get("client_ids", np.zeros(0)))
        if ids.shape != requested.shape or not np.array_equal(ids, requested):
            return self._reject(nid, round_name, "client ids differ from the request")
        rows, triangles = {}, set()
        for name, shape in expected.items():
            value = got.get(name)
            if value is None and name + TRIANGLE in got and len(shape) == 2:
                value, size = got[name + TRIANGLE], shape[0] * (shape[0] + 1) // 2
                if value.shape != (ids.size, size) or shape[0] != shape[1]:
                    return self._reject(
                        nid, round_name, f"'{name}{TRIANGLE}' has shape {value.shape}, "
                        f"expected {(ids.size, size)}"
                    )
                if keep_triangles:
                    triangles.add(name)
                else:
                    value = symmetric_from_upper(value, shape[0])
            elif value is None or value.shape != (ids.size, *shape):
                found = None if value is None else value.shape
                return self._reject(
                    nid, round_name, f"'{name}' has shape {found}, expected {(ids.size, *shape)}"
                )
            rows[name] = value.astype(np.float64, copy=False)
        finite = np.ones(ids.size, dtype=bool)
        for value in rows.values():
            finite &= np.isfinite(value.reshape(ids.size, -1)).all(axis=1)
        if finite.all():
            return ids.astype(np.int64), rows, frozenset(triangles)
        self._reject(
            nid, round_name, f"{int((~finite).sum())} client rows contain NaN or inf",
            clients=ids[~finite].tolist(),
        )
        return (ids[finite].astype(np.int64), {name: v[finite] for name, v in rows.items()},
                frozenset(triangles))

    def _reject(self, nid, round_name, reason, clients=None):
        # the console: round and node; the reason (a message's counts, which clients'
        # rows were not finite) only with the opt-in (fedkmeans.console)
        say(LOG, None if clients else f"round '{round_name}': rejected the reply of node "
            f"{nid} (why: diagnostics.json, federation.rejected_replies)",
            f"round '{round_name}': rejected reply of node {nid}: {reason}",
            level=logging.WARNING)
        self.rejected.append({"round": round_name, "node": int(nid), "reason": reason,
                              "clients": clients})
        return np.zeros(0, np.int64), {}, frozenset()

    def _send(
        self, contents: dict[int, object], stage: str, round_name: str | None = None
    ) -> dict[int, Message]:
        """Ask each node once (:func:`fedkmeans.grid_io.ask_nodes`); reject the failures."""
        replies, failures = ask_nodes(self.grid, contents, stage, self.federation.round_timeout)
        for nid, reason in failures.items():
            self._reject(nid, round_name or stage, "no reply before federation.round-timeout"
                         if reason == NO_REPLY else reason)
        return replies


#: Seconds between two pulls while no reply has arrived.
_POLL_SECONDS = 0.05


def _row_bytes(expected: Mapping[str, tuple[int, ...]]) -> int:
    """Bytes of one client's reply rows (float64; an upper bound for triangles)."""
    return 8 * sum(math.prod(shape) for shape in expected.values())
