"""The batching model's engine (token-model.md §2–§4, §7), compiled: the event loop
and the router.

``run_batch_nb`` is only the ``prange`` loop over runs; ``run_one_nb`` simulates one
run in exact event time: at each time T at which anything happens, in the order of
§4 — (1) iteration ends, replicas in id order; (2) scenario events; (6) routing of the
arrivals due at T; (7) iteration starts of idle replicas with work. Everything at a
time ≤ horizon is processed, nothing after.

Per-run scratch (requests, running lists, the block table and eviction heaps) is
allocated inside the run, so memory in flight is (threads × one run), whatever the
chunk size; the block table holds only resident id'd blocks (see ``blocks``).
"""

import math

import numba as nb
import numpy as np

from ..conf import JIT, JIT_PARALLEL
from .dtypes import CACHED, DUE, REQUEST, SEG, EventKind, Outcome, Policy, State
from .metrics import finish_metrics_nb
from .policies import choose_nb, sample_nb, uniforms_nb
from .blocks import free_nb
from .replica import (begin_nb, emit_decoding_nb, finish_nb, in_window_nb, integrate_nb, leading_nb,
                      push_back_nb, start_nb, tau_of_nb)


@nb.njit(**JIT)
def _route_nb(tab, rep, k, t, p, wl_P, wl_key, seg_key, seg_len, seg_off, ru, ru_pos, cursor,
              cand, o, tau, ref, res, hit, weights):
    """Route request k at t (§5). Returns (replica or -1, new ru_pos, new cursor)."""
    n = rep.shape[0]
    ne = 0
    for i in range(n):
        r = rep[i]
        o[i] = r.n_wait + r.n_run
        tau[i] = r.tau
        ref[i] = r.anon + r.idref
        res[i] = r.idref + r.cached
        weights[i] = 1.0 + r.rw_count
        if r.healthy and r.n_wait < p.waiting_cap:
            cand[ne] = i
            ne += 1
    code = p.policy
    draws = uniforms_nb(code, p.choices)
    nc = sample_nb(code, cand, ne, p, ru[ru_pos:ru_pos + draws], cursor, weights)
    ru_pos += draws
    if nc == 0:
        return -1, ru_pos, cursor
    prompt = wl_P[k]
    cap = (prompt - 1) // p.block_tokens
    for c in range(nc):
        i = cand[c]
        hit[i] = min(leading_nb(tab, i, k, seg_key, seg_len, seg_off), cap)
    i = choose_nb(code, cand, nc, p, o, tau, ref, res, hit, prompt, wl_key[k])
    if code == Policy.ROUND_ROBIN:
        cursor += 1
    return i, ru_pos, cursor


