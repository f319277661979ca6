"""k-FED (Dennis, Li, Smith, ICML 2021): one-shot, non-private federated k-means.

Each client runs k-means locally (``kfed-local-k`` clusters, 0 = k) and sends its
local centers; the server clusters the union of all local centers into k clusters
(k-means with 10 restarts, a variant of the paper's farthest-point + Lloyd step).
Local centers are released WITHOUT noise: the run's epsilon is infinite. The stage
is :data:`fedkmeans.stages.kfed.LOCAL_CENTERS`.
"""

from __future__ import annotations

from fedkmeans.algorithms.base import Algorithm, register_algorithm
from fedkmeans.stages.kfed import LOCAL_CENTERS, cluster_local_centers

KFED = register_algorithm(Algorithm(
    "kfed", initialise=cluster_local_centers, init=(LOCAL_CENTERS,), private=False,
    local_k=True,
    summary="k-FED: cluster the union of the clients' local k-means centers (non-private)",
))
