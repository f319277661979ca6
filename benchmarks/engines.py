"""Wall time of both paper federations end to end, with each engine.

    python benchmarks/engines.py

Writes docs/results/engines.md (and .csv). The reference implementation took 26 s
(data-point, eps=3.13) and 63 s (client level, eps=2.556) on the same 2 cores
(docs/facts.md, "Reference numbers"). Timings include data generation on the nodes,
every protocol round and the non-private evaluation round; the optimal cost is cached
beforehand so it is not counted (it is evaluation, not the algorithm).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from results_table import write_csv

from fedkmeans.experiment import run

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"

FEDERATIONS = {
    "data-point 100 x 1000, eps=3.13": [
        "privacy.level=datapoint", "data.num-clients=100", "data.points-per-client=1000",
        "privacy.epsilon=3.13",
    ],
    "client 2000 x 50, eps=2.556": [
        "privacy.level=client", "data.num-clients=2000", "data.points-per-client=50",
        "privacy.split='0.35,0.1,0.45,0.1'", "privacy.clip-covariance=1500",
        "privacy.clip-sums=110", "privacy.epsilon=2.556",
    ],
}
ENGINES = [
    ("inprocess", 0),   # one in-process node per client (capped at 100)
    ("flower", 2),      # Flower's default simulation size: 2 SuperNodes
    ("flower", 100),    # 100 SuperNodes
]
REFERENCE_S = {"data-point 100 x 1000, eps=3.13": 26.0, "client 2000 x 50, eps=2.556": 63.0}


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, overrides in FEDERATIONS.items():
            run(overrides + [f"output-dir={tmp}/warm-{len(rows)}"])  # caches the optimal cost
            for engine, nodes in ENGINES:
                start = time.perf_counter()
                result = run(overrides + [
                    f"federation.engine={engine}", f"federation.num-nodes={nodes}",
                    f"output-dir={tmp}/{len(rows)}",
                ])
                wall = time.perf_counter() - start
                t = result["timings"]
                rows.append({
                    "federation": name, "engine": engine,
                    "nodes": result["federation"]["num_nodes"],
                    "wall_s": round(wall, 2),
                    "server_total_s": round(t["total"], 2),
                    "register_s": round(t["register"], 2),
                    "after_startup_s": round(t["total"] - t["register"] - t["optimal_cost"], 2),
                    "cost_ratio": round(result["metrics"]["cost_ratio"], 5),
                    "reference_s": REFERENCE_S[name],
                })
                print(rows[-1], flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    write_csv(OUT / "engines.csv", rows)
    lines = [
        "| federation | engine | nodes | wall s (end to end) | server run s | "
        "first round s | after start-up s | cost/optimal | reference s |",
        "|---|---|---|---|---|---|---|---|---|",
    ] + [
        f"| {r['federation']} | {r['engine']} | {r['nodes']} | {r['wall_s']} | "
        f"{r['server_total_s']} | {r['register_s']} | {r['after_startup_s']} | "
        f"{r['cost_ratio']} | {r['reference_s']} |"
        for r in rows
    ]
    (OUT / "engines.md").write_text(
        "Measured by `python benchmarks/engines.py` on 2 cores. *wall* = the whole "
        "`fedkmeans.experiment.run` call (for `flower`: `flwr run` incl. SuperLink and Ray "
        "start-up); *server run* = inside the ServerApp; *first round* = the register round "
        "(for `flower` it includes Ray start-up); *after start-up* = server run minus the "
        "first round and minus the cached optimal-cost lookup (calibration, FedDP-Init, "
        "evaluation).\n\n"
        + "\n".join(lines) + "\n"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
