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

Each model records its own (``routesim/<model>/timeline.py``). Command line (``routesim/trace.py``
runs :func:`main`)::

    python -m routesim.trace SWEEP.toml --policy P --rate R --heterogeneity H \\
        --scenario S --seed N [--stage NAME] [--set alpha=0.05,0.15] [--out FILE.nc]

``routesim.trace`` is always the function :func:`trace` of this module:
``routesim.trace(sweep, policy=[...], rate_rps=250, scenario="straggler", ...)``.
"""

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import xarray as xr

from .config import ConfigError, Reader, Stage, Sweep, check_stage, load_sweep, param_value
from .files import unwritable_file
from .tables import text_table

INTERVAL_MS = 10.0
"""Default sampling interval, ms."""
ROLLING_COMPLETIONS = 250
"""The rolling p99 covers the last this many completions."""
THROUGHPUT_WINDOW_MS = 1000.0
"""The rolling throughput counts completions in a trailing window this long."""


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

    pols = values["policy"] if policy is None else _values(policy)
    for name in pols:
        known("policy", list(m.policies))(name)
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
        return self.sweep.model.timeline(self.sweep, self.stage, g, chosen, self.interval_ms)


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
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress and no notes; the summary is still printed")
    return ap


_FLAGS = {"rate_rps": "--rate", "heterogeneity": "--heterogeneity", "scenario": "--scenario",
          "seed": "--seed", "policy": "--policy", "stage": "--stage", "interval_ms": "--interval-ms"}


def _number(text, key, path, kind=float):
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(path, key, f"expected a number, got {text!r}") from None


def _token_value(text, p):
    """A typed ``--set`` value as its parameter takes it (checked later by the
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
            if sweep.model.typed_set_values:
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
        out = args.out or default_out(plan)
        if why := unwritable_file(out):
            raise ConfigError(args.sweep, "--out", why)
    except ConfigError as exc:
        known = {} if sweep is None else sweep.model.param
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
    write_atomic(ds, out)
    print(sweep.model.timeline_summary(ds))
    if not args.quiet:
        print(f"\nwrote {out}")
    return 0


def default_out(plan: Plan) -> Path:
    """Where a trace goes without ``--out``: beside the sweep's results, which git
    ignores, ``results/<name>/trace-<scenario>-<heterogeneity>-<rate>rps-seed<N>.nc``."""
    v = plan.stage.values
    return Path("results") / plan.sweep.name / (
        f"trace-{v['scenario'][0]}-{v['heterogeneity'][0]}-{float(v['rate_rps'][0]):g}rps-"
        f"seed{'-'.join(str(int(x)) for x in v['seed'])}.nc")


def summary_table(ds: xr.Dataset, head: list, cells) -> str:
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
