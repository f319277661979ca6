"""Swap repair: move a center that earns little to the point that costs most, keep it if cheaper.

k-means from k-means++ restarts can end in a local optimum where two true clusters
share one center while another cluster holds two: on uneven clusters (sizes 1:50,
2,000 points, k = 5) scikit-learn's ``KMeans(n_init=10)`` does so in about 1 seed of
10, at 1.27 x the optimal cost, and the far, small cluster is then the one merged. More
restarts lower that rate but cost time in proportion; this repair looks at the answer
itself.

One swap, on points ``x`` with non-negative weights ``w`` and centers ``C``:

- ``far``: the point of largest ``w_i d(x_i, C)^2``, the one point that costs most;
- ``idle``: the center whose removal costs least, ``sum_{i in its cell} w_i (d_2(x_i)^2
  - d_1(x_i)^2)`` (``d_1``, ``d_2`` the distances to the nearest and second-nearest
  center): a center that splits one cluster in two earns little;
- move ``idle`` to ``far``, run Lloyd to convergence (:func:`lloyd`), and keep the result
  only if its weighted cost is lower.

Swaps repeat while they lower the cost, at most ``k`` times. Every step is
deterministic: the result is a function of the points, the weights and the start.
On the server this runs on public data (Q) or on released values (noisy weights), so it
is post-processing.
"""

from __future__ import annotations

import numpy as np

from fedkmeans.clustering.distances import squared_distances

__all__ = ["lloyd", "swap_repair", "weighted_cost"]


def weighted_cost(x: np.ndarray, w: np.ndarray, centers: np.ndarray) -> float:
    """``sum_i w_i min_c ||x_i - c||^2``."""
    return float((squared_distances(x, centers).min(axis=1) * w).sum())


def lloyd(x: np.ndarray, w: np.ndarray, centers: np.ndarray, max_iter: int = 100) -> np.ndarray:
    """Weighted Lloyd from ``centers`` until no label changes (at most ``max_iter``).

    A center whose cell has no weight stays where it is.
    """
    centers = np.array(centers, dtype=np.float64)
    labels = None
    k = centers.shape[0]
    for _ in range(max_iter):
        new = squared_distances(x, centers).argmin(axis=1)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        mass = np.bincount(labels, weights=w, minlength=k)
        sums = np.zeros_like(centers)
        np.add.at(sums, labels, x * w[:, None])
        full = mass > 0
        centers[full] = sums[full] / mass[full, None]
    return centers


def swap_repair(
    x: np.ndarray, centers: np.ndarray, sample_weight: np.ndarray | None = None,
    max_swaps: int | None = None,
) -> np.ndarray:
    """``centers`` after the swaps of the module docstring that lower the weighted cost.

    Parameters
    ----------
    x : ndarray of shape (n, d)
    centers : ndarray of shape (k, d)
        A k-means answer on ``x`` (Lloyd-converged or not).
    sample_weight : ndarray of shape (n,), optional
        Non-negative weights; default all 1.
    max_swaps : int, optional
        Default k.

    Returns
    -------
    ndarray of shape (k, d)
        Never of higher weighted cost than ``centers``; ``centers`` itself (a copy)
        when no swap helps or k < 2.
    """
    x = np.asarray(x, dtype=np.float64)
    w = np.ones(x.shape[0]) if sample_weight is None else np.asarray(sample_weight, float)
    best = np.array(centers, dtype=np.float64)
    k = best.shape[0]
    if k < 2 or x.shape[0] <= k:
        return best
    best_cost = weighted_cost(x, w, best)
    for _ in range(k if max_swaps is None else max_swaps):
        d2 = squared_distances(x, best)
        two = np.partition(d2, 1, axis=1)[:, :2]
        labels = d2.argmin(axis=1)
        removal = np.bincount(labels, weights=w * (two[:, 1] - two[:, 0]), minlength=k)
        far = int(np.argmax(w * two[:, 0]))
        idle = int(np.argmin(removal))
        trial = best.copy()
        trial[idle] = x[far]
        trial = lloyd(x, w, trial)
        cost = weighted_cost(x, w, trial)
        if not cost < best_cost * (1.0 - 1e-12):
            break
        best, best_cost = trial, cost
    return best
