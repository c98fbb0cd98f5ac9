"""Prefill/decode disaggregation in the compiled engine against the reference
(tests/token_reference.py ``_Sim.pd_*``, the specification), run by run (issue 42;
docs/model.md "Prefill/decode disaggregation").

Every case declares pools (2 prefill and 3 decode replicas unless said otherwise) and is
compared as test_token_engine_vs_reference compares the co-located cases — counts
exactly, floats within 1e-9 relative, per-replica vectors element by element — and on
the disaggregation's own metrics: the TTFT's four parts, the transfers (count, bytes),
each replica's link utilisation and the selective rule's share of pairs. The cases
cover the three pair rules, every policy (for the independent rule; the others with a
sample), different policies for the two pools, chunked and unchunked prefill, a KV
pool small enough that decode-side allocations wait for blocks, a slow link that
transfers queue on, stale signals (periodic and periodic_local with several routers),
heterogeneous replicas and a slowdown; failures (docs/model.md "Failures: every request
in exactly one outcome"): crashes of a prefill and of a decode replica (before the
prefill ends, mid-transfer, while decoding), first-token deadlines and timeouts on
either side, the lease, retries as new pairs, the breaker, with each pair rule; and a
hypothesis property test on random small disaggregated clusters (test_token_pipeline's,
with pools, crashes and deadlines); each pool its own replica settings (a small decode
pool, a prefill pool of the roofline cost, different budgets, chunking, waiting caps and
CPU times per pool, the overlap form and the KV score on unequal pools). Hand-worked runs
of one request, whose prefill or decode replica crashes mid-transfer, and one whose pools
have different linear step costs and KV pools, hold both implementations to values
derived from the page. The closed-loop client, the front door (reject and queue), the
engine loop's ingress (on both sides) and black holes (of either pool) with pools: cases
of their own (several combined), in the hypothesis test too, each with a hand-worked run.
"""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import test_token_engine_vs_reference as tv
import test_token_pipeline as tp
import token_reference as ref
from registered import POLICIES
from routesim.batching import runs as br
from routesim.batching.workload import TokenWorkload, generate, segments_from_ids

PD = dict(tv.SHORT, prefill_replicas=2, decode_replicas=3, link_bandwidth_gb_s=0.5, kv_bytes_per_token=2000,
          prefix_groups=4)
"""Two prefill and three decode replicas; a 0.5 GB/s link and 2,000 KV bytes a token:
a 300-token prompt takes 1 + 1.2 ms alone, so transfers overlap at these rates."""
FACTORS = [1.0, 1.5, 1.0, 1.0, 2.0]

# name: (parameter overrides, rate req/s, time factors, events)
CASES = {
    "pd-independent": (dict(PD), 12.0, FACTORS, []),
    "pd-selective": (dict(PD, pair_route="selective", threshold_tokens=200), 12.0, FACTORS, []),
    "pd-transfer-aware": (dict(PD, pair_route="transfer_aware"), 12.0, FACTORS, []),
    # decode-side allocations wait for blocks; a slow link (0.05 GB/s: 12 ms for 300 tokens)
    "pd-tight": (dict(PD, kv_blocks=500, max_batch=8, link_bandwidth_gb_s=0.05, link_latency_ms=2.0), 16.0,
                 FACTORS, []),
    "pd-unchunked": (dict(PD, chunked_prefill=False, max_batched_tokens=4096, prefix_probability=0.0), 12.0,
                     FACTORS, [(1500.0, "slowdown", 3, 2.0), (3000.0, "slowdown", 3, 1.0)]),
    "pd-pool-policies": (dict(PD, prefill_policy="least_tokens", decode_policy="least_kv", pair_route="selective",
                              threshold_tokens=120), 12.0, FACTORS, []),
    "pd-periodic-local": (dict(PD, signal_mode="periodic_local", period_ms=50.0, routers=2,
                               pair_route="transfer_aware"), 14.0, FACTORS, []),
    "pd-periodic-1-3": (dict(PD, prefill_replicas=1, signal_mode="periodic", period_ms=20.0), 10.0,
                        [1.0, 1.0, 1.0, 1.0], []),
}
FAIL = dict(PD, max_attempts=3, backoff_ms=10.0, lease_ms=80.0, link_bandwidth_gb_s=0.02, link_latency_ms=2.0)
"""Failures: three attempts, a 10 ms backoff, an 80 ms lease and a slow link (0.02 GB/s:
a 300-token prompt's 600,000 bytes take 2 + 30 ms alone), so that crashes often find
transfers in progress."""

