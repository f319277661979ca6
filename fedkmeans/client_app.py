"""Flower ClientApp: load this node's clients once, answer each protocol stage.

Thin by design: it reads the node config, translates messages to arrays and back,
and delegates every computation to :class:`fedkmeans.node.NodeData`. Message types
are ``query.<stage>``; each request names the node's clients it asks for in the
``client_ids`` array and each reply echoes it, one row per client.

Secure aggregation (``privacy.aggregation = secagg``): the protocol rounds arrive as
``train`` messages driven by Flower's SecAgg+ workflow; ``secaggplus_mod`` runs the key
agreement and masking around :func:`secagg_contribution`, which replies with the node's
encoded sum (its clients' clipped statistics plus their noise shares) and weight 1.
"""

from __future__ import annotations

from collections import OrderedDict

from flwr.app import Context, Message
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat

from fedkmeans import wire
from fedkmeans.config import CLIENT_SETTINGS, parse_config
from fedkmeans.node import NodeData
from fedkmeans.stages import Stage, stage, subscribe
from fedkmeans.wire import pack, unpack

app = ClientApp()

#: Loaded nodes of the current run, least recently used first (one per node in this
#: process; a simulation actor serves many virtual nodes, the in-process engine all of
#: them). Cleared when the run config changes; bounded by federation.node-cache-mb.
_NODES: OrderedDict[tuple, NodeData] = OrderedDict()
_RUN_KEY: list[tuple] = []


def node_data(context: Context, settings: dict | None = None) -> NodeData:
    """This node's data, loaded on first use and kept while the cache allows.

    ``settings``: the request's resolved ``privacy.*`` settings (the server chose the
    ``auto`` ones from public information); they replace the run config's values, and
    the node loads its clients again, clipped with them, when they change.

    With ``federation.node-cache-mb`` > 0 the process keeps at most that many MiB of
    nodes' points (always the current node): Flower's simulation sends any virtual
    node's message to any actor, so without a bound every actor ends up holding every
    node it has served. An evicted node is loaded again (the same points) when asked.
    """
    node_config = context.node_config
    partition_id = int(node_config.get("partition-id", 0))
    num_partitions = int(node_config.get("num-partitions", 1))
    data_path = str(node_config.get("data-path", ""))
    run_config = dict(context.run_config)
    run_config.update({key: value for key, value in (settings or {}).items()
                       if key in CLIENT_SETTINGS})
    run_key = tuple(sorted(run_config.items()))
    if _RUN_KEY != [run_key]:  # a new run: forget the previous run's data
        _NODES.clear()
        forget_clipping_warning()
        _RUN_KEY[:] = [run_key]
    key = (partition_id, num_partitions, data_path)
    if key in _NODES:
        _NODES.move_to_end(key)
        return _NODES[key]
    config = parse_config(run_config)
    # a radius the server resolved (`auto`) is summarised once by the server, privately
    declared_radius = str(context.run_config.get("privacy.data-radius", "")).lower() != "auto"
    node = NodeData.load(config, partition_id, num_partitions, data_path,
                         warn=declared_radius)
    _NODES[key] = node
    budget = config.federation.node_cache_mb * 2**20
    if budget:
        held = sum(n.nbytes for n in _NODES.values())
        while len(_NODES) > 1 and held > budget:
            held -= _NODES.popitem(last=False)[1].nbytes
    return node


def forget_clipping_warning() -> None:
    """Let the next node that clips warn again (one warning per run and process)."""
    from fedkmeans import node

    node._CLIP_WARNED.clear()


def forget_nodes() -> None:
    """Drop the loaded nodes of this process (the in-process engine, after its run)."""
    _NODES.clear()
    _RUN_KEY.clear()


def _reply(msg: Message, clients, stats: dict) -> Message:
    return Message(pack({"client_ids": clients, **stats}), reply_to=msg)


@app.query("register")
def register(msg: Message, context: Context) -> Message:
    """Announce the hosted client ids and the feature dimension (no data values)."""
    node = node_data(context)
    return Message(pack({"client_ids": node.client_ids}, {"dim": node.dim}), reply_to=msg)


def serve(stage: Stage) -> None:
    """Answer ``query.<stage.name>`` with the stage's statistics for the asked clients.

    The rows are the stage's ``client`` computation (or its ``wire`` form: upper
    triangles for a symmetric statistic), one per asked client, stacked. Subscribed to
    the stage registry: every registered stage is served, including one registered
    after this module was imported.
    """

    def reply(msg: Message, context: Context) -> Message:
        arrays, settings = unpack(msg.content)
        clients = arrays["client_ids"]
        node = node_data(context, settings)
        compute = stage.wire or stage.client
        stats = compute(node, clients.tolist(), {**settings, **arrays})
        return _reply(msg, clients, stats)

    reply.__doc__ = f"Stage {stage.name!r} ({stage.group})."
    app.query(stage.name)(reply)


subscribe(serve)


@app.query("evaluate")
def evaluate(msg: Message, context: Context) -> Message:
    """Non-private evaluation of the final centers over every hosted client."""
    arrays, settings = unpack(msg.content)
    return Message(pack(node_data(context, settings).evaluate(arrays["centers"])),
                   reply_to=msg)


@app.train(mods=[secaggplus_mod])
def secagg_contribution(msg: Message, context: Context) -> Message:
    """One protocol round under SecAgg+: this node's encoded noisy sum, weight 1.

    The request is the ``FitIns`` built by :class:`fedkmeans.server.secagg.
    SecAggAggregator` (asked client ids, broadcast arrays, per-statistic share scale
    and grid step). Noise shares always come from the operating system's CSPRNG,
    fresh per client and release (:mod:`fedkmeans.privacy.randomness`): nothing the
    server sets or knows (run config, seed, run id, an earlier run) determines them.
    The reply's metrics are empty: only the masked vector leaves the node.
    """
    fitins = compat.recorddict_to_fitins(msg.content, keep_input=True)
    settings = fitins.config
    payload = parameters_to_ndarrays(fitins.parameters)
    names = [n for n in str(settings[wire.SECAGG_ARRAYS]).split(",") if n]
    arrays = dict(zip(names, payload[1:], strict=True))
    clients = payload[0].astype(int).tolist()
    node = node_data(context, dict(settings))
    stats = stage(str(settings[wire.SECAGG_STAGE])).client(node, clients, arrays)
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
