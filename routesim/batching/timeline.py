"""Timelines of batching runs (token-model.md), recorded by the compiled engine itself.

:func:`run` takes a batching grid of one condition (``routesim.trace`` narrows a stage
to it) and runs each of its runs through :func:`engine.run_one_nb`, the function every
run of a grid goes through, with sample times: the engine records, at each sample
time ``s``, the state after everything at times ``<= s`` (per replica, and a few
cumulative counts of the cluster), and what became of each request. The run's
metrics are the engine's own, so they equal the grid run's.

The Dataset (dimensions: ``policy`` and any axis with several values, then ``time``
in seconds and ``replica``):

- per replica: waiting and running sequences, KV blocks referenced and cached,
  outstanding tokens, health, black hole (``fail_fast``), ejection by router 0's
  breaker, warmth (the cold-start time multiplier), router 0's view of its
  outstanding requests and tokens (beside the truth, so staleness can be seen), and
  attempts placed on it per interval;
- cluster-wide: TTFT and TPOT rolling p99 over the last :data:`ROLLING_COMPLETIONS`
  completions (from each request's record and arrival time), token throughput over a
  trailing :data:`THROUGHPUT_WINDOW_MS`, and per interval the attempts, retries,
  failures (and among them the timeouts and first-token timeouts), sheds, rejections
  and completions;
- per request (``request``, in arrival order, NaN-padded when runs differ in length):
  arrival time, TTFT, TPOT and output tokens, for distributions (CDFs);
- per run (no ``time``): the grid's result variables (token-interface.md).

Per-interval counts at sample ``j`` count what happened in ``(s_{j-1}, s_j]``. Samples
end at the horizon; a run that drains past it (token-model.md §7) goes on after the
last sample, and its per-request and per-run variables include the drain.
"""

import numpy as np
import xarray as xr

from ..ranks import nearest_rank
from ..tables import fmt
from ..timeline import ROLLING_COMPLETIONS, THROUGHPUT_WINDOW_MS, summary_table
from .dtypes import CLUSTER_SAMPLE, EVENT_NAMES, KEPT, METRICS, SAMPLE, Fate
from .engine import run_args, run_one_nb
from .runs import replica_records


VARIABLES = {
    # name: (units, description)
    "waiting": ("sequences", "sequences in the replica's waiting queue (preempted ones included)"),
    "running": ("sequences", "running sequences (admitted to the batch)"),
    "kv_referenced": ("blocks", "KV blocks referenced by running sequences"),
    "kv_cached": ("blocks", "KV blocks resident with a block id and no reference (reusable prefix cache)"),
    "kv_referenced_fraction": ("1", "referenced KV blocks over the replica's pool (kv_blocks)"),
    "outstanding_requests": ("requests", "true o_i: waiting + running sequences + attempts held by a black hole"),
    "outstanding_tokens": ("tokens", "true τ_i: Σ P + max(A, g) over waiting, running and black-holed attempts"),
    "healthy": ("1", "1 while the replica is up (not crashed)"),
    "black_hole": ("1", "1 while the replica fails fast (fail_fast: eligible, does no work, fails each attempt)"),
    "ejected": ("1", "1 while router 0's breaker ejects the replica"),
    "warmth": ("1", "time multiplier of a cold start, 1 + (cold_factor - 1)·exp(-(T - t_up)/cold_tau_ms); 1 when warm"),
    "view_requests": ("requests", "outstanding requests o_i as router 0 sees them (the signal it routes on)"),
    "view_tokens": ("tokens", "outstanding tokens τ_i as router 0 sees them (compare outstanding_tokens)"),
    "assignments": ("attempts", "attempts placed on the replica in the interval ending at this time (retries included)"),
    "replica_emitted": ("tokens", "output tokens the replica emitted in the interval ending at this time"),
    "ttft_rolling_p99": ("ms", f"p99 time to first token of the last {ROLLING_COMPLETIONS} completions, any "
                         "request (nearest rank; NaN before the first)"),
    "tpot_rolling_p99": ("ms", f"p99 time per output token after the first of the last {ROLLING_COMPLETIONS} "
                         "completions with at least 2 output tokens (nearest rank; NaN before the first)"),
    "token_throughput_rolling": ("tokens/s", f"output tokens emitted in the trailing {THROUGHPUT_WINDOW_MS:,.0f} ms "
                                 "(whole intervals), per second"),
    "attempts_interval": ("attempts", "attempts placed on any replica in the interval ending at this time"),
    "retries_interval": ("attempts", "placements with attempt number >= 2 in the interval ending at this time"),
    "failures_interval": ("attempts", "attempts that failed (crash, black hole, timeout, first-token timeout) in the "
                          "interval ending at this time"),
    "timeouts_interval": ("attempts", "attempts that failed by their whole-attempt deadline (timeout_ms) in the "
                          "interval ending at this time"),
    "ttft_timeouts_interval": ("attempts", "attempts that failed by their first-token deadline (ttft_timeout_ms) in "
                               "the interval ending at this time"),
    "sheds_interval": ("requests", "routing decisions that found no eligible replica in the interval ending at this time"),
    "rejected_interval": ("requests", "requests turned away at the front door in the interval ending at this time"),
    "completions_interval": ("requests", "completions (any request) in the interval ending at this time"),
    "request_arrival": ("s", "the request's arrival time (NaN past the run's last request)"),
    "request_ttft": ("ms", "first token of its completing attempt − arrival; NaN unless completed"),
    "request_tpot": ("ms", "(completion − first token) / (O − 1); NaN unless completed with O >= 2"),
    "request_output": ("tokens", "the request's output tokens O (NaN past the run's last request)"),
}
"""Units and description of every timeline variable (copied into the Dataset attrs)."""


