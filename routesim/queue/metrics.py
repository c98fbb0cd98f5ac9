"""Per-run metrics (model.md §6): the compiled computation and each variable's meaning.

Cohort: requests arriving in ``[warm-up, horizon)``. Latency is end-to-end
(completion - arrival, ms). Percentiles are nearest rank,
``sorted[ceil(p·n/100) - 1]``, with the rank computed exactly in integers.
"""

import numba as nb
import numpy as np

from ..conf import JIT
from ..ranks import rank_nb, ranked_nb
from .dtypes import Status

VARIABLES = {
    # name: (units, description)
    "arrivals": ("requests", "cohort requests: arrivals in [warm-up, horizon)"),
    "completed": ("requests", "cohort requests completed by the horizon"),
    "shed": ("requests", "cohort requests shed: no eligible replica at arrival or re-route"),
    "unfinished": ("requests", "cohort requests still waiting or in service at the horizon"),
    "latency_p50": ("ms", "median end-to-end latency of completed cohort requests (nearest rank)"),
    "latency_p90": ("ms", "90th percentile end-to-end latency of completed cohort requests (nearest rank)"),
    "latency_p95": ("ms", "95th percentile end-to-end latency of completed cohort requests (nearest rank)"),
    "latency_p99": ("ms", "99th percentile end-to-end latency of completed cohort requests (nearest rank)"),
    "latency_mean": ("ms", "mean end-to-end latency of completed cohort requests"),
    "latency_max": ("ms", "largest end-to-end latency of a completed cohort request"),
    "slo_miss_rate": ("1", "completed cohort requests slower than the SLO, over completed cohort requests"),
    "shed_rate": ("1", "shed cohort requests over cohort arrivals"),
    "attainment": ("1", "cohort requests completed within the SLO, over cohort arrivals"),
    "goodput": ("requests/s", "cohort requests completed within the SLO, per second of measurement"),
    "throughput": ("requests/s", "completions of any request in (warm-up, horizon], per second"),
    "mean_in_system": ("requests", "time-average requests waiting or in service over the measurement window"),
    "queue_tail": ("1", "time-average fraction of replicas holding at least `level` requests (waiting + in service)"),
    "replica_mean_in_system": ("requests", "time-average requests waiting or in service at the replica"),
    "assigned": ("requests", "routing decisions placing a request on the replica in [warm-up, horizon), re-routes included"),
    "replica_completed": ("requests", "completions on the replica in (warm-up, horizon]"),
}
"""Units and one-line description of every result variable (copied into Dataset attrs)."""

PER_REPLICA = {"assigned": "assigned", "replica_completed": "completed",
               "replica_mean_in_system": "mean_in_system"}
"""Dataset variable <- REPLICA field."""


@nb.njit(**JIT)
def run_metrics_nb(p, rep, router, levels, req, t_arr, out):
    """Fill ``out`` (a METRICS record) from one finished run.

    req (arrivals,) REQUEST: status and completion times; t_arr (arrivals,) arrival
    times. The latencies are selected in a contiguous buffer of the run's own. From ``levels.area`` (replica·ms spent at
    each load) it writes ``levels.fraction``, the time-average fraction of replicas holding
    at least that many requests, and from ``rep.area`` (request·ms) ``rep.mean_in_system``,
    the replica's time-average load.
    """
    warm, horizon, slo = p.warmup_ms, p.horizon_ms, p.slo_ms
    measure_s = (horizon - warm) / 1000.0
    arrivals = 0
    shed = 0
    on_time = 0
    m = 0
    total = 0.0
    lat = np.empty(t_arr.shape[0])
    for q in range(t_arr.shape[0]):
        t = t_arr[q]
        if t < warm or t >= horizon:
            continue
        arrivals += 1
        if req[q].status == Status.DONE:
            x = req[q].done_ms - t
            lat[m] = x
            m += 1
            total += x
            if x <= slo:
                on_time += 1
        elif req[q].status == Status.SHED:
            shed += 1
    done = lat[:m]
    out.arrivals = arrivals
    out.completed = m
    out.shed = shed
    out.unfinished = arrivals - m - shed
    # nearest ranks in increasing order, each searching only at or above the previous
    out.latency_p50 = ranked_nb(done, 50, 0)
    out.latency_p90 = ranked_nb(done, 90, max(rank_nb(50, m), 0))
    out.latency_p95 = ranked_nb(done, 95, max(rank_nb(90, m), 0))
    out.latency_p99 = ranked_nb(done, 99, max(rank_nb(95, m), 0))
    out.latency_mean = total / m if m > 0 else np.nan
    out.latency_max = done[max(rank_nb(99, m), 0):].max() if m > 0 else np.nan
    out.slo_miss_rate = (m - on_time) / m if m > 0 else np.nan
    out.shed_rate = shed / arrivals if arrivals > 0 else np.nan
    out.attainment = on_time / arrivals if arrivals > 0 else np.nan
    out.goodput = on_time / measure_s
    out.throughput = router.completions / measure_s
    window = horizon - warm
    in_system = 0.0
    for i in range(rep.shape[0]):
        rep[i].mean_in_system = rep[i].area / window
        in_system += rep[i].mean_in_system
    out.mean_in_system = in_system
    acc = 0.0
    for k in range(levels.shape[0] - 1, -1, -1):  # fraction with >= k: levels k..K
        acc += levels[k].area
        levels[k].fraction = acc / (window * rep.shape[0])
