"""Flower engine: a real ``flwr run`` simulation on Ray, started and stopped cleanly.

``flwr run . --stream`` starts a local SuperLink as a detached daemon that outlives the
command (docs/facts.md, "flwr run leaves its SuperLink running"). This engine runs it in
a private ``FLWR_HOME`` with its own ports, waits for the run, checks that
``result.json`` was written (``flwr run`` exits 0 even when the run failed), then stops
every process it started, found by the private ``FLWR_HOME`` in their environment, by
PID.

A run owns its processes however the experiment ends:

* normal end, an error, SIGINT, SIGTERM or SIGHUP: the signal is turned into
  :class:`RunInterrupted` in the main thread, so the ``finally`` block stops every
  process with the run's ``FLWR_HOME`` and removes the temporary directory; a
  ``result.json`` that the dying server managed to write after the signal is removed
  with its ``release.json`` and ``diagnostics.json`` (the run did not finish);
* SIGKILL of the experiment (or a crash of the interpreter): nothing in this process
  runs, so a watchdog (:mod:`fedkmeans.experiment.engines.watchdog`, its own session) notices
  its pipe from this process closing and does the same cleanup.

Why not process groups: the SuperLink and SuperExec put themselves in new sessions,
and Ray's daemons in others, so a group kill misses them; the environment marker
reaches them all.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import psutil
import tomli_w

LOG = logging.getLogger(__name__)

PROJECT_DIR = Path(__file__).resolve().parents[3]


class FlowerRunError(RuntimeError):
    """The Flower run did not produce a result."""


class RunInterrupted(RuntimeError):
    """The experiment received SIGINT, SIGTERM or SIGHUP; its processes were stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"run stopped by {signal.Signals(signum).name}; every process it "
                         "started was stopped and its temporary files removed")
        self.signum = signum


#: Signals that stop a run (SIGKILL cannot be caught: the watchdog covers it).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def _signals_raise() -> Iterator[dict]:
    """Turn STOP_SIGNALS into RunInterrupted while the block runs (main thread only)."""
    state: dict = {}
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handler(signum, frame):
        if "at" not in state:
            state["at"] = time.time()
            raise RunInterrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield state
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _start_watchdog(home: Path, temp_dir: Path) -> subprocess.Popen:
    """The parent-death watchdog (its own session, stdin = a pipe from this process)."""
    env = {k: v for k, v in os.environ.items() if k != "FLWR_HOME"}
    return subprocess.Popen(
        [sys.executable, "-m", "fedkmeans.experiment.engines.watchdog", str(home), str(temp_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True,
        env=env, text=True,
    )


def _release_watchdog(watchdog: subprocess.Popen) -> None:
    """Tell the watchdog the run ended here (cleanup done): it exits without acting."""
    try:
        watchdog.stdin.write("done\n")
        watchdog.stdin.close()
        watchdog.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        watchdog.kill()


#: Ports :func:`free_port` has handed out in this process.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and new to this process.

    Once a probe socket is closed the kernel may give the same port to the next probe,
    so a command that takes several ports at once (Ray's components, a SuperLink's
    APIs) could get one port twice; ports already handed out are never returned again.
    """
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no free TCP port on 127.0.0.1 that this process has not used yet")


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


def processes_with_env(name: str, value: str) -> list[int]:
    """PIDs of processes whose environment has ``name=value``, this process excluded.

    Parameters
    ----------
    name, value : str
        The variable and its exact value.

    Returns
    -------
    list of int
        Processes that psutil may read the environment of (this user's, or any as
        root); processes that end while being read are left out.
    """
    own = os.getpid()
    return [
        proc.pid for proc in psutil.process_iter(["environ"])
        if proc.pid != own and (proc.info["environ"] or {}).get(name) == value
    ]


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
    """True while ``pid`` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:  # gone (NoSuchProcess) or unreadable
        return False


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
    from fedkmeans.config import nested_config  # not at import: the watchdog loads this module

    result_path = Path(flat_config["output-dir"]) / "result.json"
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="fedkmeans-flwr-") as tmp:
        home = Path(tmp) / "flwr-home"
        home.mkdir()
        run_config = Path(tmp) / "run-config.toml"
        run_config.write_bytes(tomli_w.dumps(nested_config(flat_config)).encode())
        cpus = int(client_cpus) if float(client_cpus).is_integer() else client_cpus
        federation = f"num-supernodes={num_nodes} client-resources-num-cpus={cpus}"
        env = flower_env(home)
        # the actors share the nodes they spill (fedkmeans.client_app; removed with tmp)
        env["FEDKMEANS_NODE_SHARDS"] = str(Path(tmp) / "node-shards")
        env.update(extra_env or {})
        # init-args-num-cpus breaks an attach (docs/facts.md, "Ray cluster attach")
        if not env.get("RAY_ADDRESS"):
            federation += f" init-args-num-cpus={num_cpus}"
        log_path = Path(tmp) / "flwr-run.log"
        command = [
            "flwr", "run", str(project_dir), "--stream",
            "--run-config", str(run_config),
            "--federation-config", federation,
        ]
        LOG.info("starting: %s", " ".join(command))
        watchdog = _start_watchdog(home, Path(tmp))
        with _signals_raise() as interrupted:
            try:
                _stream_run(command, env, Path(tmp), log_path, timeout)
            finally:
                left = stop_all(lambda: processes_with_env("FLWR_HOME", str(home)))
                if left:
                    LOG.warning("processes still running after stop: %s", left)
                if "at" in interrupted:
                    _drop_partial_result(result_path, interrupted["at"])
                _release_watchdog(watchdog)
        if not result_path.exists() or result_path.stat().st_mtime < started:
            kept = result_path.with_name("flwr-run.log")
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log_path, kept)
            tail = log_path.read_text(errors="replace")[-4000:]
            raise FlowerRunError(f"flwr run wrote no {result_path}; its log: {kept}; "
                                 f"log tail:\n{tail}")
    return result_path


