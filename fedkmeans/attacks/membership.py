"""Membership inference: was a target (a point or a client) in the training data.

Two tests, each scored by ROC AUC and TPR at 1% and 0.1% FPR
(:func:`fedkmeans.attacks.scoring.membership_summary`):

* **Likelihood-ratio test on the released noisy sums/counts** (the strong test).
  The adversary of the DP definition knows every other unit and the target, so it
  knows the exact aggregate with (``a_in``) and without (``a_out``) the target, and it
  knows the noise distribution from the privacy ledger (``result.json`` ->
  ``privacy.releases``). By Neyman-Pearson the log-likelihood ratio
  ``log p(y | in) - log p(y | out)`` summed over every release is the most powerful
  score. Threat model 1 (*analyst*) applies it to the noisy releases; threat model 2
  (*curious server*) to the target client's own noise-free reply, where it is exact.
* **Cost-based test** of the published evaluation: is the target closer to the
  centers trained with it than to centers trained without it?
  ``score = d(x, reference) - d(x, observed)`` with ``d`` the squared distance to the
  nearest center and ``reference`` centers trained without the target (a shadow run).
  Without a reference (population test), ``score = -d(x, observed)`` compares members
  with fresh points from the same distribution.
"""

from __future__ import annotations

import numpy as np

from fedkmeans.clustering.client_stats import upper_triangle
from fedkmeans.clustering.distances import squared_distances
from fedkmeans.privacy import registry

__all__ = ["gaussian_llr", "laplace_llr", "release_llr", "cost_scores", "lira_scores"]


