"""Where a deployment lives (:class:`Layout`), its environment and its commands.

Part of :mod:`fedkmeans.experiment.deploy` (its docstring describes the workflow).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fedkmeans.experiment.engines.flower import (
    processes_with_env,
)

#: Name of the SuperLink connection in the CLI's ``config.toml``.
CONNECTION = "fedkmeans-deploy"
#: Environment variable that marks every process of one deployment (value: its directory).
MARKER = "FEDKMEANS_DEPLOYMENT"
SERVER_DATA_MODES = ("full", "public")
#: Processes started by this Python process, kept so they can be reaped (no zombies).
CHILDREN: dict[int, subprocess.Popen] = {}


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


def read_json(path: Path, what: str) -> dict:
    """``path``'s JSON object, or DeploymentError naming ``what``."""
    if not path.is_file():
        raise DeploymentError(f"{what} not found: {path}")
    return json.loads(path.read_text())


def write_json(path: Path, content: Mapping) -> None:
    """Write ``content`` to ``path`` atomically (a temporary file, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(content, indent=1))
    tmp.replace(path)


def log_tail(path: Path, chars: int = 3000) -> str:
    """The last ``chars`` characters of a log file (for error messages)."""
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return f"(no log at {path})"


# -- environment and commands -------------------------------------------------------------
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


def run_tool(command: Sequence[str], what: str, *, env=None, timeout: float = 120.0) -> str:
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


def live_processes(layout: Layout) -> list[int]:
    """PIDs of every live process marked with this deployment's directory."""
    return processes_with_env(MARKER, str(layout.root))
