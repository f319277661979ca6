"""Tests for bring-your-own .npz data sets (fedkmeans.data.npz)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from fedkmeans.data.npz import NpzDataset, load_npz, save_npz


def _arrays() -> dict[str, np.ndarray]:
    x = np.arange(12, dtype=np.float64).reshape(6, 2)
    return {
        "x": x,
        "client": np.array([3, 1, 3, 7, 1, 3]),
        "y": np.array([0, 1, 0, 1, 1, 0]),
        "server_x": np.array([[0.5, 0.5], [1.5, 2.5], [9.0, 9.0]]),
        "server_y": np.array([0, 1, 1]),
    }


def _write_raw(path: Path, **arrays: np.ndarray) -> Path:
    """Write an .npz without validation (to test load_npz's checks)."""
    with path.open("wb") as fh:
        np.savez(fh, **arrays)
    return path


def test_round_trip(tmp_path: Path) -> None:
    a = _arrays()
    path = save_npz(tmp_path / "data.npz", **a)
    assert path == tmp_path / "data.npz" and path.is_file()
    ds = load_npz(path)
    assert isinstance(ds, NpzDataset)
    assert ds.x.dtype == np.float64 and ds.client.dtype == np.int64
    assert np.array_equal(ds.x, a["x"])
    assert np.array_equal(ds.client, a["client"])
    assert np.array_equal(ds.y, a["y"])
    assert np.array_equal(ds.server_x, a["server_x"])
    assert np.array_equal(ds.server_y, a["server_y"])


def test_round_trip_without_labels_and_str_path(tmp_path: Path) -> None:
    a = _arrays()
    path = str(tmp_path / "nolabels.bin")
    save_npz(path, x=a["x"], client=a["client"], server_x=a["server_x"])
    assert Path(path).is_file()  # no ".npz" suffix appended
    ds = load_npz(path)
    assert ds.y is None and ds.server_y is None
    x1, y1 = ds.client_data(1)
    assert y1 is None
    assert np.array_equal(x1, a["x"][[1, 4]])


def test_client_ids_and_client_data(tmp_path: Path) -> None:
    ds = load_npz(save_npz(tmp_path / "d.npz", **_arrays()))
    assert np.array_equal(ds.client_ids(), [1, 3, 7])
    x3, y3 = ds.client_data(3)
    assert np.array_equal(x3, [[0, 1], [4, 5], [10, 11]])
    assert np.array_equal(y3, [0, 0, 0])
    x7, y7 = ds.client_data(7)
    assert np.array_equal(x7, [[6, 7]]) and np.array_equal(y7, [1])
    with pytest.raises(ValueError, match="client_id"):
        ds.client_data(2)


def test_dataset_is_frozen_and_read_only(tmp_path: Path) -> None:
    ds = load_npz(save_npz(tmp_path / "d.npz", **_arrays()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ds.x = np.zeros((1, 2))  # type: ignore[misc]
    with pytest.raises(ValueError):
        ds.x[0, 0] = 1.0


def test_missing_file_names_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.npz"
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        load_npz(missing)


def test_not_an_npz(tmp_path: Path) -> None:
    text = tmp_path / "text.npz"
    text.write_text("hello, not a zip archive\n")
    with pytest.raises(ValueError, match="not an .npz"):
        load_npz(text)
    npy = tmp_path / "single.npy"
    np.save(npy, np.zeros((3, 2)))
    with pytest.raises(ValueError, match="not an .npz"):
        load_npz(npy)


def test_object_array_rejected(tmp_path: Path) -> None:
    a = _arrays()
    a["y"] = np.array([{"a": 1}] * 6, dtype=object)
    path = _write_raw(tmp_path / "obj.npz", **a)
    with pytest.raises(ValueError, match="'y'"):
        load_npz(path)


@pytest.mark.parametrize("key", ["x", "client", "server_x"])
def test_missing_key(tmp_path: Path, key: str) -> None:
    a = _arrays()
    del a[key]
    path = _write_raw(tmp_path / "m.npz", **a)
    with pytest.raises(ValueError, match=f"missing key '{key}'"):
        load_npz(path)


def test_unknown_key(tmp_path: Path) -> None:
    path = _write_raw(tmp_path / "u.npz", **_arrays(), X=np.zeros(2))
    with pytest.raises(ValueError, match="unknown key.*'X'.*allowed"):
        load_npz(path)


def test_x_not_2d(tmp_path: Path) -> None:
    a = _arrays()
    a["x"] = np.zeros(6)
    with pytest.raises(ValueError, match="x must be 2-D"):
        load_npz(_write_raw(tmp_path / "a.npz", **a))


def test_server_x_not_2d(tmp_path: Path) -> None:
    a = _arrays()
    a["server_x"] = np.zeros((2, 2, 1))
    with pytest.raises(ValueError, match="server_x must be 2-D"):
        load_npz(_write_raw(tmp_path / "a.npz", **a))


def test_client_length_mismatch(tmp_path: Path) -> None:
    a = _arrays()
    a["client"] = a["client"][:4]
    with pytest.raises(ValueError, match="client has 4 entries but x has 6 rows"):
        load_npz(_write_raw(tmp_path / "a.npz", **a))


def test_client_not_integer(tmp_path: Path) -> None:
    a = _arrays()
    a["client"] = a["client"].astype(np.float64)
    with pytest.raises(ValueError, match="client must be an integer array"):
        load_npz(_write_raw(tmp_path / "a.npz", **a))


def test_dimension_mismatch(tmp_path: Path) -> None:
    a = _arrays()
    a["server_x"] = np.zeros((3, 5))
    with pytest.raises(ValueError, match="server_x has 5 columns but x has 2"):
        load_npz(_write_raw(tmp_path / "a.npz", **a))


@pytest.mark.parametrize("field", ["x", "server_x"])
def test_non_finite_values_counted_not_printed(tmp_path: Path, field: str) -> None:
    a = _arrays()
    a[field] = a[field].copy()
    a[field][0, 0] = np.nan
    a[field][1, 1] = np.inf
    a[field][2, 0] = 123456.789  # a finite value that must not leak
    with pytest.raises(ValueError, match=f"^{field} contains 2 non-finite") as info:
        load_npz(_write_raw(tmp_path / "a.npz", **a))
    assert "123456" not in str(info.value)


def test_y_length_mismatch(tmp_path: Path) -> None:
    a = _arrays()
    a["y"] = a["y"][:5]
    with pytest.raises(ValueError, match="y has 5 entries but x has 6 rows"):
        load_npz(_write_raw(tmp_path / "a.npz", **a))


def test_server_y_length_mismatch(tmp_path: Path) -> None:
    a = _arrays()
    a["server_y"] = np.array([0, 1])
    with pytest.raises(ValueError, match="server_y has 2 entries but server_x has 3 rows"):
        load_npz(_write_raw(tmp_path / "a.npz", **a))


def test_save_validates(tmp_path: Path) -> None:
    a = _arrays()
    a["server_x"] = np.zeros((3, 4))
    path = tmp_path / "bad.npz"
    with pytest.raises(ValueError, match="server_x"):
        save_npz(path, **a)
    assert not path.exists()


def test_a_file_replaced_at_the_same_path_is_read_again(tmp_path: Path) -> None:
    """The process-wide cache must not serve the old data after the file changes."""
    import os

    from fedkmeans import data as data_access

    a = _arrays()
    path = save_npz(tmp_path / "data.npz", **a)
    assert np.array_equal(data_access._npz(str(path)).server_x, a["server_x"])
    replaced = {**a, "server_x": a["server_x"] + 100.0}
    save_npz(path, **replaced)
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # coarse clocks
    assert np.array_equal(data_access._npz(str(path)).server_x, replaced["server_x"])
