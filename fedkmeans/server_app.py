"""Flower ServerApp: read the run config, run the experiment, write ``result.json``.

Thin by design: validation is :func:`fedkmeans.experiment.config.from_run_config` (before any
message is sent) and the protocol is :func:`fedkmeans.experiment.runner.run_server`. This module
is where a run is composed: it builds the observers of the configured attack (the
curious server with ``attack = curious``, :data:`fedkmeans.experiment.registries.ATTACKS`) and hands
them to the honest runner (the runner never builds one).
"""

from __future__ import annotations

from contextlib import nullcontext

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedkmeans.console import log_through_flower
from fedkmeans.experiment.config import ExperimentConfig, check_no_idle_keys, from_run_config
from fedkmeans.experiment.flower_logging import one_line_failure
from fedkmeans.experiment.registries import attack
from fedkmeans.experiment.runner import run_server
from fedkmeans.local_grid import hand_back
from fedkmeans.server.observer import RunObserver

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the configured algorithm on the connected nodes.

    Under Flower, a failure is one ERROR line
    (:func:`fedkmeans.experiment.flower_logging.one_line_failure`) and a failed run in Flower's
    records; ``flwr run --stream`` still exits 0. A grid whose caller reports errors
    itself (``errors_to_caller``: the in-process engine) gets the exception as raised.
    """
    log_through_flower()
    report = nullcontext() if getattr(grid, "errors_to_caller", False) else one_line_failure(
        context.run_id)
    with report:
        config = from_run_config(context.run_config)
        check_no_idle_keys(config)  # flwr run's run config mirrors pyproject's defaults
        hand_back(grid, run_server(grid, config, run_id=context.run_id,
                                   observers=observers_for(config),
                                   server_data=getattr(grid, "server_data", None)))


def observers_for(config: ExperimentConfig) -> list[RunObserver]:
    """The observers of the attack ``config`` names (``none``: the honest server alone).

    ``none`` builds nothing and loads no attack: the honest path does not import the
    attack suite (the registry's built-ins) at all.
    """
    if config.attack == "none":
        return []
    return list(attack(config.attack).build(config))
