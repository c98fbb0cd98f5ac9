"""python -m routesim.figures results/<name>/ [--out figures/] [--load-curve DIR] [--incidents DIR] [--quiet]

Regenerates the study's figures, as PNG and SVG, from its result Datasets (and from
timelines traced from the sweep text those Datasets carry):

- ``development-objective``: the selection objective against the exploration weight;
- ``validation-attainment``: mean attainment per policy and condition;
- ``validation-p99``: median p99 and its min–max range across seeds;
- ``timeline-<scenario>``: timelines of the straggler and failure scenarios;
- ``load-curve``: the queueing hockey stick (from ``results/load-curve/``);
- ``estimate-lag``: the straggler's ŝ against its true mean service, several α;
- ``timeline-black-hole``: the batching model's black-hole incident (from
  ``results/incidents/``, sweeps/incidents.toml), without and with containment.

Given ``results/token-routing/``, it draws the least-outstanding-routing study's
figures instead (``lor-*``, :mod:`routesim.studies.least_outstanding`). Any other
folder is refused before anything is written (one line, exit status 2): the figures
of any sweep's results are ``python -m routesim.plot``'s. A ``results/load-curve/`` or
``results/incidents/`` beside RESULTS is drawn only when it holds that sweep's stage
(else a note says it is skipped); one named by ``--load-curve`` or ``--incidents``
that does not is refused.

The command line only: the figures are the studies' (:mod:`routesim.studies.serving`,
:mod:`routesim.studies.incidents`, :mod:`routesim.studies.least_outstanding`), drawn and
saved byte-for-byte deterministically (:mod:`routesim.studies.plotting`).
"""

import sys
from pathlib import Path

from .studies import least_outstanding, plotting
from .studies.commands import parse_results, results_parser
from .studies.incidents import figures as incidents
from .studies.incidents.resultset import default_incidents, not_incidents
from .studies.serving import figures as serving


def main(argv=None) -> int:
    ap = results_parser("python -m routesim.figures", __doc__.split("\n\n")[1])
    ap.add_argument("--out", type=Path, default=Path("figures"), help="output folder (default figures/)")
    ap.add_argument("--incidents", type=Path, default=None, metavar="DIR",
                    help="results of sweeps/incidents.toml (default: results/incidents/ beside RESULTS)")
    args, ok, lc = parse_results(ap, argv, "no progress and no list of files", "skipping the load-curve figure",
                                 check=_named_incidents)
    if not ok:
        return 2
    if least_outstanding.is_study(args.results):
        paths = least_outstanding.figures(args.results, args.out)
    else:
        inc = args.incidents or default_incidents(args.results)
        why = None if inc is None or args.incidents is not None else not_incidents(inc)
        if why is not None:  # a folder beside RESULTS that is not the incidents sweep's: not drawn
            inc = None
        if inc is None and not args.quiet:
            print("note: " + (f"{why}: " if why else "no results/incidents/ (python -m routesim.sweep "
                              "sweeps/incidents.toml): ") + "skipping the black-hole figure", file=sys.stderr)
        todo = serving.jobs(args.results, lc) + incidents.jobs(inc)
        paths = plotting.render(todo, args.out, show_progress=not args.quiet)
    if not args.quiet:
        for p in paths:
            print(f"wrote {p}")
    return 0


def _named_incidents(args):
    """Why the folder ``--incidents`` names is not the incidents sweep's results (None
    when it is, or when none is named)."""
    if args.incidents is None:
        return None
    why = not_incidents(args.incidents)
    return None if why is None else f"--incidents {why}"


if __name__ == "__main__":
    sys.exit(main())