# crashes and deadlines with pools, each pair rule (replicas 0 and 1 prefill, 2-4 decode)
FAIL_CASES = {
    "pd-crash-prefill": (dict(FAIL), 12.0, FACTORS,
                         [(1800.0, "fail", 0, 0.0), (2300.0, "recover", 0, 0.0), (3000.0, "fail", 1, 0.0),
                          (3400.0, "recover", 1, 0.0)]),
    "pd-crash-decode": (dict(FAIL, pair_route="selective", threshold_tokens=200), 12.0, FACTORS,
                        [(1800.0, "fail", 2, 0.0), (2400.0, "recover", 2, 0.0), (3000.0, "fail", 4, 0.0),
                         (3500.0, "recover", 4, 0.0)]),
    "pd-deadlines": (dict(FAIL, pair_route="transfer_aware", ttft_timeout_ms=150.0, timeout_ms=2000.0,
                          kv_blocks=500, max_batch=8, link_bandwidth_gb_s=0.05), 16.0, FACTORS, []),
    "pd-crashes-deadlines-breaker": (dict(FAIL, breaker_consecutive=2, breaker_eject_ms=200.0, ttft_timeout_ms=150.0,
                                          kv_blocks=500, max_batch=8, link_bandwidth_gb_s=0.1), 12.0, FACTORS,
                                     [(2000.0, "fail", 0, 0.0), (2200.0, "fail", 3, 0.0), (2600.0, "recover", 0, 0.0),
                                      (2900.0, "recover", 3, 0.0)]),
}
CASES.update(FAIL_CASES)
# each pool its own replica settings (docs/model.md "Each pool's GPUs"): replicas 0-1 prefill, 2-4 decode
POOL_CASES = {
    # a decode pool of small KV (every request fits: prefix 1,536 + 2,000 + 400 tokens = 246 blocks) and
    # batches, behind a slow link: allocations wait for blocks, sequences are preempted
    "pd-small-decode-pool": (dict(PD, p_long=0.0, chat_prompt_max=2000, chat_output_max=400, decode_kv_blocks=300,
                                  decode_max_batch=8, link_bandwidth_gb_s=0.1, decode_step_ms_per_kv_token=2e-4),
                             6.0, FACTORS, []),
    # a prefill pool of another form (the roofline, its own coefficients) beside a linear decode pool of its own
    "pd-prefill-roofline": (dict(PD, prefill_step_cost="roofline", prefill_roofline_ms_base=2.0,
                                 prefill_roofline_ms_per_token=0.01, prefill_roofline_ms_weights=3.0,
                                 decode_step_ms_base=4.0, decode_step_ms_per_decode_sequence=0.3), 14.0, FACTORS, []),
    # different token budgets, chunking, waiting caps and engine-loop CPU time per pool
    "pd-budgets": (dict(PD, prefill_max_batched_tokens=192, prefill_step_cpu_ms=0.4, decode_max_batched_tokens=48,
                        decode_chunked_prefill=False, decode_waiting_cap=3, decode_step_cpu_ms_per_seq=0.02,
                        pair_route="selective", threshold_tokens=150), 14.0, FACTORS, []),
    # the decode pool of the overlap form, the transfer-aware rule, the KV score on pools of unequal size
    "pd-overlap-kv-score": (dict(PD, decode_step_cost="overlap", decode_kv_blocks=900, prefill_kv_blocks=3000,
                                 pair_route="transfer_aware", score="kv"), 12.0, FACTORS, []),
}
CASES.update(POOL_CASES)
# the closed-loop client with pools (docs/model.md "Prefill/decode disaggregation": a
# request holds one slot from its send to its final outcome, whichever pairs served it)
LOOP_CASES = {
    "pd-closed-loop": (dict(PD, max_in_flight=4, client_overhead_ms=6.0), 16.0, FACTORS, []),
    "pd-closed-loop-selective": (dict(PD, max_in_flight=5, pair_route="selective", threshold_tokens=200,
                                      kv_blocks=500, max_batch=8, link_bandwidth_gb_s=0.05), 16.0, FACTORS, []),
    "pd-closed-loop-crashes": (dict(FAIL, max_in_flight=6, pair_route="transfer_aware", ttft_timeout_ms=150.0,
                                    drain_s=0.0), 14.0, FACTORS,
                               [(1800.0, "fail", 0, 0.0), (2300.0, "recover", 0, 0.0), (3000.0, "fail", 3, 0.0),
                                (3400.0, "recover", 3, 0.0)]),
}
CASES.update(LOOP_CASES)
# the front door with pools: a new request is stopped when every eligible replica of both
# pools holds more than max_tokens (as seen); rejected, or held in its router's FIFO
DOOR_CASES = {
    "pd-front-door-reject": (dict(PD, admission_max_tokens=3000.0, admission_mode="reject", max_batch=4), 30.0,
                             FACTORS, []),
    "pd-front-door-queue": (dict(PD, admission_max_tokens=1500.0, admission_mode="queue", timeout_ms=600.0,
                                 max_attempts=2, max_batch=6, pair_route="selective", threshold_tokens=200), 24.0,
                            FACTORS, []),
    "pd-front-door-queue-loop": (dict(FAIL, admission_max_tokens=1200.0, admission_mode="queue", ttft_timeout_ms=400.0,
                                      max_in_flight=10, max_batch=4, pair_route="transfer_aware", kv_blocks=500),
                                 30.0, FACTORS, [(1800.0, "fail", 0, 0.0), (2300.0, "recover", 0, 0.0)]),
}
CASES.update(DOOR_CASES)
# the engine loop's ingress with pools: on the replica the attempt is routed to (the
# prefill replica, or the decode replica serving it whole), and again on the decode
# replica at the hand-off (vLLM's proxy sends the request to the decode instance)
INGRESS_CASES = {
    "pd-ingress": (dict(PD, ingress_ms=0.5, ingress_ms_per_token=0.002), 12.0, FACTORS, []),
    "pd-ingress-selective-tight": (dict(PD, ingress_ms=1.0, ingress_ms_per_token=0.01, pair_route="selective",
                                        threshold_tokens=200, kv_blocks=500, max_batch=8, waiting_cap=6,
                                        link_bandwidth_gb_s=0.05), 16.0, FACTORS, []),
    "pd-ingress-crashes": (dict(FAIL, ingress_ms=2.0, ingress_ms_per_token=0.05, ttft_timeout_ms=150.0,
                                max_in_flight=8), 12.0, FACTORS,
                           [(1800.0, "fail", 0, 0.0), (2300.0, "recover", 0, 0.0), (3000.0, "fail", 3, 0.0),
                            (3400.0, "recover", 3, 0.0)]),
}
CASES.update(INGRESS_CASES)
# fast failures with pools: a black-holed prefill replica fails the attempts routed to it,
# a black-holed decode replica the hand-offs (and the selective rule's whole placements)
# that reach it, each fail_fast_ms later
BLACK_HOLE_CASES = {
    "pd-black-hole-prefill": (dict(FAIL, breaker_consecutive=2, breaker_eject_ms=200.0), 12.0, FACTORS,
                              [(1800.0, "fail_fast", 0, 0.0), (2400.0, "recover", 0, 0.0)]),
    "pd-black-hole-decode": (dict(FAIL, pair_route="selective", threshold_tokens=200, ttft_timeout_ms=150.0), 12.0,
                             FACTORS, [(1800.0, "fail_fast", 3, 0.0), (2500.0, "recover", 3, 0.0),
                                       (3000.0, "fail_fast", 2, 0.0), (3100.0, "fail", 2, 0.0),
                                       (3300.0, "recover", 2, 0.0)]),
    "pd-black-hole-everything": (dict(FAIL, pair_route="transfer_aware", max_in_flight=8, client_overhead_ms=5.0,
                                      admission_max_tokens=2500.0, admission_mode="queue", ingress_ms=1.0,
                                      ingress_ms_per_token=0.01, breaker_consecutive=3, breaker_eject_ms=150.0),
                                 14.0, FACTORS, [(1500.0, "fail_fast", 4, 0.0), (2200.0, "recover", 4, 0.0),
                                                 (2600.0, "fail_fast", 1, 0.0), (3000.0, "recover", 1, 0.0)]),
}
CASES.update(BLACK_HOLE_CASES)
PD_FLOATS = ("ttft_prefill_queue_p50", "ttft_prefill_queue_p99", "ttft_prefill_p50", "ttft_prefill_p99",
             "ttft_transfer_p50", "ttft_transfer_p99", "ttft_decode_queue_p50", "ttft_decode_queue_p99",
             "transfer_bytes", "disaggregated_share")
CLIENT_FLOATS = ("client_wait_p50", "client_wait_p99", "client_wait_mean")


def _compare(case, policy, seed):
    """The engine and the reference on one case, policy and seed: every difference
    listed; returns the reference's results."""
    wl, values, factors, events = tv._case(case, seed, CASES)   # (never added to tv.CASES: its tests read them all)
    got, rep = tv._engine(wl, values, factors, events, policy, seed)
    want = ref.simulate(tv._reference_workload(wl), values, factors, events, policy, seed, check=False)
    bad = _differences(got, rep, want, values["max_in_flight"] > 0)
    assert not bad, f"{case} {policy} seed {seed}:\n" + "\n".join(bad)
    return want


def _differences(got, rep, want, closed):
    """Every metric on which the engine's run (``got`` METRICS, ``rep`` its REPLICA
    records) and the reference's (``want``) differ; the client's too when ``closed`` (a
    closed loop: the engine computes them only then)."""
    bad = []
    client = ("client_waiting",) if closed else ()
    for name in (*tv.COUNTS, "transfer_count", *client):
        if int(got[name]) != want[name]:
            bad.append(f"{name}: engine {got[name]} reference {want[name]}")
    for name in (*tv.FLOATS, *PD_FLOATS, *(CLIENT_FLOATS if closed else ())):
        if not tv._close(float(got[name]), float(want[name])):
            bad.append(f"{name}: engine {got[name]!r} reference {want[name]!r}")
    for name, field in tv.VECTORS.items():
        if list(rep[field]) != list(want[name]):
            bad.append(f"{name}: engine {list(rep[field])} reference {list(want[name])}")
    for name, field in (*tv.FLOAT_VECTORS.items(), ("link_utilization", "link_util")):
        if not all(tv._close(float(x), float(y)) for x, y in zip(rep[field], want[name], strict=True)):
            bad.append(f"{name}: engine {list(rep[field])} reference {list(want[name])}")
    return bad


