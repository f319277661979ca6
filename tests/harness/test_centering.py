"""The public pre-processing from the server's data (data.center, data.scale) and the
refusal of a declared data radius that the server's data shows cannot fit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import SMALL, run_server_inprocess

from fedkmeans.config import ConfigError
from fedkmeans.data.npz import save_npz
from fedkmeans.data.transform import IDENTITY, PublicTransform
from fedkmeans.experiment.cli import compose_flat, preflight
from fedkmeans.experiment.config import parse_config
from fedkmeans.node import NodeData

OFFSET = 100.0


def test_fit_is_the_mean_and_the_guarded_std():
    q = np.array([[0.0, 0.0, 5.0], [2.0, 4.0, 5.0]])
    t = PublicTransform.fit(q, center=True, scale=True)
    assert t.shift.tolist() == [1.0, 2.0, 5.0]
    assert t.scale.tolist() == [1.0, 2.0, 1.0]  # no spread in the third feature: 1
    assert t.apply(q).tolist() == [[-1.0, -1.0, 0.0], [1.0, 1.0, 0.0]]
    assert t.invert(np.array([[1.0, 1.0, 0.0]])).tolist() == [[2.0, 4.0, 5.0]]
    assert PublicTransform.fit(q, center=False, scale=False).is_identity


def test_settings_and_record_round_trip_exactly():
    t = PublicTransform(np.array([0.1, 1 / 3]), np.array([7.0, 1e-3]))
    for back in (PublicTransform.from_settings(t.to_settings()),
                 PublicTransform.from_record(t.to_record())):
        assert back == t and back.shift.tobytes() == t.shift.tobytes()
        assert back.scale.tobytes() == t.scale.tobytes()
    assert IDENTITY.to_settings() == {} and IDENTITY.digest == ""
    assert PublicTransform.from_settings({"privacy.data-radius": 3.0}) == IDENTITY
    x = np.ones((2, 2))
    assert IDENTITY.apply(x) is x and IDENTITY.invert(x) is x


def test_the_shift_is_for_private_runs_and_the_scale_always():
    q = np.array([[0.0, 10.0], [2.0, 30.0]])
    private = parse_config({**SMALL, "data.scale": True})
    assert private.public_transform(q).shift.tolist() == [1.0, 20.0]
    plain = parse_config({**SMALL, "data.scale": True, "privacy.epsilon": math.inf})
    t = plain.public_transform(q)
    assert t.shift is None and t.scale.tolist() == [1.0, 10.0]
    assert parse_config({**SMALL, "privacy.epsilon": math.inf}).public_transform(q).is_identity
    with pytest.raises(ConfigError, match="'data.center'"):
        parse_config({**SMALL, "data.center": "maybe"})


def test_a_node_maps_its_points_before_the_clip_and_evaluates_on_the_originals():
    config = parse_config({**SMALL, "privacy.data-radius": 2.0})
    raw = NodeData.load(config, 0, 3, clip=False)
    x = np.concatenate([raw.points[c] for c in raw.client_ids.tolist()])
    shift = x.mean(axis=0) + 0.25
    t = PublicTransform(shift, None)
    node = NodeData.load(config, 0, 3, transform=t)
    mapped = np.concatenate([node.points[c] for c in node.client_ids.tolist()])
    assert np.allclose(mapped, _clip(x - shift, 2.0), rtol=0, atol=1e-12)
    # the estimate round's norms are those of the mapped points, before the clip
    clipped = sorted(node.clipped_clients)
    assert clipped and np.allclose(
        node.raw_norms[clipped[0]], np.linalg.norm(raw.points[clipped[0]] - shift, axis=1))
    centers = x[:4] + 0.5
    got = node.arithmetic.evaluate(centers)
    want = float(np.sum(np.min(((x[:, None, :] - centers[None]) ** 2).sum(-1), axis=1)))
    assert got["cost_sum"][0] == pytest.approx(want, rel=1e-12)
    # a node loaded to register (as loaded) is mapped and clipped when first asked
    again = NodeData.load(config, 0, 3, clip=False).retarget(config, transform=t)
    assert np.array_equal(np.concatenate([again.points[c] for c in again.client_ids.tolist()]),
                          mapped)


def _clip(x: np.ndarray, radius: float) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x * np.minimum(1.0, radius / np.maximum(norms, 1e-300))


def _shifted_mixture(tmp_path: Path, offset: float = OFFSET) -> Path:
    """The small mixture's clients and server data, every coordinate + ``offset``."""
    from fedkmeans.data import load_client, load_server, node_client_ids

    config = parse_config(SMALL)
    ids = node_client_ids(config, 0, 1)
    parts = [load_client(config, c) for c in ids.tolist()]
    server_x, server_y = load_server(config)
    return save_npz(
        tmp_path / "shifted.npz", x=np.concatenate([p[0] for p in parts]) + offset,
        client=np.repeat(ids, [p[0].shape[0] for p in parts]),
        y=np.concatenate([p[1] for p in parts]), server_x=server_x + offset, server_y=server_y)


