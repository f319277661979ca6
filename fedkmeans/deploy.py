"""Deployment with real processes: one SuperLink, N SuperNodes, TLS and node authentication.

A scripted version of Flower's deployment runtime for this app. Every step is a
function and a subcommand of ``python -m fedkmeans.deploy``::

    python -m fedkmeans.deploy prepare DIR --nodes 3      # data files, CA + certificate, node keys
    python -m fedkmeans.deploy up DIR                     # SuperLink + 3 SuperNodes (TLS + auth)
    python -m fedkmeans.deploy run DIR --set privacy.epsilon=1.0
    python -m fedkmeans.deploy down DIR                   # stop every process by PID

``python -m fedkmeans.deploy demo DIR`` does all four. ``commands DIR`` prints the
exact command lines, for starting the processes by hand on several machines.

Layout of a deployment directory (keep it outside the repository: ``flwr run`` packs
the app directory)::

    DIR/manifest.json              what `prepare` made (nodes, files, server data mode)
    DIR/state.json                 what `up` started: PIDs, ports, node ids (removed by `down`)
    DIR/data/node-<i>.npz          node i's clients (+ the public server points)
    DIR/data/server.npz            the server's data.path (see below)
    DIR/certs/ca.crt, ca.key       offline CA (ca.key never leaves this machine)
    DIR/certs/server.pem, .key     SuperLink certificate, SANs localhost, 127.0.0.1, ::1 (+ --san)
    DIR/keys/node-<i>, .pub        SuperNode authentication keys (OpenSSH ECDSA P-384)
    DIR/flwr-home/config.toml      the CLI's private SuperLink connection
    DIR/homes/<process>/           FLWR_HOME of each SuperLink/SuperNode
    DIR/superlink/state.db         SuperLink database (registrations survive a restart)
    DIR/logs/*.log                 one log per process and per run
    DIR/outputs/<run>/result.json  results (absolute output-dir)

**The server's data file.** The ServerApp reads ``data.path`` for ``server_x`` (the
server's public points). With ``--server-data full`` (the default) ``server.npz`` is
the whole data set, every client's points included, so the server can compute the
non-private optimal cost for ``metrics.cost_ratio``: that is an evaluation outside
the privacy guarantee, for experiments only. With ``--server-data public`` the file
holds only the public server points (the format's ``x``/``client`` fields carry a copy
of them, as one pseudo-client) and its runs get ``optimal-cost = "skip"``, so no
optimal cost is computed from them.

Every process gets ``FLWR_TELEMETRY_ENABLED=0``, ``FLWR_DISABLE_UPDATE_CHECK=1`` and
``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1`` (the SuperLink also gets
``--disable-runtime-dependency-installation``; SuperNodes install nothing unless told
to), its own ``FLWR_HOME``, and ``FEDKMEANS_DEPLOYMENT=<DIR>``, by which ``down``
also finds the processes Flower spawned (SuperExec, ServerApp, ClientApp).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

try:  # Python >= 3.11
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10 (tomli comes with flwr)
    import tomli as tomllib

from fedkmeans.config import parse_config
from fedkmeans.data.mixture import mixture_client, mixture_server
from fedkmeans.data.npz import load_npz, save_npz
from fedkmeans.engines.flower import (
    PROJECT_DIR,
    free_port,
    nested_config,
    process_alive,
    processes_with_env,
    stop_processes,
)

__all__ = [
    "CONNECTION",
    "MARKER",
    "DeploymentError",
    "Layout",
    "check_tools",
    "commands",
    "deployment_env",
    "down",
    "list_nodes",
    "make_certificates",
    "make_node_keys",
    "node_config",
    "parse_overrides",
    "prepare",
    "register_node",
    "run",
    "run_config",
    "split_dataset",
    "status",
    "superlink_command",
    "supernode_command",
    "up",
    "write_connection",
]

LOG = logging.getLogger(__name__)

#: Name of the SuperLink connection in the CLI's ``config.toml``.
CONNECTION = "fedkmeans-deploy"
#: Environment variable that marks every process of one deployment (value: its directory).
MARKER = "FEDKMEANS_DEPLOYMENT"
#: Debian packages that provide the external tools.
TOOLS = {"openssl": "openssl", "ssh-keygen": "openssh-client"}
SERVER_DATA_MODES = ("full", "public")
#: Processes started by this Python process, kept so they can be reaped (no zombies).
_CHILDREN: dict[int, subprocess.Popen] = {}


class DeploymentError(RuntimeError):
    """A deployment step failed; the message names the step and the log to read."""


# -- layout -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """Paths inside one deployment directory.

    Parameters
    ----------
    root : pathlib.Path
        The deployment directory (made absolute).
    """

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).expanduser().resolve())

    manifest = property(lambda self: self.root / "manifest.json")
    state = property(lambda self: self.root / "state.json")
    data = property(lambda self: self.root / "data")
    certs = property(lambda self: self.root / "certs")
    keys = property(lambda self: self.root / "keys")
    logs = property(lambda self: self.root / "logs")
    outputs = property(lambda self: self.root / "outputs")
    cli_home = property(lambda self: self.root / "flwr-home")
    superlink_dir = property(lambda self: self.root / "superlink")
    server_data = property(lambda self: self.root / "data" / "server.npz")
    ca_cert = property(lambda self: self.root / "certs" / "ca.crt")
    server_cert = property(lambda self: self.root / "certs" / "server.pem")
    server_key = property(lambda self: self.root / "certs" / "server.key")

    def node_data(self, i: int) -> Path:
        """Data file of node ``i``."""
        return self.data / f"node-{i}.npz"

    def node_key(self, i: int) -> Path:
        """Private authentication key of node ``i`` (its ``.pub`` is next to it)."""
        return self.keys / f"node-{i}"

    def home(self, name: str) -> Path:
        """``FLWR_HOME`` of one process (``superlink``, ``supernode-<i>``)."""
        return self.root / "homes" / name


def _read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise DeploymentError(f"{what} not found: {path}")
    return json.loads(path.read_text())


def _write_json(path: Path, content: Mapping) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(content, indent=1))
    tmp.replace(path)


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return f"(no log at {path})"


# -- tools and environment ----------------------------------------------------------------
def check_tools(names: Sequence[str] = ("openssl", "ssh-keygen")) -> None:
    """Fail early, naming the Debian package, when an external tool is missing.

    Raises
    ------
    DeploymentError
        A tool is not on ``PATH``.
    """
    missing = [name for name in names if shutil.which(name) is None]
    if missing:
        packages = " ".join(sorted({TOOLS.get(name, name) for name in missing}))
        raise DeploymentError(
            f"missing tool(s) {missing} on PATH; on Debian/Ubuntu: apt-get install {packages}"
        )


def deployment_env(layout: Layout, home: Path | None = None, **extra: str) -> dict[str, str]:
    """Environment of a process of this deployment.

    Parameters
    ----------
    layout : Layout
    home : pathlib.Path, optional
        Its ``FLWR_HOME`` (default: the CLI's home).
    **extra : str
        More variables.

    Returns
    -------
    dict
        ``os.environ`` plus the Flower switches, ``FLWR_HOME`` and the deployment marker.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLWR_LOCAL_")}
    env.update(
        FLWR_HOME=str(home or layout.cli_home),
        FLWR_TELEMETRY_ENABLED="0",
        FLWR_DISABLE_UPDATE_CHECK="1",
        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
        **{MARKER: str(layout.root)},
        **extra,
    )
    return env


def _run_tool(command: Sequence[str], what: str, *, env=None, timeout: float = 120.0) -> str:
    """Run a short command; return stdout or raise with its output."""
    try:
        proc = subprocess.run(
            list(command), env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise DeploymentError(f"{what}: `{command[0]}` did not finish in {timeout:.0f} s") from exc
    if proc.returncode != 0:
        raise DeploymentError(
            f"{what} failed (exit {proc.returncode}): {shlex.join(command)}\n"
            f"{(proc.stdout + proc.stderr)[-2000:]}"
        )
    return proc.stdout


# -- data -------------------------------------------------------------------------------
def _mixture_arrays(flat: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The mixture federation of a flat config, as one data set (ids = client index)."""
    config = parse_config({**flat, "data.name": "mixture"})
    d = config.data
    xs, ys, ids = [], [], []
    for j in range(d.num_clients):
        x, y = mixture_client(
            config.seed, j, k=d.components, dim=d.dim, n_points=d.points_per_client,
            variance=d.variance, partition=d.partition, dirichlet_alpha=d.dirichlet_alpha,
        )
        xs.append(x)
        ys.append(y)
        ids.append(np.full(x.shape[0], j, dtype=np.int64))
    server_x, server_y = mixture_server(
        config.seed, k=d.components, dim=d.dim, per_component=d.server_points_per_component,
        uniform=d.server_uniform_points, variance=d.variance,
    )
    return {
        "x": np.concatenate(xs), "y": np.concatenate(ys), "client": np.concatenate(ids),
        "server_x": server_x, "server_y": server_y,
    }


def split_dataset(
    arrays: Mapping[str, np.ndarray | None],
    num_nodes: int,
    out_dir: Path,
    *,
    server_data: str = "full",
) -> tuple[list[Path], Path]:
    """Write one ``.npz`` per node and the server's file.

    Clients are assigned to nodes as the simulation does for an ``npz`` data set: the
    ``i``-th smallest client id goes to node ``i mod num_nodes``. Each node file also
    carries the public server points (the file format requires ``server_x``; nodes do
    not use them).

    Parameters
    ----------
    arrays : mapping
        ``x``, ``client``, ``server_x`` and optionally ``y``, ``server_y`` (see
        :mod:`fedkmeans.data.npz`).
    num_nodes : int
        Number of node files, at most the number of clients.
    out_dir : pathlib.Path
        Directory of ``node-<i>.npz`` and ``server.npz``.
    server_data : {"full", "public"}
        ``full``: ``server.npz`` is the whole data set (the server then computes the
        non-private optimal cost). ``public``: only the server points.

    Returns
    -------
    node_files : list of pathlib.Path
    server_file : pathlib.Path

    Raises
    ------
    ValueError
        Fewer clients than nodes, or an unknown ``server_data``.
    """
    if server_data not in SERVER_DATA_MODES:
        raise ValueError(f"server_data must be one of {SERVER_DATA_MODES}, got {server_data!r}")
    client = np.asarray(arrays["client"])
    ids = np.unique(client)
    if num_nodes < 1 or num_nodes > ids.size:
        raise ValueError(
            f"num_nodes must be in [1, {ids.size}] (the number of clients), got {num_nodes}"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    x, y = np.asarray(arrays["x"]), arrays.get("y")
    server = {"server_x": arrays["server_x"], "server_y": arrays.get("server_y")}
    node_files = []
    for i in range(num_nodes):
        mask = np.isin(client, ids[np.arange(ids.size) % num_nodes == i])
        node_files.append(save_npz(
            out_dir / f"node-{i}.npz", x=x[mask], client=client[mask],
            y=None if y is None else np.asarray(y)[mask], **server,
        ))
    if server_data == "full":
        server_file = save_npz(out_dir / "server.npz", x=x, client=client, y=y, **server)
    else:
        server_x = np.asarray(arrays["server_x"])
        server_file = save_npz(
            out_dir / "server.npz", x=server_x, client=np.zeros(server_x.shape[0], np.int64),
            **server,
        )
    return node_files, server_file


# -- certificates and keys --------------------------------------------------------------------
_CA_CONFIG = """[req]
distinguished_name = dn
prompt = no
x509_extensions = v3_ca
[dn]
CN = fedkmeans deployment CA
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
"""

_SERVER_CONFIG = """[req]
distinguished_name = dn
prompt = no
[dn]
CN = {cn}
[v3_server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = {sans}
"""


def _san_entries(hosts: Sequence[str]) -> list[str]:
    entries = []
    for host in ["localhost", "127.0.0.1", "::1", *hosts]:
        try:
            entry = f"IP:{ipaddress.ip_address(host)}"
        except ValueError:
            if not host or any(c in host for c in " ,=\"'"):
                raise ValueError(f"invalid host name for the certificate: {host!r}") from None
            entry = f"DNS:{host}"
        if entry not in entries:
            entries.append(entry)
    return entries


def make_certificates(certs_dir: Path, hosts: Sequence[str] = (), days: int = 365) -> list[str]:
    """Create an offline CA and a SuperLink certificate signed by it (openssl, EC P-256).

    Parameters
    ----------
    certs_dir : pathlib.Path
        Receives ``ca.key``, ``ca.crt``, ``server.key``, ``server.pem``.
    hosts : sequence of str
        Names or addresses of the SuperLink besides ``localhost``, ``127.0.0.1`` and
        ``::1`` (which are always included: the SuperLink's own executor dials
        127.0.0.1).
    days : int
        Validity.

    Returns
    -------
    list of str
        The subject alternative names.
    """
    check_tools(["openssl"])
    certs_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(certs_dir, 0o700)
    sans = _san_entries(hosts)
    (certs_dir / "ca.cnf").write_text(_CA_CONFIG)
    (certs_dir / "server.cnf").write_text(
        _SERVER_CONFIG.format(cn=sans[0].split(":", 1)[1], sans=",".join(sans))
    )
    c = {name: str(certs_dir / name) for name in (
        "ca.key", "ca.crt", "ca.cnf", "ca.srl", "server.key", "server.csr", "server.pem",
        "server.cnf",
    )}
    keygen = ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]
    steps = [
        ([*keygen, "-out", c["ca.key"]], "CA key"),
        (["openssl", "req", "-x509", "-new", "-key", c["ca.key"], "-sha256", "-days", str(days),
          "-config", c["ca.cnf"], "-out", c["ca.crt"]], "CA certificate"),
        ([*keygen, "-out", c["server.key"]], "SuperLink key"),
        (["openssl", "req", "-new", "-key", c["server.key"], "-config", c["server.cnf"],
          "-out", c["server.csr"]], "SuperLink certificate request"),
        (["openssl", "x509", "-req", "-in", c["server.csr"], "-CA", c["ca.crt"], "-CAkey",
          c["ca.key"], "-CAserial", c["ca.srl"], "-CAcreateserial", "-days", str(days),
          "-sha256", "-extfile", c["server.cnf"], "-extensions", "v3_server",
          "-out", c["server.pem"]], "SuperLink certificate"),
    ]
    for command, what in steps:
        _run_tool(command, f"openssl: {what}")
    for name in ("ca.key", "server.key"):
        os.chmod(c[name], 0o600)
    _run_tool(["openssl", "verify", "-CAfile", c["ca.crt"], c["server.pem"]],
              "openssl: verify the SuperLink certificate")
    return sans


def make_node_keys(keys_dir: Path, num_nodes: int) -> list[Path]:
    """One unencrypted OpenSSH ECDSA P-384 key pair per node.

    Flower 1.41 accepts NIST EC keys only; Ed25519, PEM and passphrase-protected keys
    fail (docs/facts.md, "Deployment with TLS and node authentication").

    Returns
    -------
    list of pathlib.Path
        The private keys; each public key is ``<key>.pub``.
    """
    check_tools(["ssh-keygen"])
    keys_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(keys_dir, 0o700)
    paths = []
    for i in range(num_nodes):
        key = keys_dir / f"node-{i}"
        for path in (key, key.with_name(key.name + ".pub")):
            path.unlink(missing_ok=True)
        _run_tool(
            ["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C",
             f"fedkmeans-node-{i}", "-f", str(key)],
            f"ssh-keygen: key of node {i}",
        )
        paths.append(key)
    return paths


# -- prepare ----------------------------------------------------------------------------------
def prepare(
    directory: str | Path,
    num_nodes: int,
    *,
    source: str | Path | None = None,
    mixture: Mapping[str, Any] | None = None,
    server_data: str = "full",
    hosts: Sequence[str] = (),
    secure: bool = True,
) -> dict:
    """Write the node data files, the server's file, certificates and node keys.

    Parameters
    ----------
    directory : str or pathlib.Path
        Deployment directory (created; must not be inside the app directory unless
        under ``outputs/``, which ``flwr run`` does not pack).
    num_nodes : int
        Number of SuperNodes.
    source : path, optional
        An existing ``.npz`` data set to split. Default: generate the mixture.
    mixture : mapping, optional
        Flat config keys of the mixture (``seed``, ``data.dim``, ...; defaults from
        the app config).
    server_data : {"full", "public"}
        What ``data/server.npz`` holds (module docstring).
    hosts : sequence of str
        Extra names/addresses of the SuperLink for its certificate.
    secure : bool
        Create the CA, certificate and node keys (not needed for ``up --insecure``).

    Returns
    -------
    dict
        The manifest (also written to ``manifest.json``).
    """
    layout = Layout(Path(directory))
    _check_outside_app(layout.root)
    if _live_processes(layout):
        raise DeploymentError(
            f"a deployment is running in {layout.root}; run `down` before preparing it again"
        )
    if secure:
        check_tools()
    layout.root.mkdir(parents=True, exist_ok=True)
    if source is not None:
        dataset = load_npz(source)
        arrays = {name: getattr(dataset, name) for name in
                  ("x", "client", "y", "server_x", "server_y")}
    else:
        arrays = _mixture_arrays(mixture or {})
    node_files, server_file = split_dataset(arrays, num_nodes, layout.data,
                                            server_data=server_data)
    manifest: dict[str, Any] = {
        "num_nodes": num_nodes,
        "source": str(Path(source).resolve()) if source is not None else "mixture",
        "mixture": dict(mixture or {}) if source is None else None,
        "node_files": [str(p) for p in node_files],
        "server_file": str(server_file),
        "server_data": server_data,
        "num_clients": int(np.unique(arrays["client"]).size),
        "dim": int(np.asarray(arrays["x"]).shape[1]),
        "secure": secure,
    }
    if secure:
        manifest["sans"] = make_certificates(layout.certs, hosts)
        manifest["node_keys"] = [str(p) for p in make_node_keys(layout.keys, num_nodes)]
    _write_json(layout.manifest, manifest)
    LOG.info("prepared %d node files and %s in %s", num_nodes, server_file.name, layout.root)
    return manifest


def _check_outside_app(root: Path, project_dir: Path = PROJECT_DIR) -> None:
    try:
        inside = root.relative_to(project_dir.resolve())
    except ValueError:
        return
    if not inside.parts or inside.parts[0] != "outputs":
        raise DeploymentError(
            f"deployment directory {root} is inside the app directory {project_dir}, which "
            "`flwr run` packs and ships to every node; use a directory outside it (or under "
            "outputs/)"
        )


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


def _flwr(layout: Layout, *args: str, what: str, timeout: float = 60.0) -> str:
    return _run_tool(["flwr", *args], what, env=deployment_env(layout), timeout=timeout)


def _json_output(text: str, what: str) -> dict:
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
        out = _flwr(layout, "supernode", "register", str(public_key), CONNECTION,
                    "--format", "json", what=what)
    except DeploymentError as exc:
        if "already in use" in str(exc):
            LOG.info("%s: already registered", public_key.name)
            return None
        raise
    reply = _json_output(out, what)
    if "already in use" in str(reply.get("error-message", "")):
        LOG.info("%s: already registered", public_key.name)
        return None
    if not reply.get("success", True) or "node-id" not in reply:
        raise DeploymentError(f"registering {public_key.name} failed: {reply}")
    return str(reply["node-id"])


def list_nodes(layout: Layout) -> list[dict]:
    """The SuperLink's nodes (``flwr supernode list --format json``)."""
    out = _flwr(layout, "supernode", "list", CONNECTION, "--format", "json",
                what="listing SuperNodes")
    return list(_json_output(out, "listing SuperNodes").get("nodes", []))


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
    _CHILDREN[proc.pid] = proc
    return {"role": role, "pid": proc.pid, "command": command, "log": str(log)}


def _save_state(layout: Layout, state: dict) -> None:
    _write_json(layout.state, state)


def _exit_code(entry: dict) -> int | None:
    proc = _CHILDREN.get(entry["pid"])
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
                + _tail(Path(entry["log"]))
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
    manifest = _read_json(layout.manifest, "manifest (run `prepare` first)")
    if not insecure and not manifest.get("secure"):
        raise DeploymentError(
            "the deployment was prepared without certificates and keys; run `prepare` "
            "without --insecure, or `up --insecure`"
        )
    if layout.state.exists() and _live_processes(layout):
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
            _check_running(state, seconds=10.0)
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
                + _tail(Path(entry["log"]), 1500)
            )


def _check_running(state: dict, seconds: float) -> None:
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
def _live_processes(layout: Layout) -> list[int]:
    return processes_with_env(MARKER, str(layout.root))


def _stop_state(layout: Layout, state: Mapping) -> list[int]:
    marked = set(_live_processes(layout))
    # PIDs from the state file, only while they still carry this deployment's marker
    # (a PID reused by another program is never signalled); then anything they spawned.
    pids = [p["pid"] for p in state.get("processes", [])]
    recorded = [pid for pid in pids if pid in marked]
    recorded += [pid for pid in pids if pid not in marked and pid in _CHILDREN
                 and _CHILDREN[pid].poll() is None]
    stop_processes(recorded)
    for pid in pids:
        proc = _CHILDREN.pop(pid, None)
        if proc is not None:
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                LOG.warning("process %d did not exit after SIGKILL", pid)
    leftovers = _live_processes(layout)
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
    still = _live_processes(layout)
    if still:
        raise DeploymentError(f"processes {still} of {layout.root} survived SIGKILL")
    return stopped


def status(directory: str | Path) -> dict:
    """Processes of the deployment and whether they are alive; the nodes the SuperLink knows."""
    layout = Layout(Path(directory))
    state = _read_json(layout.state, "state (run `up` first)")
    marked = set(_live_processes(layout))
    for entry in state["processes"]:
        entry["alive"] = entry["pid"] in marked
    try:
        state["nodes"] = list_nodes(layout)
    except DeploymentError as exc:
        state["nodes"] = f"unavailable: {exc}"
    return state


# -- run ---------------------------------------------------------------------------------------
def _parse_value(text: str) -> Any:
    """A ``--set`` value: TOML if it parses (numbers, inf, quoted strings), else a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``["k=v", ...]`` to a flat dict (values parsed as TOML when possible).

    Raises
    ------
    ValueError
        An item without ``=``.
    """
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"override must be key=value, got {pair!r}")
        out[key.strip()] = _parse_value(value.strip())
    return out


def run_config(
    layout: Layout, overrides: Mapping[str, Any] | None = None, *, output_dir: Path | None = None
) -> dict[str, Any]:
    """The flat run config of a deployment run (validated by :func:`parse_config`).

    ``data.name = "npz"``, ``data.path`` = the server's file, ``federation.num-nodes``
    = the number of nodes (the ServerApp waits for them), an absolute ``output-dir``,
    and ``optimal-cost = "skip"`` when the server's file holds only public points;
    ``overrides`` win.
    """
    manifest = _read_json(layout.manifest, "manifest (run `prepare` first)")
    flat: dict[str, Any] = {
        "data.name": "npz",
        "data.path": manifest["server_file"],
        "federation.num-nodes": int(manifest["num_nodes"]),
        "output-dir": str(output_dir or layout.outputs / time.strftime("run-%Y%m%d-%H%M%S")),
    }
    if manifest.get("server_data") == "public":
        flat["optimal-cost"] = "skip"
    flat.update(overrides or {})
    if not Path(str(flat["output-dir"])).is_absolute():
        raise ValueError(f"output-dir must be absolute, got {flat['output-dir']!r}")
    parse_config(flat)  # one clear error before anything is sent
    return flat


def run(
    directory: str | Path,
    overrides: Mapping[str, Any] | None = None,
    *,
    output_dir: str | Path | None = None,
    timeout: float = 1800.0,
    echo: bool = False,
    project_dir: Path = PROJECT_DIR,
) -> dict:
    """Run the app on the deployment with ``flwr run --stream``; return ``result.json``.

    ``flwr run`` exits 0 even when the run fails, so success means a fresh
    ``result.json`` in the output directory.

    Parameters
    ----------
    directory : str or pathlib.Path
        A deployment that is :func:`up`.
    overrides : mapping, optional
        Flat run config keys (``privacy.epsilon``, ``k``, ...).
    output_dir : path, optional
        Absolute output directory on the SuperLink's machine.
    timeout : float
        Seconds before the run is stopped (``flwr stop``) and an error raised.
    echo : bool
        Also copy the streamed log to stdout.
    project_dir : pathlib.Path
        The Flower app.

    Returns
    -------
    dict
        ``result.json`` plus ``result_path``, ``run_log`` and ``wall_seconds``.

    Raises
    ------
    DeploymentError
        No result was written (the log tail is included) or the timeout passed.
    """
    layout = Layout(Path(directory))
    if not (layout.cli_home / "config.toml").is_file():
        raise DeploymentError(
            f"no SuperLink connection in {layout.cli_home}; start the deployment with `up` first"
        )
    flat = run_config(layout, overrides,
                      output_dir=Path(output_dir).resolve() if output_dir else None)
    out = Path(flat["output-dir"])
    result_path = out / "result.json"
    result_path.unlink(missing_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    config_file = layout.root / "runs" / f"run-config-{stamp}.toml"
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(tomli_w.dumps(nested_config(flat)))
    layout.logs.mkdir(parents=True, exist_ok=True)
    log_path = layout.logs / f"run-{stamp}.log"
    command = ["flwr", "run", str(project_dir), CONNECTION, "--stream",
               "--run-config", str(config_file)]
    LOG.info("running: %s", shlex.join(command))
    start = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            command, env=deployment_env(layout), cwd=layout.root, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        try:
            _pump(proc, log, echo, start + timeout)
        except TimeoutError:
            proc.kill()
            proc.wait()
            _stop_runs(layout)
            raise DeploymentError(
                f"the run did not finish within {timeout:.0f} s (stopped); log {log_path}"
            ) from None
    wall = time.monotonic() - start
    if not result_path.is_file():
        raise DeploymentError(
            f"the run wrote no {result_path} (flwr run exit {proc.returncode}); "
            f"log {log_path}:\n{_tail(log_path)}"
        )
    result = json.loads(result_path.read_text())
    result.update(result_path=str(result_path), run_log=str(log_path), wall_seconds=wall)
    return result


def _pump(proc: subprocess.Popen, log, echo: bool, deadline: float) -> None:
    """Copy the process output to the log (and stdout) until it exits or the deadline."""
    os.set_blocking(proc.stdout.fileno(), False)
    while True:
        chunk = proc.stdout.read()
        if chunk:
            log.write(chunk)
            log.flush()
            if echo:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
        if proc.poll() is not None and not chunk:
            rest = proc.stdout.read()
            if rest:
                log.write(rest)
                if echo:
                    sys.stdout.buffer.write(rest)
            return
        if time.monotonic() > deadline:
            raise TimeoutError
        if not chunk:
            time.sleep(0.2)


def _stop_runs(layout: Layout) -> None:
    """Best effort: ``flwr stop`` every run the SuperLink reports as not finished."""
    try:
        runs = _json_output(_flwr(layout, "ls", CONNECTION, "--format", "json",
                                  what="listing runs"), "listing runs").get("runs", [])
    except DeploymentError as exc:
        LOG.warning("could not list runs to stop them: %s", exc)
        return
    for item in runs:
        if not str(item.get("status", "")).startswith("finished"):
            try:
                _flwr(layout, "stop", str(item["run-id"]), CONNECTION, what="stopping a run")
            except (DeploymentError, KeyError) as exc:
                LOG.warning("could not stop run %s: %s", item.get("run-id"), exc)


# -- commands for several machines --------------------------------------------------------------
def commands(
    directory: str | Path, *, host: str = "0.0.0.0", port: int = 9093,
    superlink: str = "SUPERLINK_HOST:9093", insecure: bool = False,
) -> str:
    """Shell commands that start this deployment by hand, one block per machine."""
    layout = Layout(Path(directory))
    manifest = _read_json(layout.manifest, "manifest (run `prepare` first)")
    n = int(manifest["num_nodes"])
    insecure = insecure or not manifest.get("secure")
    env = ("export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 "
           "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1")
    needs = "" if insecure else "certs/ca.crt, server.pem, server.key and "
    link = superlink_command(layout, host=host, port=port, insecure=insecure)
    lines = ["# every machine", env, "",
             f"# SuperLink machine (needs {needs}{Path(manifest['server_file']).name})",
             shlex.join(link),
             "", "# CLI machine: $FLWR_HOME/config.toml",
             f"[superlink]\ndefault = \"{CONNECTION}\"\n[superlink.{CONNECTION}]\n"
             f"address = \"{superlink}\"\n"
             + ("insecure = true" if insecure else f"root-certificates = \"{layout.ca_cert}\"")]
    if not insecure:
        lines += ["", "# CLI machine: register every node's public key before it starts"]
        lines += [shlex.join(["flwr", "supernode", "register",
                              str(layout.keys / f"node-{i}.pub"), CONNECTION])
                  for i in range(n)]
    for i in range(n):
        lines += ["", f"# node {i} machine (needs ca.crt, its key, its data file)",
                  shlex.join(supernode_command(layout, i, n, superlink=superlink, port=9094,
                                               insecure=insecure))]
    flat = run_config(layout, output_dir=layout.outputs / "run")
    lines += ["", "# CLI machine: run (data.path and output-dir are paths on the SuperLink "
              "machine), then check result.json: flwr run exits 0 when the run fails",
              shlex.join(["flwr", "run", str(PROJECT_DIR), CONNECTION, "--stream",
                          "--run-config", " ".join(f"{k}={_toml_scalar(v)}"
                                                   for k, v in flat.items())])]
    return "\n".join(lines)


def _toml_scalar(value: Any) -> str:
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()


# -- command line -------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m fedkmeans.deploy",
        description="Deploy fedkmeans on a real SuperLink and SuperNodes (TLS + node auth).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("directory", type=Path, help="deployment directory")
        return p

    for name, text in (("prepare", "split the data, create CA, certificate and node keys"),
                       ("demo", "prepare, up, run and down in one go")):
        p = add(name, text)
        p.add_argument("--nodes", type=int, default=3, help="number of SuperNodes (3)")
        p.add_argument("--from-npz", type=Path, help="split this .npz instead of the mixture")
        p.add_argument("--mixture", nargs="*", default=[], metavar="KEY=VALUE",
                       help="mixture keys, e.g. seed=1 data.dim=8 data.num-clients=12")
        p.add_argument("--server-data", choices=SERVER_DATA_MODES, default="full",
                       help="server.npz: the full data (non-private evaluation) or public only")
        p.add_argument("--san", action="append", default=[], metavar="HOST",
                       help="extra name/address of the SuperLink for its certificate")
        p.add_argument("--insecure", action="store_true",
                       help="no TLS, no node authentication (prepare: no certificates)")
    for p in (sub.choices["demo"],):
        p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                       help="run config overrides")
    p = add("up", "start the SuperLink and SuperNodes, wait until they are online")
    p.add_argument("--insecure", action="store_true", help="no TLS, no node authentication")
    p.add_argument("--host", default="127.0.0.1",
                   help="SuperLink listen address (0.0.0.0 for other machines)")
    p.add_argument("--port", type=int, default=0, help="SuperLink port (default: a free one)")
    p.add_argument("--nodes", help="comma-separated node indices to start here (default all; "
                   "'' for none)")
    p.add_argument("--superlink", help="host:port of a SuperLink on another machine (implies "
                   "--no-superlink)")
    p.add_argument("--no-superlink", action="store_true",
                   help="do not start the SuperLink here")
    p.add_argument("--timeout", type=float, default=120.0)
    p = add("run", "run the app on the deployment; check result.json")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="run config overrides, e.g. privacy.epsilon=0.5 k=4")
    p.add_argument("--output-dir", type=Path, help="absolute output directory")
    p.add_argument("--timeout", type=float, default=1800.0)
    add("down", "stop every process of the deployment by PID")
    add("status", "show the processes and the SuperLink's nodes")
    p = add("commands", "print the command lines for starting by hand on several machines")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=9093)
    p.add_argument("--superlink", default="SUPERLINK_HOST:9093")
    p.add_argument("--insecure", action="store_true")
    return parser


