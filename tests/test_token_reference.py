"""Tests of the naive reference of the batching model (tests/token_reference.py).

Every expected value here is worked by hand from /work/shared/design/token-model.md
(or copied from the reference rows of token-workload-vectors.md), never from a run of
the reference itself.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import token_reference as tr  # noqa: E402
from registered import POLICIES  # noqa: E402

TRACE = Path("/work/shared/traces/AzureLLMInferenceTrace_conv.csv")

C0, CPF, CAT, CDEC, CKV = 6.5, 0.0198, 8.4e-7, 0.10, 5.4e-5


def step(U=0, Q=0.0, n=0, K=0, f=1.0):
    """token-model.md §2.3: d = f (c_0 + c_pf U + c_attn Q + c_dec n + c_kv K), left to right."""
    return f * ((((C0 + CPF * U) + CAT * Q) + CDEC * n) + CKV * K)


def params(**kw):
    p = tr.defaults()
    p.update(warmup_s=0, measure_s=10)
    p.update(kw)
    return p


def unique_ids(k, P, b):
    return [2**40 + k * 2**16 + j for j in range(P // b)]


def group_ids(g, P, k, b=16, L=1536):
    """Ids of request k of prefix group g (token-model.md §1.1)."""
    return [g * 2**20 + j for j in range(L // b)] + [2**40 + k * 2**16 + j for j in range(L // b, P // b)]


def make(rows, b=16):
    """rows: (t, P, O, h[, ids]) in arrival order."""
    wl = tr.Workload(t=[], prompt=[], output=[], key=[], blocks=[])
    for k, row in enumerate(rows):
        t, P, O, h = row[:4]
        ids = row[4] if len(row) > 4 else unique_ids(k, P, b)
        wl.t.append(float(t))
        wl.prompt.append(P)
        wl.output.append(O)
        wl.key.append(h)
        wl.blocks.append(list(ids))
    return wl


def events_of(trace, what):
    return [e for e in trace if e[1] == what]


# ------------------------------------------------------------------------------------
# (i) workload: token-workload-vectors.md
# ------------------------------------------------------------------------------------

TABLE_A = """
0 17.926860419027307 chat 2 3146 107 0.8277025938204418 196 2097152 1099511627971
1 37.86699010201191 chat 11 1767 86 0.303194829291645 110 11534336 1099511693421
2 41.464953122638484 chat none 954 251 0.48519097443163506 59 1099511758848 1099511758906
3 122.99466182269609 chat 27 2364 438 0.5160685855478787 147 28311552 1099511824530
4 147.4149123823114 chat 3 4470 65 0.4593358828854037 279 3145728 1099511890198
5 173.04859810035836 chat none 926 488 0.510888884466533 57 1099511955456 1099511955512
6 177.050529326476 chat 12 2907 29 0.19132392605720028 181 12582912 1099512021172
7 225.36523189889914 chat 0 1699 183 0.6457208955749478 106 0 1099512086633
8 270.49687105698547 chat none 669 75 0.15052483042117748 41 1099512152064 1099512152104
9 326.7741837902247 chat none 3277 157 0.8268253295567211 204 1099512217600 1099512217803
10 353.7705699111736 chat none 1444 674 0.8254878133935558 90 1099512283136 1099512283225
11 365.52654119374614 chat 0 3356 510 0.2624947127501015 209 0 1099512348880
"""

TABLE_B = """
0 39.2433545213821 chat 17 2809 706 0.005265304565574724 175 17825792 1099511627950
1 103.03900940127022 chat 2 2409 295 0.5045482589579533 150 2097152 1099511693461
2 319.1886441856751 chat 0 5036 116 0.6125396042730308 314 0 1099511759161
3 320.6419393191035 chat 3 3935 73 0.49687343539350426 245 3145728 1099511824628
4 321.1165043907377 long 0 16705 4807 0.8300477298017456 1044 0 1099511890963
5 333.5736050568028 chat 9 3388 48 0.09149560506304566 211 9437184 1099511955666
6 361.9261544672825 chat 1 2035 74 0.32303634625820665 127 1048576 1099512021118
7 429.7125037649319 chat 5 1657 29 0.6764502438127883 103 5242880 1099512086630
8 452.92764035751975 long none 18202 2831 0.6717651626112849 1137 1099512152064 1099512153200
9 511.93701182062597 chat none 1309 82 0.5697191478592772 81 1099512217600 1099512217680
10 514.7872387197939 chat 5 3156 404 0.5696942744738079 197 5242880 1099512283332
11 521.8439477408299 long 3 14788 1779 0.3221633097802251 924 3145728 1099512349595
"""


def check_rows(wl, table):
    for line in table.strip().splitlines():
        k, t, cls, g, P, O, h, nids, first, last = line.split()
        k = int(k)
        assert wl.t[k] == pytest.approx(float(t), rel=1e-9, abs=0)
        assert wl.long[k] == (cls == "long")
        assert wl.group[k] == (None if g == "none" else int(g))
        assert wl.prompt[k] == int(P) and wl.output[k] == int(O)
        assert wl.key[k] == pytest.approx(float(h), rel=1e-9, abs=0)
        assert len(wl.blocks[k]) == int(nids) == wl.prompt[k] // 16
        assert wl.blocks[k][0] == int(first) and wl.blocks[k][-1] == int(last)
        g_val = wl.group[k]
        for j, bid in enumerate(wl.blocks[k]):
            if g_val is not None and j < 96:
                assert bid == g_val * 2**20 + j
            else:
                assert bid == 2**40 + k * 2**16 + j


def test_workload_vectors_a():
    wl = tr.generate_workload(1, 40.0, tr.defaults(), [])
    assert len(wl.t) == 2478
    assert sum(wl.prompt) == 6736853 and sum(wl.output) == 638397
    assert sum(wl.long) == 43
    assert sum(g is not None for g in wl.group) == 1480
    assert sum(1 for t in wl.t if 10000.0 <= t < 60000.0) == 2063
    assert wl.t[-1] == pytest.approx(59959.233053618176, rel=1e-9, abs=0)
    assert wl.t == sorted(wl.t)
    check_rows(wl, TABLE_A)


def test_workload_vectors_b():
    p = tr.defaults()
    p.update(p_long=0.3, prefix_probability=0.9, warmup_s=1, measure_s=2)
    wl = tr.generate_workload(7, 25.0, p, [(500.0, "rate_multiplier", -1, 3.0)])
    assert len(wl.t) == 189
    assert sum(1 for t in wl.t if t < 500.0) == 9
    assert sum(wl.prompt) == 1163887 and sum(wl.output) == 156981
    assert wl.t[-1] == pytest.approx(2990.5878170158767, rel=1e-9, abs=0)
    check_rows(wl, TABLE_B)


def azure_lengths(n=500):
    with TRACE.open() as fh:
        rows = list(csv.DictReader(fh))[:n]
    return [int(r["ContextTokens"]) for r in rows], [int(r["GeneratedTokens"]) for r in rows]


@pytest.mark.skipif(not TRACE.exists(), reason="shared Azure trace not present")
def test_workload_vectors_c_empirical_lengths():
    P_list, O_list = azure_lengths()
    wl = tr.generate_workload(3, 30.0, tr.defaults(), [], lengths=(P_list, O_list))
    assert len(wl.t) == 1765
    assert sum(wl.prompt) == 1611091 and sum(wl.output) == 456094
    rows = [(0, 2.984697926309827, 79, 1065, 409, 66), (1, 47.199066914351825, 478, 1013, 363, 63),
            (2, 58.34427046278988, 156, 1112, 385, 69), (3, 132.44268214202057, 45, 91, 16, 5),
            (4, 168.45206649511445, 109, 1350, 146, 84), (5, 227.4951204216911, 51, 200, 217, 12),
            (6, 290.68101240098565, 137, 975, 416, 60), (7, 318.18441342841055, 283, 2, 93, 0)]
    for k, t, j, P, O, nids in rows:
        assert wl.t[k] == pytest.approx(t, rel=1e-9, abs=0)
        assert (wl.row[k], wl.prompt[k], wl.output[k], len(wl.blocks[k])) == (j, P, O, nids)
        assert wl.group[k] is None
        assert all(bid == 2**40 + k * 2**16 + q for q, bid in enumerate(wl.blocks[k]))
    grouped = [(41, 1388.1925003497433, 122, 4079, 27, 6, 254, 6291456, 1099514315005),
               (47, 1606.6571806814502, 391, 4078, 49, 0, 254, 0, 1099514708221),
               (61, 1884.1991284537094, 30, 4081, 74, 0, 255, 0, 1099515625726)]
    for k, t, j, P, O, g, nids, first, last in grouped:
        assert wl.t[k] == pytest.approx(t, rel=1e-9, abs=0)
        assert (wl.row[k], wl.prompt[k], wl.output[k], wl.group[k], len(wl.blocks[k])) == (j, P, O, g, nids)
        assert wl.blocks[k][0] == first and wl.blocks[k][-1] == last
        assert wl.blocks[k][:96] == [g * 2**20 + q for q in range(96)]
    assert [k for k in range(62) if wl.group[k] is not None] == [41, 47, 61]


def test_workload_rows_do_not_depend_on_horizon():
    p = tr.defaults()
    short = tr.generate_workload(5, 40.0, dict(p, measure_s=5), [])
    long = tr.generate_workload(5, 40.0, p, [])
    n = len(short.t)
    assert n > 0 and long.t[:n] == short.t and long.prompt[:n] == short.prompt
    assert long.blocks[:n] == short.blocks


# ------------------------------------------------------------------------------------
# (ii) hand-computed cases (§2)
# ------------------------------------------------------------------------------------

@pytest.mark.parametrize("factor", [1.0, 2.0])
def test_single_request_chunked(factor):
    """P = 20000 > 8192: ceil(20000/8192) = 3 prefill chunks (8192, 8192, 3616), then
    O - 1 = 2 decode iterations."""
    p = params(kv_blocks=1300)
    out = tr.simulate(make([(100.0, 20000, 3, 0.5)]), p, [factor], [], "round_robin", 1, check=True)
    d1 = step(U=8192, Q=8192 * (0 + 0 + 8192 / 2), f=factor)
    d2 = step(U=8192, Q=8192 * (0 + 8192 + 8192 / 2), f=factor)
    d3 = step(U=3616, Q=3616 * (0 + 16384 + 3616 / 2), f=factor)
    d4 = step(n=1, K=20001, f=factor)   # 20000 % 16 == 0: the 1251st block is taken
    d5 = step(n=1, K=20002, f=factor)
    t_first = ((100.0 + d1) + d2) + d3
    t_done = (t_first + d4) + d5
    rec = out["records"][0]
    assert rec["outcome"] == "completed" and rec["attempts"] == 1
    assert rec["ttft"] == pytest.approx(t_first - 100.0, rel=1e-12)
    assert rec["completion"] == pytest.approx(t_done, rel=1e-12)
    assert out["ttft_p50"] == pytest.approx(t_first - 100.0, rel=1e-12)
    assert out["tpot_p99"] == pytest.approx((t_done - t_first) / 2, rel=1e-12)
    assert out["e2e_mean"] == pytest.approx(t_done - 100.0, rel=1e-12)
    assert (out["arrivals"], out["completed"], out["attempts"], out["retries"]) == (1, 1, 1, 0)
    assert out["token_throughput"] == pytest.approx(3 / 10.0)
    assert out["throughput"] == pytest.approx(1 / 10.0)
    assert out["replica_tokens"] == [3] and out["replica_completed"] == [1] and out["assigned"] == [1]
    assert out["batch_mean"] == pytest.approx(1.0)
    assert out["prefix_hit_rate"] == 0.0
    # referenced blocks: 1250 from admission to the last prefill end, 1251 while decoding;
    # then the 1250 id'd blocks are cached (not referenced) and the anonymous one is free.
    area = 1250 * (t_first - 100.0) + 1251 * (t_done - t_first)
    assert out["kv_occupancy"] == pytest.approx(area / 10000.0 / 1300, rel=1e-9)
    good = (t_first - 100.0) <= 1000 and (t_done - t_first) / 2 <= 50
    assert out["attainment"] == (1.0 if good else 0.0)


def test_single_request_unchunked():
    p = params(kv_blocks=1300, chunked_prefill=False)
    out = tr.simulate(make([(100.0, 20000, 3, 0.5)]), p, [1.0], [], "round_robin", 1, check=True)
    d1 = step(U=20000, Q=20000 * (0 + 0 + 20000 / 2))
    t_first = 100.0 + d1
    t_done = (t_first + step(n=1, K=20001)) + step(n=1, K=20002)
    rec = out["records"][0]
    assert rec["ttft"] == pytest.approx(d1, rel=1e-12)
    assert rec["completion"] == pytest.approx(t_done, rel=1e-12)


def test_single_request_output_one():
    """O = 1: the prefill iteration emits the only token and completes the request."""
    out = tr.simulate(make([(5.0, 100, 1, 0.5)]), params(kv_blocks=64), [1.0], [], "round_robin", 1,
                      check=True)
    d1 = step(U=100, Q=100 * 50)
    assert out["records"][0]["completion"] == pytest.approx(5.0 + d1, rel=1e-12)
    assert math.isnan(out["tpot_p50"])


def test_prefix_hits_shared_and_cached():
    """Requests of prefix group 0 (L = 1536 tokens, 96 ids).

    r0 (P = 1636, 102 ids) arrives at 0 and is computed whole in iteration 1.
    r1 (P = 1586, 99 ids) arrives at 1.0 ms, while r0 runs: at the start of iteration 2
    the 96 group blocks are referenced by r0, so hit = 96 (cap floor(1585/16) = 99),
    m = 1536, u = 50.  Iteration 2 has r0 decoding (kv 1637) and r1's chunk of 50.
    r2 (P = 1536 exactly, 96 ids, all group ids) arrives at 1000 ms when both are done:
    its ids are cached, hit capped at floor(1535/16) = 95, m = 1520, u = 16.
    """
    b = 16
    wl = make([(0.0, 1636, 3, 0.5, group_ids(0, 1636, 0)),
               (1.0, 1586, 2, 0.5, group_ids(0, 1586, 1)),
               (1000.0, 1536, 1, 0.5, group_ids(0, 1536, 2))])
    out = tr.simulate(wl, params(kv_blocks=400), [1.0], [], "round_robin", 1, check=True,
                      _return_sim=True)
    admits = events_of(out["_sim"].trace, "admit")
    assert [(e[3], e[4], e[5]) for e in admits] == [(0, 0, 1636), (1, 96, 50), (2, 95, 16)]
    d1 = step(U=1636, Q=1636 * (0 + 0 + 1636 / 2))
    d2 = step(U=50, Q=50 * (1536 + 0 + 50 / 2), n=1, K=1637)
    rec = out["records"]
    assert rec[0]["ttft"] == pytest.approx(d1, rel=1e-12)
    assert rec[1]["ttft"] == pytest.approx((d1 + d2) - 1.0, rel=1e-12)
    d_r2 = step(U=16, Q=16 * (1520 + 0 + 16 / 2))
    assert rec[2]["completion"] == pytest.approx(1000.0 + d_r2, rel=1e-12)
    assert out["prefix_hit_rate"] == pytest.approx((0 + 1536 + 1520) / (1636 + 1586 + 1536), rel=1e-12)
    # 102 + 4 (3 new ids, 1 anonymous) blocks for r0 and r1, r2 takes none
    sim = out["_sim"]
    assert len(sim.replicas[0].resident) == 102 + 3
    assert b == 16


def test_preemption_victim_is_most_recent_and_goes_to_the_front():
    """b = 4, kv_blocks = 6, max_batch = 2.  A (P 8, O 9), B (P 8, O 9), C (P 4, O 2) arrive at 0.

    Iteration 1 admits A and B (2 blocks each; C waits: max_batch).  Iteration 2: both
    grow from kv 8 to 9 and take the last 2 free blocks.  Iteration j >= 2 grows kv from
    6 + j; at j = 6 A needs a 4th block, none is free or cached: the most recently
    admitted, B, is preempted (its 2 id'd blocks cached, its anonymous block free) and A
    takes the free one.  B (g = 5) goes to the front of the waiting queue, before C; no
    admission in that iteration.  In iteration 7 B (hit 2, cap floor(12/4) = 3, m = 8,
    u = 5, 4 blocks: 2 referenced + 2 new) cannot get 2 blocks (A holds 4, B's 2 are
    cached and about to be referenced): FIFO, C waits too.  A completes at the end of
    iteration 9 (g = 9); iteration 10 admits B, then C (u = 4, 1 block: evicts A's cached
    block of largest position; C's growth in iteration 11 evicts A's other block).
    """
    wl = make([(0.0, 8, 9, 0.5), (0.0, 8, 9, 0.5), (0.0, 4, 2, 0.5)], b=4)
    p = params(block_tokens=4, kv_blocks=6, max_batch=2)
    out = tr.simulate(wl, p, [1.0], [], "round_robin", 1, check=True, _return_sim=True)
    trace = out["_sim"].trace
    pre = events_of(trace, "preempt")
    assert [e[3] for e in pre] == [1]
    assert out["preemptions"] == 1
    its = events_of(trace, "iteration")
    assert pre[0][0] == its[5][0]                  # at the start of iteration 6
    admits = events_of(trace, "admit")
    assert [(e[3], e[4], e[5]) for e in admits] == [(0, 0, 8), (1, 0, 8), (1, 2, 5), (2, 0, 4)]
    assert admits[2][0] == its[9][0] == admits[3][0]   # B then C, in iteration 10
    # durations by hand
    d = [step(U=16, Q=8 * 4 + 8 * 4)]
    d += [step(n=2, K=2 * (7 + j)) for j in range(2, 6)]      # iterations 2..5
    d += [step(n=1, K=7 + j) for j in range(6, 10)]           # iterations 6..9: A alone
    t = 0.0
    for x in d:
        t = t + x
    assert out["records"][0]["completion"] == pytest.approx(t, rel=1e-12)
    assert its[9][0] == pytest.approx(t, rel=1e-12)
    # C's admission (iteration 10) evicts A's cached block of largest position; C's growth
    # in iteration 11 (kv 4 -> 5, 4 % 4 == 0) evicts A's other one
    evicted = events_of(trace, "evict")
    assert [(e[3], e[4]) for e in evicted] == [(2**40 + 1, 1), (2**40, 0)]
    assert evicted[0][0] == its[9][0] and evicted[1][0] == its[10][0]
    # B keeps its 5 tokens and its first-token time across preemption
    assert out["records"][1]["ttft"] == pytest.approx(d[0], rel=1e-12)


def test_eviction_order_equal_last_use():
    """X (P 8: ids x0, x1) and Y (P 12: y0, y1, y2), O = 1, complete in the same iteration:
    all 5 blocks cached with one last_use.  Z (P 16, 4 new blocks) evicts the largest
    positions first, then the smallest id: y2, x1, y1, x0 (y0 stays)."""
    b = 4
    x = unique_ids(0, 8, b)
    y = unique_ids(1, 12, b)
    wl = make([(0.0, 8, 1, 0.5), (0.0, 12, 1, 0.5), (100.0, 16, 1, 0.5)], b=b)
    out = tr.simulate(wl, params(block_tokens=b, kv_blocks=5), [1.0], [], "round_robin", 1,
                      check=True, _return_sim=True)
    evicted = [(e[3], e[4]) for e in events_of(out["_sim"].trace, "evict")]
    assert evicted == [(y[2], 2), (x[1], 1), (y[1], 1), (x[0], 0)]
    assert list(out["_sim"].replicas[0].resident) == [y[0]] + unique_ids(2, 16, b)


def test_unchunked_admits_first_head_even_over_budget_and_stops_on_budget():
    """Unchunked, max_batched_tokens = 100: r0 (P 150) is admitted alone (first head);
    r1 (P 40) waits until the next iteration: u = 40 <= B = 100 - 1."""
    wl = make([(0.0, 150, 3, 0.5), (0.0, 40, 2, 0.5)])
    p = params(kv_blocks=64, chunked_prefill=False, max_batched_tokens=100)
    out = tr.simulate(wl, p, [1.0], [], "round_robin", 1, check=True, _return_sim=True)
    its = events_of(out["_sim"].trace, "iteration")
    d1 = step(U=150, Q=150 * 75)
    d2 = step(U=40, Q=40 * 20, n=1, K=151)
    assert its[0][3] == pytest.approx(d1) and its[1][3] == pytest.approx(d1 + d2)
    assert out["records"][1]["ttft"] == pytest.approx(d1 + d2, rel=1e-12)


def test_chunked_budget_continuing_prefill_first():
    """Chunked, max_batched_tokens = 100: r0 (P 150) computes 100 then 50; r1 (P 80)
    arrives with r0 and gets the rest of iteration 2's budget: 100 - 50 = 50 tokens,
    then 30 in iteration 3 (r0 decoding there, budget 99)."""
    wl = make([(0.0, 150, 3, 0.5), (0.0, 80, 2, 0.5)])
    p = params(kv_blocks=64, max_batched_tokens=100)
    out = tr.simulate(wl, p, [1.0], [], "round_robin", 1, check=True, _return_sim=True)
    d1 = step(U=100, Q=100 * 50)
    d2 = step(U=100, Q=50 * (100 + 25) + 50 * (0 + 0 + 25))
    d3 = step(U=30, Q=30 * (50 + 15), n=1, K=151)
    rec = out["records"]
    assert rec[0]["ttft"] == pytest.approx(d1 + d2, rel=1e-12)
    assert rec[1]["ttft"] == pytest.approx((d1 + d2) + d3, rel=1e-12)


# ------------------------------------------------------------------------------------
# policies (§5), fresh signals
# ------------------------------------------------------------------------------------

def frac(x):
    return x - math.floor(x)


@pytest.mark.parametrize("h", [0.5, 0.2, 0.9])
def test_tie_rule_hash(h):
    """Idle replicas tie on every score; m = 0 everywhere, so the smallest
    frac(h + 0.618...(i + 1)) wins."""
    expect = min(range(3), key=lambda i: frac(h + 0.6180339887498949 * (i + 1)))
    for pol in ("least_requests", "least_tokens", "least_kv", "least_cost"):
        out = tr.simulate(make([(0.0, 100, 2, h)]), params(kv_blocks=64), [1.0] * 3, [], pol, 1)
        assert out["assigned"] == [1 if i == expect else 0 for i in range(3)], pol


def test_round_robin_and_least_requests():
    rows = [(float(k), 100, 50, 0.5) for k in range(6)]
    out = tr.simulate(make(rows), params(kv_blocks=64), [1.0] * 3, [], "round_robin", 1, check=True)
    assert out["assigned"] == [2, 2, 2]
    out = tr.simulate(make(rows), params(kv_blocks=64), [1.0] * 3, [], "least_requests", 1, check=True)
    assert out["assigned"] == [2, 2, 2]


def router_uniforms(seed, n):
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed).spawn(1)[0])).random(n)


def test_random_uses_router_stream():
    rows = [(float(k), 100, 2, 0.5) for k in range(20)]
    out = tr.simulate(make(rows), params(kv_blocks=64), [1.0] * 3, [], "random", 11, check=True)
    u = router_uniforms(11, 20)
    expect = [0, 0, 0]
    for x in u:
        expect[int(math.floor(x * 3))] += 1
    assert out["assigned"] == expect


def test_prefix_affinity_follows_the_cache():
    """r0 (group 3) lands by the empty-tree rule; r1 of the same group then has
    m = 1536 > 0.3 * P on r0's replica and follows it; r2 (no prefix) goes to the
    replica with the fewest resident ids (not r0's)."""
    h = 0.5
    first = min(range(3), key=lambda i: frac(h + 0.6180339887498949 * (i + 1)))
    wl = make([(0.0, 2000, 50, h, group_ids(3, 2000, 0)), (1.0, 1800, 5, 0.9, group_ids(3, 1800, 1)),
               (2.0, 1000, 5, h)])
    out = tr.simulate(wl, params(kv_blocks=512), [1.0] * 3, [], "prefix_affinity", 1, check=True)
    assigned = out["assigned"]
    assert assigned[first] == 2
    assert sum(assigned) == 3


def test_power_of_d_partial_shuffle():
    """Idle replicas: power_of_d picks among the first two of the partial shuffle of
    E = [0, 1, 2] by the tie rule (all scores equal); two uniforms per decision."""
    h = 0.3
    u = router_uniforms(4, 2)
    e = [0, 1, 2]
    for j in range(2):
        k = j + int(math.floor(u[j] * (3 - j)))
        e[j], e[k] = e[k], e[j]
    expect = min(e[:2], key=lambda i: frac(h + 0.6180339887498949 * (i + 1)))
    out = tr.simulate(make([(0.0, 100, 2, h)]), params(kv_blocks=64), [1.0] * 3, [], "power_of_d", 4,
                      _return_sim=True)
    assert out["assigned"][expect] == 1
    assert out["_sim"].uniforms_drawn == 2


def test_waiting_cap_sheds():
    """waiting_cap = 1, one replica: r0 is admitted at 0 (phase 7); r1 and r2 arrive at
    1 ms: r1 waits (max_batch 1), r2 finds the queue full and is shed."""
    wl = make([(0.0, 100, 50, 0.5), (1.0, 100, 2, 0.5), (1.0, 100, 2, 0.5)])
    p = params(kv_blocks=64, waiting_cap=1, max_batch=1)
    out = tr.simulate(wl, p, [1.0], [], "least_requests", 1, check=True)
    assert [r["outcome"] for r in out["records"]] == ["completed", "completed", "shed"]
    assert out["shed"] == 1 and out["arrivals"] == 3


# ------------------------------------------------------------------------------------
# (iii) invariants on small random clusters
# ------------------------------------------------------------------------------------

SMALL = dict(warmup_s=0.5, measure_s=1.5, kv_blocks=160, max_batch=6, waiting_cap=8,
             max_batched_tokens=1024, p_long=0.0, chat_prompt_median=300, chat_prompt_max=1200,
             chat_output_median=20, chat_output_max=200, prefix_tokens=256, prefix_groups=4,
             context_limit=2048)


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
def test_invariants_small_clusters(policy):
    p = tr.defaults()
    p.update(SMALL)
    wl = tr.generate_workload(2, 60.0, p, [])
    out = tr.simulate(wl, p, [1.0, 1.5, 0.8], [], policy, 3, check=True)
    n = out["arrivals"]
    assert n == out["completed"] + out["failed"] + out["rejected"] + out["shed"] + out["unfinished"]
    assert out["completed"] > 0


def test_invariants_unchunked_tight_pool():
    p = tr.defaults()
    p.update(SMALL, chunked_prefill=False, kv_blocks=130, max_batched_tokens=600)
    wl = tr.generate_workload(9, 60.0, p, [])
    out = tr.simulate(wl, p, [1.0, 2.0], [], "least_tokens", 3, check=True)
    assert out["completed"] > 0


try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:   # pragma: no cover
    given = None

if given is not None:
    @pytest.mark.slow
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(seed=st.integers(0, 10_000), n_rep=st.integers(1, 3),
           b=st.sampled_from([1, 2, 4, 16]), chunked=st.booleans(),
           budget=st.integers(1, 600), max_batch=st.integers(1, 5), cap=st.integers(1, 6),
           policy=st.sampled_from(POLICIES),
           spare=st.integers(0, 40), decode_heavy=st.booleans())
    def test_property_invariants(seed, n_rep, b, chunked, budget, max_batch, cap, policy, spare,
                                 decode_heavy):
        p = tr.defaults()
        p.update(warmup_s=0.1, measure_s=0.4, p_long=0.0, chat_prompt_min=1, prefix_tokens=32,
                 prefix_groups=3, context_limit=400, block_tokens=b, chunked_prefill=chunked,
                 max_batched_tokens=budget, max_batch=max_batch, waiting_cap=cap)
        if decode_heavy:   # long outputs on a tight pool: growth preempts
            p.update(chat_prompt_median=20, chat_prompt_max=100, chat_output_median=40, chat_output_max=100)
        else:
            p.update(chat_prompt_median=60, chat_prompt_max=200, chat_output_median=6, chat_output_max=30)
        largest = 32 + p["chat_prompt_max"] + p["chat_output_max"]
        p["kv_blocks"] = -(-largest // b) + spare
        wl = tr.generate_workload(seed, 80.0, p, [])
        out = tr.simulate(wl, p, [1.0 + 0.5 * i for i in range(n_rep)], [], policy, seed, check=True)
        assert out["arrivals"] == sum(out[k] for k in ("completed", "failed", "rejected", "shed",
                                                       "unfinished"))


# ====================================================================================
# Stage 2 (issue 11): periodic signals, slow start, failures, retries, containment
# ====================================================================================

def routes(out):
    """(time, request, replica, attempt number) of every placement, in order."""
    return [(e[0], e[2], e[3], e[4]) for e in events_of(out["_sim"].trace, "route")]


def long_rows(times, h=0.5, P=100, O=100):
    return [(t, P, O, h) for t in times]


TIMES = [10.0, 20.0, 30.0, 40.0, 60.0, 70.0, 80.0]


def test_periodic_views_are_constant_between_publications():
    """N = 2, period 50: replica 0 publishes at 25, 75, ...; replica 1 at 50, 100, ...
    With h = 0.5 ties go to replica 0 (frac 0.118 < 0.736).  Nothing completes before
    80 ms (O = 100), so by hand:
      10, 20: view o = (0, 0) (nothing published yet)   -> 0, 0
      25: replica 0 publishes o = 2
      30, 40: (2, 0)                                     -> 1, 1
      50: replica 1 publishes o = 2
      60, 70: (2, 2)                                     -> 0, 0
      75: replica 0 publishes o = 4
      80: (4, 2)                                         -> 1
    tau_i = o_i (100 + max(256, g)) = 356 o_i."""
    p = params(kv_blocks=200, signal_mode="periodic", period_ms=50)
    out = tr.simulate(make(long_rows(TIMES)), p, [1.0, 1.0], [], "least_requests", 1, check=True,
                      _return_sim=True)
    assert [x[2] for x in routes(out)] == [0, 0, 1, 1, 0, 0, 1]
    views = [e[3] for e in events_of(out["_sim"].trace, "view")]
    seen_o = [(v[0][0], v[1][0]) for v in views]
    assert seen_o == [(0, 0), (0, 0), (2, 0), (2, 0), (2, 2), (2, 2), (4, 2)]
    assert [(v[0][1], v[1][1]) for v in views] == [(356 * a, 356 * b) for a, b in seen_o]
    pubs = [(e[0], e[2]) for e in events_of(out["_sim"].trace, "publish") if e[0] <= 100]
    assert pubs == [(25.0, 0), (50.0, 1), (75.0, 0), (100.0, 1)]


def test_periodic_local_and_zero_period():
    """periodic_local adds the router's own decisions since the last publication:
      10: (0,0) -> 0;  20: (0+1, 0) -> 1;  25: replica 0 publishes 1
      30: (1, 0+1) -> 0;  40: (1+1, 1) -> 1;  50: replica 1 publishes 2
      60: (1+1, 2) -> 0;  70: (1+2, 2) -> 1;  75: replica 0 publishes 3
      80: (3, 2+1) -> 0.   period_ms = 0 is fresh: the same alternation."""
    expect = [0, 1, 0, 1, 0, 1, 0]
    p = params(kv_blocks=200, signal_mode="periodic_local", period_ms=50)
    out = tr.simulate(make(long_rows(TIMES)), p, [1.0, 1.0], [], "least_requests", 1, check=True,
                      _return_sim=True)
    assert [x[2] for x in routes(out)] == expect
    seen_o = [(v[0][0], v[1][0]) for v in (e[3] for e in events_of(out["_sim"].trace, "view"))]
    assert seen_o == [(0, 0), (1, 0), (1, 1), (2, 1), (2, 2), (3, 2), (3, 3)]
    for mode in ("periodic", "periodic_local", "fresh"):
        p = params(kv_blocks=200, signal_mode=mode, period_ms=0)
        out = tr.simulate(make(long_rows(TIMES)), p, [1.0, 1.0], [], "least_requests", 1,
                          _return_sim=True)
        assert [x[2] for x in routes(out)] == expect


def test_black_hole_attracts_and_breaker_ejects_and_readmits():
    """Replica 1 (of 3) is a black hole from t = 0; requests every 1 ms with h = 0.9
    (hash order 1, 0, 2); least_requests; breaker consecutive = 5, eject 50 ms.
    By hand (o seen at each routing, a black-holed attempt counts until it fails 2 ms later):
      t=1 (0,0,0)->1   t=2 (0,1,0)->0   t=3 fail#1, (1,0,0)->1   t=4 (1,1,0)->2
      t=5 fail#2 (1,0,1)->1   t=6 (1,1,1)->1   t=7 fail#3 ->1   t=8 fail#4 ->1
      t=9 fail#5: ejected until 59; (1,-,1) -> 0   t=10 (2,-,1) -> 2
    6 of the first 8 requests went to the black hole.  Re-admitted at 59 (count reset), it
    takes 59..64 (o = 0..2 against dozens) and its 5th failure at 65 ejects it for
    2 x 50 ms, until 165 (re-admitted then, before the 200 ms horizon)."""
    rows = long_rows([float(t) for t in range(1, 71)], h=0.9, P=16, O=2000)
    p = params(kv_blocks=200, measure_s=0.2, breaker_consecutive=5, breaker_eject_ms=50, drain_s=0)
    out = tr.simulate(make(rows), p, [1.0] * 3, [(0.0, "fail_fast", 1, 0.0)], "least_requests", 1,
                      check=True, _return_sim=True)
    rt = routes(out)
    assert [x[2] for x in rt[:10]] == [1, 0, 1, 2, 1, 1, 1, 1, 0, 2]
    assert sum(1 for x in rt[:8] if x[2] == 1) / 8 > 1 / 3        # more than 1/N before ejection
    trace = out["_sim"].trace
    assert [(e[0], e[3], e[4]) for e in events_of(trace, "eject")] == [(9.0, 1, 59.0), (65.0, 1, 165.0)]
    assert [(e[0], e[3]) for e in events_of(trace, "readmit")] == [(59.0, 1), (165.0, 1)]
    to_hole = [x[0] for x in rt if x[2] == 1]
    assert to_hole == [1.0, 3.0, 5.0, 6.0, 7.0, 8.0, 59.0, 60.0, 61.0, 62.0, 63.0, 64.0]
    assert out["breaker_ejections"] == 2
    assert out["assigned"][1] == 12 and sum(out["assigned"]) == 70
    # drain_s = 0: the 58 others (O = 2000) are unfinished at the horizon; with the default
    # drain (600 s) they finish after it (the window counts stay)
    assert (out["failed"], out["completed"], out["unfinished"], out["attempts"]) == (12, 0, 58, 70)
    out = tr.simulate(make(rows), dict(p, drain_s=600), [1.0] * 3, [(0.0, "fail_fast", 1, 0.0)],
                      "least_requests", 1)
    assert (out["failed"], out["completed"], out["unfinished"], out["attempts"]) == (12, 58, 0, 70)
    assert out["breaker_ejections"] == 2 and out["assigned"][1] == 12 and out["throughput"] == 0.0


def test_breaker_max_ejected_fraction():
    """Two black holes of 3 replicas, consecutive = 1, max(1, floor(0.1 * 3)) = 1: only
    one of them can be ejected at a time."""
    rows = long_rows([float(t) for t in range(1, 21)], h=0.9, P=16, O=2000)
    p = params(kv_blocks=200, measure_s=0.1, breaker_consecutive=1, breaker_eject_ms=1000)
    ev = [(0.0, "fail_fast", 1, 0.0), (0.0, "fail_fast", 2, 0.0)]
    out = tr.simulate(make(rows), p, [1.0] * 3, ev, "least_requests", 1, check=True, _return_sim=True)
    ejects = events_of(out["_sim"].trace, "eject")
    assert len(ejects) == 1 and out["breaker_ejections"] == 1


@pytest.mark.parametrize("max_attempts", [3, 4])
def test_retries_follow_the_backoff_and_count_once(max_attempts):
    """Both replicas are black holes (fail_fast_ms = 2, backoff 20): a request arriving at
    10 fails at 12, 34, 76, 158; its attempts are routed at 10, 12 + 20 = 32,
    34 + 40 = 74, 76 + 80 = 156.  Attempt 2 avoids the replica attempt 1 failed on.
    After max_attempts failures it is counted once, as failed."""
    ev = [(0.0, "fail_fast", 0, 0.0), (0.0, "fail_fast", 1, 0.0)]
    p = params(kv_blocks=64, max_attempts=max_attempts, measure_s=1)
    out = tr.simulate(make([(10.0, 100, 5, 0.5)]), p, [1.0, 1.0], ev, "round_robin", 1, check=True,
                      _return_sim=True)
    rt = routes(out)
    assert [x[0] for x in rt] == [10.0, 32.0, 74.0, 156.0][:max_attempts]
    assert [x[3] for x in rt] == list(range(1, max_attempts + 1))
    assert rt[1][2] != rt[0][2]
    fails = [e[0] for e in events_of(out["_sim"].trace, "fail")]
    assert fails == [12.0, 34.0, 76.0, 158.0][:max_attempts]
    assert (out["arrivals"], out["failed"], out["completed"]) == (1, 1, 0)
    assert out["attempts"] == max_attempts and out["retries"] == max_attempts - 1
    assert out["records"][0]["outcome"] == "failed"


def test_retry_budget_refuses_the_retry_that_would_exceed_it():
    """One black hole.  (a) budget 0, min_retry_concurrency 1: r0 and r1 (at 10) fail at
    12; r0's retry goes (0 retries in flight < max(1, 0)), r1's would be the second: refused.
    (b) budget 0.5, min 0, r2 arrives at 11: at 12 one attempt (r2) is in flight, limit 0.5:
    r0's retry goes, r1's is refused; at 13 r2 fails with nothing in flight: limit 0, refused."""
    ev = [(0.0, "fail_fast", 0, 0.0)]
    p = params(kv_blocks=64, max_attempts=2, retry_budget=0.0, min_retry_concurrency=1)
    out = tr.simulate(make([(10.0, 100, 5, 0.5), (10.0, 100, 5, 0.5)]), p, [1.0], ev, "round_robin", 1,
                      check=True, _return_sim=True)
    assert [r["attempts"] for r in out["records"]] == [2, 1]
    assert [(e[0], e[2]) for e in events_of(out["_sim"].trace, "budget_refused")] == [(12.0, 1)]
    assert (out["failed"], out["retries"]) == (2, 1)

    p = params(kv_blocks=64, max_attempts=2, retry_budget=0.5, min_retry_concurrency=0)
    wl = make([(10.0, 100, 5, 0.5), (10.0, 100, 5, 0.5), (11.0, 100, 5, 0.5)])
    out = tr.simulate(wl, p, [1.0], ev, "round_robin", 1, check=True, _return_sim=True)
    assert [r["attempts"] for r in out["records"]] == [2, 1, 1]
    assert [(e[0], e[2]) for e in events_of(out["_sim"].trace, "budget_refused")] == [(12.0, 1), (13.0, 2)]


def test_timeout_releases_the_attempts_blocks():
    """P = 160 (10 id'd blocks), O = 1000, timeout 100 ms, kv_blocks 20.  Referenced: 10
    blocks during the prefill, 11 from the first decode step (kv 160 -> 161) on; at 100
    the attempt is cancelled: its id'd blocks are cached, the anonymous one free.  The
    tokens it emitted by then are wasted; the iteration in progress emits nothing."""
    p = params(kv_blocks=20, timeout_ms=100.0, measure_s=1)
    out = tr.simulate(make([(0.0, 160, 1000, 0.5)]), p, [1.0], [], "round_robin", 1, check=True,
                      _return_sim=True)
    # by hand: iteration ends and blocks held
    t = step(U=160, Q=160 * 80)
    area = 10 * t
    g, kv, blocks = 1, 160, 10
    while True:
        kv += 1                                   # growth at the iteration start
        blocks = -(-kv // 16)
        d = step(n=1, K=kv)
        if t + d > 100.0:
            area += blocks * (100.0 - t)
            break
        area += blocks * d
        t += d
        g += 1
    assert out["wasted_tokens"] == g and out["replica_tokens"] == [g]
    assert out["records"][0]["outcome"] == "failed"
    assert out["kv_occupancy"] == pytest.approx(area / 1000.0 / 20, rel=1e-9)
    rep = out["_sim"].replicas[0]
    states = [blk.state for blk in rep.blocks]
    assert states.count("cached") == 10 and states.count("free") == 10
    assert all(blk.refcount == 0 for blk in rep.blocks)
    assert [e[0] for e in events_of(out["_sim"].trace, "fail")] == [100.0]


def test_crash_fails_attempts_retry_elsewhere_breaker_ignores_crashes():
    """Two replicas, round robin; r0 (P 100, O 500) on replica 0; replica 0 crashes at 50:
    r0's attempt fails at 50 (its tokens wasted), is retried at 70 on replica 1.  Crash
    failures do not count for the breaker (consecutive = 1): no ejection."""
    p = params(kv_blocks=64, max_attempts=2, breaker_consecutive=1, measure_s=1)
    out = tr.simulate(make([(0.0, 100, 500, 0.5)]), p, [1.0, 1.0], [(50.0, "fail", 0, 0.0)],
                      "round_robin", 1, check=True, _return_sim=True)
    rt = routes(out)
    assert [(x[0], x[2], x[3]) for x in rt] == [(0.0, 0, 1), (70.0, 1, 2)]
    t, g, kv = step(U=100, Q=100 * 50), 1, 100
    while True:
        kv += 1
        d = step(n=1, K=kv)
        if t + d > 50.0:
            break
        t += d
        g += 1
    assert out["wasted_tokens"] == g
    assert out["breaker_ejections"] == 0
    assert out["records"][0]["attempts"] == 2


def test_recover_cold_start_and_readiness():
    """One replica, down from 0 (start_down), slowdown 2 from 0, time factor 1.5; it
    recovers at 100 with ready_delay 50, cold_factor 3, cold_tau 1000.  A request at 120
    is shed (no eligible replica); one at 200 runs with
    f(T) = (1.5 * 2) * (1 + 2 exp(-(T - 100)/1000)) read at each iteration start."""
    p = params(kv_blocks=64, start_down=[0], ready_delay_ms=50.0, cold_factor=3.0, cold_tau_ms=1000.0)
    ev = [(0.0, "slowdown", 0, 2.0), (100.0, "recover", 0, 0.0)]
    out = tr.simulate(make([(120.0, 100, 2, 0.5), (200.0, 100, 2, 0.5)]), p, [1.5], ev,
                      "least_requests", 1, check=True)
    rec = out["records"]
    assert rec[0]["outcome"] == "shed"

    def f(T):
        return (1.5 * 2.0) * (1.0 + (3.0 - 1.0) * math.exp(-(T - 100.0) / 1000.0))
    t1 = 200.0 + step(U=100, Q=100 * 50, f=f(200.0))
    t2 = t1 + step(n=1, K=101, f=f(t1))
    assert rec[1]["completion"] == pytest.approx(t2, rel=1e-12)
    assert rec[1]["ttft"] == pytest.approx(t1 - 200.0, rel=1e-12)
    assert (out["shed"], out["completed"]) == (1, 1)


def test_recover_edge_cases():
    """recover on an up replica that is not failing fast does nothing (no cold start);
    fail_fast on a down replica is ignored; recover ends a black hole."""
    p = params(kv_blocks=64, cold_factor=3.0)
    ev = [(10.0, "recover", 0, 0.0)]
    out = tr.simulate(make([(20.0, 100, 2, 0.5)]), p, [1.0], ev, "round_robin", 1, check=True)
    t1 = 20.0 + step(U=100, Q=100 * 50)
    assert out["records"][0]["completion"] == pytest.approx(t1 + step(n=1, K=101), rel=1e-12)
    # black hole from 0 to 30: the request at 20 fails at 22, the one at 40 completes
    ev = [(0.0, "fail_fast", 0, 0.0), (30.0, "recover", 0, 0.0)]
    out = tr.simulate(make([(20.0, 100, 2, 0.5), (40.0, 100, 2, 0.5)]), p, [1.0], ev, "round_robin", 1,
                      check=True)
    assert [r["outcome"] for r in out["records"]] == ["failed", "completed"]
    t1 = 40.0 + step(U=100, Q=100 * 50)
    assert out["records"][1]["completion"] == pytest.approx(t1 + step(n=1, K=101), rel=1e-12)


def test_slow_start_ramp():
    """Replica 1 is down from 0 and recovers at 1000 (t_e = 1000); slow start 1000 ms.
    Replica 0 takes the requests at 100, 200 and 300 (the only eligible one).  At 1100:
    replica 0 scores o = 3 (its ramp ended at 1000), replica 1 (0 + 1)/max(0.1, 0.1) = 10:
    replica 0.  At 1800: 4 against 1/0.8 = 1.25: replica 1.  Without slow start the request
    at 1100 goes to replica 1."""
    rows = long_rows([100.0, 200.0, 300.0, 1100.0, 1800.0], h=0.5, P=100, O=2000)
    ev = [(1000.0, "recover", 1, 0.0)]
    p = params(kv_blocks=200, start_down=[1], slow_start_ms=1000.0, measure_s=2, drain_s=0)
    out = tr.simulate(make(rows), p, [1.0, 1.0], ev, "least_requests", 1, check=True, _return_sim=True)
    assert [x[2] for x in routes(out)] == [0, 0, 0, 0, 1]
    p["slow_start_ms"] = 0.0
    out = tr.simulate(make(rows), p, [1.0, 1.0], ev, "least_requests", 1, check=True, _return_sim=True)
    assert [x[2] for x in routes(out)] == [0, 0, 0, 1, 1]


@pytest.mark.parametrize("mode", ["reject", "queue"])
def test_front_door(mode):
    """One replica, admission max_tokens = 500.  r0 (P 300, O 2) at 0 sees tau = 0 and is
    placed; r1 at 1 sees tau = 300 + 256 = 556 > 500: rejected, or queued.  Queued, it is
    tried at r0's first token (tau still 556) and placed when r0 completes (tau = 0)."""
    p = params(kv_blocks=64, admission_max_tokens=500.0, admission_mode=mode)
    out = tr.simulate(make([(0.0, 300, 2, 0.5), (1.0, 300, 2, 0.5)]), p, [1.0], [], "least_tokens", 1,
                      check=True, _return_sim=True)
    d1 = step(U=300, Q=300 * 150)
    d2 = step(n=1, K=301)
    if mode == "reject":
        assert [r["outcome"] for r in out["records"]] == ["completed", "rejected"]
        assert out["rejected"] == 1 and out["attempts"] == 1
    else:
        rt = routes(out)
        assert rt[1][0] == pytest.approx(d1 + d2, rel=1e-12)
        t_done = ((d1 + d2) + step(U=300, Q=300 * 150)) + d2
        assert out["records"][1]["completion"] == pytest.approx(t_done, rel=1e-12)
        assert out["completed"] == 2


def test_routers_split_by_key():
    """routers = 2: request r goes through router floor(h R); each has its own cursor."""
    rows = [(1.0, 100, 50, 0.1), (2.0, 100, 50, 0.7), (3.0, 100, 50, 0.2), (4.0, 100, 50, 0.8)]
    p = params(kv_blocks=64, routers=2)
    out = tr.simulate(make(rows), p, [1.0, 1.0], [], "round_robin", 1, check=True, _return_sim=True)
    assert [x[2] for x in routes(out)] == [0, 0, 1, 1]


# ------------------------------------------------------------------------------------
# invariants with failures, retries and containment
# ------------------------------------------------------------------------------------

STAGE2 = dict(max_attempts=3, timeout_ms=400.0, breaker_consecutive=2, breaker_eject_ms=100.0,
              breaker_max_ejected_fraction=0.5, retry_budget=0.2, admission_max_tokens=3000.0,
              admission_mode="queue", routers=2, slow_start_ms=300.0, cold_factor=2.0,
              ready_delay_ms=30.0, start_down=[2])
EVENTS2 = [(200.0, "fail_fast", 0, 0.0), (300.0, "recover", 2, 0.0), (500.0, "fail", 1, 0.0),
           (700.0, "recover", 0, 0.0), (900.0, "recover", 1, 0.0), (1000.0, "slowdown", 2, 3.0),
           (1200.0, "rate_multiplier", -1, 2.0)]


MODE = {"round_robin": "periodic", "power_of_d": "periodic_local", "prefix_affinity": "periodic_local",
        "rate_weighted": "periodic"}
"""The signal mode each policy's failure case runs in (fresh unless named here)."""


@pytest.mark.slow
@pytest.mark.parametrize("policy, mode", [(name, MODE.get(name, "fresh")) for name in POLICIES])
def test_invariants_with_failures(policy, mode):
    p = tr.defaults()
    p.update(SMALL)
    p.update(STAGE2, signal_mode=mode)
    wl = tr.generate_workload(2, 60.0, p, EVENTS2)
    out = tr.simulate(wl, p, [1.0, 1.5, 0.8], EVENTS2, policy, 3, check=True)
    assert out["arrivals"] == sum(out[k] for k in ("completed", "failed", "rejected", "shed",
                                                   "unfinished"))
    assert out["attempts"] >= out["arrivals"] - out["shed"] - out["rejected"] - out["unfinished"]


if given is not None:
    @pytest.mark.slow
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(seed=st.integers(0, 10_000), n_rep=st.integers(1, 3), b=st.sampled_from([1, 4, 16]),
           chunked=st.booleans(), max_batch=st.integers(1, 5), cap=st.integers(1, 6),
           policy=st.sampled_from(POLICIES),
           mode=st.sampled_from(["fresh", "periodic", "periodic_local"]),
           routers=st.integers(1, 2), max_attempts=st.integers(1, 3),
           timeout=st.sampled_from([math.inf, 60.0, 150.0]), consecutive=st.integers(0, 2),
           budget=st.sampled_from([math.inf, 0.0, 0.5]), front=st.sampled_from([math.inf, 400.0]),
           front_mode=st.sampled_from(["reject", "queue"]),
           events=st.lists(st.tuples(st.floats(0, 900), st.sampled_from(["fail", "fail_fast", "recover",
                                                                          "slowdown"]),
                                     st.integers(0, 2), st.sampled_from([0.5, 2.0])), max_size=5),
           start_down=st.booleans(), drain=st.sampled_from([0.0, 0.2, 600.0]),
           ttft=st.sampled_from([math.inf, 30.0, 90.0]), allowance=st.sampled_from([256, "exact"]))
    def test_property_invariants_with_failures(seed, n_rep, b, chunked, max_batch, cap, policy, mode,
                                               routers, max_attempts, timeout, consecutive, budget,
                                               front, front_mode, events, start_down, drain, ttft,
                                               allowance):
        p = tr.defaults()
        p.update(warmup_s=0.1, measure_s=0.4, p_long=0.0, chat_prompt_median=30, chat_prompt_min=1,
                 chat_prompt_max=200, chat_output_median=20, chat_output_max=30, prefix_tokens=32,
                 prefix_groups=3, context_limit=400, block_tokens=b, chunked_prefill=chunked,
                 max_batched_tokens=300, max_batch=max_batch, waiting_cap=cap, signal_mode=mode,
                 period_ms=20.0, routers=routers, max_attempts=max_attempts, timeout_ms=timeout,
                 breaker_consecutive=consecutive, breaker_eject_ms=30.0, retry_budget=budget,
                 min_retry_concurrency=1, admission_max_tokens=front, admission_mode=front_mode,
                 cold_factor=2.0, ready_delay_ms=10.0, slow_start_ms=50.0,
                 start_down=[0] if start_down else [], drain_s=drain, ttft_timeout_ms=ttft,
                 allowance_tokens=allowance)
        p["kv_blocks"] = -(-(32 + 200 + 30) // b) + 3
        # events up to 400 ms after the horizon (500 ms): in the drain too
        evs = sorted([(float(t), k, i % n_rep, v) for t, k, i, v in events], key=lambda e: e[0])
        wl = tr.generate_workload(seed, 80.0, p, evs)
        out = tr.simulate(wl, p, [1.0 + 0.5 * i for i in range(n_rep)], evs, policy, seed, check=True)
        assert out["arrivals"] == sum(out[k] for k in ("completed", "failed", "rejected", "shed",
                                                       "unfinished"))
        H = 500.0   # warm-up 0.1 s, measurement 0.4 s
        assert H <= out["stop"] <= H + drain * 1000.0
        assert (out["unfinished"] == 0) or out["stop"] == H + drain * 1000.0
        assert math.isnan(out["itl_max"]) or out["itl_max"] >= out["itl_p99"] >= out["itl_p50"] > 0
        assert 0 <= out["kv_occupancy_first"] <= 1 and 0 <= out["kv_occupancy_last"] <= 1


def test_front_door_queue_and_timeouts_from_arrival():
    """Decision (c): the first attempt's routing time is the arrival time, so its timeout
    runs from a_r even while the front door holds it.  One replica, max_tokens 500
    (queue), timeout 30, max_attempts 2, P = 300, O = 50 (nothing completes by 100 ms).

    (a) r0 at 0 is placed (deadline 30); r1 at 1 waits (tau 556 > 500; deadline 31).  At 30
        r0 times out (its blocks released) and is retried at 50; the front door then lets
        r1 through (tau 0), placed at 30 with deadline 31: it times out at 31, retried at 51.
        The retries (attempt 2) time out at 80 and 81: both failed.
    (b) r0 and r1 at 0: r1 is still at the front door at its deadline 30: it leaves it and
        fails there like a first attempt (no replica), and its retry at 50 skips the front
        door."""
    p = params(kv_blocks=64, admission_max_tokens=500.0, admission_mode="queue", timeout_ms=30.0,
               max_attempts=2, measure_s=1)
    out = tr.simulate(make([(0.0, 300, 50, 0.5), (1.0, 300, 50, 0.5)]), p, [1.0], [], "least_tokens", 1,
                      check=True, _return_sim=True)
    assert [(x[0], x[1], x[3]) for x in routes(out)] == [(0.0, 0, 1), (30.0, 1, 1), (50.0, 0, 2),
                                                         (51.0, 1, 2)]
    fails = [(e[0], e[2], e[4], e[5]) for e in events_of(out["_sim"].trace, "fail")]
    assert fails == [(30.0, "timeout", 0, 1), (31.0, "timeout", 1, 1), (80.0, "timeout", 0, 2),
                     (81.0, "timeout", 1, 2)]
    assert (out["failed"], out["attempts"], out["retries"]) == (2, 4, 2)

    out = tr.simulate(make([(0.0, 300, 50, 0.5), (0.0, 300, 50, 0.5)]), p, [1.0], [], "least_tokens", 1,
                      check=True, _return_sim=True)
    fails = [(e[0], e[2], e[4], e[5]) for e in events_of(out["_sim"].trace, "fail")]
    assert fails[:2] == [(30.0, "timeout", 0, 1), (30.0, "front_door_timeout", 1, 1)]
    assert [(x[0], x[1], x[3]) for x in routes(out)] == [(0.0, 0, 1), (50.0, 0, 2), (50.0, 1, 2)]
    assert [r["attempts"] for r in out["records"]] == [2, 1]
    assert (out["failed"], out["attempts"], out["retries"]) == (2, 3, 2)


def test_metric_windows():
    """W = 100, H = 200; one request at 50 (not in the cohort), P 100, O 30.  By hand:
    prefill then decode steps of step(n=1, K=100+g); tokens counted at times in (W, H],
    iterations for batch_mean by start in [W, H), kv occupancy over [W, H] with
    ceil(kv/16) blocks referenced after each iteration start."""
    p = params(kv_blocks=64, warmup_s=0.1, measure_s=0.1)
    out = tr.simulate(make([(50.0, 100, 30, 0.5)]), p, [1.0], [], "round_robin", 1, check=True)
    W, H = 100.0, 200.0
    starts, ends, blocks = [50.0], [], [7]
    t = 50.0 + step(U=100, Q=100 * 50)
    ends.append(t)
    for g in range(1, 30):
        kv = 100 + g
        starts.append(t)
        blocks.append(-(-kv // 16))
        t = t + step(n=1, K=kv)
        ends.append(t)
    tokens = sum(1 for e in ends if W < e <= H)
    area = sum(bk * max(0.0, min(e, H) - max(s, W)) for s, e, bk in zip(starts, ends, blocks))
    assert ends[-1] > H
    assert out["arrivals"] == 0 and math.isnan(out["attainment"]) and math.isnan(out["ttft_p50"])
    assert out["assigned"] == [0] and out["throughput"] == 0.0
    assert out["replica_tokens"] == [tokens] and tokens > 0
    assert out["token_throughput"] == pytest.approx(tokens / 0.1)
    assert out["kv_occupancy"] == pytest.approx(area / 100.0 / 64, rel=1e-9)
    assert out["batch_mean"] == pytest.approx(1.0)
    assert out["records"][0]["outcome"] == "unfinished"


# ====================================================================================
# Issue 19: the drain, first-token timeouts, computed blocks, allowance "exact", ITL,
# steady state (token-model.md §2 "Computed blocks", §3, §6, §7; /work/spec19.md)
# ====================================================================================

def lone_times(t0, P, O, f=1.0):
    """Token times of a request alone on an idle replica with room (P <= 8192: one prefill
    chunk, §2.3 d = f (c_0 + c_pf U + c_attn Q + ...), Q = P (0 + 0 + P/2)), then O - 1
    decode iterations, the g-th with n = 1 and K = P + g (its KV after growth)."""
    t = t0 + step(U=P, Q=P * (P / 2), f=f)
    times = [t]
    for g in range(1, O):
        t = t + step(n=1, K=P + g, f=f)
        times.append(t)
    return times


def lone_area(t0, P, O, lo, hi, f=1.0):
    """Referenced blocks x time of that lone request over [lo, hi]: ceil(P/16) blocks during
    the prefill, ceil((P + g)/16) during the g-th decode iteration."""
    times = lone_times(t0, P, O, f)
    starts = [t0] + times[:-1]
    blocks = [-(-P // 16)] + [-(-(P + g) // 16) for g in range(1, O)]
    return sum(bk * max(0.0, min(e, hi) - max(s, lo)) for s, e, bk in zip(starts, times, blocks))


def rank(values, p):
    """Nearest rank as the page writes it: sorted[ceil((p/100) n) - 1]."""
    s = sorted(values)
    return s[math.ceil((p / 100) * len(s)) - 1]


def fails_of(out):
    return [(e[0], e[2], e[4], e[5]) for e in events_of(out["_sim"].trace, "fail")]


def test_lone_request_finishes_in_the_drain():
    """W = 0, H = 10000.  r0 at 9950 (P 100, O 50): its first token at 9950 + d_pre, then
    49 decode steps, the last after the horizon.  With the default drain (600 s) it
    completes and the run stops at its completion; with drain_s = 0 it is unfinished.
    Window metrics are the same either way (tokens by (W, H], blocks over [W, H])."""
    wl = make([(9950.0, 100, 50, 0.5)])
    times = lone_times(9950.0, 100, 50)
    t_first, t_done = times[0], times[-1]
    H = 10000.0
    assert t_first < H < t_done
    in_window = [t for t in times if t <= H]
    gaps = [times[j] - times[j - 1] for j in range(1, 50) if times[j] <= H]
    for j, gap in enumerate(gaps, start=1):        # each gap is the j-th decode step
        assert gap == pytest.approx(step(n=1, K=100 + j), rel=1e-9)
    area = lone_area(9950.0, 100, 50, 0.0, H)
    tpot = (t_done - t_first) / 49
    out = tr.simulate(wl, params(kv_blocks=64), [1.0], [], "round_robin", 1, check=True)
    cut = tr.simulate(wl, params(kv_blocks=64, drain_s=0), [1.0], [], "round_robin", 1, check=True)
    assert (out["completed"], out["unfinished"]) == (1, 0)
    assert (cut["completed"], cut["unfinished"]) == (0, 1)
    assert out["stop"] == t_done and cut["stop"] == H
    assert out["ttft_p50"] == pytest.approx(t_first - 9950.0, rel=1e-12)
    assert out["e2e_mean"] == pytest.approx(t_done - 9950.0, rel=1e-12)
    assert out["tpot_p50"] == pytest.approx(tpot, rel=1e-12)
    assert t_first - 9950.0 <= 1000 and tpot <= 50
    assert out["attainment"] == 1.0 and out["goodput"] == pytest.approx(1 / 10)
    assert math.isnan(cut["ttft_p50"]) and math.isnan(cut["e2e_mean"]) and cut["goodput"] == 0.0
    for o in (out, cut):
        assert o["throughput"] == 0.0 and o["replica_completed"] == [0]   # completion after H
        assert o["replica_tokens"] == [len(in_window)]
        assert o["token_throughput"] == pytest.approx(len(in_window) / 10.0)
        assert o["kv_occupancy"] == pytest.approx(area / 10000.0 / 64, rel=1e-9)
        assert o["kv_occupancy_first"] == 0.0
        assert o["kv_occupancy_last"] == pytest.approx(area / 2500.0 / 64, rel=1e-9)  # q = 2500
        assert o["itl_max"] == pytest.approx(max(gaps), rel=1e-12)
        assert o["itl_p50"] == pytest.approx(rank(gaps, 50), rel=1e-12)
        assert o["backlog_growth"] == 1 - 0      # in the system at H, none at W = 0
        assert o["wasted_tokens"] == 0 and o["batch_mean"] == pytest.approx(1.0)


def test_drain_cut_by_drain_s():
    """Two replicas, round robin: r0 -> 1, r1 -> 2, both at 9990 alone on their replica,
    O = 20 and O = 50.  drain_s = 0.2: limit 10200; r0 completes before it, r1 after:
    unfinished, and stop = 10200.  drain_s = 0.4: both complete, stop = r1's completion."""
    wl = make([(9990.0, 100, 20, 0.5), (9990.0, 100, 50, 0.5)])
    t0, t1 = lone_times(9990.0, 100, 20), lone_times(9990.0, 100, 50)
    assert t0[-1] < 10200.0 < t1[-1] < 10400.0
    out = tr.simulate(wl, params(kv_blocks=64, drain_s=0.2), [1.0, 1.0], [], "round_robin", 1, check=True)
    assert out["assigned"] == [1, 1]
    assert (out["completed"], out["unfinished"], out["stop"]) == (1, 1, 10200.0)
    assert out["e2e_p99"] == pytest.approx(t0[-1] - 9990.0, rel=1e-12)
    out = tr.simulate(wl, params(kv_blocks=64, drain_s=0.4), [1.0, 1.0], [], "round_robin", 1, check=True)
    assert (out["completed"], out["unfinished"]) == (2, 0) and out["stop"] == t1[-1]
    assert out["e2e_p99"] == pytest.approx(t1[-1] - 9990.0, rel=1e-12)


def test_crash_and_retry_in_the_drain():
    """r0 at 9950 (P 100, O 50) on replica 1 of 2 (round robin), max_attempts 2.  Replica
    1 crashes at 10100, after the horizon: the attempt fails there (the tokens it emitted
    in (W, H] are wasted; those after H are not counted), is retried at 10100 + 20 on
    replica 2, slowed down by 2 from 10110: f = 2 in every step of the retry.  ttft and
    e2e from the arrival.  With drain_s = 0 the crash is never processed: unfinished,
    nothing wasted (an attempt still running at the stop is not wasted)."""
    wl = make([(9950.0, 100, 50, 0.5)])
    ev = [(10100.0, "fail", 0, 0.0), (10110.0, "slowdown", 1, 2.0)]
    first = lone_times(9950.0, 100, 50)
    retry = lone_times(10120.0, 100, 50, f=2.0)
    assert first[-1] > 10100.0
    emitted_in_window = sum(1 for t in first if t <= 10000.0)
    emitted_by_crash = sum(1 for t in first if t <= 10100.0)
    assert emitted_by_crash > emitted_in_window > 0
    p = params(kv_blocks=64, max_attempts=2)
    out = tr.simulate(wl, p, [1.0, 1.0], ev, "round_robin", 1, check=True, _return_sim=True)
    assert [(x[0], x[2], x[3]) for x in routes(out)] == [(9950.0, 0, 1), (10120.0, 1, 2)]
    assert fails_of(out) == [(10100.0, "crash", 0, 1)]
    rec = out["records"][0]
    assert rec["outcome"] == "completed" and rec["attempts"] == 2
    assert out["ttft_p50"] == pytest.approx(retry[0] - 9950.0, rel=1e-12)
    assert out["e2e_mean"] == pytest.approx(retry[-1] - 9950.0, rel=1e-12)
    assert out["stop"] == retry[-1]
    assert (out["attempts"], out["retries"], out["completed"]) == (2, 1, 1)
    assert out["wasted_tokens"] == emitted_in_window
    assert out["assigned"] == [1, 0] and out["replica_tokens"] == [emitted_in_window, 0]
    # no gap of the retry is in the window: the largest is attempt 1's last decode step in it
    gaps = [first[j] - first[j - 1] for j in range(1, 50) if first[j] <= 10000.0]
    assert out["itl_max"] == pytest.approx(max(gaps), rel=1e-12)
    cut = tr.simulate(wl, dict(p, drain_s=0), [1.0, 1.0], ev, "round_robin", 1, check=True)
    assert (cut["unfinished"], cut["wasted_tokens"], cut["attempts"]) == (1, 0, 1)


P_LONG = 20000     # 3 chunks of at most 8192: 8192, 8192, 3616; 1250 id'd blocks, no anonymous
D1 = step(U=8192, Q=8192 * (0 + 0 + 8192 / 2))
D2 = step(U=8192, Q=8192 * (0 + 8192 + 8192 / 2))
D3 = step(U=3616, Q=3616 * (0 + 16384 + 3616 / 2))


@pytest.mark.parametrize("both", [False, True])
def test_first_token_timeout_in_a_chunked_prefill_and_computed_blocks(both):
    """r0 at 100 (P 20000, O 3), ttft_timeout_ms = 500: deadline 600, after the end of chunk
    2 (100 + d1 + d2) and before chunk 3 ends: the attempt fails at 600 (a first-token
    timeout; with timeout_ms = 500 too, one failure, a timeout).  Chunks 1 and 2 made
    blocks 0..1023 computed ((j+1) 16 <= 16384): cached at the cancellation; blocks
    1024..1249 were never computed: free.  The retry (due 620) waits for the replica's
    iteration in progress (its d unchanged) and is admitted at 100 + d1 + d2 + d3 with
    hit = 1024 (not 1249 = floor(19999/16), the cap a hit on the uncomputed ones would
    give), m = 16384, u = 3616: one chunk
    d4 = step(U=3616, Q=3616 (16384 + 0 + 3616/2)), then 2 decode steps.
    prefix_hit_rate = (0 + 16384) / (20000 + 20000)."""
    kw = dict(kv_blocks=1300, ttft_timeout_ms=500.0, max_attempts=2)
    if both:
        kw["timeout_ms"] = 500.0
    out = tr.simulate(make([(100.0, P_LONG, 3, 0.5)]), params(**kw), [1.0], [], "round_robin", 1,
                      check=True, _return_sim=True)
    assert (100.0 + D1) + D2 < 600.0 < ((100.0 + D1) + D2) + D3
    assert fails_of(out) == [(600.0, "timeout" if both else "ttft_timeout", 0, 1)]
    trace = out["_sim"].trace
    freed = events_of(trace, "free_uncomputed")
    assert [e[4] for e in freed] == list(range(1024, 1250)) and {e[0] for e in freed} == {600.0}
    t3 = ((100.0 + D1) + D2) + D3
    admits = events_of(trace, "admit")
    assert [(e[0], e[4], e[5]) for e in admits] == [(100.0, 0, 20000), (t3, 1024, 3616)]
    t4 = t3 + step(U=3616, Q=3616 * (16384 + 0 + 3616 / 2))
    t6 = (t4 + step(n=1, K=20001)) + step(n=1, K=20002)
    assert t4 < 620.0 + 500.0       # the retry's own deadlines are not reached
    assert (out["completed"], out["failed"], out["attempts"], out["retries"]) == (1, 0, 2, 1)
    assert out["wasted_tokens"] == 0          # it emitted none
    assert out["ttft_p50"] == pytest.approx(t4 - 100.0, rel=1e-12)
    assert out["e2e_mean"] == pytest.approx(t6 - 100.0, rel=1e-12)
    assert out["prefix_hit_rate"] == pytest.approx(16384 / 40000, rel=1e-12)


def test_first_token_exactly_at_the_deadline_wins():
    """r0 at 0 (P 20000, O 3): its first token at ((0 + d1) + d2) + d3.  ttft_timeout_ms
    equal to it: the token (phase 1) comes before the deadline (phase 3), and the
    deadline no longer applies: it completes.  One ulp less: it fails there."""
    t_first = ((0.0 + D1) + D2) + D3
    t_done = (t_first + step(n=1, K=20001)) + step(n=1, K=20002)
    wl = make([(0.0, P_LONG, 3, 0.5)])
    out = tr.simulate(wl, params(kv_blocks=1300, ttft_timeout_ms=t_first), [1.0], [], "round_robin", 1,
                      check=True, _return_sim=True)
    assert (out["completed"], out["failed"]) == (1, 0) and fails_of(out) == []
    assert out["ttft_p50"] == pytest.approx(t_first, rel=1e-12)
    assert out["e2e_mean"] == pytest.approx(t_done, rel=1e-12)
    early = math.nextafter(t_first, 0.0)
    out = tr.simulate(wl, params(kv_blocks=1300, ttft_timeout_ms=early), [1.0], [], "round_robin", 1,
                      check=True, _return_sim=True)
    assert (out["completed"], out["failed"]) == (0, 1)
    assert fails_of(out) == [(early, "ttft_timeout", 0, 1)]


def test_first_token_timeout_at_the_front_door():
    """As test_front_door_queue_and_timeouts_from_arrival (b), with timeout_ms = inf and
    ttft_timeout_ms = 30: r1 (at 0) is still at the front door at 0 + 30: it fails there
    as attempt 1, a first-token timeout; r0 (placed at 0, first token at d_pre = 12.4 ms,
    before 30) is no longer subject to it and completes."""
    p = params(kv_blocks=64, admission_max_tokens=500.0, admission_mode="queue", ttft_timeout_ms=30.0,
               max_attempts=1, measure_s=1)
    out = tr.simulate(make([(0.0, 300, 50, 0.5), (0.0, 300, 50, 0.5)]), p, [1.0], [], "least_tokens", 1,
                      check=True, _return_sim=True)
    assert step(U=300, Q=300 * 150) < 30.0
    assert fails_of(out) == [(30.0, "front_door_ttft_timeout", 1, 1)]
    assert [r["outcome"] for r in out["records"]] == ["completed", "failed"]
    assert out["attempts"] == 1


def test_itl_of_a_lone_request():
    """r0 at 0 (P 100, O 5): tokens at t1 = d_pre, t_(g+1) = t_g + step(n=1, K=100+g); the
    4 gaps are the decode steps, increasing with K; nearest rank of 4: p50 = sorted[1],
    p90 = p99 = sorted[3] = itl_max."""
    out = tr.simulate(make([(0.0, 100, 5, 0.5)]), params(kv_blocks=64), [1.0], [], "round_robin", 1,
                      check=True)
    times = lone_times(0.0, 100, 5)
    gaps = [times[j] - times[j - 1] for j in range(1, 5)]
    assert gaps == pytest.approx([step(n=1, K=100 + g) for g in range(1, 5)], rel=1e-9)
    assert out["itl_p50"] == gaps[1]
    assert out["itl_p90"] == out["itl_p99"] == out["itl_max"] == gaps[3]
    out = tr.simulate(make([(0.0, 100, 1, 0.5)]), params(kv_blocks=64), [1.0], [], "round_robin", 1)
    assert math.isnan(out["itl_p50"]) and math.isnan(out["itl_max"])     # O = 1: no gap


def test_itl_of_a_retry_has_no_gap_across_attempts():
    """Two replicas; r0 at 0 (P 100, O 20) on replica 1, which crashes at 50 (after its
    first tokens); retried at 70 on replica 2, where it completes before the horizon.
    The gaps are those within each attempt (no gap from attempt 1's last token to the
    retry's first, ~28 ms, larger than any step)."""
    p = params(kv_blocks=64, max_attempts=2)
    out = tr.simulate(make([(0.0, 100, 20, 0.5)]), p, [1.0, 1.0], [(50.0, "fail", 0, 0.0)], "round_robin",
                      1, check=True)
    a1 = [t for t in lone_times(0.0, 100, 20) if t <= 50.0]
    a2 = lone_times(70.0, 100, 20)
    gaps = [a1[j] - a1[j - 1] for j in range(1, len(a1))] + [a2[j] - a2[j - 1] for j in range(1, 20)]
    assert len(a1) >= 2 and a2[0] - a1[-1] > max(gaps)
    assert out["itl_max"] == max(gaps)
    assert out["itl_p50"] == rank(gaps, 50) and out["itl_p90"] == rank(gaps, 90)


def test_itl_across_a_preemption_and_first_token_deadline_after_the_first_token():
    """The preemption case of test_preemption_victim_is_most_recent_and_goes_to_the_front
    (b = 4, kv_blocks 6, max_batch 2; A, B (P 8, O 9), C (P 4, O 2) at 0), with
    ttft_timeout_ms = 50.  B emits its first token at the end of iteration 1, is
    preempted at the start of iteration 6 (t5 < 50) with g = 5, and is re-admitted when
    A completes (t9 > 50): its first-token deadline 50 no longer applies (it emitted a
    token).  C, waiting and without a token, fails at 50 (first-token timeout).  So
    iteration 10 admits B alone: hit 2 (m 8), u 5: d10 = step(U=5, Q=5 (8 + 0 + 5/2));
    B's 6th token at t9 + d10: the gap from its 5th (t5) is t9 + d10 - t5, the largest.
    Then B decodes with kv 14, 15, 16 to g = 9."""
    wl = make([(0.0, 8, 9, 0.5), (0.0, 8, 9, 0.5), (0.0, 4, 2, 0.5)], b=4)
    p = params(block_tokens=4, kv_blocks=6, max_batch=2, ttft_timeout_ms=50.0)
    out = tr.simulate(wl, p, [1.0], [], "round_robin", 1, check=True, _return_sim=True)
    d = [step(U=16, Q=8 * 4 + 8 * 4)]
    d += [step(n=2, K=2 * (7 + j)) for j in range(2, 6)]      # iterations 2..5: A and B
    d += [step(n=1, K=7 + j) for j in range(6, 10)]           # iterations 6..9: A alone
    ends = []
    t = 0.0
    for x in d:
        t = t + x
        ends.append(t)
    t5, t9 = ends[4], ends[8]
    assert t5 < 50.0 < t9
    assert fails_of(out) == [(50.0, "ttft_timeout", 2, 1)]     # request C, attempt 1
    assert [r["outcome"] for r in out["records"]] == ["completed", "completed", "failed"]
    t10 = t9 + step(U=5, Q=5 * (8 + 0 + 5 / 2))
    b_times = ends[:5] + [t10]
    for K in (14, 15, 16):
        b_times.append(b_times[-1] + step(n=1, K=K))
    assert out["records"][1]["completion"] == b_times[-1]
    a_times = ends                                              # A: a token at every end 1..9
    gaps = [a_times[j] - a_times[j - 1] for j in range(1, 9)]
    gaps += [b_times[j] - b_times[j - 1] for j in range(1, 9)]
    assert out["itl_max"] == t10 - t5 == max(gaps)
    assert out["itl_p50"] == rank(gaps, 50)
    assert out["wasted_tokens"] == 0 and out["preemptions"] == 1


def test_backlog_growth_in_an_overload():
    """One replica, max_batch 1: a request (P 100, O 10) is served in
    S = d_pre + sum_g step(n=1, K=100+g), g = 1..9, about 68 ms, back to back (the next
    is admitted at each completion).  Arrivals every 10 ms from 0 to 290; W = 100,
    H = 300.  After time W (the arrival at 100 included): 11 arrived, 1 completed (at
    S); after H: 30 arrived, 4 completed (4 S < 300 < 5 S).  backlog_growth = 26 - 10 =
    16.  The blocks: 7 referenced at all times from 0 until the queue empties
    (ceil(109/16) = 7): kv_occupancy_first = _last = 7/64 (the pool holds 64)."""
    rows = [(10.0 * k, 100, 10, 0.5) for k in range(30)]
    p = params(kv_blocks=64, max_batch=1, warmup_s=0.1, measure_s=0.2)
    out = tr.simulate(make(rows), p, [1.0], [], "round_robin", 1, check=True)
    S = step(U=100, Q=100 * 50)
    for g in range(1, 10):
        S = S + step(n=1, K=100 + g)
    assert 1 * S < 100.0 < 2 * S and 4 * S < 300.0 < 5 * S
    assert out["backlog_growth"] == (30 - 4) - (11 - 1) == 16
    assert out["kv_occupancy_first"] == pytest.approx(7 / 64, rel=1e-12)
    assert out["kv_occupancy_last"] == pytest.approx(7 / 64, rel=1e-12)
    # with the drain all 20 of the cohort (arrivals 100..290) complete, one at a time
    assert (out["arrivals"], out["completed"]) == (20, 20)


def test_kv_occupancy_quarters():
    """W = 0, H = 10000, q = 2500.  A (P 100, O 10) at 100 lies in the first quarter; B
    (P 200, O 10) at 9950 runs past the horizon (clipped there): its blocks are
    ceil(200/16) = 13, 14 from its 9th decode step (kv 209).  By hand from lone_area."""
    wl = make([(100.0, 100, 10, 0.5), (9950.0, 200, 10, 0.5)])
    out = tr.simulate(wl, params(kv_blocks=64), [1.0], [], "round_robin", 1, check=True)
    a = lone_area(100.0, 100, 10, 0.0, 2500.0)
    b = lone_area(9950.0, 200, 10, 7500.0, 10000.0)
    assert lone_times(9950.0, 200, 10)[-1] > 10000.0
    assert out["kv_occupancy_first"] == pytest.approx(a / 2500.0 / 64, rel=1e-9)
    assert out["kv_occupancy_last"] == pytest.approx(b / 2500.0 / 64, rel=1e-9)
    assert out["kv_occupancy"] == pytest.approx((a + b) / 10000.0 / 64, rel=1e-9)
    assert out["backlog_growth"] == 1 - 0


@pytest.mark.slow
def test_allowance_exact_changes_least_tokens():
    """Two replicas, h = 0.5 (ties to replica 1: frac(0.5 + 0.618) < frac(0.5 + 1.236)).
    (a) fresh: r0 (P 300, O 10) at 0 -> replica 1 (tie); r1 (P 100, O 2000) at 1 ->
    replica 2 (tau 300 + 256 = 556 against 0, or 300 + 10 = 310 against 0).  r2 (P 100,
    O 5) at 2 (no token yet, g = 0): A = 256: tau = (556, 100 + 256 = 356) -> replica 2;
    exact: tau = (310, 100 + 2000 = 2100) -> replica 1.
    (b) periodic_local, period 1000 (no publication before 500): r0 (P 100, O 2000) at 1
    -> 1 (tie); r1 (P 1000, O 10) at 2 -> 2; r2 (P 100, O 5) at 3 sees the router's own
    additions P_r + A or P_r + O_r: A: (356, 1256) -> 1; exact: (2100, 1010) -> 2."""
    wl = make([(0.0, 300, 10, 0.5), (1.0, 100, 2000, 0.5), (2.0, 100, 5, 0.5)])
    assert step(U=300, Q=300 * 150) > 2.0
    for allowance, third, taus in ((256, 1, (556, 356)), ("exact", 0, (310, 2100))):
        out = tr.simulate(wl, params(kv_blocks=300, allowance_tokens=allowance), [1.0, 1.0], [],
                          "least_tokens", 1, check=True, _return_sim=True)
        assert [x[2] for x in routes(out)] == [0, 1, third], allowance
        views = [e[3] for e in events_of(out["_sim"].trace, "view")]
        assert (views[2][0][1], views[2][1][1]) == taus
    wl = make([(1.0, 100, 2000, 0.5), (2.0, 1000, 10, 0.5), (3.0, 100, 5, 0.5)])
    for allowance, third, taus in ((256, 0, (356, 1256)), ("exact", 1, (2100, 1010))):
        p = params(kv_blocks=300, allowance_tokens=allowance, signal_mode="periodic_local",
                   period_ms=1000.0)
        out = tr.simulate(wl, p, [1.0, 1.0], [], "least_tokens", 1, check=True, _return_sim=True)
        assert [x[2] for x in routes(out)] == [0, 1, third], allowance
        views = [e[3] for e in events_of(out["_sim"].trace, "view")]
        assert (views[2][0][1], views[2][1][1]) == taus


@pytest.mark.parametrize("key, value", [("allowance_tokens", "max"), ("allowance_tokens", -1),
                                        ("allowance_tokens", 2.5), ("drain_s", -1.0),
                                        ("drain_s", math.inf), ("ttft_timeout_ms", 0.0)])
def test_new_keys_refuse_bad_values(key, value):
    with pytest.raises(ValueError):
        tr.simulate(make([(0.0, 100, 2, 0.5)]), params(kv_blocks=64, **{key: value}), [1.0], [],
                    "round_robin", 1)


def test_a_hit_on_uncomputed_blocks_whose_reserver_fails():
    """§2 "Computed blocks", read literally at a completion (decision D26 of the reference).
    X (P 100, O 1) at 0 keeps the replica busy for dX = step(U=100, Q=100 50); A (P 1600:
    group 0's 96 ids + 4 own) at 1 and B (P 1700: the 96 + 10 own, and one anonymous
    block) at 2 are admitted together at dX: A takes all its blocks (hit 0, u 1600), B
    references A's 96 group blocks, still uncomputed, as its hit (m = 1536, u = 164):
    d2 = step(U=1764, Q=1600 (0 + 0 + 800) + 164 (1536 + 0 + 82)).  ttft_timeout_ms =
    dX + d2 - 1.5: A's deadline (1 + that) falls inside iteration 2: A fails, its 4 own
    blocks (uncomputed) become free, the 96 stay (B holds them).  B's chunk ends at
    t2 = dX + d2 (before its deadline, 2 + that): its own 10 id'd blocks are computed
    (1536 <= 16 j, 1700 >= 16 (j + 1)), the 96 are not (B counted them in m).  B completes
    at t2 + step(n=1, K=1701): the 96 drop to refcount 0 uncomputed: free, not cached.
    C (group 0, P 1600) at 1000 then has no hit: u = 1600."""
    wl = make([(0.0, 100, 1, 0.5), (1.0, 1600, 5, 0.5, group_ids(0, 1600, 1)),
               (2.0, 1700, 2, 0.5, group_ids(0, 1700, 2)), (1000.0, 1600, 1, 0.5, group_ids(0, 1600, 3))])
    dX = step(U=100, Q=100 * 50)
    d2 = step(U=1764, Q=1600 * (0 + 0 + 800) + 164 * (1536 + 0 + 82))
    t2 = dX + d2
    ttft = t2 - 1.5
    a_deadline, b_deadline = 1.0 + ttft, 2.0 + ttft
    assert dX < a_deadline < t2 < b_deadline
    dC = step(U=1600, Q=1600 * 800)
    assert dC < ttft
    out = tr.simulate(wl, params(kv_blocks=400, ttft_timeout_ms=ttft), [1.0], [], "round_robin", 1,
                      check=True, _return_sim=True)
    trace = out["_sim"].trace
    assert [(e[3], e[4], e[5]) for e in events_of(trace, "admit")] == [(0, 0, 100), (1, 0, 1600), (2, 96, 164),
                                                                      (3, 0, 1600)]
    assert fails_of(out) == [(a_deadline, "ttft_timeout", 1, 1)]
    t3 = t2 + step(n=1, K=1701)
    freed = [(e[0], e[4]) for e in events_of(trace, "free_uncomputed")]
    assert freed == [(a_deadline, j) for j in range(96, 100)] + [(t3, j) for j in range(96)]
    rec = out["records"]
    assert [r["outcome"] for r in rec] == ["completed", "failed", "completed", "completed"]
    assert rec[2]["completion"] == t3 and rec[3]["completion"] == 1000.0 + dC
    assert out["prefix_hit_rate"] == pytest.approx(1536 / (100 + 1600 + 1700 + 1600), rel=1e-12)
    resident = out["_sim"].replicas[0].resident
    assert all(bid in resident for bid in group_ids(0, 1700, 2)[96:])   # B's own, computed, cached


def test_the_reference_knows_every_registered_policy():
    """The reference simulates exactly the registered policies and their aliases
    (routesim.batching.policies): a policy added to the registry needs its reference
    reading before the differential tests, which take the registry's list, can pass."""
    from routesim.batching.policies import NAMES
    assert set(tr.POLICIES) == set(NAMES)
