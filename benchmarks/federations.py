"""Realistic federations (issue 34): the protocol, the final answer and the server alone.

    python benchmarks/federations.py                 # every federation, both levels, 5 seeds
    python benchmarks/federations.py --quick         # 1 seed, eps = 1: a preliminary look
    python benchmarks/federations.py --federations heavy-tailed,uneven --levels client \\
        --epsilons 1,3 --seeds 2
    python benchmarks/federations.py --from-csv      # redraw the md from the csv
    python benchmarks/federations.py --resume        # go on from <name>.partial.csv
    python benchmarks/federations.py --family uneven [--seeds 2 ...]   # uneven clusters
        (benchmarks/uneven_clusters.py: its own generator, arguments and result files)

The federations are drawn by ``federation_data.py`` (public, one seed each, written once
to ``--data-dir`` as ``clients.npz`` + ``server.npz``) and run in-process with the data
set and k only (``dataset=file``, secret noise, tuning=auto). For each federation,
level, epsilon and seed s (the federation's seed and the run's):

* ``protocol``: FedDP-KMeans' own answer, ``privacy.check-share=0`` (no final choice);
* ``defaults``: the final answer, every setting at its default;
* ``server``: k-means on the server's data alone (``server-lloyds``: the centers the
  final private choice compares with; no private round, one run per seed serves every
  level and epsilon).

Each as cost / optimal (the run's ``diagnostics.json``; the optimum cached on disk), with
ARI, NMI and the Fowlkes-Mallows index. Writes ``docs/results/<name>.{csv,md}`` and the
missing-clusters table ``<name>-missing.md``; the md evaluates the issue's acceptance
lines on these rows. Each row is also appended to ``<name>.partial.csv`` as it arrives
(removed when the benchmark ends), so a stopped benchmark goes on with ``--resume``.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from defaults import median_ratio, returned_protocol, run_jobs
from federation_data import FEDERATIONS, VERSION, generate, write_federation
from results_table import write_csv

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"
EPSILONS = (0.5, 1.0, 3.0)
LEVELS = ("datapoint", "client")
SEEDS = 5
#: The acceptance lines' bars.
OPTIMAL_BAR, SERVER_BAR, SERVER_WIN_BAR, PROTOCOL_WIN, MISSING_BAR = 1.05, 1.02, 0.99, 0.97, 1.02
#: Fewest points for the acceptance lines to apply.
MIN_POINTS = 10_000


def default_data_dir() -> Path:
    """``$FEDKMEANS_CACHE_DIR/federations`` (default ``~/.cache/fedkmeans/federations``)."""
    root = os.environ.get("FEDKMEANS_CACHE_DIR", Path.home() / ".cache" / "fedkmeans")
    return Path(root) / "federations"


def facts(name: str, seed: int) -> dict:
    """The public facts of federation ``name`` of ``seed`` the summary needs."""
    fed = generate(name, seed)
    sizes = fed.client_sizes()
    return {"k": fed.spec.k, "dim": fed.spec.dim,
            "max_over_median_size": float(sizes.max() / np.median(sizes)),
            "server_points": int(fed.server_x.shape[0]),
            "server_clusters": fed.server_clusters(),
            "absent": " ".join(map(str, fed.absent)), "generator": VERSION}


def plan(args: argparse.Namespace, tmp: str) -> tuple[list[tuple], dict]:
    """The jobs (see ``defaults.one_job``) and the facts of each (federation, seed)."""
    jobs, known = [], {}
    for name in args.federations.split(","):
        for seed in range(args.seeds):
            clients, server = write_federation(name, seed, args.data_dir)
            known[(name, seed)] = facts(name, seed)
            data = ["dataset=file", f"data.path={clients}", f"data.server-path={server}",
                    f"k={FEDERATIONS[name].k}"]
            jobs.append((name, data, "datapoint", 1.0, "server", seed, f"{tmp}/{len(jobs)}"))
            for level in args.levels.split(","):
                for eps in args.epsilons:
                    for setting in ("protocol", "defaults"):
                        jobs.append((name, [*data, *args.set], level, eps, setting, seed,
                                     f"{tmp}/{len(jobs)}"))
    return jobs, known


def _max(rows: list[dict], key: str = "cost_ratio") -> float:
    return max((r[key] for r in rows), default=float("nan"))


def _med(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows if r.get(key) not in (None, "")]
    return f"{statistics.median(values):.3f}" if values else "-"


def _applies(rows: list[dict]) -> tuple[bool, str]:
    """Whether the acceptance lines apply: >= 10^4 points, every cluster on the server."""
    points = min(r["num_points"] for r in rows)
    clusters = min(r["server_clusters"] for r in rows)
    k = rows[0]["k"]
    if points < MIN_POINTS:
        return False, f"n/a: {points} points < {MIN_POINTS}"
    if clusters < k:
        return False, f"n/a: the server's data has {clusters} of {k} clusters"
    return True, ""


def section(name: str, rows: list[dict], checks: list[tuple]) -> list[str]:
    """One federation's tables; appends its acceptance lines to ``checks``."""
    server = [r for r in rows if r["setting"] == "server"]
    s_med = median_ratio(server)
    first = rows[0]
    lines = [
        f"### {name}: {FEDERATIONS[name].about}", "",
        f"{len(server)} seeds; {first['num_clients']} clients, "
        f"{int(statistics.median(r['num_points'] for r in rows))} points (median over "
        f"seeds), k = {first['k']}, d = {first['dim']}, client size "
        f"max / median {statistics.median(r['max_over_median_size'] for r in server):.0f}, "
        f"server {int(statistics.median(r['server_points'] for r in server))} points holding "
        f"{min(r['server_clusters'] for r in server)} of {first['k']} clusters (fewest over "
        "seeds).", "",
        f"Server alone (k-means on its data): median {s_med:.4f}, max {_max(server):.4f} x "
        f"optimal; ARI {_med(server, 'ari')}, NMI {_med(server, 'nmi')}, "
        f"FMI {_med(server, 'fmi')}.", "",
        "| level | eps | protocol median | protocol max | final median | final max | "
        "final / server | centers_from protocol | T | n_max chosen | ARI p / f | NMI p / f | "
        "FMI p / f |", "|" + "---|" * 13]
    applies, why = _applies(rows)
    for level in LEVELS:
        private = [r for r in rows if r["level"] == level and r["setting"] != "server"]
        for eps in sorted({r["epsilon"] for r in private}):
            cell = [r for r in private if r["epsilon"] == eps]
            prot = [r for r in cell if r["setting"] == "protocol"]
            final = [r for r in cell if r["setting"] == "defaults"]
            p_med, f_med = median_ratio(prot), median_ratio(final)
            kept = sum(map(returned_protocol, final))
            steps = sorted({str(r["chosen_lloyds_steps"]) for r in prot})
            n_max = sorted({str(r["chosen_max_points"]) for r in prot})
            lines.append(
                f"| {level} | {eps:g} | {p_med:.4f} | {_max(prot):.4f} | {f_med:.4f} | "
                f"{_max(final):.4f} | {f_med / s_med:.4f} | {kept}/{len(final)} | "
                f"{','.join(steps)} | {','.join(n_max)} | "
                + " | ".join(f"{_med(prot, m)} / {_med(final, m)}" for m in ("ari", "nmi", "fmi"))
                + " |")
            where = f"{name} {level} eps={eps:g}"
            if not (prot and final and server):
                continue
            if FEDERATIONS[name].missing is not None:
                by_seed = {r["seed"]: r["cost_ratio"] for r in server}
                worst = max(r["cost_ratio"] / by_seed[r["seed"]] for r in final)
                checks.append((f"{where}: final never > {MISSING_BAR} x server alone "
                               "(every seed, paired)", worst <= MISSING_BAR,
                               f"worst {worst:.4f}"))
            if not applies:
                continue
            if level == "datapoint" and eps == 1.0:
                checks.append((f"{where}: (a) protocol median <= {OPTIMAL_BAR} x optimal",
                               p_med <= OPTIMAL_BAR, f"{p_med:.4f}"))
            checks.append((f"{where}: (b) final median <= {SERVER_BAR} x server alone",
                           f_med <= SERVER_BAR * s_med, f"{f_med / s_med:.4f}"))
            if p_med <= PROTOCOL_WIN * s_med:
                checks.append((f"{where}: (b) protocol <= {PROTOCOL_WIN} x server "
                               f"({p_med / s_med:.4f}), so final <= {SERVER_WIN_BAR} x it",
                               f_med <= SERVER_WIN_BAR * s_med, f"{f_med / s_med:.4f}"))
    if not applies:
        lines += ["", f"Acceptance lines (a), (b): {why}."]
    return lines + [""]


