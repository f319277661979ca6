"""Run the vertical app in-process (tests, sweeps) or with ``flwr run`` (real Flower).

>>> from fedkmeans.vertical.experiment import run
>>> result = run({"dataset": "iris", "parties": 2, "defence": "full", "epsilon": 1.0})

The in-process engine is :func:`fedkmeans.engines.inprocess.run_inprocess` (the real
ServerApp and ClientApp, one Context per party); the Flower engine is
:func:`fedkmeans.engines.flower.run_flower` on ``apps/vertical`` with H SuperNodes.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedkmeans.vertical.config import DEFAULTS, parse_vertical_config

__all__ = ["APP_DIR", "run"]

#: The Flower app of the vertical protocol (its own pyproject.toml).
APP_DIR = Path(__file__).resolve().parents[2] / "apps" / "vertical"


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
    engine : {"inprocess", "flower"}
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
    if engine not in ("inprocess", "flower"):
        raise ValueError(f"engine must be 'inprocess' or 'flower', got {engine!r}")
    with tempfile.TemporaryDirectory(prefix="fedkmeans-vertical-") as tmp:
        if not flat["output-dir"]:
            flat["output-dir"] = tmp
        if engine == "inprocess":
            from fedkmeans.engines.inprocess import run_inprocess
            from fedkmeans.vertical.client_app import app as client_app
            from fedkmeans.vertical.server_app import RESULT_FILE
            from fedkmeans.vertical.server_app import app as server_app

            run_inprocess(server_app, client_app, flat, num_nodes=config.parties)
            path = Path(flat["output-dir"]) / RESULT_FILE
        else:
            from fedkmeans.engines.flower import run_flower

            path = run_flower(flat, num_nodes=config.parties, num_cpus=num_cpus,
                              client_cpus=1, project_dir=APP_DIR, timeout=timeout)
        result = json.loads(path.read_text())
    result["result_path"] = str(path)
    return result
