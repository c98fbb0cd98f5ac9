"""One batching replica with ``scheduler = "vllm"`` and ``async_scheduling = true``,
compiled: vLLM 0.30.0's default loop, ``EngineCore.step_with_batch_queue`` with a batch
queue of 2 and the ``AsyncScheduler`` (conformance/VLLM-SCHEDULER.md §9,
conformance/VLLM-MODE.md 25-35; the reference's ``v_engine`` / ``v_output`` in
tests/token_reference.py).

The scheduler and the KV-cache manager are the synchronous mode's
(:mod:`.vllm_replica`: its ``_schedule_nb`` with placeholders, its blocks, preemption,
release, emission); this module is the engine loop around them on the step clock:

- ``start_nb`` (phase 7, the engine free at t): schedule a batch at ``S = t`` while the
  queue has room and something can be scheduled; a batch starts at ``max(S, gpu_free)``
  and lasts its step cost (0 ms when it schedules nothing); then wait for the oldest
  batch — processed at once if it has ended, else the replica is busy until its end.
- ``finish_nb`` (phase 1, the end of the batch the engine waits for): the aborts
  received meanwhile, then the batch's output (tokens, placeholders consumed, blocks
  cached, completions).

Per replica: the batch queue (at most :data:`QUEUE` batches, oldest first, each its
attempts ``bs``, tokens ``bx``, whether each samples ``bsm`` and its attempt number
``bt``, its size ``bn`` and end ``be``), its head ``aq[i, HEADQ]`` and length
``aq[i, NQ]``, *finished* (``aq[i, FIN]``: vLLM's ``finished_req_ids`` is non-empty) and
an abort of a waiting attempt received while the engine waited (``aq[i, ABORTED]``);
``gpu[i]`` when the GPU is free, ``prev[i]`` the end of the last batch processed that
scheduled something (the tokens whose previous one came with it share one row of
inter-token gaps). Per attempt, in
:mod:`.vllm_replica`'s ``vr``: placeholders, tokens in flight, stale tokens.
"""

from collections import namedtuple

import numba as nb
import numpy as np

from ..conf import JIT
from ..nrt import hold
from . import vllm_blocks as vb
from . import vllm_replica as vr_
from .dtypes import State
from .lists import run_remove_nb, wait_remove_nb
from .replica import done_nb, gap_nb, in_window_end_nb, integrate_nb, step_ms_nb, tau_of_nb, unqueue_nb
from .vllm_blocks import NPEND, NSCHED
from .vllm_replica import INFL, PH, SAMPLED, STALE

QUEUE = 2
"""vLLM's batch queue: ``VllmConfig.max_concurrent_batches`` with async scheduling
(config/vllm.py:589-599)."""

HEADQ = 0
NQ = 1
FIN = 2
ABORTED = 3
AQ_FIELDS = 4

ASYNC = np.bool_(True)
"""``vllm_replica._schedule_nb``'s ``asyn`` for this loop (typed, as its ``SYNC``)."""


@nb.njit(**JIT)
def _arrays_nb(nrep, max_batch):
    """The engine's per-run arrays: bs, bx, bsm, bt (replicas, QUEUE, max_batch), bn
    (replicas, QUEUE), be (replicas, QUEUE) ms, aq (replicas, AQ_FIELDS), gpu and prev
    (replicas,) ms."""
    shape = (nrep, QUEUE, max_batch)
    return (np.zeros(shape, np.int64), np.zeros(shape, np.int64), np.zeros(shape, np.int64),
            np.zeros(shape, np.int64), np.zeros((nrep, QUEUE), np.int64), np.zeros((nrep, QUEUE)),
            np.zeros((nrep, AQ_FIELDS), np.int64), np.zeros(nrep), np.full(nrep, -np.inf))


@nb.njit(**JIT)
def _forget_nb(vr, s):
    """Attempt s is gone (cancelled, crashed): no placeholder, nothing in flight, never
    preempted (a later attempt of s starts from none, and its first admission is a new
    one for vLLM's prefix-cache statistics; its batches' entries are void, _live_nb)."""
    vr[s, vr_.PREEMPTED] = 0
    vr[s, vr_.PH] = 0
    vr[s, vr_.INFL] = 0
    vr[s, vr_.STALE] = 0
    vr[s, vr_.SAMPLED] = 0


@nb.njit(**JIT)
def _has_requests_nb(r, aq, i):
    """``Scheduler.has_requests()`` (S:2671): waiting or running attempts, or one finished
    or aborted since the last schedule."""
    return r.n_run > 0 or r.n_wait > 0 or aq[i, FIN] != 0


