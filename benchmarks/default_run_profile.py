"""cProfile of the default run (issue 37), its top entries written as Markdown.

    python benchmarks/default_run_profile.py --label before [--top 30] [--tuning auto]

Runs, in a fresh process, ::

    python -m cProfile -o <tmp>.pstats -m fedkmeans.experiment privacy.epsilon=3.13 \\
        optimal-cost=skip output-dir=<fresh>

(the command of ``benchmarks/default_run.py``), then writes
docs/results/default-run-profile-<label>.md: the process's wall time under the profiler,
the run's own timings (``diagnostics.json``), and the ``--top`` functions by cumulative
time and by own time (``pstats``). cProfile adds overhead to Python-heavy code, so its
figures are for finding where the time goes, not for the acceptance lines.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from default_run import DEFAULT, environment

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results"


def top_entries(stats: pstats.Stats, sort: str, top: int, within: str = "") -> list[str]:
    """The ``top`` entries of ``stats`` sorted by ``sort``, as Markdown table rows.

    ``within``: only functions whose source path contains it (e.g. ``/fedkmeans/``).
    """
    stats.sort_stats(sort)
    rows = ["| calls | own s | cumulative s | function |", "|---|---|---|---|"]
    chosen = [f for f in stats.fcn_list if within in f[0]][:top]  # set by sort_stats
    for func in chosen:
        calls, primitive, own, cumulative, _ = stats.stats[func]
        path, line, name = func
        where = f"{_short(path)}:{line}({name})" if line else name
        count = f"{calls}/{primitive}" if calls != primitive else str(calls)
        rows.append(f"| {count} | {own:.3f} | {cumulative:.3f} | `{where}` |")
    return rows


def _short(path: str) -> str:
    """A source path from the package or site-packages folder on."""
    for marker in ("site-packages/", "fedkmeans/", "lib/python"):
        if marker in path:
            cut = path.index(marker) + (len(marker) if marker == "site-packages/" else 0)
            return path[cut:]
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--tuning", default="auto", choices=("auto", "none"))
    parser.add_argument("--tree", type=Path, default=ROOT,
                        help="checkout whose fedkmeans is profiled (default: this one)")
    args = parser.parse_args()
    tree = args.tree.resolve()
    command = [*DEFAULT, *([] if args.tuning == "auto" else ["tuning=none"])]
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "run.pstats"
        out = Path(tmp) / "run"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "cProfile", "-o", str(profile), *command,
                        f"output-dir={out}"], env=environment(tree),
                       cwd=tmp, check=True,
                       capture_output=True)
        wall = time.perf_counter() - start
        timings = json.loads((out / "diagnostics.json").read_text())["timings"]
        stats = pstats.Stats(str(profile), stream=io.StringIO())
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    lines = [
        f"Measured by `python benchmarks/default_run_profile.py --label {args.label}"
        + ("" if args.tuning == "auto" else " --tuning none")
        + ("" if tree == ROOT else f" --tree <checkout of {commit}>") + f"` at {commit}: "
        f"`python -m cProfile -m fedkmeans.experiment {' '.join(command[2:])}`, one fresh "
        f"process, {wall:.2f} s wall under the profiler (1-minute load average "
        f"{os.getloadavg()[0]:.2f}: the machine is shared). cProfile slows Python-heavy "
        "code; the figures show where the time goes, not how long a run takes.",
        "",
        "The run's own timings (diagnostics.json, seconds; `tuning` spans the estimate round):",
        "",
        "| " + " | ".join(timings) + " |",
        "|" + "---|" * len(timings),
        "| " + " | ".join(f"{v:.3f}" for v in timings.values()) + " |",
        "",
        f"Top {args.top} functions of fedkmeans by cumulative time:",
        "",
        *top_entries(stats, "cumulative", args.top, within="/fedkmeans/"),
        "",
        f"Top {args.top} by cumulative time:",
        "",
        *top_entries(stats, "cumulative", args.top),
        "",
        f"Top {args.top} by own time:",
        "",
        *top_entries(stats, "tottime", args.top),
    ]
    path = OUT / f"default-run-profile-{args.label}.md"
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
