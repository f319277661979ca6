"""The estimate round and step 1 before and after the node's one pass (issue #37).

    python benchmarks/estimate_one_pass.py --code before=/tmp/before after=. \
        --clients 10000 --repeats 3

Runs the configuration of ``benchmarks/scale.py`` (mixture, 50 points per client,
d = 100, client level, eps = 3, its declared clip bounds, every other setting at its
default, so ``tuning=auto`` and the estimate round; in-process, 100 nodes) once per
repeat and per code tree, each in a fresh process whose ``PYTHONPATH`` is that tree
(``LABEL=PATH``: e.g. a ``git archive`` of the commit before, and this checkout), the
trees alternating within a repeat. Records the round timings the run reports
(``estimate``: the estimate round, which builds the nodes' data; ``init-1``: step 1;
the time after start-up) and the process's peak resident memory, and writes the
medians and every run to docs/results/estimate-one-pass.{md,csv}. The statistics sent
are unchanged: ``--compare`` fails unless every run's ``release.json`` is the same
(reproducible noise).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from results_table import markdown_table, write_csv

OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "estimate-one-pass"
#: benchmarks/scale.py's configuration (its BASE and the client-level clip bounds it
#: declares for 50 points per client), 100 nodes, reproducible noise.
CONFIG = ["optimal-cost=skip", "privacy.level=client", "privacy.split='0.35,0.1,0.45,0.1'",
          "privacy.min-server-weight=200", "privacy.epsilon=3", "data.points-per-client=50",
          "data.dim=100", "privacy.max-points-per-client=50", "privacy.clip-covariance=1500",
          "privacy.clip-sums=110.0", "federation.num-nodes=100",
          "privacy.reproducible-noise=true"]
PHASES = ("register", "estimate", "tuning", "init-1", "init-2", "init-3", "check")

CHILD = """
import json, resource, sys, time
if sys.argv[2] == "cpu":  # every timing of the run in this process's CPU seconds
    time.perf_counter = time.process_time
