"""The optimal cost: centralized, non-private k-means on the pooled points.

**Not private.** It runs on the clients' pooled raw data (in simulation) and measures
an experiment (``metrics.optimal_cost`` of a run, the denominator of its cost ratio);
nothing here reaches a release.

It is scikit-learn's ``KMeans`` (k-means++ restarts), with two of its passes over the
data done in row blocks so the pooled data is held about once: the greedy k-means++
seeding (the same draws and arithmetic as scikit-learn's, without its (trials, n)
distance matrix), passed as the public ``init`` callable, and the relative tolerance
(``mean(var(X))``, which ``np.var`` computes with an (n, d) temporary), for which
the private ``_check_params_vs_input`` is overridden: scikit-learn is pinned to the
versions checked (:data:`SKLEARN_PINNED`, tests/test_node_spill.py). scikit-learn
is imported inside :func:`optimal_cost`, so importing this module costs nothing.
"""

from __future__ import annotations

import numpy as np

__all__ = ["optimal_cost"]

#: ``spawn_key`` of the seed path that derives scikit-learn's ``random_state``.
_OPTIMAL_COST_KEY = 100


def _sklearn_random_state(seed: int) -> int:
    """Derive scikit-learn's integer ``random_state`` from an experiment seed."""
    seq = np.random.SeedSequence(entropy=seed, spawn_key=(_OPTIMAL_COST_KEY,))
    return int(seq.generate_state(1, dtype=np.uint32)[0])


#: Entries of one block of the optimal cost's own passes over the pooled data (2 MiB).
_LEAN_BLOCK_ENTRIES = 1 << 18


