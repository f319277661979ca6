"""Calibrate noise scales so that a planned set of releases meets an (epsilon, delta) budget.

Each planned release gets a share ``w_i / sum(w)`` of the budget. A scalar ``c`` maps
shares to standalone epsilons ``epsilon_i = c * epsilon * w_i / sum(w)``; each
release's noise is set so that it alone would be ``epsilon_i``-DP (Laplace
``b_i = sensitivity / epsilon_i``; Gaussian ``sigma_i`` from the analytic Gaussian at
``(epsilon_i, delta)``). ``c`` is then found by a bracketing root search on ``log c``
(coarse PLD, discretization 1e-3) so that the PLD-composed epsilon of the whole plan
(:class:`PrivacyLedger`) is just below the target, and verified with the default
discretization 1e-4. Larger ``c`` means less noise and a larger composed epsilon.

Each mechanism's standalone calibration and ``dp_event`` come from its spec
(:mod:`fedkmeans.privacy.registry`).

Why the search is written here rather than taken from a library: any other root finder
stops at another ``c`` inside the accepted band, so every noise scale, hence every
reproducible result and ledger, changes. ``dp_accounting.mechanism_calibration.
calibrate_dp_mechanism`` has its own bracketing and stopping rule, and no
coarse-search-then-verify step at two discretisations. ``scipy.optimize.brentq`` on the
same ``g`` (bracket stepped out from ``log c = 0``, ``xtol=1e-3``) was measured: its
scales also pass the fine-PLD check, but they differ from these by up to 0.29 % on the
plans of ``tests/library/test_calibration.py`` (never bit-equal) and by 0.14 % on the
acceptance configs, where the released centers move by up to 2.4e-4 (datapoint level)
and 1.6e-4 (client level, 200 clients x 50 points) with ``privacy.reproducible-noise``.
It also needs 6-8 PLD evaluations where this search needs 2-5. The accountant the search
queries is dp_accounting's PLD; ``tests/library/test_calibration.py`` pins the resulting scales.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fedkmeans.arguments import validate_delta
from fedkmeans.privacy.accountant import PrivacyLedger, Release
from fedkmeans.privacy.analytic_gaussian import analytic_gaussian_sigma
from fedkmeans.privacy.registry import MECHANISMS, mechanism

__all__ = ["PlannedRelease", "analytic_gaussian_sigma", "calibrate"]

#: Largest finite target epsilon (the config's and the audit's too): beyond it the noise
#: is negligible and the PLD of near-zero noise needs huge discretisations (the cost
#: grows about linearly with epsilon); use inf for a non-private run.
MAX_FINITE_EPSILON = 100.0
_SEARCH_DISCRETIZATION = 1e-3
_FINAL_DISCRETIZATION = 1e-4
_LOWER_FRACTION = 0.99  # accept a composed epsilon in [0.99, 1] * target
_SEARCH_BAND = (0.993, 0.999)  # band aimed at with the coarse (more pessimistic) PLD


@dataclass(frozen=True)
class PlannedRelease:
    """A release whose noise scale is still to be calibrated.

    Parameters
    ----------
    stage, mechanism, sensitivity, sampling_rate, group
        As in :class:`fedkmeans.privacy.accountant.Release`.
    weight : float
        Relative share of the budget, finite and > 0.
    """

    stage: str
    mechanism: str
    sensitivity: float
    weight: float
    sampling_rate: float = 1.0
    group: str = ""

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            mechanism(self.mechanism)  # raises: names the known mechanisms
        if not (
            isinstance(self.weight, (int, float, np.floating, np.integer))
            and 0.0 < self.weight < math.inf
        ):
            raise ValueError(f"weight must be finite and > 0, got {self.weight!r}")
        object.__setattr__(self, "weight", float(self.weight))
        # Validate the remaining fields with the same rules as Release.
        self.to_release(0.0)

    def to_release(self, noise_scale: float) -> Release:
        """Return the :class:`Release` with this plan's fields and ``noise_scale``."""
        return Release(
            self.stage,
            self.mechanism,
            self.sensitivity,
            noise_scale,
            self.sampling_rate,
            self.group,
        )


