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
from .common import finished, mark_finished


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m routesim.least_outstanding",
                                 description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    ap.add_argument("--resume", action="store_true",
                    help="keep the chunks already computed, and every sweep and capacity search this command "
                         "finished with the same sweep file, routesim and arguments")
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
    try:   # every sweep file and option is checked before any runs: a mistake writes nothing
        sweeps = [load_sweep(path) for path in SWEEPS]
        for option in ("--chunk-size", "--workers"):
            sweep_cli.count(getattr(args, option[2:].replace("-", "_")), ap.prog, option)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    runners = {path: claim.run for claim in CLAIMS if hasattr(claim, "run") for path in claim.SWEEPS}
    for path, sweep in zip(SWEEPS, sweeps):   # a claim with run(): its own search (the capacity table), first
        folder = args.results_root / sweep.name
        if path in runners:
            rc = runners[path](args.results_root, args.quiet, args.resume)
        elif args.resume and finished(folder, "sweep", path, [f"{stage.name}.nc" for stage in sweep.stages]):
            if not args.quiet:
                print(f"{sweep.name}: finished before with this sweep file and routesim; kept {folder}",
                      file=sys.stderr)
            continue
        else:
            rc = sweep_cli.main([path, "--out", str(folder)] + passed
                                + ["--quiet", "--no-tables"] * args.quiet + ["--resume"] * args.resume)
            if rc == 0:
                mark_finished(folder, "sweep", path)
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
