"""FedDP-Lloyds and the baselines that initialise without client data.

FedDP-Lloyds step t (Scott et al. 2025, Alg. 3; the stage is
:mod:`fedkmeans.stages.lloyds`): clients assign their points to the
nearest current center in the full space and send per-cluster sums and counts; the
server releases noisy sums m_r and counts n_r (one cohort, one accounted mechanism)
and sets nu_r = m_r / n_r, keeping the previous center where n_r < min-cluster-count.

Baselines (all followed by T FedDP-Lloyds steps):

* ServerKMeans++: one k-means++ draw on the server data Q;
* ServerLloyds: k-means (10 restarts) on Q;
* SpherePacking: data-independent centers spread over the public box of Q;
* lloyds-nonprivate: ServerKMeans++ then T Lloyd steps without noise or clipping.
"""

from __future__ import annotations

import numpy as np

from fedkmeans.algorithms.base import Algorithm, register_algorithm
from fedkmeans.clustering import kmeans_plus_plus, sphere_packing_centers
from fedkmeans.server.context import ServerContext
from fedkmeans.stages.check import server_only_centers


def kmeans_plus_plus_on_q(ctx: ServerContext) -> np.ndarray:
    """One seeded k-means++ draw on the server data Q."""
    return kmeans_plus_plus(ctx.server_x, ctx.k, seed=ctx.int_seed("init", "kmeans++"))


def kmeans_on_q(ctx: ServerContext) -> np.ndarray:
    """Best of 10 k-means runs on Q (also the final private choice's alternative)."""
    return server_only_centers(ctx.server_x, ctx.k, ctx.int_seed("init", "server-lloyds"))


def sphere_packing(ctx: ServerContext) -> np.ndarray:
    """Centers spread over the coordinate-wise box of Q (public domain bounds)."""
    lower, upper = ctx.server_x.min(axis=0), ctx.server_x.max(axis=0)
    return sphere_packing_centers(ctx.k, lower, upper, ctx.rng("init", "sphere-packing"))


SERVER_LLOYDS = register_algorithm(Algorithm(
    "server-lloyds", initialise=kmeans_on_q,
    summary="k-means with 10 restarts on the server data only, then FedDP-Lloyds"))
SERVER_KMEANS_PLUS_PLUS = register_algorithm(Algorithm(
    "server-kmeans++", initialise=kmeans_plus_plus_on_q,
    summary="k-means++ seeding on the server data only, then FedDP-Lloyds"))
SPHERE_PACKING = register_algorithm(Algorithm(
    "sphere-packing", initialise=sphere_packing,
    summary="data-independent centers in the public bounding box, then FedDP-Lloyds"))
NON_PRIVATE_LLOYDS = register_algorithm(Algorithm(
    "lloyds-nonprivate", initialise=kmeans_plus_plus_on_q, private=False,
    summary="FedLloyds without privacy: k-means++ on Q, then T exact Lloyd steps"))
