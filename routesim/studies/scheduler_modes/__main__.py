"""python -m routesim.scheduler_modes [--no-run] [--results DIR] [--figures DIR] [--out FILE]
[--quiet]: run the scheduler-modes study (reserve, vllm_sync and vllm on the example cluster,
with a capacity search, and on the Mooncake excerpt; about 15 CPU minutes), then
draw figures/scheduler-modes.png and write docs/scheduler-modes.md; with ``--no-run``,
the figure and the document from the results folder alone."""

import sys

from .. import scheduler_modes as package
from ..commands import study_main
from .design import NEAR, SEARCH, run
from .document import document
from .figure import figure
from .measure import load


def main(argv=None) -> int:
    return study_main(argv, __doc__, package, ("example", "mooncake"), run, load,
                      lambda data, folder: figure(data, folder, SEARCH.resolution, NEAR), document)


if __name__ == "__main__":
    sys.exit(main())
