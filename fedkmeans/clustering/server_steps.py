"""Server-side steps of FedDP-KMeans and its baselines (pure maths on released values).

Everything here works on values the server may already see: noisy aggregates and
its own (public) server data Q. No function here touches a client's points.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from contextlib import nullcontext

import numpy as np

from fedkmeans.clustering.distances import squared_distances
from fedkmeans.clustering.restarts import MAX_BATCHED_WORK, kmeans_restarts

LOG = logging.getLogger(__name__)


def top_eigenvectors(matrix: np.ndarray, k: int) -> np.ndarray:
    """FedDP-Init step 1 (server): the top-k eigenvectors of the noisy second moment.

    Parameters
    ----------
    matrix : ndarray of shape (d, d)
        Symmetric (noisy) ``sum_p p p^T``.
    k : int
        Number of eigenvectors; ``min(k, d)`` are returned.

    Returns
    -------
    ndarray of shape (min(k, d), d)
        Orthonormal rows V, largest eigenvalue first; the projection is Pi = V^T V.
        Each row's sign is fixed so its largest-magnitude entry is positive, so
        equal inputs give equal bases on every platform.
    """
    eigenvalues, eigenvectors = np.linalg.eigh(matrix)
    order = np.argsort(eigenvalues)[::-1][: min(k, matrix.shape[0])]
    basis = eigenvectors[:, order].T.copy()
    signs = np.sign(basis[np.arange(basis.shape[0]), np.argmax(np.abs(basis), axis=1)])
    signs[signs == 0] = 1.0
    return basis * signs[:, None]


def eigen_gap(matrix: np.ndarray, k: int) -> float:
    """``lambda_k - lambda_(k+1)`` of a symmetric (d, d) matrix (eigenvalues descending).

    ``inf`` when ``k >= d`` (no (k+1)-th eigenvalue).
    """
    if k >= matrix.shape[0]:
        return math.inf
    eigenvalues = np.linalg.eigvalsh(matrix)[::-1]
    return float(eigenvalues[k - 1] - eigenvalues[k])


def supported_eigenvectors(
    matrix: np.ndarray, k: int, floor: float, fallback: np.ndarray
) -> np.ndarray:
    """Top-k eigenvectors of ``matrix`` whose eigenvalue clears ``floor``, completed.

    FedDP-Init step 1 with a noise-aware fallback: the eigenvectors of the noisy
    second moment whose eigenvalue exceeds ``floor`` (the noise's spectral norm) are
    kept, largest first; the remaining directions are the top eigenvectors of the
    public ``fallback`` matrix (the server's ``Q^T Q``) restricted to the orthogonal
    complement of the kept ones. With ``floor = 0`` this is :func:`top_eigenvectors`
    whenever the top-k eigenvalues are positive.

    Parameters
    ----------
    matrix : ndarray of shape (d, d)
        Symmetric noisy ``sum_p p p^T``.
    k : int
    floor : float
        Eigenvalues ``<= floor`` are treated as noise.
    fallback : ndarray of shape (d, d)
        Symmetric public second moment.

    Returns
    -------
    ndarray of shape (min(k, d), d)
        Orthonormal rows.
    """
    basis = top_eigenvectors(matrix, k)
    eigenvalues = np.einsum("id,de,ie->i", basis, matrix, basis)
    kept = int(np.count_nonzero(eigenvalues > floor))
    if kept == basis.shape[0]:
        return basis
    complement = np.eye(matrix.shape[0]) - basis[:kept].T @ basis[:kept]
    extra = top_eigenvectors(complement @ fallback @ complement, basis.shape[0] - kept)
    return np.vstack([basis[:kept], extra])


def server_estimate(
    server_x: np.ndarray, projected_server: np.ndarray, projected_centers: np.ndarray,
    weights: np.ndarray, basis: np.ndarray,
) -> np.ndarray:
    """The server's best estimate of each FedDP-Init center (step 3's fallback).

    Each server point joins the nearest projected center; the estimate of center r is
    the mean, weighted by the step-2 weights, of its server points in the *original*
    space (unweighted if their weights are all 0; the lifted projected center
    ``xi_r V`` if no server point joins it). Post-processing of public data and
    released weights.

    Parameters
    ----------
    server_x : ndarray of shape (m, d)
    projected_server : ndarray of shape (m, k')
    projected_centers : ndarray of shape (k, k')
    weights : ndarray of shape (m,)
        Non-negative step-2 weights (:func:`usable_weights`).
    basis : ndarray of shape (k', d)

    Returns
    -------
    ndarray of shape (k, d)
    """
    nearest = squared_distances(projected_server, projected_centers).argmin(axis=1)
    out = projected_centers @ basis
    for r in range(projected_centers.shape[0]):
        members = nearest == r
        if not members.any():
            continue
        w = weights[members]
        if w.sum() <= 0:
            w = np.ones_like(w)
        out[r] = w @ server_x[members] / w.sum()
    return out


def kmeans(
    points: np.ndarray,
    k: int,
    *,
    seed: int,
    n_init: int = 10,
    sample_weight: np.ndarray | None = None,
) -> np.ndarray:
    """Lloyd's k-means with k-means++ seeding and ``n_init`` restarts (best cost kept).

    Parameters
    ----------
    points : ndarray of shape (n, d), n >= k
    k : int
    seed : int
        Integer seed for scikit-learn.
    n_init : int, default 10
        Restarts; a single run gets stuck in about 1 run of 3
        (docs/facts.md, "Reference bug 2").
    sample_weight : ndarray of shape (n,), optional
        Non-negative weights.

    Returns
    -------
    ndarray of shape (k, d)
    """
    if n_init * points.shape[0] * k * points.shape[1] <= MAX_BATCHED_WORK:
        return kmeans_restarts(points, k, np.random.default_rng(seed), n_init=n_init,
                               sample_weight=sample_weight)
    from sklearn.cluster import KMeans  # not at import: ~1 s with the pandas it loads

    model = KMeans(n_clusters=k, n_init=n_init, random_state=seed)
    with _threads_for(points.size):
        model.fit(points, sample_weight=sample_weight)
    return model.cluster_centers_.astype(np.float64)


#: Largest ``n * d`` that :func:`kmeans` runs on one OpenMP thread (8 MiB of float64).
ONE_THREAD_MAX_VALUES = 1_000_000


def _threads_for(values: int):
    """One OpenMP thread for a k-means on at most :data:`ONE_THREAD_MAX_VALUES` values.

    scikit-learn's Lloyd iterations split the points into chunks over OpenMP threads
    and join them every iteration; on a small problem the join is the cost, and on a
    busy machine a descheduled thread stalls it. Measured on the 2 shared cores
    (load 2-6), 10 k-means++ starts, k = 10, d = 100: the server's 300 points in 22-36
    ms on one thread against 0.2-1.4 s on two; 3,000 points 0.25 s against 1.7 s;
    10,000 points 1.6 s against 7.1 s. The result is the same up to the order of the
    floating-point sums (8e-17 on the 300 points). Larger problems keep the default.
    """
    if values > ONE_THREAD_MAX_VALUES:
        return nullcontext()
    from fedkmeans.clustering.scikit import thread_controller

    return thread_controller().limit(limits=1, user_api="openmp")


def weighted_kmeans(
    points: np.ndarray,
    weights: np.ndarray,
    k: int,
    *,
    seed: int,
    n_init: int = 10,
    min_weight: float = 0.0,
) -> np.ndarray:
    """FedDP-Init step 2 (server): weighted k-means on the projected server data.

    Noisy weights are made valid first: negative weights become 0 and weights below
    ``min_weight`` are dropped (set to 0). If fewer than ``k`` points keep a positive
    weight, every server point gets weight 1 (logged): the noisy histogram carried
    too little signal and the server data alone is the best public fallback.

    Parameters
    ----------
    points : ndarray of shape (m, r)
        Projected server points.
    weights : ndarray of shape (m,)
        Noisy histogram from step 2.
    k : int
    seed : int
    n_init : int, default 10
    min_weight : float, default 0.0

    Returns
    -------
    ndarray of shape (k, r)
        Projected centers xi_1..xi_k.
    """
    w = usable_weights(weights, min_weight, k)
    keep = w > 0
    return kmeans(points[keep], k, seed=seed, n_init=n_init, sample_weight=w[keep])


def merge_centers(
    centers: np.ndarray, counts: np.ndarray, k: int, *, seed: int,
    warn: Callable[[str], None] | None = None,
) -> np.ndarray:
    """Merge ``k + e`` released centers into ``k``: k-means on them, weighted by counts.

    Post-processing of FedDP-Init step 3 with spare centers (``privacy.extra-centers``):
    each released center ``nu_r = m_r / n_r`` stands for the ``n_r`` client points of
    its cell, so the k-means of the ``nu_r`` weighted by ``n_r`` is the k-means of the
    clients' data with every cell moved to its mean; a merged center is the
    count-weighted mean of its group, i.e. the mean of the union of the cells (up to
    noise). Noisy counts are made valid weights by :func:`usable_weights`.

    Parameters
    ----------
    centers : ndarray of shape (k + e, d)
        Step 3's centers.
    counts : ndarray of shape (k + e,)
        Their noisy counts n_r.
    k : int
    seed : int
        Integer seed of the (public) k-means restarts.
    warn : callable, optional
        Says the weights' fallback (:func:`usable_weights`); a run passes its own.

    Returns
    -------
    ndarray of shape (k, d)
        ``centers`` itself when e = 0.
    """
    if centers.shape[0] <= k:
        return centers
    weights = usable_weights(counts, 0.0, k, warn=warn)
    keep = weights > 0
    return kmeans(centers[keep], k, seed=seed, sample_weight=weights[keep])


def usable_weights(weights: np.ndarray, min_weight: float, min_positive: int, *,
                   warn: Callable[[str], None] | None = None) -> np.ndarray:
    """Noisy server-point weights made valid for weighted k-means (post-processing).

    Weights below ``min_weight`` (and negative ones) become 0; if fewer than
    ``min_positive`` stay positive, every point gets weight 1 (logged): the noisy
    histogram carried too little signal and the server data alone is the fallback.

    Parameters
    ----------
    weights : ndarray of shape (m,)
    min_weight : float
    min_positive : int
    warn : callable, optional
        Says the fallback (default: this module's logger, every time); a run passes
        its own, which says it once per run.

    Returns
    -------
    ndarray of shape (m,)
        Non-negative weights, at least ``min_positive`` of them positive (if m allows).
    """
    w = np.asarray(weights, dtype=np.float64)
    w = np.clip(np.where(w >= max(min_weight, 0.0), w, 0.0), 0.0, None)
    if np.count_nonzero(w) < min_positive:
        (warn or LOG.warning)(
            f"step 2: only {np.count_nonzero(w)} server points have positive noisy weight "
            f"(< {min_positive}); falling back to uniform weights")
        w = np.ones_like(w)
    return w


def kmeans_plus_plus(points: np.ndarray, k: int, *, seed: int) -> np.ndarray:
    """One k-means++ seeding draw on ``points`` (ServerKMeans++ baseline).

    Returns
    -------
    ndarray of shape (k, d)
    """
    from sklearn.cluster import kmeans_plusplus

    centers, _ = kmeans_plusplus(points, n_clusters=k, random_state=seed)
    return centers.astype(np.float64)


def centers_from_sums(
    sums: np.ndarray, counts: np.ndarray, fallback: np.ndarray, min_count: float
) -> tuple[np.ndarray, np.ndarray]:
    """Centers nu_r = m_r / n_r from noisy sums and counts, with a defined fallback.

    A noisy count can be tiny, zero or negative. Any cluster with
    ``counts[r] < min_count`` (``min_count > 0``) keeps ``fallback[r]`` instead, so
    the result never contains NaN or inf and never divides by a number below
    ``min_count``.

    Parameters
    ----------
    sums : ndarray of shape (k, d)
    counts : ndarray of shape (k,)
    fallback : ndarray of shape (k, d)
        The previous centers (Lloyds) or the lifted projected centers (step 3).
    min_count : float
        Must be > 0.

    Returns
    -------
    centers : ndarray of shape (k, d)
    used_fallback : ndarray of shape (k,), bool
    """
    if not min_count > 0:
        raise ValueError(f"min_count must be > 0, got {min_count!r}")
    used_fallback = ~(counts >= min_count)
    safe_counts = np.where(used_fallback, 1.0, counts)
    centers = np.where(used_fallback[:, None], fallback, sums / safe_counts[:, None])
    return centers, used_fallback


def sphere_packing_centers(
    k: int, lower: np.ndarray, upper: np.ndarray, rng: np.random.Generator,
    max_tries: int = 100,
) -> np.ndarray:
    """SpherePacking baseline: data-independent centers spread over a public box.

    Following Su et al. (2016), centers are drawn uniformly in the box
    ``[lower, upper]`` (shrunk by a margin ``a``) and accepted only if they are at
    least ``2a`` from every accepted center; when ``max_tries`` draws in a row fail,
    ``a`` shrinks by a factor 1.5. The box is public knowledge of the domain.

    Parameters
    ----------
    k : int
    lower, upper : ndarray of shape (d,)
    rng : numpy.random.Generator
    max_tries : int, default 100

    Returns
    -------
    ndarray of shape (k, d)
    """
    side = upper - lower
    radius = float(np.linalg.norm(side)) / 2.0
    while True:
        margin = np.minimum(radius, side / 2.0)
        low = lower + margin
        high = np.maximum(upper - margin, low)
        centers: list[np.ndarray] = []
        failures = 0
        while len(centers) < k and failures < max_tries:
            candidate = rng.uniform(low, high)
            if all(np.linalg.norm(candidate - c) >= 2.0 * radius for c in centers):
                centers.append(candidate)
                failures = 0
            else:
                failures += 1
        if len(centers) == k:
            return np.asarray(centers, dtype=np.float64)
        radius /= 1.5
