"""The paper's Gaussian mixture as a data set (``dataset=mixture``, ``mixture-client``).

The generation is :mod:`fedkmeans.data.mixture`: every client from its own seed path,
so a node generates only its clients, and the server's data from another.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedkmeans.data.catalog import Dataset, DataSettings, Points, RunConfig, register
from fedkmeans.data.mixture import mixture_block, mixture_client, mixture_server

__all__ = ["MIXTURE", "Mixture"]

#: Rows of the pooled mixture generated at a time (a block of clients).
POOL_BLOCK_ROWS = 1 << 16


def _kwargs(data: DataSettings) -> dict[str, Any]:
    return {"k": data.components, "dim": data.dim, "n_points": data.points_per_client,
            "variance": data.variance, "partition": data.partition,
            "dirichlet_alpha": data.dirichlet_alpha}


@dataclass(frozen=True)
class Mixture(Dataset):
    """K Gaussian components in d dimensions, ``data.num-clients`` generated clients."""

    def reads(self, flat: Mapping[str, Any]) -> tuple[str, ...]:
        """The mixture's shape and sizes (``data.dirichlet-alpha`` with its partition)."""
        keys = ("data.dim", "data.components", "data.num-clients", "data.points-per-client",
                "data.variance", "data.partition", "data.server-points-per-component",
                "data.server-uniform-points")
        return keys + (("data.dirichlet-alpha",)
                       if flat.get("data.partition") == "dirichlet" else ())

    def client_ids(self, config: RunConfig, node_data_path: str = "") -> np.ndarray:
        """``0 .. data.num-clients - 1``."""
        return np.arange(config.data.num_clients, dtype=np.int64)

    def client(self, config: RunConfig, cid: int, node_data_path: str = "") -> Points:
        """Client ``cid``'s points, generated from its own seed path."""
        return mixture_client(config.seed, int(cid), **_kwargs(config.data))

    def server(self, config: RunConfig) -> Points:
        """Points per component plus uniform out-of-distribution points."""
        data = config.data
        return mixture_server(
            config.seed, k=data.components, dim=data.dim,
            per_component=data.server_points_per_component,
            uniform=data.server_uniform_points, variance=data.variance,
        )

    def server_points(self, config: RunConfig) -> tuple[int, str]:
        """Components x points per component + uniform points."""
        d = config.data
        return (d.components * d.server_points_per_component + d.server_uniform_points,
                " = data.components * data.server-points-per-component + "
                "data.server-uniform-points")

    def declared_clients(self, config: RunConfig) -> int:
        """``data.num-clients``."""
        return config.data.num_clients

    def declared_dim(self, config: RunConfig) -> int:
        """``data.dim``."""
        return config.data.dim

    def block(self, config: RunConfig, ids: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The clients generated straight into one array (:func:`mixture_block`)."""
        ids = np.asarray(ids)
        x, y = mixture_block(config.seed, ids.tolist(), **_kwargs(config.data))
        return x, y, np.full(ids.size, config.data.points_per_client, dtype=np.int64)

    def pooled_points(self, config: RunConfig) -> tuple[np.ndarray, bool]:
        """Every client generated into one (n, d) array, a block of clients at a time.

        The pooled data exist once, with no per-client arrays or labels beside them.
        """
        data = config.data
        n, clients = data.points_per_client, data.num_clients
        x = np.empty((clients * n, data.dim))
        step = max(1, POOL_BLOCK_ROWS // n)
        for start in range(0, clients, step):
            ids = range(start, min(clients, start + step))
            mixture_block(config.seed, ids, **_kwargs(data),
                          out=x[start * n:(start + len(ids)) * n])
        return x, True

    def fresh_points(self, config: RunConfig, n: int) -> np.ndarray:
        """Points of clients past the last one (generated, held by no client)."""
        per, first = config.data.points_per_client, config.data.num_clients
        parts = [self.client(config, first + i)[0] for i in range(math.ceil(n / per))]
        return np.concatenate(parts)[:n]

    def identity(self, config: RunConfig) -> dict[str, Any]:
        """The generating keys and the seed."""
        data = config.data
        return {"seed": config.seed, "dim": data.dim, "components": data.components,
                "clients": data.num_clients, "points": data.points_per_client,
                "variance": data.variance, "partition": data.partition,
                "alpha": data.dirichlet_alpha}


#: The data-point level federation: 100 clients x 1000 points; the server's data 20
#: points per component + 100 uniform out-of-distribution points; Delta = 11 (99.9 % of
#: the points inside).
_PAPER = {"data.dim": 100, "data.components": 10, "data.num-clients": 100,
          "data.points-per-client": 1000, "data.server-points-per-component": 20,
          "data.server-uniform-points": 100, "k": 10, "privacy.data-radius": 11.0}

#: ``mixture-client``: the paper's client-level federation, 2000 clients x 50 points,
#: with per-client bounds from the generating distribution (never from client data): a
#: 50-point client has ||sum p p^T||_F ~ 1450 and ||sums||_F ~ 110. A server point
#: carries ~500 client points, so noisy weights below 200 are dropped (they are the
#: out-of-distribution points the noise lifts). Use with ``privacy=client``.
MIXTURE = register(Mixture(
    "mixture", "the paper's Gaussian mixture (K = 10, d = 100, variance 0.5)",
    presets={"mixture": _PAPER, "mixture-client": {
        **_PAPER, "data.num-clients": 2000, "data.points-per-client": 50,
        "privacy.clip-covariance": 1500.0, "privacy.clip-sums": 110.0,
        "privacy.clip-histogram": 50.0, "privacy.clip-counts": 50.0,
        "privacy.min-server-weight": 200.0}},
))
