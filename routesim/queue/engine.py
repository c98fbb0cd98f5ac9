"""Step and batch kernels: the order of work of model.md §3.

One run is a loop over the *times at which something happens* (its active steps):
in discrete mode (``dt > 0``) every arrival, completion and scenario event is
processed at the first grid time ``k·dt`` at or after it, and steps in which nothing
happens are skipped, which changes no result (after each active step every replica
is busy or has an empty waiting queue, so an empty step would do nothing). In exact
mode (``dt = 0``) the same loop processes each event at its own time.

Within one step at time ``T`` the order is: completions, scenario events, arrivals
(each routed with the state left by everything before it), starts.

A run's state (all shapes per run): ``rep`` (replicas,) REPLICA; ``router`` a ROUTER
record; ``work`` (replicas + 1,) WORK: a min-heap of completion times
(routesim/heaps.py), the list of replicas that may start this step and a Fenwick tree
over E; ``levels`` (levels,) LEVEL: how many replicas hold each load, and the time
integrals behind ``queue_tail``; ``req`` (arrivals,) REQUEST. Requests are indexed
``0..n-1`` in arrival order within a run; waiting queues are FIFO linked lists through
``req.next`` (routesim/links.py), so memory grows with arrivals and not with
``queue_cap × replicas``. A step costs O(log replicas) plus the policy's own cost.
"""


import numba as nb
import numpy as np

from .. import heaps, links
from ..conf import JIT, JIT_PARALLEL
from .dtypes import EventKind, Status
from .metrics import run_metrics_nb
from .policies import bit_add_nb, choose_nb, observe_nb, outstanding_nb

_ONE_HEAP = np.int64(0)  # work holds one heap (routesim/heaps.py's row argument, unused)


@nb.njit(**JIT)
def slot_nb(t, dt):
    """When something that happens at ``t`` (ms) is processed.

    Exact mode (``dt == 0``): ``t`` itself. Discrete mode: the first grid time
    ``k·dt >= t`` with ``k >= 1`` (the step from ``t_{k-1}`` to ``t_k`` contains ``t``),
    computed as the product ``k * dt`` so that equal grid times compare equal.
    """
    if dt == 0.0:
        return t
    # k is kept as a float (an integer, exactly, far beyond any horizon in steps), and
    # estimated as t · (1/dt) rather than t / dt so that, inside advance_nb's loop, the
    # division is done once. The estimate is within one of the answer; the two checks
    # make it exact.
    k = np.ceil(t * (1.0 / dt))
    if k > 1.0 and (k - 1.0) * dt >= t:
        k -= 1.0
    elif k * dt < t:
        k += 1.0
    return max(k, 1.0) * dt


@nb.njit(**JIT)
def grid_end_ms(horizon_ms, dt_ms):
    """The last processed time: the horizon on the grid, ``K·dt`` with ``K = round(horizon
    / dt)``, or the horizon itself in exact mode (``dt = 0``). Compiled; plain Python
    callers (the sweep check, the timeline's samples) use ``grid_end_ms.py_func``."""
    if dt_ms == 0.0:
        return horizon_ms
    return np.int64(round(horizon_ms / dt_ms)) * dt_ms


@nb.njit(**JIT)
def end_time_nb(p):
    """The last processed time of a run (:func:`grid_end_ms` of its horizon and step)."""
    return grid_end_ms(p.horizon_ms, p.dt_ms)


# --- bookkeeping of the load o_i: time integrals, histogram, eligibility -----------
# Small helpers on records (one replica ``ri = rep[i]``) and scalars, so that the
# compiler inlines them into the loop of :func:`advance_nb`.

@nb.njit(**JIT)
def _window_nb(t0, t1, p):
    """Length of (t0, t1] inside the measurement window [warm-up, horizon]."""
    return max(0.0, min(t1, p.horizon_ms) - max(t0, p.warmup_ms))


@nb.njit(**JIT)
def _flush_nb(ri, T, p):
    """Integrate replica ``ri``'s load up to ``T`` (its load is about to change)."""
    ri.area += outstanding_nb(ri) * _window_nb(ri.t_mark, T, p)
    ri.t_mark = T


