"""One batching replica with ``scheduler = "vllm"``, compiled: vLLM V1 0.30.0's
``Scheduler.schedule`` / ``update_from_output`` (conformance/VLLM-SCHEDULER.md §1,
§4; /work/spec22b.md 10-20), on the pool of :mod:`.vllm_blocks`.

The waiting FIFO and the running list (admission order) are the page's
(:mod:`.lists`); a running attempt has state ``PREFILL`` whatever it computes (its
``g`` is always current), with ``c`` = vLLM's ``num_computed_tokens``, ``m`` its
admission's hit tokens, ``u`` = ``L_adm`` (``P + g`` at its admission), ``x`` its
tokens in the step in progress. ``vr[s]`` holds
its blocks: the last one it took (``TAILB``), its hit blocks (``NHIT``), blocks held
(``HELD``) and hashed (``NCACHED``), whether the attempt was preempted (``PREEMPTED``:
vLLM's ``num_preemptions > 0``, which files its next admission's hits apart), and with
asynchronous scheduling (:mod:`.vllm_async_replica`) its placeholders and tokens in
flight (``PH``, ``INFL``, ``STALE``, ``SAMPLED``: always 0 in the synchronous loop).
``vs[i, :vq[i, NSCHED]]`` is the step's scheduled order, ``vp[i, :vq[i, NPEND]]`` the
attempts cancelled during it, released at its end.
"""

import math
from collections import namedtuple

import numba as nb
import numpy as np

from ..conf import JIT
from ..nrt import hold
from . import blocks as bk
from . import vllm_blocks as vb
from .dtypes import Signals, State, empty_nb
from .lists import pop_front_nb, run_append_nb, run_remove_nb
from .replica import (begin_nb, gap_nb, in_window_end_nb, in_window_nb, integrate_nb, leave_nb, requeue_nb,
                      tau_of_nb, unqueue_nb)
from .timers import in_flight_nb
from .vllm_blocks import NPEND, NSCHED, QLEN

SYNC = np.bool_(False)
"""``_schedule_nb``'s ``asyn`` for the synchronous loop (a typed value: a literal would
compile it once more)."""

TAILB = 0
NHIT = 1
HELD = 2
NCACHED = 3
PREEMPTED = 4
PH = 5       # async scheduling (vllm_async_replica.py): vLLM's num_output_placeholders,
INFL = 6     # its tokens in batches in flight,
STALE = 7    # of them, those scheduled before a preemption (num_stale_output_tokens),
SAMPLED = 8  # and whether it samples a token in the batch being scheduled (1) or not (0)
VR_FIELDS = 9


@nb.njit(**JIT)
def _arrays_nb(n, nrep, kv_blocks, max_batch):
    """The mode's per-run pools: bl, vq, vr, vs, vp."""
    bl = np.empty((nrep, vb.FIELDS, kv_blocks), np.int64)
    vq = np.zeros((nrep, vb.VQ_FIELDS), np.int64)
    for i in range(nrep):
        vb.reset_pool_nb(bl, vq, i)
    vr = np.zeros((n, VR_FIELDS), np.int64)
    for s in range(n):
        vr[s, TAILB] = -1
    vs = np.zeros((nrep, max_batch), np.int64)
    vp = np.zeros((nrep, max_batch, 3), np.int64)
    return bl, vq, vr, vs, vp


@nb.njit(**JIT)
def step_room_nb(p):
    """Hash-map entries one step of a replica can add at most (_start_nb's hashing): a
    block per token it computes, one more per sequence, and 2 (the room the engine's
    guard makes should the map ever be fuller than :func:`_slots_nb` allows)."""
    return p.max_batched_tokens // p.block_tokens + p.max_batch + 2


