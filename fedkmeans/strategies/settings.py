"""A strategy's keyword arguments as a validated :class:`~fedkmeans.config.ProtocolConfig`.

``FedDPKMeansStrategy(n_clusters=3, epsilon=1.0, server_data=Q, lloyds_steps=5)``: the named
arguments are the config's ``k``, ``privacy.epsilon``, ``privacy.delta`` and
``privacy.level``; every other keyword is a config attribute by its name
(``lloyds_steps`` -> ``privacy.lloyds-steps``, ``num_nodes`` -> ``federation.num-nodes``,
``seed``; ``preprocessing`` -> ``data.center``/``data.scale``), and takes ``"auto"``
wherever the config does. The config is built by :func:`~fedkmeans.config.parse_protocol`
(so a bad value is the same one-line :class:`~fedkmeans.config.ConfigError` naming the
key): the protocol's config alone, no data set (the nodes hold their own data), and ``k``
checked against the server's data.

A keyword that would do nothing in a strategy is refused, not ignored: one the run never
reads (``clip_sums`` at data-point level: :func:`~fedkmeans.config.check_no_idle_keys`),
and the harness's keys (:data:`HARNESS_KEYS`: the engine, Ray's CPUs, the project
ClientApp's node cache, the output, the reference cost, the attack), which belong to
``python -m fedkmeans.experiment``, not to a Flower app whose engine and ClientApp are
the user's. Errors name the keyword the caller
wrote (``n_clusters``, ``lloyds_steps``), never the config key it becomes
(:func:`in_caller_words`).
"""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any

import numpy as np

from fedkmeans.config import (
    ConfigError,
    ProtocolConfig,
    check_no_idle_keys,
    check_server_points,
    parse_protocol,
    reset_idle_keys,
)

__all__ = ["HARNESS_KEYS", "SETTING_KEYS", "build_config", "in_caller_words", "server_points"]

#: Top-level keys a strategy never takes: its own arguments, or what only the
#: experiment harness has (files, the optimal cost, an attack: see CuriousServer).
_NOT_SETTINGS = ("algorithm", "k")
#: Keyword -> why a strategy refuses it: read only by the experiment harness (its engine
#: and its own ClientApp), so in a user's Flower app it would do nothing.
HARNESS_KEYS = {
    "engine": "the engine is your Grid (flwr run, or a deployment)",
    "num_cpus": "Ray's CPUs are set by your federation (options.backend in pyproject.toml)",
    "client_cpus": "Ray's CPUs per ClientApp are set by your federation",
    "node_cache_mb": "your ClientApp loads its own points (fedkmeans.client.mount)",
    "output_dir": "a strategy returns its results and writes no run directory",
    "optimal_restarts": "the reference cost is computed by python -m fedkmeans.experiment",
    "optimal_cost": "the reference cost is computed by python -m fedkmeans.experiment",
    "attack": "the curious-server attacks are the harness's (or fedkmeans.attacks.CuriousServer)",
}


def _setting_keys() -> dict[str, str]:
    default = ProtocolConfig()
    out = {f.name: f.name.replace("_", "-") for f in fields(default)
           if f.name not in _NOT_SETTINGS and f.name not in ("data", "privacy", "federation")}
    for section in ("privacy", "federation"):
        out.update({f.name: f"{section}.{f.name.replace('_', '-')}"
                    for f in fields(getattr(default, section)) if f.name not in HARNESS_KEYS})
    return out


#: Keyword argument -> flat config key (``lloyds_steps`` -> ``privacy.lloyds-steps``).
SETTING_KEYS = _setting_keys()
#: Flat config key -> the keyword a strategy's caller writes for it.
CALLER_WORDS = {"k": "n_clusters", "privacy.epsilon": "epsilon", "privacy.delta": "delta",
                "privacy.level": "level",
                **{flat: name for name, flat in SETTING_KEYS.items()
                   if flat not in ("privacy.epsilon", "privacy.delta", "privacy.level")}}
_FLAT_KEY = re.compile(r"(?<![\w.-])(k|[a-z]+(?:\.[a-z0-9-]+)+|[a-z]+(?:-[a-z0-9]+)+)(?![\w-])")


