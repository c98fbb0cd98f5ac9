"""Readable summary tables of a stage's Dataset (what the command line prints)."""

import xarray as xr

from . import models
from .config import Selection
from .study import objective
from .tables import text_table


def selection_rows(ds: xr.Dataset, select: Selection):
    obj = objective(ds, select)
    chosen = ds.attrs.get(f"selects_{select.parameter}")
    table = models.of_dataset(ds).variables()
    percent = table[select.metric][0] == "1"  # a fraction: shown in % like the policy table
    rows = [[f"{v:g}" if isinstance(v, float) else v, f"{100 * o:.4f}" if percent else f"{o:.6g}",
             "← selected" if v == chosen else ""]
            for v, o in zip(obj[select.parameter].values.tolist(), obj.values.tolist())]
    goal = "max" if select.maximize else "min"
    return [select.parameter, f"mean {select.metric}{' %' if percent else ''} ({goal})", ""], rows


def render(ds: xr.Dataset, select: Selection | None = None) -> str:
    """The stage's printed summary: its selection table (if any) and its policy table."""
    title = f"stage {ds.attrs['stage']}: {ds.attainment.size} runs"
    for k, v in ds.attrs.items():
        if k.startswith("selected_"):
            title += f", {k[len('selected_'):]} = {v:g} (selected)"
    parts = [title]
    if select is not None:
        parts.append(text_table(*selection_rows(ds, select), align="lrl"))
    parts.append(models.of_dataset(ds).policy_table(ds))
    return "\n\n".join(parts)
