"""``run``: one ``flwr run`` against a running deployment; the commands for several machines.

Part of :mod:`fedkmeans.experiment.deploy` (its docstring describes the workflow).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tomli_w

try:  # Python >= 3.11
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10 (tomli comes with flwr)
    import tomli as tomllib

from fedkmeans.config import nested_config
from fedkmeans.experiment.config import parse_config
from fedkmeans.experiment.deploy.commands import (
    flwr_cli,
    json_output,
    superlink_command,
    supernode_command,
)
from fedkmeans.experiment.deploy.layout import (
    CONNECTION,
    DeploymentError,
    Layout,
    deployment_env,
    log_tail,
    read_json,
)
from fedkmeans.experiment.engines.flower import PROJECT_DIR

LOG = logging.getLogger(__name__)


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
    manifest = read_json(layout.manifest, "manifest (run `prepare` first)")
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
            f"log {log_path}:\n{log_tail(log_path)}"
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
        runs = json_output(flwr_cli(layout, "ls", CONNECTION, "--format", "json",
                                  what="listing runs"), "listing runs").get("runs", [])
    except DeploymentError as exc:
        LOG.warning("could not list runs to stop them: %s", exc)
        return
    for item in runs:
        if not str(item.get("status", "")).startswith("finished"):
            try:
                flwr_cli(layout, "stop", str(item["run-id"]), CONNECTION, what="stopping a run")
            except (DeploymentError, KeyError) as exc:
                LOG.warning("could not stop run %s: %s", item.get("run-id"), exc)


# -- commands for several machines --------------------------------------------------------------
def commands(
    directory: str | Path, *, host: str = "0.0.0.0", port: int = 9093,
    superlink: str = "SUPERLINK_HOST:9093", insecure: bool = False,
) -> str:
    """Shell commands that start this deployment by hand, one block per machine."""
    layout = Layout(Path(directory))
    manifest = read_json(layout.manifest, "manifest (run `prepare` first)")
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
                          "--run-config", " ".join(f"{k}={toml_scalar(v)}"
                                                   for k, v in flat.items())])]
    return "\n".join(lines)


def toml_scalar(value: Any) -> str:
    """``value`` as a TOML scalar (for ``--run-config``)."""
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()
