"""Flower engine: a real ``flwr run`` simulation on Ray, started and stopped cleanly.

``flwr run . --stream`` starts a local SuperLink as a detached daemon that outlives
the command (FACTS.md). This engine runs it in a private ``FLWR_HOME`` with its own
ports, waits for the run, checks that ``result.json`` was written (``flwr run``
exits 0 even when the run failed), then stops every process it started, found by
the private ``FLWR_HOME`` in their environment, by PID.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import tomli_w

LOG = logging.getLogger(__name__)

PROJECT_DIR = Path(__file__).resolve().parents[2]


class FlowerRunError(RuntimeError):
    """The Flower run did not produce a result."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def flower_env(flwr_home: Path) -> dict[str, str]:
    """Environment for an isolated ``flwr run``: own home and ports, no network use."""
    env = dict(os.environ)
    env.update(
        FLWR_HOME=str(flwr_home),
        FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(free_port()),
        FLWR_LOCAL_CONTROL_API_PORT=str(free_port()),
        FLWR_TELEMETRY_ENABLED="0",
        FLWR_DISABLE_UPDATE_CHECK="1",
        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
        RAY_DEDUP_LOGS="0",
    )
    return env


def nested_config(flat: Mapping) -> dict:
    """Dotted flat keys as nested tables (``{"a.b": 1}`` -> ``{"a": {"b": 1}}``) for TOML."""
    nested: dict = {}
    for key, value in flat.items():
        *sections, leaf = key.split(".")
        node = nested
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = value
    return nested


def processes_with_env(name: str, value: str) -> list[int]:
    """PIDs of processes whose environment has ``name=value`` (Linux /proc)."""
    needle = f"{name}={value}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def stop_processes(pids: list[int], grace: float = 5.0) -> None:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL what is left."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [pid for pid in alive if process_alive(pid)]
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_all(find: Callable[[], list[int]], timeout: float = 30.0) -> list[int]:
    """Stop what ``find()`` returns until it returns nothing (Ray may respawn workers).

    Returns the PIDs still found after ``timeout`` seconds (empty on success).
    """
    deadline = time.monotonic() + timeout
    pids = find()
    while pids and time.monotonic() < deadline:
        stop_processes(pids)
        time.sleep(0.5)
        pids = [pid for pid in find() if process_alive(pid)]
    return pids


def process_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (Linux ``/proc``)."""
    try:  # the command name in parentheses may contain spaces: split after it
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def run_flower(
    flat_config: Mapping,
    *,
    num_nodes: int,
    num_cpus: int,
    client_cpus: float,
    project_dir: Path = PROJECT_DIR,
    timeout: float = 3600.0,
    extra_env: Mapping[str, str] | None = None,
) -> Path:
    """Run the app with ``flwr run --stream`` in a private FLWR_HOME; return result.json.

    Parameters
    ----------
    flat_config : mapping
        Flat run config; must contain an absolute ``output-dir``.
    num_nodes : int
        SuperNodes of the simulation (``num-supernodes``).
    num_cpus, client_cpus : int, float
        Ray resources (``init-args-num-cpus``, ``client-resources-num-cpus``).
    project_dir : Path
        The Flower app (this repository).
    timeout : float
        Seconds before the run is stopped.
    extra_env : mapping, optional
        More environment. ``RAY_ADDRESS`` (here or in this process's environment)
        attaches the simulation to a running Ray cluster instead of starting one:
        Flower calls ``ray.init()`` without an address, which honours it.

    Raises
    ------
    FlowerRunError
        The run ended without writing ``result.json`` (the log tail is included).
    """
    result_path = Path(flat_config["output-dir"]) / "result.json"
    if result_path.exists():
        result_path.unlink()
    with tempfile.TemporaryDirectory(prefix="fedkmeans-flwr-") as tmp:
        home = Path(tmp) / "flwr-home"
        home.mkdir()
        run_config = Path(tmp) / "run-config.toml"
        run_config.write_bytes(tomli_w.dumps(nested_config(flat_config)).encode())
        cpus = int(client_cpus) if float(client_cpus).is_integer() else client_cpus
        federation = f"num-supernodes={num_nodes} client-resources-num-cpus={cpus}"
        env = flower_env(home)
        env.update(extra_env or {})
        if not env.get("RAY_ADDRESS"):  # init-args-num-cpus breaks an attach (FACTS.md)
            federation += f" init-args-num-cpus={num_cpus}"
        log_path = Path(tmp) / "flwr-run.log"
        command = [
            "flwr", "run", str(project_dir), "--stream",
            "--run-config", str(run_config),
            "--federation-config", federation,
        ]
        LOG.info("starting: %s", " ".join(command))
        try:
            with log_path.open("wb") as log:
                subprocess.run(
                    command, env=env, stdout=log, stderr=subprocess.STDOUT,
                    timeout=timeout, check=False, cwd=tmp,
                )
        except subprocess.TimeoutExpired as exc:
            raise FlowerRunError(f"flwr run did not finish within {timeout:.0f} s") from exc
        finally:
            left = stop_all(lambda: processes_with_env("FLWR_HOME", str(home)))
            if left:
                LOG.warning("processes still running after stop: %s", left)
        if not result_path.exists():
            tail = log_path.read_text(errors="replace")[-4000:]
            raise FlowerRunError(f"flwr run wrote no {result_path}; log tail:\n{tail}")
    return result_path
