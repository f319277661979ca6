"""The user's own data file as a data set (``dataset=file``; ``npz`` is an alias).

CSV, TSV, Parquet or ``.npz``: read, checked and split into clients by
:mod:`fedkmeans.data.tables`, cached while the file is unchanged. In deployment a
node's ``data-path`` node config names its own file and the node hosts every client
in it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from fedkmeans.data.catalog import PARTITIONERS, Dataset, Points, RunConfig, register
from fedkmeans.data.npz import NpzDataset, load_npz
from fedkmeans.data.tables import TableSettings, file_identity, load_file, server_file
from fedkmeans.schema import ConfigError

__all__ = ["FILE", "DataFile"]

_FORMATS = "(.csv, .tsv, .parquet or .npz)"


def _npz(path: str) -> NpzDataset:
    """The validated ``.npz`` file at ``path``, cached while the file is unchanged.

    The cache key holds the file's size and modification time (in ns), so a file
    replaced at the same path is read again, as the checkpoint's data digest expects.
    """
    stat = os.stat(path)
    return _npz_version(path, stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=4)
def _npz_version(path: str, size: int, mtime_ns: int) -> NpzDataset:
    del size, mtime_ns  # part of the cache key only
    return load_npz(path)


def _stamp(path: str | os.PathLike) -> tuple[int, int] | None:
    """(size, mtime in ns) of a file, or None if it cannot be stat'ed."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def _file(config: RunConfig, node_data_path: str = "") -> NpzDataset:
    """The user's data file, read and split by :mod:`fedkmeans.data.tables` (cached).

    ``node_data_path``: a deployed node's own file (its clients only). The cache key
    holds the files' sizes and modification times, so a file replaced at the same path
    is read again.
    """
    path = node_data_path or config.data.path
    settings = TableSettings.of(config)
    server = (None if node_data_path or not settings.server_path
              else _stamp(server_file(path, settings.server_path)))
    return _file_version(path, _stamp(path), server, settings, bool(node_data_path))


@lru_cache(maxsize=4)
def _file_version(path: str, stamp, server_stamp, settings: TableSettings,
                  node: bool) -> NpzDataset:
    del stamp, server_stamp  # part of the cache key only
    return load_file(path, settings, node=node)


@dataclass(frozen=True)
class DataFile(Dataset):
    """A table or ``.npz`` file of the user's, split into clients by ``data.partitioner``."""

    partitioners: tuple[str, ...] = PARTITIONERS

    def reads(self, flat: Mapping[str, Any]) -> tuple[str, ...]:
        """The file, its server rows, its columns, and the partitioner's own keys."""
        keys = ("data.path", "data.server-path", "data.server-fraction", "data.partitioner",
                "data.label-column", "data.features", "data.delimiter")
        partitioner = flat.get("data.partitioner", "natural-id")
        return keys + {"natural-id": ("data.client-column",), "iid": ("data.num-clients",),
                       "dirichlet": ("data.num-clients", "data.dirichlet-alpha")
                       }.get(partitioner, ())

    def client_ids(self, config: RunConfig, node_data_path: str = "") -> np.ndarray:
        """The file's client ids."""
        return _file(config, node_data_path).client_ids().astype(np.int64)

    def node_client_ids(self, config: RunConfig, partition_id: int,
                        num_partitions: int, node_data_path: str = "") -> np.ndarray:
        """A node's own file: all its clients; else every ``num_partitions``-th client."""
        ids = self.client_ids(config, node_data_path)
        if node_data_path:
            return ids
        return ids[np.arange(ids.size) % num_partitions == partition_id]

    def client(self, config: RunConfig, cid: int, node_data_path: str = "") -> Points:
        """One client's rows."""
        return _file(config, node_data_path).client_data(int(cid))

    def server(self, config: RunConfig) -> Points:
        """``data.server-path``, ``server_x`` of an ``.npz`` or ``data.server-fraction``."""
        data = _file(config)
        return data.server_x, data.server_y

    def pooled(self, config: RunConfig) -> Points | None:
        """Every client's rows; None in deployment without ``data.path``."""
        if not config.data.path:
            return None
        data = _file(config)
        return data.x, data.y

    def identity(self, config: RunConfig) -> dict[str, Any]:
        """The file (path, size, mtime) and the keys that select rows and columns."""
        stat = Path(config.data.path).stat()
        return {"path": str(Path(config.data.path).resolve()), "size": stat.st_size,
                "mtime": stat.st_mtime_ns, **file_identity(config)}

    def files(self, config: RunConfig) -> list[Path]:
        """``data.path`` and, if set, the server's own file."""
        if not config.data.path:
            return []
        paths = [Path(config.data.path).expanduser()]
        if config.data.server_path:
            paths.append(server_file(config.data.path, config.data.server_path))
        return paths

    def resolve(self, config: RunConfig, flat: Mapping[str, Any]) -> dict[str, Any]:
        """``data.path`` made absolute (the ``flower`` engine's server runs elsewhere).

        Raises
        ------
        ConfigError
            The path is empty or names no file.
        """
        raw = str(flat.get("data.path", "") or "")
        if not raw:
            raise ConfigError(f"config key 'data.path' must name an existing data file "
                              f"{_FORMATS} when data.name={config.data.name!r}, got ''")
        path = Path(raw).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(f"config key 'data.path' must name an existing data file "
                              f"{_FORMATS}, got {raw!r} (resolved to {path})")
        return {**flat, "data.path": str(path)}


#: ``dataset=file``: your own file, ``data.path=/abs/or/relative/file.{csv,tsv,parquet,
#: npz}``. Tables: one row per point, a client-id column (``data.client-column``), or no
#: client column and ``partitioner=iid|dirichlet``; the server's data from
#: ``data.server-path`` or ``data.server-fraction``. ``.npz``: keys x, client, optional
#: y, server_x, optional server_y. Full format: docs/own-data.md. ``npz`` is the old
#: name of the same option. Set ``privacy.data-radius`` for your data's scale (or
#: ``auto``, the default).
FILE = register(DataFile(
    "file", "your own data file: CSV, TSV, Parquet or .npz (docs/own-data.md)",
    presets={"file": {}, "npz": {}}, aliases=("npz",),
))
