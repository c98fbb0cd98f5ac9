"""A results folder as the serving and incident studies read it: every stage's Dataset."""

from pathlib import Path

import xarray as xr


def load(results_dir) -> dict:
    """{stage name: Dataset} of every ``*.nc`` stage file in a results folder."""
    out = {}
    for path in sorted(Path(results_dir).glob("*.nc")):
        if path.name.startswith("trace"):
            continue
        with xr.open_dataset(path, engine="h5netcdf") as f:
            ds = f.load()
        out[ds.attrs.get("stage", path.stem)] = ds
    return out
