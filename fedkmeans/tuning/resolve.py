"""Resolve ``auto`` settings before the protocol rounds, from what the server may know.

Inputs: the server's data Q, declared public facts (``privacy.public-num-clients``,
any setting given a number), the level, epsilon, delta and k, and the estimate round's
release (:mod:`fedkmeans.stages.estimate`, read by :mod:`fedkmeans.tuning.estimates`):
a small, accounted share of the budget that tells the clients' sizes, their (noisy)
number, their points'
norms and, at client level, the norms of step 1's statistic. Nothing else of the
clients is read, and the same inputs give the same choice (the simulation's randomness
is seeded and public).

What ``auto`` means per setting
    ``data-radius``: the :data:`~fedkmeans.tuning.estimates.RADIUS_QUANTILE` quantile
    of the clients' point norms (the largest norm in Q without an estimate).

    ``max-points-per-client``: the largest client size the estimate round shows; at
    data-point level an upper bound that is below the true largest size with
    probability at most 5 % (:mod:`fedkmeans.tuning.estimates`), because an
    under-estimate makes the server's re-clip bite honest clients.

    Client-level bounds (``clip-*``): a quantile (one of ``CLIP_QUANTILES``, chosen by
    the simulation) of the clients' sizes and ``||X^T X||_F`` from the estimate round;
    the sums' bound is the count bound times the balanced ratio ``||S||_F / n`` of
    ``n_max``-point clients drawn i.i.d. from Q
    (:func:`~fedkmeans.tuning.search.client_bound_quantiles`).

    ``split``: one of ``SPLITS`` at data-point level, one of ``CLIENT_SPLITS``
    at client level; ``lloyds-steps`` (T in ``STEPS``): chosen by the simulation
    (:mod:`fedkmeans.tuning.simulation`) on a federation of the estimated number and
    sizes of clients resampled from Q (:mod:`fedkmeans.tuning.federation`).

    ``check-share`` (the final private choice, :mod:`fedkmeans.stages.check`):
    :data:`CHECK_FRACTION` of the budget on every private FedDP-KMeans run with a fixed
    k. It replaces a public guard: the simulation cannot see how the clients differ from
    Q, so whether the protocol beats k-means on Q alone is decided on the clients' data.
    ``check-clip``: left ``auto`` here; the check round sets it from the protocol's
    centers, the server-only centers and Q (:func:`~fedkmeans.stages.check.check_clip`).

    ``min-server-weight``, ``min-cluster-count`` and ``extra-centers``: left ``auto``;
    the algorithm sets them from each release's noise scale (and the spare centers from
    step 1's released eigen-gap; :mod:`fedkmeans.server.thresholds`).

The search is coordinate-wise to stay cheap (:mod:`fedkmeans.tuning.search`): the
client-level bound quantile first (default split, T = 0), then the split, then T, each
candidate simulated on the same resampled federations with the same noise seeds. Along
each setting the first candidate is the default and a later one replaces it only if it
is cheaper in *every* paired simulation; quantiles (from the median up) and T (from 0
up) are line searches that stop at the first candidate that does not. A mean can be won
by margins far below the simulation's resolution, and a far candidate that wins one by
chance costs the most.

The client-level default split puts half of FedDP-Init's budget on step 1: with the
paper's client split, the runs that miss on the paper's mixture have one step-2 center
off in a noisy step-1 subspace, so two components share a pair of centers.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from fedkmeans.algorithms import algorithm
from fedkmeans.algorithms.server_baselines import SERVER_LLOYDS
from fedkmeans.artefacts import json_number
from fedkmeans.config import AUTO, CLIENT_SETTINGS, RUNTIME_AUTO, ProtocolConfig
from fedkmeans.privacy.clipping import clip_rows_l2
from fedkmeans.stages.check import CHOICE_STDS
from fedkmeans.tuning.estimates import MISS_PROBABILITY, RADIUS_QUANTILE, PrivateEstimates
from fedkmeans.tuning.search import CLIENT_SPLITS, SPLITS, search

__all__ = [
    "CHECK_FRACTION", "RUNTIME_AUTO", "client_settings", "resolve_auto",
]

#: The client-level bounds (the check's clip is resolved on its own).
_CLIPS = ("clip_covariance", "clip_histogram", "clip_sums", "clip_counts")
#: Fraction of the calibrated plan's budget weight (the releases after the estimate
#: round, which share the budget in proportion to their weights) the final private
#: choice takes with ``check-share = auto``; its weight on the scale of ``split`` is
#: ``CHECK_FRACTION / (1 - CHECK_FRACTION)`` times the other releases' total weight.
CHECK_FRACTION = 0.10
#: Used for ``max-points-per-client = auto`` when the estimate round shows no client size
#: above its noise floor (the earlier default of the key).
FALLBACK_MAX_POINTS = 1000


def client_settings(config: ProtocolConfig) -> dict[str, float]:
    """The resolved settings nodes clip with, as flat ``privacy.*`` keys.

    A setting still ``auto`` is one the run does not use (the check's clip without a
    check) and is not sent.
    """
    return {key: float(getattr(config.privacy, name)) for key, name in CLIENT_SETTINGS.items()
            if getattr(config.privacy, name) != AUTO}


def resolve_auto(
    config: ProtocolConfig, server_x: np.ndarray, estimates: PrivateEstimates | None = None
) -> tuple[ProtocolConfig, dict | None]:
    """Replace every ``auto`` setting but the run-time ones; say what was chosen and why.

    Parameters
    ----------
    config : ProtocolConfig
    server_x : ndarray of shape (m, d)
        The server's data Q.
    estimates : PrivateEstimates or None
        The estimate round's release, read (:mod:`fedkmeans.tuning.estimates`); None
        when the run has none (nothing it estimates is ``auto``, or no noise).

    Returns
    -------
    config : ProtocolConfig
        With numbers in place of ``auto`` (:data:`RUNTIME_AUTO` stay ``auto``).
    record : dict or None
        What was chosen, from which inputs, the simulated cost of every candidate;
        None if nothing was ``auto``. (The seconds it took are in the run's timings.)
    """
    # The simulated problems are small (<= 10,000 points, Q's k-means): on 2 cores one
    # BLAS/OpenMP thread runs the paper mixture's client-level tuning in 0.35-0.40 s,
    # two threads in 0.85-1.2 s (thread start-up and contention dominate). The limit
    # covers only the runtimes loaded when it starts, and scikit-learn (its OpenMP) is
    # imported where k-means runs: the controller loads it first.
    from fedkmeans.clustering.scikit import thread_controller

    with thread_controller().limit(limits=1):
        return _resolve_auto(config, server_x, estimates)


def _resolve_auto(
    config: ProtocolConfig, server_x: np.ndarray, estimates: PrivateEstimates | None
) -> tuple[ProtocolConfig, dict | None]:
    privacy = config.privacy
    read = set(config.auto_keys)  # not split without FedDP-Init (nothing to search)
    searched = {"split", "lloyds_steps"} & read
    if not read - set(RUNTIME_AUTO):
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
        elif privacy.level == "datapoint":
            record["why"]["max_points_per_client"] = (
                "an upper bound on the largest client size from the estimate round's rank "
                f"histogram, below it with probability at most {MISS_PROBABILITY:g}")
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
    checkable = (algorithm(config.algorithm).final_choice and not config.k_auto
                 and config.is_private and privacy.check_share != 0)
    check_auto = privacy.check_share == AUTO
    if check_auto and checkable and estimates is not None and estimates.too_few_clients:
        return _server_only(config, privacy, record, estimates)
    if checkable and privacy.check_clip == AUTO:
        record["why"]["check_clip"] = (
            "set in the check round from the protocol's centers A, the server-only "
            "centers B and the server's data (stages.check.check_clip): the largest "
            "cost difference of a point within the server's median distance of its "
            "nearest center")
    if check_auto:  # the final choice is added after the search (not simulated)
        privacy = replace(privacy, check_share=0.0)
    base = replace(config, privacy=privacy)

    simulate = config.is_private and math.isfinite(num_clients) and (
        searched or (auto_clips and privacy.level == "client"))
    best = base
    if simulate:
        best = search(config, base, clipped, num_clients, auto_clips, estimates, record,
                       subspace=config.largest_k[1] < server_x.shape[1])
    if check_auto and checkable:
        best = _with_check(best, subspace=config.largest_k[1] < server_x.shape[1])
        record["why"]["check_share"] = (
            f"weight {best.privacy.check_share:.4g} on the scale of split: the final private "
            f"choice takes {CHECK_FRACTION:.0%} of the budget weight of the releases "
            "calibrated after the estimate round (check.budget_fraction) on every "
            "private FedDP-KMeans run: it returns the protocol's centers only if the "
            "clients' clipped costs prefer them by more than "
            f"{CHOICE_STDS:g} noise standard deviations, else k-means on the server's data")
    elif check_auto:
        record["why"]["check_share"] = "no final choice: it needs FedDP-KMeans with a fixed k"
    return _finish(best, record)


def _server_only(config: ProtocolConfig, privacy, record: dict,
                 estimates: PrivateEstimates) -> tuple[ProtocolConfig, dict]:
    """The final choice made before the protocol: k-means on the server's data.

    The estimate round shows no more clients than its count's noise floor
    (:attr:`~fedkmeans.tuning.estimates.PrivateEstimates.too_few_clients`), so every
    release of the protocol would be dominated by noise and the check could only pick
    its centers by chance. The run returns ``server-lloyds`` (T = 0) and releases
    nothing more: it spends the estimate round's share of the budget only. The check's
    clip stays ``auto`` (no check runs). Post-processing of that release.
    """
    privacy = replace(privacy, check_share=0.0, lloyds_steps=0)
    record["why"]["algorithm"] = (
        f"{SERVER_LLOYDS.name}, no protocol round: the estimate round's noisy count of "
        f"clients ({estimates.num_clients:.1f}) is at or below its noise floor "
        f"({estimates.count_floor:.1f}), so at this epsilon the protocol's releases would "
        "be dominated by noise")
    return _finish(replace(config, algorithm=SERVER_LLOYDS.name, privacy=privacy), record)


def _with_check(config: ProtocolConfig, *, subspace: bool) -> ProtocolConfig:
    """``config`` with :data:`CHECK_FRACTION` of its plan's budget weight on the check."""
    plan = algorithm(config.algorithm).release_plan(config.privacy, subspace=subspace)
    others = sum(r.weight for r in plan)
    share = CHECK_FRACTION / (1.0 - CHECK_FRACTION) * others
    return replace(config, privacy=replace(config.privacy, check_share=share))


def _finish(config: ProtocolConfig, record: dict):
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
