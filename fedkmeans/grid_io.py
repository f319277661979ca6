"""Whole-node Grid exchanges shared by both ServerApps: wait for nodes, ask each once.

The horizontal pool (:class:`fedkmeans.server.pool.ClientPool`: registration and
node-wide queries) and the vertical protocol's parties
(:mod:`fedkmeans.vertical.server_app`) both send one message to each of a set of
nodes and need every reply attributed to the node it was sent to. That attribution
is done here once: by the id of the request a reply answers, because an error reply
the SuperLink makes for a lost node ("Node Unavailable") carries the SuperLink's own
node id as its source. The per-client streaming of the protocol rounds stays in the
pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

__all__ = ["NO_REPLY", "ask_nodes", "wait_for_nodes"]

#: Failure reason of a node that did not answer before the time-out.
NO_REPLY = "no reply before the round time-out"


def wait_for_nodes(
    grid: Grid, wanted: int, wait_seconds: float, error: Callable[[int], Exception]
) -> list[int]:
    """Connected node ids, sorted, once at least ``wanted`` are connected.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    wanted : int
        Nodes to wait for (0: take whoever is connected now).
    wait_seconds : float
        How long to wait.
    error : callable
        ``error(connected)`` builds the exception raised when time runs out.
    """
    deadline = time.monotonic() + wait_seconds
    node_ids = sorted(grid.get_node_ids())
    while wanted and len(node_ids) < wanted:
        if time.monotonic() > deadline:
            raise error(len(node_ids))
        time.sleep(1.0)
        node_ids = sorted(grid.get_node_ids())
    return node_ids


def ask_nodes(
    grid: Grid, contents: Mapping[int, RecordDict], stage: str, timeout: float
) -> tuple[dict[int, Message], dict[int, str]]:
    """Send ``contents[node]`` to every node as ``query.<stage>``; wait for the replies.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    contents : mapping of int to RecordDict
        One message content per destination node id.
    stage : str
        Message type ``query.<stage>`` (and group id).
    timeout : float
        Seconds to wait for every reply.

    Returns
    -------
    replies : dict of int to Message
        The successful replies, by the node the request went to.
    failures : dict of int to str
        The other nodes: the error reply's reason, or :data:`NO_REPLY`.
    """
    if not contents:
        return {}, {}
    messages = [Message(content, dst_node_id=nid, message_type=f"query.{stage}",
                        group_id=stage) for nid, content in contents.items()]
    answers = grid.send_and_receive(messages, timeout=timeout)
    sent_to = {m.metadata.message_id: m.metadata.dst_node_id for m in messages}  # ids set
    replies: dict[int, Message] = {}
    failures: dict[int, str] = {}
    for reply in answers:
        nid = sent_to.get(reply.metadata.reply_to_message_id, reply.metadata.src_node_id)
        if reply.has_error():
            failures[nid] = f"error reply: {reply.error.reason}"
        else:
            replies[nid] = reply
    for nid in sorted(set(contents) - set(replies) - set(failures)):
        failures[nid] = NO_REPLY
    return replies, failures
