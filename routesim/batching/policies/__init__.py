"""Routing policies of the batching model (token-model.md §5): one module per policy,
this registry, and the compiled dispatchers the router calls.

A policy's module holds everything about it: ``NAME`` (its sweep-file name), ``CODE``
(its integer code, ``PARAMS["policy"]``), ``ALIASES`` (other names for it), ``PARAMS``
(its own sweep keys, with defaults, units, help and checks), ``DRAWS`` (uniforms a
decision draws, also when it sheds; -1: ``choices``), ``RULE`` (how it picks: "sample",
its sampling alone; "argmin", the argmin of ``SCORE``, a Score code or -1 for the
``score`` key's, by scores.argmin_tied_nb; "own", its ``choose_nb``), ``SLOW_START``
(whether the slow-start ramp applies to its scores) and its compiled steps:
``sample_nb(cand, ne, p, u, at, cursor, v)`` (the random or ordered part: candidates to
the front of ``cand``, returns how many are left, 0: shed), ``weigh_nb(cand, ne, rw,
ro, v)`` (per-candidate weights before sampling) and ``choose_nb(cand, nc, p, v,
prompt, allowance, h)`` (its own pick), each only if it has one.

``POLICIES`` below is the registry. A new policy is one module plus its line there and,
for each compiled step it has, its branch in that step's dispatcher (tests/test_layout.py
checks every registered policy's steps are dispatched, and tests/test_token_engine_vs_reference.py
runs every registered policy against the reference).

A policy decides from the router's *view* of each replica, ``v`` (replicas,) of dtype
``VIEW`` (routesim.batching.policies.scores); ``cand[:nc]`` are the candidates,
ascending. The random parts are taken by the engine before the candidates' hits are
looked up, from the router stream pre-drawn outside the kernels.
"""

import numba as nb
import numpy as np

from ...conf import JIT
from ...nrt import hold
from ...schema import Param
from . import (least_cost, least_kv, least_requests, least_tokens, power_of_d, prefix_affinity, random,
               rate_weighted, round_robin, session_affinity)
from .scores import COST, argmin_tied_nb

POLICIES = (round_robin, random, least_requests, least_tokens, least_kv, least_cost, power_of_d,
            prefix_affinity, rate_weighted, session_affinity)
"""Every routing policy, in code order (``POLICIES[k].CODE == k``)."""

NAMES = {m.NAME: m.CODE for m in POLICIES} | {a: m.CODE for m in POLICIES for a in m.ALIASES}
"""Sweep-file name -> policy code (the registered names, then the aliases)."""
BY_CODE = {m.CODE: m.NAME for m in POLICIES}

SCORE_PARAMS = (
    Param("allowance_tokens", "policy", ("allowance_tokens",), 256, "tokens", "output allowance A of the outstanding-token signal (\"exact\": each request's own output length, a clairvoyant router)", kind=int, low=0, words=("exact",)),
    Param("tie_tolerance", "policy", ("tie_tolerance",), 0.0, "1", "scores within this fraction of the best are tied", low=0),
    Param("prefill_weight", "policy", ("prefill_weight",), 1.0, "1", "weight w of new prefill blocks in the cost score", low=0),
)
"""The scores' keys (scores.py), shared by every policy that scores."""
SLOW_START_PARAMS = (
    Param("slow_start_ms", "policy", ("slow_start_ms",), 0.0, "ms", "slow-start ramp after a replica becomes eligible (0: off)", low=0),
    Param("slow_start_aggression", "policy", ("slow_start_aggression",), 1.0, "1", "slow-start ramp exponent", low=0, low_open=True),
    Param("slow_start_min_weight", "policy", ("slow_start_min_weight",), 0.1, "1", "smallest slow-start weight", low=0, low_open=True, high=1),
)
"""The slow-start ramp's keys (for the policies with ``SLOW_START``)."""
_FIRST = (power_of_d, prefix_affinity, rate_weighted)
PARAMS = (*power_of_d.PARAMS, *SCORE_PARAMS, *prefix_affinity.PARAMS, *rate_weighted.PARAMS, *SLOW_START_PARAMS,
          *(p for m in POLICIES if m not in _FIRST for p in m.PARAMS))
"""Every ``[policy]`` key (in the order the Dataset's attributes have always had; a new
policy's keys come last)."""

