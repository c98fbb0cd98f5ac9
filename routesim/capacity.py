"""python -m routesim.capacity SWEEP.toml [--stage NAME] [--slo-ms MS | --attainment LEVEL]
       [--rule quantile|median] [--quantile Q] [--per-seed] [--policy P,...] [options]

Finds, for every policy and condition of a stage, its capacity: the largest arrival
rate at which a rule holds there and at every lower rate the search evaluated. The
criterion, by default, is the model's latency tail (the batching model's ``ttft_p99``,
the queue model's ``latency_p99``) at most the sweep's SLO (with a TTFT objective scaled
to prompt length, ``slo_ttft_ms_per_prompt_token > 0``, each request's own objective:
``ttft_excess_p99``, the tail of TTFT minus objective, at most 0 ms); ``--attainment LEVEL`` asks
instead for an ``attainment`` of at least LEVEL. The rule, by default (``--rule
quantile``), is that the criterion holds in at least ``--quantile`` (0.9) of the seeds'
windows and that every window is steady by routesim.steady's per-run check (no backlog
or KV occupancy still growing, no attainment falling); ``--rule median`` asks only that
the median over seeds meet it. Each seed's own capacity (the rule on its own runs) is
reported as a range (``--per-seed``: one by one), and the capacity's percentile
bootstrap interval over seeds beside it.

The search is vectorized: each round simulates every candidate rate of every row as
one grid (the stage with its ``rate_rps`` axis replaced by the round's rates, only the
runs each row needs), then narrows each row's bracket between the capacity so far and
the next rate evaluated above it. Round 1 evaluates ``--points`` rates evenly spread
over ``[--low, --high]`` (default: the stage's smallest and largest ``rate_rps``);
later rounds ``--points`` rates inside each bracket, on multiples of
``--resolution``, until every bracket is one resolution step wide. Deterministic: the
same sweep and options give the same rates, runs and capacities.

Writes ``DIR/<stage>-capacity.nc`` (default ``results/<name>/``): ``capacity_rps``,
``capacity_rps_low`` and ``_high`` (the interval), ``capacity_rps_seed``, every
evaluated run (NaN where a row did not run a rate) and, for the batching model, each
run's ``unsteady`` verdict.
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
        """``"ttft_p99 <= 1000 ms"``: the bound alone (a :class:`Rule` says over what)."""
        op = "<=" if self.at_most else ">="
        if units == "1":
            return f"{self.metric} {op} {100 * self.bound:g} %"
        return f"{self.metric} {op} {self.bound:g} {units}"


def latency_criterion(model, slo: float, allowances=(0.0,)) -> Criterion:
    """The model's latency criterion (``model.capacity_latency``): its latency tail at
    most ``slo`` ms; when any of ``allowances`` (the stage's values of the per-prompt-token
    allowance of a scaled objective, ``model.capacity_scaled``) is above 0, each
    request's own objective: the tail of latency minus objective at most 0 ms (the
    batching model's ``ttft_excess_p99``; a run with allowance 0 then meets it exactly
    when its ``ttft_p99`` is at most its ``slo_ttft_ms``)."""
    if model.capacity_scaled and any(a > 0 for a in allowances):
        return Criterion(model.capacity_scaled[0], 0.0, at_most=True)
    return Criterion(model.capacity_latency[0], slo, at_most=True)


RULES = ("quantile", "median")
"""The rules a rate passes by (:class:`Rule`)."""


def needed(quantile: float, seeds: int) -> int:
    """The fewest of ``seeds`` windows that make at least the fraction ``quantile`` of
    them (``ceil(quantile · seeds)``, robust to 0.7 · 10 = 7.000000000000001)."""
    return max(1, math.ceil(quantile * seeds - 1e-9))


@dataclass(frozen=True)
class Rule:
    """Whether a rate passes, from its runs (one per seed).

    ``"quantile"`` (the default, as a planner means capacity): the criterion holds in at
    least ``quantile`` of the seeds' windows (:func:`needed`) and every window is steady
    by :mod:`routesim.steady`'s per-run check (no backlog or KV occupancy still
    growing, no attainment falling). ``"median"``: the median over seeds of the metric
    meets the bound (the rule before issue 44; steadiness not required)."""

    name: str = "quantile"
    quantile: float = 0.9

    def passes(self, criterion: Criterion, values: np.ndarray, unsteady: np.ndarray) -> np.ndarray:
        """``values`` (..., rates, seeds) the metric, ``unsteady`` (..., rates, seeds)
        bool the per-run check: per rate (..., rates), does the rate pass?"""
        if self.name == "median":
            return criterion.holds(criterion.median(values, axis=-1))
        meet = criterion.holds(values).sum(axis=-1)
        return (meet >= needed(self.quantile, values.shape[-1])) & ~np.any(unsteady, axis=-1)

    def text(self, criterion_text: str) -> str:
        if self.name == "median":
            return f"the median over seeds of {criterion_text}"
        return (f"{criterion_text} in at least {100 * self.quantile:g} % of the seeds' windows "
                f"and every window steady")


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
    return float(capacities_of(rates, ok))


def capacities_of(rates: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """:func:`capacity_of` along the last axis of ``ok`` (..., rates): shape (...)."""
    rates = np.asarray(rates, float)
    ok = np.asarray(ok, np.bool_)
    fail = ~ok
    first_bad = np.where(fail.any(axis=-1), fail.argmax(axis=-1), rates.size)
    out = np.full(first_bad.shape, math.nan)
    some = first_bad > 0
    out[some] = rates[first_bad[some] - 1]
    return out


BOOTSTRAP_RESAMPLES = 2000
"""Resamples of the seeds behind a capacity's bootstrap interval."""
BOOTSTRAP_LEVEL = 0.95
"""The interval's coverage: the percentile interval [2.5 %, 97.5 %]."""
BOOTSTRAP_SEED = 20260
"""The resampling stream's seed (a fresh stream per row: each row's interval is
deterministic and independent of the other rows)."""


