"""examples/user-app: a Flower user's own ServerApp and ClientApp (docs/library.md).

The two files are shown verbatim in docs/library.md and stay within 40 and 30 lines.
In-process, the ServerApp's own ``main`` runs on the in-process grid over the
example's ClientApp; under the real simulation runtime, ``flwr run`` runs it with the
curious server wrapped around the strategy. ``flwr run --stream`` exits 0 even when the
run fails, so the test reads the files the ServerApp writes; everything the run started
is stopped by PID.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import flower_log_lines
from flwr.app import Context, RecordDict

from fedkmeans.experiment.engines.flower import flower_env, processes_with_env, stop_all
from fedkmeans.experiment.engines.inprocess import InProcessGrid
from fedkmeans.local_grid import new_run_id

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "user-app"
SERVER, CLIENT = APP / "kmeans_app" / "server_app.py", APP / "kmeans_app" / "client_app.py"
MODES = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])


def _blocks(page: Path) -> list[str]:
    parts = page.read_text().split("```python\n")[1:]
    return [part.split("```", 1)[0] for part in parts]


def test_library_md_shows_both_files_verbatim_and_they_stay_short():
    blocks = _blocks(ROOT / "docs" / "library.md")
    assert SERVER.read_text() in blocks and CLIENT.read_text() in blocks
    assert len(SERVER.read_text().splitlines()) <= 40
    assert len(CLIENT.read_text().splitlines()) <= 30


def _near_modes(centers: np.ndarray) -> float:
    """The largest distance from a true mode to its nearest released center."""
    return float(np.sqrt(((MODES[:, None] - centers[None]) ** 2).sum(-1)).min(1).max())


def test_the_user_app_runs_in_process(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(APP))
    for name in [m for m in sys.modules if m.startswith("kmeans_app")]:
        monkeypatch.delitem(sys.modules, name)
    from kmeans_app import client_app, server_app

    run_id = new_run_id()
    grid = InProcessGrid(client_app.app, {}, [{"partition-id": i, "num-partitions": 3}
                                              for i in range(3)], run_id)
    config = {"epsilon": 1.0, "num-nodes": 3, "curious": True, "out": str(tmp_path)}
    with flower_log_lines() as lines:
        server_app.main(grid, Context(run_id=run_id, node_id=0, node_config={},
                                      state=RecordDict(), run_config=config))
    # the estimate round runs before the plan knows the round count: "(1)", then "(2/5)"
    progress = [line for line in lines if line.startswith("[progress] round ")]
    assert progress[0].endswith("(1)") and progress[0].startswith("[progress] round estimate")
    assert progress[-1].endswith(f"({len(progress)}/{len(progress)})"), progress
    release = json.loads((tmp_path / "release.json").read_text())
    # every mode has a center within 0.61, whichever answer the final choice returns:
    # k-means on the app's fixed server points lies 0.604 from a mode (public and
    # deterministic), the protocol's centers (secret noise) 0.07-0.41 in 30 runs and 0.54
    # in one run of the suite
    assert release["centers_from"].startswith(("feddp-kmeans", "server-lloyds"))
    assert _near_modes(np.array(release["centers"])) < 0.61
    assert release["privacy"]["epsilon"] <= release["privacy"]["target_epsilon"] == 1.0
    curious = json.loads((tmp_path / "curious.json").read_text())
    assert curious["clients_observed"] == 12 and "attack" not in release
    assert "epsilon spent" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.flower
def test_the_user_app_runs_under_flwr_run_with_the_curious_server(tmp_path):
    home = tmp_path / "flwr-home"
    home.mkdir()
    out = tmp_path / "out"
    env = flower_env(home)
    env["RAY_ADDRESS"] = "local"  # a fresh Ray instance, never another test's cluster
    project = (APP / "pyproject.toml").read_bytes()  # flwr rewrites legacy sections
    try:
        proc = subprocess.run(
            ["flwr", "run", str(APP), "--stream", "--run-config",
             f"out='{out}' curious=true", "--federation-config",
             "num-supernodes=3 client-resources-num-cpus=1 init-args-num-cpus=2"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
        )
    finally:
        left = stop_all(lambda: processes_with_env("FLWR_HOME", str(home)))
    assert left == [] and processes_with_env("FLWR_HOME", str(home)) == []
    assert (APP / "pyproject.toml").read_bytes() == project
    release_file = out / "release.json"
    assert release_file.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    release = json.loads(release_file.read_text())
    # as in-process: every mode has a center within 0.61, whichever answer is returned
    assert release["centers_from"].startswith(("feddp-kmeans", "server-lloyds"))
    assert _near_modes(np.array(release["centers"])) < 0.61
    assert release["privacy"]["level"] == "datapoint"
    assert 0 < release["privacy"]["epsilon"] <= release["privacy"]["target_epsilon"] == 1.0
    assert release["privacy"]["releases"] and "attack" not in release
    curious = json.loads((out / "curious.json").read_text())
    assert curious["clients_observed"] == 12  # 3 SuperNodes x 4 clients, every reply seen
    # d = 2 <= k: no subspace round (init-1); the estimate round and the check are observed
    assert {"estimate", "init-2", "init-3", "check"} <= set(curious["observed_rounds"])
    assert curious["ground_truth"].startswith("unavailable")
    # the user's own app streams the strategy's console lines, as an experiment's
    streamed = proc.stdout + proc.stderr
    assert "[progress] round check done" in streamed, streamed[-3000:]
    assert "[summary] feddp-kmeans: returned " in streamed, streamed[-3000:]
