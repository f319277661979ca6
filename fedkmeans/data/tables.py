"""Your own data from a file: CSV, Parquet or ``.npz``, split into clients.

``dataset=npz data.path=FILE`` reads FILE by its extension:

=====================  ==========================================================
extension              read as
=====================  ==========================================================
``.csv``, ``.csv.gz``  a table, fields split by ``data.delimiter`` (default ``,``)
``.tsv``, ``.tsv.gz``  a table, fields split by a tab
``.parquet``, ``.pq``  a Parquet table (pyarrow)
``.npz``               arrays ``x``, ``client``, ``y``, ``server_x``, ``server_y``
                       (:mod:`fedkmeans.data.npz`)
=====================  ==========================================================

A table has one row per point and a header line. Its columns are:

* the client column ``data.client-column`` (default ``client``): whose row it is, an
  integer (kept as the client id) or a string (clients numbered in sorted order);
* an optional label column ``data.label-column`` (evaluation only, and the labels of
  the ``dirichlet`` partitioner);
* the features: ``data.features`` (comma-separated names), or every other column. All
  must be numeric and finite.

Which client a row belongs to is ``data.partitioner``:

* ``natural-id`` (default): the client column, as it is;
* ``iid``: the rows are shuffled with the run's seed and split into
  ``data.num-clients`` equal shards (Flower Datasets' ``IidPartitioner``);
* ``dirichlet``: each label's rows are spread over ``data.num-clients`` clients in
  Dirichlet(``data.dirichlet-alpha``) proportions (Flower Datasets'
  ``DirichletPartitioner``, seeded from the run's seed).

``iid`` and ``dirichlet`` ignore a client column if there is one. The ``natural-id``
split is computed with numpy; it is the split of Flower Datasets'
``NaturalIdPartitioner`` (clients in sorted order of the column's values), without
importing ``datasets`` in every node and without a Python loop over the rows.

The server's own data (public) is exactly one of: ``server_x``/``server_y`` of an
``.npz`` file, ``data.server-path`` (a ``.csv``, ``.tsv``, ``.parquet`` or ``.npz``
file with the same feature columns; relative to the directory of ``data.path``), or
``data.server-fraction`` of the rows, drawn with the run's seed and removed from the
clients.

Partitions and the server's rows are public randomness: every draw takes a
:func:`fedkmeans.seeding.generator` (or an :func:`~fedkmeans.seeding.integer_seed` for
Flower Datasets) derived from the root seed, never the global RNG, so every process
computes the same split. Nothing is fitted on the clients' data (no scaling: set
``privacy.data-radius`` for the data's scale, or ``auto`` to choose it from the
server's data).

A bad file raises :class:`DataFileError` (a :class:`~fedkmeans.schema.ConfigError`):
one line naming the file and the problem, with names, counts and dtypes but never a
value of the data. The file is only read.
"""

from __future__ import annotations

import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedkmeans.data.catalog import RunConfig
from fedkmeans.data.npz import ALLOWED_KEYS, NpzDataset, _ints, _points, _readonly
from fedkmeans.schema import ConfigError
from fedkmeans.seeding import generator, integer_seed

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["EXTENSIONS", "DataFileError", "TableSettings", "file_identity", "load_file",
           "server_file"]

#: File name endings and how they are read.
EXTENSIONS = {".csv": "csv", ".csv.gz": "csv", ".tsv": "tsv", ".tsv.gz": "tsv",
              ".parquet": "parquet", ".pq": "parquet", ".npz": "npz"}
#: Delimiters the wrong-delimiter check looks for in a one-column header.
_DELIMITERS = (",", ";", "\t", "|")
#: Most column names an error message lists.
_MAX_NAMES = 12


class DataFileError(ConfigError):
    """A data file cannot be used: one line naming the file and the problem.

    Parameters
    ----------
    path : str or pathlib.Path
        The file.
    problem : str
        What is wrong (names, counts and dtypes only, never a value of the data).
    """

    def __init__(self, path: str | Path, problem: str) -> None:
        super().__init__(f"data file {path}: {problem}")
        self.path = str(path)
        self.problem = problem


