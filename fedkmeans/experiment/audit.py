"""Privacy audit command line: a canary game against the real mechanisms, a lower bound on epsilon.

Command line::

    python -m fedkmeans.experiment.audit --mechanism lloyds --epsilon 4 --trials 20000
    python -m fedkmeans.experiment.audit --mechanism all --epsilon 1 --budget run
    python -m fedkmeans.experiment.audit --mechanism covariance --epsilon 1 --under-noise
    python -m fedkmeans.experiment.audit --path release --level both --trials 20000
    python -m fedkmeans.experiment.audit --path release --trials 0 --aggregation secagg
    python -m fedkmeans.experiment.audit --path release --mechanism histogram --legacy-sensitivity

``--path release`` audits every release of the runs' plans, planned and calibrated by
the runner's own planning function (:mod:`fedkmeans.attacks.audit_plan`: one run per
private algorithm, its estimate round's release included), with worst-case neighbours
driven through the real client path, in three checks:

1. deterministic (:mod:`fedkmeans.attacks.sensitivity_audit`): the measured change of
   each released sum between neighbours against the sensitivity the ledger recorded;
   a change above it, or a planned release the audit did not measure ("left out of
   the audit"), fails the row;
2. budget (:func:`fedkmeans.attacks.audit_plan.budget_audit`): per run, the epsilon
   its ledger spends and the epsilon it spends with the measured changes above the
   ledger in place of the recorded sensitivities; either above the target fails the row;
3. statistical (:mod:`fedkmeans.attacks.release_audit`, skipped with ``--trials 0``):
   eps_LB of each release alone; above the accountant's epsilon fails the row. The
   ``--confidence`` is shared over the rows (Bonferroni), so a correct ledger fails
   it with probability at most ``1 - confidence`` per command.

The command exits with status 1 and names every failed row on stderr when a row
fails, 0 otherwise. The default ``--path canary`` is the canary game
(:mod:`fedkmeans.attacks.canary`, audited by :mod:`fedkmeans.attacks.canary_audit`).

Each audit prints, next to the accountant's epsilon, the lower bound
``eps_LB = max(0, ln((1 - delta - FPR+) / FNR+), ln((1 - delta - FNR+) / FPR+))`` from
95% Clopper-Pearson upper bounds on the optimal test's error rates (the game and the
test: :mod:`fedkmeans.attacks.canary`). ``--ledger`` recomputes a published ledger's
epsilon (:mod:`fedkmeans.attacks.ledger_check`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

from fedkmeans.attacks.audit_plan import BudgetRow, budget_audit
from fedkmeans.attacks.bounds import (
    clopper_pearson,
    epsilon_lower_bound,
)
from fedkmeans.attacks.canary import BUDGETS, MECHANISMS, TESTS, CanaryGame, canary_game
from fedkmeans.attacks.canary_audit import AuditResult, audit
from fedkmeans.attacks.ledger_check import recompute_epsilon
from fedkmeans.attacks.release_audit import ReleaseAuditResult, audit_release, legacy_derivation
from fedkmeans.attacks.sensitivity_audit import (
    LEVELS,
    AuditSetup,
    SensitivityRow,
    sensitivity_audit,
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

#: Exit status of a failed audit (a row named on stderr).
FAILED = 1


# -- command line ------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fedkmeans.experiment.audit",
        description="Canary-game privacy audit: empirical lower bound eps_LB next to the "
        "accountant's epsilon for the same mechanism.",
    )
    p.add_argument("--mechanism", "--stage", default=None,
                   help=f"canary: one of {(*MECHANISMS, 'all')} (default lloyds = one "
                   "FedDP-Lloyds step, sums + counts); release: a statistic name or all "
                   "(default: every planned release)")
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
    p.add_argument("--dim", type=int, default=None,
                   help="dimension of the statistics (canary 20, release 4)")
    p.add_argument("--k", type=int, default=10, help="number of clusters")
    p.add_argument("--count-noise", choices=("auto", *registry.MECHANISMS), default="auto",
                   help="the counts' noise (auto: Gaussian, the data-point level's; the "
                   "game is data-point level, where Laplace counts are refused)")
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
    p.add_argument("--selection", type=int, default=1000,
                   help="--path release: releases per world that only choose the threshold")
    p.add_argument("--count-noises", choices=(*registry.MECHANISMS, "both"), default="both",
                   help="--path release: privacy.count-noise of the audited plans")
    p.add_argument("--aggregation", choices=("central", "secagg"), default="central",
                   help="--path release: secagg drives the SecAgg+ rounds (deterministic "
                   "check only; Gaussian count noise)")
    p.add_argument("--sampling-rate", type=float, default=1.0,
                   help="--path release: privacy.sampling-rate of the statistical check "
                   "(< 1 needs Gaussian count noise)")
    p.add_argument("--confidence", type=float, default=0.95,
                   help="--path release: of the statistical check, shared by its rows")
    p.add_argument("--max-points", type=int, default=1000,
                   help="--path release: max-points-per-client (the data-point target's cap)")
    p.add_argument("--ledger", metavar="RELEASE_JSON", default=None,
                   help="recompute the epsilon of a run's ledger (release.json or "
                   "result.json) independently of the project's accountant, and exit")
    p.add_argument("--legacy-sensitivity", action="store_true",
                   help="--path release: plant the old defect in the bounds' derivation "
                   "(l1 releases at the per-point change, ignoring the server's radial l1 "
                   "clip), which the plans and the server's release both read")
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


def _release_setups(args: argparse.Namespace) -> list[AuditSetup]:
    """One audited plan per level and count noise (SecAgg: Gaussian counts only)."""
    levels = LEVELS if args.level == "both" else (args.level,)
    noises = tuple(registry.MECHANISMS) if args.count_noises == "both" else (
        args.count_noises,)
    if args.aggregation == "secagg" or args.sampling_rate < 1:
        noises = (registry.GAUSSIAN.name,)
    return [AuditSetup(level=level, dim=args.dim or 4, data_radius=args.data_radius,
                       max_points=args.max_points, count_noise=noise,
                       aggregation=args.aggregation, sampling_rate=args.sampling_rate,
                       epsilon=args.epsilon, delta=args.delta, seed=args.seed)
            for level in levels
            # data-point counts are Gaussian (the joint clip of sums and counts)
            for noise in (noises if level == "client" else (registry.GAUSSIAN.name,))]


def _print_rows(rows: list[SensitivityRow], as_json: bool) -> None:
    if as_json:
        for r in rows:
            print(json.dumps({"check": "sensitivity", **r.to_dict()}))
        return
    print(f"{'level':<10} {'aggregation':<11} {'release':<22} {'mechanism':<9} "
          f"{'recorded':>10} {'measured':>10} {'measured/recorded':>17} {'probe':<16} status")
    for r in rows:
        print(f"{r.level:<10} {r.aggregation:<11} {r.release:<22} {r.mechanism:<9} "
              f"{r.recorded:>10.5g} {r.measured:>10.5g} {r.tightness:>17.6f} {r.probe:<16} "
              f"{r.status if not r.failed else 'FAILED: ' + r.reason}")


def _print_budget(rows: list[BudgetRow], as_json: bool) -> None:
    if as_json:
        for r in rows:
            print(json.dumps({"check": "budget", **r.to_dict()}))
        return
    print(f"\n{'level':<10} {'aggregation':<11} {'counts':<9} {'run of':<24} {'releases':>8} "
          f"{'target':>7} {'ledger eps':>10} {'measured eps':>12} status")
    for r in rows:
        print(f"{r.level:<10} {r.aggregation:<11} {r.count_noise:<9} {r.plan:<24} "
              f"{r.releases:>8} {r.target:>7.4g} {r.recorded_epsilon:>10.4f} "
              f"{r.measured_epsilon:>12.4f} {'FAILED: ' + r.reason if r.failed else 'ok'}")


def _main_release(
    args: argparse.Namespace,
) -> list[SensitivityRow | BudgetRow | ReleaseAuditResult]:
    """The checks of every planned release and every plan; exit 1 naming the failed rows."""
    wanted = args.mechanism in (None, "all")
    rows: dict[tuple, SensitivityRow] = {}
    setup_of: dict[tuple, AuditSetup] = {}
    budget: list[BudgetRow] = []
    planted = legacy_derivation if args.legacy_sensitivity else contextlib.nullcontext
    for setup in _release_setups(args):
        with planted():
            measured = sensitivity_audit(setup)
            exceeded = {r.release: r.measured for r in measured if r.status == "exceeds"}
            budget += budget_audit(setup.config(), exceeded)
        for row in measured:
            key = (row.level, row.aggregation, row.release, row.mechanism)
            if (wanted or row.statistic == args.mechanism) and key not in rows:
                rows[key], setup_of[key] = row, setup
    if not rows:
        raise SystemExit(f"--path release: no planned release of statistic "
                         f"{args.mechanism!r}")
    _print_rows(list(rows.values()), args.json)
    _print_budget(budget, args.json)
    results: list[SensitivityRow | BudgetRow | ReleaseAuditResult] = [*rows.values(), *budget]
    failed = [f"{r.level} {r.aggregation} {r.release} ({r.mechanism}): {r.reason}"
              for r in rows.values() if r.failed]
    failed += [f"{r.level} {r.aggregation} {r.count_noise} counts, run of {r.plan}: {r.reason}"
               for r in budget if r.failed]
    statistical = [key for key, r in rows.items()
                   if not r.failed and args.trials > 0 and args.aggregation == "central"]
    if statistical:
        confidence = 1.0 - (1.0 - args.confidence) / len(statistical)  # Bonferroni
        if not args.json:
            print(f"\n{'level':<10} {'release':<22} {'mechanism':<9} {'accountant eps':>14} "
                  f"{'eps_LB':>7} {'FP/n':>13} {'FN/n':>13} {'s':>6}  (confidence "
                  f"{confidence:.5f} per row)")
        for key in statistical:
            setup, row = setup_of[key], rows[key]
            with planted():
                r = audit_release(replace(setup, sampling_rate=args.sampling_rate),
                                  row.release, probe=row.probe, trials=args.trials,
                                  selection=args.selection, confidence=confidence)
            results.append(r)
            if r.failed:
                failed.append(f"{r.level} central {r.release} ({r.mechanism}): eps_LB "
                              f"{r.epsilon_lb:.3f} exceeds the accountant's epsilon "
                              f"{r.accountant_epsilon:.4f}")
            if args.json:
                print(json.dumps({"check": "epsilon", **r.to_dict()}))
                continue
            print(f"{r.level:<10} {r.release:<22} {r.mechanism:<9} "
                  f"{r.accountant_epsilon:>14.4f} {r.epsilon_lb:>7.3f} "
                  f"{r.false_positives:>6}/{r.trials_per_world:<6} "
                  f"{r.false_negatives:>6}/{r.trials_per_world:<6} {r.seconds:>6.1f}"
                  f"{'  FAILED: eps_LB exceeds the accountant' if r.failed else ''}")
    if failed:
        print("audit FAILED:\n  " + "\n  ".join(failed), file=sys.stderr)
        raise SystemExit(FAILED)
    return results


def main(argv: Sequence[str] | None = None) -> list:
    """Parse ``argv``, run the audits, print eps_LB next to the accountant's epsilon."""
    args = _parser().parse_args(argv)
    if args.ledger is not None:
        return _main_ledger(args.ledger)
    if args.path == "release":
        return _main_release(args)
    chosen = args.mechanism or "lloyds"
    if chosen not in (*MECHANISMS, "all"):
        raise SystemExit(f"--mechanism must be one of {(*MECHANISMS, 'all')}, got {chosen!r}")
    mechanisms = MECHANISMS if chosen == "all" else (chosen,)
    results = []
    if not args.json:
        print(f"{'mechanism':<11} {'budget':<10} {'accountant eps':>14} {'eps_LB':>7} "
              f"{'FP/n':>11} {'FN/n':>11} {'trials sel+eval':>16} {'s':>6}")
    for mechanism in mechanisms:
        result = audit(
            mechanism, epsilon=args.epsilon, delta=args.delta, trials=args.trials,
            select_fraction=args.select_fraction, seed=args.seed, budget=args.budget,
            data_radius=args.data_radius, dim=args.dim or 20, k=args.k,
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
