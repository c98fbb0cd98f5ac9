"""Timelines of queue-model runs (model.md), recorded from the compiled engine itself.

:func:`run` takes a queue grid of one condition (``routesim.trace`` narrows a stage to
it) and runs it through the very kernels a grid uses (:func:`engine.init_run_nb`,
:func:`engine.advance_nb`; the kernels are in :mod:`routesim.queue.timeline_kernels`),
sampling the state every ``interval_ms`` of simulated time. The Dataset is over a
``time`` dimension (seconds):

- per replica: the waiting queue, the in-service flag, health, the speed factor and
  the true mean service time it implies, the router's estimates ŝ, r̄ and n, and the
  routing decisions placed on it in each interval;
- cluster-wide: the rolling p99 over the last ``ROLLING_COMPLETIONS`` completions, the
  throughput over a trailing ``THROUGHPUT_WINDOW_MS`` window, and per interval the
  arrivals, sheds, completions and on-time completions;
- per run (no ``time``): the metrics of model.md §6, computed by the same function as
  a grid's, so the traced run's metrics equal the grid run's for the same point.

A state sampled at time ``s`` is the state after every step at a time ``<= s``.
Per-interval counts at sample ``j`` count what happened in ``(s_{j-1}, s_j]``.
"""

import math

import numpy as np
import xarray as xr

from ..grid import resolve, run_index
from ..results import coord_attrs, provenance, selected_attrs, variable_attrs
from ..tables import fmt
from ..theory import mean_demand_ms
from ..timeline import ROLLING_COMPLETIONS, THROUGHPUT_WINDOW_MS, summary_table
from .dtypes import EVENT_NAMES, LEVEL, METRICS, REPLICA, REQUEST, ROUTER, TAIL_LEVELS, WORK
from .engine import grid_end_ms
from .grid import replica_level_coords, run_variables
from .params import DEMAND_PARAMETERS, PARAM
from .timeline_kernels import CLUSTER_SAMPLE, REPLICA_SAMPLE, trace_batch_nb

VARIABLES = {
    # name: (units, description)
    "queue": ("requests", "waiting requests on the replica, the one in service not counted"),
    "in_service": ("1", "1 when the replica has a request in service"),
    "healthy": ("1", "1 when the replica is healthy (it takes traffic while its queue has room)"),
    "speed": ("1", "speed factor: service time per ms of demand (mean service / reference demand × scenario slowdown; larger is slower)"),
    "mean_service": ("ms", "true mean service time of a workload request on the replica: speed × mean demand × mean jitter"),
    "s_hat": ("ms", "router's EWMA of the replica's observed service time, ŝ"),
    "r_bar": ("1", "router's EWMA of the replica's reward max(0, 1 - s_obs / L), r̄"),
    "n_obs": ("requests", "completed observations of the replica, n"),
    "assignments": ("requests", "routing decisions placing a request on the replica in the interval ending at this time, re-routes included"),
    "rolling_p99": ("ms", f"p99 end-to-end latency of the last {ROLLING_COMPLETIONS} completions, any request "
                    "(nearest rank; NaN before the first)"),
    "rolling_throughput": ("requests/s", f"completions in the trailing {THROUGHPUT_WINDOW_MS:,.0f} ms window, per second"),
    "arrived": ("requests", "arrivals in the interval ending at this time"),
    "sheds": ("requests", "requests shed in the interval ending at this time (at arrival or at a failure's re-route)"),
    "completions": ("requests", "completions in the interval ending at this time"),
    "on_time": ("requests", "completions within the SLO (end-to-end) in the interval ending at this time"),
}
"""Units and description of every timeline variable (copied into the Dataset attrs)."""


def run(sweep, stage, g, selected, interval_ms):
    runs, n_rep = g.runs, g.replicas
    t_end = float(grid_end_ms.py_func(float(g.params["horizon_ms"][0]), float(g.params["dt_ms"][0])))
    n_samples = int(math.floor(t_end / interval_ms + 1e-9)) + 1
    sample_ms = np.arange(n_samples, dtype=np.float64) * interval_ms

    arrivals = g.arrivals()
    off = np.zeros(runs + 1, dtype=np.int64)
    np.cumsum(arrivals, out=off[1:])
    n = int(off[-1])
    rep = np.zeros((runs, n_rep), dtype=REPLICA)
    rep["base_speed"] = g.base_speed
    router = np.zeros(runs, dtype=ROUTER)
    o_rep = np.zeros((runs, n_samples, n_rep), dtype=REPLICA_SAMPLE)
    o_clu = np.zeros((runs, n_samples), dtype=CLUSTER_SAMPLE)
    metrics = np.zeros(runs, dtype=METRICS)
    levels = np.zeros((runs, TAIL_LEVELS), dtype=LEVEL)
    trace_batch_nb(g.params, rep, router, np.zeros((runs, n_rep + 1), dtype=WORK), levels,
                   np.empty(n, REQUEST), off, g.wl_t, g.wl_demand, g.wl_jitter, g.wl_off, g.ru,
                   g.ru_off, g.events, np.empty(n), np.empty(n),
                   np.empty((runs, ROLLING_COMPLETIONS)), sample_ms, ROLLING_COMPLETIONS,
                   THROUGHPUT_WINDOW_MS, o_rep, o_clu, metrics)
    tail = levels["fraction"]
    return _to_dataset(sweep, stage, g, selected, sample_ms, interval_ms, o_rep, o_clu, metrics, rep, tail)


