"""The real Flower runtime: `flwr run` simulations on Ray, checked by their result file.

`flwr run --stream` exits 0 even when the run fails, so every test reads result.json.
Each run uses its own FLWR_HOME and ports; everything it started is stopped by PID.
"""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from fedkmeans.experiment.cli import run_flat
from fedkmeans.experiment.engines.flower import (
    PROJECT_DIR,
    flower_env,
    free_port,
    processes_with_env,
    stop_all,
)

pytestmark = pytest.mark.flower


@pytest.mark.slow
def test_default_flwr_run_writes_a_result_and_the_inprocess_engine_matches(tmp_path):
    home = tmp_path / "flwr-home"
    home.mkdir()
    out = tmp_path / "flower"
    env = flower_env(home)
    try:
        proc = subprocess.run(
            # bit-equal centers across engines need the explicit reproducible-noise opt-in
            ["flwr", "run", ".", "--stream", "--run-config",
             f"output-dir='{out}' privacy.reproducible-noise=true"],
            cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=900,
        )
    finally:
        left = stop_all(lambda: processes_with_env("FLWR_HOME", str(home)))
    assert left == []
    result_file = out / "result.json"
    assert result_file.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    flower = json.loads(result_file.read_text())
    assert flower["algorithm"] == "feddp-kmeans" and flower["privacy"]["level"] == "datapoint"
    assert flower["federation"]["num_nodes"] == 2  # Flower's default simulation size
    assert flower["privacy"]["epsilon"] <= flower["privacy"]["target_epsilon"]
    assert flower["metrics"]["cost"] <= 1.01 * flower["metrics"]["optimal_cost"]

    assert flower["privacy"]["noise"]["reproducible"] is True
    inprocess = run_flat({"output-dir": str(tmp_path / "inprocess"),
                          "federation.num-nodes": 2, "privacy.reproducible-noise": True})
    np.testing.assert_array_equal(np.array(flower["centers"]), np.array(inprocess["centers"]))
    assert flower["privacy"]["releases"] == inprocess["privacy"]["releases"]


@pytest.mark.slow
def test_experiment_flower_engine_matches_inprocess_on_a_sharded_federation(
    small_config, tmp_path
):
    """Client-level, sampled, Lloyds: 12 clients on 3 SuperNodes vs 12 in-process nodes."""
    flat = {**small_config, "privacy.level": "client", "privacy.sampling-rate": 0.7,
            "privacy.count-noise": "gaussian", "privacy.lloyds-steps": 1,
            "privacy.reproducible-noise": True}
    flower = run_flat({**flat, "federation.engine": "flower", "federation.num-nodes": 3,
                       "output-dir": str(tmp_path / "flower")})
    inprocess = run_flat({**flat, "federation.num-nodes": 12,
                          "output-dir": str(tmp_path / "inprocess")})
    np.testing.assert_array_equal(np.array(flower["centers"]), np.array(inprocess["centers"]))
    assert Path(flower["result_path"]).exists()


@pytest.mark.slow
def test_auto_settings_reach_the_supernodes(small_config, tmp_path):
    """`auto` Δ and client-level bounds: chosen on the server, sent to every node.

    Under `flwr run` the nodes read `auto` in their run config; they clip with the values
    the server sends with each request, so both engines give the same bits.
    """
    flat = {**small_config, "privacy.level": "client", "privacy.epsilon": 8.0,
            "privacy.reproducible-noise": True, "privacy.data-radius": "auto",
            **{f"privacy.clip-{s}": "auto" for s in ("covariance", "histogram", "sums",
                                                     "counts")}}
    flower = run_flat({**flat, "federation.engine": "flower", "federation.num-nodes": 3,
                       "output-dir": str(tmp_path / "flower")})
    inprocess = run_flat({**flat, "output-dir": str(tmp_path / "inprocess")})
    assert flower["tuning"]["chosen"] == inprocess["tuning"]["chosen"]
    assert flower["tuning"]["chosen"]["algorithm"] == "feddp-kmeans"
    np.testing.assert_array_equal(np.array(flower["centers"]), np.array(inprocess["centers"]))
    radius = flower["tuning"]["chosen"]["data_radius"]
    assert 0 < radius < small_config["privacy.data-radius"] * 10


def test_free_ports_are_never_handed_out_twice():
    # a Ray head takes seven ports in one command; the kernel can give a closed probe's
    # port to the next probe (seen: node manager and object manager on one port)
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
