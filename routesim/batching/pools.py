"""Pools of replicas (the seam for prefill/decode disaggregation), compiled.

A replica serves in one pool, its ``role`` (REPLICA.role, a :class:`.dtypes.Role`
code). The routers choose among the replicas of the pool a request is routed into:
:func:`members_nb` is the one place that says which those are, and the engine hands
the list to the routers (router.eligible_nb iterates over it, nothing else). The roles
come from ``[pools] prefill`` (:func:`roles`, written into REPLICA.role by
runs.replica_records). Without pools every replica is ``COLOCATED`` and every request
is routed into that pool (:data:`ROUTED`): all replicas, in replica order; with pools
the engine routes a pair, a prefill replica among :data:`PREFILL`'s members and a
decode replica among :data:`DECODE`'s (pd_engine.route_pair_nb).
"""

import numba as nb
import numpy as np

from ..conf import JIT
from .dtypes import Role

ROUTED = np.int64(Role.COLOCATED)
"""The pool a co-located request's attempts are routed into (typed: not a literal argument)."""
PREFILL = np.int64(Role.PREFILL)
"""The prefill pool (a disaggregated attempt's first replica; pd_engine.route_pair_nb)."""
DECODE = np.int64(Role.DECODE)
"""The decode pool (its second)."""


def roles(prefill, replicas):
    """The replicas' roles, (runs, replicas) int64 Role codes, from each run's count of
    prefill replicas ``prefill`` (runs,): replicas ``0 … prefill - 1`` serve in the
    prefill pool, the rest in the decode pool; a run with none is co-located."""
    prefill = np.asarray(prefill, np.int64).reshape(-1, 1)
    i = np.arange(replicas).reshape(1, -1)
    return np.where(prefill == 0, Role.COLOCATED, np.where(i < prefill, Role.PREFILL, Role.DECODE)).astype(np.int64)


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
