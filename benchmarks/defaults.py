"""Only the data set and k: every other setting at its default (tuning=auto), issue 25.

    python benchmarks/defaults.py                  # every set, both levels, 5 seeds
    python benchmarks/defaults.py --sets digits20 --seeds 2 --epsilons 1 --workers 2
    python benchmarks/defaults.py --from-csv       # redraw docs/results/defaults.md
    python benchmarks/defaults.py --levels datapoint --set privacy.lloyds-steps=0 \
        --name defaults-t0                          # the defaults with one setting given

Each set is ``dataset=<name>`` (its preset gives k and the server's data) plus nothing
else: the estimate round, the simulation's choices and the final private choice are
the defaults. ``digits20`` is scikit-learn's digits split into 20 label-skewed clients
with 150 server points. For each set, level, epsilon and seed 0..S-1 the run's cost
ratio (cost / cost of non-private k-means on the pooled client data) is recorded, and
once per seed k-means on the server's data alone (``server-lloyds``, no private round).
The paper mixture is measured at its acceptance cells (data-point epsilon 1 and 0.25;
client level, ``dataset=mixture-client``, epsilon 3 and 1).

Writes docs/results/defaults.{csv,md}: per set and level the median ratio by epsilon,
the median over the server-alone median, and each acceptance line of the issue,
evaluated on these rows (met / missed).
"""

from __future__ import annotations

import argparse
import csv
import math
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fresh_run import cold_caches
from results_table import write_csv

from fedkmeans.algorithms.feddp_kmeans import FEDDP_KMEANS

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"
EPSILONS = {"datapoint": (0.25, 0.5, 1.0, 2.0, 4.0), "client": (0.25, 0.5, 1.0, 2.0, 3.0, 4.0)}
#: set name -> the overrides that make it (nothing but the data set).
SETS = {
    "digits20": ["dataset=digits", "data.num-clients=20"],
    "digits": ["dataset=digits"],
    "diamonds": ["dataset=diamonds"],
    "mplsstops": ["dataset=mplsstops"],
    "nycflights": ["dataset=nycflights"],
}
#: The paper mixture's acceptance cells: (set, level, epsilon, bar).
MIXTURE = (("mixture", "datapoint", 1.0, 1.002), ("mixture", "datapoint", 0.25, 1.03),
           ("mixture-client", "client", 3.0, 1.01), ("mixture-client", "client", 1.0, 1.10))


#: setting -> what it adds to the set's overrides: the defaults; k-means on the server's
#: data alone (the final private choice's alternative, no private round); the protocol's
#: own answer (no final private choice, its share back to the protocol).
SETTINGS = {
    "defaults": [],
    "server": ["algorithm=server-lloyds", "tuning=none", "privacy.lloyds-steps=0"],
    "protocol": ["privacy.check-share=0"],
}


def returned_protocol(row: dict) -> bool:
    """Whether a run returned FedDP-KMeans' own centers: ``centers_from`` names the
    algorithm whose centers came back, then says why."""
    return str(row["centers_from"]).split(" ")[0] == FEDDP_KMEANS.name


def one_job(job: tuple) -> dict:
    """Run ``(name, overrides, level, eps, setting, seed, out_dir)`` in-process: one row."""
    from fedkmeans.experiment import run

    name, overrides, level, eps, setting, seed, out_dir = job
    # k-means on the server's data with no Lloyd step releases nothing: the config
    # refuses a privacy.epsilon it would not read
    private = [] if setting == "server" else [f"privacy.level={level}", f"privacy.epsilon={eps}"]
    args = [*overrides, *private, f"seed={seed}", f"output-dir={out_dir}", *SETTINGS[setting]]
    cold_caches()  # the worker ran other jobs before: time this one as a fresh run
    start = time.perf_counter()
    result = run(args)
    return row_of(job, result, time.perf_counter() - start)


def row_of(job: tuple, result: dict, wall_s: float) -> dict:
    """The row of ``job`` from its ``result.json`` (``wall_s``: the run's wall time)."""
    name, _, level, eps, setting, seed, _ = job
    timings = result["timings"]
    protocol_s = sum(v for k, v in timings.items()
                     if k.startswith(("init-", "lloyds-", "check")))
    chosen = (result.get("tuning") or {}).get("chosen", {})
    return {
        "set": name, "level": level, "epsilon": eps, "setting": setting, "seed": seed,
        "cost_ratio": result["metrics"]["cost_ratio"],
        **{key: result["metrics"].get(key) for key in ("accuracy", "ari", "nmi", "fmi")},
        "spent_epsilon": result["privacy"]["epsilon"],
        "centers_from": result.get("centers_from", ""),
        "chosen_algorithm": chosen.get("algorithm", ""),
        "chosen_lloyds_steps": chosen.get("lloyds_steps", ""),
        "chosen_max_points": chosen.get("max_points_per_client", ""),
        "num_clients": result["federation"]["num_clients"],
        "num_points": result["metrics"]["num_points"],
        "tuning_s": timings.get("tuning", 0.0), "protocol_s": protocol_s,
        "run_s": timings["total"], "wall_s": wall_s,
    }


