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
with :meth:`~fedkmeans.server.releaser.Releaser.release`: the server's clip, the
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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
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
from fedkmeans.privacy.accountant import PrivacyLedger
from fedkmeans.privacy.budget import StatisticBound
from fedkmeans.privacy.calibration import PlannedRelease, calibrate
from fedkmeans.server.aggregation import folded_sum
from fedkmeans.server.replies import Replies
from fedkmeans.stages import spec, stage_of_round, stages

__all__ = ["ReleaseAuditResult", "audit_release", "legacy_derivation"]


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


class _LegacyBounds(Mapping):
    """:func:`~fedkmeans.stages.spec.statistic_bounds` with the legacy l1 sensitivities.

    At data-point level, every statistic with a finite l1 sensitivity has it taken as
    one point's change (``per_point``'s l1) instead of the change after the server's
    radial l1 clip (twice that); the clip bounds are the true ones. Lazy, as the real
    mapping (some bounds exist only once the ``auto`` settings are resolved).
    """

    def __init__(self, privacy, bounds: Mapping[str, StatisticBound]) -> None:
        self._privacy, self._bounds = privacy, bounds
        self._per_point = {s.name: s.per_point for known in stages() for s in known.statistics}

    def __getitem__(self, name: str) -> StatisticBound:
        bound = self._bounds[name]
        if self._privacy.level != "datapoint" or not math.isfinite(bound.l1_sensitivity):
            return bound
        return replace(bound, l1_sensitivity=self._per_point[name](self._privacy)[0])

    def __iter__(self) -> Iterator[str]:
        return iter(self._bounds)

    def __len__(self) -> int:
        return len(self._bounds)


@contextmanager
def legacy_derivation() -> Iterator[None]:
    """Plant the defect of earlier versions: l1 releases at the per-point change.

    The histogram and counts were calibrated to 1 (one point's change before the
    server's radial l1 clip) instead of 2. Planted in the one derivation every reader
    calls, :func:`fedkmeans.stages.spec.statistic_bounds`, for the ``with`` block: the
    plans record the legacy sensitivities and calibrate their noise to them, the
    server's release-time check agrees (:class:`~fedkmeans.server.releaser.Releaser`),
    the clip bounds are unchanged, and only the audits' measurements can tell.
    """
    real = spec.statistic_bounds
    spec.statistic_bounds = lambda privacy: _LegacyBounds(privacy, real(privacy))
    try:
        yield
    finally:
        spec.statistic_bounds = real


def audit_release(
    setup: AuditSetup,
    release: str,
    *,
    probe: str | None = None,
    trials: int = 2_000,
    selection: int = 1_000,
    confidence: float = 0.95,
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
    directory : path, optional
        Where the worlds' files go (default: a temporary directory).

    Returns
    -------
    ReleaseAuditResult

    Notes
    -----
    A planted wrong sensitivity goes where the plans and the server both derive it
    (:func:`legacy_derivation`); a ledger that disagrees with the server's clip is
    refused by the release itself (:class:`~fedkmeans.server.releaser.
    SensitivityMismatchError`) before any trial.
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
    recorded = named[release]
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
            worlds_run = {w: run_world(setup, points, plan, tmp, streaming=False)
                          for w, points in (("out", candidate.world_out),
                                            ("in", candidate.world_in))}
            rows = {w: run.replies[planned.group] for w, run in worlds_run.items()}
            # the release alone, as the trials release it, at the run's sampling rate (the
            # worlds were asked in full)
            pair = {w: run.context.planned(config, [alone]) for w, run in worlds_run.items()}
            # the server's clip (a joint statistic with the others of its group)
            means = {w: folded_sum(r.stats, statistic, pair[w].folds(planned.group, r.stats))
                     for w, r in rows.items()}
            change = float(np.linalg.norm(np.ravel(means["in"] - means["out"]), ord=order))
            worlds[candidate.name] = (change, candidate, pair, rows, means)
    if not worlds:
        raise ValueError(f"probe must be one of {[c.name for c in candidates]}, got {probe!r}")
    measured, chosen, pair, rows, means = max(worlds.values(), key=lambda w: w[0])

    def scores(world: str, n: int) -> np.ndarray:
        ctx, replies = pair[world], rows[world]
        out = np.empty(n)
        for i in range(n):
            cohort = np.isin(replies.client_ids, ctx.sample(planned.group))
            drawn = Replies(replies.client_ids[cohort],
                            {name: rows_[cohort] for name, rows_ in replies.stats.items()})
            # one release per trial: a ledger of its own, kept short
            releaser = replace(ctx.releaser, accountant=PrivacyLedger())
            noisy = releaser.release(drawn, statistic, release, symmetric=symmetric)
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
