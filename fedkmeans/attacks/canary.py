"""The canary game against the real mechanisms (audited by :mod:`~.canary_audit`).

The command line is :mod:`fedkmeans.experiment.audit`
(``python -m fedkmeans.experiment.audit``). The game,
for one release (or one round's joint releases, e.g. a FedDP-Lloyds step's sums and
counts):

1. A fixed base dataset ``D`` (points clipped to the data radius) and a worst-case
   **canary** point at the clipping bound, ``p = Delta e_1`` (for the symmetric
   covariance noise the diagonal entry ``Delta^2`` is not spread over mirrored
   entries, so ``e_1`` is the worst direction). The client statistics with (``D + p``,
   world IN) and without the canary (``D``, world OUT) come from the real client code
   (:mod:`fedkmeans.clustering.client_stats`).
2. Each trial flips the world and releases the statistic with the real mechanism
   code (:mod:`fedkmeans.privacy.mechanisms`), calibrated by
   :func:`fedkmeans.privacy.calibration.calibrate`, with fresh noise from one explicit
   generator.
3. The white-box test knows both aggregates and the noise scales; it scores each
   release by the log-likelihood ratio (the most powerful test by Neyman-Pearson) and
   says IN when the score exceeds a threshold. The threshold is chosen on a
   **separate** set of selection trials (the one maximising the bound there), then
   the false positive and false negative rates are counted on the evaluation trials.
4. With 95% (two-sided) Clopper-Pearson upper bounds ``FPR+`` and ``FNR+``::

       eps_LB = max(0, ln((1 - delta - FPR+) / FNR+), ln((1 - delta - FNR+) / FPR+))

   Any (eps, delta)-DP mechanism has eps_LB <= eps except with probability about 5%;
   an eps_LB above the accountant's epsilon means the noise is too small for the
   sensitivity actually achieved (``--under-noise`` plants docs/facts.md,
   "Reference bug 1": step-1 noise calibrated to Delta instead of Delta^2).

Zero errors among ``n`` evaluation trials per world caps the bound at about
``ln(1 / (1 - 0.025^(1/n)))``: 4.9 at 500 per world (1000 evaluation trials).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedkmeans.algorithms import release_plan
from fedkmeans.arguments import validate_delta, validate_int
from fedkmeans.attacks.game import noisy_releases
from fedkmeans.attacks.membership import release_llr
from fedkmeans.clustering.client_stats import (
    cluster_sums_counts,
    outer_product_sum,
    projected_histogram,
    upper_triangle,
)
from fedkmeans.config import HAND_SETTINGS, PrivacySettings
from fedkmeans.privacy import registry
from fedkmeans.privacy.accountant import PrivacyLedger, Release
from fedkmeans.privacy.calibration import MAX_FINITE_EPSILON, PlannedRelease, calibrate
from fedkmeans.privacy.clipping import clip_rows_l2
from fedkmeans.seeding import generator

__all__ = ["BUDGETS", "MECHANISMS", "TESTS", "CanaryGame", "canary_game"]

#: What can be audited: one release, or ``lloyds`` = one FedDP-Lloyds step (sums with
#: Gaussian noise and counts with Laplace or Gaussian noise, one cohort, jointly).
MECHANISMS = ("covariance", "histogram", "sums", "counts", "lloyds")
_STAGES = {
    "covariance": ("init-1/covariance",),
    "histogram": ("init-2/histogram",),
    "sums": ("lloyds-1/sums",),
    "counts": ("lloyds-1/counts",),
    "lloyds": ("lloyds-1/sums", "lloyds-1/counts"),
}
BUDGETS = ("standalone", "run")
#: White-box tests: the ideal likelihood ratio, or its textbook floating-point form.
TESTS = ("lr", "float")
_CHUNK = 512


def _validate_epsilon(epsilon: float) -> float:
    if isinstance(epsilon, bool) or not (
        isinstance(epsilon, (int, float, np.floating)) and 0 < epsilon <= MAX_FINITE_EPSILON
    ):
        raise ValueError(
            f"epsilon must be a finite float in (0, {MAX_FINITE_EPSILON:g}], got {epsilon!r}")
    return float(epsilon)


# -- the canary game ------------------------------------------------------------------
@dataclass(frozen=True)
class CanaryGame:
    """One audited mechanism: the ledger entries and the two worlds' exact aggregates.

    Attributes
    ----------
    mechanism : str
        One of :data:`MECHANISMS`.
    releases : tuple of Release
        The releases as the ledger records them (claimed sensitivity, noise scale).
    aggregate_in, aggregate_out : dict of str to ndarray
        Per stage: the exact statistic of ``D + canary`` and of ``D``.
    """

    mechanism: str
    releases: tuple[Release, ...]
    aggregate_in: dict
    aggregate_out: dict

    def accountant_epsilon_at(self, delta: float) -> float:
        """Epsilon the PLD accountant reports for :attr:`releases` at ``delta``."""
        acc = PrivacyLedger()
        for r in self.releases:
            acc.record(r)
        return acc.get_epsilon(delta)

    def canary_norms(self) -> dict[str, float]:
        """Actual size of the canary's change per stage (l2; l1 for Laplace releases)."""
        out = {}
        for r in self.releases:
            diff = self.aggregate_in[r.stage] - self.aggregate_out[r.stage]
            if r.stage.endswith("covariance"):
                diff = upper_triangle(diff)
            order = registry.mechanism(r.mechanism).order
            out[r.stage] = float(np.linalg.norm(diff.ravel(), ord=order))
        return out

    def scores(
        self, world_in: bool, trials: int, rng: np.random.Generator, test: str = "lr"
    ) -> np.ndarray:
        """Scores of ``trials`` releases in one world (high = IN).

        ``test="lr"``: the log-likelihood ratio of the ideal mechanism, computed without
        floating-point atoms (:func:`fedkmeans.attacks.membership.release_llr`).
        ``test="float"``: the same ratio in its textbook floating-point form, which also
        picks up the low-order bits of the release (a floating-point side channel).
        """
        if test not in TESTS:
            raise ValueError(f"test must be one of {TESTS}, got {test!r}")
        score = release_llr if test == "lr" else _float_llr
        out = np.zeros(trials)
        done = 0
        while done < trials:
            n = min(_CHUNK, trials - done)
            for r in self.releases:
                value = (self.aggregate_in if world_in else self.aggregate_out)[r.stage]
                symmetric = r.stage.endswith("covariance")
                noisy = noisy_releases(r.mechanism, r.sensitivity, r.noise_scale, value, rng,
                                       n, symmetric=symmetric)
                out[done:done + n] += score(
                    r.mechanism, r.noise_scale, noisy, self.aggregate_in[r.stage],
                    self.aggregate_out[r.stage], symmetric=symmetric,
                )
            done += n
        return out


