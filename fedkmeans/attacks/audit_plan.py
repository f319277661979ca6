"""What the release audit audits: the runs' own plans, and the budget each one spends.

The audit plans exactly as a run does, with the runner's planning function
(:func:`fedkmeans.tuning.plan.plan_run`): for every private registered algorithm, a run
declared with ``privacy.split`` and ``privacy.lloyds-steps`` ``auto`` -- so its plan
starts with the estimate round's release, calibrated by the runner's
:func:`~fedkmeans.tuning.plan.estimate_release` (which settings are ``auto`` decides
only whether the round happens: its sensitivity and noise depend on the level, epsilon,
delta and ``estimate-share``; these two enter no clip bound, so every statistic's bound
of the declared config is defined) -- and resolved to the audit's public hand settings
(Delta, ``max-points-per-client``, the client-level bounds, T = 1, the check's share
and clip of :class:`~fedkmeans.attacks.sensitivity_audit.AuditSetup`; ``check-share =
0`` for an algorithm without the final choice, as the tuning resolves it). The
remaining releases are calibrated composed with the estimate round's
(:func:`~fedkmeans.tuning.plan.calibrated_releases`), as in a run. A registered stage
no algorithm runs is planned in its own round and calibrated the same way, composed
with the estimate round's release, so a stage registered later is audited without a
change here.

Two uses:

* :func:`planned_releases`: every release of those plans, once (the estimate round's
  first), as the ledger records it: the deterministic and the statistical checks drive
  worst-case neighbours through the real path for each;
* :func:`budget_audit`: for each plan, the epsilon its ledger spends, and the epsilon it
  spends with each sensitivity the deterministic check measured above the ledger's
  (noise scales as calibrated), both against the target. A ledger that records half a
  true sensitivity keeps its recorded epsilon at the target but spends more: the
  estimate round's sensitivity recorded at half (``sqrt(3) / 2`` at data-point level,
  its noise calibrated to it) fails its sensitivity row and its plans' budget rows
  (``tests/harness/test_audit_planted.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace

from fedkmeans.config import AUTO
from fedkmeans.experiment.config import ExperimentConfig, parse_config
from fedkmeans.plugins import ALGORITHMS
from fedkmeans.privacy.accountant import PrivacyLedger, Release
from fedkmeans.stages import stages
from fedkmeans.stages.estimate import ESTIMATE
from fedkmeans.tuning.plan import RunPlan, calibrated_releases, plan_run

__all__ = ["UNLISTED", "BudgetRow", "budget_audit", "planned_releases", "run_plans"]

#: Name of the plan of the registered stages no algorithm runs.
UNLISTED = "stages no algorithm runs"
#: Relative slack of the epsilon comparison (the calibration certifies <= target).
_REL_SLACK = 1e-9
#: Keys the audited runs declare ``auto`` (module docstring; resolved to the hand values).
_DECLARED_AUTO = ("privacy.split", "privacy.lloyds-steps")

PlanHook = Callable[[list[Release]], list[Release]]


def run_plans(config: ExperimentConfig) -> dict[str, RunPlan]:
    """The plans of the runs the audit audits, by algorithm (module docstring).

    Parameters
    ----------
    config : ExperimentConfig
        The resolved settings (:meth:`AuditSetup.config`).

    Returns
    -------
    dict of str to RunPlan
        One per private registered algorithm, then :data:`UNLISTED` when a registered
        stage with releases is run by no algorithm.
    """
    flat = config.to_flat()
    plans: dict[str, RunPlan] = {}
    groups: set[str] = set()
    for chosen in ALGORITHMS.values():
        if not chosen.private:
            continue
        resolved = parse_config({**flat, "algorithm": chosen.name, "privacy.check-share":
                                 flat["privacy.check-share"] if chosen.final_choice else 0.0})
        declared = parse_config({**resolved.to_flat(), **dict.fromkeys(_DECLARED_AUTO, AUTO)})
        plans[chosen.name] = plan_run(declared.protocol, subspace=True,
                                      resolve=lambda prior, r=resolved.protocol: (r, None))
        groups |= {known.name for known, _ in chosen.rounds(resolved.privacy)}
    unlisted = [planned for known in stages() if known.releases and known.name not in groups
                and known is not ESTIMATE
                for planned in known.plan(config.privacy, known.group)]
    if unlisted:  # composed with the runs' estimate round (the same in every plan)
        prior = next((plan.prior for plan in plans.values() if plan.prior), ())
        plans[UNLISTED] = RunPlan(config.protocol, None, prior,
                                  tuple(calibrated_releases(unlisted, config.protocol, prior)))
    return plans


def planned_releases(config: ExperimentConfig) -> list[Release]:
    """Every release of :func:`run_plans`, once, as the ledgers record it.

    In plan order (the estimate round's first). A release in several plans (the
    Lloyds steps) is taken from the plan that records the smallest sensitivity for it:
    the claim the measured change is most likely to exceed.
    """
    out: dict[str, Release] = {}
    for plan in run_plans(config).values():
        for release in plan.ledger:
            known = out.get(release.stage)
            if known is None or release.sensitivity < known.sensitivity:
                out[release.stage] = release
    return list(out.values())


@dataclass(frozen=True)
class BudgetRow:
    """One run's plan: what its ledger spends, and what it spends as measured.

    Attributes
    ----------
    level, aggregation, count_noise : str
    plan : str
        The algorithm (or :data:`UNLISTED`).
    releases : int
        Releases in its ledger (the estimate round's included).
    target : float
        ``privacy.epsilon``.
    recorded_epsilon : float
        The PLD accountant's epsilon of the ledger.
    measured_epsilon : float
        The same with each sensitivity the deterministic check measured above the
        ledger's in its place (noise scales unchanged).
    exceeded : tuple of str
        Those releases.
    """

    level: str
    aggregation: str
    count_noise: str
    plan: str
    releases: int
    target: float
    recorded_epsilon: float
    measured_epsilon: float
    exceeded: tuple[str, ...]

    @property
    def failed(self) -> bool:
        """Either epsilon exceeds the target."""
        allowed = self.target * (1 + _REL_SLACK)
        return self.recorded_epsilon > allowed or self.measured_epsilon > allowed

    @property
    def reason(self) -> str:
        """Why the row failed ('' when it did not)."""
        if not self.failed:
            return ""
        if self.recorded_epsilon > self.target * (1 + _REL_SLACK):
            return (f"the ledger's epsilon {self.recorded_epsilon:.4f} exceeds the target "
                    f"{self.target:g}")
        return (f"epsilon at the measured sensitivities {self.measured_epsilon:.4f} exceeds "
                f"the target {self.target:g} (measured above the ledger: "
                f"{', '.join(self.exceeded)})")

    def to_dict(self) -> dict:
        """Plain JSON-ready fields (with ``failed`` and ``reason``)."""
        return {**asdict(self), "failed": self.failed, "reason": self.reason}


def _epsilon(ledger: list[Release], delta: float) -> float:
    accountant = PrivacyLedger()
    for release in ledger:
        accountant.record(release)
    return accountant.get_epsilon(delta) if ledger else 0.0


def budget_audit(
    config: ExperimentConfig, exceeded: Mapping[str, float], *,
    plan_hook: PlanHook | None = None,
) -> list[BudgetRow]:
    """One row per plan of :func:`run_plans`: its epsilon, recorded and as measured.

    Parameters
    ----------
    config : ExperimentConfig
        The resolved settings (:meth:`AuditSetup.config`).
    exceeded : mapping of str to float
        Release name -> the change the deterministic check measured, for the releases
        whose change exceeds the ledger's sensitivity (the rows with status
        ``exceeds``); every other release keeps its recorded sensitivity.
    plan_hook : callable, optional
        Applied to each plan's ledger (a planted wrong ledger, as the other checks).

    Returns
    -------
    list of BudgetRow
    """
    privacy = config.privacy
    rows = []
    for name, plan in run_plans(config).items():
        ledger = list(plan.ledger) if plan_hook is None else plan_hook(list(plan.ledger))
        as_measured = [replace(r, sensitivity=exceeded[r.stage]) if r.stage in exceeded
                       else r for r in ledger]
        rows.append(BudgetRow(
            level=privacy.level, aggregation=privacy.aggregation,
            count_noise=privacy.count_noise, plan=name, releases=len(ledger),
            target=privacy.epsilon, recorded_epsilon=_epsilon(ledger, privacy.delta),
            measured_epsilon=_epsilon(as_measured, privacy.delta),
            exceeded=tuple(r.stage for r in ledger if r.stage in exceeded)))
    return rows
