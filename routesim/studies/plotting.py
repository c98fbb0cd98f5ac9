"""What the studies' figures share: the style of the serving and incident figures, and
writing a figure as PNG and SVG deterministically (no dates or software versions in
the files, a fixed SVG hash salt, each file written whole); the style and the files'
metadata are :mod:`routesim.drawing`'s, which the generic plot shares.

Every study saves through :func:`save`; each passes its own resolution (the serving
and incident figures :data:`DPI`, the least-outstanding study's 110 dpi) and says how
its figure is laid out.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from ..drawing import DPI, METADATA, SALT, STYLE  # noqa: E402,F401  (the studies' names for them)
from ..files import replace_atomically  # noqa: E402


def save(fig, out_dir, stem, dpi, *, svg_dpi=None, rc=SALT, freeze_layout=False) -> list:
    """Write ``stem.png`` (at ``dpi``) and ``stem.svg`` into ``out_dir``, each whole (a
    temporary file renamed, as every file routesim writes), under the matplotlib
    settings ``rc``; return both paths.

    ``svg_dpi`` is the resolution of any raster image in the SVG (None: the figure's
    own, matplotlib's default). A figure with a layout engine is laid out once, for the
    PNG, and the SVG keeps that layout; with ``freeze_layout`` it is laid out first
    (``layout="constrained"``: at ``dpi``, the PNG's, whose text it must fit; laid out at
    another resolution, text measured there can overrun the PNG's edge) and its axes' positions rounded
    to 1e-6 of the figure: that layout can differ in the last bits from one process to
    the next, which changes the SVG's clip-path ids; frozen, the files are the same
    bytes every time.
    """
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    if freeze_layout:
        engine = fig.get_layout_engine()
        if engine is not None and not isinstance(engine, PlaceHolderLayoutEngine):
            own = fig.dpi
            fig.set_dpi(dpi)  # laid out at the PNG's resolution, whose text it must fit
            fig.draw_without_rendering()
            fig.set_dpi(own)
            for ax in fig.axes:
                ax.set_position([round(v, 6) for v in ax.get_position().bounds])
            fig.set_layout_engine("none")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context(rc):
        png = replace_atomically(out_dir / f"{stem}.png",
                                 lambda tmp: fig.savefig(tmp, format="png", dpi=dpi, metadata=METADATA["png"]))
        fig.set_layout_engine("none")  # laid out once (for the PNG): the SVG has the same layout
        svg = replace_atomically(out_dir / f"{stem}.svg",
                                 lambda tmp: fig.savefig(tmp, format="svg", dpi=svg_dpi,
                                                         metadata=METADATA["svg"]))
    return [png, svg]


def render(jobs, out_dir, show_progress=False) -> list:
    """Draw each ``(stem, function returning a Figure)`` of ``jobs`` under :data:`STYLE`
    and save it at :data:`DPI` into ``out_dir``, in order; return the written paths."""
    paths = []
    bar = None
    if show_progress:
        from ..progress import bar as progress_bar
        bar = progress_bar(len(jobs), "figures", "fig")
    for stem, make in jobs:
        if bar is not None:
            bar.set_postfix_str(stem)
        with matplotlib.rc_context(STYLE):
            fig = make()
        paths += save(fig, out_dir, stem, DPI, svg_dpi=DPI, rc=STYLE)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return paths
