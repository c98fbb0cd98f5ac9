"""The batching model's engine (token-model.md §2–§4, §7), compiled.

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
from . import blocks as bk
from .dtypes import HEAP, REQUEST, SLOT, EventKind, Outcome, Policy
from .metrics import finish_metrics_nb
from .policies import choose_nb, sample_nb, uniforms_nb
from .workload import GROUP_ID, REQUEST_ID, UNIQUE_ID


@nb.njit(**JIT)
def block_id_nb(k, j, group, prefix_blocks, ids, id_off):
    """Id of prompt block j of request k: the trace's where it gives one, else §1.1's."""
    lo = id_off[k]
    if j < id_off[k + 1] - lo:
        return ids[lo + j]
    if group[k] >= 0 and j < prefix_blocks:
        return group[k] * GROUP_ID + j
    return UNIQUE_ID + k * REQUEST_ID + j


@nb.njit(**JIT)
def leading_nb(tab, i, k, n, group, prefix_blocks, ids, id_off):
    """How many leading blocks (of the first n) of request k are resident on replica i.
    Resident ids are prefix-closed (§2), so this is a binary search."""
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        if bk.find_nb(tab, i, block_id_nb(k, mid, group, prefix_blocks, ids, id_off)) >= 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


@nb.njit(**JIT)
def _in_window(t, lo, hi, closed_left):
    """t in [lo, hi) (closed_left) or (lo, hi]."""
    if closed_left:
        return lo <= t < hi
    return lo < t <= hi


@nb.njit(**JIT)
def _integrate(rep, i, t, p):
    """Advance replica i's ∫ referenced blocks dt over [warm-up, horizon] to time t."""
    r = rep[i]
    a = max(r.area_ms, p.warmup_ms)
    b = min(t, p.horizon_ms)
    if b > a:
        r.area += (r.anon + r.idref) * (b - a)
    r.area_ms = t


@nb.njit(**JIT)
def _release_nb(tab, heap, rep, i, s, req, t, p, group, ids, id_off):
    """Sequence s on replica i releases every block it holds (completion or preemption)."""
    b = p.block_tokens
    q = req[s]
    nid = q.P // b
    for j in range(nid):
        bk.unref_nb(tab, heap, rep, i, block_id_nb(s, j, group, p.prefix_blocks, ids, id_off), t)
    rep[i].anon -= (q.kv + b - 1) // b - nid
    q.kv = 0


@nb.njit(**JIT)
def _tau_of(q, allowance):
    return q.P + max(allowance, q.g)


@nb.njit(**JIT)
def _push_back(rep, req, i, s):
    r = rep[i]
    req[s].nxt = -1
    if r.n_wait == 0:
        r.w_head = s
    else:
        req[r.w_tail].nxt = s
    r.w_tail = s
    r.n_wait += 1


@nb.njit(**JIT)
def _push_front(rep, req, i, s):
    r = rep[i]
    req[s].nxt = r.w_head if r.n_wait > 0 else -1
    if r.n_wait == 0:
        r.w_tail = s
    r.w_head = s
    r.n_wait += 1


@nb.njit(**JIT)
def _pop_front(rep, req, i):
    r = rep[i]
    s = r.w_head
    r.w_head = req[s].nxt
    r.n_wait -= 1
    return s


