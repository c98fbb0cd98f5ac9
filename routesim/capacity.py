"""python -m routesim.capacity SWEEP.toml [--stage NAME] [--slo-ms MS | --attainment LEVEL] [options]

Finds, for every policy and condition of a stage, its capacity: the largest arrival
rate at which a criterion holds there and at every lower rate the search evaluated.
The criterion, by default, is that the median over seeds of the model's latency tail
(the batching model's ``ttft_p99``, the queue model's ``latency_p99``) is at most the
sweep's SLO; ``--attainment LEVEL`` asks instead that the median over seeds of
``attainment`` be at least LEVEL. Each seed's own capacity (the same rule on its own
runs) is reported as a range.

The search is vectorized: each round simulates every candidate rate of every row as
one grid (the stage with its ``rate_rps`` axis replaced by the round's rates, only the
runs each row needs), then narrows each row's bracket between the capacity so far and
the next rate evaluated above it. Round 1 evaluates ``--points`` rates evenly spread
over ``[--low, --high]`` (default: the stage's smallest and largest ``rate_rps``);
later rounds ``--points`` rates inside each bracket, on multiples of
``--resolution``, until every bracket is one resolution step wide. Deterministic: the
same sweep and options give the same rates, runs and capacities.

Writes ``DIR/<stage>-capacity.nc`` (default ``results/<name>/``): ``capacity_rps``,
``capacity_rps_seed`` and every evaluated run (NaN where a row did not run a rate).
Exit status: 0 on success, 2 on bad input (one line naming the file and the option or
key).
"""

import argparse
import itertools
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import xarray as xr

from . import steady


@dataclass(frozen=True)
class Criterion:
    """``metric`` (a result variable) ``<= bound`` (``at_most``) or ``>= bound``, taken
    on the median over seeds; a run where the metric is NaN (nothing completed) fails."""

    metric: str
    bound: float
    at_most: bool

    def worst(self) -> float:
        return math.inf if self.at_most else -math.inf

    def holds(self, values: np.ndarray) -> np.ndarray:
        """Per element of ``values`` (any shape): does it meet the bound?"""
        v = np.where(np.isnan(values), self.worst(), values)
        return v <= self.bound if self.at_most else v >= self.bound

    def median(self, values: np.ndarray, axis: int) -> np.ndarray:
        """The median over ``axis`` (the seeds), NaN counted as the worst value."""
        return np.median(np.where(np.isnan(values), self.worst(), values), axis=axis)

    def text(self, units: str) -> str:
        op = "<=" if self.at_most else ">="
        if units == "1":
            return f"median over seeds of {self.metric} {op} {100 * self.bound:g} %"
        return f"median over seeds of {self.metric} {op} {self.bound:g} {units}"


@dataclass(frozen=True)
class Search:
    """How to search: the first bracket, points per round, the rate resolution (req/s)
    and a bound on the rounds."""

    low: float
    high: float
    points: int = 6
    resolution: float = 1.0
    rounds: int = 12


def capacity_of(rates: np.ndarray, ok: np.ndarray) -> float:
    """The largest of ``rates`` (ascending) at which ``ok`` holds there and at every
    lower one; NaN when it fails at the lowest."""
    bad = np.flatnonzero(~ok)
    last = (bad[0] if bad.size else rates.size) - 1
    return float(rates[last]) if last >= 0 else math.nan


def _on_lattice(x: float, step: float) -> float:
    """``x`` rounded to a multiple of ``step`` (printed to 10 significant digits, so
    that 0.1 · 3 is 0.3)."""
    return float(f"{round(x / step) * step:.10g}")


def candidates(lo: float, hi: float, search: Search) -> list[float]:
    """Up to ``points`` new rates strictly inside (lo, hi), evenly spread and rounded to
    multiples of the resolution."""
    inner = (_on_lattice(lo + (hi - lo) * j / (search.points + 1), search.resolution)
             for j in range(1, search.points + 1))
    return sorted({x for x in inner if lo < x < hi})


