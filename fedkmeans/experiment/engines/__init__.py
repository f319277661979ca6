"""Engines that run a Flower app: the in-process Grid and a real ``flwr run``.

Each is one :class:`~fedkmeans.experiment.engines.base.Engine`, registered by name
(``federation.engine``; :data:`fedkmeans.experiment.registries.ENGINES`). Importing this package
registers both; their modules (Flower, Ray) are imported only when a run starts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fedkmeans.experiment.engines.base import App, Engine, engine, load_component, register_engine

__all__ = ["FLOWER", "INPROCESS", "App", "Engine", "engine", "register_engine"]


class InProcess(Engine):
    """The real ServerApp and ClientApp in this process (:mod:`~.inprocess`)."""

    name = "inprocess"
    separate_processes = False
    #: One node hosts every client of a data file: its number of clients is private (a
    #: node count read from it would be a decision on it), and a node per possible
    #: client would register nodes that host nobody.
    default_file_nodes = 1

    def run(self, app: App, run_config: Mapping[str, Any], *, num_nodes: int,
            num_cpus: int = 2, client_cpus: float = 1.0, timeout: float = 3600.0,
            server_data: tuple | None = None) -> dict[str, Any]:
        """Run ``app`` on an :class:`~.inprocess.InProcessGrid` (see :meth:`Engine.run`).

        Returns the result the ServerApp handed back (the one it wrote), not a read of
        its file.
        """
        from fedkmeans.experiment.engines.inprocess import run_inprocess

        try:
            return run_inprocess(load_component(app.server), load_component(app.client),
                                 run_config, num_nodes, server_data=server_data)
        finally:
            if app.cleanup is not None:
                load_component(app.cleanup)()  # every node lived in this process


class Flower(Engine):
    """``flwr run --stream`` on Ray in a private FLWR_HOME (:mod:`~.flower`)."""

    name = "flower"
    separate_processes = True
    #: One SuperNode hosts every client: Flower's cost is per node and message.
    default_file_nodes = 1

    def run(self, app: App, run_config: Mapping[str, Any], *, num_nodes: int,
            num_cpus: int = 2, client_cpus: float = 1.0, timeout: float = 3600.0,
            server_data: tuple | None = None) -> dict[str, Any]:
        """Run ``app`` with :func:`~.flower.run_flower` (see :meth:`Engine.run`).

        The ServerApp ran in another process: its result is read from the file it
        wrote (``server_data`` is not used: that process loads the server's data).
        """
        from fedkmeans.experiment.engines.flower import run_flower

        path = run_flower(run_config, num_nodes=num_nodes, num_cpus=num_cpus,
                          client_cpus=client_cpus, project_dir=app.project_dir,
                          timeout=timeout)
        return json.loads(path.read_text())


INPROCESS = register_engine(InProcess())
FLOWER = register_engine(Flower())
