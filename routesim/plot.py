"""python -m routesim.plot RESULTS.nc [METRIC] [--x DIM] [--hue DIM] [--col DIM] [--row DIM] [--sel DIM=VALUE ...] [--out FILE.png]

Draws one metric of any sweep's results file (either replica model) against one of
its dimensions: the median over seeds as a line, and the 10-90 % range of the seeds
as a band (as error bars when the x axis is not numeric), one colour per ``--hue``
value, one panel per ``--col`` and ``--row`` value (xarray's faceting). Without
METRIC it lists the file's metrics with their units and descriptions.

Defaults: x is ``rate_rps`` when it has several values (else the first other
dimension that has), hue is ``policy``. Every other dimension of the metric must have
one value, or be given one with ``--sel DIM=VALUE``. The figure is written to
``--out`` (PNG or SVG, by its suffix; default ``<RESULTS folder>/<stem>-<METRIC>.png``),
byte for byte the same every time. Bad input is one line naming the file and the
argument, exit status 2, and nothing written.

From Python: ``routesim.plot(ds, metric, x=..., hue=..., col=..., row=..., sel={...})``
(the module is callable: it is :func:`plot`) returns the matplotlib Figure (a pyplot
figure: ``plt.close(fig)`` when done with it).
"""

import difflib
import sys
import textwrap
from pathlib import Path

import numpy as np

INTERVAL = (0.1, 0.9)
"""The band: these quantiles of the seeds' values (the 10-90 % range)."""

RATE = "rate_rps"
HUE = "policy"
SEED = "seed"


class PlotError(ValueError):
    """Input the plot cannot draw: ``argument`` names what was wrong (a dimension, a
    metric, an option); the command line prints ``error: <file>: <argument>: <message>``."""

    def __init__(self, argument, message):
        self.argument, self.message = argument, message
        super().__init__(f"{argument}: {message}")


# --------------------------------------------------------------------------------------
# What a file holds
# --------------------------------------------------------------------------------------

def is_results(ds) -> bool:
    """Whether a Dataset is a routesim sweep stage's results (its provenance attrs)."""
    return all(k in ds.attrs for k in ("sweep_name", "stage", "routesim_version"))


def metrics(ds) -> list:
    """[(name, units, description, dims)] of every numeric variable of a results Dataset."""
    return [(str(n), v.attrs.get("units", ""), v.attrs.get("description", ""), tuple(map(str, v.dims)))
            for n, v in ds.data_vars.items() if np.issubdtype(v.dtype, np.number) or v.dtype == bool]


def metrics_table(ds) -> str:
    """The metrics of a results Dataset as a table: name, units, dimensions beyond the
    stage's, description."""
    from .tables import text_table
    common = _common_dims(ds)
    rows = [(n, u or "-", ", ".join(d for d in dims if d not in common) or "-", desc)
            for n, u, desc, dims in metrics(ds)]
    return text_table(("metric", "units", "extra dims", "description"), rows, align="llll")


def _common_dims(ds) -> tuple:
    """The dimensions of the stage's grid: the model's own and the swept parameters."""
    from . import models
    m = models.of_dataset(ds)
    return tuple(d for d in ds.dims if d in m.dims or d in m.param)


# --------------------------------------------------------------------------------------
# The figure
# --------------------------------------------------------------------------------------

def _suggest(value, allowed) -> str:
    close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (choose from {', '.join(map(str, allowed))})"


def _coord_index(coord, value) -> int | None:
    """The position of ``value`` (as given on the command line, or a Python value) in a
    1-D coordinate, or None."""
    vals = list(coord.values)
    for i, v in enumerate(vals):
        if (str(v) == value) if isinstance(value, str) else (v == value):
            return i
    if isinstance(value, str):
        low = value.strip().lower()
        for i, v in enumerate(vals):
            if isinstance(v, (bool, np.bool_)) and low in ("true", "false"):
                if bool(v) == (low == "true"):
                    return i
            elif isinstance(v, (int, float, np.integer, np.floating)):
                try:
                    if float(v) == float(value):
                        return i
                except ValueError:
                    pass
    return None


