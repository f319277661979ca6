"""The server's thread controller of the BLAS and OpenMP runtimes.

:func:`thread_controller` is the server's ``threadpoolctl`` controller: finding the
runtimes walks every loaded library (about 16 ms), so a controller is made once for
the runtimes loaded now, and once more after scikit-learn (its OpenMP) has been loaded
by a k-means that uses it. (A node keeps its own, :mod:`fedkmeans.blas_threads`: it
must not load scikit-learn.)

scikit-learn is imported only where it runs (k-means beyond
:data:`fedkmeans.clustering.restarts.MAX_BATCHED_WORK`, the elbow, the optimal cost,
the baselines' k-means++): importing it loads pandas too (scikit-learn 1.9's
``sklearn.utils.fixes``), about 0.3 s on the shared 2 cores, so a run that needs
neither pays for neither (the default run: its isotonic fit is SciPy's, its mutual
information NumPy's).
"""

from __future__ import annotations

import sys
from functools import cache

__all__ = ["thread_controller"]


def thread_controller():
    """The server's ``threadpoolctl.ThreadpoolController`` of the runtimes loaded now.

    A controller covers the runtimes loaded when it is made: the one made before
    scikit-learn is loaded covers the BLAS libraries, the one made after it also its
    OpenMP. (An OpenMP limit applies to the calling thread only, as ``omp_set_num_threads``
    does; a BLAS limit to the process.)
    """
    return _controller("sklearn" in sys.modules)


@cache
def _controller(sklearn_loaded: bool):
    """One controller per state of scikit-learn (loaded or not): :func:`thread_controller`."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()
