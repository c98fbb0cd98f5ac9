"""The routers of the batching model (token-model.md §3, §5, §6), compiled.

``R`` independent routers; request ``r`` and its retries go through router
``floor(h_r·R)``. Each router keeps its own round-robin cursor, breaker counts and
ejections, retry-budget counters, ``rate_weighted`` completion counts and front-door
FIFO, all in the run's ``Routers`` arrays (shape ``(R,)`` or ``(R, replicas)``).
Eligibility is always current; scores come from the router's view of each replica
(the true state in the ``fresh`` signal mode).
"""

import math

import numba as nb
import numpy as np

from .. import ieee_math
from ..conf import JIT
from ..nrt import hold
from . import blocks as bk
from . import timers as tm
from .dtypes import Fate, Signals, State
from .policies import choose_nb, hits_for_ties_nb, kind_nb, sample_nb, scoreless_nb, slow_start_nb, uniforms_nb, weigh_nb
from .policies.scores import score_nb, tie_bound_nb
from .ingress import send_nb
from .lists import push_back_nb
from .replica import in_window_nb, settle_nb

EVERY_HIT = np.int64(-1)
"""seen_hits_nb's ``kind`` when every candidate's hit is read (typed: a literal would
compile it once more)."""


@nb.njit(**JIT)
def eligible_nb(rep, p, ejected_until, ro, t, s, req, failed, avoid, cand, pool):
    """E for request s at t through router ``ro``, among the replicas of the pool it is
    routed into (``pool`` (members,), ascending: pools.members_nb), ascending, into
    ``cand``; a retry that ``avoid``s drops the replicas it failed on while another
    stays. Returns |E|."""
    ne = 0
    for c in range(pool.shape[0]):
        i = pool[c]
        r = rep[i]
        if r.healthy and r.n_wait + r.n_tr < r.waiting_cap and math.isinf(ejected_until[ro, i]) and t >= r.ready_ms:
            cand[ne] = i
            ne += 1
    if avoid and req[s].n_failed > 0:
        kept = 0
        for k in range(ne):
            if not _failed_on_nb(failed, req[s].n_failed, s, cand[k]):
                kept += 1
        if kept > 0:
            m = 0
            for k in range(ne):
                i = cand[k]
                if not _failed_on_nb(failed, req[s].n_failed, s, i):
                    cand[m] = i
                    m += 1
            ne = m
    hold((rep, ejected_until, req, failed, cand, pool))
    return ne


@nb.njit(**JIT)
def _failed_on_nb(failed, n_failed, s, i):
    """Did request s already fail on replica i?"""
    f = 0
    while f < n_failed and failed[s, f] != i:
        f += 1
    return f < n_failed


@nb.njit(**JIT)
def truth_nb(rep, i, out, row):
    """Replica i as it is: out[row] = (o_i, τ_i, referenced blocks, resident id'd blocks)."""
    r = rep[i]
    out[row, 0] = r.n_wait + r.n_run + r.n_bh + r.n_tr + r.n_recv
    out[row, 1] = r.tau + r.tau_bh + r.tau_tr
    out[row, 2] = r.anon + r.idref
    out[row, 3] = r.idref + r.cached


@nb.njit(**JIT)
def view_nb(rep, p, ro, i, pub, locc):
    """Router ro's view of replica i, (o_i, τ_i, referenced blocks, resident id'd
    blocks): fresh, the truth; periodic, its last publication ``pub[i]``;
    periodic_local, that plus ro's own placements since (``locc[ro, i]``: requests,
    tokens, resident blocks its requests' prompts add)."""
    r = rep[i]
    o, tau = r.n_wait + r.n_run + r.n_bh + r.n_tr + r.n_recv, r.tau + r.tau_bh + r.tau_tr
    ref, res = r.anon + r.idref, r.idref + r.cached
    if p.signal_mode != Signals.FRESH:
        o, tau, ref, res = pub[i, 0], pub[i, 1], pub[i, 2], pub[i, 3]
        if p.signal_mode == Signals.PERIODIC_LOCAL:
            o += locc[ro, i, 0]
            tau += locc[ro, i, 1]
            res += locc[ro, i, 2]
    hold((rep, pub, locc))
    return o, tau, ref, res


