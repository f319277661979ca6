"""Choosing k without extra privacy cost: the elbow of the weighted server-data cost.

After FedDP-Init steps 1-2 the server holds the projected server points ``Pi Q`` and
their noisy weights (how many client points each one stands for). Both are already
released, so any function of them is post-processing and costs no privacy (the
authors' suggestion in their ICML 2025 rebuttal). The server runs weighted k-means
for k = 1 .. k_max and picks the elbow of the cost curve.

Elbow rule ("kneedle", Satopaa et al. 2011, on the log cost): with
``l_k = log cost_k``, rescale the curve to the unit square,
``x = (k - 1) / (k_max - 1)`` and ``y = (l_k - l_kmax) / (l_1 - l_kmax)``, and take the
k furthest below the chord from ``(0, 1)`` to ``(1, 0)``, i.e. the k maximising
``(1 - x) - y``. The curve is made non-increasing first (a k-means run can end slightly
above the previous k's cost). On the log scale a cluster split off late still counts
as much as one split off early; on the raw scale the rule drifted towards small k
(measured on the paper mixture with k_max = 15: raw kneedle chose 6-10, log kneedle
8-11, where the weighted server data has 10 components plus the 100 uniform server
points, which sit near the centroid in the projected space and act as an 11th group).
"""

from __future__ import annotations

import numpy as np

from fedkmeans.clustering.server_steps import usable_weights

__all__ = ["choose_k", "elbow_k", "weighted_kmeans_costs"]


def weighted_kmeans_costs(
    points: np.ndarray,
    weights: np.ndarray,
    k_max: int,
    *,
    seed: int,
    n_init: int = 10,
    min_weight: float = 0.0,
) -> np.ndarray:
    """Weighted k-means cost per unit weight for k = 1 .. k_max.

    Parameters
    ----------
    points : ndarray of shape (m, r)
        Projected server points.
    weights : ndarray of shape (m,)
        Noisy weights (negative ones become 0, those below ``min_weight`` are dropped;
        with fewer than 2 positive weights every point gets weight 1).
    k_max : int
        Largest k; capped at the number of points with positive weight.
    seed : int
        Integer seed for scikit-learn (the same for every k).
    n_init : int, default 10
        Restarts per k.
    min_weight : float, default 0.0

    Returns
    -------
    ndarray of shape (k_max',)
        ``costs[k - 1]`` = sum_i w_i min_r ||p_i - c_r||^2 / sum_i w_i, non-increasing,
        for ``k_max' = min(k_max, #positive weights)``.
    """
    if k_max < 1:
        raise ValueError(f"k_max must be >= 1, got {k_max!r}")
    w = usable_weights(weights, min_weight, 2)
    keep = w > 0
    pts, w = np.asarray(points, dtype=np.float64)[keep], w[keep]
    k_max = min(k_max, pts.shape[0])
    total = float(w.sum())
    costs = np.empty(k_max)
    from sklearn.cluster import KMeans  # not at import: ~2 s with the pandas it loads

    for k in range(1, k_max + 1):
        model = KMeans(n_clusters=k, n_init=n_init, random_state=seed)
        model.fit(pts, sample_weight=w)
        costs[k - 1] = float(model.inertia_) / total
    return np.minimum.accumulate(costs)


def elbow_k(costs: np.ndarray) -> int:
    """The elbow of a cost curve (kneedle on the log cost: furthest below the chord).

    Parameters
    ----------
    costs : ndarray of shape (k_max,)
        ``costs[k - 1]`` for k = 1 .. k_max, non-increasing.

    Returns
    -------
    int
        The chosen k in 1 .. k_max (1 for a flat curve or k_max < 3).
    """
    costs = np.minimum.accumulate(np.asarray(costs, dtype=np.float64))
    k_max = costs.size
    if k_max < 1:
        raise ValueError("costs must hold at least one value")
    if k_max < 3 or not np.all(np.isfinite(costs)) or costs[0] <= 0:
        return 1
    logs = np.log(np.maximum(costs, costs[0] * 1e-12))  # a zero cost (k >= #points)
    span = logs[0] - logs[-1]
    if span <= 0:
        return 1
    x = np.arange(k_max) / (k_max - 1)
    y = (logs - logs[-1]) / span
    return int(np.argmax((1.0 - x) - y)) + 1


def choose_k(
    points: np.ndarray,
    weights: np.ndarray,
    k_max: int,
    *,
    seed: int,
    n_init: int = 10,
    min_weight: float = 0.0,
) -> tuple[int, np.ndarray]:
    """Pick k by the elbow of the weighted k-means cost on the (projected) server data.

    Parameters
    ----------
    points, weights, k_max, seed, n_init, min_weight
        As in :func:`weighted_kmeans_costs`.

    Returns
    -------
    k : int
        The elbow, in 1 .. k_max.
    costs : ndarray of shape (k_max',)
        The curve it was read from (for the result file).
    """
    costs = weighted_kmeans_costs(
        points, weights, k_max, seed=seed, n_init=n_init, min_weight=min_weight
    )
    return elbow_k(costs), costs
