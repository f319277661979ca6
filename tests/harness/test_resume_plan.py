"""The plan is part of the checkpoint: a resume reuses it and never exceeds the target."""

import json
from pathlib import Path

import pytest
from conftest import run_server_inprocess

from fedkmeans.checkpoint import STATE_FILE, CheckpointMismatchError
from fedkmeans.client_app import app as client_app

AUTO = {"privacy.level": "client", "privacy.epsilon": 3.0, "privacy.data-radius": "auto",
        "privacy.max-points-per-client": "auto", "privacy.split": "auto",
        "privacy.lloyds-steps": "auto", "privacy.check-share": "auto",
        "privacy.clip-covariance": "auto", "privacy.clip-histogram": "auto",
        "privacy.clip-sums": "auto", "privacy.clip-counts": "auto"}


def _app(absent_node=None, failing_stage=None):
    def app(msg, context):
        stage = msg.metadata.message_type.split(".")[1]
        if stage == "register" and context.node_id == absent_node:
            raise RuntimeError("node absent")
        if stage == failing_stage:
            raise RuntimeError("node lost")
        return client_app(msg, context)

    return app


def test_a_resume_with_more_clients_reuses_the_plan_and_meets_the_target(small_config):
    # enough clients that the estimate round's noisy count clears its floor (about 32
    # at client epsilon 3): with fewer the run answers with the server's k-means alone
    flat = {**small_config, **AUTO, "data.num-clients": 150}
    # node 3 is absent at registration (100 of 150 clients), every node fails the check
    with pytest.raises(Exception, match="min-replies"):
        run_server_inprocess(flat, app=_app(absent_node=3, failing_stage="check"))
    state = json.loads((Path(flat["output-dir"]) / "checkpoint" / STATE_FILE).read_text())
    assert state["rounds"][0] == "estimate" and "init-3" in state["rounds"]
    planned = state["plan"]
    # the resume sees all 150 clients: the plan is not resolved again
    result = run_server_inprocess(flat)
    assert result["federation"]["num_clients"] == 150
    assert result["tuning"] == planned["tuning"]
    ledger = result["privacy"]["releases"]
    assert ledger[:len(state["ledger"]["releases"])] == state["ledger"]["releases"]
    # the check round's two releases, as planned
    check = [r for r in planned["releases"] if r["group"] == "check"]
    assert [r["stage"] for r in check] == ["check/cost_difference"]
    assert ledger[len(state["ledger"]["releases"]):] == check
    assert result["privacy"]["epsilon"] <= result["privacy"]["target_epsilon"]


def test_a_checkpoint_without_its_plan_is_refused_before_any_release(small_config):
    flat = {**small_config, "privacy.lloyds-steps": 1}
    with pytest.raises(Exception, match="min-replies"):
        run_server_inprocess(flat, app=_app(failing_stage="lloyds"))
    path = Path(flat["output-dir"]) / "checkpoint" / STATE_FILE
    state = json.loads(path.read_text())
    spent = len(state["ledger"]["releases"])
    state["plan"] = None  # as a checkpoint written before plans were stored
    path.write_text(json.dumps(state))
    with pytest.raises(CheckpointMismatchError, match="not the plan") as refused:
        run_server_inprocess(flat)
    assert "\n" not in str(refused.value)
    assert len(json.loads(path.read_text())["ledger"]["releases"]) == spent