def record(g, r: int, sample_ms: np.ndarray):
    """Run ``r`` of a batching grid with samples: (metrics record, replicas (REPLICA),
    samples (samples, replicas) SAMPLE, cluster (samples,) CLUSTER_SAMPLE, keep
    (requests,) KEPT, send times (requests,) ms (the arrivals in an open loop), output tokens
    (requests,)), sliced
    exactly as :func:`engine.run_batch` slices a grid's run."""
    p = g.params[r]
    w = int(p["workload"])
    pk = g.packed
    lo, hi = int(pk.off[w]), int(pk.off[w + 1])
    rep = replica_records(g.params[r:r + 1], g.factors[r:r + 1])[0]
    mt = np.zeros(1, METRICS)
    samples = np.zeros((sample_ms.shape[0], g.replicas), SAMPLE)
    cluster = np.zeros(sample_ms.shape[0], CLUSTER_SAMPLE)
    keep = np.zeros(hi - lo, KEPT)
    run_one_nb(mt=mt[0:1][0], sample_t=np.ascontiguousarray(sample_ms), samples=samples, cluster=cluster, keep=keep,
               **run_args(g.params, r, rep, g.events, pk.t, pk.prompt, pk.output, pk.key, pk.seg_key, pk.seg_len,
                          pk.seg_off, pk.off, g.ru, g.ru_off, pk.next, pk.think))
    return mt[0], rep, samples, cluster, keep, keep["sent_ms"], pk.output[lo:hi]  # latencies from the send


def rolling_p99(done_ms, value, sample_ms, window_n=ROLLING_COMPLETIONS):
    """At each sample time ``s``: the p99 of ``value`` over the last ``window_n``
    completions with ``done_ms <= s`` (in completion order; ties in request order)."""
    order = np.argsort(done_ms, kind="stable")
    done, v = done_ms[order], value[order]
    upto = np.searchsorted(done, sample_ms, side="right")
    return np.array([nearest_rank(v[max(0, k - window_n):k]) for k in upto])


def cluster_series(keep, t_arr, out_tokens, sample_ms):
    """(TTFT rolling p99, TPOT rolling p99, completions per interval) from the
    requests' records: completed requests only, TTFT = first token − arrival, TPOT =
    (completion − first token) / (O − 1) for O ≥ 2."""
    done = keep["outcome"] == Fate.COMPLETED
    d_ms, f_ms, a_ms, o = keep["done_ms"][done], keep["first_ms"][done], t_arr[done], out_tokens[done]
    ttft = rolling_p99(d_ms, f_ms - a_ms, sample_ms)
    two = o >= 2
    tpot = rolling_p99(d_ms[two], (d_ms[two] - f_ms[two]) / (o[two] - 1), sample_ms)
    cum = np.searchsorted(np.sort(d_ms), sample_ms, side="right")
    return ttft, tpot, np.diff(cum, prepend=0)


