"""Streaming aggregation: fold each client's clipped reply into a running sum.

The privacy guarantee needs the server to see, clip and validate every client's
reply on its own (data-point or client level: one unit moves the sum by at most the
clip bound). It does not need the replies after that. :class:`RunningSums` keeps one
array per statistic, the sum of the clipped rows folded so far, so the honest server
holds ``O(k d + d^2)`` per statistic instead of ``O(clients)`` rows.

Clipping is exactly that of the stacked path (:func:`clipped_sum`: the same
:func:`~fedkmeans.privacy.clipping.clip_stacked` on every row; step 1's triangles:
the same per-row factors, :func:`~fedkmeans.privacy.clipping.clip_factors`, summed
as one matrix-vector product without copying the reply); only the order of the
floating-point additions differs (message by message instead of all rows in
client-id order), so results agree to rounding (about 1e-15 relative).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from fedkmeans.clustering.client_stats import symmetric_from_upper
from fedkmeans.privacy import clipping
from fedkmeans.privacy.clipping import (
    clip_factors,
    clip_stacked,
    triangle_weights,
)

__all__ = ["CLIP_CHUNK", "Fold", "RunningSums", "clipped_sum", "clipped_triangle_sum",
           "folded_sum", "joint_factors"]

#: Rows clipped at a time: bounds the server's extra memory to one chunk of rows.
CLIP_CHUNK = 1024


@dataclass(frozen=True)
class Fold:
    """How the server folds one statistic: clip each client's row, then add it.

    Attributes
    ----------
    bound : float
        Server clip bound of one client's row (``math.inf``: no clipping, the
        non-private sum).
    norm : {"l2", "l1", "l1_nonnegative"}
        The norm of the bound (:func:`~fedkmeans.privacy.clipping.clip_stacked`).
        In a joint group, ``"l1_nonnegative"`` only sets negative entries to 0 first.
    joint : str
        The statistic's joint group (``""``: clipped on its own).
    scale : float
        Divides the statistic in the group's norm (its release's noise std).
    """

    bound: float = math.inf
    norm: str = "l2"
    #: Non-empty: the statistic is clipped with the other folds of this group by one
    #: factor per client (:func:`joint_factors`); ``bound`` is then the group's
    #: radius in whitened units and ``scale`` this statistic's noise standard deviation.
    joint: str = ""
    scale: float = 1.0


def _chunked_sum(values: np.ndarray, clip: Callable[[np.ndarray], np.ndarray] | None):
    """Sum of ``clip(chunk)`` over chunks of :data:`CLIP_CHUNK` rows (no clip: plain)."""
    total = np.zeros(values.shape[1:], dtype=np.float64)
    for start in range(0, values.shape[0], CLIP_CHUNK):
        chunk = values[start:start + CLIP_CHUNK]
        total += (chunk if clip is None else clip(chunk)).sum(axis=0)
    return total


def joint_factors(
    rows: Mapping[str, np.ndarray], folds: Mapping[str, Fold]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One clip factor per client for each joint group of ``rows``.

    A group's statistics ``x_i`` (rows of shape (m, ...)) are clamped to ``>= 0`` where
    their fold's norm is ``"l1_nonnegative"`` and the client's whitened value
    ``(x_1 / scale_1, x_2 / scale_2, ...)`` is clipped to the group's ``bound`` in l2
    (:func:`~fedkmeans.privacy.clipping.clip_factors`): the projection onto the cone
    of non-negative counts intersected with a ball, 1-Lipschitz in the noise's metric,
    which scales every statistic of a client by the same factor
    (:mod:`fedkmeans.privacy.budget`, "Joint statistics").

    Returns
    -------
    factors : dict of str to ndarray of shape (m,)
        Per joint statistic, its group's factors (absent: not joint, or no clipping).
    prepared : dict of str to ndarray
        Per joint statistic, its rows with negative counts set to 0 (read-only input
        rows are not modified).
    """
    groups: dict[str, list[str]] = {}
    for name, fold in folds.items():
        if fold.joint and name in rows and not math.isinf(fold.bound):
            groups.setdefault(fold.joint, []).append(name)
    factors, prepared = {}, {}
    for names in groups.values():
        # the one joint clip of both aggregations (server_clip.server_clip on a node)
        common, clamped = clipping.joint_clip_factors(
            [rows[n] for n in names], [folds[n].scale for n in names], folds[names[0]].bound,
            [folds[n].norm == "l1_nonnegative" for n in names])
        factors.update({n: common for n in names})
        prepared.update(zip(names, clamped, strict=True))
    return factors, prepared


def _scaled_sum(values: np.ndarray, factors: np.ndarray) -> np.ndarray:
    """``sum_i factors[i] * values[i]`` (shape of one row), without copying ``values``."""
    return (factors @ values.reshape(values.shape[0], -1)).reshape(values.shape[1:])


