"""The compiled side taken apart: stepping and metrics timed as separate kernels.

``routesim.queue.engine.run_batch_nb`` simulates a run and computes its metrics in one
``prange`` iteration. The two kernels below do the same two jobs in two passes over
the same runs, with the arrays ``routesim.batch.simulate_range`` passes, so each can
be timed alone. :func:`split` checks that the two passes give exactly the
metrics of ``batch.simulate`` before it reports anything (if the engine's
signatures have moved on, the caller reports the split as unavailable).
"""

import time

import numba as nb
import numpy as np

from routesim.conf import JIT_PARALLEL
from routesim.queue.engine import simulate_nb
from routesim.queue.metrics import run_metrics_nb


@nb.njit(**JIT_PARALLEL)
def stepping_nb(params, rep, router, work, levels, req, req_off, wl_t, wl_demand, wl_jitter,
                wl_off, ru, ru_off, events):
    for r in nb.prange(params.shape[0]):
        p = params[r]
        a, b = wl_off[p.workload], wl_off[p.workload + 1]
        ua, ub = ru_off[p.workload], ru_off[p.workload + 1]
        e0 = p.event_start
        simulate_nb(p, rep[r], router[r], work[r], levels[r], req[req_off[r]:req_off[r + 1]],
                    ru[ua:ub], wl_t[a:b], wl_demand[a:b], wl_jitter[a:b],
                    events[e0:e0 + p.event_count])


@nb.njit(**JIT_PARALLEL)
def metrics_nb(params, rep, router, levels, req, req_off, wl_t, wl_off, out):
    for r in nb.prange(params.shape[0]):
        p = params[r]
        a, b = wl_off[p.workload], wl_off[p.workload + 1]
        run_metrics_nb(p, rep[r], router[r], levels[r], req[req_off[r]:req_off[r + 1]],
                       wl_t[a:b], out[r])


def split(grid, reference_outcome, repeats=3) -> dict:
    """{kernel: best seconds} for the whole grid in one chunk (as ``simulate_range``)."""
    from routesim.queue.grid import Outcome
    from routesim.queue.dtypes import LEVEL, REQUEST, TAIL_LEVELS, WORK

    out = Outcome.empty(grid)
    fresh = out.replicas.copy()
    off = np.zeros(grid.runs + 1, dtype=np.int64)
    np.cumsum(grid.arrivals(), out=off[1:])
    work = np.zeros((grid.runs, grid.replicas + 1), dtype=WORK)
    levels = np.zeros((grid.runs, TAIL_LEVELS), dtype=LEVEL)
    req = np.empty(int(off[-1]), REQUEST)

    def stepping():
        out.replicas[:] = fresh
        stepping_nb(grid.params, out.replicas, out.router, work, levels, req, off, grid.wl_t,
                    grid.wl_demand, grid.wl_jitter, grid.wl_off, grid.ru, grid.ru_off, grid.events)

    def metrics():  # it normalizes the time integrals in place: the cost is the same
        metrics_nb(grid.params, out.replicas, out.router, levels, req, off, grid.wl_t,
                   grid.wl_off, out.metrics)

    stepping()
    metrics()
    ref = reference_outcome.metrics
    for name in ref.dtype.names:
        if not np.array_equal(out.metrics[name], ref[name], equal_nan=True):
            raise AssertionError(f"split kernels disagree with batch.simulate on {name}")
    times = {}
    for name, fn in (("stepping (simulate_nb)", stepping), ("metrics (run_metrics_nb)", metrics)):
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        times[name] = best
    return times
