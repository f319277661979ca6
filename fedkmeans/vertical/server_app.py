"""Flower ServerApp of the vertical protocol.

:func:`run_vertical` registers the H parties, runs the iterations (send the label
history, receive every party's defended report, decode, sum, assign), accounts the
per-sample privacy of the reports, runs the non-private evaluation with the label
holder, and writes ``result.json``. Logs carry counts and timings only, never client
values. The curious server (:mod:`fedkmeans.vertical.curious`) is an observer that
:func:`main` hands to it when ``attack`` asks for one. Grid exchanges go through
:mod:`fedkmeans.grid_io`, as the horizontal pool's do.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import numpy as np
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedkmeans.console import log_through_flower
from fedkmeans.grid_io import NO_REPLY, ask_nodes, wait_for_nodes
from fedkmeans.local_grid import hand_back
from fedkmeans.privacy.randomness import REPRODUCIBLE_NOTICE
from fedkmeans.seeding import generator
from fedkmeans.vertical.accounting import per_sample_account
from fedkmeans.vertical.config import VerticalConfig, parse_vertical_config
from fedkmeans.vertical.defence import decode
from fedkmeans.vertical.metrics import adjusted_rand_index, f_measure
from fedkmeans.vertical.protocol import assign, initial_center_ids
from fedkmeans.wire import pack, unpack

LOG = logging.getLogger(__name__)

app = ServerApp()

RESULT_FILE = "result.json"
NOTE = ("metrics and attack scores are non-private evaluation: computed by the parties on "
        "their raw data in extra rounds, outside the protocol")


class VerticalError(RuntimeError):
    """The federation cannot run the vertical protocol (missing party, bad reply)."""


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the configured vertical protocol on the connected SuperNodes."""
    log_through_flower()
    config = parse_vertical_config(context.run_config)
    hand_back(grid, run_vertical(grid, config, run_id=context.run_id,
                                 observers=observers_for(config)))


def observers_for(config: VerticalConfig) -> list:
    """The curious server when ``attack`` is not ``none`` (composed here, not in the run)."""
    if config.attack == "none":
        return []
    from fedkmeans.vertical.curious import CuriousVerticalServer

    return [CuriousVerticalServer(config)]


class _Parties:
    """Grid I/O: one node per party, one message per party per round."""

    def __init__(self, grid: Grid, config: VerticalConfig) -> None:
        self.grid, self.config = grid, config
        self.nodes: dict[int, int] = {}     # party -> node id
        self.n = 0
        self.dims: dict[int, int] = {}
        self.label_holder: int | None = None

    def _send(self, stage: str, contents: dict[int, object]) -> dict[int, tuple[dict, dict]]:
        replies, failures = ask_nodes(self.grid, contents, stage, self.config.round_timeout)
        errors = {nid: reason for nid, reason in failures.items() if reason != NO_REPLY}
        if errors:
            nid, reason = next(iter(errors.items()))
            raise VerticalError(f"round '{stage}': node {nid} failed: {reason}")
        if failures:
            raise VerticalError(f"round '{stage}': no reply from node(s) {sorted(failures)} "
                                f"within round-timeout={self.config.round_timeout} s")
        return {nid: unpack(reply.content) for nid, reply in replies.items()}

    def register(self) -> None:
        wanted = self.config.parties
        node_ids = wait_for_nodes(
            self.grid, wanted, self.config.round_timeout,
            lambda connected: VerticalError(
                f"only {connected} of parties={wanted} nodes connected"))
        replies = self._send("register", {nid: pack({}) for nid in node_ids})
        sizes = {}
        for nid, (_, info) in replies.items():
            party = int(info["party"])
            if not 0 <= party < wanted:
                continue  # a node beyond the configured parties takes no part
            if party in self.nodes:
                raise VerticalError(f"party {party} announced by nodes {self.nodes[party]} "
                                    f"and {nid}")
            self.nodes[party] = nid
            sizes[party] = int(info["n"])
            self.dims[party] = int(info["dim"])
            if info.get("labels"):
                self.label_holder = party
        missing = sorted(set(range(wanted)) - set(self.nodes))
        if missing:
            raise VerticalError(f"no node announced party/parties {missing}")
        if len(set(sizes.values())) != 1:
            raise VerticalError(f"parties disagree on the number of samples: {sizes}")
        self.n = next(iter(sizes.values()))
        if not 2 <= self.config.k <= self.n:
            raise VerticalError(f"config key 'k' must be in [2, n={self.n}], got {self.config.k}")
        LOG.info("registered %d parties, n=%d, dims=%s", wanted, self.n,
                 [self.dims[p] for p in range(wanted)])

    def ask(self, stage: str, arrays: dict, settings: dict | None = None,
            parties: list[int] | None = None) -> dict[int, tuple[dict, dict]]:
        parties = list(range(self.config.parties)) if parties is None else parties
        replies = self._send(stage, {self.nodes[p]: pack(arrays, settings) for p in parties})
        by_node = {nid: p for p, nid in self.nodes.items()}
        return {by_node[nid]: reply for nid, reply in replies.items()}