def clipped_sum(values: np.ndarray, bound: float, norm: str) -> np.ndarray:
    """Sum over clients of each client's clipped row, in row order, chunk by chunk.

    Parameters
    ----------
    values : ndarray of shape (m, ...)
        One row per client.
    bound, norm
        As in :class:`Fold`.

    Returns
    -------
    ndarray of shape ``values.shape[1:]``
    """
    if math.isinf(bound):
        return _chunked_sum(values, None)
    return _chunked_sum(values, lambda chunk: clip_stacked(chunk, bound, norm))


def clipped_triangle_sum(triangles: np.ndarray, bound: float, dim: int) -> np.ndarray:
    """:func:`clipped_sum` of symmetric (dim, dim) rows given as upper triangles (l2).

    Each row's factor clips its full matrix's Frobenius norm
    (:func:`~fedkmeans.privacy.clipping.clip_factors` with
    :func:`~fedkmeans.privacy.clipping.triangle_weights`); the clipped rows are summed
    as ``factors @ chunk``, so ``triangles`` is only read (a read-only view of a
    reply's bytes) and never copied.

    Returns
    -------
    ndarray of shape (dim (dim + 1) / 2,)
        The upper triangle of the sum of the clipped matrices.
    """
    if math.isinf(bound):
        return _chunked_sum(triangles, None)
    weights = triangle_weights(dim)
    total = np.zeros(triangles.shape[1], dtype=np.float64)
    for start in range(0, triangles.shape[0], CLIP_CHUNK):
        chunk = triangles[start:start + CLIP_CHUNK]
        total += clip_factors(chunk, bound, "l2", weights) @ chunk
    return total


class RunningSums:
    """Running clipped sums of the statistics of one round.

    Parameters
    ----------
    shapes : mapping of str to tuple of int
        Per-client shape of every statistic.
    folds : mapping of str to Fold
        How each statistic is clipped before it is added.
    """

    def __init__(self, shapes: Mapping[str, tuple[int, ...]], folds: Mapping[str, Fold]):
        missing = sorted(set(shapes) - set(folds))
        if missing:
            raise ValueError(f"no fold given for statistics {missing}")
        self.folds = dict(folds)
        self.totals = {name: np.zeros(shape) for name, shape in shapes.items()}
        #: Sums of rows that arrived as upper triangles (symmetric (d, d) statistics).
        self.triangle_totals: dict[str, np.ndarray] = {}
        self.count = 0

    def add(self, rows: Mapping[str, np.ndarray], triangles: frozenset = frozenset()) -> None:
        """Fold one message's rows (each of shape (m, ...)) into the sums.

        Parameters
        ----------
        rows : mapping of str to ndarray of shape (m, ...)
        triangles : set of str
            Statistics whose rows are upper triangles, shape (m, d (d + 1) / 2) of
            symmetric (d, d) rows: clipped by the Frobenius norm of the full matrix
            (:func:`~fedkmeans.privacy.clipping.clip_upper_triangles`) and summed as
            triangles, without the (m, d, d) stack.
        """
        m = None
        joint, prepared = joint_factors(rows, self.folds)
        for name, total in self.totals.items():
            fold = self.folds[name]
            if name in joint:
                total += _scaled_sum(prepared[name], joint[name])
            elif name in triangles:
                if fold.norm != "l2":
                    raise ValueError(f"'{name}' as triangles needs an l2 fold, got {fold.norm}")
                part = clipped_triangle_sum(rows[name], fold.bound, total.shape[0])
                self.triangle_totals[name] = self.triangle_totals.get(name, 0.0) + part
            else:
                total += clipped_sum(rows[name], fold.bound, fold.norm)
            m = rows[name].shape[0]
        self.count += m or 0

    def as_rows(self) -> dict[str, np.ndarray]:
        """The sums with a leading axis of one (the shape of an aggregated reply)."""
        out = {}
        for name, total in self.totals.items():
            if name in self.triangle_totals:
                total = total + symmetric_from_upper(
                    self.triangle_totals[name][None], total.shape[0])[0]
            out[name] = total[None]
        return out


def folded_sum(rows: Mapping[str, np.ndarray], name: str, folds: Mapping[str, Fold]) -> np.ndarray:
    """The sum of statistic ``name``'s stacked rows (m, ...), clipped as its fold says.

    The stacked twin of :class:`RunningSums` (every row at once): a joint statistic is
    scaled by its group's factors (:func:`joint_factors`), any other one clipped on its
    own (:func:`clipped_sum`).
    """
    fold = folds[name]
    if fold.joint:
        factors, prepared = joint_factors(rows, folds)
        if name in factors:
            return _scaled_sum(prepared[name], factors[name])
    return clipped_sum(rows[name], fold.bound, fold.norm)
