"""Translate between plain NumPy arrays and Flower message content.

A message carries one :class:`~flwr.app.ArrayRecord` (``"arrays"``) and one
:class:`~flwr.app.ConfigRecord` (``"config"``). Nothing else crosses the wire.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

ARRAYS = "arrays"
CONFIG = "config"


def pack(arrays: Mapping[str, np.ndarray], config: Mapping[str, Any] | None = None) -> RecordDict:
    """Build message content from named arrays and scalar settings."""
    record = ArrayRecord({name: Array(np.ascontiguousarray(a)) for name, a in arrays.items()})
    return RecordDict({ARRAYS: record, CONFIG: ConfigRecord(dict(config or {}))})


def unpack(content: RecordDict) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Return ``(arrays, config)`` from message content (missing parts are empty)."""
    arrays: dict[str, np.ndarray] = {}
    config: dict[str, Any] = {}
    if ARRAYS in content.array_records:
        arrays = {name: arr.numpy() for name, arr in content.array_records[ARRAYS].items()}
    if CONFIG in content.config_records:
        config = dict(content.config_records[CONFIG])
    return arrays, config


#: Suffix of a statistic sent as the upper triangles of a stack of symmetric matrices.
TRIANGLE = ".triu"


def pack_symmetric(stack: np.ndarray) -> np.ndarray:
    """Upper triangles (diagonal included) of symmetric matrices, row-major.

    Parameters
    ----------
    stack : ndarray of shape (m, d, d)
        Symmetric matrices (e.g. each client's ``sum_p p p^T``).

    Returns
    -------
    ndarray of shape (m, d (d + 1) / 2)
        Half the bytes of ``stack`` on the wire; :func:`unpack_symmetric` inverts it.
    """
    stack = np.asarray(stack)
    if stack.ndim != 3 or stack.shape[1] != stack.shape[2]:
        raise ValueError(f"stack must have shape (m, d, d), got {stack.shape}")
    rows, cols = np.triu_indices(stack.shape[1])
    return stack[:, rows, cols]


def unpack_symmetric(triangles: np.ndarray, dim: int) -> np.ndarray:
    """The symmetric matrices whose upper triangles :func:`pack_symmetric` sent.

    Parameters
    ----------
    triangles : ndarray of shape (m, dim (dim + 1) / 2)
    dim : int

    Returns
    -------
    ndarray of float64, shape (m, dim, dim)
    """
    triangles = np.asarray(triangles, dtype=np.float64)
    size = dim * (dim + 1) // 2
    if triangles.ndim != 2 or triangles.shape[1] != size:
        raise ValueError(f"triangles must have shape (m, {size}), got {triangles.shape}")
    rows, cols = np.triu_indices(dim)
    out = np.empty((triangles.shape[0], dim, dim))
    out[:, rows, cols] = triangles
    out[:, cols, rows] = triangles
    return out
