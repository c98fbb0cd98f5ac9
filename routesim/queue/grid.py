"""A queue-model stage's grid as flat runs, its chunks' outcome, and the stage's Dataset.

Runs are a flat index over the stage's dimensions (C order of ``Stage.dims``);
:func:`to_dataset` reshapes them into named dimensions at the very end. Workloads are
generated once per distinct (seed, rate profile, horizon, workload parameters) and
shared by every run that has them (common random numbers). A trace workload
(``source = "trace"``, docs/traces.md) takes the window's arrivals and token counts
(rate changes do not apply) and draws only its jitter from the seed. Runs are
independent and the kernel holds no random state, so a chunk of runs can be
simulated anywhere, in any order, and put back in its place.
"""

from dataclasses import dataclass

import numpy as np
import xarray as xr

from .. import traces
from ..arrivals import expected_arrivals, rate_events, router_stream
from ..batch import MIN_CHUNKS, SCRATCH_BUDGET, FlatOutcome
from ..config import Stage, Sweep
from ..grid import FlatGrid, resolve, run_index, trace_window
from ..results import coord_attrs, provenance, selected_attrs, variable_attrs
from ..schema import TRACE_PARAMS
from .dtypes import (EVENT, LEVEL, METRICS, PARAMS as PARAMS_DTYPE, REPLICA, REQUEST, ROUTER, TAIL_LEVELS,
                     WORK, EventKind)
from .engine import run_batch_nb
from .metrics import PER_REPLICA, VARIABLES
from .params import MODEL, PARAM
from .policies import NAMES as POLICY_NAMES, uniforms_per_decision
from .workload import WorkloadParams, from_trace, generate

_WORKLOAD_FIELDS = {
    "prompt_tokens_median": "prompt_median", "prompt_tokens_sigma": "prompt_sigma",
    "prompt_tokens_min": "prompt_min", "prompt_tokens_max": "prompt_max",
    "output_tokens_median": "output_median", "output_tokens_sigma": "output_sigma",
    "output_tokens_min": "output_min", "output_tokens_max": "output_max",
    "demand_ms_base": "demand_base", "demand_ms_per_prompt_token": "demand_per_prompt",
    "demand_ms_per_output_token": "demand_per_output",
    "jitter_min": "jitter_min", "jitter_max": "jitter_max",
    "demand": "demand", "reference_demand_ms": "reference_demand_ms",
}


_WORKLOAD_DIMS = ("seed", "rate_rps", "warmup_s", "measure_s", *_WORKLOAD_FIELDS,
                  *(p.name for p in TRACE_PARAMS))


UNBOUNDED = 2**62        # queue_cap = inf


BYTES_PER_ARRIVAL = 32   # workload: t, demand, jitter (float64), prompt, output (int32)


SCRATCH_PER_ARRIVAL = REQUEST.itemsize  # per run: one REQUEST record per arrival


@dataclass(frozen=True)
class Grid(FlatGrid):
    """One stage, laid out flat.

    coords: dimension -> values, in dimension order; params (runs,) PARAMS;
    base_speed (runs, replicas) ms per ms of demand; events (rows,) EVENT;
    wl_* flat workload arrays with wl_off (workloads + 1,) offsets; ru the router
    streams of the workloads (uniforms) with ru_off (workloads + 1,) offsets, empty
    when no policy of the stage draws.
    """

    stage: Stage
    coords: dict
    params: np.ndarray
    base_speed: np.ndarray
    events: np.ndarray
    wl_t: np.ndarray
    wl_demand: np.ndarray
    wl_jitter: np.ndarray
    wl_off: np.ndarray
    ru: np.ndarray
    ru_off: np.ndarray
    kind = MODEL.kind
    PER_RUN = ("params", "base_speed")

    @property
    def replicas(self):
        return self.base_speed.shape[1]

    def arrivals(self):
        """Arrivals of each run's workload, shape (runs,)."""
        return np.diff(self.wl_off)[self.params["workload"]]


def _column(name, values, idx):
    """A parameter's value per run (a scalar when it does not vary)."""
    vals = np.asarray(values[name])
    return vals[idx[name]] if name in idx else vals[0]


