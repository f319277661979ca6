"""Ledger exactness (issue 10): recorded epsilon vs an independent PLD recomputation.

    python benchmarks/ledger_check.py

For every combination of level, target epsilon, Lloyd steps T, client sampling,
count noise and aggregation, the release plan is calibrated and recorded exactly as a
run records it (:func:`fedkmeans.privacy.calibration.calibrate`,
:class:`fedkmeans.privacy.accountant.PrivacyLedger`), and the ledger's epsilon
is compared with :func:`fedkmeans.attacks.ledger_check.recompute_epsilon`, which
builds the PLDs directly. Written to docs/results/ledger_check.{csv,md}.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from results_table import write_tables

from fedkmeans.algorithms import release_plan
from fedkmeans.attacks.ledger_check import recompute_epsilon
from fedkmeans.experiment.config import parse_config
from fedkmeans.privacy.accountant import PrivacyLedger
from fedkmeans.privacy.calibration import calibrate

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"


def main() -> None:
    rows = []
    grid = itertools.product(("datapoint", "client"), (0.25, 1.0, 4.0), (0, 2),
                             (1.0, 0.5), ("laplace", "gaussian"), ("central", "secagg"))
    for level, epsilon, steps, q, counts, aggregation in grid:
        if q < 1 and counts == "laplace" or aggregation == "secagg" and (
                counts == "laplace" or q < 1):
            continue  # configurations the validation refuses
        config = parse_config({
            "privacy.level": level, "privacy.epsilon": epsilon, "privacy.lloyds-steps": steps,
            "privacy.sampling-rate": q, "privacy.count-noise": counts,
            "privacy.aggregation": aggregation, "federation.num-nodes": 2,
        })
        accountant = PrivacyLedger()
        for release in calibrate(release_plan(config.algorithm, config.privacy),
                                 epsilon=epsilon, delta=config.privacy.delta):
            accountant.record(release)
        recorded = accountant.get_epsilon(config.privacy.delta)
        recomputed = recompute_epsilon([r.to_dict() for r in accountant.releases],
                                       config.privacy.delta)
        rows.append({
            "level": level, "target eps": epsilon, "T": steps, "q": q, "counts": counts,
            "aggregation": aggregation, "recorded eps": f"{recorded:.4f}",
            "recomputed eps": f"{recomputed:.4f}",
            "relative difference": f"{abs(recorded - recomputed) / recomputed:.2e}",
            "recorded <= target": "yes" if recorded <= epsilon else "NO",
        })
        print(rows[-1], flush=True)
    worst = max(float(r["relative difference"]) for r in rows)
    write_tables(OUT, "ledger_check", (
        "Measured by `python benchmarks/ledger_check.py`: the run's ledger (calibrated "
        "and recorded as a run does) against an independent recomputation with "
        "dp_accounting's PLD constructors. "
        f"{len(rows)} configurations; largest relative difference {worst:.2e}."
    ), rows)


if __name__ == "__main__":
    main()
