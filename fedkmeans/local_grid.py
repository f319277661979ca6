"""A Flower Grid whose nodes are ClientApp calls in this process (the library's own).

:class:`InProcessGrid` implements Flower's :class:`~flwr.serverapp.Grid` by calling a
ClientApp directly for each message, with one :class:`~flwr.app.Context` per simulated
node (``partition-id`` / ``num-partitions`` node config, as the Flower simulation
gives). Message content goes through Flower's own record types, so the server and
client code paths are exactly those of ``flwr run``; only transport and process
isolation are skipped. The scikit-learn estimator simulates its federation on it; the
experiment's in-process engine (:mod:`fedkmeans.experiment.engines.inprocess`) runs the bundled
apps on it.
"""

from __future__ import annotations

import copy
import itertools
import logging
from collections.abc import Iterable, Mapping
from uuid import uuid4

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from fedkmeans.blas_threads import running_alone

LOG = logging.getLogger(__name__)

__all__ = ["InProcessGrid", "SERVER_NODE_ID", "hand_back", "new_run_id", "partitioned_grid"]

SERVER_NODE_ID = 0
_RUN_IDS = itertools.count(1)


def new_run_id() -> int:
    """A fresh run id for an in-process run, set as Flower's current task identity."""
    run_id = next(_RUN_IDS)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, SERVER_NODE_ID, 0
    return run_id


class InProcessGrid(Grid):
    """A Grid whose nodes are ClientApp calls in this process.

    Parameters
    ----------
    client_app : flwr.clientapp.ClientApp
    run_config : mapping
        The flat run config every node sees.
    node_configs : list of mapping
        One node config per node (e.g. ``{"partition-id": 0, "num-partitions": 2}``).
    run_id : int
    """

    #: The ServerApp's caller (:func:`run_inprocess`) gets a failure's own exception: the
    #: experiment reports it (one line on the command line), not the ServerApp
    #: (:func:`fedkmeans.experiment.flower_logging.one_line_failure`).
    errors_to_caller = True
    #: The server's data ``(points (m, d), labels or None)`` the ServerApp's caller
    #: already loaded in this process (None: the ServerApp loads it).
    server_data: tuple | None = None
    #: What the ServerApp wrote, handed back to its caller (:func:`hand_back`).
    result: dict | None = None

    def __init__(
        self,
        client_app: ClientApp,
        run_config: Mapping,
        node_configs: list[Mapping],
        run_id: int,
    ) -> None:
        self._client_app = client_app
        self._run_id = run_id
        self._contexts = {
            node_id: Context(
                run_id=run_id,
                node_id=node_id,
                node_config=dict(cfg),
                state=RecordDict(),
                run_config=dict(run_config),
            )
            for node_id, cfg in enumerate(node_configs, start=1)
        }
        self._pending: dict[str, Message] = {}

    def set_run(self, run) -> None:  # noqa: D102 - nothing to set in-process
        pass

    @property
    def run(self):  # noqa: D102
        raise NotImplementedError("InProcessGrid has no Flower Run object")

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        """Build an instruction message (deprecated Flower API, kept for completeness)."""
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        """Ids of the simulated nodes."""
        return list(self._contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Queue each message for its node; the ClientApp runs when it is pulled.

        Computing on pull, as a SuperNode computes after the push, keeps at most
        the pulled replies in memory: a server that pulls in a window holds a window.
        """
        ids = []
        for msg in messages:
            msg_id = str(uuid4())
            msg.metadata.__dict__["_message_id"] = msg_id
            self._pending[msg_id] = msg
            ids.append(msg_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Run the ClientApp on the messages ``message_ids``; return (and forget) replies."""
        return [self._deliver(self._pending.pop(mid)) for mid in list(message_ids)
                if mid in self._pending]

    def send_and_receive(self, messages: Iterable[Message], *, timeout=None) -> Iterable[Message]:
        """Push, then pull every reply (in-process calls never time out)."""
        return self.pull_messages(self.push_messages(messages))

    def _deliver(self, msg: Message) -> Message:
        context = self._contexts.get(msg.metadata.dst_node_id)
        if context is None:
            return Message(Error(code=0, reason="unknown node"), reply_to=msg)
        # Deliver a copy, as the wire would: a ClientApp (or a mod such as Flower's
        # secaggplus_mod, which pops keys from the request) must never mutate content
        # the server still holds or shares between messages.
        msg = copy.deepcopy(msg)
        try:
            with running_alone():  # the only node computing in this process now
                reply = self._client_app(msg, context)
        except Exception as exc:  # a failing client becomes an error reply, as in Flower
            LOG.warning("node %d failed: %s", msg.metadata.dst_node_id, type(exc).__name__)
            return Message(Error(code=1, reason=f"{type(exc).__name__}: {exc}"), reply_to=msg)
        reply.metadata.__dict__["_message_id"] = str(uuid4())
        return reply


def hand_back(grid: Grid, result: dict) -> None:
    """Give the ServerApp's caller the result it wrote, when the Grid is in-process.

    Flower's own Grids have no caller in this process to take it: nothing is kept.
    """
    if isinstance(grid, InProcessGrid):
        grid.result = result


def partitioned_grid(app, run_config, num_nodes: int) -> InProcessGrid:
    """A fresh run's Grid of ``num_nodes`` in-process nodes of the ClientApp ``app``.

    Node i gets ``partition-id = i`` and ``num-partitions = num_nodes``, as in the
    Flower simulation (:func:`new_run_id` sets the task identity).
    """
    nodes = [{"partition-id": i, "num-partitions": num_nodes} for i in range(num_nodes)]
    return InProcessGrid(app, run_config, nodes, new_run_id())