def bootstrap(rates: np.ndarray, values: np.ndarray, unsteady: np.ndarray, criterion: Criterion, rule: Rule,
              resamples: int = BOOTSTRAP_RESAMPLES, level: float = BOOTSTRAP_LEVEL,
              seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """The percentile bootstrap interval of the capacity over seeds: ``resamples``
    times, draw as many seeds as there are, with replacement, and recompute the
    capacity by ``rule`` from their runs at ``rates`` (ascending, the rates evaluated;
    ``values`` and ``unsteady`` (rates, seeds)); the interval is the resampled
    capacities' ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles (inverted CDF,
    so its ends are evaluated rates). A resample whose capacity is below the lowest
    rate counts as below every rate; an end there is NaN."""
    n = values.shape[-1]
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    ok = rule.passes(criterion, values[:, idx].transpose(1, 0, 2), unsteady[:, idx].transpose(1, 0, 2))
    caps = capacities_of(rates, ok)
    ends = np.quantile(np.where(np.isnan(caps), -math.inf, caps), [(1 - level) / 2, (1 + level) / 2],
                       method="inverted_cdf")
    return tuple(float(e) if np.isfinite(e) else math.nan for e in ends)


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
    """The rows: every combination of the dimensions other than ``rate_rps`` and
    ``seed`` (policy, conditions, swept keys), in dimension order, with their lengths."""

    def __init__(self, dims, shape):
        self.dims = list(dims)
        self.shape = tuple(shape)
        self.count = int(np.prod(self.shape)) if self.shape else 1

    @classmethod
    def of_stage(cls, stage):
        dims = [d for d in stage.dims if d not in ("rate_rps", "seed")]
        return cls(dims, (len(stage.values[d]) for d in dims))

    @classmethod
    def of_runs(cls, runs: xr.Dataset):
        dims = [d for d in runs["arrivals"].dims if d not in ("rate_rps", "seed")]
        return cls(dims, (runs.sizes[d] for d in dims))


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
         report=None, show_progress: bool = False, rule: Rule = Rule()) -> xr.Dataset:
    """The capacity of every row of ``stage`` by ``rule`` (a Dataset; see the module
    docstring). ``report(round, rates, runs, seconds)`` is told after each round."""
    selected = selected or {}
    rows = _Rows.of_stage(stage)
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
        cap = _capacities(runs, rows, criterion, rule, with_interval=False)[0]
        wanted = {}
        for r in range(rows.count):
            evaluated = np.array(sorted(done[r]))
            c = cap.reshape(-1)[r]
            if np.isnan(c):
                continue  # fails at the lowest rate: nothing above it counts
            above = evaluated[evaluated > c]
            if above.size and above[0] - c > search.resolution * (1 + 1e-9):
                wanted[r] = set(candidates(c, float(above[0]), search))
    out = capacities(runs, criterion, rule, _units(sweep, criterion))
    out["evaluated"] = runs["arrivals"].notnull()
    out["evaluated"].attrs = {"description": "the search ran this rate for this row"}
    out.attrs.update({"capacity_low": search.low, "capacity_high": search.high, "capacity_points": search.points,
                      "capacity_resolution": search.resolution})
    return out


