"""``python -m fedkmeans.deploy``: the deployment command line."""

import sys

from fedkmeans.deploy.cli import main

sys.exit(main())
