"""A federation resampled from the server's data, for the tuning's simulations.

The clients of the tuning's simulated runs (:mod:`fedkmeans.tuning.simulation`) hold
points drawn from the server's data Q; nothing of the real clients is read.

The simulated federation (:func:`simulated_federation`) has ``C`` clients (declared, or
the estimate round's count) with sizes drawn from the estimate round's size histogram
(uniform on ``1..n_max`` without one). Its population is a smoothed copy of Q: clusters
of Q (:func:`server_clusters`), and in cluster ``c`` with mean ``mu`` the points
``mu + sqrt(3/2) ((1 - u) a + u b - mu)`` for two random members ``a, b`` and
``u ~ U(0, 1)`` (``(1 - u) a + u b`` has 2/3 of the cluster's variance, the factor
restores it): distinct points with the cluster's spread, not copies of a few server
points. The simulated server draws as many points as Q has from this population, in
Q's cluster proportions, so the server-only answer has the sampling error of an
``m``-point server, as in reality (splitting Q instead into a server and a client part
makes both small: on 150 points in 64-d the simulated server-only answer looked 2-3 x
optimal when it was 1.18 x). Each client draws from the clusters with its own
Dirichlet(1/2) mixture weights, so the population weights the clusters differently
from the server.

Clusters: k-means of Q in Q's own top-k eigenvector subspace (projected once), one
k-means++ start per simulated federation. In the subspace because in high dimension raw
distances hide the clusters (the paper mixture, d = 100: k-means on Q itself put 140-290
of its 300 points into one cluster beside singletons of the uniform points, so the
population blended components and the simulation could not see that the client-level
split with more on step 1 avoids a merge at epsilon = 3). One start per federation, not
the best of 10 shared by all: the population is then not always the server's own k-means
model, which flatters the server-only answer (nycflights, client level, epsilon = 1:
with one shared 10-start clustering the guard chose the server alone in 5 of 5 seeds, at
1.0412 x optimal; with one start per federation the protocol ran in 4 of 5 seeds in each
of two runs, and in 19 of 30 on seeds 5-34, median 1.0329 against the server's 1.0402;
nycflights was held out until this comparison).

A federation larger than ``max_points`` is simulated with a fraction ``s`` of the
clients and every noise scale multiplied by ``s``: the sums shrink by ``s`` too, so
the signal-to-noise ratio of every release is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedkmeans.clustering import kmeans
from fedkmeans.clustering.distances import nearest_squared_distances, squared_distances
from fedkmeans.clustering.server_steps import top_eigenvectors
from fedkmeans.config import ProtocolConfig
from fedkmeans.privacy.clipping import clip_rows_l2
from fedkmeans.seeding import generator

__all__ = [
    "SimulatedFederation", "cluster_means", "federation_rng", "server_clusters",
    "simulated_federation", "subspace_coordinates",
]

#: Dirichlet concentration of each simulated client's weights over the server's clusters.
CLIENT_ALPHA = 0.5
#: Largest number of simulated points (beyond it fewer clients and scaled noise, module
#: docstring), unless 2k clients hold more.
MAX_POINTS = 10_000
#: Rows of simulated points drawn at a time (:func:`simulated_federation`).
DRAW_ROWS = 2048
#: Restores the variance an interpolation ``(1 - u) a + u b`` loses: E[(1-u)^2 + u^2] = 2/3.
SPREAD = float(np.sqrt(1.5))


@dataclass(frozen=True)
class SimulatedFederation:
    """Clients made of server points.

    Attributes
    ----------
    points : dict of int to ndarray of shape (n_j, d)
    scale : float
        Simulated clients / declared clients (``s`` in the module docstring).
    server_x : ndarray of shape (m, d)
        The simulated server's data (as many points as Q, from the same population).
    """

    points: dict[int, np.ndarray]
    scale: float
    server_x: np.ndarray
    #: Step-1 triangles by clients, before the client-level clip: they do not depend on
    #: the candidate, and are the costliest to compute (one d x d per client); and their
    #: folded sums by clients, client clip and server fold, which candidates that
    #: differ only in later settings (T, the split) share.
    covariances: dict = field(default_factory=dict, compare=False, repr=False)
    #: The pooled points, their squared norms and the clients' block (:meth:`block`),
    #: computed once for every candidate.
    _pooled: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def pooled(self) -> np.ndarray:
        """Every simulated point, shape (n, d) (computed once)."""
        if "points" not in self._pooled:
            self._pooled["points"] = np.concatenate(list(self.points.values()))
        return self._pooled["points"]

    def block(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The clients in id order and their points one after the other (computed once).

        Returns ``(ids, stacked, offsets)``: client ``ids[i]`` holds rows
        ``offsets[i]:offsets[i + 1]`` of ``stacked``; :attr:`pooled` itself when the
        clients are already in id order, as :func:`simulated_federation` makes them.
        """
        if "block" not in self._pooled:
            ids = np.array(sorted(self.points), dtype=np.int64)
            sizes = np.array([self.points[c].shape[0] for c in ids.tolist()], dtype=np.int64)
            stacked = (self.pooled if list(self.points) == ids.tolist()
                       else np.concatenate([self.points[c] for c in ids.tolist()]))
            self._pooled["block"] = ids, stacked, np.concatenate([[0], np.cumsum(sizes)])
        return self._pooled["block"]

    def sizes(self, ids: np.ndarray) -> np.ndarray:
        """Points of each client of ``ids``, shape (len(ids),), int64."""
        block_ids, _, offsets = self.block()
        at = np.searchsorted(block_ids, ids)
        return offsets[at + 1] - offsets[at]

    def cost(self, centers: np.ndarray) -> float:
        """Mean squared distance of the simulated points to their nearest center.

        :func:`nearest_squared_distances` with the points' squared norms computed once
        for every candidate (those :func:`squared_distances` adds: the same bits).
        """
        x = self.pooled
        if "norms" not in self._pooled:
            self._pooled["norms"] = (x * x).sum(axis=-1)
        return float(nearest_squared_distances(x, centers, self._pooled["norms"]).mean())