def capacities(runs: xr.Dataset, criterion: Criterion, rule: Rule = Rule(), units: str = "") -> xr.Dataset:
    """``runs`` (rows... × rate_rps × seed: the runs evaluated, NaN ``arrivals`` where a
    row did not run a rate) with the capacity of every row by ``rule``: ``capacity_rps``,
    its bootstrap interval ``capacity_rps_low``/``_high``, ``capacity_rps_seed`` and,
    when the model has the steady-state check, each run's ``unsteady`` verdict."""
    rows = _Rows.of_runs(runs)
    cap, seed_cap, interval = _capacities(runs, rows, criterion, rule)
    out = runs.copy()
    if steady.has_check(runs):
        out["unsteady"] = unsteady_of(runs)
        out["unsteady"].attrs = {"description": f"the run's window was not steady: {steady.run_rule()}"}
    out["capacity_rps"] = (rows.dims, cap, {
        "units": "requests/s", "description": f"largest evaluated rate at which "
                                              f"{rule.text(criterion.text(units))} "
                                              "there and at every lower evaluated rate (NaN: not at the lowest)"})
    out["capacity_rps_seed"] = (rows.dims + ["seed"], seed_cap, {
        "units": "requests/s", "description": "the same rule on each seed's own runs"})
    for k, end in enumerate(("low", "high")):
        out[f"capacity_rps_{end}"] = (rows.dims, interval[..., k], {
            "units": "requests/s", "description": f"{end} end of the {100 * BOOTSTRAP_LEVEL:g} % percentile "
                                                  f"bootstrap interval of capacity_rps over seeds "
                                                  f"({BOOTSTRAP_RESAMPLES} resamples; NaN: below the lowest rate)"})
    rates = runs.rate_rps.values
    out.attrs.update({"capacity_metric": criterion.metric, "capacity_bound": criterion.bound,
                      "capacity_at_most": int(criterion.at_most), "capacity_low": float(rates.min()),
                      "capacity_high": float(rates.max()), "capacity_rule": rule.name,
                      "capacity_quantile": rule.quantile, "capacity_resamples": BOOTSTRAP_RESAMPLES,
                      "capacity_level": BOOTSTRAP_LEVEL, "capacity_bootstrap_seed": BOOTSTRAP_SEED})
    return out


def candidates_first(search: Search) -> list[float]:
    """Round 1's rates: ``points`` evenly spread over [low, high], both ends included,
    the inner ones rounded to multiples of the resolution."""
    inner = (_on_lattice(search.low + (search.high - search.low) * j / (search.points - 1), search.resolution)
             for j in range(1, search.points - 1))
    return sorted({search.low, search.high} | {x for x in inner if search.low < x < search.high})


