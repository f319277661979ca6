"""Clustering evaluation metrics.

**These metrics are not private.** They are computed on the clients' raw data
(or on pooled data in simulation) and are meant for measuring an experiment,
not for release under the privacy guarantee.

The label-based scores (:func:`hungarian_accuracy`,
:func:`adjusted_rand_index`, :func:`normalized_mutual_info`,
:func:`fowlkes_mallows_index`) take a
contingency table, so a federated evaluation can have each client compute
:func:`contingency` locally and sum the tables before scoring.

Distances come from the package's one kernel, :mod:`fedkmeans.clustering.distances`;
the mutual information is scikit-learn's formula in NumPy (:func:`_mutual_info`), so
no run imports scikit-learn (and the pandas it loads) to score itself. ``scipy.stats``
and ``scipy.optimize`` are imported inside the functions that use them.
"""

from __future__ import annotations

import math
from math import isqrt

import numpy as np

__all__ = [
    "adjusted_rand_index",
    "assign",
    "contingency",
    "fowlkes_mallows_index",
    "hungarian_accuracy",
    "kmeans_cost",
    "normalized_mutual_info",
]

#: Upper bound on the number of entries of one chunk of the distance matrix.
_CHUNK_ENTRIES = 1 << 22

#: Most points a table may count for :func:`normalized_mutual_info`: scikit-learn's
#: ``mutual_info_score`` multiplies row and column totals in int64.
_NMI_MAX_POINTS = isqrt(np.iinfo(np.int64).max)


def _as_points(name: str, x: np.ndarray) -> np.ndarray:
    """Return ``x`` as a 2-D float64 array or raise ``ValueError`` naming it."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n, d), got shape {arr.shape}")
    return arr


def _validate_pair(x: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate points and centers for distance computations."""
    x = _as_points("x", x)
    centers = _as_points("centers", centers)
    if centers.shape[0] == 0:
        raise ValueError("centers must contain at least one center")
    if x.shape[1] != centers.shape[1]:
        raise ValueError(
            f"x and centers must have the same dimension, got x: {x.shape[1]}, "
            f"centers: {centers.shape[1]}"
        )
    return x, centers