def _scenario_blocks(sweep: Sweep, names):
    """The event table of the given scenarios and each one's (start, count)."""
    rows, blocks = [], []
    for s in names:
        blocks.append((len(rows), len(sweep.scenarios[s])))
        rows += [(e.at_s * 1000.0, int(e.kind), e.replica, e.value) for e in sweep.scenarios[s]]
    return np.array(rows, dtype=EVENT), np.array(blocks, dtype=np.int64).reshape(-1, 2)


def _workload_keys(sweep: Sweep, stage: Stage, values, idx):
    """Distinct workloads: (key rows, inverse per run, first run of each)."""
    profiles = {}
    profile_of = np.array([profiles.setdefault(rate_events(sweep, s), len(profiles))
                           for s in values["scenario"]])
    cols = [profile_of[idx["scenario"]]]
    cols += [idx[d] for d in _WORKLOAD_DIMS if d in idx]
    keys = np.stack(cols, axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def build(sweep: Sweep, stage: Stage, selected: dict | None = None) -> Grid:
    """Lay a stage out flat and generate its workloads (either replica model)."""
    values = resolve(stage, selected or {})
    idx = run_index(stage, values)
    runs = idx["seed"].shape[0]
    col = {p.name: _column(p.name, values, idx) for p in MODEL.params}

    params = np.zeros(runs, dtype=PARAMS_DTYPE)
    codes = np.array([POLICY_NAMES[n] for n in values["policy"]], dtype=np.int32)
    params["policy"] = codes[idx["policy"]]
    het = np.array([sweep.heterogeneity[h] for h in values["heterogeneity"]])
    params["queue_cap"] = np.where(np.isinf(col["queue_cap"]), UNBOUNDED, col["queue_cap"])
    params["choices"] = col["choices"]
    params["dt_ms"] = col["dt_ms"]
    params["warmup_ms"] = col["warmup_s"] * 1000.0
    params["horizon_ms"] = (col["warmup_s"] + col["measure_s"]) * 1000.0
    params["slo_ms"] = col["slo_ms"]
    params["alpha"] = col["alpha"]
    params["exploration"] = col["exploration"]
    params["reward_ceiling_ms"] = col["reward_ceiling_ms"]
    params["prior_service_ms"] = col["prior_service_ms"]
    events, blocks = _scenario_blocks(sweep, values["scenario"])
    params["event_start"] = blocks[idx["scenario"], 0]
    params["event_count"] = blocks[idx["scenario"], 1]

    ref_demand = np.broadcast_to(col["reference_demand_ms"], (runs,))
    base_speed = het[idx["heterogeneity"]] / ref_demand[:, None]

    first, inverse = _workload_keys(sweep, stage, values, idx)
    params["workload"] = inverse
    workloads = []
    for r in first:
        wp = WorkloadParams(**{f: PARAM[name].kind(np.broadcast_to(col[name], (runs,))[r].item())
                               for name, f in _WORKLOAD_FIELDS.items()})
        seed = int(values["seed"][idx["seed"][r]])
        rate = float(values["rate_rps"][idx["rate_rps"][r]])
        scenario = values["scenario"][idx["scenario"][r]]
        if values["source"][0] == "trace":
            rp = replay_of(sweep, {n: np.broadcast_to(col[n], (runs,))[r].item() for n in col})
            workloads.append(from_trace(seed, rp.a_ms, rp.prompt, rp.output, wp))
            continue
        workloads.append(generate(seed, rate, rate_events(sweep, scenario),
                                  float(params["horizon_ms"][r]), wp))
    wl_off = np.zeros(len(workloads) + 1, dtype=np.int64)
    wl_off[1:] = np.cumsum([len(w) for w in workloads])

    # router streams: enough uniforms for every decision (each request is routed at
    # most once plus once per failure event) of the hungriest policy of the stage
    per_decision = max(uniforms_per_decision(c, int(d)) for c in codes
                       for d in np.atleast_1d(col["choices"]))
    fails = max(sum(e.kind == EventKind.FAIL for e in sweep.scenarios[s]) for s in values["scenario"])
    counts = [len(w) * (1 + fails) * per_decision for w in workloads]
    seeds = [int(values["seed"][idx["seed"][r]]) for r in first]
    ru_off = np.zeros(len(workloads) + 1, dtype=np.int64)
    ru_off[1:] = np.cumsum(counts)
    ru = (np.concatenate([router_stream(s, c) for s, c in zip(seeds, counts)])
          if ru_off[-1] else np.zeros(0))

    coords = {d: tuple(values[d]) for d in stage.dims}
    return Grid(stage=stage, coords=coords, params=params, base_speed=base_speed,
                events=events,
                wl_t=np.concatenate([w.t_ms for w in workloads]),
                wl_demand=np.concatenate([w.demand_ms for w in workloads]),
                wl_jitter=np.concatenate([w.jitter for w in workloads]),
                wl_off=wl_off, ru=ru, ru_off=ru_off)


def replay_of(sweep: Sweep, flat: dict):
    """The window of the trace a queue-model run replays (no block ids)."""
    return trace_window(sweep, flat, traces.NO_IDS, traces.NO_IDS)


def estimate_bytes(sweep: Sweep, stage: Stage, chunk_runs: int) -> tuple[int, int]:
    """(bytes, runs): peak memory of running a stage, from expected arrivals alone
    (a trace's: its windows' requests)."""
    values = stage.values
    runs = int(np.prod([len(values[d]) for d in stage.dims]))
    n_rep = len(sweep.heterogeneity[values["heterogeneity"][0]])
    per_seed = []
    if values["source"][0] == "trace":
        flat = {n: values[n][0] for n in values if n != "seed"}
        for w in values["warmup_s"]:
            for m in values["measure_s"]:
                per_seed.append(len(replay_of(sweep, dict(flat, warmup_s=w, measure_s=m))))
    for rate in values["rate_rps"] if not per_seed else ():
        for s in values["scenario"]:
            for w in values["warmup_s"]:
                for m in values["measure_s"]:
                    per_seed.append(expected_arrivals(rate, rate_events(sweep, s), (w + m) * 1000.0))
    wl_variants = int(np.prod([len(values[p]) for p in _WORKLOAD_FIELDS]))
    n_wl = len(values["seed"]) * wl_variants
    mean_arrivals = float(np.mean(per_seed)) + 64.0
    workload = n_wl * sum(per_seed) * BYTES_PER_ARRIVAL
    scratch = min(runs, chunk_runs) * mean_arrivals * SCRATCH_PER_ARRIVAL
    per_run = PARAMS_DTYPE.itemsize + METRICS.itemsize * 3 + n_rep * (REPLICA.itemsize + 48)
    return int(workload + scratch + runs * per_run), runs


@dataclass(frozen=True)
class Outcome(FlatOutcome):
    """Raw results of a grid: metrics (runs,) METRICS; replicas (runs, replicas) REPLICA
    (final state and per-replica counters); router (runs,) ROUTER; tail (runs, levels)
    time-average fraction of replicas holding at least i requests."""

    metrics: np.ndarray
    replicas: np.ndarray
    router: np.ndarray
    tail: np.ndarray

    FIELDS = ("metrics", "replicas", "router", "tail")

    @classmethod
    def empty(cls, grid: Grid, lo: int = 0, hi: int | None = None) -> "Outcome":
        """Output arrays for runs ``lo:hi`` of ``grid``, ready for the kernel."""
        hi = grid.runs if hi is None else hi
        replicas = np.zeros((hi - lo, grid.replicas), dtype=REPLICA)
        replicas["base_speed"] = grid.base_speed[lo:hi]
        return cls(metrics=np.zeros(hi - lo, dtype=METRICS), replicas=replicas,
                   router=np.zeros(hi - lo, dtype=ROUTER), tail=np.zeros((hi - lo, TAIL_LEVELS)))


def default_chunk_size(grid: Grid) -> int:
    """Runs per chunk: at most ``SCRATCH_BUDGET`` of scratch, at least ``MIN_CHUNKS`` chunks."""
    per_run = max(1.0, float(grid.arrivals().mean())) * SCRATCH_PER_ARRIVAL if grid.runs else 1.0
    by_memory = max(1, int(SCRATCH_BUDGET // per_run))
    by_progress = max(1, -(-grid.runs // MIN_CHUNKS))
    return max(1, min(by_memory, max(by_progress, 64)))


def simulate_range(grid: Grid, lo: int, hi: int) -> Outcome:
    """Simulate runs ``lo:hi`` of ``grid`` (one chunk); scratch is sized to this chunk."""
    out = Outcome.empty(grid, lo, hi)
    arrivals = grid.arrivals()[lo:hi]
    off = np.zeros(hi - lo + 1, dtype=np.int64)
    np.cumsum(arrivals, out=off[1:])
    n = int(off[-1])
    levels = np.zeros((hi - lo, TAIL_LEVELS), dtype=LEVEL)
    run_batch_nb(grid.params[lo:hi], out.replicas, out.router,
                 np.zeros((hi - lo, grid.replicas + 1), dtype=WORK), levels,
                 np.empty(n, REQUEST), off, grid.wl_t, grid.wl_demand, grid.wl_jitter,
                 grid.wl_off, grid.ru, grid.ru_off, grid.events, out.metrics)
    out.tail[:] = levels["fraction"]
    return out


def to_dataset(sweep: Sweep, grid: Grid, outcome: Outcome, selected: dict) -> xr.Dataset:
    """Reshape a grid's outcome into named dimensions (interface.md, "Results")."""
    dims = list(grid.coords)
    shape = grid.shape
    n_rep = grid.replicas
    data = run_variables(dims, lambda a, extra: a.reshape(shape + extra), outcome.metrics, outcome.replicas,
                         outcome.tail)
    hets = grid.coords["heterogeneity"]
    data["mean_service_ms"] = (["heterogeneity", "replica"],
                               np.array([sweep.heterogeneity[h] for h in hets]),
                               {"units": "ms", "description": "replica's mean service time of the reference request"})
    coords = {d: (d, np.asarray(v), coord_attrs(d, PARAM)) for d, v in grid.coords.items()}
    coords.update(replica_level_coords(n_rep, outcome.tail.shape[1]))
    stage = grid.stage
    attrs = provenance(sweep, stage)
    attrs.update(selected_attrs(stage, selected))
    values = grid.coords
    for p in PARAM.values():  # parameters that are not dimensions, with their value
        if p.name not in values:
            attrs[p.name] = stage.values[p.name][0] if p.name not in stage.inherit else selected[p.name]
    return xr.Dataset(data, coords=coords, attrs=attrs)


def run_variables(dims, shaped, metrics, replicas, tail) -> dict:
    """The per-run variables of a Dataset: every metric over ``dims``, the per-replica
    ones over ``dims + replica``, ``queue_tail`` over ``dims + level``. ``shaped(a,
    extra)`` reshapes an array over flat runs (then ``extra`` axes) to ``dims + extra``;
    ``metrics`` METRICS records, ``replicas`` REPLICA records (runs, replicas) and
    ``tail`` (runs, levels), all after :func:`metrics.run_metrics_nb`."""
    data = {}
    for name in metrics.dtype.names:
        data[name] = (dims, shaped(metrics[name], ()), variable_attrs(name, VARIABLES))
    for name, field in PER_REPLICA.items():
        data[name] = (dims + ["replica"], shaped(replicas[field], (replicas.shape[-1],)), variable_attrs(name, VARIABLES))
    data["queue_tail"] = (dims + ["level"], shaped(tail, (tail.shape[1],)), variable_attrs("queue_tail", VARIABLES))
    return data


def replica_level_coords(n_replicas, n_levels) -> dict:
    """The ``replica`` (1-based) and ``level`` coordinates."""
    return {"replica": ("replica", np.arange(1, n_replicas + 1), coord_attrs("replica")),
            "level": ("level", np.arange(n_levels), coord_attrs("level"))}
