"""python -m routesim.least_outstanding [--resume] [--quiet] [--results-root DIR] ...: the
command line of the least-outstanding-routing study
(:mod:`routesim.studies.least_outstanding`, whose ``__main__`` it runs)."""

import sys

from .studies.least_outstanding.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
