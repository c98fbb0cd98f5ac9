"""A batching stage's grid as flat runs, its chunks' outcome, and the stage's Dataset.

Runs are a flat index over the stage's dimensions (C order of ``Stage.dims``).
Workloads are generated once per distinct (seed, rate profile, workload parameters)
and shared by every run that has them (common random numbers); router streams once
per (seed, draws needed). A trace workload (``source = "trace"``, token-model.md §1.2)
is cut once per distinct window and is the same for every seed: the seed drives only
the router stream (the kernel finds a run's stream through its workload index, so the
trace workload is packed once per seed). Scenario rate changes do not apply to it.
§1.3's empirical lengths (``lengths_trace``) keep the synthetic arrivals.
"""

import contextlib
from collections import OrderedDict
from dataclasses import dataclass, fields

import numba as nb
import numpy as np
import xarray as xr

from .. import traces
from ..config import Stage, Sweep, trace_file
from ..schema import LENGTHS_PARAMS, TRACE_PARAMS, run_defaults
from ..batch import MIN_CHUNKS, FlatOutcome
from ..grid import FlatGrid, load_trace, resolve, run_index, trace_window
from ..results import coord_attrs, provenance, selected_attrs, variable_attrs
from ..arrivals import expected_arrivals, rate_events, router_stream
from . import pd_keys
from .dtypes import EVENT, METRICS, PARAMS, REPLICA, EventKind, VLLM_MODE
from .metrics import (ACCUMULATORS, CLIENT_VARIABLES, PD_PER_REPLICA, PD_VARIABLES, PER_REPLICA,
                      SCALED_SLO_VARIABLES, VARIABLES, VLLM_VARIABLES)
from .params import CLIENT_PARAMS, MODEL, TOKEN_PARAMS, ZERO_UNRECORDED, unused_params
from .runs import Packed, conversation_params, params_row, router_draws, simulate, workload_params
from .workload import conversations, from_replay, generate, trace_chains

WORKLOAD_PARAMS = ("seed", "rate_rps", "warmup_s", "measure_s", "block_tokens",
                   *(p.name for p in TOKEN_PARAMS + TRACE_PARAMS + LENGTHS_PARAMS
                     if p.section == "workload" and p.name not in CLIENT_PARAMS))
"""What a run's workload depends on, besides its scenario's rate changes."""
TRACE_WINDOW = ("trace_path", "trace_format", "trace_time_scale", "trace_start_s", "trace_duration_s",
                "trace_hash_block_tokens", "trace_chains", "block_tokens", "warmup_s", "measure_s")
"""What a trace workload depends on (not the seed, the rate or the scenario)."""


def replay_of(sweep: Sweep, flat: dict, block_tokens=None):
    """The window of the trace a run replays (``routesim.traces.Replay``): in blocks of
    the run's ``block_tokens`` and hash blocks of its ``trace_hash_block_tokens``, or
    both of ``block_tokens`` when given."""
    if block_tokens is None:
        return trace_window(sweep, flat, int(flat["block_tokens"]), int(flat["trace_hash_block_tokens"]) or None)
    return trace_window(sweep, flat, block_tokens, block_tokens)


def _workload(sweep: Sweep, flat: dict, seed: int, rate_rps: float, changes, cache: dict, wkey: tuple):
    """One run's requests: a trace window (§1.2), or §1.1 with §1.3's lengths when given
    (``wkey``: what they depend on, besides a lengths trace's file)."""
    if flat["source"] == "trace":
        tkey = tuple(flat[n] for n in TRACE_WINDOW)
        if tkey not in cache:
            rp, ids = replay_of(sweep, flat), None
            if flat["trace_chains"]:  # conversation chains of its hash ids (docs/model.md "Conversations")
                tr, b = load_trace(sweep, flat), int(flat["block_tokens"])
                ids, _ = trace_chains(rp, tr, b, int(flat["trace_hash_block_tokens"]) or tr.hash_block_tokens or b)
            cache[tkey] = from_replay(rp, ids)
        return cache[tkey]
    lengths, key = None, wkey
    if flat["lengths_trace"]:
        path = trace_file(sweep.path, flat["lengths_trace"]).resolve()
        with contextlib.suppress(OSError):  # (a missing file: load_trace says so)
            st = path.stat()
            key = wkey + (str(path), st.st_mtime_ns, st.st_size)
        lengths = traces.lengths_table(load_trace(sweep, flat, "lengths_trace", "lengths_format"))
    if key in _DRAWN:
        _DRAWN.move_to_end(key)
        return _DRAWN[key]
    horizon = (flat["warmup_s"] + flat["measure_s"]) * 1000.0
    w = generate(seed, rate_rps, changes, horizon, workload_params(flat), lengths=lengths)
    w = conversations(w, seed, conversation_params(flat), workload_params(flat))
    _keep(key, w)
    return w


