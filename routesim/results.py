"""Flat runs -> the xarray Dataset of interface.md, with units and descriptions."""

from pathlib import Path

import numpy as np
import xarray as xr

from .batch import Outcome
from .config import PARAM, Sweep
from .files import replace_atomically
from .grid import Grid
from .queue.metrics import VARIABLES

PER_REPLICA = {"assigned": "assigned", "replica_completed": "completed",
               "replica_mean_in_system": "mean_in_system"}  # Dataset variable <- REPLICA field
_DIM_ATTRS = {
    "policy": ("", "routing policy"),
    "rate_rps": ("requests/s", "base arrival rate"),
    "heterogeneity": ("", "named setting of the replicas' mean service times"),
    "scenario": ("", "named list of scenario events"),
    "seed": ("", "seed of the common-random-number workload"),
    "replica": ("", "replica number, 1-based"),
    "level": ("requests", "requests held by a replica (waiting + in service)"),
}


def version() -> str:
    from . import __version__
    return __version__


def to_dataset(sweep: Sweep, grid: Grid, outcome: Outcome, selected: dict) -> xr.Dataset:
    """Reshape a grid's outcome into named dimensions (interface.md, "Results")."""
    if sweep.kind == "batching":
        from .batching.grid import to_dataset as token_dataset
        return token_dataset(sweep, grid, outcome, selected)
    dims = list(grid.coords)
    shape = grid.shape
    n_rep = grid.replicas
    data = run_variables(dims, lambda a, extra: a.reshape(shape + extra), outcome.metrics, outcome.replicas,
                         outcome.tail)
    hets = grid.coords["heterogeneity"]
    data["mean_service_ms"] = (["heterogeneity", "replica"],
                               np.array([sweep.heterogeneity[h] for h in hets]),
                               {"units": "ms", "description": "replica's mean service time of the reference request"})
    coords = {d: (d, np.asarray(v), coord_attrs(d)) for d, v in grid.coords.items()}
    coords.update(replica_level_coords(n_rep, outcome.tail.shape[1]))
    stage = grid.stage
    attrs = provenance(sweep, stage)
    attrs.update(selected_attrs(stage, selected))
    values = grid.coords
    for p in PARAM.values():  # parameters that are not dimensions, with their value
        if p.name not in values:
            attrs[p.name] = stage.values[p.name][0] if p.name not in stage.inherit else selected[p.name]
    return xr.Dataset(data, coords=coords, attrs=attrs)


def variable_attrs(name, table=VARIABLES) -> dict:
    """The ``units`` and ``description`` attrs of a variable from its table entry."""
    units, desc = table[name]
    return {"units": units, "description": desc}


def run_variables(dims, shaped, metrics, replicas, tail) -> dict:
    """The per-run variables of a Dataset: every metric over ``dims``, the per-replica
    ones over ``dims + replica``, ``queue_tail`` over ``dims + level``. ``shaped(a,
    extra)`` reshapes an array over flat runs (then ``extra`` axes) to ``dims + extra``;
    ``metrics`` METRICS records, ``replicas`` REPLICA records (runs, replicas) and
    ``tail`` (runs, levels), all after :func:`metrics.run_metrics_nb`."""
    data = {}
    for name in metrics.dtype.names:
        data[name] = (dims, shaped(metrics[name], ()), variable_attrs(name))
    for name, field in PER_REPLICA.items():
        data[name] = (dims + ["replica"], shaped(replicas[field], (replicas.shape[-1],)), variable_attrs(name))
    data["queue_tail"] = (dims + ["level"], shaped(tail, (tail.shape[1],)), variable_attrs("queue_tail"))
    return data


def replica_level_coords(n_replicas, n_levels) -> dict:
    """The ``replica`` (1-based) and ``level`` coordinates."""
    return {"replica": ("replica", np.arange(1, n_replicas + 1), coord_attrs("replica")),
            "level": ("level", np.arange(n_levels), coord_attrs("level"))}


def provenance(sweep: Sweep, stage) -> dict:
    """The attrs that say where a Dataset comes from: sweep, stage, package version,
    sweep file and its text (read back by :func:`sweep_of`)."""
    return {
        "sweep_name": sweep.name,
        "stage": stage.name,
        "routesim_version": version(),
        "sweep_file": str(sweep.path),
        "sweep_text": sweep.text,
    }


def selected_attrs(stage, selected: dict) -> dict:
    """``selected_<name>``: the value of each parameter the stage inherits from a selection."""
    return {f"selected_{name}": selected[name] for name in stage.inherit}


def sweep_of(ds: xr.Dataset) -> Sweep:
    """The Sweep whose text a Dataset carries (see :func:`provenance`)."""
    from .config import parse_sweep
    return parse_sweep(ds.attrs["sweep_text"], ds.attrs.get("sweep_file", "<dataset>"))


def coord_attrs(dim, params=PARAM):
    """Attrs of a dimension: a parameter's units and help from ``params``, or a standard one's."""
    if dim in params:
        return {"units": params[dim].units, "description": params[dim].help}
    units, desc = _DIM_ATTRS[dim]
    return {"units": units, "description": desc} if units else {"description": desc}


def write_atomic(ds: xr.Dataset, path: Path) -> None:
    """Write ``ds`` to ``path`` as netCDF (h5netcdf) via a temporary name and a rename."""
    replace_atomically(path, lambda tmp: ds.to_netcdf(tmp, engine="h5netcdf"))
