"""Audit every release through the server's real path (issue 10), written to docs/results/.

    python benchmarks/release_audit.py                  # 20,000 releases per world
    python benchmarks/release_audit.py --trials 2000    # quicker look

For each level (data point, client) and each (statistic, mechanism) a run can release,
the worst-case neighbours of :mod:`fedkmeans.attacks.release_audit` are released
``--selection`` times per world to choose a threshold and ``--trials`` times per world
to count errors, at epsilon = 1 for the release alone. The planted rows recalibrate
the data-point histograms and counts to the per-point change (the old ledger) and
must show eps_LB above the claim.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from results_table import write_tables

from fedkmeans.attacks.release_audit import AUDITED, LEVELS, audit_release

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"
PLANTED = (("histogram", "laplace"), ("counts", "laplace"), ("counts", "gaussian"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=20_000)
    parser.add_argument("--selection", type=int, default=5_000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    cases = [(level, s, m, False) for level in LEVELS for s, m in AUDITED]
    cases += [("datapoint", s, m, True) for s, m in PLANTED]
    rows = []
    for level, statistic, mechanism, planted in cases:
        r = audit_release(level, statistic, mechanism, epsilon=args.epsilon,
                          trials=args.trials, selection=args.selection,
                          legacy_sensitivity=planted)
        row = {
            "level": level, "statistic": statistic, "mechanism": mechanism,
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
        "`ServerContext.release`: server clip, sum, calibration, lattice mechanism, secret "
        f"noise; epsilon = {args.epsilon} for the release alone, delta = 1e-6; "
        "threshold chosen on the selection releases, errors counted on the others; "
        "95% Clopper-Pearson)."
    ), rows)


if __name__ == "__main__":
    main()
