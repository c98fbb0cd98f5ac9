"""round_robin (token-model.md §5): the eligible replicas in turn, one cursor per router."""

import numba as nb

from ...conf import JIT
from ...nrt import hold

NAME = "round_robin"
CODE = 0
ALIASES = ()
PARAMS = ()
DRAWS = 0
"""Uniforms a decision draws (also when it sheds)."""
RULE = "sample"
"""How the replica is picked: "sample" (its sampling alone), "argmin" (of SCORE) or "own" (its ``choose_nb``)."""
SCORE = None
SLOW_START = False


@nb.njit(**JIT)
def sample_nb(cand, ne, p, u, at, cursor, v):
    """E[cursor mod |E|] to the front: returns the candidates left (0: shed)."""
    if ne > 0:
        cand[0] = cand[cursor % ne]
    hold((cand, u, v))
    return min(ne, 1)
