"""Statistical privacy audit of one planned release through the real path: eps_LB.

The second check of ``python -m fedkmeans.experiment.audit --path release``; the first, the
deterministic comparison of every release's measured change with the ledger's
sensitivity, is :mod:`fedkmeans.attacks.sensitivity_audit`, whose neighbouring
federations (probes) and real-path driver this module reuses.

For one release of the runs' plans (``"lloyds-1/counts"``, as the ledger records it:
:func:`~fedkmeans.attacks.audit_plan.planned_releases`) and one probe (by default the
one that moved it most), both worlds are driven once through the real client path --
:meth:`~fedkmeans.node.NodeData.load` and its clip to Delta, the stage's ``client``
(or ``wire``) function, the wire format, the pool's validation -- with the replies
stacked, one row per client. Every trial then draws the round's cohort with
:meth:`~fedkmeans.server.context.ServerContext.sample` (Poisson sampling at
``privacy.sampling-rate``, from the secret randomness) and releases the cohort's rows
with :meth:`~fedkmeans.server.context.ServerContext.release`: the server's clip, the
sum, and the lattice mechanism with the noise calibrated for the release alone at the
target (epsilon, delta) from the ledger's sensitivity (more power than the run's share of
the budget; the run's composition is :func:`~fedkmeans.attacks.audit_plan.
budget_audit`'s), drawn from the default secret noise source.

The test scores each release by the log-likelihood ratio of the ledger's mechanism
centred on the two worlds' clipped sums (any score gives a valid bound; this one is
the most powerful when the ledger is right), chooses its threshold on ``selection``
releases per world and counts its errors on ``trials`` others; :mod:`~fedkmeans.
attacks.bounds` turns them into ``eps_LB``. A result fails (:attr:`ReleaseAuditResult.
failed`) when ``eps_LB`` exceeds the accountant's epsilon of the release.

Secure aggregation is audited by the deterministic check only: its noise is the
clients' shares, drawn on the nodes, and one SecAgg+ round per trial would take
hours for the trials a bound needs.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from fedkmeans.arguments import validate_delta
from fedkmeans.attacks.bounds import (
    choose_threshold,
    clopper_pearson,
    epsilon_lower_bound,
)
from fedkmeans.attacks.membership import release_llr
from fedkmeans.attacks.sensitivity_audit import (
    AuditSetup,
    planned_releases,
    probes,
    run_world,
)
from fedkmeans.privacy import registry
from fedkmeans.privacy.accountant import PrivacyLedger, Release
from fedkmeans.privacy.calibration import PlannedRelease, calibrate
from fedkmeans.server.aggregation import folded_sum
from fedkmeans.server.replies import Replies
from fedkmeans.stages import stage_of_round

__all__ = ["ReleaseAuditResult", "audit_release", "legacy_plan"]


@dataclass(frozen=True)
class ReleaseAuditResult:
    """One planned release audited statistically through the real path.

    Attributes
    ----------
    level, release, statistic, mechanism, probe : str
    claimed_sensitivity : float
        What the ledger records.
    measured_change : float
        Norm (l1 Laplace, l2 Gaussian) of the difference of the two worlds' clipped
        sums over every client.
    noise_scale : float
    sampling_rate : float
    accountant_epsilon : float
        The PLD accountant's epsilon of this release at ``delta``.
    epsilon_lb : float
        Clopper-Pearson lower bound on the true epsilon at ``confidence``.
    delta, confidence : float
    trials_per_world, selection_per_world : int
    false_positives, false_negatives : int
    fpr_upper, fnr_upper : float
    neighbours : str
    seconds : float
    """

    level: str
    release: str
    statistic: str
    mechanism: str
    probe: str
    claimed_sensitivity: float
    measured_change: float
    noise_scale: float
    sampling_rate: float
    accountant_epsilon: float
    epsilon_lb: float
    delta: float
    confidence: float
    trials_per_world: int
    selection_per_world: int
    false_positives: int
    false_negatives: int
    fpr_upper: float
    fnr_upper: float
    neighbours: str
    seconds: float

    @property
    def failed(self) -> bool:
        """``eps_LB`` exceeds the accountant's epsilon."""
        return self.epsilon_lb > self.accountant_epsilon

    def to_dict(self) -> dict:
        """Plain JSON-ready fields (with ``failed``)."""
        return {**asdict(self), "failed": self.failed}


def legacy_plan(privacy) -> Callable[[list[Release]], list[Release]]:
    """Ledger hook of the defect of earlier versions: l1 releases at the per-point change.

    The histogram and counts were calibrated to 1 (one point's change before the
    server's radial l1 clip) instead of 2: the recorded sensitivity and the noise scale
    both scaled by ``1 / 2``. (Every standalone scale is linear in the sensitivity and the
    calibration depends on noise / sensitivity only, so this is the calibration of the
    plan with the legacy sensitivities.)
    """
    def hook(plan: list[Release]) -> list[Release]:
        if privacy.level != "datapoint":
            return plan
        out = []
        for p in plan:
            statistic = stage_of_round(p.group).statistics
            per_point = {s.name: s.per_point(privacy)[0] for s in statistic}
            name = p.stage.rsplit("/", 1)[1]
            legacy = registry.mechanism(p.mechanism).order == 1 and math.isfinite(
                per_point.get(name, math.inf))
            factor = per_point[name] / p.sensitivity if legacy else 1.0
            out.append(replace(p, sensitivity=per_point[name],
                               noise_scale=p.noise_scale * factor) if legacy else p)
        return out

    return hook