def _decoded(config: VerticalConfig, party: int, arrays: dict, settings: dict, n: int):
    report = arrays.get("report")
    if report is None or report.shape != (n, config.k):
        found = None if report is None else report.shape
        raise VerticalError(f"party {party}: report has shape {found}, expected {(n, config.k)}")
    if config.defence in ("discretise", "full"):
        scale = float(settings.get("scale", -1.0))
        if not (math.isfinite(scale) and scale >= 0):
            raise VerticalError(f"party {party}: invalid discretisation scale")
        if report.min() < 0 or report.max() >= config.levels:
            raise VerticalError(f"party {party}: levels outside [0, {config.levels})")
        return decode(report, config.levels, scale)
    values = report.astype(np.float64)
    if not np.isfinite(values).all():
        raise VerticalError(f"party {party}: report contains NaN or inf")
    return values


def _privacy(config: VerticalConfig) -> dict:
    """The run's privacy account (``result["privacy"]``), fixed by the config alone.

    Unit: one sample's feature slice at one party; neighbouring = replace it (local
    DP). ``epsilon_per_sample`` covers everything a party sends about that slice.

    * **The configured maximum T, not the iterations run.** The stopping rule
      (``stop-when-stable``) is a function of the labels, which the server computes
      from reports already sent. A run that stops after t < T iterations is
      therefore post-processing of the T-iteration transcript (truncate it where the
      labels first repeat), and its privacy loss is at most that of the k T reports
      of T iterations. The realised t is data-dependent: an epsilon computed from it
      is a random variable (a privacy odometer), not an (eps, delta) guarantee. So
      ``reports_per_sample_per_party = k T`` whatever t turns out to be.
    * **A non-private release makes epsilon_per_sample infinite**, as in the
      horizontal accountant: with ``bound = 0`` each party sends its largest fused
      distance (the discretisation scale) in clear every iteration, a deterministic
      function of one sample's slice. ``per_party_slice`` and ``per_record`` still
      account the randomized reports alone (what a public ``bound`` would give).
    """
    reports = config.k * config.iterations
    out: dict = {
        "defence": config.defence,
        "iterations_accounted": config.iterations,
        "reports_per_sample_per_party": reports,
        "party_noise": REPRODUCIBLE_NOTICE if config.reproducible_noise else (
            "secret: each party's CSPRNG, fresh per report"),
        "non_private_releases": [],
    }
    if config.defence in ("discretise", "full") and config.bound == 0:
        out["non_private_releases"].append(
            "each party's discretisation scale (its largest fused distance) every iteration "
            "(set bound > 0 for a public scale)")
    if config.defence != "full":
        out["epsilon_per_sample"] = math.inf
        return out
    out["per_party_slice"] = per_sample_account(
        mechanism=config.mechanism, epsilon=config.epsilon, levels=config.levels,
        l_ratio=config.l_ratio, reports=reports, delta=config.delta)
    out["per_record"] = per_sample_account(
        mechanism=config.mechanism, epsilon=config.epsilon, levels=config.levels,
        l_ratio=config.l_ratio, reports=reports * config.parties, delta=config.delta)
    out["epsilon_per_sample"] = (math.inf if out["non_private_releases"]
                                 else out["per_party_slice"]["actual"]["exact"])
    return out


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else ("-inf" if value < 0 else "nan")
    if isinstance(value, np.generic):
        return _jsonable(value.item())
    return value


