"""Step and batch kernels: the order of work of model.md §3.

One run is a loop over the *times at which something happens* (its active steps):
in discrete mode (``dt > 0``) every arrival, completion and scenario event is
processed at the first grid time ``k·dt`` at or after it, and steps in which nothing
happens are skipped, which changes no result (after each active step every replica
is busy or has an empty waiting queue, so an empty step would do nothing). In exact
mode (``dt = 0``) the same loop processes each event at its own time.

Within one step at time ``T`` the order is: completions, scenario events, arrivals
(each routed with the state left by everything before it), starts.

Requests are indexed ``0..n-1`` in arrival order within a run. Waiting queues are
FIFO linked lists through ``q_next``, so a run's memory grows with its arrivals and
not with ``queue_cap × replicas``.
"""

import math

import numba as nb
import numpy as np

from .conf import JIT, JIT_PARALLEL
from .dtypes import EventKind, Status
from .metrics import run_metrics_nb
from .policies import choose_nb, observe_nb, outstanding_nb


@nb.njit(**JIT)
def slot_nb(t, dt):
    """When something that happens at ``t`` (ms) is processed.

    Exact mode (``dt == 0``): ``t`` itself. Discrete mode: the first grid time
    ``k·dt >= t`` with ``k >= 1`` (the step from ``t_{k-1}`` to ``t_k`` contains ``t``),
    computed as the product ``k * dt`` so that equal grid times compare equal.
    """
    if dt == 0.0:
        return t
    k = np.int64(math.ceil(t / dt))
    if k > 1 and (k - 1) * dt >= t:
        k -= 1
    elif k * dt < t:
        k += 1
    if k < 1:
        k = 1
    return k * dt


@nb.njit(**JIT)
def end_time_nb(p):
    """The last processed time: the horizon on the grid (``K·dt``), or the horizon."""
    if p.dt_ms == 0.0:
        return p.horizon_ms
    return np.int64(round(p.horizon_ms / p.dt_ms)) * p.dt_ms


@nb.njit(**JIT)
def init_run_nb(p, rep, router, q_next, done_t, status, tail_area):
    """Reset a run's state; ``rep.base_speed`` is set by the caller."""
    for i in range(rep.shape[0]):
        rep[i].slowdown = 1.0
        rep[i].healthy = True
        rep[i].busy = False
        rep[i].serving = -1
        rep[i].start_ms = 0.0
        rep[i].end_ms = np.inf
        rep[i].head = -1
        rep[i].tail = -1
        rep[i].qlen = 0
        rep[i].s_hat = p.prior_service_ms                       # ŝ₀
        rep[i].r_bar = 1.0 - p.prior_service_ms / p.reward_ceiling_ms  # 1 - ŝ₀ / L
        rep[i].n_obs = 0
        rep[i].routed = 0
        rep[i].assigned = 0
        rep[i].completed = 0
        rep[i].area = 0.0
    router.cursor = 0
    router.throughput = 0
    router.draws = 0
    tail_area[:] = 0.0
    q_next[:] = -1
    done_t[:] = np.nan
    status[:] = Status.PENDING


@nb.njit(**JIT)
def enqueue_nb(rep, i, q, q_next):
    """Append request ``q`` to replica ``i``'s waiting queue."""
    q_next[q] = -1
    if rep[i].qlen == 0:
        rep[i].head = q
    else:
        q_next[rep[i].tail] = q
    rep[i].tail = q
    rep[i].qlen += 1


@nb.njit(**JIT)
def route_nb(q, t_decision, p, rep, router, u, ids, q_next, status):
    """Route request ``q`` at time ``t_decision``: append it to a replica, or shed it."""
    i = choose_nb(rep, router, p, u, ids)
    if i == -2:
        raise ValueError("unknown policy code")
    if i < 0:
        status[q] = Status.SHED
        return
    enqueue_nb(rep, i, q, q_next)
    router.cursor += 1
    rep[i].routed += 1
    if p.warmup_ms <= t_decision < p.horizon_ms:
        rep[i].assigned += 1


@nb.njit(**JIT)
def fail_nb(r, t_event, p, rep, router, u, ids, q_next, status):
    """Replica ``r`` fails: unhealthy first, then its waiting queue re-routed head first."""
    rep[r].healthy = False
    q = rep[r].head
    rep[r].head = -1
    rep[r].tail = -1
    rep[r].qlen = 0
    while q >= 0:
        nxt = q_next[q]
        route_nb(q, t_event, p, rep, router, u, ids, q_next, status)
        q = nxt


