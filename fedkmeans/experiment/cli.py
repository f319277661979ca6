"""The command line: one experiment (or a sweep) from the Hydra config (``fedkmeans/conf``).

Command line::

    python -m fedkmeans.experiment privacy.epsilon=0.5 federation.engine=flower

prints the path of ``result.json``. With ``-m`` (or a checked-in ``sweep=...``
option) Hydra runs every combination and :mod:`fedkmeans.experiment.sweep` appends one row per
job to ``<sweep dir>/results.csv``::

    python -m fedkmeans.experiment -m privacy.epsilon=0.1,0.4 algorithm=feddp-kmeans,server-lloyds
    python -m fedkmeans.experiment sweep=figure1

From Python::

    from fedkmeans.experiment import run
    result = run(["privacy.epsilon=0.5", "seed=3"])

``federation.engine`` names the engine (:mod:`fedkmeans.experiment.engines`): ``inprocess`` runs
the real ServerApp and ClientApp in this process; ``flower`` runs ``flwr run`` on Ray,
sized from ``federation.num-nodes``, ``federation.num-cpus`` and
``federation.client-cpus``.
"""

from __future__ import annotations

import difflib
import gc
import os
import sys
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, NamedTuple

import hydra
from hydra import compose, initialize_config_module
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from fedkmeans import data as data_access
from fedkmeans.checkpoint import Checkpoint
from fedkmeans.conf import GENERATED_GROUPS  # and the generated Hydra options
from fedkmeans.config import check_server_points
from fedkmeans.data.catalog import dataset
from fedkmeans.experiment.config import (
    ConfigError,
    ExperimentConfig,
    from_run_config,
    settle_idle_keys,
    to_run_config,
    typed_idle_keys,
)
from fedkmeans.experiment.engines import App, engine
from fedkmeans.experiment.flower_logging import TRACEBACK_ENV
from fedkmeans.experiment.registries import ATTACKS, ENGINES
from fedkmeans.experiment.rundir import check_output_dir, default_output_dir, remove_unused_run_dir
from fedkmeans.plugins import ALGORITHMS
from fedkmeans.tuning.hand import check_declared_radius

#: One short random id per process: Hydra's run and sweep directories end with it, so
#: two runs started in the same second never share a directory (``fedkmeans.experiment.rundir``).
RUN_UID = uuid.uuid4().hex[:6]
if not OmegaConf.has_resolver("fedkmeans_uid"):
    OmegaConf.register_new_resolver("fedkmeans_uid", lambda: RUN_UID)
if not OmegaConf.has_resolver("fedkmeans_run_dir"):  # hydra.run.dir: the one default
    OmegaConf.register_new_resolver(
        "fedkmeans_run_dir", lambda: str(default_output_dir(uid=RUN_UID)), use_cache=True)

#: This Flower app, as the engines run it (``pyproject.toml``'s components); after an
#: in-process run the nodes' clients, which lived in this process, are freed.
APP = App(server="fedkmeans.server_app:app", client="fedkmeans.client_app:app",
          project_dir=Path(__file__).resolve().parents[2],
          cleanup="fedkmeans.client_app:forget_nodes")
#: Default cap of simulated nodes when ``federation.num-nodes = 0``.
MAX_DEFAULT_NODES = 100
#: Override aliases: ``algorithm`` is a config group whose options set the flat key
#: ``algorithm``, so ``algorithm.k=auto`` (the issue's spelling) means ``k=auto``.
ALIASES = {"algorithm.k": "k"}


def resolve_aliases(overrides: Sequence[str]) -> list[str]:
    """Rewrite aliased override keys (``algorithm.k=auto`` -> ``k=auto``)."""
    out = []
    for override in overrides:
        key, sep, value = override.partition("=")
        prefix = key[: len(key) - len(key.lstrip("+~"))]
        name = key[len(prefix):]
        out.append(f"{prefix}{ALIASES[name]}{sep}{value}" if sep and name in ALIASES
                   else override)
    return out


