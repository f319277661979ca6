"""The vertical k-means protocol: each party's step and the server's step.

Iteration t of the protocol (``c^0`` is the initialisation):

1. party h computes ``D^h[i, r] = ||x_i^h - c_r^{h,t}||^2`` for its slice ``x^h``
   (n x d_h) and its slice of the centers ``c^{h,t}`` (k x d_h), applies the
   defence (:mod:`fedkmeans.vertical.defence`) and sends the ``(n, k)`` report;
2. the server sums the H (decoded) reports and sends ``labels^t = argmin_r sum_h D^h``;
3. party h sets ``c^{h,t+1}_r`` = mean of its slice over the samples labelled r
   (an empty cluster keeps its previous center).

Because ``sum_h D^h[i, r] = ||x_i - c_r||^2`` on the joined features, without a
defence the labels are those of Lloyd's algorithm on the joined data from the joined
initialisation (:func:`lloyd`). The parties are stateless between messages: the server
sends the label history and a party replays its centers (:func:`replay_centers`).
"""

from __future__ import annotations

import numpy as np

from fedkmeans.seeding import generator

__all__ = [
    "INITS",
    "assign",
    "initial_center_ids",
    "lloyd",
    "party_initial_centers",
    "random_initial_centers",
    "replay_centers",
    "exact_squared_distances",
    "update_centers",
]

INITS = ("samples", "random")


