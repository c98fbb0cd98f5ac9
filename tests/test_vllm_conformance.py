"""The reference's scheduler = "vllm" mode against vLLM 0.30.0's own scheduler (issues 22, 40).

The expectations are vLLM's: conformance/recorded/vllm-0.30.0.json.gz holds what vLLM's
real V1 ``Scheduler`` did on 400 random cases (119,915 steps; conformance/record.py,
VLLM-SCHEDULER.md §3), and conformance/recorded/vllm-0.30.0-async.json.gz what its default
loop (``AsyncScheduler`` in ``EngineCore.step_with_batch_queue``, VLLM-SCHEDULER.md §9) did
on the same cases (123,470 steps), compared with the reference's ``async_scheduling``.  Each case is replayed through tests/token_reference.py with
``scheduler = "vllm"`` (one replica, the case's trace, drained) and its per-step log must
equal the recording exactly, step by step (T, d, the scheduled requests with their
tokens in vLLM's order, preemptions, admission hits, U, Q, n, K, evictions, free / cached
/ referenced blocks) and request by request (first-token and completion times,
preemptions, hits) -- floats bit for bit.  The other tests check the multi-replica
features in the mode (invariants with check=True) and hand-worked consequences of the
decisions of conformance/VLLM-MODE.md.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _p in (str(REPO), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import token_reference as tr  # noqa: E402
from registered import POLICIES  # noqa: E402

from conformance import compare_page, record  # noqa: E402


@pytest.fixture(scope="module")
def recording():
    return record.load()


@pytest.fixture(scope="module")
def async_recording():
    return record.load(record.RECORDED_ASYNC)


def test_recording_is_the_full_set(recording):
    h = recording["header"]
    assert h["vllm_version"] == "0.30.0"
    assert len(recording["cases"]) == len(recording["results"]) == 400
    assert sum(len(r["steps"]) for r in recording["results"]) == 119_915


@pytest.mark.slow
def test_every_recorded_case_is_identical_step_by_step(recording):
    """All 400 cases, every step and every request, exact equality."""
    bad, steps = _differences(recording)
    assert not bad, f"{len(bad)} cases differ from vLLM, e.g. {list(bad.items())[:3]}"
    assert steps == 119_915


def _differences(rec):
    """({case name: its first differences from vLLM}, steps compared) of the reference's
    vllm mode replaying every case of recording ``rec``."""
    bad = {}
    steps = 0
    for case, res in zip(rec["cases"], rec["results"]):
        log = compare_page.vllm_log(case)
        diffs = compare_page.vllm_differences(case, res, log)
        if diffs:
            bad[case["name"]] = diffs[:3]
        steps += len(log["steps"])
    return bad, steps


def test_every_timeout_case_is_identical_step_by_step():
    """The 100 cases with a timeout (conformance/cases.py make_timeout_case,
    conformance/recorded/vllm-0.30.0-timeouts.json.gz: vLLM's scheduler with requests
    aborted at arrival + timeout_ms as EngineCore.step processes aborts, EC:611-613):
    every step and request equal. With the cancelled attempts' blocks released after the
    step's completions (this page's order until 2026-12-05) case timeout-0035 differs
    from step 14 on (a block the free queue evicts)."""
    rec = record.load(record.RECORDED_TIMEOUTS)
    assert rec["header"]["command"] == "python -m conformance.record --timeouts"
    assert (len(rec["cases"]), rec["header"]["steps"]) == (100, 6_063)
    bad, steps = _differences(rec)
    assert not bad, f"{len(bad)} timeout cases differ from vLLM, e.g. {list(bad.items())[:3]}"
    assert steps == 6_063


def test_every_async_timeout_case_is_identical_step_by_step():
    """The same 100 cases under vLLM's default loop (python -m conformance.record
    --timeouts --async: an abort received while the engine waits for a batch is
    processed before that batch's output, EC:713-715; VLLM-MODE.md 31)."""
    rec = record.load(record.RECORDED_TIMEOUTS_ASYNC)
    assert rec["header"]["command"] == "python -m conformance.record --timeouts --async"
    assert all(c["replica"]["async_scheduling"] is True for c in rec["cases"])
    assert (len(rec["cases"]), rec["header"]["steps"]) == (100, 6_393)
    bad, _steps = _differences(rec)
    assert not bad, f"{len(bad)} timeout cases differ from vLLM's asynchronous loop, e.g. {list(bad.items())[:3]}"


