"""Hydra multirun sweeps: one row per job, failures recorded, concurrent appends."""

from __future__ import annotations

import csv
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SMALL

from fedkmeans.experiment.config import config_keys, idle_keys, parse_config
from fedkmeans.experiment.sweep import append_row, columns, count_jobs, eta_seconds, read_rows

ROOT = Path(__file__).resolve().parents[2]


def _sweep(
    tmp_path: Path, *overrides: str, returncode: int = 0, **env_extra: str
) -> tuple[subprocess.CompletedProcess, list[dict]]:
    sweep_dir = tmp_path / "sweep"
    idle = idle_keys(parse_config(SMALL))  # typed, a key the run never reads is refused
    small = [f"{k}='{v}'" if ',' in str(v) else f"{k}={v}" for k, v in SMALL.items()
             if k != "privacy.lloyds-steps"  # the algorithm group's T preset applies
             and k not in idle]
    cmd = [sys.executable, "-m", "fedkmeans.experiment", "-m",
           f"hydra.sweep.dir={sweep_dir}", *small, *overrides]
    env = {**os.environ, "FEDKMEANS_CACHE_DIR": str(tmp_path / "cache"), **env_extra}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == returncode, proc.stderr[-3000:]
    return proc, read_rows(sweep_dir / "results.csv")


@pytest.mark.slow
def test_two_by_two_sweep_writes_one_tidy_row_per_job(tmp_path):
    proc, rows = _sweep(tmp_path, "privacy.epsilon=1,4", "algorithm=feddp-kmeans,server-lloyds",
                        "tuning=none")
    assert len(rows) == 4
    assert list(rows[0]) == columns()
    assert {r["status"] for r in rows} == {"ok"}
    combos = {(r["algorithm"], float(r["privacy.epsilon"])) for r in rows}
    assert combos == {(a, e) for a in ("feddp-kmeans", "server-lloyds") for e in (1.0, 4.0)}
    for r in rows:
        assert set(config_keys()) <= set(r)  # every config value is in the row
        assert 0 < float(r["epsilon_spent"]) <= float(r["privacy.epsilon"])
        assert float(r["cost_ratio"]) >= 0.99 and float(r["accuracy"]) > 0
        assert float(r["wall_s"]) > 0 and float(r["time_total"]) > 0
        assert Path(r["result_path"]).is_file()
        assert r["output-dir"] == str(Path(r["result_path"]).parent)
        assert Path(r["output-dir"]).parent == tmp_path / "sweep" / "runs"
    assert len({r["output-dir"] for r in rows}) == 4
    # server-lloyds comes with its T = 2 preset from the algorithm group
    assert {r["privacy.lloyds-steps"] for r in rows if r["algorithm"] == "server-lloyds"} == {"2"}
    assert "[sweep] 4 jobs" in proc.stdout
    assert "[sweep] 4/4 jobs done (0 failed)" in proc.stdout and "ETA" in proc.stdout
    # extending the sweep into the same directory adds rows and reuses no other job's dir
    proc, rows = _sweep(tmp_path, "privacy.epsilon=2,4", "algorithm=feddp-kmeans", "tuning=none")
    assert [r["status"] for r in rows] == ["ok"] * 6
    assert "[sweep] 2/2 jobs done (0 failed)" in proc.stdout
    by_dir = {}
    for r in rows:
        by_dir.setdefault(r["output-dir"], []).append(r)
    assert len(by_dir) == 5  # eps=4 feddp-kmeans ran twice: it resumed, same centers
    again = next(v for v in by_dir.values() if len(v) == 2)
    assert again[0]["cost"] == again[1]["cost"]


@pytest.mark.slow
def test_failed_jobs_are_recorded_and_the_sweep_goes_on(tmp_path):
    # the file job names no file (a data.path given to every job would be refused by the
    # mixture jobs, which never read it)
    overrides = ("dataset=file,mixture", "privacy.epsilon=1,-1")
    proc, rows = _sweep(tmp_path, *overrides, returncode=1)  # a failed job: status 1
    assert "3 job(s) failed" in proc.stderr
    assert len(rows) == 4
    by = {(r["data.name"], float(r["privacy.epsilon"])): r for r in rows}
    for eps in (1.0, -1.0):  # the file jobs fail before any node starts: the mixture's
        # small settings (data.dim, ...) do nothing for a file, and no file is named
        assert by[("file", eps)]["status"] == "failed"
        assert "ConfigError" in by[("file", eps)]["error"]
        assert "config key 'data." in by[("file", eps)]["error"]
    invalid = by[("mixture", -1.0)]  # fails validation
    assert invalid["status"] == "failed"
    assert "ConfigError" in invalid["error"] and "privacy.epsilon" in invalid["error"]
    ok = by[("mixture", 1.0)]
    assert ok["status"] == "ok" and ok["error"] == "" and float(ok["cost_ratio"]) > 0
    assert rows[0]["status"] == "failed"  # the first job failed and three more ran
    assert "[sweep] 4/4 jobs done (3 failed)" in proc.stdout
    assert "finished: 1 ok, 3 failed" in proc.stdout
    # the switch that keeps the old behaviour: exit 0 despite failed jobs
    (tmp_path / "again").mkdir()
    _sweep(tmp_path / "again", *overrides, returncode=0, FEDKMEANS_SWEEP_ALLOW_FAILURES="1")


def _append_many(args):
    path, worker = args
    for i in range(20):
        append_row(Path(path), {"job": worker * 100 + i, "status": "ok", "error": "x" * 500})


def test_concurrent_appends_never_interleave(tmp_path):
    path = tmp_path / "results.csv"
    with multiprocessing.get_context("fork").Pool(4) as pool:
        pool.map(_append_many, [(str(path), w) for w in range(4)])
    rows = read_rows(path)
    assert len(rows) == 80 and all(r["error"] == "x" * 500 for r in rows)
    assert sorted(int(r["job"]) for r in rows) == sorted(
        w * 100 + i for w in range(4) for i in range(20))
    with path.open() as f:
        assert sum(1 for _ in csv.reader(f)) == 81  # one header


@pytest.mark.parametrize(
    "params, task, total",
    [({}, ["seed=0,1", "privacy.epsilon=0.1,0.2,0.4"], 6),
     ({"seed": "0,1,2"}, ["algorithm=a,b"], 6),
     ({"seed": "0,1,2"}, ["seed=5"], 1),  # the command line wins over the config
     ({}, ["seed=range(0,4)", "k=3"], 4)],
)
def test_count_jobs(params, task, total):
    assert count_jobs(params, task) == total


def test_sweep_eta_leaves_out_the_first_job_and_converges():
    rows = [{"wall_s": 60.0}] + [{"wall_s": 10.0}] * 3  # a slow first job, then 10 s
    assert eta_seconds(rows, elapsed=90.0, total=10) == pytest.approx(10.0 * 6)
    assert eta_seconds(rows[:1], elapsed=60.0, total=10) == pytest.approx(60.0 * 9)
    assert eta_seconds(rows, elapsed=90.0, total=4) == 0.0
