"""Random conformance cases for routesim's vLLM mode (issue 22; VLLM-SCHEDULER.md §5).

Plain Python (no vLLM, no NumPy needed beyond the standard library's ``random``): the
same seed gives the same cases on every machine. ``generate(seed, count)`` returns a
list of cases; each is one replica and a request list:

    {"name": "case-0007", "seed": 1, "index": 7,
     "replica": {"block_size", "num_blocks", "max_num_seqs", "max_num_batched_tokens",
                 "chunked_prefill", "prefix_caching",
                 "step_ms": {"base", "per_prefill_token", "per_prefill_token_pair",
                             "per_decode_sequence", "per_kv_token"}},
     "requests": [{"id", "arrival_ms", "prompt_tokens", "output_tokens",
                   "block_ids"}, ...]}

``num_blocks`` are usable blocks (routesim's ``kv_blocks``); ``block_ids`` is routesim's
``B_r``, one id per full prompt block, prefix-closed: an id names its whole prefix
(a block shared by two prompts is shared with everything before it), as §1.1's ids
and Mooncake's chained hash ids are. ``to_trace_csv`` and ``to_sweep_toml`` write a
case as a routesim one-replica trace replay (VLLM-SCHEDULER.md §5.2).

    python -m conformance.cases [--seed 1] [--count 400] [--out cases.json]
"""

import argparse
import json
import random
import sys

UNIQUE_BASE = 1 << 40          # routesim's unique ids: 2^40 + r·2^16 + q (token-model.md §1.1)
UNIQUE_STRIDE = 1 << 16
GROUP_STRIDE = 1 << 20         # shared-prefix ids: g·2^20 + j
RESPONSE_BASE = 1 << 50        # a conversation's response ids: 2^50 + q·2^16 + j (docs/model.md "Conversations")
CONVERSATION_SEED = 1
CONVERSATION_COUNT = 40
STEP_MS = {"base": 6.5, "per_prefill_token": 0.0198, "per_prefill_token_pair": 8.4e-7,
           "per_decode_sequence": 0.10, "per_kv_token": 5.4e-5}
DEFAULT_SEED = 1
DEFAULT_COUNT = 400


def _lognormal_int(rng, median, sigma, lo, hi):
    return max(lo, min(hi, int(round(median * rng.lognormvariate(0.0, sigma)))))


def _kind(rng, index):
    """The case's flavour: cycles so that every flavour appears often."""
    kinds = ("shared", "tight", "unchunked", "long", "burst", "roomy", "nocache", "tiny")
    return kinds[index % len(kinds)]


