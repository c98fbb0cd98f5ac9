"""The study's design and its run: sweeps/disaggregation-study.toml holds, per workload
(:data:`WORKLOADS`), a co-located stage and one stage per prefill:decode split
(:data:`SPLITS`) with the three pair-routing rules as its ``pair_route`` axis; every
stage of a workload has the same loads and seeds, so a seed gives every arm the same
requests (paired). :func:`run` simulates the sweep once and joins each workload's stages
along one ``arm`` axis (:data:`ARMS`: "co-located", then "P:D rule").
"""

import time
from dataclasses import replace
from pathlib import Path

import xarray as xr

from ...batching.pd_keys import ROUTES
from ...config import load_sweep
from ...results import write_atomic

ROOT = Path(__file__).resolve().parents[3]
SWEEP = ROOT / "sweeps" / "disaggregation-study.toml"
WORKLOADS = ("chat", "code", "mooncake")
"""The workloads, each a group of stages named ``<workload>-colocated`` and
``<workload>-P:D``: the chat mix and the Azure code trace's lengths at synthetic
Poisson loads (a ``rate_rps`` axis), the Mooncake excerpt replayed at its own arrivals
(a ``trace_time_scale`` axis)."""
SPLITS = ((2, 6), (4, 4), (6, 2))
"""The prefill:decode splits of the 8 replicas."""
COLOCATED = "co-located"
LOADS = {"chat": "rate_rps", "code": "rate_rps", "mooncake": "trace_time_scale"}
"""Each workload's load axis."""


def arm(split, route) -> str:
    """The ``arm`` coordinate of a split (prefill, decode) under a pair-routing rule."""
    return f"{split[0]}:{split[1]} {route}"


ARMS = (COLOCATED, *(arm(s, r) for s in SPLITS for r in ROUTES))
"""The arms, in order: co-located, then every split under every rule."""


def stage_name(workload, split=None) -> str:
    return f"{workload}-colocated" if split is None else f"{workload}-{split[0]}:{split[1]}"


def join(stages: dict, workload: str) -> xr.Dataset:
    """One workload's stage Datasets (``stages``: {stage name: Dataset}) joined along
    ``arm`` (:data:`ARMS`), every other axis of length one dropped but the load
    (:data:`LOADS`), ``seed`` and ``replica``: dims (arm, load, seed[, replica]). The
    disaggregation variables are NaN for the co-located arm."""
    keep = {LOADS[workload], "seed", "replica"}

    def squeeze(ds):
        return ds.squeeze([d for d in ds.dims if ds.sizes[d] == 1 and d not in keep], drop=True)
    parts = [squeeze(stages[stage_name(workload)]).expand_dims(arm=[COLOCATED])]
    for split in SPLITS:
        ds = stages[stage_name(workload, split)]
        for route in ROUTES:
            parts.append(squeeze(ds.sel(pair_route=route, drop=True)).expand_dims(arm=[arm(split, route)]))
    out = xr.concat(parts, "arm", data_vars="all", join="outer", combine_attrs="override")
    for v in out.variables.values():
        v.encoding = {}  # a count the co-located arm lacks is NaN there: written as float, not as the stage's int
    for k in [k for k in out.attrs if k in ("prefill_replicas", "decode_replicas", "threshold_tokens")]:
        del out.attrs[k]  # the arms differ in them: the arm names say
    out.attrs["threshold_tokens"] = int(stages[stage_name(workload, SPLITS[0])].attrs.get("threshold_tokens", 0))
    return out.transpose("arm", LOADS[workload], "seed", ...)


def reduced(sweep, seeds=None, rates=None, time_scales=None):
    """``sweep`` with every stage's seeds, ``rate_rps`` (synthetic stages) and
    ``trace_time_scale`` (trace stages) replaced where given: the test's smaller run of
    the same design."""
    stages = []
    for st in sweep.stages:
        values = dict(st.values)
        if seeds is not None:
            values["seed"] = tuple(seeds)
        if rates is not None and st.name.split("-")[0] in rates:
            values["rate_rps"] = tuple(rates[st.name.split("-")[0]])
        if time_scales is not None and st.name.startswith("mooncake"):
            values["trace_time_scale"] = tuple(time_scales)
        stages.append(replace(st, values=values))
    return replace(sweep, stages=tuple(stages))


def run(results_dir, sweep=None, show_progress=False, log=None) -> dict:
    """Simulate the design (``sweep``: default :data:`SWEEP`, or a :func:`reduced` one);
    write ``<workload>.nc`` for every workload into ``results_dir``, each with attrs
    ``wall_s`` and ``cpu_s`` (seconds its stages took). Returns {workload: path}."""
    from ... import study
    sweep = sweep or load_sweep(SWEEP)
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    out = {}
    for w in WORKLOADS:
        names = [s.name for s in sweep.stages if s.name.split("-")[0] == w]
        t0, c0 = time.perf_counter(), time.process_time()
        stages = study.run(sweep, stages=names, show_progress=show_progress)
        ds = join(stages, w)
        ds.attrs.update(wall_s=time.perf_counter() - t0, cpu_s=time.process_time() - c0,
                        runs=int(sum(s.arrivals.size for s in stages.values())))
        if log:
            log(f"{w}: {ds.attrs['runs']} runs in {ds.attrs['wall_s']:.0f} s")
        path = results_dir / f"{w}.nc"
        write_atomic(ds, path)
        out[w] = path
    return out