_DRAWN = OrderedDict()
DRAWN_BYTES = 256 * 2**20
"""Synthetic workloads kept from the stages built before, the least recently used
dropped beyond this many bytes: a sweep's stages often draw the same ones (the same
seeds, rate and workload under another policy, signal or step cost), and drawing them
is most of building a stage. Read-only: a grid packs copies of them."""


def _arrays(w):
    return [getattr(w, f.name) for f in fields(w) if getattr(w, f.name) is not None]


def _keep(key, w):
    for a in _arrays(w):
        a.flags.writeable = False
    _DRAWN[key] = w
    total = sum(a.nbytes for x in _DRAWN.values() for a in _arrays(x))
    while total > DRAWN_BYTES and len(_DRAWN) > 1:
        _, gone = _DRAWN.popitem(last=False)
        total -= sum(a.nbytes for a in _arrays(gone))


@dataclass(frozen=True)
class Grid(FlatGrid):
    """One batching stage, laid out flat: params (runs,) PARAMS; factors (runs,
    replicas) time factors; events (rows,) EVENT; the packed workloads and router
    streams (``ru_off`` per workload)."""

    stage: Stage
    coords: dict
    params: np.ndarray
    factors: np.ndarray
    events: np.ndarray
    packed: Packed
    ru: np.ndarray
    ru_off: np.ndarray
    kind = MODEL.kind
    PER_RUN = ("params", "factors")

    @property
    def replicas(self):
        return self.factors.shape[1]

    def order(self):
        """Runs of one workload together, in their flat order (stable), so that a chunk's
        runs of one workload share what the scheduler makes of it (``scheduler.Shared``:
        the vllm mode's prompt keys, about a third of a long run's time)."""
        return np.argsort(self.params["workload"], kind="stable")

    def arrivals(self):
        """Requests of each run's workload, shape (runs,)."""
        return np.diff(self.packed.off)[self.params["workload"]]


@dataclass(frozen=True)
class Outcome(FlatOutcome):
    """Raw results of runs: metrics (runs,) METRICS; replicas (runs, replicas) REPLICA."""

    metrics: np.ndarray
    replicas: np.ndarray

    FIELDS = ("metrics", "replicas")

    @classmethod
    def empty(cls, grid: Grid, lo: int = 0, hi: int | None = None) -> "Outcome":
        hi = grid.runs if hi is None else hi
        return cls(metrics=np.zeros(hi - lo, METRICS), replicas=np.zeros((hi - lo, grid.replicas), REPLICA))


