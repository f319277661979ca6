"""The Gaussian mechanism's exact (epsilon, delta) curve (Balle & Wang 2018).

Pure SciPy: :func:`gaussian_epsilon` (epsilon of one release, used to check the PLD
accountant) and :func:`analytic_gaussian_sigma` (the smallest sigma for a standalone
(epsilon, delta), the Gaussian's calibration in :mod:`fedkmeans.privacy.registry`).
"""

from __future__ import annotations

import math

from fedkmeans.arguments import validate_delta

__all__ = ["analytic_gaussian_sigma", "gaussian_epsilon", "gaussian_log_delta"]


def gaussian_log_delta(epsilon: float, z: float) -> float:
    """Log-delta(epsilon) of the Gaussian mechanism with noise multiplier ``z``.

    Balle & Wang (2018), Thm. 8: ``delta = Phi(1/(2z) - eps z) - e^eps Phi(-1/(2z) -
    eps z)``, computed as ``a + log(1 - exp(b - a))`` with ``a, b`` the logs of the two
    terms (``scipy.special.log_ndtr``) to avoid cancellation and underflow.
    """
    from scipy.special import log_ndtr  # here: scipy.optimize/special cost ~0.4 s to import

    a = float(log_ndtr(0.5 / z - epsilon * z))
    b = float(epsilon + log_ndtr(-0.5 / z - epsilon * z))
    if b >= a:  # both terms equal to rounding: delta is far below any useful target
        return -1e4
    return a + math.log(-math.expm1(b - a))


def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """Exact epsilon of one Gaussian mechanism (analytic Gaussian, Balle & Wang 2018).

    Parameters
    ----------
    noise_multiplier : float
        ``sigma / sensitivity``, finite and > 0.
    delta : float
        Target delta in (0, 1).

    Returns
    -------
    float
        Smallest ``epsilon >= 0`` with ``delta(epsilon) <= delta``; independent of the
        PLD accountant and used to check it.
    """
    validate_delta(delta)
    if not (math.isfinite(noise_multiplier) and noise_multiplier > 0.0):
        raise ValueError(f"noise_multiplier must be finite and > 0, got {noise_multiplier!r}")
    z, log_target = float(noise_multiplier), math.log(delta)

    def f(eps: float) -> float:
        return gaussian_log_delta(eps, z) - log_target

    if f(0.0) <= 0.0:
        return 0.0
    hi = 1.0
    while f(hi) > 0.0:
        hi *= 2.0
    from scipy.optimize import brentq

    return float(brentq(f, 0.0, hi, xtol=1e-13, rtol=1e-13))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest Gaussian std that makes one release ``(epsilon, delta)``-DP.

    Analytic Gaussian mechanism (Balle & Wang 2018): solves ``Phi(1/(2z) - eps z) -
    e^eps Phi(-1/(2z) - eps z) = delta`` for the noise multiplier ``z`` (delta
    decreases in ``z``) and returns ``z * sensitivity``. Per unit sensitivity at
    ``delta = 1e-6``: eps 0.5 -> 8.058, 1 -> 4.225, 2 -> 2.231, 4 -> 1.194.

    Parameters
    ----------
    epsilon : float
        Finite and > 0.
    delta : float
        In (0, 1).
    sensitivity : float
        l2 sensitivity, finite and > 0.

    Returns
    -------
    float
        ``sigma``.
    """
    validate_delta(delta)
    if not (math.isfinite(epsilon) and epsilon > 0.0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
    if not (math.isfinite(sensitivity) and sensitivity > 0.0):
        raise ValueError(f"sensitivity must be finite and > 0, got {sensitivity!r}")
    log_target = math.log(delta)

    def f(log_z: float) -> float:
        return gaussian_log_delta(epsilon, math.exp(log_z)) - log_target

    lo, hi = 0.0, 0.0
    while f(lo) < 0.0:  # too much noise at z = e^lo
        lo -= 1.0
    while f(hi) > 0.0:  # too little noise at z = e^hi
        hi += 1.0
    if lo == hi:
        return math.exp(lo) * sensitivity
    from scipy.optimize import brentq

    return math.exp(brentq(f, lo, hi, xtol=1e-13, rtol=1e-13)) * sensitivity
