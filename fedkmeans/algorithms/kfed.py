"""k-FED (Dennis, Li, Smith, ICML 2021): one-shot, non-private federated k-means.

Each client runs k-means locally (``kfed-local-k`` clusters, 0 = k) and sends its
local centers; the server clusters the union of all local centers into k clusters
(k-means with 10 restarts, a variant of the paper's farthest-point + Lloyd step).
Local centers are released WITHOUT noise: the run's epsilon is infinite. The stage
is :data:`fedkmeans.stages.kfed.LOCAL_CENTERS`.
"""

from __future__ import annotations

import numpy as np

from fedkmeans.server.context import ServerContext, Strategy
from fedkmeans.stages.kfed import cluster_local_centers


class KFed(Strategy):
    """k-FED: cluster the union of the clients' local k-means centers."""

    name = "kfed"

    def initial_centers(self, ctx: ServerContext) -> np.ndarray:
        """One round of local k-means (:mod:`fedkmeans.stages.kfed`), then k-means."""
        return cluster_local_centers(ctx)
