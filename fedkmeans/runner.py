"""Run one experiment on a Grid: register, calibrate, run the algorithm, evaluate, write.

Used by the ServerApp (Flower simulation and deployment) and by the in-process engine
alike, so every engine executes the same server code.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from flwr.serverapp import Grid

from fedkmeans import data as data_access
from fedkmeans.algorithms import algorithm
from fedkmeans.artefacts import RESULT_FILE, json_number, write_artefacts
from fedkmeans.checkpoint import PLAN_FREE_ROUNDS, Checkpoint
from fedkmeans.config import ExperimentConfig, check_server_points
from fedkmeans.console import announce, say
from fedkmeans.data.transform import PublicTransform
from fedkmeans.evaluation import NOTE, federated_metrics, optimal_cost
from fedkmeans.privacy.accountant import Release
from fedkmeans.rundir import claim_output_dir
from fedkmeans.server.context import ServerContext
from fedkmeans.server.observer import RunObserver
from fedkmeans.server.pool import ClientPool
from fedkmeans.server.thresholds import noise_std
from fedkmeans.stages.check import CHECK
from fedkmeans.stages.estimate import ESTIMATE
from fedkmeans.statements import (
    centers_from,
    clipping_summary,
    guarantee,
    neighbouring,
    summary_line,
)
from fedkmeans.tuning.estimates import PrivateEstimates
from fedkmeans.tuning.hand import check_declared_radius
from fedkmeans.tuning.plan import RunPlan, plan_run
from fedkmeans.tuning.resolve import client_settings, resolve_auto

LOG = logging.getLogger(__name__)

__all__ = ["RESULT_FILE", "run_server"]


def run_server(
    grid: Grid, config: ExperimentConfig, *, run_id: int | str = 0,
    observers: Sequence[RunObserver] = (),
) -> dict:
    """Execute ``config`` against the nodes behind ``grid``; write and return the result.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    config : ExperimentConfig
        Already validated.
    run_id : int or str
        Names the default output directory.
    observers : sequence of RunObserver
        Handed in by the composition root (:mod:`fedkmeans.server_app`: the
        configured attack's), never built here. Every hook of
        :class:`~fedkmeans.server.observer.RunObserver` is called:
        ``on_start(config)`` with the resolved settings before the first private round,
        the pool's and the server context's hooks during the rounds, and
        ``report(centers=, result=)``, whose value (unless None) becomes
        ``result[observer.result_key]``, logged through ``summary_lines``.

    Returns
    -------
    dict
        The content of ``result.json``.

    Raises
    ------
    fedkmeans.rundir.OutputDirError
        Another live run holds the output directory, or it holds the result of another
        configuration (before any node is asked anything).
    """
    output_dir = _output_dir(config, run_id)
    announce(LOG)  # with the operator's opt-in: the lines marked not private
    with claim_output_dir(output_dir, config):
        return _run_claimed(grid, config, output_dir, observers)


def _run_claimed(
    grid: Grid, config: ExperimentConfig, output_dir: Path, observers: Sequence[RunObserver]
) -> dict:
    _import_what_the_rounds_use()
    start = time.perf_counter()
    timings: dict[str, float] = {}

    checkpoint = Checkpoint.open(output_dir / "checkpoint", config)
    declared = config
    observers = list(observers)
    server_x, _ = data_access.load_server(config)
    pool = ClientPool(grid, config.federation, observers=observers)
    t0 = time.perf_counter()
    pool.register()
    timings["register"] = time.perf_counter() - t0
    if server_x.shape[1] != pool.dim:
        raise ValueError(
            f"server data has d={server_x.shape[1]} but the nodes' data has d={pool.dim}"
        )
    check_server_points(config, server_x.shape[0])
    _, k_needed = config.largest_k
    # the public pre-processing (Q's mean, opt-in its spread): the nodes map their
    # points before the estimate round, so it is sent with every request from now on
    transform = _transform(config, checkpoint, server_x)
    server_x = transform.apply(server_x)
    check_declared_radius(config, server_x)
    pool.settings = transform.to_settings()

    ctx = ServerContext(
        checkpoint=checkpoint, config=config, pool=pool, server_x=server_x, releases={},
        observers=observers,
    )
    if config.privacy.aggregation == "secagg":  # clients add noise shares, SecAgg+ sums
        from fedkmeans.server.secagg import SecAggAggregator

        pool.secagg = SecAggAggregator(config, ctx.releases)
    t0 = time.perf_counter()
    config, tuning, releases = _plan(ctx, checkpoint, transform, subspace=k_needed < pool.dim)
    timings["tuning"] = time.perf_counter() - t0
    ctx.config = config
    ctx.releases.update({r.stage: r for r in releases})
    ctx.expected_rounds = len(checkpoint.rounds.keys() & set(PLAN_FREE_ROUNDS)) + \
        _expected_rounds(config, subspace=k_needed < pool.dim)
    pool.settings = {**transform.to_settings(), **client_settings(config)}
    if pool.secagg is not None:
        pool.secagg.config = config
    for observer in observers:  # e.g. the curious server: sees the resolved settings
        observer.on_start(config)
    randomness = ctx.private_randomness
    if config.is_private and not randomness.is_secure:
        LOG.warning("%s", randomness.notice)
    centers = transform.invert(algorithm(config.algorithm).run(ctx))  # the data's space
    timings.update(ctx.timings)

    t0 = time.perf_counter()
    evaluation = federated_metrics(pool, centers)
    timings["evaluate"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    chosen = replace(config, k=ctx.k)  # k = auto: the k the algorithm chose
    best = optimal_cost(chosen)
    timings["optimal_cost"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - start

    spent = ctx.accountant.get_epsilon(config.privacy.delta) if ctx.accountant.releases else 0.0
    if ctx.non_private or not config.is_private:
        spent = math.inf
    result = {
        "algorithm": declared.algorithm,
        "centers_from": centers_from(declared, config, ctx.check),
        "seed": config.seed,
        "k": chosen.k,
        "centers": centers.tolist(),
        "privacy": {
            "level": config.privacy.level,
            "epsilon": json_number(spent),
            "delta": config.privacy.delta,
            "target_epsilon": json_number(
                config.privacy.epsilon if config.is_private else math.inf),
            "releases": [r.to_dict() for r in ctx.accountant.releases],
            "non_private_releases": ctx.non_private,
            "aggregation": config.privacy.aggregation,
            "accountant": "dp-accounting PLD, " + neighbouring(config),
            "noise": _noise_source(ctx),
            "guarantee": guarantee(config, spent, secret_noise=randomness.is_secure),
        },
        "metrics": {
            **{key: evaluation[key] for key in ("cost", "accuracy", "ari", "nmi", "fmi")},
            "optimal_cost": best,
            "cost_ratio": evaluation["cost"] / best if best else None,
            "num_points": evaluation["num_points"],
            "clipped_points": evaluation["clipped_points"],
            "note": NOTE,
        },
        "federation": {
            "num_nodes": len(pool.node_clients),
            "num_clients": int(pool.client_ids.size),
            "rounds": pool.answered,
            "nodes_answering_every_round": _answering_everywhere(pool),
            "rejected_replies": pool.rejected,
        },
        "timings": timings,
        "config": declared.to_flat(),
    }
    if not transform.is_identity:
        result["preprocessing"] = _preprocessing(transform)
    if tuning is not None:
        result["tuning"] = tuning
    if ctx.check is not None:
        result["check"] = {**ctx.check, "budget_fraction": _check_fraction(
            config, subspace=k_needed < pool.dim)}
    if ctx.spare_centers is not None:
        result["spare_centers"] = ctx.spare_centers
    if config.k_auto:
        costs = checkpoint.rounds.get("init-2", {}).get("elbow_costs")
        result["k_selection"] = {
            "method": "elbow (kneedle on the log cost) of weighted k-means on the "
            "noisy-weighted projected server data",
            "k_max": config.k_max,
            "costs": None if costs is None else [float(c) for c in costs],
        }
    if pool.secagg is not None:
        result["privacy"]["secagg"] = {
            "noise": "distributed: each asked client adds N(0, sigma^2 / min_clients); the "
            "ledger records sigma, the noise guaranteed with at least min_clients "
            "survivors (sigma_effective, with the survivors' shares, is a diagnostic)",
            "neighbouring": neighbouring(config),
            "rounds": pool.secagg.rounds,
        }
    for observer in observers:  # observers that report add their own section
        section = observer.report(centers=centers, result=result)
        if section is not None:
            result[observer.result_key] = section
            key = observer.result_key
            say(LOG, f"[{key}] report: diagnostics.json, {key} (not private)")
            for line in observer.summary_lines(section):  # scored on the clients' data
                say(LOG, None, f"[{key}] {line}")
    path = write_artefacts(output_dir, result, seed_is_secret=not randomness.is_secure)
    say(LOG, None, f"{config.algorithm}: cost {evaluation['cost']:.6g} on the clients' raw "
        f"data (optimal {best if best is None else format(best, '.6g')}), "
        f"{evaluation['num_points']} points of which "
        f"{evaluation['clipped_points']} clipped, {timings['total']:.1f} s")
    LOG.info("%s", summary_line(
        result, clipping_summary(declared, config, ctx.estimates), path))
    return result


def _expected_rounds(config: ExperimentConfig, subspace: bool = True) -> int:
    """Protocol rounds the algorithm will run (for the progress lines)."""
    return len(algorithm(config.algorithm).rounds(config.privacy, full_rank=not subspace))


def _check_fraction(config: ExperimentConfig, *, subspace: bool) -> float:
    """The check's share of the calibrated plan's budget weight (0.1 with ``auto``).

    The releases after the estimate round share the budget in proportion to their
    weights (:mod:`fedkmeans.privacy.calibration`); ``privacy.check-share`` is the
    check's weight on the scale of ``privacy.split``, this is its fraction of them all.
    """
    plan = algorithm(config.algorithm).release_plan(config.privacy, subspace=subspace)
    total = sum(r.weight for r in plan)
    return sum(r.weight for r in plan if r.group == CHECK.group) / total


def _answering_everywhere(pool: ClientPool) -> int:
    """Registered nodes that no round rejected or missed (a dead node is not counted)."""
    lost = {r["node"] for r in pool.rejected}
    return len([nid for nid in pool.node_clients if nid not in lost])


def _noise_source(ctx: ServerContext) -> dict:
    """Where the private randomness of the run came from (secret or seeded)."""
    randomness = ctx.private_randomness
    out = {"reproducible": not randomness.is_secure, "notice": randomness.notice}
    if ctx.config.privacy.aggregation == "secagg":
        out["secagg_shares"] = "secret: each client's CSPRNG, fresh per release"
    return out


def _transform(config: ExperimentConfig, checkpoint: Checkpoint, server_x) -> PublicTransform:
    """The run's public transform: the one stored with the plan on a resume, else from Q."""
    stored = checkpoint.plan
    if stored is not None and "transform" in stored:
        return PublicTransform.from_record(stored["transform"])
    return config.public_transform(server_x)


def _preprocessing(transform: PublicTransform) -> dict:
    """``result.json["preprocessing"]``: the public transform, in words and figures."""
    return {
        "transform": "(x - shift) / scale before the clip to the data radius; the centers "
                     "are mapped back (c * scale + shift)",
        "source": "the server's data Q (public): shift = its mean (data.center, private "
                  "runs), scale = its per-feature standard deviation (data.scale)",
        **transform.to_record(),
    }


def _plan(ctx: ServerContext, checkpoint: Checkpoint, transform: PublicTransform, *,
          subspace: bool) -> tuple[ExperimentConfig, dict | None, list[Release]]:
    """The resolved config, the tuning record and the calibrated releases of the run.

    On a resume, the plan stored with the checkpoint (never resolved again: the rounds
    restored from it were calibrated for it). Otherwise :func:`~fedkmeans.tuning.plan.
    plan_run` (the estimate round's release, fixed first; the estimate round and
    :func:`~fedkmeans.tuning.resolve.resolve_auto`; the calibration of the remaining
    releases composed with the estimate round's), stored before any of them.
    """
    stored = checkpoint.plan
    if stored is not None:
        plan = RunPlan.from_dict(stored)
        ctx.releases.update({r.stage: r for r in plan.prior})
        if ESTIMATE.group in checkpoint.rounds:
            ctx.estimates = _read_estimates(ctx, ESTIMATE.server(ctx), plan.prior[0])
        return plan.config, plan.tuning, list(plan.releases)

    def resolve(prior: tuple[Release, ...]) -> tuple[ExperimentConfig, dict | None]:
        for release in prior:  # the estimate round, released before anything is resolved
            ctx.releases[release.stage] = release
            ctx.estimates = _read_estimates(ctx, ESTIMATE.server(ctx), release)
        return resolve_auto(ctx.config, ctx.server_x, ctx.estimates)

    plan = plan_run(ctx.config, subspace=subspace, resolve=resolve)
    checkpoint.save_plan({**plan.to_dict(), "transform": transform.to_record()})
    return plan.config, plan.tuning, list(plan.releases)


def _read_estimates(ctx: ServerContext, noisy, release: Release) -> PrivateEstimates:
    privacy = ctx.config.privacy
    return PrivateEstimates.read(
        noisy, noise_std(release), privacy.level, declared=privacy.public_num_clients)


def _output_dir(config: ExperimentConfig, run_id: int | str) -> Path:
    if config.output_dir:
        return Path(config.output_dir)
    return Path.home() / ".fedkmeans" / "runs" / str(run_id)


def _import_what_the_rounds_use() -> None:
    """Import the accountant's and k-means' packages before the run's clock starts.

    They are imported where they are used (a module that imports them costs ~2 s of
    start-up), and the server uses both in almost every run: importing them here keeps
    that second out of the round timings (``estimate``, ``tuning``), as before.
    """
    import dp_accounting  # noqa: F401 - with scipy.signal and scipy.stats
    import sklearn.cluster  # noqa: F401 - with pandas
