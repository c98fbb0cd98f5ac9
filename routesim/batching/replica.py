"""One batching replica's iterations (token-model.md §2), compiled: admission, growth,
preemption, completion and what a crash or a cancellation does. Its lists of waiting
and running sequences are in :mod:`.lists`, the schedule of its decoding sequences in
:mod:`.schedule`.

A replica's running sequences are a list in admission order (``REQUEST.r_prev`` /
``r_next``), its prefilling ones also a short array (``prefill[i]``), and its decoding
ones only aggregates: their count ``n_dec``, Σ kv ``kv_dec`` and how many have
``g ≥ A`` (``n_over``). A decoding sequence is touched only when something happens to
it — its g reaches the allowance A (OVER), its last token (DONE) — and those iterations
are known when it starts decoding, so they sit in the replica's schedule (``due[i]``, a
min-heap by (iteration, kind, admission)). Its KV crosses a block boundary every b
iterations, at iterations ≡ ``res`` (mod b): ``grow[i, r]`` counts the decoding
sequences of each residue, so an iteration takes its ``grow[i, j mod b]`` new blocks at
once, one sequence at a time only when the pool runs short and someone is preempted.
A decode iteration over 200 sequences therefore costs O(1) plus the few that are due.

A decoding sequence ``s`` keeps ``kv`` and ``g`` as of its first decoding iteration
``j0``; with ``started`` iterations begun on its replica, its KV (grown in the iteration
in progress) is ``kv + started − j0`` and its g ``g + started − j0`` (less one while an
iteration is in progress).
"""

import math
from collections import namedtuple

import numba as nb
import numpy as np

from .. import ieee_math, step_cost
from ..conf import JIT
from ..nrt import hold
from . import blocks as bk
from .lists import pop_front_nb, push_front_nb, run_append_nb, run_remove_nb, wait_remove_nb
from .schedule import next_due_nb, start_decoding_nb
from .timers import in_flight_nb
from . import ingress, pd
from .dtypes import DUE, Due, Fate, PdStage, State, empty_nb


@nb.njit(**JIT)
def in_window_nb(t, p):
    """t in [warm-up, horizon): what happens at the start of something (an arrival, a
    placement, an iteration's start) counts in the window."""
    return p.warmup_ms <= t < p.horizon_ms


@nb.njit(**JIT)
def in_window_end_nb(t, p):
    """t in (warm-up, horizon]: what happens at the end of something (a token, a
    completion) counts in the window."""
    return p.warmup_ms < t <= p.horizon_ms


@nb.njit(**JIT)
def integrate_nb(r, t, p):
    """Advance replica record r's ∫ referenced blocks dt over [warm-up, horizon], and
    over its first and last quarters, to time t (a record, not the array: no reference
    counting on the hot path)."""
    a = max(r.area_ms, p.warmup_ms)
    b = min(t, p.horizon_ms)
    if b > a:
        ref = r.anon + r.idref
        r.area += ref * (b - a)
        b1 = min(b, p.warmup_ms + p.quarter_ms)
        if b1 > a:
            r.area_first += ref * (b1 - a)
        a2 = max(a, p.horizon_ms - p.quarter_ms)
        if b > a2:
            r.area_last += ref * (b - a2)
    r.area_ms = t


@nb.njit(**JIT)
def tau_of_nb(q):
    """A sequence's share of τ_i: P + max(A, g) (its A: O when allowance_tokens = "exact")."""
    return q.P + max(q.A, q.g)


@nb.njit(**JIT)
def settle_nb(q, fate, mt):
    """Request record q's final outcome: it leaves the system (§7 Drain's count)."""
    q.outcome = fate
    mt.left += 1
    if q.cohort:
        mt.left_cohort += 1


@nb.njit(**JIT)
def gap_nb(gap_ms, gap_n, n_gap, ms, count):
    """``count`` inter-token gaps of ``ms`` each (room reserved by the engine)."""
    k = n_gap[0]
    gap_ms[k] = ms
    gap_n[k] = count
    n_gap[0] = k + 1


# --- blocks of a sequence -----------------------------------------------------------------

@nb.njit(**JIT)
def release_nb(tab, heap, heap_n, rep, i, s, req, t, p, seg_key, seg_off, cnt):
    """Sequence s on replica i releases every block it holds (kv tokens' worth);
    ``cnt[0]`` (table entries in use) loses the segments nothing of which stays resident."""
    b = p.block_tokens
    q = req[s]
    for k in range(seg_off[s], seg_off[s + 1]):
        cnt[0] -= bk.unref_nb(tab, heap, heap_n, rep, i, seg_key[k], t)
    rep[i].anon -= (q.kv + b - 1) // b - q.P // b
    q.kv = 0
    hold((tab, heap, heap_n, rep, req, seg_key, seg_off, cnt))


