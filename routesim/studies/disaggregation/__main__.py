"""python -m routesim.disaggregation [--no-run] [--results DIR] [--figures DIR] [--out FILE]
[--quiet]: run the disaggregation study (sweeps/disaggregation-study.toml: 8 replicas
co-located and split 2:6, 4:4 and 6:2 under three pair-routing rules, on the chat mix,
the Azure code trace's lengths and the Mooncake excerpt; about 2 minutes on 2 cores),
then draw figures/disaggregation.png and write docs/disaggregation.md; with
``--no-run``, the figure and the document from the results folder alone."""

import sys

from .. import disaggregation as package
from ..commands import study_main
from .design import WORKLOADS, run
from .document import document
from .figure import figure
from .measure import load


def main(argv=None) -> int:
    return study_main(argv, __doc__, package, WORKLOADS, run, load,
                      figure, document)


if __name__ == "__main__":
    sys.exit(main())
