"""The reference's scheduler = "vllm" mode against vLLM 0.30.0's own scheduler (issue 22).

The expectations are vLLM's: conformance/recorded/vllm-0.30.0.json.gz holds what vLLM's
real V1 ``Scheduler`` did on 400 random cases (119,915 steps; conformance/record.py,
VLLM-SCHEDULER.md §3).  Each case is replayed through tests/token_reference.py with
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

from conformance import compare_page, record  # noqa: E402


@pytest.fixture(scope="module")
def recording():
    return record.load()


def test_recording_is_the_full_set(recording):
    h = recording["header"]
    assert h["vllm_version"] == "0.30.0"
    assert len(recording["cases"]) == len(recording["results"]) == 400
    assert sum(len(r["steps"]) for r in recording["results"]) == 119_915


def test_every_recorded_case_is_identical_step_by_step(recording):
    """All 400 cases, every step and every request, exact equality."""
    bad = {}
    steps = 0
    for case, res in zip(recording["cases"], recording["results"]):
        log = compare_page.vllm_log(case)
        diffs = compare_page.vllm_differences(case, res, log)
        if diffs:
            bad[case["name"]] = diffs[:3]
        steps += len(log["steps"])
    assert not bad, f"{len(bad)} cases differ from vLLM, e.g. {list(bad.items())[:3]}"
    assert steps == 119_915


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
    rows = [(0.0, 32, 2, [1, 2])]
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


def test_a_crash_empties_the_cache_and_a_request_hits_its_predecessor_otherwise():
    rows = [(0.0, 32, 2, [1, 2]), (70.0, 32, 2, [1, 2])]
    out = one(rows)
    assert out["prefix_hit_rate"] == 16 / 64                # capped: floor(31/16) = 1 block
    out = one(rows, events=[(50.0, "fail", 0, 0.0), (60.0, "recover", 0, 0.0)])
    assert out["prefix_hit_rate"] == 0.0 and out["completed"] == 2


def test_prefix_caching_off_never_hits():
    rows = [(0.0, 32, 2, [1, 2]), (70.0, 32, 2, [1, 2])]
    out = one(rows, prefix_caching=False)
    assert out["prefix_hit_rate"] == 0.0
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


@pytest.mark.parametrize("policy", ["round_robin", "random", "least_requests", "least_tokens",
                                    "least_kv", "least_cost", "power_of_d", "prefix_affinity",
                                    "rate_weighted"])
def test_invariants_small_clusters(policy):
    p = tr.defaults()
    p.update(SMALL)
    wl = tr.generate_workload(2, 60.0, p, [])
    out = tr.simulate(wl, p, [1.0, 1.5, 0.8], [], policy, 3, check=True)
    assert outcome_identity(out) and out["completed"] > 0
    assert out["prefix_hit_rate"] > 0


@pytest.mark.parametrize("policy, mode, caching", [("round_robin", "periodic", True),
                                                   ("least_tokens", "fresh", False),
                                                   ("least_cost", "fresh", True),
                                                   ("power_of_d", "periodic_local", True),
                                                   ("prefix_affinity", "periodic_local", True),
                                                   ("rate_weighted", "periodic", False)])
def test_invariants_with_failures(policy, mode, caching):
    p = tr.defaults()
    p.update(SMALL)
    p.update(STAGE2, signal_mode=mode, prefix_caching=caching, kv_blocks=100)
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
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(seed=st.integers(0, 10_000), n_rep=st.integers(1, 3), b=st.sampled_from([1, 4, 16]),
           chunked=st.booleans(), max_batch=st.integers(1, 5), cap=st.integers(1, 6),
           policy=st.sampled_from(["round_robin", "random", "least_requests", "least_cost",
                                   "power_of_d", "prefix_affinity", "rate_weighted"]),
           mode=st.sampled_from(["fresh", "periodic", "periodic_local"]),
           routers=st.integers(1, 2), max_attempts=st.integers(1, 3),
           timeout=st.sampled_from([math.inf, 60.0, 150.0]), consecutive=st.integers(0, 2),
           events=st.lists(st.tuples(st.floats(0, 900), st.sampled_from(["fail", "fail_fast", "recover",
                                                                          "slowdown"]),
                                     st.integers(0, 2), st.sampled_from([0.5, 2.0])), max_size=5),
           drain=st.sampled_from([0.0, 0.2, 600.0]), ttft=st.sampled_from([math.inf, 30.0, 90.0]),
           caching=st.booleans(), budget=st.sampled_from([5, 40, 300]), spare=st.integers(0, 6))
    def test_property_invariants_with_failures(seed, n_rep, b, chunked, max_batch, cap, policy, mode,
                                               routers, max_attempts, timeout, consecutive, events,
                                               drain, ttft, caching, budget, spare):
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
                 scheduler="vllm", prefix_caching=caching)
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
    from conformance import cases as case_gen
    fresh = [case_gen.make_case(7, i) for i in range(16)]
    results = record.run_driver(fresh)["results"]
    for case, res in zip(fresh, results):
        assert not compare_page.vllm_differences(case, res, compare_page.vllm_log(case)), case["name"]
