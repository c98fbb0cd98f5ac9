"""What every claim of the least-outstanding-routing study shares: paired comparisons by
seed, the per-seed range written in the document, loading a stage's Dataset, and how
its figures are saved (:mod:`routesim.studies.plotting`: PNG and SVG, fixed SVG hash
salt, no dates)."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402

from .. import plotting  # noqa: E402

CAPACITY_RPS = 60.0     # 8 default replicas, 10 s + 50 s windows without drain (the former sweeps/batching-capacity.toml; issue 23 re-measures it with python -m routesim.capacity)
FIGURES = Path("figures")
DPI = 110
"""Resolution of the study's PNGs."""


def paired(ds, var, a, b):
    """Per-seed difference var[a] - var[b] (a Dataset with a policy and a seed axis)."""
    return ds[var].sel(policy=a) - ds[var].sel(policy=b)


def lead(diff):
    """'below' if every seed's difference is < 0, 'above' if every one is > 0, else None."""
    d = np.asarray(diff)
    if (d < 0).all():
        return "below"
    if (d > 0).all():
        return "above"
    return None


def spread(d, digits=0, scale=1.0):
    """'mean [min, max]' of per-seed values, signed."""
    d = np.asarray(d) * scale
    return f"{np.mean(d):+.{digits}f} [{np.min(d):+.{digits}f}, {np.max(d):+.{digits}f}]"


def squeeze(ds):
    """Drop the heterogeneity and scenario axes when they hold one value."""
    for dim in ("heterogeneity", "scenario"):
        if dim in ds.dims and ds.sizes[dim] == 1:
            ds = ds.isel({dim: 0}, drop=True)
    return ds


def open_stage(path):
    """A stage's Dataset with every length-one axis dropped (its value kept in the attrs,
    beside the parameters that were never axes), or None if not run."""
    path = Path(path)
    if not path.exists():
        return None
    ds = xr.open_dataset(path, engine="h5netcdf")
    for dim, n in ds.sizes.items():
        if n == 1 and dim in ds.coords:
            v = ds[dim].values[0]
            ds.attrs.setdefault(dim, v.item() if hasattr(v, "item") else v)
    return squeeze(ds).squeeze(drop=True)


def save(fig, stem, figures_dir):
    """Write ``stem``.png (at :data:`DPI`) and ``stem``.svg into figures_dir, their layout
    frozen first (:func:`routesim.studies.plotting.save`); returns both paths."""
    return plotting.save(fig, figures_dir, stem, DPI, freeze_layout=True)


def scenario_events(ds, name):
    """A scenario's events as written in the sweep file the Dataset carries (its attrs'
    ``sweep_text``): a list of {at_s, replica, fail | fail_fast | recover | ...}."""
    import tomllib
    return tomllib.loads(ds.attrs["sweep_text"])["scenarios"][name]["events"]


def replicas_at(events, kind):
    """(sorted replicas, times) of the events of one kind (e.g. "fail")."""
    hits = [e for e in events if e.get(kind)]
    return sorted({e["replica"] for e in hits}), sorted({e["at_s"] for e in hits})
