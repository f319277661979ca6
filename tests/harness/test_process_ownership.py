"""A `flower`-engine run owns its processes: SIGTERM or SIGKILL of the experiment
leaves nothing running and no temporary directory, and writes no result afterwards.

Each test starts `python -m fedkmeans.experiment federation.engine=flower ...` with a
private TMPDIR, so every process of the run carries an FLWR_HOME below it; it waits
until the run's Flower processes exist, signals the experiment, and checks.
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

import psutil
import pytest

from fedkmeans.experiment.engines.flower import process_alive, stop_all

pytestmark = pytest.mark.flower

PROJECT_DIR = Path(__file__).resolve().parents[2]
SMALL = [
    "data.dim=8", "data.components=4", "k=4", "data.num-clients=12",
    "data.points-per-client=40", "data.server-points-per-component=10",
    "data.server-uniform-points=10", "privacy.max-points-per-client=40",
    "privacy.data-radius=4.0", "federation.engine=flower", "federation.num-nodes=3",
    "privacy.lloyds-steps=150",  # long enough to be signalled mid-run
]


def _run_pids(tmp_root: Path) -> list[int]:
    """Processes whose FLWR_HOME lies below ``tmp_root`` (this run's, and only its)."""
    return [
        proc.pid for proc in psutil.process_iter(["environ"])
        if (proc.info["environ"] or {}).get("FLWR_HOME", "").startswith(str(tmp_root))
        and process_alive(proc.pid)
    ]


@pytest.fixture
def tmp_root():
    """A short private TMPDIR (Ray's socket paths must stay under 108 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="fk", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _is_server(pid: int) -> bool:
    """The process running the ServerApp (``flwr-simulation`` in a simulation)."""
    try:
        cmdline = " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return False
    return "flwr-simulation" in cmdline or "flwr-serverapp" in cmdline


def _start(tmp_path: Path, tmp_root: Path) -> tuple[subprocess.Popen, Path, Path]:
    out = tmp_path / "out"
    env = {**os.environ, "TMPDIR": str(tmp_root)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedkmeans.experiment", *SMALL, f"output-dir={out}"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # wait until the ServerApp runs (its process has the run's FLWR_HOME)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if any(_is_server(pid) for pid in _run_pids(tmp_root)):
            break
        if proc.poll() is not None:
            pytest.fail(f"experiment ended early: {proc.stderr.read()[-2000:]}")
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("the run's ServerApp never started")
    time.sleep(3)
    return proc, tmp_root, out


def _settle(tmp_root: Path, seconds: float) -> list[int]:
    """Wait up to ``seconds`` for the run's processes and temporary directory to go."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (_run_pids(tmp_root) or _left_dirs(tmp_root)):
        time.sleep(1)
    return _run_pids(tmp_root)


def _left_dirs(tmp_root: Path) -> list[str]:
    return [p.name for p in tmp_root.iterdir() if p.name.startswith("fedkmeans-flwr-")]


@pytest.mark.slow
def test_sigterm_to_the_experiment_stops_every_process_and_writes_nothing(tmp_path, tmp_root):
    proc, tmp_root, out = _start(tmp_path, tmp_root)
    proc.send_signal(signal.SIGTERM)
    signalled = time.time()
    try:
        code = proc.wait(timeout=60)
        left = _settle(tmp_root, 30)
    finally:
        stop_all(lambda: _run_pids(tmp_root))
    assert code == 128 + signal.SIGTERM, proc.stderr.read()[-2000:]
    assert left == []
    assert _left_dirs(tmp_root) == []
    stderr = proc.stderr.read()
    # progress lines ("[flower] ...") come first; the error itself takes at most 3 lines
    error = [line for line in stderr.strip().splitlines() if not line.startswith("[flower]")]
    assert "SIGTERM" in stderr and 1 <= len(error) <= 3, stderr[-2000:]
    time.sleep(5)  # nothing may appear later either
    for name in ("result.json", "release.json", "diagnostics.json"):
        path = out / name
        assert not path.exists() or path.stat().st_mtime < signalled


def _shard_modes(tmp_root: Path, proc: subprocess.Popen) -> dict[str, tuple[bool, int]]:
    """Whether each path of the run's shared node shards (``node-shards`` and below) is
    a directory, and its mode, once the actors have written a shard."""
    while proc.poll() is None:
        try:
            shards = [p for d in tmp_root.glob("fedkmeans-flwr-*/node-shards")
                      for p in [d, *d.rglob("*")]]
            if any(p.name == "done" for p in shards):
                return {str(p.relative_to(tmp_root)): (p.is_dir(), stat.S_IMODE(p.stat().st_mode))
                        for p in shards}
        except FileNotFoundError:  # a shard renamed into place meanwhile: look again
            pass
        time.sleep(0.2)
    pytest.fail(f"experiment ended early: {proc.stderr.read()[-2000:]}")


@pytest.mark.slow
def test_sigkill_of_the_experiment_is_cleaned_up_by_the_watchdog(tmp_path, tmp_root):
    """The nodes' spilled points (raw client data) go with the run's temporary
    directory; while they exist they are owner-only."""
    proc, tmp_root, out = _start(tmp_path, tmp_root)
    modes = _shard_modes(tmp_root, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    try:
        left = _settle(tmp_root, 60)
        dirs = _left_dirs(tmp_root)
    finally:
        stop_all(lambda: _run_pids(tmp_root))
    assert left == []
    assert dirs == []
    assert not (out / "result.json").exists()
    assert {mode for is_dir, mode in modes.values() if not is_dir} == {0o600}, modes
    assert {mode for is_dir, mode in modes.values() if is_dir} == {0o700}, modes