def _releases(
    planned: Sequence[PlannedRelease], epsilon: float, delta: float, c: float
) -> list[Release]:
    total = sum(p.weight for p in planned)
    out = []
    for p in planned:
        eps_i = c * epsilon * p.weight / total
        scale = mechanism(p.mechanism).standalone_scale(eps_i, delta, p.sensitivity)
        out.append(p.to_release(scale))
    return out


def _composed_epsilon(releases: list[Release], delta: float, discretization: float,
                      prior: Sequence[Release] = ()) -> float:
    acc = PrivacyLedger()
    for r in (*prior, *releases):
        acc.record(r)
    return acc.get_epsilon(delta, discretization=discretization)


def calibrate(
    planned: Sequence[PlannedRelease], *, epsilon: float, delta: float, verify: bool = True,
    prior: Sequence[Release] = (), search_discretization: float = _SEARCH_DISCRETIZATION,
    search_band: tuple[float, float] = _SEARCH_BAND,
) -> list[Release]:
    """Noise scales for ``planned`` so that the whole plan is ``(epsilon, delta)``-DP.

    Parameters
    ----------
    planned : sequence of PlannedRelease
        Non-empty plan; groups and sampling rates follow the rules of
        :class:`PrivacyLedger` (a sampled group with several releases must be
        all-Gaussian).
    epsilon : float
        Target epsilon in ``(0, MAX_FINITE_EPSILON]`` (100); ``math.inf`` gives noise
        scale 0 everywhere.
        (Larger finite targets are rejected: the PLD of nearly noiseless mechanisms
        gets too large to build.)
    delta : float
        Target delta in (0, 1).
    verify : bool, default True
        False stops after the coarse search (PLD discretization 1e-3), without the
        check against the fine PLD: noise scales within about 1 % of the verified
        ones, for :mod:`fedkmeans.tuning`'s simulations only; never for a release.
    prior : sequence of Release
        Releases already made (the estimate round), composed with the plan: the
        whole run, ``prior`` and ``planned`` together, meets ``(epsilon, delta)``.
    search_discretization : float, default 1e-3
        PLD discretization of the coarse search. :mod:`fedkmeans.tuning` passes 1e-2
        with ``verify=False``: 3-4 x faster, and on the paper mixture's plans (both
        levels, epsilon 1 and 3.13, T = 0-2, every candidate split) its scales are
        within 0.5 % of those at 1e-3.
    search_band : (float, float), default (0.993, 0.999)
        The coarse search stops at a composed epsilon in ``search_band`` times the
        target. :mod:`fedkmeans.tuning` passes a wider band with ``verify=False`` (its
        simulations need the scales to about 1 %), which saves a PLD evaluation in
        about one calibration of two; the verified calibration keeps the default.

    Returns
    -------
    list of Release
        Same order and fields as ``planned``, with noise scales such that
        ``PrivacyLedger.get_epsilon(delta)`` (discretization 1e-4) lies in
        ``[0.99 * epsilon, epsilon]`` (when ``verify``).
    """
    validate_delta(delta)
    if not (
        isinstance(epsilon, (int, float, np.floating))
        and (0.0 < epsilon <= MAX_FINITE_EPSILON or epsilon == math.inf)
    ):
        raise ValueError(
            f"epsilon must be in (0, {MAX_FINITE_EPSILON:g}] or math.inf, got {epsilon!r}")
    low, high = search_band
    if not 0.0 < low < high <= 1.0:
        raise ValueError(f"search_band must satisfy 0 < low < high <= 1, got {search_band!r}")
    planned = list(planned)
    if not planned:
        raise ValueError("planned must be a non-empty sequence of PlannedRelease")
    if not all(isinstance(p, PlannedRelease) for p in planned):
        raise ValueError("planned must contain only PlannedRelease objects")
    if math.isinf(epsilon):
        return [p.to_release(0.0) for p in planned]
    # Validates groups (e.g. Laplace in a sampled multi-release group) up front.
    check = PrivacyLedger()
    for r in prior:
        check.record(r)
    for p in planned:
        check.record(p.to_release(1.0))

    def eps_at(log_c: float, disc: float) -> float:
        try:
            rel = _releases(planned, epsilon, delta, math.exp(log_c))
            value = _composed_epsilon(rel, delta, disc, prior)
        except (FloatingPointError, OverflowError, ValueError):
            return math.inf  # numerically out of reach: treat as "too little noise"
        return value if math.isfinite(value) else math.inf

    log_c = _search(lambda x: eps_at(x, search_discretization), epsilon, search_band)
    if log_c is None:
        raise _unreachable(epsilon, delta)
    if not verify:
        return _releases(planned, epsilon, delta, math.exp(log_c))
    # Verify with the fine PLD (usually already inside the band; the coarse PLD is the
    # more pessimistic one); otherwise correct log c assuming epsilon ~ c.
    for _ in range(30):
        fine = eps_at(log_c, _FINAL_DISCRETIZATION)
        if _LOWER_FRACTION * epsilon <= fine <= epsilon:
            return _releases(planned, epsilon, delta, math.exp(log_c))
        if fine == 0.0 or not math.isfinite(fine):
            break
        log_c -= min(max(math.log(fine / (0.995 * epsilon)), -1.0), 1.0)
    raise _unreachable(epsilon, delta)