@nb.njit(**JIT)
def _schedule_batch_nb(X, S, i, t, p, mt):
    """Schedule a batch on replica i at S = t and queue it (VLLM-MODE.md 26b, 27, 30): it
    starts at ``max(t, gpu_free)`` and lasts its step cost (the slowdown in force now, the
    cold factor at its start; 0 ms and no iteration when it schedules nothing). Returns
    whether it scheduled something and whether it preempted."""
    r = S.rep[i]
    preempted, U, Q, n, K, R, chunks = vr_._schedule_nb(S.tab, X.own, X.bl, X.vq, X.vr, X.vs, S.rep, S.req, i, t, p,
                                                        X.pk, X.pk_off, X.gbase, mt, S.cnt, X.evicted, X.hb, ASYNC)
    X.aq[i, FIN] = 0  # finished_req_ids handed to this batch
    slot = (X.aq[i, HEADQ] + X.aq[i, NQ]) % QUEUE
    ns = X.vq[i, NSCHED]
    for k in range(ns):
        s = X.vs[i, k]
        X.bs[i, slot, k] = s
        X.bx[i, slot, k] = S.req[s].x
        X.bsm[i, slot, k] = X.vr[s, SAMPLED]
        X.bt[i, slot, k] = S.req[s].tries
        X.vr[s, SAMPLED] = 0
    X.bn[i, slot] = ns
    X.vq[i, NSCHED] = 0
    start = max(t, X.gpu[i])
    d = 0.0
    if ns > 0:
        d = step_ms_nb(r, p, mt, start, n, K, U, Q, R, chunks)
    X.gpu[i] = start + d
    X.be[i, slot] = start + d
    X.aq[i, NQ] += 1
    vb.sync_nb(r, X.vq, i)
    return ns > 0, preempted


@nb.njit(**JIT)
def _live_nb(req, i, s, tries):
    """Is the attempt of request s numbered ``tries`` still on replica i (waiting or
    running)? Not when it finished, was cancelled or crashed (a later attempt of s may
    be on i: its number differs)."""
    q = req[s]
    return q.tries == tries and q.replica == i and (q.state == State.PREFILL or q.state == State.WAITING)


@nb.njit(**JIT)
def _output_nb(X, S, i, t, p, mt, n_done):
    """The oldest batch's output reaches replica i's engine at t (VLLM-MODE.md 28, 31):
    first the aborts received while the engine waited, in the order received; then, in
    scheduled order, each entry of an attempt still here drains its tokens in flight
    (and stale ones); one that samples in this batch receives a token at t, consumes a
    placeholder unless stale, has its blocks cached up to ``c − placeholders`` if it is
    running (AS:51-70), and at O tokens completes, released at once — from the running
    list, or from the waiting one if it was preempted meanwhile (29). Returns the new
    length of ``S.done_log``."""
    r = S.rep[i]
    req = S.req
    vr = X.vr
    slot = X.aq[i, HEADQ]
    X.aq[i, HEADQ] = (slot + 1) % QUEUE
    X.aq[i, NQ] -= 1
    r.busy = False
    r.end_ms = np.inf
    if X.vq[i, NPEND] > 0 or X.aq[i, ABORTED] != 0:
        X.aq[i, FIN] = 1
    for k in range(X.vq[i, NPEND]):
        vb.release_by_key_nb(S.tab, X.own, X.bl, X.vq, S.rep, i, X.vp[i, k, 1], X.vp[i, k, 2], X.vp[i, k, 0],
                             X.pk, X.pk_off, X.gbase)
    X.vq[i, NPEND] = 0
    X.aq[i, ABORTED] = 0
    window = in_window_end_nb(t, p)
    same = np.int64(0)
    b = p.block_tokens
    for k in range(X.bn[i, slot]):
        s = X.bs[i, slot, k]
        if not _live_nb(req, i, s, X.bt[i, slot, k]):
            continue
        q = req[s]
        x = X.bx[i, slot, k]
        vr[s, INFL] -= x
        stale = vr[s, STALE] > 0
        if stale:
            vr[s, STALE] -= x
        if X.bsm[i, slot, k] == 0:
            continue  # a partial chunk samples nothing
        same += vr_.emit_nb(r, q, t, mt, window, X.prev[i], S.gap_ms, S.gap_n, S.n_gap)
        if not stale:
            vr[s, PH] -= 1
        running = q.state == State.PREFILL
        if running and p.prefix_caching:
            vr_.hash_upto_nb(S.tab, X.own, X.bl, X.vq, vr, i, s, (q.c - vr[s, PH]) // b, X.pk, X.pk_off, X.gbase,
                                S.cnt)
        if q.g == q.O:
            X.aq[i, FIN] = 1
            if running:
                n_done = vr_._complete_nb(X.bl, X.vq, vr, S.rep, req, i, s, t, p, X.gbase, mt, S.done_log, n_done,
                                          X.hb)
            else:  # preempted meanwhile: it holds no block
                wait_remove_nb(S.rep, req, i, s)
                n_done = done_nb(S.rep, req, i, s, t, p, mt, S.done_log, n_done)
            _forget_nb(vr, s)
    if same > 0:
        gap_nb(S.gap_ms, S.gap_n, S.n_gap, t - X.prev[i], same)
    if X.bn[i, slot] > 0:
        X.prev[i] = t
    vb.sync_nb(r, X.vq, i)
    return n_done


