"""Sensitivities, clipping bounds and the budget plan of every release.

Neighbouring datasets differ by adding or removing one privacy unit: one data point
(``privacy.level = datapoint``) or one client with all its points (``client``). A
sensitivity here is a bound on how far the *server's* clipped sum moves between any
two neighbours, for every input: clients at or above ``max-points-per-client``,
clients that change size, and clients that skip their own clipping (the server
re-clips every reply; it never trusts a client's clipping of its statistic).

Data-point level (clients clip every point to ``||p|| <= Delta``; the server re-clips
each client's statistic to ``n_max`` points' worth, ``n_max = max-points-per-client``):

* ``covariance`` = sum_p p p^T (FedDP-Init step 1). One point moves a client's matrix
  by ``p p^T``, ``||p p^T||_F = ||p||^2 <= Delta^2``. The server's clip is the radial
  Frobenius clip ``x -> x min(1, B / ||x||_F)`` with ``B = n_max Delta^2``: the
  Euclidean projection onto a convex ball, hence 1-Lipschitz in Frobenius norm, so the
  clipped sum moves by at most **Delta^2** whatever the client's size (the reference
  implementation calibrates to Delta, which under-noises).
* ``sums`` (step 3, Lloyds): one point adds itself to one cluster's sum; the radial
  Frobenius clip to ``n_max Delta`` is again a projection: **Delta** in l2.
* ``histogram`` (step 2) and ``counts``: one point adds 1 to one bin, but the
  server's clip is the radial l1 clip ``h -> h min(1, B / ||h||_1)``, ``B = n_max``,
  which is **not** 1-Lipschitz in l1. For ``h >= 0`` with ``s = ||h||_1 >= B`` and
  ``h' = h + e_j``::

      clip(h') - clip(h) = B (s e_j - h) / (s (s + 1)),
      ||s e_j - h||_1 = 2 (s - h_j) <= 2 s,
      ||s e_j - h||_2^2 = (s - h_j)^2 + sum_{i != j} h_i^2 <= 2 (s - h_j)^2 <= 2 s^2,

  so the change is at most ``2 B / (s + 1) < 2`` in l1 and ``sqrt(2) B / (s + 1) <
  sqrt(2)`` in l2 (a client at the cap of 1000 points: 1.998 and 1.413). When
  ``s < B <= s + 1`` the change is ``e_j - t (h + e_j)`` with ``0 < t (s + 1) < 1``:
  below 2 in l1 and ``sqrt(2)`` in l2; below the cap it is ``e_j``. Hence the l1
  sensitivity is **2** (Laplace releases) and the l2 sensitivity **sqrt(2)**
  (Gaussian counts, Gaussian histogram under SecAgg). No clip can do better: any map
  that is the identity inside the l1 ball and lands in it must send a histogram
  ``g`` with ``||g||_1 = B + 1`` to ``g - v`` with ``v >= 0``, ``||v||_1 >= 1``,
  and ``g``'s neighbours ``g - e_i`` (inside the ball) are then
  ``||e_i - v||_1 = 2 (1 - v_i)`` away, which approaches 2 when ``g`` has many bins.

Client level (each client clips its own statistic to ``C``; the server re-clips to the
same ``C``): adding or removing a client adds or removes one clipped statistic, whose
norm is at most ``C`` in the clip's norm, so the sensitivity is **C**. For counts and
histograms the clip is in l1, and ``||x||_2 <= ||x||_1`` makes ``C`` the l2
sensitivity too (Gaussian counts).

:func:`fedkmeans.attacks.release_audit` measures these through the server's real
clipping, summation, calibration and mechanism.
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
    l1_sensitivity, l2_sensitivity : float
        How far one privacy unit moves the server's clipped sum, in l1 (Laplace
        releases) and in l2 (Gaussian releases); the derivations are in the module
        docstring. ``l1_sensitivity`` is ``inf`` for statistics never released with
        Laplace noise.
    """

    norm: str
    client_bound: float
    server_bound: float
    l1_sensitivity: float
    l2_sensitivity: float

    def sensitivity(self, mechanism: str) -> float:
        """The sensitivity a release of this statistic with ``mechanism`` must use."""
        return self.l1_sensitivity if mechanism == "laplace" else self.l2_sensitivity


