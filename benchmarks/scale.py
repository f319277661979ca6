"""How FedDP-KMeans scales with the number of clients, per engine and shard size.

    python benchmarks/scale.py                                  # 10^2 .. 10^4 clients
    python benchmarks/scale.py --sizes 100000 --engines inprocess:100 flower:100
    python benchmarks/scale.py --sizes 100000 --engines inprocess:100 --repeats 3
    python benchmarks/scale.py --sizes 1000000 --engines inprocess:100 flower:100 \
        --points-per-client 10 --dim 20 --no-lower-bound

Mixture, client level, eps = 3, every other setting at its default (default 50
points per client, d = 100). For every (clients, engine:nodes) it records the wall
time of the whole run, the time per protocol round (register; the estimate round,
inside *tuning*, the plan; FedDP-Init 1-3; the Lloyds steps; the final check;
evaluation), the time after start-up (all of them but registration), the peak
resident memory of the
whole process tree and of each kind of process in it (this driver; for `flower` the
SuperLink, the SuperExec, the `flwr-simulation` process that hosts the ServerApp and
the Ray driver, the Ray workers and daemons, the `flwr` CLI), and the time of the same
arithmetic done in one process with vectorised NumPy on the pooled data (the lower
bound: no messages, no per-client loops). Rows are merged into docs/results/scale.csv
(one row per clients, engine, nodes, points per client and d: a rerun replaces its
row); scale.md and the log-log plot scale.png are written from the whole CSV.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from fresh_run import cold_caches
from results_table import markdown_table, write_csv
from scipy.linalg import blas

from fedkmeans.clustering import top_eigenvectors, weighted_kmeans
from fedkmeans.clustering.distances import BLOCK
from fedkmeans.data import load_client, load_server
from fedkmeans.experiment import run
from fedkmeans.experiment.config import parse_config
from fedkmeans.node.blocks import assign_in_blocks, one_hot_sums
from fedkmeans.stages.check import cost_differences

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"

BASE = [
    "optimal-cost=skip",  # evaluation, not the algorithm
    "privacy.level=client", "privacy.split='0.35,0.1,0.45,0.1'",
    "privacy.min-server-weight=200", "privacy.epsilon=3",
]
#: Kinds of process, by a marker in their command line (first match wins).
ROLES = (
    ("superlink", "flower-superlink"), ("superexec", "flower-superexec"),
    ("serverapp", "flwr-simulation"), ("ray", "ray::"), ("ray", "raylet"),
    ("ray", "gcs_server"), ("ray", "ray/"), ("flwr-cli", "flwr run"),
)


class PeakMemory:
    """Sample the RSS of this process tree every 0.2 s: peak total and peak per kind."""

    def __init__(self) -> None:
        self.peak = 0
        self.by_role: dict[str, int] = {}
        #: Peak bytes of spilled nodes' files (page cache: outside every process's RSS).
        self.shards = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            roles: dict[str, int] = {}
            for pid in _tree(os.getpid()):
                role = "driver" if pid == os.getpid() else _role(pid)
                roles[role] = roles.get(role, 0) + _rss(pid)
            self.peak = max(self.peak, sum(roles.values()))
            for role, rss in roles.items():
                self.by_role[role] = max(self.by_role.get(role, 0), rss)
            self.shards = max(self.shards, _shard_bytes())
            time.sleep(0.2)


def _shard_bytes() -> int:
    """Bytes of the nodes' files spilled by this run (fedkmeans.client_app): its flower
    runs' shared directories and this process's nameless files (the in-process engine)."""
    from fedkmeans import client_app

    dirs = [Path(os.fsdecode(home)).parent / "node-shards" for home in _HOMES]
    total = client_app.nameless_bytes()
    for directory in dirs:
        try:
            total += sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
        except OSError:  # removed while being read
            pass
    return total


def _role(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return "other"
    return next((role for role, marker in ROLES if marker in cmd), "other")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _flwr_home(pid: int) -> bytes | None:
    """The FLWR_HOME of ``pid`` when the flower engine set it (fedkmeans-flwr-*)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for var in env.split(b"\0"):
        if var.startswith(b"FLWR_HOME=") and b"fedkmeans-flwr-" in var:
            return var[len(b"FLWR_HOME="):]
    return None


#: FLWR_HOMEs of this benchmark's own flower runs (seen on its descendants).
_HOMES: set[bytes] = set()


