"""Local defences of one party's ``(n, k)`` distance report.

The pipeline (:func:`defend`) is fusion -> discretisation -> randomized response:

``"none"``
    the exact squared distances;
``"fusion"``
    each row minus its minimum (:func:`fuse`);
``"discretise"``
    fusion, then Q equal-width levels on ``[0, upper]`` (:func:`discretise`);
``"full"``
    fusion, discretisation, then Gap-RR (:func:`gap_rr`) -- or, with
    ``mechanism="grr"``, Q-ary generalised randomized response (:func:`grr`).

**What the defences do and do not protect** (measured in ``docs/vertical.md``):
fusion removes a per-sample constant, and every least-squares trilateration that
works with *differences* between the k distances of a sample is blind to such a
constant -- fusion alone stops nothing when the server knows the centers.
Discretisation bounds the precision. Gap-RR answers from an answer set that depends
on the true level (``{v-l, v, v+l}``): an output outside the answer set of another
input has probability 0 under that input, so for Q >= 4 the mechanism is **not**
epsilon-LDP over the Q levels (its worst-case privacy loss is infinite, see
:mod:`fedkmeans.vertical.accounting`); the Q-ary GRR is epsilon-LDP but flips the
truth far more often.

Randomness: one :class:`numpy.random.Generator` per party and iteration, which must
come from the party's own secret seed in a deployment (a server that can regenerate
the coins can undo the randomized response).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "DEFENCES",
    "MECHANISMS",
    "decode",
    "defend",
    "discretise",
    "fuse",
    "gap_answer_sets",
    "gap_of",
    "gap_rr",
    "gap_rr_matrix",
    "grr",
    "grr_matrix",
    "report_noise_variance",
    "truth_probability",
]

DEFENCES = ("none", "fusion", "discretise", "full")
MECHANISMS = ("gap-rr", "grr")


def fuse(distances: np.ndarray) -> np.ndarray:
    """Subtract each sample's smallest distance from its k distances.

    **The argmin of the sum over parties is unchanged.** Let ``D^h`` (n x k) be the
    report of party h and ``m^h_i = min_r D^h[i, r]``. The fused reports are
    ``F^h[i, r] = D^h[i, r] - m^h_i``, so for every sample i and center r

    ``sum_h F^h[i, r] = sum_h D^h[i, r] - M_i``  with  ``M_i = sum_h m^h_i``.

    ``M_i`` does not depend on r: subtracting it preserves the order of the k sums
    of row i, hence their argmin (and every tie). In floating point the two sums can
    differ by a few ulps, which can only flip exact near-ties.

    Parameters
    ----------
    distances : array_like, shape (n, k)

    Returns
    -------
    numpy.ndarray of float64, shape (n, k)
        Non-negative, with a 0 in every row (a new array).
    """
    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 2 or d.shape[1] < 1:
        raise ValueError(f"distances must have shape (n, k) with k >= 1, got {d.shape}")
    return d - d.min(axis=1, keepdims=True)


def _validate_levels(levels: int) -> None:
    if not (isinstance(levels, (int, np.integer)) and levels >= 2):
        raise ValueError(f"levels (Q) must be an integer >= 2, got {levels!r}")


def discretise(values: np.ndarray, levels: int, upper: float) -> np.ndarray:
    """Map values in ``[0, upper]`` to the nearest of Q equally spaced levels.

    Level j stands for ``j * upper / (Q - 1)``: level 0 is exactly 0 (the fused
    minimum of every row) and level Q-1 is ``upper``. Values outside are clipped.

    Parameters
    ----------
    values : array_like, shape (n, k)
        Fused distances (>= 0).
    levels : int
        Q >= 2.
    upper : float
        Upper end of the scale, >= 0 and finite (0: every value maps to level 0).

    Returns
    -------
    numpy.ndarray of int64, shape (n, k)
        Levels in [0, Q).
    """
    _validate_levels(levels)
    if not (math.isfinite(upper) and upper >= 0):
        raise ValueError(f"upper must be finite and >= 0, got {upper!r}")
    values = np.asarray(values, dtype=np.float64)
    if upper == 0:
        return np.zeros(values.shape, dtype=np.int64)
    scaled = np.clip(values / upper, 0.0, 1.0) * (levels - 1)
    return np.rint(scaled).astype(np.int64)


def decode(levels_array: np.ndarray, levels: int, upper: float) -> np.ndarray:
    """Values the server reads from reported levels: ``j * upper / (Q - 1)``.

    Parameters
    ----------
    levels_array : array_like of int, shape (n, k)
    levels : int
        Q >= 2.
    upper : float
        The party's scale, >= 0.

    Returns
    -------
    numpy.ndarray of float64, shape (n, k)
    """
    _validate_levels(levels)
    return np.asarray(levels_array, dtype=np.float64) * (float(upper) / (levels - 1))


def _validate_rr(levels: int, epsilon: float) -> None:
    if not (isinstance(levels, (int, np.integer)) and levels >= 3):
        raise ValueError(f"levels (Q) must be an integer >= 3 for randomized response, "
                         f"got {levels!r}")
    if not (isinstance(epsilon, (int, float, np.floating)) and 0 < epsilon < math.inf):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")


def gap_of(levels: int, l_ratio: float) -> int:
    """Gap l of Gap-RR: ``max(1, round(l_ratio * floor(Q / 3)))``.

    ``floor(Q/3)`` is the largest gap for which the three-level window of every
    level fits on the scale (see :func:`gap_answer_sets`), so ``l_ratio`` in (0, 1]
    spans the admissible gaps.

    Parameters
    ----------
    levels : int
        Q >= 3.
    l_ratio : float
        In (0, 1].

    Returns
    -------
    int
        l in [1, floor(Q/3)].
    """
    if not (isinstance(levels, (int, np.integer)) and levels >= 3):
        raise ValueError(f"levels (Q) must be an integer >= 3, got {levels!r}")
    if not (isinstance(l_ratio, (int, float, np.floating)) and 0 < l_ratio <= 1):
        raise ValueError(f"l_ratio must be in (0, 1], got {l_ratio!r}")
    return max(1, int(round(l_ratio * (levels // 3))))


def gap_answer_sets(true_levels: np.ndarray, levels: int, gap: int) -> np.ndarray:
    """The three-level answer set of each true level.

    Interior levels answer from ``{v - l, v, v + l}``. Edge cases: a level with
    ``v - l < 0`` answers from ``{v, v + l, v + 2l}``, one with ``v + l > Q - 1`` from
    ``{v - 2l, v - l, v}``; with ``l <= Q // 3`` these always fit, and a level is never
    at both edges.

    Parameters
    ----------
    true_levels : array_like of int, shape (...)
        In [0, Q).
    levels : int
        Q >= 3.
    gap : int
        l in [1, Q // 3].

    Returns
    -------
    numpy.ndarray of int64, shape (..., 3)
        Sorted answer sets; the true level is one of the three.
    """
    if not (isinstance(levels, (int, np.integer)) and levels >= 3):
        raise ValueError(f"levels (Q) must be an integer >= 3, got {levels!r}")
    if not (isinstance(gap, (int, np.integer)) and 1 <= gap <= levels // 3):
        raise ValueError(f"gap must be an integer in [1, {levels // 3}], got {gap!r}")
    v = np.asarray(true_levels, dtype=np.int64)
    if v.size and (v.min() < 0 or v.max() >= levels):
        raise ValueError(f"true levels must lie in [0, {levels})")
    low = np.where(v < gap, v, np.where(v > levels - 1 - gap, v - 2 * gap, v - gap))
    return low[..., None] + gap * np.arange(3)


def truth_probability(epsilon: float, outputs: int) -> float:
    """Probability of answering the truth in k-ary RR: ``e^eps / (e^eps + outputs - 1)``."""
    return math.exp(epsilon) / (math.exp(epsilon) + outputs - 1)


def gap_rr(
    true_levels: np.ndarray, levels: int, epsilon: float, gap: int, rng: np.random.Generator
) -> np.ndarray:
    """Gap randomized response.

    The true level is reported with probability ``e^eps / (e^eps + 2)``; otherwise
    one of the two other levels of its answer set (:func:`gap_answer_sets`), each
    with probability ``1 / (e^eps + 2)``. Within one answer set the likelihood ratio
    is at most ``e^eps``, but answer sets differ between inputs, so this is not
    epsilon-LDP over the Q levels unless Q = 3 (see :func:`gap_rr_matrix`).

    Parameters
    ----------
    true_levels : array_like of int, shape (...)
    levels : int
        Q >= 3.
    epsilon : float
        > 0, finite.
    gap : int
        l in [1, Q // 3] (:func:`gap_of`).
    rng : numpy.random.Generator

    Returns
    -------
    numpy.ndarray of int64, shape (...)
    """
    _validate_rr(levels, epsilon)
    sets = gap_answer_sets(true_levels, levels, gap)
    v = np.asarray(true_levels, dtype=np.int64)
    others = np.sort(np.where(sets == v[..., None], levels + 1, sets), axis=-1)[..., :2]
    u = rng.random(v.shape)
    p = truth_probability(epsilon, 3)
    q = (1.0 - p) / 2.0
    return np.where(u < p, v, np.where(u < p + q, others[..., 0], others[..., 1]))


def gap_rr_matrix(levels: int, epsilon: float, gap: int) -> np.ndarray:
    """Transition matrix ``P[v, y] = Pr[Gap-RR(v) = y]``.

    Returns
    -------
    numpy.ndarray of float64, shape (Q, Q)
        Rows sum to 1.
    """
    _validate_rr(levels, epsilon)
    p = truth_probability(epsilon, 3)
    matrix = np.zeros((levels, levels))
    for v, answer_set in enumerate(gap_answer_sets(np.arange(levels), levels, gap)):
        for y in answer_set:
            matrix[v, y] = p if y == v else (1.0 - p) / 2.0
    return matrix


def grr(
    true_levels: np.ndarray, levels: int, epsilon: float, rng: np.random.Generator
) -> np.ndarray:
    """Q-ary generalised randomized response (epsilon-LDP over the Q levels).

    Truth with probability ``e^eps / (e^eps + Q - 1)``, otherwise a uniformly random
    other level.

    Parameters
    ----------
    true_levels : array_like of int, shape (...)
    levels : int
        Q >= 3.
    epsilon : float
    rng : numpy.random.Generator

    Returns
    -------
    numpy.ndarray of int64, shape (...)
    """
    _validate_rr(levels, epsilon)
    v = np.asarray(true_levels, dtype=np.int64)
    if v.size and (v.min() < 0 or v.max() >= levels):
        raise ValueError(f"true levels must lie in [0, {levels})")
    keep = rng.random(v.shape) < truth_probability(epsilon, levels)
    other = (v + 1 + rng.integers(0, levels - 1, size=v.shape)) % levels
    return np.where(keep, v, other)


def grr_matrix(levels: int, epsilon: float) -> np.ndarray:
    """Transition matrix of :func:`grr`, shape (Q, Q)."""
    _validate_rr(levels, epsilon)
    p = truth_probability(epsilon, levels)
    matrix = np.full((levels, levels), (1.0 - p) / (levels - 1))
    np.fill_diagonal(matrix, p)
    return matrix


def report_noise_variance(
    *, defence: str, levels: int, epsilon: float, l_ratio: float, mechanism: str, scale: float
) -> float:
    """Mean squared error of one decoded report value, as the server can compute it.

    Rounding to a grid of step ``w = scale / (Q - 1)`` adds about ``w^2 / 12``; Gap-RR
    adds ``2 l^2 w^2 / (e^eps + 2)`` for an interior level (a lie moves it by +-l
    levels); Q-ary GRR adds ``w^2 Q (Q^2 - 1) / 6 / (e^eps + Q - 1)`` on average over
    uniformly spread levels. Everything here is public (the defence configuration
    and the scale the party sends), so a curious server can weight its estimates.

    Returns
    -------
    float
        0 for ``"none"`` and ``"fusion"``.
    """
    if defence in ("none", "fusion"):
        return 0.0
    step = float(scale) / (levels - 1)
    variance = step * step / 12.0
    if defence == "full":
        if mechanism == "grr":
            variance += step * step * levels * (levels * levels - 1) / 6.0 / (
                math.exp(epsilon) + levels - 1)
        else:
            gap = gap_of(levels, l_ratio)
            variance += 2.0 * gap * gap * step * step / (math.exp(epsilon) + 2.0)
    return variance


def defend(
    distances: np.ndarray,
    *,
    defence: str,
    rng: np.random.Generator | None = None,
    levels: int = 20,
    epsilon: float = 1.0,
    l_ratio: float = 0.5,
    mechanism: str = "gap-rr",
    upper: float | None = None,
) -> tuple[np.ndarray, float]:
    """Apply a party's defence to its distance matrix.

    Parameters
    ----------
    distances : array_like, shape (n, k)
        Exact squared distances of the party's slice.
    defence : {"none", "fusion", "discretise", "full"}
    rng : numpy.random.Generator, optional
        Required for ``"full"`` (the party's secret randomness).
    levels : int
        Q, for ``"discretise"`` (>= 2) and ``"full"`` (>= 3).
    epsilon : float
        Per-value epsilon of the randomized response.
    l_ratio : float
        Gap ratio of Gap-RR (:func:`gap_of`).
    mechanism : {"gap-rr", "grr"}
    upper : float, optional
        Public upper end of the discretisation scale (values above are clipped).
        None: the party's largest fused value -- sent to the server, which needs it
        to decode, so it releases the largest fused distance of one sample in clear.

    Returns
    -------
    report : numpy.ndarray, shape (n, k)
        float64 values (``"none"``, ``"fusion"``) or int64 levels.
    upper : float
        The scale the server decodes levels with (``nan`` for undiscretised reports).
    """
    if defence not in DEFENCES:
        raise ValueError(f"defence must be one of {DEFENCES}, got {defence!r}")
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
    d = np.asarray(distances, dtype=np.float64)
    if defence == "none":
        return d.copy(), math.nan
    fused = fuse(d)
    if defence == "fusion":
        return fused, math.nan
    scale = float(fused.max()) if upper is None else float(upper)
    discrete = discretise(fused, levels, scale)
    if defence == "discretise":
        return discrete, scale
    if rng is None:
        raise ValueError("rng is required for defence='full'")
    if mechanism == "grr":
        return grr(discrete, levels, epsilon, rng), scale
    return gap_rr(discrete, levels, epsilon, gap_of(levels, l_ratio), rng), scale
