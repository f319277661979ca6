"""The estimator's inputs, checked at the edge and described in the caller's words.

:class:`fedkmeans.FedDPKMeans` takes three inputs: ``X`` (the clients' points,
private), ``groups`` (the client of each point, private) and ``X_server`` (the server's
data, public). Each is checked here before any node is asked anything, and every error
names the input (``X``, ``groups``, ``X_server``) and, where it helps, the column -- by
its name when the input has feature names, else by its position. An error never quotes
a value of the data (scikit-learn's and NumPy's own messages do: ``could not convert
string to float: 'Paris'``, or a 1-D array printed whole), so those are replaced.

``X_server`` is matched to ``X`` by column name, as scikit-learn matches a later frame to
``feature_names_in_`` and as the experiment's data files match the server's file to the
clients': a frame with the same columns in another order is reordered, one with other
columns is refused naming them. A frame ``X_server`` with an ``X`` without column names
is refused: that is what a scikit-learn ``Pipeline`` step before the estimator makes of
two frames (it transforms ``X`` and passes ``X_server`` through untouched), and the two
would then live in different spaces.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_array, validate_data

__all__ = ["client_ids", "features", "server_features"]

#: Column names listed in one error at most.
_MAX_NAMES = 5


def features(estimator, data, what: str, *, reset: bool, min_samples: int = 1) -> np.ndarray:
    """``X`` as a finite float64 array (n, d), through scikit-learn's ``validate_data``.

    Parameters
    ----------
    estimator : FedDPKMeans
        ``reset=True`` records ``n_features_in_`` and ``feature_names_in_`` on it; else
        they are checked, as scikit-learn does.
    data : array-like of shape (n, d)
    what : str
        How an error starts (``"FedDPKMeans.fit: X"``).
    reset : bool
    min_samples : int

    Raises
    ------
    ValueError
        Not numeric, not 2-D, empty, NaN or infinite: naming ``what`` and the column.
    """
    _numeric(data, what)
    try:
        x = validate_data(estimator, data, dtype=np.float64, ensure_all_finite=False,
                          ensure_min_samples=min_samples, reset=reset)
    except ValueError as exc:
        raise ValueError(_safe(str(exc), what)) from None
    names = getattr(estimator, "feature_names_in_", None)
    _finite(x, what, None if names is None else list(names))
    return x


def server_features(data, what: str, names_x) -> np.ndarray:
    """``X_server`` as a finite float64 array (m, d), its columns in ``X``'s order.

    Parameters
    ----------
    data : array-like of shape (m, d)
    what : str
        How an error starts (``"FedDPKMeans.fit: X_server"``).
    names_x : ndarray of str or None
        ``X``'s ``feature_names_in_`` (None: ``X`` had no column names).

    Raises
    ------
    ValueError
        Columns that differ from ``X``'s by name, or a frame beside an ``X`` without
        names (module docstring); not numeric, NaN or infinite, naming the column.
    """
    names_q = _column_names(data)
    if names_q is not None and names_x is None:
        raise ValueError(
            f"{what} has column names but X has none: give both as frames with the same "
            "columns, or both as arrays. (A Pipeline step before FedDPKMeans transforms X "
            "but not X_server; centre or scale with FedDPKMeans(preprocessing=...), from "
            "the server's data, instead: docs/estimator.md)")
    if names_q is not None:
        missing = [n for n in names_x if n not in set(names_q)]
        extra = [n for n in names_q if n not in set(names_x)]
        if missing or extra:
            said = "; ".join(part for part in (
                missing and f"lacks X's column(s) {_names(missing)}",
                extra and f"has column(s) {_names(extra)} that X has not") if part)
            raise ValueError(f"{what} must have X's columns (matched by name): it {said}")
        data = data[list(names_x)]  # matched by name, in X's order
    _numeric(data, what)
    try:
        x = check_array(data, dtype=np.float64, ensure_all_finite=False, input_name="X_server")
    except ValueError as exc:
        raise ValueError(_safe(str(exc), what)) from None
    _finite(x, what, None if names_x is None else list(names_x))
    return x


def _column_names(data):
    """The column names scikit-learn reads from ``data`` (a frame of string names), or None.

    What ``validate_data(..., reset=True)`` records as ``feature_names_in_``, read on a
    throwaway estimator so that ``data`` is neither converted nor checked here.
    """
    reader = BaseEstimator()
    validate_data(reader, data, skip_check_array=True, ensure_2d=False, reset=True)
    return getattr(reader, "feature_names_in_", None)


def client_ids(groups, n: int) -> np.ndarray:
    """``groups`` as int64 client ids (n,), numbered as the experiment numbers a file's.

    Integers (and whole floats) are the ids; any other ids (strings, fractional
    numbers) are numbered 0, 1, ... in their sorted order, as a data file's ``client``
    column is (:func:`fedkmeans.data.tables.client_codes`). None: one client per point.

    Raises
    ------
    ValueError
        Wrong length, missing ids or negative integers, naming ``groups`` (never an id).
    """
    from fedkmeans.data.tables import client_codes

    if groups is None:
        return np.arange(n, dtype=np.int64)
    if getattr(groups, "ndim", 1) != 1 or len(groups) != n:
        shape = getattr(groups, "shape", (len(groups),))
        raise ValueError(f"FedDPKMeans.fit: groups must have one client id per row of X "
                         f"(shape ({n},)), got shape {tuple(shape)}")
    import pandas as pd

    try:
        column = groups if isinstance(groups, pd.Series) else pd.Series(np.asarray(groups))
        ids = client_codes(column)
    except ValueError as exc:
        raise ValueError(f"FedDPKMeans.fit: groups {exc}") from None
    if ids.size and ids.min() < 0:
        raise ValueError("FedDPKMeans.fit: groups must be non-negative integer client ids "
                         "(or names, numbered in sorted order)")
    return ids


def _numeric(data, what: str) -> None:
    """Refuse a column that is not numbers, naming it (never quoting a value)."""
    dtypes = getattr(data, "dtypes", None)
    if dtypes is not None and hasattr(dtypes, "items"):  # a pandas frame
        import pandas as pd

        for name, dtype in dtypes.items():
            if not (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)
                    or _converts(data[name])):
                raise ValueError(f"{what} column {str(name)!r} is not numeric (dtype {dtype}): "
                                 "FedDPKMeans clusters numbers; drop or encode it")
        return
    try:
        arr = np.asarray(data)
    except (TypeError, ValueError):
        return  # scikit-learn's own check names the problem
    if arr.dtype.kind in "OUS" and arr.ndim == 2:
        for j in range(arr.shape[1]):
            if not _converts(arr[:, j]):
                raise ValueError(f"{what} column {j} is not numeric: FedDPKMeans clusters "
                                 "numbers; drop or encode it")


def _converts(column) -> bool:
    """Whether every value of ``column`` is a number (an object column of floats is).

    A value that is not even a string (a dict) is left to NumPy's TypeError, which
    names its type, not its value.
    """
    try:
        np.asarray(column).astype(np.float64)
    except ValueError:
        return False
    except TypeError:
        return True
    return True


def _safe(message: str, what: str) -> str:
    """scikit-learn's error about ``what``, without the data values some of them print."""
    if message.startswith("Expected 2D array"):
        return (f"{what} must be 2-D (n_samples, n_features); got a 1-D array or a scalar. "
                "Reshape your data: .reshape(-1, 1) for a single feature, .reshape(1, -1) "
                "for a single row")
    if message.startswith("Complex data not supported"):
        return f"{what} holds complex numbers: Complex data not supported"
    if "could not convert" in message or "invalid literal" in message:
        return f"{what} holds a value that is not a number: FedDPKMeans clusters numbers"
    return f"{what}: {message}"


def _finite(x: np.ndarray, what: str, names: list[str] | None) -> None:
    """Refuse NaN or infinity, naming the input and its first such column."""
    for test, kind in ((np.isnan, "NaN"), (np.isinf, "infinity (inf)")):
        bad = test(x).any(axis=0)
        if bad.any():
            cols = np.flatnonzero(bad)
            shown = _names(names[j] for j in cols) if names is not None else \
                ", ".join(str(j) for j in cols[:_MAX_NAMES])
            raise ValueError(f"{what} contains {kind} in column(s) {shown}: fill or drop "
                             "those rows")


def _names(names) -> str:
    names = [str(n) for n in names]
    shown = ", ".join(repr(n) for n in names[:_MAX_NAMES])
    return shown + (f", ... ({len(names)} in all)" if len(names) > _MAX_NAMES else "")
