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

# Keys of the SecAgg+ round's FitIns config: written by the server
# (:class:`~fedkmeans.strategies.secagg.SecAggAggregator`), read by the ClientApp's
# train handler. Per-statistic keys take the statistic's name as suffix.
SECAGG_STAGE, SECAGG_ROUND, SECAGG_ARRAYS = "stage", "round", "arrays"
SECAGG_STATS, SECAGG_Q = "stats", "q-range"
SECAGG_SHARE, SECAGG_STEP = "share-std.", "step."


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



#: Suffix of a statistic sent as the upper triangles of a stack of symmetric matrices
#: (:func:`fedkmeans.clustering.client_stats.upper_triangle`).
TRIANGLE = ".triu"
