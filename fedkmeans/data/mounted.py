"""The nodes' own data, mounted by a user's ClientApp (``data.name = mounted``).

The data set of a run through the library's strategies (:mod:`fedkmeans.strategies`):
each node's clients are what the user's ``points(context)`` returns
(:func:`fedkmeans.client.mount`), and the server's data Q is the strategy's
``server_data`` argument. Nothing here can load either: the server never sees the
clients' points, and the experiment harness, which loads data through this registry,
refuses the name before any node starts (:meth:`MountedData.resolve`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedkmeans.data.catalog import Dataset, Points, RunConfig, register
from fedkmeans.schema import ConfigError

__all__ = ["MOUNTED", "MountedData"]

_WHERE = ("the nodes' own data, mounted by the user's ClientApp (fedkmeans.client.mount), "
          "with the server's data given to a strategy (fedkmeans.strategies)")


class MountedData(Dataset):
    """A data set whose clients live with the user's nodes and whose Q is an argument."""

    def client_ids(self, config: RunConfig, node_data_path: str = "") -> np.ndarray:
        """Unknown here: the nodes announce their ids when they register."""
        raise ConfigError(f"config key 'data.name' = 'mounted' means {_WHERE}; "
                          "its client ids are known only to the nodes")

    def client(self, config: RunConfig, cid: int, node_data_path: str = "") -> Points:
        """Never loadable here: the points stay with the user's node."""
        raise ConfigError(f"config key 'data.name' = 'mounted' means {_WHERE}; "
                          "the server cannot load a client's points")

    def server(self, config: RunConfig) -> Points:
        """Not in the registry: the strategy's ``server_data`` argument."""
        raise ConfigError(f"config key 'data.name' = 'mounted' means {_WHERE}; "
                          "the server's data is the strategy's server_data argument")

    def reads(self, flat: Mapping[str, Any]) -> tuple[str, ...]:
        """No ``data.*`` key: the nodes load their own points."""
        return ()

    def pooled(self, config: RunConfig) -> Points | None:
        """The server cannot see the clients' points (no optimal cost)."""
        return None

    def resolve(self, config: RunConfig, flat: Mapping[str, Any]) -> dict[str, Any]:
        """Refused by the experiment harness (its preflight), before any node starts."""
        raise ConfigError(f"config key 'data.name' must name a data set the experiment can "
                          f"load; 'mounted' means {_WHERE}")


#: ``data.name = mounted``: set by :mod:`fedkmeans.strategies`, not by an experiment.
MOUNTED = register(MountedData("mounted", _WHERE))
