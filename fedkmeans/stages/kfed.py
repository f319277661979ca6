"""k-FED (Dennis, Li, Smith, ICML 2021): one non-private stage.

Each client runs k-means locally (``kfed-local-k`` clusters, 0 = k) and sends its
local centers; the server clusters the union of all local centers into k clusters
(k-means with 10 restarts, a variant of the paper's farthest-point + Lloyd step).
Local centers are released WITHOUT noise: the stage plans no release and the run's
epsilon is infinite.
"""

from __future__ import annotations

import math

import numpy as np

from fedkmeans.clustering import kmeans
from fedkmeans.stages.context import StageContext
from fedkmeans.stages.spec import Stage, Statistic, register

__all__ = ["LOCAL_CENTERS", "cluster_local_centers"]

LOCAL_CENTERS_STATISTIC = Statistic(
    "centers", "l2", per_point=lambda privacy: (math.inf, math.inf),
    client_bound=lambda privacy: math.inf, shape=lambda k, d, m: (k, d),
)


def cluster_local_centers(ctx: StageContext) -> np.ndarray:
    """Every client's local centers (no noise), then k-means on their union: (k, d)."""
    local_k = ctx.config.kfed_local_k or ctx.k
    group = LOCAL_CENTERS.group

    def compute() -> dict[str, np.ndarray]:
        replies = ctx.pool.query(
            LOCAL_CENTERS.name, ctx.pool.client_ids, {},
            expected=LOCAL_CENTERS.expected(local_k, ctx.pool.dim),
            config={"local_k": local_k}, round_name=group,
        )
        ctx.non_private.append(f"{group}/local-centers")
        union = replies.stats["centers"].reshape(-1, ctx.pool.dim)
        return {"centers": kmeans(union, ctx.k, seed=ctx.int_seed(group, "server-kmeans"))}

    return ctx.round(group, compute)["centers"]


LOCAL_CENTERS = register(Stage(
    "local_centers", "kfed", (LOCAL_CENTERS_STATISTIC,),
    client=lambda node, clients, a: node.arithmetic.local_centers(clients, int(a["local_k"])),
    server=cluster_local_centers,
))