@nb.njit(**JIT)
def _slots_nb(p, nrep, keys):
    """Slots for a run's hash map, sized once so that it never grows: growing rehashes
    every entry, and the map of full pools is tens of megabytes (a sixth of this mode's
    time went to doubling it). An entry is a key held by blocks of one replica, not a
    private key (vllm_blocks.py: those are in ``own``): at most ``kv_blocks`` per replica,
    and the ``keys`` blocks of the requests whose key is not private
    (vllm_blocks.prompt_keys_nb; with retries every block's, since a failed attempt's
    keys enter the map: :func:`parts_nb`) each on every replica an attempt of its request
    runs on (``max_attempts`` at most). Twice the smaller bound keeps the load at most one
    half."""
    return 2 * min(nrep * p.kv_blocks, keys * min(p.max_attempts, nrep))


@nb.njit(**JIT)
def _clear_nb(vr, s):
    vr[s, TAILB] = -1
    vr[s, NHIT] = 0
    vr[s, HELD] = 0
    vr[s, NCACHED] = 0
    vr[s, PREEMPTED] = 0


@nb.njit(**JIT)
def hash_upto_nb(tab, own, bl, vq, vr, i, s, hi, pk, pk_off, gbase, cnt):
    """``cache_blocks`` (C:335-359, BP:231-348): attempt s's blocks ``vr[s, NCACHED]`` …
    ``hi − 1`` (each full of known tokens) get their keys and join replica i's hash map
    (``cnt[0]``: its entries); then ``NCACHED = hi``. Nothing when ``hi`` is not past them."""
    lo = vr[s, NCACHED]
    if hi > lo:
        # blocks lo … hi-1: walk back from the last one held
        y = vr[s, TAILB]
        for j in range(vr[s, HELD] - 1, lo - 1, -1):
            if j < hi:
                cnt[0] += vb.hash_block_nb(tab, own, bl, vq, i, y, vb.key_of_nb(pk, pk_off, gbase, s, j))
            y = bl[i, vb.OWN, y]
        vr[s, NCACHED] = hi
    hold((tab, own, bl, vq, vr, pk, pk_off, cnt))


