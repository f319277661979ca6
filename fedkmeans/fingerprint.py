"""What a checkpoint (and an output directory) is bound to: the config and the data.

:func:`config_digest` hashes every setting that changes what the protocol releases;
:func:`data_fingerprint` records what identifies the data as far as the server can see
it (the ``data.*`` keys and the seed, the sha256 of a ``data.path`` file, the package
and version of a real data set). :mod:`fedkmeans.checkpoint` refuses to resume with
other ones and says what changed (:func:`data_changes`).
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any

from fedkmeans.data.catalog import RunConfig, dataset

__all__ = ["config_digest", "data_changes", "data_digest", "data_fingerprint",
           "describe_data", "file_sha256"]

_CHUNK = 1 << 20


def config_digest(config: RunConfig) -> str:
    """Hash of every setting that changes what the protocol releases."""
    flat = config.to_flat()
    for key in ("output-dir", "optimal-cost", "federation.engine", "federation.round-timeout",
                "federation.message-mb", "federation.inflight-mb", "federation.node-cache-mb"):
        flat.pop(key, None)
    return hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()


def file_sha256(path: str | Path) -> str:
    """sha256 (hex) of a file's bytes, read in 1 MiB chunks.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    str
        64 hex digits.
    """
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def data_fingerprint(config: RunConfig) -> dict[str, Any]:
    """What identifies the data of ``config`` as far as the server can see it.

    Parameters
    ----------
    config : RunConfig
        The run's whole config (the harness's experiment config): its flat keys and
        its data settings.

    Returns
    -------
    dict
        ``params``: the ``data.*`` keys and the seed (they generate the mixture and
        select the rows of a real data set); ``files``: ``[{"path", "sha256"}]`` of
        the ``data.path`` file (``sha256`` None if it does not exist);
        ``packages``: ``[{"name", "version"}]`` of a real data set's package
        (``version`` None if it is not installed).
    """
    flat = config.to_flat()
    params = {key: value for key, value in flat.items() if key.startswith("data.")}
    params["seed"] = flat["seed"]
    spec = dataset(config.data.name)  # the server's own file is part of the data too
    files = [{"path": str(path), "sha256": file_sha256(path) if path.is_file() else None}
             for path in spec.files(config)]
    packages = []
    if spec.package:
        try:
            version = metadata.version(spec.package)
        except metadata.PackageNotFoundError:
            version = None
        packages.append({"name": spec.package, "version": version})
    return {"params": params, "files": files, "packages": packages}


def data_digest(fingerprint: dict[str, Any]) -> str:
    """Hash of a :func:`data_fingerprint`."""
    return hashlib.sha256(
        json.dumps(fingerprint, sort_keys=True, default=str).encode()
    ).hexdigest()


def describe_data(fingerprint: dict[str, Any]) -> str:
    """The data of a fingerprint, in words."""
    parts = [f"data file {f['path']}" for f in fingerprint["files"]]
    parts += [f"package {p['name']} {p['version']}" for p in fingerprint["packages"]]
    return ", ".join(parts) or "the data generated from the data.* keys and the seed"


def short_digest(sha: str | None) -> str:
    """``sha256 <first 12 hex digits>``, or ``missing``."""
    return "missing" if sha is None else f"sha256 {sha[:12]}"


def data_changes(state: dict[str, Any], fingerprint: dict[str, Any]) -> str:
    """Which data file or package differs from the one the checkpoint recorded."""
    then = {f["path"]: f.get("sha256") for f in state["data_files"]}
    now = {f["path"]: f["sha256"] for f in fingerprint["files"]}
    changes = []
    for path, sha in now.items():
        if path not in then:
            changes.append(f"data file {path} was not part of it")
        elif sha is None:
            changes.append(f"data file {path} is missing now ({short_digest(then[path])} then)")
        elif sha != then[path]:
            changes.append(
                f"data file {path} changed since ({short_digest(then[path])} then, "
                f"{short_digest(sha)} now)"
            )
    changes += [f"data file {path} is not used now" for path in then if path not in now]
    versions = {p.get("name"): p.get("version") for p in state.get("data_packages") or []}
    for package in fingerprint["packages"]:
        old = versions.get(package["name"], "not recorded")
        if old != package["version"]:
            changes.append(
                f"package {package['name']} is version {package['version']} now, {old} then"
            )
    return "; ".join(changes) or "the data's parameters changed"
