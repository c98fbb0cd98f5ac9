"""vLLM 0.30.0's decode side of prefill/decode disaggregation, recorded (issue 42 item 5).

conformance/recorded/vllm-0.30.0-decode.json.gz holds what vLLM's own V1 ``Scheduler``
did on 100 decode-side cases (``python -m conformance.record --decode``): a KV connector
loaded by vLLM's factory (conformance/decode_connector.py, NIXL pull mode's decode-side
scheduler behaviour), requests sent with ``do_remote_prefill``, their reads reported
finished on the step clock by conformance/vllm_driver.py. The first tests hold the
recording to what docs/model.md ("What vLLM 0.30.0 does", items 3-4) says vLLM does,
read from its source: the whole prompt allocated at admission, the request parked in
``WAITING_FOR_REMOTE_KVS``, a local hit shortening the read, the promotion with
``num_computed_tokens = P − 1`` and a one-token step that samples the first token.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for _p in (str(REPO), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from conformance import record  # noqa: E402


@pytest.fixture(scope="module")
def recording():
    return record.load(record.RECORDED_DECODE)


def pairs(rec):
    return list(zip(rec["cases"], rec["results"]))


def test_decode_recording_is_the_full_set(recording):
    h = recording["header"]
    assert h["vllm_version"] == "0.30.0"
    assert h["command"] == "python -m conformance.record --decode"
    assert h["generator"]["function"] == "generate_decode"
    assert (h["cases"], h["steps"]) == (100, 24_686)
    reqs = [r for c in recording["cases"] for r in c["requests"]]
    assert (len(reqs), sum("transfer_ms" in r for r in reqs)) == (2_260, 1_669)
    assert all(not c["replica"].get("async_scheduling") for c in recording["cases"])


def test_every_remote_request_reads_its_prompt_less_its_local_hit_once(recording):
    """get_num_new_matched_tokens = P − the block-aligned local hit (NIXL's
    _get_remote_prefill_token_count): one read per remote request, none for a local one;
    the local hit is whole blocks, capped below P (floor((P − 1)/b) blocks), and a hit
    shortens the read (some do)."""
    shortened = 0
    for case, res in pairs(recording):
        b = case["replica"]["block_size"]
        loads = {}
        for s in res["steps"]:
            for k, local, tokens in s["loads"]:
                assert k not in loads, (case["name"], k)
                loads[k] = (local, tokens)
        for r, rr in zip(case["requests"], res["requests"]):
            if "transfer_ms" not in r:
                assert r["id"] not in loads and "load" not in rr
                continue
            local, tokens = loads[r["id"]]
            assert rr["load"][1:3] == [local, tokens]
            assert local % b == 0 and local <= (r["prompt_tokens"] - 1) // b * b
            assert tokens == r["prompt_tokens"] - local
            shortened += local > 0
    assert shortened > 100


def test_the_whole_prompt_is_allocated_when_the_read_is_admitted(recording):
    """A step that only admits reads (schedules nothing, preempts nothing) references
    between Σ (ceil(P/b) − hit blocks) and Σ ceil(P/b) more blocks than the step before
    (hit blocks already referenced by another request add nothing): every block of the
    prompt is taken at admission, before any of it has arrived."""
    checked = 0
    for case, res in pairs(recording):
        b = case["replica"]["block_size"]
        P = {r["id"]: r["prompt_tokens"] for r in case["requests"]}
        steps = res["steps"]
        for prev, s in zip(steps, steps[1:]):
            if s["sched"] or s["preempted"] or not s["loads"]:
                continue
            lo = sum(-(-P[k] // b) - local // b for k, local, _t in s["loads"])
            hi = sum(-(-P[k] // b) for k, _l, _t in s["loads"])
            assert lo <= s["referenced"] - prev["referenced"] <= hi, (case["name"], s["T"])
            checked += 1
    assert checked > 100


def test_a_request_waits_for_its_read_then_one_token_samples_its_first_token(recording):
    """WAITING_FOR_REMOTE_KVS: nothing of a remote request is scheduled from its admission
    until a step after its read was reported; then it is scheduled from that state
    (``promoted``) with one token, and that step's end is its first token."""
    for case, res in pairs(recording):
        for r, rr in zip(case["requests"], res["requests"]):
            if "transfer_ms" not in r:
                continue
            k = r["id"]
            admitted, _local, _tokens, _end, reported, promoted = rr["load"]
            first = [s for s in res["steps"] if any(q == k for q, _x in s["sched"])][0]
            assert first["T"] == promoted >= reported and first["T"] >= admitted
            assert k in first["promoted"] and dict(first["sched"])[k] == 1
            assert rr["first_token_ms"] == first["T"] + first["d"]
            assert not any(k in s["promoted"] for s in res["steps"] if s is not first)


