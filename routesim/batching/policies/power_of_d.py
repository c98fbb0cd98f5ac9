"""power_of_d (token-model.md §5): ``choices`` uniforms sample d of the eligible
replicas (a partial shuffle), then the argmin of the ``score`` key's score among them."""

import math

import numba as nb

from ...conf import JIT
from ...nrt import hold
from ...schema import Param

NAME = "power_of_d"
CODE = 6
ALIASES = ()
PARAMS = (
    Param("choices", "policy", ("choices",), 2, "replicas", "replicas power_of_d samples (d)", kind=int, low=1, when=("policy", (NAME,))),
    Param("score", "policy", ("score",), "tokens", "", "what power_of_d compares: requests, tokens, kv or cost", kind=str, options=("requests", "tokens", "kv", "cost"), when=("policy", (NAME,))),
)
DRAWS = -1
"""-1: ``choices`` uniforms per decision."""
RULE = "argmin"
SCORE = -1
"""-1: the ``score`` key's."""
SLOW_START = True


@nb.njit(**JIT)
def sample_nb(cand, ne, p, u, at, cursor, v):
    """min(d, |E|) candidates to the front by a partial shuffle of E ascending: returns
    how many (0: shed)."""
    nc = min(p.choices, ne)
    for j in range(nc):
        k = j + int(math.floor(u[at + j] * (ne - j)))
        cand[j], cand[k] = cand[k], cand[j]
    hold((cand, u, v))
    return nc
