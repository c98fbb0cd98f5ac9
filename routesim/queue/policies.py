"""Routing policies (model.md §5): one small compiled function each, one dispatcher.

Every policy has the signature ``(rep, router, p, u, work) -> replica index or -1``
where ``rep`` is the run's replica records (shape ``(replicas,)``, dtype ``REPLICA``),
``router`` the run's ``ROUTER`` record, ``p`` its ``PARAMS`` record, ``u`` the run's
router stream of uniforms (pre-drawn outside the kernels, see
``workload.router_stream``) and ``work`` the run's ``WORK`` index structures. A policy
reads state; it never writes it, except that a randomized policy advances
``router.draws`` by the uniforms it consumes and uses ``work`` as scratch. ``-1``
means no replica is eligible (shed).

To add a policy: write ``_name_nb`` below, add a code to ``dtypes.Policy`` and one
branch to ``choose_nb``. The engine loop does not change.

Eligible set E: healthy replicas with fewer than ``queue_cap`` waiting requests; the
engine keeps ``rep.elig``, ``router.n_elig`` = |E| and a Fenwick tree over ``rep.elig``
(``work.bit``) up to date, so the k-th member of E (ascending) costs O(log replicas).
Outstanding load o_i = waiting + in service. Ties go to the lowest id (strict
comparisons while scanning ids in ascending order).
"""

import math

import numba as nb
import numpy as np

from .. import ieee_math
from ..conf import JIT
from .dtypes import Policy

NAMES = {p.name.lower(): p for p in Policy}
"""Sweep-file name -> policy code."""


@nb.njit(**JIT)
def outstanding_nb(ri):
    """o_i of the replica record ``ri``: waiting requests plus the one in service."""
    return ri.qlen + (1 if ri.busy else 0)


@nb.njit(**JIT)
def bit_add_nb(work, i, delta):
    """Add ``delta`` at replica ``i`` of the Fenwick tree ``work.bit`` (1-based, length n + 1)."""
    j = i + 1
    while j < work.shape[0]:
        work[j].bit += delta
        j += j & -j


@nb.njit(**JIT)
def kth_eligible_nb(work, k):
    """E[k]: the replica with exactly ``k`` eligible replicas below it (0-based k < |E|)."""
    n = work.shape[0] - 1
    step = 1
    while step * 2 <= n:
        step *= 2
    pos = 0  # largest prefix whose count is <= k
    while step > 0:
        nxt = pos + step
        if nxt <= n and work[nxt].bit <= k:
            pos = nxt
            k -= work[nxt].bit
        step //= 2
    return pos  # 1-based pos + 1 is the answer's 1-based index, i.e. 0-based pos


@nb.njit(**JIT)
def _round_robin_nb(rep, router, p, u, work):
    """E as an ascending list; pick E[cursor mod |E|]."""
    m = router.n_elig
    if m == 0:
        return -1
    return kth_eligible_nb(work, router.cursor % m)


@nb.njit(**JIT)
def _least_queue_nb(rep, router, p, u, work):
    """argmin o_i."""
    best, best_o = -1, 0
    for i in range(rep.shape[0]):
        if rep[i].elig:
            o = outstanding_nb(rep[i])
            if best < 0 or o < best_o:
                best, best_o = i, o
    return best


@nb.njit(**JIT)
def _latency_aware_nb(rep, router, p, u, work):
    """argmin (o_i + 1) ŝ_i."""
    best, best_cost = -1, 0.0
    for i in range(rep.shape[0]):
        if rep[i].elig:
            cost = (outstanding_nb(rep[i]) + 1) * rep[i].s_hat
            if best < 0 or cost < best_cost:
                best, best_cost = i, cost
    return best


@nb.njit(**JIT)
def _adaptive_nb(rep, router, p, u, work):
    """argmax r̄_i + c sqrt(ln(T + 1) / (n_i + 1)) - o_i ŝ_i / L, with T = Σ n_i."""
    total = 0
    for i in range(rep.shape[0]):
        total += rep[i].n_obs
    log_t = ieee_math.log(total + 1.0)
    best, best_score = -1, 0.0
    for i in range(rep.shape[0]):
        if rep[i].elig:
            score = (rep[i].r_bar
                     + p.exploration * math.sqrt(log_t / (rep[i].n_obs + 1.0))
                     - outstanding_nb(rep[i]) * rep[i].s_hat / p.reward_ceiling_ms)
            if best < 0 or score > best_score:
                best, best_score = i, score
    return best


