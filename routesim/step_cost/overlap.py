"""The overlap step cost (docs/model.md "The step cost"): the roofline with memory and
compute time only partly overlapped. Of the shorter side, the share ``kappa`` is not
hidden under the longer one:

    mem  = weights + per_kv_token·(K + R)
    comp = per_token·(U + n) + per_token_pair·(Q + K)
    d    = f · (base + max(mem, comp) + kappa·min(mem, comp))    (ms)

``kappa = 0`` is the roofline (perfect overlap), ``kappa = 1`` the serial sum of the two
times. ``U``, ``Q``, ``R``, ``n``, ``K`` as in routesim.step_cost.roofline, whose sides
this form shares; ``f`` the replica's time factor, applied by the engine. Its parameters
are the sweep's ``[replica] overlap_ms`` table: the roofline's five, with the roofline's
defaults (read from its module), and ``kappa`` (default 0: the roofline until a fit or a
sweep says otherwise).
"""

import numba as nb
import numpy as np

from ..conf import JIT
from ..schema import Param
from . import roofline

NAME = "overlap"
CODE = 2
TABLE = "overlap_ms"
SUMMARY = "overlap_ms: the roofline plus kappa times the shorter of memory and compute time, docs/model.md"
"""What the ``step_cost`` key's help says of this form."""

PARAMS = (
    *(Param(f"{TABLE}_{p.path[-1]}", p.section, (TABLE, p.path[-1]), p.default, p.units,
            p.help.replace("roofline:", "overlap:", 1), low=p.low, low_open=p.low_open, when=("step_cost", (NAME,)))
      for p in roofline.PARAMS),
    Param(f"{TABLE}_kappa", "replica", (TABLE, "kappa"), 0.0, "1", "overlap: share of the shorter of memory and compute time not hidden under the longer (0: the roofline, 1: their sum)", low=0, high=1, when=("step_cost", (NAME,))),
)
"""The coefficients ``c`` in this order: base, weights, per_kv_token, per_token,
per_token_pair (the roofline's), kappa."""

KAPPA = 5
"""Index of kappa in PARAMS."""


def duration(c, U, Q, n, K, R):
    """The iteration's time before the replica's factor (ms): base + max(mem, comp) +
    kappa·min(mem, comp), left to right. ``c`` (≥ 6,) the coefficients of PARAMS; the
    rest scalars or arrays of one shape."""
    mem, comp = roofline.sides(c, U, Q, n, K, R)
    return c[0] + np.maximum(mem, comp) + c[KAPPA] * np.minimum(mem, comp)


duration_nb = nb.njit(inline="always", **JIT)(duration)
""":func:`duration` compiled: what the engine calls (routesim.step_cost.duration_nb)."""


def columns(U, Q, n, K, R, memory, kappa):
    """The design matrix of a fit (N, 5) of the first five coefficients, once each step is
    assigned to its bound (``memory`` (N,) bool: memory is the longer side) and ``kappa``
    is held: the formula is then linear in them, column 0 the base and column j the
    longer side plus kappa times the shorter at the j-th unit vector."""
    N = np.size(U)
    m = np.asarray(memory, dtype=float)
    out = [np.ones(N)]
    for e in np.eye(len(roofline.PARAMS))[1:]:
        mem, comp = roofline.sides(e, U, Q, n, K, R)
        out.append(m * (mem + kappa * comp) + (1 - m) * (comp + kappa * mem))
    return np.column_stack([np.broadcast_to(x, (N,)) for x in out])