def missing_table(rows: list[dict]) -> list[str]:
    """Cost / optimal against the number of clusters missing from the server's data."""
    missing = sorted({FEDERATIONS[r["federation"]].missing for r in rows
                      if FEDERATIONS[r["federation"]].missing is not None})
    if not missing:
        return []
    lines = ["Cells: median cost / optimal over the seeds of the final answer, "
             "(the protocol's own answer), [k-means on the server's data alone]; k = "
             f"{FEDERATIONS[f'missing-{missing[0]}'].k}; the server holds 20 points of each "
             "present cluster and 10 k uniform points in the clients' bounding box.", "",
             "| level | eps | " + " | ".join(f"{m} missing" for m in missing) + " |",
             "|" + "---|" * (2 + len(missing))]
    for level in LEVELS:
        epsilons = sorted({r["epsilon"] for r in rows
                           if r["level"] == level and r["setting"] != "server"})
        for eps in epsilons:
            cells = []
            for m in missing:
                sel = [r for r in rows if r["federation"] == f"missing-{m}"]
                cell = [r for r in sel if (r["level"], r["epsilon"]) == (level, eps)]
                final = median_ratio([r for r in cell if r["setting"] == "defaults"])
                prot = median_ratio([r for r in cell if r["setting"] == "protocol"])
                server = median_ratio([r for r in sel if r["setting"] == "server"])
                cells.append(f"{final:.4f} ({prot:.4f}) [{server:.4f}]")
            lines.append(f"| {level} | {eps:g} | " + " | ".join(cells) + " |")
    return lines


