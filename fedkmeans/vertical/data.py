"""Real data sets that load offline, split into one feature slice per party.

scikit-learn's bundled sets (``load_*``; ``fetch_*`` needs a download) are the
vertical federation's data: every party holds all n samples (same order, i.e. the
ids are aligned beforehand -- private set intersection is out of scope) and a
contiguous, disjoint block of the features. A party scales its own columns
(column-wise scaling of each slice equals scaling the joined data), so scaling
releases nothing. Party 0 also holds the class labels, used only for the non-private
evaluation.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = ["DATASETS", "SCALES", "feature_slices", "load_dataset", "party_data", "scale_columns"]

DATASETS = ("iris", "wine", "breast_cancer", "digits", "mplsstops")

#: MplsStops rows of the vertical app: the first complete stops in table order (no
#: sampling, no randomness); features east/north km from City Hall, labels = precinct.
MPLSSTOPS_ROWS = 3000
SCALES = ("standard", "minmax", "none")


@lru_cache(maxsize=4)
def _load(name: str) -> tuple[np.ndarray, np.ndarray]:
    if name == "mplsstops":  # the project's offline MplsStops (extra `datasets`)
        from fedkmeans.data import mplsstops

        columns = mplsstops.load_columns()
        features = mplsstops.features(columns)
        precinct = np.asarray(columns["policePrecinct"], dtype=np.float64)
        complete = np.isfinite(features).all(axis=1) & np.isfinite(precinct)
        x = np.ascontiguousarray(features[complete][:MPLSSTOPS_ROWS])
        y = precinct[complete][:MPLSSTOPS_ROWS].astype(np.int64)
    else:
        from sklearn import datasets

        bunch = getattr(datasets, f"load_{name}")()
        x = np.asarray(bunch.data, dtype=np.float64)
        y = np.asarray(bunch.target, dtype=np.int64)
    x.flags.writeable = False
    y.flags.writeable = False
    return x, y


def load_dataset(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Load a data set that works offline: bundled with scikit-learn, or MplsStops.

    Parameters
    ----------
    name : {"iris", "wine", "breast_cancer", "digits", "mplsstops"}
        ``mplsstops``: :data:`MPLSSTOPS_ROWS` Minneapolis police stops, d = 2 (east and
        north km from City Hall), labels = the 5 precincts; needs the `datasets` extra.

    Returns
    -------
    x : numpy.ndarray of float64, shape (n, d)
        Raw features (read-only).
    y : numpy.ndarray of int64, shape (n,)
        Class labels (read-only).
    """
    if name not in DATASETS:
        raise ValueError(f"dataset must be one of {DATASETS}, got {name!r}")
    return _load(name)


def feature_slices(dim: int, parties: int) -> list[np.ndarray]:
    """Contiguous, disjoint, nearly equal column blocks, one per party.

    Parameters
    ----------
    dim : int
        Number of features d, >= 1.
    parties : int
        Number of parties H, in [1, d].

    Returns
    -------
    list of numpy.ndarray of int, H entries
        Column indices of each party (sizes differ by at most one).
    """
    if not 1 <= parties <= dim:
        raise ValueError(f"parties must be in [1, {dim}] (the number of features), got {parties}")
    return [np.asarray(block, dtype=np.int64) for block in np.array_split(np.arange(dim), parties)]


def scale_columns(x: np.ndarray, scale: str) -> np.ndarray:
    """Scale each column of ``x`` (a copy; constant columns become 0).

    Parameters
    ----------
    x : array_like, shape (n, d)
    scale : {"standard", "minmax", "none"}
        Z-score, min-max to [0, 1], or unchanged.

    Returns
    -------
    numpy.ndarray of float64, shape (n, d)
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    out = np.array(x, dtype=np.float64, copy=True)
    if scale == "none":
        return out
    if scale == "standard":
        centre, spread = out.mean(axis=0), out.std(axis=0)
    else:
        centre, spread = out.min(axis=0), out.max(axis=0) - out.min(axis=0)
    spread = np.where(spread > 0, spread, 1.0)
    return (out - centre) / spread


def party_data(
    name: str, party: int, parties: int, scale: str = "standard"
) -> tuple[np.ndarray, np.ndarray | None]:
    """One party's feature slice (and the labels if it is party 0).

    Parameters
    ----------
    name : str
        A data set of :data:`DATASETS`.
    party : int
        Party index in [0, parties).
    parties : int
        Number of parties H.
    scale : {"standard", "minmax", "none"}

    Returns
    -------
    x : numpy.ndarray of float64, shape (n, d_party)
        The party's scaled columns (a copy: nothing else of the data set is kept).
    y : numpy.ndarray of int64, shape (n,), or None
        Class labels for party 0 (the label holder), else None.
    """
    x, y = load_dataset(name)
    if not 0 <= party < parties:
        raise ValueError(f"party must be in [0, {parties}), got {party}")
    columns = feature_slices(x.shape[1], parties)[party]
    return scale_columns(x[:, columns], scale), (y.copy() if party == 0 else None)
