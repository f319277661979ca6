"""Honest privacy accounting of the randomized distance reports.

Unit of privacy: one sample's feature slice at one party (the privacy of a whole
record across H parties composes the H parties' reports). Neighbouring relation:
replace that slice by any other (local DP), i.e. any true level may become any other.

Per value. A report mechanism is a transition matrix ``P[v, y]``. Its local-DP
epsilon is ``max_{v, v', y} ln(P[v, y] / P[v', y])`` (:func:`worst_case_epsilon`) and,
for a target epsilon, the smallest delta with ``(eps, delta)``-LDP is the largest
hockey-stick divergence over pairs of inputs (:func:`hockey_stick_delta`).

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
* the exact optimum for m k-ary RRs (:func:`rr_epsilon`, a closed-form privacy-loss
  distribution: each report's loss is +eps, -eps or 0), cross-checked against
  ``dp-accounting``'s PLD (:func:`pld_epsilon`).

For Gap-RR these are the *claimed* numbers (as if each report were a 3-ary RR at
epsilon); its *actual* per-sample epsilon is infinite. Not covered by any of these:
the centers a party uses depend on all samples (through the means), the data-derived
discretisation scale is released in clear (use a public bound), and the labels are
post-processing.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.special import gammaln

from fedkmeans.vertical.defence import gap_of, gap_rr_matrix, grr_matrix

__all__ = [
    "advanced_composition",
    "basic_composition",
    "consistent_inputs",
    "hockey_stick_delta",
    "per_sample_account",
    "pld_epsilon",
    "rr_delta",
    "rr_epsilon",
    "worst_case_epsilon",
]


def _check_matrix(matrix: np.ndarray) -> np.ndarray:
    p = np.asarray(matrix, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] < 2 or np.any(p < 0) or not np.allclose(p.sum(axis=1), 1.0):
        raise ValueError("matrix must be a row-stochastic (inputs, outputs) array, >= 2 inputs")
    return p


def worst_case_epsilon(matrix: np.ndarray) -> float:
    """Local-DP epsilon of a mechanism: ``max ln(P[v, y] / P[v', y])``.

    Parameters
    ----------
    matrix : array_like, shape (inputs, outputs)
        Row-stochastic transition matrix.

    Returns
    -------
    float
        ``inf`` if some output is possible under one input and impossible under another.
    """
    p = _check_matrix(matrix)
    used = p.max(axis=0) > 0
    high, low = p.max(axis=0)[used], p.min(axis=0)[used]
    if np.any(low == 0):
        return math.inf
    return float(np.max(np.log(high / low)))


def hockey_stick_delta(matrix: np.ndarray, epsilon: float) -> float:
    """Smallest delta for which one report is (epsilon, delta)-LDP.

    ``max_{v != v'} sum_y max(0, P[v, y] - e^eps P[v', y])``.

    Parameters
    ----------
    matrix : array_like, shape (inputs, outputs)
    epsilon : float
        >= 0.

    Returns
    -------
    float
        In [0, 1]; 1 means two inputs are told apart with certainty.
    """
    p = _check_matrix(matrix)
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    gap = p[:, None, :] - math.exp(epsilon) * p[None, :, :]
    return float(np.clip(gap, 0.0, None).sum(axis=2).max())


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
    possible = _check_matrix(matrix) > 0                 # possible[v, y]
    reports = np.asarray(reports, dtype=np.int64)
    out = np.ones(reports.shape[1:] + (possible.shape[0],), dtype=bool)
    for report in reports:
        out &= possible.T[report]
    return out


def _check_composition(epsilon: float, m: int) -> None:
    if not (isinstance(epsilon, (int, float, np.floating)) and 0 < epsilon < math.inf):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
    if not (isinstance(m, (int, np.integer)) and m >= 1):
        raise ValueError(f"m (number of reports) must be an integer >= 1, got {m!r}")


def basic_composition(epsilon: float, m: int) -> float:
    """``m * epsilon``: m epsilon-LDP reports of one sample."""
    _check_composition(epsilon, m)
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
    _check_composition(epsilon, m)
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    return float(math.sqrt(2 * m * math.log(1 / delta)) * epsilon
                 + m * epsilon * math.expm1(epsilon))


def _rr_loss_grid(epsilon: float, outputs: int, m: int):
    """Log-probabilities and losses of m composed k-ary RRs (worst pair of inputs)."""
    if not (isinstance(outputs, (int, np.integer)) and outputs >= 2):
        raise ValueError(f"outputs must be an integer >= 2, got {outputs!r}")
    _check_composition(epsilon, m)
    denominator = math.exp(epsilon) + outputs - 1
    log_p = epsilon - math.log(denominator)      # report v (loss +eps)
    log_q = -math.log(denominator)               # report v' (loss -eps)
    a = np.arange(m + 1)[:, None]                # number of +eps reports
    b = np.arange(m + 1)[None, :]                # number of -eps reports
    c = m - a - b
    valid = c >= 0
    cc = np.where(valid, c, 0)
    log_prob = gammaln(m + 1) - gammaln(a + 1) - gammaln(b + 1) - gammaln(cc + 1) \
        + a * log_p + b * log_q
    if outputs > 2:
        log_prob = log_prob + cc * (math.log(outputs - 2) + log_q)
    else:
        valid &= c == 0
    return np.where(valid, log_prob, -np.inf), (a - b) * epsilon


def rr_delta(epsilon: float, outputs: int, m: int, total_epsilon: float) -> float:
    """Exact delta of m composed k-ary RRs at ``total_epsilon``.

    One k-ary RR at epsilon, for its worst pair of inputs (v, v'), has privacy loss
    ``+eps`` (output v, probability ``p = e^eps/(e^eps+k-1)``), ``-eps`` (output v',
    probability ``q = 1/(e^eps+k-1)``) or 0 (any other output, ``(k-2) q``). The m-fold
    loss is ``(a - b) eps`` with ``(a, b, m-a-b)`` multinomial, and
    ``delta(E) = E[(1 - e^{E - L})_+]``.

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
    log_prob, loss = _rr_loss_grid(epsilon, outputs, m)
    weight = -np.expm1(np.minimum(total_epsilon - loss, 0.0))
    return float(np.sum(np.exp(log_prob) * weight))


def rr_epsilon(epsilon: float, outputs: int, m: int, delta: float) -> float:
    """Smallest total epsilon with ``rr_delta <= delta`` (bisection to 1e-9).

    Returns
    -------
    float
        In [0, m * epsilon].
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    log_prob, loss = _rr_loss_grid(epsilon, outputs, m)
    prob = np.exp(log_prob)

    def excess(total: float) -> float:
        return float(np.sum(prob * -np.expm1(np.minimum(total - loss, 0.0)))) - delta

    low, high = 0.0, m * epsilon
    if excess(low) <= 0:
        return 0.0
    while high - low > 1e-9:
        mid = (low + high) / 2
        low, high = (mid, high) if excess(mid) > 0 else (low, mid)
    return high


@lru_cache(maxsize=256)
def pld_epsilon(
    epsilon: float, outputs: int, m: int, delta: float, discretization: float = 1e-4
) -> float:
    """Epsilon of m composed k-ary RRs from ``dp-accounting``'s PLD (pessimistic).

    Uses ``from_randomized_response`` with noise parameter ``k / (e^eps + k - 1)``,
    whose truth probability is ``e^eps / (e^eps + k - 1)``.

    Returns
    -------
    float
        An upper bound on :func:`rr_epsilon` (by at most about m x discretization).
        Cached: sweeps ask for the same (epsilon, k, m, delta) many times.
    """
    from dp_accounting.pld import privacy_loss_distribution as pld

    _check_composition(epsilon, m)
    noise = outputs / (math.exp(epsilon) + outputs - 1)
    single = pld.from_randomized_response(
        noise, outputs, pessimistic_estimate=True, value_discretization_interval=discretization
    )
    return float(single.self_compose(m).get_epsilon_for_delta(delta))


def per_sample_account(
    *,
    mechanism: str,
    epsilon: float,
    levels: int,
    l_ratio: float,
    reports: int,
    delta: float,
    use_pld: bool = True,
) -> dict:
    """Per-sample epsilon of ``reports`` randomized reports of one sample's slice.

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
        For the advanced / exact / PLD numbers.
    use_pld : bool
        Also run the dp-accounting PLD (about a second).

    Returns
    -------
    dict
        ``claimed`` (each report taken as the k-ary RR it claims to be: k = 3 for
        Gap-RR, Q for GRR): ``per_value``, ``basic``, ``advanced``, ``exact``,
        ``pld``; ``actual``: ``per_value`` (from the transition matrix),
        ``delta_at_claimed`` (per value), ``basic`` and ``exact`` (infinite when the
        per-value epsilon is).
    """
    if mechanism == "gap-rr":
        matrix, outputs = gap_rr_matrix(levels, epsilon, gap_of(levels, l_ratio)), 3
    elif mechanism == "grr":
        matrix, outputs = grr_matrix(levels, epsilon), levels
    else:
        raise ValueError(f"mechanism must be 'gap-rr' or 'grr', got {mechanism!r}")
    claimed = {
        "per_value": float(epsilon),
        "outputs": outputs,
        "basic": basic_composition(epsilon, reports),
        "advanced": advanced_composition(epsilon, reports, delta),
        "exact": rr_epsilon(epsilon, outputs, reports, delta),
        "pld": pld_epsilon(epsilon, outputs, reports, delta) if use_pld else None,
    }
    true_value = worst_case_epsilon(matrix)
    actual = {
        "per_value": true_value,
        "delta_at_claimed": hockey_stick_delta(matrix, epsilon),
        "basic": reports * true_value,
        "exact": claimed["exact"] if math.isfinite(true_value) else math.inf,
    }
    return {"mechanism": mechanism, "reports": int(reports), "delta": float(delta),
            "claimed": claimed, "actual": actual}
