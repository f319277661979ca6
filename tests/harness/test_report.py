"""The sweep report: plots and Markdown from a small fixture table."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fedkmeans.experiment.config import ExperimentConfig
from fedkmeans.experiment.sweep import columns

pytest.importorskip("matplotlib")

from conftest import PAPER  # noqa: E402

from fedkmeans.experiment.report import main, report  # noqa: E402

#: (level, algorithm, epsilon, seed) -> cost ratio; accuracy = 2 - ratio.
RATIOS = {
    ("datapoint", "feddp-kmeans", 0.1): (1.04, 1.06),
    ("datapoint", "feddp-kmeans", 1.0): (1.004, 1.008),
    ("datapoint", "server-lloyds", 0.1): (1.09, 1.07),
    ("datapoint", "server-lloyds", 1.0): (1.06, 1.08),
    ("client", "feddp-kmeans", 0.1): (1.3, 1.2),
    ("client", "feddp-kmeans", 1.0): (1.03, 1.01),
    ("datapoint", "kfed", float("inf")): (1.02, 1.03),
}


def _fixture(path: Path) -> Path:
    defaults = {**ExperimentConfig().to_flat(), **PAPER}  # hand settings: no "(auto)" label
    rows, job = [], 0
    for (level, algorithm, eps), ratios in RATIOS.items():
        for seed, ratio in enumerate(ratios):
            rows.append({
                **defaults, "job": job, "status": "ok", "error": "", "overrides": "",
                "algorithm": algorithm, "seed": seed, "privacy.level": level,
                "privacy.epsilon": eps, "epsilon_spent": "inf" if eps == float("inf")
                else 0.99 * eps, "cost": 50 * ratio, "optimal_cost": 50.0,
                "cost_ratio": ratio, "accuracy": 2 - ratio, "ari": 1.5 - ratio,
                "k_chosen": 10, "num_clients": 100, "num_points": 100000, "wall_s": 2.0,
                # seed 0 of FedDP-KMeans keeps the protocol, seed 1 gets the server's
                **({"centers_returned": ("protocol", "server-only (check)")[seed],
                    "check_margin_sigmas": (-3.0, 1.0)[seed]}
                   if algorithm == "feddp-kmeans" else {"centers_returned": algorithm}),
            })
            job += 1
    rows.append({**defaults, "job": job, "status": "failed", "overrides": "privacy.epsilon=-1",
                 "error": "ConfigError: config key 'privacy.epsilon' must be ...",
                 "privacy.epsilon": -1, "wall_s": 0.01})
    path.mkdir(parents=True, exist_ok=True)
    with (path / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns(), restval="")
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_report_writes_plots_and_markdown(tmp_path):
    sweep = _fixture(tmp_path / "sweep")
    written = report(sweep, tmp_path / "out")
    names = {p.name for p in written}
    assert names == {"cost_ratio.png", "cost_ratio.svg", "accuracy.png", "accuracy.svg",
                     "report.md"}
    for p in written:
        assert p.stat().st_size > 1000
    svg = (tmp_path / "out" / "cost_ratio.svg").read_text()
    for text in ("data-point level", "client level", "feddp-kmeans", "server-lloyds",
                 "kfed (non-private)", "cost / optimal cost", "mixture: 100 clients"):
        assert text in svg, text
    assert (tmp_path / "out" / "cost_ratio.png").read_bytes()[:4] == b"\x89PNG"
    md = (tmp_path / "out" / "report.md").read_text()
    assert "15 jobs (14 ok, 1 failed)" in md
    assert "| 0.1 | 1.0500 [1.0400-1.0600] | 1.0800 [1.0700-1.0900] |" in md
    assert "| feddp-kmeans | ε = 1 | ε = 0.1 |" in md  # median 1.006 at eps 1, 1.05 at 0.1
    assert "\n| -1 |" not in md  # a cell without a successful run is not plotted or pivoted
    assert "| server-lloyds | not reached (best median 1.0700 at ε = 1) |" in md
    assert "| client | feddp-kmeans | 0 | 1 | 2/0 |" in md
    # whose centers, and the median of the margins -3 and +1: -1.00
    assert "| 2/0 | 0.9900 | 1 protocol, 1 server-only (check) | -1.00 |" in md
    assert "| 2/0 | 0.9900 | 2 server-lloyds | - |" in md
    assert "## Failed jobs" in md and "privacy.epsilon=-1" in md


def test_report_command_line_defaults_to_the_sweep_dir(tmp_path, capsys):
    sweep = _fixture(tmp_path / "sweep")
    main([str(sweep)])
    assert (sweep / "report.md").exists() and (sweep / "cost_ratio.svg").exists()
    assert "report.md" in capsys.readouterr().out


def test_report_without_results_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="results.csv"):
        report(tmp_path)


def test_an_algorithm_keeps_its_colour_in_every_report():
    from fedkmeans.experiment.report import algorithm_colour, algorithm_colours

    assert algorithm_colour("feddp-kmeans") == "C0" and algorithm_colour("kfed") == "C5"
    assert len(set(algorithm_colours().values())) == len(algorithm_colours())
    assert algorithm_colour("something-new") == "0.5"


def test_tuning_auto_runs_are_reported_apart(tmp_path):
    from fedkmeans.experiment.report import algorithm_colour, load

    sweep = _fixture(tmp_path / "sweep")
    path = sweep / "results.csv"
    with path.open() as f:
        rows = list(csv.DictReader(f))
    for r in rows[:2]:  # the two seeds of data-point FedDP-KMeans at epsilon 0.1
        r["privacy.split"], r["privacy.lloyds-steps"] = "auto", "auto"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    labels = [r["algorithm"] for r in load(sweep)]
    assert labels[:3] == ["feddp-kmeans (auto)", "feddp-kmeans (auto)", "feddp-kmeans"]
    assert algorithm_colour("feddp-kmeans (auto)") not in (
        algorithm_colour("feddp-kmeans"), algorithm_colour("server-lloyds"))
    report(sweep)
    assert "| feddp-kmeans (auto) |" in (sweep / "report.md").read_text()