@nb.njit(**JIT)
def _engine_nb(X, S, i, t, p, mt):
    """Replica i's engine, free at t, loops (VLLM-MODE.md 26; EC:630-744, 1403-1414):
    with requests, schedule a batch, and again at once while the queue has room and the
    batch ran something or more can be scheduled; then the oldest batch: processed at t
    if it has ended (its tokens at its end, here t), else the engine waits for it (the
    replica is busy until its end, phase 1). Idle when there is nothing to schedule or
    wait for."""
    r = S.rep[i]
    n_done = np.int64(0)  # (completions happen here only in 0 ms batches: none)
    while True:
        has = _has_requests_nb(r, X.aq, i)
        if not has and X.aq[i, NQ] == 0:
            r.busy = False
            r.end_ms = np.inf
            return
        if has:
            ran, preempted = _schedule_batch_nb(X, S, i, t, p, mt)
            if X.aq[i, NQ] < QUEUE and (ran or _has_requests_nb(r, X.aq, i)):
                continue
            if not ran and not preempted and (r.n_run > 0 or r.n_wait > 0) and _queue_empty_nb(X, i):
                raise RuntimeError("scheduler = vllm, async: a batch schedules nothing, nothing in flight (a stall)")
        end = X.be[i, X.aq[i, HEADQ]]
        if end > t:
            r.busy = True
            r.started += 1
            r.begin_ms = t
            r.end_ms = end
            return
        n_done = _output_nb(X, S, i, t, p, mt, n_done)
        if n_done > 0:
            raise RuntimeError("scheduler = vllm, async: a completion in a batch that ran nothing")


@nb.njit(**JIT)
def _queue_empty_nb(X, i):
    """Does every batch in replica i's queue schedule nothing?"""
    empty = True
    for k in range(X.aq[i, NQ]):
        empty = empty and X.bn[i, (X.aq[i, HEADQ] + k) % QUEUE] == 0
    return empty


# --- the scheduler's operations (scheduler.py) --------------------------------------------

VllmAsync = namedtuple("VllmAsync", ["bl", "vq", "vr", "vs", "vp", "pk", "pk_off", "gbase", "evicted", "slots", "hb",
                                 "own", "bs", "bx", "bsm", "bt", "bn", "be", "aq", "gpu", "prev"])
"""``scheduler = "vllm"`` with ``async_scheduling``'s own arrays: the synchronous mode's
(:data:`.vllm_replica.STATE`) and the engine's batch queue (module docstring)."""
STATE = VllmAsync  # (bound under its own name: pickle finds it by reference, as the others)

workload_nb = vr_.workload_nb
"""What a run takes from its workload alone: the synchronous mode's (one compiled function,
so that runs of either loop on one workload share its result)."""
WORKLOAD_FIELDS = vr_.WORKLOAD_FIELDS


@nb.njit(**JIT)
def state_nb(p, nrep, W, seg_key, seg_len, seg_off, wl_P, wl_O):
    """The scheduler's state for a run of ``p`` (PARAMS), from its workload's ``W`` (the
    synchronous mode's, :func:`.vllm_replica.workload_nb`), and the prompt segments the run
    sees: the synchronous mode's fields (:func:`.vllm_replica.parts_nb`, which holds no
    state type of that mode) and the engine's batch queue."""
    f, pk_len = vr_.parts_nb(p, nrep, W, wl_P, wl_O)
    bs, bx, bsm, bt, bn, be, aq, gpu, prev = _arrays_nb(nrep, p.max_batch)
    X = STATE(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10], f[11], bs, bx, bsm, bt, bn, be, aq,
              gpu, prev)
    return X, X.pk, pk_len, X.pk_off


@nb.njit(**JIT)
def table_slots_nb(X, p, nrep):
    """Hash-map slots the run needs from the start (sized once: vllm_replica._slots_nb)."""
    return X.slots


@nb.njit(**JIT)
def has_work_nb(X, S, i):
    """Phase 7: has replica i's engine, free, something to do: requests to schedule
    (:func:`_has_requests_nb`) or batches to wait for?"""
    return _has_requests_nb(S.rep[i], X.aq, i) or X.aq[i, NQ] > 0


