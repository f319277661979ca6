"""Statistics one client computes from its own points (FedDP-KMeans, Scott et al. 2025).

Every function takes the client's points *after* any clipping (clipping and noise
live in :mod:`fedkmeans.privacy`) and returns the exact, unnoised statistic the
protocol asks for. Inputs are never modified.
"""

from __future__ import annotations

import numpy as np

from fedkmeans.clustering.distances import center_scores


def nearest_center(points: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Index of the nearest center for each point (ties go to the lowest index).

    Parameters
    ----------
    points : ndarray of shape (n, d)
    centers : ndarray of shape (k, d)

    Returns
    -------
    ndarray of shape (n,), dtype int64
    """
    # ||p - c||^2 = ||p||^2 + (||c||^2 - 2 p.c); ||p||^2 is constant per row.
    return np.argmin(center_scores(points, centers), axis=1).astype(np.int64)


def outer_product_sum(points: np.ndarray) -> np.ndarray:
    """FedDP-Init step 1: the client's second-moment matrix ``sum_p p p^T``.

    Parameters
    ----------
    points : ndarray of shape (n, d)

    Returns
    -------
    ndarray of shape (d, d), symmetric positive semi-definite.
    """
    return points.T @ points


def upper_triangle(matrices: np.ndarray) -> np.ndarray:
    """Upper triangles (diagonal included) of symmetric matrices, row-major.

    Step 1's ``sum_p p p^T`` and its symmetric noise carry their information in these
    entries only: replies travel this way (half the bytes) and the attacks score them.

    Parameters
    ----------
    matrices : ndarray of shape (..., d, d)

    Returns
    -------
    ndarray of shape (..., d (d + 1) / 2)
        :func:`symmetric_from_upper` inverts it for symmetric input.
    """
    m = np.asarray(matrices)
    if m.ndim < 2 or m.shape[-1] != m.shape[-2]:
        raise ValueError(f"matrices must have shape (..., d, d), got {m.shape}")
    rows, cols = np.triu_indices(m.shape[-1])
    return m[..., rows, cols]


def symmetric_from_upper(triangles: np.ndarray, dim: int) -> np.ndarray:
    """The symmetric matrices whose upper triangles :func:`upper_triangle` returned.

    Parameters
    ----------
    triangles : ndarray of shape (m, dim (dim + 1) / 2)
    dim : int

    Returns
    -------
    ndarray of float64, shape (m, dim, dim)
    """
    triangles = np.asarray(triangles, dtype=np.float64)
    size = dim * (dim + 1) // 2
    if triangles.ndim != 2 or triangles.shape[1] != size:
        raise ValueError(f"triangles must have shape (m, {size}), got {triangles.shape}")
    rows, cols = np.triu_indices(dim)
    out = np.empty((triangles.shape[0], dim, dim))
    out[:, rows, cols] = triangles
    out[:, cols, rows] = triangles
    return out


def projected_histogram(
    points: np.ndarray, basis: np.ndarray, projected_server: np.ndarray
) -> np.ndarray:
    """FedDP-Init step 2: how many of the client's points fall nearest to each server point.

    Each point p is projected to ``basis @ p`` (coordinates of Pi p in the span of the
    top eigenvectors) and counted against the nearest projected server point.

    Parameters
    ----------
    points : ndarray of shape (n, d)
    basis : ndarray of shape (r, d)
        Orthonormal rows V; Pi = V^T V.
    projected_server : ndarray of shape (m, r)
        Server points in the same coordinates, ``Q @ V^T``.

    Returns
    -------
    ndarray of shape (m,), float64 counts summing to n.
    """
    nearest = nearest_center(points @ basis.T, projected_server)
    return np.bincount(nearest, minlength=projected_server.shape[0]).astype(np.float64)


def cluster_sums_counts(
    points: np.ndarray, centers: np.ndarray, basis: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sums and counts (FedDP-Init step 3 and every FedDP-Lloyds step).

    Parameters
    ----------
    points : ndarray of shape (n, d)
    centers : ndarray of shape (k, d), or (k, r) when ``basis`` is given
        Step 3 assigns in the projected space (centers xi_r in projected
        coordinates); Lloyds assigns in the full space.
    basis : ndarray of shape (r, d), optional
        Orthonormal rows V of the projection.

    Returns
    -------
    sums : ndarray of shape (k, d)
        Sum of the (original-space) points assigned to each cluster.
    counts : ndarray of shape (k,)
        Number of points assigned to each cluster.
    """
    k = centers.shape[0]
    assigned_space = points if basis is None else points @ basis.T
    labels = nearest_center(assigned_space, centers)
    sums = np.zeros((k, points.shape[1]), dtype=np.float64)
    np.add.at(sums, labels, points)
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    return sums, counts


def local_kmeans_centers(points: np.ndarray, k: int, seed: int) -> np.ndarray:
    """k-FED's client step: centers of a local k-means (10 restarts, seeded).

    A client with fewer than ``k`` points returns its points cycled to ``k`` rows, so
    every reply has the same shape (duplicate centers do not change the server's
    k-means on the union beyond weighting those points).

    Parameters
    ----------
    points : ndarray of shape (n, d)
    k : int
    seed : int
        Integer seed for scikit-learn (derive it with :func:`fedkmeans.seeding.integer_seed`).

    Returns
    -------
    ndarray of shape (k, d)
    """
    if points.shape[0] <= k:
        return points[np.arange(k) % points.shape[0]].copy()
    from sklearn.cluster import KMeans  # not at import: ~2 s with the pandas it loads

    model = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(points)
    return model.cluster_centers_.astype(np.float64)
