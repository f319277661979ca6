"""The vertical app under a real `flwr run` with H SuperNodes (one feature slice each).

`flwr run --stream` exits 0 even when the run fails, so the test reads result.json.
The run has its own FLWR_HOME and ports and its own Ray instance (RAY_ADDRESS=local:
Ray would otherwise join the latest cluster started on the machine); everything it
started is stopped by PID.
"""

import json
import logging
import subprocess

import pytest

from fedkmeans.experiment.engines.flower import flower_env, processes_with_env, stop_all
from fedkmeans.vertical.experiment import APP_DIR, run

pytestmark = pytest.mark.flower


@pytest.mark.slow
def test_flwr_run_vertical_app_with_three_supernodes_matches_inprocess(tmp_path):
    logging.getLogger("fedkmeans").setLevel(logging.WARNING)
    home = tmp_path / "flwr-home"
    home.mkdir()
    out = tmp_path / "flower"
    overrides = ("parties=3 dataset='wine' defence='full' epsilon=0.5 iterations=6 "
                 "stop-when-stable=false attack='unknown' attack-party=1 "
                 # bit-equal labels across engines need the explicit opt-in
                 f"reproducible-noise=true output-dir='{out}'")
    env = flower_env(home)
    env["RAY_ADDRESS"] = "local"  # a fresh Ray instance, never another test's cluster
    try:
        proc = subprocess.run(
            ["flwr", "run", str(APP_DIR), "--stream", "--run-config", overrides,
             "--federation-config", "num-supernodes=3 client-resources-num-cpus=1 "
             "init-args-num-cpus=2"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        )
    finally:
        left = stop_all(lambda: processes_with_env("FLWR_HOME", str(home)))
    assert left == [] and processes_with_env("FLWR_HOME", str(home)) == []
    result_file = out / "result.json"
    assert result_file.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    flower = json.loads(result_file.read_text())
    assert flower["parties"] == 3 and flower["party_dims"] == [5, 4, 4]
    assert flower["iterations_run"] == 6
    assert flower["privacy"]["per_party_slice"]["reports"] == 3 * 6
    assert flower["attack"]["party"] == 1 and flower["attack"]["party_dim"] == 4

    inprocess = run({"parties": 3, "dataset": "wine", "defence": "full", "epsilon": 0.5,
                     "iterations": 6, "stop-when-stable": False, "attack": "unknown",
                     "attack-party": 1, "reproducible-noise": True})
    assert flower["labels"] == inprocess["labels"]
    assert flower["metrics"] == inprocess["metrics"]
    assert flower["attack"] == inprocess["attack"]
