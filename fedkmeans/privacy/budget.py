"""Sensitivities, clipping bounds and the budget plan of every release.

Neighbouring datasets differ by adding or removing one privacy unit: one data point
(``privacy.level = datapoint``) or one client with all its points (``client``).

Sensitivities (derivations):

* ``covariance`` = sum_p p p^T (FedDP-Init step 1). Data-point level: every point is
  clipped to ||p|| <= Delta, and ||p p^T||_F = ||p||^2 <= Delta^2, so adding or
  removing a point moves the sum by at most **Delta^2** in Frobenius norm (the
  reference code uses Delta: FACTS.md Bug 1). Client level: each client's matrix
  is clipped to Frobenius norm C_cov, so the sensitivity is C_cov.
* ``histogram`` (step 2): one point adds 1 to exactly one bin, l1 sensitivity **1**;
  client level: each client's histogram is clipped to l1 norm C_hist.
* ``sums`` (step 3, Lloyds): one point adds itself to one cluster's sum, so the
  Frobenius (l2) sensitivity of the k x d sums is **Delta**; client level C_sums.
* ``counts``: one point adds 1 to one count: l1 and l2 sensitivity **1**; client
  level C_counts (l1), which also bounds the l2 norm used when counts get Gaussian
  noise (||x||_2 <= ||x||_1).

The server re-clips every client's reply (it never trusts a client's clipping). At
client level it uses the same bounds. At data-point level the guarantee rests on the
client clipping its points; the server cannot see points and bounds each client's
total influence by ``max_points_per_client`` points' worth (robustness against
malicious clients, not privacy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedkmeans.config import NON_PRIVATE_ALGORITHMS, PrivacyConfig
from fedkmeans.privacy.calibration import PlannedRelease

STATISTICS = ("covariance", "histogram", "sums", "counts")


@dataclass(frozen=True)
class StatisticBound:
    """How one statistic is clipped and how much one privacy unit can move its sum.

    Attributes
    ----------
    norm : {"l2", "l1_nonnegative"}
        Norm of the per-client clip (l2 = Frobenius for matrices).
    client_bound : float
        Bound each client applies to its own statistic (inf: none at data-point level).
    server_bound : float
        Bound the server re-applies to every client's reply.
    sensitivity : float
        Sensitivity of the sum over clients (l2 for Gaussian, l1 for Laplace releases).
    """

    norm: str
    client_bound: float
    server_bound: float
    sensitivity: float


def statistic_bounds(privacy: PrivacyConfig) -> dict[str, StatisticBound]:
    """Clipping bounds and sensitivities of the four released statistics."""
    radius, n_max = privacy.data_radius, privacy.max_points_per_client
    if privacy.level == "datapoint":
        per_unit = {
            "covariance": radius**2,
            "histogram": 1.0,
            "sums": radius,
            "counts": 1.0,
        }
        return {
            name: StatisticBound(
                norm=_NORMS[name],
                client_bound=math.inf,
                server_bound=n_max * per_unit[name],
                sensitivity=per_unit[name],
            )
            for name in STATISTICS
        }
    per_client = {
        "covariance": privacy.clip_covariance,
        "histogram": privacy.clip_histogram,
        "sums": privacy.clip_sums,
        "counts": privacy.clip_counts,
    }
    return {
        name: StatisticBound(_NORMS[name], bound, bound, bound)
        for name, bound in per_client.items()
    }


_NORMS = {
    "covariance": "l2",
    "histogram": "l1_nonnegative",
    "sums": "l2",
    "counts": "l1_nonnegative",
}

#: Algorithms whose initialisation runs FedDP-Init's three private rounds.
PRIVATE_INIT = ("feddp-kmeans",)


def release_plan(algorithm: str, privacy: PrivacyConfig) -> list[PlannedRelease]:
    """Every noisy release an algorithm will make, with its share of the budget.

    FedDP-KMeans: step 1 (covariance, Gaussian), step 2 (histogram, Laplace; Gaussian
    with ``privacy.aggregation = secagg``), step 3
    (sums Gaussian + counts, one cohort, one group), then T FedDP-Lloyds groups.
    The server-data baselines release only the T Lloyds groups. Weights come from
    ``privacy.split`` and ``privacy.lloyds-split`` and are normalised by the
    calibration over the releases that happen.

    Returns
    -------
    list of PlannedRelease
        Empty for the non-private algorithms (and for baselines with T = 0).
    """
    if algorithm in NON_PRIVATE_ALGORITHMS:
        return []
    bounds = statistic_bounds(privacy)
    q = privacy.sampling_rate
    counts_mechanism = privacy.count_noise
    # Secure aggregation: every release is a sum of Gaussian noise shares (Laplace does
    # not split into shares); the l2 sensitivity of a histogram is at most its l1 one.
    histogram_mechanism = "gaussian" if privacy.aggregation == "secagg" else "laplace"
    plan: list[PlannedRelease] = []
    if algorithm in PRIVATE_INIT:
        w1, w2, w3s, w3c = privacy.split
        plan += [
            PlannedRelease("init-1/covariance", "gaussian", bounds["covariance"].sensitivity,
                           w1, q, "init-1"),
            PlannedRelease("init-2/histogram", histogram_mechanism,
                           bounds["histogram"].sensitivity, w2, q, "init-2"),
            PlannedRelease("init-3/sums", "gaussian", bounds["sums"].sensitivity,
                           w3s, q, "init-3"),
            PlannedRelease("init-3/counts", counts_mechanism, bounds["counts"].sensitivity,
                           w3c, q, "init-3"),
        ]
    wls, wlc = privacy.lloyds_split
    for step in range(1, privacy.lloyds_steps + 1):
        group = f"lloyds-{step}"
        plan += [
            PlannedRelease(f"{group}/sums", "gaussian", bounds["sums"].sensitivity,
                           wls, q, group),
            PlannedRelease(f"{group}/counts", counts_mechanism, bounds["counts"].sensitivity,
                           wlc, q, group),
        ]
    return plan
