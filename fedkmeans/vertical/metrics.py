"""Clustering quality against class labels (non-private evaluation).

:func:`f_measure` is the clustering F-measure used in the vertical-clustering
literature: for every class, the best harmonic mean of precision and recall over the
clusters, weighted by the class size. ARI comes from
:func:`fedkmeans.metrics.adjusted_rand_index`. Both take a contingency table, so the
label holder can compute the table locally.
"""

from __future__ import annotations

import numpy as np

from fedkmeans.metrics import adjusted_rand_index, contingency

__all__ = ["adjusted_rand_index", "contingency", "f_measure"]


def f_measure(table: np.ndarray) -> float:
    """Class-size-weighted best F1 of each class over the clusters.

    ``F = sum_c (n_c / n) max_j 2 P_cj R_cj / (P_cj + R_cj)`` with precision
    ``P_cj = n_cj / n_j`` and recall ``R_cj = n_cj / n_c``.

    Parameters
    ----------
    table : array_like of int, shape (n_classes, n_clusters)
        ``table[c, j]`` = samples of class c in cluster j.

    Returns
    -------
    float
        In [0, 1]; 1 iff every class is exactly one cluster.
    """
    t = np.asarray(table, dtype=np.float64)
    if t.ndim != 2 or np.any(t < 0) or t.sum() <= 0:
        raise ValueError("table must be a 2-D contingency table with a positive total")
    class_sizes = t.sum(axis=1, keepdims=True)
    cluster_sizes = t.sum(axis=0, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        # 2PR/(P+R) = 2 n_cj / (n_c + n_j)
        f1 = np.where(t > 0, 2.0 * t / (class_sizes + cluster_sizes), 0.0)
    return float((class_sizes[:, 0] / t.sum() * f1.max(axis=1)).sum())