def select(ds, metric, sel=None):
    """The metric's DataArray with every ``{dim: value}`` of ``sel`` picked (the
    dimension dropped); raises :class:`PlotError` for an unknown metric, dimension or
    value."""
    names = [n for n, *_ in metrics(ds)]
    if metric not in names:
        raise PlotError(metric, "no such metric in this file" + _suggest(metric, names))
    da = ds[metric]
    for dim, value in (sel or {}).items():
        arg = f"--sel {dim}={value}"
        if dim not in da.dims:
            raise PlotError(arg, f"{metric} has no dimension {dim!r}" + _suggest(dim, da.dims))
        i = _coord_index(da[dim], value)
        if i is None:
            raise PlotError(arg, f"{value!r} is not a value of {dim}" + _suggest(value, list(da[dim].values)))
        da = da.isel({dim: i})
    return da


def roles(da, x=None, hue=None, col=None, row=None) -> dict:
    """{"x", "hue", "col", "row"} -> dimension (or None), with the defaults filled in;
    raises :class:`PlotError` for an unknown dimension, one given two roles, or a
    dimension left over with several values."""
    given = {"x": x, "hue": hue, "col": col, "row": row}
    for role, dim in given.items():
        if dim is not None and dim not in da.dims:
            raise PlotError(f"--{role} {dim}", f"{da.name} has no dimension {dim!r}" + _suggest(dim, da.dims))
    used = [d for d in given.values() if d is not None]
    if len(set(used)) < len(used):
        dup = next(d for d in used if used.count(d) > 1)
        raise PlotError(dup, "a dimension can have only one of --x, --hue, --col, --row")
    free = [d for d in da.dims if d not in used and d != SEED]
    if x is None:
        several = [d for d in free if da.sizes[d] > 1]
        others = [d for d in several if d != HUE]  # policy stays the hue when something else varies
        prefer = ([RATE] if RATE in several else []) + others + several + ([RATE] if RATE in free else []) + free
        x = prefer[0] if prefer else None
        if x is None:
            raise PlotError(str(da.name), "no dimension left to draw against: give --x")
        free.remove(x)
    if hue is None and HUE in free and da.sizes[HUE] > 1:
        hue = HUE
        free.remove(HUE)
    for d in free:
        if da.sizes[d] > 1:
            raise PlotError(d, f"{da.name} also varies over {d} ({da.sizes[d]} values): pick one with "
                               f"--sel {d}=VALUE or show it with --hue, --col or --row")
    return {"x": x, "hue": hue, "col": col, "row": row}


def summarize(da, over=SEED):
    """(median, low, high) over ``over`` (the :data:`INTERVAL` quantiles), or the
    values themselves three times when ``da`` has no such dimension. NaN (no
    completed request in a run) is left out of both."""
    if over not in da.dims:
        return da, da, da
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: NaN, as wanted
        med = da.median(over)
        q = da.quantile(list(INTERVAL), over)
    return med, q.isel(quantile=0, drop=True), q.isel(quantile=1, drop=True)


def _numeric(coord) -> bool:
    return np.issubdtype(coord.dtype, np.number) and coord.dtype != bool


