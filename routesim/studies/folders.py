"""A results folder as the serving and incident studies read it: every stage's Dataset,
or only what each stage file says it is (its attributes)."""

from pathlib import Path

from .. import results


def load(results_dir) -> dict:
    """{stage name: Dataset} of every ``*.nc`` stage file in a results folder."""
    out = {}
    for path in sorted(Path(results_dir).glob("*.nc")):
        if path.name.startswith("trace"):
            continue
        ds = results.load(path)
        out[ds.attrs.get("stage", path.stem)] = ds
    return out


def stage_attrs(results_dir) -> dict:
    """{file name: attrs} of every ``*.nc`` stage file in a results folder, read without
    the data (a file that is not netCDF: empty attrs)."""
    import xarray as xr
    out = {}
    for path in sorted(Path(results_dir).glob("*.nc")):
        if path.name.startswith("trace"):
            continue
        try:
            with xr.open_dataset(path, engine=results.ENGINE) as ds:
                out[path.name] = dict(ds.attrs)
        except Exception:  # not a netCDF file: not a stage of any study
            out[path.name] = {}
    return out
