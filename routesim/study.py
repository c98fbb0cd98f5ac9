"""Run the stages of a sweep in order: grids, selection, Datasets."""

from collections.abc import Callable

import numpy as np
import xarray as xr

from . import batch, grid as grid_mod
from .config import ConfigError, Selection, Stage, Sweep
from .results import to_dataset


def objective(ds: xr.Dataset, select: Selection) -> xr.DataArray:
    """The selection objective per candidate value: the mean over every other
    dimension (each condition weighted equally) of the mean over seeds of the metric."""
    per_condition = ds[select.metric].mean("seed")
    others = [d for d in per_condition.dims if d != select.parameter]
    return per_condition.mean(others)


def choose(ds: xr.Dataset, select: Selection):
    """The selected value (the first candidate among equals)."""
    obj = objective(ds, select).values
    if np.all(np.isnan(obj)):
        raise ValueError(f"objective {select.metric!r} is undefined for every candidate")
    i = int(np.nanargmax(obj) if select.maximize else np.nanargmin(obj))
    value = ds[select.parameter].values[i]
    return value.item() if hasattr(value, "item") else value


def _needed(sweep: Sweep, names):
    """The stages to run for ``names``: those plus the earlier stages whose selection they use."""
    if names is None:
        return list(sweep.stages)
    known = [s.name for s in sweep.stages]
    for n in names:
        if n not in known:
            raise ConfigError(sweep.path, "stages", f"no stage named {n!r} (stages: {', '.join(known)})")
    want = set(names)
    for stage in reversed(sweep.stages):
        if stage.name in want:
            for param in stage.inherit:
                src = [s for s in sweep.stages[: known.index(stage.name)]
                       if s.select and s.select.parameter == param][-1]
                want.add(src.name)
    return [s for s in sweep.stages if s.name in want]


def check_memory(sweep: Sweep, chunk_size: int | None = None) -> None:
    """Refuse up front a sweep whose stage would not fit in memory."""
    avail = grid_mod.available_bytes()
    if avail is None:
        return
    for stage in sweep.stages:
        need, runs = grid_mod.estimate_bytes(sweep, stage, chunk_size or 4096)
        if need > 0.8 * avail:
            raise ConfigError(sweep.path, stage.key,
                              f"stage {stage.name!r} ({runs:,} runs) needs about "
                              f"{need / 2**30:.1f} GiB, more than the {0.8 * avail / 2**30:.1f} GiB "
                              "this machine can give it; use fewer seeds, rates or swept values")


def run(sweep: Sweep, stages=None, show_progress: bool = True, chunk_size: int | None = None,
        on_stage: Callable[[Stage, xr.Dataset], None] | None = None) -> dict:
    """Run the sweep's stages in order; return {stage name: Dataset}.

    ``stages`` names a subset (earlier stages whose selection they need run too, and
    are returned as well). ``on_stage(stage, ds)`` is called as each stage finishes.
    """
    check_memory(sweep, chunk_size)
    todo = _needed(sweep, stages)
    selected, out = {}, {}
    for stage in todo:
        grid = grid_mod.build(sweep, stage, selected)
        with _progress(show_progress, grid.runs, stage.name) as bar:
            outcome = batch.simulate(grid, chunk_size, bar.update if bar else None)
        ds = to_dataset(sweep, grid, outcome, selected)
        if stage.select:
            value = choose(ds, stage.select)
            selected[stage.select.parameter] = value
            ds.attrs[f"selects_{stage.select.parameter}"] = value
        out[stage.name] = ds
        if on_stage is not None:
            on_stage(stage, ds)
    return out


class _progress:
    """A tqdm bar over runs, or nothing when quiet."""

    def __init__(self, show, total, label):
        self.show, self.total, self.label, self.bar = show, total, label, None

    def __enter__(self):
        if self.show:
            from tqdm.auto import tqdm
            self.bar = tqdm(total=self.total, desc=self.label, unit="run", leave=False)
        return self.bar

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
