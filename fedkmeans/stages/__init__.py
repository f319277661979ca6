"""Protocol stages, one module per protocol, and their registry.

* :mod:`~fedkmeans.stages.spec`: :class:`Stage`, :class:`Statistic`,
  :class:`ReleaseRule`, :class:`Protocol`, the registry, the bounds table and the
  release plan;
* :mod:`~fedkmeans.stages.feddp_init`: FedDP-Init's three stages;
* :mod:`~fedkmeans.stages.lloyds`: the FedDP-Lloyds stage (sums and counts);
* :mod:`~fedkmeans.stages.kfed`: k-FED's one non-private stage;
* :mod:`~fedkmeans.stages.check`: the optional final private check of FedDP-KMeans.

Importing this package registers every stage and every algorithm's protocol.
"""

from fedkmeans.config import NON_PRIVATE_ALGORITHMS
from fedkmeans.stages import check, estimate, feddp_init, kfed, lloyds
from fedkmeans.stages.spec import (
    Protocol,
    ReleaseRule,
    Stage,
    Statistic,
    check_runs,
    protocol,
    register,
    register_protocol,
    release_plan,
    stage,
    stage_of_round,
    stages,
    statistic_bounds,
    subscribe,
)

for _algorithm, _init in (
    ("feddp-kmeans", (feddp_init.SUBSPACE, feddp_init.SERVER_WEIGHTS,
                      feddp_init.PROJECTED_CENTERS)),
    ("kfed", (kfed.LOCAL_CENTERS,)),
    ("server-kmeans++", ()), ("server-lloyds", ()), ("sphere-packing", ()),
    ("lloyds-nonprivate", ()),
):
    register_protocol(Protocol(_algorithm, _init,
                               private=_algorithm not in NON_PRIVATE_ALGORITHMS,
                               check=_algorithm == "feddp-kmeans"))

__all__ = [
    "Protocol", "ReleaseRule", "Stage", "Statistic", "check", "estimate", "feddp_init", "kfed",
    "lloyds",
    "check_runs", "protocol", "register", "register_protocol", "release_plan", "stage",
    "stage_of_round", "stages", "statistic_bounds", "subscribe",
]