def plot(ds, metric, x=None, hue=None, col=None, row=None, sel=None):
    """One metric of a results Dataset against dimension ``x``: the median over seeds
    as a line, the :data:`INTERVAL` range of the seeds as a band (error bars on a
    non-numeric axis), a colour per ``hue`` value and a panel per ``col`` / ``row``
    value (xarray's FacetGrid). ``sel``: {dimension: value} picked first. Returns the
    matplotlib Figure; raises :class:`PlotError` on input it cannot draw."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .drawing import STYLE

    da = select(ds, metric, sel)
    r = roles(da, x, hue, col, row)
    fixed = {d: da[d].values.item() for d in da.dims if d not in r.values() and d != SEED}
    da = da.squeeze([d for d in fixed], drop=True)
    picked = [c for c in da.coords if da[c].ndim == 0]  # the --sel values: in our title, not xarray's
    fixed = {**{c: da[c].values.item() for c in picked}, **fixed}
    da = da.drop_vars(picked)
    if r["hue"] is not None:
        da = da.transpose(*[d for d in da.dims if d != r["hue"]], r["hue"])
    numeric_x = _numeric(da[r["x"]])
    names = [_value(v) for v in da[r["x"]].values]
    if not numeric_x:  # names on the axis: drawn at 0, 1, … and labelled
        da = da.assign_coords({r["x"]: np.arange(len(names))})
    seeds = da.sizes.get(SEED, 0) if SEED not in r.values() else 0
    med, lo, hi = summarize(da) if seeds else (da, da, da)
    facets = r["col"] is not None or r["row"] is not None
    with matplotlib.rc_context(STYLE):
        kw = dict(x=r["x"], hue=r["hue"], marker="o", markersize=3.5, linewidth=1.4)
        if not numeric_x:
            kw.update(linestyle="none", markersize=5)
        if facets:
            wrap = dict(col_wrap=4) if r["row"] is None and da.sizes[r["col"]] > 4 else {}
            grid = med.plot.line(col=r["col"], row=r["row"], size=2.8, aspect=1.35, sharey=True, **wrap, **kw)
            fig = grid.fig
            panels = [(ax, nd) for ax, nd in zip(grid.axs.flat, grid.name_dicts.flat) if nd is not None]
        else:
            fig, ax = plt.subplots(figsize=(6.4, 4.0))
            med.plot.line(ax=ax, **kw)
            panels = [(ax, {})]
        for ax, nd in panels:
            _intervals(ax, lo.loc[nd] if nd else lo, hi.loc[nd] if nd else hi, med.loc[nd] if nd else med,
                       r["x"], r["hue"], numeric_x)
            if not numeric_x:
                ax.set_xticks(range(len(names)), names, rotation=30, ha="right", rotation_mode="anchor")
            ax.set_ylabel(_label(metric, ds[metric].attrs.get("units", "")) if ax.get_subplotspec().is_first_col()
                          else "")
        _titles(fig, ds, metric, fixed, facets, _how(seeds, numeric_x, SEED in r.values()))
    return fig


def _intervals(ax, lo, hi, med, x, hue, numeric_x):
    """The seeds' range on one panel, in each line's colour (xarray draws one line per
    hue value, in the coordinate's order): a band, or on a non-numeric axis error bars,
    each hue's points moved a little aside so that they do not hide each other."""
    lines = ax.get_lines()
    hues = list(med[hue].values) if hue is not None else [None]
    if len(lines) != len(hues):
        raise AssertionError(f"{len(lines)} lines for {len(hues)} hue values")
    xs = med[x].values
    for k, (line, h) in enumerate(zip(lines, hues)):
        sub = {hue: h} if hue is not None else {}
        low, high = lo.sel(sub).values, hi.sel(sub).values
        if numeric_x:
            ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.18, linewidth=0)
        else:
            mid = med.sel(sub).values
            pos = xs + (k - (len(hues) - 1) / 2) * min(0.12, 0.6 / len(hues))
            line.set_xdata(pos)
            ax.errorbar(pos, mid, yerr=[mid - low, high - mid], fmt="none", ecolor=line.get_color(),
                        elinewidth=1.1, capsize=3)


def _label(metric, units) -> str:
    return f"{metric} ({units})" if units and units != "1" else metric


def _how(seeds, numeric_x, per_seed) -> str:
    """What the lines and their intervals are, as the figure states it."""
    if seeds > 1:
        band = "band" if numeric_x else "bars"
        return (f"{'line' if numeric_x else 'point'}: median over {seeds} seeds; {band}: "
                f"{INTERVAL[0]:.0%}–{INTERVAL[1]:.0%} range of the seeds")
    if per_seed:
        return "each seed's values"
    return "one seed: its values" if seeds == 1 else "the values (no seed dimension)"


def _titles(fig, ds, metric, fixed, facets, how):
    desc = ds[metric].attrs.get("description", "")
    head = f"{metric}: {desc}" if desc else metric
    where = [f"sweep {ds.attrs.get('sweep_name', '')}, stage {ds.attrs.get('stage', '')}"]
    where += [f"{d} = {_value(v)}" for d, v in fixed.items()]
    width = int(fig.get_figwidth() * 15)  # characters a line of the title holds
    text = "\n".join(textwrap.wrap(head, width) + textwrap.wrap(" · ".join(where), width) + [how])
    lines = text.count("\n") + 1
    if facets:
        h = fig.get_figheight() + 0.2 + 0.17 * lines  # room above the panels and their titles
        top = fig.subplotpars.top * fig.get_figheight()
        fig.set_figheight(h)
        fig.subplots_adjust(top=top / h, bottom=fig.subplotpars.bottom * (h - 0.2 - 0.17 * lines) / h)
        fig.suptitle(text, fontsize=8.5, y=1 - 0.08 / h, va="top")
    else:
        fig.axes[0].set_title("")
        fig.axes[0].set_title(text, fontsize=8.5, loc="left")
        fig.tight_layout()