def unsteady_of(runs: xr.Dataset) -> xr.DataArray:
    """Per run of ``runs`` (the dimensions of ``arrivals``): not steady by
    :mod:`routesim.steady`'s per-run check; all False when the model has no check."""
    if not steady.has_check(runs):
        return runs["arrivals"].notnull() & False
    dims = runs["arrivals"].dims
    sub = runs[[v for v in steady.READS if v in runs]]
    return xr.DataArray(steady.unsteady_runs(sub.transpose(*dims)), dims=dims, coords=runs["arrivals"].coords)


def row_runs(runs: xr.Dataset, rows: _Rows, criterion: Criterion):
    """Per row (flattened, ``rows.count``): (the rates it evaluated (k,), the metric
    there (k, seeds), the per-run steadiness check there (k, seeds) bool)."""
    order = (*rows.dims, "rate_rps", "seed")
    m = runs[criterion.metric].transpose(*order).values
    ran = runs["arrivals"].transpose(*order).notnull().values
    bad = unsteady_of(runs).transpose(*order).values
    rates = runs.rate_rps.values
    shape = (-1, rates.size, m.shape[-1])
    out = []
    for mr, rr, br in zip(m.reshape(shape), ran.reshape(shape), bad.reshape(shape)):
        at = rr[:, 0]
        out.append((rates[at], mr[at], br[at]))
    return out


def _capacities(runs: xr.Dataset, rows: _Rows, criterion: Criterion, rule: Rule, with_interval: bool = True):
    """(capacity per row, shape rows.shape; per row and seed, shape rows.shape +
    (seeds,); the bootstrap interval per row, rows.shape + (2,), NaN unless
    ``with_interval``)."""
    per_row = row_runs(runs, rows, criterion)
    nseed = runs.sizes["seed"]
    cap = np.full(len(per_row), math.nan)
    seed_cap = np.full((len(per_row), nseed), math.nan)
    interval = np.full((len(per_row), 2), math.nan)
    for r, (rates, m, bad) in enumerate(per_row):
        cap[r] = capacity_of(rates, rule.passes(criterion, m, bad))
        for s in range(nseed):
            seed_cap[r, s] = capacity_of(rates, rule.passes(criterion, m[:, s:s + 1], bad[:, s:s + 1]))
        if with_interval and rates.size:
            interval[r] = bootstrap(rates, m, bad, criterion, rule)
    return cap.reshape(rows.shape), seed_cap.reshape(rows.shape + (nseed,)), interval.reshape(rows.shape + (2,))


def _units(sweep, criterion: Criterion) -> str:
    return sweep.model.variables()[criterion.metric][0]


def _cells(out: xr.Dataset, rows_dims: list):
    """Each row's (labels, selection) in dimension order."""
    for combo in itertools.product(*(out[d].values for d in rows_dims)):
        yield combo, dict(zip(rows_dims, combo))


def _at(out: xr.Dataset, sel: dict, rate: float) -> xr.Dataset:
    """The runs of one row at one rate."""
    return out.sel(sel).sel(rate_rps=rate)


def within(out: xr.Dataset, at: xr.Dataset) -> tuple[int, int]:
    """(windows of ``at`` meeting the capacity's criterion, windows run)."""
    crit = Criterion(out.attrs["capacity_metric"], out.attrs["capacity_bound"], bool(out.attrs["capacity_at_most"]))
    ran = at["arrivals"].notnull().values
    return int(crit.holds(at[crit.metric].values)[ran].sum()), int(ran.sum())


def _unsteady_count(out: xr.Dataset, at: xr.Dataset) -> int:
    return int(at["unsteady"].values.sum()) if "unsteady" in out else 0