def _row_blocks(x: np.ndarray, centers: np.ndarray):
    """Row slices of ``x`` whose distance matrix has at most ``_CHUNK_ENTRIES`` entries."""
    step = max(1, _CHUNK_ENTRIES // max(centers.shape[0], x.shape[1]))
    for start in range(0, x.shape[0], step):
        yield slice(start, start + step)


def assign(x: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Index of the nearest center of each point (ties: lowest index).

    :func:`fedkmeans.clustering.client_stats.nearest_center` (what the clients
    compute) in row chunks, on validated float64 inputs.

    Parameters
    ----------
    x : array_like, shape (n, d)
        Points.
    centers : array_like, shape (k, d)
        Centers.

    Returns
    -------
    numpy.ndarray of int64, shape (n,)
        Nearest-center indices in ``[0, k)``.
    """
    from fedkmeans.clustering.client_stats import nearest_center

    x, centers = _validate_pair(x, centers)
    out = np.empty(x.shape[0], dtype=np.int64)
    for rows in _row_blocks(x, centers):
        out[rows] = nearest_center(x[rows], centers)
    return out


def kmeans_cost(x: np.ndarray, centers: np.ndarray) -> float:
    """k-means cost per point: mean squared distance to the nearest center.

    Parameters
    ----------
    x : array_like, shape (n, d)
        Points, ``n >= 1``.
    centers : array_like, shape (k, d)
        Centers.

    Returns
    -------
    float
        ``(1/n) * sum_i min_j ||x[i] - centers[j]||^2`` (the paper's
        "cost per point").
    """
    from fedkmeans.clustering.distances import squared_distances

    x, centers = _validate_pair(x, centers)
    if x.shape[0] == 0:
        raise ValueError("x must contain at least one point")
    nearest = np.empty(x.shape[0], dtype=np.float64)
    for rows in _row_blocks(x, centers):  # no (n, k) matrix
        nearest[rows] = squared_distances(x[rows], centers).min(axis=1)
    return float(nearest.mean())


def _row_index(labels: np.ndarray, label_values: np.ndarray) -> np.ndarray:
    """Map each label to its row in ``label_values`` or raise if absent."""
    order = np.argsort(label_values, kind="stable")
    sorted_values = label_values[order]
    pos = np.searchsorted(sorted_values, labels)
    pos_clipped = np.minimum(pos, sorted_values.size - 1)
    found = (pos < sorted_values.size) & (sorted_values[pos_clipped] == labels)
    if not np.all(found):
        missing = int(np.count_nonzero(~found))
        raise ValueError(f"labels: {missing} label(s) are not in label_values")
    return order[pos_clipped]


def contingency(
    labels: np.ndarray,
    assignments: np.ndarray,
    n_clusters: int,
    label_values: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Contingency table of true labels against cluster assignments.

    Parameters
    ----------
    labels : array_like, shape (n,)
        True labels.
    assignments : array_like of int, shape (n,)
        Cluster index of each point in ``[0, n_clusters)``.
    n_clusters : int
        Number of clusters (columns), ``>= 1``.
    label_values : array_like, shape (n_labels,), optional
        Row order of the table; must be unique and contain every label. Pass
        the same values on every client so tables can be summed. Defaults to
        the sorted unique values of ``labels``.

    Returns
    -------
    label_values : numpy.ndarray, shape (n_labels,)
        The label of each row.
    table : numpy.ndarray of int64, shape (n_labels, n_clusters)
        ``table[r, c]`` = number of points with label ``label_values[r]``
        assigned to cluster ``c``.
    """
    labels = np.asarray(labels)
    assignments = np.asarray(assignments)
    if labels.ndim != 1 or assignments.ndim != 1 or labels.shape != assignments.shape:
        raise ValueError(
            f"labels and assignments must be 1-D of equal length, got shapes "
            f"{labels.shape} and {assignments.shape}"
        )
    is_int = isinstance(n_clusters, (int, np.integer)) and not isinstance(n_clusters, bool)
    if not is_int or n_clusters < 1:
        raise ValueError(f"n_clusters must be an integer >= 1, got {n_clusters!r}")
    if assignments.size and not np.issubdtype(assignments.dtype, np.integer):
        raise ValueError(f"assignments must be integers, got dtype {assignments.dtype}")
    if assignments.size and (assignments.min() < 0 or assignments.max() >= n_clusters):
        raise ValueError(f"assignments must lie in [0, n_clusters={n_clusters})")
    if label_values is None:
        values = np.unique(labels)
    else:
        values = np.asarray(label_values)
        if values.ndim != 1 or np.unique(values).size != values.size:
            raise ValueError("label_values must be a 1-D array of unique values")
    table = np.zeros((values.size, int(n_clusters)), dtype=np.int64)
    if labels.size:
        rows = _row_index(labels, values)
        np.add.at(table, (rows, assignments.astype(np.intp)), 1)
    return values, table


def _as_table(table: np.ndarray) -> np.ndarray:
    """Validate a contingency table (2-D, non-negative counts)."""
    arr = np.asarray(table)
    if arr.ndim != 2:
        raise ValueError(f"table must be a 2-D contingency table, got shape {arr.shape}")
    if arr.size and np.any(arr < 0):
        raise ValueError("table must contain non-negative counts")
    return arr


def hungarian_accuracy(table: np.ndarray) -> float:
    """Clustering accuracy under the best one-to-one label/cluster matching.

    Parameters
    ----------
    table : array_like, shape (n_labels, n_clusters)
        Contingency table; need not be square (unmatched rows/columns count
        as errors).

    Returns
    -------
    float
        ``max_matching sum(table[r, c]) / table.sum()`` in ``[0, 1]``.
    """
    arr = _as_table(table).astype(np.float64)
    total = arr.sum()
    if total <= 0:
        raise ValueError("table must have a positive total count")
    from scipy.optimize import linear_sum_assignment  # not at import: ~0.4 s

    rows, cols = linear_sum_assignment(arr, maximize=True)
    return float(arr[rows, cols].sum() / total)


def _pairs(counts: np.ndarray) -> int:
    """Sum of ``C(c, 2)`` over ``counts`` (exact integer arithmetic)."""
    return sum(int(c) * (int(c) - 1) // 2 for c in np.ravel(counts))


def _pair_counts(table: np.ndarray) -> tuple[int, int, int]:
    """Pairs of points together in a label and a cluster, in a label, in a cluster."""
    return _pairs(table), _pairs(table.sum(axis=1)), _pairs(table.sum(axis=0))


def adjusted_rand_index(table: np.ndarray) -> float:
    """Adjusted Rand index (Hubert & Arabie) from a contingency table.

    Parameters
    ----------
    table : array_like of int, shape (n_labels, n_clusters)
        Contingency table (e.g. summed over clients).

    Returns
    -------
    float
        Same value as ``sklearn.metrics.adjusted_rand_score`` on the
        underlying labelings; ``1.0`` for identical partitions (including
        the degenerate cases of fewer than two points).
    """
    arr = _as_table(table).astype(np.int64)
    n = int(arr.sum())
    if n < 2:
        return 1.0
    together_both, together_rows, together_cols = _pair_counts(arr)
    total_pairs = n * (n - 1) // 2
    expected = together_rows * together_cols / total_pairs
    maximum = (together_rows + together_cols) / 2.0
    if maximum == expected:
        return 1.0
    return float((together_both - expected) / (maximum - expected))


def fowlkes_mallows_index(table: np.ndarray) -> float:
    """Fowlkes–Mallows index from a contingency table.

    With ``TP = sum C(n_rc, 2)`` (pairs in one label and one cluster), ``P = sum_r
    C(a_r, 2)`` (pairs sharing a label) and ``Q = sum_c C(b_c, 2)`` (pairs sharing a
    cluster), the index is ``TP / sqrt(P Q)``: the geometric mean of the pair
    precision and recall, the value of ``sklearn.metrics.fowlkes_mallows_score`` on the
    underlying labelings (which takes the labelings, not the summed table), with its
    convention: ``0.0`` when no pair is together in both (``TP = 0``). Exact integer
    pair counts.

    Parameters
    ----------
    table : array_like of int, shape (n_labels, n_clusters)
        Contingency table (e.g. summed over clients).

    Returns
    -------
    float
        ``TP / sqrt(P Q)`` in ``[0, 1]``.
    """
    together_both, together_rows, together_cols = _pair_counts(
        _as_table(table).astype(np.int64))
    if together_both == 0:
        return 0.0
    return float(together_both / np.sqrt(float(together_rows) * float(together_cols)))


def normalized_mutual_info(table: np.ndarray) -> float:
    """Normalized mutual information (arithmetic mean) from a contingency table.

    The mutual information of the table (:func:`_mutual_info`, the value of
    ``sklearn.metrics.mutual_info_score`` on it), divided by the mean of the
    entropies of its margins (``scipy.stats.entropy``): the value of
    ``sklearn.metrics.normalized_mutual_info_score`` (default
    ``average_method="arithmetic"``) on the underlying labelings, with its
    conventions: ``1.0`` when both sides have a single non-empty group (or none),
    ``0.0`` when the mutual information is zero. That function takes the labelings
    themselves, which a federated evaluation never holds (only the summed table);
    empty rows and columns (a label or cluster no point has) are dropped, as they
    are absent from any labeling.

    Parameters
    ----------
    table : array_like of int, shape (n_labels, n_clusters)
        Contingency table (e.g. summed over clients); integer counts, possibly
        stored as floats, at most ``isqrt(2**63 - 1)`` (about 3.0e9) in total
        (scikit-learn multiplies row and column totals in int64).

    Returns
    -------
    float
        ``MI / ((H(labels) + H(clusters)) / 2)`` in ``[0, 1]``.
    """
    from scipy.stats import entropy

    arr = _as_table(table)
    if arr.size and not np.array_equal(arr, np.floor(arr)):
        raise ValueError("table must contain integer counts")
    if float(arr.sum()) > _NMI_MAX_POINTS:
        raise ValueError(
            f"table must count at most {_NMI_MAX_POINTS} points (int64 products of its "
            f"totals in scikit-learn), got {float(arr.sum()):.0f}"
        )
    arr = arr.astype(np.int64)
    arr = arr[arr.sum(axis=1) > 0][:, arr.sum(axis=0) > 0]
    if arr.shape[0] == arr.shape[1] and arr.shape[0] <= 1:
        return 1.0
    mi = _mutual_info(arr)
    if mi == 0.0:
        return 0.0
    return float(mi / ((entropy(arr.sum(axis=1)) + entropy(arr.sum(axis=0))) / 2.0))


def _mutual_info(table: np.ndarray) -> float:
    """Mutual information (nats) of an int64 contingency table, shape (labels, clusters).

    ``MI = sum_ij (n_ij / N) * (log(n_ij / N) - log(a_i b_j / N**2))`` over the non-zero
    cells, with row totals ``a_i``, column totals ``b_j`` and ``N`` points: the
    arithmetic of ``sklearn.metrics.mutual_info_score(None, None, contingency=table)``
    (scikit-learn 1.9, step by step, so the same bits: the outer products in int64,
    terms below machine epsilon set to 0, the sum clipped at 0); 0 when either side
    has a single group.
    """
    rows, cols = np.nonzero(table)
    cells = table[rows, cols]
    total = table.sum()
    row_totals, col_totals = table.sum(axis=1), table.sum(axis=0)
    if row_totals.size == 1 or col_totals.size == 1:
        return 0.0
    share = cells / total
    log_outer = (-np.log(row_totals.take(rows) * col_totals.take(cols))
                 + math.log(row_totals.sum()) + math.log(col_totals.sum()))
    terms = share * (np.log(cells) - math.log(total)) + share * log_outer
    terms = np.where(np.abs(terms) < np.finfo(terms.dtype).eps, 0.0, terms)
    return float(np.clip(terms.sum(), 0.0, None))