@pytest.mark.parametrize("policy", POLICIES)
def test_independent_pairs_match_the_reference(policy):
    for seed in (1, 2):
        _compare("pd-independent", policy, seed)


SAMPLE = ("round_robin", "least_tokens", "power_of_d", "prefix_affinity")
"""The policies the other cases run with (every policy runs the independent case)."""


@pytest.mark.parametrize("policy", SAMPLE)
@pytest.mark.parametrize("case", [c for c in CASES if c != "pd-independent"])
def test_pd_cases_match_the_reference(case, policy):
    _compare(case, policy, 1)


def test_the_pd_cases_exercise_what_they_claim():
    """From the reference's own results: every case disaggregates and transfers; the
    selective rule serves some prompts whole on a decode replica and pairs others; in
    the tight case allocations wait (a decode queue beyond the one-token step) and
    transfers share links (a transfer's p99 above its time alone); the four TTFT parts
    are non-negative; every cohort request has exactly one outcome."""
    seen = {case: _compare(case, "least_tokens", 1) for case in CASES}
    for case, out in seen.items():
        assert out["transfer_count"] > 0 and out["completed"] > 0, case
        assert out["arrivals"] == sum(out[k] for k in ("completed", "failed", "rejected", "shed", "unfinished"))
        for part in ("prefill_queue", "prefill", "transfer", "decode_queue"):
            assert out[f"ttft_{part}_p50"] >= 0, (case, part)
    assert 0 < seen["pd-selective"]["disaggregated_share"] < 1
    assert seen["pd-independent"]["disaggregated_share"] == 1
    tight = seen["pd-tight"]
    alone = 2.0 + 300 * 2000 / (0.05 * 1e6)  # latency + a median prompt's bytes / B
    assert tight["ttft_transfer_p99"] > alone
    assert tight["ttft_decode_queue_p99"] > 2 * tight["ttft_decode_queue_p50"]


def test_the_pool_cases_exercise_what_they_claim():
    """From the reference's own trace (least_tokens): in the small decode pool,
    allocations wait for blocks (over 100 ms after their prefill ended) and decode
    replicas preempt, while the prefill pool's replicas (the run's 16,384 blocks) never do; in the budget case a prefill replica
    computes at most 192 tokens an iteration (chunked, at its budget) while a decode
    replica, unchunked, computes a prompt served whole past its 48-token budget; in the roofline case the
    prefill replicas' steps are the roofline's (never under its 2 + 3 ms floor) and the
    decode replicas' linear ones start at 4 ms."""
    out, sim = {}, {}
    for case in POOL_CASES:
        wl, values, factors, events = tv._case(case, 1, CASES)
        res = ref.simulate(tv._reference_workload(wl), values, factors, events, "least_tokens", 1, _return_sim=True)
        out[case], sim[case] = res, res["_sim"]
        assert res["transfer_count"] > 0 and res["completed"] > 0, case
    small = sim["pd-small-decode-pool"]
    preempted = {x[2] for x in small.trace if x[1] == "preempt"}
    assert preempted and preempted <= {2, 3, 4}
    ended = {x[3]: x[0] for x in small.trace if x[1] == "prefilled"}
    waits = [x[0] - ended[x[3]] for x in small.trace if x[1] == "allocate"]
    assert max(waits) > 100.0  # an allocation waited many steps (~10 ms each) for blocks
    steps = {case: [x for x in sim[case].trace if x[1] == "iteration"] for case in ("pd-budgets", "pd-prefill-roofline")}
    assert max(x[5] for x in steps["pd-budgets"] if x[2] in (0, 1)) == 192
    assert max(x[5] for x in steps["pd-budgets"] if x[2] >= 2) > 48  # unchunked: a prompt whole, past the budget
    roof = steps["pd-prefill-roofline"]
    assert min(x[3] - x[0] for x in roof if x[2] == 0) >= 5.0 and min(x[3] - x[0] for x in roof if x[2] >= 2) >= 4.0


@pytest.mark.parametrize("case", FAIL_CASES)
def test_the_failure_cases_exercise_what_they_claim(case):
    """From the reference's own trace (round robin): attempts fail by crash where the
    case crashes replicas, of the side it names (in the two crash cases some while their
    transfer was in progress: allocated and not transferred); by first-token
    deadline where it has one, on both sides; retries happen, and every cohort request
    has exactly one outcome."""
    wl, values, factors, events = tv._case(case, 1, CASES)
    out = ref.simulate(tv._reference_workload(wl), values, factors, events, "round_robin", 1, _return_sim=True)
    assert out["arrivals"] == sum(out[k] for k in ("completed", "failed", "rejected", "shed", "unfinished"))
    sim = out["_sim"]
    fails = [(x[0], x[2], x[3], x[4]) for x in sim.trace if x[1] == "fail"]
    roles = {(kind, sim.role[i]) for _t, kind, i, _r in fails}
    crashed = {sim.role[e[2]] for e in events if e[1] == "fail"}
    assert {role for kind, role in roles if kind == "crash"} == crashed
    if values["ttft_timeout_ms"] < float("inf"):
        assert {("ttft_timeout", "prefill"), ("ttft_timeout", "decode")} <= roles
    mid = 0
    for t, kind, _i, r in fails:
        way = [x for x in sim.trace if x[1] in ("allocate", "transferred") and x[3] == r and x[0] <= t]
        mid += kind == "crash" and bool(way) and way[-1][1] == "allocate"
    assert mid > 0 or case not in ("pd-crash-prefill", "pd-crash-decode")
    assert out["retries"] > 0 and out["transfer_count"] > 0 and out["completed"] > 0


@pytest.mark.parametrize("case", LOOP_CASES)
def test_the_closed_loop_cases_exercise_what_they_claim(case):
    """From the reference (round robin): the cap binds (some cohort request waits in the
    client), requests are disaggregated, and at no time do more than N sent requests hold
    a slot (from the send to the final outcome plus the overhead, whatever pairs served
    them and whatever their prefill replica still holds); the crash case fails attempts
    by crash and by first-token deadline and retries them within the slot; every cohort
    request has exactly one outcome."""
    wl, values, factors, events = tv._case(case, 1, CASES)
    out = ref.simulate(tv._reference_workload(wl), values, factors, events, "round_robin", 1, _return_sim=True)
    assert out["arrivals"] == sum(out[k] for k in ("completed", "failed", "rejected", "shed", "unfinished"))
    recs = out["records"]
    assert any(r["sent"] is not None and r["sent"] > r["arrival"] for r in recs)
    assert out["transfer_count"] > 0 and out["completed"] > 0
    ovh, cap = values["client_overhead_ms"], values["max_in_flight"]
    held = [(r["sent"], r["left_at"] + ovh if r["left_at"] is not None else float("inf")) for r in recs
            if r["sent"] is not None]
    for t0, _ in held:   # the most slots held at once is reached at a send
        assert sum(1 for a, b in held if a <= t0 < b) <= cap, (case, t0)
    if events:
        kinds = {x[2] for x in out["_sim"].trace if x[1] == "fail"}
        assert {"crash", "ttft_timeout"} <= kinds and out["retries"] > 0


