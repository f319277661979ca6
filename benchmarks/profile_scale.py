"""Profile the scale benchmark's run, or measure the optimal-cost diagnostic's memory.

    python benchmarks/profile_scale.py --clients 100000 [--write after]
    python benchmarks/profile_scale.py --clients 100000 --flower 60 40
    python benchmarks/profile_scale.py --optimal-cost 30000:50:100 100000:10:20

Default: one in-process FedDP-KMeans run with the configuration of
``benchmarks/scale.py`` (mixture, 50 points per client, d = 100, client level,
eps = 3, 100 nodes, every other setting at its default); prints the round timings and
the functions with the most own time (cProfile adds roughly 10-30% to the wall time).

``--flower DELAY SECONDS``: the same configuration on ``flwr run`` (engine
``flower``, 100 SuperNodes, 2 actors), sampled by py-spy (``pip install py-spy``) for
SECONDS, DELAY seconds after the ``flwr-simulation`` process appears: that process
(the ServerApp and Flower's simulation engine) and every ClientApp actor of the run.
Prints, per process, the functions with the most samples (own and inclusive) and the
round timings; the raw samples stay in ``--spy-dir``.

``--optimal-cost clients:points:dim ...``: for each shape, in a fresh process, the
peak resident memory above the process's baseline and the time of
:func:`fedkmeans.evaluation.optimal_cost` (the pooled k-means every cost ratio is
measured against), next to the same k-means done as before this benchmark existed
(the pooled data through ``data.load_pooled`` -- per-client arrays concatenated, with
labels -- and scikit-learn's copy of it); both optima, their relative difference, and
the peaks in units of the data's size (n x d x 8 bytes). Rows go to
docs/results/scale-optimal-cost.{csv,md}.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from results_table import markdown_table, write_csv

from fedkmeans.experiment import run

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"

BASE = [
    "optimal-cost=skip",  # evaluation, not the algorithm
    "privacy.level=client", "data.points-per-client=50", "data.dim=100",
    "privacy.split='0.35,0.1,0.45,0.1'", "privacy.clip-covariance=1500",
    "privacy.clip-sums=110", "privacy.min-server-weight=200", "privacy.epsilon=3",
    "privacy.max-points-per-client=50",
    "federation.num-nodes=100",
]


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _peak_during(compute) -> tuple[object, int, float]:
    """``compute()``'s value, this process's peak RSS while it ran (sampled every
    10 ms) and its seconds."""
    peak, stop = [_rss()], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.01)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    start = time.perf_counter()
    try:
        value = compute()
    finally:
        seconds = time.perf_counter() - start
        stop.set()
        thread.join()
    return value, peak[0], seconds


def optimal_cost_memory(clients: int, points: int, dim: int, how: str) -> dict:
    """In this (fresh) process: the optimal cost's peak memory above the baseline."""
    os.environ["FEDKMEANS_CACHE_DIR"] = tempfile.mkdtemp()  # never read a cached value
    import numpy as np  # noqa: F401 - loaded before the baseline
    import sklearn.cluster  # noqa: F401

    from fedkmeans import evaluation, metrics
    from fedkmeans.clustering import optimal
    from fedkmeans.data import load_pooled
    from fedkmeans.experiment.config import parse_config

    config = parse_config({"data.num-clients": clients, "data.points-per-client": points,
                           "data.dim": dim})

    def before() -> float:  # the diagnostic as it was: pooled copy, scikit-learn's copy
        from sklearn.cluster import KMeans

        x = load_pooled(config)[0]
        model = KMeans(n_clusters=config.k, n_init=config.optimal_restarts,
                       random_state=optimal._sklearn_random_state(config.seed)).fit(x)
        return metrics.kmeans_cost(x, model.cluster_centers_)

    def now() -> float:
        return evaluation.optimal_cost(config)

    baseline = _rss()
    cost, peak, seconds = _peak_during(before if how == "before" else now)
    data = clients * points * dim * 8
    return {"clients": clients, "points_per_client": points, "dim": dim, "version": how,
            "data_gib": round(data / 2**30, 3), "optimal_cost": cost,
            "seconds": round(seconds, 1),
            "peak_above_baseline_gib": round((peak - baseline) / 2**30, 3),
            "peak_over_data": round((peak - baseline) / data, 3)}


def measure_optimal_cost(shapes: list[str], output: Path) -> None:
    rows = []
    for shape in shapes:
        clients, points, dim = (int(v) for v in shape.split(":"))
        pair = {}
        for how in ("before", "now"):
            with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
                pair[how] = pool.submit(optimal_cost_memory, clients, points, dim,
                                        how).result()
        relative = abs(pair["now"]["optimal_cost"] - pair["before"]["optimal_cost"]) / abs(
            pair["before"]["optimal_cost"])
        for how in ("before", "now"):
            row = dict(pair[how])
            row["optimal_cost"] = f"{row['optimal_cost']:.10g}"
            row["relative_difference"] = f"{relative:.2e}"
            rows.append(row)
            print(row, flush=True)
    write_csv(output.with_suffix(".csv"), rows)
    output.with_suffix(".md").write_text(
        "Measured by `python benchmarks/profile_scale.py --optimal-cost "
        + " ".join(shapes) + "` on 2 cores (mixture, k = 10, 10 restarts): the peak "
        "resident memory of a fresh process above its baseline while it computes the "
        "optimal cost, in GiB and in units of the pooled data (clients x points x d x 8 "
        "bytes). *before*: the pooled data from `data.load_pooled` and scikit-learn's "
        "copy; *now*: `evaluation.optimal_cost` (one array filled client block by "
        "client block, centered in place; tolerance, k-means++ seeding and costs "
        "computed in row blocks). "
        "*relative_difference*: between the two optima.\n\n"
        + "\n".join(markdown_table(rows)) + "\n")


