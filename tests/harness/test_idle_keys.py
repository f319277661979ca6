"""A key the run never reads is refused, on every entry: Hydra, flwr run, the strategies.

The presets (the data sets' options, ``tuning=none``) set both privacy levels' bounds, so
the Hydra command line refuses a key only when the user typed it and resets a preset's
value; ``flwr run``'s run config mirrors the defaults, so there a value away from its
default is one the user set (``fedkmeans.config.IDLE_RULES``).
"""

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tomllib
from conftest import SMALL, counting_app, read_keys

from fedkmeans.config import ConfigError
from fedkmeans.experiment.cli import compose_flat, typed_keys
from fedkmeans.experiment.config import (
    ExperimentConfig,
    check_no_idle_keys,
    idle_keys,
    parse_config,
)
from fedkmeans.experiment.engines.inprocess import run_inprocess
from fedkmeans.experiment.sweep import unread_by_every_job
from fedkmeans.server_app import app as server_app
from fedkmeans.strategies import FedDPKMeansStrategy

CLIENT_BOUNDS = ["privacy.clip-covariance", "privacy.clip-histogram", "privacy.clip-sums",
                 "privacy.clip-counts"]


def _cli(args, cwd):
    environ = {k: v for k, v in os.environ.items()
               if k not in ("HYDRA_FULL_ERROR", "FEDKMEANS_TRACEBACK")}
    return subprocess.run([sys.executable, "-m", "fedkmeans.experiment", *args], cwd=cwd,
                          env=environ, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args, key, reads", [
    (["privacy.clip-sums=5"], "privacy.clip-sums", "privacy.level = 'client'"),
    (["federation.num-cpus=4"], "federation.num-cpus", "federation.engine = 'flower'"),
])
def test_the_command_line_refuses_a_typed_key_the_run_never_reads(tmp_path, args, key, reads):
    proc = _cli(args, tmp_path)
    assert proc.returncode == 2, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"fedkmeans: config error: config key '{key}' does nothing")
    assert reads in first and "remove it" in first
    assert not (tmp_path / "outputs").exists()  # before any data is read or node started


#: A small mixture: a sweep job of about a second.
TINY = ["data.dim=4", "data.components=2", "k=2", "data.num-clients=4",
        "data.points-per-client=20", "data.server-points-per-component=10",
        "optimal-cost=skip", "federation.num-nodes=2", "tuning=none"]


def test_a_sweep_runs_a_job_that_does_not_read_a_typed_key_and_says_so(tmp_path):
    """Typed keys counting in some jobs are reset in the others; one read by none fails."""
    proc = _cli(["-m", "privacy.epsilon=1,inf", "privacy.data-radius=5",
                 "privacy.clip-sums=7", *TINY, f"hydra.sweep.dir={tmp_path}/sweep"], tmp_path)
    with open(tmp_path / "sweep" / "results.csv") as handle:
        rows = {row["overrides"].split()[0].partition("=")[2]: row
                for row in csv.DictReader(handle)}
    assert {row["status"] for row in rows.values()} == {"ok"}, proc.stderr
    assert rows["1"]["unread_keys"] == "privacy.clip-sums"
    assert rows["1"]["privacy.data-radius"] == "5.0"  # read: clipped at 5
    assert rows["inf"]["unread_keys"] == "privacy.data-radius privacy.clip-sums"
    assert rows["inf"]["privacy.data-radius"] == "auto"  # as its release.json says
    assert "[sweep] privacy.data-radius does nothing in this job (read only with a " \
           "private run" in proc.stdout
    # clip-sums counts in no job (data-point level): the sweep exits 1 naming it
    assert proc.returncode == 1
    assert "[sweep] privacy.clip-sums: typed, but no job read it" in proc.stderr


def test_a_key_counts_in_no_job_only_when_every_finished_job_left_it_unread():
    rows = [{"status": "ok", "unread_keys": "privacy.split privacy.delta"},
            {"status": "ok", "unread_keys": "privacy.delta"},
            {"status": "failed", "unread_keys": ""}]
    assert unread_by_every_job(rows) == ["privacy.delta"]
    assert unread_by_every_job(rows[:1] + [{"status": "ok", "unread_keys": ""}]) == []
    assert unread_by_every_job(rows[2:]) == []


@pytest.mark.parametrize("dataset", ["nycflights", "mplsstops", "mixture-client"])
def test_a_preset_s_bounds_of_the_other_level_go_back_to_their_defaults(dataset):
    defaults = ExperimentConfig().to_flat()
    datapoint = compose_flat([f"dataset={dataset}", "tuning=none"])
    assert all(datapoint[key] == defaults[key] for key in CLIENT_BOUNDS)
    client = compose_flat([f"dataset={dataset}", "tuning=none", "privacy=client"])
    assert all(isinstance(client[key], float) for key in CLIENT_BOUNDS)  # read: kept


def test_a_typed_key_counts_where_the_run_reads_it_whatever_the_preset():
    flat = compose_flat(["privacy=client", "privacy.clip-sums=123"])
    assert flat["privacy.clip-sums"] == 123.0
    for typed in ("privacy.clip-sums=123", "privacy.clip-sums=auto"):  # even its default
        with pytest.raises(ConfigError, match="'privacy.clip-sums' does nothing"):
            compose_flat([typed])
    with pytest.raises(ConfigError, match="'privacy.lloyds-split' does nothing.*lloyds-steps"):
        compose_flat(["tuning=none", "privacy.lloyds-split='0.5,0.5'"])  # T = 0
    assert compose_flat(["privacy.lloyds-split='0.5,0.5'"])["privacy.lloyds-split"] == "0.5,0.5"
    with pytest.raises(ConfigError, match="'privacy.check-clip' does nothing.*final private"):
        compose_flat(["algorithm=server-lloyds", "privacy.check-clip=2"])


