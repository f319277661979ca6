"""What a stage's server step may use of the run: the stage context, declared.

A stage's server step (``Stage.server``) is handed the run's context ``ctx``; this
module says what that context offers, as a :class:`typing.Protocol`, so the stages
do not import the server layer above them. The server's implementation is
:class:`fedkmeans.server.context.ServerContext` (a facade over a round runner, a
releaser and the thresholds); the tuning's simulated runs use the same class over a
simulated pool. The context is immutable: what a step decides for the run's record
(the final check's outcome) goes to ``ctx.record``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from fedkmeans.config import ProtocolConfig
from fedkmeans.privacy.accountant import Release

__all__ = ["ClientView", "StageContext"]


class ClientView(Protocol):
    """The federation as a stage sees it: the dimension, the clients, a stacked query."""

    dim: int
    client_ids: np.ndarray

    def query(self, stage: str, clients: np.ndarray, arrays: Mapping[str, np.ndarray],
              expected: Mapping[str, tuple[int, ...]], config: Mapping | None = None,
              round_name: str | None = None, fold: Any = None) -> Any:
        """Ask ``clients`` for ``stage``'s statistics, every row kept (no noise: k-FED)."""


class StageContext(Protocol):
    """What a stage's server step may read and call.

    Implemented by :class:`fedkmeans.server.context.ServerContext`.
    """

    config: ProtocolConfig
    server_x: np.ndarray
    pool: ClientView
    releases: Mapping[str, Release]
    non_private: list[str]
    #: What the run decided on the way (``chosen_k``, ``spare_centers``, ``check``,
    #: ``estimates``): :class:`fedkmeans.server.context.RunRecord`, written by the steps.
    record: Any

    @property
    def check(self) -> dict | None:
        """The final check's outcome (``record.check``; None: not run)."""

    @property
    def estimates(self) -> Any:
        """The estimate round's release, read (``record.estimates``; None: none)."""

    @property
    def k(self) -> int:
        """Number of clusters (``config.k``, or the k chosen with ``k = auto``)."""

    def round(self, name: str, compute: Callable[[], dict[str, np.ndarray]]
              ) -> dict[str, np.ndarray]:
        """Run one round unless the checkpoint holds its outputs."""

    def query(self, stage: str, round_name: str, arrays: Mapping[str, np.ndarray],
              expected: Mapping[str, tuple[int, ...]]) -> Any:
        """Ask the round's sampled clients, folded into clipped running sums."""

    def release(self, replies: Any, statistic: str, stage: str, *,
                symmetric: bool = False) -> np.ndarray:
        """Clip, sum and add the noise planned for ``stage``; record it."""

    def choose_k(self, k: int) -> None:
        """Record the k the algorithm chose (``k = auto``)."""

    def extra_centers(self, k: int, eigen_gap: float, noise_norm: float) -> int:
        """FedDP-Init's spare centers."""

    def min_server_weight(self, stage: str) -> float:
        """Step 2's weight threshold."""

    def min_cluster_count(self, group: str, fallback: np.ndarray) -> float:
        """The count a cluster needs to leave its fallback center."""

    def eigenvalue_floor(self, stage: str) -> float:
        """Eigenvalues below this are noise."""

    def rng(self, *path: int | str) -> np.random.Generator:
        """Public randomness for ``path``."""

    def int_seed(self, *path: int | str) -> int:
        """An integer seed for ``path``."""