@dataclass(frozen=True)
class TableSettings:
    """The ``data.*`` keys that say how a data file is read and split.

    Attributes
    ----------
    client_column, label_column : str
        Column names ('' label column = no labels).
    features : tuple of str
        Feature columns (empty = every column but the client and label columns).
    delimiter : str
        CSV field delimiter ('' = by extension).
    partitioner : {"natural-id", "iid", "dirichlet"}
    num_clients : int
        Clients of the ``iid`` and ``dirichlet`` partitioners.
    alpha : float
        Dirichlet concentration.
    server_path : str
        The server's file ('' = none).
    server_fraction : float
        Fraction of the rows that become the server's data (0 = none).
    seed : int
        The run's root seed.
    """

    client_column: str = "client"
    label_column: str = ""
    features: tuple[str, ...] = ()
    delimiter: str = ""
    partitioner: str = "natural-id"
    num_clients: int = 100
    alpha: float = 1.0
    server_path: str = ""
    server_fraction: float = 0.0
    seed: int = 0

    @classmethod
    def of(cls, config: RunConfig) -> TableSettings:
        """The settings of ``config`` (its ``data.*`` keys and seed)."""
        d = config.data
        return cls(
            client_column=d.client_column, label_column=d.label_column,
            features=tuple(f.strip() for f in d.features.split(",") if f.strip()),
            delimiter=d.delimiter, partitioner=d.partitioner, num_clients=d.num_clients,
            alpha=d.dirichlet_alpha, server_path=d.server_path,
            server_fraction=d.server_fraction, seed=config.seed,
        )


def server_file(data_path: str | Path, server_path: str) -> Path:
    """Where ``data.server-path`` points: absolute, or relative to ``data.path``'s directory.

    The directory of the (absolute) data file is the same in every process, so the
    server of a ``flower`` run, which runs elsewhere, finds the same file.
    """
    path = Path(server_path).expanduser()
    return path if path.is_absolute() else Path(data_path).parent / path


def file_identity(config: RunConfig) -> dict[str, Any]:
    """What, besides the data file itself, decides the clients' pooled points.

    For a cache of results computed on the pooled points (the optimal cost): the
    settings that select the feature columns and the rows that go to the server
    (the partition does not change the pooled points, nor does the server's file).
    """
    s = TableSettings.of(config)
    ident: dict[str, Any] = {
        "features": list(s.features), "client_column": s.client_column,
        "label_column": s.label_column, "delimiter": s.delimiter,
        "server_fraction": s.server_fraction,
    }
    if s.server_fraction:
        ident["seed"] = s.seed  # the server's rows are drawn with it
    return ident


def _kind(path: Path) -> str:
    name = path.name.lower()
    for ending in sorted(EXTENSIONS, key=len, reverse=True):
        if name.endswith(ending):
            return EXTENSIONS[ending]
    suffix = "".join(path.suffixes[-2:]) or "(none)"
    raise DataFileError(path, f"has an unknown extension {suffix!r}: use "
                              f"{', '.join(EXTENSIONS)}")


def _names(names) -> str:
    names = list(names)
    shown = ", ".join(repr(str(n)) for n in names[:_MAX_NAMES])
    return shown + (f", ... ({len(names)} in all)" if len(names) > _MAX_NAMES else "")


@dataclass(frozen=True)
class _Read:
    """One file as read: features, and the columns that are not features."""

    columns: tuple[str, ...]  # feature names ('' for an .npz file)
    x: np.ndarray  # (n, d) float64, finite
    client: np.ndarray | None  # (n,) int64 client ids
    labels: np.ndarray | None  # (n,) raw labels (ints or strings)
    server_x: np.ndarray | None = None  # an .npz file's own server data
    server_y: np.ndarray | None = None


