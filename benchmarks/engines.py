"""Wall time of both paper federations end to end, with each engine.

    python benchmarks/engines.py                # both tables
    python benchmarks/engines.py --readme-only  # only the README's commands

The README's commands (``engines-readme.{md,csv}``) are timed as a user times them: the
whole process of ``python -m fedkmeans.experiment`` with every setting at its default,
once with an empty optimal-cost cache (a fresh clone: the optimum is computed), once
with it filled, and with ``federation.engine=flower`` (``flwr run --stream`` with
SuperLink and Ray start-up); the median of ``--repeats`` runs each.

Writes docs/results/engines.md (and .csv). The reference implementation took 26 s
(data-point, eps=3.13) and 63 s (client level, eps=2.556) on the same 2 cores
(docs/facts.md, "Reference numbers"). Timings include data generation on the nodes,
every protocol round and the non-private evaluation round; the optimal cost is cached
beforehand so it is not counted (it is evaluation, not the algorithm).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
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


README_COMMANDS = {
    "python -m fedkmeans.experiment (fresh clone: empty optimal-cost cache)": ([], True),
    "python -m fedkmeans.experiment (optimal cost cached)": ([], False),
    "python -m fedkmeans.experiment federation.engine=flower (flwr run, cached)":
        (["federation.engine=flower"], False),
}


def readme_commands(repeats: int) -> None:
    """Whole-process wall time of the README's default commands (module docstring)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (overrides, fresh) in README_COMMANDS.items():
            times = []
            for i in range(repeats):
                cache = Path(tmp) / (f"cache-{name[:20]}-{i}" if fresh else "cache")
                env = {**os.environ, "FEDKMEANS_CACHE_DIR": str(cache)}
                start = time.perf_counter()
                subprocess.run([sys.executable, "-m", "fedkmeans.experiment", *overrides,
                                f"output-dir={tmp}/{len(rows)}-{i}"],
                               env=env, check=True, capture_output=True)
                times.append(time.perf_counter() - start)
            rows.append({"command": name, "runs": repeats,
                         "median_s": round(statistics.median(times), 2),
                         "min_s": round(min(times), 2), "max_s": round(max(times), 2),
                         "load_1min": round(os.getloadavg()[0], 2)})
            print(rows[-1], flush=True)
    write_csv(OUT / "engines-readme.csv", rows)
    (OUT / "engines-readme.md").write_text(
        "Measured by `python benchmarks/engines.py --readme-only`: the whole process of "
        "each command, every setting at its default (the paper's mixture, 100 clients x "
        "1000 points, data-point level, epsilon 1), secret noise, on 2 cores; median of "
        f"{repeats} runs, the 1-minute load average after them.\n\n"
        "| command | runs | median s | min s | max s | load |\n|---|---|---|---|---|---|\n"
        + "".join(f"| `{r['command']}` | {r['runs']} | {r['median_s']} | {r['min_s']} | "
                  f"{r['max_s']} | {r['load_1min']} |\n" for r in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme-only", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    readme_commands(args.repeats)
    if args.readme_only:
        return
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
