"""session_affinity (docs/model.md "Session affinity"): a conversation's turns stick to
one replica, as the llm-d router's session affinity and SGLang's gateway's consistent
hashing offer, unless that replica is overloaded.

A session's turns share their key ``h`` (routesim/batching/workload.py
``conversations``), so the **home** replica, the candidate with the smallest rank
:func:`rank_nb` of (h, i), is the same for every turn while the same replicas are
candidates (rendezvous hashing: a replica that leaves moves only its own sessions; the
ranks are a 64-bit mix of the pair, so each of N replicas is home to 1/N of the sessions,
which the tie hash frac(h + 0.618…·(i + 1)), with its fixed offsets, is not). The
home is **overloaded** when its outstanding requests ``o_home`` exceed the least loaded
candidate's ``o_min`` by more than ``affinity_balance_abs`` and are more than
``affinity_balance_rel``·``o_min`` (SGLang's imbalance thresholds, its defaults); then
the turn goes to least_requests' pick (ties: largest hit, then the tie hash).
"""

import math

import numba as nb
import numpy as np

from ...conf import JIT
from ...nrt import hold
from ...schema import Param
from .scores import REQUESTS, argmin_tied_nb

NAME = "session_affinity"
CODE = 9
ALIASES = ()
PARAMS = (
    Param("affinity_balance_abs", "policy", ("affinity_balance_abs",), 64.0, "requests", "session_affinity: the home replica is overloaded when it holds more than this many requests beyond the least loaded (and the relative rule)", low=0, when=("policy", (NAME,))),
    Param("affinity_balance_rel", "policy", ("affinity_balance_rel",), 1.5, "1", "session_affinity: ... and more than this times the least loaded's requests", low=0, when=("policy", (NAME,))),
)
DRAWS = 0
RULE = "own"
SCORE = None
SLOW_START = False


_MUL = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@nb.njit(**JIT)
def rank_nb(h, i):
    """Replica i's rank for key h (uint64): splitmix64's finalizer of
    ``floor(h·2^53) XOR (i + 1)·0x9E3779B97F4A7C15`` (mod 2^64)."""
    z = np.uint64(np.int64(math.floor(h * 9007199254740992.0))) ^ (np.uint64(i + 1) * _MUL)
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@nb.njit(**JIT)
def home_nb(cand, nc, h):
    """The session's home among cand[:nc]: the smallest rank (ties: the lower replica)."""
    home = cand[0]
    best = rank_nb(h, home)
    for k in range(1, nc):
        x = rank_nb(h, cand[k])
        if x < best:
            home = cand[k]
            best = x
    hold(cand)
    return home


@nb.njit(**JIT)
def choose_nb(cand, nc, p, v, prompt, allowance, h):
    """The replica it picks among cand[:nc] (nc ≥ 1), from their views ``v``: the home,
    unless overloaded (then least_requests)."""
    home = home_nb(cand, nc, h)
    lo = v[cand[0]].o
    for k in range(1, nc):
        lo = min(lo, v[cand[k]].o)
    pick = home
    if v[home].o - lo > p.affinity_balance_abs and v[home].o > p.affinity_balance_rel * lo:
        pick = argmin_tied_nb(REQUESTS, cand, nc, p, v, prompt, allowance, h)
    hold((cand, v))
    return np.int64(pick)
