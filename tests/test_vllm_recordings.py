"""The recorded vLLM schedules of the conformance cases (issue 22; conformance/VLLM-SCHEDULER.md),
under the synchronous loop and under vLLM's default asynchronous one (issue 40; the same
cases with ``"async_scheduling": true``, VLLM-SCHEDULER.md §9).

Always: each recording is well-formed, matches what conformance/cases.py generates, and
conserves requests (each completes once, with its output tokens; the tokens scheduled
for it add up to what it had to compute; the step clock is the step-cost formula).
Only when the vLLM environment exists (tools/vllm-env; .vllm-venv or $VLLM_VENV): a
handful of cases are recorded again, live, and must equal the committed recording.
"""

import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from conformance import cases as case_gen  # noqa: E402
from conformance import record  # noqa: E402

LIVE_CASES = (0, 1, 2, 3, 5, 9, 13, 42)      # every flavour of cases.py at least once


FILES = {"sync": record.RECORDED, "async": record.RECORDED_ASYNC}


@pytest.fixture(scope="module", params=sorted(FILES))
def doc(request):
    d = record.load(FILES[request.param])
    d["mode"] = request.param
    return d


def _asynchronous(doc):
    return doc["mode"] == "async"


def test_header(doc):
    h = doc["header"]
    assert h["vllm_version"] == "0.30.0"
    assert h["torch_version"].startswith("2.13.0")
    assert h["command"].startswith("python -m conformance.record")
    assert "tools/vllm-env" in h["environment"]
    assert h["requirements_sha256"] == record.requirements_sha256(), (
        "conformance/vllm-requirements.txt changed since the recording: record again")
    assert h["cases"] == len(doc["cases"]) == len(doc["results"]) >= 200
    assert h["steps"] == sum(len(r["steps"]) for r in doc["results"])


def test_cases_are_the_generators(doc):
    g = doc["header"]["generator"]
    cases = case_gen.generate(g["seed"], g["count"])
    if _asynchronous(doc):
        assert doc["header"]["command"].endswith(" --async")
        for case in cases:
            case["replica"]["async_scheduling"] = True
    assert doc["cases"] == cases


def test_cases_cover_the_space(doc):
    reps = [c["replica"] for c in doc["cases"]]
    assert any(r["chunked_prefill"] for r in reps) and any(not r["chunked_prefill"] for r in reps)
    assert any(not r["prefix_caching"] for r in reps)
    res = doc["results"]
    assert sum(any(s["preempted"] for s in r["steps"]) for r in res) >= 20
    assert sum(any(s["evicted"] for s in r["steps"]) for r in res) >= 20
    assert sum(a[1] > 0 for r in res for s in r["steps"] for a in s["admitted"]) >= 200
    mid = 0
    for c, r in zip(doc["cases"], res):
        t0 = r["steps"][0]["T"]
        mid += any(q["arrival_ms"] > t0 for q in c["requests"])
    assert mid >= 100                      # requests arriving while others run


def _step_ms(c, U, Q, n, K):
    return 1.0 * (c["base"] + c["per_prefill_token"] * U + c["per_prefill_token_pair"] * Q
                  + c["per_decode_sequence"] * n + c["per_kv_token"] * K)


@pytest.mark.parametrize("k", range(case_gen.DEFAULT_COUNT))
def test_conservation(doc, k):
    if k >= len(doc["cases"]):
        pytest.skip("fewer cases recorded")
    case, res = doc["cases"][k], doc["results"][k]
    rep = case["replica"]
    reqs = case["requests"]
    assert res["name"] == case["name"]
    b = rep["block_size"]
    n_req = len(reqs)
    for q in reqs:
        assert len(q["block_ids"]) == q["prompt_tokens"] // b
    # per request: scheduled tokens, admissions, emitted tokens
    tokens = [0] * n_req
    admits = [[] for _ in range(n_req)]
    preempts = [0] * n_req
    asynchronous = _asynchronous(doc)
    T = None
    ends = []                                      # every step's end, in order
    for st in res["steps"]:
        if T is not None:
            assert st["T"] >= T
        if asynchronous:
            # the GPU runs the batches back to back, in the order they were scheduled;
            # the engine schedules batch j only once the queue of 2 has room: after it
            # processed batch j - 2's output
            assert st["T"] == max(st["S"], T if T is not None else st["S"])
            if len(ends) >= 2:
                assert st["S"] >= ends[-2]
            if ends:
                assert st["S"] >= prev_S
            prev_S = st["S"]
        T = st["T"] + st["d"]
        ends.append(T)
        assert st["d"] == (_step_ms(rep["step_ms"], st["U"], st["Q"], st["n"], st["K"])
                           if st["sched"] else 0.0)
        ids = [r for r, _ in st["sched"]]
        assert len(ids) == len(set(ids)) <= rep["max_num_seqs"]
        tot = sum(x for _, x in st["sched"])
        # an empty step: every running request preempted, or (asynchronous) nothing left
        # to schedule while earlier batches are in flight
        assert 0 < tot <= rep["max_num_batched_tokens"] or (tot == 0 and (st["preempted"] or asynchronous))
        assert st["U"] + st["n"] == tot
        assert st["free"] + st["cached"] + st["referenced"] == rep["num_blocks"]
        if not rep["prefix_caching"]:
            assert st["cached"] == 0 and st["evicted"] == 0
        if st["preempted"]:
            assert not st["admitted"]              # vLLM admits nobody in a step that preempted
        for r in st["preempted"]:
            preempts[r] += 1
            assert r not in ids
        for r, hit in st["admitted"]:
            assert r in ids and hit % b == 0 and hit >= 0
            admits[r].append(hit)
            assert reqs[r]["arrival_ms"] <= st["S" if asynchronous else "T"]
        for r, x in st["sched"]:
            tokens[r] += x
    for k2, (q, rr) in enumerate(zip(reqs, res["requests"])):
        assert rr["id"] == k2
        assert rr["hits"] == admits[k2]
        assert rr["preemptions"] == preempts[k2] == len(admits[k2]) - 1
        assert q["arrival_ms"] < rr["first_token_ms"] <= rr["completion_ms"]
        if not rep["prefix_caching"]:
            assert all(h == 0 for h in admits[k2])
        # every admission computes what it had minus its hit; the last one runs to the
        # end: P + O - 1 tokens of KV computed in all (the last token is never fed back)
        assert tokens[k2] >= q["prompt_tokens"] + q["output_tokens"] - 1 - sum(admits[k2])
        if not admits[k2][1:]:
            assert tokens[k2] == q["prompt_tokens"] + q["output_tokens"] - 1 - admits[k2][0]
    # a request's first token and its completion come at the end of a step that
    # scheduled it (its output is processed when the engine waits for that step)
    ends_of = [set() for _ in range(n_req)]
    for st, end in zip(res["steps"], ends):
        for r, _ in st["sched"]:
            ends_of[r].add(end)
    for r, rr in enumerate(res["requests"]):
        assert rr["first_token_ms"] in ends_of[r] and rr["completion_ms"] in ends_of[r]
    # every request completes by the last step's end (asynchronous: the last step that
    # scheduled anything; empty batches may follow it)
    last = max(e for st, e in zip(res["steps"], ends) if st["sched"])
    assert max(rr["completion_ms"] for rr in res["requests"]) == last


