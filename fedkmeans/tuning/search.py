"""The simulated search of :mod:`fedkmeans.tuning.resolve`: candidates, paired costs.

Each candidate setting is simulated (:mod:`fedkmeans.tuning.simulation`) on the same
:data:`REPS` resampled federations (:mod:`fedkmeans.tuning.federation`) with the same
noise seeds, and replaces the default only if cheaper in every paired simulation
(:func:`paired_search`).
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import replace
from functools import lru_cache

import numpy as np

from fedkmeans.algorithms import algorithm
from fedkmeans.clustering.client_stats import cluster_sums_counts
from fedkmeans.config import AUTO, ProtocolConfig
from fedkmeans.privacy.accountant import forget_composed_epsilons
from fedkmeans.privacy.calibration import calibrate
from fedkmeans.seeding import generator, integer_seed
from fedkmeans.tuning.estimates import PrivateEstimates
from fedkmeans.tuning.federation import (
    cluster_means,
    federation_rng,
    server_clusters,
    simulated_federation,
    subspace_coordinates,
)
from fedkmeans.tuning.simulation import simulate_cost

__all__ = [
    "CLIENT_SPLITS", "CLIPS", "CLIP_QUANTILES", "REPS", "SEARCH_BAND", "SPLITS", "STEPS",
    "balanced_sums_ratio", "client_bound_quantiles", "forget_calibrations", "paired_search",
    "search",
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
#: PLD discretization of the candidates' calibration (coarse, unverified: the
#: simulation needs the noise scales only approximately; within 0.5 % of 1e-3's).
SEARCH_DISCRETIZATION = 1e-2
#: Composed epsilon, as fractions of the target, at which a candidate's calibration stops
#: (wider than the verified calibration's 0.993-0.999: the secant's second step usually
#: lands in it, and the simulation needs the scales to about 1 %).
SEARCH_BAND = (0.985, 1.0)
#: The client-level bounds (the check's clip is resolved on its own).
CLIPS = ("clip_covariance", "clip_histogram", "clip_sums", "clip_counts")

def search(config: ProtocolConfig, base: ProtocolConfig, clipped: np.ndarray,
            num_clients: float, auto_clips: list[str], estimates: PrivateEstimates | None,
            record: dict, *, subspace: bool) -> ProtocolConfig:
    """The simulated search over the bound quantile, the split and T (module docstring).

    A candidate's :data:`REPS` simulations run at once on :func:`search_threads`
    threads (each simulation is a function of its candidate, federation and seed
    alone, so the choice and the record are those of one thread).
    """
    threads = search_threads()
    with ThreadPoolExecutor(threads) as workers:
        return _search(workers, threads > 1, config, base, clipped, num_clients, auto_clips,
                       estimates, record, subspace=subspace)


def search_threads() -> int:
    """Threads of the search: one per simulation of a candidate, at most one per core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(REPS, cores or 1))


def _search(workers: ThreadPoolExecutor, together: bool, config: ProtocolConfig,
            base: ProtocolConfig, clipped: np.ndarray, num_clients: float,
            auto_clips: list[str], estimates: PrivateEstimates | None, record: dict, *,
            subspace: bool) -> ProtocolConfig:
    privacy = base.privacy
    n_max = int(privacy.max_points_per_client)
    k = config.largest_k[1]
    coords = subspace_coordinates(clipped, k)  # every clustering of Q works in it
    sizes = None if estimates is None else estimates.size_distribution()
    federations: dict[int, object] = {}

    def federation(rep: int):
        if rep not in federations:
            # each federation its own clustering of Q (one k-means++ start): see
            # fedkmeans.tuning.federation, "Clusters"
            rng = federation_rng(config, rep)
            labels = server_clusters(coords, k, seed=int(rng.integers(2**31)), n_init=1)
            federations[rep] = simulated_federation(
                clipped, labels, max(1, round(num_clients)), n_max, rng, sizes=sizes)
        return federations[rep]

    scores: dict[tuple, dict[int, Future]] = {}
    pending: list[Future] = []

    def cost_of(candidate: ProtocolConfig, rep: int) -> float:
        p = candidate.privacy
        key = (candidate.algorithm, tuple(p.split), p.lloyds_steps,
               tuple(getattr(p, c) for c in CLIPS))
        done = scores.setdefault(key, {})
        if rep not in done:
            releases = _calibrated(candidate, subspace=subspace)
            wait(pending)  # one simulation at a time per federation
            # on several threads every missing rep at once (a challenger's second runs
            # even if its first loses); on one, only the rep asked for
            pending[:] = [done.setdefault(r, workers.submit(
                lambda r=r: simulate_cost(candidate, federation(r), releases, r)))
                for r in (range(REPS) if together else [rep]) if r not in done]
        return done[rep].result()

    def best_of(stage: str, candidates: dict, line_search: bool = False) -> tuple:
        chosen, tried = paired_search(
            list(candidates), lambda v, rep: cost_of(candidates[v], rep), REPS,
            line_search=line_search)
        for value, costs in tried.items():
            record["candidates"].append({"stage": stage, stage: _plain(value),
                                         "simulated_cost": float(np.mean(costs)),
                                         "paired_costs": list(costs)})
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
    if config.privacy.split == AUTO and algorithm(config.algorithm).tunable_split:
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