def flatten(cfg: DictConfig | Mapping) -> dict[str, Any]:
    """Flatten a nested Hydra config to the dotted keys of the Flower run config.

    The ``hydra`` section is dropped; lists (e.g. ``privacy.split=[0.35,0.1,0.45,0.1]``)
    become comma-separated strings.
    """
    container = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    flat: dict[str, Any] = {}

    def walk(node: Mapping, prefix: str) -> None:
        for key, value in node.items():
            if prefix == "" and key == "hydra":
                continue
            if isinstance(value, Mapping):
                walk(value, f"{prefix}{key}.")
            elif isinstance(value, (list, tuple)):
                flat[prefix + key] = ",".join(str(v) for v in value)
            else:
                flat[prefix + key] = value

    walk(container, "")
    return flat


def num_nodes(config: ExperimentConfig) -> int:
    """Simulated nodes: ``federation.num-nodes`` or one per generated client up to 100.

    A data set whose number of clients is private gets the engine's default (one node
    hosting them all), or 100 nodes under SecAgg in-process, which sums over several.
    """
    if config.protocol.federation.num_nodes:
        return config.protocol.federation.num_nodes
    declared = dataset(config.data.name).declared_clients(config)
    if declared is not None:  # generated clients: one node each, up to the cap
        return min(declared, MAX_DEFAULT_NODES)
    runner = engine(config.federation.engine)
    if config.privacy.aggregation == "secagg" and not runner.separate_processes:
        return MAX_DEFAULT_NODES  # as before: which of them host a client is private
    return min(runner.default_file_nodes, MAX_DEFAULT_NODES)


def typed_keys(overrides: Sequence[str]) -> set[str]:
    """The flat keys a list of Hydra overrides sets by name (not a group's option).

    ``["dataset=file", "privacy.clip-sums=9", "+x=1", "~seed"]`` -> ``{"privacy.clip-sums",
    "x"}``: a group choice (``dataset=file``) sets a preset, a deletion sets nothing.
    """
    groups = set(_groups())
    keys = set()
    for override in resolve_aliases(overrides):
        key, sep, _ = override.partition("=")
        if sep and not key.startswith("~"):
            name = key.lstrip("+")
            if name.split("/")[0] not in groups and not name.startswith("hydra"):
                keys.add(name)
    return keys


