"""The round runner: one round at a time, checkpointed, timed, and shown as progress.

:class:`RoundRunner` is the part of the server's context that knows about rounds as
units of work, not about what they compute: it restores a round the checkpoint holds
(then no client is asked and nothing is released again), saves the round's outputs
with the ledger after it, keeps each round's wall time, and logs one progress line per
round. It holds no configuration: the same runner serves the run before and after the
plan (:meth:`fedkmeans.server.context.ServerContext.planned`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from fedkmeans.checkpoint import Checkpoint
from fedkmeans.console import say
from fedkmeans.privacy.accountant import PrivacyLedger

LOG = logging.getLogger(__name__)

__all__ = ["RoundRunner"]


@dataclass
class RoundRunner:
    """Runs a run's rounds: checkpoint, progress lines, timings, the run's warnings.

    Attributes
    ----------
    accountant : PrivacyLedger
        The run's ledger (the releaser records into it; saved with every round).
    non_private : list of str
        Releases made without noise (saved with every round).
    checkpoint : Checkpoint or None
        Restores the ledger once, when the runner is built, and every round it holds.
    timings : dict of str to float
        Seconds per round (and per :meth:`timed` block).
    round_outputs : dict of str to dict of str to ndarray
        Each round's outputs (computed or restored), by round name.
    expected_rounds : int
        Rounds the run will make (0 = unknown): the progress lines' total.
    progress : bool
        Log a progress line per round (the tuning's simulated runs do not).
    warnings : bool
        Log the run's warnings (:meth:`warn_once`); the tuning's simulated runs do not:
        a candidate's fallback is not the run's.
    """

    accountant: PrivacyLedger = field(default_factory=PrivacyLedger)
    non_private: list[str] = field(default_factory=list)
    checkpoint: Checkpoint | None = None
    timings: dict[str, float] = field(default_factory=dict)
    round_outputs: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    expected_rounds: int = 0
    progress: bool = True
    warnings: bool = True
    warned: set[str] = field(default_factory=set, repr=False)  #: kinds said (warn_once)
    _started: float = field(default_factory=time.perf_counter, repr=False)
    _done: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if self.checkpoint is not None:  # once per run: the runner outlives the plan
            self.checkpoint.restore(self.accountant)
            self.non_private[:] = self.checkpoint.non_private

    def round(
        self, name: str, compute: Callable[[], dict[str, np.ndarray]]
    ) -> dict[str, np.ndarray]:
        """Run one round (``compute``) unless the checkpoint already holds its outputs.

        Parameters
        ----------
        name : str
            Round name (``init-1``, ``lloyds-2``...), unique within the run.
        compute : callable returning dict of str to ndarray
            Queries the clients, releases and post-processes; returns what later
            rounds need.

        Returns
        -------
        dict of str to ndarray
            The round's outputs, computed now or restored (then no client is
            queried and no release is recorded again).
        """
        if self.checkpoint is not None and name in self.checkpoint.rounds:
            self._progress(name, "restored from the checkpoint")
            self.round_outputs[name] = self.checkpoint.rounds[name]
            return self.checkpoint.rounds[name]
        with self.timed(name):
            outputs = compute()
        if self.checkpoint is not None:
            self.checkpoint.save(name, outputs, self.accountant, self.non_private)
        self.round_outputs[name] = outputs
        self._progress(name, "done", f" in {self.timings[name]:.1f} s")
        return outputs

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Record the wall time of a block under ``name``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start

    def warn_once(self, key: str) -> Callable[[str], None]:
        """A ``warn(message)`` that logs the first warning of kind ``key`` in this run.

        Nothing is logged when the runner does not log :attr:`warnings`.
        """
        def warn(message: str) -> None:
            if self.warnings and key not in self.warned:
                self.warned.add(key)
                LOG.warning(message)
        return warn

    def _progress(self, name: str, what: str, took: str = "") -> None:
        """One ``[progress]`` line per round: the count of rounds (streamed by Flower).

        The rounds' names and number are public (the plan: ``(1)`` before it knows the
        number, ``(2/6)`` once it does); their timings depend on the clients' data, so
        the time, elapsed time and ETA need the operator's opt-in (:mod:`.console`).
        """
        self._done += 1
        if not self.progress:
            return
        elapsed = time.perf_counter() - self._started
        total = self.expected_rounds
        count = f"({self._done}/{total})" if total else f"({self._done})"
        timed = f"[progress] round {name} {what}{took} {count}, elapsed {elapsed:.1f} s"
        if total and self._done < total:
            timed += f", ETA {elapsed / self._done * (total - self._done):.0f} s"
        say(LOG, f"[progress] round {name} {what} {count}", timed)
