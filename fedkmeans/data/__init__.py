"""Data access: which clients a node hosts, their points, and the server's data.

A node loads only its own clients. In simulation a node is told its
``partition-id`` and ``num-partitions`` and hosts the virtual clients whose index is
congruent to its partition id; in deployment a node's ``data-path`` node config names
its own ``.npz`` file and it hosts every client in that file.

A data file of the user's (``data.name = npz``: ``.npz``, CSV or Parquet) is read,
checked and split into clients by :mod:`fedkmeans.data.tables` (cached while the file
is unchanged).

Real data sets (``nycflights``, ``mplsstops``, ``digits``, ``diamonds``) are parsed once
per process from their PyPI package into a :class:`~fedkmeans.data.tabular.Federation`
(cached); a node then reads only the rows of the client ids it hosts.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from fedkmeans.data.catalog import REAL_DATASETS, parse_holdout
from fedkmeans.data.mixture import mixture_client, mixture_server
from fedkmeans.data.npz import NpzDataset, load_npz
from fedkmeans.data.tables import TableSettings, load_file, server_file
from fedkmeans.data.tabular import Federation
from fedkmeans.seeding import generator

if TYPE_CHECKING:  # the config validates against data.catalog, so no runtime import
    from fedkmeans.config import DataConfig, ExperimentConfig


def _npz(path: str) -> NpzDataset:
    """The validated file at ``path``, cached while the file is unchanged.

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


def _file(config: ExperimentConfig, node_data_path: str = "") -> NpzDataset:
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


def _module(name: str):
    """The module of a real data set (imported on demand: optional packages)."""
    from fedkmeans.data import diamonds, digits, mplsstops, nycflights

    return {"nycflights": nycflights, "mplsstops": mplsstops, "digits": digits,
            "diamonds": diamonds}[name]


@lru_cache(maxsize=2)
def _columns(name: str) -> dict[str, np.ndarray]:
    """The parsed table of a real data set (once per process)."""
    return _module(name).load_columns()


@lru_cache(maxsize=4)
def _federation(
    name: str, holdout: str, min_points: int, max_clients: int, max_points: int
) -> Federation:
    return _module(name).build(
        _columns(name), parse_holdout(holdout), min_points=min_points,
        max_clients=max_clients, max_points=max_points,
    )


def real_federation(config: ExperimentConfig) -> Federation:
    """The federation of a real data set (``data.name`` in REAL_DATASETS), cached."""
    data = config.data
    return _federation(
        data.name, data.holdout, data.min_points_per_client, data.num_clients,
        data.points_per_client,
    )


def node_client_ids(
    config: ExperimentConfig, partition_id: int, num_partitions: int, node_data_path: str = ""
) -> np.ndarray:
    """Ids of the clients hosted by one node.

    Parameters
    ----------
    config : ExperimentConfig
    partition_id, num_partitions : int
        From the node config (simulation sets both).
    node_data_path : str
        The node's own data file (deployment); then all its clients are hosted.

    Returns
    -------
    ndarray of shape (n_hosted,), int64, sorted.
    """
    if config.data.name == "mixture":
        ids = np.arange(config.data.num_clients, dtype=np.int64)
        return ids[ids % num_partitions == partition_id]
    if config.data.name in REAL_DATASETS:
        ids = real_federation(config).client_ids()
        return ids[ids % num_partitions == partition_id]
    ids = _file(config, node_data_path).client_ids().astype(np.int64)
    if node_data_path:
        return ids
    return ids[np.arange(ids.size) % num_partitions == partition_id]


def _mixture_kwargs(data: DataConfig) -> dict:
    return {
        "k": data.components,
        "dim": data.dim,
        "n_points": data.points_per_client,
        "variance": data.variance,
        "partition": data.partition,
        "dirichlet_alpha": data.dirichlet_alpha,
    }


def load_client(
    config: ExperimentConfig, client_id: int, node_data_path: str = ""
) -> tuple[np.ndarray, np.ndarray | None]:
    """Points (n_j, d) and labels (n_j,) or None of one client."""
    if config.data.name == "mixture":
        return mixture_client(config.seed, int(client_id), **_mixture_kwargs(config.data))
    if config.data.name in REAL_DATASETS:
        return real_federation(config).client_data(int(client_id))
    return _file(config, node_data_path).client_data(int(client_id))


def load_server(config: ExperimentConfig) -> tuple[np.ndarray, np.ndarray | None]:
    """The server's own dataset Q: points (m, d) and labels (m,) or None."""
    if config.data.name == "mixture":
        data = config.data
        return mixture_server(
            config.seed,
            k=data.components,
            dim=data.dim,
            per_component=data.server_points_per_component,
            uniform=data.server_uniform_points,
            variance=data.variance,
        )
    if config.data.name in REAL_DATASETS:
        rng = generator(config.seed, "data", "server-points")
        return real_federation(config).server(rng, config.data.server_points)
    dataset = _file(config)
    return dataset.server_x, dataset.server_y


def load_pooled(config: ExperimentConfig) -> tuple[np.ndarray, np.ndarray | None] | None:
    """All training points, for NON-PRIVATE evaluation only (optimal cost).

    Returns None when the server cannot see the training data (deployment with
    per-node data files and no ``data.path``).
    """
    if config.data.name == "mixture":
        parts = [load_client(config, j) for j in range(config.data.num_clients)]
        x = np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        return x, y
    if config.data.name in REAL_DATASETS:
        federation = real_federation(config)
        return federation.x, federation.y
    if not config.data.path:
        return None
    dataset = _file(config)
    return dataset.x, dataset.y
