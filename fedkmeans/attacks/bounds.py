"""Statistics of a privacy audit: Clopper-Pearson bounds and the epsilon lower bound.

A threshold test separates releases of two neighbouring worlds (IN / OUT). With 95%
(two-sided) Clopper-Pearson upper bounds ``FPR+`` and ``FNR+`` of its error rates::

    eps_LB = max(0, ln((1 - delta - FPR+) / FNR+), ln((1 - delta - FNR+) / FPR+))

Any (eps, delta)-DP mechanism has ``eps_LB <= eps`` except with probability about 5%
(Jagielski, Ullman, Oprea 2020; Nasr et al. 2021). The threshold is chosen on
separate selection trials, so the evaluation counts are unbiased.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import beta, binomtest

from fedkmeans.arguments import validate_delta, validate_int

__all__ = ["choose_threshold", "clopper_pearson", "epsilon_lower_bound"]


# -- statistics: Clopper-Pearson and the epsilon lower bound ---------------------------
def clopper_pearson(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval for a binomial proportion.

    Parameters
    ----------
    successes : int
        Observed count, in [0, n].
    n : int
        Number of trials, >= 1.
    confidence : float
        In (0, 1); each side gets ``(1 - confidence) / 2``.

    Returns
    -------
    (lower, upper) : tuple of float
    """
    n = validate_int("n", n, 1)
    if isinstance(successes, bool) or not isinstance(successes, (int, np.integer)) or not (
        0 <= successes <= n
    ):
        raise ValueError(f"successes must be an integer in [0, n={n}], got {successes!r}")
    if not (isinstance(confidence, float) and 0 < confidence < 1):
        raise ValueError(f"confidence must be a float in (0, 1), got {confidence!r}")
    # scipy's exact interval: brentq on the binomial tails (the beta quantiles to ~1e-12)
    ci = binomtest(int(successes), n).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def _cp_upper(successes: np.ndarray, n: int, confidence: float) -> np.ndarray:
    alpha = 1.0 - confidence
    k = np.asarray(successes, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        upper = beta.ppf(1 - alpha / 2, k + 1, n - k)
    return np.where(k >= n, 1.0, upper)


def _bound_from_rates(fpr_upper, fnr_upper, delta: float):
    fpr_upper, fnr_upper = np.asarray(fpr_upper, float), np.asarray(fnr_upper, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(
            (1 - delta - fpr_upper > 0) & (fnr_upper > 0),
            np.log((1 - delta - fpr_upper) / fnr_upper), -np.inf,
        )
        b = np.where(
            (1 - delta - fnr_upper > 0) & (fpr_upper > 0),
            np.log((1 - delta - fnr_upper) / fpr_upper), -np.inf,
        )
    return np.maximum(0.0, np.maximum(a, b))


def epsilon_lower_bound(
    false_positives: int, n_out: int, false_negatives: int, n_in: int, delta: float,
    confidence: float = 0.95,
) -> float:
    """eps_LB from the error counts of one threshold test (module docstring).

    Parameters
    ----------
    false_positives : int
        OUT trials the test called IN, in [0, n_out].
    n_out : int
        OUT (canary absent) trials, >= 1.
    false_negatives : int
        IN trials the test called OUT, in [0, n_in].
    n_in : int
        IN (canary present) trials, >= 1.
    delta : float
        The mechanism's delta, in (0, 1).
    confidence : float
        Of each two-sided Clopper-Pearson interval (0.95).

    Returns
    -------
    float
        ``max(0, ln((1 - delta - FPR+) / FNR+), ln((1 - delta - FNR+) / FPR+))`` with the
        upper Clopper-Pearson bounds ``FPR+`` and ``FNR+``.
    """
    delta = validate_delta(delta)
    fpr_upper = clopper_pearson(false_positives, n_out, confidence)[1]
    fnr_upper = clopper_pearson(false_negatives, n_in, confidence)[1]
    return float(_bound_from_rates(fpr_upper, fnr_upper, delta))


def choose_threshold(
    scores_in: np.ndarray, scores_out: np.ndarray, delta: float, confidence: float
) -> float:
    """The threshold that maximises eps_LB on (selection) scores; "score > t" says IN."""
    values = np.unique(np.concatenate([scores_in, scores_out]))
    if values.size == 1:
        return float(values[0])
    cuts = (values[:-1] + values[1:]) / 2.0
    if cuts.size > 4000:  # keep both tails fully, thin the middle
        idx = np.unique(np.concatenate([
            np.arange(500), np.linspace(0, cuts.size - 1, 3000).astype(int),
            np.arange(cuts.size - 500, cuts.size),
        ]))
        cuts = cuts[idx]
    s_in, s_out = np.sort(scores_in), np.sort(scores_out)
    fn = np.searchsorted(s_in, cuts, side="right")  # IN trials with score <= t
    fp = s_out.size - np.searchsorted(s_out, cuts, side="right")
    bounds = _bound_from_rates(
        _cp_upper(fp, s_out.size, confidence), _cp_upper(fn, s_in.size, confidence), delta
    )
    return float(cuts[int(np.argmax(bounds))])