def _environ_home(pid: int) -> bytes | None:
    try:
        for var in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if var.startswith(b"FLWR_HOME=") and b"fedkmeans-flwr-" in var:
                return var[len(b"FLWR_HOME="):]
    except OSError:
        pass
    return None


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


def _pids() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]


def spy_on_flower(directory: Path, delay: float, seconds: int, known: set[bytes]) -> None:
    """py-spy the run's flwr-simulation process and actors (a thread of this process)."""
    import subprocess

    home = sim = None
    while home is None:  # the run's FLWR_HOME: one this process had not seen before
        for pid in _pids():
            found = _environ_home(pid)
            if b"flwr-simulation" in _cmdline(pid) and found and found not in known:
                home, sim = found, pid
        time.sleep(0.5)
    time.sleep(delay)
    actors = [pid for pid in _pids()
              if b"ClientAppActor" in _cmdline(pid) and _environ_home(pid) == home]
    procs = [subprocess.Popen(
        ["py-spy", "record", "--nonblocking", "--format", "raw", "--rate", "50",
         "--duration", str(seconds), "--pid", str(pid),
         "--output", str(directory / f"{name}-{pid}.txt")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for name, pid in [("flwr-simulation", sim)] + [("actor", a) for a in actors]]
    for proc in procs:
        proc.wait()


def summarise_samples(path: Path, top: int = 12) -> str:
    """Own and inclusive shares of py-spy's collapsed stacks, idle waits included."""
    from collections import Counter

    own, inclusive, total = Counter(), Counter(), 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = [f.split(" (")[0] for f in stack.split(";")]
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    lines = [f"== {path.name}: {total} samples"]
    lines += [f"  own  {100 * v / total:5.1f}% {k}" for k, v in own.most_common(top)]
    lines += [f"  incl {100 * v / total:5.1f}% {k}" for k, v in inclusive.most_common(2 * top)]
    return "\n".join(lines)


def profile_flower(clients: int, delay: float, seconds: int, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    known = {h for h in map(_environ_home, _pids()) if h}
    spy = threading.Thread(target=spy_on_flower, args=(directory, delay, seconds, known),
                           daemon=True)
    spy.start()
    with tempfile.TemporaryDirectory() as tmp:
        result = run(BASE + [f"data.num-clients={clients}", "federation.engine=flower",
                             f"output-dir={tmp}/run"])
    spy.join(timeout=seconds + 60)
    print({k: round(v, 2) for k, v in result["timings"].items()})
    for path in sorted(directory.glob("*.txt")):
        print(summarise_samples(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=10_000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--optimal-cost", nargs="+", metavar="CLIENTS:POINTS:DIM")
    parser.add_argument("--flower", nargs=2, type=float, metavar=("DELAY", "SECONDS"))
    parser.add_argument("--spy-dir", default=tempfile.mkdtemp(prefix="profile-flower-"))
    parser.add_argument("--output", default=str(OUT / "scale-optimal-cost"))
    parser.add_argument("--write", metavar="LABEL",
                        help="also write the timings and the top entries to "
                             "docs/results/scale-profile-LABEL.md")
    args = parser.parse_args()
    if args.optimal_cost:
        measure_optimal_cost(args.optimal_cost, Path(args.output))
        return
    if args.flower:
        profile_flower(args.clients, args.flower[0], int(args.flower[1]), Path(args.spy_dir))
        return
    with tempfile.TemporaryDirectory() as tmp:
        profile = cProfile.Profile()
        result = profile.runcall(
            run, BASE + [f"data.num-clients={args.clients}", f"output-dir={tmp}/run"]
        )
    timings = {k: round(v, 2) for k, v in result["timings"].items()}
    print(timings)
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(args.top)
    print(out.getvalue())
    if args.write:
        write_profile(args.write, args.clients, timings, profile, args.top)


def write_profile(label: str, clients: int, timings: dict, profile: cProfile.Profile,
                  top: int) -> None:
    """docs/results/scale-profile-LABEL.md: the run's timings and its top entries by own time."""
    import subprocess

    import fedkmeans

    package = Path(fedkmeans.__file__).resolve().parents[1]
    commit = subprocess.run(["git", "-C", str(package), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    stats = pstats.Stats(profile)
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:top]
    lines = [
        f"Measured by `python benchmarks/profile_scale.py --clients {clients} --write "
        f"{label}` with the package of commit {commit or 'unknown'}: one in-process run "
        f"of `benchmarks/scale.py`'s configuration at {clients} clients x 50 points x "
        "d = 100, client level, under cProfile (which slows Python-heavy code: the "
        "entries show where the time goes, not how long a run takes).", "",
        "The run's own timings (seconds):", "",
        "| " + " | ".join(timings) + " |", "|" + "---|" * len(timings),
        "| " + " | ".join(str(v) for v in timings.values()) + " |", "",
        f"Top {top} functions by own time:", "",
        "| calls | own s | cumulative s | function |", "|---|---|---|---|",
    ]
    for (path, line, name), (_, calls, own, cumulative, _) in rows:
        where = f"{Path(path).name}:{line}({name})" if line else name
        lines.append(f"| {calls} | {own:.3f} | {cumulative:.3f} | `{where}` |")
    (OUT / f"scale-profile-{label}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
