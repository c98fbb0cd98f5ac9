"""A stage's grid as flat runs: the arrays the batch kernel reads.

Runs are a flat index over the stage's dimensions (C order of ``Stage.dims``);
:mod:`routesim.results` reshapes them into named dimensions at the very end.
Workloads are generated once per distinct (seed, rate profile, horizon, workload
parameters) and shared by every run that has them (common random numbers). A trace
workload (``source = "trace"``, docs/traces.md) takes the window's arrivals and token
counts (rate changes do not apply) and draws only its jitter from the seed.
"""

import os
from dataclasses import dataclass

import numpy as np

from . import traces
from .config import PARAM, QUEUE, TRACE_PARAMS, ConfigError, Stage, Sweep, trace_file
from .queue.dtypes import EVENT, METRICS, PARAMS as PARAMS_DTYPE, REPLICA, REQUEST, EventKind
from .queue.policies import NAMES as POLICY_NAMES, uniforms_per_decision
from .arrivals import expected_arrivals, router_stream
from .queue.workload import WorkloadParams, from_trace, generate

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


class FlatGrid:
    """What the pipeline reads of either model's grid: ``coords`` (dimension -> values)
    and ``params`` (runs,), hence its shape and number of runs."""

    @property
    def shape(self):
        return tuple(len(v) for v in self.coords.values())

    @property
    def runs(self):
        return self.params.shape[0]


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

    @property
    def replicas(self):
        return self.base_speed.shape[1]

    def arrivals(self):
        """Arrivals of each run's workload, shape (runs,)."""
        return np.diff(self.wl_off)[self.params["workload"]]


def run_index(stage: Stage, values: dict):
    """Per-dimension index arrays of the flat runs, shape (runs,) each."""
    shape = tuple(len(values[d]) for d in stage.dims)
    flat = np.unravel_index(np.arange(int(np.prod(shape)), dtype=np.int64), shape)
    return dict(zip(stage.dims, flat))


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


def _rate_events(sweep: Sweep, scenario):
    return tuple((e.at_s * 1000.0, e.value) for e in sweep.scenarios[scenario]
                 if e.kind == EventKind.RATE)


def _workload_keys(sweep: Sweep, stage: Stage, values, idx):
    """Distinct workloads: (key rows, inverse per run, first run of each)."""
    profiles = {}
    profile_of = np.array([profiles.setdefault(_rate_events(sweep, s), len(profiles))
                           for s in values["scenario"]])
    cols = [profile_of[idx["scenario"]]]
    cols += [idx[d] for d in _WORKLOAD_DIMS if d in idx]
    keys = np.stack(cols, axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def resolve(stage: Stage, selected: dict) -> dict:
    """The stage's values with inherited parameters set from earlier selections."""
    values = dict(stage.values)
    for name in stage.inherit:
        values[name] = (selected[name],)
    return values


def build(sweep: Sweep, stage: Stage, selected: dict | None = None) -> Grid:
    """Lay a stage out flat and generate its workloads (either replica model)."""
    if sweep.kind == "batching":
        from .batching.grid import build as token_build
        return token_build(sweep, stage, selected)
    values = resolve(stage, selected or {})
    idx = run_index(stage, values)
    runs = idx["seed"].shape[0]
    col = {p.name: _column(p.name, values, idx) for p in QUEUE.params}

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
        workloads.append(generate(seed, rate, _rate_events(sweep, scenario),
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
    """The window of the trace a queue-model run replays (no block ids); a problem
    (say the file changed since the sweep was read) is a ConfigError."""
    try:
        tr = traces.load_trace(trace_file(sweep.path, flat["trace_path"]), flat["trace_format"])
    except traces.TraceError as e:
        raise ConfigError(sweep.path, "workload.trace.path", str(e)) from None
    try:
        return traces.replay(tr, block_tokens=traces.NO_IDS, hash_block_tokens=traces.NO_IDS,
                             start_s=float(flat["trace_start_s"]), duration_s=float(flat["trace_duration_s"]),
                             time_scale=float(flat["trace_time_scale"]),
                             horizon_ms=(flat["warmup_s"] + flat["measure_s"]) * 1000.0)
    except traces.TraceError as e:
        raise ConfigError(sweep.path, "workload.trace", str(e)) from None


def estimate_bytes(sweep: Sweep, stage: Stage, chunk_runs: int) -> tuple[int, int]:
    """(bytes, runs): peak memory of running a stage, from expected arrivals alone
    (a trace's: its windows' requests)."""
    if sweep.kind == "batching":
        from .batching.grid import estimate_bytes as token_estimate
        return token_estimate(sweep, stage, chunk_runs)
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
                    per_seed.append(expected_arrivals(rate, _rate_events(sweep, s), (w + m) * 1000.0))
    wl_variants = int(np.prod([len(values[p]) for p in _WORKLOAD_FIELDS]))
    n_wl = len(values["seed"]) * wl_variants
    mean_arrivals = float(np.mean(per_seed)) + 64.0
    workload = n_wl * sum(per_seed) * BYTES_PER_ARRIVAL
    scratch = min(runs, chunk_runs) * mean_arrivals * SCRATCH_PER_ARRIVAL
    per_run = PARAMS_DTYPE.itemsize + METRICS.itemsize * 3 + n_rep * (REPLICA.itemsize + 48)
    return int(workload + scratch + runs * per_run), runs


def available_bytes() -> int | None:
    """Memory this process may still use (Linux ``MemAvailable``), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None
