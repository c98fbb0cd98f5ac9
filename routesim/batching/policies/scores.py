"""What the scoring policies share (token-model.md §5): the four scores, the tie bound
and the argmin with its tie rule. A policy that ranks by a score is an argmin of one of
these (routesim.batching.policies: ``SCORE``).

A view ``v`` (replicas,) of dtype ``VIEW``: ``o`` outstanding requests, ``tau``
outstanding tokens τ_i, ``ref`` referenced blocks, ``res`` resident id'd blocks, ``hit``
the request's leading resident blocks, ``ramp`` the slow-start weight — filled only for
the candidates ``cand[:nc]``.
"""

import math

import numba as nb
import numpy as np

from ...conf import JIT
from ...nrt import hold
from ..dtypes import Score
from ..workload import GOLDEN

REQUESTS, TOKENS, KV, COST = (np.int64(k) for k in Score)
"""The Score codes as typed values: Numba compiles a function once per argument type,
and an enum member is not the same type as the ``p.score`` field."""


@nb.njit(**JIT)
def tie_hash_nb(h, i):
    """frac(h_r + 0.618…·(i + 1)): the last tie-break, stable per request."""
    x = h + GOLDEN * (i + 1)
    return x - math.floor(x)


@nb.njit(**JIT)
def score_nb(kind, p, o, tau, ref, blocks, hit, prompt, allowance, ramp):
    """The lower-is-better score ``kind`` (a Score code) of a replica seen with o_i,
    τ_i, referenced blocks (of its pool's ``blocks``: kv_blocks) and the request's hit (``prompt`` P_r, ``allowance`` its A:
    O_r when allowance_tokens = "exact"), through the slow-start ramp when
    ``ramp > 0``: (score + 1) / ramp. (Scalars: no array crosses the call.)"""
    if kind == Score.REQUESTS:
        s = float(o)
    elif kind == Score.TOKENS:
        s = float(tau + prompt + allowance)
    elif kind == Score.KV:
        s = ref / blocks
    else:  # cost: w·(ceil(P/b) − hit) + referenced
        s = p.prefill_weight * ((prompt + p.block_tokens - 1) // p.block_tokens - hit) + ref
    if ramp > 0.0:
        return (s + 1) / ramp
    return s


@nb.njit(**JIT)
def tie_bound_nb(kind, cand, nc, p, v, prompt, allowance):
    """The largest score of score ``kind`` that ties with the best of cand[:nc]:
    best·(1 + tie_tolerance). A candidate whose score is not above it is tied."""
    best = math.inf
    for k in range(nc):
        x = v[cand[k]]
        s = score_nb(kind, p, x.o, x.tau, x.ref, x.blocks, x.hit, prompt, allowance, x.ramp)
        if s < best:
            best = s
    hold((cand, v))
    return best * (1.0 + p.tie_tolerance)


@nb.njit(**JIT)
def argmin_tied_nb(kind, cand, nc, p, v, prompt, allowance, h):
    """argmin of the score over cand[:nc]; ties (≤ best·(1 + tie_tolerance)) go to the
    largest hit, then the smallest tie hash."""
    bound = tie_bound_nb(kind, cand, nc, p, v, prompt, allowance)
    pick = np.int64(-1)  # (typed: see REQUESTS)
    for k in range(nc):
        i = cand[k]
        x = v[i]
        if score_nb(kind, p, x.o, x.tau, x.ref, x.blocks, x.hit, prompt, allowance, x.ramp) > bound:
            continue
        if pick < 0 or x.hit > v[pick].hit or (
                x.hit == v[pick].hit and tie_hash_nb(h, i) < tie_hash_nb(h, pick)):
            pick = i
    hold((cand, v))
    return pick