def test_the_end_of_run_rules_hide_nothing_a_request_sees():
    """compare_page's two end-of-run rules (the reference stops at the last request's
    outcome): a trailing recorded step is skipped only if it schedules and preempts
    nothing, and a last step's block counts only if the reference never ended it. A
    trailing step that schedules, or any count of an ended step, still differs."""
    import copy
    rec = record.load(record.RECORDED_TIMEOUTS_ASYNC)
    k = next(i for i, (c, r) in enumerate(zip(rec["cases"], rec["results"]))
             if len(r["steps"]) > len(compare_page.vllm_log(c)["steps"]))
    case, res = rec["cases"][k], rec["results"][k]
    log = compare_page.vllm_log(case)
    assert not compare_page.vllm_differences(case, res, log)
    bad = copy.deepcopy(res)
    bad["steps"][-1]["sched"] = [[0, 1]]
    assert compare_page.vllm_differences(case, bad, log)
    bad = copy.deepcopy(res)
    bad["steps"][0]["free"] += 1
    assert compare_page.vllm_differences(case, bad, log)


def test_async_recording_is_the_full_set(async_recording):
    h = async_recording["header"]
    assert h["vllm_version"] == "0.30.0" and h["command"].endswith("--async")
    assert len(async_recording["cases"]) == len(async_recording["results"]) == 400
    assert all(c["replica"]["async_scheduling"] is True for c in async_recording["cases"])
    assert sum(len(r["steps"]) for r in async_recording["results"]) == 123_470


@pytest.mark.slow
def test_every_async_recorded_case_is_identical_step_by_step(async_recording):
    """vLLM's default loop (async_scheduling, VLLM-SCHEDULER.md §9): all 400 cases, every
    step (S included) and every request, exact equality."""
    bad, steps = _differences(async_recording)
    assert not bad, f"{len(bad)} cases differ from vLLM, e.g. {list(bad.items())[:3]}"
    assert steps == 123_470


@pytest.mark.slow
def test_async_invariants_on_recorded_cases(async_recording):
    """check=True in the asynchronous loop (in-flight and stale counts against the batch
    queue, placeholders, the hashed-block bounds) on every 10th case."""
    for case, res in list(zip(async_recording["cases"], async_recording["results"]))[5::10]:
        log = compare_page.vllm_log(case, check=True)
        assert not compare_page.vllm_differences(case, res, log)


@pytest.mark.slow
def test_invariants_on_recorded_cases(recording):
    """check=True (the free queue, refcounts, hashes, the unhashed-before-hashed order of
    §1.8) on every 10th case, both the first flavours and the others."""
    for case, res in list(zip(recording["cases"], recording["results"]))[::10]:
        log = compare_page.vllm_log(case, check=True)
        assert not compare_page.vllm_differences(case, res, log)


def test_the_comparison_can_fail(recording):
    """A one-ulp change of a duration, a swapped schedule order, a changed hit, a missing
    step: each is reported (the comparison is not vacuous)."""
    import copy
    k = next(i for i, r in enumerate(recording["results"])
             if any(len(s["sched"]) >= 2 for s in r["steps"]) and any(s["admitted"] and s["admitted"][0][1]
                                                                       for s in r["steps"]))
    case, res = recording["cases"][k], recording["results"][k]
    log = compare_page.vllm_log(case)
    assert not compare_page.vllm_differences(case, res, log)
    i = next(i for i, s in enumerate(res["steps"]) if len(s["sched"]) >= 2)
    j = next(i for i, s in enumerate(res["steps"]) if s["admitted"] and s["admitted"][0][1])
    for mutate in (lambda r: r["steps"][0].update(d=math.nextafter(r["steps"][0]["d"], math.inf)),
                   lambda r: r["steps"][i]["sched"].reverse(),
                   lambda r: r["steps"][j]["admitted"][0].__setitem__(1, r["steps"][j]["admitted"][0][1] - 1),
                   lambda r: r["steps"].pop(),
                   lambda r: r["steps"][-1].update(cached=r["steps"][-1]["cached"] + 1),
                   lambda r: r["requests"][0].update(preemptions=r["requests"][0]["preemptions"] + 1)):
        other = copy.deepcopy(res)
        mutate(other)
        assert compare_page.vllm_differences(case, other, log)


