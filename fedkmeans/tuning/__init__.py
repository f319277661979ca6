"""Settings chosen from public information only: the server's data and declared facts.

* :mod:`~fedkmeans.tuning.federation`: federations resampled from the server's data;
* :mod:`~fedkmeans.tuning.simulation`: the real protocol (algorithms, mechanisms,
  accountant) run on them;
* :mod:`~fedkmeans.tuning.resolve`: picks every other ``auto`` setting with the
  simulation, before the private rounds, and records what it chose and why.
* :mod:`~fedkmeans.tuning.plan`: the run's release plan (the estimate round's release,
  the resolution, the calibration of the rest composed with it), shared by the runner
  and the release audit.

The ``auto`` thresholds, set at run time relative to each release's noise scale,
are the server's (:mod:`fedkmeans.server.thresholds`). Nothing here reads a client's
data, so the choices cost no privacy budget.
"""