class _Rows:
    """The stage's rows: every combination of its dimensions other than ``rate_rps``
    and ``seed`` (policy, conditions, swept keys), in dimension order."""

    def __init__(self, stage):
        self.dims = [d for d in stage.dims if d not in ("rate_rps", "seed")]
        self.shape = tuple(len(stage.values[d]) for d in self.dims)
        self.count = int(np.prod(self.shape)) if self.shape else 1


def _grid_of(sweep, stage, selected, rates):
    from . import grid as grid_mod
    values = dict(stage.values)
    values["rate_rps"] = tuple(rates)
    return grid_mod.build(sweep, replace(stage, values=values), selected)


def _simulate_round(sweep, stage, selected, rows: _Rows, wanted: dict, label):
    """Run, as one grid, the rates each row wants (``wanted``: row -> set of rates),
    with a progress bar over its runs labelled ``label`` (None: none).
    Returns the round's Dataset over the union of those rates (NaN where a row did not
    run a rate) and the number of runs simulated."""
    from . import batch, study
    from .grid import run_index
    from .results import to_dataset
    rates = sorted(set().union(*wanted.values()))
    g = _grid_of(sweep, stage, selected, rates)
    idx = run_index(stage, {d: g.coords[d] for d in stage.dims})
    row = (np.ravel_multi_index(tuple(idx[d] for d in rows.dims), rows.shape) if rows.dims
           else np.zeros(g.runs, np.int64))
    rate_pos = idx["rate_rps"]
    want = np.zeros((rows.count, len(rates)), np.bool_)
    for r, rs in wanted.items():
        for x in rs:
            want[r, rates.index(x)] = True
    runs = np.flatnonzero(want[row, rate_pos])
    sub = g.take(runs)
    with study.compile_note(sweep.model, study.print_note):
        if label is None:
            part = batch.simulate(sub)
        else:
            from .progress import bar
            with bar(sub.runs, label, "run") as shown:
                part = batch.simulate(sub, progress=shown.update)
    outcome = batch.outcome_type(g).empty(g)
    outcome.put_at(runs, part)
    ds = to_dataset(sweep, g, outcome, selected)
    ran = np.zeros(g.runs, np.bool_)
    ran[runs] = True
    mask = xr.DataArray(ran.reshape(g.shape), dims=list(g.coords))
    for v in list(ds.data_vars):
        if "rate_rps" in ds[v].dims:
            ds[v] = ds[v].where(mask)
    return ds, runs.size


def find(sweep, stage, criterion: Criterion, search: Search, selected: dict | None = None,
         report=None, show_progress: bool = False) -> xr.Dataset:
    """The capacity of every row of ``stage`` (a Dataset; see the module docstring).
    ``report(round, rates, runs, seconds)`` is told after each round."""
    selected = selected or {}
    rows = _Rows(stage)
    wanted = {r: set(candidates_first(search)) for r in range(rows.count)}
    runs, done = None, {r: set() for r in range(rows.count)}
    for rnd in range(1, search.rounds + 1):
        wanted = {r: rs - done[r] for r, rs in wanted.items() if rs - done[r]}
        if not wanted:
            break
        t0 = time.perf_counter()
        ds, n = _simulate_round(sweep, stage, selected, rows, wanted,
                                f"{stage.name} round {rnd}" if show_progress else None)
        runs = ds if runs is None else runs.combine_first(ds).sortby("rate_rps")
        for r, rs in wanted.items():
            done[r] |= rs
        if report is not None:
            report(rnd, sorted(set().union(*wanted.values())), n, time.perf_counter() - t0)
        cap, seed_cap = _capacities(runs, rows, criterion)
        wanted = {}
        for r in range(rows.count):
            evaluated = np.array(sorted(done[r]))
            c = cap.reshape(-1)[r]
            if np.isnan(c):
                continue  # fails at the lowest rate: nothing above it counts
            above = evaluated[evaluated > c]
            if above.size and above[0] - c > search.resolution * (1 + 1e-9):
                wanted[r] = set(candidates(c, float(above[0]), search))
    out = runs.copy()
    out["evaluated"] = runs["arrivals"].notnull()
    out["evaluated"].attrs = {"description": "the search ran this rate for this row"}
    out["capacity_rps"] = (rows.dims, cap, {
        "units": "requests/s", "description": f"largest evaluated rate at which {criterion.text(_units(sweep, criterion))} "
                                              "holds there and at every lower evaluated rate (NaN: not at the lowest)"})
    out["capacity_rps_seed"] = (rows.dims + ["seed"], seed_cap, {
        "units": "requests/s", "description": "the same rule on each seed's own runs"})
    out.attrs.update({"capacity_metric": criterion.metric, "capacity_bound": criterion.bound,
                      "capacity_at_most": int(criterion.at_most), "capacity_low": search.low,
                      "capacity_high": search.high, "capacity_points": search.points,
                      "capacity_resolution": search.resolution})
    return out


