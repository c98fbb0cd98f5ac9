"""Serving logs whose truth is known: vLLM's real scheduler under a hidden step cost (issue 25).

    python -m conformance.serving_log --rate 1 --count 150 --out LOG.csv [--venv DIR]
        [--max-concurrency N] [--in-ms MS] [--in-ms-per-token MS]

Runs under any Python 3 (no vLLM import here). It builds an open-loop workload
(Poisson arrivals at ``--rate`` req/s; prompts of 256, 1,000 or 4,096 tokens, equally
likely; 128 output tokens), hands it to conformance/vllm_driver.py in the vLLM
environment (``--venv``, else $VLLM_VENV, else .vllm-venv) with a **hidden** step cost
(``hidden_cost``: a roofline, max(memory time, compute time) + overhead, with
multiplicative log-normal noise; driver's ``hidden_step_ms``), and writes what a load
generator would have logged, in routesim.calibrate's plain CSV format
(docs/calibration.md): per request its send time, token counts and every token's
timestamp. The client sees a fixed front-end overhead: a request reaches the scheduler
``FRONTEND["in_ms"]`` after it was sent, and each token reaches the client
``FRONTEND["out_ms"]`` after the step that sampled it ended, plus a uniform jitter below
``FRONTEND["jitter_ms"]``. ``--in-ms`` and ``--in-ms-per-token`` (open loop) change the way
in: ``in_ms + in_ms_per_token · P`` for a prompt of ``P`` tokens (routesim's
``ingress_ms`` and ``ingress_ms_per_token``, which ``python -m routesim.calibrate
--ingress`` fits). Everything is seeded; the same arguments give the same file.

``--max-concurrency N`` makes the client closed-loop, as vLLM's benchmark client with
``--max-concurrency``: the Poisson times (all 0 for ``--rate inf``) are the *intended*
send times, at most ``N`` requests are in flight, and a request waiting for a slot is
sent (FIFO) when the client sees one finish (its last token reached the client); it
reaches the scheduler ``FRONTEND["in_ms"]`` after its send. The driver makes these
arrivals as it runs (its ``client`` key); the log records the actual send times, as a
load generator logs them (``closed_loop_sends`` states the rule on a finished run).

The hidden model is Llama-3.1-8B's shape (conformance/llama-3.1-8b/config.json) on an
H100-like GPU: the quantities are in ``hidden_cost()``; ``TRUTH`` says what a linear
step cost fitted to low-load steps should find.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from conformance import record  # noqa: E402

PROMPTS = (256, 1000, 4096)
OUTPUT = 128
FRONTEND = {"in_ms": 12.0, "out_ms": 6.0, "jitter_ms": 0.2}
GPU = {"bandwidth_Bps": 3.35e12, "peak_flops": 989e12, "mem_efficiency": 0.8,
       "compute_efficiency": 0.6, "overhead_ms": 4.0, "noise_sigma": 0.03}
REPLICA = {"block_size": 16, "num_blocks": 28000, "max_num_seqs": 256,
           "max_num_batched_tokens": 8192, "chunked_prefill": True, "prefix_caching": False}


def model_shape():
    """(parameters, layers, hidden, KV bytes per token) of the shipped Llama-3.1-8B config."""
    c = json.loads((HERE / "llama-3.1-8b" / "config.json").read_text())
    L, h, f, v = c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd, kvh = c["head_dim"], c["num_key_value_heads"]
    attn = h * h * 2 + 2 * h * kvh * hd               # q, o and k, v projections
    params = L * (attn + 3 * h * f) + 2 * v * h        # + embedding and LM head
    kv_bytes = 2 * L * kvh * hd * 2                   # K and V, bf16
    return params, L, h, kv_bytes


def hidden_cost(seed, mixed_kv_factor=0.0):
    """The driver's ``hidden_cost`` dict (units: bytes, bytes/s, FLOPs, FLOP/s, ms);
    ``mixed_kv_factor`` > 0: a step with prefill tokens also pays that many times its
    decoders' KV read (the driver's ``hidden_step_ms``; docs/model.md's ``mixed`` form)."""
    params, L, h, kv_bytes = model_shape()
    extra = {"mixed_kv_factor": float(mixed_kv_factor)} if mixed_kv_factor else {}
    return {"overhead_ms": GPU["overhead_ms"], "weight_bytes": 2.0 * params,
            "kv_bytes_per_token": float(kv_bytes),
            "bandwidth_Bps": GPU["bandwidth_Bps"] * GPU["mem_efficiency"],
            "flops_per_token": 2.0 * params, "attn_flops_per_pair": 4.0 * L * h,
            "peak_flops": GPU["peak_flops"] * GPU["compute_efficiency"],
            "noise_sigma": GPU["noise_sigma"], "seed": seed, **extra}


