"""Privacy audit: a canary game against the real mechanisms, and a lower bound on epsilon.

Command line::

    python -m fedkmeans.audit --mechanism lloyds --epsilon 4 --trials 20000
    python -m fedkmeans.audit --mechanism all --epsilon 1 --budget run
    python -m fedkmeans.audit --mechanism covariance --epsilon 1 --under-noise
    python -m fedkmeans.audit --path release --mechanism all --level both --trials 20000
    python -m fedkmeans.audit --path release --mechanism histogram --legacy-sensitivity

``--path release`` audits through the server's real release path with worst-case
neighbours (:mod:`fedkmeans.attacks.release_audit`); the default ``--path canary`` is
the canary game below.

The game, for one release (or one round's joint releases, e.g. a FedDP-Lloyds step's
sums and counts):

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

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from fedkmeans.attacks.bounds import (
    check_delta,
    choose_threshold,
    clopper_pearson,
    epsilon_lower_bound,
)
from fedkmeans.attacks.game import noisy_releases
from fedkmeans.attacks.ledger_check import recompute_epsilon
from fedkmeans.attacks.membership import release_llr
from fedkmeans.attacks.release_audit import (
    AUDITED,
    LEVELS,
    ReleaseAuditResult,
    audit_release,
)
from fedkmeans.clustering.client_stats import (
    cluster_sums_counts,
    outer_product_sum,
    projected_histogram,
    upper_triangle,
)
from fedkmeans.config import PrivacyConfig
from fedkmeans.privacy import registry
from fedkmeans.privacy.accountant import PrivacyAccountant, Release
from fedkmeans.privacy.calibration import PlannedRelease, calibrate
from fedkmeans.privacy.clipping import clip_rows_l2
from fedkmeans.seeding import generator
from fedkmeans.stages import release_plan

__all__ = [
    "MECHANISMS",
    "AuditResult",
    "CanaryGame",
    "audit",
    "canary_game",
    "clopper_pearson",
    "epsilon_lower_bound",
    "main",
]

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


def _check_int(name: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_epsilon(epsilon: float) -> float:
    if isinstance(epsilon, bool) or not (
        isinstance(epsilon, (int, float, np.floating)) and 0 < epsilon <= 100
    ):
        raise ValueError(f"epsilon must be a finite float in (0, 100], got {epsilon!r}")
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
        acc = PrivacyAccountant()
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
    mechanism: str, privacy: PrivacyConfig, budget: str, under_noise: bool
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
    count_noise: str = registry.LAPLACE.name,
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
        The counts' mechanism (a name of :data:`fedkmeans.privacy.registry.MECHANISMS`).
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
    if count_noise not in registry.MECHANISMS:
        raise ValueError(
            f"count_noise must be one of {tuple(registry.MECHANISMS)}, got {count_noise!r}")
    if under_noise and mechanism != "covariance":
        raise ValueError(
            f"under_noise plants the step-1 bug and needs mechanism='covariance', got {mechanism!r}"
        )
    epsilon, delta = _check_epsilon(epsilon), check_delta(delta)
    if not (isinstance(data_radius, (int, float)) and math.isfinite(data_radius)
            and data_radius > 0):
        raise ValueError(f"data_radius must be a finite float > 0, got {data_radius!r}")
    dim, k = _check_int("dim", dim, 1), _check_int("k", k, 1)
    base_points, seed = _check_int("base_points", base_points, 1), _check_int("seed", seed, 0)

    privacy = PrivacyConfig(
        epsilon=epsilon, delta=delta, data_radius=float(data_radius), count_noise=count_noise,
        lloyds_steps=1,
    )
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


# -- the audit -------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditResult:
    """Outcome of one audit (all rates on the evaluation trials).

    Attributes
    ----------
    mechanism, budget : str
    accountant_epsilon : float
        The PLD accountant's epsilon for the audited releases.
    epsilon_lb : float
        The 95% Clopper-Pearson lower bound on the true epsilon.
    delta : float
    trials_selection, trials_evaluation : int
        Trials used to choose the threshold, and to count errors (half IN, half OUT).
    threshold : float
        Log-likelihood ratio above which the test says IN.
    false_positives, false_negatives : int
    fpr_upper, fnr_upper : float
        Clopper-Pearson upper bounds.
    stages : dict
        Per release: claimed sensitivity, noise scale, and the canary's actual change.
    under_noise : bool
    test : str
        ``lr`` or ``float`` (see :func:`audit`).
    seconds : float
    """

    mechanism: str
    budget: str
    accountant_epsilon: float
    epsilon_lb: float
    delta: float
    trials_selection: int
    trials_evaluation: int
    threshold: float
    false_positives: int
    false_negatives: int
    fpr_upper: float
    fnr_upper: float
    stages: dict
    under_noise: bool
    test: str
    seconds: float


def audit(
    mechanism: str,
    *,
    epsilon: float,
    delta: float = 1e-6,
    trials: int = 2000,
    select_fraction: float = 0.5,
    seed: int = 0,
    confidence: float = 0.95,
    test: str = "lr",
    **game_kwargs,
) -> AuditResult:
    """Run the canary game ``trials`` times and bound epsilon from below.

    Parameters
    ----------
    mechanism : {"covariance", "histogram", "sums", "counts", "lloyds"}
    epsilon, delta : float
        Target of the calibration (see :func:`canary_game`).
    trials : int
        Total trials (>= 8), split into selection and evaluation sets, each half IN
        and half OUT.
    select_fraction : float
        Share of the trials used only to choose the threshold, in (0, 1).
    seed : int
        Root seed (>= 0): the data of the game and every noise draw.
    confidence : float
        Of the Clopper-Pearson intervals.
    test : {"lr", "float"}
        ``lr``: the optimal test of the ideal (real-valued) mechanism; ``float``: the
        same ratio computed naively in floating point, which also exploits the
        low-order bits of the released doubles.
    **game_kwargs
        ``data_radius``, ``dim``, ``k``, ``base_points``, ``count_noise``, ``budget``,
        ``under_noise`` of :func:`canary_game`.

    Returns
    -------
    AuditResult
    """
    start = time.perf_counter()
    trials = _check_int("trials", trials, 8)
    if not (isinstance(select_fraction, float) and 0 < select_fraction < 1):
        raise ValueError(f"select_fraction must be a float in (0, 1), got {select_fraction!r}")
    if test not in TESTS:
        raise ValueError(f"test must be one of {TESTS}, got {test!r}")
    game = canary_game(mechanism, epsilon=epsilon, delta=delta, seed=seed, **game_kwargs)
    n_select = max(2, int(round(trials * select_fraction)) // 2)
    n_eval = max(2, (trials - 2 * n_select) // 2)
    rng = generator(seed, "audit", "noise", mechanism)
    select_in = game.scores(True, n_select, rng, test)
    select_out = game.scores(False, n_select, rng, test)
    threshold = choose_threshold(select_in, select_out, delta, confidence)
    eval_in, eval_out = game.scores(True, n_eval, rng, test), game.scores(False, n_eval, rng, test)
    fp = int((eval_out > threshold).sum())
    fn = int((eval_in <= threshold).sum())
    norms = game.canary_norms()
    stages = {
        r.stage: {
            "mechanism": r.mechanism,
            "claimed_sensitivity": r.sensitivity,
            "canary_change": norms[r.stage],
            "noise_scale": r.noise_scale,
        }
        for r in game.releases
    }
    return AuditResult(
        mechanism=mechanism,
        budget=game_kwargs.get("budget", "standalone"),
        accountant_epsilon=game.accountant_epsilon_at(delta),
        epsilon_lb=epsilon_lower_bound(fp, n_eval, fn, n_eval, delta, confidence),
        delta=delta,
        trials_selection=2 * n_select,
        trials_evaluation=2 * n_eval,
        threshold=threshold,
        false_positives=fp,
        false_negatives=fn,
        fpr_upper=clopper_pearson(fp, n_eval, confidence)[1],
        fnr_upper=clopper_pearson(fn, n_eval, confidence)[1],
        stages=stages,
        under_noise=bool(game_kwargs.get("under_noise", False)),
        test=test,
        seconds=time.perf_counter() - start,
    )


# -- command line ------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fedkmeans.audit",
        description="Canary-game privacy audit: empirical lower bound eps_LB next to the "
        "accountant's epsilon for the same mechanism.",
    )
    p.add_argument("--mechanism", "--stage", default="lloyds", choices=(*MECHANISMS, "all"),
                   help="release to audit; lloyds = one FedDP-Lloyds step (sums + counts)")
    p.add_argument("--epsilon", type=float, default=1.0, help="target epsilon in (0, 100]")
    p.add_argument("--delta", type=float, default=1e-6, help="delta in (0, 1)")
    p.add_argument("--trials", type=int, default=2000,
                   help="total trials (selection + evaluation, half IN / half OUT each)")
    p.add_argument("--select-fraction", type=float, default=0.5,
                   help="share of the trials used only to choose the threshold")
    p.add_argument("--seed", type=int, default=0, help="root seed (>= 0)")
    p.add_argument("--budget", choices=BUDGETS, default="standalone",
                   help="standalone: the mechanism alone meets epsilon; run: its share of a "
                   "FedDP-KMeans run (paper split, one Lloyd step) with total epsilon")
    p.add_argument("--data-radius", type=float, default=11.0, help="clipping bound Delta")
    p.add_argument("--dim", type=int, default=20, help="dimension of the statistics")
    p.add_argument("--k", type=int, default=10, help="number of clusters")
    p.add_argument("--count-noise", choices=tuple(registry.MECHANISMS),
                   default=registry.LAPLACE.name)
    p.add_argument("--under-noise", action="store_true",
                   help="plant docs/facts.md 'Reference bug 1': step-1 noise "
                        "calibrated to Delta, not Delta^2")
    p.add_argument("--test", choices=TESTS, default="lr",
                   help="lr: optimal test of the ideal mechanism; float: the textbook "
                   "floating-point ratio, which also reads the low-order bits of the release")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    p.add_argument("--path", choices=("canary", "release"), default="canary",
                   help="canary: the canary game on the mechanism; release: worst-case "
                   "neighbours through the server's real clip, sum, calibration and "
                   "mechanism (--trials then counts evaluation releases per world)")
    p.add_argument("--level", choices=(*LEVELS, "both"), default="both",
                   help="--path release: privacy unit(s) to audit")
    p.add_argument("--selection", type=int, default=5000,
                   help="--path release: releases per world that only choose the threshold")
    p.add_argument("--max-points", type=int, default=1000,
                   help="--path release: max-points-per-client (the data-point target's cap)")
    p.add_argument("--ledger", metavar="RELEASE_JSON", default=None,
                   help="recompute the epsilon of a run's ledger (release.json or "
                   "result.json) independently of the project's accountant, and exit")
    p.add_argument("--legacy-sensitivity", action="store_true",
                   help="--path release: plant the old defect (calibrate to the per-point "
                   "change, ignoring the server's radial l1 clip)")
    return p


def _main_ledger(path: str) -> list[dict]:
    """Print the recorded and the independently recomputed epsilon of a ledger."""
    privacy = json.loads(Path(path).read_text())["privacy"]
    recorded, target = privacy["epsilon"], privacy["target_epsilon"]
    recomputed = recompute_epsilon(privacy["releases"], privacy["delta"])
    row = {"releases": len(privacy["releases"]), "delta": privacy["delta"],
           "recorded_epsilon": recorded, "recomputed_epsilon": recomputed,
           "target_epsilon": target}
    print(json.dumps(row))
    return [row]


def _main_release(args: argparse.Namespace) -> list[ReleaseAuditResult]:
    levels = LEVELS if args.level == "both" else (args.level,)
    pairs = [(s, m) for s, m in AUDITED if args.mechanism in ("all", s)]
    if not pairs:
        raise SystemExit(f"--path release audits {sorted({s for s, _ in AUDITED})} or all, "
                         f"got --mechanism {args.mechanism}")
    results = []
    if not args.json:
        print(f"{'level':<10} {'statistic':<11} {'mechanism':<9} {'claimed':>9} "
              f"{'measured':>9} {'accountant eps':>14} {'eps_LB':>7} {'FP/n':>13} "
              f"{'FN/n':>13} {'s':>6}")
    for level in levels:
        for statistic, mechanism in pairs:
            r = audit_release(
                level, statistic, mechanism, epsilon=args.epsilon, delta=args.delta,
                trials=args.trials, selection=args.selection, data_radius=args.data_radius,
                max_points=args.max_points, legacy_sensitivity=args.legacy_sensitivity,
            )
            results.append(r)
            if args.json:
                print(json.dumps(r.to_dict()))
                continue
            flag = "  <-- eps_LB exceeds the accountant" if (
                r.epsilon_lb > r.accountant_epsilon) else ""
            print(f"{level:<10} {statistic:<11} {mechanism:<9} {r.claimed_sensitivity:>9.4g} "
                  f"{r.measured_change:>9.4g} {r.accountant_epsilon:>14.4f} "
                  f"{r.epsilon_lb:>7.3f} {r.false_positives:>6}/{r.trials_per_world:<6} "
                  f"{r.false_negatives:>6}/{r.trials_per_world:<6} {r.seconds:>6.1f}{flag}")
    return results


def main(argv: Sequence[str] | None = None) -> list[AuditResult] | list[ReleaseAuditResult]:
    """Parse ``argv``, run the audits, print eps_LB next to the accountant's epsilon."""
    args = _parser().parse_args(argv)
    if args.ledger is not None:
        return _main_ledger(args.ledger)
    if args.path == "release":
        return _main_release(args)
    mechanisms = MECHANISMS if args.mechanism == "all" else (args.mechanism,)
    results = []
    if not args.json:
        print(f"{'mechanism':<11} {'budget':<10} {'accountant eps':>14} {'eps_LB':>7} "
              f"{'FP/n':>11} {'FN/n':>11} {'trials sel+eval':>16} {'s':>6}")
    for mechanism in mechanisms:
        result = audit(
            mechanism, epsilon=args.epsilon, delta=args.delta, trials=args.trials,
            select_fraction=args.select_fraction, seed=args.seed, budget=args.budget,
            data_radius=args.data_radius, dim=args.dim, k=args.k,
            count_noise=args.count_noise, under_noise=args.under_noise, test=args.test,
        )
        results.append(result)
        if args.json:
            print(json.dumps(asdict(result)))
        else:
            half = result.trials_evaluation // 2
            flag = "  <-- eps_LB exceeds the accountant" if (
                result.epsilon_lb > result.accountant_epsilon) else ""
            print(
                f"{mechanism:<11} {result.budget:<10} {result.accountant_epsilon:>14.4f} "
                f"{result.epsilon_lb:>7.3f} {result.false_positives:>5}/{half:<5} "
                f"{result.false_negatives:>5}/{half:<5} "
                f"{result.trials_selection:>7}+{result.trials_evaluation:<8} "
                f"{result.seconds:>6.1f}{flag}"
            )
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
