"""Resolve ``auto`` settings before the protocol rounds, from what the server may know.

Inputs: the server's data Q, declared public facts (``privacy.public-num-clients``,
any setting given a number), the level, epsilon, delta and k, and the estimate round's
release (:mod:`fedkmeans.stages.estimate`, read by :mod:`fedkmeans.tuning.estimates`):
a small, accounted share of the budget that tells the clients' sizes, their number
(client level; at data-point level the registered clients are public), their points'
norms and, at client level, the norms of step 1's statistic. Nothing else of the
clients is read, and the same inputs give the same choice (the simulation's randomness
is seeded and public).

What ``auto`` means per setting
    ``data-radius``: the :data:`~fedkmeans.tuning.estimates.RADIUS_QUANTILE` quantile
    of the clients' point norms (the largest norm in Q without an estimate).

    ``max-points-per-client``: the largest client size the estimate round shows.

    Client-level bounds (``clip-*``): a quantile (one of :data:`CLIP_QUANTILES`, chosen
    by the simulation) of the clients' sizes and ``||X^T X||_F`` from the estimate
    round; the sums' bound is the count bound times the balanced ratio ``||S||_F / n``
    of ``n_max``-point clients drawn i.i.d. from Q (:func:`client_bound_quantiles`).

    ``split``: one of :data:`SPLITS` at data-point level, one of :data:`CLIENT_SPLITS`
    at client level; ``lloyds-steps`` (T in :data:`STEPS`): chosen by the simulation
    (:mod:`fedkmeans.tuning.simulation`), which resamples a federation of the estimated
    number and sizes of clients from Q.

    ``check-share`` (the final private choice, :mod:`fedkmeans.stages.check`):
    :data:`CHECK_FRACTION` of the budget on every private FedDP-KMeans run with a fixed
    k. It replaces a public guard: the simulation cannot see how the clients differ from
    Q, so whether the protocol beats k-means on Q alone is decided on the clients' data.
    ``check-clip``: the mean squared distance of Q to the server-only centers.

    ``min-server-weight``, ``min-cluster-count`` and ``extra-centers``: left ``auto``;
    the strategy sets them from each release's noise scale (and the spare centers from
    step 1's released eigen-gap; :mod:`fedkmeans.tuning.thresholds`).

The search is coordinate-wise to stay cheap: the client-level bound quantile first
(default split, T = 0), then the split, then T, each candidate simulated on the same
:data:`REPS` resampled federations with the same noise seeds. Along each setting the
first candidate is the default and a later one replaces it only if it is cheaper in
*every* paired simulation (:func:`paired_search`); quantiles (from the median up) and
T (from 0 up) are line searches that stop at the first candidate that does not. A
mean can be won by margins far below the simulation's resolution, and a far candidate
that wins one by chance costs the most.

The client-level default split puts half of FedDP-Init's budget on step 1: with the
paper's client split, the runs that miss on the paper's mixture have one step-2 center
off in a noisy step-1 subspace, so two components share a pair of centers.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import numpy as np
from threadpoolctl import threadpool_limits

from fedkmeans.artefacts import json_number
from fedkmeans.clustering.client_stats import cluster_sums_counts
from fedkmeans.config import AUTO, CLIENT_SETTINGS, ExperimentConfig
from fedkmeans.privacy.calibration import calibrate
from fedkmeans.privacy.clipping import clip_rows_l2
from fedkmeans.seeding import generator, integer_seed
from fedkmeans.stages import release_plan
from fedkmeans.stages.check import CHOICE_STDS, check_clip, server_only_centers
from fedkmeans.tuning.estimates import RADIUS_QUANTILE, PrivateEstimates
from fedkmeans.tuning.simulation import (
    cluster_means,
    federation_rng,
    server_clusters,
    simulate_cost,
    simulated_federation,
    subspace_coordinates,
)

__all__ = [
    "CLIENT_SPLITS", "CLIP_QUANTILES", "SPLITS", "STEPS", "balanced_sums_ratio",
    "client_bound_quantiles", "client_settings", "paired_search", "resolve_auto",
]

#: Candidate budget splits (FedDP-Init steps 1, 2, 3 sums, 3 counts) at data-point
#: level, default first: the paper's data-point and client-level splits.
SPLITS = ((0.2, 0.2, 0.45, 0.15), (0.35, 0.1, 0.45, 0.1))
#: Candidate splits at client level, default first: half of the init budget on step 1
#: (module docstring), and the paper's client-level split.
CLIENT_SPLITS = ((0.5, 0.1, 0.3, 0.1), (0.35, 0.1, 0.45, 0.1))
#: Candidate numbers T of FedDP-Lloyds steps, in search order.
STEPS = (0, 1, 2, 3)
#: Candidate quantiles of the simulated clients' statistics for the client-level bounds,
#: in search order.
CLIP_QUANTILES = (0.5, 0.75, 1.0)
#: Simulated federations per candidate in the search.
REPS = 2
#: Clients drawn by :func:`balanced_sums_ratio`.
BALANCED_DRAWS = 64
#: ``auto`` settings the strategy resolves during the run, from released values and
#: their noise scales (:mod:`fedkmeans.tuning.thresholds`).
RUNTIME_AUTO = ("min_server_weight", "min_cluster_count", "extra_centers")
#: The client-level bounds (the check's clip is resolved on its own).
_CLIPS = ("clip_covariance", "clip_histogram", "clip_sums", "clip_counts")
#: Share of the budget the final private choice takes with ``check-share = auto``.
CHECK_FRACTION = 0.10
#: Used for ``max-points-per-client = auto`` when the estimate round shows no client size
#: above its noise floor (the earlier default of the key).
FALLBACK_MAX_POINTS = 1000


def client_settings(config: ExperimentConfig) -> dict[str, float]:
    """The resolved settings nodes clip with, as flat ``privacy.*`` keys.

    A setting still ``auto`` is one the run does not use (the check's clip without a
    check) and is not sent.
    """
    return {key: float(getattr(config.privacy, name)) for key, name in CLIENT_SETTINGS.items()
            if getattr(config.privacy, name) != AUTO}


def resolve_auto(
    config: ExperimentConfig, server_x: np.ndarray, estimates: PrivateEstimates | None = None
) -> tuple[ExperimentConfig, dict | None]:
    """Replace every ``auto`` setting but the run-time ones; say what was chosen and why.

    Parameters
    ----------
    config : ExperimentConfig
    server_x : ndarray of shape (m, d)
        The server's data Q.
    estimates : PrivateEstimates or None
        The estimate round's release, read (:mod:`fedkmeans.tuning.estimates`); None
        when the run has none (nothing it estimates is ``auto``, or no noise).

    Returns
    -------
    config : ExperimentConfig
        With numbers in place of ``auto`` (:data:`RUNTIME_AUTO` stay ``auto``).
    record : dict or None
        What was chosen, from which inputs, the simulated cost of every candidate;
        None if nothing was ``auto``. (The seconds it took are in the run's timings.)
    """
    # The simulated problems are small (<= 10,000 points, Q's k-means): on 2 cores one
    # BLAS/OpenMP thread runs the paper mixture's client-level tuning in 0.35-0.40 s,
    # two threads in 0.85-1.2 s (thread start-up and contention dominate).
    with threadpool_limits(limits=1):
        return _resolve_auto(config, server_x, estimates)


def _resolve_auto(
    config: ExperimentConfig, server_x: np.ndarray, estimates: PrivateEstimates | None
) -> tuple[ExperimentConfig, dict | None]:
    privacy = config.privacy
    searched = {"split", "lloyds_steps"} & set(privacy.auto_keys)
    if not set(privacy.auto_keys) - set(RUNTIME_AUTO):
        return config, None
    declared = privacy.public_num_clients
    record: dict = {
        "inputs": {
            "server_points": int(server_x.shape[0]), "dim": int(server_x.shape[1]),
            "level": privacy.level, "epsilon": json_number(privacy.epsilon),
            "delta": privacy.delta, "k": config.largest_k[1],
        },
        "note": "chosen from the server's data, declared public facts and the estimate "
                "round's release (accounted in the ledger); nothing else of the clients "
                "is read",
        "chosen": {}, "why": {}, "candidates": [],
    }
    if estimates is not None:
        record["estimates"] = estimates.to_dict()
        num_clients = estimates.num_clients
    else:
        num_clients = float(declared) if declared else math.nan
    norms = np.linalg.norm(server_x, axis=1)
    if privacy.data_radius == AUTO:
        radius = None if estimates is None else estimates.quantile("norms", RADIUS_QUANTILE)
        if radius is None:
            radius = float(norms.max())
            record["why"]["data_radius"] = "largest norm in the server's data" + (
                "" if estimates is None else " (no norm bin of the estimate round above "
                "its noise floor)")
        else:
            record["why"]["data_radius"] = (
                f"the {RADIUS_QUANTILE:g} quantile of the clients' point norms (estimate round)")
        privacy = replace(privacy, data_radius=radius)
    if privacy.max_points_per_client == AUTO:
        largest = None if estimates is None else estimates.largest_size()
        if largest is None:
            largest = FALLBACK_MAX_POINTS
            record["why"]["max_points_per_client"] = (
                f"{FALLBACK_MAX_POINTS} (no size bin of the estimate round above its noise "
                "floor)")
        else:
            record["why"]["max_points_per_client"] = (
                "the largest client size the estimate round shows (its top occupied bin)")
        privacy = replace(privacy, max_points_per_client=int(largest))
    radius = float(privacy.data_radius)
    clipped = clip_rows_l2(server_x, radius)
    clipped_norms = np.minimum(norms, radius)
    n_max = int(privacy.max_points_per_client)
    full = {"clip_covariance": n_max * float(np.mean(clipped_norms**2)),
            "clip_histogram": float(n_max), "clip_sums": n_max * float(np.mean(clipped_norms)),
            "clip_counts": float(n_max)}
    auto_clips = [name for name in _CLIPS if getattr(privacy, name) == AUTO]

    privacy = replace(privacy, **{name: full[name] for name in auto_clips})
    if privacy.split == AUTO:
        privacy = replace(privacy, split=SPLITS[0] if privacy.level == "datapoint"
                          else CLIENT_SPLITS[0])
    if privacy.lloyds_steps == AUTO:
        privacy = replace(privacy, lloyds_steps=0)
    checkable = (config.algorithm == "feddp-kmeans" and not config.k_auto
                 and config.is_private and privacy.check_share != 0)
    if checkable and privacy.check_clip == AUTO:
        alternative = server_only_centers(server_x, config.k,
                                          integer_seed(config.seed, "init", "server-lloyds"))
        privacy = replace(privacy, check_clip=check_clip(server_x, alternative))
        record["why"]["check_clip"] = (
            "the mean squared distance of the server's points to k-means on them (the "
            "server-only answer the check compares with)")
    check_auto = privacy.check_share == AUTO
    if check_auto:  # the final choice is added after the search (not simulated)
        privacy = replace(privacy, check_share=0.0)
    base = replace(config, privacy=privacy)

    simulate = config.is_private and math.isfinite(num_clients) and (
        searched or (auto_clips and privacy.level == "client"))
    best = base
    if simulate:
        best = _search(config, base, clipped, num_clients, auto_clips, estimates, record,
                       subspace=config.largest_k[1] < server_x.shape[1])
    if check_auto and checkable:
        best = _with_check(best, subspace=config.largest_k[1] < server_x.shape[1])
        record["why"]["check_share"] = (
            f"the final private choice takes {CHECK_FRACTION:.0%} of the budget on every "
            "private FedDP-KMeans run: it returns the protocol's centers only if the "
            "clients' clipped costs prefer them by more than "
            f"{CHOICE_STDS:g} noise standard deviations, else k-means on the server's data")
    elif check_auto:
        record["why"]["check_share"] = "no final choice: it needs FedDP-KMeans with a fixed k"
    return _finish(best, record)


def _search(config: ExperimentConfig, base: ExperimentConfig, clipped: np.ndarray,
            num_clients: float, auto_clips: list[str], estimates: PrivateEstimates | None,
            record: dict, *, subspace: bool) -> ExperimentConfig:
    """The simulated search over the bound quantile, the split and T (module docstring)."""
    privacy = base.privacy
    n_max = int(privacy.max_points_per_client)
    k = config.largest_k[1]
    coords = subspace_coordinates(clipped, k)  # every clustering of Q works in it
    sizes = None if estimates is None else estimates.size_distribution()
    federations: dict[int, object] = {}

    def federation(rep: int):
        if rep not in federations:
            # each federation its own clustering of Q (one k-means++ start): see
            # fedkmeans.tuning.simulation, "Clusters"
            rng = federation_rng(config, rep)
            labels = server_clusters(coords, k, seed=int(rng.integers(2**31)), n_init=1)
            federations[rep] = simulated_federation(
                clipped, labels, max(1, round(num_clients)), n_max, rng, sizes=sizes)
        return federations[rep]

    scores: dict[tuple, list[float]] = {}

    def costs_of(candidate: ExperimentConfig, reps: int) -> list[float]:
        p = candidate.privacy
        key = (candidate.algorithm, tuple(p.split), p.lloyds_steps,
               tuple(getattr(p, c) for c in _CLIPS))
        done = scores.setdefault(key, [])
        if len(done) < reps:
            releases = _calibrated(candidate, subspace=subspace)
            done += [simulate_cost(candidate, federation(rep), releases, rep)
                     for rep in range(len(done), reps)]
        return done[:reps]

    def score(candidate: ExperimentConfig, name: str, settings: dict) -> list[float]:
        costs = costs_of(candidate, REPS)
        record["candidates"].append({"stage": name, **settings,
                                     "simulated_cost": float(np.mean(costs)),
                                     "paired_costs": list(costs)})
        return costs

    def best_of(stage: str, candidates: dict, line_search: bool = False) -> tuple:
        chosen, tried = paired_search(
            list(candidates), lambda v: score(candidates[v], stage, {stage: _plain(v)}),
            line_search=line_search)
        skipped = [_plain(v) for v in candidates if v not in tried]
        if skipped:
            record["candidates"].append({
                "stage": stage, "not_simulated": skipped,
                "because": f"{_plain(list(tried)[-1])} was not lower than "
                           f"{_plain(chosen)} in every paired simulation"})
        return chosen, candidates[chosen]

    best = base
    if auto_clips and privacy.level == "client":
        labels = server_clusters(coords, k, seed=integer_seed(config.seed, "tuning", "clusters"))
        ratio = balanced_sums_ratio(clipped, cluster_means(clipped, labels), n_max,
                                    generator(config.seed, "tuning", "balanced"))
        table = client_bound_quantiles(federation(0), ratio, estimates)

        def with_bounds(q: float):
            bounds = {name: table[q][name] for name in auto_clips}
            if "clip_sums" in bounds and "clip_counts" not in bounds:  # the user's count bound
                bounds["clip_sums"] = ratio * float(best.privacy.clip_counts)
            return replace(best, privacy=replace(best.privacy, **bounds))

        level, best = best_of("clip_quantile", {
            q: with_bounds(q) for q in CLIP_QUANTILES}, line_search=True)
        record["why"]["clip_quantile"] = (
            f"bounds at the {level:g} quantile of the clients' statistics (estimate round; "
            "simulated where its bins are below the noise floor): "
            + _why(level, CLIP_QUANTILES[0], "quantile"))
        if "clip_sums" in auto_clips:
            record["why"]["clip_sums"] = (
                f"the count bound times {ratio:.4g}, the median ||sums||_F / size of "
                f"clients of {n_max} points drawn i.i.d. from the server's data "
                "(the least concentrated sums a large client has)")
    if config.privacy.split == AUTO and config.algorithm == "feddp-kmeans":
        splits = SPLITS if privacy.level == "datapoint" else CLIENT_SPLITS
        chosen, best = best_of("split", {
            s: replace(best, privacy=replace(best.privacy, split=s)) for s in splits})
        record["why"]["split"] = _why(chosen, splits[0], "split")
    if config.privacy.lloyds_steps == AUTO:
        steps, best = best_of("lloyds_steps", {
            t: replace(best, privacy=replace(best.privacy, lloyds_steps=t)) for t in STEPS},
            line_search=True)
        record["why"]["lloyds_steps"] = _why(steps, STEPS[0], "T")
    return best


def _with_check(config: ExperimentConfig, *, subspace: bool) -> ExperimentConfig:
    """``config`` with :data:`CHECK_FRACTION` of its plan's budget weight on the check."""
    others = sum(r.weight for r in release_plan(config.algorithm, config.privacy,
                                                subspace=subspace))
    share = CHECK_FRACTION / (1.0 - CHECK_FRACTION) * others
    return replace(config, privacy=replace(config.privacy, check_share=share))


def paired_search(values: list, costs, *, line_search: bool = False) -> tuple:
    """The candidate a paired comparison of simulated costs supports.

    The first value is the incumbent; a later value replaces it only if its cost is
    lower in *every* paired simulation (the same simulated federations and noise seeds
    for all candidates). A mean can be won by a margin far below the simulation's
    resolution: on the paper mixture (client level, epsilon = 3, seed 0, in a trial with
    one shared clustering of Q) T = 1 beat T = 0 on the mean by 0.08 % of the simulated
    cost and then cost 1.013-1.015 x optimal in 3 of 5 real runs, against 1 of 10 with
    T = 0.

    Parameters
    ----------
    values : list
        Candidates in search order; ``values[0]`` is the default.
    costs : callable
        ``costs(value) -> list of float``, one per paired simulation.
    line_search : bool
        Stop at the first value that does not replace the incumbent.

    Returns
    -------
    chosen
        The incumbent at the end.
    tried : dict
        ``{value: costs}`` of the values simulated, in order.
    """
    tried = {values[0]: costs(values[0])}
    chosen = values[0]
    for value in values[1:]:
        tried[value] = costs(value)
        if all(new < old for new, old in zip(tried[value], tried[chosen], strict=True)):
            chosen = value
        elif line_search:
            break
    return chosen, tried


def client_bound_quantiles(
    federation, sums_ratio: float, estimates: PrivateEstimates | None = None,
) -> dict[float, dict[str, float]]:
    """Client-level bounds at each of :data:`CLIP_QUANTILES` of the clients' statistics.

    Step 1's bound is the quantile of the clients' ``||X^T X||_F``; the histogram's and
    the counts' (their l1 norm is the client's size n_j) the quantile of the sizes.
    Each is read off the estimate round's release (``estimates``: the real clients,
    privately), or off the simulated clients where that release has no bin above its
    noise floor (or there is none). The sums' bound is the counts' bound times
    :func:`balanced_sums_ratio`, not a quantile of its own: a client scales its sums
    and counts by one factor (``NodeData._clip_jointly``), so the ratio of the two
    bounds decides which of them a large client fills. Set from the sums' own
    quantile, the ratio is that of small and skewed clients (``||S_j|| / n_j`` falls
    with n_j and rises with skew), every client fills the count bound first, and the
    sums release with more noise than their signal needs. The balanced ratio is the
    smallest a large client plausibly has (skew only raises it), so a large client
    fills the sums' bound first and only the counts, whose noise weighs less on a
    center than the sums' sigma sqrt(d), lose signal.

    Parameters
    ----------
    federation : SimulatedFederation
    sums_ratio : float
        The sums' bound over the counts' (:func:`balanced_sums_ratio` of Q's clients of
        ``n_max`` points, sums per cluster of k-means on Q with 10 restarts).
    estimates : PrivateEstimates, optional

    Returns
    -------
    dict of float to dict of str to float
        ``{quantile: {"clip_covariance": ..., "clip_histogram": ..., ...}}``.
    """
    covariances = [float(np.linalg.norm(x.T @ x)) for x in federation.points.values()]
    sizes = [float(x.shape[0]) for x in federation.points.values()]
    table = {}
    for q in CLIP_QUANTILES:
        size = covariance = None
        if estimates is not None:
            size, covariance = estimates.quantile("sizes", q), estimates.quantile("moments", q)
        size = float(np.quantile(sizes, q)) if size is None else size
        covariance = float(np.quantile(covariances, q)) if covariance is None else covariance
        table[q] = {"clip_covariance": covariance, "clip_histogram": size,
                    "clip_counts": size, "clip_sums": sums_ratio * size}
    return table


def balanced_sums_ratio(
    population: np.ndarray, centers: np.ndarray, size: int, rng: np.random.Generator,
    draws: int = BALANCED_DRAWS,
) -> float:
    """Median ``||S||_F / n`` of clients of ``size`` points drawn i.i.d. from a population.

    ``S`` (k, d) holds a client's per-cluster sums for ``centers``, as the client
    computes them in step 3 and Lloyds (:func:`~fedkmeans.clustering.client_stats.
    cluster_sums_counts`). A client whose
    points are an i.i.d. sample of the population spreads them over the clusters in
    the population's proportions: the least concentrated sums of a large client.

    Parameters
    ----------
    population : ndarray of shape (n, d)
        Public points (the server's data Q, clipped to the data radius).
    centers : ndarray of shape (k, d)
    size : int
        Points per drawn client (the declared largest client size).
    rng : numpy.random.Generator
    draws : int
        Clients drawn.

    Returns
    -------
    float
    """
    ratios = []
    for _ in range(draws):
        sums, _ = cluster_sums_counts(population[rng.integers(population.shape[0], size=size)],
                                      centers)
        ratios.append(float(np.linalg.norm(sums)) / size)
    return float(np.median(ratios))


def _calibrated(config: ExperimentConfig, *, subspace: bool) -> list:
    """Calibrated releases of ``config``'s plan (cached by the plan's privacy structure).

    The guarantee of a release depends only on its mechanism, noise multiplier
    (scale / sensitivity), weight, group and sampling rate, so plans that differ only
    in their sensitivities (the client-level clip factor) share one calibration: it is
    done once with unit sensitivities and the scales are multiplied back. The
    simulation needs the scales only approximately: the coarse search, unverified.
    """
    p = config.privacy
    plan = release_plan(config.algorithm, p, subspace=subspace)
    if not plan:
        return []
    unit = tuple(replace(r, sensitivity=1.0) for r in plan)
    releases = _calibrate_unit(unit, p.epsilon, p.delta)
    return [replace(r, sensitivity=q.sensitivity, noise_scale=r.noise_scale * q.sensitivity)
            for r, q in zip(releases, plan, strict=True)]


@lru_cache(maxsize=64)
def _calibrate_unit(plan: tuple, epsilon: float, delta: float) -> tuple:
    return tuple(calibrate(plan, epsilon=epsilon, delta=delta, verify=False))


def _why(chosen, default, name: str) -> str:
    """Why a searched setting has its value (:func:`paired_search`)."""
    if chosen == default:
        return (f"the default {name} {_plain(default)}: no other candidate was cheaper in "
                "every paired simulation")
    return f"{name} {_plain(chosen)} was cheaper than the default in every paired simulation"


def _plain(value):
    """A candidate value as JSON (tuples as lists)."""
    return list(value) if isinstance(value, tuple) else value


def _finish(config: ExperimentConfig, record: dict):
    p = config.privacy
    record["chosen"] = {
        "algorithm": config.algorithm,
        "data_radius": p.data_radius, "max_points_per_client": p.max_points_per_client,
        **({name: getattr(p, name) for name in _CLIPS} if p.level == "client" else {}),
        "split": list(p.split), "lloyds_steps": p.lloyds_steps,
        "min_server_weight": p.min_server_weight, "min_cluster_count": p.min_cluster_count,
        "check_share": p.check_share, "check_clip": p.check_clip,
        "extra_centers": p.extra_centers,
    }
    return config, record
