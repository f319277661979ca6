"""Translate between plain NumPy arrays and Flower message content.

A message carries one :class:`~flwr.app.ArrayRecord` (``"arrays"``) and one
:class:`~flwr.app.ConfigRecord` (``"config"``). Nothing else crosses the wire.
"""

from __future__ import annotations

import io
import math
import struct
from collections.abc import Mapping
from functools import lru_cache
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
    fortran_order = not a.flags.c_contiguous  # as np.save decides it
    header, dtype = _npy_header(a.dtype, fortran_order, a.shape)
    flat = a.T.reshape(-1) if fortran_order else a.reshape(-1)  # no copy
    data = b"".join([header, memoryview(flat.view(np.uint8))])
    return Array(dtype=dtype, shape=tuple(int(n) for n in a.shape),
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
    shape, fortran_order, dtype, offset = _read_npy_header(_header_bytes(arr.data))
    if dtype.hasobject:
        raise ValueError("object arrays are refused (no unpickling)")
    count = math.prod(shape)
    flat = np.frombuffer(arr.data, dtype=dtype, count=count, offset=offset)
    out = flat.reshape(shape[::-1]).T if fortran_order else flat.reshape(shape)
    return out.copy() if copy else out


#: By ``.npy`` format version: the bytes before the header's text (the magic string,
#: the version and the text's length: little-endian uint16 in 1.0, uint32 in 2.0) and
#: NumPy's reader of the header.
_VERSIONS = {(1, 0): (10, "<H", np.lib.format.read_array_header_1_0),
             (2, 0): (12, "<I", np.lib.format.read_array_header_2_0)}


@lru_cache(maxsize=256)
def _npy_header(dtype: np.dtype, fortran_order: bool, shape: tuple) -> tuple[bytes, str]:
    """The ``.npy`` 1.0 header of an array and its dtype's name, once per dtype and shape.

    NumPy's own writer, with the fields ``np.lib.format.header_data_from_array_1_0``
    gives; it formats them from a dict's ``repr`` on every call (13 us an array), and
    a round sends arrays of a few shapes, one message per node.
    """
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {
        "descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": fortran_order,
        "shape": shape})
    return header.getvalue(), str(dtype)


def _header_bytes(data: bytes) -> bytes:
    """The ``.npy`` prefix and header text at the start of ``data`` (not parsed).

    Raises ValueError for another magic string or version, or a short buffer.
    """
    magic = np.lib.format.MAGIC_PREFIX
    if len(data) < 10 or data[:len(magic)] != magic:
        raise ValueError("not a .npy payload (magic string missing)")
    version = (data[6], data[7])
    if version not in _VERSIONS:
        raise ValueError(f"unsupported .npy format version {version}")
    start, length, _ = _VERSIONS[version]
    if len(data) < start:
        raise ValueError("truncated .npy header")
    (size,) = struct.unpack(length, data[8:start])
    if len(data) < start + size:
        raise ValueError("truncated .npy header")
    return bytes(data[:start + size])


@lru_cache(maxsize=256)
def _read_npy_header(header: bytes) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """``(shape, fortran_order, dtype, data offset)`` of a ``.npy`` header.

    NumPy's own readers (their checks included), once per distinct header: they parse
    its text with ``ast.literal_eval`` (17 us an array), and a round's replies repeat a
    few headers.
    """
    stream = io.BytesIO(header)
    version = np.lib.format.read_magic(stream)
    shape, fortran_order, dtype = _VERSIONS[version][2](stream)
    return shape, fortran_order, dtype, stream.tell()


#: Suffix of a statistic sent as the upper triangles of a stack of symmetric matrices
#: (:func:`fedkmeans.clustering.client_stats.upper_triangle`).
TRIANGLE = ".triu"
