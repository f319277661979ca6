"""Where a node's points live: one stacked array, in memory or in files mapped per request.

:class:`NodeMemory` is the storage part of :class:`fedkmeans.node.NodeData` (its
``memory``). It keeps the hosted clients' points in one array, client after client in
``client_ids`` order (``points[c]`` are views of it, so the clients of one message are
one slice), and moves that array out of the process when the ClientApp's memory bound
(``federation.node-cache-mb``, :func:`fedkmeans.client_app.cache_budget`) asks for it:

* :meth:`NodeMemory.spill` hands a shard path to the node's writer (the node writes its
  points and clip record, :func:`fedkmeans.node.shard.write_shard`, atomic,
  owner-only) and frees the points; :meth:`NodeMemory.of_shard` maps a shard any
  process wrote;
* :meth:`NodeMemory.spill_nameless` writes files of this process that have no name
  (:class:`fedkmeans.spill_files.NamelessFiles`), so nothing is left behind;
* :meth:`NodeMemory.mapped` maps them for the length of a request, copy-on-write when
  the node will clip them, and calls the node's ``on_map`` once they are mapped.

It never changes a value and knows nothing of clipping: the node tells it what to keep
(``norms``: every point's norm before the clip, ``owned``: the points are its own).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from fedkmeans.node.shard import LABELS, NORMS, POINTS, ShardMeta, shard_ready
from fedkmeans.spill_files import NamelessFiles, ShardFiles


class NodeMemory:
    """The points of the clients one node hosts, and where they live.

    Parameters
    ----------
    client_ids : ndarray of shape (n_hosted,)
    points : dict of int to ndarray of shape (n_j, d)
        Each hosted client's points (stacked into one array when they have one width).
    labels : dict of int to ndarray of shape (n_j,) or None

    Attributes
    ----------
    stacked : ndarray of shape (n, d) or None
        Every point, client after client in ``order`` (None: ragged, or spilled).
    labels_stacked : ndarray of shape (n,) or None
    order : list of int
        The clients of ``stacked``, in its order.
    offsets : ndarray of shape (len(order) + 1,)
        Client ``order[i]`` holds rows ``offsets[i]:offsets[i + 1]``.
    position : dict of int to int
        Each client's index in ``order``.
    owned : bool
        ``stacked`` is this node's own array (the node may clip it in place).
    norms : ndarray of shape (n,) or None
        Every point's norm before the clip to the data radius, in stacked order, as the
        node keeps them (freed with the points).
    """

    def __init__(self, client_ids: np.ndarray, points: dict[int, np.ndarray],
                 labels: dict[int, np.ndarray | None]) -> None:
        self.client_ids = client_ids
        self.points = points
        self.labels = labels
        self._spilled: ShardFiles | NamelessFiles | None = None
        self._resident = 0
        self.norms: np.ndarray | None = None
        self.owned = False
        order = [c for c in self.client_ids.tolist() if c in self.points]
        arrays = [self.points[c] for c in order]
        self.stacked: np.ndarray | None = None
        self.labels_stacked: np.ndarray | None = None
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
            self.owned = True
        labels = [self.labels.get(c) for c in order]
        labels_stacked = None
        if all(y is not None and y.ndim == 1 for y in labels) and sum(
                y.size for y in labels) == offsets[-1]:
            labels_stacked = (labels[0].base if labels[0].base is not None
                              and _is_block(labels[0].base, labels, offsets)
                              else np.concatenate(labels))
        self.adopt(order, offsets, stacked, labels_stacked)

    @classmethod
    def of_block(cls, client_ids: np.ndarray, stacked: np.ndarray,
                 offsets: np.ndarray) -> NodeMemory:
        """The memory of clients whose points are consecutive row slices of ``stacked``.

        Client ``client_ids[i]`` holds rows ``offsets[i]:offsets[i + 1]`` (``offsets``
        of shape (m + 1,), from 0 to ``stacked.shape[0]``); no labels. Not ``owned``:
        the node never writes ``stacked`` (a clip copies it first).
        """
        order = np.asarray(client_ids).tolist()
        memory = cls(np.asarray(client_ids), {}, dict.fromkeys(order))
        memory.adopt(order, offsets, stacked, None)
        return memory

    @classmethod
    def of_shard(cls, path: Path, meta: ShardMeta) -> NodeMemory:
        """The memory of a shard another process spilled to ``path`` (its ``meta``)."""
        ids = meta.client_ids
        memory = cls(ids, {}, {c: None for c in ids.tolist()} if not meta.has_labels else {})
        memory.offsets = meta.offsets
        memory.order = ids.tolist()
        memory.position = {c: i for i, c in enumerate(memory.order)}
        memory._spilled = ShardFiles(path)
        return memory

    def adopt(self, order: Sequence[int], offsets: np.ndarray, stacked: np.ndarray,
              labels_stacked: np.ndarray | None) -> None:
        """Make ``points`` (and ``labels``) views of the stacked arrays."""
        self.order = list(order)
        self.offsets = np.asarray(offsets)
        self.position = {c: i for i, c in enumerate(self.order)}
        self.stacked = stacked
        self.labels_stacked = labels_stacked
        bounds = list(zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist(),
                          strict=True))
        self.points = {c: stacked[a:b] for c, (a, b) in zip(self.order, bounds, strict=True)}
        if labels_stacked is not None:
            self.labels = {c: labels_stacked[a:b]
                           for c, (a, b) in zip(self.order, bounds, strict=True)}

    # -- a node's points may live in a file, read while a request runs ---------------
    @property
    def spilled(self) -> bool:
        """True when the points live in a file (:meth:`spill`), mapped per request."""
        return self._spilled is not None

    def spill(self, directory: str | os.PathLike, name: str,
              write: Callable[[Path], None]) -> Path | None:
        """Move the points (and labels) to the shard ``directory/name`` and free them here.

        For a directory the processes of a run share (the flower engine's). ``write``
        (the node's :func:`~fedkmeans.node.shard.write_shard`) writes the shard once,
        unless a whole one is there already; :meth:`mapped` maps it for the length of
        a request, from the page cache, which the kernel may reclaim: this process's
        resident memory no longer grows with the node. Whoever made ``directory``
        removes it. Returns the shard's path, or None when the points cannot be spilled
        (they are not one array).
        """
        if self._spilled is not None:
            return self._spilled.path if isinstance(self._spilled, ShardFiles) else None
        if self.stacked is None:
            return None
        path = Path(directory) / name
        if not shard_ready(path):
            write(path)
        self._free(ShardFiles(path))
        return path

    def spill_nameless(self, norms: np.ndarray | None = None) -> bool:
        """Move the points (and labels) to files of this process that have no name.

        As :meth:`spill`, but the files are this process's alone (:class:`NamelessFiles`):
        they never appear in a directory, so nothing is left behind however the process
        ends (SIGKILL, a Ray actor killed, a crash). ``norms`` (shape (n,)): every
        point's norm, kept beside points as built for their clip when mapped. Returns
        False when the points cannot be spilled (they are not one array).
        """
        if self._spilled is not None:
            return True
        if self.stacked is None:
            return False
        arrays = {POINTS: self.stacked}
        if self.labels_stacked is not None:
            arrays[LABELS] = self.labels_stacked
        if norms is not None:
            arrays[NORMS] = norms
        self._free(NamelessFiles(arrays))
        return True

    @property
    def nameless_bytes(self) -> int:
        """Bytes of these points in this process's nameless files (:meth:`spill_nameless`)."""
        return self._spilled.nbytes if isinstance(self._spilled, NamelessFiles) else 0

    def close(self) -> None:
        """Free this process's nameless files of the points (a shard directory is kept)."""
        if isinstance(self._spilled, NamelessFiles):
            self._spilled.close()

    def _free(self, files: ShardFiles | NamelessFiles) -> None:
        self._spilled = files
        self.stacked = self.labels_stacked = self.norms = None
        self.points = {}
        if self.labels and all(y is not None for y in self.labels.values()):
            self.labels = {}

    @contextmanager
    def mapped(self, copy_on_write: bool = False,
               on_map: Callable[[], None] | None = None) -> Iterator[NodeMemory]:
        """The points in reach while the block runs (mapped from the file if spilled).

        ``copy_on_write``: map the points so that writing them changes only this
        mapping (only the pages of written rows become private); ``on_map``: called
        once the points are mapped (the node clips a file of points as built). Nested
        blocks share one mapping; when the outermost ends the mapping is dropped (the
        pages stay in the page cache for the next request, not in this process).
        """
        if self._spilled is None:
            yield self
            return
        if self._resident == 0:
            points = np.asarray(self._spilled.array(POINTS, "c" if copy_on_write else "r"))
            labels = None
            if self._spilled.has(LABELS):
                labels = np.asarray(self._spilled.array(LABELS, "r"))
            self.adopt(self.order, self.offsets, points, labels)
            if self._spilled.has(NORMS):  # a file of points as built: their norms, no pass
                self.norms = np.asarray(self._spilled.array(NORMS, "r"))
            if on_map is not None:
                on_map()
        self._resident += 1
        try:
            yield self
        finally:
            self._resident -= 1
            if self._resident == 0:
                self._free(self._spilled)

    def rows_of(self, values: np.ndarray, clients: Sequence[int]) -> np.ndarray:
        """The asked clients' rows of a per-point array in stacked order (a view if consecutive)."""
        spans = [(self.offsets[i], self.offsets[i + 1])
                 for i in (self.position[c] for c in clients)]
        if all(a == b_prev for (a, _), (_, b_prev) in zip(spans[1:], spans[:-1], strict=True)):
            return values[spans[0][0]:spans[-1][1]] if spans else values[:0]
        return np.concatenate([values[a:b] for a, b in spans])

    @property
    def nbytes(self) -> int:
        """Bytes of points, labels and norms held in memory (0 when spilled)."""
        if self._spilled is not None:
            return 0
        kept = 0 if self.norms is None else self.norms.nbytes
        if self.stacked is not None:
            return kept + self.stacked.nbytes + (0 if self.labels_stacked is None
                                                 else self.labels_stacked.nbytes)
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

    def equal_size_runs(
        self, clients: Sequence[int], longest: int
    ) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(i, j, block)``: runs of ``clients[i:j]`` as one array (j - i, n, d), no copy.

        A run is at most ``longest`` clients that lie one after the other in the
        stacked points and all have ``n`` points; ``block[a]`` is then
        ``points[clients[i + a]]``. Any other client is a run of one (its own points,
        with a leading axis). Consecutive runs cover ``clients`` in order.
        """
        i = 0
        while i < len(clients):
            x = self.points[clients[i]]
            j = i + 1
            if self.stacked is not None and x.shape[0]:
                first, n = self.position[clients[i]], x.shape[0]
                while (j < len(clients) and j - i < longest
                       and self.position.get(clients[j]) == first + j - i
                       and self.points[clients[j]].shape[0] == n):
                    j += 1
                if j > i + 1:
                    start = self.offsets[first]
                    block = self.stacked[start:start + (j - i) * n]
                    yield i, j, block.reshape(j - i, n, x.shape[1])
                    i = j
                    continue
            yield i, i + 1, x[None]
            i += 1

    def pooled(self, clients: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The asked clients' points stacked, (n, d), and each row's client position, (n,)."""
        if not len(clients):
            return np.zeros((0, self.dim)), np.zeros(0, np.int64)
        if self.stacked is not None:
            first = self.position[clients[0]]
            last = first + len(clients)
            if self.order[first:last] == list(clients):  # consecutive clients: a view
                bounds = self.offsets[first:last + 1]
                owner = np.repeat(np.arange(len(clients)), np.diff(bounds))
                return self.stacked[bounds[0]:bounds[-1]], owner
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
