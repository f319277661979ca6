"""One node's clients: loaded once, mapped by the run's transform, clipped to the radius.

A node hosts one or many (virtual) clients. :class:`NodeData` is the ClientApp's view
of them, by job:

* this module: what points the node holds -- loaded (only its own clients), mapped by
  the public transform, clipped to the data radius, and re-aimed when the server's
  settings change (:meth:`NodeData.retarget`);
* :mod:`fedkmeans.node.memory` (:class:`~fedkmeans.node.memory.NodeMemory`): where the
  points live -- one stacked array, spilled to files and mapped per request under
  the process's memory bound;
* :mod:`fedkmeans.node.arithmetic` (:class:`~fedkmeans.node.arithmetic.StageArithmetic`):
  what each stage asks of the clients -- one row per requested client, stacked;
* :mod:`fedkmeans.node.secagg` (:class:`~fedkmeans.node.secagg.SecAggEncoding`): the
  node's encoded SecAgg+ input.

Client-side privacy duties (the server re-clips anyway):

* every point is mapped by the run's public transform (``(x - mu) / s`` from the
  server's data, :mod:`fedkmeans.data.transform`) and then clipped to
  ``privacy.data-radius`` before any statistic (here);
* at client level, each client clips its own statistic to the configured bound
  (:mod:`fedkmeans.node.arithmetic`);
* with ``privacy.epsilon = inf`` nothing is clipped (the non-private algorithm);
* with ``privacy.aggregation = secagg`` (:meth:`NodeData.secagg_contribution`) every
  client also applies the server's bound and adds its own noise share, and the node
  sends only the sum over its clients, encoded for SecAgg+.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from fedkmeans import data as data_access
from fedkmeans.config import AUTO, ProtocolConfig
from fedkmeans.console import NOT_PRIVATE, diagnostics_on_console
from fedkmeans.data.catalog import RunConfig
from fedkmeans.data.transform import IDENTITY, PublicTransform
from fedkmeans.node.arithmetic import StageArithmetic
from fedkmeans.node.memory import NodeMemory
from fedkmeans.node.reusable import ReusableRows
from fedkmeans.node.secagg import SecAggEncoding
from fedkmeans.node.shard import read_meta, shard_ready, write_shard
from fedkmeans.privacy.clipping import clip_rows_l2, row_norms

__all__ = ["CLIP_WARNINGS", "NodeData", "clip_radius", "shard_ready", "write_shard"]

LOG = logging.getLogger(__name__)
#: Most rows moved by the clip to the data radius kept as they were, as a fraction of
#: the node's points (:attr:`NodeData.unclipped_rows`): the
#: default radius (the 0.99 quantile of the norms) moves about 1 %; a radius far inside
#: the data would double the node's memory, and its check reloads the clients instead.
KEEP_UNCLIPPED_MAX_FRACTION = 0.125


class _FirstClipWarning:
    """Whether a node of this process has logged its clipping yet (the first one warns).

    One per process (:data:`CLIP_WARNINGS`); the ClientApp forgets it when a new run
    starts (:func:`fedkmeans.client_app.forget_clipping_warning`).
    """

    def __init__(self) -> None:
        self._logged = False

    def first(self) -> bool:
        """True for the first node that logs its clipping since the last :meth:`forget`."""
        logged, self._logged = self._logged, True
        return not logged

    def forget(self) -> None:
        """Let the next node that clips warn again."""
        self._logged = False


#: This process's :class:`_FirstClipWarning`.
CLIP_WARNINGS = _FirstClipWarning()


class NodeData:
    """The clients one node hosts, loaded once: their points as the run's stages see them.

    Its job here: loading, the public transform, the clip to the data radius and its
    record (the points before the clip, :class:`~fedkmeans.node.arithmetic.PointsBeforeClip`).
    Its parts, each with one job:

    * :attr:`memory` (:class:`~fedkmeans.node.memory.NodeMemory`): where the points
      live, stacked, in memory or spilled;
    * :attr:`reusable` (:class:`~fedkmeans.node.reusable.ReusableRows`): step 1's rows
      the estimate round kept;
    * :attr:`arithmetic` (:class:`~fedkmeans.node.arithmetic.StageArithmetic`): what
      each stage asks of the clients, over the memory's points;
    * :attr:`secagg` (:class:`~fedkmeans.node.secagg.SecAggEncoding`): the SecAgg+
      input.

    Parameters
    ----------
    config : ProtocolConfig
    client_ids : ndarray of shape (n_hosted,)
    points : dict of int to ndarray of shape (n_j, d)
        Each client's points as loaded (the node maps and clips them, :meth:`load`).
    labels : dict of int to ndarray of shape (n_j,) or None
    data_path : str
        A deployed node's data file ('' : the data-set registry).
    originals : callable (client id) -> ndarray of shape (n_j, d), optional
        A client's points as loaded, for the rounds that read a clipped client's
        original points (the check, the evaluation); None: reloaded from the data set.
    source : RunConfig, optional
        The data settings the data-set registry loads the clients from
        (:class:`fedkmeans.data.catalog.RunConfig`: the harness's experiment config,
        handed in by its ClientApp); None: ``config`` carries them.
    """

    def __init__(self, config: ProtocolConfig, client_ids: np.ndarray,
                 points: dict[int, np.ndarray], labels: dict[int, np.ndarray | None],
                 data_path: str = "", *,
                 originals: Callable[[int], np.ndarray] | None = None,
                 memory: NodeMemory | None = None, source: RunConfig | None = None) -> None:
        self.config = config
        self.source = config if source is None else source
        self.data_path = data_path
        self.originals = originals
        self.memory = NodeMemory(client_ids, points, labels) if memory is None else memory
        #: Rows the estimate round computed that step 1 takes while the points are the same.
        self.reusable = ReusableRows()
        #: Clients with points clipped to the data radius (the check and the evaluation
        #: rebuild or reload only those).
        self.clipped_clients: frozenset[int] = frozenset()
        #: Each client's points' norms before the clip to the data radius (the estimate
        #: round's norm histogram); absent: the points' own norms.
        self.raw_norms: dict[int, np.ndarray] = {}
        #: The radius the points are clipped to (None: as loaded).
        self.radius: float | None = None
        #: The public transform the points were mapped by before any clip (as loaded: none).
        self.transform: PublicTransform = IDENTITY
        #: The rows the clip to the data radius moved, as they were before it (mapped by
        #: ``transform``): ``{client: (row indices, rows)}``, for the final check and the
        #: evaluation, which read the points before the clip; without them the client is
        #: reloaded.
        self.unclipped_rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        #: The radius the spilled file's points are clipped to (None: as built).
        self._file_radius: float | None = None
        #: The radius ``clipped_clients`` were found for when the file was mapped.
        self._clip_known: float | None = None

    # -- the parts ---------------------------------------------------------------
    @property
    def arithmetic(self) -> StageArithmetic:
        """The stages' statistics over this node's points under its current config."""
        return StageArithmetic(self.config, self.memory, self.reusable, self)

    @property
    def secagg(self) -> SecAggEncoding:
        """The SecAgg+ encoding under this node's current privacy settings."""
        return SecAggEncoding(self.config.privacy)

    def secagg_contribution(self, clients: Sequence[int], stats: dict[str, np.ndarray],
                            *args, **kwargs) -> list[np.ndarray]:
        """This node's encoded SecAgg+ input (:meth:`SecAggEncoding.contribution`).

        The one entry the ClientApp calls (and tests and benchmarks seed).
        """
        return self.secagg.contribution(clients, stats, *args, **kwargs)

    # -- the node's data, as its parts hold it ---------------------------------------
    @property
    def client_ids(self) -> np.ndarray:
        """The hosted clients' ids, shape (n_hosted,)."""
        return self.memory.client_ids

    @property
    def points(self) -> dict[int, np.ndarray]:
        """Each client's points, shape (n_j, d): mapped, and clipped when private.

        Read inside :meth:`resident` when the node may be spilled.
        """
        return self.memory.points

    @property
    def labels(self) -> dict[int, np.ndarray | None]:
        """Each client's labels, shape (n_j,), or None."""
        return self.memory.labels

    @property
    def dim(self) -> int:
        """Feature dimension d (0 if the node hosts no client)."""
        return self.memory.dim

    @property
    def nbytes(self) -> int:
        """Bytes this node holds in memory: points, labels, norms and reusable rows.

        A spilled node holds only its reusable rows (:attr:`reusable`).
        """
        return self.memory.nbytes + self.reusable.nbytes

    @classmethod
    def of_block(cls, config: ProtocolConfig, client_ids: np.ndarray, stacked: np.ndarray,
                 offsets: np.ndarray) -> NodeData:
        """A node whose clients' points are consecutive row slices of ``stacked``.

        Client ``client_ids[i]`` holds rows ``offsets[i]:offsets[i + 1]`` (``offsets``
        of shape (m + 1,), from 0 to ``stacked.shape[0]``); no labels. The node reads
        ``stacked`` and never writes it (a clip copies it first). The same node as one
        built from the slices, without checking each of them is one
        (the tuning's simulated federations, thousands of small clients).
        """
        memory = NodeMemory.of_block(client_ids, stacked, offsets)
        return cls(config, memory.client_ids, memory.points, memory.labels, memory=memory)

    @classmethod
    def open_spilled(cls, config: ProtocolConfig, path: str | os.PathLike,
                     data_path: str = "", transform: PublicTransform = IDENTITY, *,
                     source: RunConfig | None = None) -> NodeData:
        """A node whose points another process spilled to ``path`` (same run, same node).

        ``transform``: the one the file's points were mapped by (part of its name).
        """
        path = Path(path)
        meta = read_meta(path)
        memory = NodeMemory.of_shard(path, meta)
        node = cls(config, memory.client_ids, memory.points, memory.labels, data_path,
                   memory=memory, source=source)
        node.clipped_clients, node.raw_norms = meta.clipped, meta.raw_norms
        node.radius, node.transform = meta.radius, transform
        node._file_radius = node.radius
        return node

    # -- memory: the points may live in a file, mapped while a request runs ----------
    def spill(self, directory: str | os.PathLike, name: str) -> Path | None:
        """Move the points, labels and clip record to the shard ``directory/name``.

        :meth:`NodeMemory.spill <fedkmeans.node.memory.NodeMemory.spill>` with this
        node's shard (:func:`~fedkmeans.node.shard.write_shard`: the points, and the
        clip record so that a process mapping it knows what this one did). Returns the
        shard's path, or None when the node cannot be spilled.
        """
        was_spilled = self.memory.spilled
        path = self.memory.spill(directory, name, lambda target: write_shard(target, self))
        if not was_spilled and self.memory.spilled:
            self._file_radius = self.radius
        return path

    def spill_nameless(self) -> bool:
        """Move the points to files of this process that have no name.

        :meth:`NodeMemory.spill_nameless <fedkmeans.node.memory.NodeMemory.spill_nameless>`,
        with the points' norms when they are as built (for their clip when mapped).
        Returns False when the node cannot be spilled.
        """
        if self.memory.spilled or self.memory.stacked is None:
            return self.memory.spilled
        norms = self._raw_point_norms() if self.radius is None else None
        self._file_radius = self.radius
        return self.memory.spill_nameless(norms)

    @contextmanager
    def resident(self) -> Iterator[NodeData]:
        """This node with its points in reach while the block runs (mapped if spilled).

        A file of points as built (before the radius was known) is mapped
        copy-on-write and clipped as :meth:`load` would (:meth:`_clip_mapped`).
        """
        clip = self.radius is not None and self._file_radius is None
        with self.memory.mapped(copy_on_write=clip, on_map=(
                (lambda: self._clip_mapped(self.memory.norms)) if clip else None)):
            yield self

    # -- the points before the clip (PointsBeforeClip, read by the arithmetic) -------
    def _raw_point_norms(self) -> np.ndarray | None:
        """Every point's norm before the clip to the data radius, shape (n,), in stacked order.

        Computed by the first pass that needs them (the estimate round's norm
        histogram, the clip to the data radius, a spill of points as built) and kept
        by the memory while the points stay as mapped, so the node reads its points'
        norms once. None when they cannot be had without a pass per client: a ragged
        node, or one whose points were clipped before any norm was kept.
        """
        memory = self.memory
        if memory.norms is None and memory.stacked is not None and self.radius is None:
            memory.norms = row_norms(memory.stacked)
        return memory.norms

    def point_norms(self, clients: Sequence[int]) -> np.ndarray:
        """The asked clients' points' norms before the clip, in order, shape (n,)."""
        all_norms = self._raw_point_norms()
        if all_norms is not None:
            return self.memory.rows_of(all_norms, clients)
        return np.concatenate([self.raw_norms[c] if c in self.raw_norms
                               else row_norms(self.memory.points[c])
                               for c in clients] or [np.zeros(0)])

    def original_segments(self, clients: list[int]) -> list[tuple[np.ndarray, bool]]:
        """The clients' points before the clip, in order, as few arrays as possible.

        ``(points, mapped)``: runs of consecutive clients whose points were not clipped
        are slices of the stacked points (no copy; ``mapped``: as the stages see them,
        to be mapped back by the inverse of ``transform`` for the data's own space); a
        clipped client's points are rebuilt from its clipped points and the rows the
        clip moved, as they were (``unclipped_rows``; ``mapped``, the same bits as its
        reloaded points mapped by ``transform``), or reloaded as loaded when those rows
        were not kept.
        """
        def original(c: int) -> tuple[np.ndarray, bool]:
            if c in self.unclipped_rows:
                rows, before = self.unclipped_rows[c]
                restored = np.array(self.memory.points[c])
                restored[rows] = before
                return restored, True
            return self._original(c), False

        if self.memory.stacked is None:
            return [original(c) if c in self.clipped_clients else (self.memory.points[c], True)
                    for c in clients]
        segments, run = [], []
        for c in clients + [None]:
            if c is not None and c not in self.clipped_clients:
                run.append(c)
                continue
            if run:
                segments.append((self.memory.pooled(run)[0], True))
                run = []
            if c is not None:
                segments.append(original(c))
        return segments

    def _original(self, client: int) -> np.ndarray:
        """One client's points as loaded (``originals``, else reloaded from the data set)."""
        if self.originals is not None:
            return self.originals(client)
        return data_access.load_client(self.source, client, self.data_path)[0]


    @classmethod
    def load(
        cls, config: ProtocolConfig, partition_id: int, num_partitions: int,
        data_path: str = "", *, warn: bool = True, clip: bool = True,
        transform: PublicTransform = IDENTITY, source: RunConfig | None = None,
    ) -> NodeData:
        """Load only this node's clients (never another node's data).

        The points are mapped by ``transform`` (:meth:`transform_to`), then clipped to
        the data radius (:func:`clip_radius`), as :meth:`clip_to` does (``clip=False``:
        left unclipped). ``warn``: log points
        clipped to the data radius as a warning (the first node of the process; the
        others, and every node when ``warn`` is False, at DEBUG). ``source``: the data
        settings the clients are loaded from (the harness's experiment config; None:
        ``config`` carries them).
        """
        source = config if source is None else source
        ids = data_access.node_client_ids(source, partition_id, num_partitions, data_path)
        points, labels, owned = {}, {}, True
        for cid, x, y, own in _clients(source, ids, data_path):
            points[cid], labels[cid] = x, y
            owned = owned and own
        node = cls(config, ids, points, labels, data_path, source=source)
        node.memory.owned = node.memory.owned or owned
        node.transform_to(transform)
        if clip:
            node.clip_to(clip_radius(config), partition_id, warn=warn)
        return node

    def transform_to(self, transform: PublicTransform) -> None:
        """Map the (untransformed, unclipped) points by ``transform``, before any clip.

        The node's own block is mapped in place; a loader's arrays, which may be
        shared, are replaced by mapped copies (the same bits). In a private run the
        mapped points' norms, which the clip to the data radius and the estimate round
        read, are computed in the same pass, :data:`MAP_ROWS` rows at a time while
        they are in the cache (the same bits as :func:`row_norms` of the mapped block):
        a node built at registration reads its points once for both.
        """
        if transform == self.transform:
            return
        if not self.transform.is_identity or self.radius is not None \
                or self.memory.spilled:
            raise ValueError("transform_to needs the node's points as loaded, in memory")
        if self.memory.points:
            transform.check_dim(self.memory.dim)
        norms = None
        if self.memory.stacked is not None:
            source = self.memory.stacked
            mapped = source if self.memory.owned else np.empty(source.shape)
            norms = np.empty(source.shape[0]) if self.config.is_private else None
            for start in range(0, source.shape[0], MAP_ROWS):
                block = source[start:start + MAP_ROWS]
                block = transform.apply(block, out=block if mapped is source
                                        else mapped[start:start + MAP_ROWS])
                if norms is not None:
                    norms[start:start + block.shape[0]] = row_norms(block)
            memory = self.memory
            memory.adopt(memory.order, memory.offsets, mapped, memory.labels_stacked)
            self.memory.owned = True
        else:
            self.memory.points = {c: transform.apply(x) for c, x in self.memory.points.items()}
        self.transform = transform
        self.memory.norms = norms  # of the mapped points (None: computed when first needed)
        self.reusable.clear()

    def clip_to(self, radius: float | None, partition_id: int = 0, *,
                warn: bool = True) -> None:
        """Clip the (unclipped) points to ``radius`` (None: leave them as they are).

        Points of the node's own block are clipped in place (the same bits as a clipped
        copy); a loader's arrays, which may be shared, are replaced by clipped copies.
        Records the clipped clients and their points' norms before the clip.
        """
        if radius is None:
            return
        if self.radius is not None or self.memory.spilled:
            raise ValueError("clip_to needs the node's unclipped points in memory")
        if self.memory.stacked is not None and not self.memory.owned:
            self.memory.adopt(self.memory.order, self.memory.offsets, self.memory.stacked.copy(),
                        self.memory.labels_stacked)
            self.memory.owned = True
        self.clipped_clients, self.raw_norms, clipped, total = self._clip_points(radius)
        self.radius = float(radius)
        if clipped and diagnostics_on_console():
            # a count of the node's data: logged only with the operator's opt-in
            # (fedkmeans.console), since a simulation's nodes log to the server's console;
            # the server gets it from the non-private evaluation round only
            # (diagnostics.json, metrics.clipped_points).
            # One warning per process: a simulation's nodes share a few processes, and
            # the server's summary line comes from the estimate round's release.
            first = CLIP_WARNINGS.first()
            log = LOG.warning if warn and first else LOG.debug
            log(
                NOT_PRIVATE + " node %d: %d of %d points (%.1f%%) lie outside "
                "privacy.data-radius = %g and "
                "were clipped onto it%s%s", partition_id, clipped, total, 100 * clipped / total,
                radius, " -- every point: is data-radius far too small for this data?"
                if clipped == total else "",
                "" if log is LOG.debug else " (other nodes of this process log at DEBUG)",
            )

    def _clip_points(self, radius: float, all_norms: np.ndarray | None = None,
                     ) -> tuple[frozenset, dict, int, int]:
        """Clip every client's points to ``radius`` in place (a ragged node: copies).

        Returns the clipped clients, their points' norms before the clip, and the
        numbers of clipped and of all points. The rows the clip moves are kept as
        they were (:attr:`NodeData.unclipped_rows`, at most
        :data:`KEEP_UNCLIPPED_MAX_FRACTION` of the node's points, else none). Each
        client's rows go through :func:`~fedkmeans.privacy.clipping.clip_rows_l2`, so
        the bits do not depend on where the points live. The norms of all points are
        those the node already has (``all_norms``, or kept by the estimate round: no
        second pass) and stay kept, as the points' norms before the clip; the rows kept
        for reuse of the clients it clips are dropped
        (:class:`~fedkmeans.node.reusable.ReusableRows`).
        """
        clipped = total = kept_rows = 0
        clipped_clients, raw_norms = set(), {}
        kept: dict | None = {}
        keep_limit = KEEP_UNCLIPPED_MAX_FRACTION * sum(
            x.shape[0] for x in self.memory.points.values())
        if self.memory.stacked is not None:  # the norms of all points at once
            if all_norms is None:
                all_norms = self._raw_point_norms()
            if all_norms is None:  # the file's points as built, mapped without norms
                all_norms = row_norms(self.memory.stacked)
            self.memory.norms = all_norms
        for cid in self.memory.client_ids.tolist():
            x = self.memory.points.get(cid)
            if x is None:
                continue
            total += x.shape[0]
            if self.memory.stacked is not None:
                i = self.memory.position[cid]
                norms = all_norms[self.memory.offsets[i]:self.memory.offsets[i + 1]]
            else:
                norms = row_norms(x)
            outside = int((norms > radius).sum())
            if outside:
                inside = clip_rows_l2(x, radius)
                if kept is not None:
                    moved = np.flatnonzero((inside != x).any(axis=1))
                    kept[cid] = (moved, x[moved].copy())
                    kept_rows += moved.size
                    if kept_rows > keep_limit:
                        kept = None  # too many: the check reloads the clipped clients
                if self.memory.stacked is not None:  # the client's own rows of the node's block
                    x[...] = inside
                else:
                    self.memory.points[cid] = inside
                clipped += outside
                clipped_clients.add(cid)
                raw_norms[cid] = norms.copy()
        self.reusable.forget(clipped_clients)
        self.unclipped_rows = kept or {}
        return frozenset(clipped_clients), raw_norms, clipped, total

    def _clip_mapped(self, norms: np.ndarray | None) -> None:
        """Clip the points just mapped from a file of points as built (copy-on-write).

        The clients found clipped the last time the file was mapped at this radius are
        clipped again, without a pass over the others; otherwise every client is
        checked (with ``norms``, every point's norm, when the file has them) as
        :meth:`clip_to` would.
        """
        if self._clip_known == self.radius:  # the same clients as last time
            for cid in self.clipped_clients:
                x = self.memory.points[cid]
                x[...] = clip_rows_l2(x, self.radius)
            return
        self.clipped_clients, self.raw_norms, _, _ = self._clip_points(self.radius, norms)
        self._clip_known = self.radius

    def aim(self, radius: float | None) -> bool:
        """A spilled node of unclipped points: clip them to ``radius`` when mapped.

        Returns False when the file's points were clipped to another radius (the node
        must be loaded again).
        """
        if not self.memory.spilled or self._file_radius not in (None, radius):
            return False
        if radius != self.radius:
            self.radius = radius
            self.clipped_clients, self.raw_norms, self.unclipped_rows = frozenset(), {}, {}
            self._clip_known = None
        return True

    def retarget(self, config: ProtocolConfig, partition_id: int = 0, *,
                 warn: bool = True, transform: PublicTransform = IDENTITY) -> NodeData | None:
        """This node's data under ``config`` and ``transform`` (other client settings).

        The server resolves the ``auto`` settings after the estimate round, so a node
        is first asked with its points unclipped and then with a data radius: the
        points are clipped then (in place, or from a spilled node's file into memory),
        not generated again. A node loaded to register (as loaded, in memory or spilled
        as built) is mapped by the run's transform when first asked. Returns None when
        the node must be loaded again (its points were clipped to another radius, or
        mapped by another transform).
        """
        radius = clip_radius(config)
        if transform != self.transform:
            if self.radius is not None or not self.transform.is_identity \
                    or (self.memory.spilled and self._file_radius is not None):
                return None
            node = self.in_memory() if self.memory.spilled else self
            node.config = config
            node.transform_to(transform)
            node.clip_to(radius, partition_id, warn=warn)
            return node
        if radius == self.radius:
            self.config = config
            return self
        if self.memory.spilled and self.aim(radius):  # clipped when mapped
            self.config = config
            return self
        if self.radius is not None:
            return None
        node = self.in_memory() if self.memory.spilled else self
        node.config = config
        node.clip_to(radius, partition_id, warn=warn)
        return node

    def in_memory(self) -> NodeData:
        """A spilled node's points read into this process: a node of its own array.

        For a file of points as built (unclipped), before they are mapped or clipped in
        memory; reading the file (from the page cache) replaces building them again.
        """
        with self.resident():
            memory = self.memory
            stacked = np.array(memory.stacked)
            labels = None if memory.labels_stacked is None else np.array(memory.labels_stacked)
            order, offsets = memory.order, memory.offsets
        node = NodeData(self.config, self.memory.client_ids, {}, dict(self.memory.labels),
                        self.data_path, source=self.source)
        node.memory.adopt(order, offsets, stacked, labels)
        node.memory.owned = True
        node.transform = self.transform
        return node


