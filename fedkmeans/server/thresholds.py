"""Noise-relative thresholds: when a noisy statistic carries too little signal.

Both thresholds are functions of a release's calibrated noise scale (public: it is a
function of epsilon, delta, the sensitivity and the split) and of public data, so
applying them is post-processing and costs no budget. Without noise (epsilon = inf)
they are 0 and 1, the non-private algorithm's values.

Step 2 (``privacy.min-server-weight = auto``): one noise standard deviation
    A bin with no client near it gets ``max(noise, 0)``, on average ``b / 2`` (Laplace
    scale b): a uniform prior over the server's points, which turns the weighted
    k-means into the server's own k-means as the noise grows, and pulls centers towards
    server points no client is near (the mixture's uniform out-of-distribution points:
    without a threshold, 1 of 20 seeds exceeds 1.03 x optimal at data-point level,
    epsilon = 0.25). A threshold ``t`` removes that pull but also every true weight
    below ``t``, which hurts data whose server points are all in-distribution
    (diamonds, data-point level, epsilon = 0.25, 3 seeds: cost ratio 1.0097-1.0146 at
    ``t`` = 1 std, 1.0165-1.021 at 2 std, 1.06-1.21 at ``t = b ln m``, where no empty
    bin survives). ``auto`` is 1 std.

Step 3 and Lloyds (``privacy.min-cluster-count = auto``)
    A center ``nu_r = m_r / n_r`` has two noise terms: the count's (relative error
    ``std(n) / n_r``) and the sums' (``||xi|| / n_r ~ sigma_sums sqrt(d) / n_r``).
    The private estimate is used only when both are small: ``n_r >= 3 std(n)`` (the
    count is at least 3 standard deviations, so its relative error is below 1/3)
    and ``sigma_sums sqrt(d) / n_r <= rho``, where ``rho`` is the root-mean-square
    distance of the server's points to the fallback centers (the scale on which the
    fallback itself is wrong). Otherwise the cluster keeps its fallback (the server's
    estimate, or the previous center). Never below 1: a cluster needs a point.

Spare centers (``privacy.extra-centers = auto``)
    Step 2 clusters the server's points in the released subspace, weighted by the
    clients' Voronoi histogram. When the subspace is uncertain, components overlap in
    it and the histogram piles the mass of the points between them onto the server
    points there (on the paper mixture, its uniform out-of-distribution points): the
    weighted k-means then spends a center on that pile and gives two components one
    center (client level, epsilon = 3, T = 0: 3 of 30 seeds above 1.01 x optimal,
    each with one center on the uniform points' centroid and two components sharing
    another). The subspace is uncertain when the released k-th eigenvalue does not
    stand out from the (k+1)-th by more than the noise's spectral norm (Davis-Kahan:
    the angle between the true and the released subspace is then not bounded away
    from 90 degrees). Then ``ceil(k / 5)`` spare centers are fitted in steps 2 and 3
    and merged away on the clients' released centers
    (:func:`~fedkmeans.clustering.merge_centers`). Measured gap / noise norm of the
    run's release at seed 0: the mixture 0.03-0.08 (client and data-point level),
    digits 0.04, nycflights 0.42-0.46 at client level and 2.3 at data-point level.
    On nycflights, client level, epsilon = 3 (seeds 0-9), the rule used a spare
    center in 5 of 10 runs: median 1.0032, against 1.0018 with none and 1.0042 with
    one in every run. Without noise there are none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedkmeans.artefacts import json_number
from fedkmeans.clustering.distances import squared_distances
from fedkmeans.config import AUTO, PrivacySettings
from fedkmeans.privacy.accountant import Release
from fedkmeans.privacy.registry import mechanism

__all__ = ["SPARE_CENTERS_PER", "WEIGHT_THRESHOLD_STDS", "Thresholds", "count_threshold",
           "noise_std", "spare_centers", "spread", "weight_threshold"]

#: Step 2 (``privacy.min-server-weight = auto``): noisy weights below this many noise
#: standard deviations are dropped (see the module docstring).
WEIGHT_THRESHOLD_STDS = 1.0


#: ``privacy.extra-centers = auto``: one spare center per this many clusters.
SPARE_CENTERS_PER = 5


def spare_centers(k: int, eigen_gap: float, noise_norm: float) -> int:
    """Spare centers of steps 2-3: ``ceil(k / 5)`` if the subspace is uncertain, else 0.

    Parameters
    ----------
    k : int
    eigen_gap : float
        ``lambda_k - lambda_(k+1)`` of step 1's released second moment.
    noise_norm : float
        Spectral norm of its noise (0 without noise).

    Returns
    -------
    int
        ``ceil(k / SPARE_CENTERS_PER)`` when ``noise_norm > 0`` and
        ``eigen_gap <= noise_norm``; 0 otherwise.
    """
    if noise_norm > 0 and eigen_gap <= noise_norm:
        return math.ceil(k / SPARE_CENTERS_PER)
    return 0


def noise_std(release: Release) -> float:
    """Standard deviation of one coordinate of the release's noise."""
    return mechanism(release.mechanism).std(release.noise_scale)


