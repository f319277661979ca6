"""Can a reader of the published SecAgg values tell n clients from n - 1? (issue 49)

    python benchmarks/secagg_client_count.py               # 10 runs a world
    python benchmarks/secagg_client_count.py --runs 3 --control

Neighbouring federations at data-point level under ``privacy.aggregation = secagg``: 30
clients of 30 points (6-d, 3 clusters), plus in one world a 31st client holding a
single point, so that removing that point removes its client. One node per client (the
default layout for a file), so the worlds also differ by one SecAgg+ participant.

A decoded SecAgg sum is an integer times the round's grid step ``h``, and ``h`` depends
on the number of clients ``n`` (the share scale ``sigma / sqrt(n)`` and the
quantization range of ``n`` nodes). The test: for every run and every value the server
publishes (every entry of every SecAgg release, as its observers see it, and
``check.noisy_difference`` of ``release.json``), the residue ``|y / h - rint(y / h)|``
under the run's own step and under the step the other world would have used (both
recomputed from the round's public parameters with
:func:`fedkmeans.privacy.distributed.grid_step`); the reader guesses the world whose
step leaves the smaller mean residue. Accuracy 0.5 is chance. ``--control`` also runs
the server without its smoothing draw (the published value is the decoded sum, as
before issue 49): there the guess is right every time.

Also compared: every field of ``release.json`` that is the same in all runs of the
first world (deterministic) against every run of the second.

Results: ``docs/results/secagg-client-count.md`` and ``.csv`` (written here).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np
from results_table import write_tables

from fedkmeans import client_app
from fedkmeans.artefacts import release_leaves, release_view
from fedkmeans.data import _npz_version
from fedkmeans.data.npz import save_npz
from fedkmeans.experiment.config import parse_config
from fedkmeans.experiment.runner import run_server
from fedkmeans.local_grid import partitioned_grid
from fedkmeans.privacy import distributed
from fedkmeans.privacy.distributed import TAIL_SIGMAS, quantization_range
from fedkmeans.server import secagg as server_secagg
from fedkmeans.server.observer import RunObserver

OUT = Path(__file__).resolve().parents[1] / "docs" / "results"
CLIENTS = 30
FLAT = {"data.name": "npz", "k": 3, "privacy.level": "datapoint", "privacy.epsilon": 4.0,
        "privacy.aggregation": "secagg", "federation.num-nodes": 0}


def write_federation(path: Path, single: bool) -> int:
    """30 clients of 30 points around 3 means; ``single``: a 31st with one point."""
    rng = np.random.default_rng(0)
    means = rng.normal(scale=4.0, size=(3, 6))
    x = means[rng.integers(3, size=CLIENTS * 30)] + rng.normal(size=(CLIENTS * 30, 6))
    owner = np.repeat(np.arange(CLIENTS), 30)
    if single:
        x = np.vstack([x, means[:1] + 0.5])
        owner = np.append(owner, CLIENTS)
    server_x = means[np.repeat(np.arange(3), 20)] + np.random.default_rng(1).normal(size=(60, 6))
    save_npz(path, x=x, client=owner, server_x=server_x)
    _npz_version.cache_clear()
    return CLIENTS + int(single)


class _Published(RunObserver):
    """Every value the server publishes of a SecAgg release (observers see only that)."""

    def __init__(self) -> None:
        self.values: dict[str, np.ndarray] = {}

    def on_broadcast(self, round_name, arrays, clients):  # noqa: D102
        pass

    def on_replies(self, round_name, replies):  # noqa: D102
        pass

    def on_release(self, stage, before, after):  # noqa: D102
        self.values[stage] = np.array(after, dtype=np.float64)


def one_run(data: Path, clients: int, out: Path) -> tuple[dict, dict, dict]:
    """One in-process run with one node per client: (result, published values, release)."""
    flat = {**FLAT, "data.path": str(data), "output-dir": str(out)}
    grid = partitioned_grid(client_app.app, flat, clients)
    observer = _Published()
    result = run_server(grid, parse_config(flat), observers=[observer])
    return result, observer.values, release_view(json.loads(json.dumps(result)),
                                                 seed_is_secret=True)


def step_for(info: dict, round_info: dict, clients: int) -> float:
    """The grid step of one statistic had the round asked ``clients`` (one per node).

    The reach ``R`` of a node's value is ``h (Q/2 - 2)`` minus the share's tail term,
    ``12 s``; with ``n'`` clients the share is ``sigma / sqrt(n')`` and ``Q`` that of
    ``n'`` nodes (``m_max = 1``: one client per node).
    """
    q = round_info["quantization_range"]
    reach = info["grid_step"] * (q / 2 - 2) - TAIL_SIGMAS * info["share_std"]
    share = info["sigma"] / math.sqrt(clients)
    return distributed.grid_step(reach, share, 1, quantization_range(clients))


def residue(values: np.ndarray, step: float) -> float:
    """Mean ``|y / h - rint(y / h)|`` over the entries (0 on the lattice, 0.25 uniform)."""
    ratio = np.ravel(values) / step
    return float(np.mean(np.abs(ratio - np.rint(ratio))))


def play(runs: int, smoothing: bool, workdir: Path) -> dict:
    """``runs`` runs a world; the residue guess and the deterministic fields compared."""
    original = distributed.smooth_lattice
    if not smoothing:  # the control: the decoded sum published as it is
        server_secagg.smooth_lattice = lambda total, *a, **k: np.asarray(total, float)
    guesses, guesses_check, residues, releases = [], [], {True: [], False: []}, {}
    start = time.perf_counter()
    try:
        for world, single in (("n", True), ("n-1", False)):
            data = workdir / "federation.npz"  # one path: config.data.path is public
            clients = write_federation(data, single)
            other = clients - 1 if single else clients + 1
            releases[world] = []
            for i in range(runs):
                result, published, release = one_run(data, clients,
                                                      workdir / f"{world}-{smoothing}-{i}")
                releases[world].append(release_leaves(release))
                rounds = {r["round"]: r for r in result["privacy"]["secagg"]["rounds"]}
                own = alt = 0.0
                check_own = check_alt = None
                for stage, values in published.items():
                    round_name, name = stage.split("/")
                    info = rounds[round_name]["statistics"][name]
                    h_own = info["grid_step"]
                    h_alt = step_for(info, rounds[round_name], other)
                    own, alt = own + residue(values, h_own), alt + residue(values, h_alt)
                    if stage == "check/cost_difference":
                        value = np.array(release["check"]["noisy_difference"])
                        check_own, check_alt = residue(value, h_own), residue(value, h_alt)
                residues[True].append(own / len(published))
                residues[False].append(alt / len(published))
                guesses.append(own < alt)  # right when the run's own step fits better
                if check_own is not None:
                    guesses_check.append(check_own < check_alt)
    finally:
        server_secagg.smooth_lattice = original
    first = releases["n"][0]
    deterministic = {k for k in first if all(r.get(k, "<missing>") == first[k]
                                             for r in releases["n"][1:])}
    differing = sorted(k for k in deterministic
                       if all(r.get(k, "<missing>") != first[k] for r in releases["n-1"]))
    return {
        "published value": "decoded + N(0, (sigma/64)^2)" if smoothing else
        "decoded sum (control, before issue 49)",
        "runs a world": runs,
        "clients": f"{CLIENTS + 1} vs {CLIENTS}",
        "guess right (all SecAgg releases)": f"{sum(guesses)}/{len(guesses)}",
        "guess right (check.noisy_difference)": f"{sum(guesses_check)}/{len(guesses_check)}",
        "mean residue, own step": f"{np.mean(residues[True]):.4f}",
        "mean residue, other world's step": f"{np.mean(residues[False]):.4f}",
        "deterministic release.json fields": len(deterministic),
        "differing in every neighbour run": ", ".join(differing) or "none",
        "seconds": f"{time.perf_counter() - start:.0f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs a world (>= 1)")
    parser.add_argument("--control", action="store_true",
                        help="also run without the smoothing draw (the decoded sum)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for smoothing in (True, False) if args.control else (True,):
            rows.append(play(args.runs, smoothing, Path(tmp)))
            print(rows[-1], flush=True)
    command = "python benchmarks/secagg_client_count.py" + (
        f" --runs {args.runs}" if args.runs != 10 else "") + (
        " --control" if args.control else "")
    write_tables(OUT, "secagg-client-count", (
        "# SecAgg at data-point level: n clients against n - 1 from the published values\n\n"
        f"Written by `{command}` (issue 49; the method is the benchmark's docstring). "
        "A guess right in about half the runs is chance; the control publishes the "
        "decoded sum, as the server did before."), rows)

if __name__ == "__main__":
    main()