def _read_frame(path: Path, kind: str, delimiter: str) -> pd.DataFrame:
    """The table of a CSV/TSV/Parquet file, with stripped string column names."""
    import pandas as pd

    if kind == "parquet":
        try:
            import pyarrow  # noqa: F401 - pandas reads Parquet with it
        except ImportError:
            raise DataFileError(path, "reading Parquet needs pyarrow (pip install pyarrow)") \
                from None
        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many kinds
            raise DataFileError(path, f"cannot be read as Parquet ({type(exc).__name__})") \
                from None
        names = [str(c).strip() for c in frame.columns]
    else:
        sep = delimiter or ("\t" if kind == "tsv" else ",")
        try:
            header = pd.read_csv(path, sep=sep, header=None, nrows=1, dtype=str,
                                 keep_default_na=False)
            frame = pd.read_csv(path, sep=sep, skipinitialspace=True)
        except pd.errors.EmptyDataError:
            raise DataFileError(path, "is empty (no header line)") from None
        except pd.errors.ParserError as exc:
            where = str(exc).strip().splitlines()[-1].removeprefix("Error tokenizing data. ")
            raise DataFileError(path, f"is not a {kind.upper()} table with delimiter {sep!r} "
                                      f"({where})") from None
        except UnicodeDecodeError:
            raise DataFileError(path, "is not UTF-8 text (a binary file?)") from None
        except (OSError, ValueError) as exc:
            raise DataFileError(path, f"cannot be read ({type(exc).__name__})") from None
        names = [str(c).strip() for c in header.iloc[0]]
        if len(names) == 1:
            others = [d for d in _DELIMITERS if d != sep and d in names[0]]
            if others:
                raise DataFileError(path, f"has 1 column with delimiter {sep!r} but its header "
                                          f"holds {others[0]!r}: set data.delimiter="
                                          f"{others[0]!r}")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise DataFileError(path, f"has duplicate column name(s) {_names(dupes)}")
    if any(not n for n in names):
        raise DataFileError(path, "has a column without a name in its header")
    frame.columns = names
    return frame


def _client_ids(path: Path, column: pd.Series, name: str) -> np.ndarray:
    """Client ids of a client column: integers as they are, strings in sorted order."""
    try:
        return client_codes(column)
    except ValueError as exc:
        raise DataFileError(path, f"column {name!r} {exc}") from None


def client_codes(column: pd.Series) -> np.ndarray:
    """Client ids (int64) of a column of ids, numbered as the experiment numbers them.

    Integers (and whole floats) as they are; anything else (strings, fractional
    numbers) numbered in sorted order, as Flower Datasets' ``NaturalIdPartitioner``
    does. The file reader and the estimator's ``groups`` share this rule.

    Raises
    ------
    ValueError
        Empty or NaN cells (the message counts them and never quotes a value).
    """
    import pandas as pd

    empty = column.isna().to_numpy(dtype=bool, copy=True)
    if column.dtype.kind in "OUS" or isinstance(column.dtype, pd.StringDtype):
        empty |= column.astype(str).str.strip().eq("").to_numpy(dtype=bool)
    if empty.any():
        raise ValueError(f"has {int(empty.sum())} empty cell(s): every row needs its client id")
    if pd.api.types.is_bool_dtype(column):
        return column.to_numpy(np.int64)
    if pd.api.types.is_integer_dtype(column):
        return column.to_numpy(np.int64)
    if pd.api.types.is_float_dtype(column):
        values = column.to_numpy(np.float64)
        if np.all(np.isfinite(values)) and np.all(values == np.round(values)):
            return values.astype(np.int64)
    # strings (or fractional numbers): numbered in sorted order, as NaturalIdPartitioner
    _, codes = np.unique(column.astype(str).to_numpy(), return_inverse=True)
    return codes.astype(np.int64)


def _labels(path: Path, column: pd.Series, name: str) -> np.ndarray:
    empty = int(column.isna().sum())
    if empty:
        raise DataFileError(path, f"label column {name!r} has {empty} empty cell(s)")
    return column.to_numpy()


