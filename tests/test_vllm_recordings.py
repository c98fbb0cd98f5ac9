"""The recorded vLLM schedules of the conformance cases (issue 22; conformance/VLLM-SCHEDULER.md).

Always: the recording is well-formed, matches what conformance/cases.py generates, and
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


@pytest.fixture(scope="module")
def doc():
    return record.load()


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
    assert doc["cases"] == case_gen.generate(g["seed"], g["count"])


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
    T = None
    for st in res["steps"]:
        if T is not None:
            assert st["T"] >= T
        T = st["T"] + st["d"]
        assert st["d"] == (_step_ms(rep["step_ms"], st["U"], st["Q"], st["n"], st["K"])
                           if st["sched"] else 0.0)
        ids = [r for r, _ in st["sched"]]
        assert len(ids) == len(set(ids)) <= rep["max_num_seqs"]
        tot = sum(x for _, x in st["sched"])
        assert 0 < tot <= rep["max_num_batched_tokens"] or (tot == 0 and st["preempted"])
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
            assert reqs[r]["arrival_ms"] <= st["T"]
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
    # every request completes by the last step's end
    assert max(rr["completion_ms"] for rr in res["requests"]) == T


def test_no_preemption_means_no_readmission(doc):
    for res in doc["results"]:
        for rr in res["requests"]:
            assert len(rr["hits"]) == rr["preemptions"] + 1


@pytest.mark.skipif(not record.venv_python().exists(),
                    reason=f"no vLLM environment at {record.default_venv()} "
                           "(create it with tools/vllm-env to re-record live)")
def test_live_rerecord_equals_committed(doc):
    cases = [doc["cases"][k] for k in LIVE_CASES if k < len(doc["cases"])]
    out = record.run_driver(cases)
    assert out["vllm_version"] == doc["header"]["vllm_version"]
    want = [doc["results"][k] for k in LIVE_CASES if k < len(doc["cases"])]
    for got, exp in zip(out["results"], want):
        assert got == exp, f"{exp['name']}: vLLM's live schedule differs from the recording"
    assert not any(math.isnan(s["d"]) for r in out["results"] for s in r["steps"])
