"""FedDP-KMeans as a scikit-learn estimator, on a federation simulated from arrays.

``FedDPKMeans(n_clusters=3, epsilon=1.0).fit(X, groups=client_ids, X_server=Q)`` runs
the same protocol as every other front end -- :func:`fedkmeans.session.run_protocol`
through a Flower strategy (:mod:`fedkmeans.strategies`) -- against an in-process Flower
Grid (:class:`fedkmeans.local_grid.InProcessGrid`) whose nodes serve the clients'
points with the library's client side (:func:`fedkmeans.client.mount`): the real
ClientApp handlers and Flower message types, without processes.

What is private, and what is not (as diffprivlib and Google's DP library say of theirs):

* ``cluster_centers_``, ``release_``, ``ledger_`` and ``privacy_spent_`` are the
  release: covered by the (epsilon, delta) guarantee for the privacy unit ``level``
  (one point, or one client with all its points), with respect to ``X`` and ``groups``.
  ``X_server`` is public (the server's own data) and not protected.
* ``predict``, ``transform`` and ``score`` on data you pass are computations on that
  data with the released centers: post-processing of the release, but their output is
  about the data you pass. ``score(X)`` on the clients' data is a NON-PRIVATE
  diagnostic (a cost on the raw data), as is anything else computed from ``X`` outside
  the protocol.
* With the default secret noise two fits give different centers; ``reproducible_noise=
  True`` (tests, research) derives the noise from ``random_state`` and voids the
  guarantee against anyone who knows it.

Inputs (:mod:`fedkmeans.estimator_inputs`): ``X_server`` is matched to ``X``'s columns by
name; errors name the input and column, never a data value; centring and scaling come
from ``X_server`` (``preprocessing=``), never from a scaler fitted on ``X`` before the
estimator (neither private nor applied to ``X_server``: docs/estimator.md).

scikit-learn's estimator checks that cannot apply as they stand are listed in
:data:`CHECKS_THAT_CANNOT_APPLY` with the reason and what the tests do instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from fedkmeans.config import ConfigError
from fedkmeans.estimator_inputs import client_ids, features, server_features

__all__ = ["CHECKS_THAT_CANNOT_APPLY", "FedDPKMeans"]

#: What of scikit-learn's estimator checks cannot apply as they stand, and how the tests
#: (``tests/harness/test_estimator.py``) run them instead.
CHECKS_THAT_CANNOT_APPLY = {
    "fit(X) without X_server": "every generic check fits on X alone; the estimator needs "
        "the server's public data, so the tests give it the checks' own synthetic rows "
        "(public by construction) -- never a default drawn from X, which is private",
    "determinism (check_pipeline_consistency, check_transformer_general, "
    "check_transformer_data_not_an_array)": "secret noise: two fits release different "
        "centers, so the estimator is tagged non_deterministic and these are skipped; "
        "with reproducible_noise=True they run and pass",
    "check_fit_idempotent": "secret noise: two fits of the same data release different "
        "centers whenever the final check keeps the protocol's, so their predictions may "
        "differ (scikit-learn runs this check whatever the non_deterministic tag); the "
        "tests expect it to fail or pass under secret noise, and require it to pass with "
        "reproducible_noise=True",
}


class FedDPKMeans(ClusterMixin, TransformerMixin, BaseEstimator):
    """Differentially private federated k-means with server-side data (FedDP-KMeans).

    Parameters
    ----------
    n_clusters : int or "auto", default=8
        k: scikit-learn's ``KMeans`` default, and the strategies' (``auto``: chosen by
        the elbow, FedDP-KMeans only).
    epsilon : float, default=1.0
        The target privacy budget of the whole fit (``inf``: not private).
    delta : float, default=1e-6
    level : {"datapoint", "client"}, default="datapoint"
        The privacy unit: one point of one client, or one client with all its points.
    algorithm : str, default="feddp-kmeans"
        A registered algorithm (``server-lloyds``, ``server-kmeans++``,
        ``sphere-packing``, ``kfed``, ``lloyds-nonprivate``, ...).
    lloyds_steps : int or "auto", default="auto"
        T, the FedDP-Lloyds steps after the initialisation (``auto``: chosen by a
        simulation on ``X_server``).
    data_radius : float or "auto", default="auto"
        Delta: every point (after ``preprocessing``) is clipped to this norm
        (``auto``: estimated privately by the estimate round).
    max_points_per_client : int or "auto", default="auto"
        The largest client size (public; ``auto``: estimated privately).
    split : "auto" or sequence of 4 floats, default="auto"
        Budget weights of FedDP-Init's releases (step 1, step 2, step 3 sums, counts).
    preprocessing : {"center", "standardize", "none"}, default="center"
        The public pre-processing, computed from ``X_server`` alone (no privacy cost)
        and undone on the centers: ``center`` shifts by its mean on a private fit,
        ``standardize`` also divides each feature by its standard deviation (on every
        fit: it changes the metric). Use it instead of a scikit-learn scaler before the
        estimator, which would fit on the clients' pooled points and leave ``X_server``
        unscaled (docs/estimator.md).
    n_nodes : int, default=1
        Flower nodes the clients are spread over (client id mod n_nodes).
    random_state : int or None, default=None
        The root seed of the public randomness (the tuning's simulation, restarts).
        None: 0.
    reproducible_noise : bool, default=False
        Derive the private noise from ``random_state`` (tests and research only).
    settings : mapping or None, default=None
        Any other setting of the protocol by its strategy keyword (``aggregation``,
        ``public_num_clients``, ``check_share``, ...:
        :data:`fedkmeans.strategies.settings.SETTING_KEYS`); never one of the
        parameters above.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (k, n_features)
        The released centers.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        ``X``'s column names, when it has them; ``X_server`` is matched to them.
    n_iter_ : int
        FedDP-Lloyds steps the fit ran after the initialisation (public: T).
    privacy_spent_ : flwr.serverapp.PrivacySpent
        (epsilon, delta) spent, from the fit's PLD ledger (``epsilon = inf`` when the
        fit is not private).
    ledger_ : list of dict
        Every release: mechanism, sensitivity, noise scale, sampling rate.
    release_ : dict
        What ``release.json`` would hold: the allow-listed publishable record.
    labels_ : ndarray of shape (n_samples,)
        NON-PRIVATE: the nearest released center of each row of ``X`` (scikit-learn's
        clusterer convention; computed on the clients' points in this process, so it is
        not covered by the guarantee).
    """

    def __init__(self, n_clusters: int | str = 8, *, epsilon: float = 1.0,
                 delta: float = 1e-6, level: str = "datapoint",
                 algorithm: str = "feddp-kmeans", lloyds_steps: int | str = "auto",
                 data_radius: float | str = "auto", max_points_per_client: int | str = "auto",
                 split: str | tuple[float, ...] = "auto", preprocessing: str = "center",
                 n_nodes: int = 1, random_state: int | None = None,
                 reproducible_noise: bool = False,
                 settings: Mapping[str, Any] | None = None) -> None:
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.delta = delta
        self.level = level
        self.algorithm = algorithm
        self.lloyds_steps = lloyds_steps
        self.data_radius = data_radius
        self.max_points_per_client = max_points_per_client
        self.split = split
        self.preprocessing = preprocessing
        self.n_nodes = n_nodes
        self.random_state = random_state
        self.reproducible_noise = reproducible_noise
        self.settings = settings

    def fit(self, X, y=None, *, groups=None, X_server=None) -> FedDPKMeans:
        """Run the protocol on a federation of the clients ``groups`` names.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Every client's points (private).
        y : ignored
        groups : array-like of shape (n_samples,), optional
            The client of each point: integer ids, or names (numbered in sorted order,
            as a data file's ``client`` column). None: every point is its own client.
        X_server : array-like of shape (m, n_features)
            The server's own data Q (public). Required. With column names, matched to
            ``X``'s by name.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            Bad ``X``, ``groups`` or ``X_server``, naming it and the column, never a
            value of the data, before any node is asked.
        fedkmeans.config.ConfigError
            A parameter or setting out of range, naming the parameter.
        """
        del y
        x = features(self, X, "FedDPKMeans.fit: X", reset=True, min_samples=2)
        if X_server is None:
            raise ValueError("FedDPKMeans.fit: X_server (the server's public data, an array "
                             "(m, n_features)) is required")
        server_x = server_features(X_server, "FedDPKMeans.fit: X_server",
                                   getattr(self, "feature_names_in_", None))
        if server_x.shape[1] != x.shape[1]:
            raise ValueError(f"FedDPKMeans.fit: X_server has {server_x.shape[1]} features, "
                             f"X has {x.shape[1]}")
        clients = client_ids(groups, x.shape[0])
        strategy = self._strategy(server_x)
        points = _by_client(x, clients)
        grid = _grid(points, int(self.n_nodes))
        result = strategy.start(grid=grid)
        self.cluster_centers_ = np.asarray(result.arrays["centers"].numpy())
        self.privacy_spent_ = strategy.privacy_spent()
        self.release_ = result.release
        self.ledger_ = list(result.release["privacy"]["releases"])
        self.n_iter_ = sum(name.startswith("lloyds-")
                           for name in strategy.outcome.context.round_outputs)
        self.labels_ = self._distances(x).argmin(axis=1)  # NON-PRIVATE: the clients' points
        return self

    def _strategy(self, server_x: np.ndarray):
        from fedkmeans.strategies.base import KMeansStrategy
        from fedkmeans.strategies.settings import HARNESS_KEYS, SETTING_KEYS

        extra = dict(self.settings or {})
        clash = sorted(set(extra) & set(_OWN_SETTINGS))
        if clash:
            raise ConfigError(f"settings[{clash[0]!r}]: pass it as the parameter "
                              f"{_OWN_SETTINGS[clash[0]]}= of FedDPKMeans instead")
        valid = [name for name in SETTING_KEYS if name not in _OWN_SETTINGS]
        unknown = sorted(set(extra) - set(valid) - set(HARNESS_KEYS))
        if unknown:
            raise ConfigError(f"settings: unknown key(s) {unknown}; valid keys are "
                              f"{', '.join(valid)} (and FedDPKMeans' own parameters)")
        extra.update(num_nodes=int(self.n_nodes), lloyds_steps=self.lloyds_steps,
                     data_radius=self.data_radius, split=self.split,
                     max_points_per_client=self.max_points_per_client,
                     preprocessing=self.preprocessing,
                     seed=0 if self.random_state is None else self.random_state,
                     reproducible_noise=bool(self.reproducible_noise))
        # the config checks the name against the algorithm registry (one line naming it)
        cls = type("EstimatorStrategy", (KMeansStrategy,), {
            "algorithm": str(self.algorithm), "caller_words": _WORDS, "console": False})
        return cls(self.n_clusters, self.epsilon, self.delta, self.level,
                   server_data=server_x, **extra)

    def predict(self, X) -> np.ndarray:
        """Index of the nearest released center of each row of ``X``, (n_samples,)."""
        return self.transform(X).argmin(axis=1)

    def transform(self, X) -> np.ndarray:
        """Euclidean distance of each row of ``X`` to each center, (n_samples, k)."""
        check_is_fitted(self, "cluster_centers_")
        x = features(self, X, "FedDPKMeans: X", reset=False)
        return self._distances(x)

    def _distances(self, x: np.ndarray) -> np.ndarray:
        """Euclidean distances of the validated rows ``x`` to the centers."""
        from fedkmeans.clustering.distances import squared_distances

        return np.sqrt(np.maximum(squared_distances(x, self.cluster_centers_), 0.0))

    def score(self, X, y=None) -> float:
        """Minus the k-means cost of ``X`` with the released centers (NON-PRIVATE on X)."""
        del y
        return -float(np.sum(self.transform(X).min(axis=1) ** 2))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = not self.reproducible_noise
        return tags


#: Strategy keywords that are the estimator's own parameters (keyword -> parameter).
_OWN_SETTINGS = {"num_nodes": "n_nodes", "seed": "random_state",
                 "reproducible_noise": "reproducible_noise", "lloyds_steps": "lloyds_steps",
                 "data_radius": "data_radius", "split": "split",
                 "max_points_per_client": "max_points_per_client",
                 "preprocessing": "preprocessing"}
#: The strategies' words that the estimator says otherwise, in its errors.
_WORDS = {"server_data": "X_server", "num_nodes": "n_nodes", "seed": "random_state"}


def _by_client(x: np.ndarray, clients: np.ndarray) -> dict[int, np.ndarray]:
    """Each client's points in their order in ``x``, by client id."""
    order = np.argsort(clients, kind="stable")
    ids, starts = np.unique(clients[order], return_index=True)
    bounds = list(starts[1:]) + [order.size]
    return {int(c): x[order[a:b]] for c, a, b in zip(ids, starts, bounds, strict=True)}


def _grid(points: dict[int, np.ndarray], n_nodes: int):
    """An in-process Grid of ``n_nodes`` nodes mounting the clients (id mod n_nodes)."""
    from flwr.clientapp import ClientApp

    from fedkmeans.client import mount
    from fedkmeans.local_grid import InProcessGrid, new_run_id

    if n_nodes < 1:
        raise ValueError(f"FedDPKMeans: n_nodes must be >= 1, got {n_nodes}")

    def node_points(context) -> dict[int, np.ndarray]:
        part = int(context.node_config["partition-id"])
        return {c: p for c, p in points.items() if c % n_nodes == part}

    app = ClientApp()
    mount(app, node_points)
    nodes = [{"partition-id": i, "num-partitions": n_nodes} for i in range(n_nodes)]
    return InProcessGrid(app, {}, nodes, new_run_id())
