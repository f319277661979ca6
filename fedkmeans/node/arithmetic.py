"""What each stage asks of a node's clients: per-client statistics, stacked.

:class:`StageArithmetic` is the arithmetic half of :class:`fedkmeans.node.NodeData`:
for the clients of one message it returns one row per client, stacked ``(m, ...)``,
so the server clips, validates and (for a curious server) observes every client
separately, exactly as with one client per node. The stages (:mod:`fedkmeans.stages`)
name which method answers them. The points it reads are the node's, already mapped by
the public transform and clipped to the data radius (:mod:`fedkmeans.node`); at
client level each statistic is clipped here to its client bound
(:func:`fedkmeans.stages.statistic_bounds`):

* step 1 (:meth:`StageArithmetic.covariance_triangles`): ``X^T X`` per client
  (batched products of clients of one size) read into its upper-triangle row, each
  row clipped by the Frobenius norm of its full matrix;
* steps 2-3, the Lloyds steps and the evaluation assign all asked clients' points at
  once, then split exact counts and in-order sums by client; at client level a
  client's sums and counts are scaled by one common factor, so a clip never moves a
  center (:meth:`StageArithmetic._clip_jointly`);
* the estimate round and the final check each build one row per client
  (:mod:`fedkmeans.stages.estimate`, :mod:`fedkmeans.stages.check`).

It is a part of the node (:attr:`fedkmeans.node.NodeData.arithmetic`) with an explicit
interface: the run's ``config`` (privacy settings, seed), the node's
:class:`~fedkmeans.node.memory.NodeMemory` (the points as the stages see them, read
only), the rows kept for step 1 (:class:`~fedkmeans.node.reusable.ReusableRows`) and
the points before the clip (:class:`PointsBeforeClip`: the node, which clipped them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from fedkmeans.blas_threads import block_product_threads
from fedkmeans.clustering import local_kmeans_centers
from fedkmeans.clustering.client_stats import nearest_center, symmetric_from_upper
from fedkmeans.clustering.distances import BLOCK
from fedkmeans.config import ProtocolConfig
from fedkmeans.data.transform import PublicTransform
from fedkmeans.node.blocks import assign_in_blocks, one_hot_sums, whole_client_blocks
from fedkmeans.node.memory import NodeMemory
from fedkmeans.node.reusable import ReusableRows
from fedkmeans.privacy.clipping import (
    clip_stacked,
    clip_upper_triangles,
    triangle_weights,
    weighted_l2_norms,
)
from fedkmeans.seeding import integer_seed
from fedkmeans.stages import statistic_bounds

#: Clients per batched ``X^T X`` product (32 x d x d doubles: 2.6 MB at d = 100).
TRIANGLE_RUN = 32


class PointsBeforeClip(Protocol):
    """The points as they were before the clip to the data radius (the node's record).

    The final check and the evaluation read them, the estimate round their norms.
    """

    #: The public transform the points were mapped by before the clip.
    transform: PublicTransform

    def point_norms(self, clients: Sequence[int]) -> np.ndarray:
        """The asked clients' points' norms before the clip, in order, shape (n,)."""

    def original_segments(self, clients: list[int]) -> list[tuple[np.ndarray, bool]]:
        """The clients' points before the clip, in order: ``(points, mapped)`` runs."""


class StageArithmetic:
    """Per-stage statistics of the asked clients: one row per client, stacked.

    Parameters
    ----------
    config : ProtocolConfig
        The run's settings (privacy level and bounds, seed).
    memory : NodeMemory
        The node's points as the stages see them (mapped and clipped); only read.
    reusable : ReusableRows
        Step 1's rows the estimate round kept; the other stages clear it.
    before_clip : PointsBeforeClip
        The points before the clip to the data radius.
    """

    def __init__(self, config: ProtocolConfig, memory: NodeMemory, reusable: ReusableRows,
                 before_clip: PointsBeforeClip) -> None:
        self.config = config
        self.memory = memory
        self.reusable = reusable
        self.before_clip = before_clip

    @property
    def dim(self) -> int:
        """Feature dimension d of the points."""
        return self.memory.dim

    def covariance(self, clients: Sequence[int]) -> dict[str, np.ndarray]:
        """Step 1 as full matrices, shape (m, d, d): :meth:`covariance_triangles` unfolded.

        For the SecAgg+ path and the audits, which work on the (d, d) matrices.
        """
        triangles = self.covariance_triangles(clients)["covariance"]
        return {"covariance": symmetric_from_upper(triangles, self.dim)}

    def covariance_triangles(self, clients: Sequence[int]) -> dict[str, np.ndarray]:
        """Step 1 as it travels: upper triangles of ``sum_p p p^T``, shape (m, d(d+1)/2).

        Each client's ``X^T X`` (:meth:`raw_covariance_triangles`) is read into the
        client's reply row. At client level each triangle is clipped by the Frobenius norm of
        its full matrix (:func:`~fedkmeans.privacy.clipping.clip_upper_triangles`).
        A client whose row the estimate round kept (its points unchanged since,
        :attr:`reusable`) is not computed again: the
        row is the same product of the same points, so the same bits.
        """
        if not len(self.reusable):
            triangles = self.raw_covariance_triangles(clients)
        else:
            triangles = np.empty((len(clients), self.dim * (self.dim + 1) // 2))
            missing = [i for i, c in enumerate(clients)
                       if not self.reusable.take(c, triangles[i])]
            if missing:
                triangles[missing] = self.raw_covariance_triangles(
                    [clients[i] for i in missing])
        return {"covariance": self.clip_covariance_triangles(triangles)}

    def raw_covariance_triangles(self, clients: Sequence[int]) -> np.ndarray:
        """Upper triangles of every asked client's ``X^T X``, unclipped, (m, d(d+1)/2).

        Clients of one size stored one after the other
        (:meth:`~fedkmeans.node.memory.NodeMemory.equal_size_runs`) get
        their matrices from one batched :func:`numpy.matmul`, :data:`TRIANGLE_RUN` at a
        time; any other client from the same call on a batch of one. NumPy multiplies
        a batch matrix by matrix, with the same BLAS call for each, so a client's row
        is the same bits whichever clients share its batch (tested): a node layout (one
        client per node, or shards of many) never changes a release. A BLAS ``dsyrk``
        of the same points differs from it in the last bits on some CPUs (OpenBLAS's
        SkylakeX kernels), so it is not used beside it.
        """
        d = self.dim
        rows, cols = np.triu_indices(d)
        upper = cols * d + rows  # (i, j), i <= j, in a column-major (or symmetric) result
        out = np.zeros((len(clients), rows.size))
        for i, j, block in self.memory.equal_size_runs(clients, TRIANGLE_RUN):
            if block.shape[1]:
                second = np.matmul(block.transpose(0, 2, 1), block)
                np.take(second.reshape(j - i, d * d), upper, axis=1, out=out[i:j])
        return out

    def clip_covariance_triangles(self, triangles: np.ndarray) -> np.ndarray:
        """Client level: each client's triangle clipped by its full matrix's Frobenius norm.

        In place (the caller owns ``triangles``); unchanged at data-point level or
        without privacy.
        """
        bound = self.covariance_client_bound()
        if bound is not None:
            return clip_upper_triangles(triangles, bound, self.dim, copy=False)
        return triangles

    def covariance_client_bound(self) -> float | None:
        """The bound :meth:`clip_covariance_triangles` clips with (None: no clip)."""
        privacy = self.config.privacy
        if self.config.is_private and privacy.level == "client":
            return statistic_bounds(privacy)["covariance"].client_bound
        return None

    def _clip_rows(self, name: str, stacked: np.ndarray) -> np.ndarray:
        """Client level: clip each client's row of ``stacked`` (m, ...) on its own."""
        privacy = self.config.privacy
        if not self.config.is_private or privacy.level != "client":
            return stacked
        bound = statistic_bounds(privacy)[name]
        norm = "l2" if bound.norm == "l2" else "l1_nonnegative"
        return clip_stacked(stacked, bound.client_bound, norm)

    def histogram(
        self, clients: Sequence[int], basis: np.ndarray, projected_server: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Step 2: nearest-projected-server-point histogram per client, shape (m, |Q|).

        Every asked client's points are assigned at once (in blocks of
        :data:`BLOCK` points); the counts are then split by client (exact integers),
        so this equals :func:`~fedkmeans.clustering.projected_histogram` per client.
        """
        m, size = len(clients), projected_server.shape[0]
        self.reusable.clear()  # kept for step 1 only
        x, owner = self.memory.pooled(clients)
        with block_product_threads():
            nearest = assign_in_blocks(x @ basis.T, projected_server)
        hist = np.bincount(owner * size + nearest, minlength=m * size).reshape(m, size)
        return {"histogram": self._clip_rows("histogram", hist.astype(np.float64))}

    def sums_counts(
        self, clients: Sequence[int], centers: np.ndarray, basis: np.ndarray | None = None
    ) -> dict[str, np.ndarray]:
        """Step 3 (``basis`` given) or a Lloyds step: sums (m, k, d) and counts (m, k).

        The asked clients' points are read once, in blocks of whole clients of about
        :data:`BLOCK` points (:func:`~fedkmeans.node.blocks.whole_client_blocks`): a
        block is projected (step 3), assigned, and summed while it is in the cache.
        Each (client, cluster) sum adds that client's points in their order, as
        :func:`~fedkmeans.clustering.cluster_sums_counts` does for one client; a client
        lies in one block, so its sums are those of one product over all the points.
        """
        m, k = len(clients), centers.shape[0]
        self.reusable.clear()  # kept for step 1 only
        x, owner = self.memory.pooled(clients)
        offsets = np.searchsorted(owner, np.arange(m + 1))  # where each client's rows start
        sums, labels = np.empty((m * k, self.dim)), np.empty(x.shape[0], dtype=np.int64)
        with block_product_threads():
            for a, b in whole_client_blocks(offsets, BLOCK):
                block = x[offsets[a]:offsets[b]]  # read once: assigned, then summed
                found = assign_in_blocks(block if basis is None else block @ basis.T, centers)
                labels[offsets[a]:offsets[b]] = found
                # the block's clients' keys are theirs alone: each sum is complete here
                sums[a * k:b * k] = one_hot_sums(block, (owner[offsets[a]:offsets[b]] - a) * k
                                                 + found, (b - a) * k)
        counts = np.bincount(owner * k + labels, minlength=m * k).reshape(m, k)
        return self._clip_jointly(sums.reshape(m, k, self.dim), counts.astype(np.float64))

    def cost_differences(
        self, clients: Sequence[int], centers: np.ndarray, alternative: np.ndarray,
        clips=None,
    ) -> dict[str, np.ndarray]:
        """The final check: each client's clipped cost differences of A and B, (m, 1) each.

        :func:`~fedkmeans.stages.check.cost_differences` in units of each of ``clips``
        (the wide and the narrow clip the server sent; None: ``privacy.check-clip`` for
        both), then at client level each client's value clipped to
        ``max-points-per-client`` (:mod:`fedkmeans.stages.check`). On the points
        before the clip to the data radius (mapped by the public transform, the space
        of A and B): the clip at tau alone bounds the sensitivity, and the cost the
        run reports is on those points (the radius clip moved the comparison away
        from it where a few high-variance features carry the cost).
        """
        from fedkmeans.stages.check import check_clip_of, cost_differences

        self.reusable.clear()  # kept for step 1 only
        clients = list(clients)
        points = self.memory.points
        owner = np.repeat(np.arange(len(clients)), [points[c].shape[0] for c in clients])
        if clips is None:
            clips = [check_clip_of(self.config.privacy)] * 2
        clips = np.asarray(clips, dtype=np.float64).ravel()[:2]
        rows, start = np.zeros((len(clients), 2)), 0
        transform = self.before_clip.transform
        with block_product_threads():
            for segment, mapped in self.before_clip.original_segments(clients):  # no stacked copy
                end = start + segment.shape[0]
                rows[:, :clips.size] += cost_differences(
                    segment if mapped else transform.apply(segment), owner[start:end],
                    len(clients), centers, alternative, clips)
                start = end
        return {"cost_difference": self._clip_rows("cost_difference", rows)}

    def estimates(self, clients: Sequence[int]) -> dict[str, np.ndarray]:
        """The estimate round: each client's row of public-bin histograms, (m, width).

        :func:`~fedkmeans.stages.estimate.client_rows` of the clients' sizes, their
        points' norms before the clip to the data radius (so the server can tell how
        many points a declared radius clips) and, at client level, ``||X^T X||_F`` of
        their points as loaded; at client level each row is then clipped to the
        stage's bound (a no-op for honest rows).

        One pass over the points: their norms are the node's, computed once with
        the points (and kept for the clip to the data radius); the Frobenius norms
        come from :meth:`_second_moment_norms`.
        """
        from fedkmeans.stages.estimate import client_rows

        _, owner = self.memory.pooled(clients)
        norms = self.before_clip.point_norms(clients)
        sizes = np.array([self.memory.points[c].shape[0] for c in clients], dtype=np.int64)
        moments = None
        level = self.config.privacy.level
        if level == "client":
            moments = self._second_moment_norms(clients)
        rows = client_rows(sizes, moments, norms, owner, level=level)
        return {"estimates": self._clip_rows("estimates", rows)}

    def _second_moment_norms(self, clients: Sequence[int]) -> np.ndarray:
        """Each client's ``||X^T X||_F``, shape (m,); keeps the triangles worth keeping.

        ``||X^T X||_F^2 = ||X X^T||_F^2 = sum_{p, q} (p . q)^2``. A client with fewer
        points than dimensions (``n < d``) gets it from its ``n x n`` Gram matrix
        (``n^2 d`` multiply-adds instead of ``n d^2 / 2``), and step 1 computes its
        ``X^T X``, once. A client with ``n >= d`` gets it from its ``X^T X`` triangle,
        which is kept for step 1 (:attr:`reusable`):
        for it the matrix costs more to compute than its ``d (d + 1) / 2`` numbers cost
        to keep. Either way the released bin is that of the same norm (up to rounding).
        """
        d = self.dim
        moments = np.zeros(len(clients))
        large = []
        for i, c in enumerate(clients):
            x = self.memory.points[c]
            if x.shape[0] >= d:
                large.append(i)
            elif x.shape[0]:
                gram = x @ x.T
                moments[i] = math.sqrt(np.einsum("ij,ij->", gram, gram))
        if large:
            kept = [clients[i] for i in large]
            triangles = self.raw_covariance_triangles(kept)
            moments[large] = weighted_l2_norms(triangles, triangle_weights(d))
            self.reusable.keep(kept, triangles)
        return moments

    def _clip_jointly(self, sums: np.ndarray, counts: np.ndarray) -> dict[str, np.ndarray]:
        """Client level: scale each client's sums and counts by one factor, in place.

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
        sums *= factor[:, None, None]  # in place: the caller's fresh arrays
        counts *= factor[:, None]
        return {"sums": sums, "counts": counts}

    def local_centers(self, clients: Sequence[int], local_k: int) -> dict[str, np.ndarray]:
        """k-FED: each client's local k-means centers, shape (m, local_k, d). Non-private."""
        seed = self.config.seed
        self.reusable.clear()  # kept for step 1 only
        stats = [
            local_kmeans_centers(self.memory.points[c], local_k, integer_seed(seed, "kfed", c))
            for c in clients
        ]
        return {"centers": _stack(stats, (local_k, self.dim))}

    def evaluate(self, centers: np.ndarray) -> dict[str, np.ndarray]:
        """NON-PRIVATE evaluation over all hosted clients (summed over the node).

        Returns the summed squared distance to the nearest center, the number of
        points, and, when labels exist, the label values and the contingency table
        (n_labels, k) of labels against assigned clusters. ``centers`` are in the
        data's own space: the points before the clip, mapped back by the inverse of
        ``transform`` block by block (a clipped client's rebuilt from the rows the clip
        moved, :meth:`~fedkmeans.node.NodeData.original_segments`; reloaded as loaded
        when they were not kept).
        The inverse map of the mapped points restores them up to rounding (relative
        1e-16 per coordinate), which is below any figure the evaluation reports.
        """
        k = centers.shape[0]
        clients = self.memory.client_ids.tolist()
        self.reusable.clear()  # kept for step 1 only
        cost, labels_of = 0.0, []
        with block_product_threads():
            for segment, mapped in self.before_clip.original_segments(clients):
                for start in range(0, segment.shape[0], BLOCK):
                    block = segment[start:start + BLOCK]
                    if mapped:
                        block = self.before_clip.transform.invert(block)
                    labels_of.append(nearest_center(block, centers))
                    offset = block - centers[labels_of[-1]]
                    cost += float(np.einsum("ij,ij->", offset, offset))
        assigned = np.concatenate([np.zeros(0, np.int64), *labels_of])
        out = {"cost_sum": np.array([cost]), "num_points": np.array([float(assigned.size)])}
        labelled = [self.memory.labels[c] for c in clients]
        if clients and all(y is not None for y in labelled):
            y = np.concatenate(labelled)
            values, index = np.unique(y, return_inverse=True)
            table = np.bincount(index * k + assigned, minlength=values.size * k)
            out["label_values"] = values.astype(np.int64)
            out["table"] = table.reshape(values.size, k).astype(np.float64)
        return out


def _stack(rows: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    if not rows:
        return np.zeros((0, *shape))
    return np.stack(rows).astype(np.float64, copy=False)