def steadiness(out: xr.Dataset, rows_dims: list) -> list[str]:
    """Rows whose runs at their capacity were not steady by :mod:`routesim.steady`: a
    run flagged by the per-run check (the median rule admits them; the quantile rule
    does not), or the medians over seeds trending (a transient every run shares): their
    labels and figures."""
    if not steady.has_check(out):
        return []
    flagged = []
    for combo, sel in _cells(out, rows_dims):
        c = float(out.capacity_rps.sel(sel))
        if math.isnan(c):
            continue
        at = _at(out, sel, c)
        bad, n = steady.count_unsteady(at)
        growth, rise = steady.trend(at)
        if bad or not steady.is_steady(growth, rise):
            flagged.append(f"{_label(combo)} at {c:g} req/s: {bad} of {n} runs not steady; medians: backlog grew by "
                           f"{100 * growth:.1f} % of arrivals, KV occupancy "
                           f"{100 * float(np.median(at.kv_occupancy_first)):.0f} % -> "
                           f"{100 * float(np.median(at.kv_occupancy_last)):.0f} % over the window")
    return flagged


def _label(combo) -> str:
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in combo)


def _rate_text(x: float, low: float, high: float) -> str:
    """A capacity as text: ``< low`` when below the lowest rate, ``>= high`` at the highest."""
    return f"< {low:g}" if math.isnan(x) else (f">= {x:g}" if x >= high else f"{x:g}")


def _refused(out: xr.Dataset, sel: dict, c: float) -> str:
    """Why the next evaluated rate above the capacity failed: its windows within the
    SLO and its runs not steady."""
    ev = out.arrivals.sel(sel).notnull()
    ran = out.rate_rps.values[ev.any([d for d in ev.dims if d != "rate_rps"]).values]
    above = ran[ran > c] if not math.isnan(c) else ran[:1]
    if not above.size:
        return "—"
    at = _at(out, sel, float(above[0]))
    ok, n = within(out, at)
    return f"{above[0]:g}: {ok}/{n} within SLO, {_unsteady_count(out, at)} not steady"


def table(out: xr.Dataset, rows_dims: list) -> str:
    """The printed table: per row, the capacity, its bootstrap interval, each seed's
    range, at capacity the windows within the criterion, its value there (median over
    seeds), the runs not steady and the steady-state figures (medians), and why the next
    evaluated rate failed."""
    from .tables import fmt, text_table
    metric = out.attrs["capacity_metric"]
    percent = out[metric].attrs.get("units") == "1"
    check = steady.has_check(out)
    interval = "capacity_rps_low" in out
    shown = [k for k, d in enumerate(rows_dims) if d == "policy" or out.sizes[d] > 1]
    units = "%" if percent else out[metric].attrs.get("units", "")
    low, high = out.attrs["capacity_low"], out.attrs["capacity_high"]
    level = out.attrs.get("capacity_level", BOOTSTRAP_LEVEL)
    headers = ([rows_dims[k] for k in shown] + ["capacity req/s"]
               + ([f"{100 * level:g} % interval"] if interval else [])
               + ["seeds' range", "within SLO", f"{metric} at capacity ({units})"])
    if check:
        headers += ["runs not steady", "backlog growth", "KV occ. first→last %"]
    headers.append("next rate")
    body = []
    for combo, sel in _cells(out, rows_dims):
        c = float(out.capacity_rps.sel(sel))
        seeds = out.capacity_rps_seed.sel(sel).values
        rng = "—" if np.all(np.isnan(seeds)) else f"{np.nanmin(seeds):g}–{np.nanmax(seeds):g}"
        if np.any(np.isnan(seeds)) and not np.all(np.isnan(seeds)):
            rng = f"< {low:g}–{np.nanmax(seeds):g}"
        row = [_label([combo[k]]) for k in shown] + [_rate_text(c, low, high)]
        if interval:
            lo, hi = (float(out[f"capacity_rps_{e}"].sel(sel)) for e in ("low", "high"))
            row.append("—" if math.isnan(hi) else f"{_rate_text(lo, low, high)}–{hi:g}")
        row.append(rng)
        if math.isnan(c):
            row += ["—", "—"] + (["—", "—", "—"] if check else [])
        else:
            at = _at(out, sel, c)
            ok, n = within(out, at)
            v = float(np.nanmedian(at[metric].values))
            row += [f"{ok}/{n}", fmt(100 * v, ".1f") if percent else fmt(v, ".0f")]
            if check:
                row.append(f"{_unsteady_count(out, at)}/{n}")
                row.append(fmt(float(np.median(at.backlog_growth.values)), ".0f"))
                row.append(f"{100 * float(np.median(at.kv_occupancy_first)):.0f}→"
                           f"{100 * float(np.median(at.kv_occupancy_last)):.0f}")
        row.append(_refused(out, sel, c))
        body.append(row)
    align = "l" * len(shown) + "r" * (len(headers) - len(shown) - 1) + "l"
    return text_table(headers, body, align=align)


