"""python -m routesim.disaggregation [--no-run] [--results DIR] [--figures DIR] [--out FILE]
[--quiet]: run the disaggregation study (sweeps/disaggregation-study.toml: 8 replicas
co-located and split 2:6, 4:4 and 6:2 under three pair-routing rules, on the chat mix,
the Azure code trace's lengths and the Mooncake excerpt; about 2 minutes on 2 cores),
then draw figures/disaggregation.png and write docs/disaggregation.md; with
``--no-run``, the figure and the document from the results folder alone."""

import argparse
import sys
import time
from pathlib import Path

from ...files import write_text
from . import FIGURES, OUT, RESULTS
from .design import WORKLOADS, run
from .document import document
from .figure import figure
from .measure import load


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m routesim.disaggregation",
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
    if set(data) != set(WORKLOADS):
        print(f"error: {args.results}: needs {', '.join(f'{w}.nc' for w in WORKLOADS)}; run python -m "
              "routesim.disaggregation without --no-run first", file=sys.stderr)
        return 2
    for p in figure(data, args.figures):
        log(f"wrote {p}")
    write_text(args.out, document(data))
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
