"""Translate between plain NumPy arrays and Flower message content.

A message carries one :class:`~flwr.app.ArrayRecord` (``"arrays"``) and one
:class:`~flwr.app.ConfigRecord` (``"config"``). Nothing else crosses the wire.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict
from flwr.common.constant import SType

ARRAYS = "arrays"
CONFIG = "config"

# Keys of the SecAgg+ round's FitIns config: written by the server
# (:class:`~fedkmeans.server.secagg.SecAggAggregator`), read by the ClientApp's
# train handler. Per-statistic keys take the statistic's name as suffix.
SECAGG_STAGE, SECAGG_ROUND, SECAGG_ARRAYS = "stage", "round", "arrays"
SECAGG_STATS, SECAGG_Q = "stats", "q-range"
SECAGG_SHARE, SECAGG_STEP = "share-std.", "step."


def pack(arrays: Mapping[str, np.ndarray], config: Mapping[str, Any] | None = None) -> RecordDict:
    """Build message content from named arrays and scalar settings."""
    record = ArrayRecord({name: to_array(np.ascontiguousarray(a)) for name, a in arrays.items()})
    return RecordDict({ARRAYS: record, CONFIG: ConfigRecord(dict(config or {}))})


def unpack(
    content: RecordDict, *, copy: bool = True
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Return ``(arrays, config)`` from message content (missing parts are empty).

    ``copy=False``: the arrays are read-only views of the message's bytes (no copy;
    for the server's fold of replies it only reads, then drops).
    """
    arrays: dict[str, np.ndarray] = {}
    config: dict[str, Any] = {}
    if ARRAYS in content.array_records:
        arrays = {name: from_array(arr, copy=copy)
                  for name, arr in content.array_records[ARRAYS].items()}
    if CONFIG in content.config_records:
        config = dict(content.config_records[CONFIG])
    return arrays, config


def to_array(a: np.ndarray) -> Array:
    """``a`` as a Flower :class:`~flwr.app.Array`, the bytes ``Array(a)`` would hold.

    Flower serialises with ``np.save`` into a buffer and copies the buffer out (two
    copies of the data); this writes the same ``.npy`` header and joins the data to
    it in one copy. Object arrays are refused, as ``np.save(allow_pickle=False)`` does.
    """
    a = np.asarray(a)
    if not (a.flags.c_contiguous or a.flags.f_contiguous):
        a = np.ascontiguousarray(a)
    if a.dtype.hasobject:
        raise ValueError("object arrays cannot be sent (no pickling)")
    fields = np.lib.format.header_data_from_array_1_0(a)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, fields)
    flat = a.T.reshape(-1) if fields["fortran_order"] else a.reshape(-1)  # no copy
    data = b"".join([header.getvalue(), memoryview(flat.view(np.uint8))])
    return Array(dtype=str(a.dtype), shape=tuple(int(n) for n in a.shape),
                 stype=SType.NUMPY, data=data)


def from_array(arr: Array, *, copy: bool = True) -> np.ndarray:
    """The NumPy array of a Flower :class:`~flwr.app.Array` (as ``arr.numpy()``).

    Parses the ``.npy`` header and views the data in place: ``copy=False`` returns a
    read-only view of ``arr.data`` (no copy; ``np.load`` makes two), ``copy=True`` a
    writeable copy. Object dtypes are refused (never unpickled); a header or payload
    that does not match raises ``ValueError``.
    """
    if arr.stype != SType.NUMPY:
        raise ValueError(f"unsupported array serialisation {arr.stype!r}")
    stream = io.BytesIO(arr.data)  # shares the bytes, no copy
    version = np.lib.format.read_magic(stream)
    readers = {(1, 0): np.lib.format.read_array_header_1_0,
               (2, 0): np.lib.format.read_array_header_2_0}
    if version not in readers:
        raise ValueError(f"unsupported .npy format version {version}")
    shape, fortran_order, dtype = readers[version](stream)
    if dtype.hasobject:
        raise ValueError("object arrays are refused (no unpickling)")
    count = math.prod(shape)
    flat = np.frombuffer(arr.data, dtype=dtype, count=count, offset=stream.tell())
    out = flat.reshape(shape[::-1]).T if fortran_order else flat.reshape(shape)
    return out.copy() if copy else out


#: Suffix of a statistic sent as the upper triangles of a stack of symmetric matrices
#: (:func:`fedkmeans.clustering.client_stats.upper_triangle`).
TRIANGLE = ".triu"