#: Data-point level: (l1, l2) change of one client's statistic when one point is added,
#: before the server's clip, as a function of Delta.
_PER_POINT = {
    "covariance": lambda radius: (math.inf, radius**2),
    "histogram": lambda radius: (1.0, 1.0),
    "sums": lambda radius: (math.inf, radius),
    "counts": lambda radius: (1.0, 1.0),
}
#: Lipschitz constant (l1, l2) of the server's clip in the norm of each release: the
#: radial l2 clip is a projection (1); the radial l1 clip is 2 in l1 and sqrt(2) in l2.
_CLIP_LIPSCHITZ = {"l2": (1.0, 1.0), "l1_nonnegative": (2.0, math.sqrt(2.0))}


def statistic_bounds(privacy: PrivacyConfig) -> dict[str, StatisticBound]:
    """Clipping bounds and true sensitivities of the four released statistics."""
    radius, n_max = privacy.data_radius, privacy.max_points_per_client
    if privacy.level == "datapoint":
        out = {}
        for name in STATISTICS:
            norm = _NORMS[name]
            l1, l2 = _PER_POINT[name](radius)
            lip1, lip2 = _CLIP_LIPSCHITZ[norm]
            per_client = l2 if norm == "l2" else l1
            out[name] = StatisticBound(
                norm=norm, client_bound=math.inf, server_bound=n_max * per_client,
                l1_sensitivity=lip1 * l1, l2_sensitivity=lip2 * l2,
            )
        return out
    per_client = {
        "covariance": privacy.clip_covariance,
        "histogram": privacy.clip_histogram,
        "sums": privacy.clip_sums,
        "counts": privacy.clip_counts,
    }
    return {
        name: StatisticBound(
            _NORMS[name], bound, bound,
            l1_sensitivity=bound if _NORMS[name] == "l1_nonnegative" else math.inf,
            l2_sensitivity=bound,
        )
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


def release_plan(
    algorithm: str, privacy: PrivacyConfig, *, subspace: bool = True
) -> list[PlannedRelease]:
    """Every noisy release an algorithm will make, with its share of the budget.

    FedDP-KMeans: step 1 (covariance, Gaussian), step 2 (histogram, Laplace; Gaussian
    with ``privacy.aggregation = secagg``), step 3
    (sums Gaussian + counts, one cohort, one group), then T FedDP-Lloyds groups.
    The server-data baselines release only the T Lloyds groups. Weights come from
    ``privacy.split`` and ``privacy.lloyds-split`` and are normalised by the
    calibration over the releases that happen. ``subspace = False`` (k >= d: the
    top-k subspace is the whole space) drops step 1, whose budget then goes to the
    other releases.

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
    # not split into shares), calibrated to the histogram's l2 sensitivity.
    histogram_mechanism = "gaussian" if privacy.aggregation == "secagg" else "laplace"
    plan: list[PlannedRelease] = []
    if algorithm in PRIVATE_INIT:
        w1, w2, w3s, w3c = privacy.split
        if subspace:
            plan.append(PlannedRelease(
                "init-1/covariance", "gaussian", bounds["covariance"].sensitivity("gaussian"),
                w1, q, "init-1"))
        plan += [
            PlannedRelease("init-2/histogram", histogram_mechanism,
                           bounds["histogram"].sensitivity(histogram_mechanism), w2, q, "init-2"),
            PlannedRelease("init-3/sums", "gaussian", bounds["sums"].sensitivity("gaussian"),
                           w3s, q, "init-3"),
            PlannedRelease("init-3/counts", counts_mechanism,
                           bounds["counts"].sensitivity(counts_mechanism), w3c, q, "init-3"),
        ]
    wls, wlc = privacy.lloyds_split
    for step in range(1, privacy.lloyds_steps + 1):
        group = f"lloyds-{step}"
        plan += [
            PlannedRelease(f"{group}/sums", "gaussian", bounds["sums"].sensitivity("gaussian"),
                           wls, q, group),
            PlannedRelease(f"{group}/counts", counts_mechanism,
                           bounds["counts"].sensitivity(counts_mechanism), wlc, q, group),
        ]
    return plan
