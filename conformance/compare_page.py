"""How far today's page semantics are from vLLM on the recorded cases (issue 22).

    python -m conformance.compare_page [--scheduler reserve|vllm|both]   (default both)
    python -m conformance.compare_page --scheduler vllm --async   (vLLM's default loop)
    python -m conformance.compare_page --scheduler vllm --decode  (the decode side's reads)

``--scheduler reserve`` is the page (token-model.md §2); ``vllm`` the reference's
``scheduler = "vllm"`` mode, compared on every one of the 400 cases (prefix caching off
too) and, besides the per-request times, step by step (``vllm_steps``); ``both`` prints
the two, so the difference the mode makes is shown.

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


STEP_KEYS = ("T", "d", "sched", "preempted", "admitted", "U", "Q", "n", "K", "evicted",
             "free", "cached", "referenced")
ASYNC_STEP_KEYS = ("S",) + STEP_KEYS
DECODE_STEP_KEYS = STEP_KEYS + ("loads", "promoted")   # a decode-side case (remote reads)
REQUEST_KEYS = ("first_token_ms", "completion_ms", "preemptions", "hits")


def remote_reads(case):
    """A decode-side case's reads (conformance/vllm_driver.py): per request (latency ms,
    ms per token read) or None (local); None when no request reads its prompt."""
    reqs = case["requests"]
    if not any("transfer_ms" in q for q in reqs):
        return None
    per = float(case["replica"]["transfer_ms_per_token"])
    return [(float(q["transfer_ms"]), per) if "transfer_ms" in q else None for q in reqs]


def case_workload(case):
    reqs = case["requests"]
    return ref.Workload(t=[q["arrival_ms"] for q in reqs], prompt=[q["prompt_tokens"] for q in reqs],
                        output=[q["output_tokens"] for q in reqs],
                        key=[(k * KEY_STEP) % 1.0 for k in range(len(reqs))],
                        blocks=[list(q["block_ids"]) for q in reqs], remote=remote_reads(case))


def vllm_params(case):
    """The case as a one-replica run of the reference in scheduler = "vllm" mode: the
    page's parameters, the case's prefix caching and loop (``async_scheduling``: vLLM's
    default loop, VLLM-SCHEDULER.md §9), and a warm-up of 0 (every request is in the
    cohort, so the drain runs until every one has completed)."""
    p = page_params(case)
    p.update(scheduler="vllm", prefix_caching=bool(case["replica"]["prefix_caching"]), warmup_s=0.0,
             async_scheduling=bool(case["replica"].get("async_scheduling", False)))
    if "timeout_ms" in case["replica"]:      # the timeout cases: vLLM's aborts (VLLM-MODE.md 18)
        p.update(timeout_ms=float(case["replica"]["timeout_ms"]))
    return p


def vllm_log(case, check=False):
    """The reference's per-step and per-request log of the case in scheduler = "vllm"
    mode (the recording's fields, VLLM-SCHEDULER.md §3)."""
    out = ref.simulate(case_workload(case), vllm_params(case), [1.0], [], "round_robin", 1,
                       check=check, log_steps=True)
    return out["step_log"]


def vllm_differences(case, result, log):
    """Every difference between the reference's log and vLLM's recording of one case,
    exact equality (floats bit for bit), as (where, field, reference, vLLM) tuples."""
    diffs = []
    mine, theirs = log["steps"], result["steps"]
    # After the last request's outcome the reference stops (token-model.md §7's drain),
    # where vLLM's engine still returns the batches it has queued: trailing steps of the
    # recording that schedule and preempt nothing (a timeout case's, after its last
    # requests were aborted) are not the reference's to log
    while (len(theirs) > len(mine) and not theirs[-1]["sched"] and not theirs[-1]["preempted"]
           and all(q["completion_ms"] is not None or q.get("aborted_ms") is not None
                   for q in result["requests"]) and any(q.get("aborted_ms") is not None
                                                        for q in result["requests"])):
        theirs = theirs[:-1]
    if len(mine) != len(theirs):
        diffs.append(("steps", "count", len(mine), len(theirs)))
    # an asynchronous recording adds S, the time each batch was scheduled (§9)
    keys = ASYNC_STEP_KEYS if case["replica"].get("async_scheduling", False) else STEP_KEYS
    if remote_reads(case) is not None:
        keys = DECODE_STEP_KEYS
    for i, (a, v) in enumerate(zip(mine, theirs)):
        step_keys = keys
        if i == len(mine) - 1 and "free" not in a:
            # the run ended in this step (every request had its outcome: its last ones
            # aborted during it, token-model.md §7's drain), so the reference never ends
            # it; vLLM's counts at its end are of nothing a request sees
            step_keys = tuple(k for k in keys if k not in ("free", "cached", "referenced"))
        for k in step_keys:
            if a[k] != v[k] or type(a[k]) is not type(v[k]) and not (
                    isinstance(a[k], (int, float)) and isinstance(v[k], (int, float))):
                diffs.append((f"step {i}", k, a[k], v[k]))
    if len(log["requests"]) != len(result["requests"]):
        diffs.append(("requests", "count", len(log["requests"]), len(result["requests"])))
    for a, v in zip(log["requests"], result["requests"]):
        for k in REQUEST_KEYS + (("load",) if "load" in v or "load" in a else ()):
            if a.get(k) != v.get(k):
                diffs.append((f"request {v['id']}", k, a[k], v[k]))
    return diffs


def main_vllm(doc):
    n_cases = n_same = n_steps = n_steps_same = n_req = n_req_same = 0
    split = collections.Counter()
    total = collections.Counter()
    for case, res in zip(doc["cases"], doc["results"]):
        log = vllm_log(case)
        diffs = vllm_differences(case, res, log)
        bad_steps = {w for w, *_ in diffs if w.startswith("step ")}
        bad_reqs = {w for w, *_ in diffs if w.startswith("request ")}
        n_cases += 1
        n_same += not diffs
        n_steps += len(res["steps"])
        n_steps_same += len(res["steps"]) - len(bad_steps) if len(log["steps"]) == len(res["steps"]) else 0
        n_req += len(res["requests"])
        n_req_same += len(res["requests"]) - len(bad_reqs)
        pre = any(s["preempted"] for s in res["steps"])
        ev = any(s["evicted"] for s in res["steps"])
        key = (("preempts" if pre else "no preemption") + ", " + ("evicts" if ev else "no eviction")
               + ", " + ("chunked" if case["replica"]["chunked_prefill"] else "unchunked")
               + ("" if case["replica"]["prefix_caching"] else ", caching off"))
        total[key] += 1
        split[key] += not diffs
    loop = (" (async_scheduling)" if doc["header"]["command"].endswith("--async") else
            " (decode side, remote reads)" if doc["header"]["command"].endswith("--decode") else "")
    print(f"scheduler = \"vllm\"{loop} vs vLLM {doc['header']['vllm_version']}: {n_same} of {n_cases} "
          f"cases identical on every step and request; {n_steps_same} of {n_steps} steps, "
          f"{n_req_same} of {n_req} requests")
    for key in sorted(total):
        print(f"  {key:54s} {split[key]:4d} / {total[key]:4d} identical")
    return 0


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scheduler", choices=("reserve", "vllm", "both"), default="both")
    ap.add_argument("--async", dest="asynchronous", action="store_true",
                    help="the vllm mode with async_scheduling against vLLM's default loop "
                         "(recorded/vllm-0.30.0-async.json.gz); needs --scheduler vllm")
    ap.add_argument("--decode", action="store_true",
                    help="the vllm mode's decode side against vLLM's scheduler with a KV connector "
                         "(recorded/vllm-0.30.0-decode.json.gz); needs --scheduler vllm")
    a = ap.parse_args(argv)
    if a.decode:
        if a.scheduler != "vllm" or a.asynchronous:
            ap.error("--decode needs --scheduler vllm, without --async (the page has no reads)")
        return main_vllm(record.load(record.RECORDED_DECODE))
    if a.asynchronous:
        if a.scheduler != "vllm":
            ap.error("--async needs --scheduler vllm (the page has no asynchronous loop)")
        return main_vllm(record.load(record.RECORDED_ASYNC))
    doc = record.load()
    if a.scheduler in ("reserve", "both"):
        main_reserve(doc)
    if a.scheduler in ("vllm", "both"):
        main_vllm(doc)
    return 0


def main_reserve(doc):
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
    print(f"scheduler = \"reserve\" (today's page) vs vLLM {doc['header']['vllm_version']}: {n_same} of {n_cases} cases "
          f"identical on every request's first-token and completion time; "
          f"{n_req_same} of {n_req} requests")
    for key in sorted(total):
        print(f"  {key:42s} {split[key]:4d} / {total[key]:4d} identical")
    ratios.sort()
    k = len(ratios)
    print(f"  per-request TTFT, page / vLLM: p1 {ratios[int(0.01 * k)]:.3f}, "
          f"p50 {ratios[k // 2]:.3f}, p99 {ratios[min(k - 1, int(0.99 * k))]:.3f}, "
          f"min {ratios[0]:.3f}, max {ratios[-1]:.3f}")


if __name__ == "__main__":
    sys.exit(main())
