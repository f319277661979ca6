"""BLAS threads of a node's work: one under Flower; in-process, all for block products.

Under Flower's runtime a node shares the machine's cores with other nodes (Ray actors,
SuperNodes): its products are per client and small (a 50 x 100 ``dsyrk``), a second
BLAS thread only spins, and on a busy machine makes them many times slower. So the
ClientApp limits BLAS to one thread while a node computes (:func:`one_blas_thread`).

The in-process Grid (:class:`~fedkmeans.local_grid.InProcessGrid`) runs one node at a
time in its own process (:func:`running_alone`): there a node's products of a block of
points against a set of centers (thousands of points at a time, the nearest-center
assignments) get back the BLAS threads the process had (:func:`block_product_threads`),
as the same product would outside a node. The per-client products keep one thread.
Threads change no nearest center (tested for the shapes of the nodes' block
products). On some CPUs (OpenBLAS's SkylakeX kernels) a product split over threads
differs in its last bits, so a value summed from distances (the final check's cost
differences) can differ in its last bits between the in-process engine and Flower's on
such a machine; on one engine and one machine a run is the same bits every time (the
release identity benchmark checks whole runs).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from functools import cache
from typing import NamedTuple

from threadpoolctl import ThreadpoolController

__all__ = ["block_product_threads", "one_blas_thread", "running_alone"]

#: True while the in-process Grid runs a node's request (no other node runs then).
_ALONE: ContextVar[bool] = ContextVar("fedkmeans_node_runs_alone", default=False)


class _ProcessBlas(NamedTuple):
    """The process's BLAS runtimes, found once: their controller and own thread count."""

    controller: ThreadpoolController
    #: The BLAS threads the process had before any limit of ours.
    threads: int


@cache
def _process_blas() -> _ProcessBlas:
    """Finds the libraries once per process, before any limit of ours."""
    controller = ThreadpoolController()
    threads = [lib.num_threads for lib in controller.select(user_api="blas").lib_controllers]
    return _ProcessBlas(controller, max(threads, default=1))


def _controller() -> ThreadpoolController:
    return _process_blas().controller


def one_blas_thread():
    """BLAS on one thread while a node computes (a context manager)."""
    return _controller().limit(limits=1, user_api="blas")


def block_product_threads():
    """The process's own BLAS threads for a block product of a node's work.

    Only when the node runs alone in the process (:func:`running_alone`); else
    nothing changes (a context manager either way).
    """
    if not _ALONE.get():
        return nullcontext()
    blas = _process_blas()
    return blas.controller.limit(limits=blas.threads, user_api="blas")


@contextmanager
def running_alone() -> Iterator[None]:
    """Mark the node's request run inside as the only work of this process."""
    token = _ALONE.set(True)
    try:
        yield
    finally:
        _ALONE.reset(token)
