"""Compilation flags, in one place (style.md: no flags scattered through the code).

``cache=True`` keeps compiled kernels on disk between processes; ``fastmath`` stays
off because the metrics rely on NaN meaning "none completed".
"""

JIT = dict(cache=True, nogil=True, fastmath=False, error_model="numpy")
"""Flags for every compiled function that is not itself parallel."""

JIT_PARALLEL = dict(JIT, parallel=True)
"""Flags for the batch kernels, whose only job is the ``prange`` loop over runs."""
