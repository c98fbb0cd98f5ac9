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


def study_main(argv, doc, package, needed, run, load, draw, document) -> int:
    """The command line of a study that simulates its design, then draws its figure and
    writes its document (``python -m routesim.scheduler_modes``, ``routesim.disaggregation``):
    ``[--no-run] [--results DIR] [--figures DIR] [--out FILE] [--quiet]``, its usage and
    description the module docstring ``doc`` (``python -m NAME [options]: what it does``).

    ``package`` gives the defaults (its RESULTS, FIGURES and OUT) and, through its name,
    the command; ``needed`` the workloads whose ``<name>.nc`` the document needs;
    ``run(results, show_progress, log)`` simulates the design into the results folder,
    ``load(results)`` reads it ({workload: Dataset}), ``draw(data, figures)`` draws the
    figures (their paths) and ``document(data, results)`` is the document's text (it names
    the results folder it was computed from). Without the
    results it needs: one error line, exit status 2, nothing written."""
    import argparse
    import time

    from ..files import write_text
    prog = "python -m routesim." + package.__name__.rsplit(".", 1)[1]
    results, figures, out = package.RESULTS, package.FIGURES, package.OUT
    ap = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0].split(": ", 1)[1])
    ap.add_argument("--no-run", action="store_true", help="read the results folder; simulate nothing")
    ap.add_argument("--results", type=Path, default=results, metavar="DIR",
                    help=f"the study's results folder (default {results}/)")
    ap.add_argument("--figures", type=Path, default=figures, metavar="DIR", help="folder for the figure (default figures/)")
    ap.add_argument("--out", type=Path, default=out, metavar="FILE", help=f"the document (default {out})")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress and no messages")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()

    def log(msg):
        if not args.quiet:
            print(f"[{time.perf_counter() - t0:5.0f} s] {msg}", flush=True)
    if not args.no_run:
        run(args.results, show_progress=not args.quiet, log=log)
    data = load(args.results)
    if set(data) != set(needed):
        files = [f"{w}.nc" for w in needed]
        print(f"error: {args.results}: needs {', '.join(files[:-1])} and {files[-1]}; run {prog} without "
              "--no-run first", file=sys.stderr)
        return 2
    for p in draw(data, args.figures):
        log(f"wrote {p}")
    write_text(args.out, document(data, args.results))
    log(f"wrote {args.out}")
    return 0
