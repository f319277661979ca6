"""The harness's registries: the attacks ``attack`` selects, the engines it runs on.

Both are :class:`fedkmeans.plugins.Registry` objects whose built-ins are harness
modules (:mod:`fedkmeans.attacks`, :mod:`fedkmeans.experiment.engines`), loaded the
first time a registry is read; the library's own registries (algorithms, data sets,
stages, mechanisms) are the library's. An attack registers itself with
:func:`register_attack`, an engine with
:func:`fedkmeans.experiment.engines.register_engine`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedkmeans.plugins import Registry
from fedkmeans.server.observer import RunObserver

__all__ = ["ATTACKS", "ENGINES", "Attack", "attack", "register_attack"]

#: name -> :class:`Attack`.
ATTACKS: Registry = Registry("attack", "fedkmeans.attacks")
#: name -> :class:`fedkmeans.experiment.engines.Engine`.
ENGINES: Registry = Registry("engine", "fedkmeans.experiment.engines")


@dataclass(frozen=True)
class Attack:
    """What ``attack = <name>`` selects.

    Attributes
    ----------
    name : str
        The config value.
    build : callable
        ``build(config) -> list of RunObserver``: the observers of a run (empty: the
        honest server alone); ``config`` is the caller's (the harness's experiment
        config, or a strategy's :class:`~fedkmeans.config.ProtocolConfig`).
    summary : str
        One line for listings.
    """

    name: str
    build: Callable[[Any], list[RunObserver]]
    summary: str = ""


def register_attack(new: Attack) -> Attack:
    """Add ``new`` to the registry under its name (the config accepts it from now on)."""
    return ATTACKS.register(new.name, new)


def attack(name: str) -> Attack:
    """The registered attack ``name``."""
    return ATTACKS[name]
