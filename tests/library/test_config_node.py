"""A node parses its config once per new settings, not once per request (issue #36)."""

from __future__ import annotations

import pytest

from fedkmeans import config_node
from fedkmeans.config import ConfigError, ProtocolConfig
from fedkmeans.config_node import node_config, node_settings


@pytest.fixture
def counted(monkeypatch):
    """Counts of the uncached parses, with empty caches."""
    config_node._cached_node_config.cache_clear()
    calls = {"node": 0}

    def node(settings):
        calls["node"] += 1
        return config_node_uncached(settings)

    config_node_uncached = config_node._node_config
    monkeypatch.setattr(config_node, "_node_config", node)
    yield calls
    config_node._cached_node_config.cache_clear()


def test_a_mounted_node_parses_each_new_settings_once(counted):
    sent = node_settings(ProtocolConfig())
    first = [node_config(dict(sent)) for _ in range(3)]  # three requests, one settings
    assert counted["node"] == 1
    assert all(config is first[0] for config in first)
    other = node_config({**sent, "privacy.epsilon": 2.0})
    assert counted["node"] == 2
    assert other.privacy.epsilon == 2.0 and first[0].privacy.epsilon == 1.0


def test_a_bad_setting_raises_on_every_request(counted):
    bad = {**node_settings(ProtocolConfig()), "privacy.data-radius": -1.0}
    for _ in range(2):
        with pytest.raises(ConfigError, match="privacy.data-radius"):
            node_config(bad)
    assert counted["node"] == 2  # an error is not cached
