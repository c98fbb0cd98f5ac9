"""random (token-model.md §5): one uniform picks an eligible replica."""

import math

import numba as nb

from ...conf import JIT
from ...nrt import hold

NAME = "random"
CODE = 1
ALIASES = ()
PARAMS = ()
DRAWS = 1
RULE = "sample"
SCORE = None
SLOW_START = False


@nb.njit(**JIT)
def sample_nb(cand, ne, p, u, at, cursor, v):
    """E[floor(u·|E|)] to the front: returns the candidates left (0: shed)."""
    if ne > 0:
        cand[0] = cand[int(math.floor(u[at] * ne))]
    hold((cand, u, v))
    return min(ne, 1)
