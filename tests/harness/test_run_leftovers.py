"""What a run leaves behind: nothing half-made when it fails, no daemon once stopped.

* a failed run (a bad key, a missing file, a NaN in the data) leaves no directory: not
  through the command line (Hydra's run directory goes too), not through ``flwr run``
  (whose failure is one ERROR line and a ``finished:failed`` run in ``flwr ls``);
* the README's ``flwr run`` leaves the local SuperLink, its SuperExec and a zombie
  simulation process; the README's stop command (the SuperLink's PID, found by its
  port) ends all three.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from fedkmeans.config import ConfigError
from fedkmeans.experiment.config import parse_config
from fedkmeans.experiment.engines.flower import (
    PROJECT_DIR,
    flower_env,
    process_alive,
    processes_with_env,
    stop_all,
)
from fedkmeans.experiment.rundir import claim_output_dir, remove_unused_run_dir

CONFIG = parse_config({})


def _nan_csv(path: Path) -> Path:
    rows = ["client,a,b"] + [f"{i % 4},{i},{i % 7}" for i in range(40)]
    rows[6] = "1,5,"  # one empty (NaN) feature cell
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_failed_run_removes_the_directories_it_made_and_nothing_else(tmp_path):
    out = tmp_path / "a" / "b" / "run"
    with pytest.raises(ValueError), claim_output_dir(out, CONFIG):
        assert (out).is_dir()
        raise ValueError("bad data")
    assert list(tmp_path.iterdir()) == []
    kept = tmp_path / "kept"  # a directory that was there stays, empty or not
    kept.mkdir()
    with pytest.raises(ValueError), claim_output_dir(kept / "run", CONFIG):
        raise ValueError("bad data")
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and not any(kept.iterdir())
    with pytest.raises(ValueError), claim_output_dir(out, CONFIG):  # wrote something
        (out / "checkpoint").mkdir()
        raise ValueError("a later round")
    assert [p.name for p in out.iterdir()] == ["checkpoint"]


def test_hydra_s_run_directory_goes_only_if_it_holds_nothing_but_hydra_s_files(tmp_path):
    run = tmp_path / "outputs" / "2026-01-01" / "10-00-00-abcdef"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("k: 3\n")
    (run / "experiment.log").write_text("error\n")
    other = tmp_path / "outputs" / "2026-01-01" / "09-00-00-123456"
    other.mkdir()
    own = ["experiment.log", ".hydra"]
    assert remove_unused_run_dir(run, own, top=tmp_path)
    assert [p.name for p in (tmp_path / "outputs" / "2026-01-01").iterdir()] == [other.name]
    assert remove_unused_run_dir(other, own, top=tmp_path)
    assert list(tmp_path.iterdir()) == []  # the emptied date and outputs directories too
    run.mkdir(parents=True)
    (run / "result.json").write_text("{}")
    assert not remove_unused_run_dir(run, own, top=tmp_path) and (run / "result.json").exists()


def test_a_serverapp_failure_under_flower_is_one_line_and_flower_logs_no_traceback(
        caplog, monkeypatch):
    """Flower logs a ServerApp's exception with its traceback; ours is one line."""
    from flwr.app import Context, RecordDict

    from fedkmeans import server_app
    from fedkmeans.experiment.flower_logging import RunFailed

    monkeypatch.delenv("FEDKMEANS_TRACEBACK", raising=False)
    context = Context(run_id=7, node_id=0, node_config={}, state=RecordDict(),
                      run_config={"privacy.epsilon": -1.0})
    ours = logging.getLogger("fedkmeans")  # streamed through Flower's handlers, not root's
    ours.addHandler(caplog.handler)
    try:
        with pytest.raises(RunFailed) as failed:
            server_app.main(object(), context)  # a grid of Flower's: no errors_to_caller
    finally:
        ours.removeHandler(caplog.handler)
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert line.startswith("fedkmeans: run 7 failed, no result written: ConfigError: ")
    assert "privacy.epsilon" in line and "flwr log 7 --show" in line
    record = logging.LogRecord("flwr", logging.ERROR, __file__, 1, "Simulation raised",
                               None, (RunFailed, failed.value, failed.value.__traceback__))
    for keep in logging.getLogger("flwr").filters:
        keep.filter(record)
    assert record.exc_info is None  # Flower's own record of it: no traceback
    monkeypatch.setenv("FEDKMEANS_TRACEBACK", "1")
    with pytest.raises(ConfigError):
        server_app.main(object(), context)


def _cli(args, cwd):
    env = {k: v for k, v in os.environ.items()
           if k not in ("HYDRA_FULL_ERROR", "FEDKMEANS_TRACEBACK")}
    return subprocess.run([sys.executable, "-m", "fedkmeans.experiment", *args], cwd=cwd,
                          env=env, capture_output=True, text=True)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bad value", "unknown key", "missing file", "nan",
                                  "nan, output-dir given"])
