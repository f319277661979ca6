"""``up``, ``down`` and ``status``: start every process of a deployment, stop them by PID.

Part of :mod:`fedkmeans.experiment.deploy` (its docstring describes the workflow).
"""

from __future__ import annotations

import json
import logging
import shlex
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedkmeans.experiment.deploy.commands import (
    list_nodes,
    register_node,
    superlink_command,
    supernode_command,
    write_connection,
)
from fedkmeans.experiment.deploy.layout import (
    CHILDREN,
    DeploymentError,
    Layout,
    deployment_env,
    live_processes,
    log_tail,
    read_json,
    write_json,
)
from fedkmeans.experiment.engines.flower import (
    free_port,
    process_alive,
    stop_processes,
)

LOG = logging.getLogger(__name__)


# -- processes --------------------------------------------------------------------------------
def _start(layout: Layout, role: str, command: list[str], env: dict, cwd: Path) -> dict:
    layout.logs.mkdir(parents=True, exist_ok=True)
    log = layout.logs / f"{role}.log"
    cwd.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
    LOG.info("started %s (pid %d): %s", role, proc.pid, shlex.join(command))
    CHILDREN[proc.pid] = proc
    return {"role": role, "pid": proc.pid, "command": command, "log": str(log)}


def _save_state(layout: Layout, state: dict) -> None:
    write_json(layout.state, state)


def _exit_code(entry: dict) -> int | None:
    proc = CHILDREN.get(entry["pid"])
    if proc is not None:
        return proc.poll()
    return None if process_alive(entry["pid"]) else -1


