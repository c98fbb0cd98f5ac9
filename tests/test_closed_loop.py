"""The closed-loop client and the client overhead (issue 25 item 3; docs/model.md
"Closed-loop clients"): ``[workload] max_in_flight = N`` keeps at most N requests in
flight (vLLM's benchmark client with ``--max-concurrency``: each request's intended
time comes from the arrival process; it waits for one of N slots, then is sent), and
``client_overhead_ms`` is added to the TTFT and E2E the client measures and to the time
it holds a slot.

- The engine against the naive reference (tests/token_reference.py, which implements
  the rule on its own) on cases where the cap binds: synthetic and trace workloads,
  with retries, timeouts, first-token timeouts, crashes, black holes, shedding, the
  front door (reject and queue), the drain and none, both schedulers.
- Theory, from the engine's per-request records: with N = 1 each send is
  max(intended time, previous completion + overhead); with N >= the requests, the open
  loop exactly; the client never holds more than N and, while requests wait, holds
  exactly N (so the response-time law with zero think time, X = N / R, holds up to
  the ends of the busy period).
- The sweep file: bad values are one line naming the file and the key, exit 2; the
  variables appear in a Dataset only with a closed loop.
"""

import math
from pathlib import Path

import numpy as np
import pytest

import routesim
import token_reference as ref
from routesim import traces
from routesim.batching import runs as br
from routesim.batching.dtypes import KEPT, METRICS, Fate
from routesim.batching.engine import no_timeline, run_args, run_one_nb
from routesim.batching.workload import from_replay, generate
from test_token_config import BASE, assert_refused, bad, run_cli  # noqa: F401 (a fixture)
from test_token_engine_vs_reference import (COUNTS, FLOAT_VECTORS, FLOATS, VECTORS, _close, _engine,
                                            _reference_workload, _values)

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT / "traces" / "mooncake-conv.jsonl"
CLIENT_FLOATS = ("client_wait_p50", "client_wait_p99", "client_wait_mean")
CLIENT_COUNTS = ("client_waiting",)

SHORT = dict(warmup_s=1.0, measure_s=4.0)
INCIDENT = dict(SHORT, prefix_groups=4)
# name: (parameter overrides, rate req/s, time factors, events); every case binds its cap
# (checked below from the reference: some request waits in the client)
CASES = {
    "cap-4": (dict(SHORT, max_in_flight=4, max_batch=8), 20.0, [1.0, 1.0, 1.0], []),
    "cap-1-overhead": (dict(SHORT, max_in_flight=1, client_overhead_ms=18.0, measure_s=2.0), 8.0, [1.0, 1.3], []),
    "cap-8-overhead-no-drain": (dict(SHORT, max_in_flight=8, client_overhead_ms=25.0, drain_s=0.0), 14.0,
                                [1.0, 1.0], []),
    # (requests in a backoff hold slots beyond what the replicas hold: the cap binds while they shed)
    "cap-shedding": (dict(SHORT, max_in_flight=12, waiting_cap=2, max_batch=3, max_batched_tokens=2048,
                          timeout_ms=800.0, max_attempts=3, backoff_ms=150.0), 30.0, [1.0, 1.0], []),
    "cap-timeouts-retries": (dict(INCIDENT, max_in_flight=8, timeout_ms=900.0, max_attempts=3,
                                  retry_budget=0.2, min_retry_concurrency=1, max_batch=6,
                                  max_batched_tokens=2048), 22.0, [1.0, 1.4], []),
    "cap-ttft-timeouts": (dict(INCIDENT, max_in_flight=7, ttft_timeout_ms=500.0, max_attempts=2, max_batch=4,
                               max_batched_tokens=2048, client_overhead_ms=5.0), 18.0, [1.0, 1.4], []),
    "cap-crash-black-hole": (dict(INCIDENT, max_in_flight=6, max_attempts=2, breaker_consecutive=2,
                                  breaker_eject_ms=300.0, cold_factor=2.0), 16.0, [1.0, 1.0, 1.0],
                             [(1500.0, "fail_fast", 0, 0.0), (2500.0, "fail", 1, 0.0),
                              (3200.0, "recover", 1, 0.0), (3600.0, "recover", 0, 0.0)]),
    "cap-front-door-reject": (dict(INCIDENT, max_in_flight=6, admission_max_tokens=6000.0,
                                   admission_mode="reject", max_batch=4), 24.0, [1.0, 1.0], []),
    "cap-front-door-queue": (dict(INCIDENT, max_in_flight=10, admission_max_tokens=6000.0,
                                  admission_mode="queue", timeout_ms=1500.0, max_attempts=2, max_batch=4,
                                  client_overhead_ms=10.0), 24.0, [1.0, 1.0], []),
    "cap-local-routers": (dict(INCIDENT, max_in_flight=5, signal_mode="periodic_local", period_ms=50.0,
                               routers=2), 16.0, [1.0, 1.0, 1.0], []),
    "cap-vllm": (dict(SHORT, max_in_flight=5, scheduler="vllm", kv_blocks=3000, max_batch=8, p_long=0.0), 14.0,
                 [1.0, 1.2], []),
    # the roofline step cost (issue 25 item 2) under a closed loop, in both schedulers
    "cap-roofline": (dict(SHORT, max_in_flight=6, step_cost="roofline", max_batch=8, client_overhead_ms=18.0),
                     20.0, [1.0, 1.2], []),
    "cap-roofline-vllm": (dict(SHORT, max_in_flight=5, step_cost="roofline", scheduler="vllm", kv_blocks=3000,
                               max_batch=8, p_long=0.0), 14.0, [1.0, 1.2], []),
}
POLICIES = ("round_robin", "least_tokens", "power_of_d", "prefix_affinity")


