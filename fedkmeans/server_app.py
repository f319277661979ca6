"""Flower ServerApp: read the run config, run the experiment, write ``result.json``.

Thin by design: validation is :func:`fedkmeans.config.parse_config` (before any
message is sent) and the protocol is :func:`fedkmeans.runner.run_server`. This module
is where a run is composed: with ``attack = curious`` it builds the curious server and
hands it to the honest runner as an observer (the runner never builds one).
"""

from __future__ import annotations

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedkmeans.config import ExperimentConfig, parse_config
from fedkmeans.flower_logging import log_through_flower
from fedkmeans.runner import run_server

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the configured algorithm on the connected nodes."""
    log_through_flower()
    config = parse_config(context.run_config)
    run_server(grid, config, run_id=context.run_id, observers=observers_for(config))


def observers_for(config: ExperimentConfig) -> list:
    """The observers ``config`` asks for: the curious server with ``attack = curious``."""
    if config.attack == "none":
        return []
    from fedkmeans.attacks import build_curious_server

    return [build_curious_server(config)]