@nb.njit(**JIT)
def start_nb(X, S, i, t, p, mt):
    """Replica i's engine is free at t (phase 7): run it (:func:`_engine_nb`). Returns 0,
    or (never, as the map is sized) the hash-map entries to make room for first."""
    if 2 * S.cnt[0] > S.tab.shape[0]:  # (a guard: never, as the map is sized)
        return S.cnt[0] + QUEUE * vr_.step_room_nb(p)
    integrate_nb(S.rep[i], t, p)
    _engine_nb(X, S, i, t, p, mt)
    return np.int64(0)


@nb.njit(**JIT)
def _completes_nb(X, req, i):
    """Does an attempt complete when the batch replica i's engine waits for delivers its
    output (it samples its last token there: :func:`_output_nb`)?"""
    slot = X.aq[i, HEADQ]
    for k in range(X.bn[i, slot]):
        s = X.bs[i, slot, k]
        if X.bsm[i, slot, k] != 0 and _live_nb(req, i, s, X.bt[i, slot, k]) and req[s].g + 1 == req[s].O:
            return True
    return False


@nb.njit(**JIT)
def decode_on_nb(X, S, i, t, p, mt):
    """The event loop's shortcut for a time that has nothing else: the batch replica i's
    engine waits for ends at t and completes no attempt, so the loop has nothing to do
    between its output and the engine's next turn (phase 1, then phase 7: the replica
    still has running attempts). Then both, as the loop would (:func:`finish_nb`,
    :func:`start_nb`), and True; else nothing, and False."""
    if 2 * S.cnt[0] > S.tab.shape[0] or _completes_nb(X, S.req, i):
        return False
    integrate_nb(S.rep[i], t, p)
    finish_nb(X, S, i, t, p, mt, np.int64(0))  # (no completion: nothing in S.done_log)
    start_nb(X, S, i, t, p, mt)
    return True


@nb.njit(**JIT)
def finish_nb(X, S, i, t, p, mt, n_done):
    """The batch replica i's engine waits for ends at t (phase 1): its output. Returns
    the new length of ``S.done_log``."""
    return _output_nb(X, S, i, t, p, mt, n_done)


@nb.njit(**JIT)
def cancel_nb(X, S, i, s, t, p):
    """Take request s's attempt off replica i at t (phase 3; VLLM-MODE.md 31): out of the
    waiting queue or the running list at once; on the scheduler an abort, processed at
    once (blocks released, *finished* set) when the engine does not wait for a batch,
    else when that batch's output arrives, before it. A black-holed attempt never
    reached the scheduler."""
    r = S.rep[i]
    q = S.req[s]
    waiting = q.state == State.WAITING
    if unqueue_nb(S.rep, S.req, i, s):
        if waiting:
            if r.busy:
                X.aq[i, ABORTED] = 1
            else:
                X.aq[i, FIN] = 1
    else:  # running
        if r.busy:
            k = X.vq[i, NPEND]
            X.vp[i, k, 0] = s
            X.vp[i, k, 1] = X.vr[s, vr_.TAILB]
            X.vp[i, k, 2] = X.vr[s, vr_.NHIT]
            X.vq[i, NPEND] = k + 1
        else:
            vb.release_nb(X.bl, X.vq, S.rep, i, X.vr[s, vr_.TAILB], X.vr[s, vr_.NHIT], X.hb, X.gbase[s])
            X.aq[i, FIN] = 1
        vr_._clear_nb(X.vr, s)
        q.x = 0
        q.c = 0
        run_remove_nb(S.rep, S.req, i, s)
        r.tau -= tau_of_nb(q)
        vb.sync_nb(r, X.vq, i)
    _forget_nb(X.vr, s)
    q.state = State.NONE
    q.replica = -1
    vr_.unprivate_nb(X, S, p, s)


@nb.njit(**JIT)
def crash_nb(X, S, i, t, p):
    """Replica i goes down at t (phase 2; VLLM-MODE.md 32): as the synchronous mode's
    crash, and both batches are abandoned, the queue emptied, ``gpu_free`` and
    *finished* reset. Returns the failed attempts' number (in ``S.victims``) and the
    hash-map entries deleted."""
    nv, gone = vr_.crash_nb(X, S, i, t, p)  # (the pool, the attempts, the victims' keys)
    for v in range(nv):
        _forget_nb(X.vr, S.victims[v])
    for f in range(AQ_FIELDS):
        X.aq[i, f] = 0
    X.gpu[i] = 0.0
    X.prev[i] = -np.inf
    return nv, gone