def _workload(overrides, rate, seed):
    values = _values(overrides)
    horizon = (values["warmup_s"] + values["measure_s"]) * 1000.0
    return generate(seed, rate, (), horizon, br.workload_params(values)), values


def _check(label, got, rep, want):
    bad_ = []
    for name in COUNTS + CLIENT_COUNTS:
        if int(got[name]) != want[name]:
            bad_.append(f"{name}: engine {got[name]} reference {want[name]}")
    for name in FLOATS + CLIENT_FLOATS:
        if not _close(float(got[name]), float(want[name])):
            bad_.append(f"{name}: engine {got[name]!r} reference {want[name]!r}")
    for name, field in VECTORS.items():
        if list(rep[field]) != list(want[name]):
            bad_.append(f"{name}: engine {list(rep[field])} reference {list(want[name])}")
    for name, field in FLOAT_VECTORS.items():
        if not all(_close(float(x), float(y)) for x, y in zip(rep[field], want[name], strict=True)):
            bad_.append(f"{name}: engine {list(rep[field])} reference {list(want[name])}")
    assert not bad_, f"{label}:\n" + "\n".join(bad_)


def _binds(want):
    """The cap bound: some cohort request waited in the client."""
    return any(r["sent"] is not None and r["sent"] > r["arrival"] for r in want["records"])


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("case", list(CASES))
def test_engine_matches_reference_closed_loop(case, policy):
    overrides, rate, factors, events = CASES[case]
    wl, values = _workload(overrides, rate, 1)
    got, rep = _engine(wl, values, factors, events, policy, 1)
    want = ref.simulate(_reference_workload(wl), values, factors, events, policy, 1)
    _check(f"{case} {policy}", got, rep, want)
    assert _binds(want), f"{case}: the cap never binds"


