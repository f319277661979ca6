"""How FedDP-KMeans scales with the number of clients, per engine and shard size.

    python benchmarks/scale.py                      # 10^2 .. 10^4 clients
    python benchmarks/scale.py --sizes 100000 --engines inprocess:100

Mixture, 50 points per client, d = 100, client level, eps = 3, T = 0. For every
(clients, engine:nodes) it records the wall time of the whole run, the time per
protocol round (register, FedDP-Init 1-3, evaluation), the peak resident memory of
every process involved (this process and, for `flower`, every process carrying the
run's private FLWR_HOME), and the time of the same arithmetic done in one process with
vectorised NumPy on the pooled data (the lower bound: no messages, no per-client
loops). Results: docs/results/scale.md and scale.csv.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from results_table import markdown_table, write_csv

from fedkmeans.clustering import top_eigenvectors, weighted_kmeans
from fedkmeans.clustering.client_stats import nearest_center
from fedkmeans.config import parse_config
from fedkmeans.data import load_client, load_server
from fedkmeans.experiment import run

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"

BASE = [
    "privacy.level=client", "data.points-per-client=50", "data.dim=100",
    "privacy.split='0.35,0.1,0.45,0.1'", "privacy.clip-covariance=1500",
    "privacy.clip-sums=110", "privacy.min-server-weight=200", "privacy.epsilon=3",
]


class PeakMemory:
    """Sample the summed RSS of this process and its descendants every 0.2 s."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _tree_rss(os.getpid()))
            time.sleep(0.2)


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _tree_rss(root: int) -> int:
    """RSS of ``root`` and all descendants, including detached Flower/Ray daemons
    (they are found by re-parenting: every process started after this one whose
    environment names a fedkmeans FLWR_HOME)."""
    tree, total, stack, seen = _children(), 0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _rss(pid)
        stack.extend(tree.get(pid, []))
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in seen:
            try:
                env = (entry / "environ").read_bytes()
            except OSError:
                continue
            if b"fedkmeans-flwr-" in env:
                total += _rss(int(entry.name))
    return total


#: Points per vectorised block of the NumPy lower bound (5M x 300 distances = 12 GB).
CHUNK = 100_000


def numpy_lower_bound(n_clients: int) -> float:
    """Seconds for FedDP-Init's arithmetic on pooled data in one process (no noise)."""
    config = parse_config({"data.num-clients": n_clients, "data.points-per-client": 50})
    x = np.concatenate([load_client(config, j)[0] for j in range(n_clients)])
    q, _ = load_server(config)
    start = time.perf_counter()
    basis = top_eigenvectors(x.T @ x, config.k)
    projected_server = q @ basis.T
    projected = x @ basis.T

    def nearest(centers: np.ndarray) -> np.ndarray:  # in chunks: n x m distances at once
        return np.concatenate([nearest_center(projected[i:i + CHUNK], centers)  # would
                               for i in range(0, projected.shape[0], CHUNK)])  # not fit

    hist = np.bincount(nearest(projected_server), minlength=q.shape[0]).astype(float)
    xi = weighted_kmeans(projected_server, hist, config.k, seed=0)
    labels = nearest(xi)
    sums = np.stack([x[labels == r].sum(axis=0) for r in range(config.k)])
    np.bincount(labels, minlength=config.k)
    del sums
    return time.perf_counter() - start


def main() -> None:
    os.environ["FEDKMEANS_SKIP_OPTIMAL_COST"] = "1"  # evaluation, not the algorithm
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--engines", nargs="+",
                        default=["inprocess:100", "flower:2", "flower:100"],
                        help="engine:nodes pairs")
    parser.add_argument("--output", default=str(OUT / "scale"))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            lower = numpy_lower_bound(n)
            for spec in args.engines:
                engine, nodes = spec.split(":")
                nodes = min(int(nodes), n)
                overrides = BASE + [
                    f"data.num-clients={n}", f"federation.engine={engine}",
                    f"federation.num-nodes={nodes}", f"output-dir={tmp}/{n}-{spec}",
                ]
                start = time.perf_counter()
                with PeakMemory() as memory:
                    result = run(overrides)
                wall = time.perf_counter() - start
                t = result["timings"]
                rounds = {k: round(t.get(k, 0.0), 2) for k in
                          ("register", "init-1", "init-2", "init-3", "evaluate")}
                rows.append({
                    "clients": n, "engine": engine, "nodes": nodes,
                    "clients_per_node": n // nodes, "wall_s": round(wall, 2),
                    **{f"{k}_s": v for k, v in rounds.items()},
                    "after_startup_s": round(sum(rounds.values()) - rounds["register"], 2),
                    "peak_rss_gib": round(memory.peak / 2**30, 2),
                    "numpy_lower_bound_s": round(lower, 3),
                    "cost": round(result["metrics"]["cost"], 3),
                })
                print(rows[-1], flush=True)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out.with_suffix(".csv"), rows)
    lines = markdown_table(rows)
    out.with_suffix(".md").write_text(
        "Measured by `python benchmarks/scale.py` on 2 cores (mixture, 50 points per "
        "client, d = 100, client level, eps = 3, T = 0). The register round of `flower` "
        "includes Ray start-up; *after_startup_s* = FedDP-Init + evaluation rounds.\n\n"
        + "\n".join(lines) + "\n"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
