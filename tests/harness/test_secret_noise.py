"""Secret noise: nothing published lets an analyst reproduce a run's randomness."""

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import PAPER

from fedkmeans.attacks.resimulation import attack_trials, neighbouring_worlds
from fedkmeans.experiment.cli import run_flat
from fedkmeans.privacy.randomness import PrivateRandomness, secure_generator

FLAT = {
    **PAPER,
    "data.name": "npz", "k": 4, "privacy.epsilon": 1.0, "privacy.data-radius": 4.0,
    "privacy.max-points-per-client": 40, "privacy.lloyds-steps": 1, "federation.num-nodes": 3,
    "privacy.clip-covariance": 200.0, "privacy.clip-histogram": 40.0,
    "privacy.clip-sums": 80.0, "privacy.clip-counts": 40.0,
}


def _flat(level):
    flat = {**FLAT, "privacy.level": level}
    if level == "client":
        flat.update({"privacy.sampling-rate": 0.8, "privacy.count-noise": "gaussian"})
    return flat


def test_secure_generators_never_repeat_and_seeded_ones_always_do():
    a, b = secure_generator().random(4), secure_generator().random(4)
    assert not np.any(a == b)
    assert PrivateRandomness().is_secure
    seeded = PrivateRandomness(7)
    np.testing.assert_array_equal(seeded.generator("noise", "x").random(4),
                                  seeded.generator("noise", "x").random(4))
    assert "does not know the seed" in seeded.notice


@pytest.mark.parametrize("level", ["datapoint", "client"])
def test_identical_config_and_seed_release_different_centers(level, tmp_path):
    worlds = neighbouring_worlds(tmp_path, level)
    flat = {**_flat(level), "data.path": str(worlds["in"])}
    a = run_flat({**flat, "output-dir": str(tmp_path / "a")})
    b = run_flat({**flat, "output-dir": str(tmp_path / "b")})
    assert not np.array_equal(np.array(a["centers"]), np.array(b["centers"]))
    assert a["privacy"]["releases"] == b["privacy"]["releases"]  # same ledger
    release = json.loads(Path(a["artefacts"]["release"]).read_text())
    assert release["privacy"]["noise"]["reproducible"] is False
    assert release["seed"] == 0  # the seed is public: it fixes no noise


@pytest.mark.parametrize("level", ["datapoint", "client"])
@pytest.mark.slow
def test_replaying_the_published_output_matches_nothing(level, tmp_path):
    worlds = neighbouring_worlds(tmp_path, level)
    rng = np.random.default_rng(0)
    secret = attack_trials(_flat(level), worlds, tmp_path / "secret", 3, rng)
    assert secret["bit_equal_matches"] == 0 and secret["correct_guesses"] == 0
    # control: the same game wins when the noise follows a seed the analyst knows
    seeded = attack_trials({**_flat(level), "privacy.reproducible-noise": True}, worlds,
                           tmp_path / "seeded", 2, rng, analyst_knows_seed=True)
    assert seeded["correct_guesses"] == 2


def test_reproducible_runs_say_so_and_keep_the_seed_out_of_the_release(tmp_path):
    worlds = neighbouring_worlds(tmp_path, "datapoint")
    result = run_flat({**_flat("datapoint"), "data.path": str(worlds["in"]),
                       "privacy.reproducible-noise": True, "output-dir": str(tmp_path / "r")})
    release = json.loads(Path(result["artefacts"]["release"]).read_text())
    assert "seed" not in release and "seed" not in release["config"]
    assert release["privacy"]["noise"]["reproducible"] is True
    assert "does not know the seed" in release["privacy"]["guarantee"]
    diagnostics = json.loads(Path(result["artefacts"]["diagnostics"]).read_text())
    assert diagnostics["publishable"] is False and "num_clients" in diagnostics["federation"]
    assert "metrics" not in release and "timings" not in release and "federation" not in release
