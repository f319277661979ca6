"""Weighted k-means with every restart run at once, in NumPy: for the server's small problems.

The server runs k-means with 10 restarts on small public or released point sets: the
projected server data in FedDP-Init step 2 (a few hundred points in k dimensions), the
spare centers of step 3, the server-only answer of the final check, and the clusters
of the public simulation. On such a problem scikit-learn's ``KMeans`` spends its time
in Python around each restart, not in arithmetic (about 1 ms per restart for 300
points, k = 10). Here the ``R`` restarts are the leading axis of every array, so a
k-means++ step or a Lloyd iteration is a few NumPy calls for all of them.

The algorithm is scikit-learn's (Arthur and Vassilvitskii's k-means++ in its greedy
form, then Lloyd), for non-negative weights ``w``:

- **Seeding.** The first center is a point drawn with probability ``w_i / sum w``.
  Each further center: ``2 + floor(ln k)`` candidates are drawn with probability
  proportional to ``w_i D_i^2`` (``D_i`` the distance of point i to its nearest center
  so far), and the candidate that leaves the smallest potential ``sum_i w_i D_i^2`` is
  kept.
- **Lloyd.** Assign every point to its nearest center, move every center to the
  weighted mean of its points; a center left without weight moves to the point of
  largest ``w_i D_i^2`` not already taken by another empty center (scikit-learn
  relocates to far points too). A restart stops when its assignment no longer changes,
  when its centers moved by at most ``tol`` times the mean per-feature variance of the
  points in total squared distance (scikit-learn's tolerance), or after ``max_iter``
  iterations.
- **Choice.** The restart of smallest weighted cost ``sum_i w_i D_i^2`` with its final
  centers.

The randomness is one :class:`numpy.random.Generator` (public: these point sets are
public or released).
"""

from __future__ import annotations

import math

import numpy as np

from fedkmeans.clustering.distances import center_scores, squared_distances

__all__ = ["MAX_BATCHED_WORK", "kmeans_restarts"]

#: Largest ``restarts x points x k x d``, the multiply-adds of one Lloyd iteration of
#: every restart, run here; larger problems go to scikit-learn's compiled Lloyd
#: (:func:`fedkmeans.clustering.server_steps.kmeans`). The dense one-hot product that
#: sums the clusters here costs as much again, where scikit-learn adds each point once,
#: so past some size its Python overhead is the smaller cost: about even at 5,000
#: points, d = 50, k = 10 (2.5e7), slower here at 20,000 x 100, k = 10
#: (``benchmarks/server_kmeans.py``). The scores of one iteration then take at most
#: 80 MB divided by d.
MAX_BATCHED_WORK = 10_000_000


def kmeans_restarts(
    points: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    n_init: int = 10,
    sample_weight: np.ndarray | None = None,
    max_iter: int = 300,
    tol: float = 1e-4,
) -> np.ndarray:
    """Weighted k-means, ``n_init`` k-means++ restarts at once; the cheapest one's centers.

    Parameters
    ----------
    points : ndarray of shape (n, d), n >= k
    k : int
    rng : numpy.random.Generator
        Public randomness of the seeding.
    n_init : int, default 10
        Restarts R.
    sample_weight : ndarray of shape (n,), optional
        Non-negative weights with a positive sum; default all 1.
    max_iter : int, default 300
    tol : float, default 1e-4
        Relative tolerance on the centers' total squared movement (module docstring).

    Returns
    -------
    ndarray of shape (k, d)
    """
    x = np.asarray(points, dtype=np.float64)
    n = x.shape[0]
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    norms = (x * x).sum(axis=1)
    centers = _seed(x, w, k, n_init, rng)
    threshold = tol * float(x.var(axis=0).mean())
    labels = np.full((n_init, n), -1)
    active = np.arange(n_init)
    for _ in range(max_iter):
        scores = center_scores(x, centers[active])  # (a, n, k)
        new_labels = scores.argmin(axis=2)
        changed = (new_labels != labels[active]).any(axis=1)
        labels[active] = new_labels
        moved = _means(x, w, new_labels, scores, norms)
        shift = ((moved - centers[active]) ** 2).sum(axis=(1, 2))
        centers[active[changed]] = moved[changed]
        active = active[changed & (shift > threshold)]
        if not active.size:
            break
    d2 = np.maximum(center_scores(x, centers) + norms[:, None], 0.0)  # (R, n, k)
    cost = (d2.min(axis=2) * w).sum(axis=1)
    return centers[int(np.argmin(cost))].copy()


