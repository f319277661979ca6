"""Protocol stages, one module per protocol, and their registry.

* :mod:`~fedkmeans.stages.spec`: :class:`Stage`, :class:`Statistic`,
  :class:`ReleaseRule`, the registry and the bounds table;
* :mod:`~fedkmeans.stages.feddp_init`: FedDP-Init's three stages;
* :mod:`~fedkmeans.stages.lloyds`: the FedDP-Lloyds stage (sums and counts);
* :mod:`~fedkmeans.stages.kfed`: k-FED's one non-private stage;
* :mod:`~fedkmeans.stages.check`: the final private choice of FedDP-KMeans;
* :mod:`~fedkmeans.stages.estimate`: the estimate round.

Importing this package registers every stage. Which stages an algorithm runs is the
algorithm's (:class:`fedkmeans.algorithms.Algorithm`).
"""

from fedkmeans.stages import check, estimate, feddp_init, kfed, lloyds
from fedkmeans.stages.spec import (
    ReleaseRule,
    Stage,
    Statistic,
    check_runs,
    register,
    stage,
    stage_of_round,
    stages,
    statistic_bounds,
    subscribe,
)

__all__ = [
    "ReleaseRule", "Stage", "Statistic", "check", "check_runs", "estimate", "feddp_init",
    "kfed", "lloyds", "register", "stage", "stage_of_round", "stages", "statistic_bounds",
    "subscribe",
]
