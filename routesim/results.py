"""What both models' Datasets share (interface.md, "Results"): dimension and variable
attrs, the provenance attrs, the sweep a Dataset carries, and writing one whole; each
model reshapes its flat runs into a Dataset itself (``routesim/<model>/grid.py``).
"""

import functools
import platform
import subprocess
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


ENVIRONMENT_ATTRS = ("routesim_commit", "python_version", "numpy_version", "numba_version",
                     "llvmlite_version", "xarray_version", "cpu")
"""The attrs that describe the software and machine a Dataset was made with, not the
Dataset: the same on every run of one checkout on one machine, different from one
commit to the next (``tools/pin_outputs.py`` leaves them out)."""


@functools.cache
def environment() -> dict:
    """The :data:`ENVIRONMENT_ATTRS` of this process, as text (README, "Reproducibility":
    what the bit-for-bit promise depends on). ``cpu``: the architecture, the CPU Numba
    compiles for and whether it has the features that make NumPy's and the C library's
    transcendental functions round differently (AVX-512, AVX2, FMA), from LLVM's view of
    the host: what the CPU has, not what ``NPY_DISABLE_CPU_FEATURES`` lets NumPy use, so
    the same on one machine whatever NumPy is told (the Datasets are the same too)."""
    import llvmlite
    import numba
    import numpy
    return {
        "routesim_commit": git_commit(),
        "python_version": platform.python_version(),
        "numpy_version": numpy.__version__,
        "numba_version": numba.__version__,
        "llvmlite_version": llvmlite.__version__,
        "xarray_version": xr.__version__,
        "cpu": cpu(),
    }


MADE_WITH = "Made with"
"""How :func:`made_with` begins: a document's provenance line (``tools/pin_outputs.py``
leaves it out)."""


def made_with(attrs) -> str:
    """One line for a generated document: the routesim version and commit, and the
    :data:`ENVIRONMENT_ATTRS` of the Dataset whose ``attrs`` are given ("not recorded"
    for a Dataset written before routesim recorded them)."""
    a = {k: attrs.get(k, "not recorded") for k in ENVIRONMENT_ATTRS}
    return (f"{MADE_WITH} routesim {attrs.get('routesim_version', 'not recorded')} "
            f"(commit {a['routesim_commit']}), Python {a['python_version']}, NumPy {a['numpy_version']}, "
            f"Numba {a['numba_version']} (llvmlite {a['llvmlite_version']}), xarray {a['xarray_version']}; "
            f"CPU: {a['cpu']}.")


def git_commit(root: Path | None = None) -> str:
    """The commit of the checkout routesim is imported from, ``"<hash> (uncommitted
    changes)"`` when a tracked file differs from it, or ``"not a git checkout"`` (an
    installed copy, or git missing)."""
    root = Path(__file__).resolve().parents[1] if root is None else root

    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=30, check=True).stdout.strip()
    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != root.resolve():
            return "not a git checkout"     # routesim installed inside someone else's repository
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "not a git checkout"
    return f"{commit} (uncommitted changes)" if dirty else commit


def cpu() -> str:
    """E.g. ``"x86_64, Numba target skylake-avx512: avx512f avx2 fma"`` (the features
    listed are those of AVX-512F, AVX2 and FMA the CPU has)."""
    from llvmlite import binding
    from numba.core import config
    name = config.CPU_NAME or binding.get_host_cpu_name()
    features = binding.get_host_cpu_features()
    have = [f for f in ("avx512f", "avx2", "fma") if features.get(f)]
    return f"{platform.machine()}, Numba target {name}: {' '.join(have) or 'none of avx512f avx2 fma'}"


def variable_attrs(name, table) -> dict:
    """The ``units`` and ``description`` attrs of a variable from its table entry."""
    units, desc = table[name]
    return {"units": units, "description": desc}


def provenance(sweep: Sweep, stage) -> dict:
    """The attrs that say where a Dataset comes from: sweep, stage, package version,
    sweep file and its text (read back by :func:`sweep_of`), and the software and
    machine it was made with (:func:`environment`).

    No ``Conventions = "CF-1.10"``: CF asks for UDUNITS units, and the variables' units
    name what is counted (``requests``, ``tokens``, ``requests/s``), which UDUNITS does
    not know; claiming CF would take ``1`` and ``s-1`` with the noun in a ``long_name``."""
    return {
        "sweep_name": sweep.name,
        "stage": stage.name,
        "routesim_version": version(),
        **environment(),
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


def run_dims(ds: xr.Dataset) -> list:
    """The dimensions that index a Dataset's runs, in order: those of its per-run metric
    ``attainment`` (both models have it), which every per-run variable shares."""
    return list(ds["attainment"].dims)


def run_table(ds: xr.Dataset):
    """A tidy pandas DataFrame of a stage's runs: one row per run, a column per run
    dimension (its coordinate) and per variable over exactly those dimensions (the
    per-run scalars; per-replica and per-level variables are left out)."""
    dims = run_dims(ds)
    names = [v for v in ds.data_vars if set(ds[v].dims) == set(dims)]
    return ds[names].transpose(*dims).to_dataframe().reset_index()[dims + names]


def write_csv(ds: xr.Dataset, path) -> Path:
    """Write :func:`run_table` of ``ds`` to ``path`` as CSV (atomically); return ``path``."""
    table = run_table(ds)
    return replace_atomically(path, lambda tmp: table.to_csv(tmp, index=False))
