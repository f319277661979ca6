"""What every algorithm shares on the server: the context of a run and private aggregation.

:meth:`ServerContext.release` is the single path by which client statistics become
something the server keeps: clip every client's reply on the server, sum in client-id
order, add the calibrated noise, and record the release in the accountant. Algorithms
and stages never add noise themselves. With secure aggregation the clients clipped and added the
noise shares, the sum arrives noisy, and ``release`` only records it (with the
calibrated sigma, which the summed shares guarantee) and shows observers the noisy sum.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from fedkmeans.artefacts import json_number
from fedkmeans.checkpoint import Checkpoint
from fedkmeans.config import AUTO, ProtocolConfig
from fedkmeans.console import say
from fedkmeans.privacy import registry
from fedkmeans.privacy.accountant import PrivacyLedger, Release
from fedkmeans.privacy.budget import joint_radii
from fedkmeans.privacy.randomness import PrivateRandomness
from fedkmeans.seeding import generator, integer_seed
from fedkmeans.server.aggregation import Fold, folded_sum
from fedkmeans.server.observer import RunObserver
from fedkmeans.server.pool import ClientPool
from fedkmeans.server.replies import Replies
from fedkmeans.server.thresholds import (
    count_threshold,
    noise_std,
    spare_centers,
    spread,
    weight_threshold,
)
from fedkmeans.stages import stage as stage_named
from fedkmeans.stages import statistic_bounds

LOG = logging.getLogger(__name__)


@dataclass
class ServerContext:
    """Everything an algorithm and its stages may use on the server.

    Attributes
    ----------
    config : ProtocolConfig
    pool : ClientPool
    server_x : ndarray of shape (m, d)
        The server's own (public) data Q.
    releases : dict of str to Release
        Calibrated noise of every planned release, by stage name.
    accountant : PrivacyLedger
        Records each release when it happens.
    timings : dict of str to float
        Seconds per round.
    non_private : list of str
        Rounds that released client statistics without noise.
    """

    config: ProtocolConfig
    pool: ClientPool
    server_x: np.ndarray
    releases: dict[str, Release]
    accountant: PrivacyLedger = field(default_factory=PrivacyLedger)
    timings: dict[str, float] = field(default_factory=dict)
    non_private: list[str] = field(default_factory=list)
    observers: list[RunObserver] = field(default_factory=list)
    checkpoint: Checkpoint | None = None
    #: Rounds the algorithm will run (0 = unknown): the progress lines' total.
    expected_rounds: int = 0
    #: Log a progress line per round (the tuning's simulated runs do not).
    progress: bool = True
    #: Log the run's warnings (:meth:`warn_once`); the tuning's simulated runs do not:
    #: a candidate's fallback is not the run's.
    warnings: bool = True
    #: The k chosen by the algorithm with ``k = auto`` (:meth:`choose_k`), else None.
    chosen_k: int | None = None
    #: The final check's outcome (:func:`~fedkmeans.stages.check.final_check`), if run.
    check: dict | None = None
    #: FedDP-Init's spare centers and why (:meth:`extra_centers`), once decided.
    spare_centers: dict | None = None
    #: The estimate round's release, read (:mod:`fedkmeans.tuning.estimates`), if run.
    estimates: object | None = None
    #: Each round's outputs (computed or restored), by round name.
    round_outputs: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    warned: set[str] = field(default_factory=set, repr=False)  #: kinds said (warn_once)
    _started: float = field(default_factory=time.perf_counter, repr=False)
    _done: int = field(default=0, repr=False)

    def warn_once(self, key: str) -> Callable[[str], None]:
        """A ``warn(message)`` that logs the first warning of kind ``key`` in this run.

        Nothing is logged when the context does not log :attr:`warnings`.
        """
        def warn(message: str) -> None:
            if self.warnings and key not in self.warned:
                self.warned.add(key)
                LOG.warning(message)
        return warn

    def __post_init__(self) -> None:
        if self.checkpoint is not None:
            self.checkpoint.restore(self.accountant)
            self.non_private = list(self.checkpoint.non_private)

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

    def use_plan(self, config: ProtocolConfig, releases: Iterable[Release], *,
                 settings: Mapping) -> None:
        """Run the rounds after the plan with its resolved config and calibrated releases.

        The one change a context takes after it is built: the estimate round runs with
        the declared config (``auto`` unresolved), the protocol with the resolved one;
        the nodes are sent ``settings`` (the resolved clip bounds, the public transform)
        with every request from now on, and SecAgg reads the same releases.
        """
        self.config = config
        self.releases.update({r.stage: r for r in releases})
        self.pool.settings = dict(settings)
        if getattr(self.pool, "secagg", None) is not None:
            self.pool.secagg.config = config

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

    @property
    def k(self) -> int:
        """Number of clusters: ``config.k``, or the k chosen with ``k = auto``."""
        return self.chosen_k if self.chosen_k is not None else self.config.k

    def choose_k(self, k: int) -> None:
        """Record the k an algorithm chose (``k = auto``): later rounds and the result use it."""
        self.chosen_k = int(k)

    def extra_centers(self, k: int, eigen_gap: float, noise_norm: float) -> int:
        """Spare centers of FedDP-Init steps 2-3: ``privacy.extra-centers``, or decided.

        ``auto``: :func:`~fedkmeans.server.thresholds.spare_centers` of step 1's
        released eigen-gap and noise norm (0 with ``k = auto`` or without a subspace),
        within the server's points. Recorded in :attr:`spare_centers`.
        """
        value = self.config.privacy.extra_centers
        if value != AUTO:
            extra = int(value)
        elif self.config.k_auto:
            extra = 0
        else:
            extra = min(spare_centers(k, eigen_gap, noise_norm), self.server_x.shape[0] - k)
        self.spare_centers = {
            "extra_centers": extra, "setting": value,
            "eigen_gap": json_number(eigen_gap), "noise_norm": json_number(noise_norm)}
        return extra

    def min_server_weight(self, stage: str) -> float:
        """Step 2's weight threshold: ``privacy.min-server-weight``, or relative to the noise.

        ``auto``: :data:`~fedkmeans.server.thresholds.WEIGHT_THRESHOLD_STDS` standard
        deviations of the planned release ``stage``'s noise (0 without noise); why:
        :mod:`fedkmeans.server.thresholds`.
        """
        value = self.config.privacy.min_server_weight
        if value != AUTO:
            return float(value)
        release = self.releases.get(stage)
        if release is None or not self.config.is_private:
            return 0.0
        return weight_threshold(release)

    def min_cluster_count(self, group: str, fallback: np.ndarray) -> float:
        """Count a cluster needs to leave its ``fallback`` center, for round ``group``.

        ``auto``: :func:`~fedkmeans.server.thresholds.count_threshold` of the round's
        planned count and sum releases, with the spread of the server's data around
        ``fallback`` (k, d) as the public scale; 1 when the run adds no noise.
        """
        value = self.config.privacy.min_cluster_count
        if value != AUTO:
            return float(value)
        counts = self.releases.get(f"{group}/counts")
        sums = self.releases.get(f"{group}/sums")
        if counts is None or sums is None or not self.config.is_private:
            return 1.0
        return count_threshold(counts, sums, self.pool.dim, spread(self.server_x, fallback))

    def eigenvalue_floor(self, stage: str) -> float:
        """Eigenvalues of the noisy second moment below this are noise (0 if no noise).

        The symmetric noise of step 1 (entries N(0, sigma^2)) has spectral norm about
        ``2 sigma sqrt(d)``; an eigenvector whose eigenvalue does not clear it is not
        trusted (:func:`~fedkmeans.clustering.server_steps.supported_eigenvectors`).
        """
        release = self.releases.get(stage)
        if release is None or not self.config.is_private:
            return 0.0
        return 2.0 * noise_std(release) * float(np.sqrt(self.pool.dim))

    def rng(self, *path: int | str) -> np.random.Generator:
        """A generator for ``path`` under the run's root seed.

        Public randomness only (restarts, tie-breaking); never noise or sampling.
        """
        return generator(self.config.seed, *path)

    @property
    def private_randomness(self) -> PrivateRandomness:
        """Source of the noise and client sampling: secret unless the run opts out."""
        seed = self.config.seed if self.config.privacy.reproducible_noise else None
        return PrivateRandomness(seed)

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

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Record the wall time of a block under ``name``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start

    #: Fold replies into running clipped sums as they arrive (False: stack every
    #: client's row first, the earlier path; kept for the equivalence tests).
    streaming: ClassVar[bool] = True

    def query(
        self,
        stage: str,
        round_name: str,
        arrays: Mapping[str, np.ndarray],
        expected: Mapping[str, tuple[int, ...]],
    ) -> Replies:
        """Ask this round's sampled clients for ``expected`` statistics, folded.

        Each statistic is folded with the server clip bound :meth:`release` applies
        (:func:`~fedkmeans.privacy.budget.statistic_bounds`; no clipping when the run
        is not private), so the server never holds more than one row per statistic.

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
        fold = self.folds(round_name, expected) if self.streaming else None
        cohort = self.sample(round_name) if stage_named(stage).sampled else self.pool.client_ids
        return self.pool.query(stage, cohort, arrays, expected,
                               round_name=round_name, fold=fold)

    def folds(self, round_name: str, names: Iterable[str]) -> dict[str, Fold]:
        """How the server clips each statistic ``names`` of round ``round_name``.

        Not private: no clipping. Otherwise each statistic's server bound
        (:func:`~fedkmeans.privacy.budget.statistic_bounds`); the statistics of a joint
        group (data-point level: cluster sums and counts) share one factor per client,
        the projection in the metric of their planned releases' noise
        (:func:`~fedkmeans.privacy.budget.joint_radius`).
        """
        names = list(names)
        if not self.config.is_private:
            return {name: Fold() for name in names}
        bounds = statistic_bounds(self.config.privacy)
        folds = {name: Fold(bounds[name].server_bound, bounds[name].norm) for name in names}
        planned = {n: self.releases[f"{round_name}/{n}"] for n in names
                   if f"{round_name}/{n}" in self.releases}
        stds = {n: registry.mechanism(r.mechanism).std(r.noise_scale)
                for n, r in planned.items()}
        folds.update({n: Fold(radius, bounds[n].norm, bounds[n].joint, stds[n])
                      for n, radius in joint_radii(bounds, stds).items()})
        return folds

    def release(
        self, replies: Replies, statistic: str, stage: str, *, symmetric: bool = False
    ) -> np.ndarray:
        """Clip each client's ``statistic``, sum, add the noise planned for ``stage``.

        Parameters
        ----------
        replies : Replies
            Per-client rows (m, ...).
        statistic : {"covariance", "histogram", "sums", "counts"}
        stage : str
            Name of the planned release (e.g. ``"init-3/sums"``).
        symmetric : bool
            Add symmetric noise to a (d, d) matrix (step 1).

        Returns
        -------
        ndarray
            The noisy sum, shape of one client's row.

        Notes
        -----
        ``replies.aggregated`` (secure aggregation): the row is already the noisy sum
        of the clients' clipped statistics and noise shares; nothing is clipped or
        added here. The release is recorded with ``noise_scale`` = the calibrated sigma,
        which the summed shares of at least ``n_min`` survivors guarantee (the
        survivors' effective sigma, ``>=`` it, is a diagnostic), and observers get
        ``on_release(stage, None, noisy)``: the exact sum never exists on the server.
        """
        if replies.aggregated:
            noisy = replies.stats[statistic][0]
            release = replace(
                self.releases[stage], noise_scale=replies.noise_scales[statistic]
            )
            self.accountant.record(release)
            self._notify(stage, None, noisy)
            return noisy
        values = replies.stats[statistic]
        if not self.config.is_private:
            total = values[0] if replies.folded else values.sum(axis=0)
            self.non_private.append(stage)
            self._notify(stage, total, total)
            return total
        if replies.folded:  # clipped as each reply arrived (:meth:`folds`)
            total = values[0]
        else:
            round_name = stage.rsplit("/", 1)[0]
            total = folded_sum(replies.stats, statistic,
                               self.folds(round_name, replies.stats))
        release = self.releases[stage]
        noise = registry.mechanism(release.mechanism).build(
            release.sensitivity, release.noise_scale)
        rng = self.private_randomness.generator("noise", stage)
        if symmetric:
            noisy = noise.add_symmetric_noise(total, rng)
        else:
            noisy = noise.add_noise(total, rng)
        self.accountant.record(release)
        self._notify(stage, total, noisy)
        return noisy

    def _notify(self, stage: str, before: np.ndarray | None, after: np.ndarray) -> None:
        for observer in self.observers:
            observer.on_release(stage, before, after)