def test_the_cases_exercise_what_they_claim():
    """From the reference: each feature a case names happens in it (round_robin)."""
    def run(case):
        overrides, rate, factors, events = CASES[case]
        wl, values = _workload(overrides, rate, 1)
        out = ref.simulate(_reference_workload(wl), values, factors, events, "round_robin", 1, _return_sim=True)
        return out, out.pop("_sim")
    out, _ = run("cap-shedding")
    assert out["shed"] > 0
    out, sim = run("cap-timeouts-retries")
    assert out["retries"] > 0 and any(e[1] == "fail" and e[2] == "timeout" for e in sim.trace)
    out, sim = run("cap-ttft-timeouts")
    assert any(e[1] == "fail" and e[2] == "ttft_timeout" for e in sim.trace)
    out, sim = run("cap-crash-black-hole")
    assert {"crash", "fast"} <= {e[2] for e in sim.trace if e[1] == "fail"}
    out, _ = run("cap-front-door-reject")
    assert out["rejected"] > 0
    out, sim = run("cap-front-door-queue")
    assert any(e[1] == "fifo" for e in sim.trace)
    out, _ = run("cap-8-overhead-no-drain")
    assert out["client_waiting"] > 0 and out["unfinished"] > 0  # never sent by the stop: unfinished
    assert sum(1 for r in out["records"] if r["sent"] is None and r["arrival"] >= 1000.0) > 0


# a trace window (§1.2) under a closed loop
TRACE_CASES = {
    "mooncake-cap-3": (dict(start_s=300, duration_s=15, time_scale=1),
                       dict(warmup_s=2.0, measure_s=14.0, block_tokens=64, kv_blocks=2000,
                            max_batched_tokens=4096, max_in_flight=3, client_overhead_ms=12.0), [1.0, 1.2]),
    "mooncake-compressed-cap-8": (dict(start_s=450, duration_s=24, time_scale=2),
                                  dict(warmup_s=1.0, measure_s=11.0, block_tokens=32, kv_blocks=3000,
                                       max_in_flight=8, timeout_ms=4000.0, max_attempts=2), [1.0, 1.3, 0.9]),
}


@pytest.mark.parametrize("policy", ("least_cost", "prefix_affinity"))
@pytest.mark.parametrize("case", list(TRACE_CASES))
def test_engine_matches_reference_on_a_trace(case, policy):
    window, over, factors = TRACE_CASES[case]
    values = _values(over)
    H = (values["warmup_s"] + values["measure_s"]) * 1000.0
    rp = traces.replay(traces.load_trace(MOONCAKE, "mooncake"), block_tokens=values["block_tokens"],
                       horizon_ms=H, **window)
    got, rep = _engine(from_replay(rp), values, factors, [], policy, 1)
    blocks = [[int(x) for x in rp.block_ids[rp.block_offsets[k]:rp.block_offsets[k + 1]]] for k in range(len(rp))]
    wl = ref.Workload(t=[float(x) for x in rp.a_ms], prompt=[int(x) for x in rp.prompt],
                      output=[int(x) for x in rp.output], key=[float(x) for x in rp.key], blocks=blocks)
    want = ref.simulate(wl, values, factors, [], policy, 1)
    _check(f"{case} {policy}", got, rep, want)
    assert _binds(want)


# ------------------------------------------------------------------ theory (the engine alone)

def _records(wl, values, factors, policy="least_tokens", seed=1):
    """The engine's run with its per-request records: (METRICS record, KEPT (requests,))."""
    p = br.params_row(values, policy, n_replicas=len(factors))
    packed = br.Packed.of([wl])
    count = br.router_draws(policy, values["choices"], len(wl), values["max_attempts"])
    from routesim.arrivals import router_stream
    ru = router_stream(seed, count)
    rep = br.replica_records(p.reshape(1), np.array([factors], float))[0]  # factors, roles, settings
    mt = np.zeros(1, METRICS)
    keep = np.zeros(len(wl), KEPT)
    run_one_nb(mt=mt[0:1][0], **dict(no_timeline(len(factors)), keep=keep),
               **run_args(p.reshape(1), 0, rep, br.event_rows([]), packed.t, packed.prompt, packed.output,
                          packed.key, packed.seg_key, packed.seg_len, packed.seg_off, packed.off, ru,
                          np.array([0, count])))
    return mt[0], keep


LOADED = dict(SHORT, max_batch=6, prefix_groups=4)  # every request completes in the drain