def make_case(seed, index):
    rng = random.Random(seed * 1_000_003 + index)
    kind = _kind(rng, index)
    b = rng.choice((16, 16, 16, 8, 32, 4))
    chunked = kind != "unchunked" and rng.random() < 0.9
    caching = kind != "nocache" and rng.random() < 0.95
    n = rng.randint(4, 12) if kind == "tiny" else rng.randint(10, 36)
    max_seqs = rng.choice((1, 2, 3, 4, 6, 8, 16, 32))
    # prompts: mostly short, some long; "long" cases many blocks
    med_p = {"long": 700, "tiny": 60}.get(kind, rng.choice((40, 120, 250)))
    hi_p = 2400 if kind == "long" else 900
    med_o = rng.choice((4, 12, 30))
    # prefix structure: a few groups with a system prompt, conversations extending
    # an earlier prompt, and unique prompts
    n_groups = rng.randint(1, 4)
    group_blocks = [rng.randint(1, max(1, 400 // b)) for _ in range(n_groups)]
    p_group = 0.7 if kind in ("shared", "tight", "burst") else 0.4
    p_extend = 0.3 if kind in ("shared", "tight", "long") else 0.15
    reqs = []
    t = 0.0
    rate = rng.choice((0.05, 0.2, 1.0, 5.0))          # requests per ms
    for k in range(n):
        if kind == "burst" and rng.random() < 0.5:
            gap = 0.0
        elif rng.random() < 0.1:
            gap = 0.0                                  # ties: same arrival time
        else:
            gap = rng.expovariate(rate)
        t = 0.0 if k == 0 and rng.random() < 0.7 else t + gap
        t = round(t, 3)
        own = _lognormal_int(rng, med_p, 1.0, 1, hi_p)
        ids = []
        u = rng.random()
        if reqs and u < p_extend:
            parent = rng.choice(reqs)["block_ids"]
            keep = rng.randint(0, len(parent)) if rng.random() < 0.4 else len(parent)
            ids = list(parent[:keep])
        elif u < p_extend + p_group:
            g = rng.randrange(n_groups)
            ids = [g * GROUP_STRIDE + j for j in range(group_blocks[g])]
        prefix = len(ids) * b
        P = prefix + own
        for q in range(len(ids), P // b):
            ids.append(UNIQUE_BASE + k * UNIQUE_STRIDE + q)
        O = _lognormal_int(rng, med_o, 1.0, 1, 120)
        reqs.append({"id": k, "arrival_ms": t, "prompt_tokens": P, "output_tokens": O,
                     "block_ids": ids})
    biggest = max(r["prompt_tokens"] + r["output_tokens"] for r in reqs)
    need = -(-biggest // b)                            # blocks of the largest request
    total = sum(-(-(r["prompt_tokens"] + r["output_tokens"]) // b) for r in reqs)
    if kind == "tight":
        num_blocks = need + rng.randint(0, max(1, need // 2))
    elif kind == "roomy":
        num_blocks = total + rng.randint(0, 64)
    else:
        num_blocks = rng.randint(need, max(need + 1, min(total, 3 * need)))
    if chunked:
        budget = rng.choice((16, 32, 64, 128, 256, 512, 1024, 2048))
    else:
        budget = max(biggest, rng.choice((256, 512, 1024, 2048, 4096)))
    budget = max(budget, max_seqs)                     # vLLM: budget >= max_num_seqs
    costs = dict(STEP_MS)
    if rng.random() < 0.2:                             # a stronger attention term
        costs["per_prefill_token_pair"] = 1e-4
        costs["per_kv_token"] = 1e-3
    return {"name": f"case-{index:04d}", "seed": seed, "index": index, "kind": kind,
            "replica": {"block_size": b, "num_blocks": num_blocks,
                        "max_num_seqs": max_seqs, "max_num_batched_tokens": budget,
                        "chunked_prefill": chunked, "prefix_caching": caching,
                        "step_ms": costs},
            "requests": reqs}


def generate(seed=DEFAULT_SEED, count=DEFAULT_COUNT):
    return [make_case(seed, i) for i in range(count)]


def make_conversation_case(seed, index):
    """A case of conversations (issue 40 item 4): 2-6 sessions of 2-5 turns; a follow-up's
    prompt is its previous turn's prompt, that turn's response and new text, its block ids
    the previous turn's ids, then the previous request's own blocks past them (response
    ids ``2^50 + q·2^16 + j``: the driver gives those blocks the tokens vLLM generated
    there), then its own. Turn j of every session arrives in round j, ``spacing_ms``
    after round j − 1, long after that round has finished, so every response is
    complete when the next turn is built. Some outputs end a block exactly (the last
    token's KV is never computed, so that block is not cached)."""
    rng = random.Random(seed * 1_000_003 + 700_000 + index)
    b = rng.choice((16, 16, 8, 32, 4))
    chunked = rng.random() < 0.85
    max_seqs = rng.choice((1, 2, 4, 8, 16))
    sessions = rng.randint(2, 6)
    turns = [rng.randint(2, 5) for _ in range(sessions)]
    shared = rng.random() < 0.5                       # a system prompt every session starts with
    sys_blocks = rng.randint(1, max(1, 256 // b)) if shared else 0
    spacing_ms = 20000.0
    reqs = []
    last = [None] * sessions                          # each session's previous turn (a request dict)
    for j in range(max(turns)):
        arrivals = sorted((round(j * spacing_ms + rng.uniform(0.0, 50.0), 3), s) for s in range(sessions)
                          if j < turns[s])
        for t, s in arrivals:
            k = len(reqs)
            text = _lognormal_int(rng, 120, 1.0, 1, 600)
            q = last[s]
            if q is None:
                ids = [GROUP_STRIDE * 3 + i for i in range(sys_blocks)]
                P = len(ids) * b + text
            else:
                Pq, Oq = q["prompt_tokens"], q["output_tokens"]
                P = Pq + Oq + text
                ids = list(q["block_ids"])
                ids += [RESPONSE_BASE + q["id"] * UNIQUE_STRIDE + i for i in range(Pq // b, (Pq + Oq) // b)]
            for i in range(len(ids), P // b):
                ids.append(UNIQUE_BASE + k * UNIQUE_STRIDE + i)
            O = _lognormal_int(rng, 20, 1.0, 1, 80)
            if rng.random() < 0.3:                     # the response ends a block exactly
                O = max(1, O + (-(P + O)) % b) if (P + O) % b else O
            r = {"id": k, "arrival_ms": t, "prompt_tokens": P, "output_tokens": O, "block_ids": ids}
            reqs.append(r)
            last[s] = r
    biggest = max(r["prompt_tokens"] + r["output_tokens"] for r in reqs)
    need = -(-biggest // b)
    total = sum(-(-(r["prompt_tokens"] + r["output_tokens"]) // b) for r in reqs)
    num_blocks = rng.choice((total + 64, rng.randint(need, max(need + 1, min(total, 2 * need)))))
    budget = rng.choice((32, 128, 512, 2048)) if chunked else max(biggest, 2048)
    budget = max(budget, max_seqs)
    return {"name": f"conversation-{index:04d}", "seed": seed, "index": index, "kind": "conversation",
            "replica": {"block_size": b, "num_blocks": num_blocks, "max_num_seqs": max_seqs,
                        "max_num_batched_tokens": budget, "chunked_prefill": chunked, "prefix_caching": True,
                        "step_ms": dict(STEP_MS)},
            "requests": reqs}


def generate_conversations(seed=CONVERSATION_SEED, count=CONVERSATION_COUNT):
    return [make_conversation_case(seed, i) for i in range(count)]


TIMEOUT_SEED = 1
TIMEOUT_COUNT = 100


def make_timeout_case(seed, index):
    """A case of :func:`make_case`'s kinds with a timeout (the replica's ``timeout_ms``,
    log-uniform in [20, 2000] ms): a request unfinished at its arrival + timeout is
    aborted, as a client that gives up (conformance/vllm_driver.py, VLLM-MODE.md 18, 31)."""
    import math
    case = make_case(seed + 7_000, index)
    rng = random.Random(seed * 7_919 + index)
    case["name"] = f"timeout-{index:04d}"
    case["replica"]["timeout_ms"] = round(math.exp(rng.uniform(math.log(20.0), math.log(2000.0))), 3)
    return case


def generate_timeouts(seed=TIMEOUT_SEED, count=TIMEOUT_COUNT):
    return [make_timeout_case(seed, i) for i in range(count)]


DECODE_SEED = 1
DECODE_COUNT = 100
DECODE_MS_PER_TOKEN = (0.0, 0.002, 0.01, 0.05)   # transfer ms per prompt token read


def make_decode_case(seed, index):
    """A decode-side case (issue 42 item 5): a case of :func:`make_case`'s kinds (its
    replica synchronous, its pool and prefix structure) whose requests mostly arrive
    with their prompt computed on a prefill instance: such a request carries
    ``transfer_ms`` (its read's latency, log-uniform in [0.5, 50] ms) and the replica
    ``transfer_ms_per_token`` (one of ``DECODE_MS_PER_TOKEN``), so a read takes
    ``transfer_ms + transfer_ms_per_token`` × the tokens not hit locally
    (conformance/vllm_driver.py). Half the cases serve every request remotely; the
    others follow the selective rule (docs/model.md "Routing pairs"): a prompt shorter
    than a threshold (the median prompt) is served locally, without ``transfer_ms``."""
    import math
    case = make_case(seed + 9_000, index)
    rng = random.Random(seed * 9_973 + 500_000 + index)
    case["name"] = f"decode-{index:04d}"
    case["kind"] = "decode-" + case["kind"]
    rep = case["replica"]
    rep["transfer_ms_per_token"] = rng.choice(DECODE_MS_PER_TOKEN)
    prompts = sorted(r["prompt_tokens"] for r in case["requests"])
    threshold = prompts[len(prompts) // 2] if rng.random() < 0.5 else 0
    for r in case["requests"]:
        if r["prompt_tokens"] >= threshold:
            r["transfer_ms"] = round(math.exp(rng.uniform(math.log(0.5), math.log(50.0))), 3)
    return case


def generate_decode(seed=DECODE_SEED, count=DECODE_COUNT):
    return [make_decode_case(seed, i) for i in range(count)]


def to_trace_csv(case):
    """The case's requests as a routesim plain CSV trace (docs/traces.md): one row a
    request, its block ids given in full (so no unique ids are made up)."""
    lines = ["arrival_ms,prompt_tokens,output_tokens,block_ids"]
    for r in case["requests"]:
        ids = " ".join(str(i) for i in r["block_ids"])
        lines.append(f"{r['arrival_ms']!r},{r['prompt_tokens']},{r['output_tokens']},{ids}")
    return "\n".join(lines) + "\n"


def to_sweep_toml(case, trace_path):
    """A routesim sweep that replays the case on one batching replica (§5.2 of
    VLLM-SCHEDULER.md): every request arrives inside the window and the drain lets
    all of them finish; ``scheduler = "vllm"`` selects the mode of issue 22."""
    from routesim.replay import replay_sweep  # no dependency: this module also runs in vLLM's environment
    rep = case["replica"]
    c = rep["step_ms"]
    last = max(r["arrival_ms"] for r in case["requests"])
    measure_s = int(last // 1000) + 1
    return replay_sweep(
        case["name"],
        {"kind": "batching", "scheduler": "vllm",
         "async_scheduling": bool(rep.get("async_scheduling", False)),  # the loop the case was recorded with
         "waiting_cap": 512, "max_batch": rep["max_num_seqs"], "kv_blocks": rep["num_blocks"],
         "block_tokens": rep["block_size"], "max_batched_tokens": rep["max_num_batched_tokens"],
         "chunked_prefill": bool(rep["chunked_prefill"]),
         "step_ms": {k: c[k] for k in ("base", "per_prefill_token", "per_prefill_token_pair",
                                       "per_decode_sequence", "per_kv_token")}},
        # warm-up > 0 (required): the cohort then leaves out arrivals at 0 (the simulation is the same)
        {"warmup_s": 0.001, "measure_s": measure_s, "drain_s": 100000},
        {"trace": {"path": str(trace_path), "format": "csv", "time_scale": 1.0, "start_s": 0}})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--count", type=int, default=DEFAULT_COUNT)
    ap.add_argument("--out", default="-")
    a = ap.parse_args(argv)
    text = json.dumps(generate(a.seed, a.count))
    if a.out == "-":
        sys.stdout.write(text + "\n")
    else:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
