"""Realistic federations for ``benchmarks/federations.py`` (issue 34): a public generator.

Each federation is a Gaussian mixture (k components in d dimensions, unit spread per
feature before scaling, means ``N(0, I)``: two means lie ``sqrt(2 d) ~ 5.5`` spreads
apart on average, as in the paper's mixture, ``sqrt(100 / 6) / sqrt(0.5) ~ 5.8``)
spread over many clients, with one
property real federations have and the paper's mixture has not. Everything is drawn
from one ``numpy.random.Generator`` made from one seed, offline; the same
(federation, seed) gives the same arrays bit for bit. It is public randomness: the
clients' data of a benchmark, not a secret.

=====================  ========================================================
federation             what differs from the base
=====================  ========================================================
``heavy-tailed``       client sizes Pareto(1.3) from 3 points, at most 3000; redrawn
                       until max / median >= 50
``uncentred``          every point offset by ``100 * ones`` (offset >> spread 1)
``uneven``             cluster weights geometric from 1 to 20 (ratio 1:20)
``scales``             feature j scaled by ``10^(-2 + 4 j / (d - 1))``: 1e-2 .. 1e2
``small-server``       the server's sample is 0.5 % of the clients' points
``large-server``       the server's sample is 10 % of the clients' points
``missing-<m>``        k = 8; m in {0, 1, k/4, k/2} clusters have no server point;
                       the server holds 20 points of each present cluster and
                       10 k uniform points in the clients' bounding box (label -1),
                       as the paper's mixture (20 per component + 100 uniform)
=====================  ========================================================

The base: k = 10, d = 15, 2000 clients of ``1 + Poisson(9)`` points (about 2e4 in
all), each client's clusters drawn with its own proportions ``Dirichlet(k w)`` (``w``
the cluster weights: non-iid clients whose mean proportions are ``w``), and a server
sample of 3 % of the clients' points drawn i.i.d. from the mixture (weights ``w``).

:func:`write_federation` writes ``clients.npz`` (``x`` (n, d), ``client`` (n,), ``y``
(n,)) and a separate ``server.npz`` (``server_x`` (m, d), ``server_y`` (m,)), read by
``dataset=file data.path=clients.npz data.server-path=server.npz``
(docs/own-data.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

__all__ = ["FEDERATIONS", "Federation", "FederationSpec", "generate", "write_federation"]

#: Bumped when the generator changes, so files written by an older one are not reused.
VERSION = 1
#: Standard deviation of the cluster means around their centre (unit spread per cluster).
MEAN_SCALE = 1.0


@dataclass(frozen=True)
class FederationSpec:
    """What one federation draws.

    Attributes
    ----------
    name, about : str
        Its name and one line on what it tests.
    k, dim, clients : int
        Clusters, features and clients.
    sizes : str
        ``poisson`` (``1 + Poisson(mean_size - 1)`` points) or ``pareto`` (heavy-tailed).
    weight_ratio : float
        Largest over smallest cluster weight (geometric weights; 1: equal).
    offset : float
        Added to every feature of every point.
    scale_range : tuple of float or None
        Per-feature scales, log-spaced over this range (None: all 1).
    server_fraction : float
        Server points (i.i.d. from the mixture) over the clients' points.
    missing : int or None
        Clusters absent from the server's data, which is then the paper's
        out-of-distribution server (None: an i.i.d. sample).
    """

    name: str
    about: str
    k: int = 10
    dim: int = 15
    clients: int = 2000
    sizes: str = "poisson"
    mean_size: int = 10
    weight_ratio: float = 1.0
    offset: float = 0.0
    scale_range: tuple[float, float] | None = None
    server_fraction: float = 0.03
    missing: int | None = None


#: Pareto client sizes: shape, smallest size, largest size, and the max / median bar.
PARETO_SHAPE, PARETO_MIN, PARETO_CAP, MAX_OVER_MEDIAN = 1.3, 3, 3000, 50.0
#: The out-of-distribution server: points per present cluster, uniform points per cluster.
SERVER_PER_CLUSTER, SERVER_UNIFORM_PER_K = 20, 10
#: k of the missing-clusters ablation: k/4 and k/2 are whole numbers.
MISSING_K = 8

FEDERATIONS: dict[str, FederationSpec] = {spec.name: spec for spec in (
    FederationSpec("heavy-tailed", "client sizes Pareto(1.3), max / median >= 50",
                   sizes="pareto"),
    FederationSpec("uncentred", "every point around 100 * ones, cluster spread 1",
                   offset=100.0),
    FederationSpec("uneven", "cluster weights 1 : 20", weight_ratio=20.0),
    FederationSpec("scales", "feature scales 1e-2 .. 1e2", scale_range=(1e-2, 1e2)),
    FederationSpec("small-server", "server sample 0.5 % of the points",
                   server_fraction=0.005),
    FederationSpec("large-server", "server sample 10 % of the points", server_fraction=0.1),
    *(FederationSpec(f"missing-{m}", f"{m} of {MISSING_K} clusters missing from the "
                     "server's data (paper's out-of-distribution server)",
                     k=MISSING_K, missing=m)
      for m in (0, 1, MISSING_K // 4, MISSING_K // 2)),
)}


@dataclass(frozen=True)
class Federation:
    """One drawn federation.

    Attributes
    ----------
    spec : FederationSpec
    x : ndarray of shape (n, d)
        The clients' points.
    client : ndarray of int64, shape (n,)
        Each point's client id in ``0 .. clients - 1`` (every client has a point).
    y : ndarray of int64, shape (n,)
        Each point's cluster.
    server_x : ndarray of shape (m, d)
    server_y : ndarray of int64, shape (m,)
        The server's points' clusters, ``-1`` for uniform points.
    weights : ndarray of shape (k,)
        The cluster weights the clients' proportions are drawn around.
    absent : tuple of int
        The clusters left out of the server's data.
    """

    spec: FederationSpec
    x: np.ndarray
    client: np.ndarray
    y: np.ndarray
    server_x: np.ndarray
    server_y: np.ndarray
    weights: np.ndarray
    absent: tuple[int, ...] = field(default=())

    def client_sizes(self) -> np.ndarray:
        """Points per client, shape (clients,)."""
        return np.bincount(self.client, minlength=self.spec.clients)

    def server_clusters(self) -> int:
        """How many of the k clusters have at least one server point."""
        return int(np.unique(self.server_y[self.server_y >= 0]).size)


def _sizes(spec: FederationSpec, rng: np.random.Generator) -> np.ndarray:
    if spec.sizes == "poisson":
        return 1 + rng.poisson(spec.mean_size - 1, spec.clients)
    if spec.sizes != "pareto":
        raise ValueError(f"sizes must be 'poisson' or 'pareto', got {spec.sizes!r}")
    while True:  # a draw whose tail is not heavy enough is drawn again (rare)
        sizes = np.minimum(np.ceil(PARETO_MIN * (1.0 + rng.pareto(PARETO_SHAPE, spec.clients))),
                           PARETO_CAP).astype(np.int64)
        if sizes.max() >= MAX_OVER_MEDIAN * np.median(sizes):
            return sizes


def _weights(spec: FederationSpec) -> np.ndarray:
    raw = spec.weight_ratio ** (np.arange(spec.k) / max(spec.k - 1, 1))
    return raw / raw.sum()


def _place(spec: FederationSpec, means: np.ndarray, labels: np.ndarray,
           rng: np.random.Generator) -> np.ndarray:
    """Points of the given clusters: mean + unit noise, then scaled and offset, (n, d)."""
    points = means[labels] + rng.standard_normal((labels.size, spec.dim))
    if spec.scale_range is not None:
        low, high = np.log10(spec.scale_range)
        points *= np.logspace(low, high, spec.dim)
    return points + spec.offset


def generate(spec: FederationSpec | str, seed: int) -> Federation:
    """Draw one federation from ``numpy.random.default_rng(seed)``.

    Parameters
    ----------
    spec : FederationSpec or str
        The federation, or its name in :data:`FEDERATIONS`.
    seed : int
        Non-negative seed of the one generator every draw comes from.

    Returns
    -------
    Federation
    """
    spec = FEDERATIONS[spec] if isinstance(spec, str) else spec
    rng = np.random.default_rng(seed)
    means = rng.normal(0.0, MEAN_SCALE, (spec.k, spec.dim))
    weights = _weights(spec)
    sizes = _sizes(spec, rng)
    proportions = rng.dirichlet(spec.k * weights, spec.clients)
    y = np.concatenate([rng.choice(spec.k, size=int(n), p=p)
                        for n, p in zip(sizes, proportions, strict=True)])
    client = np.repeat(np.arange(spec.clients, dtype=np.int64), sizes)
    x = _place(spec, means, y, rng)
    if spec.missing is None:
        server_y = rng.choice(spec.k, size=max(1, round(spec.server_fraction * x.shape[0])),
                              p=weights)
        server_x, absent = _place(spec, means, server_y, rng), ()
    else:
        absent = tuple(sorted(int(c) for c in rng.choice(spec.k, spec.missing, replace=False)))
        present = np.setdiff1d(np.arange(spec.k), absent)
        server_y = np.repeat(present, SERVER_PER_CLUSTER)
        uniform = rng.uniform(x.min(axis=0), x.max(axis=0),
                              (SERVER_UNIFORM_PER_K * spec.k, spec.dim))
        server_x = np.concatenate([_place(spec, means, server_y, rng), uniform])
        server_y = np.concatenate([server_y, np.full(uniform.shape[0], -1)])
    return Federation(spec, x, client, y.astype(np.int64), server_x,
                      server_y.astype(np.int64), weights, absent)


def write_federation(name: str, seed: int, directory: Path) -> tuple[Path, Path]:
    """Write federation ``name`` of ``seed`` under ``directory`` unless already there.

    Files go to ``directory / f"v{VERSION}" / f"{name}-{seed}"``; an existing pair is
    kept (its modification time too, so the run's optimal-cost cache still matches).

    Returns
    -------
    clients, server : Path
        ``clients.npz`` (``x``, ``client``, ``y``) and ``server.npz`` (``server_x``,
        ``server_y``).
    """
    folder = Path(directory) / f"v{VERSION}" / f"{name}-{seed}"
    clients, server = folder / "clients.npz", folder / "server.npz"
    if not (clients.is_file() and server.is_file()):
        folder.mkdir(parents=True, exist_ok=True)
        fed = generate(name, seed)
        for path, arrays in ((clients, {"x": fed.x, "client": fed.client, "y": fed.y}),
                             (server, {"server_x": fed.server_x, "server_y": fed.server_y})):
            partial = path.with_suffix(".part.npz")
            np.savez(partial, **arrays)
            partial.replace(path)
    return clients, server


def with_clients(spec: FederationSpec, clients: int) -> FederationSpec:
    """``spec`` with another number of clients (for small test federations)."""
    return replace(spec, clients=clients)
