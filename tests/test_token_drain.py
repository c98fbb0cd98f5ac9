"""The drain, the first-token deadline, computed blocks, ITL, the steady-state checks and
the clairvoyant allowance (token-model.md §2 "Computed blocks", §3, §6, §7), on runs
worked by hand.

Every case is a plain-CSV trace (docs/traces.md) on one or two replicas whose step
constants are powers of two, so every time below is exact in floating point and is
derived here from the page's step formula, not from the engine:
``d = c_0 + c_pf·U + c_attn·Q + c_dec·n + c_kv·K`` with ``c_0 = 8``, ``c_pf = 1/16``,
``c_attn = c_dec = 0`` and ``c_kv = 1/16`` (or 0 where said). Warm-up 1 s, measurement
1 s: the window is (1000, 2000] ms.
"""

import math

import numpy as np
import pytest

import routesim

B = 16  # block_tokens


def _sweep(tmp_path, rows, *, replicas=1, kv_blocks=64, max_batched_tokens=8192, max_batch=256,
           per_kv_token=0.0625, per_prefill_token=0.0625, drain_s=None, policy="round_robin", extra=""):
    """A one-stage, one-run batching sweep replaying ``rows`` (arrival ms, P, O[, ids])."""
    lines = ["arrival_ms,prompt_tokens,output_tokens,block_ids"]
    for row in rows:
        a, P, O = row[:3]
        ids = " ".join(str(x) for x in row[3]) if len(row) > 3 else ""
        lines.append(f"{a!r},{P},{O},{ids}")
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    drain = "" if drain_s is None else f"drain_s = {drain_s!r}"
    text = f"""
name = "hand"
[replica]
kind = "batching"
kv_blocks = {kv_blocks}
block_tokens = {B}
max_batch = {max_batch}
max_batched_tokens = {max_batched_tokens}
step_ms = {{ base = 8, per_prefill_token = {per_prefill_token}, per_prefill_token_pair = 0, per_decode_sequence = 0, per_kv_token = {per_kv_token} }}
[simulation]
warmup_s = 1
measure_s = 1
{drain}
[cluster.heterogeneity]
one = {[1] * replicas}
[workload]
source = "trace"
trace = {{ path = "t.csv", format = "csv" }}
{extra}
[grid]
heterogeneity = ["one"]
scenario = ["steady"]
[[stages]]
name = "s"
policy = ["{policy}"]
seeds = [1]
"""
    path = tmp_path / "hand.toml"
    path.write_text(text)
    return routesim.load_sweep(path)


def _run(tmp_path, rows, **kw):
    """The run's Dataset, squeezed to one run."""
    ds = routesim.run(_sweep(tmp_path, rows, **kw), show_progress=False)["s"]
    return ds.squeeze()


def _v(ds, name):
    x = ds[name].values
    return x.item() if x.ndim == 0 else x


# --- a lone request on an idle replica, finishing after the horizon -------------------
#
# P = 64 (4 blocks), O = 50, arriving at a = 1499.4375. Its prefill (U = 64, nothing
# decoding) takes 8 + 64/16 = 12 ms: first token t_0 = 1511.4375. Decode iteration k
# (k = 1 … 49) has K = 64 + k KV tokens: d_k = 8 + (64 + k)/16 = 12 + k/16, so token k
# is at t_k = t_0 + 12k + k(k+1)/32, and the last, k = 49, at 1511.4375 + 588 + 76.5625
# = 2176 ms: 176 ms after the horizon.
LONE_A = 1499.4375
LONE_T0 = LONE_A + 12.0
LONE = [(LONE_A, 64, 50)]


def _t(k):
    return LONE_T0 + 12.0 * k + k * (k + 1) / 32.0


def test_lone_request_finishes_in_the_drain(tmp_path):
    assert _t(49) == 2176.0
    ds = _run(tmp_path, LONE)  # the default drain, 600 s
    assert (_v(ds, "arrivals"), _v(ds, "completed"), _v(ds, "unfinished")) == (1, 1, 0)
    assert _v(ds, "ttft_p50") == 12.0
    assert _v(ds, "e2e_p50") == 2176.0 - LONE_A == 676.5625
    assert _v(ds, "tpot_p50") == (2176.0 - LONE_T0) / 49
    # window metrics keep the window: no completion in (1000, 2000], the tokens emitted
    # by 2000 (k = 0 … 37: t_37 = 1999.375, t_38 = 2013.75)
    assert _t(37) <= 2000.0 < _t(38)
    assert _v(ds, "throughput") == 0.0
    assert _v(ds, "token_throughput") == 38.0
    assert _v(ds, "replica_tokens") == 38 and _v(ds, "replica_completed") == 0


