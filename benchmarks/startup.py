"""Start-up time: what importing fedkmeans and a default run cost, in fresh processes.

    python benchmarks/startup.py [--runs 7] [--run-runs 3] [--base /tmp/startup-base]

Each figure is the median wall time of ``--runs`` fresh ``python`` subprocesses (the
default run: ``--run-runs``), with ``PYTHONPATH`` set to the tree measured and the
current directory outside it, so that tree's ``fedkmeans`` is the one imported:

- ``python -c pass`` (the interpreter and its ``site``, for reference),
- ``python -c "import fedkmeans"``,
- ``python -c "import fedkmeans.experiment.cli"``,
- ``python -c "import fedkmeans.client_app"`` (what every Flower actor or SuperNode
  imports before it answers),
- ``python -m fedkmeans.experiment optimal-cost=skip output-dir=<fresh dir>`` (the
  default in-process run, without the non-private reference cost).

It also runs ``python -X importtime -c "import fedkmeans.experiment.cli"`` ``--runs`` times
and keeps, per module, the median of its cumulative import time: the 15 largest are
the table. With ``--base`` (a checkout of an earlier commit, e.g. ``git worktree add
/tmp/startup-base <commit>``) the same is measured for that tree too, alternating run
by run with this one, so both see the same load. The machine is shared: the 1-minute
load average is read before and after every command and reported with the figures.

Writes docs/results/startup.csv and docs/results/startup.md.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_table import write_csv

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results"
TOP = 15
IMPORT_RE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")

COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "import fedkmeans": ["-c", "import fedkmeans"],
    "import fedkmeans.experiment.cli": ["-c", "import fedkmeans.experiment.cli"],
    "import fedkmeans.client_app": ["-c", "import fedkmeans.client_app"],
    "default run (optimal-cost=skip)": ["-m", "fedkmeans.experiment", "optimal-cost=skip"],
}
RUNS_AS_RUN = {"default run (optimal-cost=skip)"}


def environment(tree: Path) -> dict[str, str]:
    """The subprocess environment: ``tree`` first on the path, no Flower telemetry."""
    env = dict(os.environ)
    env.update(PYTHONPATH=str(tree), FLWR_TELEMETRY_ENABLED="0",
               FLWR_DISABLE_UPDATE_CHECK="1")
    return env


def timed(args: list[str], tree: Path, cwd: Path) -> tuple[float, str]:
    """Wall seconds of one ``python *args`` and its standard error."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *args], env=environment(tree), cwd=cwd,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{args} under {tree} failed:\n{done.stderr[-2000:]}")
    return wall, done.stderr


def cumulative_import_us(stderr: str) -> dict[str, int]:
    """Module name -> cumulative import time (microseconds) from ``-X importtime``."""
    times = {}
    for line in stderr.splitlines():
        match = IMPORT_RE.match(line)
        if match:
            times.setdefault(match.group(4), int(match.group(2)))
    return times


def measure(trees: dict[str, Path], runs: int, run_runs: int, work: Path) -> tuple[list, dict]:
    """Wall times (alternating trees run by run) and median import profiles per tree."""
    rows = []
    for command, args in COMMANDS.items():
        count = run_runs if command in RUNS_AS_RUN else runs
        walls = {label: [] for label in trees}
        loads = []
        for i in range(count):
            for label, tree in trees.items():
                extra = [f"output-dir={work / f'{label}-{i}'}"] if command in RUNS_AS_RUN else []
                loads.append(os.getloadavg()[0])
                walls[label].append(timed(args + extra, tree, work)[0])
                loads.append(os.getloadavg()[0])
        for label in trees:
            rows.append({
                "tree": label, "command": command, "runs": count,
                "median_s": round(statistics.median(walls[label]), 3),
                "min_s": round(min(walls[label]), 3), "max_s": round(max(walls[label]), 3),
                "load1_min": round(min(loads), 2), "load1_max": round(max(loads), 2),
            })
            print(rows[-1], flush=True)
    profiles = {label: {} for label in trees}
    for _ in range(runs):
        for label, tree in trees.items():
            command = ["-X", "importtime", "-c", "import fedkmeans.experiment.cli"]
            stderr = timed(command, tree, work)[1]
            for module, us in cumulative_import_us(stderr).items():
                profiles[label].setdefault(module, []).append(us)
    medians = {
        label: {m: statistics.median(v + [0] * (runs - len(v))) for m, v in prof.items()}
        for label, prof in profiles.items()
    }
    return rows, medians


def profile_table(median_us: dict[str, float]) -> list[str]:
    """The TOP modules by median cumulative import time, as markdown rows."""
    top = sorted(median_us.items(), key=lambda item: -item[1])[:TOP]
    return ["| module | cumulative ms (median) |", "|---|---|"] + [
        f"| `{module}` | {us / 1000:.0f} |" for module, us in top
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--run-runs", type=int, default=3)
    parser.add_argument("--base", type=Path, default=None,
                        help="checkout of the commit to compare with ('before')")
    parser.add_argument("--base-label", default="before")
    args = parser.parse_args()
    trees = {args.base_label: args.base.resolve()} if args.base else {}
    trees["after" if args.base else "this"] = ROOT
    for tree in trees.values():  # byte-compile first, so no tree pays for it in a timed run
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "fedkmeans")],
                       check=True, capture_output=True)
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        rows, medians = measure(trees, args.runs, args.run_runs, Path(tmp))
    load_end = os.getloadavg()
    OUT.mkdir(parents=True, exist_ok=True)
    write_csv(OUT / "startup.csv", rows)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    base_commit = ""
    if args.base:
        base_commit = subprocess.run(["git", "-C", str(args.base), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True, check=False).stdout.strip()
    lines = [
        f"Measured by `python benchmarks/startup.py --runs {args.runs} --run-runs {args.run_runs}"
        + (f" --base <checkout of {base_commit}>`" if args.base else "`")
        + f" on {os.cpu_count()} shared cores"
        + (f"; *{args.base_label}* = {base_commit}, *after* = {commit} (working tree)."
           if args.base else f"; tree at {commit}.")
        + " Each figure is the median wall time of fresh `python` processes, the trees"
        " alternating run by run. The machine is shared: its 1-minute load average was "
        f"{load_start[0]:.2f} at the start and {load_end[0]:.2f} at the end (per command: "
        "the range below).",
        "",
        "| tree | command | runs | median s | min s | max s | load (1 min) |",
        "|---|---|---|---|---|---|---|",
    ] + [
        f"| {r['tree']} | {r['command']} | {r['runs']} | {r['median_s']} | {r['min_s']} | "
        f"{r['max_s']} | {r['load1_min']}–{r['load1_max']} |"
        for r in rows
    ]
    for label, median_us in medians.items():
        lines += ["", f"`python -X importtime -c \"import fedkmeans.experiment.cli\"`, *{label}*: "
                  f"the {TOP} largest cumulative import times (median of {args.runs} runs).", ""]
        lines += profile_table(median_us)
    (OUT / "startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