def default_chunk_size(grid: Grid) -> int:
    """Runs per chunk: about ``MIN_CHUNKS`` chunks (a run's scratch lives in the kernel,
    one run per thread: only progress counts), each a multiple of the kernel's threads
    (``numba.get_num_threads()``), which share a chunk's runs: a chunk of one run on two
    threads leaves a core idle for the whole run, one of three for a third of it."""
    threads = nb.get_num_threads()
    per_chunk = -(-grid.runs // MIN_CHUNKS)
    return max(1, -(-per_chunk // threads) * threads)


def simulate_range(grid: Grid, lo: int, hi: int) -> Outcome:
    """Simulate runs ``lo:hi`` of ``grid`` (one chunk)."""
    metrics, replicas = simulate(grid.params[lo:hi], grid.factors[lo:hi], grid.events, grid.packed,
                                 grid.ru, grid.ru_off)
    return Outcome(metrics=metrics, replicas=replicas)


def _event_table(sweep: Sweep, names):
    """Scenario events of the given scenarios (start_down first, as events at t = 0)
    and each scenario's (start, count)."""
    rows, blocks = [], []
    for s in names:
        start = len(rows)
        rows += [(0.0, int(EventKind.FAIL), r, 0.0) for r in sweep.start_down]
        rows += [(e.at_s * 1000.0, int(e.kind), e.replica, e.value) for e in sweep.scenarios[s]]
        blocks.append((start, len(rows) - start))
    return np.array(rows, dtype=EVENT), np.array(blocks, dtype=np.int64).reshape(-1, 2)


def build(sweep: Sweep, stage: Stage, selected: dict | None = None) -> Grid:
    """Lay a batching stage out flat and generate its workloads."""
    values = resolve(stage, selected or {})
    idx = run_index(stage, values)
    runs = idx["seed"].shape[0]
    dims = stage.dims

    def value(name, r):
        vals = values[name]
        return vals[idx[name][r]] if name in idx else vals[0]

    events, blocks = _event_table(sweep, values["scenario"])
    het = np.array([sweep.heterogeneity[h] for h in values["heterogeneity"]], dtype=np.float64)
    factors = het[idx["heterogeneity"]]

    keys, workloads, first_run, windows = {}, [], [], {}
    m = sweep.model
    ru_keys, ru_parts, ru_counts = {}, [], []
    params = np.zeros(runs, PARAMS)
    given = stage.given | set(stage.inherit)
    ru_of = np.zeros(runs, np.int64)
    for r in range(runs):
        flat = pd_keys.link_bytes(run_defaults(m.params, {p.name: value(p.name, r) for p in m.params}, given),
                                  sweep.path)
        scenario = value("scenario", r)
        changes = () if flat["source"] == "trace" else rate_events(sweep, scenario)
        wkey = (changes,) + tuple(value(n, r) for n in WORKLOAD_PARAMS)
        w = keys.get(wkey)
        if w is None:
            w = keys[wkey] = len(workloads)
            workloads.append(_workload(sweep, flat, int(value("seed", r)), float(value("rate_rps", r)),
                                       changes, windows, wkey))
            first_run.append(r)
        s = int(np.flatnonzero(np.array(values["scenario"]) == scenario)[0])
        params[r] = params_row(flat, value("policy", r), n_replicas=factors.shape[1],
                               event_start=blocks[s, 0], event_count=blocks[s, 1], workload=w)
        # the router stream: one per (seed, draws) — its prefix does not depend on the count
        draws = router_draws(value("policy", r), flat["choices"], len(workloads[w]), flat["max_attempts"], flat)
        rkey = (int(value("seed", r)), w)
        if rkey not in ru_keys or ru_counts[ru_keys[rkey]] < draws:
            ru_keys[rkey] = len(ru_parts)
            ru_parts.append(router_stream(rkey[0], draws))
            ru_counts.append(draws)
        ru_of[r] = ru_keys[rkey]
    # a run reads its stream through its workload index: the stream depends on the seed
    # alone (which the workload key holds), so each workload keeps the longest one needed
    ru_off = np.zeros(len(workloads) + 1, np.int64)
    streams = [np.zeros(0)] * len(workloads)
    for (seed, w), j in ru_keys.items():
        streams[w] = ru_parts[j]
    ru_off[1:] = np.cumsum([s.size for s in streams])
    ru = np.concatenate(streams) if streams else np.zeros(0)
    coords = {d: tuple(values[d]) for d in dims}
    return Grid(stage=stage, coords=coords, params=params, factors=factors, events=events,
                     packed=Packed.of(workloads), ru=ru, ru_off=ru_off)


def estimate_bytes(sweep: Sweep, stage: Stage, chunk_runs: int) -> tuple[int, int]:
    """(bytes, runs): memory of a stage from expected arrivals: the workloads (five
    numbers a request) and the outputs. Not counted: each thread's scratch for the run it
    simulates (small for the reserve scheduler; for ``scheduler = "vllm"`` its hash map,
    private-key array and pools, tens of MB for the example cluster), and what the
    schedulers take from each workload alone, kept for the grid's other runs of it
    (``runs.Packed.shared``: the vllm mode's prompt keys, a few MB a workload, at most
    ``scheduler.Shared.BUDGET``)."""
    values = stage.values
    runs = int(np.prod([len(values[d]) for d in stage.dims]))
    n_rep = len(sweep.heterogeneity[values["heterogeneity"][0]])
    names = [n for n in TRACE_WINDOW if n != "block_tokens"]
    if values["source"][0] == "trace":  # the windows' requests (trace keys as grid axes)
        per_seed = [len(replay_of(sweep, dict(zip(names, combo)),
                                  block_tokens=traces.NO_IDS))
                    for combo in _product([values[n] for n in names])]
    else:
        per_seed = [expected_arrivals(rate, rate_events(sweep, s), (w + m) * 1000.0)
                    for rate in values["rate_rps"] for s in values["scenario"]
                    for w in values["warmup_s"] for m in values["measure_s"]]
    counted = names if values["source"][0] == "trace" else ()  # already in per_seed
    variants = int(np.prod([len(values[p]) for p in WORKLOAD_PARAMS
                            if p not in ("seed", "rate_rps", *counted)]))
    workload = len(values["seed"]) * variants * sum(per_seed) * 40
    per_run = PARAMS.itemsize + METRICS.itemsize * 2 + n_rep * REPLICA.itemsize * 2
    return int(workload + runs * per_run), runs


def _product(lists):
    import itertools
    return itertools.product(*lists)


def to_dataset(sweep: Sweep, grid: Grid, outcome: Outcome, selected: dict) -> xr.Dataset:
    """Reshape a batching grid's outcome into named dimensions (token-interface.md)."""
    dims = list(grid.coords)
    shape = grid.shape
    data = {}
    closed = bool((grid.params["max_in_flight"] > 0).any())  # a closed-loop client's variables only then
    vllm = bool(np.isin(grid.params["scheduler"], VLLM_MODE).any())  # the vllm mode's only then
    pools = bool((grid.params["prefill_replicas"] > 0).any())  # disaggregation's only then
    scaled = bool((grid.params["slo_ttft_ms_per_token"] > 0).any())  # a scaled TTFT objective's only then
    for name in outcome.metrics.dtype.names:
        if (name not in ACCUMULATORS and (closed or name not in CLIENT_VARIABLES)
                and (vllm or name not in VLLM_VARIABLES) and (pools or name not in PD_VARIABLES)
                and (scaled or name not in SCALED_SLO_VARIABLES)):
            data[name] = (dims, outcome.metrics[name].reshape(shape), variable_attrs(name, VARIABLES))
    n_rep = grid.replicas
    for name, field in (PER_REPLICA | (PD_PER_REPLICA if pools else {})).items():
        data[name] = (dims + ["replica"], outcome.replicas[field].reshape(shape + (n_rep,)),
                      variable_attrs(name, VARIABLES))
    hets = grid.coords["heterogeneity"]
    data["time_factor"] = (["heterogeneity", "replica"], np.array([sweep.heterogeneity[h] for h in hets]),
                           {"units": "1", "description": "replica's time factor (1 = the reference replica)"})
    m = sweep.model
    coords = {d: (d, np.asarray(v), coord_attrs(d, m.param)) for d, v in grid.coords.items()}
    coords["heterogeneity"][2]["description"] = "named setting of the replicas' time factors"
    coords["replica"] = ("replica", np.arange(1, n_rep + 1), coord_attrs("replica"))
    stage = grid.stage
    attrs = provenance(sweep, stage)
    attrs["replica_kind"] = "batching"
    attrs.update(selected_attrs(stage, selected))
    unused = unused_params(stage.values, stage.given)
    for p in m.params:  # parameters that are not dimensions, with their value (if some run uses it)
        if p.name not in grid.coords and p.name not in unused and (not p.inherit or p.name in stage.given or p.name in stage.inherit):
            v = stage.values[p.name][0] if p.name not in stage.inherit else selected[p.name]
            if p.default_when and p.name not in stage.given and p.name not in stage.inherit:
                v = _run_default_attr(p, resolve(stage, selected))
            if p.name in ZERO_UNRECORDED and v == 0:
                continue  # as before these keys existed (the open loop, no engine-loop time)
            attrs[p.name] = int(v) if isinstance(v, bool) else v
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _run_default_attr(p, values):
    """The attribute of a parameter the file does not set whose default depends on
    another's (``Param.default_when``: ``waiting_cap`` on ``scheduler``): the default
    every run of the stage takes, or, when its runs take different ones, each with the
    other's value (``"512 (scheduler = reserve), inf (scheduler = vllm)"``)."""
    other = p.default_when[0]
    found = {v: p.run_default({other: v}) for v in values[other]}
    if len(set(found.values())) == 1:
        return next(iter(found.values()))
    return ", ".join(f"{d:g} ({other} = {v})" for v, d in found.items())
