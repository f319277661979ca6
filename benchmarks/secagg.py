"""Secure aggregation with distributed noise: utility, quantization error and cost.

    python benchmarks/secagg.py            # in-process runs only (~3 min on 2 cores)
    python benchmarks/secagg.py --flower   # plus real `flwr run` simulations

Writes docs/results/secagg.md (and .csv). For each federation and aggregation mode it
records the spent epsilon, the cost ratio (seeds 0-2), the wall time, the seconds of
SecAgg+ per protocol round, the masked bytes a node uploads, the worst-case
quantization error relative to sigma (N h / 2 / sigma, from result.json) and, for the
in-process SecAgg+ runs, the *measured* quantization error: the released noisy sums
against an offline float computation of every client's clipped statistic plus its
seeded noise share.
"""

from __future__ import annotations

import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from results_table import markdown_table, write_csv

from fedkmeans import client_app
from fedkmeans.experiment.cli import run_flat
from fedkmeans.experiment.config import parse_config
from fedkmeans.experiment.registries import ENGINES
from fedkmeans.experiment.runner import run_server
from fedkmeans.local_grid import partitioned_grid
from fedkmeans.node import NodeData
from fedkmeans.privacy.distributed import node_contribution
from fedkmeans.seeding import generator
from fedkmeans.server.observer import RunObserver
from fedkmeans.stages import statistic_bounds

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"

FEDERATIONS = {
    "data-point 100 x 1000, eps=1": {
        "privacy.level": "datapoint", "data.num-clients": 100,
        "data.points-per-client": 1000, "privacy.epsilon": 1.0,
    },
    "client 2000 x 50, eps=3": {
        "privacy.level": "client", "data.num-clients": 2000, "data.points-per-client": 50,
        "privacy.split": "0.35,0.1,0.45,0.1", "privacy.clip-covariance": 1500.0,
        "privacy.clip-sums": 110.0, "privacy.min-server-weight": 200.0,
        "privacy.epsilon": 3.0,
    },
}
MODES = {
    "central (Laplace counts)": {"privacy.aggregation": "central"},
    "central (Gaussian)": {"privacy.aggregation": "central", "privacy.count-noise": "gaussian"},
    "secagg": {"privacy.aggregation": "secagg", "privacy.count-noise": "gaussian"},
}
SEEDS = (0, 1, 2)
_RUNS = itertools.count()


class _Recorder(RunObserver):
    def __init__(self):
        self.broadcasts, self.releases = {}, {}

    def on_broadcast(self, round_name, arrays, clients):
        self.broadcasts[round_name] = arrays

    def on_replies(self, round_name, replies):
        pass

    def on_release(self, stage, before, after):
        self.releases[stage] = after


def _inprocess(flat: dict, nodes: int, recorder: _Recorder) -> dict:
    grid = partitioned_grid(client_app.app, flat, nodes)
    return run_server(grid, parse_config(flat), observers=[recorder])


def measured_error(flat: dict, result: dict, recorder: _Recorder) -> float:
    """max over releases of |released - offline float noisy sum| / sigma."""
    config = parse_config(flat)
    everyone = NodeData.load(config, 0, 1)
    clients = everyone.client_ids.tolist()
    arithmetic = everyone.arithmetic
    bounds = statistic_bounds(config.privacy)
    worst = 0.0
    for r in result["privacy"]["secagg"]["rounds"]:
        sent = recorder.broadcasts[r["round"]]
        if "covariance" in r["statistics"]:
            stats = arithmetic.covariance(clients)
        elif "histogram" in r["statistics"]:
            stats = arithmetic.histogram(clients, sent["basis"], sent["projected_server"])
        elif "projected_centers" in sent:
            stats = arithmetic.sums_counts(clients, sent["projected_centers"], sent["basis"])
        else:
            stats = arithmetic.sums_counts(clients, sent["centers"])
        for name, info in r["statistics"].items():
            stage = f"{r['round']}/{name}"
            rngs = [generator(config.seed, "noise-share", stage, c) for c in clients]
            offline = node_contribution(
                stats[name], bounds[name].server_bound, bounds[name].norm, info["share_std"],
                rngs, symmetric=name == "covariance",
            )
            error = np.abs(recorder.releases[stage] - offline).max()
            assert error <= info["max_quantization_error"] * (1 + 1e-9) + 1e-12, stage
            worst = max(worst, error / info["sigma"])
    return worst


def one(federation: str, mode: str, engine: str, nodes: int, tmp: str) -> dict:
    base = {**FEDERATIONS[federation], **MODES[mode], "federation.num-nodes": nodes}
    ratios, first = [], None
    here = not ENGINES[engine].separate_processes  # in this process: observers can record
    for seed in SEEDS if here else SEEDS[:1]:
        flat = {**base, "seed": seed, "output-dir": f"{tmp}/run-{next(_RUNS)}"}
        start = time.perf_counter()
        recorder = _Recorder()
        if here:
            result = _inprocess(flat, nodes, recorder)
        else:
            result = run_flat({**flat, "federation.engine": engine})
        wall = time.perf_counter() - start
        ratios.append(result["metrics"]["cost_ratio"])
        if first is None:
            first = (result, wall, recorder, flat)
    result, wall, recorder, flat = first
    rounds = result["privacy"].get("secagg", {}).get("rounds", [])
    bound = max(
        (i["max_quantization_error_over_sigma"] for r in rounds
         for i in r["statistics"].values()), default=None,
    )
    row = {
        "federation": federation, "mode": mode, "engine": engine, "nodes": nodes,
        "epsilon": round(result["privacy"]["epsilon"], 4),
        "cost_ratio_median": round(statistics.median(ratios), 5),
        "cost_ratio_max": round(max(ratios), 5),
        "wall_s": round(wall, 1),
        "secagg_s_per_round": (
            round(sum(r["seconds"] for r in rounds) / len(rounds), 2) if rounds else ""
        ),
        "upload_bytes_per_node": sum(r["masked_bytes_per_node"] for r in rounds) or "",
        "bound_error_over_sigma": "" if bound is None else f"{bound:.1e}",
        "measured_error_over_sigma": "",
    }
    if rounds and here:
        row["measured_error_over_sigma"] = f"{measured_error(flat, result, recorder):.1e}"
    print(row, flush=True)
    return row


def main() -> None:
    flower = "--flower" in sys.argv
    plan = [
        ("data-point 100 x 1000, eps=1", mode, "inprocess", 10) for mode in MODES
    ] + [
        ("data-point 100 x 1000, eps=1", mode, "inprocess", 100)
        for mode in ("central (Gaussian)", "secagg")
    ] + [
        ("client 2000 x 50, eps=3", mode, "inprocess", 100)
        for mode in ("central (Gaussian)", "secagg")
    ]
    if flower:
        plan += [
            ("data-point 100 x 1000, eps=1", mode, "flower", nodes)
            for nodes in (10, 100) for mode in ("central (Gaussian)", "secagg")
        ]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [one(*item, tmp) for item in plan]
    OUT.mkdir(parents=True, exist_ok=True)
    write_csv(OUT / "secagg.csv", rows)
    lines = [
        "# Secure aggregation with distributed noise: measured",
        "",
        "`python benchmarks/secagg.py" + (" --flower" if flower else "") + "` (2 cores; "
        "paper mixture, delta = 1e-6; cost ratio over seeds "
        f"{', '.join(map(str, SEEDS))} in-process, seed 0 with Flower). Error columns: "
        "worst case N h / 2 and measured max |release - float noisy sum|, both over "
        "sigma.",
        "",
        *markdown_table(rows),
    ]
    (OUT / "secagg.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
