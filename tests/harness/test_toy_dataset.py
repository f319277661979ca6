"""Acceptance (issue 27): a data set defined and registered in this one file.

``dataset=toy-blobs`` then works like a built-in one: the config accepts it, the Hydra
``dataset`` group has its option, and it runs end to end on the in-process engine with
no edit anywhere else.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_module

from fedkmeans.config import ConfigError
from fedkmeans.data.catalog import Dataset, register
from fedkmeans.experiment.cli import flatten, run
from fedkmeans.experiment.config import parse_config
from fedkmeans.seeding import generator

#: Three well separated blobs in the plane (public constants).
CENTERS = np.array([[-2.0, 0.0], [2.0, 0.0], [0.0, 2.0]])


def _blobs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    y = rng.integers(0, len(CENTERS), n)
    return CENTERS[y] + 0.2 * rng.standard_normal((n, 2)), y


@dataclass(frozen=True)
class Blobs(Dataset):
    """``data.num-clients`` clients of ``data.points-per-client`` points each."""

    def client_ids(self, config, node_data_path=""):
        return np.arange(config.data.num_clients, dtype=np.int64)

    def client(self, config, cid, node_data_path=""):
        return _blobs(generator(config.seed, "toy-blobs", int(cid)),
                      config.data.points_per_client)

    def server(self, config):
        return _blobs(generator(config.seed, "toy-blobs", "server"), 30)

    def server_points(self, config):
        return 30, " = the toy's fixed server data"


BLOBS = register(Blobs(
    "toy-blobs", "three blobs in the plane (a test's own data set)",
    presets={"toy-blobs": {"data.num-clients": 12, "data.points-per-client": 40, "k": 3,
                           "privacy.data-radius": 3.0}},
))


def test_the_toy_data_set_is_an_option_of_the_config_and_of_hydra():
    with initialize_config_module(config_module="fedkmeans.conf", version_base=None):
        flat = flatten(compose(config_name="config", overrides=["dataset=toy-blobs"]))
    assert (flat["data.name"], flat["k"], flat["data.num-clients"]) == ("toy-blobs", 3, 12)
    with pytest.raises(ConfigError, match=r"'k'.*server points \(30"):
        parse_config({**flat, "k": 31})  # the spec's public facts are checked
    with pytest.raises(ConfigError, match="data.holdout"):
        parse_config({**flat, "data.holdout": "month=1"})  # it declares no hold-out


@pytest.mark.parametrize("privacy", [["privacy.epsilon=inf"],
                                     ["privacy.epsilon=2", "privacy.reproducible-noise=true"]])
def test_the_toy_data_set_runs_end_to_end_in_process(tmp_path, privacy):
    result = run(["dataset=toy-blobs", *privacy, f"output-dir={tmp_path}"])
    assert result["config"]["data.name"] == "toy-blobs"
    assert result["federation"]["num_clients"] == 12
    centers = np.asarray(result["centers"])
    assert centers.shape == (3, 2)
    if privacy == ["privacy.epsilon=inf"]:  # non-private: the three blobs are found
        nearest = np.linalg.norm(centers[:, None] - CENTERS[None], axis=2).min(axis=1)
        assert nearest.max() < 0.2


def test_the_extending_page_s_data_set_example_is_this_file():
    """docs/extending.md quotes this file verbatim (its data-set worked example)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "extending.md").read_text()
    block = page.split("<!-- tested-by: tests/harness/test_toy_dataset.py -->\n```python\n", 1)[1]
    assert block.split("```", 1)[0] in Path(__file__).read_text()


def test_names_are_taken_once_and_aliases_find_their_data_set():
    from fedkmeans.data import catalog

    with pytest.raises(ValueError, match="toy-blobs"):
        register(Blobs("toy-blobs"))  # another object under a registered name
    assert register(BLOBS) is BLOBS  # the same object again: a module imported twice
    assert catalog.dataset("npz") is catalog.dataset("file")
    assert catalog.options()["npz"] == {"data.name": "file"}
    with pytest.raises(KeyError, match="no data set 'mnist'"):
        catalog.dataset("mnist")
