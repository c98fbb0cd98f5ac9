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
    after their arrival (no room beside the others), preemptions, and a preempted remote
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
