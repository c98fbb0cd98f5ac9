"""Pools of replicas (the seam for prefill/decode disaggregation), compiled.

A replica serves in one pool, its ``role`` (REPLICA.role, a :class:`.dtypes.Role`
code). The routers choose among the replicas of the pool a request is routed into:
:func:`members_nb` is the one place that says which those are, and the engine hands
the list to the routers (router.eligible_nb iterates over it, nothing else). Today
every replica is ``COLOCATED`` and every request is routed into that pool
(:data:`ROUTED`), so a pool is all replicas, in replica order.
"""

import numba as nb
import numpy as np

from ..conf import JIT
from .dtypes import Role

ROUTED = np.int64(Role.COLOCATED)
"""The pool a request's attempts are routed into (typed: not a literal argument)."""


@nb.njit(**JIT)
def members_nb(rep, role):
    """The replicas of ``rep`` (replicas,) REPLICA whose role is ``role``, ascending:
    a new (members,) int64 array (once per run)."""
    n = 0
    for i in range(rep.shape[0]):
        if rep[i].role == role:
            n += 1
    out = np.empty(n, np.int64)
    n = 0
    for i in range(rep.shape[0]):
        if rep[i].role == role:
            out[n] = i
            n += 1
    return out