#: Lines of the run's stream shown to the user while it runs (the rest goes to the log).
_FORWARD = (b"[progress]", b"[summary]", b"[not private]", b"registered ", b"WARNING", b"ERROR")
#: Flower's own chatter, not worth a user's attention: its shutdown notice, and a
#: notice about the default SuperNode count, printed although the run sets it.
_QUIET = (b"Manually terminating", b"default simulated SuperNodes changed")
_ANSI = re.compile(rb"\x1b\[[0-9;]*m")


def _stream_run(
    command: list[str], env: Mapping[str, str], cwd: Path, log_path: Path, timeout: float
) -> None:
    """Run ``flwr run --stream``: everything to ``log_path``, progress lines to stderr."""
    print("[flower] starting the SuperLink, SuperExec and Ray (about 10-20 s) ...",
          file=sys.stderr, flush=True)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, cwd=cwd)
        expired = threading.Event()
        timer = threading.Timer(timeout, lambda: (expired.set(), proc.kill()))
        timer.start()
        try:
            for raw in proc.stdout:
                log.write(raw)
                if any(m in raw for m in _FORWARD) and not any(q in raw for q in _QUIET):
                    text = _ANSI.sub(b"", raw).decode(errors="replace").strip()
                    print(f"[flower] {text}", file=sys.stderr, flush=True)
            proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            timer.cancel()
    if expired.is_set():
        raise FlowerRunError(f"flwr run did not finish within {timeout:.0f} s")


def _drop_partial_result(result_path: Path, since: float) -> None:
    """Remove output files written at or after ``since`` (an interrupted run's)."""
    for name in ("result.json", "release.json", "diagnostics.json"):
        path = result_path.with_name(name)
        try:
            if path.stat().st_mtime >= since:
                path.unlink()
                LOG.warning("removed %s: written after the run was interrupted", path)
        except FileNotFoundError:
            pass