def settled_flat(flat: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A composed Hydra config with the keys the run never reads settled.

    Those the ``overrides`` typed are refused; those a preset set go back to their
    defaults (:func:`fedkmeans.config.settle_idle_keys`).

    Raises
    ------
    ConfigError
        A bad value, or a typed key the run never reads (naming it).
    """
    return settle_idle_keys(from_run_config(flat), typed_keys(overrides)).to_flat()


def run_sweep_job(flat: Mapping[str, Any], overrides: Sequence[str]) -> dict:
    """Run one job of a multirun: a typed key this job never reads is reset, not refused.

    The key counts in other jobs of the sweep (``-m privacy.epsilon=1,inf
    privacy.data-radius=5``: the radius clips at epsilon 1 and does nothing at inf), so
    the job runs with its default, says so in one console line, and lists the key in
    the result's ``unread_keys`` (the sweep row's column, :mod:`fedkmeans.experiment.sweep`); its
    ``release.json`` holds the default, the setting that shaped the run.

    Raises
    ------
    ConfigError
        A bad value (the job fails; the sweep goes on).
    """
    config = from_run_config(flat)
    unread = typed_idle_keys(config, typed_keys(overrides))
    for key_, counts_with in unread.items():
        print(f"[sweep] {key_} does nothing in this job (read only with {counts_with}): "
              "the job runs with its default", flush=True)
    result = run_flat(flat)  # its preflight resets the idle keys
    result["unread_keys"] = list(unread)
    return result


def preflight(flat: Mapping[str, Any]) -> tuple[ExperimentConfig, tuple]:
    """Every check that needs no client data, before any node starts.

    Validates the keys (:func:`fedkmeans.config.from_run_config`); resets a key the run
    never reads to its default (a whole flat config, as Hydra composes it with its
    presets; the command line refuses such a key the user typed before:
    :func:`settled_flat`), so the ServerApp, which refuses one set away from its default
    (``flwr run``), gets none; resolves a relative ``data.path`` against the current
    directory (the ``flower`` engine runs the server elsewhere), checks that the file
    exists, and that ``k`` (or ``k-max``) does not exceed the number of server points
    (the server's own, public data), and that a declared data radius is not below the
    median norm of the server's data (:func:`fedkmeans.tuning.hand.check_declared_radius`).

    Returns
    -------
    config : ExperimentConfig
    server_data : tuple
        The server's data ``(points (m, d), labels (m,) or None)``, loaded once: an
        in-process run's ServerApp computes with it instead of loading it again.

    Raises
    ------
    ConfigError
        Naming the key, the value and what is allowed.
    """
    config = settle_idle_keys(from_run_config(flat), typed=())
    flat = config.to_flat()
    resolved = dataset(config.data.name).resolve(config, flat)  # e.g. data.path made absolute
    if resolved != flat:
        config = from_run_config(resolved)
    server_data = data_access.load_server(config)
    server_x = server_data[0]
    check_server_points(config.protocol, server_x.shape[0])
    check_declared_radius(config.protocol, config.public_transform(server_x).apply(server_x))
    return config, server_data


def run_flat(flat: Mapping[str, Any]) -> dict:
    """Validate a flat config, run it on its engine, return the result dict.

    Without ``output-dir`` the run writes to :func:`fedkmeans.experiment.rundir.default_output_dir`
    (chosen before the config is parsed, so the config the nodes get is the one parsed).
    """
    # one clear error before any client data is touched
    config, server_data = preflight(_with_output_dir(flat))
    output_dir = Path(config.output_dir)
    check_output_dir(output_dir, config)  # refuse before any node starts
    runner = engine(config.federation.engine)
    if runner.separate_processes and (output_dir / "checkpoint").exists():
        # a checkpoint of other data or a corrupt one is refused before Ray starts
        Checkpoint.open(output_dir / "checkpoint", config)
    result = runner.run(APP, to_run_config(config), num_nodes=num_nodes(config),
                        num_cpus=config.federation.num_cpus,
                        client_cpus=config.federation.client_cpus, server_data=server_data)
    result["result_path"] = str(output_dir / APP.result_file)
    return result


#: The Hydra config groups whose options are the registries' names, and the flat config
#: each option sets (``algorithm=kfed`` -> ``{"algorithm": "kfed"}``).
REGISTERED_GROUPS = {
    "algorithm": (ALGORITHMS, lambda name: {"algorithm": name}),
    "attack": (ATTACKS, lambda name: {"attack": name}),
    "federation": (ENGINES, lambda name: {"federation": {"engine": name}}),
}
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def register_hydra_options(groups: Iterable[str] = tuple(REGISTERED_GROUPS)) -> None:
    """A Hydra option for every registered entry of ``groups`` without a YAML file.

    A plug-in registered in one file (:func:`fedkmeans.algorithms.register_algorithm`)
    is then selected like a built-in one: ``algorithm=<name>``. Reading a registry loads
    its built-ins (the attacks' are the attack suite), so :func:`compose_flat` reads only
    those of the groups its overrides select: a group left at its default option reads
    its YAML file.
    """
    store = ConfigStore.instance()
    for group in groups:
        registry, node = REGISTERED_GROUPS[group]
        for name in registry.names():
            if not (CONF_DIR / group / f"{name}.yaml").is_file():
                store.store(group=group, name=name, node=node(name), package="_global_")


def selected_groups(overrides: Sequence[str]) -> tuple[str, ...]:
    """The registered groups whose option ``overrides`` choose (``attack=curious``)."""
    keys = {override.partition("=")[0].lstrip("+~") for override in overrides}
    return tuple(group for group in REGISTERED_GROUPS if group in keys)


def _with_output_dir(flat: Mapping[str, Any]) -> Mapping[str, Any]:
    """``flat`` with :func:`fedkmeans.experiment.rundir.default_output_dir` unless it names one."""
    return flat if flat.get("output-dir") else {**flat, "output-dir": str(default_output_dir())}


def _composed(overrides: Sequence[str]) -> dict[str, Any]:
    overrides = resolve_aliases(overrides)
    register_hydra_options(selected_groups(overrides))
    with initialize_config_module(config_module="fedkmeans.conf", version_base=None):
        return flatten(compose(config_name="config", overrides=overrides))


def compose_flat(overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The flat config that the Hydra config with ``overrides`` composes to, settled.

    Settled: the keys the run never reads are refused if ``overrides`` typed them, else
    reset to their defaults (:func:`settled_flat`).
    """
    return settled_flat(_composed(overrides), overrides)


def run(overrides: Sequence[str] = ()) -> dict:
    """Compose the Hydra config with ``overrides``, run it, return the result dict.

    The output directory is chosen before the config is settled, so the config the run
    parses is the one it runs with (one parse per process).
    """
    return run_flat(settled_flat(_with_output_dir(_composed(overrides)), overrides))


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    """Hydra entry point: run one job and print the path of its result.json.

    In a multirun, the job's row goes to the sweep's ``results.csv`` whether it
    succeeds or fails, and the sweep goes on (:func:`fedkmeans.experiment.sweep.run_job`).
    """
    hydra_config = HydraConfig.get()
    flat = flatten(cfg)
    with one_line_errors(), _hydra_reports_errors():
        _main(flat, hydra_config)




def freeze_startup_objects() -> None:
    """Exempt the objects of start-up from the cyclic garbage collector (one CLI run).

    By the time a run starts, the interpreter tracks about a million objects (Hydra,
    Flower, NumPy, the config), nearly all alive until the process exits; every full
    collection during the run, and the one at interpreter exit, walks them all.
    :func:`gc.freeze` moves them to the permanent generation, so collections see only
    what the run allocates (reference counting still frees them as usual). Called
    once, before a single run of the CLI; not in a multirun (its earlier jobs'
    garbage cycles would never be collected) nor by the library's entry points (the
    caller's process is not ours to tune). ``python benchmarks/default_run.py``
    measures the whole process with it.
    """
    gc.freeze()


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Report a user error as one line on stderr and exit non-zero (no traceback).

    Config errors exit 2; a run stopped by a signal exits 128 + the signal number;
    any other error exits 1 with its type and message. ``FEDKMEANS_TRACEBACK=1``
    re-raises instead, for the full traceback.
    """
    from fedkmeans.experiment.engines.flower import RunInterrupted

    try:
        yield
    except Exception as exc:  # noqa: BLE001 - the CLI boundary
        if os.environ.get(TRACEBACK_ENV) == "1":
            raise
        if isinstance(exc, RunInterrupted):
            code = 128 + exc.signum
        else:
            code = 2 if isinstance(exc, ConfigError) else 1
        kind = "config error" if isinstance(exc, ConfigError) else type(exc).__name__
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"fedkmeans: {kind}: {first}", file=sys.stderr)
        print(f"(set {TRACEBACK_ENV}=1 for the full traceback)", file=sys.stderr)
        sys.exit(code)


def _main(flat: dict[str, Any], hydra_config) -> None:
    task = list(hydra_config.overrides.task)
    if hydra_config.mode == RunMode.MULTIRUN:
        from fedkmeans.experiment.sweep import job_output_dir, run_job

        sweep_dir = Path(hydra_config.sweep.dir).resolve()
        if not flat.get("output-dir"):
            flat["output-dir"] = str(job_output_dir(sweep_dir, flat))
        run_job(
            flat,
            sweep_dir=sweep_dir,
            job=int(hydra_config.job.num),
            overrides=list(hydra_config.overrides.task),
            runner=lambda job_flat: run_sweep_job(job_flat, task),
        )
        return
    run_dir = Path(hydra_config.runtime.output_dir).resolve()
    if not flat.get("output-dir"):
        flat["output-dir"] = str(run_dir)
    try:
        freeze_startup_objects()
        result = run_flat(settled_flat(flat, task))
    except BaseException:
        # a run that wrote nothing leaves no directory: Hydra made this one and put
        # only its config copy and the job log (the error is on stderr) in it
        own = [f"{hydra_config.job.name}.log", *filter(None, [hydra_config.output_subdir])]
        remove_unused_run_dir(run_dir, own, top=Path.cwd())
        raise
    print(result["result_path"])


#: Hydra raises its errors instead of printing its own report when this is "1".
HYDRA_FULL_ERROR = "HYDRA_FULL_ERROR"


class _UserSetting(NamedTuple):
    """The user's own value of an environment variable (None: unset)."""

    value: str | None


#: The user's own ``HYDRA_FULL_ERROR`` while :func:`cli` runs (None: not running). Set
#: by :func:`cli`, read inside the job it starts (:func:`main`, called by Hydra).
_USER_FULL_ERROR: ContextVar[_UserSetting | None] = ContextVar(
    "fedkmeans_user_hydra_full_error", default=None)


@contextmanager
def _hydra_reports_errors() -> Iterator[None]:
    """Inside a job, give back the user's ``HYDRA_FULL_ERROR`` (child processes inherit it)."""
    user = _USER_FULL_ERROR.get()
    if user is None:
        yield
        return
    ours = os.environ.pop(HYDRA_FULL_ERROR, None)
    if user.value is not None:
        os.environ[HYDRA_FULL_ERROR] = user.value
    try:
        yield
    finally:
        if ours is not None:
            os.environ[HYDRA_FULL_ERROR] = ours


#: Group options people guess, and the option they mean.
_OPTION_HINTS = {("dataset", name): "file" for name in
                 ("csv", "tsv", "parquet", "pq", "table", "own", "custom")}


def _closest(word: str, choices: Sequence[str]) -> str:
    """The choice most like ``word`` (difflib's ratio), or '' if there is none."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.0)
    return close[0] if close else ""


def _groups() -> list[str]:
    """The config groups (``algorithm``, ``dataset``, ...): the directories of ``conf/``."""
    conf = CONF_DIR
    return sorted({*(p.name for p in conf.iterdir() if p.is_dir() and not p.name.startswith("_")),
                   *GENERATED_GROUPS})


def hydra_error_line(exc: BaseException) -> tuple[int, str]:
    """One line and an exit code for an error Hydra raised while composing the config.

    Unknown keys (``privacy.epsilom=0.5``) and unknown group options
    (``algorithm=kmeans``) name the closest valid key or option (:mod:`difflib`).

    Parameters
    ----------
    exc : BaseException
        What Hydra raised.

    Returns
    -------
    code : int
        2 for a configuration error, 1 for anything else.
    line : str
        The message, without a newline.
    """
    from hydra.errors import (
        ConfigCompositionException,
        MissingConfigException,
        OverrideParseException,
    )
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    def first(text: object) -> str:
        lines = str(text).strip().splitlines()
        return lines[0].strip() if lines else ""

    if isinstance(exc, OverrideParseException):
        return 2, (f"config error: cannot parse the override {exc.override!r}: "
                   f"{first(exc.message)} (syntax: key=value, group=option)")
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and exc.options:
        group, _, option = str(exc.missing_cfg_file).rpartition("/")
        options = sorted(exc.options)
        closest = _OPTION_HINTS.get((group, option.lower()), "") or _closest(option, options)
        return 2, (f"config error: config group '{group}' has no option '{option}'; did you "
                   f"mean '{closest}'? (options: {', '.join(options)})")
    cause = exc.__cause__
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and cause.full_key:
        from fedkmeans.experiment.config import config_keys

        key = str(cause.full_key)
        valid = [*config_keys(), *_groups()]
        return 2, (f"config error: unknown config key '{key}'; did you mean "
                   f"'{_closest(key, valid)}'?")
    if isinstance(exc, (ConfigCompositionException, OmegaConfBaseException)):
        detail = first(exc) + (f" {first(cause)}" if cause is not None else "")
        return 2, f"config error: {detail}"
    return 1, f"{type(exc).__name__}: {first(exc)}"


def cli() -> None:
    """``python -m fedkmeans.experiment``: :func:`main`, with Hydra's errors as one line.

    Hydra reports an unknown key, an unknown group option or an override it cannot
    parse in several lines and exits 1; here they are one line on stderr (with the
    closest valid key or option) and exit 2, like every other configuration error.
    ``HYDRA_FULL_ERROR=1`` or ``FEDKMEANS_TRACEBACK=1`` shows Hydra's traceback instead.
    """
    sys.argv[1:] = resolve_aliases(sys.argv[1:])
    user = _UserSetting(os.environ.get(HYDRA_FULL_ERROR))
    running = _USER_FULL_ERROR.set(user)
    os.environ[HYDRA_FULL_ERROR] = "1"  # Hydra raises instead of printing its report
    try:
        main()
    except Exception as exc:  # noqa: BLE001 - the CLI boundary
        if user.value == "1" or os.environ.get(TRACEBACK_ENV) == "1":
            raise
        code, line = hydra_error_line(exc)
        print(f"fedkmeans: {line}", file=sys.stderr)
        sys.exit(code)
    finally:
        if user.value is None:
            os.environ.pop(HYDRA_FULL_ERROR, None)
        else:
            os.environ[HYDRA_FULL_ERROR] = user.value
        _USER_FULL_ERROR.reset(running)


if __name__ == "__main__":
    cli()
