"""FedDP-KMeans: FedDP-Init's three private rounds, then FedDP-Lloyds.

Scott, Lampert, Saulpic, "Differentially Private Federated k-Means Clustering with
Server-Side Data", ICML 2025 (arXiv 2506.05408), Algorithms 1-2:

1. Clients send sum_p p p^T; the server releases it with symmetric Gaussian noise
   and keeps the top-k eigenvectors V (projection Pi = V^T V).
2. Clients histogram their projected points against the projected server points
   Pi Q; the server releases the histogram with Laplace noise and runs weighted
   k-means (10 restarts) on Pi Q -> projected centers xi_1..xi_k.
3. Clients assign points to the nearest xi_r in the projected space and send
   per-cluster sums (original space) and counts; the server releases both and sets
   nu_r = m_r / n_r (falling back to the server's estimate of center r, the
   weighted mean of its server points, where the noisy count is too small).

Each stage (client statistic, release, server step) is in
:mod:`fedkmeans.stages.feddp_init`; this algorithm runs them in order.

Noise-aware post-processing (no privacy cost): step 1 keeps only eigenvectors whose
eigenvalue clears the noise's spectral norm and completes the basis from the server's
own ``Q^T Q``; with k >= d there is no subspace to find, so step 1 is skipped (and
planned no budget) and V is the identity. Thresholds ``auto`` follow the noise scale
(:mod:`fedkmeans.server.thresholds`).

With ``k = auto`` step 1 keeps ``k-max`` eigenvectors and step 2 picks k by the elbow
of the weighted k-means cost on the noisy-weighted projected server data
(:func:`fedkmeans.clustering.elbow.choose_k`: post-processing, no extra privacy cost);
step 3 and the Lloyds steps then use the chosen k.
"""

from __future__ import annotations

import numpy as np

from fedkmeans.algorithms.base import Algorithm, register_algorithm
from fedkmeans.stages import feddp_init
from fedkmeans.stages.context import StageContext


def initial_centers(ctx: StageContext) -> np.ndarray:
    """Run FedDP-Init (:func:`fedkmeans.stages.feddp_init.initial_centers`)."""
    return feddp_init.initial_centers(ctx)


FEDDP_KMEANS = register_algorithm(Algorithm(
    "feddp-kmeans",
    initialise=initial_centers,
    init=(feddp_init.SUBSPACE, feddp_init.SERVER_WEIGHTS, feddp_init.PROJECTED_CENTERS),
    chooses_k=True, final_choice=True, tunable_split=True, spare_centers=True,
    summary="FedDP-Init (three private rounds) followed by FedDP-Lloyds",
))
