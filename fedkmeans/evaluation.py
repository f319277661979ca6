"""NON-PRIVATE evaluation of the final centers.

Everything here is computed from client data and is NOT covered by the privacy
guarantee: it exists to measure utility in experiments. The cost and the label
contingency table come from a federated evaluation round (each node sums over its
clients). The reference (optimal) cost is the harness's
(:mod:`fedkmeans.experiment.optimum`).
"""

from __future__ import annotations

import logging

import numpy as np

from fedkmeans import metrics
from fedkmeans.server.pool import ClientPool

LOG = logging.getLogger(__name__)

NOTE = (
    "non-private evaluation: computed on the clients' training data, not covered by "
    "the privacy guarantee"
)


def federated_metrics(pool: ClientPool, centers: np.ndarray) -> dict:
    """Cost per point and, where labels exist, accuracy, ARI, NMI and FMI.

    Returns
    -------
    dict
        ``cost`` (mean squared distance to the nearest center), ``num_points``,
        ``clipped_points`` (points the nodes clipped to the data radius) and
        ``accuracy`` (Hungarian-matched), ``ari``, ``nmi``, ``fmi`` (Fowlkes–Mallows)
        or None without labels.
    """
    replies = pool.query_nodes("evaluate", {"centers": centers})
    cost_sum = sum(float(r["cost_sum"][0]) for r in replies)
    n_points = sum(float(r["num_points"][0]) for r in replies)
    tables: dict[int, np.ndarray] = {}
    for r in replies:
        for value, row in zip(r.get("label_values", []), r.get("table", []), strict=True):
            tables[int(value)] = tables.get(int(value), 0) + row
    out = {"cost": cost_sum / n_points, "num_points": int(n_points),
           "clipped_points": int(sum(float(r["clipped_points"][0]) for r in replies
                                     if "clipped_points" in r))}
    if tables:
        table = np.stack([tables[v] for v in sorted(tables)])
        out.update(
            accuracy=metrics.hungarian_accuracy(table),
            ari=metrics.adjusted_rand_index(table),
            nmi=metrics.normalized_mutual_info(table),
            fmi=metrics.fowlkes_mallows_index(table),
        )
    else:
        out.update(accuracy=None, ari=None, nmi=None, fmi=None)
    return out
