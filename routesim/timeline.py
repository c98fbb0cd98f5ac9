"""Timelines of a run, recorded from the compiled engine itself.

``routesim.trace(...)`` runs one condition (a rate, a heterogeneity setting, a
scenario and a seed) for one or more policies through the very kernels a grid uses
(:func:`engine.init_run_nb`, :func:`engine.advance_nb`) and samples the state every
``interval_ms`` of simulated time. The result is an xarray Dataset over a ``time``
dimension (seconds):

- per replica: the waiting queue, the in-service flag, health, the speed factor and
  the true mean service time it implies, the router's estimates ŝ, r̄ and n, and the
  routing decisions placed on it in each interval;
- cluster-wide: the rolling p99 over the last :data:`ROLLING_COMPLETIONS`
  completions, the throughput over a trailing :data:`THROUGHPUT_WINDOW_MS` window, and
  per interval the arrivals, sheds, completions and on-time completions;
- per run (no ``time``): the metrics of model.md §6, computed by the same function as
  a grid's, so the traced run's metrics equal the grid run's for the same point.

A state sampled at time ``s`` is the state after every step at a time ``<= s``.
Per-interval counts at sample ``j`` count what happened in ``(s_{j-1}, s_j]``.

The kernels are in :mod:`routesim.timeline_kernels`. Command line (``routesim/trace.py``
runs :func:`main`)::

    python -m routesim.trace SWEEP.toml --policy P --rate R --heterogeneity H \\
        --scenario S --seed N [--stage NAME] [--set alpha=0.05,0.15] [--out FILE.nc]

``routesim.trace`` is always the function :func:`trace` of this module:
``routesim.trace(sweep, policy=[...], rate_rps=250, scenario="straggler", ...)``.
"""

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import xarray as xr

from .config import DEMAND_PARAMETERS, PARAM, ConfigError, Reader, Stage, Sweep, check_stage, load_sweep, param_value
from .queue.dtypes import EVENT_NAMES, LEVEL, METRICS, REPLICA, REQUEST, ROUTER, TAIL_LEVELS, WORK
from .queue.engine import grid_end_ms
from .tables import fmt, text_table
from .theory import mean_demand_ms
from .timeline_kernels import CLUSTER_SAMPLE, REPLICA_SAMPLE, trace_batch_nb

INTERVAL_MS = 10.0
"""Default sampling interval, ms."""
ROLLING_COMPLETIONS = 250
"""The rolling p99 covers the last this many completions."""
THROUGHPUT_WINDOW_MS = 1000.0
"""The rolling throughput counts completions in a trailing window this long."""

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
    "rolling_p99": ("ms", f"p99 end-to-end latency of the last {ROLLING_COMPLETIONS} completions, any request "
                    "(nearest rank; NaN before the first)"),
    "rolling_throughput": ("requests/s", f"completions in the trailing {THROUGHPUT_WINDOW_MS:,.0f} ms window, per second"),
    "arrived": ("requests", "arrivals in the interval ending at this time"),
    "sheds": ("requests", "requests shed in the interval ending at this time (at arrival or at a failure's re-route)"),
    "completions": ("requests", "completions in the interval ending at this time"),
    "on_time": ("requests", "completions within the SLO (end-to-end) in the interval ending at this time"),
}
"""Units and description of every timeline variable (copied into the Dataset attrs)."""



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
        from .results import sweep_of
        attrs = source.attrs
        sweep = sweep_of(source)
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
    rd = Reader(sweep.path)
    values = dict(stage.values)
    m = sweep.model
    param_table = m.param

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

    if m.kind == "queue":
        from .queue.policies import NAMES
    else:
        NAMES = m.policies
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
        if name not in param_table:
            rd.fail(name, "unknown parameter (known: " + ", ".join(param_table) + ")")
        vals = _values(given)
        if not vals:
            rd.fail(name, "empty axis: give at least one value")
        values[name] = tuple(param_value(rd, param_table[name], v, name) for v in vals)
        if name in inherit:
            inherit.remove(name)
        if name != "exploration" and name not in swept and isinstance(given, (list, tuple, np.ndarray)):
            swept.append(name)
    narrowed = replace(stage, values=values, swept=tuple(swept), inherit=tuple(inherit), select=None)
    check_stage(rd, narrowed, sweep.heterogeneity, sweep.scenarios,
                 {"heterogeneity": "heterogeneity", **{n: n for n in params}}, m)
    return narrowed


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
        if self.sweep.kind == "batching":
            from .batching.timeline import run as token_run
            return token_run(self.sweep, self.stage, g, chosen, self.interval_ms)
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
    from .study import selecting_stage
    sources = sorted({selecting_stage(sweep, stage, n).name for n in missing})
    return Plan(sweep, narrowed, chosen, sources, float(interval_ms))


