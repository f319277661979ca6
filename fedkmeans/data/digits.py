"""Digits: 1,797 handwritten digits (8 x 8 pixels), 100 label-skewed clients.

scikit-learn ships the table (the UCI "optdigits" test set, ``load_digits``), so it
loads offline with the project's own dependencies.

Federation (:func:`fedkmeans.data.labelskew.label_skew_builder`)
    100 clients with Dirichlet(0.3) label skew over the 10 digits (1 to about 60
    points each). The server's pool holds about 15 % of the rows, with the digits
    5-9 held out at ``minority`` (``data.holdout = minority=0.2``) times the rate of
    0-4. Labels (the digit) are used only to evaluate.

Features (d = 64)
    Pixel intensities divided by 16, their public maximum, so every coordinate lies in
    [0, 1] and ``||p|| <= 8`` (a public bound on Delta).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fedkmeans.data.catalog import Holdout, rate, register
from fedkmeans.data.labelskew import label_skew_builder
from fedkmeans.data.real import RealDataset

__all__ = ["DIGITS", "NUM_CLIENTS", "build", "features", "load_columns"]

NUM_CLIENTS, ALPHA, SERVER_FRACTION = 100, 0.3, 0.15
#: Largest pixel value of the 8 x 8 images (public: the scanner's 0-16 scale).
PIXEL_MAX = 16.0


def features(columns: Mapping[str, np.ndarray]) -> np.ndarray:
    """Pixels scaled to [0, 1], shape (n, 64)."""
    return np.asarray(columns["pixels"], dtype=np.float64) / PIXEL_MAX


#: The label-skewed digits federation (see the module docstring).
build = label_skew_builder(
    features, lambda columns: columns["digit"],
    num_clients=NUM_CLIENTS, alpha=ALPHA, server_fraction=SERVER_FRACTION,
)


def load_columns() -> dict[str, np.ndarray]:
    """Read scikit-learn's bundled digits as ``pixels`` (n, 64) and ``digit`` (n,)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return {"pixels": np.asarray(bunch.data), "digit": np.asarray(bunch.target)}


#: ``dataset=digits``: the server's data = 150 of about 174 held-out rows, where the
#: digits 5-9 are held out at 0.2 times the rate of 0-4. Delta, the largest client size
#: and the client-level bounds are ``auto``: estimated by the estimate round.
DIGITS = register(RealDataset(
    "digits", "scikit-learn's digits: 100 clients with Dirichlet(0.3) label skew, d = 64",
    presets={"digits": {
        "data.num-clients": 0, "data.points-per-client": 0, "data.holdout": "minority=0.2",
        "data.server-points": 150, "data.min-points-per-client": 1, "k": 10,
        "privacy.data-radius": "auto", "privacy.max-points-per-client": "auto",
        "privacy.clip-covariance": "auto", "privacy.clip-histogram": "auto",
        "privacy.clip-sums": "auto", "privacy.clip-counts": "auto",
    }},
    package="sklearn", holdout=Holdout({"minority": rate}),
    load_columns=load_columns, build=build,
))