def test_lone_request_without_drain_is_unfinished(tmp_path):
    ds = _run(tmp_path, LONE, drain_s=0)
    assert (_v(ds, "completed"), _v(ds, "unfinished")) == (0, 1)
    assert math.isnan(_v(ds, "ttft_p50")) and math.isnan(_v(ds, "e2e_mean"))
    assert _v(ds, "token_throughput") == 38.0


@pytest.mark.parametrize("drain_s,completed", [(0.176, 1), (0.175, 0)])
def test_drain_limit_is_inclusive(tmp_path, drain_s, completed):
    """A completion exactly at horizon + drain is processed; one later is cut off."""
    ds = _run(tmp_path, LONE, drain_s=drain_s)
    assert (_v(ds, "completed"), _v(ds, "unfinished")) == (completed, 1 - completed)


def test_lone_request_itl_and_steady_state(tmp_path):
    """ITL: the gaps whose later token is in (1000, 2000] are d_1 … d_37 = 12 + j/16;
    nearest rank over 37: p50 the 19th, p90 the 34th, p99 the 37th. Steady state: 0
    requests in the system after 1000 ms, 1 after 2000 ms; KV: nothing in the first
    quarter [1000, 1250]; in the last, [1750, 2000], iteration k (from t_(k-1)) holds
    ceil((64 + k)/16) blocks of the pool of 64."""
    for drain_s in (None, 0):  # window metrics: the same with or without the drain
        ds = _run(tmp_path, LONE, drain_s=drain_s)
        assert _v(ds, "itl_p50") == 12 + 19 / 16
        assert _v(ds, "itl_p90") == 12 + 34 / 16
        assert _v(ds, "itl_p99") == 12 + 37 / 16 == _v(ds, "itl_max")
        assert _v(ds, "backlog_growth") == 1
        assert _v(ds, "kv_occupancy_first") == 0.0
        area = 0.0
        for k in range(1, 50):  # iteration k spans [t_(k-1), t_k]
            lo, hi = max(_t(k - 1), 1750.0), min(_t(k), 2000.0)
            if hi > lo:
                area += math.ceil((64 + k) / B) * (hi - lo)
        assert _v(ds, "kv_occupancy_last") == pytest.approx(area / 64 / 250.0, rel=1e-12)
        assert area > 0


# --- overload: one replica, one sequence at a time ------------------------------------
#
# A request every 5 ms from 0 to 1995 ms (400), P = 16, O = 1: each is one prefill
# iteration of 8 + 16/16 = 9 ms, back to back from time 0, so request j completes at
# 9(j + 1). After processing time T, floor(T/5) + 1 have arrived (T < 2000) and
# floor(T/9) completed: 201 − 111 = 90 after 1000, 400 − 222 = 178 after 2000.
OVERLOAD = [(5.0 * k, 16, 1) for k in range(400)]


@pytest.mark.parametrize("drain_s,completed", [(None, 200), (0, 22), (1, 133)])
def test_overload_backlog_and_drain(tmp_path, drain_s, completed):
    """The cohort is requests 200 … 399. By 2000 ms requests 0 … 221 have completed
    (22 of the cohort); by 3000 ms (drain_s = 1) 0 … 332 (133); the default drain lets
    all finish (the last at 9 · 400 = 3600 ms)."""
    ds = _run(tmp_path, OVERLOAD, drain_s=drain_s, max_batch=1, kv_blocks=8)
    assert _v(ds, "arrivals") == 200
    assert (_v(ds, "completed"), _v(ds, "unfinished")) == (completed, 200 - completed)
    assert _v(ds, "backlog_growth") == 178 - 90
    assert _v(ds, "throughput") == 111.0  # completions in (1000, 2000]: 222 − 111
    # one block referenced at every moment: 1/8 of the pool, in each quarter too
    for name in ("kv_occupancy", "kv_occupancy_first", "kv_occupancy_last"):
        assert _v(ds, name) == 0.125, name
    assert math.isnan(_v(ds, "itl_p50")) and math.isnan(_v(ds, "itl_max"))  # O = 1: no gaps
    if completed == 200:
        # request k completes at 9(k + 1): e2e 9 + 4k; the median of k = 200 … 399 is k = 299
        assert _v(ds, "e2e_p50") == 9 + 4 * 299
        assert _v(ds, "e2e_p99") == 9 + 4 * 397


