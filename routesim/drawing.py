"""What every figure routesim draws shares: its matplotlib style, and writing it as a
file deterministically (no dates or software versions in it, a fixed SVG hash salt,
the file written whole). The studies' figures (:mod:`routesim.studies.plotting`) and
the generic plot (:mod:`routesim.plot`) both draw with these.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from .files import replace_atomically  # noqa: E402

SALT = {"svg.hashsalt": "routesim"}
"""The SVG hash salt every figure is saved with (its ids the same in every process)."""

STYLE = {
    "svg.hashsalt": "routesim",
    "svg.fonttype": "path",
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 9.5,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e4e4e4",
    "grid.linewidth": 0.6,
    "axes.axisbelow": True,
    "legend.frameon": False,
    "path.simplify": True,
}
"""Matplotlib settings of the serving and incident figures and of the generic plot
(applied with ``rc_context`` while each is drawn and saved)."""

DPI = 150
"""Resolution of the serving and incident figures and of the generic plot (PNG, and the
SVG's raster images)."""

METADATA = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None}}
"""What each format's file leaves out: the dates and software versions matplotlib would
write (so the same figure is the same bytes everywhere)."""


def save_file(fig, path, dpi, rc=STYLE):
    """Write ``fig`` to ``path`` whole, as PNG or SVG by its suffix (at ``dpi``; an
    SVG's raster images too), without dates or software versions and with the fixed
    SVG hash salt; return ``path``."""
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in METADATA:
        raise ValueError(f"{path}: expected a .png or .svg file name")
    with matplotlib.rc_context(rc):
        return replace_atomically(Path(path), lambda tmp: fig.savefig(tmp, format=fmt, dpi=dpi,
                                                                      metadata=METADATA[fmt]))

