"""The releaser: the single path by which client statistics become something the server keeps.

:meth:`Releaser.release` clips every client's reply on the server, sums in client-id
order, adds the calibrated noise, records the release in the accountant and shows it
to the observers. Algorithms and stages never add noise themselves. With secure
aggregation the clients clipped and added the noise shares, the sum arrives noisy, and
``release`` only records it (with the calibrated sigma, which the summed shares
guarantee) and shows observers the noisy sum.

The clip and the ledger read one bound
    The server clips each statistic to its bound (:meth:`Releaser.folds`) and the
    ledger records the sensitivity the plan derived from the bounds
    (:meth:`fedkmeans.stages.spec.Stage.plan`). The two are read at two times: the
    plan before the rounds, the clip at each round. A releaser reads its bounds once,
    from its own privacy settings (:attr:`Releaser.bounds`, the function
    :func:`fedkmeans.stages.spec.statistic_bounds` the plan reads too), folds with them,
    and checks at each release that the sensitivity the ledger is about to record is
    the one that bound gives for the release's mechanism
    (:meth:`Releaser.checked`). A ledger recording less than the clip allows would
    understate epsilon; the release refuses instead (:class:`SensitivityMismatchError`,
    naming the release and both values), before any noise is drawn or recorded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from fedkmeans.config import PrivacySettings
from fedkmeans.privacy import registry
from fedkmeans.privacy.accountant import PrivacyLedger, Release
from fedkmeans.privacy.budget import StatisticBound, joint_radii
from fedkmeans.privacy.randomness import PrivateRandomness
from fedkmeans.server.aggregation import Fold, folded_sum
from fedkmeans.server.observer import RunObserver
from fedkmeans.server.replies import Replies
from fedkmeans.stages import spec

__all__ = ["Releaser", "SensitivityMismatchError"]


class SensitivityMismatchError(RuntimeError):
    """A release's recorded sensitivity is not the one of the bound the server clips with."""