# --- ITL across a preemption ---------------------------------------------------------
#
# Every iteration takes c_0 = 8 ms (c_pf = c_kv = 0). Pool: 4 blocks. A (P = 16,
# O = 40) at 1100, B (P = 16, O = 40) at 1104. Iteration j starts at 1100 + 8(j − 1).
# A: admitted in 1, tokens at the ends of 1 … 40 (1108 … 1420). B: admitted in 2,
# tokens at the ends of 2 … 17 (16 tokens, the last at 1236). A's KV reaches 32 tokens
# before iteration 18 (16 + (j − 2)): it needs a third block, B's two are the only others,
# so B is preempted at 1236 (g = 16 kept). B cannot come back while A holds 3 blocks and
# its own cached block is the only other (it would need one more); A's growth before
# iteration 34 evicts that block. A completes at 1420; B is admitted in iteration 41 with
# no hit (u = 32) and emits at 1428 (gap 1428 − 1236 = 192 ms), then at 1436 … 1612.
# Gaps: A 39, B 15 + 1 + 23, all 8 ms but the one of 192: 78 gaps, nearest rank p99 the 78th.

def test_itl_gap_across_a_preemption(tmp_path):
    ds = _run(tmp_path, [(1100.0, 16, 40), (1104.0, 16, 40)], kv_blocks=4, per_kv_token=0,
              per_prefill_token=0)
    assert _v(ds, "preemptions") == 1
    assert _v(ds, "completed") == 2
    assert _v(ds, "e2e_p99") == 1612.0 - 1104.0  # B's, the larger of two
    assert _v(ds, "ttft_p99") == 12.0  # B: 1116 − 1104 (its first token is kept across the preemption)
    assert _v(ds, "itl_max") == 192.0
    assert _v(ds, "itl_p99") == 192.0
    assert _v(ds, "itl_p90") == 8.0 and _v(ds, "itl_p50") == 8.0
    assert _v(ds, "token_throughput") == 80.0


# --- first-token deadline ------------------------------------------------------------
#
# P = 640 (40 blocks) with max_batched_tokens = 64: ten prefill chunks of 64 tokens,
# each 8 + 64/16 = 12 ms. Alone at 1100: its first token at 1220, then one decode
# iteration (K = 641: 8 + 641/16 = 48.0625 ms) to 1268.0625 (O = 2).
LONG_IDS = list(range(40))


@pytest.mark.parametrize("ttft,completed", [(120, 1), (119, 0)])
def test_first_token_at_the_deadline_wins(tmp_path, ttft, completed):
    ds = _run(tmp_path, [(1100.0, 640, 2, LONG_IDS)], max_batched_tokens=64,
              extra=f"[client]\nttft_timeout_ms = {ttft}")
    assert (_v(ds, "completed"), _v(ds, "failed")) == (completed, 1 - completed)
    if completed:
        assert _v(ds, "ttft_p50") == 120.0 and _v(ds, "e2e_p50") == 168.0625
    assert _v(ds, "wasted_tokens") == 0  # failing before the first token, it emitted none


def test_first_token_timeout_frees_the_uncomputed_blocks(tmp_path):
    """r0 (at 1100) fails its first-token deadline at 1200 during its ninth chunk: eight
    chunks (512 tokens, 32 blocks) are computed and stay cached, the other 8 blocks were
    never computed and become free. r1 (at 1300, the same ids) hits 32 blocks, not 39
    (the cap): m = 512, u = 128, two chunks to its first token at 1324, then 48.0625 ms.
    prefix_hit_rate = (0 + 512) / (640 + 640)."""
    rows = [(1100.0, 640, 2, LONG_IDS), (1300.0, 640, 2, LONG_IDS)]
    sweep = _sweep(tmp_path, rows, max_batched_tokens=64, extra="[client]\nttft_timeout_ms = 100")
    ds = routesim.run(sweep, show_progress=False)["s"].squeeze()
    assert (_v(ds, "completed"), _v(ds, "failed")) == (1, 1)
    assert _v(ds, "prefix_hit_rate") == 512 / 1280
    assert _v(ds, "ttft_p50") == 24.0 and _v(ds, "e2e_p50") == 24.0 + 48.0625
    tl = routesim.trace(sweep, interval_ms=100).squeeze()
    assert int(tl.ttft_timeouts_interval.sum()) == 1
    assert int(tl.ttft_timeouts_interval.sel(time=1.2)) == 1  # in (1.1 s, 1.2 s]
    assert int(tl.timeouts_interval.sum()) == 0
    assert int(tl.failures_interval.sum()) == 1


