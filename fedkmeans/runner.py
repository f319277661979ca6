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
from fedkmeans.config import ExperimentConfig, check_server_points, parse_config
from fedkmeans.evaluation import NOTE, federated_metrics, optimal_cost
from fedkmeans.privacy.accountant import Release
from fedkmeans.privacy.calibration import calibrate
from fedkmeans.rundir import claim_output_dir
from fedkmeans.server.context import ServerContext
from fedkmeans.server.observer import RunObserver
from fedkmeans.server.pool import ClientPool
from fedkmeans.server.thresholds import noise_std
from fedkmeans.stages.estimate import ESTIMATE, estimate_noise_multiplier
from fedkmeans.tuning.estimates import PrivateEstimates
from fedkmeans.tuning.resolve import RUNTIME_AUTO, client_settings, resolve_auto

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

    ctx = ServerContext(
        checkpoint=checkpoint, config=config, pool=pool, server_x=server_x, releases={},
        observers=observers,
    )
    if config.privacy.aggregation == "secagg":  # clients add noise shares, SecAgg+ sums
        from fedkmeans.server.secagg import SecAggAggregator

        pool.secagg = SecAggAggregator(config, ctx.releases)
    t0 = time.perf_counter()
    config, tuning, releases = _plan(ctx, checkpoint, subspace=k_needed < pool.dim)
    timings["tuning"] = time.perf_counter() - t0
    ctx.config = config
    ctx.releases.update({r.stage: r for r in releases})
    ctx.expected_rounds = len(checkpoint.rounds.keys() & set(PLAN_FREE_ROUNDS)) + \
        _expected_rounds(config, subspace=k_needed < pool.dim)
    pool.settings = client_settings(config)
    if pool.secagg is not None:
        pool.secagg.config = config
    for observer in observers:  # e.g. the curious server: sees the resolved settings
        observer.on_start(config)
    randomness = ctx.private_randomness
    if config.is_private and not randomness.is_secure:
        LOG.warning("%s", randomness.notice)
    centers = algorithm(config.algorithm).run(ctx)
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
        "centers_from": _centers_from(declared, config, ctx),
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
            "accountant": "dp-accounting PLD, " + _neighbouring(config),
            "noise": _noise_source(ctx),
            "guarantee": _guarantee(config, spent, ctx),
        },
        "metrics": {
            **{key: evaluation[key] for key in ("cost", "accuracy", "ari", "nmi")},
            "optimal_cost": best,
            "cost_ratio": evaluation["cost"] / best if best else None,
            "num_points": evaluation["num_points"],
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
    if tuning is not None:
        result["tuning"] = tuning
    if ctx.check is not None:
        result["check"] = ctx.check
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
            "neighbouring": _neighbouring(config),
            "rounds": pool.secagg.rounds,
        }
    for observer in observers:  # observers that report add their own section
        section = observer.report(centers=centers, result=result)
        if section is not None:
            result[observer.result_key] = section
            for line in observer.summary_lines(section):
                LOG.info("[%s] %s", observer.result_key, line)
    path = write_artefacts(output_dir, result, seed_is_secret=not randomness.is_secure)
    LOG.info(
        "%s: cost %.4f (optimal %s), epsilon %s%s; wrote %s",
        config.algorithm, evaluation["cost"], best, result["privacy"]["epsilon"],
        _clipping_summary(declared, config, ctx.estimates), path,
    )
    return result


def _expected_rounds(config: ExperimentConfig, subspace: bool = True) -> int:
    """Protocol rounds the algorithm will run (for the progress lines)."""
    return len(algorithm(config.algorithm).rounds(config.privacy, full_rank=not subspace))


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


def _guarantee(config: ExperimentConfig, spent: float, ctx: ServerContext) -> str:
    """One sentence: what release.json is protected by, and against whom."""
    if math.isinf(spent):
        return "none: the run released client statistics without noise"
    sentence = (
        f"({spent:.4g}, {config.privacy.delta:g})-DP for neighbours that differ by "
        f"{_neighbouring(config)}, for everything in release.json"
    )
    if not ctx.private_randomness.is_secure:
        sentence += ", only against someone who does not know the seed"
    return sentence


def _neighbouring(config: ExperimentConfig) -> str:
    """The neighbouring relation the accounting holds for (docs/secagg.md)."""
    if config.privacy.level == "datapoint":
        return "add/remove one data point"
    if config.privacy.aggregation == "secagg":
        return "zero-out one client (its participation is visible to the server)"
    return "add/remove one client"


