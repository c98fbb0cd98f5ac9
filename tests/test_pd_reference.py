"""Prefill/decode disaggregation in the reference (tests/token_reference.py), on
hand-worked cases (docs/model.md "Prefill/decode disaggregation").

First the link model (``Links``): a transfer waits the latency using no bandwidth, then
flows at min(B / n_out(src), B / n_in(dst)), rates changing only when a transfer starts or
ends flowing. Then whole requests through a pair (``simulate`` with ``[pools]``): the
prefill replica computes the prompt and drops its token, holds its blocks until the
transfer ends; the decode replica allocates, receives, recomputes the last prompt token
(which emits the first token), then decodes; and what a crash or a deadline on either
side does mid-transfer (the lease). Every expected time is derived in the
test's docstring from those definitions and the linear step cost, not from a run; byte
counts and bandwidths are chosen so that the times are exact or nearly so in binary
floating point."""

import math

import pytest

import token_reference as ref
from token_reference import Links

GB_S = 1e6
"""1 GB/s in bytes/ms."""


def test_one_transfer_is_latency_plus_bytes_over_bandwidth():
    """The issue's formula on the defaults: a 1,000-token prompt of Llama-3.1-8B
    (131,072 KV bytes a token: 2 · 32 layers · 8 KV heads · 128 · 2 bytes) over a
    50 GB/s link after 1 ms: 1 + 131,072,000 / 5e7 = 1 + 2.62144 = 3.62144 ms."""
    links = Links(50 * GB_S, 1.0)
    links.start("r", 10.0, 0, 1, 1000 * 131072)
    assert links.advance(13.6) == []
    assert links.advance(20.0) == ["r"]
    (key, end, nbytes), = links.ended
    assert (key, nbytes) == ("r", 131072000.0)
    assert end == pytest.approx(10.0 + 3.62144, rel=1e-15, abs=0)


def test_two_transfers_out_of_one_prefill_replica_share_its_link():
    """B = 100 bytes/ms, no latency; A (1,000 bytes, replica 0 → 1) starts at 0 and B
    (1,000 bytes, 0 → 2) at 4. Until 4, A alone at 100: 400 flowed, 600 left. From 4
    both leave replica 0: n_out = 2, each at min(100/2, 100/1) = 50. A's 600 take 12 ms:
    A ends at 16, when B has 12 · 50 = 600 flowed; B's 400 left alone at 100: 4 ms,
    ends at 20."""
    links = Links(100.0, 0.0)
    links.start("A", 0.0, 0, 1, 1000)
    links.start("B", 4.0, 0, 2, 1000)
    links.advance(100.0)
    assert links.ended == [("A", 16.0, 1000.0), ("B", 20.0, 1000.0)]


def test_two_transfers_into_one_decode_replica_after_the_latency():
    """B = 100, latency 2; A (0 → 2) and B (1 → 2), 1,000 bytes each, both start at 0:
    neither flows before 2 (the latency uses no bandwidth); from 2 both enter replica 2,
    n_in = 2, each at 50: both end at 2 + 1000/50 = 22, in start order."""
    links = Links(100.0, 2.0)
    links.start("A", 0.0, 0, 2, 1000)
    links.start("B", 0.0, 1, 2, 1000)
    assert links.rates(1.0) == {}
    assert links.rates(2.0) == {"A": 50.0, "B": 50.0}
    assert links.advance(21.0) == []
    assert links.advance(22.0) == ["A", "B"]
    assert links.ended == [("A", 22.0, 1000.0), ("B", 22.0, 1000.0)]