def subspace_coordinates(server_x: np.ndarray, k: int) -> np.ndarray:
    """Q in its own top-k eigenvector subspace: ``Q V^T``, shape (m, min(k, m)).

    V holds the top-k eigenvectors of ``Q^T Q`` (the projection FedDP-Init's step 1
    makes of the clients' data); Q itself when ``k >= d``. In high dimension the raw
    distances hide the clusters: on the paper's mixture (d = 100, variance 0.5) two
    points of one component are ~10.0 apart and of two components ~10.8, so k-means on
    Q itself put 140-290 of its 300 points into one cluster; in the 10-dimensional
    subspace the components are ~4 apart with a within-component radius of ~2.2.
    """
    k = min(k, server_x.shape[0])
    if k >= server_x.shape[1]:
        return server_x
    return server_x @ top_eigenvectors(server_x.T @ server_x, k).T


def server_clusters(coords: np.ndarray, k: int, seed: int, n_init: int = 10) -> np.ndarray:
    """Clusters of the server's data: k-means with ``n_init`` k-means++ starts.

    Parameters
    ----------
    coords : ndarray of shape (m, r)
        The server's data in its subspace (:func:`subspace_coordinates`).
    k : int
    seed : int
    n_init : int, default 10

    Returns
    -------
    ndarray of shape (m,)
        Cluster label of each row, in ``0..min(k, m) - 1``.
    """
    centers = kmeans(coords, min(k, coords.shape[0]), seed=seed, n_init=n_init)
    return squared_distances(coords, centers).argmin(axis=1)


