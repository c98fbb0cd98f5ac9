"""Flat runs -> the xarray Dataset of interface.md, with units and descriptions."""

from pathlib import Path

import numpy as np
import xarray as xr

from .batch import Outcome
from .config import PARAM, Sweep
from .files import replace_atomically
from .grid import Grid
from .metrics import VARIABLES

PER_REPLICA = {"assigned": "assigned", "replica_completed": "completed",
               "replica_mean_in_system": "area"}  # Dataset variable <- REPLICA field
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
    dims = list(grid.coords)
    shape = grid.shape
    n_rep = grid.replicas
    data = {}
    for name in outcome.metrics.dtype.names:
        units, desc = VARIABLES[name]
        data[name] = (dims, outcome.metrics[name].reshape(shape), {"units": units, "description": desc})
    for name, field in PER_REPLICA.items():
        units, desc = VARIABLES[name]
        data[name] = (dims + ["replica"], outcome.replicas[field].reshape(shape + (n_rep,)),
                      {"units": units, "description": desc})
    units, desc = VARIABLES["queue_tail"]
    data["queue_tail"] = (dims + ["level"], outcome.tail.reshape(shape + (outcome.tail.shape[1],)),
                          {"units": units, "description": desc})
    hets = grid.coords["heterogeneity"]
    data["mean_service_ms"] = (["heterogeneity", "replica"],
                               np.array([sweep.heterogeneity[h] for h in hets]),
                               {"units": "ms", "description": "replica's mean service time of the reference request"})
    coords = {d: (d, np.asarray(v), _coord_attrs(d)) for d, v in grid.coords.items()}
    coords["replica"] = ("replica", np.arange(1, n_rep + 1), _coord_attrs("replica"))
    coords["level"] = ("level", np.arange(outcome.tail.shape[1]), _coord_attrs("level"))
    stage = grid.stage
    attrs = {
        "sweep_name": sweep.name,
        "stage": stage.name,
        "routesim_version": version(),
        "sweep_file": str(sweep.path),
        "sweep_text": sweep.text,
    }
    for name in stage.inherit:
        attrs[f"selected_{name}"] = selected[name]
    values = grid.coords
    for p in PARAM.values():  # parameters that are not dimensions, with their value
        if p.name not in values:
            attrs[p.name] = stage.values[p.name][0] if p.name not in stage.inherit else selected[p.name]
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _coord_attrs(dim):
    if dim in PARAM:
        return {"units": PARAM[dim].units, "description": PARAM[dim].help}
    units, desc = _DIM_ATTRS[dim]
    return {"units": units, "description": desc} if units else {"description": desc}


def write_atomic(ds: xr.Dataset, path: Path) -> None:
    """Write ``ds`` to ``path`` as netCDF (h5netcdf) via a temporary name and a rename."""
    replace_atomically(path, lambda tmp: ds.to_netcdf(tmp, engine="h5netcdf"))