def test_a_share_one_end_cannot_use_is_not_handed_on():
    """No max-min fairness (the page leaves it out): B = 120; A (0 → 1, 1,200 bytes),
    and three into replica 3 — X (0 → 3), Y (4 → 3), Z (5 → 3), 1,200 bytes each — all
    at 0, no latency. n_out(0) = 2, n_in(3) = 3: A flows at min(60, 120) = 60 (not the
    80 that max-min fairness would give it once X is held to 40 by replica 3), X at
    min(60, 40) = 40, Y and Z at 40. Everything ends at 1200/60 = 20 for A and
    1200/40 = 30 for X, Y, Z (A's end changes none of their rates: X stays bound by
    replica 3's three)."""
    links = Links(120.0, 0.0)
    for key, src, dst in (("A", 0, 1), ("X", 0, 3), ("Y", 4, 3), ("Z", 5, 3)):
        links.start(key, 0.0, src, dst, 1200)
    assert links.rates(0.0) == {"A": 60.0, "X": 40.0, "Y": 40.0, "Z": 40.0}
    links.advance(100.0)
    assert links.ended == [("A", 20.0, 1200.0), ("X", 30.0, 1200.0), ("Y", 30.0, 1200.0), ("Z", 30.0, 1200.0)]


def test_an_aborted_transfer_gives_its_share_back():
    """B = 100, no latency; A and B (1,000 bytes each) leave replica 0 at 0, each at 50.
    B is aborted at 4 (a crash of its decode replica): A has 200 flowed, 800 left, alone
    at 100 from then: ends at 12. B never ends."""
    links = Links(100.0, 0.0)
    links.start("A", 0.0, 0, 1, 1000)
    links.start("B", 0.0, 0, 2, 1000)
    links.abort("B", 4.0)
    links.advance(100.0)
    assert links.ended == [("A", 12.0, 1000.0)]


def test_back_to_back_transfers_do_not_overlap():
    """B = 100, latency 1; A (500 bytes) from 0 ends at 1 + 5 = 6; B (500 bytes, same
    replicas) starts at 6, flows from 7 alone: ends at 12."""
    links = Links(100.0, 1.0)
    links.start("A", 0.0, 0, 1, 500)
    assert links.advance(6.0) == ["A"]
    links.start("B", 6.0, 0, 1, 500)
    assert links.next_time() == 7.0
    links.advance(100.0)
    assert links.ended == [("A", 6.0, 500.0), ("B", 12.0, 500.0)]


# --------------------------------------------------------------------------- requests

B_TOK = 16
STEP = dict(step_ms_base=1.0, step_ms_per_prefill_token=0.01, step_ms_per_prefill_token_pair=0.0,
            step_ms_per_decode_sequence=0.5, step_ms_per_kv_token=0.0)
"""d = 1 + 0.01 U + 0.5 n (ms): no attention or KV term, so each step is easy by hand."""
LINK = dict(link_latency_ms=0.5, link_bandwidth_gb_s=0.1, kv_bytes_per_token=1000)
"""B = 0.1 GB/s = 1e5 bytes/ms; a token's KV is 1,000 bytes: 100 tokens flow in 1 ms alone."""


