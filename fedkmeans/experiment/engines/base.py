"""What an engine is: something that runs a Flower app on some nodes and returns its result.

The result it returns is the one the app wrote: handed back in-process by the app
(:attr:`fedkmeans.local_grid.InProcessGrid.result`), read from the app's result file
when the app ran in other processes.

Both apps (:mod:`fedkmeans.experiment`, :mod:`fedkmeans.vertical.experiment`) describe
themselves as an :class:`App` and hand it to the engine the config names
(``federation.engine``; :data:`fedkmeans.experiment.registries.ENGINES`), so neither branches on
the engine's name. An engine imports the app's components by their Flower
``module:attribute`` references when it runs, never the apps' modules themselves.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from fedkmeans.experiment.registries import ENGINES

__all__ = ["App", "Engine", "engine", "load_component", "register_engine"]


def load_component(reference: str) -> Any:
    """The object a Flower component reference names (``"fedkmeans.server_app:app"``)."""
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class App:
    """A Flower app an engine can run.

    Attributes
    ----------
    server, client : str
        The ServerApp and ClientApp as ``module:attribute`` (as in ``pyproject.toml``'s
        ``[tool.flwr.app.components]``).
    project_dir : Path
        The directory ``flwr run`` is given (its ``pyproject.toml`` names the app).
    result_file : str
        What the ServerApp writes into the run config's ``output-dir``.
    cleanup : str or None
        ``module:function`` called after an in-process run (the nodes' data lived in
        this process), or None.
    """

    server: str
    client: str
    project_dir: Path
    result_file: str = "result.json"
    cleanup: str | None = None


class Engine(ABC):
    """Runs an :class:`App` on ``num_nodes`` nodes; returns the path of its result."""

    #: The config value (``federation.engine = <name>``).
    name: ClassVar[str]
    #: The app runs in other processes (so what can be checked before they start is).
    separate_processes: ClassVar[bool]
    #: Nodes of a run on a data set whose clients are not counted up front
    #: (``federation.num-nodes = 0``): each hosts a shard of the clients.
    default_file_nodes: ClassVar[int]

    @abstractmethod
    def run(
        self,
        app: App,
        run_config: Mapping[str, Any],
        *,
        num_nodes: int,
        num_cpus: int = 2,
        client_cpus: float = 1.0,
        timeout: float = 3600.0,
        server_data: tuple | None = None,
    ) -> dict[str, Any]:
        """Run ``app`` with ``run_config`` (flat keys, absolute ``output-dir``).

        Parameters
        ----------
        app : App
        run_config : mapping
            The flat run config the ServerApp and the ClientApp read.
        num_nodes : int
            Node i is given ``partition-id = i`` and ``num-partitions = num_nodes``.
        num_cpus, client_cpus : int, float
            CPUs of the run and of each node (engines that share this process ignore
            them).
        timeout : float
            Seconds before the run is stopped (where the engine can stop it).
        server_data : tuple, optional
            The server's data ``(points (m, d), labels or None)`` the caller already
            loaded: a ServerApp in this process computes with it (engines whose
            ServerApp runs elsewhere ignore it; it loads the data once there).

        Returns
        -------
        dict
            The content of ``output-dir / app.result_file``, as the ServerApp wrote it.
        """


def register_engine(new: Engine) -> Engine:
    """Add ``new`` to the registry under its name (the config accepts it from now on)."""
    return ENGINES.register(new.name, new)


def engine(name: str) -> Engine:
    """The registered engine ``name``."""
    return ENGINES[name]