def test_coinciding_deadlines_fail_once_as_a_timeout(tmp_path):
    """timeout_ms = ttft_timeout_ms = 120: the first token at 1220 does not save the
    attempt from its whole-attempt deadline at 1220; one failure, a timeout, and the
    token it emitted is wasted."""
    sweep = _sweep(tmp_path, [(1100.0, 640, 2, LONG_IDS)], max_batched_tokens=64,
                   extra="[client]\ntimeout_ms = 120\nttft_timeout_ms = 120")
    ds = routesim.run(sweep, show_progress=False)["s"].squeeze()
    assert (_v(ds, "completed"), _v(ds, "failed"), _v(ds, "wasted_tokens")) == (0, 1, 1)
    tl = routesim.trace(sweep, interval_ms=100).squeeze()
    assert (int(tl.timeouts_interval.sum()), int(tl.ttft_timeouts_interval.sum())) == (1, 0)
    assert int(tl.failures_interval.sum()) == 1


# --- allowance_tokens = "exact" --------------------------------------------------------
#
# least_tokens on two idle replicas. r0 (P = 32, O = 2) at 1000 goes by the tie rule;
# r1 (P = 16, O = 1000) at 1000.5 to the other (the first holds τ = 32 + A > 0). At
# 1001 r2 compares τ: with A = 256, 32 + 256 = 288 against 16 + 256 = 272: r1's replica;
# with the exact lengths, 32 + 2 = 34 against 16 + 1000: r0's.

def test_exact_allowance_routes_by_output_length(tmp_path):
    rows = [(1000.0, 32, 2), (1000.5, 16, 1000), (1001.0, 16, 5)]
    got = {}
    for a in (256, '"exact"'):
        ds = _run(tmp_path, rows, replicas=2, policy="least_tokens",
                  extra=f"[policy]\nallowance_tokens = {a}")
        got[a] = list(_v(ds, "assigned"))
        assert _v(ds, "completed") == 3
    assert sorted(got[256]) == [1, 2]
    assert got['"exact"'] == got[256][::-1]


def test_exact_allowance_is_an_attribute_and_a_coordinate(tmp_path):
    rows = [(1000.0, 32, 2), (1000.5, 16, 1000), (1001.0, 16, 5)]
    ds = _run(tmp_path, rows, replicas=2, policy="least_tokens", extra='[policy]\nallowance_tokens = "exact"')
    assert ds.attrs["allowance_tokens"] == "exact"
    one = {a: list(_run(tmp_path, rows, replicas=2, policy="least_tokens",
                        extra=f"[policy]\nallowance_tokens = {a}").assigned.values) for a in ("256", '"exact"')}
    # as a grid axis (a stage's list): the coordinate holds both, as text
    ds2 = _run(tmp_path, rows, replicas=2, policy="least_tokens",
               extra='[policy]\nallowance_tokens = [256, "exact"]')
    assert list(ds2.allowance_tokens.values) == ["256", "exact"]
    assert list(ds2.assigned.sel(allowance_tokens="256").values) == one["256"]
    assert list(ds2.assigned.sel(allowance_tokens="exact").values) == one['"exact"']


# --- drain_s = 0 is today's model -------------------------------------------------------

def test_zero_drain_stops_at_the_horizon(tmp_path):
    """With drain_s = 0 nothing after the horizon is processed: the lone request's
    decode iteration that would end at t_38 = 2013.75 is not, so it emitted 38 tokens
    (all in the window) and is unfinished; the default drain completes it, and its
    tokens after the horizon count in no window metric."""
    d0 = _run(tmp_path, LONE, drain_s=0)
    dd = _run(tmp_path, LONE)
    window = [v for v in d0.data_vars if v not in ("completed", "unfinished", "ttft_p50", "ttft_p90",
                                                    "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99",
                                                    "e2e_p50", "e2e_p90", "e2e_p99", "e2e_mean",
                                                    "attainment", "goodput", "replica_ttft_p50",
                                                    "replica_ttft_p99")]
    for v in window:
        np.testing.assert_array_equal(d0[v].values, dd[v].values, err_msg=v)
    assert _v(d0, "unfinished") == 1 and _v(dd, "completed") == 1


