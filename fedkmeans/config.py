"""The protocol's configuration: k, the algorithm, the privacy settings, the messaging limits.

:class:`ProtocolConfig` is everything the protocol (:func:`fedkmeans.session.run_protocol`,
the stages, the server, the nodes, the tuning, the strategies) reads of a run: the
algorithm, the seed, k, the public transform's two flags (``data.center``,
``data.scale``), the privacy settings (``privacy.*``) and how the server talks to the
nodes (the messaging limits, ``federation.*``). The harness's experiment config
(:mod:`fedkmeans.experiment.config`) embeds it and adds the data set, the output, the
engine and the attack; no module of the library imports that.

A run's settings arrive as a flat mapping with dotted keys (``privacy.epsilon``), as
Flower flattens the nested tables of ``[tool.flwr.app.config]``; a key's section is
the attribute that holds it (``privacy.epsilon`` is ``config.privacy.epsilon``).
:func:`parse_protocol` turns such a mapping into frozen dataclasses and checks every
value *before* any private data is touched; a bad value raises one :class:`ConfigError`
naming the key, what is allowed and the value.

Each key is one field: its documentation (the ``#:`` comment), its default and its
rules (:func:`fedkmeans.schema.key`), checked in declaration order by
:func:`validate_protocol`. These dataclasses are the one source of the protocol's
defaults: the Hydra base config is generated from them (:mod:`fedkmeans.conf`) and
``[tool.flwr.app.config]`` in ``pyproject.toml`` mirrors it (``tests/harness/test_config.py``
keeps the two in step). A new key is a field here and a line there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from fedkmeans.data.transform import PublicTransform
from fedkmeans.plugins import ALGORITHMS
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

__all__ = ["AUTO", "AUTO_K", "CLIENT_SETTINGS", "ConfigError", "IDLE_RULES", "IdleRule",
           "MessagingLimits", "PrivacySettings", "ProtocolConfig", "RUNTIME_AUTO",
           "TransformSettings", "build_config", "check_no_idle_keys", "check_server_points",
           "flatten", "idle_keys", "nested_config", "parse_protocol", "protocol_keys",
           "validate_protocol"]

#: Value of a setting chosen by :mod:`fedkmeans.tuning` from public information only.
AUTO = "auto"
#: ``k = auto`` is stored as this value of :attr:`ProtocolConfig.k`.
AUTO_K = 0

_CLIP = auto_or(positive())
_WEIGHTS = "comma-separated weights > 0"


def _weights(n: int) -> Any:
    return lambda v: len(v) == n and all(math.isfinite(w) and w > 0 for w in v)


def _secagg(c: ProtocolConfig) -> bool:
    return c.privacy.aggregation == "secagg"


def _not_feddp(what: str) -> Constraint:
    return Constraint(lambda v: v == 0 or v == AUTO, f"0 or 'auto' (= 0) unless algorithm "
                      f"is 'feddp-kmeans'{what}")


@dataclass(frozen=True)
class TransformSettings:
    """The public transform of the points (``data.center``, ``data.scale``).

    The two ``data.*`` keys the protocol reads: what it does to every point before the
    clip, from the server's data Q (:meth:`ProtocolConfig.public_transform`). Where the
    data come from is the harness's (:class:`fedkmeans.experiment.config.DataConfig`).
    """

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


@dataclass(frozen=True)
class MessagingLimits:
    """How the server talks to the nodes: the messaging limits (``federation.*``).

    The ``federation.*`` keys the protocol reads; the engine that runs the federation
    and its simulation's CPUs are the harness's
    (:class:`fedkmeans.experiment.config.FederationConfig`).
    """

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
class ProtocolConfig:
    """What the protocol reads of a run: algorithm, k, transform, privacy, messaging limits.

    Built and validated once (:func:`parse_protocol`, or the harness's experiment config,
    which embeds one: :attr:`fedkmeans.experiment.config.ExperimentConfig.protocol`).
    """

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
    data: TransformSettings = TransformSettings()
    privacy: PrivacySettings = PrivacySettings()
    federation: MessagingLimits = MessagingLimits()

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
        """Return the flat, dotted-key mapping that :func:`parse_protocol` reads (a copy)."""
        return dict(self._flat)

    @cached_property
    def _flat(self) -> dict[str, Any]:
        """The flat mapping, built once per (frozen) config: never handed out itself."""
        return flatten(self)

    def public_transform(self, server_x: np.ndarray) -> PublicTransform:
        """The run's pre-processing of the points, from the server's data (m, d).

        ``data.center`` shifts by Q's mean on private runs only (a non-private run is
        the published algorithm, unshifted); ``data.scale`` divides by Q's standard
        deviation whenever asked.
        """
        return PublicTransform.fit(server_x, center=self.data.center and self.is_private,
                                   scale=self.data.scale)


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


def flatten(obj: Any, prefix: str = "", skip: Collection[str] = ()) -> dict[str, Any]:
    """A config dataclass's fields as flat dotted keys, in declaration order.

    A field holding a section (a dataclass) gives its fields under ``<field>.``; a tuple
    of weights is written comma-separated; ``k = auto`` as ``"auto"``. ``skip``: fields
    left out (the experiment config's embedded protocol config, flattened by itself).
    """
    out: dict[str, Any] = {}
    for f in fields(obj):
        if f.name in skip:
            continue
        value = getattr(obj, f.name)
        key_ = prefix + f.name.replace("_", "-")
        if is_dataclass(value):
            out.update(flatten(value, key_ + "."))
        elif isinstance(value, tuple):
            out[key_] = ",".join(repr(float(v)) for v in value)
        elif key_ == "k" and value == AUTO_K:
            out[key_] = "auto"
        else:
            out[key_] = value
    return out


@lru_cache(maxsize=1)
def default_protocol() -> ProtocolConfig:
    """The default protocol config, built once (its flat mapping is built once with it)."""
    return ProtocolConfig()


_defaults = default_protocol


def protocol_keys() -> list[str]:
    """The protocol's flat keys, in declaration order."""
    return list(_defaults()._flat)


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


def field_of(key_: str) -> tuple[str, str]:
    """A flat key's section and attribute: ``privacy.clip-sums`` -> ``("privacy", "clip_sums")``."""
    section, _, name = key_.rpartition(".")
    return section, name.replace("-", "_")


def build_config(defaults: Any, flat: Mapping[str, Any]) -> Any:
    """A config of ``defaults``' type with ``flat``'s keys (typed, not yet validated).

    Each key is coerced to the type of its default (``k`` accepts ``auto``); a key's
    section (``privacy`` of ``privacy.epsilon``) is the attribute holding it, and a
    section no key names keeps its default.

    Raises
    ------
    ConfigError
        A value not of its key's type.
    """
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    for key_, raw in flat.items():
        section, attr = field_of(key_)
        if section:
            default = getattr(getattr(defaults, section), attr)
            sections.setdefault(section, {})[attr] = _coerce(key_, raw, default)
        elif key_ == "k":
            top[attr] = _coerce_k(raw)
        else:
            top[attr] = _coerce(key_, raw, getattr(defaults, attr))
    return type(defaults)(**top, **{name: type(getattr(defaults, name))(**values)
                                    for name, values in sections.items()})


def refuse_unknown_keys(flat: Mapping[str, Any], known: Collection[str]) -> None:
    """Raise :class:`ConfigError` naming every key of ``flat`` not in ``known`` (in its order)."""
    unknown = sorted(set(flat) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown config key(s) {unknown}; valid keys are: {', '.join(known)}")


def parse_protocol(flat: Mapping[str, Any]) -> ProtocolConfig:
    """Build and validate a :class:`ProtocolConfig` from a flat dotted mapping.

    Parameters
    ----------
    flat : mapping of str to scalar
        Dotted keys (``privacy.epsilon``); missing keys take the defaults. A key outside
        the protocol (the harness's ``data.name``, ``attack``, ``output-dir``, a typo) is
        refused, naming the keys the protocol reads.

    Returns
    -------
    ProtocolConfig

    Raises
    ------
    ConfigError
        Unknown key, wrong type, or a value outside its allowed range.
    """
    refuse_unknown_keys(flat, _defaults()._flat)
    config = build_config(_defaults(), flat)
    validate_protocol(config)
    return config


def check_top_keys(config: ProtocolConfig) -> None:
    """Check the rules of the top-level keys (``algorithm``, ``seed``, ``k`` ...)."""
    check_keys(config, config)


def check_section_keys(config: ProtocolConfig) -> None:
    """Check the rules of ``data.center``/``data.scale``, ``privacy.*``, ``federation.*``."""
    check_keys(config, config.data, "data.")
    check_keys(config, config.privacy, "privacy.")
    check_keys(config, config.federation, "federation.")


def validate_protocol(config: ProtocolConfig) -> None:
    """Check every key's rules in declaration order; raise :class:`ConfigError` on the first."""
    check_top_keys(config)
    check_section_keys(config)


def check_server_points(config: ProtocolConfig, server_points: int, how: str = "") -> None:
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
    idle: Callable[[Any], bool]
    counts_with: str


def _non_private(c: ProtocolConfig) -> bool:
    """No noise and no clipping: epsilon = inf, or a non-private algorithm."""
    return not c.is_private


def _releases_nothing(c: ProtocolConfig) -> bool:
    """A private server baseline with no Lloyds step: the clients are asked nothing."""
    return c.is_private and _without_feddp_init(c) and c.privacy.lloyds_steps == 0


def _without_check(c: ProtocolConfig) -> bool:
    return not ALGORITHMS[c.algorithm].final_choice or c.k_auto or c.privacy.check_share == 0 \
        or not c.is_private


def _without_feddp_init(c: ProtocolConfig) -> bool:
    """No FedDP-Init: its steps read ``split`` (their weights) and ``min-server-weight``."""
    return not ALGORITHMS[c.algorithm].tunable_split


#: The settings that read the noise keys, in words.
PRIVATE_RUN = ("a private run (a finite privacy.epsilon and a private algorithm: a run "
               "without noise clips nothing and accounts nothing)")
#: Keys of the noise, the clipping and the accounting, read only by a private run. A
#: non-private run (epsilon = inf, or algorithm kfed or lloyds-nonprivate) adds no noise,
#: clips nothing (the nodes and the server clip only when private), samples every client
#: and does not centre on Q (:meth:`ProtocolConfig.public_transform`).
NOISE_KEYS = ("privacy.delta", "privacy.data-radius", "privacy.count-noise",
              "privacy.sampling-rate", "privacy.max-points-per-client",
              "privacy.check-share", "privacy.reproducible-noise",
              "privacy.public-num-clients", "data.center")
#: The rule of ``privacy.level``: read by a private run only (the harness adds: or by an
#: attack, :data:`fedkmeans.experiment.config.IDLE_RULES`).
LEVEL_RULE = IdleRule(("privacy.level",), _non_private, PRIVATE_RUN)

#: Keys of the protocol that a run of some settings never reads (besides the keys whose
#: own rules refuse a value away from their default, e.g. ``k-max`` with a fixed k).
IDLE_RULES = (
    IdleRule(("privacy.epsilon",), lambda c: not ALGORITHMS[c.algorithm].private,
             "a private algorithm (not kfed or lloyds-nonprivate, whose runs add no noise)"),
    IdleRule(NOISE_KEYS, _non_private, PRIVATE_RUN),
    IdleRule(("privacy.epsilon", "privacy.delta"), _releases_nothing,
             "a release: FedDP-Init (algorithm 'feddp-kmeans') or privacy.lloyds-steps >= 1 "
             "or 'auto' (k-means on the server's data with no Lloyds step asks the clients "
             "nothing)"),
    LEVEL_RULE,
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
)


def idle_keys(config: Any, among: Collection[str] | None = None,
              rules: Collection[IdleRule] = IDLE_RULES) -> dict[str, str]:
    """Flat key -> the settings that would read it, for every key ``config`` never reads.

    ``among``: only the rules of these keys are evaluated (a rule may itself ask which
    ``auto`` keys are read, :attr:`ProtocolConfig.auto_keys`, which asks this).
    ``rules``: the protocol's (:data:`IDLE_RULES`), or the harness's, which add its keys.
    """
    return {key_: rule.counts_with for rule in rules
            if (among is None or set(rule.keys) & set(among)) and rule.idle(config)
            for key_ in rule.keys if among is None or key_ in among}


def idle_key_error(key_: str, value: Any, counts_with: str) -> ConfigError:
    """The error of a key set that the run never reads."""
    return ConfigError(f"config key '{key_}' does nothing in this run, got {value!r}: it is "
                       f"read only with {counts_with}; remove it")


def check_no_idle_keys(config: Any, exempt: Collection[str] = (), *,
                       rules: Collection[IdleRule] = IDLE_RULES,
                       defaults: Mapping[str, Any] | None = None) -> None:
    """Refuse a key set away from its default that the run never reads (``rules``).

    Where the settings arrive whole (``flwr run``'s run config, which mirrors the
    defaults in ``pyproject.toml``; a strategy's keywords), a value away from its default
    is one the user set. The Hydra CLI knows which keys the user typed
    (:func:`fedkmeans.experiment.config.settle_idle_keys`). ``exempt``: keys a caller sets
    from a parameter that is read in other respects (a strategy's ``preprocessing`` sets
    ``data.center``). ``defaults``: the flat defaults of ``config``'s kind (the
    protocol's by default).

    Raises
    ------
    ConfigError
        Naming the first such key, its value and the settings that would read it.
    """
    flat = config.to_flat()
    defaults = _defaults()._flat if defaults is None else defaults
    for key_, counts_with in idle_keys(config, rules=rules).items():
        if flat[key_] != defaults[key_] and key_ not in exempt:
            raise idle_key_error(key_, flat[key_], counts_with)


def reset_keys(obj: Any, defaults: Any, keys: Collection[str]) -> Any:
    """``obj`` (a config dataclass) with ``keys`` (flat names) at ``defaults``' values.

    The defaults are typed values, so nothing is parsed; the result is not validated.
    """
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    for key_ in keys:
        section, attr = field_of(key_)
        if section:
            sections.setdefault(section, {})[attr] = getattr(getattr(defaults, section), attr)
        else:
            top[attr] = getattr(defaults, attr)
    return replace(obj, **top, **{name: replace(getattr(obj, name), **values)
                                  for name, values in sections.items()})


def reset_idle_keys(config: ProtocolConfig) -> ProtocolConfig:
    """``config`` with every key it never reads (:data:`IDLE_RULES`) at its default, validated.

    Changes nothing the run does (a strategy's ``preprocessing="center"`` on a
    non-private run: ``data.center`` is not read there).
    """
    flat, defaults = config.to_flat(), _defaults()._flat
    reset = [key_ for key_ in idle_keys(config) if flat[key_] != defaults[key_]]
    if not reset:
        return config
    settled = reset_keys(config, _defaults(), reset)
    validate_protocol(settled)
    return settled


def hashable_items(mapping: Mapping[str, Any]) -> tuple | None:
    """``mapping``'s sorted items as a hashable key, or None when a value is not hashable."""
    items = tuple(sorted(mapping.items()))
    try:
        hash(items)
    except TypeError:
        return None
    return items
