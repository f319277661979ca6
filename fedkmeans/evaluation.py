"""NON-PRIVATE evaluation of the final centers.

Everything here is computed from client data and is NOT covered by the privacy
guarantee: it exists to measure utility in experiments. The cost and the label
contingency table come from a federated evaluation round (each node sums over its
clients); the optimal cost comes from centralized k-means on the pooled data when
the server can load it (simulation), cached on disk because it does not depend on
the algorithm or epsilon.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np

from fedkmeans import metrics
from fedkmeans.clustering import optimal
from fedkmeans.config import ExperimentConfig
from fedkmeans.data.catalog import dataset
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


def _cache_dir() -> Path:
    return Path(os.environ.get("FEDKMEANS_CACHE_DIR", Path.home() / ".cache" / "fedkmeans"))


def _cache_key(config: ExperimentConfig) -> str:
    ident = dataset(config.data.name).identity(config)
    ident.update(k=config.k, restarts=config.optimal_restarts, version=1)
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]


def optimal_cost(config: ExperimentConfig) -> float | None:
    """Cost per point of centralized non-private k-means (>= 10 restarts) on pooled data.

    Returns None when the server cannot load the pooled data (deployment), or with
    ``optimal-cost = skip`` (scale benchmarks, where k-means on millions of pooled
    points would dominate the run).
    """
    if config.optimal_cost == "skip":
        return None
    path = _cache_dir() / "optimal-cost" / f"{_cache_key(config)}.json"
    if path.exists():
        return float(json.loads(path.read_text())["optimal_cost"])
    x, owned = dataset(config.data.name).pooled_points(config)
    if x is None:
        return None
    # an array built here is centered in place by scikit-learn (no copy of the data)
    cost, _ = optimal.optimal_cost(
        x, config.k, seed=config.seed, n_init=config.optimal_restarts, overwrite_x=owned
    )
    del x
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"optimal_cost": cost}))
    except OSError as exc:  # a read-only cache only costs time
        LOG.warning("could not cache the optimal cost: %s", exc)
    return float(cost)