_DRAWS = tuple(int(m.DRAWS) for m in POLICIES)
_SAMPLES = tuple(m.RULE == "sample" for m in POLICIES)
_OWN = tuple(m.RULE == "own" for m in POLICIES)
_SLOW_START = tuple(bool(m.SLOW_START) for m in POLICIES)
_SCORE = tuple(-2 if m.SCORE is None else int(m.SCORE) for m in POLICIES)
"""Each policy's traits by code, as the dispatchers read them (frozen into the compiled
code; routesim.compile_cache names the cache by every module of this package)."""


@nb.njit(**JIT)
def uniforms_nb(code, choices):
    """Uniforms one decision of policy ``code`` consumes (also when it sheds)."""
    d = _DRAWS[code]
    if d < 0:
        return choices
    return d


def uniforms_per_decision(code: int, choices: int) -> int:
    """Python-side twin of :func:`uniforms_nb`, for sizing the router stream."""
    return int(uniforms_nb(code, choices))


@nb.njit(**JIT)
def sample_nb(code, cand, ne, p, u, at, cursor, v):
    """The random or ordered part of a decision: returns the number of candidates left
    at the front of ``cand`` (0: shed). ``u[at:]`` holds this decision's uniforms;
    ``cursor`` is round robin's; ``v[i].weight`` rate_weighted's per replica."""
    nc = ne
    if code == round_robin.CODE:
        nc = round_robin.sample_nb(cand, ne, p, u, at, cursor, v)
    elif code == random.CODE:
        nc = random.sample_nb(cand, ne, p, u, at, cursor, v)
    elif code == rate_weighted.CODE:
        nc = rate_weighted.sample_nb(cand, ne, p, u, at, cursor, v)
    elif code == power_of_d.CODE:
        nc = power_of_d.sample_nb(cand, ne, p, u, at, cursor, v)
    hold((cand, u, v))
    return nc


@nb.njit(**JIT)
def weigh_nb(code, cand, ne, rw, ro, v):
    """Before sampling: the per-candidate weights of a policy that weighs (router ``ro``'s
    completion counts ``rw`` (routers, replicas))."""
    if code == rate_weighted.CODE:
        rate_weighted.weigh_nb(cand, ne, rw, ro, v)
    hold((cand, rw, v))


@nb.njit(**JIT)
def scoreless_nb(code):
    """Policies whose sampling alone picks the replica (no scores, no views)."""
    return _SAMPLES[code]


@nb.njit(**JIT)
def slow_start_nb(code):
    """Does the slow-start ramp apply to policy ``code``? (§5: not to prefix_affinity,
    nor to the random policies.)"""
    return _SLOW_START[code]


@nb.njit(**JIT)
def choose_nb(code, cand, nc, p, v, prompt, allowance, h):
    """The replica a policy picks among cand[:nc] (nc ≥ 1), from the candidates' views
    ``v`` (replicas,) VIEW (``ramp``: a slow-starting replica's weight, 0: none)."""
    if _SAMPLES[code]:
        pick = cand[0]
    elif code == prefix_affinity.CODE:
        pick = prefix_affinity.choose_nb(cand, nc, p, v, prompt, allowance, h)
    elif code == session_affinity.CODE:
        pick = session_affinity.choose_nb(cand, nc, p, v, prompt, allowance, h)
    else:  # an argmin of the policy's score
        pick = argmin_tied_nb(kind_nb(code, p), cand, nc, p, v, prompt, allowance, h)
    hold((cand, v))
    return pick


@nb.njit(**JIT)
def kind_nb(code, p):
    """The score (a Score code) by which argmin policy ``code`` ranks."""
    kind = np.int64(p.score)
    if _SCORE[code] >= 0:
        kind = np.int64(_SCORE[code])
    return kind


@nb.njit(**JIT)
def hits_for_ties_nb(code, p):
    """Does policy ``code`` (one that scores) read a candidate's hit only to break a tie
    (:func:`argmin_tied_nb` by a score that is not the cost)? Then a hit is needed only
    for the tied candidates, and only when at least two tie: with one, its hit is never
    read. A policy with its own rule (prefix_affinity) and the cost score read every
    candidate's."""
    return not _OWN[code] and kind_nb(code, p) != COST