def seed_table(out: xr.Dataset, rows_dims: list) -> str:
    """``--per-seed``: each seed's own capacity (the rule on its runs alone), a row per
    row of the stage and a column per seed."""
    from .tables import text_table
    shown = [k for k, d in enumerate(rows_dims) if d == "policy" or out.sizes[d] > 1]
    low, high = out.attrs["capacity_low"], out.attrs["capacity_high"]
    headers = [rows_dims[k] for k in shown] + [f"seed {s}" for s in out.seed.values]
    body = [[_label([combo[k]]) for k in shown]
            + [_rate_text(float(x), low, high) for x in out.capacity_rps_seed.sel(sel).values]
            for combo, sel in _cells(out, rows_dims)]
    return text_table(headers, body, align="l" * len(shown) + "r" * (len(headers) - len(shown)))


def _parser():
    ap = argparse.ArgumentParser(prog="python -m routesim.capacity", description=__doc__.split("\n\n")[1])
    ap.add_argument("sweep", type=Path, help="sweep file (TOML)")
    ap.add_argument("--stage", action="append", default=None, metavar="NAME",
                    help="search this stage only (repeatable; default: every stage)")
    ap.add_argument("--slo-ms", default=None, metavar="MS",
                    help="the latency bound (default: the sweep's SLO, slo_ttft_ms or slo_ms; with "
                         "slo_ttft_ms_per_prompt_token > 0, each request's own: ttft_excess_p99 <= 0)")
    ap.add_argument("--attainment", default=None, metavar="LEVEL",
                    help="criterion: attainment >= LEVEL (a fraction, e.g. 0.99) instead of the latency")
    ap.add_argument("--rule", default="quantile", metavar="RULE",
                    help="quantile (default): the criterion in at least --quantile of the seeds' windows and "
                         "every window steady; median: the median over seeds meets it")
    ap.add_argument("--quantile", default=None, metavar="Q",
                    help="the fraction of windows that must meet the criterion (rule quantile; default 0.9)")
    ap.add_argument("--per-seed", action="store_true", help="also print each seed's own capacity")
    ap.add_argument("--policy", default=None, metavar="P,...",
                    help="search these of the stage's policies only (default: every one)")
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
    scaled = sweep.model.capacity_scaled
    allowances = stage.values[scaled[1]] if scaled else (0.0,)
    if any(a > 0 for a in allowances):  # each request's own objective, from the sweep's keys
        if slo is not None:
            raise ConfigError(args.sweep, "--slo-ms", f"stage {stage.name!r} scales its objective with prompt "
                              f"length ({scaled[1]}): set {slo_param} in the file instead")
        return latency_criterion(sweep.model, math.nan, allowances)
    if slo is None:
        values = stage.values[slo_param]
        if len(values) != 1:
            raise ConfigError(args.sweep, "--slo-ms", f"stage {stage.name!r} sweeps {slo_param}: give the bound")
        slo = float(values[0])
    return latency_criterion(sweep.model, slo)


