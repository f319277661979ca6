"""The window a run gives its observers, and the attacks that are built from it.

An observer sees what the server sees, at the points where it sees it, and changes
nothing (wrap, don't fork): the curious server (:mod:`fedkmeans.attacks.curious`) is
one, the audits' recorders are others. :class:`RunObserver` declares every hook with
a no-op default, so the honest path calls each hook on every observer without asking
whether it exists, and an observer overrides only what it wants:

=====================  ===========================================  =====================
hook                   when                                         called by
=====================  ===========================================  =====================
``on_start``           the resolved settings, before any round      the runner
``on_broadcast``       what the server sends in a round, to whom    the pool
``on_client_rows``     one message's accepted rows, before folding  the pool (opt-in)
``on_replies``         a round's replies (folded, stacked, SecAgg)  the pool
``on_release``         each aggregate before and after its noise    the server context
``report``             the end of the run: its section of the       the runner
                       result (``result_key``), or None
``summary_lines``      the console lines of that section            the runner
=====================  ===========================================  =====================

What ``attack = <name>`` selects (an observer's builder, by name) is the harness's
(:mod:`fedkmeans.experiment.registries`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from fedkmeans.config import ProtocolConfig
from fedkmeans.server.replies import Replies

__all__ = ["RunObserver"]


class RunObserver:
    """Every hook an observer of a run may implement; each is a no-op here."""

    #: The pool builds each message's full rows for :meth:`on_client_rows` only for
    #: observers that set this (the honest server never holds them).
    wants_client_rows: ClassVar[bool] = False
    #: Key of :meth:`report`'s section in ``result.json``.
    result_key: ClassVar[str] = "observer"

    def on_start(self, config: ProtocolConfig) -> None:
        """Take the run's resolved settings (``auto`` replaced), before any round."""

    def on_broadcast(self, round_name: str, arrays: dict, clients: np.ndarray) -> None:
        """See what the server sends in ``round_name`` and to which clients."""

    def on_client_rows(
        self, round_name: str, client_ids: np.ndarray, rows: Mapping[str, np.ndarray]
    ) -> None:
        """See one message's accepted rows, before they are folded and dropped.

        Called only when :attr:`wants_client_rows` is set; the rows are the pool's
        (copy what you keep).
        """

    def on_replies(self, round_name: str, replies: Replies) -> None:
        """See a round's replies (running sums, stacked rows, or SecAgg+ noisy sums)."""

    def on_release(
        self, stage: str, before: np.ndarray | None, after: np.ndarray
    ) -> None:
        """See the aggregate of release ``stage`` before (None: SecAgg+) and after noise."""

    def report(self, *, centers: np.ndarray, result: dict) -> dict | None:
        """The observer's section of the result (None: it adds none)."""
        return None

    def summary_lines(self, report: dict) -> list[str]:
        """The console lines of :meth:`report`'s section."""
        return []
