"""A measured in-process run as a fresh process would make it, for the benchmark scripts.

Imported by the scripts as a sibling module (``python benchmarks/<script>.py`` puts
this folder on ``sys.path``).
"""

from __future__ import annotations


def cold_caches() -> None:
    """Forget the calibrations the runs before made in this process.

    A benchmark that runs its configurations one after the other in one process would
    otherwise time a run's tuning and calibration with the memoised calibrations of the
    runs before it (pure functions of a plan: the same plan again costs nearly
    nothing); a measured run starts without them, as a fresh process does.
    """
    from fedkmeans.tuning.search import forget_calibrations

    forget_calibrations()
