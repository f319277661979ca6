"""The tuning's simulated search alone, on the same inputs, on two checkouts (issue 37).

    python benchmarks/tuning_search.py [--base /tmp/base] [--repeats 9] [--label NAME]

The search (``fedkmeans.tuning.search.search``: the simulated federations, the
candidates' calibrations and simulations) is the part of the tuning that grows with
the candidates; its time in a whole run moves with the T and split the run chooses,
which follow the estimate round's secret noise. Here it is timed on fixed inputs:
each configuration of :data:`CONFIGS` is run once with ``privacy.reproducible-noise =
true`` (the estimate round's release, hence the search's inputs, a function of the
seed), the arguments of its search are kept, and the search is run ``--repeats`` times
on them, each with cold calibration caches (``fresh_run.cold_caches``, as a fresh
process starts), in one thread and, where the tree has them, on the search's threads.
Each tree runs in its own interpreter with ``PYTHONPATH`` pointing at it; the trees
alternate configuration by configuration, so both see the same load. The chosen
setting and the number of simulations are checked to be the same on both trees (the
release identity benchmark checks whole runs).

*without_simulations_s* is the search on one thread with every simulated run replaced
by the cost it returned in a recorded search (so the same candidates are visited):
what the search costs besides its simulated protocol runs.

Writes docs/results/tuning-search[-LABEL].{csv,md}.
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

from default_run import environment, tree_commit
from fresh_run import cold_caches
from results_table import markdown_table, write_csv

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results"
#: Configurations: the issue's default run, and the smallest in-process rows of
#: benchmarks/scale.py (client level, where the tuning's share is largest).
CONFIGS = {
    "default run (data-point mixture 100 x 1000, eps 3.13)": [
        "privacy.epsilon=3.13", "optimal-cost=skip"],
    **{f"scale row {n} x {p} x {d} (client level, eps 3)": [
        "optimal-cost=skip", "privacy.level=client", "privacy.split='0.35,0.1,0.45,0.1'",
        "privacy.min-server-weight=200", "privacy.epsilon=3", f"data.points-per-client={p}",
        f"data.dim={d}", f"privacy.max-points-per-client={p}",
        f"privacy.clip-covariance={30 * p}", f"privacy.clip-sums={2.2 * p}",
        f"data.num-clients={n}", "federation.engine=inprocess", "federation.num-nodes=100"]
        for n, p, d in ((1000, 10, 20), (1000, 50, 100))},
}


def _child(overrides: list[str], repeats: int) -> dict:
    """In the tree's interpreter: the search's time on the inputs of one seeded run."""

    import fedkmeans.tuning.resolve as resolve
    import fedkmeans.tuning.search as search_module
    from fedkmeans.experiment import run

    captured = {}
    search = resolve.search

    def keep(*args, **kwargs):
        captured.setdefault("call", (args, kwargs))
        return search(*args, **kwargs)

    resolve.search = keep
    with tempfile.TemporaryDirectory() as tmp:
        run([*overrides, "seed=3", "privacy.reproducible-noise=true", f"output-dir={tmp}/o"])
    args, kwargs = captured["call"]
    simulations = [0]
    simulate = search_module.simulate_cost

    def counted(*a, **k):
        simulations[0] += 1
        return simulate(*a, **k)

    search_module.simulate_cost = counted
    threads = getattr(search_module, "search_threads", lambda: 1)()
    out = {"threads": threads}
    for label, count in (("one_thread", 1), ("threads", threads)):
        if label == "threads" and threads == 1:
            break
        if hasattr(search_module, "search_threads"):
            search_module.search_threads = lambda count=count: count
        times = []
        for _ in range(repeats):
            simulations[0] = 0
            seconds, best = _timed_search(search, args, kwargs)
            times.append(seconds)
        out[f"{label}_s"] = statistics.median(times)
        out[f"{label}_simulations"] = simulations[0]
        out["chosen"] = f"T={best.privacy.lloyds_steps}, split={list(best.privacy.split)}"
    out["without_simulations_s"] = _without_simulations(search, args, kwargs, repeats)
    return out


def _without_simulations(search, args: tuple, kwargs: dict, repeats: int) -> float:
    """The search on one thread with each simulated run replaced by its recorded cost.

    One search records the costs its simulations return, in call order; the timed ones
    get the same costs back in the same order without simulating, so they visit the
    same candidates: what the search costs besides its simulated protocol runs (the
    federations, the candidates' calibrations, the bookkeeping).
    """
    import fedkmeans.tuning.search as search_module

    simulate, costs = search_module.simulate_cost, []
    threads = getattr(search_module, "search_threads", None)
    search_module.search_threads = lambda: 1

    def recorded(*a, **k):
        costs.append(simulate(*a, **k))
        return costs[-1]

    def replayed(*a, **k):
        return next(replay)

    times = []
    for i in range(repeats + 1):
        search_module.simulate_cost = recorded if i == 0 else replayed
        replay = iter(costs)
        times.append(_timed_search(search, args, kwargs)[0])
        if i > 0 and next(replay, None) is not None:
            raise RuntimeError("the replayed search simulated fewer runs than recorded")
    search_module.simulate_cost, search_module.search_threads = simulate, threads
    return statistics.median(times[1:])


def _timed_search(search, args: tuple, kwargs: dict) -> tuple[float, object]:
    """One search on the kept inputs, cold caches, one BLAS thread: (seconds, choice)."""
    import time

    from fedkmeans.clustering.scikit import thread_controller

    cold_caches()
    record = {**args[6], "candidates": [], "why": {}}
    with thread_controller().limit(limits=1):  # as resolve_auto runs it
        start = time.perf_counter()
        best = search(*args[:6], record, *args[7:], **kwargs)
        return time.perf_counter() - start, best


def _measure(tree: Path, overrides: list[str], repeats: int) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(overrides), "--repeats", str(repeats)],
        env=environment(tree), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="a checkout of an earlier commit")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--label", default="")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(json.loads(args.child), args.repeats)))
        return
    trees = {"this": ROOT}
    if args.base:
        trees = {"before": args.base.resolve(), "after": ROOT}
    rows = []
    for name, overrides in CONFIGS.items():
        for tree_name, tree in trees.items():
            row = {"configuration": name, "tree": tree_name, "commit": tree_commit(tree),
                   **_measure(tree, overrides, args.repeats)}
            rows.append(row)
            print(row, flush=True)
    columns = ["configuration", "tree", "commit", "chosen", "threads", "one_thread_s",
               "one_thread_simulations", "threads_s", "threads_simulations",
               "without_simulations_s"]
    rows = [{c: (round(r[c], 4) if isinstance(r.get(c), float) else r.get(c, ""))
             for c in columns} for r in rows]
    stem = OUT / ("tuning-search" + (f"-{args.label}" if args.label else ""))
    write_csv(stem.with_suffix(".csv"), rows)
    command = "python benchmarks/tuning_search.py" + (
        " --base <checkout>" if args.base else "") + f" --repeats {args.repeats}" + (
        f" --label {args.label}" if args.label else "")
    lines = [
        f"Measured by `{command}` on 2 cores (1-minute load average "
        f"{os.getloadavg()[0]:.2f} at the end: the machine is shared). The search alone "
        "(`fedkmeans.tuning.search.search`), on the inputs of one run of each configuration "
        "with reproducible noise and seed 3, median of the repeats, each with cold "
        "calibration caches; *one_thread_s* with the search on one thread, *threads_s* on "
        "the tree's search threads (empty: the tree has one); *_simulations*: the simulated "
        "protocol runs of one search (on the threads a challenger's second simulation "
        "starts with its first, and runs even when the first loses); *without_simulations_s*: "
        "on one thread, each simulated run replaced by the cost it returned in a recorded "
        "search (the same candidates visited): the search's cost besides its simulated "
        "protocol runs.",
        "",
        *markdown_table(rows),
    ]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
