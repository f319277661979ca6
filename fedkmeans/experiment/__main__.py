"""``python -m fedkmeans.experiment``: one experiment or a Hydra sweep."""

from fedkmeans.experiment.cli import cli

cli()
