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
        """Drop the rows of ``clients`` (their points changed)."""
        for c in clients:
            where = self._where.pop(int(c), None)
            if where is not None:
                self._release(where[0])

    def clear(self) -> int:
        """Drop every row; returns the bytes freed."""
        freed = self.nbytes
        self._where.clear()
        self._blocks.clear()
        return freed

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks still holding a kept row."""
        return sum(block.nbytes for block, _ in self._blocks.values())

    def __len__(self) -> int:
        return len(self._where)

    def _release(self, number: int) -> None:
        entry = self._blocks[number]
        entry[1] -= 1
        if entry[1] == 0:
            del self._blocks[number]