def _value(v) -> str:
    if isinstance(v, (float, np.floating)):
        return f"{v:g}"
    return str(v)


# --------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------

def _parser():
    import argparse
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(prog="python -m routesim.plot", description="\n\n".join(doc[1:3]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path, metavar="RESULTS.nc", help="a stage's results file (results/<sweep>/<stage>.nc)")
    ap.add_argument("metric", nargs="?", default=None, metavar="METRIC",
                    help="the variable to draw (without it: list the file's metrics)")
    for role, what in (("x", "the horizontal axis (default rate_rps when it has several values)"),
                       ("hue", "one colour per value (default policy)"),
                       ("col", "one column of panels per value"), ("row", "one row of panels per value")):
        ap.add_argument(f"--{role}", default=None, metavar="DIM", help=what)
    ap.add_argument("--sel", action="append", default=[], metavar="DIM=VALUE",
                    help="keep only this value of a dimension; repeatable")
    ap.add_argument("--out", type=Path, default=None, metavar="FILE.png",
                    help="the figure, .png or .svg (default <RESULTS folder>/<stem>-<METRIC>.png)")
    ap.add_argument("-q", "--quiet", action="store_true", help="do not print the file written")
    return ap


def _open(path):
    """The results Dataset in ``path``; a PlotError naming RESULTS when it is missing,
    unreadable or not a routesim results file."""
    from . import results
    if not path.is_file():
        raise PlotError("RESULTS", "no such file" if not path.exists() else "not a file")
    try:
        ds = results.load(path)
    except Exception as exc:  # netCDF4 and xarray raise OSError, ValueError, KeyError… on a foreign file
        raise PlotError("RESULTS", f"not a netCDF results file ({type(exc).__name__}: {exc})".split("\n")[0]) \
            from None
    if not is_results(ds):
        raise PlotError("RESULTS", "not a routesim results file (no sweep_name, stage and routesim_version "
                                   "attributes); python -m routesim.sweep writes them")
    return ds


def _sel(items) -> dict:
    out = {}
    for item in items:
        dim, eq, value = item.partition("=")
        if not eq or not dim or not value:
            raise PlotError(f"--sel {item}", "expected DIM=VALUE, e.g. --sel scenario=steady")
        if dim in out:
            raise PlotError(f"--sel {item}", f"{dim} is selected twice")
        out[dim] = value
    return out


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        ds = _open(args.results)
        if args.metric is None:
            print(f"{args.results}: {ds.attrs['sweep_name']} / {ds.attrs['stage']}, "
                  + ", ".join(f"{d} {n}" for d, n in ds.sizes.items()))
            print(metrics_table(ds))
            return 0
        out = args.out or args.results.with_name(f"{args.results.stem}-{args.metric}.png")
        if out.suffix.lower() not in (".png", ".svg"):
            raise PlotError("--out", f"{out}: expected a .png or .svg file name")
        from .files import unwritable_file
        why = unwritable_file(out)
        if why is not None:
            raise PlotError("--out", why)
        fig = plot(ds, args.metric, args.x, args.hue, args.col, args.row, _sel(args.sel))
    except PlotError as exc:
        print(f"error: {args.results}: {exc}", file=sys.stderr)
        return 2
    from .drawing import DPI, save_file
    import matplotlib.pyplot as plt
    try:
        path = save_file(fig, out, DPI)
    except OSError as exc:
        print(f"error: {args.results}: --out: {out}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 2
    finally:
        plt.close(fig)
    if not args.quiet:
        print(f"wrote {path}")
    return 0


class _CallableModule(type(sys)):
    """This module, callable as :func:`plot` (``routesim.plot(ds, "ttft_p99")``), its
    other names (``routesim.plot.main``, ``routesim.plot.metrics``…) kept."""

    def __call__(self, *args, **kwargs):
        return plot(*args, **kwargs)


if __name__ != "__main__":  # imported (python -m runs a copy of it as __main__)
    sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    sys.exit(main())