@nb.njit(**JIT)
def _level_add_nb(lv, delta, T, p, levels):
    """``delta`` replicas join load level ``lv`` at ``T``; integrate the level up to T."""
    levels[lv].area += levels[lv].count * _window_nb(levels[lv].t_mark, T, p)
    levels[lv].t_mark = T
    levels[lv].count += delta


@nb.njit(**JIT)
def _relevel_nb(old, new, T, p, levels):
    """A replica's load went from ``old`` to ``new`` at ``T``: move it in the histogram."""
    top = levels.shape[0] - 1
    old, new = min(old, top), min(new, top)
    if old != new:
        _level_add_nb(old, -1, T, p, levels)
        _level_add_nb(new, 1, T, p, levels)


@nb.njit(**JIT)
def _refresh_eligible_nb(i, ri, p, router, work):
    """Bring ``ri.elig``, |E| and the Fenwick tree up to date for replica ``i``."""
    now = ri.healthy and ri.qlen < p.queue_cap
    if now != ri.elig:
        ri.elig = now
        delta = 1 if now else -1
        router.n_elig += delta
        bit_add_nb(work, i, delta)


@nb.njit(**JIT)
def _mark_dirty_nb(i, ri, router, work):
    """Replica ``i`` may start a request at the end of this step."""
    if not ri.dirty:
        ri.dirty = True
        work[router.n_dirty].dirty = i
        router.n_dirty += 1


# --- the completion heap (end time, replica): routesim/heaps.py over ``work`` ---------------

@nb.njit(inline="always", **JIT)
def _heap_less_nb(work, w, a, b):
    """Does completion a come before b: earlier end time (one heap: ``w`` unused)."""
    return work[a].heap_t < work[b].heap_t


@nb.njit(inline="always", **JIT)
def _heap_swap_nb(work, w, a, b):
    x = work[a]
    y = work[b]
    x.heap_t, x.heap_i, y.heap_t, y.heap_i = y.heap_t, y.heap_i, x.heap_t, x.heap_i


@nb.njit(inline="always", **JIT)
def _heap_move_nb(work, w, dst, src):
    work[dst].heap_t, work[dst].heap_i = work[src].heap_t, work[src].heap_i


@nb.njit(**JIT)
def _heap_push_nb(t, i, router, work):
    n = router.heap_n
    work[n].heap_t, work[n].heap_i = t, i
    heaps.push_nb(work, _ONE_HEAP, n, _heap_less_nb, _heap_swap_nb)
    router.heap_n = n + 1


@nb.njit(**JIT)
def _heap_pop_nb(router, work):
    """Remove the earliest completion; return its replica."""
    top = work[0].heap_i
    heaps.pop_nb(work, _ONE_HEAP, router.heap_n, _heap_less_nb, _heap_move_nb)
    router.heap_n -= 1
    return top


# --- the run ---------------------------------------------------------------------------

@nb.njit(**JIT)
def init_run_nb(p, rep, router, work, levels, req):
    """Reset a run's state; ``rep.base_speed`` is set by the caller."""
    n_rep = rep.shape[0]
    router.cursor = 0
    router.completions = 0
    router.draws = 0
    router.n_elig = 0
    router.n_dirty = 0
    router.heap_n = 0
    for k in range(work.shape[0]):
        work[k].bit = 0
    for lv in range(levels.shape[0]):
        levels[lv].count = 0
        levels[lv].area = 0.0
        levels[lv].t_mark = 0.0
    levels[0].count = n_rep
    for i in range(n_rep):
        ri = rep[i]
        ri.slowdown = 1.0
        ri.healthy = True
        ri.busy = False
        ri.elig = False
        ri.dirty = False
        ri.serving = -1
        ri.start_ms = 0.0
        ri.end_ms = np.inf
        ri.head = -1
        ri.tail = -1
        ri.qlen = 0
        ri.s_hat = p.prior_service_ms                             # ŝ₀
        ri.r_bar = 1.0 - p.prior_service_ms / p.reward_ceiling_ms  # 1 - ŝ₀ / L
        ri.n_obs = 0
        ri.routed = 0
        ri.assigned = 0
        ri.completed = 0
        ri.area = 0.0
        ri.t_mark = 0.0
        _refresh_eligible_nb(i, ri, p, router, work)
    for q in range(req.shape[0]):
        req[q].next = -1
        req[q].status = Status.PENDING
        req[q].done_ms = np.nan