@nb.njit(**JIT)
def step_nb(T, ia, ie, p, rep, router, u, ids, t_arr, demand, jitter, events, q_next, done_t,
            status):
    """Advance one run by the step ending at ``T``; return the next arrival and event.

    ``ia``/``ie`` index the first arrival/event not yet processed.
    """
    dt = p.dt_ms
    n_rep = rep.shape[0]
    # 1. completions at T
    for i in range(n_rep):
        if rep[i].busy and rep[i].end_ms <= T:
            q = rep[i].serving
            observe_nb(rep, i, T - rep[i].start_ms, p)  # s_obs = T - start
            done_t[q] = T
            status[q] = Status.DONE
            rep[i].busy = False
            rep[i].serving = -1
            rep[i].end_ms = np.inf
            if T > p.warmup_ms:
                rep[i].completed += 1
                router.throughput += 1
    # 2. scenario events in (T - dt, T], in time order
    while ie < events.shape[0] and slot_nb(events[ie].time_ms, dt) <= T:
        ev = events[ie]
        kind = ev.kind
        if kind == EventKind.SLOWDOWN:
            rep[ev.replica].slowdown = ev.value
        elif kind == EventKind.FAIL:
            fail_nb(ev.replica, ev.time_ms, p, rep, router, u, ids, q_next, status)
        elif kind == EventKind.RECOVER:
            rep[ev.replica].healthy = True
        ie += 1  # EventKind.RATE: already in the workload's arrival times
    # 3. arrivals in (T - dt, T], in arrival order
    while ia < t_arr.shape[0] and slot_nb(t_arr[ia], dt) <= T:
        route_nb(ia, t_arr[ia], p, rep, router, u, ids, q_next, status)
        ia += 1
    # 4. starts at T
    for i in range(n_rep):
        if not rep[i].busy and rep[i].qlen > 0:
            q = rep[i].head
            rep[i].head = q_next[q]
            rep[i].qlen -= 1
            if rep[i].qlen == 0:
                rep[i].tail = -1
            speed = rep[i].base_speed * rep[i].slowdown
            rep[i].busy = True
            rep[i].serving = q
            rep[i].start_ms = T
            rep[i].end_ms = slot_nb(T + demand[q] * speed * jitter[q], dt)
            status[q] = Status.SERVING
    return ia, ie


@nb.njit(**JIT)
def next_time_nb(ia, ie, p, rep, t_arr, events):
    """The next time at which something happens (inf when nothing will)."""
    dt = p.dt_ms
    t = np.inf
    if ia < t_arr.shape[0]:
        t = slot_nb(t_arr[ia], dt)
    if ie < events.shape[0]:
        t = min(t, slot_nb(events[ie].time_ms, dt))
    for i in range(rep.shape[0]):
        if rep[i].busy:
            t = min(t, rep[i].end_ms)
    return t


@nb.njit(**JIT)
def accumulate_nb(t0, t1, p, rep, tail_area):
    """Add the state held over (t0, t1], clipped to the measurement window, to the
    time integrals: ``rep.area`` += o_i·Δt; ``tail_area[min(o_i, K)]`` += Δt."""
    lo = max(t0, p.warmup_ms)
    hi = min(t1, p.horizon_ms)
    if hi <= lo:
        return
    span = hi - lo
    top = tail_area.shape[0] - 1
    for i in range(rep.shape[0]):
        o = outstanding_nb(rep, i)
        rep[i].area += o * span
        tail_area[min(o, top)] += span


@nb.njit(**JIT)
def simulate_nb(p, rep, router, u, ids, t_arr, demand, jitter, events, q_next, done_t, status,
                tail_area):
    """Run one simulation from time 0 to the horizon, visiting only active steps.

    u: the run's router stream; ids (replicas,) scratch; tail_area (levels,) out:
    time in the window spent by replicas at each outstanding load (last level: or more).
    """
    init_run_nb(p, rep, router, q_next, done_t, status, tail_area)
    t_end = end_time_nb(p)
    ia, ie = 0, 0
    t_prev = 0.0
    while True:
        T = next_time_nb(ia, ie, p, rep, t_arr, events)
        if T > t_end:
            break
        accumulate_nb(t_prev, T, p, rep, tail_area)
        t_prev = T
        ia, ie = step_nb(T, ia, ie, p, rep, router, u, ids, t_arr, demand, jitter, events,
                         q_next, done_t, status)
    accumulate_nb(t_prev, t_end, p, rep, tail_area)


@nb.njit(**JIT_PARALLEL)
def run_batch_nb(params, rep, router, wl_t, wl_demand, wl_jitter, wl_off, ru, ru_off, events,
                 scratch_off, q_next, done_t, status, lat_buf, ids, tail, out):
    """Simulate every run of a batch and compute its metrics.

    params (runs,) PARAMS; rep (runs, replicas) REPLICA, in: ``base_speed``, out:
    final state; router (runs,) ROUTER, out; wl_* flat workload arrays with
    ``wl_off`` (workloads + 1,) offsets; ru the router streams (uniforms) of the
    workloads with ``ru_off`` (workloads + 1,) offsets; events (rows,) EVENT;
    scratch arrays are flat with ``scratch_off`` (runs + 1,) offsets, one slot per
    arrival of the run; ids (runs, replicas) scratch; tail (runs, levels) out: the
    time-average fraction of replicas with at least i requests; out (runs,) METRICS.
    """
    for r in nb.prange(params.shape[0]):
        p = params[r]
        a, b = wl_off[p.workload], wl_off[p.workload + 1]
        ua, ub = ru_off[p.workload], ru_off[p.workload + 1]
        s0, s1 = scratch_off[r], scratch_off[r + 1]
        e0 = p.event_start
        ev = events[e0:e0 + p.event_count]
        simulate_nb(p, rep[r], router[r], ru[ua:ub], ids[r], wl_t[a:b], wl_demand[a:b],
                    wl_jitter[a:b], ev, q_next[s0:s1], done_t[s0:s1], status[s0:s1], tail[r])
        run_metrics_nb(p, rep[r], router[r], wl_t[a:b], done_t[s0:s1], status[s0:s1],
                       lat_buf[s0:s1], tail[r], out[r])
