"""python -m routesim.least_outstanding [--resume] [--quiet] [--results-root DIR]
[--figures DIR] [--out FILE] [--chunk-size N] [--scheduler ADDRESS | --workers N]: run
the capacity search, then every sweep of the least-outstanding-routing study (chunked, resumable and runnable on a
Dask cluster like any sweep), then draw its figures and write its document and the
document's appendix (by default results/<sweep name>/, figures/,
docs/least-outstanding-routing.md and docs/least-outstanding-routing-appendix.md)."""

import argparse
import sys
from pathlib import Path

from ... import sweep as sweep_cli
from ...config import ConfigError, load_sweep
from . import CLAIMS, OUT, RESULTS, SWEEPS, appendix_path, figures, write


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m routesim.least_outstanding",
                                 description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    ap.add_argument("--resume", action="store_true", help="keep the chunks already computed")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress bars or tables")
    ap.add_argument("--results-root", type=Path, default=RESULTS.parent, metavar="DIR",
                    help="folder of every sweep's results folder (default results/)")
    ap.add_argument("--figures", type=Path, default=Path("figures"), metavar="DIR",
                    help="folder for the figures (default figures/)")
    ap.add_argument("--out", type=Path, default=OUT, metavar="FILE", help=f"the document (default {OUT}; its appendix beside it, {appendix_path(OUT).name})")
    ap.add_argument("--chunk-size", metavar="N", help="runs per chunk, as for python -m routesim.sweep")
    cluster = ap.add_mutually_exclusive_group()
    cluster.add_argument("--scheduler", metavar="ADDRESS", help="a Dask scheduler (tcp://HOST:PORT)")
    cluster.add_argument("--workers", metavar="N", help="a local Dask cluster of N worker processes")
    args = ap.parse_args(argv)
    passed = [x for flag, v in (("--chunk-size", args.chunk_size), ("--scheduler", args.scheduler),
                                ("--workers", args.workers)) if v is not None for x in (flag, v)]
    try:   # every sweep file is checked before any runs: a mistake writes nothing
        names = [load_sweep(path).name for path in SWEEPS]
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    runners = {path: claim.run for claim in CLAIMS if hasattr(claim, "run") for path in claim.SWEEPS}
    for path, name in zip(SWEEPS, names):   # a claim with run(): its own search (the capacity table), first
        if path in runners:
            rc = runners[path](args.results_root, args.quiet, args.resume)
        else:
            rc = sweep_cli.main([path, "--out", str(args.results_root / name)] + passed
                                + ["--quiet", "--no-tables"] * args.quiet + ["--resume"] * args.resume)
        if rc:
            return rc
    results = args.results_root / RESULTS.name
    for p in figures(results, args.figures):
        if not args.quiet:
            print(f"wrote {p}")
    for path in write(results, args.out):
        if not args.quiet:
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