@nb.njit(**JIT)
def _detach_queue_nb(r, T, p, rep, router, work, levels):
    """Replica ``r`` fails: unhealthy, its waiting queue detached; return the queue's
    head (the requests stay linked through ``req.next``) for re-routing, head first."""
    rr = rep[r]
    rr.healthy = False
    _refresh_eligible_nb(r, rr, p, router, work)
    o = outstanding_nb(rr)
    _flush_nb(rr, T, p)
    q = rr.head
    rr.head = -1
    rr.tail = -1
    rr.qlen = 0
    _relevel_nb(o, outstanding_nb(rr), T, p, levels)
    return q


@nb.njit(**JIT)
def advance_nb(t_stop, ia, ie, p, rep, router, work, levels, req, u, t_arr, demand, jitter,
               events):
    """Process every active step at a time ``<= t_stop``; return (ia, ie, the time of
    the next active step, inf when nothing is left). The state between processed times
    is constant.

    Each active step at time ``T`` runs the four phases of model.md §3 in order. The
    processing times of the next arrival and the next event (``ta``, ``te``) are
    computed once each, not at every check. With ``t_stop`` = the time it returned, it
    processes exactly one step (and with ``t_stop = -inf`` none), which is how a trace
    samples the state between steps.

    The per-request work (completion, routing, start) is written out in this one loop,
    with only small helpers on records, rather than as functions taking the run's
    arrays: a call with array arguments costs more than the work it does (see
    docs/performance.md). Every routing decision, an arrival's or a re-route's after a
    failure, goes through the one routing block below.
    """
    dt = p.dt_ms
    n_arr, n_ev = t_arr.shape[0], events.shape[0]
    ta = slot_nb(t_arr[ia], dt) if ia < n_arr else np.inf
    te = slot_nb(events[ie].time_ms, dt) if ie < n_ev else np.inf
    while True:
        T = min(ta, te)
        if router.heap_n > 0:
            T = min(T, work[0].heap_t)
        if T > t_stop:
            return ia, ie, T
        # 1. completions at T
        while router.heap_n > 0 and work[0].heap_t <= T:
            i = _heap_pop_nb(router, work)
            ri = rep[i]
            observe_nb(ri, T - ri.start_ms, p)  # s_obs = T - start
            o = outstanding_nb(ri)
            _flush_nb(ri, T, p)
            rq = req[ri.serving]
            rq.done_ms = T
            rq.status = Status.DONE
            ri.busy = False
            ri.serving = -1
            ri.end_ms = np.inf
            _relevel_nb(o, o - 1, T, p, levels)
            if T > p.warmup_ms:
                ri.completed += 1
                router.completions += 1
            if ri.qlen > 0:
                _mark_dirty_nb(i, ri, router, work)
        # 2. scenario events in (T - dt, T], in time order, then 3. arrivals in
        # (T - dt, T], in arrival order; a failure's queue is re-routed, head first,
        # before the next event.
        rerouted = -1     # next request of a failed replica's detached queue
        t_failed = 0.0    # its decision time: the failure's
        while True:
            if rerouted >= 0:
                q, t_decision = rerouted, t_failed
                rerouted = req[q].next
            elif te <= T:
                ev = events[ie]
                kind = ev.kind
                if kind == EventKind.SLOWDOWN:
                    rep[ev.replica].slowdown = ev.value
                elif kind == EventKind.FAIL:
                    rerouted = _detach_queue_nb(ev.replica, T, p, rep, router, work, levels)
                    t_failed = ev.time_ms
                elif kind == EventKind.RECOVER:
                    rep[ev.replica].healthy = True
                    _refresh_eligible_nb(ev.replica, rep[ev.replica], p, router, work)
                # (EventKind.RATE: nothing to do, already in the workload's arrival times)
                ie += 1
                te = slot_nb(events[ie].time_ms, dt) if ie < n_ev else np.inf
                continue
            elif ta <= T:
                q, t_decision = ia, t_arr[ia]
                ia += 1
                ta = slot_nb(t_arr[ia], dt) if ia < n_arr else np.inf
            else:
                break
            # route request q (decided at t_decision, queued at T): append or shed
            i = choose_nb(rep, router, p, u, work)
            if i == -2:
                raise ValueError("unknown policy code")
            if i < 0:
                req[q].status = Status.SHED
                continue
            ri = rep[i]
            o = outstanding_nb(ri)
            _flush_nb(ri, T, p)
            links.append_nb(rep, req, i, q, "next", "head", "tail", "qlen")
            _relevel_nb(o, o + 1, T, p, levels)
            _refresh_eligible_nb(i, ri, p, router, work)
            _mark_dirty_nb(i, ri, router, work)
            router.cursor += 1
            ri.routed += 1
            if p.warmup_ms <= t_decision < p.horizon_ms:
                ri.assigned += 1
        # 4. starts at T: each replica on the start list that is idle takes its head
        for k in range(router.n_dirty):
            i = work[k].dirty
            ri = rep[i]
            ri.dirty = False
            if ri.busy or ri.qlen == 0:
                continue
            q = links.pop_front_nb(rep, req, i, "next", "head", "tail", "qlen")
            ri.busy = True  # its load does not change
            ri.serving = q
            ri.start_ms = T
            ri.end_ms = slot_nb(T + demand[q] * (ri.base_speed * ri.slowdown) * jitter[q], dt)
            req[q].status = Status.SERVING
            _heap_push_nb(ri.end_ms, i, router, work)
            _refresh_eligible_nb(i, ri, p, router, work)
        router.n_dirty = 0


