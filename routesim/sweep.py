"""python -m routesim.sweep SWEEP.toml [--out DIR] [--quiet]

Runs every stage of a sweep file in order, prints each stage's summary table and
writes ``DIR/<stage>.nc`` (default ``results/<name>/``). Exit status: 0 on success,
2 on bad input (one line on stderr naming the file and key), 1 on an internal error.
"""

import argparse
import sys
import time
from pathlib import Path


def _parser():
    ap = argparse.ArgumentParser(prog="python -m routesim.sweep", description=__doc__.split("\n\n")[1])
    ap.add_argument("sweep", type=Path, help="sweep file (TOML)")
    ap.add_argument("--out", type=Path, default=None, help="folder for <stage>.nc (default results/<name>/)")
    ap.add_argument("--stage", action="append", default=None, metavar="NAME",
                    help="run only this stage (and the stages whose selection it uses); repeatable")
    ap.add_argument("--chunk-size", default=None, metavar="N",  # checked in main: one-line error
                    help="runs per compiled batch (default: automatic)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar and no tables")
    return ap


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from .config import ConfigError, load_sweep  # after argparse: --help stays fast

    try:
        if args.chunk_size is not None:
            try:
                args.chunk_size = int(args.chunk_size)
            except ValueError:
                raise ConfigError(args.sweep, "--chunk-size",
                                  f"expected a whole number, got {args.chunk_size!r}") from None
            if args.chunk_size < 1:
                raise ConfigError(args.sweep, "--chunk-size", f"must be >= 1, got {args.chunk_size}")
        sweep = load_sweep(args.sweep)
        from . import study
        study.check_memory(sweep, args.chunk_size)
        if args.stage:
            study._needed(sweep, args.stage)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from .results import write_atomic
    from .summary import render

    out = args.out or Path("results") / sweep.name
    t0 = time.perf_counter()

    def finished(stage, ds):
        path = out / f"{stage.name}.nc"
        write_atomic(ds, path)
        if not args.quiet:
            print(render(ds, stage.select))
            print(f"\nwrote {path}\n", flush=True)

    study.run(sweep, stages=args.stage, show_progress=not args.quiet,
              chunk_size=args.chunk_size, on_stage=finished)
    if not args.quiet:
        print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