def candidates_first(search: Search) -> list[float]:
    """Round 1's rates: ``points`` evenly spread over [low, high], both ends included,
    the inner ones rounded to multiples of the resolution."""
    inner = (_on_lattice(search.low + (search.high - search.low) * j / (search.points - 1), search.resolution)
             for j in range(1, search.points - 1))
    return sorted({search.low, search.high} | {x for x in inner if search.low < x < search.high})


def _capacities(runs: xr.Dataset, rows: _Rows, criterion: Criterion):
    """(capacity per row, shape rows.shape; per row and seed, shape rows.shape + (seeds,))."""
    m = runs[criterion.metric].transpose(*rows.dims, "rate_rps", "seed").values
    ran = runs["arrivals"].transpose(*rows.dims, "rate_rps", "seed").notnull().values
    rates = runs.rate_rps.values
    nseed = m.shape[-1]
    flat_m = m.reshape(-1, rates.size, nseed)
    flat_ran = ran.reshape(-1, rates.size, nseed)
    cap = np.full(flat_m.shape[0], math.nan)
    seed_cap = np.full((flat_m.shape[0], nseed), math.nan)
    for r in range(flat_m.shape[0]):
        at = flat_ran[r, :, 0]
        ok = criterion.holds(criterion.median(flat_m[r][at], axis=1))
        cap[r] = capacity_of(rates[at], ok)
        for s in range(nseed):
            seed_cap[r, s] = capacity_of(rates[at], criterion.holds(flat_m[r][at][:, s]))
    return cap.reshape(rows.shape), seed_cap.reshape(rows.shape + (nseed,))


def _units(sweep, criterion: Criterion) -> str:
    return sweep.model.variables()[criterion.metric][0]


def steadiness(out: xr.Dataset, rows_dims: list) -> list[str]:
    """Rows whose runs at their capacity were visibly not steady (a Dataset with the
    steady-state variables; none otherwise): their labels and figures."""
    if not steady.has_check(out):
        return []
    flagged = []
    for combo in itertools.product(*(out[d].values for d in rows_dims)):
        sel = dict(zip(rows_dims, combo))
        c = float(out.capacity_rps.sel(sel))
        if math.isnan(c):
            continue
        at = out.sel(sel).sel(rate_rps=c)
        growth, rise = steady.trend(at)
        if not steady.is_steady(growth, rise):
            flagged.append(f"{_label(combo)} at {c:g} req/s: backlog grew by {100 * growth:.1f} % of arrivals, "
                           f"KV occupancy {100 * float(np.median(at.kv_occupancy_first)):.0f} % -> "
                           f"{100 * float(np.median(at.kv_occupancy_last)):.0f} % over the window")
    return flagged


def _label(combo) -> str:
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in combo)