def test_the_async_comparison_can_fail(async_recording):
    """On the asynchronous recording: a batch scheduled one ulp later (S), a start (T) one
    ulp later, or the synchronous reading of the same case are each reported."""
    import copy
    k = next(i for i, r in enumerate(async_recording["results"]) if len(r["steps"]) > 3)
    case, res = async_recording["cases"][k], async_recording["results"][k]
    log = compare_page.vllm_log(case)
    assert not compare_page.vllm_differences(case, res, log)
    for field in ("S", "T"):
        other = copy.deepcopy(res)
        other["steps"][2][field] = math.nextafter(other["steps"][2][field], math.inf)
        assert compare_page.vllm_differences(case, other, log)
    sync_case = copy.deepcopy(case)
    sync_case["replica"]["async_scheduling"] = False
    sync_log = compare_page.vllm_log(sync_case)
    for step in sync_log["steps"]:
        step["S"] = step["T"]
    assert compare_page.vllm_differences(case, res, sync_log)


# ------------------------------------------------------------------------------------
# parameters
# ------------------------------------------------------------------------------------

def one(rows, **kw):
    """A one-replica run: rows (t, P, O, ids)."""
    wl = tr.Workload(t=[float(r[0]) for r in rows], prompt=[r[1] for r in rows],
                     output=[r[2] for r in rows], key=[0.5] * len(rows), blocks=[list(r[3]) for r in rows])
    p = tr.defaults()
    p.update(warmup_s=0.0, measure_s=0.1, drain_s=10.0, block_tokens=16, kv_blocks=8, scheduler="vllm")
    events = kw.pop("events", [])
    p.update(kw)
    return tr.simulate(wl, p, [1.0], events, "round_robin", 1, check=True, _return_sim=True)


def test_defaults_and_refusals():
    p = tr.defaults()
    assert p["scheduler"] == "reserve" and p["prefix_caching"] is True
    assert p["async_scheduling"] is False
    rows = [(0.0, 32, 2, [1, 2])]
    with pytest.raises(ValueError, match="async_scheduling = true needs scheduler = 'vllm'"):
        one(rows, scheduler="reserve", async_scheduling=True)
    with pytest.raises(ValueError, match="async_scheduling must be true or false"):
        one(rows, async_scheduling=1)
    with pytest.raises(ValueError, match="prefix_caching"):
        one(rows, scheduler="reserve", prefix_caching=False)
    with pytest.raises(ValueError, match="scheduler"):
        one(rows, scheduler="vLLM")
    with pytest.raises(ValueError, match="max_batched_tokens >= max_batch"):
        one(rows, max_batched_tokens=8, max_batch=16)
    with pytest.raises(ValueError, match="request 0"):
        one(rows, chunked_prefill=False, max_batched_tokens=33, max_batch=8)
    one(rows, chunked_prefill=False, max_batched_tokens=34, max_batch=8)


C0, CPF, CAT, CDEC, CKV = 6.5, 0.0198, 8.4e-7, 0.10, 5.4e-5


def step(U=0, Q=0.0, n=0, K=0):
    return 1.0 * ((((C0 + CPF * U) + CAT * Q) + CDEC * n) + CKV * K)