@nb.njit(**JIT)
def finish_nb(p, rep, levels):
    """Close the time integrals at the end of the run."""
    t_end = end_time_nb(p)
    for lv in range(levels.shape[0]):
        _level_add_nb(lv, 0, t_end, p, levels)
    for i in range(rep.shape[0]):
        _flush_nb(rep[i], t_end, p)


@nb.njit(**JIT)
def simulate_nb(p, rep, router, work, levels, req, u, t_arr, demand, jitter, events):
    """Run one simulation from time 0 to the horizon, visiting only active steps."""
    init_run_nb(p, rep, router, work, levels, req)
    advance_nb(end_time_nb(p), 0, 0, p, rep, router, work, levels, req, u, t_arr, demand, jitter,
               events)
    finish_nb(p, rep, levels)


@nb.njit(**JIT_PARALLEL)
def run_batch_nb(params, rep, router, work, levels, req, req_off, wl_t, wl_demand, wl_jitter,
                 wl_off, ru, ru_off, events, out):
    """Simulate every run of a batch and compute its metrics.

    params (runs,) PARAMS; rep (runs, replicas) REPLICA, in: ``base_speed``, out: final
    state and per-replica counters; router (runs,) ROUTER; work (runs, replicas + 1)
    WORK scratch; levels (runs, levels) LEVEL, out: ``fraction``, the time-average
    fraction of replicas holding at least that many requests; req flat REQUEST scratch
    with ``req_off`` (runs + 1,) offsets, one row per arrival of the run; wl_* flat
    workload arrays with ``wl_off`` (workloads + 1,) offsets; ru the router streams
    (uniforms) of the workloads with ``ru_off`` (workloads + 1,) offsets; events
    (rows,) EVENT; out (runs,) METRICS.
    """
    for r in nb.prange(params.shape[0]):
        p = params[r]
        a, b = wl_off[p.workload], wl_off[p.workload + 1]
        ua, ub = ru_off[p.workload], ru_off[p.workload + 1]
        e0 = p.event_start
        run_req = req[req_off[r]:req_off[r + 1]]
        simulate_nb(p, rep[r], router[r], work[r], levels[r], run_req, ru[ua:ub], wl_t[a:b],
                    wl_demand[a:b], wl_jitter[a:b], events[e0:e0 + p.event_count])
        run_metrics_nb(p, rep[r], router[r], levels[r], run_req, wl_t[a:b], out[r])


KERNEL = run_batch_nb
"""The compiled function every run goes through (loaded from Numba's cache or compiled
once per process: ``routesim.schema``'s ``kernel_loads``)."""