def _seed(x: np.ndarray, w: np.ndarray, k: int, restarts: int,
          rng: np.random.Generator) -> np.ndarray:
    """Greedy k-means++ for every restart at once: centers of shape (R, k, d).

    The distances of every point to a drawn row are :func:`squared_distances` of the
    drawn rows against the points, shape (rows, n).
    """
    trials = 2 + int(math.log(k))
    centers = np.empty((restarts, k, x.shape[1]))
    first = _draw(np.broadcast_to(np.cumsum(w), (restarts, w.size)), rng, 1)[:, 0]
    centers[:, 0] = x[first]
    closest = squared_distances(x[first], x)  # (R, n)
    for c in range(1, k):
        cumulative = np.cumsum(closest * w, axis=1)
        candidates = _draw(cumulative, rng, trials)  # (R, L)
        d2 = squared_distances(x[candidates.ravel()], x).reshape(restarts, trials, -1)
        np.minimum(d2, closest[:, None, :], out=d2)
        best = (d2 * w).sum(axis=2).argmin(axis=1)
        chosen = candidates[np.arange(restarts), best]
        centers[:, c] = x[chosen]
        closest = d2[np.arange(restarts), best]
    return centers


def _draw(cumulative: np.ndarray, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` indices per row, each with probability its share of the row's total.

    ``cumulative`` of shape (R, n) holds each row's cumulative weights; a row of zero
    total (every point on a center) draws uniformly.
    """
    restarts, n = cumulative.shape
    total = cumulative[:, -1:]
    u = rng.random((restarts, size))
    # the first index whose cumulative weight exceeds u * total (a sorted search per row)
    out = (cumulative[:, None, :] <= (u * total)[:, :, None]).sum(axis=2)
    uniform = total[:, 0] <= 0
    out[uniform] = (u[uniform] * n).astype(np.int64)
    return np.minimum(out, n - 1)


def _means(x: np.ndarray, w: np.ndarray, labels: np.ndarray, scores: np.ndarray,
           norms: np.ndarray) -> np.ndarray:
    """The weighted mean of each cluster, shape (a, k, d); empty ones relocated.

    ``labels`` (a, n) are the nearest centers by ``scores`` (a, n, k), the
    :func:`~fedkmeans.clustering.distances.center_scores` of the points ``x`` whose
    squared norms are ``norms``. A center of zero weight moves to the point of largest
    ``w_i D_i^2`` (``D_i`` its distance to its nearest center) not already taken by
    another empty center of its restart.
    """
    (a, n), k = labels.shape, scores.shape[2]
    one_hot = np.zeros((a, k, n))  # w_i at (r, label of i in restart r, i)
    np.put_along_axis(one_hot, labels[:, None, :], w[None, None, :], axis=1)
    mass = one_hot.sum(axis=2)
    means = (one_hot.reshape(a * k, n) @ x).reshape(a, k, x.shape[1])  # one product
    empty = mass <= 0
    mass[empty] = 1.0
    means /= mass[..., None]
    for r in np.flatnonzero(empty.any(axis=1)):
        nearest = np.maximum(scores[r, np.arange(x.shape[0]), labels[r]] + norms, 0.0)
        far = np.argsort(-(nearest * w), kind="stable")
        for rank, c in enumerate(np.flatnonzero(empty[r])):
            means[r, c] = x[far[rank]]
    return means