@nb.njit(**JIT)
def draw_nb(router, u):
    """The next uniform of the run's router stream."""
    x = u[router.draws]
    router.draws += 1
    return x


@nb.njit(**JIT)
def _random_nb(rep, router, p, u, work):
    """E[floor(u·|E|)]: one uniform per decision."""
    x = draw_nb(router, u)
    m = router.n_elig
    if m == 0:
        return -1
    return kth_eligible_nb(work, min(np.int64(x * m), m - 1))


@nb.njit(**JIT)
def _shuffled_nb(work, n_moved, position):
    """The replica at ``position`` of E after the partial shuffle so far."""
    for t in range(n_moved):
        if work[t].sw_pos == position:
            return work[t].sw_val
    return kth_eligible_nb(work, position)


@nb.njit(**JIT)
def _place_nb(work, n_moved, position, replica):
    """Record that ``replica`` now sits at ``position``; return the new n_moved."""
    for t in range(n_moved):
        if work[t].sw_pos == position:
            work[t].sw_val = replica
            return n_moved
    work[n_moved].sw_pos = position
    work[n_moved].sw_val = replica
    return n_moved + 1


@nb.njit(**JIT)
def _power_of_two_nb(rep, router, p, u, work):
    """Sample d = ``p.choices`` distinct members of E, pick the least outstanding among
    them, ties to the lowest id. The sample is a partial Fisher–Yates shuffle of E
    (ascending): for j < min(d, |E|), swap positions j and j + floor(u_j (|E| - j)); it
    always consumes d uniforms."""
    d = p.choices
    m = router.n_elig
    n_moved = 0
    best, best_o = -1, 0
    for j in range(d):
        x = draw_nb(router, u)
        if j >= m:
            continue
        k = min(j + np.int64(x * (m - j)), m - 1)
        at_j = _shuffled_nb(work, n_moved, j)
        i = _shuffled_nb(work, n_moved, k)
        n_moved = _place_nb(work, n_moved, j, i)
        n_moved = _place_nb(work, n_moved, k, at_j)
        o = outstanding_nb(rep[i])
        if best < 0 or o < best_o or (o == best_o and i < best):
            best, best_o = i, o
    return best


@nb.njit(**JIT)
def choose_nb(rep, router, p, u, work):
    """Dispatch on ``p.policy``: the replica a request goes to, or -1 to shed."""
    code = p.policy
    if code == Policy.ROUND_ROBIN:
        return _round_robin_nb(rep, router, p, u, work)
    if code == Policy.LEAST_QUEUE:
        return _least_queue_nb(rep, router, p, u, work)
    if code == Policy.LATENCY_AWARE:
        return _latency_aware_nb(rep, router, p, u, work)
    if code == Policy.ADAPTIVE:
        return _adaptive_nb(rep, router, p, u, work)
    if code == Policy.RANDOM:
        return _random_nb(rep, router, p, u, work)
    if code == Policy.POWER_OF_TWO:
        return _power_of_two_nb(rep, router, p, u, work)
    return -2  # unknown code: the engine treats it as a bug, never as a shed


def uniforms_per_decision(code, choices):
    """Router-stream uniforms one decision of this policy consumes."""
    return {Policy.RANDOM: 1, Policy.POWER_OF_TWO: choices}.get(Policy(code), 0)


@nb.njit(**JIT)
def observe_nb(ri, s_obs, p):
    """A completion on replica record ``ri`` took ``s_obs`` ms of service: update its
    statistics.

    ŝ_i <- (1-α) ŝ_i + α s_obs;  r̄_i <- (1-α) r̄_i + α max(0, 1 - s_obs / L);  n_i += 1.
    Kept for every policy, whichever routes, so traces can show them.
    """
    a = p.alpha
    ri.s_hat = (1.0 - a) * ri.s_hat + a * s_obs
    ri.r_bar = (1.0 - a) * ri.r_bar + a * max(0.0, 1.0 - s_obs / p.reward_ceiling_ms)
    ri.n_obs += 1
