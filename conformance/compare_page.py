"""How far today's page semantics are from vLLM on the recorded cases (issue 22).

    python -m conformance.compare_page

Replays every recorded case with prefix caching on (routesim has no switch for it) in
the plain-Python reference of token-model.md (tests/token_reference.py: one replica,
the case's trace, drained) and compares each request's first-token and completion
times with vLLM's recording, exactly (both use the same step-cost clock, so a case on
which the two schedule alike agrees to the last bit). Prints the agreement, split by
whether vLLM preempted or evicted in the case and by chunked prefill, and the spread
of the per-request TTFT ratio. No vLLM needed.
"""

import collections
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import token_reference as ref  # noqa: E402

from conformance import record  # noqa: E402

KEY_STEP = 0.6180339887498949


def page_params(case):
    rep = case["replica"]
    c = rep["step_ms"]
    p = ref.defaults()
    p.update(max_batch=rep["max_num_seqs"], kv_blocks=rep["num_blocks"],
             block_tokens=rep["block_size"], max_batched_tokens=rep["max_num_batched_tokens"],
             chunked_prefill=rep["chunked_prefill"], step_ms_base=c["base"],
             step_ms_per_prefill_token=c["per_prefill_token"],
             step_ms_per_prefill_token_pair=c["per_prefill_token_pair"],
             step_ms_per_decode_sequence=c["per_decode_sequence"],
             step_ms_per_kv_token=c["per_kv_token"], warmup_s=1e-6,
             measure_s=max(q["arrival_ms"] for q in case["requests"]) / 1000.0 + 1.0,
             drain_s=1e7)
    return p


def page_requests(case):
    """The reference's per-request records for the case (token-model.md's semantics)."""
    reqs = case["requests"]
    wl = ref.Workload(t=[q["arrival_ms"] for q in reqs], prompt=[q["prompt_tokens"] for q in reqs],
                      output=[q["output_tokens"] for q in reqs],
                      key=[(k * KEY_STEP) % 1.0 for k in range(len(reqs))],
                      blocks=[list(q["block_ids"]) for q in reqs])
    out = ref.simulate(wl, page_params(case), [1.0], [], "round_robin", 1, _return_sim=True)
    return out["_sim"].requests


def main():
    doc = record.load()
    split = collections.Counter()
    total = collections.Counter()
    ratios = []
    n_cases = n_same = n_req = n_req_same = 0
    for case, res in zip(doc["cases"], doc["results"]):
        if not case["replica"]["prefix_caching"]:
            continue
        mine = page_requests(case)
        same = True
        for q, v, m in zip(case["requests"], res["requests"], mine):
            ok = m.first_token == v["first_token_ms"] and m.completion == v["completion_ms"]
            same &= ok
            n_req += 1
            n_req_same += ok
            ratios.append((m.first_token - q["arrival_ms"]) / (v["first_token_ms"] - q["arrival_ms"]))
        n_cases += 1
        n_same += same
        pre = any(s["preempted"] for s in res["steps"])
        ev = any(s["evicted"] for s in res["steps"])
        key = (("preempts" if pre else "no preemption") + ", " + ("evicts" if ev else "no eviction")
               + ", " + ("chunked" if case["replica"]["chunked_prefill"] else "unchunked"))
        total[key] += 1
        split[key] += same
    print(f"today's page vs vLLM {doc['header']['vllm_version']}: {n_same} of {n_cases} cases "
          f"identical on every request's first-token and completion time; "
          f"{n_req_same} of {n_req} requests")
    for key in sorted(total):
        print(f"  {key:42s} {split[key]:4d} / {total[key]:4d} identical")
    ratios.sort()
    k = len(ratios)
    print(f"  per-request TTFT, page / vLLM: p1 {ratios[int(0.01 * k)]:.3f}, "
          f"p50 {ratios[k // 2]:.3f}, p99 {ratios[min(k - 1, int(0.99 * k))]:.3f}, "
          f"min {ratios[0]:.3f}, max {ratios[-1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