def unique_ids(k: int, P: int) -> list:
    return [2**40 + k * 2**16 + j for j in range(P // B_TOK)]


def run(arrivals, n_prefill, n_decode, ids=None, replicas=None, keys=None, events=(), **extra):
    """The reference on ``arrivals`` [(t_ms, P, O)], a cluster of n_prefill + n_decode
    reference replicas (or ``replicas``, co-located), round robin for both pools, window
    [10, 1010) ms, scenario ``events``; the simulator returned too (``_sim``)."""
    n = len(arrivals)
    wl = ref.Workload(t=[float(t) for t, _P, _O in arrivals], prompt=[P for _t, P, _O in arrivals],
                      output=[O for _t, _P, O in arrivals], key=keys or [(k + 0.5) / n for k in range(n)],
                      blocks=ids or [unique_ids(k, P) for k, (_t, P, _O) in enumerate(arrivals)])
    params = dict(STEP, **LINK, block_tokens=B_TOK, kv_blocks=256, warmup_s=0.01, measure_s=1.0,
                  drain_s=10.0, prefill_replicas=n_prefill, decode_replicas=n_decode, **extra)
    factors = [1.0] * (replicas or n_prefill + n_decode)
    return ref.simulate(wl, params, factors, list(events), "round_robin", seed=1, check=True, _return_sim=True)


def test_one_request_through_a_pair():
    """Replica 1 prefills, replica 2 decodes; P = 100, O = 3, arrives at 10.
    10: the prefill replica admits it, one chunk of 100: d = 1 + 0.01·100 = 2, ends 12.
    12: its prefill ends, no token; handed off; the idle decode replica allocates
        ceil(100/16) = 7 blocks (no hit) and the transfer of 100 tokens = 100,000 bytes
        starts: flows from 12.5, 1 ms alone, ends 13.5.
    13.5: the prefill replica releases its blocks; the decode replica admits it with
        m = 99, one token: d = 1 + 0.01·1 = 1.01, ends 14.51, the first token (TTFT 4.51).
    14.51, 16.01: two decode steps of d = 1 + 0.5·1 = 1.5: tokens at 16.01 and 17.51,
        completion at 17.51.
    TTFT parts: prefill queue 0, prefill 2, transfer 1.5 (latency included), decode
    queue 4.51 − 2 − 1.5 = 1.01 (the one-token step). Link utilisation over [10, 1010]:
    100,000 bytes out of replica 1 and into replica 2, over 2 · 1e5 · 1000 = 2e8."""
    out = run([(10, 100, 3)], 1, 1)
    (rec,) = out["records"]
    assert rec["outcome"] == "completed"
    assert rec["first_token"] == pytest.approx(14.51, rel=1e-14)
    assert rec["completion"] == pytest.approx(17.51, rel=1e-14)
    assert rec["pd"] == dict(routed=10.0, prefill=0, decode=1, prefill_admit=10.0, prefill_end=12.0,
                             transfer_start=12.0, bytes=100000, decode_hit=0, transfer_end=13.5)
    assert out["ttft_prefill_queue_p50"] == 0.0
    assert out["ttft_prefill_p50"] == 2.0
    assert out["ttft_transfer_p50"] == 1.5
    assert out["ttft_decode_queue_p50"] == pytest.approx(1.01, rel=1e-12)
    assert (out["transfer_count"], out["transfer_bytes"]) == (1, 100000.0)
    assert out["link_utilization"] == [pytest.approx(5e-4, rel=1e-12)] * 2
    assert out["replica_tokens"] == [0, 3]            # the prefill replica's token is dropped
    assert out["assigned"] == [1, 1]
    assert (out["completed"], out["arrivals"]) == (1, 1)


def test_two_transfers_compete_for_the_prefill_replicas_link():
    """One prefill replica, two decode replicas; two requests of P = 100, O = 2 at 10.
    10: both admitted on replica 1 (round robin pairs them with replicas 2 and 3): one
        iteration, U = 200, d = 1 + 2 = 3, ends 13.
    13: both prefills end; both decode replicas allocate; both transfers start, flow
        from 13.5, both out of replica 1: n_out = 2, each at 1e5/2 = 5e4 bytes/ms:
        100,000 bytes take 2 ms, both end at 15.5 (alone they would end at 14.5).
    15.5: each decode replica's one-token step, d = 1.01: first tokens at 16.51
        (TTFT 6.51), then one decode step of 1.5: completions at 18.01.
    TTFT parts: prefill 3, transfer 2.5, decode queue 1.01."""
    out = run([(10, 100, 2), (10, 100, 2)], 1, 2)
    for k, rec in enumerate(out["records"]):
        assert rec["outcome"] == "completed"
        assert rec["pd"]["decode"] == 1 + k
        assert rec["pd"]["transfer_end"] == 15.5
        assert rec["first_token"] == pytest.approx(16.51, rel=1e-14)
        assert rec["completion"] == pytest.approx(18.01, rel=1e-14)
    assert out["ttft_prefill_p99"] == 3.0
    assert out["ttft_transfer_p99"] == 2.5
    assert out["ttft_decode_queue_p99"] == pytest.approx(1.01, rel=1e-12)
    assert out["link_utilization"][0] == pytest.approx(2 * 1e5 / 2e8, rel=1e-12)


def test_a_decode_side_hit_shortens_the_transfer():
    """Two requests with the same 6 prompt blocks (P = 100 = 6·16 + 4), one prefill and
    one decode replica, A at 10 and B at 30 (A long done: as above, completion at 17.51
    with O = 3; its blocks cached on both replicas). B: hit capped at floor(99/16) = 6
    blocks, m = 96 on both. 30: prefill of 4 tokens, d = 1.04, ends 31.04; the decode
    replica references its 6 cached blocks and takes 1; the transfer of 100 − 96 = 4
    tokens = 4,000 bytes: 0.5 + 0.04, ends 31.58; one-token step 1.01: first token
    32.59 (TTFT 2.59)."""
    shared = unique_ids(0, 100)
    out = run([(10, 100, 3), (30, 100, 3)], 1, 1, ids=[shared, shared])
    rec = out["records"][1]
    assert rec["pd"]["decode_hit"] == 96 and rec["pd"]["bytes"] == 4000
    assert rec["pd"]["prefill_end"] == pytest.approx(31.04, rel=1e-14)
    assert rec["pd"]["transfer_end"] == pytest.approx(31.58, rel=1e-14)
    assert rec["first_token"] == pytest.approx(32.59, rel=1e-14)
    assert out["transfer_bytes"] == 104000.0


def test_selective_serves_a_short_uncached_prompt_on_the_decode_replica():
    """route = "selective", threshold 100: P = 100 has 100 uncached tokens on the decode
    replica (not over 100): served whole there, co-located: one prefill step of 2 ms
    emits the first token at 12 (TTFT 2), no transfer. With threshold 99 it goes to the
    pair (TTFT 4.51, as in the one-request case)."""
    whole = run([(10, 100, 3)], 1, 1, pair_route="selective", threshold_tokens=100)
    (rec,) = whole["records"]
    assert rec["pd"] is None and rec["first_token"] == 12.0
    assert whole["transfer_count"] == 0 and whole["disaggregated_share"] == 0.0
    assert whole["assigned"] == [0, 1]
    pair = run([(10, 100, 3)], 1, 1, pair_route="selective", threshold_tokens=99)
    assert pair["records"][0]["first_token"] == pytest.approx(14.51, rel=1e-14)
    assert pair["disaggregated_share"] == 1.0


def test_co_located_runs_do_not_see_the_pools():
    """prefill_replicas = 0: no [pools] metric, no record's way; the request is served
    whole (one prefill step of 2 ms: first token at 12)."""
    out = run([(10, 100, 3)], 0, 0, replicas=2)
    assert "transfer_count" not in out and "pd" not in out["records"][0]
    assert out["records"][0]["first_token"] == 12.0
    assert not math.isnan(out["ttft_p50"])


def test_transfer_aware_avoids_a_busy_link():
    """Two prefill and two decode replicas, route = "transfer_aware", round robin for
    the decode pool; A and B (P = 100) with the same key h = 0.25, whose hash rule
    prefers prefill replica index 1: frac(0.25 + 0.618·1) = 0.868 against
    frac(0.25 + 0.618·2) = 0.486. A at 10: both prefill replicas cost the same
    (0.01·100 + 0.5 + 100,000·1/1e5 = 2.5 ms), so index 1 by the hash; its transfer to
    decode index 2 runs 12 → 13.5. B at 12.2 goes to decode index 3 (the cursor); index 1
    now sends A's transfer: its cost has max(n_out + 1, n_in + 1) = 2, 3.5 ms, against
    2.5 ms for index 0: B is prefilled on index 0. Had B come at 20 (the link idle again)
    the tie would send it to index 1."""
    busy = run([(10, 100, 2), (12.2, 100, 2)], 2, 2, keys=[0.25, 0.25], pair_route="transfer_aware")
    assert [rec["pd"]["prefill"] for rec in busy["records"]] == [1, 0]
    assert [rec["pd"]["decode"] for rec in busy["records"]] == [2, 3]
    idle = run([(10, 100, 2), (20, 100, 2)], 2, 2, keys=[0.25, 0.25], pair_route="transfer_aware")
    assert [rec["pd"]["prefill"] for rec in idle["records"]] == [1, 1]


@pytest.mark.parametrize("route, policy", [
    ("independent", "round_robin"),   # the fast tier's; the others about 10 s each with check=True
    pytest.param("independent", "least_tokens", marks=pytest.mark.slow),
    pytest.param("selective", "power_of_d", marks=pytest.mark.slow),
    pytest.param("transfer_aware", "least_kv", marks=pytest.mark.slow)])
def test_a_busy_pd_cluster_keeps_every_invariant(route, policy):
    """A generated workload at a rate that queues, through 2 prefill and 3 decode
    replicas with small KV pools (so allocations wait for blocks) and a slow link:
    check=True verifies the block accounting on every replica at every time (held,
    receiving and transferred blocks included); every cohort request has one outcome
    and, with a long drain, completes; every disaggregated one passed through
    prefill, transfer and decode in that order."""
    params = dict(warmup_s=0.5, measure_s=1.0, drain_s=60.0, kv_blocks=600, max_batched_tokens=2048,
                  chat_prompt_median=300, chat_prompt_max=2000, chat_output_median=20, chat_output_max=200,
                  p_long=0.0, prefix_tokens=256, prefix_groups=4, block_tokens=B_TOK, context_limit=8192,
                  prefill_replicas=2, decode_replicas=3, pair_route=route, threshold_tokens=200,
                  link_bandwidth_gb_s=0.5, kv_bytes_per_token=2000)
    wl = ref.generate_workload(3, 60.0, dict(ref.defaults(), **params), [])
    out = ref.simulate(wl, params, [1.0, 1.5, 1.0, 1.0, 2.0], [], policy, seed=3, check=True)
    assert out["arrivals"] > 40 and out["completed"] == out["arrivals"]
    pairs = [rec["pd"] for rec in out["records"] if rec["pd"] is not None]
    assert pairs and out["transfer_count"] > 0
    for x in pairs:
        assert x["routed"] <= x["prefill_admit"] < x["prefill_end"] <= x["transfer_start"] < x["transfer_end"]
        assert x["prefill"] < 2 <= x["decode"]


@pytest.mark.parametrize("how", ["decode replica crashes", "first-token deadline"])
def test_losing_the_decode_side_mid_transfer_leaves_the_prefill_blocks_leased(how):
    """One prefill, one decode replica; P = 100, O = 3 at 10, lease_ms = 5. As in the
    one-request case the transfer runs 12 → 13.5; at 13 the decode side is lost (its
    replica crashes, or the first-token deadline 10 + 3 passes): the attempt fails at
    13 (one attempt: failed for good), the transfer stops, the decode replica's 7 blocks
    go at 13, and the prefill replica keeps its 7 until 13 + 5 = 18. kv_occupancy over
    [10, 1010], 256 blocks a replica: (7 · (18 − 10) + 7 · (13 − 12)) / (1000 · 256) / 2
    = 63 / 512,000."""
    extra = (dict(events=[(13.0, "fail", 1, 0.0)]) if how == "decode replica crashes"
             else dict(ttft_timeout_ms=3.0))
    events = extra.pop("events", [])
    out = run([(10, 100, 3)], 1, 1, events=events, lease_ms=5.0, **extra)
    assert (out["failed"], out["completed"], out["transfer_count"]) == (1, 0, 0)
    assert out["kv_occupancy"] == pytest.approx(63 / 512000, rel=1e-12)
    sim = out["_sim"]
    assert [x[0] for x in sim.trace if x[1] == "fail"] == [13.0]
    assert not sim.pd_held and sim.replicas[0].count(ref.REFERENCED) == 0


def test_a_prefill_crash_mid_transfer_fails_the_attempt_and_its_retry_takes_another_pair():
    """Two prefill replicas (indices 0, 1), one decode (2); max_attempts = 2, backoff 20.
    The request (P = 100, O = 3, at 10) goes to 0 (round robin); prefill 10 → 12, transfer
    12 → 13.5. Replica 0 crashes at 13: the read fails, the attempt fails at 13 and the
    decode replica releases its blocks (uncomputed: free, no hit later). The retry at
    13 + 20 = 33 avoids 0 (down, and failed on): prefill on 1, 33 → 35; transfer of all
    100 tokens 35 → 36.5; the one-token step 36.5 → 37.51 (first token, TTFT 27.51);
    two decode steps: completion at 40.51."""
    out = run([(10, 100, 3)], 2, 1, events=[(13.0, "fail", 0, 0.0)], max_attempts=2, backoff_ms=20.0)
    (rec,) = out["records"]
    assert (rec["outcome"], rec["attempts"]) == ("completed", 2)
    assert rec["pd"]["prefill"] == 1 and rec["pd"]["decode_hit"] == 0
    assert rec["pd"]["transfer_start"] == 35.0 and rec["pd"]["transfer_end"] == 36.5
    assert rec["first_token"] == pytest.approx(37.51, rel=1e-14)
    assert rec["completion"] == pytest.approx(40.51, rel=1e-14)
    assert out["ttft_p50"] == pytest.approx(27.51, rel=1e-14)
    assert (out["retries"], out["transfer_count"]) == (1, 1)



def test_a_pd_cluster_with_crashes_deadlines_and_retries_keeps_every_invariant():
    """The busy cluster above with a prefill and a decode replica crashing mid-run (and
    recovering), a first-token deadline that fires on both sides and retries: check=True
    verifies the block accounting (held, leased, receiving, transferred) at every time,
    and every cohort request has exactly one outcome; attempts fail by crash and by
    deadline on either side, some requests complete and some fail for good."""
    params = dict(warmup_s=0.5, measure_s=1.0, drain_s=60.0, kv_blocks=600, max_batched_tokens=2048,
                  chat_prompt_median=300, chat_prompt_max=2000, chat_output_median=20, chat_output_max=200,
                  p_long=0.0, prefix_tokens=256, prefix_groups=4, block_tokens=B_TOK, context_limit=8192,
                  prefill_replicas=2, decode_replicas=3, link_bandwidth_gb_s=0.5, kv_bytes_per_token=2000,
                  max_attempts=3, backoff_ms=5.0, ttft_timeout_ms=120.0, lease_ms=50.0)
    events = [(700.0, "fail", 0, 0.0), (760.0, "fail", 3, 0.0), (900.0, "recover", 0, 0.0),
              (1000.0, "recover", 3, 0.0)]
    wl = ref.generate_workload(3, 60.0, dict(ref.defaults(), **params), events)
    out = ref.simulate(wl, params, [1.0, 1.5, 1.0, 1.0, 2.0], events, "least_tokens", seed=3, check=True,
                       _return_sim=True)
    assert out["arrivals"] == sum(out[k] for k in ("completed", "failed", "rejected", "shed", "unfinished"))
    sim = out["_sim"]
    kinds = {(x[2], sim.role[x[3]]) for x in sim.trace if x[1] == "fail"}
    assert kinds == {("crash", "prefill"), ("crash", "decode"), ("ttft_timeout", "prefill"),
                     ("ttft_timeout", "decode")}
    assert out["retries"] > 0 and 0 < out["completed"] < out["arrivals"]