def _tree(root: int) -> set[int]:
    """``root`` and all its descendants, including the detached Flower/Ray daemons of
    its own runs (found by their environment: the FLWR_HOME its descendants carry, so
    another user's concurrent run is not counted)."""
    tree, stack, seen = _children(), [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stack.extend(tree.get(pid, []))
    _HOMES.update(h for h in map(_flwr_home, seen - {root}) if h)
    if _HOMES:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) not in seen and (
                    _flwr_home(int(entry.name)) in _HOMES):
                seen.add(int(entry.name))
    return seen


#: Points per vectorised block of the NumPy lower bound: the nodes' block
#: (:data:`fedkmeans.clustering.distances.BLOCK`), the fastest (5M x 300 distances at
#: once would be 12 GB; 100,000 at a time was 3 x slower than 4096).
CHUNK = BLOCK


def numpy_lower_bound(n_clients: int, points: int, dim: int, lloyds_steps: int = 0,
                      check: bool = False, repeats: int = 1) -> dict[str, float]:
    """Seconds of the default pipeline's arithmetic, vectorised in one process.

    Parameters
    ----------
    n_clients, points, dim : int
        The federation's shape (the mixture, every client ``points`` points of ``dim``).
    lloyds_steps : int
        T, the FedDP-Lloyds steps the run executed (its resolved ``lloyds_steps``).
    check : bool
        Whether the run ended with the final private check.
    repeats : int
        Passes of each bound on the same data: the median is returned.

    Returns
    -------
    dict
        ``client_level``: every pass a default client-level run makes over the
        clients' data, with the per-client statistics that level needs (the server
        clips each client's own statistic, so their sum is not the pooled statistic),
        done on the pooled data in one process with vectorised NumPy (no noise, no
        messages, no loop over clients: batched products over the clients' points,
        which are all of one size here, and one-hot products keyed by client). What
        no federated run of that pipeline can beat:

        * the estimate round: every point's norm, its client's norm-bin counts, and
          each client's ``||X^T X||_F`` (from the ``n x n`` Gram matrices when
          ``n < d``; from step 1's matrices, counted there, otherwise);
        * step 1: each client's ``X^T X`` (upper triangle), clipped by its Frobenius
          norm, summed; the top-k eigenvectors;
        * step 2: each projected point's nearest projected server point, each client's
          histogram, clipped (l1) and summed; weighted k-means on the projected server
          data;
        * step 3 and T Lloyds steps: the nearest (projected) center, each client's
          per-cluster sums and counts, clipped jointly, summed;
        * the check: each point's cost difference between two center sets, clipped,
          summed per client, each client's sum clipped;
        * the evaluation: the nearest center and the cost.

        Not counted: the tuning's public simulation (it reads no client data).
    pooled : float
        The same passes without the per-client statistics (one pooled ``X^T X``, one
        histogram, one set of sums): the bound of the rows measured before.
    per_client_step1 : float
        Step 1's per-client arithmetic alone, as a node does it (one ``dsyrk`` per
        client read into its upper triangle), for every client.
    """
    config = parse_config({"data.num-clients": n_clients, "data.points-per-client": points,
                           "data.dim": dim})
    clients = [load_client(config, j)[0] for j in range(n_clients)]
    x = np.concatenate(clients)
    q, _ = load_server(config)
    k = config.k
    weighted_kmeans(q, np.ones(q.shape[0]), k, seed=0)  # its imports, outside every timing
    client_level = [_client_level_passes(x, q, n_clients, points, k, lloyds_steps, check)
                    for _ in range(repeats)]
    pooled = [_pooled_passes(x, q, k, lloyds_steps, check) for _ in range(repeats)]
    return {"client_level": float(np.median(client_level)), "pooled": float(np.median(pooled)),
            "per_client_step1": _per_client_step1(clients, dim)}


def _evaluate(x: np.ndarray, centers: np.ndarray) -> float:
    labels = assign_in_blocks(x, centers)
    return sum(float(np.sum((x[i:i + CHUNK] - centers[labels[i:i + CHUNK]]) ** 2))
               for i in range(0, x.shape[0], CHUNK))