def _prepare_from_args(args: argparse.Namespace) -> dict:
    return prepare(
        args.directory, args.nodes, source=args.from_npz,
        mixture=parse_overrides(args.mixture), server_data=args.server_data,
        hosts=args.san, secure=not args.insecure,
    )


def _summary(result: Mapping) -> str:
    privacy, metrics = result["privacy"], result["metrics"]
    return (
        f"{result['algorithm']}: cost {metrics['cost']:.6g} (optimal {metrics['optimal_cost']}), "
        f"epsilon {privacy['epsilon']} (target {privacy['target_epsilon']}), "
        f"{result['federation']['num_nodes']} nodes registered, "
        f"{result['federation'].get('nodes_answering_every_round', '?')} answered every round, "
        f"{result['wall_seconds']:.1f} s\n"
        f"{result['result_path']}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (``python -m fedkmeans.deploy -h``)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    args = _parser().parse_args(argv)
    try:
        if args.command == "prepare":
            print(json.dumps(_prepare_from_args(args), indent=1))
        elif args.command == "up":
            nodes = None
            if args.nodes is not None:
                nodes = [int(v) for v in args.nodes.split(",") if v.strip()]
            state = up(
                args.directory, insecure=args.insecure, host=args.host, port=args.port or None,
                nodes=nodes, superlink=args.superlink,
                start_superlink=not (args.no_superlink or args.superlink),
                timeout=args.timeout,
            )
            print(json.dumps({k: v for k, v in state.items() if k != "processes"}, indent=1))
        elif args.command == "run":
            result = run(args.directory, parse_overrides(args.set), output_dir=args.output_dir,
                         timeout=args.timeout, echo=True)
            print(_summary(result))
        elif args.command == "down":
            print(f"stopped {len(down(args.directory))} processes")
        elif args.command == "status":
            print(json.dumps(status(args.directory), indent=1))
        elif args.command == "commands":
            print(commands(args.directory, host=args.host, port=args.port,
                           superlink=args.superlink, insecure=args.insecure))
        elif args.command == "demo":
            _prepare_from_args(args)
            try:
                up(args.directory, insecure=args.insecure)
                print(_summary(run(args.directory, parse_overrides(args.set), echo=True)))
            finally:
                down(args.directory)
    except (DeploymentError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
