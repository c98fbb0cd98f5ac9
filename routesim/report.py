"""python -m routesim.report results/<name>/ [--out docs/serving-validation.md] [--figures figures/]
[--load-curve DIR] [--quiet]

Writes the validation document from a study's result Datasets alone: the protocol,
the selection table, the per-policy and per-scenario validation tables, the figures
(as written by ``python -m routesim.figures``) and a plain reading of who wins where.
Every number comes from the Datasets, or from timelines the report traces itself
from the sweep text the Datasets carry; regenerating it gives the same bytes.
Given ``results/token-routing/``, it writes the least-outstanding-routing study's
document instead (docs/least-outstanding-routing.md and its appendix beside it,
docs/least-outstanding-routing-appendix.md: :mod:`routesim.least_outstanding`).
Any other folder is refused before anything is written (one line, exit status 2); a
``results/load-curve/`` beside RESULTS is read only when it holds that sweep's stage.

The command line only: the documents are the studies' (:mod:`routesim.studies.serving`,
:mod:`routesim.studies.least_outstanding`).
"""

import sys
from pathlib import Path

from .files import write_text
from .studies import least_outstanding
from .studies.commands import parse_results, results_parser
from .studies.serving import report as serving


def main(argv=None) -> int:
    ap = results_parser("python -m routesim.report", __doc__.split("\n\n")[1])
    ap.add_argument("--out", type=Path, default=None,
                    help=f"output file (default {serving.DEFAULT_OUT}; {least_outstanding.OUT} for results/token-routing/, "
                         "its appendix beside it: OUT's name with -appendix before the suffix)")
    ap.add_argument("--figures", type=Path, default=Path("figures"),
                    help="folder of the figures the document links to (default figures/)")
    args, ok, lc = parse_results(ap, argv, "no progress and no messages", "leaving out the hockey stick")
    if not ok:
        return 2
    if least_outstanding.is_study(args.results):
        try:
            paths = least_outstanding.write(args.results, args.out or least_outstanding.OUT)
        except ValueError as exc:   # a sweep or trace its Datasets name, read relative to the folder they ran from
            print(f"error: {exc} (a Dataset's sweep file and the traces it names are read relative to the "
                  "folder the sweep ran from: run this command there, the repository's root for the shipped "
                  "studies)", file=sys.stderr)
            return 2
        for path in paths:
            if not args.quiet:
                print(f"wrote {path}")
        return 0
    args.out = args.out or serving.DEFAULT_OUT
    try:
        text = serving.build(args.results, args.figures, args.out, lc, show_progress=not args.quiet)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    path = write_text(args.out, text)
    if not args.quiet:
        missing = sorted({m for m in _links(text) if not (path.parent / m).exists()})
        for m in missing:
            print(f"note: {m} does not exist yet (python -m routesim.figures)", file=sys.stderr)
        print(f"wrote {path}")
    return 0


def _links(text):
    import re
    return re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)


if __name__ == "__main__":
    sys.exit(main())
