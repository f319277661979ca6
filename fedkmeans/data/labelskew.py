"""Federations of labelled tables without a natural client: label skew, biased server.

Some real data sets (:mod:`fedkmeans.data.digits`, :mod:`fedkmeans.data.diamonds`)
have labels but no column that says whose row it is. This module makes a federation
from them the way the federated-learning literature does, with two departures from
i.i.d. that hurt a server that trusts its own data:

* **Label skew across clients.** Client ``j`` draws class proportions
  ``pi_j ~ Dirichlet(alpha 1)``; each class's rows go to the clients in proportion to
  their ``pi_j`` (a multinomial), so clients differ in size and in class mix.
* **A server that under-represents some classes.** The server's pool takes
  ``server_fraction`` of the rows, but rows of the *minority* classes (the upper half
  of the sorted class list) are kept with probability ``minority`` times that of the
  others, so the server's own k-means misses or mis-sizes them.

The assignment uses a fixed public generator (:data:`PARTITION_SEED`), so every process
numbers the same clients the same way; the run's seed varies everything else. Pure
NumPy: tested on small synthetic columns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from fedkmeans.data.tabular import Federation, build_federation

__all__ = [
    "PARTITION_SEED", "client_keys", "label_skew_builder", "minority_classes", "server_rows",
]

#: Seed of the public generator that splits a table into clients and server pool.
PARTITION_SEED = 20250605


def minority_classes(y: np.ndarray) -> np.ndarray:
    """The upper half of the sorted distinct labels (``ceil(c / 2)`` of ``c`` classes)."""
    classes = np.unique(y)
    return classes[classes.size // 2:]


def server_rows(
    y: np.ndarray, server_fraction: float, minority: float, rng: np.random.Generator
) -> np.ndarray:
    """Rows held out for the server, under-representing the minority classes.

    Parameters
    ----------
    y : ndarray of int, shape (n,)
        Labels.
    server_fraction : float in (0, 1)
        Probability that a majority-class row is held out.
    minority : float in (0, 1]
        A minority-class row is held out with probability ``minority *
        server_fraction``.
    rng : numpy.random.Generator

    Returns
    -------
    ndarray of bool, shape (n,)
    """
    y = np.asarray(y)
    p = np.where(np.isin(y, minority_classes(y)), minority * server_fraction, server_fraction)
    return rng.random(y.size) < p


def client_keys(
    y: np.ndarray, num_clients: int, alpha: float, rng: np.random.Generator
) -> np.ndarray:
    """Client index of every row, by a Dirichlet(alpha) label skew.

    Parameters
    ----------
    y : ndarray of int, shape (n,)
        Labels of the rows to distribute.
    num_clients : int
    alpha : float > 0
        Concentration: small = each client holds few classes.
    rng : numpy.random.Generator

    Returns
    -------
    ndarray of str, shape (n,)
        Zero-padded client indices (``"00042"``), so that sorted order is numeric.
    """
    y = np.asarray(y)
    proportions = rng.dirichlet(np.full(np.unique(y).size, float(alpha)), size=num_clients)
    owner = np.empty(y.size, dtype=np.int64)
    for c, label in enumerate(np.unique(y)):
        rows = np.flatnonzero(y == label)
        share = proportions[:, c] / proportions[:, c].sum()
        owner[rows] = rng.choice(num_clients, size=rows.size, p=share)
    width = len(str(num_clients - 1))
    return np.char.zfill(owner.astype(str), width)


def label_skew_builder(
    features: Callable[[Mapping[str, np.ndarray]], np.ndarray],
    labels: Callable[[Mapping[str, np.ndarray]], np.ndarray],
    *,
    num_clients: int,
    alpha: float,
    server_fraction: float,
) -> Callable[..., Federation]:
    """A data set's ``build(columns, holdout, *, min_points, max_clients, max_points)``.

    Parameters
    ----------
    features, labels : callable
        Turn the table's columns into ``x`` (n, d), scaled by public constants, and
        ``y`` (n,) of int.
    num_clients, alpha, server_fraction
        The data set's public partition constants (:func:`client_keys`,
        :func:`server_rows`).

    Returns
    -------
    callable
        ``build(columns, holdout, *, min_points=1, max_clients=0, max_points=0)``:
        ``holdout = ("minority", value)`` from ``data.holdout = minority=<value>`` is
        the minority classes' relative probability of being held out; the rest is as
        in :func:`~fedkmeans.data.tabular.build_federation`. The partition uses a
        fixed public generator (:data:`PARTITION_SEED`).
    """

    def build(
        columns: Mapping[str, np.ndarray],
        holdout: tuple[str, str],
        *,
        min_points: int = 1,
        max_clients: int = 0,
        max_points: int = 0,
    ) -> Federation:
        column, value = holdout
        if column != "minority":
            raise ValueError(
                f"config key 'data.holdout': column must be 'minority', got {column!r}"
            )
        x, y = features(columns), np.asarray(labels(columns), dtype=np.int64)
        rng = np.random.default_rng(PARTITION_SEED)
        held = server_rows(y, server_fraction, float(value), rng)
        keys = np.full(y.size, "", dtype=object)
        keys[~held] = client_keys(y[~held], num_clients, alpha, rng)
        return build_federation(
            x, keys.astype(str), held, y=y, min_points=min_points, max_clients=max_clients,
            max_points=max_points,
        )

    return build
