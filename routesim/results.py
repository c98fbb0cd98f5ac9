"""What both models' Datasets share (interface.md, "Results"): dimension and variable
attrs, the provenance attrs, the sweep a Dataset carries, and writing one whole; each
model reshapes its flat runs into a Dataset itself (``routesim/<model>/grid.py``).
"""

from pathlib import Path

import xarray as xr

from .config import Sweep
from .files import replace_atomically


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


def variable_attrs(name, table) -> dict:
    """The ``units`` and ``description`` attrs of a variable from its table entry."""
    units, desc = table[name]
    return {"units": units, "description": desc}


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


def coord_attrs(dim, params=None):
    """Attrs of a dimension: a parameter's units and help from ``params``, or a standard one's."""
    if params and dim in params:
        return {"units": params[dim].units, "description": params[dim].help}
    units, desc = _DIM_ATTRS[dim]
    return {"units": units, "description": desc} if units else {"description": desc}


ENGINE = "netcdf4"
"""xarray's engine for routesim's netCDF files: netCDF4-python, Unidata's library (the
reference implementation of the format). It reads a study's results file (about 45
variables over 8 dimensions) in 30 ms where h5netcdf took 470, and writes one in 60 ms
where h5netcdf took 400: h5netcdf looks each dimension up again in the HDF5 file for
every variable that uses it (benchmarks: ``python -m benchmarks``, "netCDF write")."""


def write_atomic(ds: xr.Dataset, path: Path) -> None:
    """Write ``ds`` to ``path`` as netCDF (:data:`ENGINE`) via a temporary name and a rename."""
    replace_atomically(path, lambda tmp: ds.to_netcdf(tmp, engine=ENGINE))


def load(path) -> xr.Dataset:
    """The Dataset in the netCDF file ``path``, read whole into memory (the file is closed again)."""
    return xr.load_dataset(path, engine=ENGINE)


def to_dataset(sweep: Sweep, grid, outcome, selected: dict) -> xr.Dataset:
    """Reshape a grid's outcome into named dimensions (interface.md, "Results")."""
    return sweep.model.to_dataset(sweep, grid, outcome, selected)
