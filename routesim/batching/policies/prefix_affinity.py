"""prefix_affinity (token-model.md §5), SGLang's cache-aware rule: least_requests when
the load is imbalanced; else the largest cached prefix if it exceeds
cache_threshold·P; else the smallest tree."""

import numba as nb
import numpy as np

from ...conf import JIT
from ...nrt import hold
from ...schema import Param
from .scores import REQUESTS, argmin_tied_nb, tie_hash_nb

NAME = "prefix_affinity"
CODE = 7
ALIASES = ()
PARAMS = (
    Param("balance_abs", "policy", ("balance_abs",), 64.0, "requests", "prefix_affinity: absolute imbalance that switches to least_requests", low=0, when=("policy", (NAME,))),
    Param("balance_rel", "policy", ("balance_rel",), 1.5, "1", "prefix_affinity: relative imbalance that switches to least_requests", low=0, when=("policy", (NAME,))),
    Param("cache_threshold", "policy", ("cache_threshold",), 0.3, "1", "prefix_affinity: cached share of the prompt that wins the request", low=0, high=1, when=("policy", (NAME,))),
)
DRAWS = 0
RULE = "own"
SCORE = None
SLOW_START = False


@nb.njit(**JIT)
def _best_cache_nb(v, cand, nc, h, by_hit):
    """The candidate with the largest hit (``by_hit``) or the fewest resident blocks;
    ties: smaller o, then the tie hash."""
    pick = np.int64(-1)  # (typed: see scores.REQUESTS)
    for k in range(nc):
        i = cand[k]
        if pick < 0:
            pick = i
            continue
        if by_hit:
            a, b = v[pick].hit, v[i].hit
        else:
            a, b = v[i].res, v[pick].res
        if a < b or (a == b and (v[i].o < v[pick].o or (v[i].o == v[pick].o and
                                                        tie_hash_nb(h, i) < tie_hash_nb(h, pick)))):
            pick = i
    hold((v, cand))
    return pick


@nb.njit(**JIT)
def choose_nb(cand, nc, p, v, prompt, allowance, h):
    """The replica it picks among cand[:nc] (nc ≥ 1), from their views ``v``."""
    lo = v[cand[0]].o
    hi = v[cand[0]].o
    best_hit = v[cand[0]].hit
    for k in range(1, nc):
        x = v[cand[k]]
        lo = min(lo, x.o)
        hi = max(hi, x.o)
        best_hit = max(best_hit, x.hit)
    if hi - lo > p.balance_abs and hi > p.balance_rel * lo:
        pick = argmin_tied_nb(REQUESTS, cand, nc, p, v, prompt, allowance, h)
    else:
        pick = _best_cache_nb(v, cand, nc, h, p.block_tokens * best_hit > p.cache_threshold * prompt)
    hold((cand, v))
    return pick
