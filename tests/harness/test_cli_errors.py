"""Hydra's own errors on the command line: one line, exit 2, the closest valid choice."""

import os
import subprocess
import sys

import pytest

from fedkmeans.experiment.cli import hydra_error_line


def _cli(args, cwd, **env):
    environ = {k: v for k, v in os.environ.items()
               if k not in ("HYDRA_FULL_ERROR", "FEDKMEANS_TRACEBACK")}
    return subprocess.run(
        [sys.executable, "-m", "fedkmeans.experiment", *args], cwd=cwd,
        env={**environ, **env}, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, fragments", [
    (["privacy.epsilom=0.5"], ["unknown config key 'privacy.epsilom'",
                               "did you mean 'privacy.epsilon'?"]),
    (["algorithm=kmeans"], ["config group 'algorithm' has no option 'kmeans'",
                            "did you mean 'feddp-kmeans'?"]),
    (["data.pth=x.csv"], ["unknown config key 'data.pth'", "did you mean 'data.path'?"]),
    (["partitioner=dirichlett"], ["group 'partitioner' has no option 'dirichlett'",
                                  "did you mean 'dirichlet'?"]),
    (["dataset=csv"], ["group 'dataset' has no option 'csv'", "did you mean 'file'?"]),
    (["-m", "privacy.epsilon=1", "algorithm=kfedd,kfed"],
     ["group 'algorithm' has no option 'kfedd'", "did you mean 'kfed'?"]),
    (["privacy.epsilon=["], ["cannot parse the override 'privacy.epsilon=['"]),
])
@pytest.mark.slow
def test_hydra_errors_are_one_line_with_exit_2_and_a_suggestion(tmp_path, args, fragments):
    proc = _cli(args, tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("fedkmeans: config error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr
    assert not (tmp_path / "outputs").exists()  # nothing ran


def test_hydra_full_error_still_shows_hydras_traceback(tmp_path):
    proc = _cli(["privacy.epsilom=0.5"], tmp_path, HYDRA_FULL_ERROR="1")
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    assert "epsilom" in proc.stderr


def test_a_run_error_is_still_reported_by_the_run(tmp_path):
    """A key Hydra accepts but the config rejects keeps the config's own message."""
    proc = _cli(["privacy.epsilon=-1"], tmp_path)
    assert proc.returncode == 2 and "privacy.epsilon" in proc.stderr.splitlines()[0]
    assert not (tmp_path / "outputs").exists()  # Hydra's run directory went with it


def test_other_exceptions_are_not_config_errors():
    code, line = hydra_error_line(RuntimeError("disk full\nmore"))
    assert (code, line) == (1, "RuntimeError: disk full")
