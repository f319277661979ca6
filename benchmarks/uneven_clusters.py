"""Uneven cluster sizes (issue 48): the protocol, the final private choice and the server alone.

    python benchmarks/uneven_clusters.py                      # the whole family, 5 seeds
    python benchmarks/uneven_clusters.py --seeds 2 --epsilons 1 --levels datapoint
    python benchmarks/uneven_clusters.py --from-csv           # redraw the md from the csv
    python benchmarks/federations.py --family uneven ...      # the same, from federations.py

The generator (:func:`generate`, public, seeded, offline) draws ``points`` rows of k
Gaussian blobs (unit variance, centers uniform in [-10, 10]^d, as scikit-learn's
``make_blobs``) whose sizes are log-uniform between 1 and ``ratio`` with the smallest
and the largest at the two ends, spread over 100 clients uniformly at random; the
server's data is a uniform random ``sample`` of the rows, so at 1 % and 1:50 the
smallest cluster has one to three server points (sometimes none). Cells: ratio 1:10
and 1:50, server sample 1 % and 10 %, (k, d) in {(5, 5), (7, 10), (10, 20)}, both
levels, epsilon in {0.5, 1, 3}, 5 seeds.

Every run is in-process (:class:`fedkmeans.FedDPKMeans`, secret noise, only the data,
``X_server`` and k given):

* ``protocol``: the protocol's own answer (``check_share = 0``);
* ``final``: the final answer, every setting at its default;
* ``server``: the server-only answer B
  (:func:`fedkmeans.stages.check.server_only_centers`, the run's seed), public;
* ``a_in_run``: the protocol's centers A the final run's check compared (captured by
  wrapping :func:`~fedkmeans.stages.check.check_clip`: a diagnostic of this benchmark,
  never published by a run).

Costs are over optimal (k-means with 10 restarts and the swap repair on all the points,
or the cheapest answer seen if lower). ``choice_wrong``: the final answer is more than
2 % worse than the better of A and B of the same run (the choice's error in true cost).
Writes ``docs/results/uneven-clusters.{csv,md}``; the md evaluates the issue's
acceptance lines on these rows.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"
NAME = "uneven-clusters"
RATIOS = (10, 50)
SAMPLES = (0.01, 0.1)
SHAPES = ((5, 5), (7, 10), (10, 20))
EPSILONS = (0.5, 1.0, 3.0)
LEVELS = ("datapoint", "client")
POINTS = 20_000
CLIENTS = 100
#: The acceptance lines' bars.
MIN_BAR, SERVER_CAP, PROTOCOL_WIN, SERVER_WIN_BAR, OPTIMAL_BAR = 1.02, 1.05, 0.97, 0.99, 1.03
MIN_POINTS = 10_000


def generate(ratio: int, sample: float, k: int, d: int, seed: int, points: int = POINTS):
    """One federation: ``(x, labels, client_ids, server_x, server_labels)``, public and seeded."""
    rng = np.random.default_rng([48, ratio, int(round(sample * 1000)), k, d, seed])
    weights = np.exp(rng.uniform(0.0, math.log(ratio), k))
    weights[0], weights[1] = 1.0, float(ratio)
    sizes = np.maximum(np.round(weights / weights.sum() * points).astype(int), 1)
    centers = rng.uniform(-10.0, 10.0, (k, d))
    labels = np.repeat(np.arange(k), sizes)
    x = centers[labels] + rng.normal(size=(labels.size, d))
    order = rng.permutation(labels.size)
    x, labels = x[order], labels[order]
    ids = rng.integers(0, CLIENTS, labels.size)
    server = rng.choice(labels.size, max(int(round(sample * labels.size)), k), replace=False)
    return x, labels, ids, x[server], labels[server]


def _cost(x: np.ndarray, centers: np.ndarray) -> float:
    from fedkmeans.clustering.distances import nearest_squared_distances

    return float(nearest_squared_distances(x, centers).sum())


def merged(x: np.ndarray, labels: np.ndarray, centers: np.ndarray, k: int) -> int:
    """True clusters that share their majority center with another: ``k`` minus the distinct
    majority centers of the k clusters (0: every cluster has a center of its own)."""
    from fedkmeans.clustering.distances import squared_distances

    nearest = squared_distances(x, centers).argmin(axis=1)
    table = np.zeros((k, centers.shape[0]), dtype=np.int64)
    np.add.at(table, (labels, nearest), 1)
    return int(k - np.unique(table.argmax(axis=1)).size)


def one_cell(ratio, sample, k, d, seed, levels, epsilons) -> list[dict]:
    """Every row of one (ratio, sample, k, d, seed)."""
    from fedkmeans import FedDPKMeans
    from fedkmeans.clustering import kmeans
    from fedkmeans.clustering.repair import swap_repair
    from fedkmeans.seeding import integer_seed
    from fedkmeans.stages import check

    x, labels, ids, q, q_labels = generate(ratio, sample, k, d, seed)
    optimal = _cost(x, swap_repair(x, kmeans(x, k, seed=seed)))
    server = check.server_only_centers(q, k, integer_seed(seed, "init", "server-lloyds"))
    base = {"ratio": ratio, "sample": sample, "k": k, "dim": d, "seed": seed,
            "num_points": int(x.shape[0]), "server_points": int(q.shape[0]),
            "server_min_cluster": int(np.bincount(q_labels, minlength=k).min()),
            "smallest_cluster": int(np.bincount(labels, minlength=k).min())}
    server_cost = _cost(x, server)
    rows = []
    original = check.check_clip
    for level in levels:
        for eps in epsilons:
            seen = {}

            def spy(server_x, centers, alternative, _seen=seen):
                # A and B are in the run's public transform of the space: map them back
                # with the affine map that takes the transformed Q to Q
                scale = q.std(axis=0) / np.maximum(server_x.std(axis=0), 1e-300)
                shift = q.mean(axis=0) - server_x.mean(axis=0) * scale
                _seen["a"] = centers * scale + shift
                _seen["b"] = alternative * scale + shift
                return original(server_x, centers, alternative)

            started = time.perf_counter()
            check.check_clip = spy
            try:
                final = FedDPKMeans(n_clusters=k, epsilon=eps, level=level,
                                    random_state=seed).fit(x, groups=ids, X_server=q)
            finally:
                check.check_clip = original
            own = FedDPKMeans(n_clusters=k, epsilon=eps, level=level, random_state=seed,
                              settings={"check_share": 0}).fit(x, groups=ids, X_server=q)
            info = final.release_.get("check") or {}
            costs = {"protocol": _cost(x, own.cluster_centers_),
                     "final": _cost(x, final.cluster_centers_), "server": server_cost}
            merges = {"merged_protocol": merged(x, labels, own.cluster_centers_, k),
                      "merged_final": merged(x, labels, final.cluster_centers_, k),
                      "merged_server": merged(x, labels, server, k)}
            if "a" in seen:
                costs["a_in_run"] = _cost(x, seen["a"])
                costs["b_in_run"] = _cost(x, seen["b"])
            margins = info.get("margins_sigmas") or ["", ""]
            rows.append({**base, "level": level, "epsilon": eps, **costs, **merges,
                         "chosen": info.get("chosen", "none"),
                         "margin_sigmas": info.get("margin_sigmas", ""),
                         "wide_margin": margins[0], "narrow_margin": margins[1],
                         "within_noise": info.get("within_noise", ""),
                         "clip": info.get("clip", ""),
                         "seconds": round(time.perf_counter() - started, 2)})
    best = min([optimal, *(v for r in rows for key, v in r.items()
                           if key in ("protocol", "final", "server", "a_in_run", "b_in_run"))])
    for r in rows:
        r["optimal"] = best
        for key in ("protocol", "final", "server", "a_in_run", "b_in_run"):
            if key in r:
                r[key] = r[key] / best
        if "a_in_run" in r:
            r["choice_over_best"] = r["final"] / min(r["a_in_run"], r["b_in_run"])
            r["choice_wrong"] = r["choice_over_best"] > MIN_BAR
    return rows


def _float(row: dict) -> dict:
    out = {}
    for key, value in row.items():
        try:
            out[key] = float(value) if key not in ("level", "chosen") else value
        except ValueError:
            out[key] = value
    for key in ("ratio", "k", "dim", "seed", "num_points", "server_points",
                "server_min_cluster", "smallest_cluster"):
        out[key] = int(out[key])
    for key in ("merged_protocol", "merged_final", "merged_server"):
        # absent from files written before the merge count was added: unknown, not 0
        out[key] = int(out[key]) if out.get(key, "") != "" else None
    out["choice_wrong"] = str(row.get("choice_wrong")) == "True"
    return out


def summary(rows: list[dict], header: str = "") -> list[str]:
    """The md: per-cell medians and maxima, then the acceptance lines."""
    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        cells.setdefault((r["ratio"], r["sample"], r["k"], r["dim"], r["level"],
                          r["epsilon"]), []).append(r)
    lines = [
        "# Uneven cluster sizes: protocol, final answer, server alone", "",
        header, "",
        "Generator and cells: `benchmarks/uneven_clusters.py`'s docstring. Cost / optimal; "
        "`choice wrong`: the final answer more than 2 % worse "
        "than the better of the run's own A and B (true cost). Server min: fewest server "
        "points of one cluster over the seeds. Runs merging: runs whose answer leaves two "
        "true clusters with one majority center (protocol's own / final / server-only).",
        "",
        "| ratio | sample | k | d | level | eps | server min | protocol med / max | "
        "final med / max | server med / max | A kept | within noise | choice wrong "
        "(worst) | runs merging p / f / s |", "|" + "---|" * 14]
    for key in sorted(cells):
        c = cells[key]

        def mm(name, c=c):
            values = [r[name] for r in c]
            return f"{statistics.median(values):.3f} / {max(values):.3f}"

        wrong = [r for r in c if r["choice_wrong"]]
        worst = max((r["choice_over_best"] for r in c
                     if isinstance(r.get("choice_over_best"), float)), default=float("nan"))
        lines.append(
            f"| 1:{key[0]} | {key[1]:.0%} | {key[2]} | {key[3]} | {key[4]} | {key[5]:g} | "
            f"{min(r['server_min_cluster'] for r in c)} | {mm('protocol')} | {mm('final')} | "
            f"{mm('server')} | {sum(r['chosen'] == 'protocol' for r in c)}/{len(c)} | "
            f"{sum(str(r['within_noise']) == 'True' for r in c)}/{len(c)} | "
            f"{len(wrong)}/{len(c)} ({worst:.3f}) | "
            + " / ".join(_merging(c, who) for who in ("protocol", "final", "server")) + " |")
    lines += ["", "## Acceptance lines (cells with >= 10^4 points)", ""]
    big = [r for r in rows if r["num_points"] >= MIN_POINTS]
    lines += _acceptance(big, cells)
    return lines


def _merging(rows: list[dict], who: str) -> str:
    """Runs whose ``who`` answer merges clusters, or '-' when the file has no count."""
    counts = [r[f"merged_{who}"] for r in rows]
    return "-" if None in counts else str(sum(c > 0 for c in counts))


def _acceptance(big: list[dict], cells: dict) -> list[str]:
    out = []
    near = [r["final"] <= MIN_BAR * min(r["protocol"], r["server"]) for r in big]
    failing = [k for k, c in cells.items() if c[0]["num_points"] >= MIN_POINTS and sum(
        r["final"] <= MIN_BAR * min(r["protocol"], r["server"]) for r in c) < 0.95 * len(c)]
    out.append(f"- final <= {MIN_BAR} x min(protocol's own, server-only): {sum(near)} of "
               f"{len(near)} runs ({sum(near) / max(len(near), 1):.1%}); cells below 95 %: "
               f"{len(failing)} of {len(cells)}"
               + ("" if not failing else " (" + "; ".join(
                   f"1:{k[0]} {k[1]:.0%} k={k[2]} d={k[3]} {k[4]} eps={k[5]:g}"
                   for k in sorted(failing)[:12]) + ")"))
    cap = [r for r in big if r["final"] > SERVER_CAP * r["server"]]
    out.append(f"- final > {SERVER_CAP} x server-only: {len(cap)} of {len(big)} runs"
               + ("" if not cap
                  else " (worst " + f"{max(r['final'] / r['server'] for r in cap):.3f})"))
    wins = [r for r in big if r["protocol"] <= PROTOCOL_WIN * r["server"]]
    kept = [r for r in wins if r["final"] <= SERVER_WIN_BAR * r["server"]]
    out.append(f"- where protocol's own <= {PROTOCOL_WIN} x server's: final <= "
               f"{SERVER_WIN_BAR} x server's in {len(kept)} of {len(wins)} runs"
               + (f" ({len(kept) / len(wins):.1%})" if wins else ""))
    dp1 = [r for r in big if r["level"] == "datapoint" and r["epsilon"] == 1.0
           and r["server_min_cluster"] >= 1]
    good = [r for r in dp1 if r["protocol"] <= OPTIMAL_BAR]
    out.append(f"- data-point eps = 1, the server holding every cluster: protocol's own <= "
               f"{OPTIMAL_BAR} x optimal in {len(good)} of {len(dp1)} runs"
               + (f" ({len(good) / len(dp1):.1%})" if dp1 else ""))
    for who in ("protocol", "final", "server"):
        if any(r[f"merged_{who}"] is None for r in big):
            continue
        runs = [r for r in big if r[f"merged_{who}"] > 0]
        held = [r for r in runs if r["server_min_cluster"] >= 1]
        out.append(f"- {who} answer merges two true clusters under one center in {len(runs)} "
                   f"of {len(big)} runs ({len(held)} of them where the server holds every "
                   "cluster)")
    in_run = [r for r in big if isinstance(r.get("choice_over_best"), float)]
    wrong = [r for r in in_run if r["choice_wrong"]]
    out.append(f"- the choice wrong in true cost (final > {MIN_BAR} x the better of the "
               f"run's own A and B): {len(wrong)} of {len(in_run)} runs"
               + ("" if not wrong else ", by " + ", ".join(
                   f"{r['choice_over_best']:.3f}" for r in sorted(
                       wrong, key=lambda r: -r["choice_over_best"])[:10])))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epsilons", default=",".join(map(str, EPSILONS)))
    parser.add_argument("--levels", default=",".join(LEVELS))
    parser.add_argument("--shapes", default=";".join(f"{k},{d}" for k, d in SHAPES))
    parser.add_argument("--name", default=NAME)
    parser.add_argument("--from-csv", action="store_true")
    parser.add_argument("--commit", default="", help="the commit the csv was measured on "
                        "(with --from-csv; default: this checkout's)")
    parser.add_argument("--command", default="", help="the command that measured the csv "
                        "(with --from-csv)")
    args = parser.parse_args(argv)
    import subprocess

    commit = args.commit or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
        cwd=Path(__file__).parent).stdout.strip()
    command = args.command or "python benchmarks/uneven_clusters.py " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:]) if a != "--from-csv")
    started = time.perf_counter()
    csv_path, md_path = OUT / f"{args.name}.csv", OUT / f"{args.name}.md"
    if args.from_csv:
        with csv_path.open() as f:
            rows = [_float(r) for r in csv.DictReader(f)]
    else:
        from results_table import write_csv

        levels = args.levels.split(",")
        epsilons = [float(e) for e in args.epsilons.split(",")]
        shapes = [tuple(map(int, s.split(","))) for s in args.shapes.split(";")]
        rows = []
        for seed in range(args.seeds):
            for ratio in RATIOS:
                for sample in SAMPLES:
                    for k, d in shapes:
                        rows += one_cell(ratio, sample, k, d, seed, levels, epsilons)
                        print(f"seed {seed} 1:{ratio} {sample:.0%} k={k} d={d}: "
                              f"{len(rows)} rows", file=sys.stderr, flush=True)
                        write_csv(csv_path, rows)
        rows = [_float({k: str(v) for k, v in r.items()}) for r in rows]
        command += f" ({time.perf_counter() - started:.0f} s)"
    header = (f"Measured by `{command.strip()}` on commit {commit} (in-process "
              "FedDPKMeans fits, secret noise, delta = 1e-6, only the data, X_server and k "
              f"given); {len(rows)} rows.")
    md_path.write_text("\n".join(summary(rows, header)) + "\n")
    print(md_path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