from fedkmeans.experiment import run
result = run(json.loads(sys.argv[1]))
timings = result["timings"]
print("RESULT " + json.dumps({"timings": timings,
      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


NODE_CHILD = """
import json, sys, time
from threadpoolctl import threadpool_limits
from fedkmeans.experiment.config import parse_config
from fedkmeans.data import load_server
from fedkmeans.node import NodeData
flat, radius, nodes = json.loads(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
asked = parse_config({**flat, "privacy.data-radius": "auto"})  # the estimate round
resolved = parse_config({**flat, "privacy.data-radius": radius})  # step 1
transform = asked.public_transform(load_server(asked)[0])  # Q's mean, as the run's
spent = {"build": 0.0, "estimate": 0.0, "clip_and_step_1": 0.0, "clients_clipped": 0}
with threadpool_limits(1, "blas"):
    for p in range(nodes):
        start = time.thread_time()
        node = NodeData.load(asked, p, nodes, clip=False, transform=transform)
        ids = node.client_ids.tolist()
        built = time.thread_time()
        node.arithmetic.estimates(ids)
        estimated = time.thread_time()
        node = node.retarget(resolved, p, warn=False, transform=transform)
        node.arithmetic.covariance_triangles(ids)
        spent["build"] += built - start
        spent["estimate"] += estimated - built
        spent["clip_and_step_1"] += time.thread_time() - estimated
        spent["clients_clipped"] += len(node.clipped_clients)
print("RESULT " + json.dumps(spent))
"""


def node_phases(code: Path, clients: int, radius: float) -> dict:
    """The nodes' own work in the package of ``code``, in CPU seconds of their thread.

    Each of 100 nodes built as the ClientApp builds it for the estimate round (points
    as built), asked the estimate round for all its clients, then clipped to
    ``radius`` (:meth:`~fedkmeans.node.NodeData.retarget`, as when the server has
    resolved it) and asked step 1: no messages, no server, one BLAS thread; the points
    mapped by the run's public transform (Q's mean).
    """
    flat = {k: v.strip("'") for k, v in (o.split("=", 1) for o in CONFIG)
            if k.startswith(("data.", "privacy.")) and k != "privacy.reproducible-noise"}
    flat["data.num-clients"] = str(clients)
    env = {**os.environ, "PYTHONPATH": str(code)}
    proc = subprocess.run([sys.executable, "-c", NODE_CHILD, json.dumps(flat), str(radius),
                           "100"], env=env, capture_output=True, text=True,
                          cwd=tempfile.gettempdir())
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"nodes with {code} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def run_once(code: Path, clients: int, output: Path, clock: str) -> dict:
    """One run of the configuration with the package of ``code``; its timings and peak.

    ``clock``: ``wall`` (the run's own timings) or ``cpu`` (the same timings read from
    the process's CPU time, which other work on a shared machine disturbs less).
    """
    env = {**os.environ, "PYTHONPATH": str(code), "FLWR_TELEMETRY_ENABLED": "0",
           "FLWR_DISABLE_UPDATE_CHECK": "1"}
    overrides = CONFIG + [f"data.num-clients={clients}", f"output-dir={output}"]
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(overrides), clock], env=env,
                          capture_output=True, text=True, cwd=tempfile.gettempdir())
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"run with {code} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _git(code: Path) -> str:
    """The tree's commit, with ``+changes`` when it has uncommitted changes."""
    proc = subprocess.run(["git", "-C", str(code), "log", "-1", "--format=%h"],
                          capture_output=True, text=True)
    if not proc.stdout.strip():
        return "not a git tree"
    dirty = subprocess.run(["git", "-C", str(code), "status", "--porcelain", "--", "fedkmeans"],
                           capture_output=True, text=True).stdout.strip()
    return proc.stdout.strip() + ("+changes" if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--code", nargs="+", required=True, metavar="LABEL=PATH")
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clocks", nargs="+", default=["wall", "cpu"],
                        choices=["wall", "cpu"])
    parser.add_argument("--node-radius", type=float, default=9.4,
                        help="the radius the nodes' own work is clipped to (the runs "
                             "resolve about 9.44)")
    parser.add_argument("--compare", action="store_true",
                        help="fail unless every run's release.json is byte-identical")
    parser.add_argument("--output", default=str(OUT))
    args = parser.parse_args()
    trees = dict(item.split("=", 1) for item in args.code)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        releases = set()
        for repeat in range(args.repeats):
            for clock in args.clocks:
                for label, path in trees.items():
                    out = Path(tmp) / f"{label}-{clock}-{repeat}"
                    measured = run_once(Path(path).resolve(), args.clients, out, clock)
                    releases.add((out / "release.json").read_bytes())
                    runs.append(_row(label, clock, repeat, measured))
                    print(runs[-1], flush=True)
        if args.compare and len(releases) != 1:
            raise SystemExit(f"release.json differs between runs ({len(releases)} versions)")
    medians = []
    for clock in args.clocks:
        for label, path in trees.items():
            mine = [r for r in runs if r["code"] == label and r["clock"] == clock]
            medians.append({"code": label, "commit": _git(Path(path)), "clock": clock,
                            "runs": len(mine),
                            **{k: round(statistics.median(r[k] for r in mine), 3)
                               for k in (*PHASES, "after_startup", "peak_rss_mib")}})
    nodes = []
    for repeat in range(args.repeats):
        for label, path in trees.items():
            spent = node_phases(Path(path).resolve(), args.clients, args.node_radius)
            nodes.append({"code": label, "repeat": repeat,
                          **{k: round(v, 3) for k, v in spent.items()}})
            print(nodes[-1], flush=True)
    node_medians = [{"code": label, "runs": args.repeats, **{
        k: round(statistics.median(r[k] for r in nodes if r["code"] == label), 3)
        for k in ("build", "estimate", "clip_and_step_1", "clients_clipped")}}
        for label in trees]
    output = Path(args.output)
    write_csv(output.with_suffix(".csv"), runs)
    write_csv(output.with_name(output.name + "-nodes.csv"), nodes)
    output.with_suffix(".md").write_text("\n".join([
        f"Measured by `python benchmarks/estimate_one_pass.py --code "
        f"{' '.join(args.code)} --clients {args.clients} --repeats {args.repeats} "
        f"--clocks {' '.join(args.clocks)}{' --compare' if args.compare else ''}` on a "
        f"shared 2-core machine: the configuration of `benchmarks/scale.py` at "
        f"{args.clients} clients x 50 points x d = 100, client level, in-process, 100 "
        "nodes; medians of the runs (`wall`: the run's own timings, in seconds; `cpu`: the "
        "same timings read from the process's CPU time, which other work on the machine "
        "disturbs less): `estimate`, the estimate round, which builds the nodes' data; "
        "`tuning`, it and the resolution of the `auto` settings; `init-1`, step 1; "
        "`after_startup`, the run without registration and evaluation; and the "
        "process's peak resident memory. "
        + ("Every run's `release.json` was byte-identical (reproducible noise). "
           if args.compare else "")
        + "Every run is in the CSV.", "", *markdown_table(medians), "",
        "The nodes' own work, without messages or server (`NodeData` of each tree, 100 "
        "nodes, one BLAS thread; CPU seconds of the thread, medians of the repeats; "
        "every repeat in `estimate-one-pass-nodes.csv`): `build`, the points generated "
        "for the estimate round; `estimate`, the estimate round's rows of all clients; "
        f"`clip_and_step_1`, the clip to a radius of {args.node_radius} and step 1's "
        "rows of all clients (the points mapped by the run's public transform); "
        "`clients_clipped`, the clients with a point outside it.", "",
        *markdown_table(node_medians), ""]))


def _row(label: str, clock: str, repeat: int, measured: dict) -> dict:
    t = measured["timings"]
    return {"code": label, "clock": clock, "repeat": repeat,
            **{p: round(t.get(p, 0.0), 3) for p in PHASES},
            "after_startup": round(t["total"] - t["register"] - t.get("evaluate", 0.0)
                                   - t.get("optimal_cost", 0.0), 3),
            "peak_rss_mib": round(measured["peak_rss_mib"])}


if __name__ == "__main__":
    main()