@nb.njit(**JIT)
def _admit_nb(tab, heap, rep, i, s, req, t, p, group, ids, id_off, budget, first):
    """Try to admit the head s of replica i's waiting queue (§2 step 2b). Returns the
    chunk it computes (> 0), or 0 when it cannot be admitted (admission stops)."""
    b = p.block_tokens
    q = req[s]
    total = q.P + q.g
    nid = q.P // b
    lead = leading_nb(tab, i, s, nid, group, p.prefix_blocks, ids, id_off)
    hit = min(lead, (total - 1) // b)
    m = b * hit
    u = total - m
    if p.chunked_prefill:
        if budget <= 0:
            return 0
    elif not (u <= budget or first):
        return 0
    cached_lead = 0
    for j in range(lead):
        h = bk.find_nb(tab, i, block_id_nb(s, j, group, p.prefix_blocks, ids, id_off))
        if tab[h].ref == 0:
            cached_lead += 1
    need = (total + b - 1) // b - lead
    if need > bk.free_nb(rep, i, p.kv_blocks) + rep[i].cached - cached_lead:
        return 0
    for j in range(lead):
        h = bk.find_nb(tab, i, block_id_nb(s, j, group, p.prefix_blocks, ids, id_off))
        bk.ref_nb(tab, rep, i, h, t)
    for j in range(lead, nid):
        bk.take_nb(tab, heap, rep, i, p.kv_blocks)
        bk.add_id_nb(tab, rep, i, block_id_nb(s, j, group, p.prefix_blocks, ids, id_off), j, t)
    for j in range(need - (nid - lead)):
        bk.take_nb(tab, heap, rep, i, p.kv_blocks)
        rep[i].anon += 1
    q.kv = total
    q.m = m
    q.u = u
    q.c = 0
    x = min(u, budget) if p.chunked_prefill else u
    return x


@nb.njit(**JIT)
def _start_nb(tab, heap, rep, run, req, i, t, p, group, ids, id_off, mt):
    """Start an iteration on replica i at t (§2 steps 1–3); sets its end time."""
    r = rep[i]
    b = p.block_tokens
    lst = run[i]
    preempted = False
    # 1. growth, oldest admission first; preempt the most recently admitted when stuck
    j = 0
    while j < r.n_run:
        s = lst[j]
        q = req[s]
        if q.c < q.u:  # prefilling
            j += 1
            continue
        if q.kv % b == 0:
            got = False
            while not got:
                if bk.take_nb(tab, heap, rep, i, p.kv_blocks):
                    got = True
                    r.anon += 1
                    break
                v = lst[r.n_run - 1]
                _release_nb(tab, heap, rep, i, v, req, t, p, group, ids, id_off)
                req[v].c = 0
                req[v].u = 0
                req[v].dec = False
                req[v].x = 0
                r.n_run -= 1
                _push_front(rep, req, i, v)
                preempted = True
                if _in_window(t, p.warmup_ms, p.horizon_ms, True):
                    mt.preemptions += 1
                if v == s:
                    break
            if not got:
                break  # s itself was preempted: it was the last running
        q.kv += 1
        q.dec = True
        j += 1
    n_dec = 0
    kv_sum = 0
    for j in range(r.n_run):
        q = req[lst[j]]
        if q.dec:
            n_dec += 1
            kv_sum += q.kv
    # 2. prefill budget: continuing prefills, then admission
    budget = p.max_batched_tokens - n_dec
    U = 0
    Q = 0.0
    chunks = 0
    if p.chunked_prefill and budget > 0:
        for j in range(r.n_run):
            q = req[lst[j]]
            if q.dec or q.c >= q.u:
                continue
            x = min(q.u - q.c, budget)
            q.x = x
            U += x
            Q += x * (q.m + q.c + x / 2.0)
            chunks += 1
            budget -= x
            if budget == 0:
                break
    if not preempted:
        first = True
        while r.n_wait > 0 and r.n_run < p.max_batch:
            s = r.w_head
            x = _admit_nb(tab, heap, rep, i, s, req, t, p, group, ids, id_off, budget, first)
            if x == 0:
                break
            _pop_front(rep, req, i)
            q = req[s]
            lst[r.n_run] = s
            r.n_run += 1
            q.x = x
            U += x
            Q += x * (q.m + 0 + x / 2.0)
            chunks += 1
            budget -= x
            first = False
            if _in_window(t, p.warmup_ms, p.horizon_ms, True):
                mt.hit_tokens += q.m
                mt.admit_tokens += q.P + q.g
    # 3. duration, evaluated left to right, then multiplied
    f = r.factor * r.slowdown
    d = f * (p.c0 + p.c_pf * U + p.c_attn * Q + p.c_dec * n_dec + p.c_kv * kv_sum)
    if _in_window(t, p.warmup_ms, p.horizon_ms, True):
        mt.busy_ms += d
        mt.batch_ms += (n_dec + chunks) * d
    r.busy = True
    r.end_ms = t + d


@nb.njit(**JIT)
def _finish_nb(tab, heap, rep, run, req, i, t, p, group, ids, id_off, mt, done_log, n_done):
    """End replica i's iteration at t (§2 step 4). Returns the new length of done_log."""
    r = rep[i]
    lst = run[i]
    r.busy = False
    keep = 0
    window = _in_window(t, p.warmup_ms, p.horizon_ms, False)
    for j in range(r.n_run):
        s = lst[j]
        q = req[s]
        emit = q.dec
        if q.x > 0:
            q.c += q.x
            q.x = 0
            if q.c >= q.u:
                emit = True
        q.dec = False
        if emit:
            if q.g >= p.allowance:
                r.tau += 1
            q.g += 1
            if window:
                mt.tokens_window += 1
                r.tokens += 1
            if math.isnan(q.first_ms):
                q.first_ms = t
            if q.g == q.O:
                _release_nb(tab, heap, rep, i, s, req, t, p, group, ids, id_off)
                r.tau -= _tau_of(q, p.allowance)
                q.done_ms = t
                q.outcome = Outcome.COMPLETED
                q.replica = -1
                done_log[n_done] = i
                n_done += 1
                if window:
                    mt.done_any += 1
                    r.completed += 1
                continue
        lst[keep] = s
        keep += 1
    r.n_run = keep
    return n_done


@nb.njit(**JIT)
def _route_nb(tab, rep, req, k, t, p, wl_P, wl_key, group, ids, id_off, ru, ru_pos, cursor,
              cand, o, tau, ref, res, hit, weights, mt):
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
    nid = prompt // p.block_tokens
    cap = (prompt - 1) // p.block_tokens
    for c in range(nc):
        i = cand[c]
        hit[i] = min(leading_nb(tab, i, k, nid, group, p.prefix_blocks, ids, id_off), cap)
    i = choose_nb(code, cand, nc, p, o, tau, ref, res, hit, prompt, wl_key[k])
    if code == Policy.ROUND_ROBIN:
        cursor += 1
    return i, ru_pos, cursor


@nb.njit(**JIT)
def run_one_nb(p, rep, events, wl_t, wl_P, wl_O, wl_key, group, ids, id_off, ru, mt):
    """Simulate one run; fills ``rep``'s counters and the metrics record ``mt``."""
    n = wl_t.shape[0]
    nrep = rep.shape[0]
    b = p.block_tokens
    req = np.empty(n, REQUEST)
    total_ids = 0
    for k in range(n):
        q = req[k]
        q.P = wl_P[k]
        q.O = wl_O[k]
        q.g = 0
        q.kv = 0
        q.u = 0
        q.c = 0
        q.m = 0
        q.x = 0
        q.dec = False
        q.outcome = Outcome.PENDING
        q.replica = -1
        q.nxt = -1
        q.first_ms = np.nan
        q.done_ms = np.nan
        q.attempts = 0
        total_ids += wl_P[k] // b
    for i in range(nrep):
        r = rep[i]
        r.slowdown = 1.0
        r.healthy = True
        r.busy = False
        r.end_ms = np.inf
        r.n_run = 0
        r.w_head = -1
        r.w_tail = -1
        r.n_wait = 0
        r.anon = 0
        r.idref = 0
        r.cached = 0
        r.heap_n = 0
        r.tau = 0
        r.area = 0.0
        r.area_ms = 0.0
        r.rw_count = 0
        r.assigned = 0
        r.completed = 0
        r.tokens = 0
    # resident id'd blocks: at most min(kv_blocks, distinct ids) per replica
    per_rep = min(p.kv_blocks, max(total_ids, 1))
    cap = 16
    while cap < 2 * per_rep * nrep:
        cap *= 2
    tab = np.zeros(cap, SLOT)
    heap = np.zeros((nrep, 2 * per_rep + 16), HEAP)
    run = np.empty((nrep, p.max_batch), np.int64)
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
                _integrate(rep, i, t, p)
                before = n_done
                n_done = _finish_nb(tab, heap, rep, run, req, i, t, p, group, ids, id_off, mt,
                                    done_log, n_done)
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
            i, ru_pos, cursor = _route_nb(tab, rep, req, k, t, p, wl_P, wl_key, group, ids,
                                          id_off, ru, ru_pos, cursor, cand, o, tau, ref, res,
                                          hit, weights, mt)
            if i < 0:
                req[k].outcome = Outcome.SHED
            else:
                req[k].replica = i
                req[k].attempts += 1  # an attempt is a placement: a shed routing is not one
                _push_back(rep, req, i, k)
                rep[i].tau += _tau_of(req[k], p.allowance)
                if _in_window(t, p.warmup_ms, horizon, True):
                    rep[i].assigned += 1
            k += 1
        # (7) iteration starts of idle replicas with work
        for i in range(nrep):
            r = rep[i]
            if not r.busy and r.healthy and (r.n_run > 0 or r.n_wait > 0):
                _integrate(rep, i, t, p)
                _start_nb(tab, heap, rep, run, req, i, t, p, group, ids, id_off, mt)
    for i in range(nrep):
        _integrate(rep, i, horizon, p)
    finish_metrics_nb(p, rep, req, wl_t, mt)


@nb.njit(**JIT_PARALLEL)
def run_batch_nb(params, rep, events, wl_t, wl_P, wl_O, wl_key, wl_group, wl_ids, wl_id_off,
                 wl_off, ru, ru_off, metrics):
    """Simulate every run (the only job of this kernel is the loop over runs).

    params (runs,) PARAMS; rep (runs, replicas) REPLICA with ``factor`` set; events
    (rows,) EVENT; wl_* flat workload arrays, workload w spanning
    ``wl_off[w]:wl_off[w + 1]`` (``wl_id_off`` has one more entry per workload and
    offsets into ``wl_ids`` already); ru/ru_off the router streams; metrics (runs,).
    """
    for r in nb.prange(params.shape[0]):
        p = params[r]
        w = p.workload
        lo = wl_off[w]
        hi = wl_off[w + 1]
        run_one_nb(p, rep[r], events[p.event_start:p.event_start + p.event_count],
                   wl_t[lo:hi], wl_P[lo:hi], wl_O[lo:hi], wl_key[lo:hi], wl_group[lo:hi],
                   wl_ids, wl_id_off[lo + w:hi + w + 1], ru[ru_off[w]:ru_off[w + 1]], metrics[r])