def clip_radius(config: ProtocolConfig) -> float | None:
    """The radius a node clips its points to under ``config``; None: not clipped.

    Not clipped: no privacy, or a radius the server has yet to resolve (``auto``, before
    the estimate round's release).
    """
    radius = config.privacy.data_radius
    return float(radius) if config.is_private and radius != AUTO else None


#: Rows mapped (and their norms taken) at a time by :meth:`NodeData.transform_to`:
#: 2048 x d = 100 doubles, 1.6 MB, stay in the cache between the two.
MAP_ROWS = 2048


#: A spilled node's files (:meth:`NodeData.spill`); ``done`` is written last.
def _clients(source: RunConfig, ids: np.ndarray, data_path: str):
    """Each hosted client's (id, points, labels, owned); views of one block if there is one.

    ``owned``: the points are this node's own array (it may clip them in place).

    A generated data set (the mixture) builds its clients straight into one array
    (:meth:`~fedkmeans.data.catalog.Dataset.block`, bit-identical to one client at a
    time), which the node then keeps as is.
    """
    block = (None if data_path or not ids.size
             else data_access.dataset(source.data.name).block(source, ids))
    if block is not None:
        x, y, sizes = block
        ends = np.cumsum(sizes)
        for cid, end, size in zip(ids.tolist(), ends.tolist(), sizes.tolist(), strict=True):
            yield cid, x[end - size:end], None if y is None else y[end - size:end], True
        return
    for cid in ids.tolist():
        x, y = data_access.load_client(source, cid, data_path)
        yield cid, x, y, False
