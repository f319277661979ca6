"""FedDP-Init (Scott, Lampert, Saulpic, ICML 2025, arXiv 2506.05408, Alg. 1-2): three stages.

1. :data:`SUBSPACE` (``init-1``): clients send ``sum_p p p^T``; the server releases it
   with symmetric Gaussian noise and keeps the top-k eigenvectors V. Only those whose
   eigenvalue clears the noise's spectral norm are kept; the basis is completed from
   the server's own ``Q^T Q``. With k >= d there is nothing to find: the stage is
   skipped (and planned no budget) and V is the identity.
2. :data:`SERVER_WEIGHTS` (``init-2``): clients histogram their projected points
   against the projected server points V Q; the server releases the histogram with
   Laplace noise (Gaussian under SecAgg) and runs weighted k-means (10 restarts) on
   V Q -> projected centers xi_1..xi_k; with ``k = auto`` it first picks k by the
   elbow of the weighted cost (post-processing, no privacy cost).
3. :data:`PROJECTED_CENTERS` (``init-3``): clients assign points to the nearest xi_r
   in the projected space and send per-cluster sums (original space) and counts; the
   server releases both and sets nu_r = m_r / n_r, falling back to the server's
   weighted estimate of center r where the noisy count is too small.

Sensitivities at data-point level (one point of norm at most Delta; the server's clip
and the resulting bounds are in :mod:`fedkmeans.privacy.budget`):

* ``covariance``: one point moves a client's matrix by ``p p^T``, and
  ``||p p^T||_F = ||p||^2 <= Delta^2``: **Delta^2** in Frobenius norm; Gaussian noise.
* ``histogram``: one point adds 1 to one bin (l1 = l2 = 1 before the server's l1
  clip; 2 and sqrt(2) after it); Laplace noise (Gaussian under SecAgg, whose noise
  shares must add up).
* step 3 sends ``sums`` and ``counts``: :mod:`fedkmeans.stages.lloyds`.
"""

from __future__ import annotations

import math

import numpy as np

from fedkmeans.clustering import (
    eigen_gap,
    merge_centers,
    server_estimate,
    supported_eigenvectors,
    usable_weights,
    weighted_kmeans,
)
from fedkmeans.clustering.distances import squared_distances
from fedkmeans.clustering.elbow import choose_k
from fedkmeans.privacy.registry import GAUSSIAN, LAPLACE
from fedkmeans.stages.context import StageContext
from fedkmeans.stages.lloyds import COUNTS, SUMS, released_centers
from fedkmeans.stages.spec import ReleaseRule, Stage, Statistic, register
from fedkmeans.wire import TRIANGLE

__all__ = ["COVARIANCE", "HISTOGRAM", "PROJECTED_CENTERS", "SERVER_WEIGHTS", "SUBSPACE",
           "initial_centers"]

COVARIANCE = Statistic(
    "covariance", "l2", per_point=lambda privacy: (math.inf, privacy.data_radius**2),
    client_bound=lambda privacy: privacy.clip_covariance, shape=lambda k, d, m: (d, d),
    symmetric=True,
)
HISTOGRAM = Statistic(
    "histogram", "l1_nonnegative", per_point=lambda privacy: (1.0, 1.0),
    client_bound=lambda privacy: privacy.clip_histogram, shape=lambda k, d, m: (m,),
)


def find_subspace(ctx: StageContext, k: int) -> dict[str, np.ndarray]:
    """Step 1: the (k, d) basis V of the noisy second moment's supported eigenvectors.

    Returns ``basis``, ``eigen_gap`` (``lambda_k - lambda_(k+1)`` of the released
    matrix) and ``noise_norm`` (its noise's spectral norm, 0 without noise).
    """

    def compute() -> dict[str, np.ndarray]:
        group = SUBSPACE.group
        replies = ctx.query(SUBSPACE.name, group, {},
                            expected=SUBSPACE.expected(k, ctx.pool.dim))
        second_moment = SUBSPACE.release(ctx, replies, group)["covariance"]
        floor = ctx.eigenvalue_floor(f"{group}/covariance")
        return {"basis": supported_eigenvectors(
                    second_moment, k, floor, ctx.server_x.T @ ctx.server_x),
                "eigen_gap": np.array(eigen_gap(second_moment, k)),
                "noise_norm": np.array(floor)}

    return ctx.round(SUBSPACE.group, compute)


def weigh_server_points(
    ctx: StageContext, basis: np.ndarray, k: int, choose: bool, extra: int = 0
) -> dict:
    """Step 2: projected centers (and the server's estimate of each center).

    Returns ``projected_centers`` (k' + extra, k_dims), ``server_estimate``
    (k' + extra, d) and, when ``choose`` (``k = auto``), ``elbow_costs``; k' is k, or
    the elbow's choice, and ``extra`` spare centers are added
    (``privacy.extra-centers``, merged away after step 3).
    """
    projected_server = ctx.server_x @ basis.T

    def compute() -> dict[str, np.ndarray]:
        group = SERVER_WEIGHTS.group
        replies = ctx.query(
            SERVER_WEIGHTS.name, group,
            {"basis": basis, "projected_server": projected_server},
            expected=SERVER_WEIGHTS.expected(k, ctx.pool.dim, projected_server.shape[0]),
        )
        weights = SERVER_WEIGHTS.release(ctx, replies, group)["histogram"]
        min_weight = ctx.min_server_weight(f"{group}/histogram")
        outputs = {}
        chosen_k = k
        if choose:  # post-processing of released values: no privacy cost
            chosen_k, costs = choose_k(
                projected_server, weights, k, seed=ctx.int_seed(group, "elbow"),
                min_weight=min_weight,
            )
            outputs["elbow_costs"] = costs
        usable = usable_weights(weights, min_weight, chosen_k + extra,
                                warn=ctx.warn_once("step-2 fallback"))
        centers = weighted_kmeans(projected_server, usable, chosen_k + extra,
                                  seed=ctx.int_seed(group, "weighted-kmeans"))
        outputs["projected_centers"] = centers
        outputs["server_estimate"] = server_estimate(
            ctx.server_x, projected_server, centers, usable, basis)
        return outputs

    return ctx.round(SERVER_WEIGHTS.group, compute)


