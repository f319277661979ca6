"""A strategy's keyword arguments as a validated :class:`~fedkmeans.config.ExperimentConfig`.

``FedDPKMeans(n_clusters=3, epsilon=1.0, server_data=Q, lloyds_steps=5)``: the named
arguments are the config's ``k``, ``privacy.epsilon``, ``privacy.delta`` and
``privacy.level``; every other keyword is a config attribute by its name
(``lloyds_steps`` -> ``privacy.lloyds-steps``, ``num_nodes`` -> ``federation.num-nodes``,
``seed``, ``center``/``scale`` -> ``data.center``/``data.scale``), and takes ``"auto"``
wherever the config does. The config is built by :func:`~fedkmeans.config.parse_config`
(so a bad value is the same one-line :class:`~fedkmeans.config.ConfigError` naming the
key), with ``data.name = mounted`` (:mod:`fedkmeans.data.mounted`: the nodes' own data;
nothing about it is read to validate), and ``k`` checked against the server's data.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np

from fedkmeans.config import ConfigError, ExperimentConfig, check_server_points, parse_config

__all__ = ["SETTING_KEYS", "build_config", "server_points"]

#: The data keys a strategy may set: the public pre-processing from Q. The others say
#: how to load a registered data set, which a strategy's nodes never do.
_DATA_KEYS = ("center", "scale")
#: Top-level keys a strategy never takes: its own arguments, or what only the
#: experiment harness has (files, the optimal cost, an attack: see CuriousServer).
_NOT_SETTINGS = ("algorithm", "k", "output_dir", "optimal_restarts", "optimal_cost", "attack")


def _setting_keys() -> dict[str, str]:
    default = ExperimentConfig()
    out = {f.name: f.name.replace("_", "-") for f in fields(default)
           if f.name not in _NOT_SETTINGS and f.name not in ("data", "privacy", "federation")}
    for section in ("privacy", "federation"):
        out.update({f.name: f"{section}.{f.name.replace('_', '-')}"
                    for f in fields(getattr(default, section))})
    out.update({name: f"data.{name}" for name in _DATA_KEYS})
    return out


#: Keyword argument -> flat config key (``lloyds_steps`` -> ``privacy.lloyds-steps``).
SETTING_KEYS = _setting_keys()


def server_points(server_data: Any) -> np.ndarray:
    """``server_data`` as a float64 array (m, d); ValueError naming ``server_data``."""
    x = np.asarray(server_data, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0 or not np.isfinite(x).all():
        raise ValueError(f"server_data must be a finite 2-D array (m, d) with at least one "
                         f"row, got shape {x.shape}")
    return x


def build_config(algorithm: str, n_clusters: int | str, epsilon: float, delta: float,
                 level: str, settings: dict[str, Any],
                 server_x: np.ndarray) -> ExperimentConfig:
    """The validated config of a strategy (see the module docstring).

    Raises
    ------
    ConfigError
        An unknown keyword (naming it and the valid ones), or a value a key's rules
        refuse (naming the key), or ``k`` larger than the server's data allows.
    """
    unknown = sorted(set(settings) - set(SETTING_KEYS))
    if unknown:
        raise ConfigError(f"unknown strategy setting(s) {unknown}; valid keywords are "
                          f"n_clusters, epsilon, delta, level, server_data and: "
                          f"{', '.join(SETTING_KEYS)}")
    flat = {"algorithm": algorithm, "k": n_clusters, "privacy.epsilon": epsilon,
            "privacy.delta": delta, "privacy.level": level, "data.name": "mounted",
            **{SETTING_KEYS[name]: value for name, value in settings.items()}}
    config = parse_config(flat)
    check_server_points(config, server_x.shape[0], " in server_data")
    return config