def _rule(args) -> Rule:
    from .config import ConfigError
    if args.rule not in RULES:
        raise ConfigError(args.sweep, "--rule", f"one of {', '.join(RULES)}, got {args.rule!r}")
    q = _number(args, "--quantile", 0, low_open=True)
    if q is None:
        return Rule(args.rule)
    if args.rule != "quantile":
        raise ConfigError(args.sweep, "--quantile", f"applies to --rule quantile, not --rule {args.rule}")
    if q > 1:
        raise ConfigError(args.sweep, "--quantile", f"a fraction in (0, 1], got {q:g}")
    return Rule("quantile", q)


def _policies(args, stage):
    """The stage with only the policies ``--policy`` names (in the stage's order)."""
    from .config import ConfigError
    if args.policy is None:
        return stage
    have = tuple(stage.values["policy"])
    asked = [p.strip() for p in args.policy.split(",") if p.strip()]
    missing = [p for p in asked if p not in have]
    if missing or not asked:
        raise ConfigError(args.sweep, "--policy", f"stage {stage.name!r} has no policy {', '.join(missing) or '(none given)'}"
                          f" (it has {', '.join(have)})")
    return replace(stage, values={**stage.values, "policy": tuple(p for p in have if p in asked)})


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
        rule = _rule(args)
        plans = [(_policies(args, s), _criterion(args, sweep, s), _search(args, s)) for s in todo if s.name in names]
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
        out = find(sweep, stage, criterion, search, selected, report, show_progress=not args.quiet, rule=rule)
        rows_dims = [d for d in stage.dims if d not in ("rate_rps", "seed")]
        path = out_dir / f"{stage.name}-capacity.nc"
        write_atomic(out, path)
        units = _units(sweep, criterion)
        print(f"\nstage {stage.name}: capacity = the largest evaluated rate at which "
              f"{rule.text(criterion.text(units))} there and at every lower evaluated rate "
              f"({len(out.seed)} seeds; warm-up {_attr(out, 'warmup_s')} s, window {_attr(out, 'measure_s')} s"
              + (f", drain {_attr(out, 'drain_s')} s" if "drain_s" in out.attrs or "drain_s" in out.coords else "")
              + ")\n")
        print(table(out, rows_dims))
        print("\n" + _legend(out, rule))
        if args.per_seed:
            print(f"\neach seed's own capacity (req/s; the rule on its runs alone):\n\n{seed_table(out, rows_dims)}")
        flagged = steadiness(out, rows_dims)
        if flagged:
            print("\nwarning: not steady at capacity (a transient: lengthen warmup_s and run again; or a collapse):")
            for line in flagged:
                print(f"  {line}")
        print(f"\nwrote {path}", flush=True)
    return 0


def _legend(out: xr.Dataset, rule: Rule) -> str:
    """What the table's columns are."""
    from .tables import legend
    level = 100 * out.attrs["capacity_level"]
    items = [(f"{level:g} % interval", f"percentile bootstrap over seeds ({out.attrs['capacity_resamples']} "
                                       f"resamples of the seeds with replacement, the capacity recomputed by the "
                                       f"same rule on the evaluated rates)"),
             ("seeds' range", "each seed's own capacity, lowest to highest"),
             ("within SLO", "windows (one per seed) at capacity meeting the criterion")]
    if "unsteady" in out:
        items.append(("runs not steady", f"runs at capacity whose own window was not steady: {steady.run_rule()}"))
        items.append(("backlog growth, KV occ. first→last", "medians over seeds at capacity"))
    items.append(("next rate", "the next evaluated rate above the capacity, and why it failed"))
    return legend(items)


def _attr(ds, name):
    if name in ds.coords:
        return "/".join(f"{v:g}" for v in ds[name].values)
    v = ds.attrs.get(name)
    return "?" if v is None else f"{v:g}"


if __name__ == "__main__":
    sys.exit(main())
