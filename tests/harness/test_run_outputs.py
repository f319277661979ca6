"""What a run writes stays strict JSON and says who really answered."""

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from conftest import SMALL, run_server_inprocess

from fedkmeans import client_app
from fedkmeans.console import DIAGNOSTICS_ENV
from fedkmeans.data.npz import save_npz
from fedkmeans.experiment.cli import run_flat


def _reject_constant(value):
    raise ValueError(f"non-strict JSON constant {value}")


def test_extreme_data_writes_strict_json_and_warns_about_clipping(tmp_path, caplog,
                                                                   monkeypatch):
    # a node's count of clipped points is on the console only with the operator's opt-in
    monkeypatch.setenv(DIAGNOSTICS_ENV, "1")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 3))
    x[5] = 1e200  # one absurd row
    path = tmp_path / "data.npz"
    save_npz(path, x=x, client=np.repeat(np.arange(6), 10), server_x=rng.normal(size=(20, 3)))
    logger = logging.getLogger("fedkmeans")  # routed through Flower's logger, no propagation
    logger.addHandler(caplog.handler)
    try:
        result = run_flat({"data.name": "npz", "data.path": str(path), "k": 3,
                           "privacy.data-radius": 3.0, "privacy.max-points-per-client": 10,
                           "federation.num-nodes": 2, "output-dir": str(tmp_path / "out")})
    finally:
        logger.removeHandler(caplog.handler)
    for name in ("result", "release", "diagnostics"):
        json.loads(Path(result["artefacts"][name]).read_text(), parse_constant=_reject_constant)
    assert result["metrics"]["cost"] is None
    assert "metrics.cost" in result["null_reasons"]
    warnings = [r.getMessage() for r in caplog.records if "outside privacy.data-radius" in r.msg]
    assert warnings and all("%" in w and w.startswith("[not private] ") for w in warnings)
    # and in diagnostics.json: every client point beyond the radius (the 1e200 row too)
    with np.errstate(over="ignore"):  # x holds the clients' rows only (server_x is apart)
        expected = int((np.linalg.norm(x, axis=1) > 3.0).sum())
    diagnostics = json.loads(Path(result["artefacts"]["diagnostics"]).read_text())
    assert diagnostics["metrics"]["clipped_points"] == expected >= 1


def _dead_in_lloyds(partition):
    """The ClientApp, except that node ``partition`` dies in every Lloyd round."""

    def app(msg, context):
        if (context.node_config["partition-id"] == partition
                and msg.metadata.message_type == "query.lloyds"):
            raise RuntimeError("node lost")
        return client_app.app(msg, context)

    return app


def test_result_counts_the_nodes_and_clients_that_really_answered(tmp_path):
    flat = {**SMALL, "privacy.lloyds-steps": 2, "federation.min-replies": 0.5,
            "output-dir": str(tmp_path / "out")}
    result = run_server_inprocess(flat, app=_dead_in_lloyds(2))
    federation = result["federation"]
    assert federation["num_nodes"] == 3  # registered
    assert federation["nodes_answering_every_round"] == 2
    rounds = federation["rounds"]
    assert rounds["init-1"]["nodes_answered"] == 3 and rounds["init-1"]["clients_answered"] == 12
    for name in ("lloyds-1", "lloyds-2"):
        assert rounds[name] == {"nodes_asked": 3, "nodes_answered": 2,
                                "clients_asked": 12, "clients_answered": 8}


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_strict_json_replaces_non_finite_values_with_null_and_a_reason(bad):
    from fedkmeans.artefacts import strict_json

    nulls = {}
    out = strict_json({"a": [1.0, bad], "b": {"c": bad}, "d": "inf"}, "", nulls)
    assert out == {"a": [1.0, None], "b": {"c": None}, "d": "inf"}
    assert set(nulls) == {"a[1]", "b.c"}


def test_everything_not_publishable_is_owner_only(tmp_path, monkeypatch):
    """release.json keeps the usual mode; result.json, diagnostics.json, the checkpoint
    and the curious server's report are 0600 whatever the umask (issue 49)."""
    import os
    import stat

    from fedkmeans.attacks.strategy import CuriousServer
    from fedkmeans.estimator import FedDPKMeans  # noqa: F401 - the library is importable

    old = os.umask(0o022)
    try:
        out = tmp_path / "out"
        run_server_inprocess({**SMALL, "output-dir": str(out), "attack": "curious"})
        mode = {p.relative_to(out).as_posix(): stat.S_IMODE(p.stat().st_mode)
                for p in out.rglob("*")}
    finally:
        os.umask(old)
    assert mode["release.json"] == 0o644
    assert mode["result.json"] == mode["diagnostics.json"] == 0o600
    checkpoint = {name: m for name, m in mode.items() if name.startswith("checkpoint")}
    assert checkpoint["checkpoint"] == 0o700 and len(checkpoint) > 2
    assert all(m == 0o600 for name, m in checkpoint.items() if name != "checkpoint")
    assert "owner-only (0600)" in CuriousServer.__doc__