def test_cancellation_mid_step_frees_at_the_step_end():
    """VLLM-MODE.md 18: a timeout during a step fails the attempt at its deadline, but its blocks
    stay referenced until the step ends, then go back as vLLM frees them (tail first: the
    unhashed block to the front of the queue, the hashed ones to the back)."""
    d1 = step(U=32, Q=32 * (0 + 16))                 # prefill of 32 tokens: 2 blocks
    d2 = step(n=1, K=33)                             # decode: token 33 needs a third block
    assert d1 < 10.0 < d1 + d2
    out = one([(0.0, 32, 10, [1, 2])], timeout_ms=10.0)
    assert out["failed"] == 1 and out["wasted_tokens"] == 1
    rep = out["_sim"].replicas[0]
    assert list(rep.fq) == [2, 3, 4, 5, 6, 7, 1, 0]
    assert [rep.vblocks[i].hash for i in rep.fq] == [None] * 6 + [2, 1]
    # kv_occupancy: 2 blocks during the first step, 3 until the second step ENDS
    assert out["kv_occupancy"] == pytest.approx((2 * d1 + 3 * d2) / 100.0 / 8, rel=1e-12)


def async_log(rows, **kw):
    """A one-replica asynchronous run with the step log: (log, result)."""
    wl = tr.Workload(t=[float(r[0]) for r in rows], prompt=[r[1] for r in rows],
                     output=[r[2] for r in rows], key=[0.5] * len(rows), blocks=[list(r[3]) for r in rows])
    p = tr.defaults()
    p.update(warmup_s=0.0, measure_s=0.1, drain_s=10.0, block_tokens=16, kv_blocks=8, scheduler="vllm",
             async_scheduling=True)
    p.update(kw)
    out = tr.simulate(wl, p, [1.0], [], "round_robin", 1, check=True, log_steps=True, _return_sim=True)
    return out["step_log"], out


def test_async_a_lone_request_keeps_its_times():
    """VLLM-SCHEDULER.md §9: alone, a request gets the same times in both loops -- the
    placeholder lets its next decode be queued behind the running batch, so the GPU never
    waits.  Prefill of 32 tokens, then decodes with 33 and 34 tokens of KV."""
    d0, d1, d2 = step(U=32, Q=32 * 16.0), step(n=1, K=33), step(n=1, K=34)
    log, out = async_log([(0.0, 32, 3, [1, 2])])
    req = log["requests"][0]
    assert req["first_token_ms"] == d0 and req["completion_ms"] == (d0 + d1) + d2
    sync = one([(0.0, 32, 3, [1, 2])])["_sim"].requests[0]
    assert (sync.first_token, sync.completion) == (req["first_token_ms"], req["completion_ms"])
    # batches 0 and 1 are scheduled together at 0; batch 2 when batch 0's output is back;
    # batch 3 (empty: the last token is in flight, S:617-629) when batch 1's is; batch 4
    # (empty) after the completion (has_requests(): a request finished since the last one)
    assert [(s["S"], s["T"], s["sched"]) for s in log["steps"]] == [
        (0.0, 0.0, [[0, 32]]), (0.0, d0, [[0, 1]]), (d0, d0 + d1, [[0, 1]]),
        (d0 + d1, (d0 + d1) + d2, []), ((d0 + d1) + d2, (d0 + d1) + d2, [])]


def test_async_an_arrival_during_a_batch_starts_one_batch_later():
    """VLLM-SCHEDULER.md §9: B arrives while A's prefill runs.  Synchronously B is admitted
    when that step ends; asynchronously the engine has already queued A's first decode
    (batch 1), so B is admitted at the end of batch 0 into batch 2, which starts when
    batch 1 ends: B's first token comes one decode step later."""
    rows = [(0.0, 32, 3, [1, 2]), (1.0, 16, 1, [3])]
    d0 = step(U=32, Q=32 * 16.0)
    d1 = step(n=1, K=33)
    d2 = step(U=16, Q=16 * 8.0, n=1, K=34)
    log, out = async_log(rows)
    assert [(s["S"], s["T"], s["sched"], s["admitted"]) for s in log["steps"][:3]] == [
        (0.0, 0.0, [[0, 32]], [[0, 0]]), (0.0, d0, [[0, 1]], []),
        (d0, d0 + d1, [[0, 1], [1, 16]], [[1, 0]])]
    end = (d0 + d1) + d2
    assert [(r["first_token_ms"], r["completion_ms"]) for r in log["requests"]] == [(d0, end), (end, end)]
    sync = one(rows)["_sim"].requests[1]
    assert sync.first_token == d0 + step(U=16, Q=16 * 8.0, n=1, K=33) < end