def test_every_bad_input_kind_leaves_no_directory(kind, tmp_path):
    csv = _nan_csv(tmp_path / "nan.csv")
    given = tmp_path / "given" / "run"
    args = {"bad value": ["privacy.epsilon=-1"],
            "unknown key": ["privacy.epsilom=1"],
            "missing file": ["dataset=file", "data.path=missing.csv", "k=2"],
            "nan": ["dataset=file", f"data.path={csv}", "k=2"],
            "nan, output-dir given": ["dataset=file", f"data.path={csv}", "k=2",
                                      f"output-dir={given}"]}[kind]
    proc = _cli(args, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("fedkmeans: config error: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nan.csv"]


def _run_pids(home: Path) -> list[int]:
    return [pid for pid in processes_with_env("FLWR_HOME", str(home)) if process_alive(pid)]


@pytest.mark.slow
@pytest.mark.flower
def test_flwr_run_with_a_nan_fails_in_one_line_and_leaves_no_directory(tmp_path):
    home = tmp_path / "flwr-home"
    home.mkdir()
    csv = _nan_csv(tmp_path / "nan.csv")
    out = tmp_path / "out" / "run"
    env = {k: v for k, v in flower_env(home).items() if k != "FEDKMEANS_TRACEBACK"}
    try:
        proc = subprocess.run(
            ["flwr", "run", ".", "--stream", "--run-config",
             f"data.name='file' data.path='{csv}' k=2 output-dir='{out}'"],
            cwd=PROJECT_DIR, env=env, capture_output=True, text=True)
        listed = subprocess.run(["flwr", "ls", "--format", "json"], cwd=tmp_path, env=env,
                                capture_output=True, text=True)
    finally:
        left = stop_all(lambda: _run_pids(home))
    assert left == []
    assert proc.returncode == 0  # flwr run --stream says nothing about the run
    stream = proc.stdout + proc.stderr
    failed = [line for line in stream.splitlines() if "fedkmeans: run" in line]
    assert len(failed) == 1 and "failed, no result written: DataFileError" in failed[0]
    assert "NaN" in failed[0] and "flwr log" in failed[0]
    assert "Traceback" not in stream, stream[-3000:]
    (run,) = json.loads(listed.stdout)["runs"]
    assert run["status"] == "finished:failed" and "NaN" in run["status-details"]
    assert not (tmp_path / "out").exists()


ROOT = Path(__file__).resolve().parents[2]


def stop_command(port: str) -> str:
    """The README's stop command (also in docs/running.md), for the SuperLink on ``port``."""
    (readme,) = [line.split("#")[0].strip() for line in
                 (ROOT / "README.md").read_text().splitlines() if line.startswith("kill ")]
    (running,) = [line for line in (ROOT / "docs" / "running.md").read_text().splitlines()
                  if line.startswith("kill ")]
    assert readme == running and "39091" in readme
    return readme.replace("39091", port)


@pytest.mark.slow
@pytest.mark.flower
def test_the_stop_command_ends_what_the_readme_s_flwr_run_leaves(tmp_path):
    home = Path(tempfile.mkdtemp(prefix="fkstop", dir="/tmp"))
    env = {k: v for k, v in flower_env(home).items() if k != "FEDKMEANS_NODE_SHARDS"}
    port = env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"]
    try:
        proc = subprocess.run(
            ["flwr", "run", ".", "--stream", "--run-config",
             f"output-dir='{tmp_path / 'out'}' data.num-clients=20 "
             "data.points-per-client=50 data.dim=10"],
            cwd=PROJECT_DIR, env=env, capture_output=True, text=True)
        assert (tmp_path / "out" / "result.json").exists(), proc.stdout[-3000:]
        left = {pid: " ".join(psutil.Process(pid).cmdline()) or psutil.Process(pid).name()
                for pid in processes_with_env("FLWR_HOME", str(home))}
        names = sorted(Path(c.split()[1]).name if "python" in c.split()[0] else c
                       for c in left.values())
        # the SuperLink and its SuperExec run on; the simulation process ends and, when
        # the SuperExec has not reaped it yet, stays as its zombie
        assert {"flower-superexec", "flower-superlink"} <= set(names) <= {
            "flower-superexec", "flower-superlink", "flwr-simulation"}, left
        stop = subprocess.run(["bash", "-c", stop_command(port)], capture_output=True,
                              text=True)
        assert stop.returncode == 0, stop.stderr
        for pid in left:
            try:
                psutil.Process(pid).wait()
            except psutil.NoSuchProcess:
                pass
        assert processes_with_env("FLWR_HOME", str(home)) == []
    finally:
        for pid in processes_with_env("FLWR_HOME", str(home)):
            os.kill(pid, signal.SIGKILL)
        subprocess.run(["rm", "-rf", str(home)])