def _features(path: Path, frame: pd.DataFrame, names: list[str]) -> np.ndarray:
    """The feature columns as float64, every value finite."""
    import pandas as pd

    for name in names:
        col = frame[name]
        if not pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col):
            raise DataFileError(path, f"column {name!r} is not numeric (dtype {col.dtype}): list "
                                      "the feature columns in data.features, or drop it")
    x = frame[names].to_numpy(dtype=np.float64, na_value=np.nan)
    for test, what in ((np.isnan, "empty or NaN cell(s)"), (np.isinf, "infinite value(s)")):
        bad = test(x)
        if bad.any():
            cols = [names[j] for j in np.flatnonzero(bad.any(axis=0))]
            raise DataFileError(path, f"has {int(bad.sum())} {what} in feature column(s) "
                                      f"{_names(cols)}: fill or drop those rows")
    return x


def _read_table(path: Path, kind: str, s: TableSettings, *, role: str) -> _Read:
    frame = _read_frame(path, kind, s.delimiter)
    names = list(frame.columns)
    rows = len(frame)
    if rows == 0:
        raise DataFileError(path, "has a header but no data rows")
    if role == "data" and rows == 1:
        raise DataFileError(path, "has only 1 data row (a federation needs at least 2)")
    wants_client = role == "data" and s.partitioner == "natural-id"
    if wants_client and s.client_column not in names:
        raise DataFileError(path, f"has no client column {s.client_column!r} "
                                  f"(data.client-column; columns: {_names(names)}); without "
                                  "one, choose partitioner=iid or partitioner=dirichlet")
    if role == "data" and s.label_column and s.label_column not in names:
        raise DataFileError(path, f"has no label column {s.label_column!r} (data.label-column; "
                                  f"columns: {_names(names)})")
    reserved = {s.client_column, s.label_column} - {""}
    if s.features:
        missing = [f for f in s.features if f not in names]
        if missing:
            raise DataFileError(path, f"has no column(s) {_names(missing)} named in "
                                      f"data.features (columns: {_names(names)})")
        taken = [f for f in s.features if f in reserved]
        if taken:
            raise DataFileError(path, f"data.features names {_names(taken)}, the client or "
                                      "label column")
        features = list(s.features)
    else:
        features = [n for n in names if n not in reserved]
    if not features:
        raise DataFileError(path, f"has no feature columns (columns: {_names(names)})")
    x = _features(path, frame, features)
    client = (_client_ids(path, frame[s.client_column], s.client_column)
              if wants_client else None)
    labels = (_labels(path, frame[s.label_column], s.label_column)
              if s.label_column in names else None)
    return _Read(tuple(features), x, client, labels)


def _read_npz(path: Path, s: TableSettings, *, role: str) -> _Read:
    try:
        loaded = np.load(path, allow_pickle=False)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        raise DataFileError(path, f"is not an .npz archive ({type(exc).__name__})") from None
    if not hasattr(loaded, "files"):
        raise DataFileError(path, "is not an .npz archive (it holds a single .npy array)")
    arrays = {}
    with loaded as npz:
        for key in npz.files:
            try:
                arrays[key] = npz[key]
            except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
                raise DataFileError(path, f"key {key!r} cannot be read without pickle as a "
                                          f"numeric array ({type(exc).__name__})") from None
    unknown = sorted(set(arrays) - set(ALLOWED_KEYS))
    if unknown:
        raise DataFileError(path, f"has unknown key(s) {unknown}; allowed keys are "
                                  f"{list(ALLOWED_KEYS)}")
    if s.features:
        raise DataFileError(path, "is an .npz file, whose features have no names: "
                                  "data.features is for CSV and Parquet tables")
    server = role == "server"
    key = "server_x" if server and "server_x" in arrays else "x"
    if key not in arrays:
        raise DataFileError(path, f"has no key {key!r} (the points)")
    try:
        x = _points(key, arrays[key])
        rows = x.shape[0]
        client = y = server_x = server_y = None
        if not server and s.partitioner == "natural-id":
            if "client" not in arrays:
                raise ValueError("has no key 'client' (each row's client id); without one, "
                                 "choose partitioner=iid or partitioner=dirichlet")
            client = _ints("client", arrays["client"], rows, "x")
        label_key = "server_y" if key == "server_x" else "y"
        if label_key in arrays:
            y = _ints(label_key, arrays[label_key], rows, key)
        if not server and "server_x" in arrays:
            server_x = _points("server_x", arrays["server_x"])
            if "server_y" in arrays:
                server_y = _ints("server_y", arrays["server_y"], server_x.shape[0], "server_x")
    except ValueError as exc:
        raise DataFileError(path, str(exc)) from None
    if not server and rows == 1:
        raise DataFileError(path, "has only 1 row in x (a federation needs at least 2)")
    return _Read(("",) * x.shape[1], x, client, y, server_x, server_y)


