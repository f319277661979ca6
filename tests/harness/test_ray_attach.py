"""Attach the Flower simulation to an existing Ray cluster through RAY_ADDRESS.

Starts a private Ray head (own --temp-dir and ports, so no other ray.init() on the
machine joins it), runs the small federation on it, and stops the head by PID
(`ray stop` would kill every Ray process on the machine).
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import read_keys

from fedkmeans.experiment.cli import run_flat
from fedkmeans.experiment.engines.flower import free_port, run_flower, stop_all

pytestmark = pytest.mark.flower


def _pids_with_cmdline(fragment: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if fragment.encode() in cmdline and int(entry.name) != os.getpid():
                pids.append(int(entry.name))
    return pids


@pytest.mark.slow
def test_simulation_attaches_to_a_running_ray_head(small_config, tmp_path):
    temp_dir = Path(tempfile.mkdtemp(prefix="fkray-", dir="/tmp"))  # short: unix socket paths
    port = free_port()
    head = subprocess.run(
        ["ray", "start", "--head", f"--port={port}", f"--temp-dir={temp_dir}",
         "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats",
         f"--ray-client-server-port={free_port()}", f"--node-manager-port={free_port()}",
         f"--object-manager-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
         f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}"],
        capture_output=True, text=True, timeout=120,
    )
    try:
        assert head.returncode == 0, head.stderr[-2000:]
        small_config = {**small_config, "privacy.reproducible-noise": True}
        # the ServerApp refuses the other level's bounds SMALL sets (as flwr run would)
        flat = read_keys({**small_config, "output-dir": str(tmp_path / "attached")})
        result_path = run_flower(flat, num_nodes=3, num_cpus=2, client_cpus=1,
                                 extra_env={"RAY_ADDRESS": f"127.0.0.1:{port}"})
        attached = result_path.read_text()
    finally:
        left = stop_all(lambda: _pids_with_cmdline(str(temp_dir)))
    assert left == []
    shutil.rmtree(temp_dir, ignore_errors=True)
    inprocess = run_flat({**small_config, "output-dir": str(tmp_path / "inprocess")})
    import json

    np.testing.assert_array_equal(np.array(json.loads(attached)["centers"]),
                                  np.array(inprocess["centers"]))
