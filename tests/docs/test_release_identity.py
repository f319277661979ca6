"""The release identity benchmark's configurations: valid, and covering what #36 asks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import release_identity  # noqa: E402

from fedkmeans.experiment.config import parse_config, validate  # noqa: E402
from fedkmeans.experiment.registries import ENGINES  # noqa: E402
from fedkmeans.plugins import ALGORITHMS  # noqa: E402


@pytest.mark.parametrize("name", sorted(release_identity.CONFIGS))
def test_every_configuration_is_a_valid_reproducible_run(name, tmp_path):
    config = parse_config(release_identity.flat_config(name, tmp_path))
    validate(config)
    assert config.privacy.reproducible_noise


def test_the_configurations_cover_levels_secagg_baselines_and_engines(tmp_path):
    configs = {name: parse_config(release_identity.flat_config(name, tmp_path))
               for name in release_identity.CONFIGS if name not in release_identity.CONTROLS}
    assert len(configs) >= 10
    assert {c.privacy.level for c in configs.values()} == {"datapoint", "client"}
    assert {c.federation.engine for c in configs.values()} == set(ENGINES.names())
    secagg = {n for n, c in configs.items() if c.privacy.aggregation == "secagg"}
    assert secagg and secagg <= set(release_identity.SEEDED_SHARES)
    algorithms = {c.algorithm for c in configs.values()}
    assert {"server-lloyds", "server-kmeans++", "sphere-packing", "kfed"} <= algorithms
    assert algorithms <= set(ALGORITHMS.names())
    assert "resume" in configs


def test_only_listed_keys_are_stripped_and_a_difference_is_named():
    release = b'{"centers": [[1.0]], "k": 1}'
    assert release_identity.comparable(release) == release  # nothing stripped: raw bytes
    stripped = release_identity.comparable(release, ("k",))
    assert stripped == b'{\n "centers": [\n  [\n   1.0\n  ]\n ]\n}'
    assert release_identity.differing_keys(release, b'{"centers": [[2.0]], "k": 1}') == [
        "centers"]


def test_a_dotted_key_strips_a_nested_record_and_nothing_else():
    release = b'{"tuning": {"chosen": {"T": 1}, "candidates": [1, 2]}, "k": 1}'
    other = b'{"tuning": {"chosen": {"T": 1}, "candidates": [1]}, "k": 1}'
    strip = ("tuning.candidates", "absent.key")
    assert release_identity.comparable(release, strip) == release_identity.comparable(
        other, strip)
    assert b'"chosen"' in release_identity.comparable(release, strip)
    changed = b'{"tuning": {"chosen": {"T": 2}, "candidates": [1, 2]}, "k": 1}'
    assert release_identity.comparable(changed, strip) != release_identity.comparable(
        release, strip)


def test_the_relative_difference_reads_only_float_values():
    base = b'{"centers": [[1.0, -4.0]], "k": 2, "why": "a"}'
    # 1.0 vs 1.000001: 1e-6 / 1.000001; -4.0 vs -4.0: 0
    worst = release_identity.max_relative_difference(
        base, b'{"centers": [[1.000001, -4.0]], "k": 2, "why": "a"}')
    assert worst == pytest.approx(1e-6 / 1.000001, rel=1e-9)
    assert release_identity.max_relative_difference(base, base) == 0.0
    for other in (b'{"centers": [[1.0, -4.0]], "k": 3, "why": "a"}',  # an integer
                  b'{"centers": [[1.0, -4.0]], "k": 2, "why": "b"}',  # a string
                  b'{"centers": [[1.0]], "k": 2, "why": "a"}',  # a length
                  b'{"centers": [[1.0, -4.0]], "k": 2}'):  # a key
        assert release_identity.max_relative_difference(base, other) is None