def paired_search(values: list, cost, reps: int, *, line_search: bool = False) -> tuple:
    """The candidate a paired comparison of simulated costs supports.

    The first value is the incumbent; a later value replaces it only if its cost is
    lower in *every* paired simulation (the same simulated federations and noise seeds
    for all candidates). A mean can be won by a margin far below the simulation's
    resolution: on the paper mixture (client level, epsilon = 3, seed 0, in a trial with
    one shared clustering of Q) T = 1 beat T = 0 on the mean by 0.08 % of the simulated
    cost and then cost 1.013-1.015 x optimal in 3 of 5 real runs, against 1 of 10 with
    T = 0.

    A challenger's simulations run one at a time and stop at the first that is not
    cheaper than the incumbent's: it can no longer win, so the rest would not change
    the choice (the incumbent's are always all run).

    Parameters
    ----------
    values : list
        Candidates in search order; ``values[0]`` is the default.
    cost : callable
        ``cost(value, rep) -> float``, the ``rep``-th paired simulation.
    reps : int
        Paired simulations per candidate.
    line_search : bool
        Stop at the first value that does not replace the incumbent.

    Returns
    -------
    chosen
        The incumbent at the end.
    tried : dict
        ``{value: costs}`` of the values simulated, in order (a beaten challenger's
        up to the first simulation it did not win).
    """
    tried = {values[0]: [cost(values[0], rep) for rep in range(reps)]}
    chosen = values[0]
    for value in values[1:]:
        costs = tried[value] = []
        for rep in range(reps):
            costs.append(cost(value, rep))
            if not costs[-1] < tried[chosen][rep]:
                break
        if len(costs) == reps and costs[-1] < tried[chosen][-1]:
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


def _calibrated(config: ProtocolConfig, *, subspace: bool) -> list:
    """Calibrated releases of ``config``'s plan (cached by the plan's privacy structure).

    The guarantee of a release depends only on its mechanism, noise multiplier
    (scale / sensitivity), weight, group and sampling rate, so plans that differ only
    in their sensitivities (the client-level clip factor) share one calibration: it is
    done once with unit sensitivities and the scales are multiplied back. The
    simulation needs the scales only approximately: the coarse search, unverified, at
    :data:`SEARCH_DISCRETIZATION`, stopped in :data:`SEARCH_BAND`.
    """
    p = config.privacy
    plan = algorithm(config.algorithm).release_plan(p, subspace=subspace)
    if not plan:
        return []
    unit = tuple(replace(r, sensitivity=1.0) for r in plan)
    releases = _calibrate_unit(unit, p.epsilon, p.delta)
    return [replace(r, sensitivity=q.sensitivity, noise_scale=r.noise_scale * q.sensitivity)
            for r, q in zip(releases, plan, strict=True)]


def forget_calibrations() -> None:
    """Forget every calibration this process memoised: the candidates' and the PLD's.

    Both are pure functions of a plan, so no result changes; a benchmark that runs
    configurations one after another in one process calls it to time each run's
    tuning and calibration as a fresh process would make them.
    """
    _calibrate_unit.cache_clear()
    forget_composed_epsilons()


@lru_cache(maxsize=64)
def _calibrate_unit(plan: tuple, epsilon: float, delta: float) -> tuple:
    return tuple(calibrate(plan, epsilon=epsilon, delta=delta, verify=False,
                           search_discretization=SEARCH_DISCRETIZATION,
                           search_band=SEARCH_BAND))


def _why(chosen, default, name: str) -> str:
    """Why a searched setting has its value (:func:`paired_search`)."""
    if chosen == default:
        return (f"the default {name} {_plain(default)}: no other candidate was cheaper in "
                "every paired simulation")
    return f"{name} {_plain(chosen)} was cheaper than the default in every paired simulation"


def _plain(value):
    """A candidate value as JSON (tuples as lists)."""
    return list(value) if isinstance(value, tuple) else value