@nb.njit(**JIT)
def _allocate_nb(tab, own, bl, vq, vr, rep, req, i, s, x, nh, admit, p, pk, pk_off, gbase, cnt, ev, hb):
    """vLLM's ``allocate_slots`` (spec22b 11) for x new tokens of attempt s, with nh hit
    blocks at an admission (``admit``: the gate first; the hit blocks ``hb[gbase[s] + j]``,
    :func:`_hits_nb`). Returns whether it succeeded."""
    b = p.block_tokens
    q = req[s]
    held = vr[s, HELD]
    L = q.P + q.g
    total = nh * b if admit else q.c  # a waiting attempt has computed nothing (vLLM: 0 at admission)
    free0 = 0
    if admit:
        for j in range(nh):
            if bl[i, vb.REF, hb[gbase[s] + j]] == 0:
                free0 += 1
    have = nh + held
    ok = True
    if admit and max((L + b - 1) // b - have, 0) + free0 > vq[i, QLEN]:
        ok = False
    elif max((total + x + b - 1) // b - have, 0) + free0 > vq[i, QLEN]:
        ok = False
    if ok:
        if admit:
            for j in range(nh):
                vb.touch_nb(bl, vq, rep, i, hb[gbase[s] + j])
            vr[s, NHIT] = nh
            vr[s, NCACHED] = nh
            held = nh
        new = (total + x + b - 1) // b - held
        if new > 0:
            tail, gone = vb.take_nb(tab, own, bl, vq, rep, i, new, vr[s, TAILB], ev)
            vr[s, TAILB] = tail
            cnt[0] -= gone
            held += new
        vr[s, HELD] = held
        if p.prefix_caching:
            hash_upto_nb(tab, own, bl, vq, vr, i, s, min(total + x, L) // b, pk, pk_off, gbase, cnt)
    hold((tab, own, bl, vq, vr, rep, req, pk, pk_off, gbase, cnt, ev, hb))
    return ok


@nb.njit(**JIT)
def _preempt_nb(bl, vq, vr, rep, req, i, v, t, p, gbase, mt, hb):
    """Preempt v (spec22b 12): its blocks released, ``c = 0``, it keeps g and goes to the
    front of the waiting queue; its tokens in flight become stale and its placeholders are
    zeroed (S:1500-1511; VLLM-MODE.md 29: nothing in flight in the synchronous loop)."""
    vb.release_nb(bl, vq, rep, i, vr[v, TAILB], vr[v, NHIT], hb, gbase[v])
    _clear_nb(vr, v)
    vr[v, PREEMPTED] = 1
    vr[v, STALE] = vr[v, INFL]
    vr[v, PH] = 0
    requeue_nb(rep, req, i, v, t, p, mt)
    hold((bl, vq, vr, rep, req, gbase, hb))


@nb.njit(**JIT)
def _count_hits_nb(mt, p, preempted, htok, L):
    """vLLM's prefix-cache statistics of one admission in the window
    (``KVCacheManager.record_prefix_cache_stats``, ``PrefixCacheStats.record``): queries
    ``L = P + g`` tokens, hits ``htok``; a preempted attempt's re-admission is filed apart
    (``preempted_queries``, ``preempted_hits``); with prefix caching off nothing is queried."""
    if not p.prefix_caching:
        return
    if preempted:
        mt.preempted_hit_tokens += htok
        mt.preempted_tokens += L
    else:
        mt.hit_tokens += htok
        mt.admit_tokens += L


@nb.njit(**JIT)
def _placeholder_nb(vr, q, s, x):
    """AsyncScheduler._update_after_schedule (AS:19-49) for attempt s (record q), x
    tokens just scheduled (``q.c`` counts them): in flight; if its chunk reaches its
    length, placeholders included (not ``is_prefill_chunk``), it samples in this batch
    and gets one more placeholder."""
    vr[s, INFL] += x
    if q.c >= q.P + q.g + vr[s, PH]:
        vr[s, PH] += 1
        vr[s, SAMPLED] = 1


@nb.njit(**JIT)
def _hits_nb(tab, own, i, s, L, p, pk, pk_off, gbase, hb):
    """vLLM's ``get_computed_blocks`` for the admission of attempt s (record's ``L = P +
    g`` tokens) on replica i: its leading blocks whose keys are in the hash map, at most
    ``(L − 1) // b`` (0 with prefix caching off). Returns their number nh; the first-inserted
    block of each is ``hb[gbase[s] + j]``, j < nh, what the admission references and its
    release lets go (the hash map is not searched again for them)."""
    nh = np.int64(0)
    if p.prefix_caching:
        base = gbase[s]
        for j in range((L - 1) // p.block_tokens):
            x = vb.first_block_nb(tab, own, i, vb.key_of_nb(pk, pk_off, gbase, s, j))
            if x < 0:
                break
            hb[base + j] = x
            nh += 1
    hold((tab, own, pk, pk_off, gbase, hb))
    return nh


@nb.njit(**JIT)
def _schedule_nb(tab, own, bl, vq, vr, vs, rep, req, i, t, p, pk, pk_off, gbase, mt, cnt, ev, hb, asyn):
    """One ``schedule()`` (spec22b 10-14): the running loop, then (if nothing was
    preempted) the waiting loop. Returns whether something was preempted and the step's
    U, Q, n, K, R (R: the prefill chunks' Σ (c + x)) and prefilling count (spec22b 15,
    summed in scheduled order); the scheduled attempts are ``vs[i, :vq[i, NSCHED]]``.
    ``asyn``: AsyncScheduler's (VLLM-MODE.md 27): an attempt whose chunk reaches its
    length, placeholders included, gets one more placeholder (``vr[s, SAMPLED] = 1``), and
    its tokens count in flight. Placeholders are 0 in the synchronous loop, so the skip
    of an attempt whose last token is in flight (S:617-629) and the placeholders in its
    tokens to compute (S:655-660) change nothing there."""
    r = rep[i]
    b = p.block_tokens
    B = p.max_batched_tokens
    ns = 0
    preempted = False
    U = 0
    Q = 0.0
    n = 0
    K = 0
    R = 0
    chunks = 0
    s = r.r_head
    while s >= 0 and B > 0:
        q = req[s]
        ph = vr[s, PH]
        if ph > 0 and q.c + 2 - ph >= q.P + q.O:  # its last token is in flight (S:617-629)
            s = q.r_next
            continue
        x = min(q.P + q.g + ph - q.c, B)
        # most steps of a running attempt need no new block and fill no block (a decode
        # 15 times in 16): allocate_slots changes nothing then, so it is not called. (Its
        # blocks, ceil((c + x) / b), are at most those held; its full blocks, floor(min(c +
        # x, L) / b), at most those hashed: without a division, all being non-negative.)
        ok = q.c + x <= vr[s, HELD] * b and (
            not p.prefix_caching or min(q.c + x, q.P + q.g) < (vr[s, NCACHED] + 1) * b)
        if not ok:
            ok = _allocate_nb(tab, own, bl, vq, vr, rep, req, i, s, x, np.int64(0), np.bool_(False), p, pk, pk_off,
                              gbase, cnt, ev, hb)
        while not ok:
            v = r.r_tail
            _preempt_nb(bl, vq, vr, rep, req, i, v, t, p, gbase, mt, hb)
            preempted = True
            if v == s:
                break
            ok = _allocate_nb(tab, own, bl, vq, vr, rep, req, i, s, x, np.int64(0), np.bool_(False), p, pk, pk_off,
                              gbase, cnt, ev, hb)
        if not ok:
            break
        vs[i, ns] = s
        ns += 1
        c = q.c
        if c < q.u:   # prefilling: the first prefill, or the recompute after a preemption
            U += x
            Q += x * (c + x / 2.0)
            R += c + x
            chunks += 1
        else:
            n += 1
            K += c + 1
        q.x = x
        q.c = c + x
        if asyn:
            _placeholder_nb(vr, q, s, x)
        B -= x
        s = q.r_next
    if not preempted:
        window = in_window_nb(t, p)
        while r.n_wait > 0 and B > 0 and r.n_run < p.max_batch:
            h = r.w_head
            q = req[h]
            L = q.P + q.g
            nh = _hits_nb(tab, own, i, h, L, p, pk, pk_off, gbase, hb)
            htok = nh * b
            x = L - htok
            if not p.chunked_prefill and x > B:
                break
            x = min(x, B)
            if not _allocate_nb(tab, own, bl, vq, vr, rep, req, i, h, x, nh, np.bool_(True), p, pk, pk_off, gbase, cnt,
                                ev, hb):
                break
            pop_front_nb(rep, req, i)
            q.state = State.PREFILL
            q.adm = cnt[1]
            cnt[1] += 1
            run_append_nb(rep, req, i, h)
            q.m = htok
            q.u = L
            q.x = x
            q.c = htok + x
            if asyn:
                _placeholder_nb(vr, q, h, x)
            U += x   # an admission prefills (c = htok < L)
            Q += x * (htok + x / 2.0)
            R += htok + x
            chunks += 1
            vs[i, ns] = h
            ns += 1
            B -= x
            if window:
                _count_hits_nb(mt, p, vr[h, PREEMPTED], htok, L)
    vq[i, NSCHED] = ns
    hold((tab, own, bl, vq, vr, vs, rep, req, pk, pk_off, gbase, cnt, ev, hb))
    return preempted, U, Q, n, K, R, chunks


@nb.njit(**JIT)
def _start_nb(tab, own, bl, vq, vr, vs, rep, req, i, t, p, pk, pk_off, gbase, mt, cnt, ev, hb):
    """Start a step on replica i at t: schedule (again at once after a step that only
    preempted, D14), then its duration from U, Q, n, K, R (spec22b 15; docs/model.md
    "The step cost"). The hash map ``tab`` has room for every key there can be
    (:func:`_slots_nb`; the event loop never reassigns an array)."""
    r = rep[i]
    while True:  # a step that only preempted is no iteration: schedule again at once (D14)
        preempted, U, Q, n, K, R, chunks = _schedule_nb(tab, own, bl, vq, vr, vs, rep, req, i, t, p, pk, pk_off, gbase,
                                                     mt, cnt, ev, hb, SYNC)
        if vq[i, NSCHED] > 0 or not preempted:
            break
    if vq[i, NSCHED] == 0:
        raise RuntimeError("scheduler = vllm: a step schedules nothing and preempts nothing (a stall)")
    vb.sync_nb(r, vq, i)
    begin_nb(r, p, mt, t, n, K, U, Q, R, chunks)


@nb.njit(**JIT)
def _complete_nb(bl, vq, vr, rep, req, i, s, t, p, gbase, mt, done_log, n_done, hb):
    """Attempt s completes at t: released at once, it leaves the replica."""
    vb.release_nb(bl, vq, rep, i, vr[s, TAILB], vr[s, NHIT], hb, gbase[s])
    _clear_nb(vr, s)
    return leave_nb(rep, req, i, s, t, p, mt, done_log, n_done)


@nb.njit(**JIT)
def emit_nb(r, q, t, mt, window, prev_ms, gap_ms, gap_n, n_gap):
    """A token of attempt q (a REQUEST record) on replica record r reaches its client at
    t: ``g``, τ past the allowance, the first-token and last-token times, the token
    counters (``window``: t in the window). Returns 1 when its inter-token gap is
    ``t − prev_ms`` (the caller counts those in one row of gaps), else 0 (its gap, from
    its last token, is written here: an attempt re-admitted after a preemption, or not
    scheduled in the previous batch)."""
    same = np.int64(0)
    if q.g >= q.A:
        r.tau += 1
    if window:
        mt.tokens_window += 1
        r.tokens += 1
        if q.g > 0:
            if q.last_ms == prev_ms:
                same = np.int64(1)
            else:
                gap_nb(gap_ms, gap_n, n_gap, t - q.last_ms, np.int64(1))
    q.g += 1
    r.tokens_all += 1
    if math.isnan(q.first_ms):
        q.first_ms = t
    q.last_ms = t
    hold((gap_ms, gap_n, n_gap))
    return same


@nb.njit(**JIT)
def _finish_nb(tab, own, bl, vq, vr, vs, vp, rep, req, i, t, p, pk, pk_off, gbase, mt, done_log, n_done,
              gap_ms, gap_n, n_gap, hb):
    """End replica i's step at t (spec22b 17): first the attempts cancelled during the
    step are released, in the order they were cancelled (vLLM's ``EngineCore.step``
    processes the aborts received during the step before ``update_from_output``,
    EC:611-613); then, in scheduled order, each attempt still running whose prefill is
    complete emits a token and may complete (released at once). Returns the new length
    of done_log."""
    r = rep[i]
    r.busy = False
    for k in range(vq[i, NPEND]):
        vb.release_by_key_nb(tab, own, bl, vq, rep, i, vp[i, k, 1], vp[i, k, 2], vp[i, k, 0], pk, pk_off, gbase)
    vq[i, NPEND] = 0
    window = in_window_end_nb(t, p)
    dec = np.int64(0)
    for k in range(vq[i, NSCHED]):
        s = vs[i, k]
        q = req[s]
        q.x = 0
        if q.state != State.PREFILL or q.replica != i or q.c != q.P + q.g:
            continue
        dec += emit_nb(r, q, t, mt, window, r.begin_ms, gap_ms, gap_n, n_gap)
        if q.g == q.O:
            n_done = _complete_nb(bl, vq, vr, rep, req, i, s, t, p, gbase, mt, done_log, n_done, hb)
    if dec > 0:
        gap_nb(gap_ms, gap_n, n_gap, t - r.begin_ms, dec)
    vq[i, NSCHED] = 0
    vb.sync_nb(r, vq, i)
    return n_done


@nb.njit(**JIT)
def _cancel_nb(bl, vq, vr, vp, rep, req, i, s, t, p, gbase, hb):
    """Take request s's attempt off replica i at t (spec22b 18): out of the waiting queue
    or the running list at once; a running one's blocks are released at once on an idle
    replica, else when the step in progress ends (its output discarded)."""
    r = rep[i]
    q = req[s]
    if not unqueue_nb(rep, req, i, s):  # running
        if r.busy:
            k = vq[i, NPEND]
            vp[i, k, 0] = s
            vp[i, k, 1] = vr[s, TAILB]
            vp[i, k, 2] = vr[s, NHIT]
            vq[i, NPEND] = k + 1
        else:
            vb.release_nb(bl, vq, rep, i, vr[s, TAILB], vr[s, NHIT], hb, gbase[s])
        _clear_nb(vr, s)
        q.x = 0
        q.c = 0
        run_remove_nb(rep, req, i, s)
        r.tau -= tau_of_nb(q)
        vb.sync_nb(r, vq, i)
    vr[s, PREEMPTED] = 0  # (a waiting attempt holds no block: only its flag to clear)
    q.state = State.NONE
    q.replica = -1
    hold((bl, vq, vr, vp, rep, req, gbase, hb))


@nb.njit(**JIT)
def _crash_nb(tab, own, bl, vq, vr, rep, req, i, victims):
    """Replica i goes down (spec22b 19): every attempt on it ends, the scheduler is gone
    (every block free and unhashed, the hash map empty, pending releases dropped).
    ``victims`` receives the requests whose attempts failed; returns their number and the
    table entries deleted."""
    r = rep[i]
    nv = 0
    for s in range(req.shape[0]):
        q = req[s]
        if q.replica == i and in_flight_nb(q):
            q.state = State.NONE
            q.replica = -1
            q.kv = 0
            q.x = 0
            q.c = 0
            _clear_nb(vr, s)
            victims[nv] = s
            nv += 1
    gone = bk.drop_nb(tab, i)
    vb.forget_replica_nb(own, i)
    vb.reset_pool_nb(bl, vq, i)
    r.anon = 0
    r.idref = 0
    r.cached = 0
    r.healthy = False
    empty_nb(r)
    return nv, gone


# --- the scheduler's operations (scheduler.py) --------------------------------------------

Vllm = namedtuple("Vllm", ["bl", "vq", "vr", "vs", "vp", "pk", "pk_off", "gbase", "evicted", "slots", "hb", "own"])
STATE = Vllm
"""(Bound under its own name, ``Vllm``, for Numba's cache: see ``replica.Reserve``.) ``scheduler = "vllm"``'s own arrays: the pools ``bl, vq, vr, vs, vp`` (:func:`_arrays_nb`),
every prompt block's key ``pk, pk_off, gbase`` (vllm_blocks.prompt_keys_nb), ``evicted``
(1,) the evictions' count, ``slots`` the hash map's size (:func:`_slots_nb`) and ``hb``
the hit blocks of each request's attempt in flight (:func:`_hits_nb`; request s's from
``gbase[s]``), ``own`` the private keys' hash-map entries (vllm_blocks.py, "Private keys")."""


WORKLOAD_FIELDS = ("block_tokens",)
"""The PARAMS fields :func:`workload_nb` reads: runs of one workload that agree on these
share its result."""


@nb.njit(**JIT)
def workload_nb(p, seg_key, seg_len, seg_off, wl_P, wl_O):
    """What a run's state takes from its workload alone (``W``, computed once per workload
    and :data:`WORKLOAD_FIELDS` and shared by the runs that have them, read only): every
    prompt block's key (vllm_blocks.prompt_keys_nb) ``pk`` (prompt blocks,) with request
    s's at ``pk_off[s]:pk_off[s + 1]`` (requests + 1,), ``gbase`` (requests,) each
    request's base of own indices, ``shared`` the own indices a later prompt holds (not
    private; sorted), ``g`` the own indices in all, and ``keys`` the blocks whose key is in
    the segment table (:func:`_slots_nb`) while no attempt has failed.
    The run's ``own`` (g, OWN_FIELDS) is rebuilt from ``shared`` (:func:`own_nb`): it is
    written by the run, so never shared."""
    pk, pk_off, gbase, own, keys = vb.prompt_keys_nb(seg_key, seg_len, seg_off, wl_P, wl_O, p.block_tokens, True)
    g = own.shape[0]
    n_shared = 0
    for o in range(g):
        n_shared += own[o, vb.O_REP] == vb.SHARED
    shared = np.empty(n_shared, np.int64)
    k = 0
    for o in range(g):
        if own[o, vb.O_REP] == vb.SHARED:
            shared[k] = o
            k += 1
    return pk, pk_off, gbase, shared, np.int64(g), np.int64(keys)


@nb.njit(**JIT)
def private_run_nb(p):
    """Has a run of ``p`` private keys (vllm_blocks.py, "Private keys")? Without retries;
    with retries only when the routers read the live table (fresh signals): a failed
    attempt's keys enter it then (vllm_blocks.unprivate_nb), where a publication made
    before the failure would have held them, and a retry's router reads that."""
    return p.max_attempts == 1 or p.signal_mode == Signals.FRESH


@nb.njit(**JIT)
def unprivate_nb(X, S, p, s):
    """Request s's attempt left its scheduler unfinished (cancelled, or its replica
    crashed): with retries, its keys stop being private (vllm_blocks.unprivate_nb; a
    retry's router looks them up); the table entries it adds are counted in ``S.cnt``."""
    if p.max_attempts > 1 and private_run_nb(p):
        hi = X.gbase[s + 1] if s + 1 < X.gbase.shape[0] else X.own.shape[0]
        S.cnt[0] += vb.unprivate_nb(S.tab, X.own, X.gbase[s], hi)


@nb.njit(**JIT)
def own_nb(p, shared, g):
    """The private keys' entries at a run's start, as vllm_blocks.prompt_keys_nb makes them:
    (g, OWN_FIELDS) int32, every field ``FREE`` (no block holds the key) when the run has
    private keys (:func:`private_run_nb`), else ``SHARED``; the ``shared`` own indices'
    ``O_REP`` ``SHARED``."""
    own = np.full((g, vb.OWN_FIELDS), vb.FREE if private_run_nb(p) else vb.SHARED, np.int32)
    for k in range(shared.shape[0]):
        own[shared[k], vb.O_REP] = vb.SHARED
    return own


@nb.njit(**JIT)
def parts_nb(p, nrep, W, wl_P, wl_O):
    """The fields of :data:`STATE` for a run of ``p`` (PARAMS) over ``wl_P.shape[0]``
    requests on ``nrep`` replicas, in its order, from its workload's ``W``
    (:func:`workload_nb`), and the prompt segments the run sees (``pk_len``: each prompt
    as one-block segments of its blocks' keys, the routers reading the hash map as
    resident segments). The asynchronous loop's state (:mod:`.vllm_async_replica`)
    starts with the same fields: both build from here."""
    pk, pk_off, gbase, shared, g, keys = W
    own = own_nb(p, shared, g)
    n = wl_P.shape[0]
    if p.max_attempts > 1:  # a failed attempt's keys enter the table (unprivate_nb): room for every key
        keys = g - n  # (every block's key: (P + O) // b + 1 a request, as prompt_keys_nb counts them unrenamed)
    pk_len = np.ones(pk.shape[0], np.int64)
    bl, vq, vr, vs, vp = _arrays_nb(n, nrep, p.kv_blocks, p.max_batch)
    hb = np.empty(gbase[n - 1] + (wl_P[n - 1] + wl_O[n - 1]) // p.block_tokens + 2 if n > 0 else 0, np.int64)
    return (bl, vq, vr, vs, vp, pk, pk_off, gbase, np.zeros(1, np.int64), _slots_nb(p, nrep, keys), hb,
            own), pk_len


@nb.njit(**JIT)
def state_nb(p, nrep, W, seg_key, seg_len, seg_off, wl_P, wl_O):
    """The scheduler's state for a run of ``p`` (PARAMS) over ``wl_P.shape[0]`` requests on
    ``nrep`` replicas, from its workload's ``W`` (:func:`workload_nb`), and the prompt
    segments the run sees (:func:`parts_nb`)."""
    f, pk_len = parts_nb(p, nrep, W, wl_P, wl_O)
    X = STATE(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10], f[11])
    return X, X.pk, pk_len, X.pk_off


@nb.njit(**JIT)
def table_slots_nb(X, p, nrep):
    """Hash-map slots the run needs from the start (sized once: :func:`_slots_nb`)."""
    return X.slots


@nb.njit(**JIT)
def has_work_nb(X, S, i):
    """Phase 7: has idle replica i attempts to schedule (waiting or running)?"""
    r = S.rep[i]
    return r.n_run > 0 or r.n_wait > 0


@nb.njit(**JIT)
def start_nb(X, S, i, t, p, mt):
    """Start a step on idle replica i, which has work, at t (phase 7): its end time set.
    Returns 0, or (never, as the map is sized) the hash-map entries to make room for first."""
    if 2 * S.cnt[0] > S.tab.shape[0]:  # (a guard: never, as the map is sized, _slots_nb)
        return S.cnt[0] + step_room_nb(p)
    integrate_nb(S.rep[i], t, p)
    _start_nb(S.tab, X.own, X.bl, X.vq, X.vr, X.vs, S.rep, S.req, i, t, p, X.pk, X.pk_off, X.gbase, mt, S.cnt,
              X.evicted,
              X.hb)
    return np.int64(0)


@nb.njit(**JIT)
def _completes_nb(req, vq, vs, i):
    """Does an attempt of replica i's step in progress complete at its end (it emits its
    last token: :func:`_finish_nb`)?"""
    for k in range(vq[i, NSCHED]):
        q = req[vs[i, k]]
        if q.state == State.PREFILL and q.replica == i and q.c == q.P + q.g and q.g + 1 == q.O:
            return True
    return False


@nb.njit(**JIT)
def decode_on_nb(X, S, i, t, p, mt):
    """The event loop's shortcut for a time that has nothing else: replica i's step ending
    at t completes no attempt, so the loop has nothing to do between its end and the
    next step's start (phase 1, then phase 7: the replica still has running attempts).
    Then both, as the loop would (:func:`finish_nb`, :func:`start_nb`), and True; else
    nothing, and False."""
    if 2 * S.cnt[0] > S.tab.shape[0] or _completes_nb(S.req, X.vq, X.vs, i):
        return False
    integrate_nb(S.rep[i], t, p)
    finish_nb(X, S, i, t, p, mt, np.int64(0))  # (no completion: nothing in S.done_log)
    start_nb(X, S, i, t, p, mt)
    return True


@nb.njit(**JIT)
def finish_nb(X, S, i, t, p, mt, n_done):
    """End replica i's step at t (phase 1). Returns the new length of ``S.done_log``."""
    return _finish_nb(S.tab, X.own, X.bl, X.vq, X.vr, X.vs, X.vp, S.rep, S.req, i, t, p, X.pk, X.pk_off, X.gbase, mt,
                      S.done_log, n_done, S.gap_ms, S.gap_n, S.n_gap, X.hb)


@nb.njit(**JIT)
def cancel_nb(X, S, i, s, t, p):
    """Take request s's attempt off replica i at t (phase 3)."""
    _cancel_nb(X.bl, X.vq, X.vr, X.vp, S.rep, S.req, i, s, t, p, X.gbase, X.hb)
    unprivate_nb(X, S, p, s)


@nb.njit(**JIT)
def crash_nb(X, S, i, t, p):
    """Replica i goes down at t (phase 2): the requests whose attempts failed in
    ``S.victims``; returns their number and the hash-map entries deleted."""
    nv, gone = _crash_nb(S.tab, X.own, X.bl, X.vq, X.vr, S.rep, S.req, i, S.victims)
    for v in range(nv):
        unprivate_nb(X, S, p, S.victims[v])
    return nv, gone
