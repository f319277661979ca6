"""The client side of the protocol, mounted on any Flower ``ClientApp``.

A Flower user keeps their own ClientApp and their own data loading, and calls::

    from flwr.clientapp import ClientApp
    from fedkmeans.client import mount

    app = ClientApp()
    mount(app, points=lambda context: {7: x7, 8: x8})  # client id -> (n_i, d) points

:func:`mount` registers every handler the protocol needs on ``app``: ``register``
(the hosted client ids and the dimension, no data values), one ``query.<stage>`` per
stage of :mod:`fedkmeans.stages` (a stage registered later is served too), the
non-private ``evaluate`` round and, under ``privacy.aggregation = secagg``, the ``train``
handler wrapped by Flower's ``secaggplus_mod``. A node learns every setting it computes
with from the server's requests (:func:`fedkmeans.config_node.node_settings`: the level,
epsilon, the resolved clip bounds, the public transform), never from the run config,
which is the user's own.

:func:`mount_source` is the same registration over any :class:`NodeSource`; the
bundled ClientApp (:mod:`fedkmeans.client_app`) is its other user, with the data-set
registry as the loader and its bounded node cache.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np
from flwr.app import Context, Message
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat

from fedkmeans import wire
from fedkmeans.blas_threads import one_blas_thread
from fedkmeans.config_node import node_config
from fedkmeans.console import quiet_flower_secagg
from fedkmeans.data.transform import PublicTransform
from fedkmeans.node import NodeData, clip_radius
from fedkmeans.stages import Stage, stage, subscribe
from fedkmeans.wire import pack, unpack

__all__ = ["NodeSource", "OwnPoints", "mount", "mount_source", "one_blas_thread"]

#: ``points(context)``: the node's clients, client id -> points of shape (n_i, d).
PointsFn = Callable[[Context], Mapping[int, np.ndarray]]


class NodeSource(Protocol):
    """Where a node's clients come from: what :func:`mount_source` needs of a loader."""

    def register(self, context: Context) -> tuple[np.ndarray, int]:
        """The hosted client ids (int64) and the points' dimension (0: no client)."""

    def node(self, context: Context, settings: dict) -> NodeData:
        """The node's clients, mapped and clipped as the request's ``settings`` say."""

    def evaluate(self, context: Context, settings: dict,
                 centers: np.ndarray) -> dict[str, np.ndarray]:
        """NON-PRIVATE: the node's evaluation of ``centers`` (k, d), points as loaded.

        The sums of :meth:`~fedkmeans.node.arithmetic.StageArithmetic.evaluate`, and
        ``clipped_points``: the points clipped to the data radius.
        """

    def after_request(self) -> None:
        """After a stage's computation (the rows a node keeps for reuse may be dropped)."""


def _fits(settings: dict, dim: int) -> bool:
    """Whether the request's public transform fits points of dimension ``dim``."""
    try:
        PublicTransform.from_settings(settings).check_dim(dim)
    except ValueError:
        return False
    return True


def mount(app: ClientApp, points: PointsFn) -> None:
    """Serve the protocol on ``app`` with the points ``points(context)`` returns.

    Parameters
    ----------
    app : flwr.clientapp.ClientApp
        The user's ClientApp (its other handlers are left alone).
    points : callable
        ``points(context) -> {client_id: ndarray of shape (n_i, d)}``: the clients this
        node hosts. Client ids are integers, unique across the federation. Called once
        per run and node (the points are kept in this process for the run; never
        modified: the node maps and clips copies).
    """
    mount_source(app, OwnPoints(points))


def mount_source(app: ClientApp, source: NodeSource) -> None:
    """Register the protocol's handlers on ``app``, reading nodes from ``source``.

    Also quiets Flower's SecAgg+ mod on this node's console (its per-stage DEBUG lines
    name the node: :func:`fedkmeans.console.quiet_flower_secagg`).
    """
    quiet_flower_secagg()

    @app.query("register")
    def register(msg: Message, context: Context) -> Message:
        """Announce the hosted client ids and the feature dimension (no data values).

        With the run's settings in the request (the server's), the node also builds its
        points now, mapped by the public transform, so no round builds them again;
        when the transform does not fit the points (the server reports the dimensions
        after registration) they are left to the first round.
        """
        _, settings = unpack(msg.content)
        ids, dim = source.register(context)
        if settings and ids.size and _fits(settings, dim):
            source.node(context, settings)
            source.after_request()
        return Message(pack({"client_ids": ids}, {"dim": dim}), reply_to=msg)

    def serve(stage_: Stage) -> None:
        """Answer ``query.<stage>`` with the stage's rows for the asked clients.

        The rows are the stage's ``client`` computation (or its ``wire`` form: upper
        triangles for a symmetric statistic), one per asked client, stacked.
        """

        def reply(msg: Message, context: Context) -> Message:
            arrays, settings = unpack(msg.content)
            clients = arrays["client_ids"]
            compute = stage_.wire or stage_.client
            with source.node(context, settings).resident() as node, one_blas_thread():
                stats = compute(node, clients.tolist(), {**settings, **arrays})
            source.after_request()
            return Message(pack({"client_ids": clients, **stats}), reply_to=msg)

        reply.__doc__ = f"Stage {stage_.name!r} ({stage_.group})."
        app.query(stage_.name)(reply)

    subscribe(serve)

    @app.query("evaluate")
    def evaluate(msg: Message, context: Context) -> Message:
        """Non-private evaluation of the final centers over every hosted client.

        Also the number of the node's points clipped to the data radius
        (``clipped_points``: for ``diagnostics.json``, never for the console).
        """
        arrays, settings = unpack(msg.content)
        with one_blas_thread():
            out = source.evaluate(context, settings, arrays["centers"])
        return Message(pack(out), reply_to=msg)

    @app.train(mods=[secaggplus_mod])
    def secagg_contribution(msg: Message, context: Context) -> Message:
        """One protocol round under SecAgg+: this node's encoded noisy sum, weight 1.

        The request is the ``FitIns`` built by :class:`fedkmeans.server.secagg.
        SecAggAggregator` (asked client ids, broadcast arrays, per-statistic share scale
        and grid step). Noise shares always come from the operating system's CSPRNG,
        fresh per client and release (:mod:`fedkmeans.privacy.randomness`): nothing the
        server sets or knows determines them. The reply's metrics are empty: only the
        masked vector leaves the node.
        """
        fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
        settings = fitins.config
        payload = parameters_to_ndarrays(fitins.parameters)
        names = [n for n in str(settings[wire.SECAGG_ARRAYS]).split(",") if n]
        arrays = dict(zip(names, payload[1:], strict=True))
        clients = payload[0].astype(int).tolist()
        with source.node(context, dict(settings)).resident() as node:
            stats = stage(str(settings[wire.SECAGG_STAGE])).client(node, clients, arrays)
        source.after_request()
        wanted = [n for n in str(settings[wire.SECAGG_STATS]).split(",") if n]
        stats = {name: stats[name] for name in wanted}
        encoded = node.secagg_contribution(
            clients,
            stats,
            str(settings[wire.SECAGG_ROUND]),
            {n: float(settings[wire.SECAGG_SHARE + n]) for n in wanted},
            {n: float(settings[wire.SECAGG_STEP + n]) for n in wanted},
            int(settings[wire.SECAGG_Q]),
        )
        fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(encoded), 1, {})
        return Message(compat.fitres_to_recorddict(fitres, keep_input=True), reply_to=msg)



