"""What a command's own process does to start fast, beside importing only what it uses.

xarray asks of every array it wraps whether it is a dask array, and when dask is
installed (the ``cluster`` and ``test`` extras install it) that question imports
``dask.array``, with much of SciPy; writing a netCDF file then asks dask for its
scheduler, which imports ``distributed``. Together about 0.35 s of CPU in a process whose
sweep runs locally and never uses dask (a one-run sweep simulates for milliseconds).
:func:`without_dask` makes such a process see dask as not installed, as on a plain
``pip install routesim``: the Datasets are NumPy-backed either way, and the same.
"""

import gc
import sys


def without_dask() -> bool:
    """Make ``import dask`` fail in this process, as if dask were not installed, unless
    xarray or dask is imported already (this process may then use them together, and
    nothing is changed). Only for a command's own process that runs locally (not
    ``--workers`` or ``--scheduler``), before it imports xarray. True when done."""
    if any(name in sys.modules for name in ("xarray", "dask")):
        return False
    sys.modules["dask"] = None  # Python's way to make an import fail: ModuleNotFoundError
    return True


def freeze() -> None:
    """Leave what is alive now out of the cyclic garbage collector's walks: numba,
    xarray and pandas, once imported, live as long as the process, and every full
    collection would walk their hundreds of thousands of objects again (0.3-0.5 s of a
    study, and about as much at exit)."""
    gc.freeze()
