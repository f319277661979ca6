"""The bundled Flower ClientApp: the data-set registry's nodes, mounted.

One user of :func:`fedkmeans.client.mount_source` (which registers ``register``,
``query.<stage>``, ``evaluate`` and the SecAgg+ ``train`` handler): its nodes load their
clients through the data-set registry (:mod:`fedkmeans.data`) from the node config and
the run config's ``data.*`` keys, once per process, and keep at most
``federation.node-cache-mb`` of them in memory (:func:`node_data`), spilling the rest to
files mapped per request.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from flwr.app import Context
from flwr.clientapp import ClientApp

from fedkmeans import data as data_access
from fedkmeans.client import clipped_points, mount_source
from fedkmeans.config import CLIENT_SETTINGS
from fedkmeans.config_node import with_client_settings
from fedkmeans.data.transform import IDENTITY, PublicTransform
from fedkmeans.experiment.config import from_run_config
from fedkmeans.node import NodeData, clip_radius, shard_ready

app = ClientApp()

#: Loaded nodes of the current run, least recently used first (one per node in this
#: process; a simulation actor serves many virtual nodes, the in-process engine all of
#: them). Cleared when the run config changes; what they hold in memory is bounded by
#: federation.node-cache-mb (beyond it, nodes are spilled to files).
_NODES: OrderedDict[tuple, NodeData] = OrderedDict()


@dataclass
class _CurrentRun:
    """What this process knows of the run its nodes serve (one per process)."""

    #: The run config's data keys (a change is a new run), None before the first request.
    data_key: tuple | None = None
    #: The last request's memory budget (:func:`cache_budget`), for
    #: :func:`keep_within_budget` after its computation; None: no request since a reset.
    budget: int | None = None


_CURRENT = _CurrentRun()
#: Environment variable naming a directory every process of a run shares for spilled
#: nodes (set by the flower engine; its temporary directory, removed after the run).
#: Without it a process spills to files that have no name (fedkmeans.spill_files),
#: which vanish with the process however it ends.
SHARD_DIR_ENV = "FEDKMEANS_NODE_SHARDS"
#: Fraction of the machine's memory one process keeps of its nodes' points by default,
#: by whether the engine runs the ClientApp in separate processes: a Flower
#: simulation's actors each serve every node (so each would otherwise hold them all);
#: the in-process engine holds each node once, in one process.
AUTO_CACHE_FRACTION = {True: 1 / 64, False: 1 / 4}


def machine_memory() -> int:
    """Bytes of memory of this machine (``MemTotal``), or 8 GiB if unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def cache_budget(node_cache_mb: float, engine: str = "flower") -> int:
    """Bytes of nodes' points one process keeps in memory.

    ``federation.node-cache-mb`` > 0 is that many MiB; 0 (the default) is
    :data:`AUTO_CACHE_FRACTION` of the machine's memory for the engine (on 24 GiB:
    384 MiB per Flower actor, 6 GiB in-process), at least 64 MiB. An engine that is not
    registered in this process counts as one of separate processes.
    """
    if node_cache_mb > 0:
        return int(node_cache_mb * 2**20)
    from fedkmeans.experiment.registries import ENGINES

    separate = engine not in ENGINES.names() or ENGINES[engine].separate_processes
    return max(64 * 2**20, int(machine_memory() * AUTO_CACHE_FRACTION[separate]))


def _shared_dir() -> Path | None:
    """The directory every process of this run spills nodes to, if one is set."""
    shared = os.environ.get(SHARD_DIR_ENV, "")
    return Path(shared) if shared else None


def nameless_bytes() -> int:
    """Bytes of this process's spilled nodes in files without a name (the benchmarks)."""
    return sum(node.memory.nameless_bytes for node in tuple(_NODES.values()))


def _shard_name(data_key: tuple, key: tuple, radius: float | None, transform: str = "") -> str:
    digest = hashlib.sha256(repr((data_key, key, radius, transform)).encode()).hexdigest()[:24]
    return f"node-{key[0]}-of-{key[1]}-{digest}"


