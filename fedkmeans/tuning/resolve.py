"""Resolve ``auto`` settings from public information, before any private round.

Inputs, all public: the server's data Q, the number of clients C (the server learns
it at registration from the client ids), the declared largest client size
``privacy.max-points-per-client``, the level, epsilon, delta and k. The clients' data
is never read, so the choice costs no privacy budget (``epsilon = 0``), and the same
inputs always give the same choice (the simulation's randomness is seeded and public).

What ``auto`` means per setting
    ``data-radius``: the largest norm in Q (a point outside it is clipped onto it).

    Client-level bounds (``clip-*``): ``f`` times the statistic of a client of
    ``n_max`` typical points: ``f n_max`` (histogram, counts: l1 = the number of
    points), ``f n_max mean ||q||^2`` (Frobenius norm of ``sum p p^T``) and
    ``f n_max mean ||q||`` (cluster sums), with ``f`` in :data:`CLIP_FACTORS` chosen
    by the simulation.

    ``split`` (one of :data:`SPLITS`) and ``lloyds-steps`` (T in :data:`STEPS`): chosen
    by the simulation. With either of them ``auto`` the simulation also runs the
    server-only answer (k-means on Q, no private round), and the run gives that
    answer, spending nothing, when the simulated protocol does not beat it: the
    guard for "never worse than the server alone" is decided publicly, so it costs no
    budget (a private cost comparison would cost a share of epsilon and, at client
    level, is drowned by noise of the order of a whole client's cost).

    ``min-server-weight`` and ``min-cluster-count``: left ``auto``; the strategy sets
    them from each release's noise scale (:mod:`fedkmeans.tuning.thresholds`).

The search is coordinate-wise to stay cheap: the clip factor first (paper split,
T = 0), then the split, then T, each candidate scored by its mean simulated cost
over :data:`REPS` resampled federations (common to all candidates).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from fedkmeans.config import AUTO, CLIENT_KEYS, ExperimentConfig
from fedkmeans.privacy.budget import release_plan
from fedkmeans.privacy.calibration import calibrate
from fedkmeans.privacy.clipping import clip_rows_l2
from fedkmeans.tuning.simulation import federation_rng, simulate_cost, simulated_federation

__all__ = ["CLIP_FACTORS", "SPLITS", "STEPS", "client_settings", "resolve_auto"]

#: Candidate budget splits (FedDP-Init steps 1, 2, 3 sums, 3 counts): the paper's
#: data-point and client-level splits.
SPLITS = ((0.2, 0.2, 0.45, 0.15), (0.35, 0.1, 0.45, 0.1))
#: Candidate numbers T of FedDP-Lloyds steps.
STEPS = (0, 1, 2, 3)
#: Candidate fractions f of a full client's statistic for the client-level bounds.
CLIP_FACTORS = (1.0, 0.5, 0.25)
#: Simulated federations per candidate.
REPS = 2
_CLIPS = CLIENT_KEYS[1:]
#: Candidate name of the server-only answer.
SERVER_ONLY = "server-only"


def client_settings(config: ExperimentConfig) -> dict[str, float]:
    """The resolved settings nodes clip with, as flat ``privacy.*`` keys."""
    return {"privacy." + name.replace("_", "-"): float(getattr(config.privacy, name))
            for name in CLIENT_KEYS}


def resolve_auto(
    config: ExperimentConfig, server_x: np.ndarray, num_clients: int
) -> tuple[ExperimentConfig, dict | None]:
    """Replace every ``auto`` setting but the thresholds; say what was chosen and why.

    Parameters
    ----------
    config : ExperimentConfig
    server_x : ndarray of shape (m, d)
        The server's data Q.
    num_clients : int
        Registered clients C.

    Returns
    -------
    config : ExperimentConfig
        With numbers in place of ``auto`` (``min-server-weight`` and
        ``min-cluster-count`` stay ``auto``); ``algorithm = server-lloyds`` with T = 0
        when the server-only answer was chosen.
    record : dict or None
        What was chosen, from which public inputs, the simulated cost of every
        candidate, the seconds it took, and ``epsilon_spent = 0``; None if nothing
        was ``auto``.
    """
    privacy = config.privacy
    searched = {"split", "lloyds_steps"} & set(privacy.auto_keys)
    if not set(privacy.auto_keys) - {"min_server_weight", "min_cluster_count"}:
        return config, None
    start = time.perf_counter()
    record: dict = {
        "epsilon_spent": 0.0,
        "inputs": {
            "server_points": int(server_x.shape[0]), "dim": int(server_x.shape[1]),
            "num_clients": int(num_clients),
            "max_points_per_client": privacy.max_points_per_client,
            "level": privacy.level, "epsilon": _number(privacy.epsilon),
            "delta": privacy.delta, "k": config.largest_k[1],
        },
        "note": "chosen from the server's data and declared public facts only; no client "
                "data was read, so the choice spends no privacy budget",
        "chosen": {}, "why": {}, "candidates": [],
    }
    norms = np.linalg.norm(server_x, axis=1)
    if privacy.data_radius == AUTO:
        privacy = replace(privacy, data_radius=float(norms.max()))
        record["why"]["data_radius"] = "largest norm in the server's data"
    radius = float(privacy.data_radius)
    clipped = clip_rows_l2(server_x, radius)
    clipped_norms = np.minimum(norms, radius)
    n_max = privacy.max_points_per_client
    full = {"clip_covariance": n_max * float(np.mean(clipped_norms**2)),
            "clip_histogram": float(n_max), "clip_sums": n_max * float(np.mean(clipped_norms)),
            "clip_counts": float(n_max)}
    auto_clips = [name for name in _CLIPS if getattr(privacy, name) == AUTO]

    def with_factor(p, factor: float):
        return replace(p, **{name: factor * full[name] for name in auto_clips})

    privacy = with_factor(privacy, 1.0)
    if privacy.split == AUTO:
        privacy = replace(privacy, split=SPLITS[0] if privacy.level == "datapoint"
                          else SPLITS[1])
    if privacy.lloyds_steps == AUTO:
        privacy = replace(privacy, lloyds_steps=0)
    base = replace(config, privacy=privacy)

    simulate = config.is_private and (
        searched or (auto_clips and privacy.level == "client"))
    if not simulate:
        return _finish(base, record, start)
    k = config.largest_k[1]
    federations = [
        simulated_federation(clipped, num_clients, n_max, k, federation_rng(config, rep))
        for rep in range(REPS)
    ]

    scores: dict[tuple, float] = {}

    def score(candidate: ExperimentConfig, name: str, settings: dict) -> float:
        p = candidate.privacy
        key = (candidate.algorithm, tuple(p.split), p.lloyds_steps,
               tuple(getattr(p, c) for c in _CLIPS))
        if key not in scores:
            plan = release_plan(candidate.algorithm, p, subspace=k < server_x.shape[1])
            releases = calibrate(plan, epsilon=p.epsilon, delta=p.delta) if plan else []
            scores[key] = float(np.mean([
                simulate_cost(candidate, fed, releases, rep)
                for rep, fed in enumerate(federations)]))
            record["candidates"].append(
                {"stage": name, **settings, "simulated_cost": scores[key]})
        return scores[key]

    def best_of(stage: str, candidates: dict) -> tuple:
        costs = {value: score(candidate, stage, {stage: _plain(value)})
                 for value, candidate in candidates.items()}
        chosen = min(costs, key=costs.get)
        return chosen, candidates[chosen], costs[chosen]

    best, best_cost = base, math.inf
    if auto_clips and privacy.level == "client":
        factor, best, best_cost = best_of("clip_factor", {
            f: replace(best, privacy=with_factor(best.privacy, f)) for f in CLIP_FACTORS})
        record["why"]["clip_factor"] = (
            f"f = {factor:g} of a full client's statistic had the lowest simulated cost")
    if config.privacy.split == AUTO and config.algorithm == "feddp-kmeans":
        _, best, best_cost = best_of("split", {
            s: replace(best, privacy=replace(best.privacy, split=s)) for s in SPLITS})
        record["why"]["split"] = "lowest simulated cost among the paper's two splits"
    if config.privacy.lloyds_steps == AUTO:
        steps, best, best_cost = best_of("lloyds_steps", {
            t: replace(best, privacy=replace(best.privacy, lloyds_steps=t)) for t in STEPS})
        record["why"]["lloyds_steps"] = f"T = {steps} had the lowest simulated cost"
    if searched:
        server_only = replace(best, algorithm="server-lloyds",
                              privacy=replace(best.privacy, lloyds_steps=0))
        theirs = score(server_only, SERVER_ONLY, {})
        if theirs <= best_cost:
            best = server_only
            record["why"]["algorithm"] = (
                f"k-means on the server's data alone (simulated cost {theirs:.4g}) was not "
                f"beaten by the private protocol ({best_cost:.4g}): no private round is run")
        else:
            record["why"]["algorithm"] = (
                f"the private protocol (simulated cost {best_cost:.4g}) beat k-means on the "
                f"server's data alone ({theirs:.4g})")
    return _finish(best, record, start)


def _plain(value):
    """A candidate value as JSON (tuples as lists)."""
    return list(value) if isinstance(value, tuple) else value


def _finish(config: ExperimentConfig, record: dict, start: float):
    p = config.privacy
    record["chosen"] = {
        "algorithm": config.algorithm,
        "data_radius": p.data_radius,
        **({name: getattr(p, name) for name in _CLIPS} if p.level == "client" else {}),
        "split": list(p.split), "lloyds_steps": p.lloyds_steps,
        "min_server_weight": p.min_server_weight, "min_cluster_count": p.min_cluster_count,
    }
    record["seconds"] = time.perf_counter() - start
    return config, record


def _number(value: float) -> float | str:
    return "inf" if math.isinf(value) else float(value)