def _read(path: Path, s: TableSettings, *, role: str) -> _Read:
    """Read one file (``role``: ``data`` or ``server``) and check it."""
    kind = _kind(path)
    if not path.is_file():
        what = "data.server-path" if role == "server" else "data.path"
        raise DataFileError(path, f"does not exist ({what})" if not path.exists()
                            else f"is not a file ({what})")
    if kind == "npz":
        return _read_npz(path, s, role=role)
    return _read_table(path, kind, s, role=role)


def _match_server(data: _Read, server: _Read, path: Path, data_path: Path) -> np.ndarray:
    """The server file's features in the data file's column order."""
    d, d_server = data.x.shape[1], server.x.shape[1]
    named = all(data.columns) and all(server.columns)
    if named:
        missing = [c for c in data.columns if c not in server.columns]
        extra = [c for c in server.columns if c not in data.columns]
        if missing or extra:
            diff = "; ".join(f"{what} {_names(names)}" for what, names in (
                ("missing", missing), ("extra", extra)) if names)
            raise DataFileError(path, f"has d={d_server} feature columns but the data file "
                                      f"{data_path.name} has d={d}: {diff}")
        order = [server.columns.index(c) for c in data.columns]
        return server.x[:, order]
    if d_server != d:
        raise DataFileError(path, f"has d={d_server} features but the data file "
                                  f"{data_path.name} has d={d}")
    return server.x


def _label_codes(*labels: np.ndarray | None) -> list[np.ndarray | None]:
    """Integer labels: integers kept, anything else numbered over all the arrays."""
    present = [y for y in labels if y is not None]
    if all(np.asarray(y).dtype.kind in "iu" for y in present):
        return [None if y is None else np.asarray(y, dtype=np.int64) for y in labels]
    if all(np.asarray(y).dtype.kind == "f" for y in present) and all(
            np.all(y == np.round(y)) for y in present):
        return [None if y is None else np.asarray(y).astype(np.int64) for y in labels]
    strings = [None if y is None else np.asarray(y).astype(str) for y in labels]
    values = np.unique(np.concatenate([y for y in strings if y is not None]))
    return [None if y is None else np.searchsorted(values, y).astype(np.int64)
            for y in strings]


def _partition(path: Path, read: _Read, labels: np.ndarray | None,
               s: TableSettings) -> np.ndarray:
    """Client id of every client row."""
    if s.partitioner == "natural-id":
        assert read.client is not None
        return read.client
    rows, k = read.x.shape[0], s.num_clients
    if k > rows:
        raise DataFileError(path, f"has {rows} client rows, fewer than data.num-clients={k} "
                                  f"(partitioner={s.partitioner})")
    from datasets import Dataset
    from flwr_datasets.partitioner import DirichletPartitioner, IidPartitioner

    if s.partitioner == "iid":
        # IidPartitioner cuts contiguous shards: shuffle first, with the run's seed
        order = generator(s.seed, "data", "partition", "iid").permutation(rows)
        partitioner = IidPartitioner(num_partitions=k)
        partitioner.dataset = Dataset.from_dict({"row": order})
    else:
        if labels is None:
            how = ("key 'y'" if not all(read.columns) else
                   "a label column: set data.label-column")
            raise DataFileError(path, f"partitioner=dirichlet splits each label's rows, but "
                                      f"the file has no labels ({how})")
        partitioner = DirichletPartitioner(
            num_partitions=k, partition_by="label", alpha=s.alpha, min_partition_size=1,
            self_balancing=False, shuffle=True,
            seed=integer_seed(s.seed, "data", "partition", "dirichlet"))
        partitioner.dataset = Dataset.from_dict({"row": np.arange(rows), "label": labels})
    ids = np.full(rows, -1, dtype=np.int64)
    try:
        with warnings.catch_warnings():  # one warning per failed Dirichlet draw
            warnings.simplefilter("ignore")
            for j in range(k):
                ids[np.asarray(partitioner.load_partition(j)["row"], dtype=np.int64)] = j
    except ValueError:
        raise DataFileError(path, f"partitioner=dirichlet left a client without rows in 10 "
                                  f"draws (data.dirichlet-alpha={s.alpha:g}, data.num-clients="
                                  f"{k}, {rows} rows): raise the alpha or lower the number "
                                  "of clients") from None
    assert np.all(ids >= 0)
    return ids


