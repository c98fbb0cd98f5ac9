"""Routing policies of the batching model (token-model.md §5): one small compiled
function each, one dispatcher.

A policy decides from the router's *view* of each replica, ``v`` (replicas,) of dtype
``VIEW``: ``o`` outstanding requests, ``tau`` outstanding tokens τ_i, ``ref``
referenced blocks, ``res`` resident id'd blocks, ``hit`` the request's leading
resident blocks (hit_i(r), capped as for a new attempt, g = 0), ``ramp`` the slow-start
weight and ``weight`` rate_weighted's — filled only for the candidates. ``cand[:nc]``
are the candidates, ascending. It returns a replica index.

The random parts (``random``'s pick, ``power_of_d``'s sample, ``rate_weighted``'s
draw) are taken by the engine before the candidates' hits are looked up, from the
router stream pre-drawn outside the kernels.
"""

import math

import numba as nb
import numpy as np

from ..conf import JIT
from ..nrt import hold
from .dtypes import Policy, Score
from .workload import GOLDEN

REQUESTS, TOKENS, KV, COST = (np.int64(k) for k in Score)
"""The Score codes as typed values: Numba compiles a function once per argument type,
and an enum member is not the same type as the ``p.score`` field."""


@nb.njit(**JIT)
def tie_hash_nb(h, i):
    """frac(h_r + 0.618…·(i + 1)): the last tie-break, stable per request."""
    x = h + GOLDEN * (i + 1)
    return x - math.floor(x)


@nb.njit(**JIT)
def score_nb(kind, p, o, tau, ref, hit, prompt, allowance, ramp):
    """The lower-is-better score ``kind`` (a Score code) of a replica seen with o_i,
    τ_i, referenced blocks and the request's hit (``prompt`` P_r, ``allowance`` its A:
    O_r when allowance_tokens = "exact"), through the slow-start ramp when
    ``ramp > 0``: (score + 1) / ramp. (Scalars: no array crosses the call.)"""
    if kind == Score.REQUESTS:
        s = float(o)
    elif kind == Score.TOKENS:
        s = float(tau + prompt + allowance)
    elif kind == Score.KV:
        s = ref / p.kv_blocks
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
        s = score_nb(kind, p, x.o, x.tau, x.ref, x.hit, prompt, allowance, x.ramp)
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
        if score_nb(kind, p, x.o, x.tau, x.ref, x.hit, prompt, allowance, x.ramp) > bound:
            continue
        if pick < 0 or x.hit > v[pick].hit or (
                x.hit == v[pick].hit and tie_hash_nb(h, i) < tie_hash_nb(h, pick)):
            pick = i
    hold((cand, v))
    return pick


@nb.njit(**JIT)
def _best_cache_nb(v, cand, nc, h, by_hit):
    """The candidate with the largest hit (``by_hit``) or the fewest resident blocks;
    ties: smaller o, then the tie hash."""
    pick = np.int64(-1)  # (typed: see REQUESTS)
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
def prefix_affinity_nb(cand, nc, p, v, prompt, allowance, h):
    """SGLang's cache-aware rule: least_requests when the load is imbalanced; else the
    largest cached prefix if it exceeds cache_threshold·P; else the smallest tree."""
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


@nb.njit(**JIT)
def uniforms_nb(code, choices):
    """Uniforms one decision of policy ``code`` consumes (also when it sheds)."""
    if code == Policy.RANDOM or code == Policy.RATE_WEIGHTED:
        return 1
    if code == Policy.POWER_OF_D:
        return choices
    return 0


def uniforms_per_decision(code: int, choices: int) -> int:
    """Python-side twin of :func:`uniforms_nb`, for sizing the router stream."""
    return int(uniforms_nb(code, choices))


@nb.njit(**JIT)
def sample_nb(code, cand, ne, p, u, at, cursor, v):
    """The random or ordered part of a decision: returns the number of candidates left
    at the front of ``cand`` (0: shed). ``u[at:]`` holds this decision's uniforms;
    ``cursor`` is round robin's; ``v[i].weight`` rate_weighted's per replica."""
    nc = ne
    if code == Policy.ROUND_ROBIN:
        if ne > 0:
            cand[0] = cand[cursor % ne]
        nc = min(ne, 1)
    elif code == Policy.RANDOM:
        if ne > 0:
            cand[0] = cand[int(math.floor(u[at] * ne))]
        nc = min(ne, 1)
    elif code == Policy.RATE_WEIGHTED:
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
        nc = min(ne, 1)
    elif code == Policy.POWER_OF_D:
        nc = min(p.choices, ne)
        for j in range(nc):  # partial shuffle of E ascending
            k = j + int(math.floor(u[at + j] * (ne - j)))
            cand[j], cand[k] = cand[k], cand[j]
    hold((cand, u, v))
    return nc


@nb.njit(**JIT)
def weigh_nb(code, cand, ne, rw, ro, v):
    """Before sampling: rate_weighted's weight of each candidate, 1 + the completions
    router ``ro`` counted from it in the window (``rw`` (routers, replicas))."""
    if code == Policy.RATE_WEIGHTED:
        for k in range(ne):
            v[cand[k]].weight = 1.0 + rw[ro, cand[k]]
    hold((cand, rw, v))


@nb.njit(**JIT)
def scoreless_nb(code):
    """Policies whose sampling alone picks the replica (no scores, no views)."""
    return code == Policy.ROUND_ROBIN or code == Policy.RANDOM or code == Policy.RATE_WEIGHTED


@nb.njit(**JIT)
def slow_start_nb(code):
    """Does the slow-start ramp apply to policy ``code``? (§5: not to prefix_affinity,
    nor to the random policies.)"""
    return (code == Policy.LEAST_REQUESTS or code == Policy.LEAST_TOKENS or code == Policy.LEAST_KV
            or code == Policy.LEAST_COST or code == Policy.POWER_OF_D)


@nb.njit(**JIT)
def choose_nb(code, cand, nc, p, v, prompt, allowance, h):
    """The replica a policy picks among cand[:nc] (nc ≥ 1), from the candidates' views
    ``v`` (replicas,) VIEW (``ramp``: a slow-starting replica's weight, 0: none)."""
    if code == Policy.ROUND_ROBIN or code == Policy.RANDOM or code == Policy.RATE_WEIGHTED:
        pick = cand[0]
    elif code == Policy.PREFIX_AFFINITY:
        pick = prefix_affinity_nb(cand, nc, p, v, prompt, allowance, h)
    else:  # an argmin of the policy's score
        pick = argmin_tied_nb(kind_nb(code, p), cand, nc, p, v, prompt, allowance, h)
    hold((cand, v))
    return pick


@nb.njit(**JIT)
def kind_nb(code, p):
    """The score (a Score code) by which argmin policy ``code`` ranks."""
    kind = np.int64(p.score)
    if code == Policy.LEAST_REQUESTS:
        kind = REQUESTS
    elif code == Policy.LEAST_TOKENS:
        kind = TOKENS
    elif code == Policy.LEAST_KV:
        kind = KV
    elif code == Policy.LEAST_COST:
        kind = COST
    return kind


@nb.njit(**JIT)
def hits_for_ties_nb(code, p):
    """Does policy ``code`` (one that scores) read a candidate's hit only to break a tie
    (:func:`argmin_tied_nb` by a score that is not the cost)? Then a hit is needed only
    for the tied candidates, and only when at least two tie: with one, its hit is never
    read. prefix_affinity and the cost score read every candidate's."""
    return code != Policy.PREFIX_AFFINITY and kind_nb(code, p) != COST