def test_the_front_door_cases_exercise_what_they_claim():
    """From the reference (round robin): the reject case rejects requests; the queue cases
    hold requests in a router's FIFO, and those leave it placed (a pair) or failed at
    the front door's deadline; the closed-loop queue case binds its cap; every request
    stopped was stopped while every eligible replica of both pools held more than
    max_tokens as seen, and every cohort request has exactly one outcome."""
    seen = {}
    for case in DOOR_CASES:
        wl, values, factors, events = tv._case(case, 1, CASES)
        out = ref.simulate(tv._reference_workload(wl), values, factors, events, "round_robin", 1, _return_sim=True)
        assert out["arrivals"] == sum(out[k] for k in ("completed", "failed", "rejected", "shed", "unfinished"))
        assert out["transfer_count"] > 0 and out["completed"] > 0
        seen[case] = out, out.pop("_sim")
    assert seen["pd-front-door-reject"][0]["rejected"] > 0
    out, sim = seen["pd-front-door-queue"]
    held = {x[2] for x in sim.trace if x[1] == "fifo"}
    assert held and out["rejected"] == 0
    assert {x[2] for x in sim.trace if x[1] == "pair"} & held
    assert "front_door_timeout" in {x[2] for x in sim.trace if x[1] == "fail"}
    out, sim = seen["pd-front-door-queue-loop"]
    assert any(x[1] == "fifo" for x in sim.trace)
    assert any(r["sent"] is not None and r["sent"] > r["arrival"] for r in out["records"])


def test_the_front_door_looks_at_both_pools():
    """The reference's test by hand: one prefill and one decode replica, max_tokens 500,
    τ as seen set on each; a new request is stopped only when both are above 500, a
    retry never; with one pool empty of eligible replicas it is shed first."""
    values = tv._values(dict(HAND, prefill_replicas=1, decode_replicas=1, admission_max_tokens=500.0))
    wl = ref.Workload(t=[10.0], prompt=[100], output=[3], key=[0.5], blocks=[[2**40 + j for j in range(6)]])
    sim = ref._Sim(wl, values, [1.0, 1.0], [], "round_robin", 1, False)
    r = sim.requests[0]
    taus = {}
    sim.view = lambda ro, i: dict(o=1, tau=taus[i], ids=set())
    for tp_, td, want in ((600, 600, "front_door"), (600, 400, "placed"), (400, 600, "placed"),
                          (501, 500, "placed")):
        taus.update({0: tp_, 1: td})
        r.outcome, r.current, r.tries = None, None, 0
        assert sim.pd_route(r, 10.0, False) == want, (tp_, td)
    taus.update({0: 600, 1: 600})
    assert sim.pd_route(r, 10.0, True) == "placed"   # a retry skips the front door


def test_the_ingress_cases_exercise_what_they_claim():
    """From the reference (round robin): attempts go in transit at their routing and
    again at their hand-off (a join after a prefill end), every cohort request has
    exactly one outcome; in the crash case attempts are lost in transit, some of them
    hand-offs (handed off, not yet allocated), and deadlines fire."""
    for case in INGRESS_CASES:
        wl, values, factors, events = tv._case(case, 1, CASES)
        out = ref.simulate(tv._reference_workload(wl), values, factors, events, "round_robin", 1, _return_sim=True)
        assert out["arrivals"] == sum(out[k] for k in ("completed", "failed", "rejected", "shed", "unfinished"))
        assert out["transfer_count"] > 0 and out["completed"] > 0
        trace = out["_sim"].trace
        prefilled = {}
        handoff_joins = 0
        for x in trace:
            if x[1] == "prefilled":
                prefilled[x[3]] = x[0]
            elif x[1] == "join" and x[2] in prefilled and prefilled.pop(x[2]) < x[0]:
                handoff_joins += 1
        assert handoff_joins > 0, case
        if events:
            lost = [x for x in trace if x[1] == "lost_in_transit"]
            way = {}
            handoffs_lost = 0
            for x in trace:
                if x[1] in ("pair", "route", "prefilled", "allocate", "join"):
                    way[x[2] if x[1] in ("pair", "route", "join") else x[3]] = x[1]
                elif x[1] == "lost_in_transit":
                    handoffs_lost += way.get(x[3]) == "prefilled"
            assert lost and handoffs_lost > 0
            assert "ttft_timeout" in {x[2] for x in trace if x[1] == "fail"}


@pytest.mark.parametrize("case", BLACK_HOLE_CASES)
def test_the_black_hole_cases_exercise_what_they_claim(case):
    """From the reference (round robin): attempts fail fast on the pool the case
    black-holes, on a decode replica some of them hand-offs (their prefill ended
    elsewhere); retries follow; every cohort request has exactly one outcome."""
    wl, values, factors, events = tv._case(case, 1, CASES)
    out = ref.simulate(tv._reference_workload(wl), values, factors, events, "round_robin", 1, _return_sim=True)
    assert out["arrivals"] == sum(out[k] for k in ("completed", "failed", "rejected", "shed", "unfinished"))
    sim = out["_sim"]
    fast = [x for x in sim.trace if x[1] == "fail" and x[2] == "fast"]
    holed = {sim.role[e[2]] for e in events if e[1] == "fail_fast"}
    assert {sim.role[x[3]] for x in fast} == holed
    if "decode" in holed:
        prefilled = {x[3] for x in sim.trace if x[1] == "prefilled"}
        assert any(sim.role[x[3]] == "decode" and x[4] in prefilled for x in fast)
    assert out["retries"] > 0 and out["transfer_count"] > 0 and out["completed"] > 0


# --------------------------------------------------------------------------- by hand

B_TOK = 16
HAND = dict(step_ms_base=1.0, step_ms_per_prefill_token=0.01, step_ms_per_prefill_token_pair=0.0,
            step_ms_per_decode_sequence=0.5, step_ms_per_kv_token=0.0, link_latency_ms=0.5,
            link_bandwidth_gb_s=0.1, kv_bytes_per_token=1000, block_tokens=B_TOK, kv_blocks=256, warmup_s=0.01,
            measure_s=1.0, drain_s=10.0, max_attempts=2, backoff_ms=20.0)
"""test_pd_reference's hand-worked setting: a step takes 1 + 0.01 U + 0.5 n ms; the link
100,000 bytes/ms after 0.5 ms, 1,000 bytes a token (100 tokens: 1 ms alone); 16-token
blocks, 256 a replica; the window [10, 1010] ms; two attempts, a 20 ms backoff."""


