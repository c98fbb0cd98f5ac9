"""The compiled kernels of a queue-model timeline (:mod:`routesim.queue.timeline`): one run, or a small
grid of runs, through the very step of the engine (:func:`engine.init_run_nb`,
:func:`engine.advance_nb`), sampling the state every ``sample_ms``.

A state sampled at time ``s`` is the state after every step at a time ``<= s``.
"""

import numba as nb
import numpy as np

from ..conf import JIT, JIT_PARALLEL
from ..ranks import top_rank_nb
from .dtypes import Status
from .engine import advance_nb, end_time_nb, finish_nb, init_run_nb
from .metrics import run_metrics_nb
from .policies import outstanding_nb

REPLICA_SAMPLE = np.dtype(
    [
        ("qlen", np.int64),      # waiting requests
        ("busy", np.bool_),      # a request in service
        ("healthy", np.bool_),
        ("speed", np.float64),   # base_speed · slowdown
        ("s_hat", np.float64),   # ŝ_i
        ("r_bar", np.float64),   # r̄_i
        ("n_obs", np.int64),     # n_i
        ("routed", np.int64),    # routing decisions onto it so far (cumulative)
    ],
    align=True,
)
"""One replica at one sampling time: arrays of shape ``(runs, samples, replicas)``."""

CLUSTER_SAMPLE = np.dtype(
    [
        ("p99", np.float64),         # nearest-rank p99 of the last window_n completions' latencies
        ("throughput", np.float64),  # completions in (s - window, s], per second
        ("arrived", np.int64),       # cumulative counts since t = 0
        ("shed", np.int64),
        ("done", np.int64),
        ("on_time", np.int64),
    ],
    align=True,
)
"""The cluster at one sampling time: arrays of shape ``(runs, samples)``."""


@nb.njit(**JIT)
def record_nb(j, s, rep, ia, n_done, n_on, n_shed, lo, comp_t, comp_lat, lat_sort,
               window_n, tput_ms, o_rep, o_clu):
    """Write sample ``j`` (time ``s``); return the new first completion inside the
    throughput window."""
    for i in range(rep.shape[0]):
        o = o_rep[j, i]
        o.qlen = rep[i].qlen
        o.busy = rep[i].busy
        o.healthy = rep[i].healthy
        o.speed = rep[i].base_speed * rep[i].slowdown
        o.s_hat = rep[i].s_hat
        o.r_bar = rep[i].r_bar
        o.n_obs = rep[i].n_obs
        o.routed = rep[i].routed
    c = o_clu[j]
    m = min(n_done, window_n)               # the last m completions
    c.p99 = top_rank_nb(comp_lat[n_done - m:n_done], 99, lat_sort)
    while lo < n_done and comp_t[lo] <= s - tput_ms:   # window (s - W, s]
        lo += 1
    c.throughput = (n_done - lo) / (tput_ms / 1000.0)
    c.arrived = ia
    c.shed = n_shed
    c.done = n_done
    c.on_time = n_on
    return lo


@nb.njit(**JIT)
def trace_run_nb(p, rep, router, work, levels, req, u, t_arr, demand, jitter, events, sample_ms,
                 window_n, tput_ms, comp_t, comp_lat, lat_sort, o_rep, o_clu, out):
    """One run, exactly as :func:`engine.simulate_nb` runs it, sampled at ``sample_ms``.

    Before each active step at time ``T``, every sample time ``s < T`` not yet written
    is recorded (so a sample at ``s`` sees every step at a time ``<= s``). Completions
    of a step are the requests in service before it that are DONE after it, in replica
    order. Sheds of a step follow from conservation: in system before + arrivals -
    completions - in system after. Scratch comp_t, comp_lat: one slot per arrival;
    lat_sort: window_n slots (for :func:`top_rank_nb`). ``out``: METRICS record; the
    other state as in :func:`engine.simulate_nb`.
    """
    init_run_nb(p, rep, router, work, levels, req)
    t_end = end_time_nb(p)
    n_rep = rep.shape[0]
    n_s = sample_ms.shape[0]
    j = 0
    n_done, n_on, n_shed, lo = 0, 0, 0, 0
    before = np.empty(n_rep, np.int64)   # request in service before the step, or -1
    ia, ie, T = advance_nb(-np.inf, 0, 0, p, rep, router, work, levels, req, u, t_arr, demand,
                           jitter, events)  # no step: the time of the first
    while True:
        while j < n_s and sample_ms[j] < T:
            lo = record_nb(j, sample_ms[j], rep, ia, n_done, n_on, n_shed, lo, comp_t,
                            comp_lat, lat_sort, window_n, tput_ms, o_rep, o_clu)
            j += 1
        if T > t_end:
            break
        in_system = 0
        for i in range(n_rep):
            before[i] = rep[i].serving if rep[i].busy else -1
            in_system += outstanding_nb(rep[i])
        ia0 = ia
        ia, ie, T_next = advance_nb(T, ia, ie, p, rep, router, work, levels, req, u, t_arr, demand,
                                    jitter, events)  # exactly the step at T
        finished = 0
        for i in range(n_rep):
            q = before[i]
            if q >= 0 and req[q].status == Status.DONE:
                lat = T - t_arr[q]                       # end-to-end latency
                comp_t[n_done] = T
                comp_lat[n_done] = lat
                n_done += 1
                finished += 1
                if lat <= p.slo_ms:
                    n_on += 1
        after = 0
        for i in range(n_rep):
            after += outstanding_nb(rep[i])
        n_shed += in_system + (ia - ia0) - finished - after
        T = T_next
    finish_nb(p, rep, levels)
    run_metrics_nb(p, rep, router, levels, req, t_arr, out)


@nb.njit(**JIT_PARALLEL)
def trace_batch_nb(params, rep, router, work, levels, req, req_off, wl_t, wl_demand, wl_jitter,
                   wl_off, ru, ru_off, events, comp_t, comp_lat, lat_sort, sample_ms, window_n,
                   tput_ms, o_rep, o_clu, out):
    """Trace every run of a (small) grid: only the ``prange`` loop over runs.

    Shapes as in :func:`engine.run_batch_nb`; comp_t, comp_lat flat like ``req``;
    lat_sort (runs, window_n); o_rep (runs, samples, replicas) REPLICA_SAMPLE;
    o_clu (runs, samples) CLUSTER_SAMPLE.
    """
    for r in nb.prange(params.shape[0]):
        p = params[r]
        a, b = wl_off[p.workload], wl_off[p.workload + 1]
        ua, ub = ru_off[p.workload], ru_off[p.workload + 1]
        s0, s1 = req_off[r], req_off[r + 1]
        e0 = p.event_start
        trace_run_nb(p, rep[r], router[r], work[r], levels[r], req[s0:s1], ru[ua:ub], wl_t[a:b],
                     wl_demand[a:b], wl_jitter[a:b], events[e0:e0 + p.event_count], sample_ms,
                     window_n, tput_ms, comp_t[s0:s1], comp_lat[s0:s1], lat_sort[r], o_rep[r],
                     o_clu[r], out[r])