def table(out: xr.Dataset, rows_dims: list) -> str:
    """The printed table: per row, the capacity, each seed's range and the criterion's
    value there, and the steady-state figures at capacity when the Dataset has them."""
    from .tables import fmt, text_table
    metric = out.attrs["capacity_metric"]
    percent = out[metric].attrs.get("units") == "1"
    check = steady.has_check(out)
    shown = [k for k, d in enumerate(rows_dims) if d == "policy" or out.sizes[d] > 1]
    units = "%" if percent else out[metric].attrs.get("units", "")
    headers = [rows_dims[k] for k in shown] + ["capacity req/s", "seeds' range", f"{metric} at capacity ({units})"]
    if check:
        headers += ["backlog growth", "KV occ. first→last %"]
    body = []
    for combo in itertools.product(*(out[d].values for d in rows_dims)):
        sel = dict(zip(rows_dims, combo))
        c = float(out.capacity_rps.sel(sel))
        seeds = out.capacity_rps_seed.sel(sel).values
        low, high = out.attrs["capacity_low"], out.attrs["capacity_high"]
        cap_text = f"< {low:g}" if math.isnan(c) else (f">= {c:g}" if c >= high else f"{c:g}")
        rng = "—" if np.all(np.isnan(seeds)) else f"{np.nanmin(seeds):g}–{np.nanmax(seeds):g}"
        if np.any(np.isnan(seeds)) and not np.all(np.isnan(seeds)):
            rng = f"< {low:g}–{np.nanmax(seeds):g}"
        row = [_label([combo[k]]) for k in shown] + [cap_text, rng]
        if math.isnan(c):
            row += ["—"] + (["—", "—"] if check else [])
        else:
            at = out.sel(sel).sel(rate_rps=c)
            v = float(np.nanmedian(at[metric].values))
            row.append(fmt(100 * v, ".1f") if percent else fmt(v, ".0f"))
            if check:
                row.append(fmt(float(np.median(at.backlog_growth.values)), ".0f"))
                row.append(f"{100 * float(np.median(at.kv_occupancy_first)):.0f}→"
                           f"{100 * float(np.median(at.kv_occupancy_last)):.0f}")
        body.append(row)
    align = "l" * len(shown) + "r" * (len(headers) - len(shown))
    return text_table(headers, body, align=align)


def _parser():
    ap = argparse.ArgumentParser(prog="python -m routesim.capacity", description=__doc__.split("\n\n")[1])
    ap.add_argument("sweep", type=Path, help="sweep file (TOML)")
    ap.add_argument("--stage", action="append", default=None, metavar="NAME",
                    help="search this stage only (repeatable; default: every stage)")
    ap.add_argument("--slo-ms", default=None, metavar="MS",
                    help="the latency bound (default: the sweep's SLO, slo_ttft_ms or slo_ms)")
    ap.add_argument("--attainment", default=None, metavar="LEVEL",
                    help="criterion: median attainment >= LEVEL (a fraction, e.g. 0.99) instead of the latency")
    ap.add_argument("--low", default=None, metavar="RPS", help="lowest rate (default: the stage's smallest rate_rps)")
    ap.add_argument("--high", default=None, metavar="RPS", help="highest rate (default: the stage's largest rate_rps)")
    ap.add_argument("--points", default="6", metavar="N", help="rates per row and round (default 6)")
    ap.add_argument("--resolution", default="1", metavar="RPS", help="rates are multiples of this (default 1 req/s)")
    ap.add_argument("--out", type=Path, default=None, help="folder for <stage>-capacity.nc (default results/<name>/)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress: print only the tables (and warnings)")
    return ap


def _number(args, option, low=None, low_open=False, whole=False):
    from .config import ConfigError
    text = getattr(args, option.lstrip("-").replace("-", "_"))
    if text is None:
        return None
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        raise ConfigError(args.sweep, option, f"expected a {'whole ' if whole else ''}number, got {text!r}") from None
    if not math.isfinite(value) or (low is not None and (value <= low if low_open else value < low)):
        raise ConfigError(args.sweep, option, f"must be {'>' if low_open else '>='} {low:g} and finite, got {text}")
    return value