def _by_hand(n_prefill, n_decode, events, arrivals=(10.0,), **extra):
    """Requests at ``arrivals`` (ms), each P = 100 with the same 6 id'd blocks and a
    partial one, O = 3, round robin for both pools, in the engine and in the reference:
    (engine metrics, its REPLICA records, the reference's results)."""
    n = len(arrivals)
    ids = [2**40 + j for j in range(100 // B_TOK)]
    seg_key, seg_len, seg_off = segments_from_ids(ids * n, [len(ids) * k for k in range(n + 1)])
    wl = TokenWorkload(t_ms=np.array(arrivals, float), prompt=np.full(n, 100), output=np.full(n, 3),
                       key=(np.arange(n) + 0.5) / n, group=np.full(n, -1), seg_key=seg_key, seg_len=seg_len,
                       seg_off=seg_off)
    values = tv._values(dict(HAND, prefill_replicas=n_prefill, decode_replicas=n_decode, **extra))
    factors = [1.0] * (n_prefill + n_decode)
    got, rep = tv._engine(wl, values, factors, events, "round_robin", 1)
    want = ref.simulate(tv._reference_workload(wl), values, factors, events, "round_robin", 1, check=True)
    return got, rep, want


def _hand_checks(got, rep, want, expected, vectors):
    """Both implementations against the hand-worked values: ``expected`` metrics (floats
    to 1e-12 relative) and per-replica ``vectors`` (name: (REPLICA field, values))."""
    for name, value in expected.items():
        assert float(got[name]) == pytest.approx(value, rel=1e-12, abs=1e-15), ("engine", name)
        assert float(want[name]) == pytest.approx(value, rel=1e-12, abs=1e-15), ("reference", name)
    for name, (field, values) in vectors.items():
        assert list(rep[field]) == pytest.approx(values, rel=1e-12), ("engine", name)
        assert list(want[name]) == pytest.approx(values, rel=1e-12), ("reference", name)


def test_by_hand_a_prefill_crash_mid_transfer():
    """Prefill replicas 0 and 1, decode replica 2; round robin pairs the request with
    (0, 2). 10: prefill of 100 tokens, d = 1 + 0.01·100 = 2, ends 12 (7 blocks on 0).
    12: handed off; 2 allocates 7 blocks; the transfer of 100,000 bytes flows from 12.5.
    13: replica 0 crashes mid-transfer: the read fails, the attempt fails at 13 as a
    crash of 0 (no breaker count), 2 releases its blocks at once (uncomputed: free), the
    50,000 bytes that flowed stay counted. The retry at 13 + 20 = 33 avoids 0: prefill on
    1, 33 → 35; transfer of all 100 tokens (no hit on 2) 35 → 36.5; the one-token step
    d = 1.01: first token at 37.51 (TTFT 27.51 from the arrival); two decode steps of
    1.5: completion at 40.51 (e2e 30.51).
    Referenced block-ms: 0: 7·(13 − 10); 1: 7·(36.5 − 33); 2: 7·(13 − 12) + 7·(40.51 −
    35); kv_occupancy = their sum / (3 · 256 · 1000). Link bytes (out + in) over
    2 · 1e5 · 1000: 0: 50,000; 1: 100,000; 2: 150,000. Prefix hits: none (4 admissions of
    100 tokens). assigned: 0 once, 1 once, 2 twice; one transfer ended."""
    got, rep, want = _by_hand(2, 1, [(13.0, "fail", 0, 0.0)])
    area = 7 * 3 + 7 * 3.5 + 7 * 1 + 7 * 5.51
    _hand_checks(got, rep, want, dict(completed=1, failed=0, retries=1, attempts=2, wasted_tokens=0,
                                      ttft_p50=27.51, e2e_p50=30.51, transfer_count=1, transfer_bytes=100000.0,
                                      ttft_transfer_p50=1.5, ttft_prefill_p50=2.0, ttft_prefill_queue_p50=0.0,
                                      prefix_hit_rate=0.0, kv_occupancy=area / (3 * 256 * 1000)),
                 dict(assigned=("assigned", [1, 1, 2]), link_utilization=("link_util", [2.5e-4, 5e-4, 7.5e-4])))


def test_by_hand_a_decode_crash_mid_transfer_leaves_a_lease():
    """Prefill replica 0, decode replicas 1 and 2, lease_ms = 5; round robin pairs the
    request with (0, 1). As above the prefill runs 10 → 12 and the transfer flows from
    12.5 to 1. 13: replica 1 crashes mid-transfer: the attempt fails at 13 as a crash of
    1, the transfer stops (50,000 bytes flowed), and 0 keeps its 7 blocks until 13 + 5 =
    18, then releases them as a completion does: its 6 computed id'd blocks cached. The
    retry at 33 (the cursor moved on: decode replica 2; 1 is down) hits those 6 blocks on
    0, capped at floor(99/16) = 6: m = 96, a 4-token prefill, d = 1.04, ends 34.04;
    2 takes 7 blocks (no hit) and the 100 tokens' transfer runs 34.04 → 35.54; the
    one-token step ends 36.55 (TTFT 26.55); completion at 39.55 (e2e 29.55).
    Referenced block-ms: 0: 7·(18 − 10) (held, then leased) + 7·(35.54 − 33); 1: 7·(13 −
    12); 2: 7·(39.55 − 34.04). Link bytes: 0: 150,000; 1: 50,000; 2: 100,000. Prefix
    hits: 96 of 4 admissions of 100 tokens (both prefills, both allocations) = 0.24."""
    got, rep, want = _by_hand(1, 2, [(13.0, "fail", 1, 0.0)], lease_ms=5.0)
    area = 7 * 8 + 7 * 2.54 + 7 * 1 + 7 * 5.51
    _hand_checks(got, rep, want, dict(completed=1, failed=0, retries=1, attempts=2, wasted_tokens=0,
                                      ttft_p50=26.55, e2e_p50=29.55, transfer_count=1, transfer_bytes=100000.0,
                                      ttft_transfer_p50=1.5, ttft_prefill_p50=1.04, prefix_hit_rate=0.24,
                                      kv_occupancy=area / (3 * 256 * 1000)),
                 dict(assigned=("assigned", [2, 1, 1]), link_utilization=("link_util", [7.5e-4, 2.5e-4, 5e-4])))


def test_by_hand_a_retry_served_whole_starts_from_nothing():
    """route = "selective", threshold 99; prefill replica 0, decode replicas 1 and 2. A
    at 10 is paired with (0, 1) (round robin): prefill 10 → 12, transfer 12 → 13.5,
    first token 14.51 (TTFT 4.51), completion 17.51 (e2e 7.51); its 6 id'd blocks end
    cached on 0 and on 1. B (the same prompt) at 30: decode replica 2 by the cursor, no
    hit there (100 uncached > 99): a pair (0, 2); its prefill on 0 hits 96 tokens, d =
    1.04, 30 → 31.04. Replica 2 crashes at 30.5: B, still on its prefill replica, leaves
    it and fails as a crash of 2. Its retry at 50.5 is a new attempt from nothing: decode
    replica 1 (2 is down) holds 96 of its tokens, 4 uncached: served whole on 1, as a
    co-located request: a 4-token prefill, d = 1.04, emits its first token at 51.54 (TTFT
    21.54), two decode steps: completion at 54.54 (e2e 24.54). One transfer (A's);
    placements A, B, B's retry: 2 of 3 sent to a pair; assigned: 0 twice (A, B), 1 twice
    (A's pair, B's retry), 2 once."""
    got, rep, want = _by_hand(1, 2, [(30.5, "fail", 2, 0.0)], arrivals=(10.0, 30.0), pair_route="selective",
                              threshold_tokens=99)
    _hand_checks(got, rep, want, dict(completed=2, failed=0, unfinished=0, retries=1, attempts=3, ttft_p50=4.51,
                                      ttft_p99=21.54, e2e_p50=7.51, e2e_p99=24.54, transfer_count=1,
                                      disaggregated_share=2 / 3),
                 dict(assigned=("assigned", [2, 2, 1]), replica_tokens=("tokens", [0, 6, 0])))


def test_by_hand_pools_of_different_step_costs():
    """Prefill replica 0 with step_ms base 2, 0.02 a prefill token; decode replica 1 with
    base 0.5, 0.1 a prefill token, 0.25 a decoding sequence, and 128 KV blocks (0 keeps
    HAND's 256). The request (P = 100, O = 3) arrives at 10: its prefill on 0 takes
    2 + 0.02·100 = 4 ms (not HAND's 2), ends 14; 1 allocates its 7 blocks at once, the
    transfer of 100,000 bytes takes 0.5 + 1 = 1.5 ms, 14 → 15.5; the one-token step on 1
    takes 0.5 + 0.1·1 = 0.6: first token at 16.1, TTFT 6.1 = 0 (prefill queue) + 4
    (prefill) + 1.5 (transfer) + 0.6 (decode queue: the one-token step); two decode steps
    of 0.5 + 0.25·1 = 0.75: completion at 17.6 (e2e 7.6). Referenced block-ms: 0: 7·(15.5 −
    10), 1: 7·(17.6 − 14); kv_occupancy, each replica's share of its own pool averaged:
    (7·5.5/256 + 7·3.6/128) / 2 / 1000."""
    got, rep, want = _by_hand(1, 1, [], prefill_step_ms_base=2.0, prefill_step_ms_per_prefill_token=0.02,
                              decode_step_ms_base=0.5, decode_step_ms_per_prefill_token=0.1,
                              decode_step_ms_per_decode_sequence=0.25, decode_kv_blocks=128)
    _hand_checks(got, rep, want, dict(completed=1, ttft_p50=6.1, e2e_p50=7.6, ttft_prefill_queue_p50=0.0,
                                      ttft_prefill_p50=4.0, ttft_transfer_p50=1.5, ttft_decode_queue_p50=0.6,
                                      transfer_count=1, transfer_bytes=100000.0,
                                      kv_occupancy=(7 * 5.5 / 256 + 7 * 3.6 / 128) / 2 / 1000),
                 dict(assigned=("assigned", [1, 1]), link_utilization=("link_util", [5e-4, 5e-4])))


def test_by_hand_a_closed_loop_of_one_sends_the_second_request_at_the_first_ones_completion():
    """max_in_flight = 1; prefill replica 0, decode replica 1; A intended at 10, B (the
    same prompt) at 11. A is sent at 10: prefill 10 → 12, the transfer of 100,000 bytes
    12 → 13.5 (0.5 + 1), the one-token step d = 1.01 → 14.51 (TTFT 4.51), two decode
    steps of 1.5 → completion at 17.51 (e2e 7.51). A's slot is held until then, whichever
    replica it was on (on 1 since the hand-off; 0 released its blocks at 13.5, cached), so
    B waits in the client and is sent at 17.51 (client wait 6.51): its prefill on 0 hits 96
    tokens (6 blocks, capped at floor(99/16)), a 4-token prefill, d = 1.04, 17.51 → 18.55;
    on 1 it hits A's 6 cached blocks: a transfer of 4 tokens, 4,000 bytes, 0.5 + 0.04 →
    19.09; the one-token step → 20.10 (TTFT 2.59 from its send), completion at 23.10 (e2e
    5.59). Prefix hits: 0 + 0 + 96 + 96 of 4 admissions of 100 tokens = 0.48. Two
    transfers, 104,000 bytes; client waits 0 and 6.51."""
    got, rep, want = _by_hand(1, 1, [], arrivals=(10.0, 11.0), max_in_flight=1)
    _hand_checks(got, rep, want, dict(completed=2, failed=0, unfinished=0, attempts=2, ttft_p50=2.59, ttft_p99=4.51,
                                      e2e_p50=5.59, e2e_p99=7.51, transfer_count=2, transfer_bytes=104000.0,
                                      ttft_transfer_p50=0.54, ttft_transfer_p99=1.5, ttft_prefill_p50=1.04,
                                      ttft_prefill_p99=2.0, prefix_hit_rate=0.48, client_wait_p50=0.0,
                                      client_wait_p99=6.51, client_wait_mean=6.51 / 2, client_waiting=0),
                 dict(assigned=("assigned", [2, 2])))


def test_by_hand_the_front_door_admits_while_either_pool_has_room():
    """admission max_tokens = 300 (reject); prefill replica 0, decode replica 1; A at 10,
    B at 11, C at 12.5, the same prompt (τ of an attempt: 100 + the 256-token allowance =
    356). A: both replicas at τ 0, placed (0, 1); prefill 10 → 12. B at 11: τ_0 = 356 >
    300 but τ_1 = 0: admitted (the decode pool has room), placed (0, 1), waits on 0. 12: A
    handed off to 1 (τ_1 = 356), its transfer from 12 (latency to 12.5, 100,000 bytes:
    ends 13.5); B's prefill on 0 hits A's 6 held blocks, 4 tokens, d = 1.04, 12 → 13.04.
    C at 12.5: τ_0 = 356 (B), τ_1 = 356 (A): both over 300, rejected. 13.04: B handed off,
    1 allocates: it hits A's 6 blocks there (the reserve mode's rule: a taken block is
    resident at once), so B's transfer is of 4 tokens, 4,000 bytes: 13.04 → 13.54 + 0.04
    = 13.58. A: one-token step 13.5 → 14.51 (TTFT 4.51); 14.51: A's decode and B's
    one-token step, d = 1 + 0.01 + 0.5 = 1.51 → 16.02 (B's TTFT 5.02); 16.02: both decode,
    d = 1 + 2 · 0.5 = 2 → 18.02: A completes (e2e 8.02); B's last step → 19.52 (e2e 8.52).
    Prefix hits 0 + 96 + 0 + 96 of 4 admissions of 100 tokens = 0.48; TTFT parts: prefill
    queue 0 and 1, prefill 2 and 1.04, transfer 1.5 and 0.54, decode queue 14.51 − 12 −
    1.5 = 1.01 and 16.02 − 13.04 − 0.54 = 2.44."""
    got, rep, want = _by_hand(1, 1, [], arrivals=(10.0, 11.0, 12.5), admission_max_tokens=300.0)
    _hand_checks(got, rep, want, dict(arrivals=3, completed=2, rejected=1, failed=0, attempts=2, ttft_p50=4.51,
                                      ttft_p99=5.02, e2e_p50=8.02, e2e_p99=8.52, transfer_count=2,
                                      transfer_bytes=104000.0, prefix_hit_rate=0.48, ttft_prefill_queue_p50=0.0,
                                      ttft_prefill_queue_p99=1.0, ttft_prefill_p50=1.04, ttft_prefill_p99=2.0,
                                      ttft_transfer_p50=0.54, ttft_transfer_p99=1.5, ttft_decode_queue_p50=1.01,
                                      ttft_decode_queue_p99=2.44, disaggregated_share=1.0),
                 dict(assigned=("assigned", [2, 2])))


def test_by_hand_the_ingress_on_both_sides():
    """ingress = 0.25 + 0.0025 · 100 = 0.5 ms a request; route = "selective", threshold
    99; prefill replica 0, decode replica 1. A at 10 (no hit on 1: 100 > 99, a pair): in
    transit to 0 until 10.5, prefill 10.5 → 12.5 (d = 2); handed off at 12.5, in transit
    to 1 (its API server) until 13; 1 allocates at 13, the transfer 13 → 13.5 + 1 = 14.5;
    the one-token step → 15.51 (TTFT 5.51); two decode steps → 18.51 (e2e 8.51). Its TTFT
    parts: prefill queue 0.5 (the ingress), prefill 2, transfer 1.5, decode queue 15.51 −
    12.5 − 1.5 = 1.51 (the ingress and the one-token step). B at 30 (the same prompt):
    1 holds A's 6 blocks, 4 uncached ≤ 99: served whole on 1, in transit until 30.5, a
    4-token prefill d = 1.04 → 31.54 (TTFT 1.54), completion 34.54 (e2e 4.54). Prefix
    hits 0 + 0 + 96 of 3 admissions of 100 tokens = 0.32; tokens all on 1."""
    got, rep, want = _by_hand(1, 1, [], arrivals=(10.0, 30.0), pair_route="selective", threshold_tokens=99,
                              ingress_ms=0.25, ingress_ms_per_token=0.0025)
    _hand_checks(got, rep, want, dict(completed=2, attempts=2, ttft_p50=1.54, ttft_p99=5.51, e2e_p50=4.54,
                                      e2e_p99=8.51, transfer_count=1, transfer_bytes=100000.0, prefix_hit_rate=0.32,
                                      ttft_prefill_queue_p50=0.5, ttft_prefill_p50=2.0, ttft_transfer_p50=1.5,
                                      ttft_decode_queue_p50=1.51, disaggregated_share=0.5),
                 dict(assigned=("assigned", [1, 2]), replica_tokens=("tokens", [0, 6])))


def test_by_hand_a_black_holed_decode_replica_fails_the_hand_off():
    """Prefill replica 0, decode replicas 1 and 2; replica 1 fails fast from 5 (fail_fast_ms
    2), lease_ms 5. A at 10 is paired with (0, 1) (round robin; 1 stays eligible): prefill
    10 → 12; handed off to 1 at 12, black-holed: it fails at 14 as a fast failure of 1,
    and 0 keeps its 7 blocks until 14 + 5 = 19 (the lease), then releases them (6 id'd
    blocks cached). The retry at 14 + 20 = 34 avoids 1: the pair (0, 2); its prefill hits
    96 tokens on 0, d = 1.04, → 35.04; 2 allocates 7 blocks, the transfer 35.04 → 35.54 +
    1 = 36.54; the one-token step → 37.55 (TTFT 27.55 from the arrival); completion at
    40.55 (e2e 30.55). Referenced block-ms: 0: 7·(19 − 10) + 7·(36.54 − 34); 2: 7·(40.55
    − 35.04). Link bytes: 0 and 2 100,000 each. Prefix hits: 96 of 3 admissions of 100
    tokens (A's prefill, the retry's prefill and allocation) = 0.32."""
    got, rep, want = _by_hand(1, 2, [(5.0, "fail_fast", 1, 0.0)], lease_ms=5.0)
    area = 7 * 9 + 7 * 2.54 + 7 * 5.51
    _hand_checks(got, rep, want, dict(completed=1, failed=0, retries=1, attempts=2, wasted_tokens=0,
                                      ttft_p50=27.55, e2e_p50=30.55, transfer_count=1, transfer_bytes=100000.0,
                                      ttft_transfer_p50=1.5, ttft_prefill_p50=1.04, ttft_decode_queue_p50=1.01,
                                      prefix_hit_rate=0.32, kv_occupancy=area / (3 * 256 * 1000)),
                 dict(assigned=("assigned", [2, 1, 1]), link_utilization=("link_util", [5e-4, 0.0, 5e-4])))


@st.composite
def small_pd_cluster(draw):
    """A random small disaggregated cluster (2 to 5 replicas, any split), any pair rule
    and any policy for each pool, on test_token_pipeline's tiny workload: small KV
    pools (allocations wait, sequences are preempted), small batches and waiting caps
    (sheds), chunked or not, any drain, a slowdown, a slow or fast link; up to two
    crashes of any replica (some recovered), first-token deadlines and timeouts, the
    lease short or long, retries and the breaker."""
    b = draw(st.sampled_from([4, 8, 16]))
    fit = -(-tp.LARGEST // b)  # the smallest pool that holds the largest request
    n = draw(st.integers(2, 5))
    values = ref.defaults()
    values.update(tp.TINY)
    values.update(
        block_tokens=b,
        kv_blocks=draw(st.one_of(st.just(fit), st.integers(fit, 2 * fit), st.integers(fit, 2500))),
        max_batch=draw(st.integers(1, 8)),
        waiting_cap=draw(st.integers(1, 6)),
        chunked_prefill=draw(st.booleans()),
        max_batched_tokens=draw(st.integers(64, 4096)),
        prefix_probability=draw(st.sampled_from([0.0, 0.5, 0.9])),
        choices=draw(st.integers(1, 3)),
        drain_s=draw(st.sampled_from([0.0, 0.3, 600.0])),
        allowance_tokens=draw(st.sampled_from([256, 16, "exact"])),
        prefill_replicas=(n_p := draw(st.integers(1, n - 1))),
        decode_replicas=n - n_p,
        pair_route=draw(st.sampled_from(["independent", "selective", "transfer_aware"])),
        threshold_tokens=draw(st.sampled_from([0, 30, 200])),
        prefill_policy=draw(st.sampled_from(["same", *POLICIES])),
        decode_policy=draw(st.sampled_from(["same", *POLICIES])),
        link_latency_ms=draw(st.sampled_from([0.0, 0.5, 3.0])),
        link_bandwidth_gb_s=draw(st.sampled_from([0.01, 0.1, 50.0])),
        kv_bytes_per_token=draw(st.sampled_from([1000, 131072])),
        max_attempts=draw(st.integers(1, 3)),
        backoff_ms=draw(st.sampled_from([1.0, 30.0])),
        ttft_timeout_ms=draw(st.sampled_from([float("inf"), 40.0, 300.0])),
        timeout_ms=draw(st.sampled_from([float("inf"), 800.0])),
        lease_ms=draw(st.sampled_from([3.0, 200.0, 30000.0])),
        breaker_consecutive=draw(st.sampled_from([0, 2])),
        max_in_flight=draw(st.sampled_from([0, 0, 1, 3, 8])),
        admission_max_tokens=draw(st.sampled_from([float("inf"), float("inf"), 400.0, 2000.0])),
        admission_mode=draw(st.sampled_from(["reject", "queue"])),
        ingress_ms=draw(st.sampled_from([0.0, 0.0, 0.5, 4.0])),
        ingress_ms_per_token=draw(st.sampled_from([0.0, 0.01])),
        client_overhead_ms=draw(st.sampled_from([0.0, 7.0])),
    )
    for role in ("prefill", "decode"):  # each pool's own settings, sometimes
        if draw(st.booleans()):
            values.update({f"{role}_kv_blocks": draw(st.integers(fit, 2 * fit)), f"{role}_max_batch": draw(st.integers(1, 8)),
                           f"{role}_max_batched_tokens": draw(st.integers(64, 4096)),
                           f"{role}_chunked_prefill": draw(st.booleans()), f"{role}_waiting_cap": draw(st.integers(1, 6)),
                           f"{role}_step_cost": draw(st.sampled_from(["linear", "roofline", "overlap", "mixed"])),
                           f"{role}_step_cpu_ms": draw(st.sampled_from([0.0, 0.3]))})
    factors = draw(st.lists(st.sampled_from([0.5, 1.0, 1.5, 3.0]), min_size=n, max_size=n))
    events = []
    if draw(st.booleans()):
        events.append((draw(st.sampled_from([0.0, 1500.0, 2500.0])), "slowdown", draw(st.integers(0, n - 1)),
                       draw(st.sampled_from([0.5, 2.0, 4.0]))))
    if draw(st.booleans()):  # a black hole (of either pool), some ended
        at = float(draw(st.integers(1000, 3500)))
        i = draw(st.integers(0, n - 1))
        events.append((at, "fail_fast", i, 0.0))
        if draw(st.booleans()):
            events.append((at + draw(st.sampled_from([5.0, 300.0])), "recover", i, 0.0))
    for _ in range(draw(st.integers(0, 2))):  # crashes (of either pool), some recovered
        at = float(draw(st.integers(1000, 3500)))
        i = draw(st.integers(0, n - 1))
        events.append((at, "fail", i, 0.0))
        if draw(st.booleans()):
            events.append((at + draw(st.sampled_from([5.0, 300.0])), "recover", i, 0.0))
    events.sort(key=lambda e: e[0])
    return values, factors, events, draw(st.sampled_from(POLICIES)), draw(st.sampled_from([5, 20, 40, 80])), \
        draw(st.integers(1, 10_000))


# no shrinking phase (as test_token_pipeline's): the failing example is printed as drawn
@settings(max_examples=15, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=small_pd_cluster())
def test_random_small_pd_clusters_keep_the_books_and_match_the_reference(case):
    """The engine on a random small disaggregated cluster: every cohort request in one
    outcome, and every metric the reference's (its invariants checked at every step on
    the small pools: held, receiving and transferred blocks included)."""
    values, factors, events, policy, rate, seed = case
    horizon = (values["warmup_s"] + values["measure_s"]) * 1000.0
    wl = generate(seed, float(rate), (), horizon, br.workload_params(values))
    got, rep = tv._engine(wl, values, factors, events, policy, seed)
    assert got["arrivals"] == sum(int(got[k]) for k in ("completed", "failed", "rejected", "shed", "unfinished"))
    small_pool = values["kv_blocks"] * values["block_tokens"] <= 4 * tp.LARGEST
    want = ref.simulate(tv._reference_workload(wl), values, factors, events, policy, seed, check=small_pool)
    bad = _differences(got, rep, want, values["max_in_flight"] > 0)
    assert not bad, f"{policy} seed {seed} rate {rate} factors {factors} events {events} {values}:\n" + "\n".join(bad)


def _run_shrunk(sweep, changes, tmp_path, monkeypatch, capsys):
    """Run sweeps/``sweep`` shrunk to a 2 s warm-up and a 4 s window, with ``changes``
    ((old, new) texts, each present) too, through the command line in process into
    tmp_path/out: its printed tables, one text per stage."""
    from routesim.sweep import main

    text = (Path(__file__).parents[1] / "sweeps" / sweep).read_text()
    for old, new in (("warmup_s = 30 ", "warmup_s = 2 "), ("measure_s = 60", "measure_s = 4"), *changes):
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / sweep
    path.write_text(text)
    monkeypatch.chdir(tmp_path)
    assert main([str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    return capsys.readouterr().out.split("stage ")[1:]


def test_the_example_sweep_prints_the_pd_columns(tmp_path, monkeypatch, capsys):
    """sweeps/disaggregation.toml (shrunk to a 2 s warm-up, 4 s window and one seed)
    through the command line in process: its co-located stage's table and Dataset are
    a co-located one's (no disaggregation column or variable), each split's table adds
    the TTFT's parts, the transfers, the link and the pairs, and its Dataset holds them
    with their units; every transfer takes at least the link's 1 ms latency, and with
    the independent rule every placement is a pair."""
    import xarray as xr

    from routesim.batching.metrics import PD_PER_REPLICA, PD_VARIABLES
    from routesim.batching.summary import PD_HEADERS

    tables = _run_shrunk("disaggregation.toml", (("count = 4", "count = 1"),), tmp_path, monkeypatch, capsys)
    assert [t.split(":")[0] for t in tables] == ["co-located", "1", "2", "3"]  # "1:3", "2:2", "3:1"
    assert not any(h in tables[0] for h in PD_HEADERS)
    for table in tables[1:]:
        assert all(h in table for h in PD_HEADERS)
    colocated = xr.open_dataset(tmp_path / "out" / "co-located.nc")
    assert not set(PD_VARIABLES) & set(colocated.data_vars) and "link_utilization" not in colocated
    for name in ("1:3", "2:2", "3:1"):
        ds = xr.open_dataset(tmp_path / "out" / f"{name}.nc")
        for var in (*PD_VARIABLES, *PD_PER_REPLICA):
            assert var in ds and ds[var].attrs["units"], (name, var)
        assert (ds.transfer_count > 0).all() and (ds.ttft_transfer_p50 >= 1.0).all()
        assert (ds.disaggregated_share == 1.0).all()
        assert ds.link_utilization.dims[-1] == "replica"


def test_the_pools_of_gpus_example(tmp_path, monkeypatch, capsys):
    """sweeps/pools-of-gpus.toml (shrunk to a 2 s warm-up, 4 s window, one seed) through
    the command line in process: the co-located stage's table has no disaggregation
    column, the split stages' have them; the slow-decode stage's Dataset records the
    decode pool's keys the file sets (its form, its blocks), the model description
    instead of the KV bytes, and no prefill pool key (it sets none); and its decode pool,
    at 1.6 times the linear cost's coefficients where the alike stage's decodes on the
    H100 roofline (a decode step of a few sequences: 6.5·1.6 + … ms against 4 + 5.99 +
    … ms), gives every request a slower time per output token at each load."""
    import xarray as xr

    from routesim.batching import pd_keys
    from routesim.batching.summary import PD_HEADERS

    tables = _run_shrunk("pools-of-gpus.toml", (("count = 2", "count = 1"),
                                                ("../examples/", str(Path(__file__).parents[1] / "examples") + "/")),
                         tmp_path, monkeypatch, capsys)
    assert [t.split(":")[0] for t in tables] == ["co-located", "1", "1"]  # "1:3-alike", "1:3-slow-decode"
    assert not any(h in tables[0] for h in PD_HEADERS) and all(h in tables[2] for h in PD_HEADERS)
    slow = xr.open_dataset(tmp_path / "out" / "1:3-slow-decode.nc")
    alike = xr.open_dataset(tmp_path / "out" / "1:3-alike.nc")
    assert (slow.attrs["decode_step_cost"], slow.attrs["decode_kv_blocks"]) == ("linear", 8192)
    assert slow.attrs["kv_model"].endswith("llama-3.1-8b-h100.toml") and "kv_bytes_per_token" not in slow.attrs
    assert not {pd_keys.pool_name("prefill", n) for n in pd_keys.POOL_KEYS} & set(slow.attrs)
    assert slow.attrs["step_cost"] == "roofline" and "decode_step_cost" not in alike.attrs
    assert (slow.tpot_p50 > alike.tpot_p50).all()