def _unreachable(epsilon: float, delta: float) -> ValueError:
    return ValueError(
        f"epsilon={epsilon!r} cannot be reached for this plan at delta={delta!r}: the "
        "PLD accountant cannot certify a composed epsilon in [0.99 * epsilon, epsilon] "
        "for any noise scale"
    )


def _search(eps_at: Callable[[float], float], epsilon: float,
            band: tuple[float, float] = _SEARCH_BAND) -> float | None:
    """Find ``log c`` with ``eps_at(log c)`` in the search band around ``epsilon``.

    Works on ``g(x) = log eps_at(x) - log target``, which is nearly linear in ``x = log
    c`` (Laplace epsilon is exactly proportional to ``c``): secant extrapolation until
    the target is bracketed, then the Illinois variant of regula falsi in the bracket.
    Returns None if no such ``log c`` exists in ``[-log 1e8, log 1e8]``.
    """
    band_lo, band_hi = (b * epsilon for b in band)
    log_mid = math.log(0.5 * (band_lo + band_hi))
    g_lo, g_hi = math.log(band_lo) - log_mid, math.log(band_hi) - log_mid
    limit = math.log(1e8)

    def g(x: float) -> float:
        e = eps_at(x)
        return -1e3 if e <= 0.0 else min(math.log(e) - log_mid, 1e3)

    ends: dict[str, list[float]] = {}  # "lo": eps <= band_hi, "hi": eps > band_hi
    x, slope, last_side = 0.0, 1.0, ""
    prev: tuple[float, float] | None = None
    for _ in range(80):
        gx = g(x)
        if g_lo <= gx <= g_hi:
            return x
        side = "lo" if gx < g_lo else "hi"
        if len(ends) < 2:
            if prev is not None and abs(gx) < 1e2 and abs(prev[1]) < 1e2:
                slope = min(max((gx - prev[1]) / (x - prev[0]), 0.2), 5.0)
            prev = (x, gx)
        elif side == last_side:  # Illinois: down-weight the end kept twice in a row
            other = "hi" if side == "lo" else "lo"
            ends[other][1] *= 0.5
        ends[side], last_side = [x, gx], side
        if len(ends) < 2:
            x -= min(max(gx / slope, -3.0), 3.0)
            if abs(x) > limit:
                return None
            continue
        (xl, gl), (xh, gh) = ends["lo"], ends["hi"]
        if xh - xl < 1e-12:
            return None
        margin = 0.01 * (xh - xl)
        x = min(max(xl - gl * (xh - xl) / (gh - gl), xl + margin), xh - margin)
    return None
