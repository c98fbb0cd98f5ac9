"""python -m routesim.scheduler_modes [--no-run] [--results DIR] [--figures DIR] [--out FILE]
[--quiet]: the command line of the scheduler-modes study
(:mod:`routesim.studies.scheduler_modes`, whose ``__main__`` it runs): the replica
schedulers and vLLM's two loops compared, docs/scheduler-modes.md and figures/scheduler-modes.png."""

import sys

from .studies.scheduler_modes.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
