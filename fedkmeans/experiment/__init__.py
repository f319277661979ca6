"""The experiment harness: this project's way of running the library.

The library (the protocol, its strategies, the estimator, the client side) never imports
this package; the harness embeds the protocol's settings in an experiment config and
adds what an experiment needs around them:

- :mod:`~fedkmeans.experiment.cli` -- the command line (``python -m fedkmeans.experiment``)
  and :func:`run`, Hydra composition and the one-line errors;
- :mod:`~fedkmeans.experiment.runner` -- one run's server side and its result files;
- :mod:`~fedkmeans.experiment.rundir` -- run directories;
- :mod:`~fedkmeans.experiment.engines` -- in-process and ``flwr run`` engines;
- :mod:`~fedkmeans.experiment.sweep` and :mod:`~fedkmeans.experiment.report` -- Hydra
  multiruns, their table and plots;
- :mod:`~fedkmeans.experiment.deploy` -- SuperLink/SuperNode deployments;
- :mod:`~fedkmeans.experiment.audit` -- the privacy audit command;
- :mod:`~fedkmeans.experiment.flower_logging` -- Flower's log records in a run.

From Python::

    from fedkmeans.experiment import run
    result = run(["privacy.epsilon=0.5", "seed=3"])
"""

from __future__ import annotations

from collections.abc import Sequence


def run(overrides: Sequence[str] = ()) -> dict:
    """Compose the Hydra config with ``overrides``, run it, return ``result.json``'s dict.

    See :func:`fedkmeans.experiment.cli.run`; importing this package alone loads none
    of Hydra (the ServerApp imports :mod:`~fedkmeans.experiment.runner` from here).
    """
    from fedkmeans.experiment.cli import run as run_experiment

    return run_experiment(overrides)