def test_one_client_sends_after_each_completion():
    """N = 1: each request is sent at max(its intended time, the previous one's
    completion + overhead), and the client waits whenever that is later."""
    for ovh in (0.0, 18.0):
        wl, values = _workload(dict(LOADED, max_in_flight=1, client_overhead_ms=ovh, measure_s=2.0), 12.0, 3)
        mt, keep = _records(wl, values, [1.0, 1.0])
        assert (keep["outcome"] == Fate.COMPLETED).all()
        t = wl.t_ms
        want = np.empty(len(wl))
        want[0] = t[0]
        for k in range(1, len(wl)):
            want[k] = max(t[k], keep["done_ms"][k - 1] + ovh)
        assert np.array_equal(keep["sent_ms"], want)
        assert (keep["sent_ms"][1:] >= keep["done_ms"][:-1] + ovh).all()  # strictly one at a time
        assert (keep["sent_ms"] > t).sum() > len(wl) // 2  # the cap binds


def test_a_cap_no_one_reaches_is_the_open_loop():
    """N >= the requests: every metric equals the open loop's, bit for bit; no one waits."""
    wl, values = _workload(dict(INCIDENT, max_attempts=2, timeout_ms=900.0, max_batch=6), 18.0, 2)
    factors = [1.0, 1.4]
    open_, rep_open = _engine(wl, values, factors, [], "power_of_d", 2)
    closed, rep_closed = _engine(wl, {**values, "max_in_flight": len(wl)}, factors, [], "power_of_d", 2)
    for name in METRICS.names:
        if name in ("client_wait_p50", "client_wait_p99", "client_wait_mean"):
            assert closed[name] == 0.0 and math.isnan(open_[name])
        else:
            assert open_[name] == closed[name] or (math.isnan(open_[name]) and math.isnan(closed[name])), name
    assert closed["client_waiting"] == 0
    for name in rep_open.dtype.names:
        assert np.array_equal(rep_open[name], rep_closed[name], equal_nan=True), name


def _held(keep, ovh):
    """Client slot intervals [send, completion + overhead) of completed requests."""
    return keep["sent_ms"], keep["done_ms"] + ovh


def _in_flight_max(lo, hi):
    """Most intervals [lo, hi) overlapping at one time (ends before starts at equal times)."""
    ev = sorted([(x, 1) for x in lo] + [(x, -1) for x in hi], key=lambda e: (e[0], e[1]))
    cur = best = 0
    for _, d in ev:
        cur += d
        best = max(best, cur)
    return best


@pytest.mark.parametrize("N,ovh", [(3, 0.0), (8, 15.0)])
def test_the_client_holds_at_most_n_and_exactly_n_while_requests_wait(N, ovh):
    """Little's law bound: the number in flight never exceeds N (so its mean is <= N);
    and the client is work-conserving: whenever a request waits, N are in flight."""
    wl, values = _workload(dict(LOADED, max_in_flight=N, client_overhead_ms=ovh), 25.0, 4)
    mt, keep = _records(wl, values, [1.0, 1.0])
    assert (keep["outcome"] == Fate.COMPLETED).all()
    lo, hi = _held(keep, ovh)
    assert _in_flight_max(lo, hi) == N
    span = hi.max() - lo.min()
    assert (hi - lo).sum() / span <= N  # Little: mean in flight = Σ holding times / span
    waited = np.flatnonzero(keep["sent_ms"] > wl.t_ms)
    assert waited.size > 0
    for k in waited:  # just before its send, all N slots were held
        s = keep["sent_ms"][k]
        assert ((lo < s) & (hi >= s)).sum() == N, k


@pytest.mark.parametrize("N,ovh", [(4, 0.0), (8, 15.0)])
def test_response_time_law_with_all_requests_due_at_once(N, ovh):
    """Every intended time equal (an infinite arrival rate) and N clients with zero think
    time: throughput X = N / R (the interactive response-time law), R the mean E2E as the
    client measures it. Over [0, T], T the last send, all N slots are always held, so
    C·R_c <= N·T <= C·R_c + N·max E2E with C the completions in [0, T] (each slot's
    holding times tile [0, T] but for the one it holds at T)."""
    wl, values = _workload(dict(LOADED, max_in_flight=N, client_overhead_ms=ovh, warmup_s=0.5, measure_s=3.0),
                           60.0, 5)
    W = values["warmup_s"] * 1000.0
    wl.t_ms[:] = W  # all due at once, at the window's start (a cohort: the drain sends them all)
    mt, keep = _records(wl, values, [1.0, 1.0])
    assert (keep["outcome"] == Fate.COMPLETED).all()
    lo, hi = _held(keep, ovh)
    lo, hi = lo - W, hi - W  # time from W
    T = lo.max()
    done = hi <= T
    e2e = hi - lo  # completion + overhead - send: what the client measures
    C = done.sum()
    assert C > 10 * N
    R = e2e[done].mean()
    assert C * R <= N * T * (1 + 1e-12)
    assert N * T <= C * R + N * e2e.max()
    assert (lo[:N] == 0.0).all() and (lo[N:] > 0.0).all()  # N sent at once, the others waited
    assert math.isclose(mt["e2e_mean"], e2e.mean(), rel_tol=1e-12)  # the engine's E2E: the client's


