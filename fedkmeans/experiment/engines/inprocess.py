"""In-process engine: the real ServerApp and ClientApp, without SuperLink or Ray.

The bundled apps run on the library's in-process Grid (:class:`~fedkmeans.local_grid.
InProcessGrid`: each message is a ClientApp call in this process, through Flower's own
record types, so the server and client code paths are those of ``flwr run``; only
transport and process isolation are skipped). Used for tests and fast sweeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flwr.app import Context, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

from fedkmeans.local_grid import SERVER_NODE_ID, InProcessGrid, partitioned_grid

__all__ = ["InProcessGrid", "SERVER_NODE_ID", "run_inprocess"]


def run_inprocess(
    server_app: ServerApp,
    client_app: ClientApp,
    run_config: Mapping,
    num_nodes: int,
    *,
    server_data: tuple | None = None,
) -> dict[str, Any] | None:
    """Run ``server_app`` against ``num_nodes`` in-process nodes of ``client_app``.

    Node i gets ``partition-id = i`` and ``num-partitions = num_nodes``, as in the
    Flower simulation. ``server_data`` (the server's data the caller loaded) rides on
    the Grid; the result is what the ServerApp handed back on it (None if it did not).
    """
    grid = partitioned_grid(client_app, run_config, num_nodes)
    grid.server_data = server_data
    context = Context(
        run_id=grid._run_id,
        node_id=SERVER_NODE_ID,
        node_config={},
        state=RecordDict(),
        run_config=dict(run_config),
    )
    server_app(grid, context)
    return grid.result
