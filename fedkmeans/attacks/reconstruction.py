"""Client reconstruction: read a client's data off its own reply.

Threat model 2 (docs/facts.md, "Threat model 2: curious server"): the *curious server
sees individual replies*. In FedDP-Init step 3 and every FedDP-Lloyds step a client
sends, for each cluster r, the sum ``m_r`` and the count ``n_r`` of its points assigned
to r. Central DP adds noise only to the *aggregate*, so the server holds the exact
reply and

* ``m_r / n_r`` is the client's mean of cluster r (exact up to the client's own
  clipping of its points to the data radius);
* a cluster with ``n_r = 1`` is a single data point: the reply *is* that point.

Success metrics: cosine similarity and relative error ``||est - true|| / ||true||``
of every reconstructed cluster mean against the client's true cluster mean, and the
number of data points recovered exactly (relative error < 1e-9) from one-point
clusters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedkmeans.attacks.scoring import cosine_similarity, relative_error
from fedkmeans.clustering.client_stats import cluster_sums_counts

__all__ = [
    "ClientReconstruction",
    "reconstruct_means",
    "reconstruct_points",
    "attack_client_reply",
]

#: A reconstructed point counts as recovered when its relative error is below this.
EXACT = 1e-9


def _validate_reply(sums: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sums = np.asarray(sums, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    if sums.ndim != 2:
        raise ValueError(f"sums must have shape (k, d), got {sums.shape}")
    if counts.shape != (sums.shape[0],):
        raise ValueError(f"counts must have shape ({sums.shape[0]},), got {counts.shape}")
    return sums, counts


def reconstruct_means(
    sums: np.ndarray, counts: np.ndarray, min_count: float = 0.5
) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster means ``sums[r] / counts[r]`` of one client's reply.

    Parameters
    ----------
    sums : ndarray of shape (k, d)
    counts : ndarray of shape (k,)
    min_count : float
        Clusters with a smaller count are reported as not reconstructed (> 0).

    Returns
    -------
    means : ndarray of shape (k, d)
        Zero rows where ``valid`` is False.
    valid : ndarray of shape (k,), bool
    """
    sums, counts = _validate_reply(sums, counts)
    if not min_count > 0:
        raise ValueError(f"min_count must be > 0, got {min_count!r}")
    valid = counts >= min_count
    means = np.zeros_like(sums)
    means[valid] = sums[valid] / counts[valid, None]
    return means, valid


def reconstruct_points(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The data points given away by one-point clusters (``counts[r] == 1``).

    Returns
    -------
    ndarray of shape (n_single, d)
    """
    sums, counts = _validate_reply(sums, counts)
    single = np.abs(counts - 1.0) < 1e-9
    return sums[single].copy()


@dataclass(frozen=True)
class ClientReconstruction:
    """Success of the reconstruction from one client's reply.

    Attributes
    ----------
    cosines : ndarray of shape (n_valid,)
        Cosine of each reconstructed cluster mean with the true one.
    relative_errors : ndarray of shape (n_valid,)
    clusters : int
        Non-empty clusters of the client (what there was to reconstruct).
    points_recovered : int
        Data points read exactly off one-point clusters.
    """

    cosines: np.ndarray
    relative_errors: np.ndarray
    clusters: int
    points_recovered: int


def attack_client_reply(
    sums: np.ndarray,
    counts: np.ndarray,
    points: np.ndarray,
    centers: np.ndarray,
    basis: np.ndarray | None = None,
) -> ClientReconstruction:
    """Reconstruct one client's cluster means from its reply and score them.

    Parameters
    ----------
    sums, counts : ndarray of shape (k, d), (k,)
        The client's reply as the server received it.
    points : ndarray of shape (n, d)
        Ground truth (evaluation only): the client's points as the protocol used them.
    centers : ndarray of shape (k, d) or (k, r)
        The centers the server broadcast in that round (projected with ``basis``).
    basis : ndarray of shape (r, d), optional
        The projection broadcast in FedDP-Init step 3.

    Returns
    -------
    ClientReconstruction
    """
    sums, counts = _validate_reply(sums, counts)
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != sums.shape[1]:
        raise ValueError(f"points must have shape (n, {sums.shape[1]}), got {points.shape}")
    true_sums, true_counts = cluster_sums_counts(points, centers, basis)
    true_means, true_valid = reconstruct_means(true_sums, true_counts)
    means, valid = reconstruct_means(sums, counts)
    both = np.flatnonzero(valid & true_valid)
    cosines = np.array([cosine_similarity(means[r], true_means[r]) for r in both])
    errors = np.array([relative_error(means[r], true_means[r]) for r in both])
    recovered = 0
    for point in reconstruct_points(sums, counts):
        nearest = np.min(np.linalg.norm(points - point, axis=1))
        if nearest <= EXACT * max(float(np.linalg.norm(point)), 1e-300):
            recovered += 1
    return ClientReconstruction(cosines, errors, int(true_valid.sum()), recovered)