def node_data(context: Context, settings: dict | None = None, *,
              clip: bool = True) -> NodeData:
    """This node's data, loaded on first use and kept while the cache allows.

    ``settings``: the request's resolved ``privacy.*`` settings (the server chose the
    ``auto`` ones from public information); they replace the run config's values; and
    the run's public transform (:mod:`fedkmeans.data.transform`, from the server's
    data), which maps the points before any clip. A node asked with other settings
    keeps its points (:meth:`NodeData.retarget`: they are mapped and clipped when
    first asked with the transform and the data radius) and is loaded again only when
    its points were clipped to another radius or mapped by another transform.
    ``clip=False`` (registration, before the transform is sent): a node loaded now
    keeps its points as loaded.

    Flower's simulation sends any virtual node's message to any actor, so without a
    bound every actor would end up holding every node it has served. The process
    keeps at most :func:`cache_budget` bytes of nodes' points in memory (always the
    current node); beyond it the least recently used nodes are *spilled*: their points
    go to a file once and each request maps it (:meth:`NodeData.resident`), from the
    page cache. Under the flower engine the actors share one directory and every node
    is written there when first built, so an actor asked for a node another one built
    maps its file instead of building it again. Use the node inside
    ``with node.resident():``.
    """
    node_config = context.node_config
    partition_id = int(node_config.get("partition-id", 0))
    num_partitions = int(node_config.get("num-partitions", 1))
    data_path = str(node_config.get("data-path", ""))
    run_config = context.run_config
    data_key = tuple(sorted((k, v) for k, v in run_config.items() if k not in CLIENT_SETTINGS))
    if _CURRENT.data_key != data_key:  # a new run: forget the previous run's data
        _forget_loaded()
        forget_clipping_warning()
        _CURRENT.data_key = data_key
    key = (partition_id, num_partitions, data_path)
    experiment = from_run_config(run_config)  # the data settings the clients load from
    config = with_client_settings(experiment.protocol, settings)
    transform = PublicTransform.from_settings(settings)
    # a radius the server resolved (`auto`) is summarised once by the server, privately
    warn = str(context.run_config.get("privacy.data-radius", "")).lower() != "auto"
    shared = _shared_dir()
    radius = clip_radius(config) if clip else None
    node = _NODES.get(key)
    if node is not None:
        _NODES.move_to_end(key)
        if clip:
            node = node.retarget(config, partition_id, warn=warn, transform=transform)
    if node is None and shared:
        # one file per node, its points as built and mapped, written by the first actor
        # that builds it; every actor maps it and clips to the request's radius
        shard = shared / _shard_name(data_key, key, None, transform.digest)
        built = shared / _shard_name(data_key, key, None, IDENTITY.digest)
        if shard_ready(shard):
            node = NodeData.open_spilled(config, shard, data_path, transform, source=experiment)
        elif shard_ready(built):  # written at registration, as built: read, not built again
            node = NodeData.open_spilled(config, built, data_path,
                                         source=experiment).in_memory()
            node.transform_to(transform)
            node.spill(shared, shard.name)
        else:
            node = NodeData.load(config, partition_id, num_partitions, data_path,
                                 warn=warn, clip=False, transform=transform, source=experiment)
            node.spill(shared, shard.name)
        node.aim(radius)
    if node is None:
        node = NodeData.load(config, partition_id, num_partitions, data_path, warn=warn,
                             clip=clip, transform=transform, source=experiment)
    budget = cache_budget(config.federation.node_cache_mb, experiment.federation.engine)
    _CURRENT.budget = budget
    if _NODES.get(key) is not node:
        _NODES[key] = node
        _NODES.move_to_end(key)
        _bound(data_key, key, budget, shared)
    return node


