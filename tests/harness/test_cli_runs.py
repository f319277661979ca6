"""The command line: concurrent runs never share a directory, errors are one line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedkmeans.experiment.cli import run_flat
from fedkmeans.experiment.config import parse_config
from fedkmeans.experiment.rundir import LOCK_FILE, OutputDirError, claim_output_dir

TINY = ["data.dim=4", "data.components=3", "k=3", "data.num-clients=6",
        "data.points-per-client=20", "data.server-points-per-component=5",
        "data.server-uniform-points=5", "privacy.max-points-per-client=20",
        "privacy.data-radius=4.0", "federation.num-nodes=2"]


def _cli(args, cwd, **env):
    return subprocess.Popen(
        [sys.executable, "-m", "fedkmeans.experiment", *args], cwd=cwd,
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _two_at_once(tmp_path, extra):
    procs = [_cli([*TINY, *extra, f"seed={seed}"], tmp_path) for seed in (7, 8)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    paths = [Path(o[0].strip().splitlines()[-1]) for o in outs]
    assert paths[0] != paths[1]
    assert [json.loads(p.read_text())["seed"] for p in paths] == [7, 8]


@pytest.mark.slow
def test_two_cli_runs_started_together_write_two_results(tmp_path):
    _two_at_once(tmp_path, [])


@pytest.mark.flower
def test_two_flower_cli_runs_started_together_write_two_results(tmp_path):
    _two_at_once(tmp_path, ["federation.engine=flower"])


def test_an_output_dir_in_use_or_holding_another_config_is_refused(tmp_path):
    flat = {"data.dim": 4, "data.components": 3, "k": 3, "data.num-clients": 6,
            "data.points-per-client": 20, "data.server-points-per-component": 5,
            "data.server-uniform-points": 5, "privacy.max-points-per-client": 20,
            "privacy.data-radius": 4.0, "federation.num-nodes": 2,
            "output-dir": str(tmp_path / "run")}
    config = parse_config(flat)
    with claim_output_dir(tmp_path / "run", config):
        assert (tmp_path / "run" / LOCK_FILE).read_text() == str(os.getpid())
        # another process holding it: simulate with a live foreign PID (our parent)
        (tmp_path / "run" / LOCK_FILE).write_text(str(os.getppid()))
        with pytest.raises(OutputDirError, match="output-dir.*PID"):
            run_flat(flat)
        (tmp_path / "run" / LOCK_FILE).write_text(str(os.getpid()))
    assert not (tmp_path / "run" / LOCK_FILE).exists()
    (tmp_path / "run" / LOCK_FILE).write_text("999999999")  # a dead run's lock
    first = run_flat(flat)  # taken over
    again = run_flat(flat)  # the same configuration: a resume
    assert np.array_equal(first["centers"], again["centers"])  # every round restored
    with pytest.raises(OutputDirError, match="another configuration"):
        run_flat({**flat, "seed": 1})


@pytest.mark.parametrize("args, key", [
    (["privacy.epsilon=-1"], "privacy.epsilon"),
    (["data.name=npz"], "data.path"),
    (["data.name=npz", "data.path=missing.npz"], "data.path"),
    (["k=500"], "'k'"),
])
@pytest.mark.slow
def test_cli_config_errors_are_one_line_naming_the_key(tmp_path, args, key):
    proc = _cli(args, tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    lines = err.strip().splitlines()
    assert len(lines) <= 3 and key in lines[0], err
    assert "Traceback" not in err
    proc = _cli(args, tmp_path, FEDKMEANS_TRACEBACK="1")
    assert "Traceback" in proc.communicate(timeout=120)[1]


_FREEZE_PROBE = """
import gc, sys
import fedkmeans.experiment.cli as experiment
counts = []
run_flat = experiment.run_flat
def probe(flat):
    counts.append(gc.get_freeze_count())
    return run_flat(flat)
experiment.run_flat = probe
sys.argv = ["fedkmeans", *sys.argv[1:]]
try:
    experiment.cli()
finally:
    print("FROZEN", counts)
"""


@pytest.mark.slow
@pytest.mark.parametrize("multirun", [False, True])
def test_a_single_cli_run_freezes_start_up_objects_and_a_multirun_does_not(tmp_path, multirun):
    sweep = ["-m", "seed=1,2", f"hydra.sweep.dir={tmp_path / 'sweep'}"] if multirun else []
    proc = subprocess.run([sys.executable, "-c", _FREEZE_PROBE, *sweep, *TINY], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = eval(proc.stdout.split("FROZEN", 1)[1].strip())  # noqa: S307 - our own list
    if multirun:
        assert counts == [0, 0]
    else:
        assert len(counts) == 1 and counts[0] > 10_000  # the start-up's objects
