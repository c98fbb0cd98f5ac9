"""python -m routesim.disaggregation [--no-run] [--results DIR] [--figures DIR] [--out FILE]
[--quiet]: the command line of the disaggregation study
(:mod:`routesim.studies.disaggregation`, whose ``__main__`` it runs): prefill/decode
pools against co-location at an equal GPU count, docs/disaggregation.md and
figures/disaggregation.png."""

import sys

from .studies.disaggregation.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