def _file(path: Path, tmp_path: Path, **extra) -> dict:
    keys = ("data.dim", "data.components", "data.num-clients", "data.points-per-client",
            "data.server-points-per-component", "data.server-uniform-points")
    return {**{k: v for k, v in SMALL.items() if k not in keys}, "data.name": "file",
            "data.path": str(path), "privacy.reproducible-noise": True,
            "output-dir": str(tmp_path / "out"), **extra}


def test_centering_is_a_translation_of_the_run(tmp_path):
    """A private run on the data + 100 with centering gives the run on the data, + 100."""
    plain = _shifted_mixture(tmp_path / "a", 0.0) if (tmp_path / "a").mkdir() is None else None
    moved = _shifted_mixture(tmp_path / "b", OFFSET) if (tmp_path / "b").mkdir() is None else None
    here = run_server_inprocess(_file(plain, tmp_path / "a"))
    there = run_server_inprocess(_file(moved, tmp_path / "b"))
    assert np.allclose(np.asarray(there["centers"]) - OFFSET, here["centers"], atol=1e-6)
    assert there["metrics"]["cost"] == pytest.approx(here["metrics"]["cost"], rel=1e-6)
    shift = np.asarray(there["preprocessing"]["shift"])
    assert np.allclose(shift - OFFSET, here["preprocessing"]["shift"], atol=1e-9)
    # stored with the plan, so a resume maps the points by the same transform
    state = json.loads((tmp_path / "b" / "out" / "checkpoint" / "state.json").read_text())
    assert state["plan"]["transform"] == {"shift": shift.tolist(), "scale": None}


def test_without_noise_centering_changes_no_bit(tmp_path):
    path = _shifted_mixture(tmp_path)
    runs = [run_server_inprocess(_file(path, tmp_path / str(center), **{
        "privacy.epsilon": math.inf, "data.center": center})) for center in (True, False)]
    assert runs[0]["centers"] == runs[1]["centers"]
    assert runs[0]["metrics"]["cost"] == runs[1]["metrics"]["cost"]
    assert "preprocessing" not in runs[0]


def test_a_hand_radius_below_most_of_the_servers_norms_is_refused(tmp_path):
    path = _shifted_mixture(tmp_path)
    base = ["dataset=file", f"data.path={path}", "k=4", "tuning=none"]
    flat = compose_flat(base + ["data.center=false"])
    with pytest.raises(ConfigError, match=r"^config key 'privacy.data-radius' must be at "
                                          r"least the median norm"):
        preflight(flat)
    preflight(compose_flat(base))  # centred, the paper's 11 fits these points
    preflight(compose_flat(["tuning=none"]))  # the paper's mixture: its own setting fits
    preflight(compose_flat(base + ["privacy.epsilon=inf"]))  # no clip, no centring
    with pytest.raises(ConfigError, match="'privacy.data-radius'"):  # the server refuses too
        run_server_inprocess(_file(path, tmp_path, **{"data.center": False}))


@pytest.mark.flower
@pytest.mark.slow
def test_the_flower_engine_maps_the_points_as_the_inprocess_one(tmp_path):
    """A file's nodes load their points to register, unmapped; the transform reaches them
    with the first request (their shared shards are of the mapped points): same bits."""
    from fedkmeans.experiment.cli import run_flat

    path = _shifted_mixture(tmp_path)
    flat = {**_file(path, tmp_path), "federation.num-nodes": 3,
            "privacy.data-radius": "auto"}
    flower = run_flat({**flat, "federation.engine": "flower",
                       "output-dir": str(tmp_path / "flower")})
    inprocess = run_flat({**flat, "output-dir": str(tmp_path / "inprocess")})
    np.testing.assert_array_equal(np.array(flower["centers"]), np.array(inprocess["centers"]))
    assert flower["tuning"]["chosen"]["data_radius"] < 10  # of the centred points
