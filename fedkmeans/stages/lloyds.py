"""FedDP-Lloyds (Scott et al. 2025, Alg. 3): one stage, and the statistics it sends.

Clients assign their points to the nearest current center in the full space and send
per-cluster sums (k, d) and counts (k,); the server releases noisy sums m_r and counts
n_r (one cohort, one accounted group) and sets nu_r = m_r / n_r, keeping the previous
center where n_r is below ``min-cluster-count``. FedDP-Init's step 3
(:mod:`fedkmeans.stages.feddp_init`) sends the same two statistics.

Sensitivities at data-point level (one point of norm at most Delta; the server's clip
of one client's value and the resulting bound are in :mod:`fedkmeans.privacy.budget`):

* ``sums``: one point adds itself to one cluster's sum, a change of at most **Delta**
  in l2 (Frobenius of the (k, d) matrix); Gaussian noise.
* ``counts``: one point adds 1 to one cluster's count (l1 = l2 = 1); Gaussian noise
  (``privacy.count-noise``; ``auto`` is Gaussian at data-point level).

The server clips a client's sums and counts **jointly** (``joint="clusters"``): one
factor per client, the Euclidean projection of ``(S / sigma_s, c / sigma_c)`` onto a
ball, so a client above ``max-points-per-client`` is down-weighted without moving its
means, and the pair's sensitivity stays ``(Delta, 1)`` in the noise's metric
(derivation: :mod:`fedkmeans.privacy.budget`, "Joint statistics").

At client level a client scales its sums and counts by one factor so both are within
``clip-sums`` (l2) and ``clip-counts`` (l1)
(:meth:`fedkmeans.node.arithmetic.StageArithmetic.sums_counts`).
"""

from __future__ import annotations

import math

import numpy as np

from fedkmeans.clustering import centers_from_sums
from fedkmeans.clustering.distances import squared_distances
from fedkmeans.clustering.pooling import pool_with_server
from fedkmeans.config import AUTO
from fedkmeans.privacy.registry import GAUSSIAN, mechanism
from fedkmeans.stages.context import StageContext
from fedkmeans.stages.spec import ReleaseRule, Stage, Statistic, register

__all__ = ["COUNTS", "LLOYDS", "SUMS", "lloyds_step", "released_centers"]

SUMS = Statistic(
    "sums", "l2", per_point=lambda privacy: (math.inf, privacy.data_radius),
    client_bound=lambda privacy: privacy.clip_sums, shape=lambda k, d, m: (k, d),
    joint="clusters",
)
COUNTS = Statistic(
    "counts", "l1_nonnegative", per_point=lambda privacy: (1.0, 1.0),
    client_bound=lambda privacy: privacy.clip_counts, shape=lambda k, d, m: (k,),
    joint="clusters",
)


def released_centers(
    ctx: StageContext, group: str, released: dict, fallback: np.ndarray,
    server_cells: np.ndarray,
) -> np.ndarray:
    """``nu_r = m_r / n_r`` of a round's released sums and counts, pooled with Q.

    Clusters whose noisy count is below ``min-cluster-count`` keep ``fallback``
    (:func:`~fedkmeans.clustering.centers_from_sums`); the others are pooled with the
    server's mean of their cell (``server_cells``, Q's cell in the partition the round
    sent) by :func:`~fedkmeans.clustering.pooling.pool_with_server`, weighted by the
    round's public noise standard deviations, and with the server's estimate of the
    shift the clients' clip to the data radius gave the cell's mean. Post-processing;
    unchanged without noise.
    """
    centers, used_fallback = centers_from_sums(
        released["sums"], released["counts"], fallback=fallback,
        min_count=ctx.min_cluster_count(group, fallback),
    )
    sums, counts = ctx.releases.get(f"{group}/sums"), ctx.releases.get(f"{group}/counts")
    radius = ctx.config.privacy.data_radius  # the clients' clip; resolved before this round
    if sums is None or counts is None or not ctx.config.is_private:
        return centers
    return pool_with_server(
        centers, released["counts"], ctx.server_x, server_cells,
        mechanism(sums.mechanism).std(sums.noise_scale),
        mechanism(counts.mechanism).std(counts.noise_scale), ~used_fallback,
        math.inf if radius == AUTO else float(radius))


def lloyds_step(ctx: StageContext, centers: np.ndarray, step: int) -> np.ndarray:
    """One FedDP-Lloyds step from ``centers`` (k, d); returns the new (k, d) centers.

    Parameters
    ----------
    ctx : StageContext
    centers : ndarray of shape (k, d)
    step : int
        1-based; the round is ``lloyds-<step>``.
    """
    group = f"{LLOYDS.group}-{step}"

    def compute() -> dict[str, np.ndarray]:
        replies = ctx.query(LLOYDS.name, group, {"centers": centers},
                            expected=LLOYDS.expected(ctx.k, ctx.pool.dim))
        released = LLOYDS.release(ctx, replies, group)
        cells = squared_distances(ctx.server_x, centers).argmin(axis=1)
        return {"centers": released_centers(ctx, group, released, centers, cells)}

    return ctx.round(group, compute)["centers"]


LLOYDS = register(Stage(
    "lloyds", "lloyds", (SUMS, COUNTS),
    client=lambda node, clients, a: node.arithmetic.sums_counts(clients, a["centers"]),
    server=lloyds_step,
    releases=(
        ReleaseRule(SUMS, lambda p: GAUSSIAN.name, lambda p: p.lloyds_split[0]),
        ReleaseRule(COUNTS, lambda p: p.count_mechanism, lambda p: p.lloyds_split[1]),
    ),
))
