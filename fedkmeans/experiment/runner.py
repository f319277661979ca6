"""Run one experiment on a Grid: the protocol, then the evaluation and the files.

Used by the ServerApp (Flower simulation and deployment) and by the in-process engine
alike, so every engine executes the same server code. The protocol itself (registration,
tuning, the algorithm, the ledger) is :func:`fedkmeans.session.run_protocol`, which the
strategies and the estimator use as well; this module adds what an experiment has on
top: its output directory and checkpoint, the server's data from the data-set registry,
the non-private evaluation round, the optimal cost and the artefacts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from flwr.serverapp import Grid

from fedkmeans import data as data_access
from fedkmeans.artefacts import RESULT_FILE, write_artefacts
from fedkmeans.checkpoint import Checkpoint
from fedkmeans.console import announce, say
from fedkmeans.evaluation import NOTE, federated_metrics
from fedkmeans.experiment.config import ExperimentConfig
from fedkmeans.experiment.optimum import optimal_cost
from fedkmeans.experiment.rundir import claim_output_dir, default_output_dir
from fedkmeans.server.observer import RunObserver
from fedkmeans.server.pool import ClientPool
from fedkmeans.session import import_what_the_rounds_use, run_protocol
from fedkmeans.statements import clipping_summary, summary_line

LOG = logging.getLogger(__name__)

__all__ = ["RESULT_FILE", "run_server"]


def run_server(
    grid: Grid, config: ExperimentConfig, *, run_id: int | str = 0,
    observers: Sequence[RunObserver] = (), server_data: tuple | None = None,
) -> dict:
    """Execute ``config`` against the nodes behind ``grid``; write and return the result.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    config : ExperimentConfig
        Already validated.
    run_id : int or str
        Names the default output directory.
    observers : sequence of RunObserver
        Handed in by the composition root (:mod:`fedkmeans.server_app`: the
        configured attack's), never built here. Every hook of
        :class:`~fedkmeans.server.observer.RunObserver` is called:
        ``on_start(config)`` with the resolved settings before the first private round,
        the pool's and the server context's hooks during the rounds, and
        ``report(centers=, result=)``, whose value (unless None) becomes
        ``result[observer.result_key]``, logged through ``summary_lines``.

    Returns
    -------
    dict
        The content of ``result.json``.

    Raises
    ------
    fedkmeans.experiment.rundir.OutputDirError
        Another live run holds the output directory, or it holds the result of another
        configuration (before any node is asked anything).
    """
    output_dir = Path(config.output_dir) if config.output_dir else default_output_dir(run_id)
    announce(LOG)  # with the operator's opt-in: the lines marked not private
    with claim_output_dir(output_dir, config):
        return _run_claimed(grid, config, output_dir, observers, server_data)


def _run_claimed(
    grid: Grid, config: ExperimentConfig, output_dir: Path, observers: Sequence[RunObserver],
    server_data: tuple | None,
) -> dict:
    import_what_the_rounds_use()
    start = time.perf_counter()
    checkpoint = Checkpoint.open(output_dir / "checkpoint", config)
    server_x, _ = server_data if server_data is not None else data_access.load_server(config)
    outcome = run_protocol(grid, config.protocol, server_x, checkpoint=checkpoint,
                           observers=observers, published_config=config.to_flat(),
                           server_rows_drawn=config.data.server_fraction > 0)
    pool, centers, randomness = outcome.pool, outcome.centers, outcome.context.private_randomness
    timings = dict(outcome.timings)

    t0 = time.perf_counter()
    evaluation = federated_metrics(pool, centers)
    timings["evaluate"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    # k = auto: the k it chose
    chosen = replace(config, protocol=replace(config.protocol, k=outcome.context.k))
    best = optimal_cost(chosen)
    timings["optimal_cost"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - start

    result = {  # the publishable record, then the experiment's diagnostics
        **outcome.release_fields(),
        "metrics": {
            **{key: evaluation[key] for key in ("cost", "accuracy", "ari", "nmi", "fmi")},
            "optimal_cost": best,
            "cost_ratio": evaluation["cost"] / best if best else None,
            "num_points": evaluation["num_points"],
            "clipped_points": evaluation["clipped_points"],
            "note": NOTE,
        },
        "federation": {
            "num_nodes": len(pool.node_clients),
            "num_clients": int(pool.client_ids.size),
            "rounds": pool.answered,
            "nodes_answering_every_round": _answering_everywhere(pool),
            "rejected_replies": pool.rejected,
        },
        "timings": timings,
    }
    for observer in observers:  # observers that report add their own section
        section = observer.report(centers=centers, result=result)
        if section is not None:
            result[observer.result_key] = section
            key = observer.result_key
            say(LOG, f"[{key}] report: diagnostics.json, {key} (not private)")
            for line in observer.summary_lines(section):  # scored on the clients' data
                say(LOG, None, f"[{key}] {line}")
    path = write_artefacts(output_dir, result, seed_is_secret=not randomness.is_secure)
    say(LOG, None, f"{outcome.config.algorithm}: cost {evaluation['cost']:.6g} on the "
        f"clients' raw data (optimal {best if best is None else format(best, '.6g')}), "
        f"{evaluation['num_points']} points of which "
        f"{evaluation['clipped_points']} clipped, {timings['total']:.1f} s")
    LOG.info("%s", summary_line(
        result, clipping_summary(config.protocol, outcome.config, outcome.context.estimates), path))
    return result


def _answering_everywhere(pool: ClientPool) -> int:
    """Registered nodes that no round rejected or missed (a dead node is not counted)."""
    lost = {r["node"] for r in pool.rejected}
    return len([nid for nid in pool.node_clients if nid not in lost])