class OwnPoints:
    """A :class:`NodeSource` over a user's ``points(context)`` callable.

    Each node's points are loaded once per run and process (a Flower simulation actor
    serves several virtual nodes: it keeps each one it served, for the current run
    only) and are never modified: the node maps (public transform) and clips (data
    radius) its own copy, rebuilt only when a request carries other settings.
    """

    def __init__(self, points: PointsFn) -> None:
        if not callable(points):
            raise TypeError(f"points must be a callable points(context) -> "
                            f"{{client_id: array (n_i, d)}}, got {type(points).__name__}")
        self._points = points
        self._run: int | None = None
        self._raw: dict[int, tuple[np.ndarray, dict[int, np.ndarray]]] = {}
        self._nodes: dict[int, NodeData] = {}

    def _loaded(self, context: Context) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """This node's (sorted client ids, client id -> float64 points), loaded once."""
        if self._run != context.run_id:  # a new run: forget the previous run's points
            self._run, self._raw, self._nodes = context.run_id, {}, {}
        if context.node_id not in self._raw:
            self._raw[context.node_id] = _checked(self._points(context))
        return self._raw[context.node_id]

    def register(self, context: Context) -> tuple[np.ndarray, int]:
        """The hosted ids and the dimension (0 when the node hosts no client)."""
        ids, points = self._loaded(context)
        return ids, next(iter(points.values())).shape[1] if points else 0

    def node(self, context: Context, settings: dict) -> NodeData:
        """The node under the request's settings (:func:`fedkmeans.config_node.node_config`)."""
        config = node_config(settings)
        transform = PublicTransform.from_settings(settings)
        ids, points = self._loaded(context)
        node = self._nodes.get(context.node_id)
        if node is not None:
            node = node.retarget(config, warn=False, transform=transform)
        if node is None:  # first request, or points clipped/mapped for other settings
            node = NodeData(config, ids, dict(points), dict.fromkeys(ids.tolist()),
                            originals=points.__getitem__)
            node.transform_to(transform)
            node.clip_to(clip_radius(config), warn=False)
        self._nodes[context.node_id] = node
        return node

    def after_request(self) -> None:
        """Nothing to bound: the user's points stay as loaded, one node per id."""

    def evaluate(self, context: Context, settings: dict,
                 centers: np.ndarray) -> dict[str, np.ndarray]:
        """NON-PRIVATE: the cost of ``centers`` (k, d) on the points as loaded (summed).

        On the user's own points, never mapped nor clipped (a clipped client's points
        are not reloaded from a data set, as the registry's nodes do).
        """
        clipped = clipped_points(self.node(context, settings))
        ids, points = self._loaded(context)
        unclipped = NodeData(node_config(settings), ids, dict(points),
                             dict.fromkeys(ids.tolist()))
        return {**unclipped.arithmetic.evaluate(centers),
                "clipped_points": np.array([float(clipped)])}


def clipped_points(node: NodeData) -> int:
    """Points of ``node`` whose norm exceeded the radius they were clipped to (0: none)."""
    if node.radius is None:
        return 0
    return sum(int((norms > node.radius).sum()) for norms in node.raw_norms.values())


def _checked(points: Mapping[int, np.ndarray]) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """``points`` as (sorted int64 ids, id -> float64 (n_i, d)); ValueError naming a client."""
    if not isinstance(points, Mapping):
        raise TypeError(f"points(context) must return a mapping client id -> array (n_i, d), "
                        f"got {type(points).__name__}")
    out: dict[int, np.ndarray] = {}
    dims = set()
    for cid, x in points.items():
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[0] == 0 or not np.isfinite(x).all():
            raise ValueError(f"points of client {cid!r} must be a finite 2-D array with at "
                             f"least one row, got shape {x.shape}")
        dims.add(x.shape[1])
        out[int(cid)] = x
    if len(dims) > 1:
        raise ValueError(f"the clients' points differ in dimension: {sorted(dims)}")
    ids = np.array(sorted(out), dtype=np.int64)
    return ids, {c: out[c] for c in ids.tolist()}