# ------------------------------------------------------------------ the sweep file

CLIENT_BAD = [
    bad("negative-cap", "workload.max_in_flight", "must be >= 0",
        ("context_limit = 8192", "context_limit = 8192\nmax_in_flight = -1")),
    bad("fractional-cap", "workload.max_in_flight", "whole number",
        ("context_limit = 8192", "context_limit = 8192\nmax_in_flight = 2.5")),
    bad("string-cap", "workload.max_in_flight", "expected a number, got a string",
        ("context_limit = 8192", 'context_limit = 8192\nmax_in_flight = "8"')),
    bad("negative-overhead", "workload.client_overhead_ms", "must be >= 0",
        ("context_limit = 8192", "context_limit = 8192\nclient_overhead_ms = -18")),
    bad("infinite-overhead", "workload.client_overhead_ms", "",
        ("context_limit = 8192", "context_limit = 8192\nclient_overhead_ms = inf")),
    bad("negative-cap-in-stage", "stages[0].workload.max_in_flight[1]", "must be >= 0",
        ('name = "policies"', 'name = "policies"\nworkload = { max_in_flight = [4, -2] }')),
    bad("misspelt-cap", "workload.max_inflight", "did you mean 'max_in_flight'",
        ("context_limit = 8192", "context_limit = 8192\nmax_inflight = 4")),
]


@pytest.mark.parametrize("text,key,fragment", CLIENT_BAD)
def test_bad_client_keys(tmp_path, run_cli, text, key, fragment):  # noqa: F811
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert_refused(*run_cli(path)[:3], path, key, fragment, tmp_path / "out")


def test_queue_model_refuses_the_key(tmp_path, run_cli):  # noqa: F811
    text = (ROOT / "sweeps" / "exploration.toml").read_text()
    assert "[workload]" in text
    text = text.replace("[workload]", "[workload]\nmax_in_flight = 4", 1)
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert_refused(*run_cli(path)[:3], path, "workload.max_in_flight", "unknown key", tmp_path / "out")


def test_variables_appear_only_with_a_closed_loop(tmp_path):
    """A stage without the key keeps the Dataset it had before (no new variables or
    attributes); one with it has them, with a cap axis."""
    from routesim.batching.grid import simulate_range, to_dataset
    from routesim.grid import build
    names = ("client_wait_p50", "client_wait_p99", "client_wait_mean", "client_waiting")
    for extra, closed in (("", False), ("\nworkload = { max_in_flight = [0, 1], client_overhead_ms = 18 }", True)):
        path = tmp_path / f"s{int(closed)}.toml"
        path.write_text(BASE.replace('name = "policies"', 'name = "policies"' + extra))
        sweep = routesim.load_sweep(path)
        g = build(sweep, sweep.stages[0])
        ds = to_dataset(sweep, g, simulate_range(g, 0, g.runs), {})
        assert all((n in ds) == closed for n in names)
        assert ("max_in_flight" in ds.attrs) is False
        assert ("client_overhead_ms" in ds.attrs) == closed
        if closed:
            assert list(ds["max_in_flight"].values) == [0, 1]
            wait = ds["client_wait_p99"].sel(max_in_flight=1)
            assert float(wait.max()) > 0
            assert np.isnan(ds["client_wait_p99"].sel(max_in_flight=0)).all()
