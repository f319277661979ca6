"""``prepare``: one data file per node, the server's file, certificates, keys, a manifest.

Part of :mod:`fedkmeans.experiment.deploy` (its docstring describes the workflow).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedkmeans.data.mixture import mixture_client, mixture_server
from fedkmeans.data.npz import load_npz, save_npz
from fedkmeans.experiment.config import parse_config
from fedkmeans.experiment.deploy.layout import (
    SERVER_DATA_MODES,
    DeploymentError,
    Layout,
    live_processes,
    write_json,
)
from fedkmeans.experiment.deploy.pki import make_certificates, make_node_keys
from fedkmeans.experiment.engines.flower import (
    PROJECT_DIR,
)

LOG = logging.getLogger(__name__)


# -- data -------------------------------------------------------------------------------
def _mixture_arrays(flat: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The mixture federation of a flat config, as one data set (ids = client index)."""
    config = parse_config({**flat, "data.name": "mixture"})
    d = config.data
    xs, ys, ids = [], [], []
    for j in range(d.num_clients):
        x, y = mixture_client(
            config.seed, j, k=d.components, dim=d.dim, n_points=d.points_per_client,
            variance=d.variance, partition=d.partition, dirichlet_alpha=d.dirichlet_alpha,
        )
        xs.append(x)
        ys.append(y)
        ids.append(np.full(x.shape[0], j, dtype=np.int64))
    server_x, server_y = mixture_server(
        config.seed, k=d.components, dim=d.dim, per_component=d.server_points_per_component,
        uniform=d.server_uniform_points, variance=d.variance,
    )
    return {
        "x": np.concatenate(xs), "y": np.concatenate(ys), "client": np.concatenate(ids),
        "server_x": server_x, "server_y": server_y,
    }


def split_dataset(
    arrays: Mapping[str, np.ndarray | None],
    num_nodes: int,
    out_dir: Path,
    *,
    server_data: str = "full",
) -> tuple[list[Path], Path]:
    """Write one ``.npz`` per node and the server's file.

    Clients are assigned to nodes as the simulation does for an ``npz`` data set: the
    ``i``-th smallest client id goes to node ``i mod num_nodes``. Each node file also
    carries the public server points (the file format requires ``server_x``; nodes do
    not use them).

    Parameters
    ----------
    arrays : mapping
        ``x``, ``client``, ``server_x`` and optionally ``y``, ``server_y`` (see
        :mod:`fedkmeans.data.npz`).
    num_nodes : int
        Number of node files, at most the number of clients.
    out_dir : pathlib.Path
        Directory of ``node-<i>.npz`` and ``server.npz``.
    server_data : {"full", "public"}
        ``full``: ``server.npz`` is the whole data set (the server then computes the
        non-private optimal cost). ``public``: only the server points.

    Returns
    -------
    node_files : list of pathlib.Path
    server_file : pathlib.Path

    Raises
    ------
    ValueError
        Fewer clients than nodes, or an unknown ``server_data``.
    """
    if server_data not in SERVER_DATA_MODES:
        raise ValueError(f"server_data must be one of {SERVER_DATA_MODES}, got {server_data!r}")
    client = np.asarray(arrays["client"])
    ids = np.unique(client)
    if num_nodes < 1 or num_nodes > ids.size:
        raise ValueError(
            f"num_nodes must be in [1, {ids.size}] (the number of clients), got {num_nodes}"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    x, y = np.asarray(arrays["x"]), arrays.get("y")
    server = {"server_x": arrays["server_x"], "server_y": arrays.get("server_y")}
    node_files = []
    for i in range(num_nodes):
        mask = np.isin(client, ids[np.arange(ids.size) % num_nodes == i])
        node_files.append(save_npz(
            out_dir / f"node-{i}.npz", x=x[mask], client=client[mask],
            y=None if y is None else np.asarray(y)[mask], **server,
        ))
    if server_data == "full":
        server_file = save_npz(out_dir / "server.npz", x=x, client=client, y=y, **server)
    else:
        server_x = np.asarray(arrays["server_x"])
        server_file = save_npz(
            out_dir / "server.npz", x=server_x, client=np.zeros(server_x.shape[0], np.int64),
            **server,
        )
    return node_files, server_file


# -- prepare ----------------------------------------------------------------------------------
def prepare(
    directory: str | Path,
    num_nodes: int,
    *,
    source: str | Path | None = None,
    mixture: Mapping[str, Any] | None = None,
    server_data: str = "full",
    hosts: Sequence[str] = (),
    secure: bool = True,
) -> dict:
    """Write the node data files, the server's file, certificates and node keys.

    Parameters
    ----------
    directory : str or pathlib.Path
        Deployment directory (created; must not be inside the app directory unless
        under ``outputs/``, which ``flwr run`` does not pack).
    num_nodes : int
        Number of SuperNodes.
    source : path, optional
        An existing ``.npz`` data set to split. Default: generate the mixture.
    mixture : mapping, optional
        Flat config keys of the mixture (``seed``, ``data.dim``, ...; defaults from
        the app config).
    server_data : {"full", "public"}
        What ``data/server.npz`` holds (module docstring).
    hosts : sequence of str
        Extra names/addresses of the SuperLink for its certificate.
    secure : bool
        Create the CA, certificate and node keys (not needed for ``up --insecure``).

    Returns
    -------
    dict
        The manifest (also written to ``manifest.json``).
    """
    layout = Layout(Path(directory))
    _validate_outside_app(layout.root)
    if live_processes(layout):
        raise DeploymentError(
            f"a deployment is running in {layout.root}; run `down` before preparing it again"
        )
    layout.root.mkdir(parents=True, exist_ok=True)
    if source is not None:
        dataset = load_npz(source)
        arrays = {name: getattr(dataset, name) for name in
                  ("x", "client", "y", "server_x", "server_y")}
    else:
        arrays = _mixture_arrays(mixture or {})
    node_files, server_file = split_dataset(arrays, num_nodes, layout.data,
                                            server_data=server_data)
    manifest: dict[str, Any] = {
        "num_nodes": num_nodes,
        "source": str(Path(source).resolve()) if source is not None else "mixture",
        "mixture": dict(mixture or {}) if source is None else None,
        "node_files": [str(p) for p in node_files],
        "server_file": str(server_file),
        "server_data": server_data,
        "num_clients": int(np.unique(arrays["client"]).size),
        "dim": int(np.asarray(arrays["x"]).shape[1]),
        "secure": secure,
    }
    if secure:
        manifest["sans"] = make_certificates(layout.certs, hosts)
        manifest["node_keys"] = [str(p) for p in make_node_keys(layout.keys, num_nodes)]
    write_json(layout.manifest, manifest)
    LOG.info("prepared %d node files and %s in %s", num_nodes, server_file.name, layout.root)
    return manifest


def _validate_outside_app(root: Path, project_dir: Path = PROJECT_DIR) -> None:
    try:
        inside = root.relative_to(project_dir.resolve())
    except ValueError:
        return
    if not inside.parts or inside.parts[0] != "outputs":
        raise DeploymentError(
            f"deployment directory {root} is inside the app directory {project_dir}, which "
            "`flwr run` packs and ships to every node; use a directory outside it (or under "
            "outputs/)"
        )
