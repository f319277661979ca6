"""One protocol run, wired in one place: the library's entry point below every front end.

:func:`run_protocol` takes a Flower :class:`~flwr.serverapp.Grid`, a validated
:class:`~fedkmeans.config.ProtocolConfig` and the server's data Q, and runs what a
private run is: registration, the public transform from Q, the estimate round and the
resolution of the ``auto`` settings (:func:`~fedkmeans.tuning.plan.plan_run`), the
calibrated plan, the algorithm (FedDP-Init, FedDP-Lloyds, the final private choice) and
the ledger. It returns a :class:`RunOutcome`; nothing is written anywhere unless a
:class:`~fedkmeans.checkpoint.Checkpoint` is handed in.

Its users: the experiment harness (:func:`fedkmeans.experiment.runner.run_server`, which adds the
output directory, the non-private evaluation and the files), the Flower strategies
(:mod:`fedkmeans.strategies`) and the scikit-learn estimator
(:class:`fedkmeans.FedDPKMeans`). The server side of the rounds around a pool (the
settings sent to the nodes, SecAgg, the server context) is built in one place,
:func:`fedkmeans.server.wiring.wire_context`, which the sensitivity audit and the
tuning's simulation use too.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.serverapp import Grid

from fedkmeans.algorithms import algorithm
from fedkmeans.artefacts import json_number
from fedkmeans.checkpoint import Checkpoint
from fedkmeans.config import ProtocolConfig, check_server_points
from fedkmeans.config_node import node_settings
from fedkmeans.data.transform import IDENTITY, PublicTransform
from fedkmeans.privacy.accountant import Release
from fedkmeans.server.context import ServerContext
from fedkmeans.server.observer import RunObserver
from fedkmeans.server.pool import ClientPool
from fedkmeans.server.thresholds import noise_std
from fedkmeans.server.wiring import wire_context
from fedkmeans.stages.check import CHECK
from fedkmeans.stages.estimate import ESTIMATE
from fedkmeans.statements import centers_from, guarantee, neighbouring
from fedkmeans.tuning.estimates import PrivateEstimates
from fedkmeans.tuning.hand import check_declared_radius
from fedkmeans.tuning.plan import RunPlan, plan_run
from fedkmeans.tuning.resolve import client_settings, resolve_auto

LOG = logging.getLogger(__name__)

__all__ = ["RunOutcome", "run_protocol"]


@dataclass(frozen=True)
class RunOutcome:
    """What one protocol run produced.

    Attributes
    ----------
    centers : ndarray of shape (k, d)
        The returned centers, in the data's own space (the public transform inverted).
    declared : ProtocolConfig
        The config as given (``auto`` kept).
    config : ProtocolConfig
        The resolved config the rounds ran with.
    context : ServerContext
        The run's server context (ledger, check, spare centers, estimates, timings).
    pool : ClientPool
        The registered nodes (for a non-private evaluation round, if the caller wants one).
    transform : PublicTransform
    tuning : dict or None
        The tuning record (``auto`` settings and how they were chosen).
    timings : dict of str to float
        Seconds for registration, tuning and each round.
    published_config : dict, optional
        The flat config ``release.json`` carries as declared (public): the caller's
        whole config (the harness's experiment config); None: ``declared``'s own.
    server_rows_drawn : bool
        The server's data are rows drawn from the clients' data with the run's seed
        (the harness's ``data.server-fraction``): the guarantee says which data it covers.
    """

    centers: np.ndarray
    declared: ProtocolConfig
    config: ProtocolConfig
    context: ServerContext
    pool: ClientPool
    transform: PublicTransform
    tuning: dict | None
    timings: dict[str, float] = field(default_factory=dict)
    published_config: dict | None = None
    server_rows_drawn: bool = False

    @property
    def spent_epsilon(self) -> float:
        """The accountant's ε at the run's δ (``inf`` for a non-private run)."""
        ctx = self.context
        if ctx.non_private or not self.config.is_private:
            return math.inf
        if not ctx.accountant.releases:
            return 0.0
        return ctx.accountant.get_epsilon(self.config.privacy.delta)

    def privacy_record(self) -> dict:
        """``release.json["privacy"]``: the ledger, ε spent, the guarantee in words."""
        config, ctx = self.config, self.context
        spent = self.spent_epsilon
        randomness = ctx.private_randomness
        record = {
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
            "guarantee": guarantee(config, spent, secret_noise=randomness.is_secure,
                                   server_rows_drawn=self.server_rows_drawn),
        }
        if self.pool.secagg is not None:
            record["secagg"] = {
                "noise": "distributed: each asked client adds N(0, sigma^2 / min_clients); "
                "the ledger records sigma, the noise guaranteed with at least min_clients "
                "survivors (sigma_effective, with the survivors' shares, is a diagnostic)",
                "neighbouring": neighbouring(config),
                "rounds": self.pool.secagg.rounds,
            }
        return record

    def release_fields(self) -> dict:
        """The run's publishable record, in ``release.json``'s order.

        ``algorithm``, ``centers_from``, ``seed``, ``k``, ``centers``, ``privacy``,
        ``config`` (as declared) and :meth:`release_sections`' other sections; the
        front ends add their diagnostics and publish it through
        :func:`fedkmeans.artefacts.release_view`, the allow-list.
        """
        sections = self.release_sections()
        return {
            "algorithm": self.declared.algorithm,
            "centers_from": sections.pop("centers_from"),
            "seed": self.declared.seed,
            "k": sections.pop("k"),
            "centers": self.centers.tolist(),
            "privacy": self.privacy_record(),
            "config": (self.declared.to_flat() if self.published_config is None
                       else dict(self.published_config)),
            **sections,
        }

    def release_sections(self) -> dict:
        """The protocol's publishable sections besides centers and privacy.

        ``centers_from``, ``k`` and, where they apply, ``preprocessing``, ``tuning``,
        ``check``, ``spare_centers``, ``k_selection``: each a declared setting, public
        data or a post-processing of the ledgered releases.
        """
        ctx, config = self.context, self.config
        sections: dict = {
            "centers_from": centers_from(self.declared, config, ctx.check),
            "k": ctx.k,
        }
        if not self.transform.is_identity:
            sections["preprocessing"] = _preprocessing(self.transform)
        if self.tuning is not None:
            sections["tuning"] = self.tuning
        subspace = config.largest_k[1] < self.pool.dim
        if ctx.check is not None:
            sections["check"] = {**ctx.check, "budget_fraction": _check_fraction(
                config, subspace=subspace)}
        if ctx.spare_centers is not None:
            sections["spare_centers"] = ctx.spare_centers
        if config.k_auto:
            costs = ctx.round_outputs.get("init-2", {}).get("elbow_costs")
            sections["k_selection"] = {
                "method": "elbow (kneedle on the log cost) of weighted k-means on the "
                "noisy-weighted projected server data",
                "k_max": config.k_max,
                "costs": None if costs is None else [float(c) for c in costs],
            }
        return sections


def run_protocol(
    grid: Grid, config: ProtocolConfig, server_x: np.ndarray, *,
    checkpoint: Checkpoint | None = None, observers: Sequence[RunObserver] = (),
    published_config: Mapping[str, Any] | None = None, server_rows_drawn: bool = False,
) -> RunOutcome:
    """Run ``config``'s algorithm against the nodes behind ``grid``.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    config : ProtocolConfig
        Already validated (``auto`` settings are resolved here, after the estimate round).
    server_x : ndarray of shape (m, d)
        The server's data Q, in the data's own space (public).
    checkpoint : Checkpoint, optional
        Where rounds, the plan and the ledger are kept; a resumed run restores its
        rounds and never spends their budget twice. None: nothing is written.
    observers : sequence of RunObserver
        Given the pool's and the server context's hooks, and ``on_start(config)`` with
        the resolved settings before the first private round.
    published_config : mapping, optional
        The flat config ``release.json`` carries as declared (a public value: the
        harness's whole experiment config); None: ``config``'s own flat keys.
    server_rows_drawn : bool
        The server's data are rows drawn from the clients' data with the run's seed
        (the harness's ``data.server-fraction > 0``); the guarantee's wording says so.

    Returns
    -------
    RunOutcome

    Raises
    ------
    ValueError
        The server's data and the nodes' data differ in dimension.
    fedkmeans.config.ConfigError
        A declared setting the server's data shows cannot fit (``privacy.data-radius``).
    """
    import_what_the_rounds_use()
    timings: dict[str, float] = {}
    declared = config
    observers = list(observers)
    pool = ClientPool(grid, config.federation, observers=observers)
    server_x = np.asarray(server_x, dtype=np.float64)
    # the public pre-processing (Q's mean, opt-in its spread): sent with every request
    # from registration on, where the nodes build their points and map them once
    transform = _transform(config, checkpoint, server_x) if server_x.ndim == 2 else IDENTITY
    settings = {**node_settings(config), **transform.to_settings()}
    t0 = time.perf_counter()
    pool.register(settings=settings)
    timings["register"] = time.perf_counter() - t0
    if server_x.ndim != 2 or server_x.shape[1] != pool.dim:
        raise ValueError(
            f"server data has d={server_x.shape[-1]} but the nodes' data has d={pool.dim}"
        )
    check_server_points(config, server_x.shape[0])
    subspace = config.largest_k[1] < pool.dim
    server_x = transform.apply(server_x)
    check_declared_radius(config, server_x)
    # every request carries what a node computes with (a user's ClientApp has no run
    # config of ours: fedkmeans.client.mount reads its config from them)
    ctx = wire_context(config, pool, server_x, {}, checkpoint=checkpoint,
                       observers=observers, settings=settings)
    config, tuning, releases = _plan(ctx, checkpoint, transform, subspace=subspace,
                                     timings=timings)
    # the rounds after the plan: a second context, of the resolved config and the plan
    ctx = ctx.planned(config, releases, settings={**node_settings(config),
                                                  **transform.to_settings(),
                                                  **client_settings(config)})
    # the rounds before the plan (the estimate round, run or restored) and the plan's
    ctx.runner.expected_rounds = (len(ctx.round_outputs)
                                  + _expected_rounds(config, subspace=subspace))
    for observer in observers:  # e.g. the curious server: sees the resolved settings
        observer.on_start(config)
    randomness = ctx.private_randomness
    if config.is_private and not randomness.is_secure:
        LOG.warning("%s", randomness.notice)
    centers = transform.invert(algorithm(config.algorithm).run(ctx))  # the data's space
    timings.update(ctx.timings)
    return RunOutcome(centers=centers, declared=declared, config=config, context=ctx,
                      pool=ctx.pool, transform=transform, tuning=tuning, timings=timings,
                      published_config=None if published_config is None
                      else dict(published_config), server_rows_drawn=server_rows_drawn)


def _expected_rounds(config: ProtocolConfig, subspace: bool = True) -> int:
    """Protocol rounds the algorithm will run (for the progress lines)."""
    return len(algorithm(config.algorithm).rounds(config.privacy, full_rank=not subspace))


def _check_fraction(config: ProtocolConfig, *, subspace: bool) -> float:
    """The check's share of the calibrated plan's budget weight (0.1 with ``auto``).

    The releases after the estimate round share the budget in proportion to their
    weights (:mod:`fedkmeans.privacy.calibration`); ``privacy.check-share`` is the
    check's weight on the scale of ``privacy.split``, this is its fraction of them all.
    """
    plan = algorithm(config.algorithm).release_plan(config.privacy, subspace=subspace)
    total = sum(r.weight for r in plan)
    return sum(r.weight for r in plan if r.group == CHECK.group) / total


def _noise_source(ctx: ServerContext) -> dict:
    """Where the private randomness of the run came from (secret or seeded)."""
    randomness = ctx.private_randomness
    out = {"reproducible": not randomness.is_secure, "notice": randomness.notice}
    if ctx.config.privacy.aggregation == "secagg":
        out["secagg_shares"] = "secret: each client's CSPRNG, fresh per release"
    return out


def _transform(config: ProtocolConfig, checkpoint: Checkpoint | None,
               server_x: np.ndarray) -> PublicTransform:
    """The run's public transform: the one stored with the plan on a resume, else from Q."""
    stored = checkpoint.plan if checkpoint is not None else None
    if stored is not None and "transform" in stored:
        return PublicTransform.from_record(stored["transform"])
    return config.public_transform(server_x)


def _preprocessing(transform: PublicTransform) -> dict:
    """``release.json["preprocessing"]``: the public transform, in words and figures."""
    return {
        "transform": "(x - shift) / scale before the clip to the data radius; the centers "
                     "are mapped back (c * scale + shift)",
        "source": "the server's data Q (public): shift = its mean (data.center, private "
                  "runs), scale = its per-feature standard deviation (data.scale)",
        **transform.to_record(),
    }


def _plan(ctx: ServerContext, checkpoint: Checkpoint | None, transform: PublicTransform, *,
          subspace: bool, timings: dict[str, float]) -> tuple[ProtocolConfig, dict | None,
                                                              list[Release]]:
    """The resolved config, the tuning record and the calibrated releases of the run.

    The releases are the estimate round's (a private run's, first) and the plan's. The
    estimate round runs in a context of its own: ``ctx`` with its release
    (:meth:`~fedkmeans.server.context.ServerContext.planned`), sharing its runner,
    ledger and record.

    On a resume, the plan stored with the checkpoint (never resolved again: the rounds
    restored from it were calibrated for it). Otherwise :func:`~fedkmeans.tuning.plan.
    plan_run` (the estimate round's release, fixed first; the estimate round and
    :func:`~fedkmeans.tuning.resolve.resolve_auto`; the calibration of the remaining
    releases composed with the estimate round's), stored before any of them.

    ``timings`` gets ``tuning``, the seconds up to the resolved config (the estimate
    round, the public simulation and the other ``auto`` settings; reading the stored
    plan on a resume), and ``calibrate``, the seconds of the calibration that follows,
    which every private run makes, with ``tuning=none`` too.
    """
    start = time.perf_counter()
    stored = checkpoint.plan if checkpoint is not None else None
    if stored is not None:
        plan = RunPlan.from_dict(stored)
        if ESTIMATE.group in checkpoint.rounds:
            estimating = ctx.planned(ctx.config, plan.prior)
            ctx.record.estimates = _read_estimates(
                estimating, ESTIMATE.server(estimating), plan.prior[0])
        timings["tuning"] = time.perf_counter() - start
        return plan.config, plan.tuning, [*plan.prior, *plan.releases]

    def resolve(prior: tuple[Release, ...]) -> tuple[ProtocolConfig, dict | None]:
        estimating = ctx.planned(ctx.config, prior)
        for release in prior:  # the estimate round, released before anything is resolved
            ctx.record.estimates = _read_estimates(
                estimating, ESTIMATE.server(estimating), release)
        resolved = resolve_auto(ctx.config, ctx.server_x, ctx.estimates)
        timings["tuning"] = time.perf_counter() - start
        return resolved

    plan = plan_run(ctx.config, subspace=subspace, resolve=resolve)
    timings["calibrate"] = time.perf_counter() - start - timings["tuning"]
    if checkpoint is not None:
        checkpoint.save_plan({**plan.to_dict(), "transform": transform.to_record()})
    return plan.config, plan.tuning, [*plan.prior, *plan.releases]


def _read_estimates(ctx: ServerContext, noisy, release: Release) -> PrivateEstimates:
    privacy = ctx.config.privacy
    return PrivateEstimates.read(
        noisy, noise_std(release), privacy.level, declared=privacy.public_num_clients)


def import_what_the_rounds_use() -> None:
    """Import the accountant's packages before the run's clock starts.

    They are imported where they are used (a module that imports them costs about a
    second of start-up), and the server uses them in almost every run: importing them
    here keeps that second out of the round timings (``estimate``, ``tuning``).
    ``dp_accounting`` brings SciPy's ``signal``, ``stats`` and ``optimize`` (the
    estimates' isotonic fit). scikit-learn, which loads pandas too, is imported only by
    a run whose k-means uses it (:mod:`fedkmeans.clustering.scikit`).
    """
    import dp_accounting  # noqa: F401 - with scipy.signal, scipy.stats, scipy.optimize