def centers_from_clients(
    ctx, basis: np.ndarray, projected_centers: np.ndarray, fallback: np.ndarray,
    k: int | None = None,
) -> np.ndarray:
    """Step 3: nu_r = m_r / n_r from the clients' sums and counts (``fallback`` if few).

    With spare centers (``k`` below the number of projected centers) the released
    centers are merged into ``k`` by :func:`~fedkmeans.clustering.merge_centers`
    (post-processing: the same releases, no privacy cost).
    """
    total = projected_centers.shape[0]
    k = total if k is None else k

    def compute() -> dict[str, np.ndarray]:
        group = PROJECTED_CENTERS.group
        replies = ctx.query(
            PROJECTED_CENTERS.name, group,
            {"basis": basis, "projected_centers": projected_centers},
            expected=PROJECTED_CENTERS.expected(total, ctx.pool.dim),
        )
        released = PROJECTED_CENTERS.release(ctx, replies, group)
        cells = squared_distances(ctx.server_x @ basis.T, projected_centers).argmin(axis=1)
        centers = released_centers(ctx, group, released, fallback, cells)
        return {"centers": merge_centers(centers, released["counts"], k,
                                         seed=ctx.int_seed(group, "merge"),
                                         warn=ctx.warn_once("spare-centers fallback"))}

    return ctx.round(PROJECTED_CENTERS.group, compute)["centers"]


def initial_centers(ctx: StageContext) -> np.ndarray:
    """FedDP-Init: the three stages; returns the (k, d) initial centers.

    With ``k = auto`` step 1 keeps ``k-max`` eigenvectors, step 2 chooses k
    (recorded with ``ctx.choose_k``) and step 3 and later rounds use it. With e
    spare centers (``privacy.extra-centers``; ``auto``: decided from step 1's release,
    :meth:`~fedkmeans.algorithms.ServerContext.extra_centers`), steps 2 and 3 use
    k + e centers and the released ones are merged into k
    (:func:`centers_from_clients`).
    """
    d, auto = ctx.pool.dim, ctx.config.k_auto
    _, k = ctx.config.largest_k  # k = auto: a k-max dimensional subspace
    if k >= d:  # nothing to find; no noisy projection
        basis, extra = np.eye(d), ctx.extra_centers(k, math.inf, 0.0)
    else:
        step1 = find_subspace(ctx, k)
        basis = step1["basis"]
        extra = ctx.extra_centers(k, float(step1["eigen_gap"]), float(step1["noise_norm"]))
    step2 = weigh_server_points(ctx, basis, k, auto, extra)
    chosen_k = step2["projected_centers"].shape[0] - extra
    if auto:
        ctx.choose_k(chosen_k)
    return centers_from_clients(ctx, basis, step2["projected_centers"],
                                step2["server_estimate"], chosen_k)


SUBSPACE = register(Stage(
    "covariance", "init-1", (COVARIANCE,),
    client=lambda node, clients, a: node.arithmetic.covariance(clients),
    # symmetric: only the upper triangles travel (half the bytes of the largest reply)
    wire=lambda node, clients, a: {
        COVARIANCE.name + TRIANGLE: node.arithmetic.covariance_triangles(clients)["covariance"]},
    server=find_subspace,
    releases=(ReleaseRule(COVARIANCE, lambda p: GAUSSIAN.name, lambda p: p.split[0]),),
    skipped_when_full_rank=True,
))
SERVER_WEIGHTS = register(Stage(
    "histogram", "init-2", (HISTOGRAM,),
    client=lambda node, clients, a: node.arithmetic.histogram(
        clients, a["basis"], a["projected_server"]),
    server=weigh_server_points,
    # SecAgg: every release is a sum of Gaussian noise shares (Laplace does not split)
    releases=(ReleaseRule(
        HISTOGRAM, lambda p: GAUSSIAN.name if p.aggregation == "secagg" else LAPLACE.name,
        lambda p: p.split[1]),),
))
PROJECTED_CENTERS = register(Stage(
    "centers", "init-3", (SUMS, COUNTS),
    client=lambda node, clients, a: node.arithmetic.sums_counts(
        clients, a["projected_centers"], a["basis"]),
    server=centers_from_clients,
    releases=(
        ReleaseRule(SUMS, lambda p: GAUSSIAN.name, lambda p: p.split[2]),
        ReleaseRule(COUNTS, lambda p: p.count_mechanism, lambda p: p.split[3]),
    ),
))
