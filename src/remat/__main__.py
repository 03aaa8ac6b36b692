"""`python -m remat` == the `remat` console script (used by rules under `--sdm conda`)."""

import sys

from remat.cli import main

sys.exit(main())