@nb.njit(**JIT)
def seen_hits_nb(tab, snap, loc, p, ro, cand, nc, nrep, s, seg_key, seg_len, seg_off, cap, v, kind, bound,
                 prompt, allowance):
    """v[i].hit for each candidate i of cand[:nc] whose hit the policy will read: the
    leading prompt blocks of request s router ro believes resident on i (the truth when
    fresh), capped at ``cap``. With ``kind`` >= 0 only the candidates tied under score
    ``kind`` (not above ``bound``, policies.tie_bound_nb), and only when at least two
    are (policies.hits_for_ties_nb); with ``kind`` < 0 every candidate. The others'
    ``hit`` is left as it was, unread. One call for all candidates: the arrays cross one
    call boundary, not one per replica."""
    fresh = p.signal_mode == Signals.FRESH
    local = p.signal_mode == Signals.PERIODIC_LOCAL
    lazy = kind >= 0
    tied = 0
    if lazy:
        for c in range(nc):
            x = v[cand[c]]
            if not score_nb(kind, p, x.o, x.tau, x.ref, x.blocks, x.hit, prompt, allowance, x.ramp) > bound:
                tied += 1
    for c in range(nc):
        i = cand[c]
        if lazy:
            x = v[i]
            if tied < 2 or score_nb(kind, p, x.o, x.tau, x.ref, x.blocks, x.hit, prompt, allowance, x.ramp) > bound:
                continue
        lead = 0
        for k in range(seg_off[s], seg_off[s + 1]):
            if fresh:
                seen = bk.seen_len_nb(tab, i, seg_key[k])
            else:
                seen = bk.seen_len_nb(snap, i, seg_key[k])
                if local:
                    seen = max(seen, bk.seen_len_nb(loc, ro * nrep + i, seg_key[k]))
            lead += seen
            if seen < seg_len[k]:
                break
        v[i].hit = min(lead, cap)
    hold((tab, snap, loc, cand, seg_key, seg_len, seg_off, v))


@nb.njit(**JIT)
def front_door_nb(rep, p, ro, cand, ne, pub, locc):
    """True when every eligible replica's τ_i (as seen) is above ``admission_max_tokens``."""
    k = 0
    if not math.isinf(p.admission_max_tokens):
        while k < ne and view_nb(rep, p, ro, cand[k], pub, locc)[1] > p.admission_max_tokens:
            k += 1
    hold((rep, cand, pub, locc))
    return k == ne and not math.isinf(p.admission_max_tokens)


@nb.njit(**JIT)
def decide_nb(tab, snap, loc, pub, locc, rep, p, s, t, ne, cand, wl_P, wl_key, seg_key, seg_len, seg_off,
              ru, ru_pos, cursor, rw, ro, v, allowance, code):
    """The replica policy ``code`` (a policy code: ``p.policy``, or a pool's) picks for
    request s among cand[:ne] (ne may be 0: then -1, a shed, after drawing the policy's
    uniforms). Returns (replica, ru_pos)."""
    weigh_nb(code, cand, ne, rw, ro, v)
    draws = uniforms_nb(code, p.choices)
    nc = sample_nb(code, cand, ne, p, ru, ru_pos, cursor, v)
    ru_pos += draws
    pick = cand[0] if nc > 0 else -1  # nc 0: a shed; a policy that samples alone picks this
    if nc > 0 and not scoreless_nb(code):
        pick = _score_nb(tab, snap, loc, pub, locc, rep, p, s, t, nc, cand, wl_P, wl_key, seg_key, seg_len,
                         seg_off, ro, v, allowance, code)
    hold((tab, snap, loc, pub, locc, rep, cand, wl_P, wl_key, seg_key, seg_len, seg_off, ru, rw, v))
    return pick, ru_pos


