"""Norm clipping of client contributions.

Clipping bounds the norm of what one unit (a data point or a whole client) can
contribute to an aggregate; that bound is the sensitivity used to calibrate the
noise in :mod:`fedkmeans.privacy.mechanisms`. Every function returns a new array and
never modifies its input (:func:`clip_upper_triangles` with ``copy=False`` excepted;
:func:`clip_factors` only reads). ``bound = math.inf`` disables clipping (a copy is returned).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "clip_factors", "clip_l1", "clip_l1_nonnegative", "clip_l2", "clip_rows_l2",
    "clip_stacked", "clip_upper_triangles", "joint_clip_factors", "row_norms",
    "triangle_weights", "weighted_l2_norms",
]

_NORMS = ("l2", "l1", "l1_nonnegative")
_SHRINK = 1.0 - 4.0 * np.finfo(np.float64).eps
#: Rows at a time of :func:`row_norms` (a temporary that stays small).
_NORM_ROWS = 2048
#: Rows squared at a time by :func:`weighted_l2_norms` (a buffer that stays in cache).
_SQUARE_ROWS = 64


def _validate_bound(bound: float) -> float:
    try:
        value = float(bound)
    except (TypeError, ValueError):
        raise ValueError(f"bound must be a number in (0, inf], got {bound!r}") from None
    if not value > 0.0:  # also rejects NaN
        raise ValueError(f"bound must be in (0, inf], got {bound!r}")
    return value


def _as_float_copy(x: ArrayLike) -> NDArray[np.floating]:
    arr = np.array(x, copy=True)
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError("x must contain only finite values (no NaN or inf)")
    return arr


def _norms(
    flat: NDArray[np.floating], kind: str, weights: NDArray[np.floating] | None = None
) -> NDArray[np.floating]:
    if kind == "l2":
        if weights is None:
            return row_norms(flat)
        return weighted_l2_norms(flat, weights)
    return np.sum(np.abs(flat), axis=1)


def row_norms(x: NDArray[np.floating]) -> NDArray[np.floating]:
    """The l2 norm of every row of ``x`` (n, d), shape (n,).

    ``sqrt(sum(x * x, axis=1))``, the same bits as ``numpy.linalg.norm(x, axis=1)``,
    :data:`_NORM_ROWS` rows at a time: no (n, d) temporary, whose fresh pages cost
    more than the arithmetic on a node's points. Every norm of a point in the package
    (the clip to the data radius, the estimate round's norm bins, a node's kept norms,
    the clipping here) comes from it.
    """
    out = np.empty(x.shape[0])
    for start in range(0, x.shape[0], _NORM_ROWS):
        block = x[start:start + _NORM_ROWS]
        np.sqrt(np.add.reduce(block * block, axis=1), out=out[start:start + block.shape[0]])
    return out


def weighted_l2_norms(
    flat: NDArray[np.floating], weights: NDArray[np.floating]
) -> NDArray[np.floating]:
    """``sqrt(sum_l w_l x_il^2)`` of every row, shape (m,).

    The rows are squared :data:`_SQUARE_ROWS` at a time into one small buffer and
    reduced by a matrix-vector product: no (m, n) temporary (a fresh one costs more
    in page faults than the arithmetic on a large stack of triangles), and about
    half the time of a three-operand ``einsum``.

    Parameters
    ----------
    flat : ndarray of shape (m, n)
    weights : ndarray of shape (n,)
        Non-negative (:func:`triangle_weights`).
    """
    out = np.empty(flat.shape[0])
    buffer = np.empty((min(_SQUARE_ROWS, flat.shape[0]), flat.shape[1]))
    for start in range(0, flat.shape[0], _SQUARE_ROWS):
        block = flat[start:start + _SQUARE_ROWS]
        squares = np.square(block, out=buffer[:block.shape[0]])
        np.matmul(squares, weights, out=out[start:start + block.shape[0]])
    return np.sqrt(out, out=out)


def clip_factors(
    flat: NDArray[np.floating], bound: float, kind: str = "l2",
    weights: NDArray[np.floating] | None = None,
) -> NDArray[np.floating]:
    """Per-row factors that clip each row of ``flat`` to ``kind``-norm <= ``bound``.

    ``factor[i] = min(1, bound / norm(flat[i]))``, shrunk by a few ulps where
    rounding leaves the product ``factor[i] * flat[i]`` outside the ball, so that
    every product satisfies ``norm <= bound`` in floating point. ``flat`` is only
    read (a read-only view of a message is fine): the sum of the clipped rows is
    ``factor @ flat``.

    Parameters
    ----------
    flat : ndarray of shape (m, n)
    bound : float
        In ``(0, inf]``.
    kind : {"l2", "l1"}
    weights : ndarray of shape (n,), optional
        Squared-entry weights of a weighted l2 norm (:func:`triangle_weights`).

    Returns
    -------
    ndarray of shape (m,)
        Exactly 1 for rows already inside the ball.
    """
    bound = _validate_bound(bound)
    factor = np.ones(flat.shape[0])
    if math.isinf(bound) or flat.size == 0:
        return factor
    norms = _norms(flat, kind, weights)
    still = np.flatnonzero(norms > bound)
    factor[still] = bound / norms[still]
    for _ in range(8):
        if still.size == 0:
            break
        still = still[_norms(flat[still] * factor[still, None], kind, weights) > bound]
        factor[still] *= _SHRINK
    return factor


def joint_clip_factors(
    rows: list[NDArray[np.floating]], scales: list[float], bound: float,
    nonnegative: list[bool],
) -> tuple[NDArray[np.floating], list[NDArray[np.floating]]]:
    """One factor per client that clips a group of statistics together.

    Each statistic ``x_i`` (rows of shape (m, ...)) is first set to ``max(x_i, 0)``
    where ``nonnegative[i]`` (counts), then the client's whitened value
    ``(x_1 / scales[0], x_2 / scales[1], ...)`` is clipped to l2 norm ``bound``
    (:func:`clip_factors`). Clamping to a convex cone and then scaling radially is the
    projection onto the cone intersected with the ball, so the map is 1-Lipschitz in
    the whitened l2 norm, and every statistic of a client is scaled by one factor
    (:mod:`fedkmeans.privacy.budget`, "Joint statistics").

    Parameters
    ----------
    rows : list of ndarray of shape (m, ...)
        The group's statistics, one row per client (only read).
    scales : list of float
        Positive divisors of each statistic in the joint norm (noise stds).
    bound : float
        In ``(0, inf]``.
    nonnegative : list of bool

    Returns
    -------
    factors : ndarray of shape (m,)
    prepared : list of ndarray
        The rows, clamped where ``nonnegative`` (new arrays there, the inputs otherwise).
    """
    prepared = [np.maximum(r, 0.0) if nonneg else np.asarray(r, dtype=np.float64)
                for r, nonneg in zip(rows, nonnegative, strict=True)]
    m = prepared[0].shape[0]
    whitened = np.concatenate(
        [r.reshape(m, -1) / s for r, s in zip(prepared, scales, strict=True)], axis=1)
    return clip_factors(whitened, bound, "l2"), prepared


def _clip_flat(
    flat: NDArray[np.floating], bound: float, kind: str,
    weights: NDArray[np.floating] | None = None,
) -> NDArray[np.floating]:
    """Clip each row of ``flat`` (shape ``(m, n)``) in place to ``kind``-norm <= bound.

    Rows already inside the ball are left bit-exact; the others are multiplied by
    their :func:`clip_factors`.
    """
    if kind == "l1_nonnegative":
        np.maximum(flat, 0.0, out=flat)
        kind = "l1"
    factor = clip_factors(flat, bound, kind, weights)
    if np.any(factor != 1.0):  # one pass; a factor of exactly 1 keeps a row bit-exact
        flat *= factor[:, None]
    return flat


def clip_stacked(x: ArrayLike, bound: float, norm: str) -> NDArray[np.floating]:
    """Clip each leading slice ``x[i]`` independently (per-client clipping).

    Parameters
    ----------
    x : array_like, shape (m, ...)
        Stacked contributions, one slice per unit (e.g. one reply per client).
    bound : float
        Norm bound in ``(0, inf]``; ``inf`` disables clipping.
    norm : {"l2", "l1", "l1_nonnegative"}
        Norm of each whole slice (``"l2"`` is the Frobenius norm of a matrix slice).
        ``"l1_nonnegative"`` first sets negative entries to 0, then clips in l1.

    Returns
    -------
    ndarray, shape (m, ...)
        Float copy with ``norm(out[i]) <= bound`` for every ``i``.
    """
    bound = _validate_bound(bound)
    if norm not in _NORMS:
        raise ValueError(f"norm must be one of {_NORMS}, got {norm!r}")
    arr = _as_float_copy(x)
    if arr.ndim < 1:
        raise ValueError(f"x must have at least 1 dimension (m, ...), got ndim={arr.ndim}")
    flat = arr.reshape(arr.shape[0], -1)
    return _clip_flat(flat, bound, norm).reshape(arr.shape)


def _clip_whole(x: ArrayLike, bound: float, kind: str) -> NDArray[np.floating]:
    bound = _validate_bound(bound)
    arr = _as_float_copy(x)
    return _clip_flat(arr.reshape(1, -1), bound, kind).reshape(arr.shape)


def clip_rows_l2(x: ArrayLike, bound: float, *, copy: bool = True) -> NDArray[np.floating]:
    """Scale every row of ``x`` to l2 norm at most ``bound``.

    Parameters
    ----------
    x : array_like, shape (n, d)
        One row per data point.
    bound : float
        l2 bound in ``(0, inf]``.
    copy : bool
        ``False``: clip ``x`` in place (the same bits). Only for a finite float64 array
        the caller owns (the public simulation's freshly drawn points).

    Returns
    -------
    ndarray, shape (n, d)
        Float copy (``x`` itself without ``copy``); rows with norm <= bound are
        unchanged bit for bit, others are rescaled onto the sphere of radius ``bound``.
    """
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"x must be 2-dimensional (n, d), got ndim={arr.ndim}")
    if copy:
        return clip_stacked(arr, bound, "l2")
    if not isinstance(x, np.ndarray) or x.dtype != np.float64:
        raise ValueError("copy=False needs a float64 ndarray")
    return _clip_flat(x, _validate_bound(bound), "l2")


def clip_l2(x: ArrayLike, bound: float) -> NDArray[np.floating]:
    """Scale the whole array (as one vector; Frobenius for matrices) to l2 norm <= bound.

    Parameters
    ----------
    x : array_like, any shape
    bound : float
        l2 bound in ``(0, inf]``.

    Returns
    -------
    ndarray, same shape as ``x``
    """
    return _clip_whole(x, bound, "l2")


def clip_l1(x: ArrayLike, bound: float) -> NDArray[np.floating]:
    """Scale the whole array (as one vector) to l1 norm <= bound.

    Parameters
    ----------
    x : array_like, any shape
    bound : float
        l1 bound in ``(0, inf]``.

    Returns
    -------
    ndarray, same shape as ``x``
    """
    return _clip_whole(x, bound, "l1")


def clip_l1_nonnegative(x: ArrayLike, bound: float) -> NDArray[np.floating]:
    """Set negative entries to 0, then scale the whole array to l1 norm <= bound.

    Meant for histograms and counts, which cannot be negative: a unit's count vector
    with entries in ``[0, inf)`` and total at most ``bound`` has l1 sensitivity
    ``bound`` under add/remove of that unit.

    Parameters
    ----------
    x : array_like, any shape
    bound : float
        l1 bound in ``(0, inf]``.

    Returns
    -------
    ndarray, same shape as ``x``
        Non-negative float copy.
    """
    return _clip_whole(x, bound, "l1_nonnegative")


def triangle_weights(dim: int) -> NDArray[np.floating]:
    """Weights that turn the l2 norm of an upper triangle into the Frobenius norm.

    For a symmetric ``A`` with upper triangle ``t`` (row-major, diagonal included,
    as :func:`fedkmeans.clustering.client_stats.upper_triangle` gives it),
    ``||A||_F^2 = sum_i A_ii^2 + 2 sum_{i<j} A_ij^2 = sum_l w_l t_l^2`` with ``w_l = 1``
    on the diagonal and 2 off it.

    Returns
    -------
    ndarray of shape (dim (dim + 1) / 2,)
    """
    rows, cols = np.triu_indices(dim)
    return np.where(rows == cols, 1.0, 2.0)


def clip_upper_triangles(
    triangles: ArrayLike, bound: float, dim: int, *, copy: bool = True
) -> NDArray[np.floating]:
    """Clip symmetric matrices, given as upper triangles, to Frobenius norm ``bound``.

    Equal to clipping each full matrix with :func:`clip_stacked` (``"l2"``) and
    taking its upper triangle again, without forming the ``(m, dim, dim)`` stack: the
    norm is :func:`triangle_weights`-weighted, and the same few-ulp shrink makes the
    computed norm ``<= bound`` hold in floating point.

    Parameters
    ----------
    triangles : array_like, shape (m, dim (dim + 1) / 2)
    bound : float
        In ``(0, inf]``.
    dim : int
    copy : bool
        ``False``: clip ``triangles`` in place. Only for a float64 array the caller
        owns and has already checked to be finite (the server's fold of validated
        replies, a node's own statistics).

    Returns
    -------
    ndarray, shape (m, dim (dim + 1) / 2)
    """
    bound = _validate_bound(bound)
    if copy:
        arr = _as_float_copy(triangles)
    else:
        arr = triangles
        if not isinstance(arr, np.ndarray) or arr.dtype != np.float64:
            raise ValueError("copy=False needs a float64 ndarray")
    size = dim * (dim + 1) // 2
    if arr.ndim != 2 or arr.shape[1] != size:
        raise ValueError(f"triangles must have shape (m, {size}), got {arr.shape}")
    return _clip_flat(arr, bound, "l2", triangle_weights(dim))
