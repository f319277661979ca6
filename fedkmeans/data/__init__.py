"""Data access: which clients a node hosts, their points, and the server's data.

Every data set is one :class:`~fedkmeans.data.catalog.Dataset` in the registry
(:mod:`fedkmeans.data.catalog`), found by ``data.name``; these functions ask it. A node
loads only its own clients: in simulation it is told its ``partition-id`` and
``num-partitions``, in deployment its ``data-path`` node config names its own file.
"""

from __future__ import annotations

import numpy as np

from fedkmeans.data.catalog import RunConfig, dataset
from fedkmeans.data.files import _npz, _npz_version  # noqa: F401 (the caches, for tests)
from fedkmeans.data.real import _columns, _federation, real_federation  # noqa: F401


def node_client_ids(
    config: RunConfig, partition_id: int, num_partitions: int, node_data_path: str = ""
) -> np.ndarray:
    """Ids of the clients hosted by one node.

    Parameters
    ----------
    config : RunConfig
    partition_id, num_partitions : int
        From the node config (simulation sets both).
    node_data_path : str
        The node's own data file (deployment); then all its clients are hosted.

    Returns
    -------
    ndarray of shape (n_hosted,), int64, sorted.
    """
    return dataset(config.data.name).node_client_ids(
        config, partition_id, num_partitions, node_data_path)


def load_client(
    config: RunConfig, client_id: int, node_data_path: str = ""
) -> tuple[np.ndarray, np.ndarray | None]:
    """Points (n_j, d) and labels (n_j,) or None of one client."""
    return dataset(config.data.name).client(config, int(client_id), node_data_path)


def load_server(config: RunConfig) -> tuple[np.ndarray, np.ndarray | None]:
    """The server's own dataset Q: points (m, d) and labels (m,) or None."""
    return dataset(config.data.name).server(config)


def load_pooled(config: RunConfig) -> tuple[np.ndarray, np.ndarray | None] | None:
    """All training points, for NON-PRIVATE evaluation only (optimal cost).

    Returns None when the server cannot see the training data (deployment with
    per-node data files and no ``data.path``).
    """
    return dataset(config.data.name).pooled(config)