def test_typed_keys_are_the_overrides_that_name_a_key():
    assert typed_keys(["dataset=file", "privacy=client", "privacy.clip-sums=9", "+seed=1",
                       "~k", "algorithm.k=auto", "hydra.verbose=true"]) == {
        "privacy.clip-sums", "seed", "k"}


def test_flwr_run_s_server_app_refuses_a_value_away_from_its_default_before_any_message():
    app, asked = counting_app()
    with pytest.raises(ConfigError, match="'privacy.clip-sums' does nothing.*'client'"):
        run_inprocess(server_app, app, {**read_keys(SMALL), "privacy.clip-sums": 5.0}, 3)
    assert asked == {}


def test_pyproject_s_run_config_mirror_reads_every_key_it_sets():
    """flwr run passes the whole mirror: none of its values may count as set by the user."""
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    table = tomllib.loads(pyproject.read_text())["tool"]["flwr"]["app"]["config"]

    def flat(node, prefix=""):
        for key, value in node.items():
            if isinstance(value, dict):
                yield from flat(value, f"{prefix}{key}.")
            else:
                yield prefix + key, value

    config = parse_config(dict(flat(table)))
    check_no_idle_keys(config)
    assert set(idle_keys(config)) >= {*CLIENT_BOUNDS, "federation.num-cpus"}


def test_a_strategy_refuses_a_keyword_the_run_never_reads():
    server = np.random.default_rng(0).normal(size=(30, 3))
    with pytest.raises(ConfigError, match="^clip_sums does nothing.*level = 'client'"):
        FedDPKMeansStrategy(n_clusters=3, server_data=server, clip_sums=5.0)
    strategy = FedDPKMeansStrategy(n_clusters=3, server_data=server, level="client", clip_sums=5.0)
    assert strategy.config.privacy.clip_sums == 5.0


@pytest.mark.parametrize("args, key, reads", [
    (["privacy.epsilon=inf", "privacy.data-radius=5"], "privacy.data-radius", "a private run"),
    (["privacy.epsilon=inf", "data.center=false"], "data.center", "a private run"),
    (["privacy.epsilon=inf", "privacy.split='0.2,0.2,0.3,0.3'"], "privacy.split",
     "FedDP-Init"),
    (["algorithm=kfed", "privacy.epsilon=2"], "privacy.epsilon", "a private algorithm"),
    (["algorithm=server-lloyds", "privacy.split='0.2,0.2,0.3,0.3'"], "privacy.split",
     "FedDP-Init"),
    (["algorithm=server-lloyds", "privacy.min-server-weight=3"], "privacy.min-server-weight",
     "FedDP-Init"),
    (["tuning=none", "privacy.estimate-share=0.1"], "privacy.estimate-share",
     "an estimate round"),
    (["algorithm=server-lloyds", "privacy.lloyds-steps=0", "privacy.epsilon=2"],
     "privacy.epsilon", "a release"),
])
def test_a_single_run_refuses_a_typed_key_of_settings_it_does_not_have(args, key, reads):
    with pytest.raises(ConfigError, match=f"'{key}' does nothing in this run.*{reads}"):
        compose_flat(args)


def test_the_keys_a_non_private_run_reads_are_kept():
    flat = compose_flat(["privacy.epsilon=inf", "privacy.lloyds-steps=2",
                         "privacy.min-cluster-count=3", "privacy.extra-centers=1"])
    assert (flat["privacy.lloyds-steps"], flat["privacy.min-cluster-count"],
            flat["privacy.extra-centers"]) == (2, 3.0, 1)
    assert compose_flat(["privacy.estimate-share=0.1"])["privacy.estimate-share"] == 0.1


def test_the_hand_preset_of_a_non_private_run_goes_back_to_the_defaults():
    defaults = ExperimentConfig().to_flat()
    flat = compose_flat(["tuning=none", "privacy=client", "privacy.epsilon=inf"])
    for key in ("privacy.split", "privacy.data-radius", "privacy.level", *CLIENT_BOUNDS):
        assert flat[key] == defaults[key], key
    assert flat["privacy.lloyds-steps"] == 0  # read: T rounds of exact Lloyd steps


def test_an_algorithm_without_feddp_init_neither_searches_nor_estimates_the_split():
    hand = {"privacy.lloyds-steps": 2, "privacy.data-radius": 5.0,
            "privacy.max-points-per-client": 40}
    lloyds = parse_config({"algorithm": "server-lloyds", **hand})
    assert "split" in lloyds.privacy.auto_keys and "split" not in lloyds.auto_keys
    assert not lloyds.has_estimate_round  # nothing it reads is estimated
    feddp = parse_config(hand)
    assert "split" in feddp.auto_keys and feddp.has_estimate_round


def test_a_strategy_s_preprocessing_is_read_at_epsilon_inf_only_for_its_scale():
    server = np.random.default_rng(0).normal(size=(30, 3))
    strategy = FedDPKMeansStrategy(n_clusters=3, epsilon=float("inf"), server_data=server,
                           preprocessing="none")
    assert strategy.config.data.center  # not read: the default, as the release says
    with pytest.raises(ConfigError, match="^data_radius does nothing.*private run"):
        FedDPKMeansStrategy(n_clusters=3, epsilon=float("inf"), server_data=server,
                            data_radius=5.0)


def test_a_server_baseline_with_lloyds_steps_reads_the_budget():
    """With a Lloyds step the baseline releases, so epsilon and delta count."""
    flat = compose_flat(["algorithm=server-lloyds", "privacy.lloyds-steps=2",
                         "privacy.epsilon=2", "privacy.delta=1e-7"])
    assert (flat["privacy.epsilon"], flat["privacy.delta"]) == (2.0, 1e-7)
