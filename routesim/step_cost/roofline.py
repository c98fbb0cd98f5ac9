"""The roofline step cost (docs/model.md "The step cost"): an iteration is bound either
by memory (reading the weights once and the KV it attends to) or by compute (linear
FLOPs of every computed token, attention FLOPs of every token pair):

    mem  = weights + per_kv_token·(K + R)
    comp = per_token·(U + n) + per_token_pair·(Q + K)
    d    = f · (base + max(mem, comp))    (ms)

``U`` prefill tokens, ``Q`` prefill attention pairs, ``R`` KV tokens the prefill chunks
attend to, ``n`` decoding sequences and ``K`` their KV tokens; ``f`` the replica's time
factor, applied by the engine. Its parameters are the sweep's ``[replica] roofline_ms``
table; their defaults are written here and nowhere else.
"""

import numba as nb
import numpy as np
from numba.extending import register_jitable

from ..conf import JIT
from ..schema import Param

NAME = "roofline"
CODE = 1
TABLE = "roofline_ms"
SUMMARY = "roofline_ms: overhead + the larger of memory and compute time, docs/model.md"
"""What the ``step_cost`` key's help says of this form."""

PARAMS = (
    Param("roofline_ms_base", "replica", ("roofline_ms", "base"), 4.0, "ms", "roofline: fixed overhead of an iteration", low=0, low_open=True, when=("step_cost", (NAME,))),
    Param("roofline_ms_weights", "replica", ("roofline_ms", "weights"), 5.99, "ms", "roofline: reading the weights once (weight bytes / effective bandwidth)", low=0, when=("step_cost", (NAME,))),
    Param("roofline_ms_per_kv_token", "replica", ("roofline_ms", "per_kv_token"), 4.89e-5, "ms", "roofline: reading one token's KV (KV bytes per token / effective bandwidth), for the decoders' KV and the prefill chunks' context", low=0, when=("step_cost", (NAME,))),
    Param("roofline_ms_per_token", "replica", ("roofline_ms", "per_token"), 0.0271, "ms", "roofline: linear FLOPs of one computed token, prefill or decode (FLOPs per token / effective peak)", low=0, when=("step_cost", (NAME,))),
    Param("roofline_ms_per_token_pair", "replica", ("roofline_ms", "per_token_pair"), 8.84e-7, "ms", "roofline: attention FLOPs of one (query, key) token pair (FLOPs per pair / effective peak)", low=0, when=("step_cost", (NAME,))),
)
"""The coefficients ``c`` in this order: base, weights, per_kv_token, per_token,
per_token_pair."""

MEMORY = (1, 2)
COMPUTE = (3, 4)
"""The coefficients of each side (indices into PARAMS): a side's pair shares one
resource (bandwidth, peak), which calibrate's ties use."""


@register_jitable
def sides(c, U, Q, n, K, R):
    """(mem, comp) in ms, scalars or arrays (plain Python, and compiled where a kernel calls it): the memory time (weights once + KV read) and
    the compute time (linear + attention FLOPs)."""
    mem = c[1] + c[2] * (K + R)
    comp = c[3] * (U + n) + c[4] * (Q + K)
    return mem, comp


def duration(c, U, Q, n, K, R):
    """The iteration's time before the replica's factor (ms): base + max(mem, comp).
    ``c`` (≥ 5,) the coefficients of PARAMS; the rest scalars or arrays of one shape."""
    mem, comp = sides(c, U, Q, n, K, R)
    return c[0] + np.maximum(mem, comp)


duration_nb = nb.njit(inline="always", **JIT)(duration)
""":func:`duration` compiled: what the engine calls (routesim.step_cost.duration_nb)."""


def columns(U, Q, n, K, R, memory):
    """The design matrix of a fit (N, 5) once each step is assigned to its bound
    (``memory`` (N,) bool): the formula is then linear in ``c``, column 0 the base and
    column j the bound side at the j-th unit vector — [1, 1, K + R, 0, 0] for a
    memory-bound step, [1, 0, 0, U + n, Q + K] for a compute-bound one."""
    N = np.size(U)
    m = np.asarray(memory, dtype=float)
    out = [np.ones(N)]
    for e in np.eye(len(PARAMS))[1:]:
        mem, comp = sides(e, U, Q, n, K, R)
        out.append(m * mem + (1 - m) * comp)
    return np.column_stack([np.broadcast_to(x, (N,)) for x in out])
