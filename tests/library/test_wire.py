"""Message content: the one-copy pack and zero-copy unpack match Flower's own format."""

import io

import numpy as np
import pytest
from flwr.app import Array, RecordDict

from fedkmeans.wire import from_array, pack, to_array, unpack

ARRAYS = [
    np.array(3.0), np.zeros((0, 3)), np.arange(6).reshape(2, 3), np.array([True, False]),
    np.arange(12, dtype=np.float32).reshape(3, 4), np.asfortranarray(np.eye(3) + 0.5),
    np.linspace(-1, 1, 5050 * 3).reshape(3, 5050), np.zeros(3, dtype=">f4"),
    np.zeros((2, 3), dtype=[("a", "<f8"), ("b", "<i4")]), np.arange(12.0).reshape(3, 4).T,
]


@pytest.mark.parametrize("a", ARRAYS, ids=lambda a: f"{a.dtype}{a.shape}")
def test_to_array_writes_the_bytes_flower_writes(a):
    ours, flowers = to_array(a), Array(a)
    assert (ours.dtype, ours.shape, ours.stype) == (flowers.dtype, flowers.shape, flowers.stype)
    assert ours.data == flowers.data


@pytest.mark.parametrize("a", ARRAYS, ids=lambda a: f"{a.dtype}{a.shape}")
def test_from_array_reads_what_flower_reads(a):
    flowers = Array(a)
    for copy in (True, False):
        out = from_array(flowers, copy=copy)
        assert out.dtype == a.dtype and out.shape == a.shape
        np.testing.assert_array_equal(out, flowers.numpy())
        assert out.flags.writeable is copy


def test_an_uncopied_array_is_a_view_of_the_message_bytes():
    a = np.arange(10.0)
    flowers = Array(a)
    view = from_array(flowers, copy=False)
    assert np.shares_memory(view, np.frombuffer(flowers.data, dtype=np.uint8))
    with pytest.raises(ValueError, match="read-only"):
        view[0] = 1.0


def test_a_fortran_order_payload_is_read_in_its_order():
    a = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, a)
    array = Array(dtype="float64", shape=(3, 4), stype="numpy.ndarray", data=buffer.getvalue())
    np.testing.assert_array_equal(from_array(array, copy=False), a)


def test_object_arrays_and_bad_payloads_are_refused():
    with pytest.raises(ValueError, match="object"):
        to_array(np.array([{"a": 1}], dtype=object))
    good = Array(np.arange(4.0)).data
    truncated = Array(dtype="float64", shape=(4,), stype="numpy.ndarray", data=good[:-8])
    with pytest.raises(ValueError):
        from_array(truncated)
    with pytest.raises(ValueError):
        from_array(Array(dtype="float64", shape=(4,), stype="numpy.ndarray", data=b"junk"))


def test_pack_and_unpack_round_trip_through_a_message():
    content = pack({"x": np.arange(6.0).reshape(2, 3), "ids": np.array([4, 7])}, {"k": 3})
    arrays, config = unpack(content, copy=False)
    np.testing.assert_array_equal(arrays["x"], [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(arrays["ids"], [4, 7])
    assert config == {"k": 3}
    assert unpack(RecordDict()) == ({}, {})


def test_a_version_2_header_is_read_and_a_short_or_object_header_refused():
    a = np.arange(6.0).reshape(2, 3)
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, a, version=(2, 0))
    v2 = Array(dtype="float64", shape=(2, 3), stype="numpy.ndarray", data=buffer.getvalue())
    np.testing.assert_array_equal(from_array(v2), a)
    head = Array(a).data[:20]  # the header's length says more than is there
    with pytest.raises(ValueError, match="truncated"):
        from_array(Array(dtype="float64", shape=(2, 3), stype="numpy.ndarray", data=head))
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": "|O", "fortran_order": False, "shape": (1,)})
    pickled = Array(dtype="object", shape=(1,), stype="numpy.ndarray",
                    data=buffer.getvalue() + bytes(8))
    with pytest.raises(ValueError, match="object"):
        from_array(pickled)
