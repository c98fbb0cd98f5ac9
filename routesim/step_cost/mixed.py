"""The mixed step cost (docs/model.md "The step cost"): the roofline, plus the decoders'
KV read paid again in a step that also computes prefill chunks. In a mixed step (a
prefill chunk beside decoding sequences) an engine runs the chunk's attention and the
decoders' attention as separate kernels (vLLM splits a chunked-prefill batch's
attention into its prefill and decode parts); the decode part streams the decoders' KV
while nothing else computes, so its read is not hidden under the chunk's compute:

    mem  = weights + per_kv_token·(K + R)
    comp = per_token·(U + n) + per_token_pair·(Q + K)
    d    = f · (base + max(mem, comp) + per_mixed_kv_token·min(U, 1)·K)    (ms)

``min(U, 1)`` is 1 in a step that computes prefill tokens and 0 otherwise (``U`` counts
tokens, an integer), so a decode-only step costs what the roofline says and a mixed
step pays ``per_mixed_kv_token`` per KV token of its decoders on top. ``U``, ``Q``,
``R``, ``n``, ``K`` as in routesim.step_cost.roofline, whose sides this form shares;
``f`` the replica's time factor, applied by the engine. Its parameters are the sweep's
``[replica] mixed_ms`` table: the roofline's five, with the roofline's defaults (read
from its module), and ``per_mixed_kv_token`` (default 0: the roofline until a fit or a
sweep says otherwise).

How it differs from ``overlap``: overlap charges a share ``kappa`` of the shorter side
in every step, decode-only ones included; this form charges only mixed steps, and in
proportion to their decoders' KV whichever side is the longer.
"""

import numba as nb
import numpy as np

from ..conf import JIT
from ..schema import Param
from . import roofline

NAME = "mixed"
CODE = 3
TABLE = "mixed_ms"
SUMMARY = "mixed_ms: the roofline plus the decoders' KV read again in a step with prefill, docs/model.md"
"""What the ``step_cost`` key's help says of this form."""

PARAMS = (
    *(Param(f"{TABLE}_{p.path[-1]}", p.section, (TABLE, p.path[-1]), p.default, p.units,
            p.help.replace("roofline:", "mixed:", 1), low=p.low, low_open=p.low_open, when=("step_cost", (NAME,)))
      for p in roofline.PARAMS),
    Param(f"{TABLE}_per_mixed_kv_token", "replica", (TABLE, "per_mixed_kv_token"), 0.0, "ms", "mixed: time per KV token of the decoding sequences in a step that also computes prefill tokens, on top of the roofline (their attention not hidden under the chunk's compute)", low=0, when=("step_cost", (NAME,))),
)
"""The coefficients ``c`` in this order: base, weights, per_kv_token, per_token,
per_token_pair (the roofline's), per_mixed_kv_token."""

MIXED = 5
"""Index of per_mixed_kv_token in PARAMS."""


def duration(c, U, Q, n, K, R):
    """The iteration's time before the replica's factor (ms): base + max(mem, comp) +
    per_mixed_kv_token·min(U, 1)·K, left to right. ``c`` (≥ 6,) the coefficients of
    PARAMS; the rest scalars or arrays of one shape (``U`` integer-valued tokens)."""
    mem, comp = roofline.sides(c, U, Q, n, K, R)
    return c[0] + np.maximum(mem, comp) + c[MIXED] * np.minimum(U, 1) * K


duration_nb = nb.njit(inline="always", **JIT)(duration)
""":func:`duration` compiled: what the engine calls (routesim.step_cost.duration_nb)."""


def columns(U, Q, n, K, R, memory):
    """The design matrix of a fit (N, 6) once each step is assigned to its bound
    (``memory`` (N,) bool: memory is the longer side): the roofline's five columns
    (routesim.step_cost.roofline.columns) and ``min(U, 1)·K``, the formula's last term
    at the unit coefficient."""
    N = np.size(U)
    extra = np.broadcast_to(np.minimum(U, 1) * np.asarray(K, dtype=float), (N,))
    return np.column_stack([roofline.columns(U, Q, n, K, R, memory), extra])
