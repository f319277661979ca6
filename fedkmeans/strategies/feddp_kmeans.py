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

Noise-aware post-processing (no privacy cost): step 1 keeps only eigenvectors whose
eigenvalue clears the noise's spectral norm and completes the basis from the server's
own ``Q^T Q``; with k >= d there is no subspace to find, so step 1 is skipped (and
planned no budget) and V is the identity. Thresholds ``auto`` follow the noise scale
(:mod:`fedkmeans.tuning.thresholds`).

With ``k = auto`` step 1 keeps ``k-max`` eigenvectors and step 2 picks k by the elbow
of the weighted k-means cost on the noisy-weighted projected server data
(:func:`fedkmeans.clustering.elbow.choose_k`: post-processing, no extra privacy cost);
step 3 and the Lloyds steps then use the chosen k.
"""

from __future__ import annotations

import numpy as np

from fedkmeans.clustering import (
    centers_from_sums,
    server_estimate,
    supported_eigenvectors,
    usable_weights,
    weighted_kmeans,
)
from fedkmeans.clustering.elbow import choose_k
from fedkmeans.strategies.base import ServerContext, Strategy


class FedDPKMeans(Strategy):
    """FedDP-Init (three private rounds) followed by FedDP-Lloyds."""

    name = "feddp-kmeans"

    def initial_centers(self, ctx: ServerContext) -> np.ndarray:
        """Run FedDP-Init; return the (k, d) initial centers."""
        d, auto = ctx.pool.dim, ctx.config.k_auto
        _, k = ctx.config.largest_k  # k = auto: a k-max dimensional subspace

        def subspace() -> dict[str, np.ndarray]:
            replies = ctx.query("covariance", "init-1", {}, expected={"covariance": (d, d)})
            second_moment = ctx.release(
                replies, "covariance", "init-1/covariance", symmetric=True
            )
            floor = ctx.eigenvalue_floor("init-1/covariance")
            return {"basis": supported_eigenvectors(
                second_moment, k, floor, ctx.server_x.T @ ctx.server_x)}

        if k >= d:  # the top-k subspace is the whole space: nothing to release
            basis = np.eye(d)
        else:
            basis = ctx.round("init-1", subspace)["basis"]
        projected_server = ctx.server_x @ basis.T

        def server_point_weights() -> dict[str, np.ndarray]:
            replies = ctx.query(
                "histogram", "init-2",
                {"basis": basis, "projected_server": projected_server},
                expected={"histogram": (projected_server.shape[0],)},
            )
            weights = ctx.release(replies, "histogram", "init-2/histogram")
            min_weight = ctx.min_server_weight("init-2/histogram")
            outputs = {}
            chosen_k = k
            if auto:  # post-processing of released values: no privacy cost
                chosen_k, costs = choose_k(
                    projected_server, weights, k, seed=ctx.int_seed("init-2", "elbow"),
                    min_weight=min_weight,
                )
                outputs["elbow_costs"] = costs
            usable = usable_weights(weights, min_weight, chosen_k)
            centers = weighted_kmeans(
                projected_server, usable, chosen_k,
                seed=ctx.int_seed("init-2", "weighted-kmeans"),
            )
            outputs["projected_centers"] = centers
            outputs["server_estimate"] = server_estimate(
                ctx.server_x, projected_server, centers, usable, basis
            )
            return outputs

        step2 = ctx.round("init-2", server_point_weights)
        projected_centers = step2["projected_centers"]
        fallback = step2.get("server_estimate", projected_centers @ basis)
        if auto:  # step 3, the Lloyds steps and the evaluation use the chosen k
            k = projected_centers.shape[0]
            ctx.choose_k(k)

        def centers() -> dict[str, np.ndarray]:
            replies = ctx.query(
                "centers", "init-3",
                {"basis": basis, "projected_centers": projected_centers},
                expected={"sums": (k, d), "counts": (k,)},
            )
            sums = ctx.release(replies, "sums", "init-3/sums")
            counts = ctx.release(replies, "counts", "init-3/counts")
            new_centers, _ = centers_from_sums(
                sums, counts, fallback=fallback,
                min_count=ctx.min_cluster_count("init-3", fallback),
            )
            return {"centers": new_centers}

        return ctx.round("init-3", centers)["centers"]
