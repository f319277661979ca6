"""Audit every release through the server's real path (issue 10), written to docs/results/.

    python benchmarks/release_audit.py                  # 20,000 releases per world
    python benchmarks/release_audit.py --trials 2000    # quicker look

For each level (data point, client), count noise and planned release (the runs' own
plans, :mod:`fedkmeans.attacks.audit_plan`), the worst probe of
:mod:`fedkmeans.attacks.sensitivity_audit`, driven through the real client path by
:mod:`fedkmeans.attacks.release_audit`, is released ``--selection`` times per world to
choose a threshold and ``--trials`` times per world to count errors, at epsilon = 1
for the release alone. The planted rows recalibrate the data-point histograms and
counts to the per-point change (the old ledger) and must show eps_LB above the claim.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from results_table import write_tables

from fedkmeans.attacks.release_audit import audit_release, legacy_derivation
from fedkmeans.attacks.sensitivity_audit import LEVELS, AuditSetup, planned_releases

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"
PLANTED = ("init-2/histogram", "lloyds-1/counts")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=20_000)
    parser.add_argument("--selection", type=int, default=5_000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    cases = []
    for level in LEVELS:
        for noise in ("laplace", "gaussian"):
            setup = AuditSetup(level=level, count_noise=noise, epsilon=args.epsilon)
            cases += [(setup, p.stage, p.mechanism, False)
                      for p in planned_releases(setup.config())
                      if noise == "laplace" or p.stage.endswith("/counts")]
    planted_setup = AuditSetup(level="datapoint", epsilon=args.epsilon)
    cases += [(planted_setup, name, "laplace", True) for name in PLANTED]
    rows = []
    for setup, name, _mechanism, planted in cases:
        with legacy_derivation() if planted else contextlib.nullcontext():
            r = audit_release(setup, name, trials=args.trials, selection=args.selection)
        level, statistic = setup.level, name
        row = {
            "level": level, "release": statistic, "mechanism": r.mechanism,
            "code": "old sensitivity (planted)" if planted else "current",
            "claimed sensitivity": f"{r.claimed_sensitivity:.6g}",
            "measured change": f"{r.measured_change:.6g}",
            "accountant eps": f"{r.accountant_epsilon:.4f}",
            "eps_LB": f"{r.epsilon_lb:.3f}",
            "eps_LB <= claim": "yes" if r.epsilon_lb <= r.accountant_epsilon else "NO",
            "FP": r.false_positives, "FN": r.false_negatives,
            "trials per world": f"{r.selection_per_world}+{r.trials_per_world}",
            "seconds": f"{r.seconds:.0f}",
        }
        rows.append(row)
        print(row, flush=True)
    write_tables(OUT, "release_audit", (
        "Measured by `python benchmarks/release_audit.py` (worst-case neighbours through "
        "NodeData.load, the stage's client, the wire, `ServerContext.sample` and "
        "`ServerContext.release`: server clip, sum, calibration, lattice mechanism, secret "
        f"noise; epsilon = {args.epsilon} for the release alone, delta = 1e-6; "
        "threshold chosen on the selection releases, errors counted on the others; "
        "95% Clopper-Pearson)."
    ), rows)


if __name__ == "__main__":
    main()