def run_jobs(jobs: list[tuple], workers: int, shown: tuple[str, ...],
             partial: Path | None = None) -> list[dict]:
    """:func:`one_job` over ``jobs`` in ``workers`` spawned processes, one line per row.

    ``partial``: a csv each row is appended to as it arrives (a stopped benchmark keeps
    the rows it had).
    """
    rows, start = [], time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        for row in pool.imap_unordered(one_job, jobs):
            rows.append(row)
            if partial is not None:
                append_row(partial, row)
            print(f"[{len(rows)}/{len(jobs)} {time.perf_counter() - start:.0f} s] "
                  + " ".join(f"{k}={row[k]}" for k in shown), flush=True)
    return rows


def append_row(path: Path, row: dict) -> None:
    """Append ``row`` to the csv at ``path`` (its header first if the file is new)."""
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(row))
        if new:
            writer.writeheader()
        writer.writerow(row)


def jobs_for(args: argparse.Namespace, tmp: str) -> list[tuple]:
    jobs: list[tuple] = []
    for name in args.sets.split(","):
        if name == "mixture":
            for set_name, level, eps, _ in MIXTURE:
                if level not in args.levels.split(","):
                    continue
                for seed in range(args.seeds):
                    jobs.append((set_name, [f"dataset={set_name}", *args.set], level, eps,
                                 "defaults", seed, f"{tmp}/{len(jobs)}"))
            continue
        for level in args.levels.split(","):
            epsilons = ([float(e) for e in args.epsilons.split(",")] if args.epsilons
                        else EPSILONS[level])
            for eps in epsilons:
                for seed in range(args.seeds):
                    jobs.append((name, [*SETS[name], *args.set], level, eps, "defaults",
                                 seed, f"{tmp}/{len(jobs)}"))
        for seed in range(args.seeds):  # no private round: one run serves every cell
            jobs.append((name, SETS[name], "datapoint", 1.0, "server", seed,
                         f"{tmp}/{len(jobs)}"))
    return jobs


def median_ratio(rows: list[dict]) -> float:
    """Median ``cost_ratio`` of ``rows`` (NaN for none)."""
    return statistics.median(r["cost_ratio"] for r in rows) if rows else math.nan


