"""Deployment with real processes: one SuperLink, N SuperNodes, TLS and node authentication.

A scripted version of Flower's deployment runtime for this app. Every step is a
function and a subcommand of ``python -m fedkmeans.experiment.deploy``::

    python -m fedkmeans.experiment.deploy prepare DIR --nodes 3  # data, CA, node keys
    python -m fedkmeans.experiment.deploy up DIR    # SuperLink + 3 SuperNodes (TLS + auth)
    python -m fedkmeans.experiment.deploy run DIR --set privacy.epsilon=1.0
    python -m fedkmeans.experiment.deploy down DIR  # stop every process by PID

``python -m fedkmeans.experiment.deploy demo DIR`` does all four. ``commands DIR`` prints the
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

from fedkmeans.experiment.deploy.cli import main
from fedkmeans.experiment.deploy.commands import (
    list_nodes,
    node_config,
    register_node,
    superlink_command,
    supernode_command,
    write_connection,
)
from fedkmeans.experiment.deploy.layout import (
    CONNECTION,
    MARKER,
    DeploymentError,
    Layout,
    deployment_env,
)
from fedkmeans.experiment.deploy.pki import make_certificates, make_node_keys
from fedkmeans.experiment.deploy.prepare import prepare, split_dataset
from fedkmeans.experiment.deploy.processes import down, status, up
from fedkmeans.experiment.deploy.runs import commands, parse_overrides, run, run_config
from fedkmeans.experiment.engines.flower import PROJECT_DIR

__all__ = [
    "CONNECTION",
    "DeploymentError",
    "Layout",
    "MARKER",
    "PROJECT_DIR",
    "commands",
    "deployment_env",
    "down",
    "list_nodes",
    "main",
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