def _wait_port(host: str, port: int, entry: dict, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    dial = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    while time.monotonic() < deadline:
        code = _exit_code(entry)
        if code is not None:
            raise DeploymentError(
                f"{entry['role']} exited with code {code} while starting; log {entry['log']}:\n"
                + log_tail(Path(entry["log"]))
            )
        try:
            with socket.create_connection((dial, port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.3)
    raise DeploymentError(f"{entry['role']} did not listen on {dial}:{port} within {timeout} s")


def up(
    directory: str | Path,
    *,
    insecure: bool = False,
    host: str = "127.0.0.1",
    port: int | None = None,
    nodes: Sequence[int] | None = None,
    superlink: str | None = None,
    start_superlink: bool = True,
    timeout: float = 120.0,
    extra_env: Mapping[str, str] | None = None,
) -> dict:
    """Start the SuperLink and the SuperNodes of a prepared deployment; wait until online.

    Parameters
    ----------
    directory : str or pathlib.Path
        A directory made by :func:`prepare`.
    insecure : bool
        Plain HTTP, no node authentication (only when asked for).
    host, port : str, int
        SuperLink address to serve on (port: a free one by default).
    nodes : sequence of int, optional
        Which nodes to start here (default: all). ``[]`` starts none.
    superlink : str, optional
        ``host:port`` of a SuperLink started elsewhere (with ``start_superlink=False``).
    start_superlink : bool
        Start the SuperLink on this machine (and register the node keys with it).
    timeout : float
        Seconds to wait for the SuperLink to listen and the nodes to come online.
    extra_env : mapping, optional
        More environment for every started process (e.g. ``FEDKMEANS_CACHE_DIR``).

    Returns
    -------
    dict
        The state (also in ``state.json``): processes with PIDs, addresses, node ids.

    Raises
    ------
    DeploymentError
        A process exited while starting (its log tail is included) or a node did not
        come online in time. Processes started so far are stopped.
    """
    layout = Layout(Path(directory))
    manifest = read_json(layout.manifest, "manifest (run `prepare` first)")
    if not insecure and not manifest.get("secure"):
        raise DeploymentError(
            "the deployment was prepared without certificates and keys; run `prepare` "
            "without --insecure, or `up --insecure`"
        )
    if layout.state.exists() and live_processes(layout):
        raise DeploymentError(
            f"a deployment is already running in {layout.root} (see {layout.state}); "
            "run `down` first"
        )
    num_nodes = int(manifest["num_nodes"])
    nodes = list(range(num_nodes)) if nodes is None else list(nodes)
    bad = [i for i in nodes if not 0 <= i < num_nodes]
    if bad:
        raise DeploymentError(f"node indices {bad} out of range [0, {num_nodes})")
    if not start_superlink and not superlink:
        raise DeploymentError("without the SuperLink on this machine, give its address")
    port = port or free_port()
    address = superlink or f"{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"
    state: dict[str, Any] = {
        "insecure": insecure, "superlink": address, "num_nodes": num_nodes,
        "processes": [], "node_ids": {}, "started_at": time.time(),
    }
    write_connection(layout, address, insecure=insecure)
    try:
        if start_superlink:
            extra = dict(extra_env or {})
            home = layout.home("superlink")
            entry = _start(
                layout, "superlink",
                superlink_command(layout, host=host, port=port, insecure=insecure),
                deployment_env(layout, home, **extra), layout.superlink_dir,
            )
            state["processes"].append(entry)
            _save_state(layout, state)
            _wait_port(host, port, entry, timeout)
            if not insecure:
                for i in range(num_nodes):
                    pub = layout.node_key(i).with_name(f"node-{i}.pub")
                    state["node_ids"][str(i)] = register_node(layout, pub)
                _save_state(layout, state)
        for i in nodes:
            entry = _start(
                layout, f"supernode-{i}",
                supernode_command(layout, i, num_nodes, superlink=address, port=free_port(),
                                  insecure=insecure),
                deployment_env(layout, layout.home(f"supernode-{i}"), **dict(extra_env or {})),
                layout.home(f"supernode-{i}"),
            )
            state["processes"].append(entry)
            _save_state(layout, state)
        if nodes and start_superlink:
            _wait_nodes_online(layout, state, len(nodes), timeout)
        elif nodes:  # the SuperLink is elsewhere: at least check that nodes were not refused
            _validate_running(state, seconds=10.0)
    except BaseException:
        _stop_state(layout, state)
        layout.state.unlink(missing_ok=True)
        raise
    _save_state(layout, state)
    return state


def _raise_if_exited(state: dict) -> None:
    """A started process that exited is an error that shows its log tail."""
    for entry in state["processes"]:
        code = _exit_code(entry)
        if code is not None:
            raise DeploymentError(
                f"{entry['role']} exited with code {code}; log {entry['log']}:\n"
                + log_tail(Path(entry["log"]), 1500)
            )


def _validate_running(state: dict, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        _raise_if_exited(state)
        if time.monotonic() > deadline:
            return
        time.sleep(0.5)


def _wait_nodes_online(layout: Layout, state: dict, wanted: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    online: list[dict] = []
    while time.monotonic() < deadline:
        _raise_if_exited(state)
        try:
            online = [n for n in list_nodes(layout) if n.get("status") == "online"]
        except DeploymentError as exc:  # transient: the CLI call itself failed
            LOG.warning("%s", exc)
        if len(online) >= wanted:
            state["online"] = [n["node-id"] for n in online]
            return
        time.sleep(1.0)
    raise DeploymentError(
        f"only {len(online)} of {wanted} SuperNodes came online within {timeout} s; "
        f"see the logs in {layout.logs}"
    )


# -- stopping -----------------------------------------------------------------------------------
def _stop_state(layout: Layout, state: Mapping) -> list[int]:
    marked = set(live_processes(layout))
    # PIDs from the state file, only while they still carry this deployment's marker
    # (a PID reused by another program is never signalled); then anything they spawned.
    pids = [p["pid"] for p in state.get("processes", [])]
    recorded = [pid for pid in pids if pid in marked]
    recorded += [pid for pid in pids if pid not in marked and pid in CHILDREN
                 and CHILDREN[pid].poll() is None]
    stop_processes(recorded)
    for pid in pids:
        proc = CHILDREN.pop(pid, None)
        if proc is not None:
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                LOG.warning("process %d did not exit after SIGKILL", pid)
    leftovers = live_processes(layout)
    stop_processes(leftovers)
    return recorded + leftovers


def down(directory: str | Path) -> list[int]:
    """Stop every process of the deployment by PID and remove ``state.json``.

    The PIDs in ``state.json`` are signalled (SIGTERM, then SIGKILL after 5 s) only if
    they still carry the deployment marker; then any process Flower spawned with the
    marker (SuperExec, ServerApp, ClientApp).

    Returns
    -------
    list of int
        The PIDs that were signalled.
    """
    layout = Layout(Path(directory))
    state = json.loads(layout.state.read_text()) if layout.state.is_file() else {}
    stopped = _stop_state(layout, state)
    layout.state.unlink(missing_ok=True)
    still = live_processes(layout)
    if still:
        raise DeploymentError(f"processes {still} of {layout.root} survived SIGKILL")
    return stopped


def status(directory: str | Path) -> dict:
    """Processes of the deployment and whether they are alive; the nodes the SuperLink knows."""
    layout = Layout(Path(directory))
    state = read_json(layout.state, "state (run `up` first)")
    marked = set(live_processes(layout))
    for entry in state["processes"]:
        entry["alive"] = entry["pid"] in marked
    try:
        state["nodes"] = list_nodes(layout)
    except DeploymentError as exc:
        state["nodes"] = f"unavailable: {exc}"
    return state
