"""Compilation flags, in one place (style.md: no flags scattered through the code).

``cache=True`` keeps compiled kernels on disk between processes; ``fastmath`` stays
off because the metrics rely on NaN meaning "none completed".

Every module that defines a kernel imports its flags from here, so this is where
Numba is set up for routesim, before the first kernel is defined: the cache folder
(:mod:`routesim.compile_cache`) and how a call's error exit is marked
(:mod:`routesim.nrt`). ``import routesim`` itself imports neither Numba nor xarray:
a command imports what it uses.
"""

from . import compile_cache

compile_cache.use()  # before any kernel is defined: the kernels' cache follows their source
from . import nrt  # noqa: E402,F401  (before any kernel compiles: how a call's error exit is marked)

JIT = dict(cache=True, nogil=True, fastmath=False, error_model="numpy")
"""Flags for every compiled function that is not itself parallel."""

JIT_PARALLEL = dict(JIT, parallel=True)
"""Flags for the batch kernels, whose only job is the ``prange`` loop over runs."""
