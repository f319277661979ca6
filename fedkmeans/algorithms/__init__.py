"""The algorithms: one :class:`Algorithm` object each, registered by name.

* :mod:`~fedkmeans.algorithms.base`: :class:`Algorithm` (stages, initialisation,
  capabilities, the run: init, T FedDP-Lloyds steps, the final private choice) and
  :func:`register_algorithm`;
* :mod:`~fedkmeans.algorithms.feddp_kmeans`, :mod:`~fedkmeans.algorithms.kfed`,
  :mod:`~fedkmeans.algorithms.server_baselines`: the built-in ones, each registering
  itself when imported.

Importing this package registers the built-in algorithms; the registry is
:data:`fedkmeans.plugins.ALGORITHMS` (it imports this package when first read).
"""

from fedkmeans.algorithms.base import Algorithm, algorithm, register_algorithm, release_plan

# the built-in ones; the order they register in is the report's plot order
from fedkmeans.algorithms import feddp_kmeans  # isort: skip
from fedkmeans.algorithms import server_baselines  # isort: skip
from fedkmeans.algorithms import kfed  # isort: skip

__all__ = ["Algorithm", "algorithm", "feddp_kmeans", "kfed", "register_algorithm",
           "release_plan", "server_baselines"]
