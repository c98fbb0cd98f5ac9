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

from ..conf import JIT
from . import blocks as bk
from .dtypes import Policy, Signals
from .policies import choose_nb, sample_nb, slow_start_nb, uniforms_nb
from .replica import leading_nb


@nb.njit(**JIT)
def eligible_nb(rep, p, ejected_until, ro, t, s, req, failed, avoid, cand):
    """E for request s at t through router ``ro``, ascending, into ``cand``; a retry
    that ``avoid``s drops the replicas it failed on while another stays. Returns |E|."""
    n = rep.shape[0]
    ne = 0
    for i in range(n):
        r = rep[i]
        if r.healthy and r.n_wait < p.waiting_cap and math.isinf(ejected_until[ro, i]) and t >= r.ready_ms:
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
    return ne


@nb.njit(**JIT)
def _failed_on_nb(failed, n_failed, s, i):
    """Did request s already fail on replica i?"""
    for f in range(n_failed):
        if failed[s, f] == i:
            return True
    return False


@nb.njit(**JIT)
def truth_nb(rep, i, out):
    """Replica i as it is: out = (o_i, τ_i, referenced blocks, resident id'd blocks)."""
    r = rep[i]
    out[0] = r.n_wait + r.n_run + r.n_bh
    out[1] = r.tau + r.tau_bh
    out[2] = r.anon + r.idref
    out[3] = r.idref + r.cached


@nb.njit(**JIT)
def view_nb(rep, p, ro, i, o, tau, ref, res, pub, locc):
    """Router ro's view of replica i: fresh, the truth; periodic, its last publication
    ``pub[i]``; periodic_local, that plus ro's own placements since (``locc[ro, i]``:
    requests, tokens, resident blocks its requests' prompts add)."""
    if p.signal_mode == Signals.FRESH:
        r = rep[i]
        o[i] = r.n_wait + r.n_run + r.n_bh
        tau[i] = r.tau + r.tau_bh
        ref[i] = r.anon + r.idref
        res[i] = r.idref + r.cached
        return
    o[i] = pub[i, 0]
    tau[i] = pub[i, 1]
    ref[i] = pub[i, 2]
    res[i] = pub[i, 3]
    if p.signal_mode == Signals.PERIODIC_LOCAL:
        o[i] += locc[ro, i, 0]
        tau[i] += locc[ro, i, 1]
        res[i] += locc[ro, i, 2]


@nb.njit(**JIT)
def seen_leading_nb(tab, snap, loc, p, ro, i, nrep, s, seg_key, seg_len, seg_off):
    """How many leading prompt blocks of request s router ro believes resident on i."""
    if p.signal_mode == Signals.FRESH:
        return leading_nb(tab, i, s, seg_key, seg_len, seg_off)
    lead = 0
    for k in range(seg_off[s], seg_off[s + 1]):
        seen = bk.seen_len_nb(snap, i, seg_key[k])
        if p.signal_mode == Signals.PERIODIC_LOCAL:
            seen = max(seen, bk.seen_len_nb(loc, ro * nrep + i, seg_key[k]))
        lead += seen
        if seen < seg_len[k]:
            break
    return lead


@nb.njit(**JIT)
def front_door_nb(rep, p, ro, cand, ne, o, tau, ref, res, pub, locc):
    """True when every eligible replica's τ_i (as seen) is above ``admission_max_tokens``."""
    if math.isinf(p.admission_max_tokens):
        return False
    for k in range(ne):
        i = cand[k]
        view_nb(rep, p, ro, i, o, tau, ref, res, pub, locc)
        if not tau[i] > p.admission_max_tokens:
            return False
    return True


@nb.njit(**JIT)
def decide_nb(tab, snap, loc, pub, locc, rep, p, s, t, ne, cand, wl_P, wl_key, seg_key, seg_len, seg_off,
              ru, ru_pos, cursor, rw, ro, o, tau, ref, res, hit, weights, ramp):
    """The replica policy ``p.policy`` picks for request s among cand[:ne] (ne may be 0:
    then -1, a shed, after drawing the policy's uniforms). Returns (replica, ru_pos)."""
    n = rep.shape[0]
    code = p.policy
    if code == Policy.RATE_WEIGHTED:
        for k in range(ne):
            weights[cand[k]] = 1.0 + rw[ro, cand[k]]
    draws = uniforms_nb(code, p.choices)
    nc = sample_nb(code, cand, ne, p, ru[ru_pos:ru_pos + draws], cursor, weights)
    ru_pos += draws
    if nc == 0:
        return -1, ru_pos
    if code == Policy.ROUND_ROBIN or code == Policy.RANDOM or code == Policy.RATE_WEIGHTED:
        return cand[0], ru_pos  # picked without scores
    prompt = wl_P[s]
    cap = (prompt - 1) // p.block_tokens
    ramped = p.slow_start_ms > 0 and slow_start_nb(code)
    for c in range(nc):  # the candidates' scores, as this router sees them
        i = cand[c]
        view_nb(rep, p, ro, i, o, tau, ref, res, pub, locc)
        ramp[i] = 0.0
        if ramped and t - rep[i].t_e < p.slow_start_ms:
            ramp[i] = max(p.slow_start_min_weight,
                          ((t - rep[i].t_e) / p.slow_start_ms) ** (1.0 / p.slow_start_aggression))
        hit[i] = min(seen_leading_nb(tab, snap, loc, p, ro, i, n, s, seg_key, seg_len, seg_off), cap)
    return choose_nb(code, cand, nc, p, o, tau, ref, res, hit, prompt, wl_key[s], ramp), ru_pos