def _criterion(args, sweep, stage) -> Criterion:
    from .config import ConfigError
    level = _number(args, "--attainment", 0, low_open=True)
    slo = _number(args, "--slo-ms", 0, low_open=True)
    if level is not None and slo is not None:
        raise ConfigError(args.sweep, "--attainment", "give either --attainment or --slo-ms, not both")
    if level is not None:
        if level > 1:
            raise ConfigError(args.sweep, "--attainment", f"a fraction in (0, 1], got {level:g}")
        return Criterion("attainment", level, at_most=False)
    metric, slo_param = sweep.model.capacity_latency
    if slo is None:
        values = stage.values[slo_param]
        if len(values) != 1:
            raise ConfigError(args.sweep, "--slo-ms", f"stage {stage.name!r} sweeps {slo_param}: give the bound")
        slo = float(values[0])
    return Criterion(metric, slo, at_most=True)


def _search(args, stage) -> Search:
    from .config import ConfigError
    rates = stage.values["rate_rps"]
    low = _number(args, "--low", 0, low_open=True)
    high = _number(args, "--high", 0, low_open=True)
    low = float(min(rates)) if low is None else low
    high = float(max(rates)) if high is None else high
    if not low < high:
        raise ConfigError(args.sweep, "--high", f"must be above the lowest rate ({low:g} req/s), got {high:g}"
                          + (f" (stage {stage.name!r} has one rate: give --low and --high)"
                             if len(rates) == 1 and args.low is None and args.high is None else ""))
    points = _number(args, "--points", 2, whole=True)
    resolution = _number(args, "--resolution", 0, low_open=True)
    return Search(low=low, high=high, points=points, resolution=resolution)


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from . import study
    from .config import ConfigError, load_sweep
    from .files import unwritable
    from .results import write_atomic
    try:
        sweep = load_sweep(args.sweep)
        todo = study._needed(sweep, args.stage)
        names = args.stage or [s.name for s in sweep.stages]
        plans = [(s, _criterion(args, sweep, s), _search(args, s)) for s in todo if s.name in names]
        out_dir = args.out or Path("results") / sweep.name
        if why := unwritable(out_dir):
            raise ConfigError(args.sweep, "--out", why)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    selected = {}
    earlier = [s.name for s in todo if s.name not in names]  # stages whose selection is inherited
    if earlier:
        for name, ds in study.run(sweep, stages=earlier, show_progress=False).items():
            for k, v in ds.attrs.items():
                if k.startswith("selects_"):
                    selected[k[len("selects_"):]] = v
    for stage, criterion, search in plans:
        def report(rnd, rates, n, seconds, stage=stage):
            if not args.quiet:
                shown = ", ".join(f"{x:g}" for x in rates)
                print(f"{stage.name}: round {rnd}: {n:,} runs at {len(rates)} rate{'s' if len(rates) > 1 else ''} "
                      f"({shown}) in {seconds:.1f} s",
                      flush=True)
        out = find(sweep, stage, criterion, search, selected, report, show_progress=not args.quiet)
        rows_dims = [d for d in stage.dims if d not in ("rate_rps", "seed")]
        path = out_dir / f"{stage.name}-capacity.nc"
        write_atomic(out, path)
        units = _units(sweep, criterion)
        print(f"\nstage {stage.name}: capacity = the largest evaluated rate at which the "
              f"{criterion.text(units)} there and at every lower evaluated rate "
              f"({len(out.seed)} seeds; warm-up {_attr(out, 'warmup_s')} s, window {_attr(out, 'measure_s')} s"
              + (f", drain {_attr(out, 'drain_s')} s" if "drain_s" in out.attrs or "drain_s" in out.coords else "")
              + ")\n")
        print(table(out, rows_dims))
        flagged = steadiness(out, rows_dims)
        if flagged:
            print("\nwarning: not steady at capacity (lengthen warmup_s and run again):")
            for line in flagged:
                print(f"  {line}")
        elif steady.has_check(out):
            print(f"\nsteady at capacity: no row shows {steady.rule()}")
        print(f"\nwrote {path}", flush=True)
    return 0


def _attr(ds, name):
    if name in ds.coords:
        return "/".join(f"{v:g}" for v in ds[name].values)
    v = ds.attrs.get(name)
    return "?" if v is None else f"{v:g}"


if __name__ == "__main__":
    sys.exit(main())