def truth(h=None):
    """What the hidden cost is, in step_ms terms, in each of its two regimes (ms).

    Memory-bound (decode-only steps and small prefills): base = overhead + weights /
    bandwidth, per_kv_token = KV bytes / bandwidth, per_decode_sequence = 0 (its compute
    hides under the weight read). Compute-bound (a prefill of more than about
    ``crossover_tokens``): base = overhead, per_prefill_token = FLOPs per token / peak,
    per_prefill_token_pair = attention FLOPs per pair / peak."""
    h = h or hidden_cost(0)
    mem0 = 1000.0 * h["weight_bytes"] / h["bandwidth_Bps"]
    pf = 1000.0 * h["flops_per_token"] / h["peak_flops"]
    return {
        "memory_bound": {"base": h["overhead_ms"] + mem0, "per_prefill_token": 0.0,
                         "per_prefill_token_pair": 0.0, "per_decode_sequence": 0.0,
                         "per_kv_token": 1000.0 * h["kv_bytes_per_token"] / h["bandwidth_Bps"]},
        "compute_bound": {"base": h["overhead_ms"], "per_prefill_token": pf,
                          "per_prefill_token_pair": 1000.0 * h["attn_flops_per_pair"] / h["peak_flops"],
                          "per_decode_sequence": pf, "per_kv_token": 0.0},
        "crossover_tokens": mem0 / pf,
    }


def case(rate, count, seed, max_concurrency=0, frontend=FRONTEND, mixed_kv_factor=0.0):
    """The driver case: ``count`` Poisson arrivals at ``rate`` req/s (ms, engine side).

    Open loop (``max_concurrency`` 0) the arrivals are the Poisson times; closed loop
    they are the intended send times plus ``frontend["in_ms"]`` (the earliest each
    request can come) and the case's ``client`` lets the driver delay them (its module
    docstring). ``rate`` = inf: every intended time is 0 (closed loop only)."""
    rng = np.random.default_rng(seed)
    if np.isinf(rate):
        if not max_concurrency:
            raise ValueError("rate inf needs max_concurrency > 0")
        arrivals = np.zeros(count)
        rng.exponential(1.0, count)          # the same draws of the prompts as any rate
    else:
        gaps = rng.exponential(1000.0 / rate, count)
        arrivals = np.round(np.cumsum(gaps), 3)
    prompts = rng.choice(PROMPTS, count)
    lag = frontend["in_ms"] if max_concurrency else 0.0
    reqs = [{"id": k, "arrival_ms": float(arrivals[k]) + lag, "prompt_tokens": int(prompts[k]),
             "output_tokens": OUTPUT, "block_ids": unique_ids(k, int(prompts[k]))}
            for k in range(count)]
    rep = dict(REPLICA, step_ms={"base": 1.0, "per_prefill_token": 0.0, "per_prefill_token_pair": 0.0,
                                 "per_decode_sequence": 0.0, "per_kv_token": 0.0},
               hidden_cost=hidden_cost(seed, mixed_kv_factor))
    c = {"name": f"hidden-{rate:g}rps-seed{seed}", "replica": rep, "requests": reqs}
    if max_concurrency:
        jit = jitters(c, seed, frontend)
        c["name"] += f"-closed{max_concurrency}"
        c["client"] = {"max_concurrency": int(max_concurrency),
                       "intended_send_ms": [float(a) for a in arrivals],
                       "in_ms": frontend["in_ms"],
                       "return_ms": [frontend["out_ms"] + float(j[-1]) for j in jit]}
    return c


def jitters(c, seed, frontend=FRONTEND):
    """Each request's token jitter (ms), (O,) arrays in request order, from the log's own
    generator: the client's token times are the step ends + ``out_ms`` + these."""
    rng = np.random.default_rng([seed, 25])
    return [rng.uniform(0.0, frontend["jitter_ms"], r["output_tokens"]) for r in c["requests"]]


def send_times(c, result, frontend=FRONTEND):
    """The client's send times (ms): the driver's actual arrivals (closed loop) or the
    case's, less ``in_ms`` (+ ``in_ms_per_token`` · P, open loop)."""
    if "client" in c:
        return [out["arrival_ms"] - frontend["in_ms"] for out in result["requests"]]
    per = frontend.get("in_ms_per_token", 0.0)
    return [r["arrival_ms"] - (frontend["in_ms"] + per * r["prompt_tokens"]) for r in c["requests"]]


