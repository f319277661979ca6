"""Run the vertical app in-process (tests, sweeps) or with ``flwr run`` (real Flower).

>>> from fedkmeans.vertical.experiment import run
>>> result = run({"dataset": "iris", "parties": 2, "defence": "full", "epsilon": 1.0})

Any registered engine runs it (:mod:`fedkmeans.experiment.engines`): ``inprocess`` (the real
ServerApp and ClientApp, one Context per party) or ``flower`` (``flwr run`` on
``apps/vertical`` with H SuperNodes).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedkmeans.experiment.engines.base import App
from fedkmeans.experiment.registries import ENGINES
from fedkmeans.vertical.config import DEFAULTS, parse_vertical_config

__all__ = ["APP_DIR", "run"]

#: The Flower app of the vertical protocol (its own pyproject.toml).
APP_DIR = Path(__file__).resolve().parents[2] / "apps" / "vertical"
#: The vertical app, as the engines run it (:class:`fedkmeans.experiment.engines.base.App`).
APP = App(server="fedkmeans.vertical.server_app:app",
          client="fedkmeans.vertical.client_app:app", project_dir=APP_DIR)


def run(
    overrides: Mapping[str, Any] | None = None,
    *,
    engine: str = "inprocess",
    num_cpus: int = 2,
    timeout: float = 900.0,
) -> dict:
    """Run one vertical experiment and return its ``result.json`` content.

    Parameters
    ----------
    overrides : mapping, optional
        Flat run-config keys (see :data:`fedkmeans.vertical.config.DEFAULTS`).
    engine : str
        A registered engine (:data:`fedkmeans.experiment.registries.ENGINES`):
        ``flower`` runs ``flwr run apps/vertical`` with ``parties`` SuperNodes in a
        private FLWR_HOME and stops every process it started.
    num_cpus : int
        Ray CPUs of the ``flower`` engine.
    timeout : float
        Seconds before a ``flower`` run is stopped.

    Returns
    -------
    dict
    """
    flat = {**DEFAULTS, **dict(overrides or {})}
    config = parse_vertical_config(flat)
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES.names()}, got {engine!r}")
    with tempfile.TemporaryDirectory(prefix="fedkmeans-vertical-") as tmp:
        if not flat["output-dir"]:
            flat["output-dir"] = tmp
        result = ENGINES[engine].run(APP, flat, num_nodes=config.parties, num_cpus=num_cpus,
                                     client_cpus=1, timeout=timeout)
    result["result_path"] = str(Path(flat["output-dir"]) / APP.result_file)
    return result