def load_file(path: str | Path, settings: TableSettings, *, node: bool = False) -> NpzDataset:
    """Read, check and split a data file.

    Parameters
    ----------
    path : str or pathlib.Path
        The data file (``data.path``, or a node's own ``data-path``).
    settings : TableSettings
        How to read and split it.
    node : bool
        A deployed node's own file: only its clients are read (no server data).

    Returns
    -------
    NpzDataset
        Clients' points with their client ids and labels, and the server's data
        (empty with ``node``), read-only.

    Raises
    ------
    DataFileError
        One line naming the file and what is wrong with it.
    """
    path = Path(path)
    data = _read(path, settings, role="data")
    x, client_labels = data.x, data.labels
    server_x, server_labels = data.server_x, data.server_y
    d = x.shape[1]
    if node:
        server_x, server_labels = np.zeros((0, d)), None
    else:
        sources = [name for name, given in (
            ("the file's server_x", data.server_x is not None),
            ("data.server-path", bool(settings.server_path)),
            ("data.server-fraction", settings.server_fraction > 0)) if given]
        if len(sources) > 1:
            raise DataFileError(path, f"has server data from {' and '.join(sources)}: "
                                      "keep one")
        if not sources:
            raise DataFileError(path, "has no server data: set data.server-path=FILE (the "
                                      "server's rows, same feature columns) or "
                                      "data.server-fraction (e.g. 0.1)")
        if data.server_x is not None and data.server_x.shape[1] != d:
            raise DataFileError(path, f"has server_x with d={data.server_x.shape[1]} but x "
                                      f"with d={d}")
        if settings.server_path:
            spath = server_file(path, settings.server_path)
            server = _read(spath, settings, role="server")
            server_x, server_labels = _match_server(data, server, spath, path), server.labels
        if settings.server_fraction > 0:
            rows = x.shape[0]
            m = int(round(settings.server_fraction * rows))
            if m < 1 or rows - m < 2:
                raise DataFileError(path, f"data.server-fraction={settings.server_fraction:g} "
                                          f"of {rows} rows leaves {m} server row(s) and "
                                          f"{rows - m} client row(s): each needs at least "
                                          f"{1 if m < 1 else 2}")
            picked = np.zeros(rows, dtype=bool)
            picked[generator(settings.seed, "data", "server-rows").choice(
                rows, size=m, replace=False)] = True
            server_x, x = x[picked], x[~picked]
            if client_labels is not None:
                server_labels, client_labels = client_labels[picked], client_labels[~picked]
            if data.client is not None:
                data = _Read(data.columns, x, data.client[~picked], None)
            else:
                data = _Read(data.columns, x, None, None)
    client_y, server_y = _label_codes(client_labels, server_labels)
    client = _partition(path, data, client_y, settings)
    return NpzDataset(
        x=_readonly(np.ascontiguousarray(data.x)), client=_readonly(client),
        y=None if client_y is None else _readonly(client_y),
        server_x=_readonly(np.ascontiguousarray(server_x, dtype=np.float64)),
        server_y=None if server_y is None else _readonly(server_y),
    )