def _interval(cumulative):
    """Per-interval counts from cumulative ones along the last (time) axis."""
    return np.diff(cumulative, axis=-1, prepend=0)


def _to_dataset(sweep, stage, g, selected, sample_ms, interval_ms, o_rep, o_clu, metrics, rep, tail):
    dims = list(g.coords)
    keep = [d for d in dims if d == "policy" or len(g.coords[d]) > 1]
    n_s, n_rep = sample_ms.shape[0], g.replicas

    def shaped(a, extra):
        """Flat runs (+ extra axes) -> the kept dimensions (+ extra axes)."""
        return a.reshape(tuple(len(g.coords[d]) for d in keep) + extra)

    def var(name, a, tail_dims):
        return (keep + tail_dims, a, variable_attrs(name, VARIABLES))

    per_rep = lambda f: shaped(o_rep[f], (n_s, n_rep))  # noqa: E731
    clu = lambda f: shaped(o_clu[f], (n_s,))  # noqa: E731
    values = resolve(stage, selected)
    idx = run_index(stage, values)
    wl_names = DEMAND_PARAMETERS
    per_run = {}
    demand = np.empty(g.runs)
    for r in range(g.runs):  # E[demand × jitter] of each run's workload parameters
        key = tuple(values[n][idx[n][r]] if n in idx else values[n][0] for n in wl_names)
        if key not in per_run:
            per_run[key] = mean_demand_ms({n: (v,) for n, v in zip(wl_names, key)})
        demand[r] = per_run[key]
    mean_demand = shaped(demand, ())[..., None, None]
    data = {
        "queue": var("queue", per_rep("qlen"), ["time", "replica"]),
        "in_service": var("in_service", per_rep("busy").astype(np.int8), ["time", "replica"]),
        "healthy": var("healthy", per_rep("healthy").astype(np.int8), ["time", "replica"]),
        "speed": var("speed", per_rep("speed"), ["time", "replica"]),
        "mean_service": var("mean_service", per_rep("speed") * mean_demand, ["time", "replica"]),
        "s_hat": var("s_hat", per_rep("s_hat"), ["time", "replica"]),
        "r_bar": var("r_bar", per_rep("r_bar"), ["time", "replica"]),
        "n_obs": var("n_obs", per_rep("n_obs"), ["time", "replica"]),
        "assignments": var("assignments", np.diff(per_rep("routed"), axis=-2, prepend=0), ["time", "replica"]),
        "rolling_p99": var("rolling_p99", clu("p99"), ["time"]),
        "rolling_throughput": var("rolling_throughput", clu("throughput"), ["time"]),
        "arrived": var("arrived", _interval(clu("arrived")), ["time"]),
        "sheds": var("sheds", _interval(clu("shed")), ["time"]),
        "completions": var("completions", _interval(clu("done")), ["time"]),
        "on_time": var("on_time", _interval(clu("on_time")), ["time"]),
    }
    data.update(run_variables(keep, shaped, metrics, rep, tail))
    # the scenario's events, for marking them on plots
    scen = g.coords["scenario"][0]
    evs = sweep.scenarios[scen]
    data["event_time"] = ("event", np.array([e.at_s for e in evs], dtype=np.float64),
                          {"units": "s", "description": "time of the scenario event"})
    data["event_kind"] = ("event", np.array([EVENT_NAMES[e.kind] for e in evs], dtype=str),
                          {"description": "rate_multiplier, slowdown, fail or recover"})
    data["event_replica"] = ("event", np.array([e.replica + 1 for e in evs], dtype=np.int64),
                             {"description": "replica number, 1-based; 0 for cluster-wide events"})
    data["event_value"] = ("event", np.array([e.value for e in evs], dtype=np.float64),
                           {"units": "1", "description": "rate multiplier or slowdown factor (absolute)"})

    coords = {d: (d, np.asarray(g.coords[d]), coord_attrs(d, PARAM)) for d in keep}
    for d in dims:
        if d not in keep:
            coords[d] = ((), np.asarray(g.coords[d])[0], coord_attrs(d, PARAM))
    coords["time"] = ("time", sample_ms / 1000.0, {"units": "s", "description": "simulated time of the sample"})
    coords.update(replica_level_coords(n_rep, tail.shape[1]))
    attrs = {"kind": "trace", **provenance(sweep, stage),
             "interval_ms": float(interval_ms),
             "rolling_completions": ROLLING_COMPLETIONS,
             "throughput_window_ms": THROUGHPUT_WINDOW_MS}
    attrs.update(selected_attrs(stage, selected))
    for name in PARAM:
        if name not in keep:
            attrs[name] = values[name][0]
    if len(per_run) == 1:
        attrs["mean_demand_ms"] = next(iter(per_run.values()))
    return xr.Dataset(data, coords=coords, attrs=attrs)


def summary(ds: xr.Dataset) -> str:
    """A short table of a trace: per run its attainment, p99 and its worst moments."""
    return summary_table(
        ds, ["attain %", "p99 ms", "max queue", "max rolling p99 ms", "sheds"],
        lambda one: [fmt(100 * float(one.attainment), ".2f"), fmt(float(one.latency_p99), ".1f"),
                     int(one.queue.max()), fmt(float(one.rolling_p99.max()), ".1f"), int(one.sheds.sum())])