def summarise(rows: list[dict]) -> list[str]:
    """The md's body: one section per federation, the missing table, the acceptance lines."""
    lines, checks = [], []
    for name in [n for n in FEDERATIONS if any(r["federation"] == n for r in rows)]:
        lines += section(name, [r for r in rows if r["federation"] == name], checks)
    table = missing_table(rows)
    if table:
        lines += ["### Clusters missing from the server's data", "", *table, ""]
    lines += ["### Acceptance lines (issue 34), evaluated on these rows", "",
              "| line | met | value |", "|---|---|---|"]
    lines += [f"| {text} | {'yes' if ok else '**no**'} | {value} |" for text, ok, value in checks]
    lines += ["", f"Acceptance lines met: {sum(ok for _, ok, _ in checks)} of {len(checks)}."]
    return lines


def full_jobs() -> int:
    """Runs in a full benchmark: per federation and seed, 1 server-only run and 2 per cell."""
    return len(FEDERATIONS) * SEEDS * (1 + 2 * len(LEVELS) * len(EPSILONS))


def measured_commit() -> str:
    """The worktree's commit (``+changes`` when it has uncommitted changes)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=Path(__file__).parent, capture_output=True,
                              text=True, check=False).stdout.strip()
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return (git("rev-parse", "--short", "HEAD") or "unknown") + ("+changes" if dirty else "")


def header(args: argparse.Namespace, rows: list[dict], wall_s: float | None) -> str:
    shown = [a for i, a in enumerate(args.argv)  # the note is printed after, not here
             if a != "--note" and (i == 0 or args.argv[i - 1] != "--note")]
    command = "python benchmarks/federations.py " + " ".join(shown)
    runs = len(rows)
    per_run = sum(r["wall_s"] for r in rows) / max(runs, 1)
    timing = (f"Wall time of this benchmark: {wall_s / 60:.1f} min for {runs} runs "
              f"({per_run:.1f} s per run, {args.workers} worker process(es) on a shared "
              "2-core machine)" if wall_s is not None else
              f"{runs} runs, their wall times summing to {runs * per_run / 60:.1f} min "
              f"({per_run:.1f} s per run; resumed or redrawn from the csv)")
    if runs != full_jobs():
        timing += (f"; a full run ({full_jobs()} runs: every federation, both levels, eps "
                   f"{', '.join(f'{e:g}' for e in EPSILONS)}, {SEEDS} seeds) would take about "
                   f"{full_jobs() * per_run / 60:.0f} min at this rate")
    title = ("**PRELIMINARY** (a subset or one seed; the full benchmark's files are "
             "federations.{md,csv}). " if args.preliminary else "")
    how = "Redrawn from the csv by" if args.from_csv else "Measured by"
    given = (f"the data file, k and {', '.join(args.set)} given" if args.set else
             "only the data file and k given")
    return (f"{title}{how} `{command}` on commit {args.commit} (in-process, secret "
            f"noise, delta = 1e-6; {given}, tuning=auto). Cells: "
            "cost / optimal on the pooled client data; median and max over the seeds "
            "(seed s = the federation's seed and the run's). `protocol`: "
            "privacy.check-share=0; `final`: the defaults; `final / server`: final median "
            "over the server-alone median. `centers_from protocol`: final runs whose check "
            "returned the protocol's centers. `T`, `n_max chosen`: what tuning chose in the "
            f"protocol runs. {timing}.{' ' + args.note if args.note else ''}\n\n")


def read_rows(path: Path) -> list[dict]:
    """The rows of a written csv, numbers as numbers (``absent`` and names kept)."""
    with path.open() as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for key, value in row.items():
            if key in ("absent", "centers_from", "set", "federation", "level", "setting",
                       "chosen_algorithm", "chosen_lloyds_steps", "chosen_max_points"):
                continue
            try:
                row[key] = int(value) if value.lstrip("-").isdigit() else float(value)
            except ValueError:
                row[key] = None if value == "" else value
    return rows


def remaining(jobs: list[tuple], done: list[dict]) -> list[tuple]:
    """The jobs without a row in ``done`` (rows read back from a partial csv)."""
    finished = {(r["set"], r["level"], r["epsilon"], r["setting"], r["seed"]) for r in done}
    return [job for job in jobs if job[:1] + job[2:6] not in finished]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--federations", default=",".join(FEDERATIONS))
    parser.add_argument("--levels", default=",".join(LEVELS))
    parser.add_argument("--epsilons", default=",".join(f"{e:g}" for e in EPSILONS))
    parser.add_argument("--seeds", type=int, default=SEEDS, help="seeds 0 .. S-1")
    parser.add_argument("--quick", action="store_true",
                        help="1 seed, eps = 1, written as <name>-preliminary")
    parser.add_argument("--workers", type=int, default=1, help="spawned processes (2 cores)")
    parser.add_argument("--name", default="federations")
    parser.add_argument("--data-dir", type=Path, default=default_data_dir())
    parser.add_argument("--from-csv", action="store_true")
    parser.add_argument("--resume", action="store_true",
                        help="skip the runs already in <name>.partial.csv")
    parser.add_argument("--note", default="", help="a sentence added to the md's header")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="overrides added to every private run (not the server-alone "
                             "runs)")
    parser.add_argument("--preliminary", action="store_true",
                        help="label the md preliminary (implied by --quick)")
    parser.add_argument("--commit", default="",
                        help="the commit measured, for --from-csv (default: this worktree's)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.federations.split(",")) - set(FEDERATIONS))
    if unknown:
        parser.error(f"--federations: unknown {unknown} (known: {', '.join(FEDERATIONS)})")
    if args.quick:
        args.seeds, args.epsilons = 1, "1"
    args.preliminary = args.preliminary or args.quick
    args.commit = args.commit or measured_commit()
    if args.quick and args.name == "federations":
        args.name = "federations-preliminary"
    args.epsilons = [float(e) for e in args.epsilons.split(",")]
    args.argv = argv
    return args


def main(argv: list[str]) -> None:
    if argv[:1] == ["--family"] and argv[1:2] == ["uneven"]:
        # the uneven-cluster family (issue 48): its own generator and in-process runs
        import uneven_clusters

        uneven_clusters.main(argv[2:])
        return
    args = parse(argv)
    path, wall_s = OUT / f"{args.name}.csv", None
    if args.from_csv:
        rows = read_rows(path)
    else:
        partial = OUT / f"{args.name}.partial.csv"
        done = read_rows(partial) if args.resume and partial.exists() else []
        if not args.resume:
            partial.unlink(missing_ok=True)
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            jobs, known = plan(args, tmp)
            shown = ("set", "level", "epsilon", "setting", "seed", "cost_ratio", "centers_from")
            rows = done + run_jobs(remaining(jobs, done), args.workers, shown, partial)
        # a resumed benchmark's time is the sum of its runs' (the header says so)
        wall_s = None if done else time.perf_counter() - start
        for row in rows:
            row["federation"] = row.pop("set")
            key = (row["federation"], row["seed"])
            row.update(known[key] if key in known else facts(*key))
            row["centers_from"] = str(row["centers_from"]).split(" ")[0]
        rows.sort(key=lambda r: (list(FEDERATIONS).index(r["federation"]), r["setting"], r["level"],
                                 r["epsilon"], r["seed"]))
        write_csv(path, rows)
        partial.unlink(missing_ok=True)
    lines = summarise(rows)
    (OUT / f"{args.name}.md").write_text(header(args, rows, wall_s) + "\n".join(lines) + "\n")
    table = missing_table(rows)
    if table:
        (OUT / f"{args.name}-missing.md").write_text(
            header(args, rows, wall_s) + "\n".join(table) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
