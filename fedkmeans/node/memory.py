"""Where a node's points live: one stacked array, in memory or in files mapped per request.

:class:`NodeMemory` is the storage half of :class:`fedkmeans.node.NodeData`. It keeps
the hosted clients' points in one array, client after client in ``client_ids`` order
(``points[c]`` are views of it, so the clients of one message are one slice), and
moves that array out of the process when the ClientApp's memory bound
(``federation.node-cache-mb``, :func:`fedkmeans.client_app.cache_budget`) asks for it:

* :meth:`NodeMemory.spill` writes a shard to a directory the run's processes share
  (the flower engine's; :func:`fedkmeans.node.shard.write_shard`, atomic, owner-only),
  which any process maps again with :meth:`NodeMemory.open_spilled`;
* :meth:`NodeMemory.spill_nameless` writes files of this process that have no name
  (:class:`fedkmeans.spill_files.NamelessFiles`), so nothing is left behind;
* :meth:`NodeMemory.resident` maps them for the length of a request. A file that holds
  the points as built (before the radius was known) is clipped copy-on-write when
  mapped, by the node's own clip (``_clip_mapped``, :mod:`fedkmeans.node`).

A shard also stores the node's clip record (clipped clients, their norms before the
clip, the radius) so that a process mapping it knows what the one that wrote it did
(its files: :mod:`fedkmeans.node.shard`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedkmeans.config import ExperimentConfig
from fedkmeans.data.transform import IDENTITY, PublicTransform
from fedkmeans.node.reusable import ReusableRows
from fedkmeans.node.shard import LABELS, NORMS, POINTS, read_meta, shard_ready, write_shard
from fedkmeans.privacy.clipping import row_norms
from fedkmeans.spill_files import NamelessFiles, ShardFiles


@dataclass
class NodeMemory:
    """The points of the clients one node hosts, and where they live.

    The storage half of :class:`fedkmeans.node.NodeData` (which loads, maps and clips
    the points); it never changes a value, except through the node's own clip
    (``_clip_mapped``) when a file of points as built is mapped.

    Attributes
    ----------
    config : ExperimentConfig
    client_ids : ndarray of shape (n_hosted,)
    points : dict of int to ndarray of shape (n_j, d)
        Each client's points, mapped by ``transform`` and clipped to the data radius
        when the run is private.
    labels : dict of int to ndarray of shape (n_j,) or None
    """

    config: ExperimentConfig
    client_ids: np.ndarray
    points: dict[int, np.ndarray] = field(repr=False)
    labels: dict[int, np.ndarray | None] = field(repr=False)
    data_path: str = ""
    #: Clients with points clipped to the data radius (the check and the evaluation
    #: rebuild or reload only those).
    clipped_clients: frozenset[int] = frozenset()
    #: Each client's points' norms before the clip to the data radius (the estimate
    #: round's norm histogram); absent: the points' own norms.
    raw_norms: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    #: The radius the points are clipped to (None: as loaded).
    radius: float | None = None
    #: The public transform the points were mapped by before any clip (as loaded: none).
    transform: PublicTransform = IDENTITY
    #: The rows the clip to the data radius moved, as they were before it (mapped by
    #: ``transform``): ``{client: (row indices, rows)}``, for the final check and the
    #: evaluation, which read the points before the clip; without them the client is
    #: reloaded.
    unclipped_rows: dict[int, tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict, repr=False)
    #: A client's points as loaded, for the rounds that read a clipped client's
    #: original points (the check, the evaluation); None: reloaded from the data set.
    originals: Callable[[int], np.ndarray] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        """Keep the hosted points in one array, client after client (``client_ids``).

        ``points[c]`` become views of it, so the points of consecutive clients -- the
        batches the server asks for -- are one slice, never copied per round.
        """
        self._spilled: ShardFiles | NamelessFiles | None = None
        #: The radius the spilled file's points are clipped to (None: as built).
        self._file_radius: float | None = None
        #: The radius ``clipped_clients`` were found for when the file was mapped.
        self._clip_known: float | None = None
        self._resident = 0
        #: Every point's norm before the clip to the data radius, in stacked order
        #: (:meth:`_raw_point_norms`: computed once, by the first pass that needs them).
        self._norms: np.ndarray | None = None
        #: Rows the estimate round computed that step 1 takes while the points are the same.
        self.reusable = ReusableRows()
        #: The points are this node's own array (it may clip them in place).
        self._owned = False
        order = [c for c in self.client_ids.tolist() if c in self.points]
        arrays = [self.points[c] for c in order]
        self._stacked = None
        self._labels_stacked = None
        if not arrays or len(order) != len(self.points) or any(
                x.ndim != 2 or x.shape[1] != arrays[0].shape[1] for x in arrays):
            return
        sizes = np.array([x.shape[0] for x in arrays])
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        first = arrays[0]
        if first.base is not None and _is_block(first.base, arrays, offsets):
            stacked = first.base  # already one array, client after client (load)
        else:
            stacked = np.concatenate(arrays)
            self._owned = True
        labels = [self.labels.get(c) for c in order]
        labels_stacked = None
        if all(y is not None and y.ndim == 1 for y in labels) and sum(
                y.size for y in labels) == offsets[-1]:
            labels_stacked = (labels[0].base if labels[0].base is not None
                              and _is_block(labels[0].base, labels, offsets)
                              else np.concatenate(labels))
        self._adopt(order, offsets, stacked, labels_stacked)

    @classmethod
    def of_block(cls, config: ExperimentConfig, client_ids: np.ndarray, stacked: np.ndarray,
                 offsets: np.ndarray) -> NodeMemory:
        """A node whose clients' points are consecutive row slices of ``stacked``.

        Client ``client_ids[i]`` holds rows ``offsets[i]:offsets[i + 1]`` (``offsets``
        of shape (m + 1,), from 0 to ``stacked.shape[0]``); no labels. The node reads
        ``stacked`` and never writes it (a clip copies it first). The same node as one
        built from the slices, without checking each of them is one
        (the tuning's simulated federations, thousands of small clients).
        """
        order = np.asarray(client_ids).tolist()
        node = cls(config, np.asarray(client_ids), {}, dict.fromkeys(order))
        node._adopt(order, offsets, stacked, None)
        return node

    def _adopt(self, order, offsets, stacked, labels_stacked) -> None:
        """Make ``points`` (and ``labels``) views of the stacked arrays."""
        self._order = list(order)
        self._offsets = np.asarray(offsets)
        self._position = {c: i for i, c in enumerate(self._order)}
        self._stacked = stacked
        self._labels_stacked = labels_stacked
        bounds = list(zip(self._offsets[:-1].tolist(), self._offsets[1:].tolist(),
                          strict=True))
        self.points = {c: stacked[a:b] for c, (a, b) in zip(self._order, bounds, strict=True)}
        if labels_stacked is not None:
            self.labels = {c: labels_stacked[a:b]
                           for c, (a, b) in zip(self._order, bounds, strict=True)}

    # -- memory: a node's points may live in a file, read while a request runs -------
    @property
    def spilled(self) -> bool:
        """True when the points live in a file (:meth:`spill`), mapped per request."""
        return self._spilled is not None

    def spill(self, directory: str | os.PathLike, name: str) -> Path | None:
        """Move the points (and labels) to the shard ``directory/name`` and free them here.

        For a directory the processes of a run share (the flower engine's). The files are
        written once (atomically: another process may read them, see
        :meth:`open_spilled`), owner-only (:func:`~fedkmeans.node.shard.write_shard`);
        :meth:`resident` maps them for the length of a request, from the page cache,
        which the kernel may reclaim: this process's resident memory no longer grows
        with the node. Whoever made ``directory`` removes it. Returns the shard's path,
        or None when the node cannot be spilled (its clients' points are not one array).
        """
        if self._spilled is not None:
            return self._spilled.path if isinstance(self._spilled, ShardFiles) else None
        if self._stacked is None:
            return None
        path = Path(directory) / name
        if not shard_ready(path):
            write_shard(path, self)
        self._file_radius = self.radius
        self._free(ShardFiles(path))
        return path

    def spill_nameless(self) -> bool:
        """Move the points (and labels) to files of this process that have no name.

        As :meth:`spill`, but the files are this process's alone (:class:`NamelessFiles`):
        they never appear in a directory, so nothing is left behind however the process
        ends (SIGKILL, a Ray actor killed, a crash). Returns False when the node cannot
        be spilled (its clients' points are not one array).
        """
        if self._spilled is not None:
            return True
        if self._stacked is None:
            return False
        arrays = {POINTS: self._stacked}
        if self._labels_stacked is not None:
            arrays[LABELS] = self._labels_stacked
        if self.radius is None:  # points as built: their norms, for the clip when mapped
            arrays[NORMS] = self._raw_point_norms()
        self._file_radius = self.radius
        self._free(NamelessFiles(arrays))
        return True

    @property
    def nameless_bytes(self) -> int:
        """Bytes of this node's points in this process's nameless files (:meth:`spill_nameless`)."""
        return self._spilled.nbytes if isinstance(self._spilled, NamelessFiles) else 0

    def close(self) -> None:
        """Free this process's nameless files of the node (a shard directory is kept)."""
        if isinstance(self._spilled, NamelessFiles):
            self._spilled.close()

    def _free(self, files: ShardFiles | NamelessFiles) -> None:
        self._spilled = files
        self._stacked = self._labels_stacked = self._norms = None
        self.points = {}
        if self.labels and all(y is not None for y in self.labels.values()):
            self.labels = {}

    @classmethod
    def open_spilled(cls, config: ExperimentConfig, path: str | os.PathLike,
                     data_path: str = "", transform: PublicTransform = IDENTITY) -> NodeMemory:
        """A node whose points another process spilled to ``path`` (same run, same node).

        ``transform``: the one the file's points were mapped by (part of its name).
        """
        path = Path(path)
        meta = read_meta(path)
        ids = meta.client_ids
        node = cls(config, ids, {},
                   {c: None for c in ids.tolist()} if not meta.has_labels else {},
                   data_path, meta.clipped, meta.raw_norms, meta.radius, transform)
        node._offsets = meta.offsets
        node._order = ids.tolist()
        node._position = {c: i for i, c in enumerate(node._order)}
        node._spilled = ShardFiles(path)
        node._file_radius = node.radius
        return node

    @contextmanager
    def resident(self) -> Iterator[NodeMemory]:
        """The points in reach while the block runs (mapped from the file if spilled).

        Nested blocks share one mapping; when the outermost ends the mapping is dropped
        (the pages stay in the page cache for the next request, not in this process).
        """
        if self._spilled is None:
            yield self
            return
        if self._resident == 0:
            clip = self.radius is not None and self._file_radius is None
            # copy-on-write when clipping: only the pages of clipped rows become private
            points = np.asarray(self._spilled.array(POINTS, "c" if clip else "r"))
            labels = None
            if self._spilled.has(LABELS):
                labels = np.asarray(self._spilled.array(LABELS, "r"))
            self._adopt(self._order, self._offsets, points, labels)
            if self._spilled.has(NORMS):  # a file of points as built: their norms, no pass
                self._norms = np.asarray(self._spilled.array(NORMS, "r"))
            if clip:  # the file holds the points as built: clip them as load would
                self._clip_mapped(self._norms)
        self._resident += 1
        try:
            yield self
        finally:
            self._resident -= 1
            if self._resident == 0:
                self._free(self._spilled)

    def _clip_mapped(self, norms: np.ndarray | None) -> None:
        """Clip the mapped points of a file that holds them as built (copy-on-write).

        ``norms``: every point's norm, when the file has them. The node's own clip to
        the data radius (:class:`fedkmeans.node.NodeData`).
        """
        raise NotImplementedError

    def _raw_point_norms(self) -> np.ndarray | None:
        """Every point's norm before the clip to the data radius, shape (n,), in stacked order.

        Computed by the first pass that needs them (the estimate round's norm
        histogram, the clip to the data radius, a spill of points as built) and kept
        while the points stay as mapped, so the node reads its points' norms once.
        None when they cannot be had without a pass per client: a ragged node, or one
        whose points were clipped before any norm was kept.
        """
        if self._norms is None and self._stacked is not None and self.radius is None:
            self._norms = row_norms(self._stacked)
        return self._norms

    def _rows_of(self, values: np.ndarray, clients: Sequence[int]) -> np.ndarray:
        """The asked clients' rows of a per-point array in stacked order (a view if consecutive)."""
        spans = [(self._offsets[i], self._offsets[i + 1])
                 for i in (self._position[c] for c in clients)]
        if all(a == b_prev for (a, _), (_, b_prev) in zip(spans[1:], spans[:-1], strict=True)):
            return values[spans[0][0]:spans[-1][1]] if spans else values[:0]
        return np.concatenate([values[a:b] for a, b in spans])

    @property
    def nbytes(self) -> int:
        """Bytes this node holds in memory: points, labels, norms and reusable rows.

        A spilled node holds only its reusable rows (:attr:`reusable`).
        """
        kept = self.reusable.nbytes
        if self._spilled is not None:
            return kept
        kept += 0 if self._norms is None else self._norms.nbytes
        if self._stacked is not None:
            return kept + self._stacked.nbytes + (0 if self._labels_stacked is None
                                                  else self._labels_stacked.nbytes)
        return kept + sum(x.nbytes for x in self.points.values()) + sum(
            y.nbytes for y in self.labels.values() if y is not None)

    @property
    def dim(self) -> int:
        """Feature dimension d (0 if the node hosts no client)."""
        if self.points:
            return next(iter(self.points.values())).shape[1]
        if self._spilled is not None:
            return int(self._spilled.array(POINTS, "r").shape[1])
        return 0

    def _equal_size_runs(
        self, clients: Sequence[int], longest: int
    ) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(i, j, block)``: runs of ``clients[i:j]`` as one array (j - i, n, d), no copy.

        A run is at most ``longest`` clients that lie one after the other in the
        node's stacked points and all have ``n`` points; ``block[a]`` is then
        ``points[clients[i + a]]``. Any other client is a run of one (its own points,
        with a leading axis). Consecutive runs cover ``clients`` in order.
        """
        i = 0
        while i < len(clients):
            x = self.points[clients[i]]
            j = i + 1
            if self._stacked is not None and x.shape[0]:
                first, n = self._position[clients[i]], x.shape[0]
                while (j < len(clients) and j - i < longest
                       and self._position.get(clients[j]) == first + j - i
                       and self.points[clients[j]].shape[0] == n):
                    j += 1
                if j > i + 1:
                    start = self._offsets[first]
                    block = self._stacked[start:start + (j - i) * n]
                    yield i, j, block.reshape(j - i, n, x.shape[1])
                    i = j
                    continue
            yield i, i + 1, x[None]
            i += 1

    def _pooled(self, clients: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The asked clients' points stacked (n, d) and each row's client position."""
        if not len(clients):
            return np.zeros((0, self.dim)), np.zeros(0, np.int64)
        if self._stacked is not None:
            first = self._position[clients[0]]
            last = first + len(clients)
            if self._order[first:last] == list(clients):  # consecutive clients: a view
                bounds = self._offsets[first:last + 1]
                owner = np.repeat(np.arange(len(clients)), np.diff(bounds))
                return self._stacked[bounds[0]:bounds[-1]], owner
        sizes = [self.points[c].shape[0] for c in clients]
        owner = np.repeat(np.arange(len(clients)), sizes)
        return np.concatenate([self.points[c] for c in clients]), owner


def _is_block(base: np.ndarray, arrays: list[np.ndarray], offsets: np.ndarray) -> bool:
    """True when ``arrays`` are the consecutive row slices of ``base`` at ``offsets``."""
    if base.ndim != arrays[0].ndim or base.shape[0] != offsets[-1]:
        return False
    start = base.__array_interface__["data"][0]
    row = base.strides[0]
    return all(a.base is base and a.__array_interface__["data"][0] == start + o * row
               for a, o in zip(arrays, offsets[:-1].tolist(), strict=True))


