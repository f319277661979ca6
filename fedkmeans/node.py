"""What one node computes for the clients it hosts (the ClientApp's arithmetic).

A node hosts one or many (virtual) clients. For each stage it answers with one row
per requested client, stacked, so the server clips, validates and (for a curious
server) observes every client separately, exactly as with one client per node.

Client-side privacy duties (the server re-clips anyway):

* every point is mapped by the run's public transform (``(x - mu) / s`` from the
  server's data, :mod:`fedkmeans.data.transform`) and then clipped to
  ``privacy.data-radius`` before any statistic;
* at client level, each client clips its own statistic to the configured bound;
* with ``privacy.epsilon = inf`` nothing is clipped (the non-private algorithm);
* with ``privacy.aggregation = secagg`` (:meth:`NodeData.secagg_contribution`) every
  client also applies the server's bound and adds its own noise share, and the node
  sends only the sum over its clients, encoded for SecAgg+.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import sparse
from scipy.linalg import blas

from fedkmeans import data as data_access
from fedkmeans.clustering import local_kmeans_centers
from fedkmeans.clustering.client_stats import nearest_center, symmetric_from_upper
from fedkmeans.clustering.distances import BLOCK
from fedkmeans.config import AUTO, ExperimentConfig
from fedkmeans.console import NOT_PRIVATE, diagnostics_on_console
from fedkmeans.data.transform import IDENTITY, PublicTransform
from fedkmeans.privacy.budget import joint_groups, joint_radii, reachable_bounds
from fedkmeans.privacy.clipping import (
    clip_rows_l2,
    clip_stacked,
    clip_upper_triangles,
    joint_clip_factors,
    triangle_weights,
)
from fedkmeans.privacy.distributed import encode, node_contribution
from fedkmeans.privacy.randomness import secure_generator
from fedkmeans.seeding import integer_seed
from fedkmeans.spill_files import NamelessFiles, ShardFiles, private_dir, private_file
from fedkmeans.stages import statistic_bounds

LOG = logging.getLogger(__name__)
#: Partitions that logged clipping in this process (the first one warns).
_CLIP_WARNED: list[int] = []


@dataclass
class NodeData:
    """The clients one node hosts, loaded once.

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
    #: Clients with points clipped to the data radius (evaluation reloads only those).
    clipped_clients: frozenset[int] = frozenset()
    #: Each client's points' norms before the clip to the data radius (the estimate
    #: round's norm histogram); absent: the points' own norms.
    raw_norms: dict[int, np.ndarray] = field(default_factory=dict, repr=False)
    #: The radius the points are clipped to (None: as loaded).
    radius: float | None = None
    #: The public transform the points were mapped by before any clip (as loaded: none).
    transform: PublicTransform = IDENTITY

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
        :meth:`open_spilled`), owner-only (:func:`write_shard`); :meth:`resident` maps
        them for the length of a request, from the page cache, which the kernel may
        reclaim: this process's resident memory no longer grows with the node. Whoever
        made ``directory`` removes it. Returns the shard's path, or None when the node
        cannot be spilled (its clients' points are not one array).
        """
        if self._spilled is not None:
            return self._spilled.path if isinstance(self._spilled, ShardFiles) else None
        if self._stacked is None:
            return None
        path = Path(directory) / name
        if not (path / _DONE).exists():
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
        arrays = {_POINTS: self._stacked}
        if self._labels_stacked is not None:
            arrays[_LABELS] = self._labels_stacked
        if self.radius is None:  # points as built: their norms, for the clip when mapped
            arrays[_NORMS] = np.linalg.norm(self._stacked, axis=1)
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
        self._stacked = self._labels_stacked = None
        self.points = {}
        if self.labels and all(y is not None for y in self.labels.values()):
            self.labels = {}

    @classmethod
    def open_spilled(cls, config: ExperimentConfig, path: str | os.PathLike,
                     data_path: str = "", transform: PublicTransform = IDENTITY) -> NodeData:
        """A node whose points another process spilled to ``path`` (same run, same node).

        ``transform``: the one the file's points were mapped by (part of its name).
        """
        path = Path(path)
        with np.load(path / _META) as meta:
            ids = meta["client_ids"]
            clipped = meta["clipped"]
            norm_offsets = meta["norm_offsets"]
            norms = meta["norms"]
            has_labels = bool(meta["has_labels"])
            radius = float(meta["radius"])
        raw = {int(c): norms[norm_offsets[i]:norm_offsets[i + 1]]
               for i, c in enumerate(clipped.tolist())}
        node = cls(config, ids, {}, {c: None for c in ids.tolist()} if not has_labels else {},
                   data_path, frozenset(clipped.tolist()), raw,
                   None if np.isnan(radius) else radius, transform)
        node._offsets = np.load(path / _OFFSETS)
        node._order = ids.tolist()
        node._position = {c: i for i, c in enumerate(node._order)}
        node._spilled = ShardFiles(path)
        node._file_radius = node.radius
        return node

    @contextmanager
    def resident(self) -> Iterator[NodeData]:
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
            points = np.asarray(self._spilled.array(_POINTS, "c" if clip else "r"))
            labels = None
            if self._spilled.has(_LABELS):
                labels = np.asarray(self._spilled.array(_LABELS, "r"))
            self._adopt(self._order, self._offsets, points, labels)
            if clip and self._clip_known == self.radius:  # the same clients as last time
                for cid in self.clipped_clients:
                    x = self.points[cid]
                    x[...] = clip_rows_l2(x, self.radius)
            elif clip:  # the file holds the points as built: clip them as load would
                norms = None
                if self._spilled.has(_NORMS):  # written with the file: no pass
                    norms = self._spilled.array(_NORMS, "r")
                self.clipped_clients, self.raw_norms, _, _ = self._clip_points(
                    self.radius, norms)
                self._clip_known = self.radius
        self._resident += 1
        try:
            yield self
        finally:
            self._resident -= 1
            if self._resident == 0:
                self._free(self._spilled)

    @classmethod
    def load(
        cls, config: ExperimentConfig, partition_id: int, num_partitions: int,
        data_path: str = "", *, warn: bool = True, clip: bool = True,
        transform: PublicTransform = IDENTITY,
    ) -> NodeData:
        """Load only this node's clients (never another node's data).

        The points are mapped by ``transform`` (:meth:`transform_to`), then clipped to
        the data radius (:func:`clip_radius`), as :meth:`clip_to` does (``clip=False``:
        left unclipped). ``warn``: log points
        clipped to the data radius as a warning (the first node of the process; the
        others, and every node when ``warn`` is False, at DEBUG).
        """
        ids = data_access.node_client_ids(config, partition_id, num_partitions, data_path)
        points, labels, owned = {}, {}, True
        for cid, x, y, own in _clients(config, ids, data_path):
            points[cid], labels[cid] = x, y
            owned = owned and own
        node = cls(config, ids, points, labels, data_path)
        node._owned = node._owned or owned
        node.transform_to(transform)
        if clip:
            node.clip_to(clip_radius(config), partition_id, warn=warn)
        return node

    def transform_to(self, transform: PublicTransform) -> None:
        """Map the (untransformed, unclipped) points by ``transform``, before any clip.

        The node's own block is mapped in place; a loader's arrays, which may be
        shared, are replaced by mapped copies (the same bits).
        """
        if transform == self.transform:
            return
        if not self.transform.is_identity or self.radius is not None \
                or self._spilled is not None:
            raise ValueError("transform_to needs the node's points as loaded, in memory")
        if self.points:
            transform.check_dim(self.dim)
        if self._stacked is not None:
            stacked = self._stacked if self._owned else None
            self._adopt(self._order, self._offsets, transform.apply(self._stacked, out=stacked),
                        self._labels_stacked)
            self._owned = True
        else:
            self.points = {c: transform.apply(x) for c, x in self.points.items()}
        self.transform = transform

    def clip_to(self, radius: float | None, partition_id: int = 0, *,
                warn: bool = True) -> None:
        """Clip the (unclipped) points to ``radius`` (None: leave them as they are).

        Points of the node's own block are clipped in place (the same bits as a clipped
        copy); a loader's arrays, which may be shared, are replaced by clipped copies.
        Records the clipped clients and their points' norms before the clip.
        """
        if radius is None:
            return
        if self.radius is not None or self._spilled is not None:
            raise ValueError("clip_to needs the node's unclipped points in memory")
        if self._stacked is not None and not self._owned:
            self._adopt(self._order, self._offsets, self._stacked.copy(),
                        self._labels_stacked)
            self._owned = True
        self.clipped_clients, self.raw_norms, clipped, total = self._clip_points(radius)
        self.radius = float(radius)
        if clipped and diagnostics_on_console():
            # a count of the node's data: logged only with the operator's opt-in
            # (fedkmeans.console), since a simulation's nodes log to the server's console;
            # the server gets it from the non-private evaluation round only
            # (diagnostics.json, metrics.clipped_points).
            # One warning per process: a simulation's nodes share a few processes, and
            # the server's summary line comes from the estimate round's release.
            log = LOG.debug if _CLIP_WARNED or not warn else LOG.warning
            _CLIP_WARNED.append(partition_id)
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
        numbers of clipped and of all points. Each client's rows go through
        :func:`~fedkmeans.privacy.clipping.clip_rows_l2`, so the bits do not depend on
        where the points live.
        """
        clipped = total = 0
        clipped_clients, raw_norms = set(), {}
        if self._stacked is not None:  # the norms of all points at once
            if all_norms is None:
                all_norms = np.linalg.norm(self._stacked, axis=1)
        for cid in self.client_ids.tolist():
            x = self.points.get(cid)
            if x is None:
                continue
            total += x.shape[0]
            if self._stacked is not None:
                i = self._position[cid]
                norms = all_norms[self._offsets[i]:self._offsets[i + 1]]
            else:
                norms = np.linalg.norm(x, axis=1)
            outside = int((norms > radius).sum())
            if outside:
                if self._stacked is not None:  # the client's own rows of the node's block
                    x[...] = clip_rows_l2(x, radius)
                else:
                    self.points[cid] = clip_rows_l2(x, radius)
                clipped += outside
                clipped_clients.add(cid)
                raw_norms[cid] = norms.copy()
        return frozenset(clipped_clients), raw_norms, clipped, total

    def aim(self, radius: float | None) -> bool:
        """A spilled node of unclipped points: clip them to ``radius`` when mapped.

        Returns False when the file's points were clipped to another radius (the node
        must be loaded again).
        """
        if self._spilled is None or self._file_radius not in (None, radius):
            return False
        if radius != self.radius:
            self.radius = radius
            self.clipped_clients, self.raw_norms = frozenset(), {}
            self._clip_known = None
        return True

    def retarget(self, config: ExperimentConfig, partition_id: int = 0, *,
                 warn: bool = True, transform: PublicTransform = IDENTITY) -> NodeData | None:
        """This node's data under ``config`` and ``transform`` (other client settings).

        The server resolves the ``auto`` settings after the estimate round, so a node
        is first asked with its points unclipped and then with a data radius: the
        points are clipped then (in place, or from a spilled node's file into memory),
        not generated again. A node loaded to register (as loaded, in memory) is
        mapped by the run's transform when first asked. Returns None when the node
        must be loaded again (its points were clipped to another radius, or mapped by
        another transform, or spilled before the transform was known).
        """
        radius = clip_radius(config)
        if transform != self.transform:
            if self.radius is not None or self._spilled is not None \
                    or not self.transform.is_identity:
                return None
            self.config = config
            self.transform_to(transform)
            self.clip_to(radius, partition_id, warn=warn)
            return self
        if radius == self.radius:
            self.config = config
            return self
        if self._spilled is not None and self.aim(radius):  # clipped when mapped
            self.config = config
            return self
        if self.radius is not None:
            return None
        node = self
        if self._spilled is not None:  # read the unclipped file into this process
            with self.resident():
                stacked = np.array(self._stacked)
                labels = None if self._labels_stacked is None else np.array(
                    self._labels_stacked)
                order, offsets = self._order, self._offsets
            node = NodeData(config, self.client_ids, {}, dict(self.labels), self.data_path)
            node._adopt(order, offsets, stacked, labels)
            node._owned = True
        node.config = config
        node.clip_to(radius, partition_id, warn=warn)
        return node

    @property
    def nbytes(self) -> int:
        """Bytes of the hosted clients' points and labels held in memory (0 if spilled)."""
        if self._spilled is not None:
            return 0
        if self._stacked is not None:
            return self._stacked.nbytes + (0 if self._labels_stacked is None
                                           else self._labels_stacked.nbytes)
        return sum(x.nbytes for x in self.points.values()) + sum(
            y.nbytes for y in self.labels.values() if y is not None)

    @property
    def dim(self) -> int:
        """Feature dimension d (0 if the node hosts no client)."""
        if self.points:
            return next(iter(self.points.values())).shape[1]
        if self._spilled is not None:
            return int(self._spilled.array(_POINTS, "r").shape[1])
        return 0

    def covariance(self, clients: Sequence[int]) -> dict[str, np.ndarray]:
        """Step 1 as full matrices, shape (m, d, d): :meth:`covariance_triangles` unfolded.

        For the SecAgg+ path and the audits, which work on the (d, d) matrices.
        """
        triangles = self.covariance_triangles(clients)["covariance"]
        return {"covariance": symmetric_from_upper(triangles, self.dim)}

    def covariance_triangles(self, clients: Sequence[int]) -> dict[str, np.ndarray]:
        """Step 1 as it travels: upper triangles of ``sum_p p p^T``, shape (m, d(d+1)/2).

        Each client's ``X^T X`` is a BLAS ``dsyrk`` (only the upper triangle: half the
        flops of a product), read straight into the client's reply row, so no (d, d)
        stack exists. At client level each triangle is clipped by the Frobenius norm of
        its full matrix (:func:`~fedkmeans.privacy.clipping.clip_upper_triangles`).
        """
        return {"covariance": self.clip_covariance_triangles(
            self.raw_covariance_triangles(clients))}

    def raw_covariance_triangles(self, clients: Sequence[int]) -> np.ndarray:
        """Upper triangles of every asked client's ``X^T X``, unclipped, (m, d(d+1)/2)."""
        d = self.dim
        rows, cols = np.triu_indices(d)
        upper = cols * d + rows  # (i, j), i <= j, in dsyrk's column-major result
        out = np.zeros((len(clients), rows.size))
        for i, c in enumerate(clients):
            x = self.points[c]
            if x.shape[0]:
                second_moment = blas.dsyrk(1.0, x, trans=1, lower=0)
                np.take(second_moment.T.reshape(-1), upper, out=out[i])
        return out

    def clip_covariance_triangles(self, triangles: np.ndarray) -> np.ndarray:
        """Client level: each client's triangle clipped by its full matrix's Frobenius norm.

        In place (the caller owns ``triangles``); unchanged at data-point level or
        without privacy.
        """
        privacy = self.config.privacy
        if self.config.is_private and privacy.level == "client":
            bound = statistic_bounds(privacy)["covariance"].client_bound
            return clip_upper_triangles(triangles, bound, self.dim, copy=False)
        return triangles

    def _clip_rows(self, name: str, stacked: np.ndarray) -> np.ndarray:
        """Client level: clip each client's row of ``stacked`` (m, ...) on its own."""
        privacy = self.config.privacy
        if not self.config.is_private or privacy.level != "client":
            return stacked
        bound = statistic_bounds(privacy)[name]
        norm = "l2" if bound.norm == "l2" else "l1_nonnegative"
        return clip_stacked(stacked, bound.client_bound, norm)

    def _pooled(self, clients: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The asked clients' points stacked (n, d) and each row's client position."""
        sizes = [self.points[c].shape[0] for c in clients]
        if not clients:
            return np.zeros((0, self.dim)), np.zeros(0, np.int64)
        owner = np.repeat(np.arange(len(clients)), sizes)
        if self._stacked is not None:
            first = self._position[clients[0]]
            if [self._position[c] for c in clients] == list(range(first, first + len(clients))):
                start, stop = self._offsets[first], self._offsets[first + len(clients)]
                return self._stacked[start:stop], owner  # consecutive clients: a view
        return np.concatenate([self.points[c] for c in clients]), owner

    def histogram(
        self, clients: Sequence[int], basis: np.ndarray, projected_server: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Step 2: nearest-projected-server-point histogram per client, shape (m, |Q|).

        Every asked client's points are assigned at once (in blocks of
        :data:`BLOCK` points); the counts are then split by client (exact integers),
        so this equals :func:`~fedkmeans.clustering.projected_histogram` per client.
        """
        m, size = len(clients), projected_server.shape[0]
        x, owner = self._pooled(clients)
        nearest = _assign(x @ basis.T, projected_server)
        hist = np.bincount(owner * size + nearest, minlength=m * size).reshape(m, size)
        return {"histogram": self._clip_rows("histogram", hist.astype(np.float64))}

    def sums_counts(
        self, clients: Sequence[int], centers: np.ndarray, basis: np.ndarray | None = None
    ) -> dict[str, np.ndarray]:
        """Step 3 (``basis`` given) or a Lloyds step: sums (m, k, d) and counts (m, k).

        All asked clients' points are assigned at once; each (client, cluster) sum adds
        that client's points in their order, as
        :func:`~fedkmeans.clustering.cluster_sums_counts` does for one client.
        """
        m, k = len(clients), centers.shape[0]
        x, owner = self._pooled(clients)
        labels = _assign(x if basis is None else x @ basis.T, centers)
        # one-hot (client, cluster) x points: each row adds its points in their order
        onehot = sparse.csr_matrix(
            (np.ones(x.shape[0]), (owner * k + labels, np.arange(x.shape[0]))),
            shape=(m * k, x.shape[0]),
        )
        sums = np.asarray(onehot @ x).reshape(m, k, self.dim)
        counts = np.bincount(owner * k + labels, minlength=m * k).reshape(m, k)
        return self._clip_jointly(sums, counts.astype(np.float64))

    def cost_differences(
        self, clients: Sequence[int], centers: np.ndarray, alternative: np.ndarray
    ) -> dict[str, np.ndarray]:
        """The final check: each client's clipped cost difference of A and B, (m, 1).

        :func:`~fedkmeans.stages.check.cost_differences` with ``tau =
        privacy.check-clip``, then at client level each client's value clipped to
        ``tau * max-points-per-client`` (:mod:`fedkmeans.stages.check`). On the points
        before the clip to the data radius (mapped by the public transform, the space
        of A and B): the clip at tau alone bounds the sensitivity, and the cost the
        run reports is on those points (the radius clip moved the comparison away
        from it where a few high-variance features carry the cost).
        """
        from fedkmeans.stages.check import check_clip_of, cost_differences

        clients = list(clients)
        owner = np.repeat(np.arange(len(clients)), [self.points[c].shape[0] for c in clients])
        segments = [seg if mapped else self.transform.apply(seg)
                    for seg, mapped in self._original_segments(clients)]
        x = np.concatenate(segments) if segments else np.zeros((0, self.dim))
        rows = cost_differences(x, owner, len(clients), centers, alternative,
                                check_clip_of(self.config.privacy))
        return {"cost_difference": self._clip_rows("cost_difference", rows)}

    def estimates(self, clients: Sequence[int]) -> dict[str, np.ndarray]:
        """The estimate round: each client's row of public-bin histograms, (m, width).

        :func:`~fedkmeans.stages.estimate.client_rows` of the clients' sizes, their
        points' norms before the clip to the data radius (so the server can tell how
        many points a declared radius clips) and, at client level, ``||X^T X||_F`` of
        their points as loaded; at client level each row is then clipped to the
        stage's bound (a no-op for honest rows).
        """
        from fedkmeans.stages.estimate import client_rows

        _, owner = self._pooled(clients)
        norms = np.concatenate([self.raw_norms[c] if c in self.raw_norms
                                else np.linalg.norm(self.points[c], axis=1) for c in clients]
                               or [np.zeros(0)])
        sizes = np.array([self.points[c].shape[0] for c in clients], dtype=np.int64)
        moments = None
        level = self.config.privacy.level
        if level == "client":
            weights = triangle_weights(self.dim)
            triangles = self.raw_covariance_triangles(clients)
            moments = np.sqrt(np.maximum(triangles**2 @ weights, 0.0))
        rows = client_rows(sizes, moments, norms, owner, level=level)
        return {"estimates": self._clip_rows("estimates", rows)}

    def _clip_jointly(self, sums: np.ndarray, counts: np.ndarray) -> dict[str, np.ndarray]:
        """Client level: scale each client's sums and counts by one factor.

        The factor ``min(1, C_sums / ||S_j||_F, C_counts / ||n_j||_1)`` brings both
        within their bounds (so the sensitivities are those of separate clipping) and
        keeps every ratio ``S_jr / n_jr``: clipping them separately would shrink one and
        not the other and move every center ``m_r / n_r`` (a client whose counts are
        clipped to half but whose sums are not doubles its pull).
        """
        privacy = self.config.privacy
        if not self.config.is_private or privacy.level != "client":
            return {"sums": sums, "counts": counts}
        bounds = statistic_bounds(privacy)
        sums_norm = np.sqrt(np.einsum("mkd,mkd->m", sums, sums))
        counts_norm = np.abs(counts).sum(axis=1)
        with np.errstate(divide="ignore"):
            factor = np.minimum.reduce([
                np.ones(sums.shape[0]),
                np.where(sums_norm > 0, bounds["sums"].client_bound / sums_norm, 1.0),
                np.where(counts_norm > 0, bounds["counts"].client_bound / counts_norm, 1.0),
            ])
        return {"sums": sums * factor[:, None, None], "counts": counts * factor[:, None]}

    def secagg_contribution(
        self,
        clients: Sequence[int],
        stats: dict[str, np.ndarray],
        round_name: str,
        share_stds: dict[str, float],
        steps: dict[str, float],
        q_range: int,
        share_rng: Callable[[str, int], np.random.Generator] | None = None,
    ) -> list[np.ndarray]:
        """This node's encoded SecAgg+ input: clipped statistics plus noise shares.

        Parameters
        ----------
        clients : sequence of int
            The asked clients, in increasing id (rows of ``stats``).
        stats : dict of str to ndarray of shape (m, ...)
            Per-client statistics of the round (from the methods above).
        round_name : str
            Round label; client ``c``'s share of release ``<round_name>/<s>`` is drawn
            from ``share_rng("<round_name>/<s>", c)``.
        share_stds, steps : dict of str to float
            Per statistic: standard deviation of one client's share and the public
            grid step (:mod:`fedkmeans.privacy.distributed`).
        q_range : int
            SecAgg+ quantization range Q.
        share_rng : callable (stage, client id) -> numpy.random.Generator, optional
            Source of each client's noise share. ``None`` (what the ClientApp always
            uses): a fresh :func:`~fedkmeans.privacy.randomness.secure_generator` per
            client and release, so no configuration, seed or earlier run lets the
            server know a share. Unit tests pass a seeded factory to check the
            arithmetic.

        Returns
        -------
        list of ndarray
            One array per statistic (in ``stats`` order), values ``2 k / Q``.
        """
        bounds = statistic_bounds(self.config.privacy)
        stds = {name: share_stds[name] for name in stats}
        reach = reachable_bounds(bounds, stds)
        radii = joint_radii(bounds, stds)
        stats = dict(stats)
        for group in joint_groups(bounds, list(stats)):  # the server's joint clip
            radius = radii[group[0]]
            factors, clamped = joint_clip_factors(
                [stats[n] for n in group], [share_stds[n] for n in group], radius,
                [bounds[n].norm == "l1_nonnegative" for n in group])
            stats.update({n: c * factors.reshape(-1, *([1] * (c.ndim - 1)))
                          for n, c in zip(group, clamped, strict=True)})
        out = []
        for name, values in stats.items():
            stage = f"{round_name}/{name}"
            rngs = [
                secure_generator() if share_rng is None else share_rng(stage, int(c))
                for c in clients
            ]
            total = node_contribution(
                values, reach[name], bounds[name].norm, share_stds[name], rngs,
                symmetric=name == "covariance",
            )
            out.append(encode(total, steps[name], q_range))
        return out

    def local_centers(self, clients: Sequence[int], local_k: int) -> dict[str, np.ndarray]:
        """k-FED: each client's local k-means centers, shape (m, local_k, d). Non-private."""
        seed = self.config.seed
        stats = [
            local_kmeans_centers(self.points[c], local_k, integer_seed(seed, "kfed", c))
            for c in clients
        ]
        return {"centers": _stack(stats, (local_k, self.dim))}

    def _original_segments(self, clients: list[int]) -> list[tuple[np.ndarray, bool]]:
        """The clients' points, in order, as few arrays as possible: ``(points, mapped)``.

        Runs of consecutive clients whose points were not clipped are slices of the
        stacked points (no copy; ``mapped``: still to be mapped back by the inverse of
        ``transform``); a clipped client's original points are reloaded.
        """
        if self._stacked is None:
            return [(data_access.load_client(self.config, c, self.data_path)[0], False)
                    if c in self.clipped_clients else (self.points[c], True) for c in clients]
        segments, run = [], []
        for c in clients + [None]:
            if c is not None and c not in self.clipped_clients:
                run.append(c)
                continue
            if run:
                segments.append((self._pooled(run)[0], True))
                run = []
            if c is not None:
                segments.append(
                    (data_access.load_client(self.config, c, self.data_path)[0], False))
        return segments

    def evaluate(self, centers: np.ndarray) -> dict[str, np.ndarray]:
        """NON-PRIVATE evaluation over all hosted clients (summed over the node).

        Returns the summed squared distance to the nearest center, the number of
        points, and, when labels exist, the label values and the contingency table
        (n_labels, k) of labels against assigned clusters. ``centers`` are in the
        data's own space: the points are evaluated as loaded (those of clipped clients
        reloaded, the others mapped back by the inverse of ``transform``, block by
        block).
        """
        k = centers.shape[0]
        clients = self.client_ids.tolist()
        cost, labels_of = 0.0, []
        for segment, mapped in self._original_segments(clients):
            for start in range(0, segment.shape[0], BLOCK):
                block = segment[start:start + BLOCK]
                if mapped:
                    block = self.transform.invert(block)
                labels_of.append(nearest_center(block, centers))
                offset = block - centers[labels_of[-1]]
                cost += float(np.einsum("ij,ij->", offset, offset))
        assigned = np.concatenate([np.zeros(0, np.int64), *labels_of])
        out = {"cost_sum": np.array([cost]), "num_points": np.array([float(assigned.size)])}
        labelled = [self.labels[c] for c in clients]
        if clients and all(y is not None for y in labelled):
            y = np.concatenate(labelled)
            values, index = np.unique(y, return_inverse=True)
            table = np.bincount(index * k + assigned, minlength=values.size * k)
            out["label_values"] = values.astype(np.int64)
            out["table"] = table.reshape(values.size, k).astype(np.float64)
        return out



def clip_radius(config: ExperimentConfig) -> float | None:
    """The radius a node clips its points to under ``config``; None: not clipped.

    Not clipped: no privacy, or a radius the server has yet to resolve (``auto``, before
    the estimate round's release).
    """
    radius = config.privacy.data_radius
    return float(radius) if config.is_private and radius != AUTO else None


#: A spilled node's files (:meth:`NodeData.spill`); ``done`` is written last.
#: ``norms.npy``: every point's norm, for a file of points as built.
_NORMS = "norms.npy"
_POINTS, _LABELS, _OFFSETS, _META, _DONE = (
    "points.npy", "labels.npy", "offsets.npy", "meta.npz", "done")


def write_shard(path: Path, node: NodeData) -> None:
    """Write ``node``'s stacked points, labels and clip record to ``path``, atomically.

    Written to a fresh sibling directory, then renamed: a reader sees a whole shard or
    none. When another process wrote the same shard first, its copy is kept. Every
    directory is made 0700 and every file 0600 as it is created (raw client points).
    """
    private_dir(path.parent, exist_ok=True)
    tmp = private_dir(path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"))

    def save(name: str, array: np.ndarray) -> None:
        with private_file(tmp / name) as f:
            np.save(f, array)

    save(_POINTS, node._stacked)
    if node._labels_stacked is not None:
        save(_LABELS, node._labels_stacked)
    save(_OFFSETS, node._offsets)
    if node.radius is None:  # points as built: their norms, for the clip when mapped
        save(_NORMS, np.linalg.norm(node._stacked, axis=1))
    clipped = np.array(sorted(node.clipped_clients), dtype=np.int64)
    norms = [node.raw_norms.get(c, np.zeros(0)) for c in clipped.tolist()]
    with private_file(tmp / _META) as f:
        np.savez(f, client_ids=np.asarray(node._order, dtype=np.int64),
                 clipped=clipped,
                 norm_offsets=np.concatenate([[0], np.cumsum([n.size for n in norms])]).astype(
                     np.int64),
                 norms=np.concatenate([np.zeros(0), *norms]),
                 has_labels=np.array(node._labels_stacked is not None),
                 radius=np.array(np.nan if node.radius is None else node.radius))
    private_file(tmp / _DONE).close()
    try:
        tmp.rename(path)
    except OSError:  # another process's shard is there already: keep it
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()


def shard_ready(path: str | os.PathLike) -> bool:
    """True when a whole shard is at ``path`` (:func:`write_shard`)."""
    return (Path(path) / _DONE).exists()


def _is_block(base: np.ndarray, arrays: list[np.ndarray], offsets: np.ndarray) -> bool:
    """True when ``arrays`` are the consecutive row slices of ``base`` at ``offsets``."""
    if base.ndim != arrays[0].ndim or base.shape[0] != offsets[-1]:
        return False
    start = base.__array_interface__["data"][0]
    row = base.strides[0]
    return all(a.base is base and a.__array_interface__["data"][0] == start + o * row
               for a, o in zip(arrays, offsets[:-1].tolist(), strict=True))


def _clients(config: ExperimentConfig, ids: np.ndarray, data_path: str):
    """Each hosted client's (id, points, labels, owned); views of one block if there is one.

    ``owned``: the points are this node's own array (it may clip them in place).

    A generated data set (the mixture) builds its clients straight into one array
    (:meth:`~fedkmeans.data.catalog.Dataset.block`, bit-identical to one client at a
    time), which the node then keeps as is.
    """
    block = (None if data_path or not ids.size
             else data_access.dataset(config.data.name).block(config, ids))
    if block is not None:
        x, y, sizes = block
        ends = np.cumsum(sizes)
        for cid, end, size in zip(ids.tolist(), ends.tolist(), sizes.tolist(), strict=True):
            yield cid, x[end - size:end], None if y is None else y[end - size:end], True
        return
    for cid in ids.tolist():
        x, y = data_access.load_client(config, cid, data_path)
        yield cid, x, y, False


def _assign(points: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """:func:`nearest_center` in blocks of :data:`BLOCK` points."""
    out = np.empty(points.shape[0], dtype=np.int64)
    for start in range(0, points.shape[0], BLOCK):
        out[start:start + BLOCK] = nearest_center(points[start:start + BLOCK], centers)
    return out


def _stack(rows: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    if not rows:
        return np.zeros((0, *shape))
    return np.stack(rows).astype(np.float64, copy=False)
