"""Honest settings on real data: `auto` vs a user's guess vs the server alone (issue 11).

    python benchmarks/real_data.py                       # every set, both levels, 5 seeds
    python benchmarks/real_data.py --datasets digits --seeds 2 --epsilons 1
    python benchmarks/real_data.py --workers 2           # two processes
    python benchmarks/real_data.py --levels client --settings auto --merge
        # re-measure only those rows; the other rows of docs/results/real_data.csv stay

For each real data set (``dataset=<name>``; its config sets k, the server data and the
declared largest client size ``privacy.max-points-per-client``), each level and
epsilon, and seeds 0..S-1, three settings of FedDP-KMeans, in-process:

* ``auto``: ``tuning=auto``, every guessable setting is ``auto`` (fedkmeans.tuning);
* ``guess``: what a user would pick without looking at client data: Delta = the
  largest norm in the server's data; at client level the loose bounds (the declared
  largest client size n_max times Delta^2 for sum p p^T, times Delta for the sums,
  times 1 for histograms and counts); every other setting at its default;
* ``server``: k-means on the server's data alone (``server-lloyds``, T = 0: no
  private round, epsilon spent 0; run once per seed, it does not depend on epsilon).

Writes docs/results/real_data.{csv,md} and docs/results/real_data.png (median cost
ratio against epsilon per data set and level). Cost ratio = cost / cost of
centralized non-private k-means on the pooled client data.
"""

from __future__ import annotations

import argparse
import csv
import math
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from results_table import write_csv

from fedkmeans.algorithms.feddp_kmeans import FEDDP_KMEANS

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"
DATASETS = ("digits", "diamonds", "mplsstops", "nycflights")
#: Data sets the auto rules were developed on; the others were only measured.
TUNED_ON = ("digits", "diamonds", "mixture")
EPSILONS = {"datapoint": (0.25, 0.5, 1.0, 2.0, 4.0), "client": (0.25, 0.5, 1.0, 2.0, 3.0, 4.0)}


def guess_settings(dataset: str, level: str) -> list[str]:
    """The user's guess: Delta from the server's data, loose client-level bounds."""
    from fedkmeans.data import load_server
    from fedkmeans.experiment.cli import compose_flat
    from fedkmeans.experiment.config import parse_config

    config = parse_config(compose_flat([f"dataset={dataset}"]))
    server_x, _ = load_server(config)
    radius = float(np.linalg.norm(server_x, axis=1).max())
    n_max = config.privacy.max_points_per_client
    out = [f"privacy.data-radius={radius!r}"]
    if level == "client":
        out += [f"privacy.clip-covariance={n_max * radius**2!r}",
                f"privacy.clip-sums={n_max * radius!r}",
                f"privacy.clip-histogram={float(n_max)!r}",
                f"privacy.clip-counts={float(n_max)!r}"]
    return out


def one_job(job: tuple) -> dict:
    from fedkmeans.experiment import run

    dataset, level, eps, setting, seed, out_dir = job
    overrides = [f"dataset={dataset}", f"privacy.level={level}", f"privacy.epsilon={eps}",
                 f"seed={seed}", f"output-dir={out_dir}"]
    if setting == "auto":
        overrides += ["tuning=auto"]
    elif setting == "guess":
        overrides += guess_settings(dataset, level)
    else:
        overrides += ["algorithm=server-lloyds", "privacy.lloyds-steps=0"]
    start = time.perf_counter()
    result = run(overrides)
    tuning = result.get("tuning") or {}
    chosen = tuning.get("chosen", {})
    return {
        "dataset": dataset, "level": level, "epsilon": eps, "setting": setting, "seed": seed,
        "cost_ratio": result["metrics"]["cost_ratio"],
        "spent_epsilon": result["privacy"]["epsilon"],
        "chosen_algorithm": chosen.get("algorithm", ""),
        "chosen_split": " ".join(f"{w:g}" for w in chosen.get("split", [])),
        "chosen_lloyds_steps": chosen.get("lloyds_steps", ""),
        "chosen_clip_histogram": chosen.get("clip_histogram", ""),
        # the final private check, where it ran: "protocol" or "server-only"
        "check": (result.get("check") or {}).get("chosen", ""),
        "tuning_s": result["timings"].get("tuning", 0.0),
        "run_s": result["timings"]["total"],
        "wall_s": time.perf_counter() - start,
    }