@nb.njit(**JIT)
def _score_nb(tab, snap, loc, pub, locc, rep, p, s, t, nc, cand, wl_P, wl_key, seg_key, seg_len, seg_off, ro, v,
              allowance, code):
    """The candidates cand[:nc]'s views of request s at t through router ro, then the
    pick among them of policy ``code``."""
    n = rep.shape[0]
    prompt = wl_P[s]
    cap = (prompt - 1) // p.block_tokens
    ramped = p.slow_start_ms > 0 and slow_start_nb(code)
    for c in range(nc):  # the candidates' scores, as this router sees them
        i = cand[c]
        x = v[i]
        x.o, x.tau, x.ref, x.res = view_nb(rep, p, ro, i, pub, locc)
        x.blocks = rep[i].kv_blocks
        x.ramp = 0.0
        if ramped and t - rep[i].t_e < p.slow_start_ms:
            x.ramp = max(p.slow_start_min_weight,
                         ieee_math.power((t - rep[i].t_e) / p.slow_start_ms, 1.0 / p.slow_start_aggression))
    kind = EVERY_HIT
    bound = math.inf
    if hits_for_ties_nb(code, p):
        kind = kind_nb(code, p)
        bound = tie_bound_nb(kind, cand, nc, p, v, prompt, allowance)
    seen_hits_nb(tab, snap, loc, p, ro, cand, nc, n, s, seg_key, seg_len, seg_off, cap, v, kind, bound, prompt,
                 allowance)
    pick = choose_nb(code, cand, nc, p, v, prompt, allowance, wl_key[s])
    hold((tab, snap, loc, pub, locc, rep, cand, wl_P, wl_key, seg_key, seg_len, seg_off, v))
    return pick


@nb.njit(**JIT)
def route_nb(tab, snap, loc, pub, locc, rep, req, p, s, t, retry, wl_t, wl_P, wl_key, seg_key, seg_len,
              seg_off, ru, ru_pos, cursor, rw, ej_until, failed, cand, v, pool):
    """Route request s at t into the replicas of ``pool`` (pools.members_nb): (replica,
    ru_pos); replica -1: shed (no eligible replica), -2: stopped at the front door (a
    first attempt only; no uniforms drawn)."""
    ro = req[s].router
    ne = eligible_nb(rep, p, ej_until, ro, t, s, req, failed, retry and p.retry_avoid_previous, cand, pool)
    stopped = ne > 0 and not retry and front_door_nb(rep, p, ro, cand, ne, pub, locc)
    i = -2
    if not stopped:
        i, ru_pos = decide_nb(tab, snap, loc, pub, locc, rep, p, s, t, ne, cand, wl_P, wl_key, seg_key, seg_len,
                              seg_off, ru, ru_pos, cursor[ro], rw, ro, v, req[s].A,
                              np.int64(p.policy))  # (typed as the Python side passes it: one signature)
    hold((tab, snap, loc, pub, locc, rep, req, wl_t, wl_P, wl_key, seg_key, seg_len, seg_off, ru, cursor, rw,
          ej_until, failed, cand, v, pool))
    return i, ru_pos


@nb.njit(**JIT)
def add_local_nb(snap, loc, locc, req, p, s, i, nrep, seg_key, seg_len, seg_off):
    """periodic_local: router ro placed request s on replica i; until i publishes again
    ro counts it in o_i and τ_i and believes its prompt's blocks resident there.
    Returns the view entries added."""
    ro = req[s].router
    locc[ro, i, 0] += 1
    locc[ro, i, 1] += req[s].P + req[s].A
    owner = ro * nrep + i
    added = 0
    for k in range(seg_off[s], seg_off[s + 1]):
        before = max(bk.seen_len_nb(snap, i, seg_key[k]), bk.seen_len_nb(loc, owner, seg_key[k]))
        if bk.find_nb(loc, owner, seg_key[k]) < 0:
            added += 1
        bk.set_len_nb(loc, owner, seg_key[k], seg_len[k])
        locc[ro, i, 2] += max(0, seg_len[k] - before)
    hold((snap, loc, locc, req, seg_key, seg_len, seg_off))
    return added


