"""A spilled node's shard: the files a node's points and clip record are written to.

A shard is a directory the run's processes share (the flower engine's), written once
and atomically by :func:`write_shard`, owner-only: ``points.npy`` (the stacked points,
client after client), ``labels.npy`` (if any), ``offsets.npy`` (each client's first
row), ``norms.npy`` (every point's norm, for points as built, before the radius was
known), ``meta.npz`` (the client ids, the clip record: clipped clients, their norms
before the clip, the radius) and ``done`` (last: the shard is whole).
:class:`~fedkmeans.node.NodeData` spills to it (its points and clip record) and
:class:`~fedkmeans.node.memory.NodeMemory` maps it again (:func:`read_meta`).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedkmeans.spill_files import private_dir, private_file

if TYPE_CHECKING:
    from fedkmeans.node import NodeData

__all__ = ["LABELS", "NORMS", "POINTS", "ShardMeta", "read_meta", "shard_ready",
           "write_shard"]

#: The arrays a spilled node maps again, in a shard or in nameless files
#: (:meth:`~fedkmeans.node.memory.NodeMemory.mapped`). ``norms.npy``: every point's
#: norm, for a file of points as built.
POINTS, LABELS, NORMS = "points.npy", "labels.npy", "norms.npy"
_OFFSETS, _META, _DONE = "offsets.npy", "meta.npz", "done"


def write_shard(path: Path, node: NodeData) -> None:
    """Write ``node``'s stacked points, labels and clip record to ``path``, atomically.

    Written to a fresh sibling directory, then renamed: a reader sees a whole shard or
    none. When another process wrote the same shard first, its copy is kept. Every
    directory is made 0700 and every file 0600 as it is created (raw client points).
    """
    private_dir(path.parent, exist_ok=True)
    tmp = private_dir(path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"))

    def save(name: str, array: np.ndarray) -> None:
        with private_file(tmp / name) as f:
            np.save(f, array)

    save(POINTS, node.memory.stacked)
    if node.memory.labels_stacked is not None:
        save(LABELS, node.memory.labels_stacked)
    save(_OFFSETS, node.memory.offsets)
    if node.radius is None:  # points as built: their norms, for the clip when mapped
        save(NORMS, node._raw_point_norms())
    clipped = np.array(sorted(node.clipped_clients), dtype=np.int64)
    norms = [node.raw_norms.get(c, np.zeros(0)) for c in clipped.tolist()]
    with private_file(tmp / _META) as f:
        np.savez(f, client_ids=np.asarray(node.memory.order, dtype=np.int64),
                 clipped=clipped,
                 norm_offsets=np.concatenate([[0], np.cumsum([n.size for n in norms])]).astype(
                     np.int64),
                 norms=np.concatenate([np.zeros(0), *norms]),
                 has_labels=np.array(node.memory.labels_stacked is not None),
                 radius=np.array(np.nan if node.radius is None else node.radius))
    private_file(tmp / _DONE).close()
    try:
        tmp.rename(path)
    except OSError:  # another process's shard is there already: keep it
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()


def shard_ready(path: str | os.PathLike) -> bool:
    """True when a whole shard is at ``path`` (:func:`write_shard`)."""
    return (Path(path) / _DONE).exists()


@dataclass(frozen=True)
class ShardMeta:
    """What a shard records besides the points: ids, offsets and the clip record."""

    client_ids: np.ndarray
    offsets: np.ndarray
    clipped: frozenset
    raw_norms: dict
    has_labels: bool
    radius: float | None


def read_meta(path: Path) -> ShardMeta:
    """The ids, offsets and clip record of the shard at ``path`` (:func:`write_shard`)."""
    with np.load(path / _META) as meta:
        ids = meta["client_ids"]
        clipped = meta["clipped"]
        norm_offsets = meta["norm_offsets"]
        norms = meta["norms"]
        has_labels = bool(meta["has_labels"])
        radius = float(meta["radius"])
    raw = {int(c): norms[norm_offsets[i]:norm_offsets[i + 1]]
           for i, c in enumerate(clipped.tolist())}
    return ShardMeta(ids, np.load(path / _OFFSETS), frozenset(clipped.tolist()), raw,
                     has_labels, None if np.isnan(radius) else radius)
