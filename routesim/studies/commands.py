"""What the command lines that read a results folder share (``python -m routesim.figures``
and ``python -m routesim.report``): the folder argument, ``--load-curve`` and
``--quiet``, and the check of the folders they name."""

import sys
from pathlib import Path

from . import least_outstanding
from .serving.resultset import default_load_curve


def results_parser(prog, description):
    """The parser of a command that reads a sweep's results: its ``results`` folder
    first; the command adds its own options, then calls :func:`parse_results`."""
    import argparse
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("results", type=Path, help="results folder of a sweep (results/<name>/)")
    return ap


def parse_results(ap, argv, quiet_help, without_load_curve):
    """Add ``--load-curve DIR`` and ``--quiet``, parse ``argv`` and check the folders:
    (args, ok, load-curve folder or None), as :func:`check_inputs`."""
    ap.add_argument("--load-curve", type=Path, default=None, metavar="DIR",
                    help="results of sweeps/load-curve.toml (default: results/load-curve/ beside RESULTS)")
    ap.add_argument("-q", "--quiet", action="store_true", help=quiet_help)
    args = ap.parse_args(argv)
    return (args, *check_inputs(args, without_load_curve))


def check_inputs(args, without_load_curve):
    """(ok, load-curve folder or None) for ``args.results`` and ``args.load_curve``.

    Not ok, after one error line on stderr, when the results folder holds no result
    file; a missing load curve is a note (unless ``args.quiet``) saying what is left
    out (``without_load_curve``).
    """
    if not args.results.is_dir() or not any(args.results.glob("*.nc")):
        print(f"error: {args.results}: no result files (*.nc); run python -m routesim.sweep first", file=sys.stderr)
        return False, None
    if least_outstanding.is_study(args.results):
        return True, None      # the least-outstanding study needs no load curve
    lc = args.load_curve or default_load_curve(args.results)
    if lc is None and not args.quiet:
        print("note: no results/load-curve/ (python -m routesim.sweep sweeps/load-curve.toml): "
              + without_load_curve, file=sys.stderr)
    return True, lc