def closed_loop_sends(intended_ms, seen_done_ms, n):
    """The closed-loop client's send times (ms, (R,)) given the intended times (R,) and
    the times the client saw each request finish (R,), with at most ``n`` in flight:
    request k is sent at max(intended_k, the (k − n + 1)-th smallest of seen_done_0..k−1)
    (FIFO; a slot is free once one of the earlier requests finished)."""
    out = []
    for k, a in enumerate(intended_ms):
        if k < n:
            out.append(float(a))
        else:
            out.append(max(float(a), float(np.sort(seen_done_ms[:k])[k - n])))
    return out


def unique_ids(k, P, b=REPLICA["block_size"]):
    """Block ids no other request shares (cases.py's 2^40 + k·2^16 + q): no prefix hits."""
    return [(1 << 40) + (k << 16) + q for q in range(P // b)]


def linear_case(c, step_ms):
    """The same workload and replica under a linear ``step_ms`` (the driver's default cost)."""
    rep = {k: v for k, v in c["replica"].items() if k != "hidden_cost"}
    return {**c, "replica": dict(rep, step_ms=dict(step_ms))}


def log_rows(c, result, seed, frontend=FRONTEND):
    """The client's view of one driver result: (id, send_ms, P, O, token_ms list)."""
    rows = []
    for r, out, j, send in zip(c["requests"], result["requests"], jitters(c, seed, frontend),
                               send_times(c, result, frontend)):
        toks = np.asarray(out["token_ms"], dtype=float) + frontend["out_ms"] + j
        rows.append((r["id"], send, r["prompt_tokens"], r["output_tokens"], toks))
    return rows


def write_csv(rows, path):
    """The plain CSV log: ``request_id,send_ms,prompt_tokens,output_tokens,token_ms``."""
    lines = ["request_id,send_ms,prompt_tokens,output_tokens,token_ms"]
    for rid, send, P, O, toks in rows:
        lines.append(f"{rid},{send:.3f},{P},{O}," + " ".join(f"{t:.3f}" for t in toks))
    Path(path).write_text("\n".join(lines) + "\n")


def run(cases, venv=None):
    """Driver results for a list of cases (see record.run_driver)."""
    return record.run_driver(cases, venv)["results"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=1.0, help="arrivals per second")
    ap.add_argument("--count", type=int, default=150, help="requests")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--venv", default=None)
    ap.add_argument("--max-concurrency", type=int, default=0,
                    help="closed loop: at most N requests in flight (0: open loop)")
    ap.add_argument("--mixed-kv-factor", type=float, default=0.0,
                    help="a non-roofline truth: a step with prefill tokens also pays this many times its "
                    "decoders' KV read (default 0: the roofline)")
    ap.add_argument("--in-ms", type=float, default=FRONTEND["in_ms"],
                    help=f"the way from send to scheduler (ms, default {FRONTEND['in_ms']:g})")
    ap.add_argument("--in-ms-per-token", type=float, default=0.0,
                    help="open loop: the way in grows by this per prompt token (ms, default 0)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if not (a.in_ms >= 0 and a.in_ms_per_token >= 0) or (a.in_ms_per_token and a.max_concurrency):
        print("serving_log: --in-ms and --in-ms-per-token must be >= 0, --in-ms-per-token in the open loop only",
              file=sys.stderr)
        return 2
    frontend = dict(FRONTEND, in_ms=a.in_ms, in_ms_per_token=a.in_ms_per_token)
    if a.max_concurrency < 0 or (np.isinf(a.rate) and not a.max_concurrency) or not a.mixed_kv_factor >= 0:
        print("serving_log: --max-concurrency must be >= 0, and > 0 with --rate inf; --mixed-kv-factor >= 0",
              file=sys.stderr)
        return 2
    c = case(a.rate, a.count, a.seed, a.max_concurrency, frontend, mixed_kv_factor=a.mixed_kv_factor)
    res = run([c], a.venv)[0]
    write_csv(log_rows(c, res, a.seed, frontend), a.out)
    loop = f", at most {a.max_concurrency} in flight" if a.max_concurrency else ""
    print(f"serving_log: {a.count} requests at {a.rate:g} req/s{loop}, {len(res['steps'])} steps -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
