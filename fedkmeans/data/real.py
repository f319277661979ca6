"""Real data sets shipped by a package: a table, parsed once, made into a federation.

A :class:`RealDataset` names the table's reader (``load_columns``, importing its package
on demand) and its ``build(columns, holdout, *, min_points, max_clients, max_points)``
(:mod:`fedkmeans.data.tabular`, :mod:`fedkmeans.data.labelskew`). The table is parsed
once per process and the federation cached, so a node reads only its clients' rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from fedkmeans.data.catalog import Dataset, Points, RunConfig, dataset, parse_holdout
from fedkmeans.data.tabular import Federation
from fedkmeans.seeding import generator

__all__ = ["RealDataset", "real_federation"]


@dataclass(frozen=True)
class RealDataset(Dataset):
    """A table from a package, clients by a column, a held-out slice for the server.

    Attributes
    ----------
    load_columns : callable
        ``load_columns() -> dict of str to ndarray``: the parsed table.
    build : callable
        ``build(columns, (column, value), *, min_points, max_clients, max_points)`` ->
        :class:`~fedkmeans.data.tabular.Federation`.
    """

    load_columns: Callable[[], dict[str, np.ndarray]] | None = None
    build: Callable[..., Federation] | None = None
    whole_table: bool = True

    def reads(self, flat: Mapping[str, Any]) -> tuple[str, ...]:
        """The held-out slice and the caps on clients and their rows."""
        return ("data.holdout", "data.server-points", "data.min-points-per-client",
                "data.num-clients", "data.points-per-client")

    def client_ids(self, config: RunConfig, node_data_path: str = "") -> np.ndarray:
        """The federation's client ids."""
        return real_federation(config).client_ids()

    def client(self, config: RunConfig, cid: int, node_data_path: str = "") -> Points:
        """One client's rows."""
        return real_federation(config).client_data(int(cid))

    def server(self, config: RunConfig) -> Points:
        """``data.server-points`` held-out rows, a seeded subset (public randomness)."""
        rng = generator(config.seed, "data", "server-points")
        return real_federation(config).server(rng, config.data.server_points)

    def pooled(self, config: RunConfig) -> Points:
        """Every client's rows (non-private evaluation)."""
        federation = real_federation(config)
        return federation.x, federation.y

    def server_points(self, config: RunConfig) -> tuple[int, str] | None:
        """``data.server-points`` when set (else every held-out row: known once loaded)."""
        n = config.data.server_points
        return (n, " = data.server-points") if n else None

    def identity(self, config: RunConfig) -> dict[str, Any]:
        """Selection keys, and the federation's shape and checksum."""
        data, federation = config.data, real_federation(config)
        return {"dataset": data.name, "holdout": data.holdout, "clients": data.num_clients,
                "min_points": data.min_points_per_client, "shape": list(federation.x.shape),
                "checksum": float(np.sum(federation.x)), "seed": config.seed}


@lru_cache(maxsize=2)
def _columns(name: str) -> dict[str, np.ndarray]:
    """The parsed table of a real data set (once per process)."""
    return dataset(name).load_columns()


@lru_cache(maxsize=4)
def _federation(
    name: str, holdout: str, min_points: int, max_clients: int, max_points: int
) -> Federation:
    return dataset(name).build(
        _columns(name), parse_holdout(holdout), min_points=min_points,
        max_clients=max_clients, max_points=max_points,
    )


def real_federation(config: RunConfig) -> Federation:
    """The federation of a :class:`RealDataset` (cached per process)."""
    data = config.data
    return _federation(
        data.name, data.holdout, data.min_points_per_client, data.num_clients,
        data.points_per_client,
    )