def test_the_promotion_recomputes_the_last_prompt_token(recording):
    """_update_waiting_for_remote_kv: a full prompt loaded sets num_computed_tokens = P − 1,
    so a step scheduling only promoted requests has U = their count and
    Q = Σ 1 · ((P − 1) + 1/2) (VLLM-SCHEDULER.md §4's terms of a one-token prefill chunk)."""
    checked = 0
    for case, res in pairs(recording):
        P = {r["id"]: r["prompt_tokens"] for r in case["requests"]}
        for s in res["steps"]:
            if s["promoted"] and len(s["sched"]) == len(s["promoted"]):
                Q = 0.0
                for k in s["promoted"]:
                    Q += 1 * ((P[k] - 1) + 1 / 2.0)
                assert (s["U"], s["n"], s["Q"]) == (len(s["promoted"]), 0, Q)
                checked += 1
    assert checked > 100


def test_reads_end_on_the_step_clock(recording):
    """A read starts with the step that admitted it and lasts transfer_ms +
    transfer_ms_per_token · tokens; it is reported at the end of the first step ending at
    or after it, or at its own end when the engine was idle (a poll)."""
    polled = 0
    for case, res in pairs(recording):
        per = case["replica"]["transfer_ms_per_token"]
        ends = {s["T"] + s["d"] for s in res["steps"]}
        starts = {s["T"] for s in res["steps"] if s["loads"]}
        for r, rr in zip(case["requests"], res["requests"]):
            if "transfer_ms" not in r:
                continue
            admitted, _local, tokens, end, reported, _promoted = rr["load"]
            assert admitted in starts
            assert end == admitted + (r["transfer_ms"] + per * tokens)
            assert reported >= end and (reported in ends or reported == end)
            polled += reported == end and reported not in ends
    assert polled > 10


def test_the_cases_wait_for_blocks_and_preempt(recording):
    """The cases exercise what the brief asks: reads admitted later than the first step
    after their arrival (no room yet: blocks, max_num_seqs), preemptions, and a preempted remote
    request recomputing its prompt locally (NIXL sets do_remote_prefill = False after the
    first allocation: its later admissions are ordinary, with a local hit list)."""
    waited = preempted_remote = 0
    for case, res in pairs(recording):
        for r, rr in zip(case["requests"], res["requests"]):
            if "transfer_ms" not in r:
                continue
            after = [s["T"] for s in res["steps"] if s["T"] >= r["arrival_ms"]]
            waited += rr["load"][0] > after[0]
            if rr["preemptions"]:
                preempted_remote += 1
                assert len(rr["hits"]) == rr["preemptions"]
    assert waited > 100 and preempted_remote > 10
    assert sum(bool(s["preempted"]) for _c, res in pairs(recording) for s in res["steps"]) > 10


# ------------------------------------------------------------------------------------
# the reference's vllm mode on the decode side (VLLM-MODE.md 36-41)
# ------------------------------------------------------------------------------------

import copy  # noqa: E402
import math  # noqa: E402

import token_reference as tr  # noqa: E402

from conformance import compare_page  # noqa: E402


def _differences(rec, every=1, check=False):
    bad = {}
    steps = 0
    for case, res in pairs(rec)[::every]:
        log = compare_page.vllm_log(case, check=check)
        diffs = compare_page.vllm_differences(case, res, log)
        if diffs:
            bad[case["name"]] = diffs[:3]
        steps += len(log["steps"])
    return bad, steps


@pytest.mark.slow
def test_every_decode_case_is_identical_step_by_step(recording):
    """All 100 decode-side cases, every step (T, d, the scheduled requests in vLLM's order,
    preemptions, admissions, reads admitted with their local hits, promotions, U, Q, n,
    K, evictions, block counts) and every request (times, preemptions, hits, and its
    read: admission, local hit, tokens, end, report, promotion), floats bit for bit."""
    bad, steps = _differences(recording)
    assert not bad, f"{len(bad)} cases differ from vLLM, e.g. {list(bad.items())[:3]}"
    assert steps == 24_686


def test_every_tenth_decode_case_is_identical_with_the_invariants(recording):
    """The fast sample: every 10th case with check=True (the blocks a read holds, their
    hashes only once promoted, the in-flight prefills' reservation 0)."""
    bad, steps = _differences(recording, every=10, check=True)
    assert not bad, f"{len(bad)} cases differ from vLLM, e.g. {list(bad.items())[:3]}"
    assert steps > 1_000