def _run(sweep, stage, g, selected, interval_ms):
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
    from . import grid as grid_mod
    from .results import coord_attrs, provenance, replica_level_coords, run_variables, selected_attrs, variable_attrs

    dims = list(g.coords)
    keep = [d for d in dims if d == "policy" or len(g.coords[d]) > 1]
    n_s, n_rep = sample_ms.shape[0], g.replicas

    def shaped(a, extra):
        """Flat runs (+ extra axes) -> the kept dimensions (+ extra axes)."""
        return a.reshape(tuple(len(g.coords[d]) for d in keep) + extra)

    def var(name, a, tail_dims):
        return (keep + tail_dims, a, variable_attrs(name, TRACE_VARIABLES))

    per_rep = lambda f: shaped(o_rep[f], (n_s, n_rep))  # noqa: E731
    clu = lambda f: shaped(o_clu[f], (n_s,))  # noqa: E731
    values = grid_mod.resolve(stage, selected)
    idx = grid_mod.run_index(stage, values)
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

    coords = {d: (d, np.asarray(g.coords[d]), coord_attrs(d)) for d in keep}
    for d in dims:
        if d not in keep:
            coords[d] = ((), np.asarray(g.coords[d])[0], coord_attrs(d))
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


def _token_value(text, p):
    """A batching ``--set`` value as its parameter takes it (checked later by the
    config, which names the key): a number, true/false, inf, or the text."""
    t = text.strip()
    if p.kind is bool or t.lower() in ("true", "false"):
        return {"true": True, "false": False}.get(t.lower(), t)
    if p.kind is str:
        return t
    try:
        return int(t) if p.kind is int else float(t)
    except ValueError:
        return t


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    sweep = None
    try:
        sweep = load_sweep(args.sweep)
        params = {}
        for item in args.set:
            key, sep, text = item.partition("=")
            key = key.strip()
            if not sep or not text:
                raise ConfigError(args.sweep, "--set", f"expected KEY=VALUE, got {item!r}")
            table = sweep.model.param
            if key not in table:
                raise ConfigError(args.sweep, f"--set {key}", "unknown parameter (known: " + ", ".join(table) + ")")
            if sweep.kind == "batching":
                vals = [_token_value(v, table[key]) for v in text.split(",")]
            else:
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
        known = PARAM if sweep is None else sweep.model.param
        flag = _FLAGS.get(exc.key, f"--set {exc.key}" if exc.key in known else exc.key)
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
        print(token_summary(ds) if ds.attrs.get("replica_kind") == "batching" else summary(ds))
        print(f"\nwrote {out}")
    return 0


def _summary_table(ds: xr.Dataset, head: list, cells) -> str:
    """A trace's short table: the condition it holds, then one row per run (each
    combination of the run dimensions) of ``cells(run) -> [..]`` under ``head``."""
    point = ", ".join(f"{d} = {ds[d].values.item()}" for d in ("rate_rps", "heterogeneity", "scenario", "seed")
                      if d in ds.coords and ds[d].ndim == 0)
    dims = list(ds.attainment.dims)
    rows = []
    for index in np.ndindex(ds.attainment.shape):
        one = ds.isel(dict(zip(dims, index)))
        rows.append(["  ".join(str(one[d].values.item()) for d in dims)] + cells(one))
    return (f"trace: {point}; {ds.sizes['time']} samples every {ds.attrs['interval_ms']:g} ms\n\n"
            + text_table(["  ".join(dims)] + head, rows))


def summary(ds: xr.Dataset) -> str:
    """A short table of a trace: per run its attainment, p99 and its worst moments."""
    return _summary_table(
        ds, ["attain %", "p99 ms", "max queue", "max rolling p99 ms", "sheds"],
        lambda one: [fmt(100 * float(one.attainment), ".2f"), fmt(float(one.latency_p99), ".1f"),
                     int(one.queue.max()), fmt(float(one.rolling_p99.max()), ".1f"), int(one.sheds.sum())])


def token_summary(ds: xr.Dataset) -> str:
    """A batching trace's short table: per run its attainment, TTFT p99, what failed,
    the retries and wasted tokens, and its worst moments."""
    def cells(one):
        rolling = one.ttft_rolling_p99.values
        return [fmt(100 * float(one.attainment), ".2f"), fmt(float(one.ttft_p99), ".0f"),
                int(one.failed), int(one.retries), int(one.wasted_tokens), int(one.breaker_ejections),
                int(one.waiting.max()),
                fmt(float(np.nanmax(rolling)) if np.isfinite(rolling).any() else np.nan, ".0f")]
    return _summary_table(ds, ["attain %", "TTFT p99 ms", "failed", "retries", "wasted tokens", "ejections",
                               "max waiting", "max rolling TTFT p99 ms"], cells)