def weight_threshold(release: Release) -> float:
    """Step 2's threshold: :data:`WEIGHT_THRESHOLD_STDS` noise standard deviations."""
    return WEIGHT_THRESHOLD_STDS * noise_std(release)


def spread(server_x: np.ndarray, centers: np.ndarray) -> float:
    """Root-mean-square distance of the server's points to their nearest center."""
    nearest = squared_distances(server_x, centers).min(axis=1)
    return float(math.sqrt(max(float(nearest.mean()), 0.0)))


def count_threshold(counts: Release, sums: Release, dim: int, rho: float) -> float:
    """Smallest noisy count for which ``m_r / n_r`` replaces the fallback center.

    Parameters
    ----------
    counts, sums : Release
        The round's calibrated count and sum releases.
    dim : int
        Feature dimension d.
    rho : float
        Public scale of the fallback's error (:func:`spread`), > 0.

    Returns
    -------
    float
        ``max(1, 3 std(n), sigma_sums sqrt(d) / rho)``.
    """
    from_sums = noise_std(sums) * math.sqrt(dim) / rho if rho > 0 else math.inf
    return max(1.0, 3.0 * noise_std(counts), from_sums)


@dataclass(frozen=True, eq=False)
class Thresholds:
    """The run's thresholds: each the declared setting, or its ``auto`` rule above.

    Functions of the settings, the planned releases' noise scales and the server's
    public data only: applying them is post-processing.

    Attributes
    ----------
    privacy : PrivacySettings
        ``min_server_weight``, ``min_cluster_count``, ``extra_centers``: a number or
        ``auto``.
    private : bool
        Whether the run adds noise (``config.is_private``): without noise every
        ``auto`` threshold is the non-private algorithm's (0, 1, 0).
    k_auto : bool
        ``k = auto`` (no spare centers: the elbow picks k itself).
    releases : mapping of str to Release
        The planned releases whose noise the ``auto`` rules scale with.
    server_x : ndarray of shape (m, d)
        The server's (public) data Q.
    dim : int
        Feature dimension d.
    """

    privacy: PrivacySettings
    private: bool
    k_auto: bool
    releases: Mapping[str, Release]
    server_x: np.ndarray
    dim: int

    def extra_centers(self, k: int, eigen_gap: float, noise_norm: float) -> dict:
        """Spare centers of FedDP-Init steps 2-3: ``privacy.extra-centers``, or decided.

        ``auto``: :func:`spare_centers` of step 1's released eigen-gap and noise norm
        (0 with ``k = auto``), within the server's m points.

        Returns
        -------
        dict
            ``extra_centers`` (int), ``setting`` (as declared), ``eigen_gap`` and
            ``noise_norm`` (JSON numbers): ``release.json["spare_centers"]``.
        """
        value = self.privacy.extra_centers
        if value != AUTO:
            extra = int(value)
        elif self.k_auto:
            extra = 0
        else:
            extra = min(spare_centers(k, eigen_gap, noise_norm), self.server_x.shape[0] - k)
        return {"extra_centers": extra, "setting": value,
                "eigen_gap": json_number(eigen_gap), "noise_norm": json_number(noise_norm)}

    def min_server_weight(self, stage: str) -> float:
        """Step 2's weight threshold: ``privacy.min-server-weight``, or relative to the noise.

        ``auto``: :data:`WEIGHT_THRESHOLD_STDS` standard deviations of the planned
        release ``stage``'s noise (0 without noise).
        """
        value = self.privacy.min_server_weight
        if value != AUTO:
            return float(value)
        release = self.releases.get(stage)
        if release is None or not self.private:
            return 0.0
        return weight_threshold(release)

    def min_cluster_count(self, group: str, fallback: np.ndarray) -> float:
        """Count a cluster needs to leave its ``fallback`` center (k, d), for round ``group``.

        ``auto``: :func:`count_threshold` of the round's planned count and sum releases,
        with the spread of the server's data around ``fallback`` as the public scale;
        1 when the run adds no noise.
        """
        value = self.privacy.min_cluster_count
        if value != AUTO:
            return float(value)
        counts = self.releases.get(f"{group}/counts")
        sums = self.releases.get(f"{group}/sums")
        if counts is None or sums is None or not self.private:
            return 1.0
        return count_threshold(counts, sums, self.dim, spread(self.server_x, fallback))

    def eigenvalue_floor(self, stage: str) -> float:
        """Eigenvalues of the noisy second moment below this are noise (0 if no noise).

        The symmetric noise of step 1 (entries N(0, sigma^2)) has spectral norm about
        ``2 sigma sqrt(d)``; an eigenvector whose eigenvalue does not clear it is not
        trusted (:func:`~fedkmeans.clustering.server_steps.supported_eigenvectors`).
        """
        release = self.releases.get(stage)
        if release is None or not self.private:
            return 0.0
        return 2.0 * noise_std(release) * float(np.sqrt(self.dim))
