"""Timelines of a run, recorded from the compiled engine itself.

``routesim.trace(...)`` runs one condition (a rate, a heterogeneity setting, a
scenario and a seed) for one or more policies through the very kernels a grid uses
(:func:`engine.init_run_nb`, :func:`engine.advance_nb`) and samples the state every
``interval_ms`` of simulated time. The result is an xarray Dataset over a ``time``
dimension (seconds):

- per replica: the waiting queue, the in-service flag, health, the speed factor and
  the true mean service time it implies, the router's estimates ŝ, r̄ and n, and the
  routing decisions placed on it in each interval;
- cluster-wide: the rolling p99 over the last 250 completions, the throughput over a
  trailing 1,000 ms window, and per interval the arrivals, sheds, completions and
  on-time completions;
- per run (no ``time``): the metrics of model.md §6, computed by the same function as
  a grid's, so the traced run's metrics equal the grid run's for the same point.

A state sampled at time ``s`` is the state after every step at a time ``<= s``.
Per-interval counts at sample ``j`` count what happened in ``(s_{j-1}, s_j]``.

Command line::

    python -m routesim.trace SWEEP.toml --policy P --rate R --heterogeneity H \\
        --scenario S --seed N [--stage NAME] [--set alpha=0.05,0.15] [--out FILE.nc]

``routesim.trace`` (this module, and the function of the same name) is callable:
``routesim.trace(sweep, policy=[...], rate_rps=250, scenario="straggler", ...)``.
"""

import argparse
import math
import sys
import types
from dataclasses import replace
from pathlib import Path

import numba as nb
import numpy as np
import xarray as xr

from .conf import JIT, JIT_PARALLEL
from .config import PARAM, ConfigError, Stage, Sweep, _check_stage, _param_value, _Reader, load_sweep, parse_sweep
from .dtypes import EVENT_NAMES, LEVEL, METRICS, REPLICA, REQUEST, ROUTER, TAIL_LEVELS, WORK, Status
from .engine import advance_nb, end_time_nb, finish_nb, init_run_nb
from .metrics import VARIABLES, run_metrics_nb
from .policies import outstanding_nb

INTERVAL_MS = 10.0           # default sampling interval
ROLLING_COMPLETIONS = 250    # the rolling p99 covers the last this many completions
THROUGHPUT_WINDOW_MS = 1000.0

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
        ("p99", np.float64),         # nearest-rank p99 of the last ROLLING_COMPLETIONS latencies
        ("throughput", np.float64),  # completions in (s - window, s], per second
        ("arrived", np.int64),       # cumulative counts since t = 0
        ("shed", np.int64),
        ("done", np.int64),
        ("on_time", np.int64),
    ],
    align=True,
)
"""The cluster at one sampling time: arrays of shape ``(runs, samples)``."""

TRACE_VARIABLES = {
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
    "rolling_p99": ("ms", "p99 end-to-end latency of the last 250 completions, any request (nearest rank; NaN before the first)"),
    "rolling_throughput": ("requests/s", "completions in the trailing 1,000 ms window, per second"),
    "arrived": ("requests", "arrivals in the interval ending at this time"),
    "sheds": ("requests", "requests shed in the interval ending at this time (at arrival or at a failure's re-route)"),
    "completions": ("requests", "completions in the interval ending at this time"),
    "on_time": ("requests", "completions within the SLO (end-to-end) in the interval ending at this time"),
}
"""Units and description of every timeline variable (copied into the Dataset attrs)."""



# --------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------

@nb.njit(**JIT)
def top_rank_nb(values, p, top):
    """Nearest-rank percentile ``sorted(values)[ceil(p·m/100) - 1]`` (NaN when empty),
    found as the k-th largest, k = m - rank + 1, by one scan that keeps the k largest
    in ``top`` (descending). For p = 99 and m <= 250 values, k <= 3.
    """
    m = values.shape[0]
    if m == 0:
        return np.nan
    k = m - (p * m + 99) // 100 + 1
    for a in range(k):
        top[a] = -np.inf
    for v in values:
        if v > top[k - 1]:
            a = k - 1
            while a > 0 and top[a - 1] < v:
                top[a] = top[a - 1]
                a -= 1
            top[a] = v
    return top[k - 1]


