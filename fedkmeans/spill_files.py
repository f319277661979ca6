"""Where a spilled node's arrays live (:meth:`fedkmeans.node.NodeData.spill`).

A node's points are raw client data, unclipped when they were spilled before the data
radius was resolved. So every spilled file is owner-only, and none outlives its run:

* :class:`NamelessFiles`: a process's own spill (the in-process engine, or any Flower
  actor without a shared directory, e.g. plain ``flwr run``). Each array goes to a
  file that has no name (``tempfile.TemporaryFile``: ``O_TMPFILE`` on Linux, else a
  file unlinked as soon as it is made), mode 0600, kept open and mapped per request.
  The kernel frees it when the process drops it or ends, SIGKILL included: there is
  nothing to sweep and nothing another process can open by path.
* :class:`ShardFiles`: a shard directory the actors of one run share (the flower
  engine's ``FEDKMEANS_NODE_SHARDS``): another actor opens it by path, so it must have
  a name. :func:`private_file` and :func:`private_dir` create its parts 0600 and 0700;
  the engine that made the directory removes it (also after SIGKILL, by its watchdog).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO

import numpy as np

#: Mode of every spilled file and of the directories holding them.
FILE_MODE, DIR_MODE = 0o600, 0o700


def private_file(path: str | os.PathLike) -> IO[bytes]:
    """A new file at ``path`` opened for writing, owner-only (0600) from its creation."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    return os.fdopen(fd, "wb")


def write_owner_only(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` owner-only (0600), replacing it atomically.

    For every file of a run that is not publishable (``result.json``,
    ``diagnostics.json``, the checkpoint's state, the curious server's report): the
    bytes go to a new 0600 file beside ``path``, which then replaces it, so no reader
    ever sees them with wider permissions, whatever the umask or an older file's mode.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    raw = data.encode() if isinstance(data, str) else data
    try:
        with private_file(tmp) as handle:
            handle.write(raw)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def owner_only(path: str | os.PathLike) -> Path:
    """Set an existing file (written by a library that takes no mode) to 0600."""
    os.chmod(path, FILE_MODE)
    return Path(path)


def private_dir(path: str | os.PathLike, *, exist_ok: bool = False) -> Path:
    """Make ``path`` (and missing parents) owner-only (0700); return it."""
    path = Path(path)
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=exist_ok)
    return path


class ShardFiles:
    """The arrays of a shard directory, one ``.npy`` file per array (by path)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def has(self, name: str) -> bool:
        """True when the shard holds the array ``name``."""
        return (self.path / name).exists()

    def array(self, name: str, mode: str) -> np.ndarray:
        """The array ``name`` mapped with ``mode`` (``"r"``, or ``"c"``: copy-on-write)."""
        return np.load(self.path / name, mmap_mode=mode)


class NamelessFiles:
    """Arrays written to files without a name, open in this process only.

    Parameters
    ----------
    arrays : dict of str to ndarray
        Each array by name; written once, raw (C order), each to its own file.
    """

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self._files: dict[str, tuple[IO[bytes], np.dtype, tuple[int, ...]]] = {}
        for name, array in arrays.items():
            array = np.ascontiguousarray(array)
            handle = tempfile.TemporaryFile(prefix="fedkmeans-node-")
            array.tofile(handle)
            handle.flush()
            self._files[name] = (handle, array.dtype, array.shape)

    def has(self, name: str) -> bool:
        """True when the array ``name`` was written."""
        return name in self._files

    def array(self, name: str, mode: str) -> np.ndarray:
        """The array ``name`` mapped with ``mode`` (``"r"``, or ``"c"``: copy-on-write)."""
        handle, dtype, shape = self._files[name]
        if 0 in shape:  # an empty file cannot be mapped
            return np.zeros(shape, dtype)
        return np.memmap(handle, dtype=dtype, mode=mode, shape=shape)

    @property
    def nbytes(self) -> int:
        """Bytes these files hold."""
        return sum(int(np.prod(shape)) * dtype.itemsize
                   for _, dtype, shape in self._files.values())

    def close(self) -> None:
        """Close the files (a mapping still in use keeps its pages until dropped)."""
        for handle, _, _ in self._files.values():
            handle.close()
        self._files.clear()
