"""How a node walks its points: in blocks of points, and in blocks of whole clients.

Pure NumPy/SciPy helpers of :mod:`fedkmeans.node.arithmetic`: the nearest center of
many points a block at a time (:func:`assign_in_blocks`), runs of whole clients of
about a block of points (:func:`whole_client_blocks`), and the sums of the points of
each key in one sparse product (:func:`one_hot_sums`). Each gives the bits of the
plain computation on all the points at once.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from scipy import sparse

from fedkmeans.clustering.client_stats import nearest_center
from fedkmeans.clustering.distances import BLOCK

__all__ = ["assign_in_blocks", "one_hot_sums", "whole_client_blocks"]


def one_hot_sums(points: np.ndarray, keys: np.ndarray, rows: int) -> np.ndarray:
    """Sum of the points of each key, shape (rows, d): ``out[r] = sum_{keys[i] = r} points[i]``.

    One sparse product: a one-hot matrix (rows, n) with one entry per point (its
    column), stored by columns, times the points. Each row adds its points in their
    order, starting from zero, as a loop over the points would (the same bits as the
    row-stored product, which sorts the entries first and reads the points out of
    order, and is several times slower).

    Parameters
    ----------
    points : ndarray of shape (n, d)
    keys : ndarray of shape (n,), integers in [0, rows)
    rows : int
    """
    n = points.shape[0]
    onehot = sparse.csc_matrix((np.ones(n), keys, np.arange(n + 1)), shape=(rows, n))
    return np.asarray(onehot @ points)


def whole_client_blocks(offsets: np.ndarray, size: int) -> Iterator[tuple[int, int]]:
    """``(a, b)``: runs of clients ``a..b-1`` of at most ``size`` points together.

    ``offsets`` (m + 1,): where each client's points start, and their total last. A
    client of more than ``size`` points is a run of its own; every client, one
    without points too, is in exactly one run, in order.
    """
    a, m = 0, offsets.size - 1
    while a < m:
        b = int(np.searchsorted(offsets, offsets[a] + size, side="right")) - 1
        b = min(max(b, a + 1), m)
        yield a, b
        a = b


def assign_in_blocks(points: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """The nearest center of every point, shape (n,), int64, a block at a time.

    :func:`~fedkmeans.clustering.client_stats.nearest_center` in blocks of
    :data:`~fedkmeans.clustering.distances.BLOCK` points (each point's scores are the
    same bits in any block).
    """
    out = np.empty(points.shape[0], dtype=np.int64)
    for start in range(0, points.shape[0], BLOCK):
        out[start:start + BLOCK] = nearest_center(points[start:start + BLOCK], centers)
    return out
