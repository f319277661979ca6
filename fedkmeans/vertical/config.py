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

from fedkmeans.schema import (
    ConfigError,
    Constraint,
    Dependent,
    Rule,
    at_least,
    check,
    interval,
    never,
    one_of,
    require,
)
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
        Maximum number of iterations T, in [1, 500]. The privacy account counts all T
        whether or not the run stops early (the stop is post-processing).
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
        ``bound * d_h``. 0 = each party's largest fused value (released in clear, so
        ``epsilon_per_sample`` is infinite).
    delta : float
        Delta of the advanced / exact composed epsilon, in (0, 1).
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


#: Every value's constraint, in the order they are checked (:mod:`fedkmeans.schema`).
RULES: tuple[Rule, ...] = (
    require("seed", at_least(0), lambda c: c.seed),
    require("dataset", one_of(DATASETS), lambda c: c.dataset),
    require("scale", one_of(SCALES), lambda c: c.scale),
    require("parties", at_least(1, note=" (and <= the number of features)"),
            lambda c: c.parties),
    require("k", at_least(2, note=" (and <= the number of samples)"), lambda c: c.k),
    require("iterations", interval(1, 500, kind="an integer", low_open=False),
            lambda c: c.iterations),
    require("init", one_of(INITS), lambda c: c.init),
    require("defence", one_of(DEFENCES), lambda c: c.defence),
    require("mechanism", one_of(MECHANISMS), lambda c: c.mechanism),
    require("epsilon", interval(0, 20, kind="a number"), lambda c: c.epsilon),
    require("levels", interval(3, 10000, kind="an integer", low_open=False),
            lambda c: c.levels),
    require("l-ratio", interval(0, 1, kind="a number"), lambda c: c.l_ratio),
    require("bound", Constraint(lambda v: math.isfinite(v) and v >= 0,
                                "a finite number >= 0 (0 = the party's data maximum)"),
            lambda c: c.bound),
    require("delta", interval(0, 1, kind="a number", high_open=True), lambda c: c.delta),
    require("attack", one_of(ATTACKS), lambda c: c.attack),
    require("attack-party", Dependent(lambda c: interval(
        0, c.parties, kind="an integer", low_open=False, high_open=True)),
        lambda c: c.attack_party),
    require("attack", never("'known' only with init='random' (the server must be able to "
                            "regenerate the initial centers)"),
            lambda c: c.attack, when=lambda c: c.attack == "known" and c.init != "random"),
    require("output-dir", Constraint(lambda v: v == "" or v.startswith("/"),
                                     "an absolute path or ''"), lambda c: c.output_dir),
    require("round-timeout", Constraint(lambda v: v > 0, "a number > 0"),
            lambda c: c.round_timeout),
)

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
    check(c, RULES)
    return c
