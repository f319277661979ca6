"""Deterministic sensitivity audit: every planned release, worst-case neighbours, real path.

For every noisy release a run can make -- every release of the runs' own plans, the
estimate round's included, planned and calibrated by the runner's planning function
(:func:`fedkmeans.attacks.audit_plan.planned_releases`, which also covers a registered
stage no algorithm runs yet) -- two neighbouring federations are written to an ``.npz``
file each and driven through the code a run executes:

* :meth:`fedkmeans.node.NodeData.load` (the ClientApp's loader: points clipped to
  ``privacy.data-radius``), reached through :mod:`fedkmeans.client_app` on an
  :class:`~fedkmeans.experiment.engines.inprocess.InProcessGrid`;
* the stage's ``client`` function, or its ``wire`` form (step 1's upper triangles),
  packed and unpacked by :mod:`fedkmeans.wire`;
* the pool's validation and the server's fold and clip
  (:class:`~fedkmeans.server.replies.FoldingSink`,
  :class:`~fedkmeans.server.aggregation.RunningSums`);
* :meth:`fedkmeans.server.context.ServerContext.release`, whose observer hook gives
  the exact clipped sum before the noise, and whose ledger gives the recorded
  sensitivity;
* with ``aggregation = "secagg"``, the SecAgg+ round instead
  (:class:`~fedkmeans.server.secagg.SecAggAggregator`: the clients' clip to the
  server's bound, their noise shares, the encoding and the decoded sum). The noise is
  then turned down to ``1e-9`` of the sensitivity (it is drawn from the operating
  system's CSPRNG on the clients and cannot be removed otherwise), so the two decoded
  sums differ by the statistic's change up to the encoding's rounding and that noise,
  both allowed for in the row's ``tolerance``.

The measured change of a release is the norm of its mechanism (l1 Laplace, l2
Gaussian; Frobenius for matrices) of the difference of the two worlds' sums,
maximised over the probes below. A row fails when it exceeds the sensitivity the
ledger recorded (:attr:`SensitivityRow.failed`), and a planned release without a
measurement (its round refused, or not driven) is a failed row "left out of the
audit".

Probes (the target is client 2; clients 0 and 1, five random points of norm below
Delta each, are in both worlds; every added point has raw norm ``FAR * Delta``, so
a client that does not clip its points shows it):

* data-point level: a new client of one point joins; a client of one point at
  ``Delta e_1`` gains one at ``FAR Delta e_0``; a client at the point cap
  (``max-points-per-client`` points at ``Delta e_1``) gains one at ``FAR Delta e_0``
  -- for histograms and counts the pair that maximises the change through the
  server's radial l1 clip (:mod:`fedkmeans.privacy.budget`); and, for each joint
  group's radius ``R`` (whitened, :func:`~fedkmeans.privacy.budget.joint_radius`, in
  the noise the world's ledger records), two clients whose sums and counts leave the
  ball in different proportions (:func:`joint_probes`): ``ceil(R sigma_c)`` points at
  the origin (counts at the ball's edge, no sums) gaining one at ``FAR Delta e_1``, in
  another cluster -- an extra l1 clip of the counts after the projection moves this
  pair by up to ``sqrt(2)`` times the counts' share of the bound -- and
  ``ceil(2^(j/2) B)`` points at ``Delta e_1 / 10`` and at ``Delta e_1 / 100``,
  ``j = 1..6`` (counts past the cap, sums inside) gaining one at ``FAR Delta e_1``
  -- a projection taken in another metric (the noise scales swapped) moves some of
  them by several times the bound;
* client level: a client joins with one point, and with ``n`` points at
  ``FAR Delta e_0``, ``n = max ceil(2 C / l2) + 1`` over the planned statistics
  (``C`` the client bound, ``l2`` one point's change), so every statistic exceeds
  its client bound and is clipped onto it.

Every stage gets the same broadcast (:func:`broadcast`): centers, projected server
points and projected centers at ``Delta e_i`` (k = d), the identity basis, and the
check's alternative centers at ``-Delta e_i``; the check's clip ``tau`` is
``Delta^2 / 2``, below the ``2 Delta^2`` a point at ``Delta e_0`` gains, so every term
sits at the clip. A new stage whose client reads another broadcast key is refused by
its node, and its releases fail as left out until :func:`broadcast` learns the key.

How close a probe comes to the bound is ``tightness = measured / recorded``; with the
defaults (Delta = 11, where ``clip-sums / Delta = clip-counts``) every row is within
``B / (B + 1)`` of 1, so a ledger that records half a true sensitivity fails.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from uuid import uuid4

import numpy as np

from fedkmeans.attacks.audit_plan import planned_releases
from fedkmeans.config import HAND_FLAT
from fedkmeans.experiment.config import ExperimentConfig, parse_config
from fedkmeans.privacy import registry
from fedkmeans.privacy.accountant import Release
from fedkmeans.privacy.calibration import PlannedRelease
from fedkmeans.server.observer import RunObserver
from fedkmeans.stages import stage_of_round, statistic_bounds

__all__ = [
    "FAR", "LEVELS", "AuditSetup", "Probe", "SensitivityRow", "WorldRun", "broadcast",
    "joint_probes", "planned_releases", "probes", "run_world", "sensitivity_audit",
]

LEVELS = ("datapoint", "client")
#: Raw norm of every added point, in units of Delta (NodeData.load clips it to Delta).
FAR = 100.0
#: Ordinary clients present in both worlds (ids 0 and 1); the target is id 2.
_OTHERS, _TARGET = 2, 2
#: Relative slack of the comparison (floating-point sums of a few rows).
_REL_SLACK = 1e-9
#: Noise of the deterministic SecAgg pass, relative to the release's sensitivity.
_SECAGG_NOISE = 1e-5
#: Standard deviations of noise allowed for in a SecAgg row's tolerance.
_SECAGG_TAIL = 12.0
#: Norms of the joint probes' points past the cap, as fractions 1 / scale of Delta.
_JOINT_SCALES = (10, 100)
#: Largest client a joint probe writes (points; a larger one is left out).
_MAX_PROBE_POINTS = 1_000_000


@dataclass(frozen=True)
class AuditSetup:
    """The federation the audit drives (public settings only).

    Attributes
    ----------
    level : {"datapoint", "client"}
    dim : int
        Dimension d >= 2 (k = d centers and server points).
    data_radius : float
        Delta.
    max_points : int
        ``privacy.max-points-per-client`` (the data-point cap B).
    count_noise : {"auto", "laplace", "gaussian"}
        ``auto``: Gaussian at data-point level (joint clip), Laplace at client level.
    aggregation : {"central", "secagg"}
    sampling_rate : float
        ``privacy.sampling-rate`` of the plan (the deterministic pass asks every
        client: a sensitivity is a change given that the unit takes part).
    epsilon, delta : float
        Target of the plan the ledger is calibrated from.
    seed : int
        Seed of the ordinary clients' points.
    """

    level: str = "datapoint"
    dim: int = 4
    data_radius: float = 11.0
    max_points: int = 1000
    count_noise: str = "auto"
    aggregation: str = "central"
    sampling_rate: float = 1.0
    epsilon: float = 1.0
    delta: float = 1e-6
    seed: int = 0

    def flat(self, data_path: str = "", *, sampled: bool = True) -> dict:
        """The flat run config of this setup (``data_path``: the world's ``.npz``)."""
        out = {
            **HAND_FLAT,  # the paper's settings: the resolved run (audit_plan declares `auto`)
            "data.name": "npz", "data.path": data_path, "k": self.dim,
            "privacy.level": self.level, "privacy.epsilon": self.epsilon,
            "privacy.delta": self.delta, "privacy.data-radius": self.data_radius,
            "privacy.max-points-per-client": self.max_points,
            "privacy.count-noise": self.count_noise, "privacy.aggregation": self.aggregation,
            "privacy.check-share": 0.1, "privacy.check-clip": self.data_radius**2 / 2,
            "privacy.lloyds-steps": 1,
            "privacy.sampling-rate": self.sampling_rate if sampled else 1.0,
            "federation.engine": "inprocess", "federation.num-nodes": 2,
        }
        return out

    def config(self, data_path: str = "", *, sampled: bool = True) -> ExperimentConfig:
        """The parsed config (validated as a run's)."""
        return parse_config(self.flat(data_path, sampled=sampled))

    @property
    def server_x(self) -> np.ndarray:
        """The server's points: Delta e_i, i < d."""
        return np.eye(self.dim) * self.data_radius


def broadcast(setup: AuditSetup) -> dict[str, np.ndarray]:
    """What the server sends with every audited round (module docstring)."""
    anchors = setup.server_x
    return {"centers": anchors, "projected_centers": anchors, "projected_server": anchors,
            "basis": np.eye(setup.dim), "alternative": -anchors}


@dataclass(frozen=True)
class Probe:
    """Two neighbouring federations as raw client points (before NodeData.load).

    Attributes
    ----------
    name, description : str
    world_out, world_in : dict of int to ndarray of shape (n_j, d)
    """

    name: str
    description: str
    world_out: dict[int, np.ndarray] = field(repr=False)
    world_in: dict[int, np.ndarray] = field(repr=False)


def _client_points(config: ExperimentConfig, plan: Iterable[Release]) -> int:
    """Points a client needs so that each planned statistic exceeds its client bound."""
    needed = 1
    for planned in plan:
        known = stage_of_round(planned.group)
        name = planned.stage.rsplit("/", 1)[1]
        for statistic in known.statistics:
            if statistic.name != name:
                continue
            bound = statistic.client_bound(config.privacy)
            per_point = statistic.per_point(config.privacy)[1]
            if math.isfinite(bound) and per_point > 0:
                needed = max(needed, math.ceil(2 * bound / per_point) + 1)
    return min(needed, 100_000)


def probes(setup: AuditSetup, plan: Iterable[Release]) -> list[Probe]:
    """The neighbouring pairs of ``setup.level`` (module docstring)."""
    radius, dim = setup.data_radius, setup.dim
    unit = np.eye(dim) * radius
    far = unit[0:1] * FAR
    rng = np.random.default_rng(setup.seed)
    others = {}
    for cid in range(_OTHERS):
        x = rng.normal(0.0, radius / (2 * np.sqrt(dim)), size=(5, dim))
        others[cid] = x * np.minimum(1.0, 0.99 * radius / np.linalg.norm(x, axis=1))[:, None]
    if setup.level == "datapoint":
        cap = np.repeat(unit[1:2], setup.max_points, axis=0)
        return [*joint_probes(setup, plan, others),
            Probe("new-client", "a client of one point (raw norm FAR Delta) joins",
                  dict(others), {**others, _TARGET: far}),
            Probe("one-point", "a client of one point at Delta e_1 gains one at FAR Delta e_0",
                  {**others, _TARGET: unit[1:2]}, {**others, _TARGET: np.vstack([unit[1:2], far])}),
            Probe("at-cap", f"a client at the point cap ({setup.max_points} points at Delta e_1) "
                  "gains one at FAR Delta e_0",
                  {**others, _TARGET: cap}, {**others, _TARGET: np.vstack([cap, far])}),
        ]
    config = setup.config()
    n = _client_points(config, plan)
    return [
        Probe("one-point-client", "a client of one point (raw norm FAR Delta) joins",
              dict(others), {**others, _TARGET: far}),
        Probe("clipped-client", f"a client of {n} points at FAR Delta e_0 (every statistic "
              "above its client bound) joins", dict(others),
              {**others, _TARGET: np.repeat(far, n, axis=0)}),
    ]


def joint_probes(setup: AuditSetup, plan: Iterable[Release],
                 others: dict[int, np.ndarray]) -> list[Probe]:
    """The data-point probes of every joint group's radius (module docstring).

    For each joint round of ``plan`` (a stage's cluster sums and counts), the clipped
    pair's radius ``R`` in the noise the world records (the plan's; under SecAgg the
    audit's turned-down noise, ``sensitivity * 1e-5``) gives the client sizes
    ``ceil(R sigma_c)``, at which the counts of points at the origin reach the ball;
    clients of points of norm ``Delta / 10`` and ``Delta / 100`` come in a ladder of
    sizes past the cap.
    """
    from fedkmeans.privacy.budget import joint_radius

    config = setup.config()
    bounds = statistic_bounds(config.privacy)
    by_round: dict[str, dict[str, float]] = {}
    for planned in plan:
        name = planned.stage.rsplit("/", 1)[1]
        if name in bounds and bounds[name].joint:
            std = (planned.sensitivity * _SECAGG_NOISE if setup.aggregation == "secagg"
                   else registry.mechanism(planned.mechanism).std(planned.noise_scale))
            by_round.setdefault(planned.group, {})[name] = std
    sizes: set[tuple[str, int]] = set()
    for stds in by_round.values():
        if set(stds) != {"sums", "counts"}:
            continue
        radius = joint_radius([bounds["sums"], bounds["counts"]],
                              [stds["sums"], stds["counts"]])
        sizes.add(("counts", math.ceil(radius * stds["counts"])))
    # where a projection in another metric starts to bite is not the ball's edge: a
    # ladder of sizes past the cap, a factor sqrt(2) apart
    sizes.update((f"sums-{scale}", math.ceil(setup.max_points * 2 ** (j / 2)))
                 for j in range(1, 7) for scale in _JOINT_SCALES)
    unit = np.eye(setup.dim) * setup.data_radius
    out = []
    for kind, n in sorted(sizes):
        if n > _MAX_PROBE_POINTS:
            continue
        if kind == "counts":
            client, gained = np.zeros((n, setup.dim)), unit[1:2] * FAR
            text = (f"a client of {n} points at the origin (its counts at the joint clip's "
                    "radius) gains one at FAR Delta e_1, in another cluster")
        else:
            scale = int(kind.rsplit("-", 1)[1])
            client, gained = np.repeat(unit[1:2] / scale, n, axis=0), unit[1:2] * FAR
            text = (f"a client of {n} points at Delta e_1 / {scale} (counts past the cap, "
                    "sums inside) gains one at FAR Delta e_1")
        out.append(Probe(f"joint-{kind}-{n}", text, {**others, _TARGET: client},
                         {**others, _TARGET: np.vstack([client, gained])}))
    return out


class _Recorder(RunObserver):
    """Observer of :meth:`ServerContext.release`: the sum before the noise (or after)."""

    def __init__(self) -> None:
        self.values: dict[str, np.ndarray] = {}

    def on_release(self, stage: str, before, after) -> None:  # noqa: D102
        self.values[stage] = np.array(after if before is None else before, dtype=np.float64)


@dataclass
class WorldRun:
    """What one world gave through the real path.

    Attributes
    ----------
    values : dict of str to ndarray
        Per release: the exact clipped sum (central), or the decoded noisy sum (SecAgg).
    ledger : dict of str to Release
        What :meth:`ServerContext.release` recorded.
    replies : dict of str to Replies
        Per round, the replies (stacked when ``streaming = False``).
    errors : dict of str to str
        Per round that did not complete: why.
    tolerance : dict of str to float
        Per release: the SecAgg encoding and noise allowance of one world (0 central).
    context : ServerContext
    """

    values: dict
    ledger: dict
    replies: dict
    errors: dict
    tolerance: dict
    context: object


def run_world(
    setup: AuditSetup,
    points: dict[int, np.ndarray],
    plan: list[Release],
    directory: str | Path,
    *,
    streaming: bool = True,
    plan_hook: Callable[[list[Release]], list[Release]] | None = None,
) -> WorldRun:
    """Drive every round of ``plan`` over the federation ``points`` (module docstring).

    Parameters
    ----------
    setup : AuditSetup
    points : dict of int to ndarray
        Raw points per client id (written to an ``.npz`` file; the nodes load it).
    plan : list of Release
        The releases; their rounds are run in order, each once.
    directory : path
        Where the world's file is written.
    streaming : bool
        Fold the replies as a run does (False: stack them, for the statistical pass).
    plan_hook : callable, optional
        Applied to the calibrated ledger (planted ledgers).

    Returns
    -------
    WorldRun
    """
    from fedkmeans import client_app
    from fedkmeans.data.npz import save_npz
    from fedkmeans.local_grid import partitioned_grid
    from fedkmeans.server.pool import ClientPool
    from fedkmeans.server.wiring import wire_context
    from fedkmeans.tuning.resolve import client_settings

    ids = sorted(points)
    path = Path(directory) / f"world-{uuid4().hex}.npz"
    save_npz(path, x=np.vstack([points[c] for c in ids]),
             client=np.concatenate([np.full(points[c].shape[0], c) for c in ids]),
             server_x=setup.server_x)
    flat = setup.flat(str(path), sampled=False)  # every client answers (see AuditSetup)
    config = parse_config(flat)
    grid = partitioned_grid(client_app.app, flat, 2)
    pool = ClientPool(grid, config.protocol.federation)
    pool.register()
    # the run's calibration (audit_plan.planned_releases), as its ledger records it
    releases = list(plan) if plan_hook is None else plan_hook(list(plan))
    secagg = setup.aggregation == "secagg"
    if secagg:
        releases = [replace(r, noise_scale=r.sensitivity * _SECAGG_NOISE) for r in releases]
    recorder = _Recorder()
    ctx = wire_context(config.protocol, pool, setup.server_x, {r.stage: r for r in releases},
                       observers=[recorder], settings=client_settings(config.protocol),
                       progress=False, secagg=secagg, streaming=streaming)
    if secagg:  # the noise is turned down: the lattice guard of a real run would refuse
        pool.secagg.lattice_guard = False
    arrays = broadcast(setup)
    replies, errors, tolerance = {}, {}, {}
    for group in dict.fromkeys(r.group for r in releases):
        known = stage_of_round(group)
        try:
            replies[group] = ctx.query(known.name, group, arrays,
                                       expected=known.expected(setup.dim, setup.dim, setup.dim))
            known.release(ctx, replies[group], group)  # as its server step does
        except Exception as exc:  # noqa: BLE001 - the row says why the round failed
            why = "; ".join(str(r.get("reason", r)) for r in pool.rejected[-2:])
            errors[group] = f"{type(exc).__name__}: {exc}" + (f" ({why})" if why else "")
            continue
        if secagg and pool.secagg.rounds:
            for name, info in pool.secagg.rounds[-1]["statistics"].items():
                entries = int(np.prod(recorder.values[f"{group}/{name}"].shape))
                per_entry = info["max_quantization_error"] + _SECAGG_TAIL * info[
                    "sigma_effective"]
                tolerance[f"{group}/{name}"] = per_entry * entries  # l1 >= l2
    ledger = {r.stage: r for r in ctx.accountant.releases}
    return WorldRun(recorder.values, ledger, replies, errors, tolerance, ctx)


@dataclass(frozen=True)
class SensitivityRow:
    """One planned release, audited deterministically.

    Attributes
    ----------
    level, aggregation : str
    release : str
        Name in the ledger (``"init-3/sums"``).
    stage, statistic, mechanism : str
    norm : {"l1", "l2"}
        Norm of the mechanism (and of the sensitivity).
    recorded : float
        The sensitivity the ledger recorded (``nan`` when left out).
    measured : float
        Largest change of the released sum over the probes (``nan`` when left out).
    tolerance : float
        Allowed excess (SecAgg encoding and its 1e-9 noise; 0 central).
    probe : str
        The probe that gave ``measured``.
    status : {"ok", "exceeds", "left out"}
    reason : str
        Why a row failed.
    """

    level: str
    aggregation: str
    release: str
    stage: str
    statistic: str
    mechanism: str
    norm: str
    recorded: float
    measured: float
    tolerance: float
    probe: str
    status: str
    reason: str = ""

    @property
    def failed(self) -> bool:
        """The measured change exceeds the ledger, or the release was not audited."""
        return self.status != "ok"

    @property
    def tightness(self) -> float:
        """``measured / recorded`` (how close the worst probe came to the bound)."""
        return self.measured / self.recorded if self.recorded > 0 else math.nan

    def to_dict(self) -> dict:
        """Plain JSON-ready fields (with ``failed`` and ``tightness``)."""
        return {**asdict(self), "failed": self.failed, "tightness": self.tightness}


def _norm(diff: np.ndarray, order: int) -> float:
    return float(np.linalg.norm(np.ravel(diff), ord=order))


def _joint_changes(into: WorldRun, out: WorldRun, plan: list[PlannedRelease], bounds,
                   best: dict[str, tuple[float, float, str]], probe: str) -> None:
    """Record, per joint statistic, its group's change in the noise's metric.

    A data-point joint group (cluster sums and counts) is clipped by one factor per
    client, a projection in the metric where the pair's noise is isotropic
    (:mod:`fedkmeans.privacy.budget`, "Joint statistics"): each statistic on its own
    may move by slightly more than its sensitivity, the pair by at most
    ``sqrt(sum_i (s_i / sigma_i)^2)`` noise standard deviations, ``s_i`` the recorded
    sensitivities (each change less its SecAgg encoding tolerance).
    ``best[release] = (largest whitened change, that bound, probe)``.
    """
    groups: dict[tuple[str, str], list[str]] = {}
    for planned in plan:
        statistic = planned.stage.rsplit("/", 1)[1]
        if bounds[statistic].joint:
            groups.setdefault((planned.group, bounds[statistic].joint), []).append(planned.stage)
    for names in groups.values():
        if not all(n in into.values and n in out.values and n in into.ledger for n in names):
            continue
        stds = {n: registry.mechanism(into.ledger[n].mechanism).std(into.ledger[n].noise_scale)
                for n in names}
        slack = {n: into.tolerance.get(n, 0.0) + out.tolerance.get(n, 0.0) for n in names}
        change = math.sqrt(sum(
            (max(0.0, _norm(into.values[n] - out.values[n], 2) - slack[n]) / stds[n]) ** 2
            for n in names))
        bound = math.sqrt(sum((into.ledger[n].sensitivity / stds[n]) ** 2 for n in names))
        for n in names:
            if change > best.get(n, (-1.0, 0.0, ""))[0]:
                best[n] = (change, bound, probe)


def sensitivity_audit(
    setup: AuditSetup,
    *,
    plan_hook: Callable[[list[Release]], list[Release]] | None = None,
    audited: Callable[[list[Release]], list[Release]] | None = None,
    directory: str | Path | None = None,
) -> list[SensitivityRow]:
    """One row per planned release: measured change against the ledger's sensitivity.

    Parameters
    ----------
    setup : AuditSetup
    plan_hook : callable, optional
        Applied to the calibrated ledger (a planted wrong ledger).
    audited : callable, optional
        Selects the planned releases that are driven (default: all); the others are
        failed rows, "left out of the audit".
    directory : path, optional
        Where the worlds' files go (default: a temporary directory).

    Returns
    -------
    list of SensitivityRow
        In plan order.
    """
    plan = planned_releases(setup.config())
    driven = plan if audited is None else audited(list(plan))
    driven_names = {p.stage for p in driven}
    best: dict[str, tuple[float, str]] = {}
    joint_best: dict[str, tuple[float, float, str]] = {}
    bounds = statistic_bounds(setup.config().privacy)
    ledger: dict[str, Release] = {}
    tolerance: dict[str, float] = {}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        for probe in probes(setup, driven):
            out = run_world(setup, probe.world_out, driven, tmp, plan_hook=plan_hook)
            into = run_world(setup, probe.world_in, driven, tmp, plan_hook=plan_hook)
            ledger.update(into.ledger)
            _joint_changes(into, out, driven, bounds, joint_best, probe.name)
            for planned in driven:
                name = planned.stage
                why = into.errors.get(planned.group) or out.errors.get(planned.group)
                if why or name not in into.values or name not in out.values:
                    errors.setdefault(name, why or "no release recorded")
                    continue
                order = registry.mechanism(into.ledger[name].mechanism).order
                change = _norm(into.values[name] - out.values[name], order)
                tolerance[name] = max(tolerance.get(name, 0.0), into.tolerance.get(name, 0.0)
                                      + out.tolerance.get(name, 0.0))
                if change > best.get(name, (-1.0, ""))[0]:
                    best[name] = (change, probe.name)
    rows = []
    for planned in plan:
        name = planned.stage
        statistic = name.rsplit("/", 1)[1]
        known = stage_of_round(planned.group)
        base = {"level": setup.level, "aggregation": setup.aggregation, "release": name,
                "stage": known.name, "statistic": statistic, "mechanism": planned.mechanism,
                "norm": "l1" if registry.mechanism(planned.mechanism).order == 1 else "l2"}
        if name not in driven_names or name not in best:
            why = errors.get(name, "not driven by the audit")
            rows.append(SensitivityRow(**base, recorded=math.nan, measured=math.nan,
                                       tolerance=0.0, probe="", status="left out",
                                       reason=f"left out of the audit: {why}"))
            continue
        recorded = ledger[name].sensitivity
        change, probe_name = best[name]
        allowed = recorded * (1 + _REL_SLACK) + tolerance.get(name, 0.0)
        whitened, whitened_bound, joint_probe = joint_best.get(name, (math.nan, 0.0, ""))
        joint_ok = whitened <= whitened_bound * (1 + _REL_SLACK)  # False when not joint
        status = "ok" if change <= allowed or joint_ok else "exceeds"
        reason = "" if status == "ok" else (
            f"measured change {change:.6g} exceeds the recorded sensitivity {recorded:.6g} "
            f"(probe {probe_name})" + ("" if math.isnan(whitened) else
                                       f"; jointly with its group, {whitened:.6g} noise "
                                       f"stds against the ledger's {whitened_bound:.6g} "
                                       f"(probe {joint_probe})"))
        rows.append(SensitivityRow(**base, recorded=recorded, measured=change,
                                   tolerance=tolerance.get(name, 0.0), probe=probe_name,
                                   status=status, reason=reason))
    return rows