def in_caller_words(message: str, words: dict[str, str] | None = None) -> str:
    """``message`` with every config key the caller did not write as the keyword it did.

    ``config key 'k' must be ...`` -> ``n_clusters must be ...``; a key quoted or named
    inside the message (``when privacy.aggregation = 'secagg'``) becomes its keyword.
    ``words`` adds or overrides names (the estimator's ``random_state`` for ``seed``).
    """
    names = {**CALLER_WORDS, **(words or {})}
    message = re.sub(r"config key '([^']+)'",
                     lambda m: names.get(m[1], f"config key {m[1]!r}"), message)
    message = re.sub(r"'([a-z][\w.-]*)'", lambda m: names.get(m[1], m[0]) if m[1] in names
                     and m[1] != "k" else m[0], message)
    message = _FLAT_KEY.sub(lambda m: names.get(m[1], m[1]) if m[1] != "k" else "k", message)
    for plain, word in (words or {}).items():
        if plain.isidentifier():
            message = re.sub(rf"(?<![\w.-]){plain}(?![\w-])", word, message)
    return message


#: ``preprocessing`` -> (``data.center``, ``data.scale``): the public transform from Q.
PREPROCESSING = {"center": (True, False), "standardize": (True, True), "none": (False, False)}


def _preprocessing(value: Any) -> tuple[bool, bool]:
    """``preprocessing`` as (``data.center``, ``data.scale``), or ConfigError naming it.

    The data keys a strategy sets: the public pre-processing from Q. The others say how
    to load a registered data set, which a strategy's nodes never do.
    """
    if not isinstance(value, str) or value not in PREPROCESSING:
        raise ConfigError(f"preprocessing must be one of {', '.join(map(repr, PREPROCESSING))} "
                          f"(from the server's data: center = shift by its mean on a private "
                          f"run, standardize = also divide by its standard deviation), "
                          f"got {value!r}")
    return PREPROCESSING[value]


def server_points(server_data: Any) -> np.ndarray:
    """``server_data`` as a float64 array (m, d); ValueError naming ``server_data``.

    The error never quotes a value of the data (NumPy's own would: ``could not convert
    string to float: '...'``).
    """
    try:
        x = np.asarray(server_data, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("server_data must be numbers: a finite 2-D array (m, d); it holds "
                         "a value that is not a number") from None
    if x.ndim != 2 or x.shape[0] == 0 or not np.isfinite(x).all():
        raise ValueError(f"server_data must be a finite 2-D array (m, d) with at least one "
                         f"row, got shape {x.shape}")
    return x


def build_config(algorithm: str, n_clusters: int | str, epsilon: float, delta: float,
                 level: str, settings: dict[str, Any], server_x: np.ndarray,
                 words: dict[str, str] | None = None) -> ProtocolConfig:
    """The validated config of a strategy (see the module docstring).

    ``words`` renames keywords in the errors (:func:`in_caller_words`), for a caller
    whose own parameters differ (the estimator's ``random_state``, ``X_server``).

    Raises
    ------
    ConfigError
        An unknown or harness keyword (naming it and the valid ones), or a value a
        key's rules refuse (naming the keyword), or ``n_clusters`` larger than the
        server's data allows.
    """
    harness = sorted(set(settings) & set(HARNESS_KEYS))
    if harness:
        raise ConfigError(f"{harness[0]} is not a strategy setting: "
                          f"{HARNESS_KEYS[harness[0]]}; it is read only by "
                          "python -m fedkmeans.experiment (the experiment config)")
    settings = dict(settings)
    center, scale = _preprocessing(settings.pop("preprocessing", "center"))
    unknown = sorted(set(settings) - set(SETTING_KEYS))
    if unknown:
        raise ConfigError(f"unknown strategy setting(s) {unknown}; valid keywords are "
                          f"n_clusters, epsilon, delta, level, server_data, "
                          f"preprocessing and: "
                          f"{', '.join(SETTING_KEYS)}")
    flat = {"algorithm": algorithm, "k": n_clusters, "privacy.epsilon": epsilon,
            "privacy.delta": delta, "privacy.level": level, "data.center": center,
            "data.scale": scale,
            **{SETTING_KEYS[name]: value for name, value in settings.items()}}
    try:
        config = parse_protocol(flat)
        # e.g. clip_sums at data-point level; preprocessing="none" centres nothing on a
        # non-private run, as "center" does not: its data.center goes back to the default
        check_no_idle_keys(config, exempt=("data.center",))
        config = reset_idle_keys(config)
        check_server_points(config, server_x.shape[0], " in server_data")
    except ConfigError as exc:
        raise ConfigError(in_caller_words(str(exc), words)) from None
    return config