def test_a_capped_hit_leaves_a_computed_last_block_beyond_a_hole(tmp_path):
    """max_batched_tokens = 96: r0 (at 1100, P = 640, ids 0 … 39) computes 96 tokens in
    each of iterations 1 … 6 (8 + 96/16 = 14 ms each, to 1184). r1 (at 1150, the same
    ids) is admitted in iteration 7 (1184, budget 96 − 64 = 32): all 40 blocks are
    resident (r0 reserved them), its hit is capped at 39 (m = 624, u = 16), so it computes
    block 39 alone; the iteration (U = 80) ends at 1197. r0's first-token deadline,
    1100 + 90, falls inside it: r0 fails with 36 blocks computed (576 tokens), and r1 still
    references the other 4. r1's first token at 1197, its last at 1197 + 48.0625 (K = 641);
    then blocks 36 … 38, never computed, become free, and block 39 stays cached beyond the
    hole: 37 cached blocks. r2 (at 1300, the same ids) hits 36 blocks (m = 576, one chunk
    of 64: first token at 1312) and references block 39 rather than taking a new one:
    nothing stays cached. prefix_hit_rate = (0 + 624 + 576) / (3 · 640)."""
    rows = [(1100.0, 640, 2, LONG_IDS), (1150.0, 640, 2, LONG_IDS), (1300.0, 640, 2, LONG_IDS)]
    sweep = _sweep(tmp_path, rows, max_batched_tokens=96, extra="[client]\nttft_timeout_ms = 90")
    ds = routesim.run(sweep, show_progress=False)["s"].squeeze()
    assert (_v(ds, "completed"), _v(ds, "failed")) == (2, 1)
    assert _v(ds, "prefix_hit_rate") == 1200 / 1920
    assert _v(ds, "ttft_p50") == 12.0 and _v(ds, "ttft_p90") == 1197.0 - 1150.0
    tl = routesim.trace(sweep, interval_ms=50).squeeze()
    at = lambda v, s: int(tl[v].sel(time=s))  # noqa: E731
    assert (at("kv_referenced", 1.2), at("kv_cached", 1.2)) == (41, 0)   # r1: all 40, and one for its KV token 641
    assert (at("kv_referenced", 1.25), at("kv_cached", 1.25)) == (0, 37)  # 36 + the orphan
    assert (at("kv_referenced", 1.3), at("kv_cached", 1.3)) == (40, 0)   # r2 references it
    assert (at("kv_referenced", 1.4), at("kv_cached", 1.4)) == (0, 40)   # r2 computed the hole


def test_weighted_nearest_rank_is_the_rank_of_the_repeated_values():
    """routesim.ranks.of_weighted_nb (how ITL ranks (value, count) pairs) against the
    nearest rank of the values written out, on random multisets with many ties."""
    from routesim.ranks import of_weighted_nb, rank_nb

    rng = np.random.default_rng(0)
    for trial in range(2000):
        m = int(rng.integers(1, 40))
        v = rng.integers(0, 8, m).astype(float) if trial % 2 else rng.random(m)
        c = rng.integers(1, 5, m)
        full = np.sort(np.repeat(v, c))
        ps = np.array([1, 50, 50, 90, 99, 100])
        want = [full[rank_nb(p, full.size)] for p in ps]
        assert list(of_weighted_nb(v, c, ps)) == want, (v, c)
    assert np.isnan(of_weighted_nb(np.zeros(0), np.zeros(0, np.int64), ps)).all()


def test_weighted_nearest_rank_of_many_values_narrowed_by_buckets():
    """Beyond ranks.NARROW values (inter-token gaps of a whole window), of_weighted_nb
    first counts the values in buckets and selects only in the ones holding the ranks:
    the same ranks as the values written out and sorted, with ties across and within
    buckets, values spread over many octaves or packed in a few ulps, ranks in one
    bucket, and the fallbacks (a negative value, -0.0, an infinity) alike."""
    from routesim.ranks import NARROW, of_weighted_nb, rank_nb

    rng = np.random.default_rng(1)
    ps = np.array([1, 50, 50, 90, 99, 100])
    cases = []
    for trial in range(24):
        m = int(rng.integers(NARROW + 1, 3 * NARROW))
        kind = trial % 6
        if kind == 0:
            v = rng.lognormal(3.0, 1.5, m)                      # many octaves
        elif kind == 1:
            v = np.round(rng.lognormal(3.0, 0.5, m), 1)         # ties across buckets
        elif kind == 2:
            v = 20.0 + rng.integers(0, 50, m) * np.spacing(20.0)  # a few ulps apart
        elif kind == 3:
            v = np.full(m, 7.5)                                 # one value
        elif kind == 4:
            v = rng.random(m)
            v[:m // 2] = 0.0                                    # zeros, then tiny to 1
        else:
            v = rng.lognormal(3.0, 1.0, m)
            v[int(rng.integers(m))] = (-1.0, -0.0, np.inf)[trial % 3]  # not narrowed
        c = rng.integers(1, 6, m)
        cases.append((v, c))
    for v, c in cases:
        full = np.sort(np.repeat(v, c))
        want = [full[rank_nb(p, full.size)] for p in ps]
        assert list(of_weighted_nb(v, c, ps)) == want
