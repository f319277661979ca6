"""Privacy audit command line: a canary game against the real mechanisms, a lower bound on epsilon.

Command line::

    python -m fedkmeans.audit --mechanism lloyds --epsilon 4 --trials 20000
    python -m fedkmeans.audit --mechanism all --epsilon 1 --budget run
    python -m fedkmeans.audit --mechanism covariance --epsilon 1 --under-noise
    python -m fedkmeans.audit --path release --mechanism all --level both --trials 20000
    python -m fedkmeans.audit --path release --mechanism histogram --legacy-sensitivity

``--path release`` audits through the server's real release path with worst-case
neighbours (:mod:`fedkmeans.attacks.release_audit`); the default ``--path canary`` is
the canary game (:mod:`fedkmeans.attacks.canary`, audited by
:mod:`fedkmeans.attacks.canary_audit`).

Each audit prints, next to the accountant's epsilon, the lower bound
``eps_LB = max(0, ln((1 - delta - FPR+) / FNR+), ln((1 - delta - FNR+) / FPR+))`` from
95% Clopper-Pearson upper bounds on the optimal test's error rates (the game and the
test: :mod:`fedkmeans.attacks.canary`). ``--ledger`` recomputes a published ledger's
epsilon (:mod:`fedkmeans.attacks.ledger_check`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from fedkmeans.attacks.bounds import (
    clopper_pearson,
    epsilon_lower_bound,
)
from fedkmeans.attacks.canary import BUDGETS, MECHANISMS, TESTS, CanaryGame, canary_game
from fedkmeans.attacks.canary_audit import AuditResult, audit
from fedkmeans.attacks.ledger_check import recompute_epsilon
from fedkmeans.attacks.release_audit import (
    AUDITED,
    LEVELS,
    ReleaseAuditResult,
    audit_release,
)
from fedkmeans.privacy import registry

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
