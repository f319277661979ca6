"""Spilled client points are owner-only and never outlive their run.

A process's own spill (in-process engine, plain ``flwr run``) goes to files without a
name: each test watches them through ``/proc/<pid>/fd`` while the run holds them
(``#<inode> (deleted)`` in the private TMPDIR), checks their mode, ends the run
(normally, or with SIGKILL) and finds the TMPDIR empty. A shared shard directory (the
flower engine's) is written 0700/0600 (here and in tests/harness/test_process_ownership.py).
"""

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from fedkmeans.experiment.config import parse_config
from fedkmeans.node import NodeData

PROJECT_DIR = Path(__file__).resolve().parents[2]
CONFIG = {"data.num-clients": 12, "data.points-per-client": 15, "data.dim": 5,
          "data.components": 3, "k": 3, "privacy.data-radius": 3.5}
#: An in-process run whose nodes spill (a cache of 100 bytes), long enough to watch.
SPILLING = [
    "data.dim=8", "data.components=4", "k=4", "data.num-clients=60",
    "data.points-per-client=40", "data.server-points-per-component=10",
    "data.server-uniform-points=10", "privacy.max-points-per-client=40",
    "privacy.data-radius=4.0", "federation.num-nodes=6", "federation.node-cache-mb=0.0001",
]


def spill_files(pid: int, root: Path) -> dict[str, int]:
    """``pid``'s open files below ``root`` that have no name, with their modes."""
    found = {}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        link = f"/proc/{pid}/fd/{fd}"
        try:
            target = os.readlink(link)
            mode = stat.S_IMODE(os.stat(link).st_mode)
        except OSError:
            continue
        if target.startswith(f"{root}/") and target.endswith(" (deleted)"):
            found[target] = mode
    return found


def everything_below(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def private_tmp(monkeypatch):
    """A private TMPDIR for this process and its children (other runs use their own)."""
    root = Path(tempfile.mkdtemp(prefix="fkspill", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_nameless_spill_answers_the_same_and_leaves_no_name(private_tmp):
    node = NodeData.load(parse_config(CONFIG), 1, 3)
    with node.resident():
        before = {c: node.points[c].copy() for c in node.client_ids.tolist()}
        labels = {c: node.labels[c].copy() for c in node.client_ids.tolist()}
    assert node.spill_nameless() and node.memory.spilled and node.nbytes == 0
    assert node.memory.nameless_bytes == 60 * 5 * 8 + 60 * 8  # 4 clients x 15 points, labels
    held = spill_files(os.getpid(), private_tmp)
    assert len(held) == 2 and set(held.values()) == {0o600}  # points, labels
    assert everything_below(private_tmp) == []
    with node.resident():
        for c, x in before.items():
            np.testing.assert_array_equal(node.points[c], x)
            np.testing.assert_array_equal(node.labels[c], labels[c])
    node.memory.close()
    assert spill_files(os.getpid(), private_tmp) == {}


def test_a_shared_shard_is_owner_only_whatever_the_umask(tmp_path):
    node = NodeData.load(parse_config(CONFIG), 0, 3)
    old = os.umask(0)  # the old shard files were 0666 & ~umask
    try:
        path = node.spill(tmp_path / "shards", "n0")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "shards").stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    files = list(path.iterdir())
    assert {f.name for f in files} >= {"points.npy", "meta.npz", "done"}
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}


def _start_spilling(tmp_path: Path, root: Path, steps: int) -> tuple[subprocess.Popen, dict]:
    """An in-process experiment that spills; returns it once its spill files are open."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedkmeans.experiment", *SPILLING,
         f"privacy.lloyds-steps={steps}", f"output-dir={tmp_path / 'out'}"],
        cwd=tmp_path, env={**os.environ, "TMPDIR": str(root)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while proc.poll() is None:
        held = spill_files(proc.pid, root)
        if held:
            return proc, held
        time.sleep(0.1)
    pytest.fail(f"the run ended before it spilled: {proc.stderr.read()[-2000:]}")


@pytest.mark.slow
def test_an_inprocess_run_s_spill_is_gone_after_a_normal_end(tmp_path, private_tmp):
    proc, held = _start_spilling(tmp_path, private_tmp, steps=40)
    assert set(held.values()) == {0o600}
    assert proc.wait() == 0, proc.stderr.read()[-2000:]
    assert (tmp_path / "out" / "result.json").exists()
    assert everything_below(private_tmp) == []


@pytest.mark.slow
def test_an_inprocess_run_s_spill_is_gone_after_sigkill(tmp_path, private_tmp):
    proc, held = _start_spilling(tmp_path, private_tmp, steps=400)
    assert set(held.values()) == {0o600}
    assert everything_below(private_tmp) == []  # named nowhere while the run holds them
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert everything_below(private_tmp) == []
    assert not (tmp_path / "out" / "result.json").exists()


@pytest.mark.slow
@pytest.mark.flower
@pytest.mark.parametrize("end", ["normal", "sigkill"])
def test_plain_flwr_run_leaves_no_spill_file(end, tmp_path, private_tmp):
    """``flwr run`` without the engine: no shared directory, each actor spills its own.

    ``normal``: the run ends, then its processes are stopped by PID (as docs/running.md
    says); ``sigkill``: every process of the run is killed -9 while the actors hold
    their spill files (the worst way a Ray actor can end).
    """
    from fedkmeans.experiment.engines.flower import flower_env, processes_with_env, stop_all

    home = tmp_path / "flwr-home"
    home.mkdir()
    out = tmp_path / "out"
    env = {**flower_env(home), "TMPDIR": str(private_tmp)}
    env.pop("FEDKMEANS_NODE_SHARDS", None)
    steps = 40 if end == "normal" else 400
    proc = subprocess.Popen(
        ["flwr", "run", ".", "--stream", "--federation-config", "num-supernodes=6",
         "--run-config", f"output-dir='{out}' federation.node-cache-mb=0.0001 "
         f"data.num-clients=60 privacy.lloyds-steps={steps}"],
        cwd=PROJECT_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    run = lambda: processes_with_env("FLWR_HOME", str(home))  # noqa: E731
    held: dict[str, int] = {}
    try:
        while proc.poll() is None and not held:
            for pid in run():
                held.update(spill_files(pid, private_tmp))
            time.sleep(0.2)
        if end == "sigkill":
            for pid in run():
                os.kill(pid, signal.SIGKILL)
        output = proc.communicate()[0].decode(errors="replace")
    finally:
        left = stop_all(run)
    assert held, "no actor spilled: " + output[-3000:]
    assert set(held.values()) == {0o600}
    assert left == []
    assert (out / "result.json").exists() == (end == "normal"), output[-3000:]
    assert [p for p in everything_below(private_tmp) if "fedkmeans" in p] == []
    for pid in run():  # nothing of the run holds a spill file either
        assert spill_files(pid, private_tmp) == {}