@nb.njit(**JIT)
def mark_computed_nb(tab, i, s, q, c0, b, seg_key, seg_len, seg_off):
    """Sequence s (record q) on replica i has just computed its tokens ``m + c0 … m + c``:
    the id'd blocks whose tokens it has now all computed, outside its cached prefix,
    become computed (§2 "Computed blocks")."""
    hit = q.m // b
    hi = min(q.P // b, (q.m + q.c) // b)
    lo = max(hit, (q.m + c0) // b)
    pos = 0
    k = seg_off[s]
    while hi > lo and k < seg_off[s + 1] and pos < hi:
        n = seg_len[k]
        if pos + n > lo:
            bk.computed_nb(tab, i, seg_key[k], max(hit - pos, 0), min(n, hi - pos))
        pos += n
        k += 1
    hold((tab, seg_key, seg_len, seg_off))


@nb.njit(**JIT)
def leading_nb(tab, i, s, seg_key, seg_len, seg_off):
    """How many leading prompt blocks of request s are resident on replica i (resident
    ids are prefix-closed, §2, and a segment is resident by a prefix of it)."""
    lead = 0
    k = seg_off[s]
    going = True
    while going and k < seg_off[s + 1]:
        h = bk.find_nb(tab, i, seg_key[k])
        if h < 0:
            going = False
        else:
            lead += tab[h].length
            going = not tab[h].length < seg_len[k]
        k += 1
    hold((tab, seg_key, seg_len, seg_off))
    return lead


@nb.njit(**JIT)
def _admit_nb(tab, heap, heap_n, rep, i, s, req, t, p, seg_key, seg_len, seg_off, budget, first, cnt,
              found):
    """Try to admit the head s of replica i's waiting queue (§2 step 2b). Returns the
    chunk it computes (> 0), or 0 when it cannot be admitted (admission stops).
    ``found`` is scratch, one flag per segment of a prompt."""
    b = p.block_tokens
    q = req[s]
    r = rep[i]
    total = q.P + q.g
    lead = leading_nb(tab, i, s, seg_key, seg_len, seg_off)
    hit = min(lead, (total - 1) // b)
    m = b * hit
    u = total - m
    x = 0
    if (budget > 0) if r.chunked_prefill else (u <= budget or first):
        # every resident block of its prompt is referenced, not taken: the leading ones, and
        # any resident beyond a hole that freed uncomputed blocks left (see blocks.py)
        resident = 0
        cached_res = 0
        for k in range(seg_off[s], seg_off[s + 1]):
            h = bk.find_nb(tab, i, seg_key[k])
            found[k - seg_off[s]] = h >= 0
            e = tab[max(h, 0)]
            if h >= 0:
                blocks = bk.resident_nb(e)
                resident += blocks
                if e.ref == 0:
                    cached_res += blocks
        need = (total + b - 1) // b - resident
        if need <= bk.free_nb(r, r.kv_blocks) + r.cached - cached_res:
            # reference what is resident, then take the rest (evicting never touches the referenced)
            for k in range(seg_off[s], seg_off[s + 1]):
                h = bk.find_nb(tab, i, seg_key[k])
                if h >= 0:
                    bk.ref_nb(tab[h], r, t)
            cnt[0] -= bk.take_nb(tab, heap, heap_n, rep, i, need, r.kv_blocks)
            pos = np.int64(0)  # (typed: see engine.NONE)
            for k in range(seg_off[s], seg_off[s + 1]):
                h = bk.find_nb(tab, i, seg_key[k])
                e = tab[max(h, 0)]
                if h < 0:
                    bk.add_nb(tab, rep, i, seg_key[k], seg_len[k], pos, t)
                    cnt[0] += 1
                elif not found[k - seg_off[s]]:  # an id twice in the prompt, added just now: one block, two references
                    bk.ref_nb(e, r, t)
                elif e.length < seg_len[k]:
                    bk.extend_nb(tab, h, r)
                pos += seg_len[k]
            r.anon += (total + b - 1) // b - q.P // b
            q.kv = total
            q.m = m
            q.u = u
            q.c = 0
            x = min(u, budget) if r.chunked_prefill else u
        else:
            x = 0
    hold((tab, heap, heap_n, rep, seg_key, seg_len, seg_off, cnt, found))
    return x


@nb.njit(**JIT)
def stop_decoding_nb(r, q, grow, i, j):
    """Request record q stops decoding on replica i (record r) before iteration j (a
    preemption, its last token, a cancellation): its KV as of then, ``kv + j − j0``, out
    of the replica's decoding aggregates (``n_dec``, ``kv_dec``, ``grow[i]``,
    ``n_over``); its schedule entries void (``epoch``). Its g is the caller's to set."""
    q.kv = q.kv + (j - q.j0)
    r.n_dec -= 1
    r.kv_dec -= q.kv
    grow[i, q.res] -= 1
    if q.over:
        r.n_over -= 1
        q.over = False
    q.epoch += 1
    hold(grow)


@nb.njit(**JIT)
def _preempt_nb(tab, heap, heap_n, grow, rep, req, prefill, i, v, j, t, p, seg_key, seg_off, mt, cnt):
    """Preempt v (the most recently admitted running sequence of replica i) at the
    start of iteration j: it releases its blocks, loses its prefill progress, keeps g,
    and goes to the front of the waiting queue."""
    r = rep[i]
    q = req[v]
    if q.state == State.DECODE:
        q.last_ms = t  # it emitted a token at the end of the last iteration, which is now
        q.g = q.g + (j - q.j0)
        stop_decoding_nb(r, q, grow, i, j)
    else:  # prefilling: the last of the prefill list, which is in admission order too
        r.n_pre -= 1
    release_nb(tab, heap, heap_n, rep, i, v, req, t, p, seg_key, seg_off, cnt)
    q.u = 0
    requeue_nb(rep, req, i, v, t, p, mt)
    hold((tab, heap, heap_n, grow, rep, req, seg_key, seg_off, cnt))


@nb.njit(**JIT)
def requeue_nb(rep, req, i, v, t, p, mt):
    """Sequence v, preempted at t and its blocks released, goes back to the front of
    replica i's waiting queue (both schedulers): its progress lost (``c``, ``x``), its g
    kept; counted in the preemptions (of the window) and, if it had emitted, in
    ``preempted_emitting``."""
    q = req[v]
    q.c = 0
    q.x = 0
    run_remove_nb(rep, req, i, v)
    push_front_nb(rep, req, i, v)
    if q.g > 0:
        mt.preempted_emitting += 1
    if in_window_nb(t, p):
        mt.preemptions += 1
    hold((rep, req))


@nb.njit(**JIT)
def _start_nb(tab, heap, heap_n, due, due_n, grow, rep, req, prefill, i, t, p, seg_key, seg_len, seg_off,
             mt, cnt, found, links):
    """Start an iteration on replica i at t (§2 steps 1–3); sets its end time. The block
    table has room for every admission it can make (the engine sees to it: see
    ``admissions_room_nb``)."""
    r = rep[i]
    b = p.block_tokens
    j = r.started
    preempted = False
    # 1. growth: the decoding sequences whose KV crosses a block boundary now (those of
    # residue j mod b) each take a block — all at once when the pool has them
    need = grow[i, j % b]
    gone = bk.take_nb(tab, heap, heap_n, rep, i, need, r.kv_blocks)  # (need 0: nothing)
    if gone >= 0:
        cnt[0] -= gone
        r.anon += need
    else:  # short of blocks: one at a time, oldest first, preempting the most recent
        s = r.r_head
        while s >= 0:
            q = req[s]
            nxt = q.r_next
            if q.state == State.DECODE and q.res == j % b:
                settled = False  # s has its block, or has itself been preempted
                while not settled:
                    gone = bk.take_nb(tab, heap, heap_n, rep, i, np.int64(1), r.kv_blocks)
                    if gone >= 0:
                        cnt[0] -= gone
                        r.anon += 1
                        settled = True
                    else:
                        v = r.r_tail
                        _preempt_nb(tab, heap, heap_n, grow, rep, req, prefill, i, v, j, t, p, seg_key,
                                    seg_off, mt, cnt)
                        preempted = True
                        if v == s:
                            nxt = -1  # s and everything after it are preempted
                            settled = True
            s = nxt
    n_dec = r.n_dec
    r.kv_dec += n_dec  # every decoding sequence writes one more token of KV
    kv_sum = r.kv_dec
    # 2. prefill budget: continuing prefills, then admission
    budget = r.max_batched_tokens - n_dec
    U = 0
    Q = 0.0
    R = 0  # KV tokens the chunks attend to: Σ (m + c + x) (the roofline's memory time)
    chunks = 0
    if r.chunked_prefill:
        k = 0
        while k < r.n_pre and budget > 0:
            q = req[prefill[i, k]]
            x = min(q.u - q.c, budget)
            q.x = x
            U += x
            Q += x * (q.m + q.c + x / 2.0)
            R += q.m + q.c + x
            chunks += 1
            budget -= x
            k += 1
    first = np.bool_(True)  # (typed: a literal would compile _admit_nb twice)
    admitting = not preempted
    while admitting and r.n_wait > 0 and (r.n_run < r.max_batch or req[r.w_head].pd == PdStage.HANDOFF):
        s = r.w_head
        if req[s].pd == PdStage.HANDOFF:  # disaggregation: a decode replica allocates for a transfer
            admitting = pd_allocate_nb(tab, heap, heap_n, rep, req, i, s, t, p, seg_key, seg_len, seg_off, cnt, found,
                                       mt, links)
            continue
        if req[s].pd == PdStage.TRANSFERRED:  # ... and, its KV received, computes its last prompt token
            admitting = (budget > 0) if r.chunked_prefill else (1 <= budget or first)
            if admitting:
                _pd_admit_nb(rep, req, prefill, i, s, cnt)
                U += 1
                Q += 1 * (req[s].m + 0 + 1 / 2.0)
                R += req[s].m + 1
                chunks += 1
                budget -= 1
                first = False
            continue
        x = _admit_nb(tab, heap, heap_n, rep, i, s, req, t, p, seg_key, seg_len, seg_off, budget, first,
                      cnt, found)
        admitting = x > 0
        if admitting:
            pop_front_nb(rep, req, i)
            q = req[s]
            q.adm = cnt[1]
            cnt[1] += 1
            q.state = State.PREFILL
            run_append_nb(rep, req, i, s)
            prefill[i, r.n_pre] = s
            r.n_pre += 1
            q.x = x
            U += x
            Q += x * (q.m + 0 + x / 2.0)
            R += q.m + x
            chunks += 1
            budget -= x
            first = False
            if q.pd == PdStage.PREFILL and math.isnan(q.t_padmit):
                q.t_padmit = t  # the TTFT's prefill queue ends
            if in_window_nb(t, p):
                mt.hit_tokens += q.m
                mt.admit_tokens += q.P + q.g
    begin_nb(r, p, mt, t, n_dec, kv_sum, U, Q, R, chunks)
    hold((tab, heap, heap_n, due, due_n, grow, rep, req, prefill, seg_key, seg_len, seg_off, cnt, found))


@nb.njit(**JIT)
def pd_allocate_nb(tab, heap, heap_n, rep, req, i, s, t, p, seg_key, seg_len, seg_off, cnt, found, mt, links):
    """Decode replica i allocates for the handed-off head s of its waiting queue
    (docs/model.md "Allocation on d"): its local hit referenced and the rest of
    ``ceil(P/b)`` blocks taken by step 2b's rule, with no token budget and outside
    ``max_batch``; it leaves the waiting queue, receives (``n_recv``: still in o_i and
    τ_i), and its transfer of ``P − m_d`` tokens from the prefill replica holding its
    blocks starts (``links``, advanced to t). False when the blocks cannot be had."""
    q = req[s]
    if _admit_nb(tab, heap, heap_n, rep, i, s, req, t, p, seg_key, seg_len, seg_off, q.P, np.bool_(True), cnt,
                 found) == 0:
        return False
    pop_front_nb(rep, req, i)
    rep[i].n_recv += 1
    q.pd = PdStage.RECEIVING
    q.t_xs = t
    pd.start_nb(links, s, t, q.held, i, (q.P - q.m) * p.kv_bytes_per_token)
    if in_window_nb(t, p):
        mt.hit_tokens += q.m
        mt.admit_tokens += q.P
    hold((tab, heap, heap_n, rep, req, seg_key, seg_len, seg_off, cnt, found))
    return True


@nb.njit(**JIT)
def _pd_admit_nb(rep, req, prefill, i, s, cnt):
    """Replica i admits the transferred head s of its waiting queue: its blocks held,
    ``kv = P``, ``m = P − 1``, ``u = 1``: a one-token chunk (the last prompt token's
    recompute, which samples the first token; docs/model.md "After the transfer")."""
    r = rep[i]
    q = req[s]
    pop_front_nb(rep, req, i)
    q.kv = q.P
    q.m = q.P - 1
    q.u = 1
    q.c = 0
    q.x = 1
    q.adm = cnt[1]
    cnt[1] += 1
    q.state = State.PREFILL
    q.pd = PdStage.DECODE
    run_append_nb(rep, req, i, s)
    prefill[i, r.n_pre] = s
    r.n_pre += 1
    hold((rep, req, prefill, cnt))


@nb.njit(**JIT)
def _pd_prefilled_nb(rep, req, i, s, t, hand, n_hand):
    """Disaggregated s's prefill ended on replica i at t: it emits nothing, leaves the
    running list and stops counting in o_i and τ_i, but keeps its blocks (``held``: its
    ``kv = P`` tokens' worth, released when its transfer ends); listed in ``hand`` for
    the hand-off to its decode replica at the end of phase 1."""
    q = req[s]
    run_remove_nb(rep, req, i, s)
    rep[i].tau -= tau_of_nb(q)
    q.held = i
    q.kv = 0
    q.m = 0
    q.u = 0
    q.c = 0
    q.state = State.WAITING
    q.replica = -1
    q.pd = PdStage.HANDOFF
    q.t_pend = t
    hand[n_hand[0]] = s
    n_hand[0] += 1
    hold((rep, req, hand, n_hand))


@nb.njit(**JIT)
def step_cpu_nb(r, members):
    """The CPU time (ms) of a step of replica record r that schedules ``members``
    sequences, besides its step cost: ``step_cpu_ms + step_cpu_ms_per_seq · members`` of
    its pool (docs/model.md "The engine loop's timing"; 0 by default, and ``x + 0.0`` is
    ``x``, so a duration is unchanged)."""
    return r.step_cpu_ms + r.step_cpu_ms_per_seq * members


@nb.njit(**JIT)
def step_ms_nb(r, p, mt, t, n_dec, kv_sum, U, Q, R, chunks):
    """The duration (ms) of an iteration starting at t on replica record r, counted in
    the run's iterations and, started in the window, in ``busy_ms`` and ``batch_ms``.
    ``U`` prefill tokens computed, ``Q`` prefill attention pairs, ``R`` KV tokens the
    prefill chunks attend to (tokens), ``n_dec`` decoding sequences and ``kv_sum`` their
    KV (``K``, tokens), ``chunks`` prefill chunks. ``d = f · cost`` with ``cost`` the
    replica's step cost (its pool's, REPLICA's settings; routesim.step_cost; linear, §2
    step 3: the sum left to right) and
    ``f`` the time factor, the slowdown in force and the cold factor at t, plus the engine
    loop's CPU time of the step (:func:`step_cpu_nb`, not scaled by ``f``)."""
    f = r.factor * r.slowdown
    if r.cold:
        f = f * (1.0 + (p.cold_factor - 1.0) * ieee_math.exp(-(t - r.t_up) / p.cold_tau_ms))
    d = f * step_cost.duration_nb(r.step_cost, r.cost, U, Q, n_dec, kv_sum, R) + step_cpu_nb(r, n_dec + chunks)
    if in_window_nb(t, p):
        mt.busy_ms += d
        mt.batch_ms += (n_dec + chunks) * d
    mt.iterations += 1
    return d


@nb.njit(**JIT)
def begin_nb(r, p, mt, t, n_dec, kv_sum, U, Q, R, chunks):
    """The iteration starting at t on replica record r: its duration (:func:`step_ms_nb`,
    same arguments) and end."""
    d = step_ms_nb(r, p, mt, t, n_dec, kv_sum, U, Q, R, chunks)
    r.started += 1
    r.busy = True
    r.begin_ms = t
    r.end_ms = t + d


@nb.njit(**JIT)
def emit_decoding_nb(r, p, mt, t, gap_ms, gap_n, n_gap):
    """Every decoding sequence of the iteration ending at t emits a token; τ grows by
    those past the allowance (``n_over``). Each emitted its previous token when this
    iteration began (iterations follow one another while anything runs): ``n_dec``
    inter-token gaps of the iteration's duration."""
    r.busy = False
    r.tau += r.n_over
    r.tokens_all += r.n_dec
    if in_window_end_nb(t, p):
        mt.tokens_window += r.n_dec
        r.tokens += r.n_dec
        if r.n_dec > 0:
            gap_nb(gap_ms, gap_n, n_gap, t - r.begin_ms, r.n_dec)
    hold((gap_ms, gap_n, n_gap))


@nb.njit(**JIT)
def _complete_nb(tab, heap, heap_n, rep, req, i, s, t, p, seg_key, seg_off, mt, done_log, n_done, cnt):
    """Sequence s finishes at t: it leaves the replica with its blocks."""
    release_nb(tab, heap, heap_n, rep, i, s, req, t, p, seg_key, seg_off, cnt)
    hold((tab, heap, heap_n, seg_key, seg_off, cnt))
    return leave_nb(rep, req, i, s, t, p, mt, done_log, n_done)


@nb.njit(**JIT)
def leave_nb(rep, req, i, s, t, p, mt, done_log, n_done):
    """Sequence s, its blocks released, completes at t and leaves replica i (both
    schedulers): off the running list, then :func:`done_nb`. Returns the log's new
    length."""
    run_remove_nb(rep, req, i, s)
    return done_nb(rep, req, i, s, t, p, mt, done_log, n_done)


@nb.njit(**JIT)
def done_nb(rep, req, i, s, t, p, mt, done_log, n_done):
    """Sequence s, off replica i's lists and its blocks released, completes at t: out of
    τ, settled, logged in ``done_log`` (2, n) (replica, request) at column ``n_done``.
    Returns the log's new length."""
    r = rep[i]
    q = req[s]
    r.tau -= q.P + max(q.A, q.O)
    q.state = State.NONE
    q.done_ms = t
    settle_nb(q, Fate.COMPLETED, mt)
    q.replica = -1
    q.done_rep = i
    done_log[0, n_done] = i
    done_log[1, n_done] = s
    r.done_all += 1
    if in_window_end_nb(t, p):
        mt.done_any += 1
        r.completed += 1
    hold((rep, req, done_log))
    return n_done + 1


@nb.njit(**JIT)
def _finish_nb(tab, heap, heap_n, due, due_n, grow, rep, req, prefill, i, t, p, seg_key, seg_len, seg_off, mt,
              done_log, n_done, cnt, gap_ms, gap_n, n_gap, hand, n_hand):
    """End replica i's iteration at t (§2 step 4): the chunks are computed, tokens
    emitted (inter-token gaps recorded), sequences complete. Returns the new length of
    done_log."""
    r = rep[i]
    j = r.started - 1
    window = in_window_end_nb(t, p)
    # decoding sequences: each emits one token; those reaching A now count in τ's growth
    s = next_due_nb(due, due_n, req, i, j, Due.OVER)
    while s >= 0:
        req[s].over = True
        r.n_over += 1
        s = next_due_nb(due, due_n, req, i, j, Due.OVER)
    emit_decoding_nb(r, p, mt, t, gap_ms, gap_n, n_gap)
    s = next_due_nb(due, due_n, req, i, j, Due.DONE)
    while s >= 0:
        q = req[s]
        q.g = q.O
        stop_decoding_nb(r, q, grow, i, j + 1)
        n_done = _complete_nb(tab, heap, heap_n, rep, req, i, s, t, p, seg_key, seg_off, mt, done_log,
                              n_done, cnt)
        s = next_due_nb(due, due_n, req, i, j, Due.DONE)
    # prefilling sequences that computed a chunk
    keep = 0
    for k in range(r.n_pre):
        s = prefill[i, k]
        q = req[s]
        prefilling = True
        if q.x > 0:
            c0 = q.c
            q.c += q.x
            q.x = 0
            mark_computed_nb(tab, i, s, q, c0, p.block_tokens, seg_key, seg_len, seg_off)
            if q.c >= q.u and q.pd == PdStage.PREFILL:  # disaggregated: no token, handed off
                prefilling = False
                _pd_prefilled_nb(rep, req, i, s, t, hand, n_hand)
            elif q.c >= q.u:
                prefilling = False
                if q.g >= q.A:
                    r.tau += 1
                if window:
                    mt.tokens_window += 1
                    r.tokens += 1
                    if q.g > 0:  # re-admitted after a preemption: the gap from its last token
                        gap_nb(gap_ms, gap_n, n_gap, t - q.last_ms, np.int64(1))
                q.g += 1
                r.tokens_all += 1
                if math.isnan(q.first_ms):
                    q.first_ms = t
                if q.g == q.O:
                    n_done = _complete_nb(tab, heap, heap_n, rep, req, i, s, t, p, seg_key, seg_off, mt,
                                          done_log, n_done, cnt)
                else:
                    start_decoding_nb(rep, req, due, due_n, grow, i, s, j + 1, p)
        if prefilling:
            prefill[i, keep] = s
            keep += 1
    r.n_pre = keep
    hold((tab, heap, heap_n, due, due_n, grow, rep, req, prefill, seg_key, seg_len, seg_off, done_log, cnt, gap_ms,
          gap_n, n_gap, hand, n_hand))
    return n_done


@nb.njit(**JIT)
def g_now_nb(rep, req, s):
    """Tokens request s's current attempt has emitted so far."""
    q = req[s]
    r = rep[max(q.replica, 0)]  # (read whatever its state: rep's one use)
    g = q.g
    if q.state == State.DECODE:
        g = q.g + (r.started - q.j0) - (1 if r.busy else 0)
    return g


@nb.njit(**JIT)
def unqueue_nb(rep, req, i, s):
    """Take request s's attempt off replica i (a cancellation, both schedulers) if it is
    not running: a black-holed one out of the black hole's count (``n_bh``, ``tau_bh``),
    one in transit out of the transit's (``n_tr``, ``tau_tr``),
    a waiting one out of the waiting queue and τ. Returns whether it was either (a
    running one is the caller's)."""
    r = rep[i]
    q = req[s]
    queued = True
    if q.state == State.BLACKHOLE:
        r.n_bh -= 1
        r.tau_bh -= q.P + q.A
    elif q.state == State.TRANSIT:
        ingress.leave_nb(r, q)
    elif q.state == State.WAITING:
        wait_remove_nb(rep, req, i, s)
        r.tau -= tau_of_nb(q)
    else:
        queued = False
    hold((rep, req))
    return queued


@nb.njit(**JIT)
def _cancel_nb(tab, heap, heap_n, due_n, grow, rep, req, prefill, i, s, t, p, seg_key, seg_off, cnt):
    """Take request s's attempt off replica i at t (a timeout or a black-hole failure):
    out of the waiting queue, the running list or the black hole, its blocks released;
    it emits nothing more (the iteration in progress keeps its duration)."""
    r = rep[i]
    q = req[s]
    if q.state == State.WAITING and q.kv > 0:  # cannot be: a waiting sequence holds no blocks
        release_nb(tab, heap, heap_n, rep, i, s, req, t, p, seg_key, seg_off, cnt)
    if not unqueue_nb(rep, req, i, s):  # running
        if q.state == State.DECODE:
            q.g = g_now_nb(rep, req, s)
            stop_decoding_nb(r, q, grow, i, r.started)
        else:  # prefilling: out of the prefill list, keeping its order
            keep = 0
            for k in range(r.n_pre):
                if prefill[i, k] != s:
                    prefill[i, keep] = prefill[i, k]
                    keep += 1
            r.n_pre = keep
            q.x = 0
        release_nb(tab, heap, heap_n, rep, i, s, req, t, p, seg_key, seg_off, cnt)
        run_remove_nb(rep, req, i, s)
        r.tau -= tau_of_nb(q)
    q.state = State.NONE
    q.replica = -1
    hold((tab, heap, heap_n, due_n, grow, rep, req, prefill, seg_key, seg_off, cnt))


@nb.njit(**JIT)
def _crash_nb(tab, rep, req, heap_n, due_n, grow, i, t, p, victims):
    """Replica i goes down at t: every attempt on it (waiting, running, black-holed)
    ends, its iteration is abandoned and its cache emptied. ``victims`` receives the
    requests whose attempts failed (their g as emitted, for wasted tokens, kept in
    ``g``); returns their number and the table entries deleted."""
    r = rep[i]
    nv = 0
    for s in range(req.shape[0]):
        q = req[s]
        if q.replica == i and in_flight_nb(q):
            q.g = g_now_nb(rep, req, s)
            if q.state == State.DECODE:
                q.epoch += 1
                q.over = False
            q.state = State.NONE
            q.replica = -1
            q.kv = 0
            q.x = 0
            victims[nv] = s
            nv += 1
    gone = bk.clear_replica_nb(tab, rep, heap_n, i)
    r.healthy = False
    empty_nb(r)
    due_n[i] = 0
    for k in range(grow.shape[1]):
        grow[i, k] = 0
    hold((tab, rep, req, heap_n, due_n, grow, victims))
    return nv, gone


# --- the scheduler's operations (scheduler.py) --------------------------------------------

Reserve = namedtuple("Reserve", ["due", "due_n", "grow", "prefill", "found"])
STATE = Reserve
"""(Bound to the module under its own name, ``Reserve``, so that pickle finds the class
by reference: Numba's cache pickles a cached kernel's return type, and a class it cannot
find by name is pickled by value, so that a ``state_nb`` loaded from the cache returns
instances of a copy the scheduler registry does not know.) ``scheduler = "reserve"``'s own arrays (``max_batch``: the
largest of the run's replicas, ``PARAMS.most_batch``): ``due`` (replicas, 2·max_batch + 16) DUE and
``due_n`` (replicas,) the decode schedules (:mod:`.schedule`), ``grow`` (replicas,
block_tokens) the decoding sequences of each residue, ``prefill`` (replicas, max_batch)
the prefilling sequences, ``found`` (the most segments of a prompt,) admission's scratch."""


@nb.njit(**JIT)
def segments_most_nb(seg_off):
    """The most segments a prompt has (at least 16): ``seg_off`` (requests + 1,)."""
    most = 16
    for k in range(seg_off.shape[0] - 1):
        most = max(most, seg_off[k + 1] - seg_off[k])
    return most


WORKLOAD_FIELDS = ()
"""The PARAMS fields :func:`workload_nb` reads: none."""


@nb.njit(**JIT)
def workload_nb(p, seg_key, seg_len, seg_off, wl_P, wl_O):
    """What a run's state takes from its workload alone (``W``): the most segments a
    prompt has (:func:`segments_most_nb`)."""
    return segments_most_nb(seg_off)


@nb.njit(**JIT)
def state_nb(p, nrep, W, seg_key, seg_len, seg_off, wl_P, wl_O):
    """The scheduler's state for a run of ``p`` (PARAMS) on ``nrep`` replicas, from its
    workload's ``W`` (:func:`workload_nb`), and the prompt segments the run sees (the
    requests' own: seg_key/seg_len, request k's at ``seg_off[k]:seg_off[k + 1]``)."""
    due = np.zeros((nrep, 2 * p.most_batch + 16), DUE)
    due_n = np.zeros(nrep, np.int64)
    grow = np.zeros((nrep, p.block_tokens), np.int64)
    prefill = np.empty((nrep, p.most_batch), np.int64)
    found = np.zeros(W, np.bool_)
    return STATE(due, due_n, grow, prefill, found), seg_key, seg_len, seg_off


@nb.njit(**JIT)
def table_slots_nb(X, p, nrep):
    """Segment-table slots the run needs from the start: none (the engine grows it)."""
    return np.int64(0)


@nb.njit(**JIT)
def emits_only_nb(r, n_due, next_j):
    """Does the iteration of replica record r that ends now only emit its decoding
    sequences' tokens (phase 1 without :func:`_finish_nb`): nothing prefills, and nothing
    in its schedule (``n_due`` entries, the first for iteration ``next_j``) is due now?"""
    return r.n_pre == 0 and (n_due == 0 or next_j >= r.started)


@nb.njit(**JIT)
def decodes_on_nb(r, need, kv_blocks):
    """May replica record r start its next iteration by :func:`_decode_next_nb`: nothing
    waits or prefills, and its sequences' growth (``need`` blocks) is free?"""
    return r.n_wait == 0 and r.n_pre == 0 and need <= bk.free_nb(r, kv_blocks)


@nb.njit(**JIT)
def _decode_next_nb(r, p, mt, t, need):
    """Replica record r, whose sequences all decode, starts its next iteration at t, its
    sequences' growth taking ``need`` free blocks (phase 7 without a call into the pool)."""
    r.anon += need
    r.kv_dec += r.n_dec
    begin_nb(r, p, mt, t, r.n_dec, r.kv_dec, np.int64(0), 0.0, np.int64(0), np.int64(0))


@nb.njit(**JIT)
def has_work_nb(X, S, i):
    """Phase 7: has idle replica i attempts to schedule (waiting or running)?"""
    r = S.rep[i]
    return r.n_run > 0 or r.n_wait > 0


@nb.njit(**JIT)
def start_nb(X, S, i, t, p, mt):
    """Start an iteration on idle replica i, which has work, at t (phase 7): its end
    time set. Returns 0, or the segment-table entries to make room for first (then
    nothing is done: the engine grows the table and calls again)."""
    r = S.rep[i]
    need = X.grow[i, r.started % p.block_tokens]
    if decodes_on_nb(r, need, r.kv_blocks):
        integrate_nb(r, t, p)
        _decode_next_nb(r, p, mt, t, need)  # decoding only, new blocks free: no call into the pool
        return np.int64(0)
    # room in the table for every admission this start can make
    room = S.cnt[0] + (r.n_wait if p.prefill_replicas > 0 else min(r.n_wait, r.max_batch - r.n_run)) * S.most
    if 2 * room > S.tab.shape[0]:
        return room
    integrate_nb(r, t, p)
    _start_nb(S.tab, S.heap, S.heap_n, X.due, X.due_n, X.grow, S.rep, S.req, X.prefill, i, t, p, S.seg_key,
              S.seg_len, S.seg_off, mt, S.cnt, X.found, S.pdx.links)
    return np.int64(0)


@nb.njit(**JIT)
def decode_on_nb(X, S, i, t, p, mt):
    """Replica i's iteration ending at t only emits its decoding sequences' tokens and
    the next one only decodes into free blocks: do both (phase 1 and phase 7 of a time
    that has nothing else) and return True; else do nothing and return False."""
    r = S.rep[i]
    if not emits_only_nb(r, X.due_n[i], X.due[i, 0].j):
        return False
    need = X.grow[i, r.started % p.block_tokens]
    if not decodes_on_nb(r, need, r.kv_blocks):
        return False
    integrate_nb(r, t, p)
    emit_decoding_nb(r, p, mt, t, S.gap_ms, S.gap_n, S.n_gap)
    _decode_next_nb(r, p, mt, t, need)
    return True


@nb.njit(**JIT)
def finish_nb(X, S, i, t, p, mt, n_done):
    """End replica i's iteration at t (phase 1). Returns the new length of
    ``S.done_log``."""
    r = S.rep[i]
    if emits_only_nb(r, X.due_n[i], X.due[i, 0].j):
        emit_decoding_nb(r, p, mt, t, S.gap_ms, S.gap_n, S.n_gap)  # nothing due: decoding tokens only
        return n_done
    return _finish_nb(S.tab, S.heap, S.heap_n, X.due, X.due_n, X.grow, S.rep, S.req, X.prefill, i, t, p, S.seg_key,
                      S.seg_len, S.seg_off, mt, S.done_log, n_done, S.cnt, S.gap_ms, S.gap_n, S.n_gap, S.pdx.hand,
                      S.pdx.n_hand)


@nb.njit(**JIT)
def cancel_nb(X, S, i, s, t, p):
    """Take request s's attempt off replica i at t (phase 3: a timeout or a black-hole
    failure)."""
    _cancel_nb(S.tab, S.heap, S.heap_n, X.due_n, X.grow, S.rep, S.req, X.prefill, i, s, t, p, S.seg_key, S.seg_off,
               S.cnt)


@nb.njit(**JIT)
def crash_nb(X, S, i, t, p):
    """Replica i goes down at t (phase 2): the requests whose attempts failed in
    ``S.victims``; returns their number and the segment-table entries deleted."""
    return _crash_nb(S.tab, S.rep, S.req, S.heap_n, X.due_n, X.grow, i, t, p, S.victims)
