"""The one registry implementation, and the registries of what the config can name.

A :class:`Registry` maps a name (the config value: ``algorithm = kfed``) to one object
that says everything about it. Every registry of the project is one: the algorithms
(:class:`fedkmeans.algorithms.Algorithm`) here; the harness's attacks and engines
(:mod:`fedkmeans.experiment.registries`); the data sets
(:data:`fedkmeans.data.catalog.DATASETS`, with aliases, subscribers and the
``fedkmeans.datasets`` entry points); the protocol stages
(:mod:`fedkmeans.stages.spec`, whose subscriber is the ClientApp); the noise
mechanisms (:data:`fedkmeans.privacy.registry.MECHANISMS`). Every list of names (the
config's allowed values, the report's legend, the Hydra options) is derived from a
registry, and no other module compares such a name with a string.

This module sits at the bottom of the import layers and imports nothing of the
project: the config reads the registries, the layers above fill them. The built-in
entries are registered by importing a module (``builtins``, or a function that imports
several), then the plug-ins of an entry-point group, both the first time the registry
is read, as a plug-in loader would; a new entry registers itself when its own module
is imported (``register_algorithm(...)`` at the end of the file that defines it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

__all__ = ["ALGORITHMS", "Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Named objects of one kind, with the built-in ones loaded on first read.

    Parameters
    ----------
    kind : str
        What the entries are (``"algorithm"``), for error messages.
    builtins : str or callable, optional
        The module whose import registers the built-in entries, or a function that
        registers them (imports several modules); ``None``: entries register
        themselves when their modules are imported.
    entry_points : str, optional
        An entry-point group (``"fedkmeans.datasets"``) whose entries are loaded after
        the built-ins: a plug-in outside this repository registers itself there.
    """

    def __init__(self, kind: str, builtins: str | Callable[[], object] | None = None,
                 entry_points: str | None = None) -> None:
        self.kind = kind
        self.builtins = builtins
        self.entry_points = entry_points
        self._entries: dict[str, T] = {}
        self._aliases: dict[str, str] = {}
        self._subscribers: list[Callable[[T], None]] = []
        self._loaded = False

    def register(self, name: str, entry: T, aliases: Iterable[str] = ()) -> T:
        """Add ``entry`` as ``name`` (and its ``aliases``), tell the subscribers, return it.

        The built-ins are loaded first, so a plug-in that takes a built-in's name is
        refused here, whichever is imported first. Registering the same object again
        is a no-op (a module imported twice).

        Raises
        ------
        ValueError
            A different entry already holds ``name`` or one of ``aliases``.
        """
        self._load()
        if self._entries.get(name) is entry:
            return entry
        aliases = tuple(aliases)
        taken = sorted({name, *aliases} & {*self._entries, *self._aliases})
        if taken:
            held = repr(name) if taken == [name] else str(taken)
            raise ValueError(f"a different {self.kind} is already registered as {held}")
        self._entries[name] = entry
        self._aliases.update({alias: name for alias in aliases})
        for callback in list(self._subscribers):
            callback(entry)
        return entry

    def subscribe(self, callback: Callable[[T], None]) -> None:
        """Call ``callback(entry)`` for every entry registered, now and later."""
        known = self.values()
        self._subscribers.append(callback)
        for entry in known:
            callback(entry)

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True  # before the imports: their registrations read the registry
        try:
            if isinstance(self.builtins, str):
                importlib.import_module(self.builtins)
            elif self.builtins is not None:
                self.builtins()
            if self.entry_points is not None:
                from importlib import metadata

                for entry in metadata.entry_points(group=self.entry_points):
                    entry.load()
        except BaseException:
            self._loaded = False
            raise

    def canonical(self, name: str) -> str:
        """The registered name of ``name`` (itself, or the name it is an alias of)."""
        self._load()
        return self._aliases.get(name, name)

    def __getitem__(self, name: str) -> T:
        try:
            return self._entries[self.canonical(name)]
        except KeyError:
            raise KeyError(f"no {self.kind} {name!r}; registered: {self.names()}") from None

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries or name in self._aliases

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def names(self) -> tuple[str, ...]:
        """Every registered name, built-in ones first, in registration order."""
        self._load()
        return tuple(self._entries)

    def aliases(self) -> dict[str, str]:
        """Every alias -> the name it stands for."""
        self._load()
        return dict(self._aliases)

    def values(self) -> list[T]:
        """Every registered entry, in the order of :meth:`names`."""
        self._load()
        return list(self._entries.values())


#: name -> :class:`fedkmeans.algorithms.Algorithm`.
ALGORITHMS: Registry = Registry("algorithm", "fedkmeans.algorithms")
