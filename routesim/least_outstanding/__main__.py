"""python -m routesim.least_outstanding: run every sweep of the study (chunked and
resumable like any sweep; --resume continues an interrupted run), then draw its figures
and write docs/least-outstanding-routing.md."""

import argparse
import sys

from .. import sweep as sweep_cli
from ..files import write_text
from . import OUT, RESULTS, SWEEPS, document, figures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m routesim.least_outstanding", description=__doc__)
    ap.add_argument("--resume", action="store_true", help="keep the chunks already computed")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    args = ap.parse_args(argv)
    for path in SWEEPS:
        rc = sweep_cli.main([path] + ["--quiet"] * args.quiet + ["--resume"] * args.resume)
        if rc:
            return rc
    for p in figures(RESULTS):
        if not args.quiet:
            print(f"wrote {p}")
    write_text(OUT, document(RESULTS))
    if not args.quiet:
        print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