def _float_llr(
    mechanism: str, noise_scale: float, y: np.ndarray, mean_in: np.ndarray,
    mean_out: np.ndarray, *, symmetric: bool = False,
) -> np.ndarray:
    """Textbook floating-point log-likelihood ratio on the coordinates the canary changes.

    Mathematically equal to :func:`~fedkmeans.attacks.membership.release_llr`; in
    floating point its value depends on the low-order bits of the release, so a
    threshold test on it also reads them.
    """
    if symmetric:
        y, mean_in, mean_out = (upper_triangle(v) for v in (y, mean_in, mean_out))
    y = np.asarray(y).reshape(len(y), -1)
    a, b = np.ravel(mean_in), np.ravel(mean_out)
    changed = np.flatnonzero(a != b)
    y, a, b = y[:, changed], a[changed], b[changed]
    p = registry.mechanism(mechanism).order  # log-density -|x|^p / (p s^p)
    return ((np.abs(y - b) ** p).sum(axis=1) - (np.abs(y - a) ** p).sum(axis=1)) / (
        p * noise_scale**p)


def _planned(
    mechanism: str, privacy: PrivacySettings, budget: str, under_noise: bool
) -> list[PlannedRelease]:
    plan = release_plan("feddp-kmeans", privacy)
    if under_noise:  # docs/facts.md, "Reference bug 1": Delta, not Delta^2
        plan = [
            PlannedRelease(p.stage, p.mechanism, privacy.data_radius, p.weight,
                           p.sampling_rate, p.group)
            if p.stage == "init-1/covariance" else p
            for p in plan
        ]
    if budget == "standalone":
        plan = [p for p in plan if p.stage in _STAGES[mechanism]]
    return plan


