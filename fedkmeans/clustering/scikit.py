"""scikit-learn without the pandas it does not use.

``sklearn.utils.fixes`` (scikit-learn 1.9) imports pandas at module level when it is
installed, and every ``import sklearn.cluster`` goes through it; the name it binds is
used nowhere in scikit-learn (its helpers take pandas as an argument, and its data-frame
checks look pandas up in ``sys.modules`` when called). pandas and the pyarrow it loads
cost 0.25-0.5 s of a default run's start-up on the shared 2 cores, in a run that reads
no table. :func:`load_sklearn` imports scikit-learn once with ``import pandas`` failing,
then lets pandas be imported normally again (a data set that reads a file loads it).

:func:`thread_controller` is the server's ``threadpoolctl`` controller of the BLAS and
OpenMP runtimes scikit-learn and NumPy loaded: finding them walks every loaded library
(about 16 ms), so it is made once, after scikit-learn is loaded. (A node keeps its own,
:mod:`fedkmeans.blas_threads`: it must not load scikit-learn.)
"""

from __future__ import annotations

import sys

__all__ = ["load_sklearn", "thread_controller"]

_CONTROLLER: list = []  # the ThreadpoolController, made on first use


def load_sklearn() -> None:
    """Import scikit-learn's base modules without loading pandas (module docstring).

    Nothing to do when scikit-learn or pandas is already loaded.
    """
    if "sklearn" in sys.modules or "pandas" in sys.modules:
        return
    sys.modules["pandas"] = None  # ``import pandas`` raises ImportError meanwhile
    try:
        import sklearn.utils.fixes  # noqa: F401
    finally:
        del sys.modules["pandas"]


def thread_controller():
    """The server's ``threadpoolctl.ThreadpoolController``, made once after scikit-learn.

    A controller covers the runtimes loaded when it is made, so scikit-learn (its
    OpenMP) is loaded first (:func:`load_sklearn`).
    """
    if not _CONTROLLER:
        from threadpoolctl import ThreadpoolController

        load_sklearn()
        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0]