def _pooled_passes(x, q, k, lloyds_steps, check) -> float:
    start = time.perf_counter()
    np.sqrt(np.einsum("ij,ij->i", x, x))  # the estimate round: every point's norm
    basis = top_eigenvectors(x.T @ x, k)  # step 1
    projected_server = q @ basis.T
    projected = x @ basis.T
    hist = np.bincount(assign_in_blocks(projected, projected_server),  # step 2
                       minlength=q.shape[0]).astype(float)
    xi = weighted_kmeans(projected_server, hist, k, seed=0)
    labels = assign_in_blocks(projected, xi)  # step 3
    centers = _means(one_hot_sums(x, labels, k), np.bincount(labels, minlength=k))
    for _ in range(lloyds_steps):  # FedDP-Lloyds
        labels = assign_in_blocks(x, centers)
        centers = _means(one_hot_sums(x, labels, k), np.bincount(labels, minlength=k))
    if check:  # the check: both center sets
        assign_in_blocks(x, centers), assign_in_blocks(x, centers[::-1].copy())
    _evaluate(x, centers)
    return time.perf_counter() - start


def _means(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The centers a step releases, ``sums / counts`` (an empty cluster: its sum).

    The bound's centers must be means, as the run's are: with the sums themselves as
    centers (the bound before this was fixed) nearly every point went to one center,
    and the one-hot sums of such a degenerate assignment cost about half as much.
    """
    return sums / np.maximum(counts, 1.0)[:, None]


#: Clients per block of the client-level bound's per-client statistics: the fastest
#: measured (at 10^5 x 50 x 100, passes on one data set: 7.8 s in blocks of 256 clients,
#: 8.7 s in blocks of 1,024 or 4,096, whose (clients, d x d) temporaries are fresh memory).
CLIENT_BLOCK = 256


def _clip_sum(rows: np.ndarray, norms: np.ndarray, bound: float) -> np.ndarray:
    """Sum of the rows scaled to norm ``bound`` (the server's per-client clip)."""
    return np.minimum(1.0, bound / np.maximum(norms, 1e-300)) @ rows


def _client_level_passes(x, q, m, n, k, lloyds_steps, check) -> float:
    d = x.shape[1]
    x3 = x.reshape(m, n, d)  # a view: client j's points are x3[j]
    owner = np.repeat(np.arange(m), n)
    blocks = [(s, min(s + CLIENT_BLOCK, m)) for s in range(0, m, CLIENT_BLOCK)]
    start = time.perf_counter()
    # the estimate round: the points' norms in 160 bins per client; the Gram norms
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    bins = np.clip(np.floor(4 * np.log2(np.maximum(norms, 1e-300)) + 80), 0, 159)
    np.bincount(owner * 160 + bins.astype(np.int64), minlength=m * 160)
    if n < d:
        for a, b in blocks:
            gram = np.matmul(x3[a:b], x3[a:b].transpose(0, 2, 1))
            np.sqrt(np.einsum("mij,mij->m", gram, gram))
    # step 1: per-client X^T X, clipped by its Frobenius norm, summed (full matrices:
    # packing the upper triangles only shrinks the messages)
    total = np.zeros(d * d)
    for a, b in blocks:
        second = np.matmul(x3[a:b].transpose(0, 2, 1), x3[a:b]).reshape(b - a, d * d)
        total += _clip_sum(second, np.sqrt(np.einsum("ij,ij->i", second, second)), 30.0 * n)
    basis = top_eigenvectors(total.reshape(d, d), k)
    # step 2: per-client histograms of the nearest projected server point
    projected_server = q @ basis.T
    projected = x @ basis.T
    nearest = assign_in_blocks(projected, projected_server)
    size = q.shape[0]
    hist = np.zeros(size)
    for a, b in blocks:
        per_client = np.bincount(owner[a * n:b * n] * size + nearest[a * n:b * n] - a * size,
                                 minlength=(b - a) * size).reshape(b - a, size)
        hist += _clip_sum(per_client.astype(float), per_client.sum(axis=1), float(n))
    xi = weighted_kmeans(projected_server, hist, k, seed=0)

    def sums_counts(data: np.ndarray, centers: np.ndarray) -> np.ndarray:
        labels = assign_in_blocks(data, centers)
        sums, counts = np.zeros((k, d)), np.zeros(k)
        for a, b in blocks:
            keys = owner[a * n:b * n] * k + labels[a * n:b * n] - a * k
            per_client = one_hot_sums(x[a * n:b * n], keys, (b - a) * k).reshape(b - a, k, d)
            per_client_counts = np.bincount(keys, minlength=(b - a) * k).reshape(b - a, k)
            scale = np.minimum(1.0, 2.2 * n / np.maximum(
                np.sqrt(np.einsum("mkd,mkd->m", per_client, per_client)), 1e-300))
            sums += np.einsum("m,mkd->kd", scale, per_client)
            counts += scale @ per_client_counts
        return _means(sums, counts)

    centers = sums_counts(projected, xi)  # step 3
    for _ in range(lloyds_steps):  # FedDP-Lloyds
        centers = sums_counts(x, centers)
    if check:  # the check: each point's clipped cost difference, per client, clipped
        differences = cost_differences(x, owner, m, centers, centers[::-1].copy(), 1.0)
        np.clip(differences, -float(n), float(n)).sum()
    _evaluate(x, centers)
    return time.perf_counter() - start


def _per_client_step1(clients: list[np.ndarray], dim: int) -> float:
    rows, cols = np.triu_indices(dim)
    upper = cols * dim + rows
    row = np.empty(rows.size)
    start = time.perf_counter()
    for points_j in clients:
        np.take(blas.dsyrk(1.0, points_j, trans=1, lower=0).T.reshape(-1), upper, out=row)
    return time.perf_counter() - start


def _measure(overrides: list[str], n: int, engine: str, nodes: int, points: int, dim: int,
             args: argparse.Namespace, bounds: dict) -> dict:
    """One run of ``overrides``: its row (the bound of its pipeline from ``bounds``,
    computed in a child process the first time a pipeline is seen)."""
    cold_caches()
    start = time.perf_counter()
    with PeakMemory() as memory:
        result = run(overrides)
    wall = time.perf_counter() - start
    t = result["timings"]
    steps = result["config"].get("privacy.lloyds-steps", 0)
    if "tuning" in result:
        steps = result["tuning"]["chosen"].get("lloyds_steps", steps)
    steps = int(steps)
    pipeline = (steps, "check" in result)
    bound: dict[str, float] = {}
    if not args.no_lower_bound:  # in a child: the pooled data never stays here
        if pipeline not in bounds:
            with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
                bounds[pipeline] = pool.submit(
                    numpy_lower_bound, n, points, dim, *pipeline,
                    repeats=args.repeats).result()
        bound = bounds[pipeline]
    rounds = {k: round(t.get(k, 0.0), 2) for k in
              ("register", "estimate", "tuning", "calibrate", "init-1", "init-2", "init-3")}
    rounds["lloyds"] = round(sum(v for k, v in t.items()
                                 if k.startswith("lloyds")), 2)
    rounds.update({k: round(t.get(k, 0.0), 2) for k in ("check", "evaluate")})
    # everything after registration (the plan with its estimate round, every
    # protocol round, the evaluation), not the optimal cost (skipped here)
    after = round(t["total"] - t["register"] - t.get("optimal_cost", 0.0), 2)
    return {
        "clients": n, "engine": engine, "nodes": nodes,
        "points_per_client": points, "dim": dim,
        **({"overrides": " ".join(args.set)} if args.set else {}),
        "clients_per_node": n // nodes, "wall_s": round(wall, 2),
        **{f"{k}_s": v for k, v in rounds.items()},
        "after_startup_s": after,
        "peak_rss_gib": round(memory.peak / 2**30, 2),
        **{f"peak_{role}_gib": round(memory.by_role.get(role, 0) / 2**30, 2)
           for role in ("driver", "serverapp", "superlink", "superexec", "ray",
                        "flwr-cli", "other")},
        "spilled_files_gib": round(memory.shards / 2**30, 2),
        **_bound_columns(bound, after),
        "bound_pipeline": f"T={pipeline[0]}" + (", check" if pipeline[1] else ""),
        "tuning_share": round(t.get("tuning", 0.0) / after, 3) if after else "",
        "tuning_share_with_calibration": round(
            (t.get("tuning", 0.0) + t.get("calibrate", 0.0)) / after, 3) if after else "",
        "cost": round(result["metrics"]["cost"], 3),
    }


def _median_run(runs: list[dict]) -> dict:
    """The run of median ratio to its bound (its time after start-up without a bound),
    with every run's figure in *after_startup_runs* and their number in *runs*."""
    def key(row):
        ratio = row["after_startup_over_bound"]
        return row["after_startup_s"] if ratio == "" else ratio

    chosen = dict(sorted(runs, key=key)[(len(runs) - 1) // 2])
    chosen["runs"] = len(runs)
    chosen["after_startup_runs"] = "; ".join(
        f"{r['after_startup_s']} ({r['after_startup_over_bound']} x)" for r in runs)
    # the share moves with the T a run chooses (its estimate round's noise is secret)
    chosen["tuning_share_runs"] = "; ".join(
        f"{r['tuning_share']} ({r['bound_pipeline']})" for r in runs)
    shares = [r["tuning_share"] for r in runs if r["tuning_share"] != ""]
    chosen["tuning_share_median"] = statistics.median(shares) if shares else ""
    return chosen


def _bound_columns(bound: dict[str, float], after: float) -> dict[str, object]:
    """The row's bound columns (empty without a bound): see :func:`numpy_lower_bound`."""
    def cell(value):
        return "" if value is None else round(value, 3)

    lower, pooled = bound.get("client_level"), bound.get("pooled")
    return {"numpy_lower_bound_s": cell(lower), "pooled_bound_s": cell(pooled),
            "per_client_step1_floor_s": cell(bound.get("per_client_step1")),
            "after_startup_over_bound": "" if lower is None else round(after / lower, 2),
            "after_startup_over_pooled": "" if pooled is None else round(after / pooled, 2)}


#: Columns that identify a row of scale.csv.
KEY = ("clients", "engine", "nodes", "points_per_client", "dim")


def _merge(path: Path, rows: list[dict]) -> list[dict]:
    """Rows of ``path`` with ``rows`` replacing those of the same KEY, sorted."""
    old = []
    if path.exists():
        with path.open() as f:
            old = list(csv.DictReader(f))
    keyed = {tuple(str(r.get(k, "")) for k in KEY): r for r in old}
    for row in rows:
        keyed[tuple(str(row[k]) for k in KEY)] = row
    return sorted(keyed.values(), key=lambda r: (int(r["dim"]), -int(r["points_per_client"]),
                                                 r["engine"], int(r["clients"]),
                                                 int(r["nodes"])))


def _with_ratios(rows: list[dict]) -> list[dict]:
    """``flower_over_inprocess`` on each flower row: its time after start-up over the
    in-process row's of the same clients, nodes and shape (rows measured since issue
    #28 only, whose time after start-up covers every round: a non-empty *tuning_s*)."""
    def key(r):
        return tuple(str(r[k]) for k in ("clients", "nodes", "points_per_client", "dim"))

    from fedkmeans.experiment.registries import ENGINES

    def here(r):  # the in-process engine: the ClientApp runs in this process
        return not ENGINES[r["engine"]].separate_processes

    inprocess = {key(r): r for r in rows if here(r) and r.get("tuning_s")}
    for r in rows:
        other = inprocess.get(key(r))
        r["flower_over_inprocess"] = (
            round(float(r["after_startup_s"]) / float(other["after_startup_s"]), 2)
            if not here(r) and r.get("tuning_s") and other else "")
    return rows


def _plot(rows: list[dict], path: Path) -> None:
    """Log-log: time after start-up and peak memory against clients, per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    groups: dict[str, list[dict]] = {}
    for r in rows:
        label = f"{r['engine']}:{r['nodes']}, {r['points_per_client']} pts, d={r['dim']}"
        if not r.get("tuning_s"):  # measured before issue #28 (FedDP-Init + evaluation)
            label += ", before #28"
        groups.setdefault(label, []).append(r)
    for label, rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: int(r["clients"]))
        n = [int(r["clients"]) for r in rs]
        ax_t.plot(n, [float(r["after_startup_s"]) for r in rs], "o-", label=label)
        ax_m.plot(n, [float(r["peak_rss_gib"]) for r in rs], "o-", label=label)
    ax_t.set(xscale="log", yscale="log", xlabel="clients", ylabel="seconds after start-up",
             title="time after start-up (before #28: FedDP-Init + evaluation)")
    ax_m.set(xscale="log", yscale="log", xlabel="clients",
             ylabel="peak RSS, all processes (GiB)", title="memory")
    for limit in (4.0, 8.0):  # issue #28's bounds: 10^5 x 50 x 100, 10^6 x 10 x 20
        ax_m.axhline(limit, color="grey", linestyle=":", linewidth=1)
    ax_t.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--engines", nargs="+",
                        default=["inprocess:100", "flower:2", "flower:100"],
                        help="engine:nodes pairs")
    parser.add_argument("--points-per-client", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per configuration, and passes of its bound: the row is "
                             "the run of median ratio to its bound, the bound the median "
                             "of its passes")
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--no-lower-bound", action="store_true",
                        help="skip the pooled NumPy bound (it holds all points at once)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="more config overrides (e.g. federation.node-cache-mb=512)")
    parser.add_argument("--output", default=str(OUT / "scale"))
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: rewrite the table and plot from the CSV")
    args = parser.parse_args()
    points, dim = args.points_per_client, args.dim
    # client-level clip bounds from the public declarations (points per client, radius)
    clip = [f"data.points-per-client={points}", f"data.dim={dim}",
            f"privacy.max-points-per-client={points}",
            f"privacy.clip-covariance={30 * points}", f"privacy.clip-sums={2.2 * points}"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in [] if args.report_only else args.sizes:
            bounds: dict[tuple, tuple[float, float]] = {}
            # flower first: an in-process run leaves its clients' pages in this process
            for spec in sorted(args.engines, key=lambda e: not e.startswith("flower")):
                engine, nodes = spec.split(":")
                nodes = min(int(nodes), n)
                overrides = BASE + clip + args.set + [
                    f"data.num-clients={n}", f"federation.engine={engine}",
                    f"federation.num-nodes={nodes}",
                ]
                runs = [_measure([*overrides, f"output-dir={tmp}/{n}-{spec}-{rep}"], n,
                                 engine, nodes, points, dim, args, bounds)
                        for rep in range(args.repeats)]
                rows.append(_median_run(runs))
                print(rows[-1], flush=True)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = _with_ratios(_merge(out.with_suffix(".csv"), rows))
    write_csv(out.with_suffix(".csv"), rows)
    lines = markdown_table(rows)
    out.with_suffix(".md").write_text(
        "Measured by `python benchmarks/scale.py` on 2 cores (mixture, client level, "
        "eps = 3; points per client and d as listed; rows since issue #28 with every other "
        "setting at its default, so with the estimate round, the tuned Lloyds steps and "
        "the final check). The register round of `flower` includes Ray start-up, and "
        "since issue #37 every register round includes building the nodes' points "
        "(the rows with a *bound_pipeline*: before, the first round built them); "
        "*after_startup_s* = everything after registration (*tuning_s*, which includes "
        "the estimate round, and every round through evaluation; rows with an empty "
        "*tuning_s* were measured before, with FedDP-Init + evaluation only); "
        "*peak_rss_gib* is the peak of the summed RSS of every process of the run "
        "(sampled every 0.2 s), the *peak_<kind>_gib* columns the peak of each kind; "
        "*spilled_files_gib*: the peak size of the nodes' points spilled to files "
        "(`federation.node-cache-mb`; read back through the page cache, which the kernel "
        "may reclaim, so outside every RSS; empty for rows measured before spilling "
        "existed); *numpy_lower_bound_s*: the arithmetic of the client-level pipeline the "
        "row's run executed (*bound_pipeline*: its T Lloyds steps and whether the check "
        "ran), with the per-client statistics that level needs (each client's X^T X, "
        "Gram norm, histogram and sums, clipped, as the server clips them), done in one "
        "process with vectorised NumPy: batched over the clients, no messages, no noise "
        "(`numpy_lower_bound`), so *after_startup_over_bound* compares like with like; "
        "*pooled_bound_s*: the same passes on the pooled data without per-client "
        "statistics (one X^T X, one histogram, one set of sums: what the column held for "
        "the rows measured before the client-level bound, and *after_startup_over_pooled* "
        "against it); rows measured before issue #37 bounded FedDP-Init alone; "
        "*per_client_step1_floor_s*: step 1's per-client X^T X alone, one `dsyrk` per "
        "client as a node computes it; *tuning_share*: *tuning_s* (the estimate round, "
        "the public simulation and the other `auto` settings) over *after_startup_s*; "
        "*calibrate_s*: the noise calibration of the resolved plan, which every private "
        "run makes (`tuning=none` too), and *tuning_share_with_calibration* the share "
        "with it counted as tuning (rows with an empty *calibrate_s* were measured "
        "before the run timed it apart: their *tuning_s* includes it; since then every "
        "in-process run starts without the calibrations the runs before it memoised in "
        "this process, `fresh_run.cold_caches`, as a fresh process does); *runs* "
        "(empty: 1): runs of the configuration (`--repeats`), the row being the run of "
        "median ratio to its bound, "
        "*after_startup_runs* every run's time after start-up and ratio, and the bound the "
        "median of as many passes; *tuning_share_runs* every run's tuning share and "
        "pipeline (the share moves with the T a run chooses, which follows its estimate "
        "round's secret noise) and *tuning_share_median* their median (empty: measured "
        "before these columns).\n\n"
        + "\n".join(lines) + "\n"
    )
    _plot(rows, out.with_suffix(".png"))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
