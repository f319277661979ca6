"""Rows a node computed in one round and a later round may take instead of computing again.

At client level the estimate round and FedDP-Init's step 1 both need every client's
``X^T X``: the first for its Frobenius norm (a bin of the released histogram,
:mod:`fedkmeans.stages.estimate`), the second as the statistic itself, on the points
clipped to the data radius, which the server resolves in between. The estimate round
computes and keeps it only for a client with at least as many points as dimensions;
a smaller client's norm comes from its cheaper ``n x n`` Gram matrix, and step 1
computes its ``X^T X`` once. A client none of
whose points the clip moves has the same points, so the same ``X^T X`` to the last bit
(the same product on the same array); a client with a clipped point has other points
and its matrix is computed again (``X'^T X' = X^T X - sum (1 - s_p^2) p p^T`` would
be the same matrix, not the same bits, and the statistics sent must not change).

Likewise FedDP-Init's steps 2 and 3 both project the asked clients' points on the basis
step 1 released: step 2 keeps its projection, and step 3, asked for the same clients
with the same basis, takes it instead of projecting again.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class ReusableRows:
    """Per-client rows one round computed that a later round takes, once, if still valid.

    The estimate round computes the ``X^T X`` of every client with ``n >= d`` at client
    level (for the Frobenius norm it releases a bin of); step 1 needs the same matrix of
    the points clipped to the data radius, which is resolved in between. The rows are
    kept here, in the blocks they were computed in (one per message, shape (m, width));
    the clip :meth:`forget` s the clients it changed, step 1 :meth:`take` s the others'
    rows, and a block is freed when its last row is taken or forgotten. Their bytes
    count in the node's memory bound (:attr:`NodeMemory.nbytes`), and the ClientApp
    drops them (:meth:`clear`) before it spills any points: a dropped row is computed
    again.
    """

    def __init__(self) -> None:
        #: client id -> (block number, row)
        self._where: dict[int, tuple[int, int]] = {}
        #: block number -> [block, rows still kept]
        self._blocks: dict[int, list] = {}
        self._count = 0
        #: asked clients -> (the basis as bytes, their points projected on it)
        self._projections: dict[tuple[int, ...], tuple[bytes, np.ndarray]] = {}

    def keep(self, clients: Sequence[int], block: np.ndarray) -> None:
        """Keep row ``i`` of ``block`` (shape (m, width)) for ``clients[i]``."""
        self.forget(clients)
        if not len(clients):
            return
        self._count += 1
        self._blocks[self._count] = [block, len(clients)]
        self._where.update({int(c): (self._count, i) for i, c in enumerate(clients)})

    def take(self, client: int, out: np.ndarray) -> bool:
        """Copy the kept row of ``client`` into ``out`` (then no longer kept); False: none."""
        where = self._where.pop(int(client), None)
        if where is None:
            return False
        out[...] = self._blocks[where[0]][0][where[1]]
        self._release(where[0])
        return True

    def forget(self, clients) -> None:
        """Drop the rows of ``clients`` (their points changed), and every projection."""
        for c in clients:
            where = self._where.pop(int(c), None)
            if where is not None:
                self._release(where[0])
        self._projections.clear()

    def keep_projection(self, clients: Sequence[int], basis: np.ndarray,
                        projected: np.ndarray) -> None:
        """Keep ``projected`` (n, k), the asked ``clients``' points times ``basis.T``.

        FedDP-Init's step 2 projects the points on the basis step 1 released; step 3
        asks the same clients with the same basis and projects them again. Kept in
        between, the projection is the same array, so the same bits.
        """
        self._projections[_key(clients)] = (_basis_bytes(basis), projected)

    def take_projection(self, clients: Sequence[int], basis: np.ndarray) -> np.ndarray | None:
        """The projection kept for exactly ``clients`` and ``basis`` (then no longer kept)."""
        kept = self._projections.pop(_key(clients), None)
        if kept is None or kept[0] != _basis_bytes(basis):
            return None
        return kept[1]

    def clear(self) -> int:
        """Drop every row and projection; returns the bytes freed."""
        freed = self.nbytes
        self._where.clear()
        self._blocks.clear()
        self._projections.clear()
        return freed

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks still holding a kept row, and of the kept projections."""
        return (sum(block.nbytes for block, _ in self._blocks.values())
                + sum(projected.nbytes for _, projected in self._projections.values()))

    def __len__(self) -> int:
        """Rows and projections kept."""
        return len(self._where) + len(self._projections)

    def _release(self, number: int) -> None:
        entry = self._blocks[number]
        entry[1] -= 1
        if entry[1] == 0:
            del self._blocks[number]


def _key(clients: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(c) for c in clients)


def _basis_bytes(basis: np.ndarray) -> bytes:
    """The basis exactly: shape, type and every bit."""
    basis = np.asarray(basis)
    return repr((basis.shape, basis.dtype.str)).encode() + basis.tobytes()
