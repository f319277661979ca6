"""How much longer is a SecAgg run's console than a central one's? (issue 49)

    python benchmarks/secagg_console.py

Two pairs of runs, central and ``privacy.aggregation = secagg``, the console counted
line by line:

* the defaults, ``python -m fedkmeans.experiment`` (in-process engine, the paper's
  mixture, one node per client: 100 nodes);
* plain ``flwr run . --stream`` with 20 SuperNodes (Flower's simulation, one client per
  node, data-point level, an ``.npz`` federation of 20 clients), which prints whatever
  the ServerApp's ``flwr`` logger prints: Flower's SecAgg+ lines ("configure_fit:
  strategy sampled N clients", "aggregate_fit: received N results", the DEBUG stage
  lines) would show there.

"Flower SecAgg+ lines" counts lines matching ``configure_fit``, ``aggregate_fit``,
``Stage``, ``Secure aggregation`` or ``Node <id>:``. The number of Lloyd steps is the
tuning's noisy choice, so two runs may differ by a ``[progress]`` line or two whatever
the aggregation. Results: ``docs/results/secagg-console.md`` and ``.csv``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from results_table import write_tables

from fedkmeans.experiment.engines.flower import (
    PROJECT_DIR,
    flower_env,
    processes_with_env,
    stop_all,
)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results"
FLOWER_LINE = re.compile(r"configure_fit|aggregate_fit|Stage|Secure aggregation|Node \d+: ")


def _count(lines: list[str]) -> tuple[int, int]:
    return len(lines), sum(bool(FLOWER_LINE.search(line)) for line in lines)


def experiment(aggregation: str, out: Path) -> list[str]:
    """The default run's console (stdout and stderr) under ``aggregation``."""
    proc = subprocess.run(
        [sys.executable, "-m", "fedkmeans.experiment", f"privacy.aggregation={aggregation}",
         f"output-dir={out}"], capture_output=True, text=True, timeout=1800, check=True)
    return (proc.stdout + proc.stderr).splitlines()


def flwr_stream(aggregation: str, tmp: Path) -> list[str]:
    """``flwr run --stream`` on 20 SuperNodes, one client each; its console lines."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "harness")]
    from test_console import _write  # the console tests' federation

    data, out, home = tmp / "fed.npz", tmp / f"out-{aggregation}", tmp / f"home-{aggregation}"
    _write(data, clients=20, single=False)
    home.mkdir()
    try:
        proc = subprocess.run(
            ["flwr", "run", ".", "--stream", "--run-config",
             f"data.name='npz' data.path='{data}' k=3 privacy.level='datapoint' "
             f"privacy.epsilon=4.0 privacy.aggregation='{aggregation}' output-dir='{out}'",
             "--federation-config", "num-supernodes=20 init-args-num-cpus=2"],
            cwd=PROJECT_DIR, env=flower_env(home), capture_output=True, text=True,
            timeout=900)
    finally:
        stop_all(lambda: processes_with_env("FLWR_HOME", str(home)))
    if not (out / "release.json").exists():
        raise RuntimeError(f"flwr run ({aggregation}) wrote no release: {proc.stderr[-2000:]}")
    return [re.sub(r"\x1b\[[0-9;]*m", "", line)
            for line in (proc.stdout + proc.stderr).splitlines()]


def main() -> None:
    os.environ.pop("FEDKMEANS_DIAGNOSTICS_ON_CONSOLE", None)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for what, run in (
            ("defaults, python -m fedkmeans.experiment (in-process, 100 nodes)",
             lambda agg: experiment(agg, Path(tmp) / f"default-{agg}")),
            ("flwr run --stream, 20 SuperNodes, data-point level",
             lambda agg: flwr_stream(agg, Path(tmp))),
        ):
            counts = {agg: _count(run(agg)) for agg in ("central", "secagg")}
            rows.append({
                "run": what,
                "central lines": counts["central"][0],
                "secagg lines": counts["secagg"][0],
                "secagg - central": counts["secagg"][0] - counts["central"][0],
                "Flower SecAgg+ lines (secagg run)": counts["secagg"][1],
            })
            print(rows[-1], flush=True)
    write_tables(OUT, "secagg-console", (
        "# Console length under SecAgg (issue 49)\n\nWritten by "
        "`python benchmarks/secagg_console.py` (the method is its docstring). The number "
        "of Lloyd steps is a noisy choice, so a pair may differ by a [progress] line "
        "or two whatever the aggregation."), rows)


if __name__ == "__main__":
    main()
