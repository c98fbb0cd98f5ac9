"""rate_weighted (token-model.md §5): one uniform picks an eligible replica with
probability proportional to 1 + the completions its router counted from it in the last
``window_ms`` (the engine keeps that window)."""

import numba as nb

from ...conf import JIT
from ...nrt import hold
from ...schema import Param

NAME = "rate_weighted"
CODE = 8
ALIASES = ()
PARAMS = (
    Param("window_ms", "policy", ("window_ms",), 1000.0, "ms", "rate_weighted: window of counted completions", low=0, low_open=True, when=("policy", (NAME,))),
)
DRAWS = 1
RULE = "sample"
SCORE = None
SLOW_START = False


@nb.njit(**JIT)
def weigh_nb(cand, ne, rw, ro, v):
    """Each candidate's weight, 1 + the completions router ``ro`` counted from it in the
    window (``rw`` (routers, replicas))."""
    for k in range(ne):
        v[cand[k]].weight = 1.0 + rw[ro, cand[k]]
    hold((cand, rw, v))


@nb.njit(**JIT)
def sample_nb(cand, ne, p, u, at, cursor, v):
    """The first candidate whose cumulative weight exceeds u·(total weight) to the front
    (the last when none): returns the candidates left (0: shed)."""
    if ne > 0:
        total = 0.0
        for k in range(ne):
            total += v[cand[k]].weight
        x = u[at] * total
        acc = 0.0
        k = 0
        while k < ne - 1 and not x < acc + v[cand[k]].weight:  # the first with x < its cumulative weight
            acc += v[cand[k]].weight
            k += 1
        cand[0] = cand[k]  # (the last when none)
    hold((cand, u, v))
    return min(ne, 1)
