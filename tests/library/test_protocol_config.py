"""The protocol's own config (issue #51): its keys, its one parse, its refusals."""

import math

import pytest

from fedkmeans.config import (
    AUTO,
    ConfigError,
    MessagingLimits,
    ProtocolConfig,
    TransformSettings,
    check_no_idle_keys,
    parse_protocol,
    protocol_keys,
    reset_idle_keys,
)


def test_the_protocol_reads_k_the_algorithm_the_transform_privacy_and_the_messaging_limits():
    keys = protocol_keys()
    assert keys[:5] == ["algorithm", "seed", "k", "k-max", "kfed-local-k"]
    assert [k for k in keys if k.startswith("data.")] == ["data.center", "data.scale"]
    assert [k for k in keys if k.startswith("federation.")] == [
        "federation.num-nodes", "federation.round-timeout", "federation.min-replies",
        "federation.message-mb", "federation.inflight-mb", "federation.node-cache-mb"]
    assert len([k for k in keys if k.startswith("privacy.")]) == 23
    assert len(keys) == 5 + 2 + 23 + 6


def test_a_parse_is_typed_and_round_trips():
    config = parse_protocol({"k": "auto", "privacy.epsilon": "inf", "privacy.split": "auto",
                             "data.scale": "true", "federation.message-mb": 8})
    assert config.k_auto and config.largest_k == ("k-max", 20)
    assert math.isinf(config.privacy.epsilon) and not config.is_private
    assert config.data == TransformSettings(center=True, scale=True)
    assert config.federation == MessagingLimits(message_mb=8.0)
    assert config.to_flat()["k"] == "auto" and config.privacy.split == AUTO
    assert parse_protocol(config.to_flat()) == config
    assert parse_protocol({}) == ProtocolConfig()


@pytest.mark.parametrize("key", ["data.name", "data.dim", "federation.engine",
                                 "federation.num-cpus", "output-dir", "attack",
                                 "optimal-cost"])
def test_a_harness_key_is_refused_naming_the_protocol_s_keys(key):
    with pytest.raises(ConfigError, match=rf"^unknown config key\(s\) \['{key}'\]; valid keys "
                                          r"are: algorithm, seed, k, "):
        parse_protocol({key: 1})


def test_the_rules_see_the_protocol_s_settings():
    with pytest.raises(ConfigError, match="^config key 'federation.min-replies' must be 1 when "
                                          "privacy.aggregation = 'secagg' at privacy.level"):
        parse_protocol({"privacy.aggregation": "secagg", "federation.min-replies": 0.5})
    with pytest.raises(ConfigError, match="^config key 'k' must be an integer >= 1 unless "
                                          "algorithm is 'feddp-kmeans'"):
        parse_protocol({"k": "auto", "algorithm": "kfed"})


def test_keys_a_run_never_reads_are_refused_or_reset():
    clip = parse_protocol({"privacy.clip-sums": 5.0})  # data-point level: not read
    with pytest.raises(ConfigError, match="^config key 'privacy.clip-sums' does nothing in "
                                          "this run, got 5.0: it is read only with "
                                          "privacy.level = 'client'"):
        check_no_idle_keys(clip)
    # a non-private run never centres: data.center back to its default, nothing else
    plain = parse_protocol({"privacy.epsilon": "inf", "data.center": False, "k": 3})
    settled = reset_idle_keys(plain)
    assert settled.data.center is True and settled.k == 3
    assert reset_idle_keys(settled) is settled