def run_vertical(
    grid: Grid, config: VerticalConfig, *, run_id: int | str = 0, observers: list | None = None
) -> dict:
    """Run the vertical protocol on ``grid``; write and return ``result.json``'s content.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    config : VerticalConfig
        Already validated.
    run_id : int or str
        Names the default output directory.
    observers : list, optional
        Handed in by :func:`main` (the curious server): ``on_report(party, values,
        settings)`` sees every decoded report; ``report(history=, dims=, ask=)``
        becomes ``result[observer.result_key]``.

    Returns
    -------
    dict
    """
    observers = list(observers or [])
    start = time.perf_counter()
    timings: dict[str, float] = {}
    parties = _Parties(grid, config)
    parties.register()
    timings["register"] = time.perf_counter() - start

    base: dict = {}
    if config.init == "samples":
        base["center_ids"] = initial_center_ids(config.seed, parties.n, config.k)
    discretised = config.defence in ("discretise", "full")
    history: list[np.ndarray] = []
    t0 = time.perf_counter()
    for t in range(config.iterations):
        arrays = {**base, "history": np.stack(history) if history
                  else np.zeros((0, parties.n), dtype=np.int64)}
        replies = parties.ask("distances", arrays, {"iteration": t})
        total = np.zeros((parties.n, config.k))
        for party in range(config.parties):
            values = _decoded(config, party, *replies[party], parties.n)
            total += values
            for observer in observers:
                observer.on_report(party, values, replies[party][1])
        rng = generator(config.seed, "vertical", "ties", t) if discretised else None
        labels = assign(total, rng)
        changed = int((labels != history[-1]).sum()) if history else parties.n
        history.append(labels)
        LOG.debug("iteration %d: %d labels changed", t, changed)
        if config.stop_when_stable and changed == 0:
            break
    timings["iterations"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    metrics: dict = {"note": NOTE}
    if parties.label_holder is not None:
        (arrays, _), = parties.ask("evaluate", {"labels": history[-1]},
                                   parties=[parties.label_holder]).values()
        table = arrays["table"]
        metrics.update(f_measure=f_measure(table), ari=adjusted_rand_index(table),
                       table=table.tolist())
    reports = {}
    for observer in observers:
        reports[observer.result_key] = observer.report(
            history=history, dims=parties.dims,
            ask=lambda party, arrays: next(iter(
                parties.ask("attack_eval", arrays, parties=[party]).values()))[0])
    timings["evaluate"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    privacy = _privacy(config)
    timings["accounting"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - start

    result = _jsonable({
        "protocol": "vertical-kmeans",
        "dataset": config.dataset, "seed": config.seed, "k": config.k,
        "parties": config.parties, "n": parties.n,
        "party_dims": [parties.dims[p] for p in range(config.parties)],
        "iterations_run": len(history),
        "converged": len(history) >= 2 and bool(np.array_equal(history[-1], history[-2])),
        "labels": history[-1].tolist(),
        "privacy": privacy, "metrics": metrics, "attack": None, **reports,
        "timings": {k: round(v, 4) for k, v in timings.items()},
        "config": config.to_flat(),
    })
    output_dir = Path(config.output_dir or Path.home() / ".fedkmeans" / "vertical" / str(run_id))
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / RESULT_FILE).write_text(json.dumps(result, indent=1))
    LOG.info("wrote %s (%d iterations, %.2f s)", output_dir / RESULT_FILE, len(history),
             timings["total"])
    return result