@nb.njit(**JIT)
def _record_nb(j, s, rep, ia, n_done, n_on, n_shed, lo, comp_t, comp_lat, lat_sort,
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
            lo = _record_nb(j, sample_ms[j], rep, ia, n_done, n_on, n_shed, lo, comp_t,
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


# --------------------------------------------------------------------------------------
# The trace's stage: one condition of a sweep stage
# --------------------------------------------------------------------------------------

def _values(x):
    """A scalar or a sequence as a tuple of plain Python values."""
    vals = tuple(x) if isinstance(x, (list, tuple, range, np.ndarray)) else (x,)
    return tuple(_scalar(v) for v in vals)


def _source(source):
    """(sweep, default stage name, selections) of a Sweep, a sweep file or a stage's Dataset."""
    if isinstance(source, Sweep):
        return source, None, {}
    if isinstance(source, xr.Dataset):
        attrs = source.attrs
        sweep = parse_sweep(attrs["sweep_text"], attrs.get("sweep_file", "<dataset>"))
        selected = {k[len("selected_"):]: _scalar(v) for k, v in attrs.items() if k.startswith("selected_")}
        return sweep, attrs.get("stage"), selected
    return load_sweep(source), None, {}


def _scalar(v):
    return v.item() if hasattr(v, "item") else v


def trace_stage(sweep: Sweep, stage: Stage, *, policy=None, rate_rps=None, heterogeneity=None,
                scenario=None, seed=None, **params) -> Stage:
    """The stage of a trace: ``stage`` narrowed to one condition and seed.

    An axis left as None keeps the stage's value when it has only one (the seed: its
    first); ``policy`` None keeps every policy of the stage. Several policies, or
    several seeds, become dimensions of the trace. ``params`` override any
    parameter; a list becomes a dimension (e.g. ``alpha=[0.05, 0.15, 0.3]``).
    Raises ConfigError naming the argument.
    """
    rd = _Reader(sweep.path)
    values = dict(stage.values)

    def one(name, given, check=None):
        if given is None:
            if len(values[name]) != 1:
                shown = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values[name])
                rd.fail(name, f"stage {stage.name!r} has several ({shown}): give one")
            return (values[name][0],)
        vals = _values(given)
        if len(vals) != 1:
            rd.fail(name, f"a trace is one condition: give one value, got {len(vals)}")
        if check:
            check(vals[0])
        return vals

    def known(name, table):
        def check(v):
            if v not in table:
                rd.fail(name, f"unknown {name} {v!r} (known: {', '.join(table)})")
        return check

    def positive(v):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not v > 0:
            rd.fail("rate_rps", f"must be a number > 0, got {v!r}")

    from .policies import NAMES
    pols = values["policy"] if policy is None else _values(policy)
    for name in pols:
        known("policy", list(NAMES))(name)
    if len(set(pols)) != len(pols):
        rd.fail("policy", "a policy is listed twice")
    values["policy"] = tuple(pols)
    values["rate_rps"] = tuple(float(v) for v in one("rate_rps", rate_rps, positive))
    values["heterogeneity"] = one("heterogeneity", heterogeneity, known("heterogeneity", list(sweep.heterogeneity)))
    values["scenario"] = one("scenario", scenario, known("scenario", list(sweep.scenarios)))
    seeds = (values["seed"][0],) if seed is None else _values(seed)
    values["seed"] = tuple(rd.number(v, "seed", int) for v in seeds)
    if not values["seed"] or min(values["seed"]) < 0 or len(set(values["seed"])) != len(values["seed"]):
        rd.fail("seed", f"expected distinct seeds >= 0, got {seeds!r}")

    swept = list(stage.swept)
    inherit = list(stage.inherit)
    for name, given in params.items():
        if name not in PARAM:
            rd.fail(name, "unknown parameter (known: " + ", ".join(PARAM) + ")")
        vals = _values(given)
        if not vals:
            rd.fail(name, "empty axis: give at least one value")
        values[name] = tuple(_param_value(rd, PARAM[name], v, name) for v in vals)
        if name in inherit:
            inherit.remove(name)
        if name != "exploration" and name not in swept and isinstance(given, (list, tuple, np.ndarray)):
            swept.append(name)
    narrowed = replace(stage, values=values, swept=tuple(swept), inherit=tuple(inherit), select=None)
    _check_stage(rd, narrowed, sweep.heterogeneity, sweep.scenarios,
                 {"heterogeneity": "heterogeneity", **{n: n for n in params}})
    return narrowed


def mean_demand_ms(values: dict) -> float:
    """E[demand × jitter] of the workload (model.md §2), exactly up to float rounding.

    ``values``: parameter name -> tuple whose first item is used. Tokens are
    ``clip(rint(median · exp(sigma · z)), min, max)`` with ``z`` standard normal, so
    E[tokens] is a sum over integers of k · P(rint = k); jitter is uniform; the
    exponential and constant demands have mean ``reference_demand_ms``.
    """
    def mean_tokens(kind):
        med, sig = values[f"{kind}_tokens_median"][0], values[f"{kind}_tokens_sigma"][0]
        lo, hi = int(values[f"{kind}_tokens_min"][0]), int(values[f"{kind}_tokens_max"][0])
        if sig == 0:
            return float(min(max(round(med), lo), hi))
        k = np.arange(lo, hi + 1, dtype=np.float64)
        # z at which med · exp(sig · z) = k ± 0.5; P(k) = Φ(z+) - Φ(z-), open ends clipped
        z = (np.log(np.maximum(np.r_[k - 0.5, hi + 0.5], 1e-300)) - math.log(med)) / sig
        cdf = np.array([0.5 * math.erfc(-x / math.sqrt(2.0)) for x in z])
        cdf[0], cdf[-1] = 0.0, 1.0
        return float(np.dot(k, np.diff(cdf)))

    kind = values.get("demand", ("tokens",))[0]
    if kind == "tokens":
        d = (values["demand_ms_base"][0]
             + values["demand_ms_per_prompt_token"][0] * mean_tokens("prompt")
             + values["demand_ms_per_output_token"][0] * mean_tokens("output"))
    else:  # exponential with this mean, or this constant
        d = values["reference_demand_ms"][0]
    return d * 0.5 * (values["jitter_min"][0] + values["jitter_max"][0])


# --------------------------------------------------------------------------------------
# The public wrapper
# --------------------------------------------------------------------------------------

def trace(source, *, policy=None, rate_rps=None, heterogeneity=None, scenario=None, seed=None,
          stage: str | None = None, selected: dict | None = None, interval_ms: float = INTERVAL_MS,
          show_progress: bool = False, **params) -> xr.Dataset:
    """Timelines of one condition for one or more policies (see the module docstring).

    ``source``: a parsed Sweep, a sweep file's path, or a stage's result Dataset (its
    sweep text, stage and selected values are read from its attrs). ``stage``: the
    stage whose settings apply (default: the Dataset's, else the sweep's last).
    ``selected``: values of parameters the stage inherits from an earlier selection;
    when one is missing the selecting stages are run first (``show_progress`` shows
    them). ``params``: parameter overrides; a list becomes a dimension. Raises
    ConfigError (naming the argument) on bad input.
    """
    plan = prepare(source, policy=policy, rate_rps=rate_rps, heterogeneity=heterogeneity,
                   scenario=scenario, seed=seed, stage=stage, selected=selected,
                   interval_ms=interval_ms, **params)
    return plan.run(show_progress=show_progress)


class Plan:
    """A validated trace, ready to run: ``sweep``, the narrowed ``stage``, the
    ``selected`` values known so far, and the ``sources``: earlier stages to run for
    the inherited values still missing."""

    def __init__(self, sweep, stage, selected, sources, interval_ms):
        self.sweep, self.stage, self.selected = sweep, stage, selected
        self.sources, self.interval_ms = sources, interval_ms

    def run(self, show_progress: bool = False) -> xr.Dataset:
        from . import grid as grid_mod
        chosen = dict(self.selected)
        if self.sources:  # run the earlier stages that select them (and what those need)
            from .study import run
            earlier = run(self.sweep, stages=self.sources, show_progress=show_progress)
            chosen.update({k[len("selects_"):]: _scalar(v) for ds in earlier.values()
                           for k, v in ds.attrs.items() if k.startswith("selects_")})
        g = grid_mod.build(self.sweep, self.stage, chosen)
        return _run(self.sweep, self.stage, g, chosen, self.interval_ms)


def prepare(source, *, policy=None, rate_rps=None, heterogeneity=None, scenario=None, seed=None,
            stage: str | None = None, selected: dict | None = None, interval_ms: float = INTERVAL_MS,
            **params) -> Plan:
    """Validate the arguments of :func:`trace` without simulating anything."""
    sweep, ds_stage, ds_selected = _source(source)
    names = [s.name for s in sweep.stages]
    stage = stage or ds_stage or names[-1]
    if stage not in names:
        raise ConfigError(sweep.path, "stage", f"no stage named {stage!r} (stages: {', '.join(names)})")
    base = sweep.stages[names.index(stage)]
    if not interval_ms > 0:
        raise ConfigError(sweep.path, "interval_ms", f"must be > 0, got {interval_ms!r}")
    narrowed = trace_stage(sweep, base, policy=policy, rate_rps=rate_rps, heterogeneity=heterogeneity,
                           scenario=scenario, seed=seed, **params)
    chosen = dict(ds_selected)
    chosen.update(selected or {})
    missing = [n for n in narrowed.inherit if n not in chosen]
    before = sweep.stages[:names.index(stage)]
    sources = sorted({[s for s in before if s.select and s.select.parameter == n][-1].name for n in missing})
    return Plan(sweep, narrowed, chosen, sources, float(interval_ms))


def _run(sweep, stage, g, selected, interval_ms):
    runs, n_rep = g.runs, g.replicas
    t_end = float(g.params["horizon_ms"][0]) if g.params["dt_ms"][0] == 0 else \
        round(g.params["horizon_ms"][0] / g.params["dt_ms"][0]) * float(g.params["dt_ms"][0])
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
    tail = levels["area"]
    return _to_dataset(sweep, stage, g, selected, sample_ms, interval_ms, o_rep, o_clu, metrics, rep, tail)


def _interval(cumulative):
    """Per-interval counts from cumulative ones along the last (time) axis."""
    return np.diff(cumulative, axis=-1, prepend=0)


def _to_dataset(sweep, stage, g, selected, sample_ms, interval_ms, o_rep, o_clu, metrics, rep, tail):
    from . import grid as grid_mod
    from .results import PER_REPLICA, _coord_attrs, version

    dims = list(g.coords)
    keep = [d for d in dims if d == "policy" or len(g.coords[d]) > 1]
    n_s, n_rep = sample_ms.shape[0], g.replicas

    def shaped(a, extra):
        """Flat runs (+ extra axes) -> the kept dimensions (+ extra axes)."""
        return a.reshape(tuple(len(g.coords[d]) for d in keep) + extra)

    def var(name, a, tail_dims):
        units, desc = TRACE_VARIABLES[name]
        return (keep + tail_dims, a, {"units": units, "description": desc})

    per_rep = lambda f: shaped(o_rep[f], (n_s, n_rep))  # noqa: E731
    clu = lambda f: shaped(o_clu[f], (n_s,))  # noqa: E731
    values = grid_mod.resolve(stage, selected)
    idx = grid_mod._index(stage, values)
    wl_names = [n for n in PARAM if PARAM[n].section == "workload" or n == "reference_demand_ms"]
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
    for name in metrics.dtype.names:
        units, desc = VARIABLES[name]
        data[name] = (keep, shaped(metrics[name], ()), {"units": units, "description": desc})
    for name, field in PER_REPLICA.items():
        units, desc = VARIABLES[name]
        data[name] = (keep + ["replica"], shaped(rep[field], (n_rep,)), {"units": units, "description": desc})
    units, desc = VARIABLES["queue_tail"]
    data["queue_tail"] = (keep + ["level"], shaped(tail, (tail.shape[1],)), {"units": units, "description": desc})
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

    coords = {d: (d, np.asarray(g.coords[d]), _coord_attrs(d)) for d in keep}
    for d in dims:
        if d not in keep:
            coords[d] = ((), np.asarray(g.coords[d])[0], _coord_attrs(d))
    coords["time"] = ("time", sample_ms / 1000.0, {"units": "s", "description": "simulated time of the sample"})
    coords["replica"] = ("replica", np.arange(1, n_rep + 1), _coord_attrs("replica"))
    coords["level"] = ("level", np.arange(tail.shape[1]), _coord_attrs("level"))
    attrs = {
        "kind": "trace",
        "sweep_name": sweep.name,
        "stage": stage.name,
        "routesim_version": version(),
        "sweep_file": str(sweep.path),
        "sweep_text": sweep.text,
        "interval_ms": float(interval_ms),
        "rolling_completions": ROLLING_COMPLETIONS,
        "throughput_window_ms": THROUGHPUT_WINDOW_MS,
    }
    for name in stage.inherit:
        attrs[f"selected_{name}"] = selected[name]
    for name in PARAM:
        if name not in keep:
            attrs[name] = values[name][0]
    if len(per_run) == 1:
        attrs["mean_demand_ms"] = next(iter(per_run.values()))
    return xr.Dataset(data, coords=coords, attrs=attrs)


# --------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------

def _parser():
    ap = argparse.ArgumentParser(
        prog="python -m routesim.trace",
        description="Record timelines of one condition of a sweep's stage, for one or more "
                    "policies, from the compiled engine; write them as netCDF.")
    ap.add_argument("sweep", type=Path, help="sweep file (TOML)")
    ap.add_argument("--policy", action="append", default=None, metavar="P",
                    help="policy to trace (repeatable or comma-separated; default: every policy of the stage)")
    ap.add_argument("--rate", default=None, metavar="R", help="base arrival rate, requests/s")
    ap.add_argument("--heterogeneity", default=None, metavar="H", help="named replica setting")
    ap.add_argument("--scenario", default=None, metavar="S", help="named scenario")
    ap.add_argument("--seed", default=None, metavar="N",
                    help="workload seed, or several comma-separated (default: the stage's first)")
    ap.add_argument("--stage", default=None, metavar="NAME", help="stage whose settings apply (default: the last)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=V[,V...]",
                    help="override a parameter, e.g. alpha=0.05,0.15,0.3 (several values: a dimension)")
    ap.add_argument("--interval-ms", default=str(INTERVAL_MS), metavar="MS", help="sampling interval (default 10)")
    ap.add_argument("--out", type=Path, default=None, metavar="FILE.nc",
                    help="output file (default results/<name>/trace-<scenario>-<heterogeneity>-<rate>rps-seed<N>.nc)")
    ap.add_argument("--quiet", action="store_true", help="no progress and no summary")
    return ap


_FLAGS = {"rate_rps": "--rate", "heterogeneity": "--heterogeneity", "scenario": "--scenario",
          "seed": "--seed", "policy": "--policy", "stage": "--stage", "interval_ms": "--interval-ms"}


def _number(text, key, path, kind=float):
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(path, key, f"expected a number, got {text!r}") from None


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        sweep = load_sweep(args.sweep)
        params = {}
        for item in args.set:
            key, sep, text = item.partition("=")
            key = key.strip()
            if not sep or not text:
                raise ConfigError(args.sweep, "--set", f"expected KEY=VALUE, got {item!r}")
            if key not in PARAM:
                raise ConfigError(args.sweep, f"--set {key}", "unknown parameter (known: " + ", ".join(PARAM) + ")")
            vals = [_number(v, f"--set {key}", args.sweep) for v in text.split(",")]
            params[key] = vals if len(vals) > 1 else vals[0]
        policies = None
        if args.policy:
            policies = [p.strip() for item in args.policy for p in item.split(",") if p.strip()]
        kw = dict(policy=policies, heterogeneity=args.heterogeneity, scenario=args.scenario,
                  stage=args.stage, interval_ms=_number(args.interval_ms, "--interval-ms", args.sweep),
                  **params)
        if args.rate is not None:
            kw["rate_rps"] = _number(args.rate, "--rate", args.sweep)
        if args.seed is not None:
            seeds = [_number(v, "--seed", args.sweep, int) for v in args.seed.split(",")]
            kw["seed"] = seeds if len(seeds) > 1 else seeds[0]
        plan = prepare(sweep, **kw)
    except ConfigError as exc:
        flag = _FLAGS.get(exc.key, f"--set {exc.key}" if exc.key in PARAM else exc.key)
        print(f"error: {ConfigError(exc.file, flag, exc.message)}", file=sys.stderr)
        return 2
    if plan.sources and not args.quiet:
        print(f"stage {plan.stage.name!r} uses the value selected by {', '.join(plan.sources)}: "
              "running it first (give it with --set to skip)", file=sys.stderr, flush=True)
    if not args.quiet:
        print("tracing…", file=sys.stderr, flush=True)
    ds = plan.run(show_progress=not args.quiet)

    from .results import write_atomic
    out = args.out
    if out is None:
        out = Path("results") / sweep.name / (
            f"trace-{ds.scenario.values.item()}-{ds.heterogeneity.values.item()}-"
            f"{float(ds.rate_rps.values):g}rps-seed{'-'.join(str(int(x)) for x in np.atleast_1d(ds.seed.values))}.nc")
    write_atomic(ds, out)
    if not args.quiet:
        print(summary(ds))
        print(f"\nwrote {out}")
    return 0


def summary(ds: xr.Dataset) -> str:
    """A short table of a trace: per run its attainment, p99 and its worst moments."""
    from .summary import table

    def fmt(x, spec):
        return "—" if not np.isfinite(x) else format(x, spec)

    point = ", ".join(f"{d} = {ds[d].values.item()}" for d in ("rate_rps", "heterogeneity", "scenario", "seed")
                      if d in ds.coords and ds[d].ndim == 0)
    dims = list(ds.attainment.dims)
    rows = []
    for index in np.ndindex(ds.attainment.shape):
        one = ds.isel(dict(zip(dims, index)))
        label = "  ".join(str(one[d].values.item()) for d in dims)
        rows.append([label, fmt(100 * float(one.attainment), ".2f"), fmt(float(one.latency_p99), ".1f"),
                     int(one.queue.max()), fmt(float(one.rolling_p99.max()), ".1f"), int(one.sheds.sum())])
    head = ["  ".join(dims), "attain %", "p99 ms", "max queue", "max rolling p99 ms", "sheds"]
    return (f"trace: {point}; {ds.sizes['time']} samples every {ds.attrs['interval_ms']:g} ms\n\n"
            + table(head, rows))


class _CallableModule(types.ModuleType):
    """``routesim.trace`` may be this module or the function: both can be called."""

    def __call__(self, *args, **kwargs):
        return trace(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    from routesim.trace import main as _main  # the package's module, so its kernels are cached there
    try:
        sys.exit(_main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