def summarise(rows: list[dict]) -> list[str]:
    """Markdown tables and the acceptance lines evaluated on ``rows``."""
    lines, checks = [], []
    totals = [0, 0]  # private runs worse than their seed's server-only answer, runs
    for name in dict.fromkeys(r["set"] for r in rows if not r["set"].startswith("mixture")):
        sel = [r for r in rows if r["set"] == name]
        server = median_ratio([r for r in sel if r["setting"] == "server"])
        private = [r for r in sel if r["setting"] == "defaults"]
        clients, points = private[0]["num_clients"], private[0]["num_points"]
        lines += [f"### {name} ({clients} clients, {points} points)", "",
                  f"k-means on the server's data alone: {server:.4f} x optimal (median).", "",
                  "| level | epsilon | median | / server | protocol's centers kept | "
                  "tuning s | protocol s |", "|---|---|---|---|---|---|---|"]
        for level in dict.fromkeys(r["level"] for r in private):
            medians = []
            for eps in sorted({r["epsilon"] for r in private if r["level"] == level}):
                cell = [r for r in private if (r["level"], r["epsilon"]) == (level, eps)]
                med = median_ratio(cell)
                medians.append((eps, med))
                kept = sum(map(returned_protocol, cell))
                lines.append(
                    f"| {level} | {eps:g} | {med:.4f} | {med / server:.4f} | {kept}/{len(cell)} "
                    f"| {statistics.median(r['tuning_s'] for r in cell):.2f} "
                    f"| {statistics.median(r['protocol_s'] for r in cell):.2f} |")
                checks.append((f"{name} {level} eps={eps:g}: median <= 1.02 x server alone",
                               med <= 1.02 * server, f"{med / server:.4f}"))
                if level == "datapoint" and eps == 1.0 and points >= 10_000:
                    checks.append((f"{name} data-point eps=1: <= 1.07 x optimal "
                                   "(>= 10,000 points)", med <= 1.07, f"{med:.4f}"))
                if level == "client" and eps == 3.0 and clients >= 1000:
                    checks.append((f"{name} client eps=3: <= 1.25 x optimal "
                                   "(>= 1,000 clients)", med <= 1.25, f"{med:.4f}"))
            for (e0, m0), (e1, m1) in zip(medians, medians[1:], strict=False):
                checks.append((f"{name} {level}: monotone eps {e0:g} -> {e1:g} "
                               "(median at most 1 % above)", m1 <= 1.01 * m0,
                               f"{m1 / m0:.4f}"))
        by_seed = {r["seed"]: r["cost_ratio"] for r in sel if r["setting"] == "server"}
        paired = [(r["cost_ratio"], by_seed[r["seed"]]) for r in private if r["seed"] in by_seed]
        worse = [ours / theirs for ours, theirs in paired if ours > theirs * (1 + 1e-9)]
        lines += ["", f"Runs worse than the same seed's server-only answer: {len(worse)} of "
                  f"{len(paired)}" + (f" (at most {max(worse):.4f} x it)." if worse else "."),
                  ""]
        totals[0] += len(worse)
        totals[1] += len(paired)
    if totals[1]:
        checks.append(("final private choice: runs worse than their seed's server-only "
                       "answer (bound: at most 5 % in expectation)", totals[0] <= 0.05 * totals[1],
                       f"{totals[0]} of {totals[1]}"))
    for set_name, level, eps, bar in MIXTURE:
        cell = [r for r in rows if (r["set"], r["level"], r["epsilon"]) == (set_name, level, eps)]
        if not cell:
            continue
        worst = max(r["cost_ratio"] for r in cell)
        what = "every seed" if level == "client" else "median"
        value = worst if level == "client" else median_ratio(cell)
        checks.append((f"{set_name} {level} eps={eps:g}: {what} <= {bar}", value <= bar,
                       f"{value:.4f} ({len(cell)} seeds: "
                       + ", ".join(f"{r['cost_ratio']:.4f}" for r in cell) + ")"))
        tuning = statistics.median(r["tuning_s"] for r in cell)
        protocol = statistics.median(r["protocol_s"] for r in cell)
        checks.append((f"{set_name} {level} eps={eps:g}: estimate round + tuning s <= "
                       "protocol s (medians)", tuning <= protocol,
                       f"{tuning:.2f} s vs {protocol:.2f} s"))
    lines += ["### Acceptance lines (issue 25), evaluated on these rows", "",
              "| line | met | value |", "|---|---|---|"]
    lines += [f"| {text} | {'yes' if ok else '**no**'} | {value} |" for text, ok, value in checks]
    met = sum(ok for _, ok, _ in checks)
    lines += ["", f"Acceptance lines met: {met} of {len(checks)}."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sets", default=",".join(["mixture", *SETS]))
    parser.add_argument("--levels", default="datapoint,client")
    parser.add_argument("--epsilons", default="", help="comma-separated (default: all)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--name", default="defaults")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="overrides added to every private run (not the server-alone "
                             "runs), e.g. to measure the defaults without a part of auto")
    parser.add_argument("--from-csv", action="store_true")
    args = parser.parse_args()
    path = OUT / f"{args.name}.csv"
    if args.from_csv:
        rows = read_rows(path)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            rows = run_jobs(jobs_for(args, tmp), args.workers, (
                "set", "level", "epsilon", "setting", "seed", "cost_ratio", "centers_from"))
        rows.sort(key=lambda r: (r["set"], r["setting"], r["level"], r["epsilon"], r["seed"]))
        write_csv(path, rows)
    lines = summarise(rows)
    given = ("only the data set and its preset's k are given" if not args.set else
             f"the data set, its preset's k and {', '.join(args.set)} are given")
    command = " ".join(["python benchmarks/defaults.py", *sys.argv[1:]])
    (OUT / f"{args.name}.md").write_text(
        f"Measured by `{command}` (secret noise, in-process, "
        f"{args.workers} worker processes on 2 cores, delta = 1e-6; {given}). "
        "Cells: median cost / optimal over the seeds.\n\n"
        + "\n".join(lines) + "\n")
    print("\n".join(lines))


def read_rows(path: Path) -> list[dict]:
    """The rows of a written ``<name>.csv``, numbers as numbers."""
    with path.open() as f:
        out = []
        for r in csv.DictReader(f):
            for key in ("epsilon", "cost_ratio", "tuning_s", "protocol_s", "run_s"):
                r[key] = float(r[key])
            for key in ("seed", "num_clients", "num_points"):
                r[key] = int(r[key])
            out.append(r)
        return out


if __name__ == "__main__":
    main()