def request_latencies(keep, t_arr, out_tokens):
    """(4, requests): each request's arrival (s), TTFT (ms), TPOT (ms) and output tokens,
    NaN where not defined (TTFT: not completed; TPOT: not completed or O < 2), as §7
    defines them."""
    done = keep["outcome"] == Fate.COMPLETED
    ttft = np.where(done, keep["first_ms"] - t_arr, np.nan)
    two = done & (out_tokens >= 2)
    tpot = np.where(two, (keep["done_ms"] - keep["first_ms"]) / np.maximum(out_tokens - 1, 1), np.nan)
    return np.stack([t_arr / 1000.0, ttft, tpot, out_tokens.astype(np.float64)])


def _interval(cumulative, axis=-1):
    return np.diff(cumulative, axis=axis, prepend=0)


def run(sweep, stage, g, selected, interval_ms: float) -> xr.Dataset:
    """Timelines of every run of ``g`` (one condition of ``stage``), as a Dataset."""
    from .grid import Outcome, to_dataset
    horizon = float(g.params["horizon_ms"].min())
    n_s = int(np.floor(horizon / interval_ms + 1e-9)) + 1
    sample_ms = np.arange(n_s, dtype=np.float64) * interval_ms
    runs, n_rep = g.runs, g.replicas
    outcome = Outcome.empty(g)
    smp = np.zeros((runs, n_s, n_rep), SAMPLE)
    clu = np.zeros((runs, n_s), CLUSTER_SAMPLE)
    ttft = np.zeros((runs, n_s))
    tpot = np.zeros((runs, n_s))
    done = np.zeros((runs, n_s), np.int64)
    per_request = []
    for r in range(runs):
        mt, rep, samples, cluster, keep, t_arr, out_tok = record(g, r, sample_ms)
        outcome.metrics[r] = mt
        outcome.replicas[r] = rep
        smp[r], clu[r] = samples, cluster
        ttft[r], tpot[r], done[r] = cluster_series(keep, t_arr, out_tok, sample_ms)
        per_request.append(request_latencies(keep, t_arr, out_tok))
    n_req = max(a.shape[1] for a in per_request)
    req = np.full((runs, 4, n_req), np.nan)      # arrival s, TTFT ms, TPOT ms, O; NaN-padded
    for r, a in enumerate(per_request):
        req[r, :, :a.shape[1]] = a

    base = to_dataset(sweep, g, outcome, selected)  # the grid's variables, as a grid gives them
    dims = list(g.coords)
    kept = [d for d in dims if d == "policy" or len(g.coords[d]) > 1]
    base = base.isel({d: 0 for d in dims if d not in kept})
    lead = tuple(len(g.coords[d]) for d in kept)

    def var(name, a, extra):
        units, desc = VARIABLES[name]
        return (kept + extra, a.reshape(lead + a.shape[1:]), {"units": units, "description": desc})

    per = lambda f: smp[f]  # noqa: E731  (runs, samples, replicas)
    tokens = per("tokens").sum(axis=-1)
    k = max(1, int(round(THROUGHPUT_WINDOW_MS / interval_ms)))
    before = np.concatenate([np.zeros((runs, k), np.int64), tokens], axis=1)[:, :n_s]
    tput = (tokens - before) / (k * interval_ms / 1000.0)
    kv_blocks = replica_records(g.params, g.factors)["kv_blocks"].astype(np.float64)[:, None, :]  # its pool's
    rd = ["time", "replica"]
    data = {
        "waiting": var("waiting", per("waiting"), rd),
        "running": var("running", per("running"), rd),
        "kv_referenced": var("kv_referenced", per("kv_referenced"), rd),
        "kv_cached": var("kv_cached", per("kv_cached"), rd),
        "kv_referenced_fraction": var("kv_referenced_fraction", per("kv_referenced") / kv_blocks, rd),
        "outstanding_requests": var("outstanding_requests", per("waiting") + per("running") + per("blackholed"), rd),
        "outstanding_tokens": var("outstanding_tokens", per("outstanding_tokens"), rd),
        "healthy": var("healthy", per("healthy").astype(np.int8), rd),
        "black_hole": var("black_hole", per("fail_fast").astype(np.int8), rd),
        "ejected": var("ejected", per("ejected").astype(np.int8), rd),
        "warmth": var("warmth", per("warmth"), rd),
        "view_requests": var("view_requests", per("view_requests"), rd),
        "view_tokens": var("view_tokens", per("view_tokens"), rd),
        "assignments": var("assignments", _interval(per("placed"), axis=1), rd),
        "replica_emitted": var("replica_emitted", _interval(per("tokens"), axis=1), rd),
        "ttft_rolling_p99": var("ttft_rolling_p99", ttft, ["time"]),
        "tpot_rolling_p99": var("tpot_rolling_p99", tpot, ["time"]),
        "token_throughput_rolling": var("token_throughput_rolling", tput, ["time"]),
        "attempts_interval": var("attempts_interval", _interval(per("placed").sum(axis=-1)), ["time"]),
        "retries_interval": var("retries_interval", _interval(clu["retries"]), ["time"]),
        "failures_interval": var("failures_interval", _interval(clu["failures"]), ["time"]),
        "timeouts_interval": var("timeouts_interval", _interval(clu["timeouts"]), ["time"]),
        "ttft_timeouts_interval": var("ttft_timeouts_interval", _interval(clu["ttft_timeouts"]), ["time"]),
        "sheds_interval": var("sheds_interval", _interval(clu["shed"]), ["time"]),
        "rejected_interval": var("rejected_interval", _interval(clu["rejected"]), ["time"]),
        "completions_interval": var("completions_interval", done, ["time"]),
        "request_arrival": var("request_arrival", req[:, 0], ["request"]),
        "request_ttft": var("request_ttft", req[:, 1], ["request"]),
        "request_tpot": var("request_tpot", req[:, 2], ["request"]),
        "request_output": var("request_output", req[:, 3], ["request"]),
    }
    clash = sorted(set(data) & set(base.data_vars))
    if clash:  # a timeline variable must never hide a run's metric
        raise ValueError(f"timeline variables named like result variables: {', '.join(clash)}")
    ds = base.assign_coords(time=("time", sample_ms / 1000.0,
                                  {"units": "s", "description": "simulated time of the sample"}))
    ds = ds.assign(data)
    # the scenario's events (start_down first, as fail events at t = 0), for marking them on plots
    names = {int(c): n for c, n in EVENT_NAMES.items()}
    scen = str(np.atleast_1d(ds.scenario.values)[0])
    evs = [(0.0, "fail", r, 0.0) for r in sweep.start_down]
    evs += [(e.at_s, names[int(e.kind)], e.replica, e.value) for e in sweep.scenarios[scen]]
    ds["event_time"] = ("event", np.array([e[0] for e in evs], np.float64),
                        {"units": "s", "description": "time of the scenario event"})
    ds["event_kind"] = ("event", np.array([e[1] for e in evs], dtype=str),
                        {"description": "rate_multiplier, slowdown, fail, fail_fast or recover"})
    ds["event_replica"] = ("event", np.array([e[2] + 1 for e in evs], np.int64),
                           {"description": "replica number, 1-based; 0 for cluster-wide events"})
    ds["event_value"] = ("event", np.array([e[3] for e in evs], np.float64),
                         {"units": "1", "description": "rate multiplier or slowdown factor (absolute)"})
    ds.attrs.update({"kind": "trace", "interval_ms": float(interval_ms),
                     "rolling_completions": ROLLING_COMPLETIONS,
                     "throughput_window_ms": float(k * interval_ms),
                     "sampling": "state after everything at times <= the sample time"})
    return ds


def summary(ds: xr.Dataset) -> str:
    """A batching trace's short table: per run its attainment, TTFT p99, what failed,
    the retries and wasted tokens, and its worst moments."""
    def cells(one):
        rolling = one.ttft_rolling_p99.values
        return [fmt(100 * float(one.attainment), ".2f"), fmt(float(one.ttft_p99), ".0f"),
                int(one.failed), int(one.retries), int(one.wasted_tokens), int(one.breaker_ejections),
                int(one.waiting.max()),
                fmt(float(np.nanmax(rolling)) if np.isfinite(rolling).any() else np.nan, ".0f")]
    return summary_table(ds, ["attain %", "TTFT p99 ms", "failed", "retries", "wasted tokens", "ejections",
                               "max waiting", "max rolling TTFT p99 ms"], cells)
