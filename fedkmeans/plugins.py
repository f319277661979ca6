"""The registries of what the config can name: algorithms, attacks, engines.

A registry maps a name (the config value: ``algorithm = kfed``) to one object that
says everything about it (:class:`fedkmeans.algorithms.Algorithm`,
:class:`fedkmeans.attacks.Attack`, :class:`fedkmeans.engines.Engine`). Every list of
names (the config's allowed values, the report's legend, the Hydra options) is
derived from the registries, and no other module compares such a name with a string.

This module sits at the bottom of the import layers and imports nothing of the
project: the config reads the registries, the layers above fill them. The built-in
entries are registered by one module per registry (:attr:`Registry.builtins`),
imported the first time the registry is read, as a plug-in loader would; a new entry
registers itself when its own module is imported (``register_algorithm(...)`` at the
end of the file that defines it).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Generic, TypeVar

__all__ = ["ALGORITHMS", "ATTACKS", "ENGINES", "Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Named objects of one kind, with the built-in ones loaded on first read.

    Parameters
    ----------
    kind : str
        What the entries are (``"algorithm"``), for error messages.
    builtins : str
        The module whose import registers the built-in entries.
    """

    def __init__(self, kind: str, builtins: str) -> None:
        self.kind = kind
        self.builtins = builtins
        self._entries: dict[str, T] = {}
        self._loaded = False

    def register(self, name: str, entry: T) -> T:
        """Add ``entry`` as ``name`` and return it.

        Registering the same object again is a no-op (a module imported twice).

        Raises
        ------
        ValueError
            A different entry already holds ``name``.
        """
        if name in self._entries and self._entries[name] is not entry:
            raise ValueError(f"a different {self.kind} is already registered as {name!r}")
        self._entries[name] = entry
        return entry

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True  # before the import: its registrations read the registry
            try:
                importlib.import_module(self.builtins)
            except BaseException:
                self._loaded = False
                raise

    def __getitem__(self, name: str) -> T:
        self._load()
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"no {self.kind} {name!r}; registered: {self.names()}") from None

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def names(self) -> tuple[str, ...]:
        """Every registered name, built-in ones first, in registration order."""
        self._load()
        return tuple(self._entries)

    def values(self) -> list[T]:
        """Every registered entry, in the order of :meth:`names`."""
        self._load()
        return list(self._entries.values())


#: name -> :class:`fedkmeans.algorithms.Algorithm`.
ALGORITHMS: Registry = Registry("algorithm", "fedkmeans.algorithms")
#: name -> :class:`fedkmeans.attacks.Attack`.
ATTACKS: Registry = Registry("attack", "fedkmeans.attacks")
#: name -> :class:`fedkmeans.engines.Engine`.
ENGINES: Registry = Registry("engine", "fedkmeans.engines")
