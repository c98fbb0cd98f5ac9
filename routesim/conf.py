"""Compilation flags, in one place (style.md: no flags scattered through the code).

``cache=True`` keeps compiled kernels on disk between processes; ``fastmath`` stays
off because the metrics rely on NaN meaning "none completed".

Every module that defines a kernel imports its flags from here, so this is where
Numba is set up for routesim, before the first kernel is defined: the cache folder
(:mod:`routesim.compile_cache`) and how a call's error exit is marked
(:mod:`routesim.nrt`). ``import routesim`` itself imports neither Numba nor xarray:
a command imports what it uses.
"""

import sys

from . import compile_cache

compile_cache.use()  # before any kernel is defined: the kernels' cache follows their source
from . import nrt  # noqa: E402,F401  (before any kernel compiles: how a call's error exit is marked)


def _cpu_target_without_scipy_linalg():
    """Set up Numba's CPU target (its implementations' registries) now, with
    ``scipy.linalg`` hidden unless the process has already imported it.

    Numba sets its target up on the first kernel it compiles or loads from the cache, and
    on the way ``numba.np.arraymath`` probes for a BLAS by importing
    ``scipy.linalg.cython_blas``: importing ``scipy.linalg`` is 0.15-0.2 s, a quarter of
    a one-run sweep's whole process (docs/performance.md, "One run's whole process"). The
    probe's answer (``arraymath._HAVE_BLAS``) only chooses how ``np.correlate`` and
    ``np.convolve`` take their inner product, which no routesim kernel calls
    (tests/test_startup.py checks both); Numba's linear algebra still imports
    ``scipy.linalg`` itself when a kernel using it compiles. A process that has imported
    ``scipy.linalg`` keeps it and Numba finds its BLAS, as before."""
    from numba.core.registry import cpu_target
    hide = "scipy.linalg" not in sys.modules
    if hide:
        sys.modules["scipy.linalg"] = None  # an import of it, or of a submodule, fails
    try:
        cpu_target.target_context.refresh()
    finally:
        if hide:
            del sys.modules["scipy.linalg"]


_cpu_target_without_scipy_linalg()

JIT = dict(cache=True, nogil=True, fastmath=False, error_model="numpy")
"""Flags for every compiled function that is not itself parallel."""

JIT_PARALLEL = dict(JIT, parallel=True)
"""Flags for the batch kernels, whose only job is the ``prange`` loop over runs."""