def _variance_mean(x: np.ndarray) -> float:
    """``np.mean(np.var(x, axis=0))`` in row blocks: no (n, d) temporary."""
    mean = x.mean(axis=0)
    total = np.zeros(x.shape[1])
    step = max(1, _LEAN_BLOCK_ENTRIES // x.shape[1])
    for start in range(0, x.shape[0], step):
        block = x[start:start + step] - mean
        block *= block
        total += block.sum(axis=0)
    return float(np.mean(total / x.shape[0]))


#: The scikit-learn versions whose private ``KMeans._check_params_vs_input`` (it sets
#: ``self._tol``) :func:`_lean_kmeans` overrides: the pin of ``pyproject.toml``, checked
#: by ``tests/test_node_spill.py`` against the installed version's behaviour.
SKLEARN_PINNED = ">=1.4,<1.10"


def _lean_kmeans(kmeans):
    """scikit-learn's KMeans whose relative tolerance is computed in row blocks.

    ``KMeans`` turns ``tol`` into ``mean(var(X, axis=0)) * tol`` with ``np.var``,
    which holds an (n, d) temporary: a second copy of the pooled data. The same
    tolerance from :func:`_variance_mean` (equal up to round-off) avoids it. No public
    parameter does (``tol=0`` changes when Lloyd stops), so this overrides the private
    ``_check_params_vs_input``, for the versions of :data:`SKLEARN_PINNED` only.
    """

    class LeanKMeans(kmeans):
        # scikit-learn's own method name (KMeans.fit calls it): keep it as it is
        def _check_params_vs_input(self, X, *args, **kwargs):
            tol, self.tol = self.tol, 0.0  # tol = 0 skips np.var
            try:
                super()._check_params_vs_input(X, *args, **kwargs)
            finally:
                self.tol = tol
            self._tol = _variance_mean(X) * tol if tol else 0.0

    if not hasattr(kmeans, "_check_params_vs_input"):
        raise RuntimeError("scikit-learn's KMeans has no _check_params_vs_input to override "
                           f"(fedkmeans pins scikit-learn{SKLEARN_PINNED})")
    return LeanKMeans


def _greedy_kmeans_plusplus(x, n_clusters, random_state):
    """scikit-learn's greedy k-means++ seeding as ``KMeans(init=...)``, in row blocks.

    ``KMeans`` calls an ``init`` callable with its centered copy of the data, the
    number of clusters and its ``RandomState``; with ``init="k-means++"`` it would run
    ``sklearn.cluster.kmeans_plusplus`` on the same arguments, all points weighted 1
    (``fit`` without ``sample_weight``), and its squared row norms
    (``einsum("ij,ij->i")``). So this is called with the same draws and gives the same
    seeds (tests/test_node_spill.py), without its (trials, n) distance matrix.
    """
    norms = np.einsum("ij,ij->i", x, x)
    return _kmeans_plusplus_in_blocks(x, n_clusters, norms, np.ones(x.shape[0], x.dtype),
                                      random_state)


def _kmeans_plusplus_in_blocks(x, k, x_squared_norms, sample_weight, random_state):
    """scikit-learn's greedy k-means++ seeding, its distances computed in row blocks.

    The same draws from ``random_state`` and the same arithmetic as
    ``sklearn.cluster.kmeans_plusplus`` (``2 + int(log k)`` local trials per center;
    a squared distance is ``max(-2 c.p + |c|^2 + |p|^2, 0)`` with the given row norms),
    but the candidates are scored one at a time against the current closest
    distances, so no (trials, n) distance matrix exists: at most three length-n
    vectors. Each candidate's potential is its own dot product (scikit-learn takes the
    four in one matrix product), equal up to round-off.
    """
    n = x.shape[0]
    step = max(1, _LEAN_BLOCK_ENTRIES // max(1, x.shape[1]))

    def distances(center):  # squared distances of every point to one center, (n,)
        out = np.empty(n)
        center = center[None, :]
        center_norm = np.einsum("ij,ij->i", center, center)[:, None]
        for start in range(0, n, step):
            rows = slice(start, start + step)
            block = -2 * (center @ x[rows].T)
            block += center_norm
            block += x_squared_norms[rows][None, :]
            np.maximum(block, 0, out=block)
            out[rows] = block[0]
        return out

    centers = np.empty((k, x.shape[1]), dtype=x.dtype)
    trials = 2 + int(np.log(k))
    center_id = random_state.choice(n, p=sample_weight / sample_weight.sum())
    centers[0] = x[center_id]
    closest = distances(centers[0])
    current_pot = closest @ sample_weight
    for c in range(1, k):
        rand_vals = random_state.uniform(size=trials) * current_pot
        candidate_ids = np.searchsorted(np.cumsum(sample_weight * closest), rand_vals)
        np.clip(candidate_ids, None, n - 1, out=candidate_ids)
        best, best_pot, best_row = None, None, None
        for candidate in candidate_ids.tolist():
            row = distances(x[candidate])
            np.minimum(closest, row, out=row)
            pot = row @ sample_weight
            if best is None or pot < best_pot:  # argmin: the first of equal ones
                best, best_pot, best_row = candidate, pot, row
            del row
        current_pot, closest = best_pot, best_row
        centers[c] = x[best]
    return centers


def optimal_cost(
    x: np.ndarray, k: int, *, seed: int, n_init: int = 10, overwrite_x: bool = False
) -> tuple[float, np.ndarray]:
    """Centralized, non-private k-means reference cost.

    Runs ``sklearn.cluster.KMeans(n_clusters=k, n_init=n_init)`` (k-means++
    restarts; keep ``n_init >= 10``, a single run gets stuck on the paper's
    mixture about one time in three).

    Parameters
    ----------
    x : array_like, shape (n, d)
        Pooled points, ``n >= k``.
    k : int
        Number of clusters, ``>= 1``.
    seed : int
        Non-negative seed; scikit-learn's ``random_state`` is derived from
        ``SeedSequence(entropy=seed, spawn_key=(100,))``.
    n_init : int, default 10
        Number of k-means++ restarts, ``>= 1``.
    overwrite_x : bool, default False
        Let scikit-learn center ``x`` in place (``copy_x=False``) instead of copying
        it: the caller's float64 array is modified in its last bits (centered, then
        un-centered). The centers are the same; the memory of one copy of ``x`` is
        saved. Only for an array the caller owns and throws away.

    Returns
    -------
    cost : float
        :func:`fedkmeans.metrics.kmeans_cost` of ``x`` at the fitted centers (summed in
        row chunks, so no (n, k) distance matrix exists).
    centers : numpy.ndarray of float64, shape (k, d)
        The fitted centers.
    """
    from sklearn.cluster import KMeans

    from fedkmeans.clustering.distances import squared_distances as kernel

    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"x must be a 2-D array (n, d), got shape {x.shape}")
    for name, value in (("k", k), ("n_init", n_init)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if x.shape[0] < k:
        raise ValueError(f"x must have at least k={k} points, got {x.shape[0]}")
    model = _lean_kmeans(KMeans)(n_clusters=int(k), init=_greedy_kmeans_plusplus,
                                 n_init=int(n_init), random_state=_sklearn_random_state(seed),
                                 copy_x=not overwrite_x)
    model.fit(x)
    centers = np.asarray(model.cluster_centers_, dtype=np.float64)
    total, step = 0.0, max(1, _LEAN_BLOCK_ENTRIES // max(k, x.shape[1]))
    for start in range(0, x.shape[0], step):
        total += float(kernel(x[start:start + step], centers).min(axis=1).sum())
    return total / x.shape[0], centers
