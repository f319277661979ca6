"""Run one experiment (or a sweep) from the Hydra config (``fedkmeans/conf``).

Command line::

    python -m fedkmeans.experiment privacy.epsilon=0.5 federation.engine=flower

prints the path of ``result.json``. With ``-m`` (or a checked-in ``sweep=...``
option) Hydra runs every combination and :mod:`fedkmeans.sweep` appends one row per
job to ``<sweep dir>/results.csv``::

    python -m fedkmeans.experiment -m privacy.epsilon=0.1,0.4 algorithm=feddp-kmeans,server-lloyds
    python -m fedkmeans.experiment sweep=figure1

From Python::

    from fedkmeans.experiment import run
    result = run(["privacy.epsilon=0.5", "seed=3"])

``federation.engine=inprocess`` runs the real ServerApp and ClientApp in this process
(:mod:`fedkmeans.engines.inprocess`); ``flower`` runs ``flwr run`` on Ray, sized from
``federation.num-nodes``, ``federation.num-cpus`` and ``federation.client-cpus``.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import hydra
from hydra import compose, initialize_config_module
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from fedkmeans.config import ExperimentConfig, parse_config

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
    """Simulated nodes: ``federation.num-nodes`` or one per client up to 100."""
    if config.federation.num_nodes:
        return config.federation.num_nodes
    if config.data.name == "mixture":
        return min(config.data.num_clients, MAX_DEFAULT_NODES)
    return 1 if config.federation.engine == "flower" else MAX_DEFAULT_NODES


def run_flat(flat: Mapping[str, Any]) -> dict:
    """Validate a flat config, run it on its engine, return the result dict."""
    config = parse_config(flat)  # one clear error before any data is touched
    flat = config.to_flat()
    if not flat["output-dir"]:
        flat["output-dir"] = str(
            Path.cwd().resolve() / "outputs" / f"{time.strftime('%Y%m%d-%H%M%S')}-"
            f"{uuid.uuid4().hex[:6]}"
        )
    nodes = num_nodes(config)
    if config.federation.engine == "inprocess":
        from fedkmeans.client_app import app as client_app
        from fedkmeans.engines.inprocess import run_inprocess
        from fedkmeans.server_app import app as server_app

        run_inprocess(server_app, client_app, flat, nodes)
        result_path = Path(flat["output-dir"]) / "result.json"
    else:
        from fedkmeans.engines.flower import run_flower

        result_path = run_flower(
            flat,
            num_nodes=nodes,
            num_cpus=config.federation.num_cpus,
            client_cpus=config.federation.client_cpus,
        )
    result = json.loads(result_path.read_text())
    result["result_path"] = str(result_path)
    return result


def run(overrides: Sequence[str] = ()) -> dict:
    """Compose the Hydra config with ``overrides``, run it, return the result dict."""
    with initialize_config_module(config_module="fedkmeans.conf", version_base=None):
        cfg = compose(config_name="config", overrides=resolve_aliases(overrides))
    return run_flat(flatten(cfg))


@hydra.main(config_path="conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    """Hydra entry point: run one job and print the path of its result.json.

    In a multirun, the job's row goes to the sweep's ``results.csv`` whether it
    succeeds or fails, and the sweep goes on (:func:`fedkmeans.sweep.run_job`).
    """
    hydra_config = HydraConfig.get()
    flat = flatten(cfg)
    if hydra_config.mode == RunMode.MULTIRUN:
        from fedkmeans.sweep import job_output_dir, run_job

        sweep_dir = Path(hydra_config.sweep.dir).resolve()
        if not flat.get("output-dir"):
            flat["output-dir"] = str(job_output_dir(sweep_dir, flat))
        run_job(
            flat,
            sweep_dir=sweep_dir,
            job=int(hydra_config.job.num),
            overrides=list(hydra_config.overrides.task),
            runner=run_flat,
        )
        return
    if not flat.get("output-dir"):
        flat["output-dir"] = str(Path(hydra_config.runtime.output_dir).resolve())
    result = run_flat(flat)
    print(result["result_path"])


if __name__ == "__main__":
    sys.argv[1:] = resolve_aliases(sys.argv[1:])
    main()
