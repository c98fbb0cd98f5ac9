"""python -m routesim.sweep SWEEP.toml [--out DIR] [-q] [--no-tables] [--csv] [--resume] [--workers N | --scheduler ADDR]
python -m routesim.sweep --list-keys

Runs every stage of a sweep file in order, prints each stage's summary table and
writes ``DIR/<stage>.nc`` (default ``results/<name>/``). Exit status: 0 on success,
2 on bad input (one line on stderr naming the file and key, ``--out`` included: it is
checked before anything runs), 1 on an internal error or a lost cluster.

Finished chunks are kept in ``DIR/.chunks/<stage>/`` as they complete, and removed
once every stage has finished; ``--resume`` picks up a killed run where it stopped.
"""

import argparse
import sys
import time
from pathlib import Path


def _parser():
    ap = argparse.ArgumentParser(prog="python -m routesim.sweep", description=__doc__.split("\n\n")[1],
                                 epilog="The keys a sweep file may hold, with their defaults, units and "
                                        "meaning: docs/keys.md (or --list-keys).")
    ap.add_argument("sweep", type=Path, nargs="?", help="sweep file (TOML; its keys: docs/keys.md)")
    ap.add_argument("--list-keys", action="store_true",
                    help="print the reference of every sweep-file key (docs/keys.md) and exit")
    ap.add_argument("--out", type=Path, default=None, help="folder for <stage>.nc (default results/<name>/)")
    ap.add_argument("--stage", action="append", default=None, metavar="NAME",
                    help="run only this stage (and the stages whose selection it uses); repeatable")
    ap.add_argument("--chunk-size", default=None, metavar="N",  # checked in main: one-line error
                    help="runs per chunk (default: automatic); results do not depend on it")
    ap.add_argument("-q", "--quiet", action="store_true",
                    help="no progress bar and no progress lines; the tables are still printed")
    ap.add_argument("--no-tables", action="store_true", help="do not print the stages' tables")
    ap.add_argument("--csv", action="store_true",
                    help="also write DIR/<stage>.csv: one row per run, its coordinates and scalar metrics")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the chunks a killed run of the same sweep left in DIR/.chunks")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                       help="run the chunks on this dask.distributed scheduler's workers")
    where.add_argument("--workers", default=None, metavar="N",
                       help="run the chunks on a local Dask cluster of N worker processes")
    return ap


def _count(args, option):
    """The whole number >= 1 given to ``option``, or None; a ConfigError otherwise."""
    return count(getattr(args, option.lstrip("-").replace("-", "_")), args.sweep, option)


def count(text, where, option):
    """The whole number >= 1 that ``text`` gives the command-line ``option`` (None for
    None); otherwise a ConfigError naming ``where`` (the sweep file, or the command) and
    the option."""
    from .config import ConfigError
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(where, option, f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise ConfigError(where, option, f"must be >= 1, got {value}")
    return value


def _kept(checkpoint: Path) -> str:
    kept = sum(1 for _ in checkpoint.glob("*/[0-9]*.npz"))
    return f"{kept} finished chunks kept in {checkpoint}; rerun with --resume to finish"


def main(argv=None, own_process: bool = False) -> int:
    """The command. ``own_process``: this is the process's program (``python -m
    routesim.sweep``), which a local sweep may then start without dask
    (:func:`routesim.startup.without_dask`)."""
    ap = _parser()
    args = ap.parse_args(argv)
    if args.list_keys:
        from .keys import render
        sys.stdout.write(render())
        return 0
    if args.sweep is None:  # optional only with --list-keys
        ap.error("the following arguments are required: sweep")
    if own_process and args.scheduler is None and args.workers is None:
        from .startup import without_dask
        without_dask()
    from .config import ConfigError, load_sweep  # after argparse: --help stays fast
    from .files import unwritable

    try:
        args.chunk_size = _count(args, "--chunk-size")
        args.workers = _count(args, "--workers")
        sweep = load_sweep(args.sweep)
        from . import study
        study.check_memory(sweep, args.chunk_size)
        if args.stage:
            study._needed(sweep, args.stage)
        if args.scheduler is not None or args.workers is not None:
            from . import cluster
            try:
                cluster.distributed()
            except cluster.ClusterError as exc:
                raise ConfigError(args.sweep, "--scheduler" if args.scheduler else "--workers",
                                  str(exc)) from None
        out = args.out or Path("results") / sweep.name
        if why := unwritable(out):
            raise ConfigError(args.sweep, "--out", why)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from .results import write_atomic, write_csv
    from .summary import render
    if own_process:  # numba, xarray and pandas are imported by now
        from .startup import freeze
        freeze()

    checkpoint = out / ".chunks"
    t0 = time.perf_counter()

    def finished(stage, ds):
        path = out / f"{stage.name}.nc"
        for stray in out.glob(f".{path.name}.*.tmp"):  # left by a run killed while writing
            stray.unlink(missing_ok=True)
        write_atomic(ds, path)
        wrote = [path]
        if args.csv:
            wrote.append(write_csv(ds, path.with_suffix(".csv")))
        parts = ([] if args.no_tables else [render(ds, stage.select)]) + \
            ([] if args.quiet else [f"wrote {' and '.join(map(str, wrote))}"])
        if parts:
            say("\n\n".join(parts) + "\n")

    def counted(c):
        if not args.quiet:
            resumed = f"{c.resumed} resumed from {checkpoint / c.stage}, " if c.resumed else ""
            say(f"{c.stage}: {c.chunks} chunks, {resumed}{c.computed} computed "
                f"({c.runs:,} runs, {c.runs_per_s:,.0f} runs/s)")

    def go(client=None):
        study.run(sweep, stages=args.stage, show_progress=not args.quiet, chunk_size=args.chunk_size,
                  on_stage=finished, checkpoint=checkpoint, resume=args.resume, client=client,
                  on_chunks=counted, note=study.print_note, behind=sweep.model.writes_behind)

    if args.scheduler is None and args.workers is None:
        go()
    else:
        from . import cluster
        where = "--scheduler" if args.scheduler else "--workers"
        connected = False
        try:
            with cluster.connect(args.scheduler, args.workers) as client:
                connected = True
                if not args.quiet:
                    n = len(client.nthreads())
                    print(f"cluster: {client.scheduler.address} ({n} workers)", flush=True)
                go(client)
        except cluster.ClusterError as exc:
            if not connected:  # unreachable scheduler: nothing written
                print(f"error: {ConfigError(args.sweep, where, str(exc))}", file=sys.stderr)
                return 2
            print(f"error: {exc}; {_kept(checkpoint)}", file=sys.stderr)  # a mismatched worker
            return 1
        except cluster.SchedulerLost as exc:
            print(f"error: {exc}; {_kept(checkpoint)}", file=sys.stderr)
            return 1
    if not args.quiet:
        print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


def say(text: str) -> None:
    """Print a line of the sweep's report (from the thread that writes the stages'
    files): above the next stage's progress bar, not through it."""
    from tqdm.auto import tqdm
    tqdm.write(text)
    sys.stdout.flush()


def _exit(code: int):
    """Leave the process. What is alive now goes with it: frozen, the interpreter's
    final garbage collections do not walk it (about 0.45 s after a study)."""
    from .startup import freeze
    freeze()
    sys.exit(code)


if __name__ == "__main__":
    try:
        code = main(own_process=True)
    except KeyboardInterrupt:
        print("interrupted (finished chunks are kept: rerun with --resume to finish)", file=sys.stderr)
        code = 130
    _exit(code)