def audit_release(
    setup: AuditSetup,
    release: str,
    *,
    probe: str | None = None,
    trials: int = 2_000,
    selection: int = 1_000,
    confidence: float = 0.95,
    plan_hook: Callable[[list[PlannedRelease]], list[PlannedRelease]] | None = None,
    directory: str | Path | None = None,
) -> ReleaseAuditResult:
    """Release the two worlds of ``probe`` ``trials`` times each and bound epsilon.

    Parameters
    ----------
    setup : AuditSetup
        Central aggregation (the statistical pass does not run SecAgg).
    release : str
        A planned release (``"init-2/histogram"``).
    probe : str, optional
        Name of a probe of :func:`~fedkmeans.attacks.sensitivity_audit.probes`
        (default: the one that moves ``release`` most).
    trials : int
        Evaluation releases per world (>= 100).
    selection : int
        Releases per world used only to choose the threshold (>= 100).
    confidence : float
        Of the Clopper-Pearson intervals.
    plan_hook : callable, optional
        Applied to the runs' calibrated ledger (a planted wrong ledger).
    directory : path, optional
        Where the worlds' files go (default: a temporary directory).

    Returns
    -------
    ReleaseAuditResult
    """
    start = time.perf_counter()
    if setup.aggregation != "central":
        raise ValueError("the statistical pass releases centrally; secure aggregation is "
                         f"audited deterministically, got aggregation={setup.aggregation!r}")
    if trials < 100 or selection < 100:
        raise ValueError(f"trials and selection must be >= 100, got {trials}, {selection}")
    delta = validate_delta(setup.delta)
    config = setup.config(sampled=True)
    plan = planned_releases(config)
    named = {p.stage: p for p in plan}
    if release not in named:
        raise ValueError(f"release must be one of {sorted(named)}, got {release!r}")
    statistic = release.rsplit("/", 1)[1]
    recorded = named[release] if plan_hook is None else {
        p.stage: p for p in plan_hook(list(plan))}[release]
    # the ledger's sensitivity, its noise calibrated for the release alone at the target
    planned = PlannedRelease(recorded.stage, recorded.mechanism, recorded.sensitivity, 1.0,
                             config.privacy.sampling_rate, recorded.group)
    alone = calibrate([planned], epsilon=setup.epsilon, delta=delta)[0]
    accountant = PrivacyLedger()
    accountant.record(alone)
    symmetric = any(s.symmetric for s in stage_of_round(planned.group).statistics
                    if s.name == statistic)
    order = registry.mechanism(alone.mechanism).order

    candidates = probes(setup, plan)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        worlds = {}
        for candidate in candidates:
            if probe is not None and candidate.name != probe:
                continue
            pair = {w: run_world(setup, points, plan, tmp, streaming=False)
                    for w, points in (("out", candidate.world_out), ("in", candidate.world_in))}
            rows = {w: run.replies[planned.group] for w, run in pair.items()}
            for run in pair.values():  # the release alone, as the trials release it
                run.context.releases[release] = alone
            # the server's clip (a joint statistic with the others of its group)
            means = {w: folded_sum(r.stats, statistic,
                                   pair[w].context.folds(planned.group, r.stats))
                     for w, r in rows.items()}
            change = float(np.linalg.norm(np.ravel(means["in"] - means["out"]), ord=order))
            worlds[candidate.name] = (change, candidate, pair, rows, means)
    if not worlds:
        raise ValueError(f"probe must be one of {[c.name for c in candidates]}, got {probe!r}")
    measured, chosen, pair, rows, means = max(worlds.values(), key=lambda w: w[0])

    def scores(world: str, n: int) -> np.ndarray:
        ctx, replies = pair[world].context, rows[world]
        ctx.releases[release] = alone
        ctx.config = config  # the run's sampling rate (the worlds were asked in full)
        out = np.empty(n)
        for i in range(n):
            cohort = np.isin(replies.client_ids, ctx.sample(planned.group))
            drawn = Replies(replies.client_ids[cohort],
                            {name: rows_[cohort] for name, rows_ in replies.stats.items()})
            ctx.accountant = PrivacyLedger()  # one release per trial: keep it short
            noisy = ctx.release(drawn, statistic, release, symmetric=symmetric)
            out[i] = release_llr(alone.mechanism, alone.noise_scale, noisy[None],
                                 means["in"], means["out"], symmetric=symmetric)[0]
        return out

    threshold = choose_threshold(scores("in", selection), scores("out", selection), delta,
                                 confidence)
    eval_in, eval_out = scores("in", trials), scores("out", trials)
    fp, fn = int((eval_out > threshold).sum()), int((eval_in <= threshold).sum())
    return ReleaseAuditResult(
        level=setup.level, release=release, statistic=statistic, mechanism=alone.mechanism,
        probe=chosen.name, claimed_sensitivity=alone.sensitivity, measured_change=measured,
        noise_scale=alone.noise_scale, sampling_rate=alone.sampling_rate,
        accountant_epsilon=accountant.get_epsilon(delta),
        epsilon_lb=epsilon_lower_bound(fp, trials, fn, trials, delta, confidence),
        delta=delta, confidence=confidence, trials_per_world=trials,
        selection_per_world=selection, false_positives=fp, false_negatives=fn,
        fpr_upper=clopper_pearson(fp, trials, confidence)[1],
        fnr_upper=clopper_pearson(fn, trials, confidence)[1],
        neighbours=chosen.description, seconds=time.perf_counter() - start,
    )