def cluster_means(server_x: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mean of each non-empty cluster, shape (clusters present, d), in label order."""
    return np.stack([server_x[labels == c].mean(axis=0) for c in np.unique(labels)])


def simulated_federation(
    server_x: np.ndarray,
    labels: np.ndarray,
    num_clients: int,
    max_points_per_client: int,
    rng: np.random.Generator,
    max_points: int = MAX_POINTS,
    sizes: tuple[np.ndarray, np.ndarray] | None = None,
) -> SimulatedFederation:
    """Resample a federation of ``num_clients`` clients from the server's data.

    Parameters
    ----------
    server_x : ndarray of shape (m, d)
        The server's (public) data, already clipped to the data radius.
    labels : ndarray of shape (m,)
        Clusters of the server's data the clients mix (:func:`server_clusters`).
    num_clients : int
        Declared number of clients C.
    max_points_per_client : int
        Declared largest client size n_max.
    rng : numpy.random.Generator
        Public randomness.
    max_points : int
        Largest number of simulated points (fewer clients, scaled noise, beyond it).
    sizes : (edges, pmf) or None
        The clients' size distribution over bins (the estimate round's, read by
        :meth:`~fedkmeans.tuning.estimates.PrivateEstimates.size_distribution`): a
        client's size is a bin drawn from ``pmf``, then uniform in it, at most
        ``max_points_per_client``. None: uniform on ``1..max_points_per_client``.

    Returns
    -------
    SimulatedFederation
    """
    radius = float(np.linalg.norm(server_x, axis=1).max())
    k = int(labels.max()) + 1
    sizes_of = np.bincount(labels, minlength=k)
    present = np.flatnonzero(sizes_of)
    members = np.argsort(labels, kind="stable")  # Q's rows, cluster after cluster
    starts = np.concatenate([[0], np.cumsum(sizes_of)])[present]
    means = cluster_means(server_x, labels)
    sizes_of = sizes_of[present]

    def draw(which: np.ndarray) -> np.ndarray:
        """One population point in each cluster ``which`` (indices into ``present``)."""
        a = members[starts[which] + (rng.random(which.size) * sizes_of[which]).astype(np.int64)]
        b = members[starts[which] + (rng.random(which.size) * sizes_of[which]).astype(np.int64)]
        u = rng.random((which.size, 1))
        out = np.empty((which.size, server_x.shape[1]))
        buffer = np.empty((min(DRAW_ROWS, which.size), server_x.shape[1]))
        for start in range(0, which.size, DRAW_ROWS):
            rows = slice(start, start + DRAW_ROWS)
            # mu + SPREAD ((1 - u) x_a + u x_b - mu), in place and DRAW_ROWS rows at a
            # time: the same operations in the same order (the same bits as on the whole
            # arrays), with one (n, d) array and one small buffer, whose pages are
            # already mapped (fresh (n, d) temporaries cost more in page faults than
            # the arithmetic)
            point = np.take(server_x, a[rows], axis=0, out=out[rows])
            point *= 1 - u[rows]
            other = np.take(server_x, b[rows], axis=0, out=buffer[:point.shape[0]])
            other *= u[rows]
            point += other
            mu = np.take(means, which[rows], axis=0, out=other)
            point -= mu
            point *= SPREAD
            point += mu
        return clip_rows_l2(out, radius, copy=False)  # its own array: no copy

    sim_server = draw(rng.choice(present.size, size=server_x.shape[0], p=sizes_of / sizes_of.sum()))
    if sizes is None:
        mean_size = (1 + max_points_per_client) / 2
    else:
        edges, pmf = sizes
        mean_size = float(pmf @ np.minimum((edges[:-1] + edges[1:]) / 2, max_points_per_client))
    simulated = int(min(num_clients, max(2 * k, max_points // max(mean_size, 1.0))))
    if sizes is None:
        sizes = rng.integers(1, max_points_per_client + 1, size=simulated)
    else:
        bins = rng.choice(pmf.size, size=simulated, p=pmf)
        low = np.ceil(edges[bins])
        high = np.maximum(np.ceil(edges[bins + 1]) - 1, low)
        sizes = np.minimum(low + np.floor(rng.random(simulated) * (high - low + 1)),
                           max_points_per_client).astype(np.int64)
    mixes = rng.dirichlet(np.full(present.size, CLIENT_ALPHA), size=simulated)
    owner = np.repeat(np.arange(simulated), sizes)
    # each point: a cluster from its client's mix, then a population point of it
    which = (rng.random(owner.size)[:, None] > np.cumsum(mixes, axis=1)[owner]).sum(axis=1)
    x = draw(np.minimum(which, present.size - 1))
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    points = {j: x[bounds[j]:bounds[j + 1]] for j in range(simulated)}
    # the clients' points are consecutive slices of x: x is the pooled points, no copy
    return SimulatedFederation(points, simulated / num_clients, sim_server,
                               _pooled={"points": x})


def federation_rng(config: ProtocolConfig, rep: int) -> np.random.Generator:
    """Public generator of the ``rep``-th simulated federation."""
    return generator(config.seed, "tuning", "federation", rep)