def test_async_abort_while_the_engine_waits():
    """VLLM-MODE.md 31: an attempt cancelled while the engine waits for a batch keeps its
    blocks until that batch's output arrives, and is released BEFORE that output is
    processed (EC:713-715: _process_aborts_queue, then update_from_output).
    B (16 tokens, 2 out) and A (64 tokens, chunked by a budget of 48) are admitted in
    batch 0 at 0; batch 1 (S = 0) has B's decode and A's last chunk; batch 2 (S = end of
    batch 0) A's first decode, which takes a fifth block.  A's first-token deadline (10 ms)
    passes while the engine waits for batch 1; at its end A is released, then B completes:
    A's unhashed tail block goes to the front, then B's; the hashed blocks to the back,
    A's (tail first) before B's."""
    d0 = step(U=48, Q=16 * 8.0 + 32 * 16.0)
    d1 = step(U=32, Q=32 * 48.0, n=1, K=17)
    assert d0 < 10.0 < d0 + d1
    rows = [(0.0, 16, 2, [3]), (0.0, 64, 2, [4, 5, 6, 7])]
    out = one(rows, async_scheduling=True, kv_blocks=10, max_batched_tokens=48, max_batch=2,
              ttft_timeout_ms=10.0)
    assert out["failed"] == 1 and out["completed"] == 1
    sim = out["_sim"]
    assert sim.requests[0].completion == d0 + d1
    rep = sim.replicas[0]
    # blocks: B0 = 0, A0 = 1, A1 = 2 (batch 0); B1 = 3, A2 = 4, A3 = 5 (batch 1); A4 = 6
    assert list(rep.fq) == [3, 6, 7, 8, 9, 5, 4, 2, 1, 0]
    # kv_occupancy: 6 blocks from 0 (batches 0 and 1 are both scheduled then), 7 from the
    # end of batch 0 (batch 2 scheduled) until the end of batch 1, none after
    assert out["kv_occupancy"] == pytest.approx((6 * d0 + 7 * d1) / 100.0 / 10, rel=1e-12)


def test_async_a_crash_drops_the_batches_in_flight():
    """VLLM-MODE.md 32: a crash abandons both batches (nothing delivered after it) and the
    recovered replica starts an idle engine on an empty cache."""
    d0 = step(U=32, Q=32 * 16.0)
    rows = [(0.0, 32, 5, [1, 2]), (50.0, 32, 2, [1, 2])]
    out = one(rows, async_scheduling=True, events=[(d0 + 1.0, "fail", 0, 0.0), (20.0, "recover", 0, 0.0)])
    sim = out["_sim"]
    assert out["failed"] == 1 and out["completed"] == 1 and out["prefix_hit_rate"] == 0.0
    a = sim.requests[0].last_attempt
    assert a.token_times == [d0]
    assert sim.requests[1].first_token == 50.0 + d0


def test_a_crash_empties_the_cache_and_a_request_hits_its_predecessor_otherwise():
    rows = [(0.0, 32, 2, [1, 2]), (70.0, 32, 2, [1, 2])]
    out = one(rows)
    assert out["prefix_hit_rate"] == 16 / 64                # capped: floor(31/16) = 1 block
    out = one(rows, events=[(50.0, "fail", 0, 0.0), (60.0, "recover", 0, 0.0)])
    assert out["prefix_hit_rate"] == 0.0 and out["completed"] == 2


def test_prefix_caching_off_never_hits():
    rows = [(0.0, 32, 2, [1, 2]), (70.0, 32, 2, [1, 2])]
    out = one(rows, prefix_caching=False)
    # no lookup, so vLLM records no query (KVCacheManager.record_prefix_cache_stats): the
    # rate of an empty set is NaN, with both requests admitted and completed
    assert math.isnan(out["prefix_hit_rate"]) and out["completed"] == 2
    assert not out["_sim"].replicas[0].resident