@nb.njit(**JIT)
def place_nb(tab, heap, heap_n, rep, req, p, s, i, t, retry, wl_t, timers, tn, cursor, ain, cum, mt):
    """Request s routed at t to replica i (-1: shed): a new attempt, from nothing, with
    its deadlines (one timer, the earlier; see the engine's phase 3)."""
    q = req[s]
    if i < 0:
        settle_nb(q, Fate.SHED, mt)
        q.state = State.NONE
        cum[2] += 1
        return
    ro = q.router
    q.attempts += 1
    q.tries += 1
    if q.tries >= 2:
        q.retries += 1
        cum[0] += 1
    q.replica = i
    q.g = 0
    q.gw = 0
    q.gh = 0
    q.kv = 0
    q.first_ms = np.nan
    # a first attempt's routing time is its arrival (decision (c)), a retry's its routing
    routed = wl_t[s] if q.tries == 1 else t
    q.deadline = routed + p.timeout_ms
    q.ft_deadline = routed + p.ttft_timeout_ms
    first = min(q.deadline, q.ft_deadline)
    if not np.isinf(first):
        tm.push_nb(timers, tn, tm.DEADLINES, first, s, q.tries)
    ain[ro] += 1
    cursor[ro] += 1
    r = rep[i]
    window = in_window_nb(t, p)
    if window:
        r.assigned += 1
        r.occ_sum += (r.anon + r.idref) / r.kv_blocks
        if 10 * (r.anon + r.idref) > 9 * r.kv_blocks:    # occupancy > 0.9, in integers
            r.occ_high += 1
    r.placed += 1
    if r.fail_fast:
        black_hole_nb(r, q, s, t, p, timers, tn)
    elif not send_nb(rep, req, p, s, i, t, timers, tn):  # in transit, or in the waiting queue now
        push_back_nb(rep, req, i, s)
        r.tau += q.P + q.A
    if window:
        r.max_out = max(r.max_out, r.n_wait + r.n_run + r.n_bh + r.n_tr)


@nb.njit(**JIT)
def black_hole_nb(r, q, s, t, p, timers, tn):
    """Request s's attempt (record ``q``) reaches black-holed replica record ``r`` at t
    (routed there, or with pools handed off there): it fails ``fail_fast_ms`` later (the
    ``BLACK_HOLES`` heap), counted in the replica's o_i and τ_i meanwhile (``n_bh``,
    ``tau_bh``: P + A), holding no block."""
    q.state = State.BLACKHOLE
    q.bh_ms = t + p.fail_fast_ms
    tm.push_nb(timers, tn, tm.BLACK_HOLES, q.bh_ms, s, q.tries)
    r.n_bh += 1
    r.tau_bh += q.P + q.A
    hold((timers, tn))


@nb.njit(**JIT)
def observe_failure_nb(p, s, i, crash, t, req, failed, brk, ej_until, times_ej, n_ej, rin, ain,
                        timers, tn, nrep, mt):
    """A failure of request s's attempt (on replica i, or -1 at the front door) observed
    at t: the breaker's count (not for crashes), then the retry decision (§6)."""
    q = req[s]
    ro = q.router
    if i >= 0:
        failed[s, q.n_failed] = i
        q.n_failed += 1
        if not crash and p.breaker_consecutive > 0:
            brk[ro, i] += 1
            if np.isinf(ej_until[ro, i]) and brk[ro, i] >= p.breaker_consecutive:
                limit = max(1, int(math.floor(p.breaker_max_ejected_fraction * nrep)))
                if n_ej[ro] + 1 <= limit:
                    times_ej[ro, i] += 1
                    ej_until[ro, i] = t + p.breaker_eject_ms * times_ej[ro, i]
                    n_ej[ro] += 1
                    if in_window_nb(t, p):
                        mt.breaker_ejections += 1
    if q.tries < p.max_attempts:
        allowed = True
        if not np.isinf(p.retry_budget):
            allowed = rin[ro] < max(float(p.min_retry_concurrency), p.retry_budget * ain[ro])
        if allowed:
            q.state = State.BACKOFF
            q.retry_ms = t + p.backoff_ms * 2.0 ** (q.tries - 1)
            tm.push_nb(timers, tn, tm.RETRIES, q.retry_ms, s, q.tries)
            rin[ro] += 1
            return
    q.state = State.NONE
    settle_nb(q, Fate.FAILED, mt)
