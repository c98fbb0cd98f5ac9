"""python -m routesim.scheduler_modes [--no-run] [--results DIR] [--figures DIR] [--out FILE]
[--quiet]: run the scheduler-modes study (reserve, vllm_sync and vllm on the example cluster,
with a capacity search, and on the Mooncake excerpt; about 15 CPU minutes), then
draw figures/scheduler-modes.png and write docs/scheduler-modes.md; with ``--no-run``,
the figure and the document from the results folder alone."""

import argparse
import sys
import time
from pathlib import Path

from ...files import write_text
from . import FIGURES, OUT, RESULTS
from .design import NEAR, SEARCH, run
from .document import document
from .figure import figure
from .measure import load


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m routesim.scheduler_modes",
                                 description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    ap.add_argument("--no-run", action="store_true", help="read the results folder; simulate nothing")
    ap.add_argument("--results", type=Path, default=RESULTS, metavar="DIR",
                    help=f"the study's results folder (default {RESULTS}/)")
    ap.add_argument("--figures", type=Path, default=FIGURES, metavar="DIR", help="folder for the figure (default figures/)")
    ap.add_argument("--out", type=Path, default=OUT, metavar="FILE", help=f"the document (default {OUT})")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress and no messages")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()

    def log(msg):
        if not args.quiet:
            print(f"[{time.perf_counter() - t0:5.0f} s] {msg}", flush=True)
    if not args.no_run:
        run(args.results, show_progress=not args.quiet, log=log)
    data = load(args.results)
    if set(data) != {"example", "mooncake"}:
        print(f"error: {args.results}: needs example.nc and mooncake.nc; run python -m routesim.scheduler_modes "
              "without --no-run first", file=sys.stderr)
        return 2
    for p in figure(data, args.figures, SEARCH.resolution, NEAR):
        log(f"wrote {p}")
    write_text(args.out, document(data))
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
