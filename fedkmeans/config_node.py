"""The settings a node computes with, as requests carry them, and their parsed configs.

The server sends :func:`node_settings` with every request; a mounted node (whose run
config is the user's) reads its config from them (:func:`node_config`), parsed once per
distinct settings, not once per request (issue #36). (A registry node's run config is
cached by :func:`fedkmeans.client_app.node_data`.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from typing import Any

from fedkmeans.config import (
    CLIENT_SETTINGS,
    PrivacySettings,
    ProtocolConfig,
    _coerce,
    hashable_items,
)
from fedkmeans.plugins import ALGORITHMS
from fedkmeans.schema import ConfigError, check_keys

#: Distinct settings a node keeps parsed; a run sends one or two.
CACHED_CONFIGS = 32


#: Top-level keys a node computes with besides ``privacy.*``: the algorithm (whether the
#: run is private) and, in a non-private run only, ``seed`` (k-FED's local k-means; in a
#: private run with ``privacy.reproducible-noise`` the seed keys the server's noise, so it
#: never leaves the server).
NODE_TOP_KEYS = ("algorithm", "seed")


def node_settings(config: ProtocolConfig) -> dict[str, Any]:
    """The settings a node computes with, as flat keys: sent with every request.

    ``algorithm``, every ``privacy.*`` key (the level, epsilon, the clip bounds and
    what the statistics' bounds derive from: all published in ``release.json``'s
    config) and ``seed`` when the run is not private. A node whose run config is not
    this project's (a user's ClientApp, :func:`fedkmeans.client.mount`) reads its
    config from them (:func:`node_config`).
    """
    flat = config.to_flat()
    top = [k for k in NODE_TOP_KEYS if k != "seed" or not config.is_private]
    return {k: flat[k] for k in [*top, *(k for k in flat if k.startswith("privacy."))]}


def _node_config(settings: Mapping[str, Any]) -> ProtocolConfig:
    """The config a mounted node computes with: a request's :func:`node_settings` (uncached).

    Only ``algorithm``, ``seed`` and ``privacy.*`` are read (a node has no data,
    federation or output settings of the server's); the others keep their defaults and
    are not checked. ``privacy.*`` keys are checked as
    :func:`fedkmeans.config.validate_protocol` checks them.

    Raises
    ------
    ConfigError
        The request carries no node settings (``privacy.level`` missing: the server is
        not :func:`fedkmeans.session.run_protocol`), or a value is out of range.
    """
    if "privacy.level" not in settings or "algorithm" not in settings:
        raise ConfigError("config key 'privacy.level' must be sent by the server with every "
                          "request (fedkmeans' strategies and run_protocol do), got none")
    default = ProtocolConfig()
    privacy = {}
    for key_, raw in settings.items():
        if key_.startswith("privacy.") and key_ in default.to_flat():
            attr = key_[8:].replace("-", "_")
            privacy[attr] = _coerce(key_, raw, getattr(default.privacy, attr))
    config = ProtocolConfig(
        algorithm=str(settings["algorithm"]),
        seed=_coerce("seed", settings.get("seed", default.seed), default.seed),
        privacy=PrivacySettings(**privacy))
    if config.algorithm not in ALGORITHMS.names():
        raise ConfigError(f"config key 'algorithm' must be one of {list(ALGORITHMS.names())}, "
                          f"got {config.algorithm!r}")
    check_keys(config, config.privacy, "privacy.")
    return config


@lru_cache(maxsize=CACHED_CONFIGS)
def _with_items(config: ProtocolConfig, items: tuple) -> ProtocolConfig:
    values = {CLIENT_SETTINGS[key]: _coerce(key, raw, getattr(config.privacy, CLIENT_SETTINGS[key]))
              for key, raw in items}
    if all(getattr(config.privacy, name) == value for name, value in values.items()):
        return config
    resolved = replace(config, privacy=replace(config.privacy, **values))
    check_keys(resolved, resolved.privacy, "privacy.")
    return resolved


def with_client_settings(config: ProtocolConfig, settings: Mapping[str, Any] | None,
                         ) -> ProtocolConfig:
    """``config`` with a request's resolved clip bounds (``CLIENT_SETTINGS``), checked.

    The server resolves the ``auto`` bounds a node clips with and sends them with every
    request; a node's config is its run config's with them replaced (once per distinct
    settings), and the ``privacy.*`` rules checked again on the result, as
    :func:`fedkmeans.config.validate_protocol` checks them. Other keys of ``settings`` are not
    read here.

    Raises
    ------
    ConfigError
        A bound out of its range (naming the key).
    """
    items = tuple(sorted((k, v) for k, v in (settings or {}).items() if k in CLIENT_SETTINGS))
    return _with_items(config, items) if items else config


@lru_cache(maxsize=CACHED_CONFIGS)
def _cached_node_config(key: tuple) -> ProtocolConfig:
    return _node_config(dict(key))


def node_config(settings: Mapping[str, Any]) -> ProtocolConfig:
    """The config a mounted node computes with, parsed once per distinct ``settings``.

    The config is frozen, so the cached object is shared safely. See
    :func:`_node_config` for the keys read and the errors raised.
    """
    key = hashable_items(settings)
    return _node_config(settings) if key is None else _cached_node_config(key)

