"""Privacy audit through the server's real release path, with worst-case neighbours.

The canary game of :mod:`fedkmeans.audit` tests a mechanism on a statistic it builds
itself. This audit tests what a run does: two neighbouring federations are turned
into per-client replies by the real client code (:class:`fedkmeans.node.NodeData`,
client-side clipping included), and every trial releases them with
:meth:`fedkmeans.strategies.base.ServerContext.release` -- the server's per-client
clip, the sum in client order, the noise calibrated by
:func:`fedkmeans.privacy.calibration.calibrate` from the plan of
:func:`fedkmeans.privacy.budget.release_plan`, and the lattice mechanism, drawing from
the default secret noise source.

Worst-case neighbours (one pair per statistic and level):

* **data-point level, a client at the point cap.** The target client holds
  ``max-points-per-client`` points, all equal to ``Delta e_1`` (nearest to server
  point / center 1), so each of its statistics sits exactly on the server's clip
  bound; the neighbour adds one point ``Delta e_0`` (nearest to server point /
  center 0). For histograms and counts this is the pair that maximises both the l1
  and the l2 change of the server's radial l1 clip (``fedkmeans.privacy.budget``);
  for the covariance and the sums it adds a full ``Delta^2`` / ``Delta`` in a new
  direction.
* **client level, a client at the clip bound.** The target client has enough points
  at ``Delta e_0`` that each statistic exceeds its client bound and is clipped onto
  it; the neighbour removes the client altogether.

Both worlds also hold two ordinary clients, so the sums are not trivial. The test
scores each release by the log-likelihood ratio of the ledger's mechanism centred on
the two worlds' clipped sums (any score gives a valid bound; this one is the most
powerful when the ledger is right) and turns its error rates into ``eps_LB`` with
:mod:`fedkmeans.attacks.bounds`.

``legacy_sensitivity=True`` plants the defect of earlier versions: releases
calibrated to the per-point change (1 for a histogram) instead of the true change
after the server's clip (2). The audit must then find ``eps_LB`` above the claim.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from fedkmeans.attacks.bounds import (
    check_delta,
    choose_threshold,
    clopper_pearson,
    epsilon_lower_bound,
)
from fedkmeans.attacks.membership import release_llr
from fedkmeans.config import ExperimentConfig, PrivacyConfig
from fedkmeans.node import NodeData
from fedkmeans.privacy import registry
from fedkmeans.privacy.accountant import PrivacyAccountant
from fedkmeans.privacy.calibration import calibrate
from fedkmeans.stages import release_plan, statistic_bounds
from fedkmeans.strategies.aggregation import clipped_sum
from fedkmeans.strategies.base import ServerContext
from fedkmeans.strategies.replies import Replies

__all__ = ["AUDITED", "LEVELS", "Neighbours", "ReleaseAuditResult", "audit_release",
           "worst_neighbours"]

#: (statistic, mechanism) pairs a run can release, and the stage each is audited at.
AUDITED = (
    ("covariance", registry.GAUSSIAN.name),
    ("histogram", registry.LAPLACE.name),
    ("sums", registry.GAUSSIAN.name),
    ("counts", registry.LAPLACE.name),
    ("counts", registry.GAUSSIAN.name),
)
LEVELS = ("datapoint", "client")
_STAGE = {
    "covariance": "init-1/covariance",
    "histogram": "init-2/histogram",
    "sums": "lloyds-1/sums",
    "counts": "lloyds-1/counts",
}
#: Ordinary clients present in both worlds (ids 0 and 1; the target is id 2).
_OTHERS = 2


@dataclass(frozen=True)
class Neighbours:
    """Two neighbouring federations as the server receives them.

    Attributes
    ----------
    statistic : str
    replies_out, replies_in : Replies
        Per-client rows of world OUT (without the target's extra point, or without
        the target client) and world IN.
    description : str
        Who the target is.
    """

    statistic: str
    replies_out: Replies
    replies_in: Replies
    description: str


def _config(level: str, epsilon: float, delta: float, mechanism: str, statistic: str,
            data_radius: float, max_points: int) -> ExperimentConfig:
    count_noise = mechanism if statistic == "counts" else registry.LAPLACE.name
    privacy = PrivacyConfig(level=level, epsilon=epsilon, delta=delta, data_radius=data_radius,
                            max_points_per_client=max_points, count_noise=count_noise,
                            lloyds_steps=1)
    return ExperimentConfig(privacy=privacy)


def worst_neighbours(config: ExperimentConfig, statistic: str, *, dim: int = 4,
                     seed: int = 0) -> Neighbours:
    """The worst-case neighbouring pair of ``statistic`` (module docstring).

    Parameters
    ----------
    config : ExperimentConfig
        Its ``privacy`` section sets the level, Delta, the point cap and the bounds.
    statistic : {"covariance", "histogram", "sums", "counts"}
    dim : int
        Dimension d >= 2 of the points (k = d clusters / server points).
    seed : int
        Seed of the two ordinary clients' points.

    Returns
    -------
    Neighbours
    """
    if dim < 2:
        raise ValueError(f"dim must be >= 2, got {dim!r}")
    privacy = config.privacy
    radius = privacy.data_radius
    unit = np.eye(dim) * radius
    basis = np.eye(dim)
    anchors = unit.copy()  # server points (projected) and centers: Delta e_i
    rng = np.random.default_rng(seed)
    others = {}
    for cid in range(_OTHERS):
        x = rng.normal(0.0, radius / (2 * np.sqrt(dim)), size=(5, dim))
        others[cid] = x * np.minimum(1.0, radius / np.linalg.norm(x, axis=1))[:, None]
    target = _OTHERS
    if privacy.level == "datapoint":
        at_cap = np.repeat(unit[1:2], privacy.max_points_per_client, axis=0)
        world_out = {**others, target: at_cap}
        world_in = {**others, target: np.vstack([at_cap, unit[0:1]])}
        description = (f"a client at the point cap ({privacy.max_points_per_client} points "
                       "at Delta e_1) gains one point at Delta e_0")
    else:
        bounds = statistic_bounds(privacy)
        per_point = {"covariance": radius**2, "histogram": 1.0, "sums": radius, "counts": 1.0}
        n = int(np.ceil(2 * bounds[statistic].client_bound / per_point[statistic])) + 1
        world_out = dict(others)
        world_in = {**others, target: np.repeat(unit[0:1], n, axis=0)}
        description = (f"a client at the clip bound ({n} points at Delta e_0, statistic "
                       "clipped by the client) joins")

    def replies(points: dict[int, np.ndarray]) -> Replies:
        ids = np.array(sorted(points))
        node = NodeData(config, ids, points, {c: None for c in ids})
        clients = ids.tolist()
        if statistic == "covariance":
            stats = node.covariance(clients)
        elif statistic == "histogram":
            stats = node.histogram(clients, basis, anchors)
        else:
            stats = node.sums_counts(clients, anchors)
        return Replies(ids, {statistic: stats[statistic]})

    return Neighbours(statistic, replies(world_out), replies(world_in), description)


@dataclass(frozen=True)
class ReleaseAuditResult:
    """One audited (level, statistic, mechanism) through the real release path.

    Attributes
    ----------
    level, statistic, mechanism, stage : str
    claimed_sensitivity : float
        What the ledger records.
    measured_change : float
        Norm (l1 for Laplace, l2 for Gaussian) of the difference of the two worlds'
        clipped sums: the sensitivity the release actually has for this pair.
    noise_scale : float
    accountant_epsilon : float
        The PLD accountant's epsilon of this release at ``delta``.
    epsilon_lb : float
        95% Clopper-Pearson lower bound on the true epsilon.
    delta : float
    trials_per_world : int
        Evaluation trials per world (plus ``selection_per_world`` to pick the threshold).
    selection_per_world : int
    false_positives, false_negatives : int
    fpr_upper, fnr_upper : float
    legacy_sensitivity : bool
        The planted defect (calibration to the per-point change).
    neighbours : str
    seconds : float
    """

    level: str
    statistic: str
    mechanism: str
    stage: str
    claimed_sensitivity: float
    measured_change: float
    noise_scale: float
    accountant_epsilon: float
    epsilon_lb: float
    delta: float
    trials_per_world: int
    selection_per_world: int
    false_positives: int
    false_negatives: int
    fpr_upper: float
    fnr_upper: float
    legacy_sensitivity: bool
    neighbours: str
    seconds: float

    def to_dict(self) -> dict:
        """Plain JSON-ready fields."""
        return asdict(self)


def _legacy(statistic: str, privacy: PrivacyConfig) -> float:
    """The sensitivity earlier versions recorded: the per-unit change before the clip."""
    if privacy.level == "client":
        return statistic_bounds(privacy)[statistic].client_bound
    radius = privacy.data_radius
    return {"covariance": radius**2, "histogram": 1.0, "sums": radius, "counts": 1.0}[statistic]


def audit_release(
    level: str,
    statistic: str,
    mechanism: str,
    *,
    epsilon: float = 1.0,
    delta: float = 1e-6,
    trials: int = 20_000,
    selection: int = 5_000,
    data_radius: float = 11.0,
    max_points: int = 1000,
    dim: int = 4,
    legacy_sensitivity: bool = False,
    confidence: float = 0.95,
) -> ReleaseAuditResult:
    """Release the worst neighbours through the real server path and bound epsilon.

    Parameters
    ----------
    level : {"datapoint", "client"}
    statistic, mechanism : str
        One of :data:`AUDITED`.
    epsilon, delta : float
        Target of the release alone (it gets the whole budget).
    trials : int
        Evaluation releases per world (>= 100).
    selection : int
        Releases per world used only to choose the threshold (>= 100).
    data_radius : float
        Delta.
    max_points : int
        ``privacy.max-points-per-client`` (the data-point target sits at this cap).
    dim : int
        Dimension of the points (>= 2).
    legacy_sensitivity : bool
        Plant the defect of earlier versions (see the module docstring).
    confidence : float
        Of the Clopper-Pearson intervals.

    Returns
    -------
    ReleaseAuditResult
    """
    start = time.perf_counter()
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if (statistic, mechanism) not in AUDITED:
        raise ValueError(f"(statistic, mechanism) must be one of {AUDITED}, "
                         f"got {(statistic, mechanism)!r}")
    if trials < 100 or selection < 100:
        raise ValueError(f"trials and selection must be >= 100, got {trials}, {selection}")
    delta = check_delta(delta)
    config = _config(level, epsilon, delta, mechanism, statistic, data_radius, max_points)
    stage = _STAGE[statistic]
    planned = next(p for p in release_plan("feddp-kmeans", config.privacy) if p.stage == stage)
    if legacy_sensitivity:
        planned = replace(planned, sensitivity=_legacy(statistic, config.privacy))
    release = calibrate([planned], epsilon=epsilon, delta=delta)[0]
    accountant = PrivacyAccountant()
    accountant.record(release)

    pair = worst_neighbours(config, statistic, dim=dim)
    bound = statistic_bounds(config.privacy)[statistic]
    means = {
        world: clipped_sum(r.stats[statistic], bound.server_bound, bound.norm)
        for world, r in (("out", pair.replies_out), ("in", pair.replies_in))
    }
    order = registry.mechanism(release.mechanism).order
    symmetric = statistic == "covariance"
    diff = means["in"] - means["out"]
    if symmetric:
        diff = diff[np.triu_indices(diff.shape[0])]
    measured = float(np.linalg.norm(diff.ravel(), ord=order))

    def scores(replies: Replies, n: int) -> np.ndarray:
        out = np.empty(n)
        for i in range(n):
            ctx = ServerContext(config=config, pool=None, server_x=np.zeros((1, dim)),
                                releases={stage: release})
            noisy = ctx.release(replies, statistic, stage, symmetric=symmetric)
            out[i] = release_llr(release.mechanism, release.noise_scale, noisy[None],
                                 means["in"], means["out"], symmetric=symmetric)[0]
        return out

    threshold = choose_threshold(scores(pair.replies_in, selection),
                                 scores(pair.replies_out, selection), delta, confidence)
    eval_in, eval_out = scores(pair.replies_in, trials), scores(pair.replies_out, trials)
    fp, fn = int((eval_out > threshold).sum()), int((eval_in <= threshold).sum())
    return ReleaseAuditResult(
        level=level, statistic=statistic, mechanism=release.mechanism, stage=stage,
        claimed_sensitivity=release.sensitivity, measured_change=measured,
        noise_scale=release.noise_scale, accountant_epsilon=accountant.get_epsilon(delta),
        epsilon_lb=epsilon_lower_bound(fp, trials, fn, trials, delta, confidence),
        delta=delta, trials_per_world=trials, selection_per_world=selection,
        false_positives=fp, false_negatives=fn,
        fpr_upper=clopper_pearson(fp, trials, confidence)[1],
        fnr_upper=clopper_pearson(fn, trials, confidence)[1],
        legacy_sensitivity=legacy_sensitivity, neighbours=pair.description,
        seconds=time.perf_counter() - start,
    )