def _plan(ctx: ServerContext, checkpoint: Checkpoint, *, subspace: bool
          ) -> tuple[ExperimentConfig, dict | None, list[Release]]:
    """The resolved config, the tuning record and the calibrated releases of the run.

    On a resume, the plan stored with the checkpoint (never resolved again: the rounds
    restored from it were calibrated for it). Otherwise the estimate round when a
    setting it estimates is ``auto`` (its noise fixed first, :func:`estimate_release`),
    then :func:`~fedkmeans.tuning.resolve.resolve_auto`, then the calibration of the
    remaining releases composed with the estimate round's, stored before any of them.
    """
    config = ctx.config
    stored = checkpoint.plan
    if stored is not None:
        prior = [Release(**r) for r in stored["prior"]]
        ctx.releases.update({r.stage: r for r in prior})
        if ESTIMATE.group in checkpoint.rounds:
            ctx.estimates = _read_estimates(ctx, ESTIMATE.server(ctx), prior[0])
        return (parse_config(stored["config"]), stored["tuning"],
                [Release(**r) for r in stored["releases"]])
    prior = []
    if needs_estimates(config):
        release = estimate_release(config.privacy)
        ctx.releases[release.stage] = release
        ctx.estimates = _read_estimates(ctx, ESTIMATE.server(ctx), release)
        prior = [release]
    resolved, tuning = resolve_auto(config, ctx.server_x, ctx.estimates)
    plan = algorithm(resolved.algorithm).release_plan(resolved.privacy, subspace=subspace)
    epsilon = resolved.privacy.epsilon if resolved.is_private else math.inf
    releases = calibrate(plan, epsilon=epsilon, delta=resolved.privacy.delta,
                         prior=prior) if plan else []
    checkpoint.save_plan({
        "config": resolved.to_flat(), "tuning": tuning,
        "prior": [r.to_dict() for r in prior], "releases": [r.to_dict() for r in releases]})
    return resolved, tuning, releases


def needs_estimates(config: ExperimentConfig) -> bool:
    """Whether the run has an estimate round.

    Private, a setting it feeds is ``auto``, and the algorithm may release something
    (k-means on the server's data with T = 0 asks the clients nothing).
    """
    fed = set(config.privacy.auto_keys) - set(RUNTIME_AUTO) - {"check_share", "check_clip"}
    releases = algorithm(config.algorithm).init or config.privacy.lloyds_steps != 0
    return config.is_private and bool(fed) and bool(releases)


def estimate_release(privacy) -> Release:
    """The estimate round's release, its noise fixed before the rest of the plan exists.

    Sensitivity from the stage's statistic (:mod:`fedkmeans.stages.estimate`), noise
    multiplier :func:`~fedkmeans.stages.estimate.estimate_noise_multiplier` of the run's
    target and ``privacy.estimate-share``.
    """
    planned = ESTIMATE.plan(privacy, ESTIMATE.group)[0]
    z = estimate_noise_multiplier(privacy.epsilon, privacy.delta, privacy.estimate_share)
    return planned.to_release(z * planned.sensitivity)


def _read_estimates(ctx: ServerContext, noisy, release: Release) -> PrivateEstimates:
    privacy = ctx.config.privacy
    return PrivateEstimates.read(
        noisy, noise_std(release), privacy.level, declared=privacy.public_num_clients,
        registered=int(ctx.pool.client_ids.size))


def _centers_from(declared: ExperimentConfig, config: ExperimentConfig,
                  ctx: ServerContext) -> str:
    """The algorithm whose centers the run returns (the final choice may pick Q's).

    The check picks them after the protocol; the estimate round before it, when it
    shows too few clients (the resolved algorithm then differs from the declared one).
    """
    if ctx.check is not None and ctx.check["chosen"] == "server-only":
        return "server-lloyds (k-means on the server's data, chosen by the final private choice)"
    if config.algorithm != declared.algorithm:
        return (f"{config.algorithm} (k-means on the server's data: the estimate round shows "
                "too few clients for the protocol at this epsilon)")
    return config.algorithm


def _clipping_summary(declared: ExperimentConfig, config: ExperimentConfig,
                      estimates: PrivateEstimates | None) -> str:
    """The run's clipping, for its summary line: the estimated share of points beyond Δ.

    From the estimate round's release (post-processing); '' without one. Says what to
    set when a declared radius clips more than 5 % of the points.
    """
    if estimates is None:
        return ""
    radius = float(config.privacy.data_radius)
    outside = estimates.outside_fraction(radius)
    if outside is None:
        return ""
    hint = ("; set privacy.data-radius=auto to estimate it"
            if "data_radius" not in declared.privacy.auto_keys and outside > 0.05 else "")
    return (f"; about {100 * outside:.1f}% of the points (private estimate) lie outside "
            f"privacy.data-radius = {radius:.4g}{hint}")


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
