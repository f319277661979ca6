"""What a stage's server step may use of the run: a context composed of parts with one job each.

:class:`ServerContext` implements :class:`fedkmeans.stages.context.StageContext`, the
surface the stages call (``ctx.round``, ``ctx.query``, ``ctx.release``, the thresholds,
the seeds), by handing each call to the part whose job it is:

* :class:`~fedkmeans.server.rounds.RoundRunner`: rounds, checkpoint, progress, timings
  and the run's warnings;
* :class:`~fedkmeans.server.releaser.Releaser`: the server's clip, the sum, the
  calibrated noise, the ledger and the observers, and the release-time check that the
  bound it clipped with is the one the ledger records;
* :class:`~fedkmeans.server.thresholds.Thresholds`: step 2's weight threshold, the
  cluster count threshold, the eigenvalue floor and the spare centers;
* :class:`RunRecord`: what the run decided and read on the way (the chosen k, the spare
  centers, the final check, the estimates), published in ``release.json``.

The context itself is immutable: the stages keep the one they are handed. A run builds
one before its plan (the declared config: the estimate round) and a second one from
the plan (:meth:`ServerContext.planned`: the resolved config, the calibrated releases,
the settings the nodes are sent and SecAgg reading the same releases); the two share
the runner, the ledger and the record, so a round, a release or a decision of the
first is the second's too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType

import numpy as np

from fedkmeans.checkpoint import Checkpoint
from fedkmeans.config import ProtocolConfig
from fedkmeans.privacy.accountant import PrivacyLedger, Release
from fedkmeans.privacy.randomness import PrivateRandomness
from fedkmeans.seeding import generator, integer_seed
from fedkmeans.server.aggregation import Fold
from fedkmeans.server.observer import RunObserver
from fedkmeans.server.releaser import Releaser
from fedkmeans.server.replies import Replies
from fedkmeans.server.rounds import RoundRunner
from fedkmeans.server.thresholds import Thresholds
from fedkmeans.stages import stage as stage_named

__all__ = ["RunRecord", "ServerContext"]


@dataclass
class RunRecord:
    """What a run decided and read on the way; published in ``release.json``.

    Attributes
    ----------
    chosen_k : int or None
        The k chosen by the algorithm with ``k = auto`` (:meth:`ServerContext.choose_k`).
    spare_centers : dict or None
        FedDP-Init's spare centers and why (:meth:`ServerContext.extra_centers`).
    check : dict or None
        The final check's outcome (:func:`~fedkmeans.stages.check.final_check`), if run.
    estimates : object or None
        The estimate round's release, read (:mod:`fedkmeans.tuning.estimates`), if run.
    """

    chosen_k: int | None = None
    spare_centers: dict | None = None
    check: dict | None = None
    estimates: object | None = None


@dataclass(frozen=True, eq=False)
class ServerContext:
    """Everything an algorithm and its stages may use on the server (module docstring).

    Build one with :meth:`of` (or :func:`fedkmeans.server.wiring.wire_context`), and the
    one after the plan with :meth:`planned`.

    Attributes
    ----------
    config : ProtocolConfig
        The declared config before the plan, the resolved one after it.
    pool : ClientPool
        Or a pool with its interface (the tuning's simulated one).
    server_x : ndarray of shape (m, d)
        The server's own (public) data Q, after the public transform.
    runner : RoundRunner
    releaser : Releaser
    record : RunRecord
    streaming : bool
        Fold replies into running clipped sums as they arrive (False: stack every
        client's row first, the earlier path; the audits' statistical pass and the
        equivalence tests).
    """

    config: ProtocolConfig
    pool: object
    server_x: np.ndarray
    runner: RoundRunner
    releaser: Releaser
    record: RunRecord = field(default_factory=RunRecord)
    streaming: bool = True

    @classmethod
    def of(
        cls, config: ProtocolConfig, pool, server_x: np.ndarray,
        releases: Mapping[str, Release], *, checkpoint: Checkpoint | None = None,
        observers: Sequence[RunObserver] = (), progress: bool = True, warnings: bool = True,
        streaming: bool = True,
    ) -> ServerContext:
        """A run's first context: a new runner (restoring ``checkpoint``), releaser, record.

        Parameters
        ----------
        config : ProtocolConfig
        pool : ClientPool or a pool with its interface
        server_x : ndarray of shape (m, d)
        releases : mapping of str to Release
            The calibrated releases known so far, by stage.
        checkpoint : Checkpoint, optional
            Restores the ledger and the rounds it holds (:class:`RoundRunner`).
        observers : sequence of RunObserver
            Shown every release.
        progress, warnings : bool
            Log progress lines and warnings (the tuning's simulated runs do not).
        streaming : bool
        """
        runner = RoundRunner(checkpoint=checkpoint, progress=progress, warnings=warnings)
        releaser = Releaser(
            config.privacy, config.is_private, MappingProxyType(dict(releases)),
            randomness=_private_randomness(config), accountant=runner.accountant,
            non_private=runner.non_private, observers=tuple(observers))
        return cls(config, pool, server_x, runner, releaser, streaming=streaming)

    def planned(self, config: ProtocolConfig, releases: Iterable[Release], *,
                settings: Mapping | None = None) -> ServerContext:
        """The context for the rounds after ``releases`` are planned; this one is unchanged.

        The estimate round runs with the declared config (``auto`` unresolved) and its
        release; the protocol with the resolved config and the calibrated plan. The new
        context has a releaser and thresholds of ``config`` and this context's releases
        with ``releases`` added, and a pool view that sends the nodes ``settings`` (the
        resolved clip bounds, the public transform; None: the same as now) with every
        request and whose SecAgg reads the same releases; it shares the runner, the
        ledger, the observers and the record with this one.
        """
        known = MappingProxyType({**self.releaser.releases, **{r.stage: r for r in releases}})
        releaser = replace(self.releaser, privacy=config.privacy, private=config.is_private,
                           releases=known, randomness=_private_randomness(config))
        return replace(self, config=config, releaser=releaser,
                       pool=_pool_view(self.pool, config, known, settings))

    # -- the parts --------------------------------------------------------------------
    @cached_property
    def thresholds(self) -> Thresholds:
        """The run's thresholds, from this context's config and planned releases."""
        return Thresholds(self.config.privacy, self.config.is_private, self.config.k_auto,
                          self.releaser.releases, self.server_x, self.pool.dim)

    @property
    def releases(self) -> Mapping[str, Release]:
        """Calibrated noise of every planned release, by stage name (read-only)."""
        return self.releaser.releases

    @property
    def accountant(self) -> PrivacyLedger:
        """The run's ledger: every release recorded when it happens."""
        return self.releaser.accountant

    @property
    def non_private(self) -> list[str]:
        """Releases made without noise."""
        return self.releaser.non_private

    @property
    def timings(self) -> dict[str, float]:
        """Seconds per round."""
        return self.runner.timings

    @property
    def round_outputs(self) -> dict[str, dict[str, np.ndarray]]:
        """Each round's outputs (computed or restored), by round name."""
        return self.runner.round_outputs

    @property
    def private_randomness(self) -> PrivateRandomness:
        """Source of the noise and client sampling: secret unless the run opts out."""
        return self.releaser.randomness

    # -- the record -----------------------------------------------------------------
    @property
    def check(self) -> dict | None:
        """The final check's outcome, if run (:attr:`RunRecord.check`)."""
        return self.record.check

    @property
    def estimates(self):
        """The estimate round's release, read, if run (:attr:`RunRecord.estimates`)."""
        return self.record.estimates

    @property
    def spare_centers(self) -> dict | None:
        """FedDP-Init's spare centers and why, once decided."""
        return self.record.spare_centers

    @property
    def k(self) -> int:
        """Number of clusters: ``config.k``, or the k chosen with ``k = auto``."""
        chosen = self.record.chosen_k
        return chosen if chosen is not None else self.config.k

    def choose_k(self, k: int) -> None:
        """Record the k an algorithm chose (``k = auto``): later rounds and the result use it."""
        self.record.chosen_k = int(k)

    def extra_centers(self, k: int, eigen_gap: float, noise_norm: float) -> int:
        """Spare centers of FedDP-Init steps 2-3 (:meth:`Thresholds.extra_centers`).

        Recorded in :attr:`spare_centers`.
        """
        self.record.spare_centers = self.thresholds.extra_centers(k, eigen_gap, noise_norm)
        return self.record.spare_centers["extra_centers"]

    # -- thresholds -------------------------------------------------------------------
    def min_server_weight(self, stage: str) -> float:
        """Step 2's weight threshold (:meth:`Thresholds.min_server_weight`)."""
        return self.thresholds.min_server_weight(stage)

    def min_cluster_count(self, group: str, fallback: np.ndarray) -> float:
        """Count to leave ``fallback`` (:meth:`Thresholds.min_cluster_count`)."""
        return self.thresholds.min_cluster_count(group, fallback)

    def eigenvalue_floor(self, stage: str) -> float:
        """Eigenvalues below this are noise (:meth:`Thresholds.eigenvalue_floor`)."""
        return self.thresholds.eigenvalue_floor(stage)

    # -- rounds ---------------------------------------------------------------------
    def round(self, name: str, compute: Callable[[], dict[str, np.ndarray]]
              ) -> dict[str, np.ndarray]:
        """Run one round unless the checkpoint holds its outputs (:meth:`RoundRunner.round`)."""
        return self.runner.round(name, compute)

    def warn_once(self, key: str) -> Callable[[str], None]:
        """A ``warn(message)`` logging the run's first warning of kind ``key``."""
        return self.runner.warn_once(key)

    # -- randomness -------------------------------------------------------------------
    def rng(self, *path: int | str) -> np.random.Generator:
        """A generator for ``path`` under the run's root seed.

        Public randomness only (restarts, tie-breaking); never noise or sampling.
        """
        return generator(self.config.seed, *path)

    def int_seed(self, *path: int | str) -> int:
        """An integer seed (scikit-learn) for ``path`` under the root seed."""
        return integer_seed(self.config.seed, *path)

    def sample(self, round_name: str) -> np.ndarray:
        """Clients of one round: Poisson sampling at ``privacy.sampling-rate``.

        Each registered client independently with probability q (every client when
        q = 1 or the run is not private), from the private randomness.
        """
        ids = self.pool.client_ids
        rate = self.config.privacy.sampling_rate if self.config.is_private else 1.0
        if rate >= 1.0:
            return ids
        rng = self.private_randomness.generator("sampling", round_name)
        return ids[rng.random(ids.size) < rate]

    # -- queries and releases -------------------------------------------------------
    def query(
        self,
        stage: str,
        round_name: str,
        arrays: Mapping[str, np.ndarray],
        expected: Mapping[str, tuple[int, ...]],
    ) -> Replies:
        """Ask this round's sampled clients for ``expected`` statistics, folded.

        Each statistic is folded with the server clip bound :meth:`release` checks
        (:meth:`Releaser.folds`; no clipping when the run is not private), so the
        server never holds more than one row per statistic.

        Parameters
        ----------
        stage : str
            ClientApp action.
        round_name : str
            Round label; also selects the sampled cohort (:meth:`sample`).
        arrays : mapping
            Broadcast content.
        expected : mapping of str to tuple of int
            Per-client shape of every statistic, keyed by statistic name.
        """
        fold = self.releaser.folds(round_name, expected) if self.streaming else None
        cohort = self.sample(round_name) if stage_named(stage).sampled else self.pool.client_ids
        return self.pool.query(stage, cohort, arrays, expected,
                               round_name=round_name, fold=fold)

    def folds(self, round_name: str, names: Iterable[str]) -> dict[str, Fold]:
        """How the server clips each statistic of a round (:meth:`Releaser.folds`)."""
        return self.releaser.folds(round_name, names)

    def release(
        self, replies: Replies, statistic: str, stage: str, *, symmetric: bool = False
    ) -> np.ndarray:
        """Clip, sum, add the noise planned for ``stage``, record (:meth:`Releaser.release`)."""
        return self.releaser.release(replies, statistic, stage, symmetric=symmetric)


def _private_randomness(config: ProtocolConfig) -> PrivateRandomness:
    """The run's noise and sampling source: secret unless ``privacy.reproducible-noise``."""
    return PrivateRandomness(config.seed if config.privacy.reproducible_noise else None)


def _pool_view(pool, config: ProtocolConfig, releases: Mapping[str, Release],
               settings: Mapping | None):
    """``pool`` sending ``settings`` (None: its own), its SecAgg reading ``releases``.

    The same federation (registration, rejection and answer logs, observers), a new
    view: the pool and the SecAgg aggregator the earlier context holds are unchanged.
    """
    secagg = getattr(pool, "secagg", None)
    if secagg is not None:
        secagg = replace(secagg, config=config, releases=releases)
    if settings is None and secagg is None:
        return pool
    return pool.sending(pool.settings if settings is None else settings, secagg)