def test_the_decode_comparison_can_fail(recording):
    """A read ending one ulp later, a local hit one block shorter, a promotion left out,
    a read's report one ulp later: each is reported."""
    k = next(i for i, (c, r) in enumerate(pairs(recording))
             if any(s["loads"] and any(l[1] for l in s["loads"]) for s in r["steps"]))
    case, res = pairs(recording)[k]
    log = compare_page.vllm_log(case)
    assert not compare_page.vllm_differences(case, res, log)
    i = next(i for i, s in enumerate(res["steps"]) if any(l[1] for l in s["loads"]))
    j = next(i for i, s in enumerate(res["steps"]) if s["promoted"])
    q = next(q for q in res["requests"] if "load" in q)["id"]
    b = case["replica"]["block_size"]
    for mutate in (lambda r: r["requests"][q]["load"].__setitem__(3, math.nextafter(r["requests"][q]["load"][3], math.inf)),
                   lambda r: r["requests"][q]["load"].__setitem__(4, math.nextafter(r["requests"][q]["load"][4], math.inf)),
                   lambda r: [l for l in r["steps"][i]["loads"] if l[1]][0].__setitem__(1, [l for l in r["steps"][i]["loads"] if l[1]][0][1] - b),
                   lambda r: r["steps"][j]["promoted"].pop()):
        other = copy.deepcopy(res)
        mutate(other)
        assert compare_page.vllm_differences(case, other, log)


C0, CPF, CAT, CDEC, CKV = 6.5, 0.0198, 8.4e-7, 0.10, 5.4e-5


def step(U=0, Q=0.0, n=0, K=0):
    return 1.0 * ((((C0 + CPF * U) + CAT * Q) + CDEC * n) + CKV * K)


def decode_side(rows, **kw):
    """A one-replica decode-side run with the step log: rows (t, P, O, ids, read), read =
    (latency ms, ms per token) or None."""
    wl = tr.Workload(t=[float(r[0]) for r in rows], prompt=[r[1] for r in rows],
                     output=[r[2] for r in rows], key=[0.5] * len(rows), blocks=[list(r[3]) for r in rows],
                     remote=[r[4] for r in rows])
    p = tr.defaults()
    p.update(warmup_s=0.0, measure_s=0.2, drain_s=10.0, block_tokens=16, kv_blocks=8, scheduler="vllm",
             max_batched_tokens=64, max_batch=4)
    p.update(kw)
    out = tr.simulate(wl, p, [1.0], [], "round_robin", 1, check=True, log_steps=True, _return_sim=True)
    return out["step_log"], out


def test_one_remote_request_by_hand():
    """P = 40 (3 blocks), read 2 ms + 0.01 ms/token: admitted at 0 with its 3 blocks taken
    and nothing scheduled; the idle engine reports the read at 2.4; then one token
    (computed 39, U = 1, Q = 39.5) samples the first token, and two decodes (K = 41, 42)
    the others. The prefix of 2 blocks is hashed at the promotion, not before."""
    log, out = decode_side([(0.0, 40, 3, [1, 2], (2.0, 0.01))])
    end = 0.0 + (2.0 + 0.01 * 40)
    d1, d2, d3 = step(U=1, Q=39.5), step(n=1, K=41), step(n=1, K=42)
    steps = log["steps"]
    assert [(s["T"], s["sched"], s["loads"], s["promoted"], s["referenced"], s["cached"]) for s in steps] == [
        (0.0, [], [[0, 0, 40]], [], 3, 0),
        (end, [[0, 1]], [], [0], 3, 0),
        (end + d1, [[0, 1]], [], [], 3, 0),
        ((end + d1) + d2, [[0, 1]], [], [], 0, 2)]
    req = log["requests"][0]
    assert req["first_token_ms"] == end + d1 and req["completion_ms"] == ((end + d1) + d2) + d3
    assert req["load"] == [0.0, 0, 40, end, end, end] and req["hits"] == []
    assert out["prefix_hit_rate"] == 0 / 40


