"""Honest privacy accounting of the randomized distance reports.

Unit of privacy: one sample's feature slice at one party (the privacy of a whole
record across H parties composes the H parties' reports). Neighbouring relation:
replace that slice by any other (local DP), i.e. any true level may become any other.

Per value. A report mechanism is a transition matrix ``P[v, y]``. Its local-DP
epsilon is ``max_{v, v', y} ln(P[v, y] / P[v', y])`` (:func:`worst_case_epsilon`) and,
for a target epsilon, the smallest delta with ``(eps, delta)``-LDP is the largest
hockey-stick divergence over pairs of inputs (:func:`hockey_stick_delta`). Both take a
dense matrix or a :class:`ReportMechanism`, which stores the two mechanisms of the app
in O(Q) memory (a dense Q x Q matrix is 800 MB at the config's largest Q = 10,000):

* Q-ary GRR at epsilon: worst-case epsilon = epsilon exactly.
* Gap-RR at epsilon with Q >= 4: an output outside another input's answer set has
  probability 0 under that input, so the worst-case epsilon is **infinite**, and
  inputs whose answer sets are disjoint (far-apart levels) give delta = 1 at every
  epsilon -- no (eps, delta) guarantee at all. "Each report is epsilon-LDP" holds
  only among inputs sharing an answer set, i.e. only for Q = 3.

Per sample. Each iteration a party reports k values of every sample (one of them
the fused 0, still randomized); over T iterations that is ``m = k T`` reports of
the same slice, so the per-sample guarantee is their composition:

* basic composition: ``m * eps`` (:func:`basic_composition`);
* advanced composition (Dwork-Rothblum-Vadhan): ``sqrt(2 m ln(1/delta')) eps +
  m eps (e^eps - 1)`` at delta' (:func:`advanced_composition`);
* the optimal composition of m k-ary RRs (:func:`rr_epsilon`): ``dp-accounting``'s
  privacy loss distribution (the library the horizontal accountant uses), exact here
  because every loss is a multiple of eps (:func:`rr_pld`).

For Gap-RR these are the *claimed* numbers (as if each report were a 3-ary RR at
epsilon); its *actual* per-sample epsilon is infinite. Not covered by any of these:
the centers a party uses depend on all samples (through the means), the data-derived
discretisation scale is released in clear (use a public bound; the app then reports
``epsilon_per_sample = inf``), and the labels are post-processing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fedkmeans.vertical.defence import gap_answer_sets, gap_of, truth_probability

__all__ = [
    "ReportMechanism",
    "advanced_composition",
    "basic_composition",
    "consistent_inputs",
    "hockey_stick_delta",
    "per_sample_account",
    "rr_delta",
    "rr_epsilon",
    "rr_pld",
    "worst_case_epsilon",
]


@dataclass(frozen=True)
class ReportMechanism:
    """A report mechanism over Q levels stored in O(Q s) memory.

    ``P[v, y] = floor + excess[v, j]`` if ``y == support[v, j]``, else ``floor``: a
    constant background plus s non-negative excess entries per input. Q-ary GRR is
    ``floor = q``, ``support[v] = [v]``, ``excess = p - q`` (s = 1); Gap-RR is
    ``floor = 0`` with its answer sets as the support (s = 3).

    Attributes
    ----------
    floor : float
        >= 0.
    support : numpy.ndarray of int64, shape (Q, s)
        Distinct outputs in [0, Q) per row.
    excess : numpy.ndarray of float64, shape (Q, s)
        >= 0; every row of P sums to 1.
    """

    floor: float
    support: np.ndarray
    excess: np.ndarray

    def __post_init__(self) -> None:
        support = np.asarray(self.support, dtype=np.int64)
        excess = np.asarray(self.excess, dtype=np.float64)
        q = support.shape[0] if support.ndim == 2 else 0
        if support.ndim != 2 or q < 2 or excess.shape != support.shape:
            raise ValueError("support and excess must share a shape (Q, s) with Q >= 2")
        if support.min() < 0 or support.max() >= q:
            raise ValueError(f"support must hold outputs in [0, {q})")
        ordered = np.sort(support, axis=1)
        if np.any(ordered[:, 1:] == ordered[:, :-1]):
            raise ValueError("support must list distinct outputs per row")
        if not (math.isfinite(self.floor) and self.floor >= 0) or np.any(excess < 0):
            raise ValueError("floor and excess must be >= 0")
        if not np.allclose(self.floor * q + excess.sum(axis=1), 1.0):
            raise ValueError("every row of the mechanism must sum to 1")
        object.__setattr__(self, "floor", float(self.floor))
        object.__setattr__(self, "support", support)
        object.__setattr__(self, "excess", excess)

    @property
    def levels(self) -> int:
        """Q, the number of inputs (and outputs)."""
        return int(self.support.shape[0])

    @classmethod
    def gap_rr(cls, levels: int, epsilon: float, gap: int) -> ReportMechanism:
        """Gap-RR (:func:`fedkmeans.vertical.defence.gap_rr`): answer sets, no floor."""
        support = gap_answer_sets(np.arange(levels), levels, gap)
        p = truth_probability(epsilon, 3)
        excess = np.where(support == np.arange(levels)[:, None], p, (1.0 - p) / 2.0)
        return cls(0.0, support, excess)

    @classmethod
    def grr(cls, levels: int, epsilon: float) -> ReportMechanism:
        """Q-ary GRR (:func:`fedkmeans.vertical.defence.grr`): floor q, diagonal p - q."""
        p = truth_probability(epsilon, levels)
        q = (1.0 - p) / (levels - 1)
        return cls(q, np.arange(levels)[:, None], np.full((levels, 1), p - q))

    def dense(self) -> np.ndarray:
        """The Q x Q transition matrix (for small Q and tests)."""
        matrix = np.full((self.levels, self.levels), self.floor)
        rows = np.repeat(np.arange(self.levels), self.support.shape[1])
        np.add.at(matrix, (rows, self.support.ravel()), self.excess.ravel())
        return matrix


def _validate_matrix(matrix: np.ndarray) -> np.ndarray:
    p = np.asarray(matrix, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] < 2 or np.any(p < 0) or not np.allclose(p.sum(axis=1), 1.0):
        raise ValueError("matrix must be a row-stochastic (inputs, outputs) array, >= 2 inputs")
    return p


def worst_case_epsilon(matrix: np.ndarray | ReportMechanism) -> float:
    """Local-DP epsilon of a mechanism: ``max ln(P[v, y] / P[v', y])``.

    For a :class:`ReportMechanism`, column y holds ``floor + excess`` for the inputs
    whose support contains y and ``floor`` for the others, so its largest entry is
    ``floor + max excess`` and its smallest ``floor`` unless all Q inputs contain y
    (then ``floor + min excess``). O(Q s) time and memory.

    Parameters
    ----------
    matrix : array_like, shape (inputs, outputs), or ReportMechanism
        Row-stochastic transition matrix.

    Returns
    -------
    float
        ``inf`` if some output is possible under one input and impossible under another.
    """
    if isinstance(matrix, ReportMechanism):
        q, cols, vals = matrix.levels, matrix.support.ravel(), matrix.excess.ravel()
        high, low = np.zeros(q), np.full(q, np.inf)
        np.maximum.at(high, cols, vals)
        np.minimum.at(low, cols, vals)
        low = np.where(np.bincount(cols, minlength=q) == q, low, 0.0)
        high, low = matrix.floor + high, matrix.floor + low
    else:
        p = _validate_matrix(matrix)
        high, low = p.max(axis=0), p.min(axis=0)
    used = high > 0
    high, low = high[used], low[used]
    if np.any(low == 0):
        return math.inf
    return float(np.max(np.log(high / low)))


def _dense_hockey_stick(p: np.ndarray, factor: float) -> float:
    best = 0.0
    for row in p:  # one input at a time: O(Q^2) memory (the matrix), not O(Q^3)
        best = max(best, float(np.clip(row - factor * p, 0.0, None).sum(axis=1).max()))
    return best


def _structured_hockey_stick(mech: ReportMechanism, factor: float) -> float:
    """Hockey-stick delta of a :class:`ReportMechanism` in O(Q s^2 c) memory.

    For inputs v != v' and ``e = factor >= 1``, ``sum_y (P[v, y] - e P[v', y])_+``
    has no positive term outside v's support (there ``P[v, y] = floor <= P[v', y]``),
    so it is ``sum_j (floor + excess[v, j] - e (floor + S[v', support[v, j]]))_+``
    with ``S[v', y]`` v''s excess at y (0 off its support). If v' shares no output
    with v's support this is ``far[v] = sum_j (floor + excess[v, j] - e floor)_+``,
    reached whenever fewer than Q inputs share an output with v; the inputs that do
    share one (at most s c per input, c = the most inputs containing one output: 1
    for GRR, <= 5 for Gap-RR) are evaluated pair by pair.
    """
    q, s = mech.support.shape
    own = mech.floor + mech.excess                                   # P[v, support[v, j]]
    far = np.clip(own - factor * mech.floor, 0.0, None).sum(axis=1)
    rows, cols = np.repeat(np.arange(q), s), mech.support.ravel()
    members = rows[np.argsort(cols, kind="stable")]                  # inputs, by output
    count = np.bincount(cols, minlength=q)
    first = np.cumsum(count) - count
    v_parts, w_parts = [], []
    for offset in range(int(count.max())):
        has = count[cols] > offset
        v_parts.append(rows[has])
        w_parts.append(members[first[cols[has]] + offset])
    v, w = np.concatenate(v_parts), np.concatenate(w_parts)
    keys = np.unique(v[v != w] * q + w[v != w])
    v, w = keys // q, keys % q
    best = 0.0
    if keys.size:
        match = mech.support[w][:, None, :] == mech.support[v][:, :, None]   # (pairs, s, s)
        other = mech.floor + (match * mech.excess[w][:, None, :]).sum(axis=2)
        best = float(np.clip(own[v] - factor * other, 0.0, None).sum(axis=1).max())
    sharing = np.bincount(v, minlength=q) + 1                        # v itself included
    if np.any(sharing < q):
        best = max(best, float(far[sharing < q].max()))
    return best


def hockey_stick_delta(matrix: np.ndarray | ReportMechanism, epsilon: float) -> float:
    """Smallest delta for which one report is (epsilon, delta)-LDP.

    ``max_{v != v'} sum_y max(0, P[v, y] - e^eps P[v', y])``. A dense matrix is
    scanned one input at a time (O(Q^2) memory, O(Q^3) time: small Q only); a
    :class:`ReportMechanism` visits only the pairs of inputs sharing an output
    (O(Q) time and memory for GRR and Gap-RR).

    Parameters
    ----------
    matrix : array_like, shape (inputs, outputs), or ReportMechanism
    epsilon : float
        >= 0.

    Returns
    -------
    float
        In [0, 1]; 1 means two inputs are told apart with certainty.
    """
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    if isinstance(matrix, ReportMechanism):
        return _structured_hockey_stick(matrix, math.exp(epsilon))
    return _dense_hockey_stick(_validate_matrix(matrix), math.exp(epsilon))


def consistent_inputs(matrix: np.ndarray, reports: np.ndarray) -> np.ndarray:
    """Inputs that could have produced every one of several reports of one value.

    What an infinite per-value epsilon means in practice: a server that sees m
    reports of the same true level (e.g. while the centers do not move) keeps only
    the inputs under which every report has positive probability. For Gap-RR a single
    report leaves at most 5 of the Q levels, and two different reports at most 2; for
    GRR every level stays possible.

    Parameters
    ----------
    matrix : array_like, shape (Q, Q)
        Transition matrix of the mechanism.
    reports : array_like of int, shape (m, ...)
        m reports of each of the values in ``...``.

    Returns
    -------
    numpy.ndarray of bool, shape (..., Q)
        ``out[..., v]`` is True iff input v is consistent with all m reports.
    """
    possible = _validate_matrix(matrix) > 0                 # possible[v, y]
    reports = np.asarray(reports, dtype=np.int64)
    out = np.ones(reports.shape[1:] + (possible.shape[0],), dtype=bool)
    for report in reports:
        out &= possible.T[report]
    return out


def _validate_composition(epsilon: float, m: int) -> None:
    if not (isinstance(epsilon, (int, float, np.floating)) and 0 < epsilon < math.inf):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
    if not (isinstance(m, (int, np.integer)) and m >= 1):
        raise ValueError(f"m (number of reports) must be an integer >= 1, got {m!r}")


def basic_composition(epsilon: float, m: int) -> float:
    """``m * epsilon``: m epsilon-LDP reports of one sample."""
    _validate_composition(epsilon, m)
    return float(m * epsilon)


def advanced_composition(epsilon: float, m: int, delta: float) -> float:
    """Advanced composition theorem (Dwork, Rothblum, Vadhan 2010).

    m epsilon-DP mechanisms compose to ``(eps', delta)``-DP with
    ``eps' = sqrt(2 m ln(1/delta)) eps + m eps (e^eps - 1)`` (for any delta in (0, 1)).
    This bound can exceed ``m * eps`` (then basic composition is the better one).

    Returns
    -------
    float
    """
    _validate_composition(epsilon, m)
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return float(math.sqrt(2 * m * math.log(1 / delta)) * epsilon
                 + m * epsilon * math.expm1(epsilon))


@lru_cache(maxsize=64)
def rr_pld(epsilon: float, outputs: int, m: int):
    """``dp-accounting``'s privacy loss distribution of m composed k-ary RRs.

    One k-ary RR at epsilon, for its worst pair of inputs (v, v') (every pair is
    alike), has privacy loss ``+eps`` (output v: ``p = e^eps / (e^eps + k - 1)``
    under v, ``q = 1 / (e^eps + k - 1)`` under v'), ``-eps`` (output v', probability
    q) or 0 (any other output, ``(k - 2) q``). Every loss is a multiple of eps, so a
    PLD discretised at interval eps holds it without rounding; the library composes
    the m copies (its pessimistic tail truncation moves at most 1e-15 of mass to an
    infinite loss). Memory O(m).

    Not through ``PLDAccountant`` (the horizontal accountant's route): in
    dp-accounting 0.6.0 it composes a ``RandomizedResponseDpEvent`` once whatever its
    count (30 reports at eps = 1, k = 3 give 0.99998 instead of 26.667), and its fixed
    1e-4 discretisation would round each loss up. The project's ``PrivacyLedger``
    knows only the Gaussian and Laplace mechanisms.

    Parameters
    ----------
    epsilon : float
        Per-report epsilon, > 0.
    outputs : int
        k >= 2 (3 for Gap-RR's claim, Q for GRR).
    m : int
        Number of reports, >= 1.

    Returns
    -------
    dp_accounting.pld.privacy_loss_distribution.PrivacyLossDistribution
        Cached: sweeps ask for the same (epsilon, k, m) many times.
    """
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

    if not (isinstance(outputs, (int, np.integer)) and outputs >= 2):
        raise ValueError(f"outputs must be an integer >= 2, got {outputs!r}")
    _validate_composition(epsilon, m)
    p, q = truth_probability(epsilon, outputs), 1.0 / (math.exp(epsilon) + outputs - 1)
    losses = {1: p, -1: q}                       # loss in units of epsilon -> probability
    if outputs > 2:
        losses[0] = (outputs - 2) * q
    single = PrivacyLossDistribution.create_from_rounded_probability(
        losses, 0.0, float(epsilon), pessimistic_estimate=True)
    return single.self_compose(int(m))


def rr_delta(epsilon: float, outputs: int, m: int, total_epsilon: float) -> float:
    """Delta of m composed k-ary RRs at ``total_epsilon``.

    ``delta(E) = E[(1 - e^{E - L})_+]`` over the composed loss L (:func:`rr_pld`),
    evaluated by ``dp-accounting``.

    Parameters
    ----------
    epsilon : float
        Per-report epsilon, > 0.
    outputs : int
        k >= 2 (3 for Gap-RR's claim, Q for GRR).
    m : int
        Number of reports.
    total_epsilon : float
        >= 0.

    Returns
    -------
    float
    """
    if not total_epsilon >= 0:
        raise ValueError(f"total_epsilon must be >= 0, got {total_epsilon!r}")
    return float(rr_pld(epsilon, outputs, m).get_delta_for_epsilon(float(total_epsilon)))


def rr_epsilon(epsilon: float, outputs: int, m: int, delta: float) -> float:
    """Smallest total epsilon with ``rr_delta <= delta`` (optimal composition).

    ``delta(E)`` is continuous and non-increasing, so ``scipy.optimize.brentq`` finds
    its crossing of ``delta`` in ``[0, m eps]`` (to 1e-10). The library's own
    ``get_epsilon_for_delta`` is not used: it sums ``e^{-L}``, which underflows for
    losses above about 745, and then answers the next multiple of eps (864 instead
    of 861.99 at eps = 3, k = 2, m = 300, delta = 0.01).

    Returns
    -------
    float
        In [0, m * epsilon]; ``m * epsilon`` (basic composition, valid at delta 0)
        when ``delta`` is below the PLD's truncated mass.
    """
    from scipy.optimize import brentq

    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    pld = rr_pld(epsilon, outputs, m)

    def excess(total: float) -> float:
        return float(pld.get_delta_for_epsilon(total)) - delta

    high = float(m * epsilon)
    if excess(0.0) <= 0:
        return 0.0
    if excess(high) > 0:
        return high
    return float(brentq(excess, 0.0, high, xtol=1e-10, rtol=1e-14))


def per_sample_account(
    *,
    mechanism: str,
    epsilon: float,
    levels: int,
    l_ratio: float,
    reports: int,
    delta: float,
) -> dict:
    """Per-sample epsilon of ``reports`` randomized reports of one sample's slice.

    Memory O(Q + m): the per-value numbers come from a :class:`ReportMechanism`,
    the composition from :func:`rr_pld`.

    Parameters
    ----------
    mechanism : {"gap-rr", "grr"}
    epsilon : float
        Per-value epsilon the mechanism is run with.
    levels : int
        Q.
    l_ratio : float
        Gap-RR's gap ratio.
    reports : int
        Number of reports of the sample (k per iteration, times iterations, times
        parties for a whole record).
    delta : float
        For the advanced and exact numbers.

    Returns
    -------
    dict
        ``claimed`` (each report taken as the k-ary RR it claims to be: k = 3 for
        Gap-RR, Q for GRR): ``per_value``, ``outputs``, ``basic``, ``advanced``,
        ``exact``; ``actual``: ``per_value`` (from the transition matrix),
        ``delta_at_claimed`` (per value), ``basic`` and ``exact`` (infinite when the
        per-value epsilon is).
    """
    if mechanism == "gap-rr":
        mech, outputs = ReportMechanism.gap_rr(levels, epsilon, gap_of(levels, l_ratio)), 3
    elif mechanism == "grr":
        mech, outputs = ReportMechanism.grr(levels, epsilon), levels
    else:
        raise ValueError(f"mechanism must be 'gap-rr' or 'grr', got {mechanism!r}")
    claimed = {
        "per_value": float(epsilon),
        "outputs": outputs,
        "basic": basic_composition(epsilon, reports),
        "advanced": advanced_composition(epsilon, reports, delta),
        "exact": rr_epsilon(epsilon, outputs, reports, delta),
    }
    true_value = worst_case_epsilon(mech)
    actual = {
        "per_value": true_value,
        "delta_at_claimed": hockey_stick_delta(mech, epsilon),
        "basic": reports * true_value,
        "exact": claimed["exact"] if math.isfinite(true_value) else math.inf,
    }
    return {"mechanism": mechanism, "reports": int(reports), "delta": float(delta),
            "claimed": claimed, "actual": actual}
