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
"""

from __future__ import annotations

import math

import numpy as np

from fedkmeans.clustering.distances import squared_distances
from fedkmeans.privacy.accountant import Release
from fedkmeans.privacy.registry import mechanism

__all__ = ["WEIGHT_THRESHOLD_STDS", "count_threshold", "noise_std", "spread", "weight_threshold"]

#: Step 2 (``privacy.min-server-weight = auto``): noisy weights below this many noise
#: standard deviations are dropped (see the module docstring).
WEIGHT_THRESHOLD_STDS = 1.0


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