def test_a_local_hit_shortens_the_read_and_a_read_in_a_step_waits_for_its_end():
    """Request 2 (request 0's 2 prompt blocks) arrives long after request 0 was promoted:
    it hits 32 tokens and reads 8 (2 + 0.08 ms). Request 1 arrives during request 0's
    one-token step, is admitted with request 0's first decode, and its read (0.5 ms) ends
    inside that step: reported at the step's end, promoted at the next."""
    rows = [(0.0, 40, 3, [1, 2], (2.0, 0.01)), (30.0, 40, 1, [1, 2], (2.0, 0.01)),
            (3.0, 20, 2, [9], (0.5, 0.0))]
    rows = sorted(rows, key=lambda r: r[0])
    log, _out = decode_side(rows)
    reqs = log["requests"]
    assert reqs[2]["load"][1:3] == [32, 8]
    assert reqs[2]["load"][3] == reqs[2]["load"][0] + (2.0 + 0.01 * 8)
    admitted, _l, _t, end, reported, promoted = reqs[1]["load"]
    s = next(s for s in log["steps"] if s["loads"] and s["loads"][0][0] == 1)
    assert s["T"] == admitted and s["sched"] and end < s["T"] + s["d"] == reported == promoted


def test_a_preempted_remote_request_recomputes_locally():
    """NIXL reads a prompt once (do_remote_prefill cleared at the first allocation): two
    remote requests whose decodes outgrow 5 blocks; the later one is preempted and
    admitted again as an ordinary request (a hit walk, a prefill), never read again."""
    rows = [(0.0, 32, 20, [1, 2], (1.0, 0.0)), (0.0, 32, 20, [3, 4], (1.0, 0.0))]
    log, out = decode_side(rows, kv_blocks=5)
    assert sum(len(s["loads"]) for s in log["steps"]) == 2
    assert out["preemptions"] >= 1
    q = next(r for r in log["requests"] if r["preemptions"])
    assert len(q["hits"]) == q["preemptions"]
    readmit = [s for s in log["steps"] if any(a[0] == q["id"] for a in s["admitted"])]
    assert readmit and all(s["U"] > 0 for s in readmit)


def test_remote_reads_refusals():
    rows = [(0.0, 40, 3, [1, 2], (2.0, 0.01))]
    with pytest.raises(ValueError, match="remote reads"):
        decode_side(rows, async_scheduling=True)
    wl = tr.Workload(t=[0.0], prompt=[40], output=[3], key=[0.5], blocks=[[1, 2]], remote=[(2.0, 0.01)])
    p = tr.defaults()
    p.update(scheduler="vllm", block_tokens=16, kv_blocks=8, max_batched_tokens=64, max_batch=4)
    with pytest.raises(ValueError, match="remote reads"):
        tr.simulate(wl, p, [1.0, 1.0], [], "round_robin", 1)
    p.update(scheduler="reserve")
    with pytest.raises(ValueError, match="remote reads"):
        tr.simulate(wl, p, [1.0], [], "round_robin", 1)
    with pytest.raises(ValueError, match="remote reads"):
        decode_side(rows, timeout_ms=100.0)
    with pytest.raises(ValueError, match="remote reads"):
        tr.simulate(wl, dict(p, scheduler="vllm"), [1.0], [(5.0, "fail", 0, 0.0)], "round_robin", 1)
    with pytest.raises(ValueError, match="request 0: a read needs latency > 0"):
        decode_side([(0.0, 40, 3, [1, 2], (0.0, 0.01))])


@pytest.mark.skipif(not record.venv_python().exists(),
                    reason="no vLLM environment (tools/vllm-env, or VLLM_VENV) to run vLLM live")
def test_live_vllm_agrees_with_the_reference_on_the_decode_side():
    """When vLLM itself is here, run it live on fresh decode-side cases (another seed than
    the recording's) and hold the reference to them too."""
    from conformance import cases as case_gen
    fresh = [case_gen.make_decode_case(7, i) for i in range(16)]
    # and the hand-worked runs above whose reads share one rate (vLLM's, not only the rules')
    for name, rows, kv, per in (("hand-one", [(0.0, 40, 3, [1, 2], 2.0)], 8, 0.01),
                                ("hand-preempt", [(0.0, 32, 20, [1, 2], 1.0), (0.0, 32, 20, [3, 4], 1.0)], 5, 0.0)):
        fresh.append({"name": name, "replica": {
            "block_size": 16, "num_blocks": kv, "max_num_seqs": 4, "max_num_batched_tokens": 64,
            "chunked_prefill": True, "prefix_caching": True, "transfer_ms_per_token": per,
            "step_ms": {"base": C0, "per_prefill_token": CPF, "per_prefill_token_pair": CAT,
                        "per_decode_sequence": CDEC, "per_kv_token": CKV}},
            "requests": [{"id": k, "arrival_ms": t, "prompt_tokens": P, "output_tokens": O,
                          "block_ids": ids, "transfer_ms": lat} for k, (t, P, O, ids, lat) in enumerate(rows)]})
    results = record.run_driver(fresh)["results"]
    for case, res in zip(fresh, results):
        assert not compare_page.vllm_differences(case, res, compare_page.vllm_log(case)), case["name"]
