"""The run's release plan: the estimate round's release, then the others calibrated with it.

One function, :func:`plan_run`, used by the runner (:func:`fedkmeans.experiment.runner.run_server`)
and by the release audit (:mod:`fedkmeans.attacks.audit_plan`), so the audit plans and
calibrates exactly as a run does:

1. the estimate round's release (:func:`estimate_release`), when the run has one
   (:func:`needs_estimates`): its noise is fixed first, at the Gaussian noise
   multiplier :func:`~fedkmeans.stages.estimate.estimate_noise_multiplier` of the
   target and ``privacy.estimate-share``, times the sensitivity of its statistic
   (:mod:`fedkmeans.stages.estimate`: ``sqrt(3)`` at data-point level, 2 at client
   level);
2. ``resolve(prior)``: the caller's resolution of the ``auto`` settings (the runner
   runs the estimate round and :func:`~fedkmeans.tuning.resolve.resolve_auto`; the
   audit substitutes its public hand settings);
3. :func:`calibrated_releases`: the resolved algorithm's release plan calibrated so
   that the whole run, the estimate round and the plan composed, meets the target
   (:func:`~fedkmeans.privacy.calibration.calibrate` with ``prior``).

Steps 1 and 3 are pure functions of the config.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fedkmeans.algorithms import algorithm
from fedkmeans.config import PrivacySettings, ProtocolConfig, parse_protocol
from fedkmeans.privacy.accountant import PrivacyLedger, Release
from fedkmeans.privacy.calibration import PlannedRelease, calibrate
from fedkmeans.stages.estimate import ESTIMATE, estimate_noise_multiplier

__all__ = ["RunPlan", "calibrated_releases", "estimate_release", "needs_estimates",
           "plan_run"]

#: ``resolve(prior) -> (resolved config, tuning record or None)``.
Resolver = Callable[[tuple[Release, ...]], tuple[ProtocolConfig, "dict | None"]]


@dataclass(frozen=True)
class RunPlan:
    """What a run releases, calibrated, before its first protocol round.

    Attributes
    ----------
    config : ProtocolConfig
        The resolved config (numbers in place of ``auto``, but the run-time ones).
    tuning : dict or None
        The tuning record (None when nothing was ``auto``).
    prior : tuple of Release
        The estimate round's release (empty when the run has none).
    releases : tuple of Release
        The resolved algorithm's releases, calibrated with ``prior``.
    """

    config: ProtocolConfig
    tuning: dict | None
    prior: tuple[Release, ...]
    releases: tuple[Release, ...]

    @property
    def ledger(self) -> tuple[Release, ...]:
        """Every release of the run, in order: ``prior`` then ``releases``."""
        return (*self.prior, *self.releases)

    def epsilon(self) -> float:
        """The PLD accountant's epsilon of :attr:`ledger` at the config's delta (0 if empty)."""
        accountant = PrivacyLedger()
        for release in self.ledger:
            accountant.record(release)
        return accountant.get_epsilon(self.config.privacy.delta) if self.ledger else 0.0

    def to_dict(self) -> dict:
        """The JSON form stored with the checkpoint (:meth:`from_dict` reads it)."""
        return {"config": self.config.to_flat(), "tuning": self.tuning,
                "prior": [r.to_dict() for r in self.prior],
                "releases": [r.to_dict() for r in self.releases]}

    @classmethod
    def from_dict(cls, stored: dict) -> RunPlan:
        """The plan :meth:`to_dict` stored."""
        return cls(parse_protocol(stored["config"]), stored["tuning"],
                   tuple(Release(**r) for r in stored["prior"]),
                   tuple(Release(**r) for r in stored["releases"]))


def needs_estimates(config: ProtocolConfig) -> bool:
    """Whether the run has an estimate round (:attr:`ProtocolConfig.has_estimate_round`).

    Private, a setting it feeds is ``auto`` and read by the run
    (:attr:`ProtocolConfig.auto_keys`: not ``split`` of an algorithm without
    FedDP-Init), and the algorithm may release something (k-means on the server's data
    with T = 0 asks the clients nothing).
    """
    return config.has_estimate_round


def estimate_release(privacy: PrivacySettings) -> Release:
    """The estimate round's release, its noise fixed before the rest of the plan exists.

    Sensitivity from the stage's statistic (:mod:`fedkmeans.stages.estimate`), noise
    multiplier :func:`~fedkmeans.stages.estimate.estimate_noise_multiplier` of the run's
    target and ``privacy.estimate-share``.
    """
    planned = ESTIMATE.plan(privacy, ESTIMATE.group)[0]
    z = estimate_noise_multiplier(privacy.epsilon, privacy.delta, privacy.estimate_share)
    return planned.to_release(z * planned.sensitivity)


def calibrated_releases(
    planned: Sequence[PlannedRelease], config: ProtocolConfig, prior: Sequence[Release] = (),
) -> list[Release]:
    """``planned`` calibrated so that ``prior`` and it together meet ``config``'s target.

    Parameters
    ----------
    planned : sequence of PlannedRelease
        May be empty (nothing to calibrate: ``[]``).
    config : ProtocolConfig
        The resolved config: target ``privacy.epsilon`` (infinite for a non-private
        run: noise scale 0) and ``privacy.delta``.
    prior : sequence of Release
        Releases already fixed (the estimate round's).

    Returns
    -------
    list of Release
    """
    epsilon = config.privacy.epsilon if config.is_private else math.inf
    return calibrate(planned, epsilon=epsilon, delta=config.privacy.delta,
                     prior=prior) if planned else []


def plan_run(config: ProtocolConfig, *, subspace: bool, resolve: Resolver) -> RunPlan:
    """The plan of a run of ``config`` (module docstring).

    Parameters
    ----------
    config : ProtocolConfig
        As declared (``auto`` settings unresolved).
    subspace : bool
        FedDP-Init projects onto a k-dimensional subspace (k < d: step 1 runs).
    resolve : callable
        ``resolve(prior) -> (resolved config, tuning record or None)``, called once,
        after the estimate round's release is fixed (``prior``: it, or empty).

    Returns
    -------
    RunPlan
    """
    prior = (estimate_release(config.privacy),) if needs_estimates(config) else ()
    resolved, tuning = resolve(prior)
    plan = algorithm(resolved.algorithm).release_plan(resolved.privacy, subspace=subspace)
    return RunPlan(resolved, tuning, prior,
                   tuple(calibrated_releases(plan, resolved, prior)))
