"""The curious server as a strategy: a wrapper around any of :mod:`fedkmeans.strategies`.

As Flower's DP wrappers wrap a strategy, :class:`CuriousServer` wraps one of ours: the
wrapped strategy runs unchanged (the same rounds, noise and ledger: the result is the
honest server's), with the curious observer (:mod:`fedkmeans.attacks.curious`, built
through the attack registry as ``attack = curious`` builds it) attached to every hook an
honest server has. It sees every client's reply and every release before and after
noise, and at the end runs its one-run attacks. Its report is its own: the attribute
:attr:`CuriousServer.report` and, if asked, a JSON file; never the wrapped result's
release. Without ground truth (the nodes' own data, which the server cannot load) the
report holds what was observed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid, PrivacySpent
from flwr.serverapp.strategy import Strategy

from fedkmeans.experiment.registries import attack
from fedkmeans.spill_files import write_owner_only
from fedkmeans.strategies import KMeansResult, KMeansStrategy

__all__ = ["CuriousServer"]


class CuriousServer(Strategy):
    """Run ``strategy`` as an honest-but-curious server; keep the attacks' report apart.

    Parameters
    ----------
    strategy : KMeansStrategy
        The strategy to run (its config, rounds and release are untouched).
    report_path : str or Path, optional
        Where to write the report as JSON, owner-only (0600): it is not publishable. It
        holds the attacks' success metrics on the clients' replies and exact counts
        computed from them (``clients_observed``, the numbers of members and
        non-members scored), which differ between neighbouring federations. None: only
        :attr:`report`.

    Attributes
    ----------
    report : dict or None
        After :meth:`start`: the curious server's report (not private: attack scores
        and exact counts of what it observed).
    """

    def __init__(self, strategy: KMeansStrategy, report_path: str | Path | None = None) -> None:
        if not isinstance(strategy, KMeansStrategy):
            raise TypeError(f"CuriousServer wraps a fedkmeans strategy, got "
                            f"{type(strategy).__name__}")
        self.strategy = strategy
        self.report_path = None if report_path is None else Path(report_path)
        self.report: dict | None = None

    def start(self, grid: Grid, *args: Any, **kwargs: Any) -> KMeansResult:
        """The wrapped strategy's :meth:`~KMeansStrategy.start`, observed; its result as is."""
        observers = list(attack("curious").build(self.strategy.config))
        kwargs["observers"] = [*kwargs.get("observers", ()), *observers]
        result = self.strategy.start(grid, *args, **kwargs)
        as_result = {"privacy": result.privacy, "centers": result.release["centers"]}
        centers = result.arrays["centers"].numpy()
        reports = [o.report(centers=centers, result=as_result) for o in observers]
        self.report = reports[0] if len(reports) == 1 else {"observers": reports}
        if self.report_path is not None:
            self.report_path.parent.mkdir(parents=True, exist_ok=True)
            write_owner_only(self.report_path, json.dumps(self.report, indent=2, default=_plain))
        return result

    # Flower's hooks and the privacy report are the wrapped strategy's.
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """The wrapped strategy's (not a hook of this protocol)."""
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The wrapped strategy's (not a hook of this protocol)."""
        return self.strategy.aggregate_train(server_round, replies)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord,
                           config: ConfigRecord, grid: Grid) -> Iterable[Message]:
        """The wrapped strategy's non-private evaluation round."""
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]
                           ) -> MetricRecord | None:
        """The wrapped strategy's non-private evaluation round."""
        return self.strategy.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        """The wrapped strategy's summary (the wrapper changes no setting)."""
        self.strategy.summary()

    def privacy_spent(self) -> PrivacySpent | None:
        """The wrapped strategy's ledger: observing spends nothing."""
        return self.strategy.privacy_spent()


def _plain(value: Any) -> Any:
    """JSON for NumPy scalars and arrays in a report."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