def _flat_trials(name: str, y: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    y = np.asarray(y, dtype=np.float64)
    if y.shape == shape:
        y = y[None]
    if y.shape[1:] != shape:
        raise ValueError(f"{name} must have shape {shape} or (trials, *{shape}), got {y.shape}")
    return y.reshape(y.shape[0], -1)


def _means(mean_in: np.ndarray, mean_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(mean_in, dtype=np.float64)
    b = np.asarray(mean_out, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(
            f"mean_in and mean_out must have the same shape, got {a.shape} and {b.shape}"
        )
    return a, b


def _validate_scale(name: str, scale: float) -> float:
    if not (np.isfinite(scale) and scale >= 0.0):
        raise ValueError(f"{name} must be finite and >= 0, got {scale!r}")
    return float(scale)


def gaussian_llr(
    y: np.ndarray, mean_in: np.ndarray, mean_out: np.ndarray, sigma: float
) -> np.ndarray:
    """Log-likelihood ratio of ``y ~ N(mean_in, sigma^2 I)`` against ``N(mean_out, ...)``.

    Parameters
    ----------
    y : ndarray of shape mean.shape or (trials, *mean.shape)
        Observed releases.
    mean_in, mean_out : ndarray
        Exact aggregate with and without the target.
    sigma : float
        Noise standard deviation, >= 0. ``0`` (no noise) returns
        ``||y - mean_out||^2 - ||y - mean_in||^2``, the limit of the ratio up to the
        positive factor ``1 / (2 sigma^2)`` (same ordering, hence same ROC).

    Returns
    -------
    ndarray of shape (trials,)
    """
    mean_in, mean_out = _means(mean_in, mean_out)
    sigma = _validate_scale("sigma", sigma)
    flat = _flat_trials("y", y, mean_in.shape)
    a, b = mean_in.ravel(), mean_out.ravel()
    # ||y-b||^2 - ||y-a||^2 = 2 <y, a-b> + ||b||^2 - ||a||^2, stable for large y.
    value = 2.0 * (flat @ (a - b)) + b @ b - a @ a
    return value if sigma == 0.0 else value / (2.0 * sigma**2)


def laplace_llr(y: np.ndarray, mean_in: np.ndarray, mean_out: np.ndarray, b: float) -> np.ndarray:
    """Log-likelihood ratio for i.i.d. Laplace noise of scale ``b`` (``b = 0``: unscaled).

    Per changed coordinate ``|y - out| - |y - in| = |D| (2 t - 1)`` with ``D = in - out``
    and ``t = clip((y - out) / D, 0, 1)``: the same function, computed so that its two
    atoms (``y`` beyond both means) are exactly ``-|D|`` and ``+|D|`` whatever the bits of
    ``y``. The textbook floating-point form lets rounding leak the low-order bits of the
    release into the score (see :mod:`fedkmeans.experiment.audit`, ``test="float"``).
    """
    mean_in, mean_out = _means(mean_in, mean_out)
    b = _validate_scale("b", b)
    flat = _flat_trials("y", y, mean_in.shape)
    changed = np.flatnonzero(mean_in.ravel() != mean_out.ravel())
    if changed.size == 0:
        return np.zeros(flat.shape[0])
    a, o = mean_in.ravel()[changed], mean_out.ravel()[changed]
    gap = a - o
    t = np.clip((flat[:, changed] - o) / gap, 0.0, 1.0)
    value = (np.abs(gap) * (2.0 * t - 1.0)).sum(axis=1)
    return value if b == 0.0 else value / b


#: The log-likelihood ratio of noise with log-density ``-|x|^p / (p s^p)``, by p.
_LLR_OF_ORDER = {2: gaussian_llr, 1: laplace_llr}


def release_llr(
    mechanism: str,
    noise_scale: float,
    y: np.ndarray,
    mean_in: np.ndarray,
    mean_out: np.ndarray,
    *,
    symmetric: bool = False,
) -> np.ndarray:
    """Log-likelihood ratio of one release with the ledger's mechanism and noise scale.

    Parameters
    ----------
    mechanism : str
        A name of :data:`fedkmeans.privacy.registry.MECHANISMS` (its ``order`` picks
        the ratio: 2 quadratic, 1 absolute).
    noise_scale : float
        Gaussian sigma or Laplace b from the ledger (0 = released without noise).
    y : ndarray of shape mean.shape or (trials, *mean.shape)
    mean_in, mean_out : ndarray
    symmetric : bool
        The release is a symmetric matrix with symmetric noise: only the upper
        triangle is used.

    Returns
    -------
    ndarray of shape (trials,)
    """
    if symmetric:
        y, mean_in, mean_out = (upper_triangle(v) for v in (y, mean_in, mean_out))
    return _LLR_OF_ORDER[registry.mechanism(mechanism).order](
        y, mean_in, mean_out, noise_scale)


def cost_scores(
    points: np.ndarray, centers: np.ndarray, reference_centers: np.ndarray | None = None
) -> np.ndarray:
    """Cost-based membership scores (high = member).

    Parameters
    ----------
    points : ndarray of shape (n, d)
        Candidate targets.
    centers : ndarray of shape (k, d) or (n, k, d)
        The observed model (one per candidate if 3-D).
    reference_centers : ndarray of shape (k, d) or (n, k, d), optional
        A model trained without the candidate.

    Returns
    -------
    ndarray of shape (n,)
        ``d(x, reference) - d(x, centers)``, or ``-d(x, centers)`` without reference.
    """
    x = np.asarray(points, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"points must have shape (n, d), got {x.shape}")

    def dist(c: np.ndarray, name: str) -> np.ndarray:
        c = np.asarray(c, dtype=np.float64)
        if c.ndim == 2 and c.shape[1] == x.shape[1]:
            return squared_distances(x, c).min(axis=-1)
        if c.ndim == 3 and c.shape[0] == x.shape[0] and c.shape[2] == x.shape[1]:
            return squared_distances(x[:, None, :], c).min(axis=-1)[:, 0]
        raise ValueError(
            f"{name} must have shape (k, {x.shape[1]}) or ({x.shape[0]}, k, {x.shape[1]}), "
            f"got {c.shape}"
        )

    observed = dist(centers, "centers")
    if reference_centers is None:
        return -observed
    return dist(reference_centers, "reference_centers") - observed


def lira_scores(
    observed: np.ndarray, shadow_in: np.ndarray, shadow_out: np.ndarray
) -> np.ndarray:
    """LiRA statistic: Gaussian likelihood ratio of a score under shadow IN vs OUT models.

    Carlini et al., "Membership Inference Attacks From First Principles" (S&P 2022),
    online variant with per-target variances: fit ``N(mu_in, s_in^2)`` to the scores of
    shadow models trained with the target and ``N(mu_out, s_out^2)`` to those trained
    without it; score an observed model by
    ``log N(x; mu_in, s_in) - log N(x; mu_out, s_out)`` (high = member).

    Parameters
    ----------
    observed : ndarray of shape (n,)
        Scores of the models under attack (e.g. ``-d(x, centers)``).
    shadow_in, shadow_out : ndarray of shape (m,), m >= 2
        Scores of the target's shadow models in each world.

    Returns
    -------
    ndarray of shape (n,)
    """
    observed = np.asarray(observed, dtype=np.float64)
    stats = []
    for name, shadow in (("shadow_in", shadow_in), ("shadow_out", shadow_out)):
        shadow = np.asarray(shadow, dtype=np.float64)
        if shadow.ndim != 1 or shadow.size < 2 or not np.isfinite(shadow).all():
            raise ValueError(f"{name} must be >= 2 finite scores, got shape {shadow.shape}")
        scale = max(float(shadow.std(ddof=1)), 1e-12 * max(1.0, abs(float(shadow.mean()))))
        stats.append((float(shadow.mean()), scale))
    (mu_in, s_in), (mu_out, s_out) = stats
    log_in = -0.5 * ((observed - mu_in) / s_in) ** 2 - np.log(s_in)
    log_out = -0.5 * ((observed - mu_out) / s_out) ** 2 - np.log(s_out)
    return log_in - log_out