def keep_within_budget() -> None:
    """After a request: drop reusable rows until the nodes fit in the budget again.

    A computation may keep rows for a later round (the estimate round's ``X^T X``
    for step 1, :class:`~fedkmeans.node.reusable.ReusableRows`); those of the least
    recently used nodes go first, the current node's last, so the bound holds however
    large one node is (its points are spilled as before).
    """
    budget = _CURRENT.budget
    if budget is None or not any(len(n.reusable) for n in _NODES.values()):
        return  # nothing that could be dropped (and no node's bytes to add up)
    held = sum(n.nbytes for n in _NODES.values())
    for node in list(_NODES.values()):  # least recently used first; the current last
        if held <= budget:
            return
        held -= node.reusable.clear()


def _bound(data_key: tuple, current: tuple, budget: int, shared: Path | None) -> None:
    """Spill the least recently used nodes until those in memory fit in ``budget``.

    The rows nodes keep for reuse go first (:func:`keep_within_budget`: a dropped row
    is computed again), then the points of the least recently used nodes.
    """
    held = sum(n.nbytes for n in _NODES.values())
    for other_key in list(_NODES):
        if held <= budget:
            return
        if other_key != current:
            held -= _NODES[other_key].reusable.clear()
    for other_key in list(_NODES):
        if held <= budget:
            break
        other = _NODES[other_key]
        if other_key == current or not other.nbytes:
            continue
        freed = other.nbytes
        spilled = (other.spill(shared, _shard_name(data_key, other_key, other.radius,
                                                    other.transform.digest))
                   is not None if shared else other.spill_nameless())
        if not spilled:
            del _NODES[other_key]  # cannot be spilled (ragged clients): loaded again
        held -= freed


def _forget_loaded() -> None:
    """Drop this process's nodes and free its nameless files (not a shared directory's)."""
    for node in _NODES.values():
        node.memory.close()
    _NODES.clear()
    _CURRENT.budget = None


def forget_clipping_warning() -> None:
    """Let the next node that clips warn again (one warning per run and process)."""
    from fedkmeans.node import CLIP_WARNINGS

    CLIP_WARNINGS.forget()


def forget_nodes() -> None:
    """Drop the loaded nodes of this process (the in-process engine, after its run)."""
    _forget_loaded()
    _CURRENT.data_key = None




class RegistrySource:
    """The bundled nodes: clients from the data-set registry, kept by :func:`node_data`.

    A node finds its clients from its node config (``partition-id``/``num-partitions``,
    or a deployed node's ``data-path``) and the run config's ``data.*`` keys.
    """

    def register(self, context: Context) -> tuple[np.ndarray, int]:
        """The hosted client ids and the feature dimension (no data values).

        A data set whose dimension the run config declares (the generated mixture) gives
        its ids and dimension without data; the registration handler then builds the
        points under the request's settings (:func:`fedkmeans.client.mount_source`). A
        file is read here, as loaded, for its dimension; it is mapped by the run's
        transform and clipped when first asked (:func:`node_data`), not read again.
        """
        config = from_run_config(context.run_config)
        node_config = context.node_config
        dim = data_access.dataset(config.data.name).declared_dim(config)
        if dim is not None and not node_config.get("data-path"):
            ids = data_access.node_client_ids(config, int(node_config.get("partition-id", 0)),
                                              int(node_config.get("num-partitions", 1)))
            return ids, dim if ids.size else 0
        node = node_data(context, clip=False)  # mapped and clipped when first asked
        return node.client_ids, node.dim

    def node(self, context: Context, settings: dict) -> NodeData:
        """:func:`node_data` under the request's settings."""
        return node_data(context, settings)

    def after_request(self) -> None:
        """:func:`keep_within_budget`: the rows kept for reuse stay within the bound."""
        keep_within_budget()

    def evaluate(self, context: Context, settings: dict,
                 centers: np.ndarray) -> dict[str, np.ndarray]:
        """NON-PRIVATE: the node's ``arithmetic.evaluate`` and ``clipped_points``.

        A clipped client's points before the clip are rebuilt from the rows the clip
        moved, or reloaded from the data set.
        """
        with node_data(context, settings).resident() as node:
            out = node.arithmetic.evaluate(centers)
            out["clipped_points"] = np.array([float(clipped_points(node))])
        return out


mount_source(app, RegistrySource())
