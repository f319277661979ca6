"""``python -m fedkmeans.experiment.deploy``: the deployment command line."""

import sys

from fedkmeans.experiment.deploy.cli import main

sys.exit(main())