def test_router_sees_the_cached_hashes():
    """least_cost and prefix_affinity read the hashes cached on a replica (its resident ids
    as vLLM has them): a request sharing a prefix follows it."""
    p = tr.defaults()
    p.update(warmup_s=0.0, measure_s=0.2, drain_s=10.0, block_tokens=16, kv_blocks=64, scheduler="vllm")
    ids = list(range(10, 18))
    wl = tr.Workload(t=[0.0, 0.0, 100.0], prompt=[128, 128, 128], output=[2, 2, 2], key=[0.1, 0.6, 0.3],
                     blocks=[ids, [2**40 + j for j in range(8)], ids])
    for policy in ("least_cost", "prefix_affinity"):
        out = tr.simulate(wl, p, [1.0, 1.0], [], policy, 1, check=True, _return_sim=True)
        place = {e[2]: e[3] for e in out["_sim"].trace if e[1] == "route"}
        assert place[2] == place[0] != place[1]
        assert out["prefix_hit_rate"] == 112 / 384


# ------------------------------------------------------------------------------------
# multi-replica features in vllm mode: invariants (check=True)
# ------------------------------------------------------------------------------------

SMALL = dict(warmup_s=0.5, measure_s=1.5, kv_blocks=160, max_batch=6, waiting_cap=8,
             max_batched_tokens=1024, p_long=0.0, chat_prompt_median=300, chat_prompt_max=1200,
             chat_output_median=20, chat_output_max=200, prefix_tokens=256, prefix_groups=4,
             context_limit=2048, scheduler="vllm")
STAGE2 = dict(max_attempts=3, timeout_ms=400.0, breaker_consecutive=2, breaker_eject_ms=100.0,
              breaker_max_ejected_fraction=0.5, retry_budget=0.2, admission_max_tokens=3000.0,
              admission_mode="queue", routers=2, slow_start_ms=300.0, cold_factor=2.0,
              ready_delay_ms=30.0, start_down=[2], ttft_timeout_ms=250.0)
EVENTS2 = [(200.0, "fail_fast", 0, 0.0), (300.0, "recover", 2, 0.0), (500.0, "fail", 1, 0.0),
           (700.0, "recover", 0, 0.0), (900.0, "recover", 1, 0.0), (1000.0, "slowdown", 2, 3.0),
           (1200.0, "rate_multiplier", -1, 2.0)]


def outcome_identity(out):
    return out["arrivals"] == sum(out[k] for k in ("completed", "failed", "rejected", "shed", "unfinished"))