def test_no_preemption_means_no_readmission(doc):
    for res in doc["results"]:
        for rr in res["requests"]:
            assert len(rr["hits"]) == rr["preemptions"] + 1


@pytest.mark.skipif(not record.venv_python().exists(),
                    reason=f"no vLLM environment at {record.default_venv()} "
                           "(create it with tools/vllm-env to re-record live)")
def test_live_rerecord_equals_committed(doc):   # both loops
    cases = [doc["cases"][k] for k in LIVE_CASES if k < len(doc["cases"])]
    out = record.run_driver(cases)
    assert out["vllm_version"] == doc["header"]["vllm_version"]
    want = [doc["results"][k] for k in LIVE_CASES if k < len(doc["cases"])]
    for got, exp in zip(out["results"], want):
        assert got == exp, f"{exp['name']}: vLLM's live schedule differs from the recording"
    assert not any(math.isnan(s["d"]) for r in out["results"] for s in r["steps"])


def test_both_loops_start_alike():
    """Both loops start idle: the first step is scheduled when the first requests arrive
    and starts at once, with the same batch (nothing is in flight yet, so the
    asynchronous loop has no placeholder to account for). The block counts are not
    compared: the synchronous loop counts after the step's output was processed (blocks
    of requests it finished freed), the asynchronous one right after scheduling."""
    sync, asy = record.load(record.RECORDED), record.load(record.RECORDED_ASYNC)
    counts = ("free", "cached", "referenced")
    for a, b in zip(sync["results"], asy["results"]):
        s0, a0 = a["steps"][0], b["steps"][0]
        assert a0["S"] == a0["T"] == s0["T"]
        assert {k: a0[k] for k in s0 if k not in counts} == {k: s0[k] for k in s0 if k not in counts}, a["name"]


@pytest.mark.parametrize("path", [record.RECORDED_TIMEOUTS, record.RECORDED_TIMEOUTS_ASYNC], ids=["sync", "async"])
def test_the_timeout_recording_is_its_generators(path):
    """conformance/recorded/vllm-0.30.0-timeouts*.json.gz hold cases.generate_timeouts'
    cases, and each request either completed or was aborted at its deadline (arrival +
    timeout_ms), never both, with no token after the abort."""
    doc = record.load(path)
    g = doc["header"]["generator"]
    assert g["function"] == "generate_timeouts"
    cases = case_gen.generate_timeouts(g["seed"], g["count"])
    if path == record.RECORDED_TIMEOUTS_ASYNC:
        for case in cases:
            case["replica"]["async_scheduling"] = True
    assert doc["cases"] == cases
    for case, res in zip(doc["cases"], doc["results"]):
        for q, r in zip(case["requests"], res["requests"]):
            if r["aborted_ms"] is None:
                assert r["completion_ms"] is not None
            else:
                assert r["completion_ms"] is None
                assert r["aborted_ms"] == q["arrival_ms"] + case["replica"]["timeout_ms"]
                assert r["first_token_ms"] is None or r["first_token_ms"] <= r["aborted_ms"]


@pytest.mark.skipif(not record.venv_python().exists(),
                    reason=f"no vLLM environment at {record.default_venv()} "
                           "(create it with tools/vllm-env to re-record live)")
def test_live_timeout_cases_equal_the_recording():
    """A few timeout cases re-run live, 35 among them (the case the abort order decides)."""
    for path in (record.RECORDED_TIMEOUTS, record.RECORDED_TIMEOUTS_ASYNC):
        doc = record.load(path)
        picks = (0, 1, 35)
        out = record.run_driver([doc["cases"][k] for k in picks])
        for got, k in zip(out["results"], picks):
            assert got == doc["results"][k], f"{path.name} {doc['cases'][k]['name']}: vLLM's live schedule differs"