@dataclass(frozen=True, eq=False)
class Releaser:
    """Server clip, sum, calibrated noise, ledger entry and observers of every release.

    Immutable: a run builds one before its plan (the estimate round's release) and one
    after it (:meth:`fedkmeans.server.context.ServerContext.planned`); both record into
    the same ledger.

    Attributes
    ----------
    privacy : PrivacySettings
        The settings the bounds are derived from (the resolved ones after the plan).
    private : bool
        Whether the run adds noise (``config.is_private``); False: every release is the
        exact sum, listed in :attr:`non_private`.
    releases : mapping of str to Release
        The calibrated releases known, by stage name (``"init-3/sums"``).
    randomness : PrivateRandomness
        Source of the noise (secret unless the run opts out).
    accountant : PrivacyLedger
        Records each release when it happens (privacy unit: the config's level).
    non_private : list of str
        Releases made without noise.
    observers : tuple of RunObserver
        Shown every release: ``on_release(stage, exact sum or None, released value)``.
    """

    privacy: PrivacySettings
    private: bool
    releases: Mapping[str, Release]
    randomness: PrivateRandomness = field(default_factory=PrivateRandomness)
    accountant: PrivacyLedger = field(default_factory=PrivacyLedger)
    non_private: list[str] = field(default_factory=list)
    observers: tuple[RunObserver, ...] = ()

    @cached_property
    def bounds(self) -> Mapping[str, StatisticBound]:
        """Every statistic's clip bound and sensitivities, read once for this releaser.

        :func:`fedkmeans.stages.spec.statistic_bounds` of :attr:`privacy`, the function
        the plan derives the recorded sensitivities with: :meth:`folds` clips with these
        bounds and :meth:`checked` compares the ledger with them.
        """
        return spec.statistic_bounds(self.privacy)

    def folds(self, round_name: str, names: Iterable[str]) -> dict[str, Fold]:
        """How the server clips each statistic ``names`` of round ``round_name``.

        Not private: no clipping. Otherwise each statistic's server bound
        (:attr:`bounds`); the statistics of a joint group (data-point level: cluster
        sums and counts) share one factor per client, the projection in the metric of
        their planned releases' noise (:func:`~fedkmeans.privacy.budget.joint_radius`).
        """
        names = list(names)
        if not self.private:
            return {name: Fold() for name in names}
        bounds = self.bounds
        folds = {name: Fold(bounds[name].server_bound, bounds[name].norm) for name in names}
        planned = {n: self.releases[f"{round_name}/{n}"] for n in names
                   if f"{round_name}/{n}" in self.releases}
        stds = {n: registry.mechanism(r.mechanism).std(r.noise_scale)
                for n, r in planned.items()}
        folds.update({n: Fold(radius, bounds[n].norm, bounds[n].joint, stds[n])
                      for n, radius in joint_radii(bounds, stds).items()})
        return folds

    def checked(self, stage: str, statistic: str) -> Release:
        """The planned release ``stage``, checked against the bound clipped with.

        Parameters
        ----------
        stage : str
            Name of the planned release (``"init-3/sums"``).
        statistic : str
            The statistic it releases (``"sums"``).

        Returns
        -------
        Release
            ``releases[stage]``, whose ``sensitivity`` equals
            ``bounds[statistic].sensitivity(mechanism)``: the largest change of the
            clipped sum (:meth:`folds` under central aggregation, the nodes' clip
            under SecAgg, both from :attr:`bounds`) that one privacy unit can make.

        Raises
        ------
        SensitivityMismatchError
            The two differ: the plan was derived from other bounds than the server
            clips with (module docstring).
        """
        release = self.releases[stage]
        clipped = self.bounds[statistic].sensitivity(release.mechanism)
        if clipped != release.sensitivity:
            raise SensitivityMismatchError(
                f"release {stage}: the ledger would record sensitivity "
                f"{release.sensitivity!r}, but the bound the server clips {statistic} with "
                f"gives {release.mechanism} sensitivity {clipped!r}; refusing to release")
        return release

    def release(
        self, replies: Replies, statistic: str, stage: str, *, symmetric: bool = False
    ) -> np.ndarray:
        """Clip each client's ``statistic``, sum, add the noise planned for ``stage``.

        Parameters
        ----------
        replies : Replies
            Per-client rows (m, ...), or their running clipped sums (``folded``), or
            SecAgg's noisy sum (``aggregated``).
        statistic : {"covariance", "histogram", "sums", "counts", ...}
        stage : str
            Name of the planned release (e.g. ``"init-3/sums"``).
        symmetric : bool
            Add symmetric noise to a (d, d) matrix (step 1).

        Returns
        -------
        ndarray
            The noisy sum, shape of one client's row.

        Raises
        ------
        SensitivityMismatchError
            The ledger would record another sensitivity than the clip bound gives
            (:meth:`checked`); nothing is released or recorded.

        Notes
        -----
        Privacy unit: the config's level. The noise is the registered mechanism's,
        built from the planned release's ``sensitivity`` and ``noise_scale``, drawn
        from the private randomness under ``("noise", stage)``.

        ``replies.aggregated`` (secure aggregation): the row is already the noisy sum
        of the clients' clipped statistics and noise shares; nothing is clipped or
        added here. The release is recorded with ``noise_scale`` = the calibrated sigma,
        which the summed shares of at least ``n_min`` survivors guarantee (the
        survivors' effective sigma, ``>=`` it, is a diagnostic), and observers get
        ``on_release(stage, None, noisy)``: the exact sum never exists on the server.
        """
        if replies.aggregated:
            noisy = replies.stats[statistic][0]
            release = replace(self.checked(stage, statistic),
                              noise_scale=replies.noise_scales[statistic])
            self.accountant.record(release)
            self._notify(stage, None, noisy)
            return noisy
        values = replies.stats[statistic]
        if not self.private:
            total = values[0] if replies.folded else values.sum(axis=0)
            self.non_private.append(stage)
            self._notify(stage, total, total)
            return total
        release = self.checked(stage, statistic)
        if replies.folded:  # clipped as each reply arrived (:meth:`folds`)
            total = values[0]
        else:
            round_name = stage.rsplit("/", 1)[0]
            total = folded_sum(replies.stats, statistic,
                               self.folds(round_name, replies.stats))
        noise = registry.mechanism(release.mechanism).build(
            release.sensitivity, release.noise_scale)
        rng = self.randomness.generator("noise", stage)
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
