"""The published ledger agrees with an independent PLD recomputation."""

import json
import math
from pathlib import Path

import pytest

from fedkmeans.attacks.ledger_check import recompute_epsilon
from fedkmeans.experiment.audit import main
from fedkmeans.experiment.cli import run_flat
from fedkmeans.privacy.accountant import gaussian_epsilon


def test_one_gaussian_release_matches_the_closed_form():
    ledger = [{"stage": "a", "mechanism": "gaussian", "sensitivity": 2.0, "noise_scale": 8.0,
               "sampling_rate": 1.0, "group": ""}]
    assert recompute_epsilon(ledger, 1e-6) == pytest.approx(gaussian_epsilon(4.0, 1e-6),
                                                            rel=1e-3)
    laplace = [{**ledger[0], "mechanism": "laplace"}]  # b / Delta = 4: pure 0.25-DP
    assert recompute_epsilon(laplace, 1e-6) == pytest.approx(0.25, rel=1e-3)
    assert recompute_epsilon([{**ledger[0], "noise_scale": 0.0}], 1e-6) == math.inf
    assert recompute_epsilon([], 1e-6) == 0.0


@pytest.mark.parametrize("overrides", [
    {"privacy.level": "datapoint", "privacy.lloyds-steps": 2},
    {"privacy.level": "client", "privacy.lloyds-steps": 1, "privacy.sampling-rate": 0.7,
     "privacy.count-noise": "gaussian"},
])
@pytest.mark.slow
def test_published_ledger_epsilon_is_exact_and_within_target(small_config, overrides, capsys):
    result = run_flat({**small_config, **overrides})
    release = Path(result["artefacts"]["release"])
    privacy = json.loads(release.read_text())["privacy"]
    recomputed = recompute_epsilon(privacy["releases"], privacy["delta"])
    assert privacy["epsilon"] == pytest.approx(recomputed, rel=0.01)
    assert privacy["epsilon"] <= privacy["target_epsilon"] == 1.0
    [row] = main(["--ledger", str(release)])
    assert row["recomputed_epsilon"] == recomputed
    assert json.loads(capsys.readouterr().out)["recorded_epsilon"] == privacy["epsilon"]
