"""A round's accepted replies: how they are held (stacked or folded) and handed on.

:class:`Replies` is what a round gives the strategy and the observers. The pool puts
each validated message's rows into a :class:`Sink`: :class:`StackingSink` keeps one
row per requested client in client-id order (k-FED, audits); :class:`FoldingSink`
clips and adds them to running sums (:class:`~fedkmeans.server.aggregation.
RunningSums`) and drops them (the protocol rounds: memory independent of clients).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedkmeans.server.aggregation import RunningSums

__all__ = ["FoldingSink", "Replies", "Sink", "StackingSink"]


@dataclass
class Replies:
    """Per-client statistics of one round, stacked in increasing client id.

    Attributes
    ----------
    client_ids : ndarray of shape (m,)
        Clients with a row in ``stats``; empty when ``aggregated``.
    stats : dict of str to ndarray of shape (m, ...)
        Per-client rows, or, when ``aggregated``, one row: the noisy sum.
    aggregated : bool
        Secure aggregation: ``stats`` hold the sums of the clients' clipped statistics
        plus their noise shares (already noisy); the server never saw a client's row.
    contributors : ndarray of shape (n,) or None
        ``aggregated`` only: the clients whose statistics are in the sums.
    noise_scales : dict of str to float
        ``aggregated`` only: the calibrated sigma of each statistic, which the summed
        noise shares of at least ``n_min`` survivors guarantee (what the ledger records).
    folded : bool
        Streaming aggregation: ``stats`` hold one row each, the sums of the accepted
        clients' rows clipped on the server (exact, no noise yet); ``client_ids``
        are the accepted clients.
    """

    client_ids: np.ndarray
    stats: dict[str, np.ndarray]
    aggregated: bool = False
    contributors: np.ndarray | None = None
    noise_scales: dict[str, float] = field(default_factory=dict)
    folded: bool = False



class Sink:
    """Where a round's accepted rows go: stacked or folded."""

    def add(self, ids: np.ndarray, rows: dict[str, np.ndarray], triangles=frozenset()) -> None:
        """Take one message's accepted rows (``triangles``: names sent as upper triangles)."""
        raise NotImplementedError

    def client_ids(self) -> np.ndarray:
        """The clients taken so far, in increasing id."""
        raise NotImplementedError

    def replies(self) -> Replies:
        """The round's :class:`Replies`."""
        raise NotImplementedError


class FoldingSink(Sink):
    """Clip and add each message's rows; keep only the sums and the client ids."""

    def __init__(self, expected, fold):
        self._sums = RunningSums(expected, fold)
        self._ids: list[np.ndarray] = []

    def add(self, ids, rows, triangles=frozenset()):  # noqa: D102
        self._sums.add(rows, triangles)
        self._ids.append(ids)

    def client_ids(self):  # noqa: D102
        return np.sort(np.concatenate([np.zeros(0, np.int64), *self._ids]))

    def replies(self):  # noqa: D102
        return Replies(self.client_ids(), self._sums.as_rows(), folded=True)


class StackingSink(Sink):
    """One row per requested client, in increasing id, reserved up front."""

    def __init__(self, requested, expected):
        self._slots = np.sort(np.concatenate([np.zeros(0, np.int64), *requested.values()]))
        self._stats = {name: np.empty((self._slots.size, *shape))
                       for name, shape in expected.items()}
        self._filled = np.zeros(self._slots.size, dtype=bool)

    def add(self, ids, rows, triangles=frozenset()):  # noqa: D102
        where = np.searchsorted(self._slots, ids)
        for name, value in rows.items():
            self._stats[name][where] = value
        self._filled[where] = True

    def client_ids(self):  # noqa: D102
        return self._slots[self._filled]

    def replies(self):  # noqa: D102
        stats = self._stats
        if not self._filled.all():
            stats = {name: _keep_rows(value, self._filled) for name, value in stats.items()}
        return Replies(self.client_ids(), stats)


def _keep_rows(stacked: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Rows of ``stacked`` where ``keep``, moved up in place (no second copy)."""
    rows = np.flatnonzero(keep)
    for target, source in enumerate(rows.tolist()):
        if target != source:
            stacked[target] = stacked[source]
    return stacked[: rows.size]
