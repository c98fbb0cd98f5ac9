"""The linear step cost (token-model.md §2.3), the default: an iteration of ``U`` prefill
tokens, ``Q`` prefill attention pairs, ``n`` decoding sequences holding ``K`` KV tokens
lasts

    d = f · (c_0 + c_pf·U + c_attn·Q + c_dec·n + c_kv·K)    (ms)

(``f`` the replica's time factor, applied by the engine). Its parameters are the sweep's
``[replica] step_ms`` table; their defaults are written here and nowhere else.
"""

import numba as nb
import numpy as np

from ..conf import JIT
from ..schema import Param

NAME = "linear"
CODE = 0
TABLE = "step_ms"
SUMMARY = "step_ms, token-model.md §2.3"
"""What the ``step_cost`` key's help says of this form."""

PARAMS = (
    Param("step_ms_base", "replica", ("step_ms", "base"), 6.5, "ms", "c_0: fixed time of an iteration", low=0, low_open=True, when=("step_cost", (NAME,))),
    Param("step_ms_per_prefill_token", "replica", ("step_ms", "per_prefill_token"), 0.0198, "ms", "c_pf: time per computed prompt token", low=0, when=("step_cost", (NAME,))),
    Param("step_ms_per_prefill_token_pair", "replica", ("step_ms", "per_prefill_token_pair"), 8.4e-7, "ms", "c_attn: time per prefill attention token pair", low=0, when=("step_cost", (NAME,))),
    Param("step_ms_per_decode_sequence", "replica", ("step_ms", "per_decode_sequence"), 0.10, "ms", "c_dec: time per decoding sequence", low=0, when=("step_cost", (NAME,))),
    Param("step_ms_per_kv_token", "replica", ("step_ms", "per_kv_token"), 5.4e-5, "ms", "c_kv: time per KV token of the decoding sequences", low=0, when=("step_cost", (NAME,))),
)
"""The coefficients ``c`` in this order: c[0] = c_0, c[1] = c_pf, c[2] = c_attn, c[3] =
c_dec, c[4] = c_kv."""


def duration(c, U, Q, n, K, R):
    """The iteration's time before the replica's factor (ms): the sum left to right.
    ``c`` (≥ 5,) the coefficients of PARAMS; ``U``, ``Q``, ``n``, ``K`` (and ``R``, the
    prefill chunks' context, unused here) scalars or arrays of one shape."""
    return c[0] + c[1] * U + c[2] * Q + c[3] * n + c[4] * K


duration_nb = nb.njit(inline="always", **JIT)(duration)
""":func:`duration` compiled: what the engine calls (routesim.step_cost.duration_nb)."""


def columns(U, Q, n, K, R):
    """The design matrix of a fit (N, 5): the formula is linear in ``c``, so column j is
    :func:`duration` at the j-th unit vector (1, U, Q, n, K)."""
    N = np.size(U)
    return np.column_stack([np.broadcast_to(duration(e, U, Q, n, K, R), (N,)) for e in np.eye(len(PARAMS))])
