"""Validated run configuration of the vertical app.

Flat keys, the same in ``[tool.flwr.app.config]`` of ``apps/vertical/pyproject.toml``
(which mirrors :data:`DEFAULTS`; a test keeps them in step), in ``flwr run
--run-config`` and in :func:`fedkmeans.vertical.experiment.run`. Every value is checked
before any data is read; a bad one raises one :class:`~fedkmeans.config.ConfigError`
(a ``ValueError``) naming the key and the allowed range.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from fedkmeans.config import ConfigError
from fedkmeans.vertical.data import DATASETS, SCALES
from fedkmeans.vertical.defence import DEFENCES, MECHANISMS
from fedkmeans.vertical.protocol import INITS

__all__ = ["ATTACKS", "DEFAULTS", "VerticalConfig", "parse_vertical_config"]

#: ``known``: the server regenerates the initial centers (``init="random"``) and
#: trilaterates; ``unknown``: it reconstructs from the reports alone (up to isometry).
ATTACKS = ("none", "known", "unknown")


@dataclass(frozen=True)
class VerticalConfig:
    """Every setting of a vertical run.

    Attributes
    ----------
    seed : int
        Root seed (initialisation, tie-breaking). The parties' randomized response
        never depends on it: it comes from each party's CSPRNG.
    dataset : str
        One of :data:`fedkmeans.vertical.data.DATASETS`.
    scale : {"standard", "minmax", "none"}
        How each party scales its own columns.
    parties : int
        H, the number of parties (SuperNodes), in [1, d].
    k : int
        Number of clusters, in [2, n].
    iterations : int
        Maximum number of iterations T, in [1, 500].
    stop_when_stable : bool
        Stop when an assignment equals the previous one.
    init : {"samples", "random"}
        k sample rows chosen from the seed (server knows ids, not values), or N(0, 1)
        centers regenerated from the seed (server knows the centers).
    defence : {"none", "fusion", "discretise", "full"}
    mechanism : {"gap-rr", "grr"}
        Randomized response of ``defence="full"``.
    epsilon : float
        Per-value epsilon of the randomized response, in (0, 20].
    levels : int
        Q, discretisation levels, in [3, 10000].
    l_ratio : float
        Gap-RR's gap ratio, in (0, 1].
    bound : float
        Public bound per feature on the fused squared distance: the scale is
        ``bound * d_h``. 0 = each party's largest fused value (released in clear).
    delta : float
        Delta of the advanced / exact / PLD composed epsilon, in (0, 1).
    attack : {"none", "known", "unknown"}
    attack_party : int
        Party whose slice the curious server reconstructs, in [0, parties).
    output_dir : str
        Absolute directory for ``result.json`` ('' = ``~/.fedkmeans/vertical/<run>``).
    round_timeout : float
        Seconds to wait for the replies of one round, > 0.
    reproducible_noise : bool
        ``False`` (default): each party's randomized response draws from its own
        CSPRNG, fresh per report. ``True``: derived from ``seed`` (tests and research
        only; the result says the guarantee then holds only against someone who
        does not know the seed, which the server does).
    """

    seed: int = 0
    dataset: str = "wine"
    scale: str = "standard"
    parties: int = 2
    k: int = 3
    iterations: int = 10
    stop_when_stable: bool = True
    init: str = "samples"
    defence: str = "none"
    mechanism: str = "gap-rr"
    epsilon: float = 1.0
    levels: int = 20
    l_ratio: float = 0.5
    bound: float = 0.0
    delta: float = 1e-5
    attack: str = "none"
    attack_party: int = 0
    output_dir: str = ""
    round_timeout: float = 600.0
    reproducible_noise: bool = False

    def to_flat(self) -> dict[str, Any]:
        """The flat run config (dashed keys)."""
        return {f.name.replace("_", "-"): getattr(self, f.name) for f in fields(self)}


#: Default flat run config (mirrored by ``apps/vertical/pyproject.toml``).
DEFAULTS: dict[str, Any] = VerticalConfig().to_flat()


def _coerce(key: str, raw: Any, default: Any) -> Any:
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "false"):
            return raw.lower() == "true"
        raise ConfigError(f"config key '{key}' must be true or false, got {raw!r}")
    if isinstance(default, int):
        if isinstance(raw, bool) or not (isinstance(raw, int) or
                                         (isinstance(raw, float) and raw.is_integer())):
            raise ConfigError(f"config key '{key}' must be an integer, got {raw!r}")
        return int(raw)
    if isinstance(default, float):
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise ConfigError(f"config key '{key}' must be a number, got {raw!r}")
        return float(raw)
    if not isinstance(raw, str):
        raise ConfigError(f"config key '{key}' must be a string, got {raw!r}")
    return raw


def _check(condition: bool, key: str, allowed: str, value: Any) -> None:
    if not condition:
        raise ConfigError(f"config key '{key}' must be {allowed}, got {value!r}")


def parse_vertical_config(flat: Mapping[str, Any]) -> VerticalConfig:
    """Build and validate a :class:`VerticalConfig` from a flat mapping.

    Parameters
    ----------
    flat : mapping of str to scalar
        Dashed keys; missing keys take :data:`DEFAULTS`.

    Returns
    -------
    VerticalConfig

    Raises
    ------
    fedkmeans.config.ConfigError
        Unknown key, wrong type, or a value outside its range (the message names both).
    """
    unknown = sorted(set(flat) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"unknown config key(s) {unknown}; valid keys are: {', '.join(DEFAULTS)}")
    values = {key.replace("-", "_"): _coerce(key, raw, DEFAULTS[key]) for key, raw in flat.items()}
    c = VerticalConfig(**values)
    _check(c.seed >= 0, "seed", "an integer >= 0", c.seed)
    _check(c.dataset in DATASETS, "dataset", f"one of {DATASETS}", c.dataset)
    _check(c.scale in SCALES, "scale", f"one of {SCALES}", c.scale)
    _check(c.parties >= 1, "parties", "an integer >= 1 (and <= the number of features)",
           c.parties)
    _check(c.k >= 2, "k", "an integer >= 2 (and <= the number of samples)", c.k)
    _check(1 <= c.iterations <= 500, "iterations", "an integer in [1, 500]", c.iterations)
    _check(c.init in INITS, "init", f"one of {INITS}", c.init)
    _check(c.defence in DEFENCES, "defence", f"one of {DEFENCES}", c.defence)
    _check(c.mechanism in MECHANISMS, "mechanism", f"one of {MECHANISMS}", c.mechanism)
    _check(0 < c.epsilon <= 20, "epsilon", "a number in (0, 20]", c.epsilon)
    _check(3 <= c.levels <= 10000, "levels", "an integer in [3, 10000]", c.levels)
    _check(0 < c.l_ratio <= 1, "l-ratio", "a number in (0, 1]", c.l_ratio)
    _check(math.isfinite(c.bound) and c.bound >= 0, "bound",
           "a finite number >= 0 (0 = the party's data maximum)", c.bound)
    _check(0 < c.delta < 1, "delta", "a number in (0, 1)", c.delta)
    _check(c.attack in ATTACKS, "attack", f"one of {ATTACKS}", c.attack)
    _check(0 <= c.attack_party < c.parties, "attack-party", f"an integer in [0, {c.parties})",
           c.attack_party)
    _check(c.attack != "known" or c.init == "random", "attack",
           "'known' only with init='random' (the server must be able to regenerate the "
           "initial centers)", c.attack)
    _check(c.output_dir == "" or c.output_dir.startswith("/"), "output-dir",
           "an absolute path or ''", c.output_dir)
    _check(c.round_timeout > 0, "round-timeout", "a number > 0", c.round_timeout)
    return c
