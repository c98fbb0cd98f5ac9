"""python -m routesim.validation [--out docs/validation.md] [--quick] [--check NAME ...]: the
command line of the simulator's validation against queueing theory
(:mod:`routesim.studies.validation.checks`, whose ``main`` it runs)."""

import sys

from .studies.validation.checks import main

if __name__ == "__main__":
    sys.exit(main())