def canary_game(
    mechanism: str,
    *,
    epsilon: float,
    delta: float = 1e-6,
    data_radius: float = 11.0,
    dim: int = 20,
    k: int = 10,
    base_points: int = 50,
    count_noise: str = "auto",
    budget: str = "standalone",
    under_noise: bool = False,
    seed: int = 0,
) -> CanaryGame:
    """Build the canary game of one mechanism with calibrated noise.

    Parameters
    ----------
    mechanism : {"covariance", "histogram", "sums", "counts", "lloyds"}
    epsilon : float
        Target epsilon in (0, 100]: of the mechanism alone (``budget="standalone"``)
        or of a whole FedDP-KMeans run with one Lloyd step (``budget="run"``, the
        audited stage then gets its share of the paper's split).
    delta : float
        In (0, 1).
    data_radius : float
        Delta: points are clipped to it; the canary sits on it. > 0.
    dim, k : int
        Dimension (>= 1) and number of clusters (>= 1) of the audited statistics.
    base_points : int
        Size of the fixed dataset D (>= 1).
    count_noise : str
        The counts' mechanism (a name of :data:`fedkmeans.privacy.registry.MECHANISMS`,
        or ``auto``: Gaussian, as at data-point level the counts are clipped jointly with
        the sums; Laplace counts are client level's).
    budget : {"standalone", "run"}
    under_noise : bool
        Calibrate the step-1 noise to Delta instead of Delta^2 (a planted bug).
    seed : int
        Root seed (>= 0) of D, the centers, the basis and the server points.

    Returns
    -------
    CanaryGame
    """
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
    if budget not in BUDGETS:
        raise ValueError(f"budget must be one of {BUDGETS}, got {budget!r}")
    if count_noise not in ("auto", *registry.MECHANISMS):
        raise ValueError(
            f"count_noise must be 'auto' or one of {tuple(registry.MECHANISMS)}, "
            f"got {count_noise!r}")
    if under_noise and mechanism != "covariance":
        raise ValueError(
            f"under_noise plants the step-1 bug and needs mechanism='covariance', got {mechanism!r}"
        )
    epsilon, delta = _validate_epsilon(epsilon), validate_delta(delta)
    if not (isinstance(data_radius, (int, float)) and math.isfinite(data_radius)
            and data_radius > 0):
        raise ValueError(f"data_radius must be a finite float > 0, got {data_radius!r}")
    dim, k = validate_int("dim", dim, 1), validate_int("k", k, 1)
    base_points, seed = validate_int("base_points", base_points, 1), validate_int("seed", seed, 0)

    privacy = PrivacySettings(**{
        **HAND_SETTINGS, "epsilon": epsilon, "delta": delta, "data_radius": float(data_radius),
        "count_noise": count_noise, "lloyds_steps": 1,
    })
    plan = _planned(mechanism, privacy, budget, under_noise)
    calibrated = {r.stage: r for r in calibrate(plan, epsilon=epsilon, delta=delta)}
    releases = tuple(calibrated[s] for s in _STAGES[mechanism])

    rng = generator(seed, "audit", "data")
    base = clip_rows_l2(rng.normal(0.5, 1.0, size=(base_points, dim)), data_radius)
    canary = np.zeros((1, dim))
    canary[0, 0] = data_radius
    with_canary = np.vstack([base, canary])
    centers = rng.normal(0.5, 1.0, size=(k, dim))
    basis = np.linalg.qr(rng.normal(size=(dim, min(k, dim))))[0].T
    projected_server = rng.normal(size=(max(k, 5), dim)) @ basis.T

    def stats(points: np.ndarray) -> dict[str, np.ndarray]:
        sums, counts = cluster_sums_counts(points, centers)
        return {
            "init-1/covariance": outer_product_sum(points),
            "init-2/histogram": projected_histogram(points, basis, projected_server),
            "lloyds-1/sums": sums,
            "lloyds-1/counts": counts,
        }

    agg_in, agg_out = stats(with_canary), stats(base)
    keep = _STAGES[mechanism]
    return CanaryGame(
        mechanism, releases, {s: agg_in[s] for s in keep}, {s: agg_out[s] for s in keep}
    )
