"""The benchmark summaries: tables built from hand-made rows."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import real_data  # noqa: E402


def _row(level, eps, setting, seed, ratio, algorithm="", steps=""):
    return {"dataset": "toy", "level": level, "epsilon": eps, "setting": setting,
            "seed": seed, "cost_ratio": ratio, "chosen_algorithm": algorithm,
            "chosen_lloyds_steps": steps, "tuning_s": 1.0, "run_s": 2.0}


def test_real_data_summary_of_one_level_only():
    # --levels client: the server-only rows carry level "datapoint" (they serve every
    # cell) and must not open a datapoint section with no auto / guess rows
    rows = [_row("client", 3.0, "auto", s, r, "feddp-kmeans", 0)
            for s, r in enumerate((1.0, 1.2, 1.1))]
    rows += [_row("client", 3.0, "guess", s, 1.5) for s in range(3)]
    rows += [_row("datapoint", 1.0, "server", s, r) for s, r in enumerate((1.2, 1.3, 1.4))]
    lines = real_data.summarise(rows)
    table = [line for line in lines if line.startswith("| client")]
    assert table == ["| client | 3 | 1.1000 | 1.5000 | 0.8462 | 3/3 (T in {0}) | 1.0 | 2.0 |"]
    assert not [line for line in lines if line.startswith("| datapoint")]
