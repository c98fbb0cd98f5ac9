"""The study's design and its run: the three arms (:data:`ARMS`: reserve, and the vllm
scheduler in vLLM's synchronous and asynchronous loops) on the example cluster
(sweeps/scheduler-modes.toml: every policy, four loads, a capacity search) and on the
Mooncake excerpt (sweeps/scheduler-modes-mooncake.toml), each arm simulated apart (and
timed) and the three joined along a ``scheduler`` axis (the arms' names).

The capacity search is :func:`routesim.capacity.find` with :data:`SEARCH` on the example
stage: round 1 runs the stage's own four loads for every policy and scheduler (the
fixed-load comparison reads those runs), later rounds narrow each row's bracket to
:data:`SEARCH`'s resolution. Searching each scheduler apart gives the runs and
capacities a joint search would (rows are searched independently), and the time each
took.
"""

import time
from dataclasses import replace
from pathlib import Path

import xarray as xr

from ... import capacity
from ...config import load_sweep
from ...results import write_atomic

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "sweeps" / "scheduler-modes.toml"
MOONCAKE = ROOT / "sweeps" / "scheduler-modes-mooncake.toml"
ARMS = {"reserve": {"scheduler": "reserve"},
        "vllm_sync": {"scheduler": "vllm", "async_scheduling": False},
        "vllm": {"scheduler": "vllm", "async_scheduling": True}}
"""The study's arms, the values of its ``scheduler`` axis: the sweep keys each sets.
``"vllm"`` is the vllm mode as a user gets it (vLLM 0.30.0's default asynchronous loop,
``async_scheduling = true``); ``"vllm_sync"`` the same scheduler in vLLM's synchronous
loop (``async_scheduling = false``)."""
SCHEDULERS = tuple(ARMS)
RULE = capacity.Rule("median")
"""The capacity rule of this study's document and figure (the median over seeds meets the
SLO): the rule before issue 44, kept so that the document and its pinned outputs stay what
they say; ``routesim.capacity``'s default (the quantile rule with the per-run check) would
lower some capacities."""
SEARCH = capacity.Search(low=34.0, high=52.0, points=4, resolution=2.0)
"""Round 1 at the stage's loads 34, 40, 46, 52 req/s; later rounds every 2 req/s inside
each row's bracket (python -m routesim.capacity sweeps/scheduler-modes.toml --points 4
--resolution 2)."""
NEAR = 40.0
"""The fixed load of the figure's example row: 0.87 x the 46 req/s capacity of the best
policies under reserve (README, 1,200 s warm-up), below capacity in both modes."""


def _one(stage, arm):
    """``stage`` restricted to one arm of :data:`ARMS` (its keys set as if the file gave them)."""
    values = dict(stage.values)
    for key, v in ARMS[arm].items():
        values[key] = (v,)
    return replace(stage, values=values, given=stage.given | set(ARMS[arm]))


def _label(ds, arm):
    """A part's ``scheduler`` coordinate set to its arm's name (the two vllm arms share
    ``scheduler = "vllm"``), its ``async_scheduling`` attribute dropped (the arm says it)."""
    ds = ds.assign_coords(scheduler=[arm]) if "scheduler" in ds.dims else ds.expand_dims(scheduler=[arm])
    ds.attrs.pop("async_scheduling", None)
    return ds


def criterion(sweep, stage):
    """The capacity criterion: ttft_p99 at most the sweep's slo_ttft_ms (each request's own
    objective when the stage scales it with prompt length: capacity.latency_criterion)."""
    _, slo = sweep.model.capacity_latency
    scaled = sweep.model.capacity_scaled[1]
    return capacity.latency_criterion(sweep.model, float(stage.values[slo][0]), stage.values[scaled])


def run_example(path=EXAMPLE, search=SEARCH, show_progress=False, log=None):
    """The example stage's capacity search per scheduler, joined along ``scheduler``;
    attrs ``wall_s_<scheduler>``, ``cpu_s_<scheduler>`` (wall and CPU seconds, every
    thread, each search took) and ``runs_<scheduler>``."""
    sweep = load_sweep(path)
    stage = sweep.stages[0]
    crit = criterion(sweep, stage)
    parts, attrs = [], {}
    for s in SCHEDULERS:
        runs = [0]

        def report(rnd, rates, n, seconds, s=s):
            runs[0] += n
            if log:
                log(f"example, {s}: round {rnd}: {n} runs at {', '.join(f'{x:g}' for x in rates)} req/s "
                    f"in {seconds:.0f} s")
        t0, c0 = time.perf_counter(), time.process_time()
        part = capacity.find(sweep, _one(stage, s), crit, search, {}, report, show_progress, rule=RULE)
        parts.append(_label(part, s))
        attrs[f"wall_s_{s}"] = time.perf_counter() - t0
        attrs[f"cpu_s_{s}"] = time.process_time() - c0
        attrs[f"runs_{s}"] = runs[0]
    ds = xr.concat(parts, "scheduler", data_vars="all", join="outer", combine_attrs="override")
    ds.attrs.update(attrs)
    return ds


def run_stage(path=MOONCAKE, show_progress=False, log=None):
    """A sweep's first stage per scheduler, joined along ``scheduler``; attrs
    ``wall_s_<scheduler>``, ``cpu_s_<scheduler>`` and ``runs_<scheduler>``."""
    from ... import study
    sweep = load_sweep(path)
    stage = sweep.stages[0]
    parts, attrs = [], {}
    for s in SCHEDULERS:
        one = replace(sweep, stages=(_one(stage, s),))
        t0, c0 = time.perf_counter(), time.process_time()
        ds = study.run(one, show_progress=show_progress)[stage.name]
        attrs[f"wall_s_{s}"] = time.perf_counter() - t0
        attrs[f"cpu_s_{s}"] = time.process_time() - c0
        attrs[f"runs_{s}"] = int(ds.arrivals.size)
        if log:
            log(f"{sweep.name}, {s}: {attrs[f'runs_{s}']} runs in {attrs[f'wall_s_{s}']:.0f} s")
        parts.append(_label(ds, s))
    ds = xr.concat(parts, "scheduler", data_vars="all", combine_attrs="override")
    ds.attrs.update(attrs)
    return ds



def run(results_dir, show_progress=False, log=None) -> dict:
    """Simulate the design; write ``example.nc`` and ``mooncake.nc`` into ``results_dir``.
    Returns {name: path}."""
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, make in (("mooncake", lambda: run_stage(MOONCAKE, show_progress, log)),
                       ("example", lambda: run_example(EXAMPLE, SEARCH, show_progress, log))):
        path = results_dir / f"{name}.nc"
        write_atomic(make(), path)
        out[name] = path
    return out