def exact_squared_distances(x: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Exact squared Euclidean distances (by differences, no expansion round-off).

    Not the package's kernel (:mod:`fedkmeans.clustering.distances`, which expands
    ``||x||^2 - 2 x.c + ||c||^2``): these values are what a party reports, so the
    defences discretise them and the attacks invert them, and the expansion's
    cancellation error would enter both. A party's slice ``d_h`` is small, so the
    loop over coordinates is cheap.

    Parameters
    ----------
    x : array_like, shape (n, d)
    centers : array_like, shape (k, d)

    Returns
    -------
    numpy.ndarray of float64, shape (n, k)
    """
    x = np.asarray(x, dtype=np.float64)
    centers = np.asarray(centers, dtype=np.float64)
    if x.ndim != 2 or centers.ndim != 2 or x.shape[1] != centers.shape[1]:
        raise ValueError(
            f"x (n, d) and centers (k, d) must share d, got {x.shape} and {centers.shape}"
        )
    out = np.zeros((x.shape[0], centers.shape[0]))
    for j in range(x.shape[1]):  # d is small; keeps memory at n x k
        out += (x[:, j, None] - centers[None, :, j]) ** 2
    return out


def assign(total: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
    """Nearest center of each sample from the summed distance matrix.

    Parameters
    ----------
    total : array_like, shape (n, k)
        Summed (decoded) squared distances.
    rng : numpy.random.Generator, optional
        If given, exact ties are broken uniformly at random (discretised reports tie
        often, and "lowest index" would bias every tie towards center 0); if None,
        the lowest index wins (as :func:`numpy.argmin` and scikit-learn).

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
    """
    total = np.asarray(total, dtype=np.float64)
    if total.ndim != 2 or total.shape[1] < 1:
        raise ValueError(f"total must have shape (n, k) with k >= 1, got {total.shape}")
    if rng is None:
        return np.argmin(total, axis=1).astype(np.int64)
    is_min = total == total.min(axis=1, keepdims=True)
    keys = np.where(is_min, rng.random(total.shape), -1.0)
    return np.argmax(keys, axis=1).astype(np.int64)


def update_centers(x: np.ndarray, labels: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """Lloyd update of one party's center slice.

    Parameters
    ----------
    x : array_like, shape (n, d)
    labels : array_like of int, shape (n,)
        Values in [0, k).
    previous : array_like, shape (k, d)
        Centers kept for clusters with no sample.

    Returns
    -------
    numpy.ndarray of float64, shape (k, d)
        Cluster means (a new array; ``previous`` is not modified).
    """
    x = np.asarray(x, dtype=np.float64)
    previous = np.asarray(previous, dtype=np.float64)
    labels = np.asarray(labels)
    k = previous.shape[0]
    if labels.shape != (x.shape[0],) or (labels.size and (labels.min() < 0 or labels.max() >= k)):
        raise ValueError(f"labels must have shape ({x.shape[0]},) with values in [0, {k})")
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    sums = np.zeros_like(previous)
    np.add.at(sums, labels, x)
    out = previous.copy()
    filled = counts > 0
    out[filled] = sums[filled] / counts[filled, None]
    return out


def replay_centers(
    x: np.ndarray, initial: np.ndarray, history: np.ndarray
) -> np.ndarray:
    """Centers of the next iteration from the initial centers and the label history.

    Parameters
    ----------
    x : array_like, shape (n, d)
    initial : array_like, shape (k, d)
    history : array_like of int, shape (t, n)
        Labels the server sent after iterations 0..t-1.

    Returns
    -------
    numpy.ndarray, shape (k, d)
        ``c^t`` (``initial`` when ``t = 0``).
    """
    centers = np.array(initial, dtype=np.float64, copy=True)
    for labels in np.asarray(history).reshape(-1, np.shape(x)[0]):
        centers = update_centers(x, labels, centers)
    return centers


def initial_center_ids(seed: int, n: int, k: int) -> np.ndarray:
    """``init="samples"``: k distinct sample ids drawn by the server from the run seed.

    Each party's initial centers are its slices of these samples; the server knows
    the ids but not the values.

    Returns
    -------
    numpy.ndarray of int64, shape (k,)
    """
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got {k}")
    return generator(seed, "vertical", "init-ids").choice(n, size=k, replace=False).astype(np.int64)


def random_initial_centers(seed: int, party: int, k: int, dim: int) -> np.ndarray:
    """``init="random"``: party's centers drawn N(0, 1) per coordinate from the run seed.

    Meant for standardised features. Anyone who knows the run seed -- the server
    included -- can regenerate them: this is the "server knows the initial centers"
    threat scenario.

    Returns
    -------
    numpy.ndarray of float64, shape (k, dim)
    """
    return generator(seed, "vertical", "init-random", party).standard_normal((k, dim))


def party_initial_centers(
    x: np.ndarray, init: str, seed: int, party: int, k: int, center_ids: np.ndarray | None
) -> np.ndarray:
    """One party's initial center slice.

    Parameters
    ----------
    x : array_like, shape (n, d)
    init : {"samples", "random"}
    seed, party, k : int
    center_ids : array_like of int, shape (k,), or None
        Required for ``init="samples"``.

    Returns
    -------
    numpy.ndarray of float64, shape (k, d)
    """
    x = np.asarray(x, dtype=np.float64)
    if init == "samples":
        if center_ids is None or np.shape(center_ids) != (k,):
            raise ValueError(f"center_ids must have shape ({k},) for init='samples'")
        return x[np.asarray(center_ids, dtype=np.int64)].copy()
    if init == "random":
        return random_initial_centers(seed, party, k, x.shape[1])
    raise ValueError(f"init must be one of {INITS}, got {init!r}")


def lloyd(
    x: np.ndarray, initial: np.ndarray, iterations: int, stop_when_stable: bool = True
) -> list[np.ndarray]:
    """Centralised Lloyd's algorithm with the protocol's conventions (reference).

    Parameters
    ----------
    x : array_like, shape (n, d)
        Joined data.
    initial : array_like, shape (k, d)
    iterations : int
        Maximum number of assignments T >= 1.
    stop_when_stable : bool
        Stop after an assignment equal to the previous one.

    Returns
    -------
    list of numpy.ndarray of int64, shape (n,)
        The labels of every assignment.
    """
    centers = np.array(initial, dtype=np.float64, copy=True)
    history: list[np.ndarray] = []
    for _ in range(iterations):
        labels = assign(exact_squared_distances(x, centers))
        stable = bool(history) and np.array_equal(labels, history[-1])
        history.append(labels)
        if stable and stop_when_stable:
            break
        centers = update_centers(x, labels, centers)
    return history