@pytest.mark.slow
@pytest.mark.parametrize("asyn", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("policy", POLICIES)
def test_invariants_small_clusters(policy, asyn):
    p = tr.defaults()
    p.update(SMALL, async_scheduling=asyn)
    wl = tr.generate_workload(2, 60.0, p, [])
    out = tr.simulate(wl, p, [1.0, 1.5, 0.8], [], policy, 3, check=True)
    assert outcome_identity(out) and out["completed"] > 0
    assert out["prefix_hit_rate"] > 0


MODE = {"round_robin": ("periodic", True), "least_tokens": ("fresh", False),
        "power_of_d": ("periodic_local", True), "prefix_affinity": ("periodic_local", True),
        "rate_weighted": ("periodic", False)}
"""The signal mode and prefix caching of each policy's failure case (fresh and caching
unless named here)."""


@pytest.mark.slow
@pytest.mark.parametrize("policy, mode, caching", [(name, *MODE.get(name, ("fresh", True))) for name in POLICIES])
@pytest.mark.parametrize("asyn", [False, True], ids=["sync", "async"])
def test_invariants_with_failures(policy, mode, caching, asyn):
    p = tr.defaults()
    p.update(SMALL)
    p.update(STAGE2, signal_mode=mode, prefix_caching=caching, kv_blocks=100, async_scheduling=asyn)
    wl = tr.generate_workload(2, 60.0, p, EVENTS2)
    out = tr.simulate(wl, p, [1.0, 1.5, 0.8], EVENTS2, policy, 3, check=True)
    assert outcome_identity(out) and out["failed"] + out["completed"] > 0
    assert out["stop"] >= tr.horizon_ms(p)[1]


try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:   # pragma: no cover
    given = None

if given is not None:
    @pytest.mark.slow
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(seed=st.integers(0, 10_000), n_rep=st.integers(1, 3), b=st.sampled_from([1, 4, 16]),
           chunked=st.booleans(), max_batch=st.integers(1, 5), cap=st.integers(1, 6),
           policy=st.sampled_from(POLICIES),
           mode=st.sampled_from(["fresh", "periodic", "periodic_local"]),
           routers=st.integers(1, 2), max_attempts=st.integers(1, 3),
           timeout=st.sampled_from([math.inf, 60.0, 150.0]), consecutive=st.integers(0, 2),
           events=st.lists(st.tuples(st.floats(0, 900), st.sampled_from(["fail", "fail_fast", "recover",
                                                                          "slowdown"]),
                                     st.integers(0, 2), st.sampled_from([0.5, 2.0])), max_size=5),
           drain=st.sampled_from([0.0, 0.2, 600.0]), ttft=st.sampled_from([math.inf, 30.0, 90.0]),
           caching=st.booleans(), budget=st.sampled_from([5, 40, 300]), spare=st.integers(0, 6),
           asyn=st.booleans())
    def test_property_invariants_with_failures(seed, n_rep, b, chunked, max_batch, cap, policy, mode,
                                               routers, max_attempts, timeout, consecutive, events,
                                               drain, ttft, caching, budget, spare, asyn):
        if not chunked:
            budget = 262                     # vLLM: unchunked needs P + O <= the budget
        p = tr.defaults()
        p.update(warmup_s=0.1, measure_s=0.4, p_long=0.0, chat_prompt_median=30, chat_prompt_min=1,
                 chat_prompt_max=200, chat_output_median=20, chat_output_max=30, prefix_tokens=32,
                 prefix_groups=3, context_limit=400, block_tokens=b, chunked_prefill=chunked,
                 max_batched_tokens=budget, max_batch=max_batch, waiting_cap=cap, signal_mode=mode,
                 period_ms=20.0, routers=routers, max_attempts=max_attempts, timeout_ms=timeout,
                 breaker_consecutive=consecutive, breaker_eject_ms=30.0, min_retry_concurrency=1,
                 cold_factor=2.0, ready_delay_ms=10.0, drain_s=drain, ttft_timeout_ms=ttft,
                 scheduler="vllm", prefix_caching=caching, async_scheduling=asyn)
        p["kv_blocks"] = -(-(32 + 200 + 30) // b) + spare
        evs = sorted([(float(t), k, i % n_rep, v) for t, k, i, v in events], key=lambda e: e[0])
        wl = tr.generate_workload(seed, 80.0, p, evs)
        out = tr.simulate(wl, p, [1.0 + 0.5 * i for i in range(n_rep)], evs, policy, seed, check=True)
        assert outcome_identity(out)
        H = 500.0
        assert H <= out["stop"] <= H + drain * 1000.0
        assert (out["unfinished"] == 0) or out["stop"] == H + drain * 1000.0
        assert 0 <= out["kv_occupancy"] <= 1


@pytest.mark.skipif(not record.venv_python().exists(),
                    reason="no vLLM environment (tools/vllm-env, or VLLM_VENV) to run vLLM live")
def test_live_vllm_agrees_with_the_reference():
    """When vLLM itself is here, run it live on fresh cases (another seed than the
    recording's) and hold the reference to them too."""
    import copy
    from conformance import cases as case_gen
    fresh = [case_gen.make_case(7, i) for i in range(16)]
    # vLLM's default loop on the same cases, and on case 95, where (as in case 10) a
    # preempted request's stale last token finishes it while it waits (S:1947-1956)
    for case in fresh[:] + [case_gen.make_case(7, 95)]:
        other = copy.deepcopy(case)
        other["replica"]["async_scheduling"] = True
        fresh.append(other)
    results = record.run_driver(fresh)["results"]
    for case, res in zip(fresh, results):
        assert not compare_page.vllm_differences(case, res, compare_page.vllm_log(case)), case["name"]
