"""Squared Euclidean distances between points and centers: the one kernel of the package.

Every nearest center and every cost goes through :func:`center_scores`: the clients'
assignments (:func:`fedkmeans.clustering.client_stats.nearest_center`, run by the
nodes), the evaluation metrics (:mod:`fedkmeans.metrics`) and the membership cost
scores (:mod:`fedkmeans.attacks.membership`). Callers that must bound memory pass
blocks of points. No input is validated or converted here: callers do it once.

The vertical protocol keeps its own kernel,
:func:`fedkmeans.vertical.protocol.squared_distances`, on purpose: it sums the parties'
distances by differences, without the expansion's round-off.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BLOCK", "center_scores", "nearest_squared_distances", "squared_distances"]

#: Points whose distances to the centers are computed at a time by callers that bound
#: memory (the nodes): bounds the (points, centers) score matrix. Small enough that it
#: stays near the cache (4096 x 300 server points x 8 B = 9.8 MB): a larger block's
#: fresh temporary costs more in page faults than the fewer calls save (the nearest of
#: 300 projected server points for 50,000 points: 32 ms in blocks of 65,536, 9.6 ms in
#: blocks of 4096). Each point's scores are the same bits in any block.
BLOCK = 4096


def center_scores(points: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """``||c||^2 - 2 p.c`` for every point p and center c: ``||p - c||^2 - ||p||^2``.

    ``||p||^2`` is the same for every center of a point, so the nearest center is the
    argmin of these scores; :func:`squared_distances` adds it.

    Parameters
    ----------
    points : ndarray of shape (..., n, d)
    centers : ndarray of shape (..., k, d)
        Leading dimensions broadcast as in :func:`numpy.matmul`, e.g. points
        ``(n, 1, d)`` against one set of centers per point ``(n, k, d)``.

    Returns
    -------
    ndarray of shape (..., n, k)
    """
    # Scaling by -2 before the product is exact (a power of two), and the one in-place
    # addition rounds as ||c||^2 - 2 p.c would: the same scores, one (n, k) pass fewer.
    scores = points @ (-2.0 * np.swapaxes(centers, -1, -2))
    scores += (centers * centers).sum(axis=-1)[..., None, :]
    return scores


def squared_distances(points: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """``||p - c||^2`` for every point p and center c, never negative.

    :func:`center_scores` plus ``||p||^2``; the round-off of the expansion can push
    the distance of a point on a center below zero, which is clipped to zero.

    Parameters
    ----------
    points : ndarray of shape (..., n, d)
    centers : ndarray of shape (..., k, d)
        Leading dimensions broadcast as in :func:`center_scores`.

    Returns
    -------
    ndarray of shape (..., n, k), >= 0
    """
    d2 = center_scores(points, centers)
    d2 += (points * points).sum(axis=-1)[..., None]
    np.maximum(d2, 0.0, out=d2)
    return d2


def nearest_squared_distances(
    points: np.ndarray, centers: np.ndarray, squared_norms: np.ndarray | None = None
) -> np.ndarray:
    """``||p - c||^2`` to the nearest center of every point, shape (n,), never negative.

    ``squared_distances(points, centers).min(axis=1)`` to the bit, with one addition
    per point instead of k: ``min_c max(s_c + |p|^2, 0) = max(min_c s_c + |p|^2, 0)``
    exactly, because rounding is monotone.

    Parameters
    ----------
    points : ndarray of shape (n, d)
    centers : ndarray of shape (k, d)
    squared_norms : ndarray of shape (n,), optional
        ``|p|^2`` of every point, when the caller has them (computed once for several
        center sets); default ``(points * points).sum(axis=-1)``, the
        :func:`squared_distances` ones.
    """
    if squared_norms is None:
        squared_norms = (points * points).sum(axis=-1)
    nearest = center_scores(points, centers).min(axis=1)
    nearest += squared_norms
    return np.maximum(nearest, 0.0, out=nearest)