@nb.njit(**JIT)
def run_one_nb(p, rep, events, wl_t, wl_P, wl_O, wl_key, seg_key, seg_len, seg_off, ru, mt):
    """Simulate one run; fills ``rep``'s counters and the metrics record ``mt``.

    wl_* (requests,) the workload; seg_key/seg_len the requests' prompt segments,
    request k's at ``seg_off[k]:seg_off[k + 1]`` (offsets into the flat arrays).
    """
    n = wl_t.shape[0]
    nrep = rep.shape[0]
    req = np.empty(n, REQUEST)
    for k in range(n):
        q = req[k]
        q.P = wl_P[k]
        q.O = wl_O[k]
        q.g = 0
        q.kv = 0
        q.j0 = 0
        q.u = 0
        q.c = 0
        q.m = 0
        q.x = 0
        q.state = State.NONE
        q.over = False
        q.res = 0
        q.outcome = Outcome.PENDING
        q.replica = -1
        q.w_next = -1
        q.r_prev = -1
        q.r_next = -1
        q.adm = 0
        q.epoch = 0
        q.first_ms = np.nan
        q.done_ms = np.nan
        q.attempts = 0
    for i in range(nrep):
        r = rep[i]
        r.slowdown = 1.0
        r.healthy = True
        r.busy = False
        r.end_ms = np.inf
        r.started = 0
        r.n_run = 0
        r.r_head = -1
        r.r_tail = -1
        r.n_pre = 0
        r.n_dec = 0
        r.kv_dec = 0
        r.n_over = 0
        r.w_head = -1
        r.w_tail = -1
        r.n_wait = 0
        r.anon = 0
        r.idref = 0
        r.cached = 0
        r.tau = 0
        r.area = 0.0
        r.area_ms = 0.0
        r.rw_count = 0
        r.assigned = 0
        r.completed = 0
        r.tokens = 0
    # what is resident: a table of segments grown as needed, a heap of cached ones per
    # replica (at most one live entry per cached segment; stale ones compacted away)
    tab = np.zeros(1024, SEG)
    most = 16
    for k in range(n):
        most = max(most, seg_off[k + 1] - seg_off[k])
    heap = np.zeros((nrep, min(p.kv_blocks, max(seg_off[n] - seg_off[0], 1)) + most + 16), CACHED)
    heap_n = np.zeros(nrep, np.int64)
    due = np.zeros((nrep, 2 * p.max_batch + 16), DUE)
    grow = np.zeros((nrep, p.block_tokens), np.int64)
    due_n = np.zeros(nrep, np.int64)
    prefill = np.empty((nrep, p.max_batch), np.int64)
    btmp = np.zeros(1, CACHED)
    dtmp = np.zeros(1, DUE)
    cnt = np.zeros(2, np.int64)  # table entries in use; admissions so far
    cand = np.empty(nrep, np.int64)
    o = np.empty(nrep, np.int64)
    tau = np.empty(nrep, np.int64)
    ref = np.empty(nrep, np.int64)
    res = np.empty(nrep, np.int64)
    hit = np.zeros(nrep, np.int64)
    weights = np.empty(nrep)
    done_log = np.empty(n, np.int64)   # replica of each completion, in time order
    done_t = np.empty(n)
    n_done = 0
    rw_head = 0
    ru_pos = 0
    cursor = 0
    k = 0
    ev = 0
    n_ev = events.shape[0]
    horizon = p.horizon_ms
    while True:
        t = np.inf
        if k < n:
            t = wl_t[k]
        if ev < n_ev and events[ev].t_ms < t:
            t = events[ev].t_ms
        for i in range(nrep):
            if rep[i].busy and rep[i].end_ms < t:
                t = rep[i].end_ms
        if t > horizon:
            break
        # (1) iteration ends, replicas in id order
        for i in range(nrep):
            if rep[i].busy and rep[i].end_ms == t:
                integrate_nb(rep, i, t, p)
                r = rep[i]
                if r.n_pre == 0 and (due_n[i] == 0 or due[i, 0].j >= r.started):
                    emit_decoding_nb(r, p, mt, t)  # nothing due: decoding tokens only
                    continue
                before = n_done
                n_done = finish_nb(tab, heap, heap_n, due, due_n, grow, rep, req, prefill, i, t, p, seg_key,
                                   seg_off, mt, done_log, n_done, btmp, dtmp)
                for c in range(before, n_done):
                    done_t[c] = t
                    rep[done_log[c]].rw_count += 1
        # (2) scenario events at t, in order
        while ev < n_ev and events[ev].t_ms == t:
            e = events[ev]
            if e.kind == EventKind.SLOWDOWN:
                rep[e.replica].slowdown = e.value
            ev += 1
        # rate_weighted's window: completions in (t - window, t]
        while rw_head < n_done and done_t[rw_head] <= t - p.window_ms:
            rep[done_log[rw_head]].rw_count -= 1
            rw_head += 1
        # (6) routing, in request order
        while k < n and wl_t[k] == t:
            i, ru_pos, cursor = _route_nb(tab, rep, k, t, p, wl_P, wl_key, seg_key, seg_len, seg_off, ru,
                                          ru_pos, cursor, cand, o, tau, ref, res, hit, weights)
            if i < 0:
                req[k].outcome = Outcome.SHED
            else:
                req[k].replica = i
                req[k].attempts += 1  # an attempt is a placement: a shed routing is not one
                push_back_nb(rep, req, i, k)
                rep[i].tau += tau_of_nb(req[k], p.allowance)
                if in_window_nb(t, p, True):
                    rep[i].assigned += 1
            k += 1
        # (7) iteration starts of idle replicas with work
        for i in range(nrep):
            r = rep[i]
            if not r.busy and r.healthy and (r.n_run > 0 or r.n_wait > 0):
                integrate_nb(rep, i, t, p)
                need = grow[i, r.started % p.block_tokens]
                if r.n_wait == 0 and r.n_pre == 0 and need <= free_nb(rep, i, p.kv_blocks):
                    r.anon += need  # decoding only, new blocks free: no call into the pool
                    r.kv_dec += r.n_dec
                    begin_nb(r, p, mt, t, r.n_dec, r.kv_dec, 0, 0.0, 0)
                    continue
                tab = start_nb(tab, heap, heap_n, due, due_n, grow, rep, req, prefill, i, t, p, seg_key,
                               seg_len, seg_off, mt, cnt, btmp, dtmp)
    for i in range(nrep):
        integrate_nb(rep, i, horizon, p)
    finish_metrics_nb(p, rep, req, wl_t, mt)


@nb.njit(**JIT_PARALLEL)
def run_batch_nb(params, rep, events, wl_t, wl_P, wl_O, wl_key, seg_key, seg_len, seg_off, wl_off, ru,
                 ru_off, metrics):
    """Simulate every run (the only job of this kernel is the loop over runs).

    params (runs,) PARAMS; rep (runs, replicas) REPLICA with ``factor`` set; events
    (rows,) EVENT; wl_* flat workload arrays, workload w spanning
    ``wl_off[w]:wl_off[w + 1]``; its requests' segments at ``seg_off[wl_off[w] + w + k]``
    (one more offset per workload, into the flat seg_key/seg_len); ru/ru_off the
    router streams; metrics (runs,).
    """
    for r in nb.prange(params.shape[0]):
        p = params[r]
        w = p.workload
        lo = wl_off[w]
        hi = wl_off[w + 1]
        run_one_nb(p, rep[r], events[p.event_start:p.event_start + p.event_count],
                   wl_t[lo:hi], wl_P[lo:hi], wl_O[lo:hi], wl_key[lo:hi], seg_key, seg_len,
                   seg_off[lo + w:hi + w + 1], ru[ru_off[w]:ru_off[w + 1]], metrics[r])
