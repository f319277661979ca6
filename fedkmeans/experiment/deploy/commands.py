"""The SuperLink and SuperNode command lines, the CLI's connection and node registration.

Part of :mod:`fedkmeans.experiment.deploy` (its docstring describes the workflow).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import tomli_w

from fedkmeans.experiment.deploy.layout import (
    CONNECTION,
    DeploymentError,
    Layout,
    deployment_env,
    run_tool,
)

LOG = logging.getLogger(__name__)


# -- commands -----------------------------------------------------------------------------------
def superlink_command(
    layout: Layout, *, host: str = "127.0.0.1", port: int = 9093, insecure: bool = False
) -> list[str]:
    """The ``flower-superlink`` command line.

    Parameters
    ----------
    layout : Layout
    host, port : str, int
        Where the SuperLink serves its HTTP APIs (Fleet for SuperNodes, Control for the
        CLI, Runtime for the ServerApp) — one port. ``0.0.0.0`` for other machines.
    insecure : bool
        Plain HTTP and no node authentication.

    Returns
    -------
    list of str
    """
    command = [
        "flower-superlink", "--host", host, "--port", str(port),
        "--database", str(layout.superlink_dir / "state.db"),
        "--disable-runtime-dependency-installation",
    ]
    if insecure:
        return [*command, "--insecure"]
    return [
        *command,
        "--ssl-ca-certfile", str(layout.ca_cert),
        "--ssl-certfile", str(layout.server_cert),
        "--ssl-keyfile", str(layout.server_key),
        "--enable-supernode-auth",
    ]


def node_config(partition_id: int, num_partitions: int, data_path: str | Path) -> str:
    """The ``--node-config`` string of one SuperNode.

    Raises
    ------
    ValueError
        ``data_path`` contains a quote, which the node-config syntax cannot carry.
    """
    data_path = str(data_path)
    if '"' in data_path or "'" in data_path:
        raise ValueError(f"data path must not contain quotes: {data_path!r}")
    return f'partition-id={partition_id} num-partitions={num_partitions} data-path="{data_path}"'


def supernode_command(
    layout: Layout,
    i: int,
    num_nodes: int,
    *,
    superlink: str,
    port: int,
    insecure: bool = False,
    key: Path | None = None,
    data_path: Path | None = None,
    max_retries: int | None = None,
) -> list[str]:
    """The ``flower-supernode`` command line of node ``i``.

    Parameters
    ----------
    layout : Layout
    i, num_nodes : int
        Partition id and number of partitions of the node config.
    superlink : str
        ``host:port`` of the SuperLink.
    port : int
        This node's own Runtime API port (for its ClientApp processes); distinct per
        node on one host.
    insecure : bool
        Plain HTTP, no key.
    key, data_path : pathlib.Path, optional
        Default: ``keys/node-<i>`` and ``data/node-<i>.npz``.
    max_retries : int, optional
        Give up after this many failed connection attempts (default: retry forever).

    Returns
    -------
    list of str
    """
    data_path = data_path or layout.node_data(i)
    command = [
        "flower-supernode", "--superlink", superlink, "--port", str(port),
        "--node-config", node_config(i, num_nodes, data_path),
    ]
    if max_retries is not None:
        command += ["--max-retries", str(max_retries)]
    if insecure:
        return [*command, "--insecure"]
    return [
        *command,
        "--root-certificates", str(layout.ca_cert),
        "--auth-supernode-private-key", str(key or layout.node_key(i)),
    ]


def write_connection(layout: Layout, address: str, *, insecure: bool = False) -> Path:
    """Write the CLI's private ``config.toml`` with one connection, the default.

    Returns
    -------
    pathlib.Path
        The file (mode 600 in a 700 directory).
    """
    layout.cli_home.mkdir(parents=True, exist_ok=True)
    os.chmod(layout.cli_home, 0o700)
    connection: dict[str, Any] = {"address": address}
    if insecure:
        connection["insecure"] = True
    else:
        connection["root-certificates"] = str(layout.ca_cert)
    path = layout.cli_home / "config.toml"
    path.write_text(tomli_w.dumps({"superlink": {"default": CONNECTION, CONNECTION: connection}}))
    os.chmod(path, 0o600)
    return path


def flwr_cli(layout: Layout, *args: str, what: str, timeout: float = 60.0) -> str:
    """Run the ``flwr`` CLI with the deployment's environment; its stdout."""
    return run_tool(["flwr", *args], what, env=deployment_env(layout), timeout=timeout)


def json_output(text: str, what: str) -> dict:
    """The JSON object in a ``flwr ... --format json`` output (``what`` names it in errors)."""
    start = text.find("{")
    try:
        return json.loads(text[start:])
    except ValueError as exc:
        raise DeploymentError(f"{what}: no JSON in the output: {text[-500:]}") from exc


def register_node(layout: Layout, public_key: Path) -> str | None:
    """Register a node's public key with the SuperLink.

    Returns
    -------
    str or None
        The node id, or None when the key was registered before (the SuperLink's
        ``--database`` keeps registrations across restarts).
    """
    if not public_key.is_file():
        raise DeploymentError(f"public key not found: {public_key}")
    what = f"registering {public_key.name}"
    try:
        out = flwr_cli(layout, "supernode", "register", str(public_key), CONNECTION,
                    "--format", "json", what=what)
    except DeploymentError as exc:
        if "already in use" in str(exc):
            LOG.info("%s: already registered", public_key.name)
            return None
        raise
    reply = json_output(out, what)
    if "already in use" in str(reply.get("error-message", "")):
        LOG.info("%s: already registered", public_key.name)
        return None
    if not reply.get("success", True) or "node-id" not in reply:
        raise DeploymentError(f"registering {public_key.name} failed: {reply}")
    return str(reply["node-id"])


def list_nodes(layout: Layout) -> list[dict]:
    """The SuperLink's nodes (``flwr supernode list --format json``)."""
    out = flwr_cli(layout, "supernode", "list", CONNECTION, "--format", "json",
                what="listing SuperNodes")
    return list(json_output(out, "listing SuperNodes").get("nodes", []))