def summarise(rows: list[dict]) -> list[str]:
    """Markdown: per data set and level, the median cost ratio of each setting by epsilon."""
    lines = []
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        sel = [r for r in rows if r["dataset"] == dataset]
        tuned = "tuned on" if dataset in TUNED_ON else "held out (not tuned on)"
        server = statistics.median(r["cost_ratio"] for r in sel if r["setting"] == "server")
        lines += [f"### {dataset} ({tuned})", "",
                  f"k-means on the server's data alone: {server:.4f} x optimal (median).", "",
                  "| level | epsilon | auto | guess | auto / server | auto chose "
                  "(FedDP runs of the seeds) | tuning s | run s |",
                  "|---|---|---|---|---|---|---|---|"]
        # the server-only rows are tagged with one level and epsilon but serve every cell
        private = [r for r in sel if r["setting"] != "server"]
        for level in dict.fromkeys(r["level"] for r in private):
            for eps in sorted({r["epsilon"] for r in private if r["level"] == level}):
                cell = [r for r in private if (r["level"], r["epsilon"]) == (level, eps)]
                med = {s: statistics.median([r["cost_ratio"] for r in cell
                                             if r["setting"] == s] or [math.nan])
                       for s in ("auto", "guess")}
                autos = [r for r in cell if r["setting"] == "auto"]
                fed = sum(r["chosen_algorithm"] == FEDDP_KMEANS.name for r in autos)
                steps = sorted({str(r["chosen_lloyds_steps"]) for r in autos
                                if r["chosen_algorithm"] == FEDDP_KMEANS.name})
                checked = [r.get("check", "") for r in autos if r.get("check")]
                checks = (f"; checked {len(checked)}, server kept "
                          f"{checked.count('server-only')}" if checked else "")
                lines.append(
                    f"| {level} | {eps:g} | {med['auto']:.4f} | {med['guess']:.4f} | "
                    f"{med['auto'] / server:.4f} | {fed}/{len(autos)}"
                    + (f" (T in {{{', '.join(steps)}}}{checks})" if steps else "") + " | "
                    f"{statistics.median(r['tuning_s'] for r in autos):.1f} | "
                    f"{statistics.median(r['run_s'] for r in autos):.1f} |")
        lines.append("")
    return lines


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    levels = ("datapoint", "client")
    fig, axes = plt.subplots(len(levels), len(datasets), figsize=(4 * len(datasets), 7),
                             squeeze=False)
    server = {d: statistics.median(r["cost_ratio"] for r in rows
                                   if r["dataset"] == d and r["setting"] == "server")
              for d in dict.fromkeys(r["dataset"] for r in rows)}
    colours = {"auto": "tab:blue", "guess": "tab:orange", "server": "tab:grey"}
    labels = {"auto": "FedDP-KMeans, auto settings", "guess": "FedDP-KMeans, user's guess",
              "server": "k-means on server data alone"}
    for i, level in enumerate(levels):
        for j, dataset in enumerate(datasets):
            ax = axes[i][j]
            for setting in ("auto", "guess"):
                sel = [r for r in rows if (r["dataset"], r["level"], r["setting"])
                       == (dataset, level, setting)]
                eps = sorted({r["epsilon"] for r in sel})
                if not eps:
                    continue
                med = [statistics.median(r["cost_ratio"] for r in sel if r["epsilon"] == e)
                       for e in eps]
                ax.plot(eps, med, marker="o", color=colours[setting], label=labels[setting])
            ax.axhline(server[dataset], color=colours["server"], linestyle="--",
                       label=labels["server"])
            ax.set_xscale("log")
            ax.set_xticks(EPSILONS["client"])
            ax.set_xticklabels([f"{e:g}" for e in EPSILONS["client"]])
            ax.minorticks_off()
            ax.set_title(f"{dataset}, {level} level", fontsize=10)
            ax.set_xlabel("epsilon")
            if j == 0:
                ax.set_ylabel("cost / optimal (median of seeds)")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--levels", default="datapoint,client")
    parser.add_argument("--epsilons", default="", help="comma-separated (default: all)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--name", default="real_data")
    parser.add_argument("--settings", default="auto,guess,server",
                        help="comma-separated subset of auto, guess, server")
    parser.add_argument("--merge", action="store_true",
                        help="replace only the measured (data set, level, setting) rows of "
                        "docs/results/<name>.csv and keep the others")
    parser.add_argument("--from-csv", action="store_true",
                        help="only redraw the table and plot from docs/results/<name>.csv")
    args = parser.parse_args()
    if args.from_csv:
        report(read_rows(OUT / f"{args.name}.csv"), args)
        return
    settings = args.settings.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        jobs = []
        for dataset in args.datasets.split(","):
            for level in args.levels.split(","):
                epsilons = ([float(e) for e in args.epsilons.split(",")] if args.epsilons
                            else EPSILONS[level])
                for eps in epsilons:
                    for setting in ("auto", "guess"):
                        for seed in range(args.seeds if setting in settings else 0):
                            jobs.append((dataset, level, eps, setting, seed,
                                         f"{tmp}/{len(jobs)}"))
            for seed in range(args.seeds if "server" in settings else 0):
                # no private round: one run serves every cell
                jobs.append((dataset, "datapoint", 1.0, "server", seed, f"{tmp}/{len(jobs)}"))
        rows = []
        start = time.perf_counter()
        with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
            for row in pool.imap(one_job, jobs):
                rows.append(row)
                print(f"[{len(rows)}/{len(jobs)} {time.perf_counter() - start:.0f} s] "
                      + " ".join(f"{k}={row[k]}" for k in ("dataset", "level", "epsilon",
                                                           "setting", "seed", "cost_ratio",
                                                           "chosen_algorithm")), flush=True)
    if args.merge:
        measured = {(r["dataset"], r["level"], r["setting"]) for r in rows}
        kept = [r for r in read_rows(OUT / f"{args.name}.csv")
                if (r["dataset"], r["level"], r["setting"]) not in measured]
        rows = kept + rows
    write_csv(OUT / f"{args.name}.csv", rows)
    report(rows, args)


def read_rows(path: Path) -> list[dict]:
    """The rows of a written ``<name>.csv``, numbers as numbers."""
    with path.open() as f:
        return [{**r, "epsilon": float(r["epsilon"]), "seed": int(r["seed"]),
                 "cost_ratio": float(r["cost_ratio"]), "tuning_s": float(r["tuning_s"]),
                 "run_s": float(r["run_s"])} for r in csv.DictReader(f)]


def report(rows: list[dict], args: argparse.Namespace) -> None:
    """Write ``<name>.md`` and ``<name>.png`` from the rows."""
    lines = summarise(rows)
    (OUT / f"{args.name}.md").write_text(
        f"Measured by `python benchmarks/real_data.py` "
        f"({len({r['seed'] for r in rows})} seeds, in-process, 2 worker processes on 2 "
        "cores, delta = 1e-6). Cells: median cost / optimal over the seeds; auto / server "
        "= the auto median over the median of k-means on the server's data alone. Run s "
        "includes the tuning s.\n\n"
        + "\n".join(lines))
    plot(rows, OUT / f"{args.name}.png")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
