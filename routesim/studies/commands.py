"""What the command lines that read a results folder share (``python -m routesim.figures``
and ``python -m routesim.report``): the folder argument, ``--load-curve`` and
``--quiet``, and the check of the folders they name."""

import sys
from pathlib import Path

from . import least_outstanding
from .serving.resultset import default_load_curve, not_a_load_curve, not_the_study


def results_parser(prog, description):
    """The parser of a command that reads a sweep's results: its ``results`` folder
    first; the command adds its own options, then calls :func:`parse_results`."""
    import argparse
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("results", type=Path, help="results folder of a bundled study (results/exploration/, "
                                               "results/token-routing/); any sweep's: python -m routesim.plot")
    return ap


def parse_results(ap, argv, quiet_help, without_load_curve, check=None):
    """Add ``--load-curve DIR`` and ``--quiet``, parse ``argv`` and check the folders:
    (args, ok, load-curve folder or None), as :func:`check_inputs`."""
    ap.add_argument("--load-curve", type=Path, default=None, metavar="DIR",
                    help="results of sweeps/load-curve.toml (default: results/load-curve/ beside RESULTS)")
    ap.add_argument("-q", "--quiet", action="store_true", help=quiet_help)
    args = ap.parse_args(argv)
    return (args, *check_inputs(args, without_load_curve, check))


def check_inputs(args, without_load_curve, check=None):
    """(ok, load-curve folder or None) for ``args.results`` and ``args.load_curve``,
    before anything is written.

    Not ok, after one error line on stderr, when the results folder holds no result
    file, or holds neither the least-outstanding study (``results/token-routing/``) nor
    the serving study (the stages of sweeps/exploration.toml), or when ``--load-curve``
    names a folder without the load curve, or ``check(args)`` (the command's own
    check of the serving study's inputs) returns an error line. A load curve beside the folder
    (``results/load-curve/``) is used only when it holds the load curve's stage: a
    missing or foreign one is a note (unless ``args.quiet``) saying what is left out
    (``without_load_curve``).
    """
    if not args.results.is_dir() or not any(args.results.glob("*.nc")):
        print(f"error: {args.results}: no result files (*.nc); run python -m routesim.sweep first", file=sys.stderr)
        return False, None
    if least_outstanding.is_study(args.results):
        return True, None      # the least-outstanding study needs no load curve
    why = not_the_study(args.results) or (check(args) if check is not None else None)
    if why is not None:
        print(f"error: {why}", file=sys.stderr)
        return False, None
    if args.load_curve is not None:
        why = not_a_load_curve(args.load_curve)
        if why is not None:
            print(f"error: --load-curve {why}", file=sys.stderr)
            return False, None
        return True, args.load_curve
    lc = default_load_curve(args.results)
    why = None if lc is None else not_a_load_curve(lc)
    if why is not None:
        lc = None
    if lc is None and not args.quiet:
        print("note: " + (f"{why}: " if why else "no results/load-curve/ (python -m routesim.sweep "
                          "sweeps/load-curve.toml): ") + without_load_curve, file=sys.stderr)
    return True, lc
