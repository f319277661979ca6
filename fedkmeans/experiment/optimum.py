"""NON-PRIVATE reference cost: centralized k-means on the pooled data (experiments only).

Computed from every client's data when the server can load it (a simulation), NOT
covered by the privacy guarantee; cached on disk because it depends on neither the
algorithm nor epsilon (``optimal-restarts``, ``optimal-cost``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from fedkmeans.clustering import optimal
from fedkmeans.data.catalog import dataset
from fedkmeans.experiment.config import ExperimentConfig

LOG = logging.getLogger(__name__)


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
