"""Run vLLM's real V1 scheduler on conformance cases, on routesim's clock (issue 22).

Runs under the vLLM environment's python (tools/vllm-env), never routesim's:

    .vllm-venv/bin/python conformance/vllm_driver.py CASES.json OUT.json

``CASES.json`` holds one case or a list of cases (the format of conformance/cases.py and
conformance/VLLM-SCHEDULER.md §5); ``OUT.json`` gets one result per case, in order.
Nothing of vLLM is copied here: the driver builds vLLM 0.30.0's own ``Scheduler`` and
``KVCacheManager`` and plays the model runner's part.

- The replica: ``VllmConfig`` with ``DeviceConfig("cpu")``, the Llama-3.1-8B-shaped
  ``conformance/llama-3.1-8b/config.json`` (no weights, ``skip_tokenizer_init``),
  FCFS, synchronous scheduling (or, when the case's replica says
  ``"async_scheduling": true``, vLLM's default loop: the ``AsyncScheduler`` driven as
  ``EngineCore.step_with_batch_queue`` drives it, with a batch queue of 2 — see
  :func:`run_async` and VLLM-SCHEDULER.md §9), ``KVCacheConfig`` with one ``FullAttentionSpec`` group
  of ``num_blocks + 1`` blocks (vLLM keeps block 0 as its null block, so the case's
  ``num_blocks`` are the usable ones, as routesim's ``kv_blocks``).
- Token ids made from routesim's block ids: the ``b`` tokens of prompt block ``j`` with
  id ``β`` are ``β``'s base-2^16 digits (least significant first, padded with 0), so
  vLLM's chained block hashes are equal exactly where routesim's prefix model says the
  prefixes are equal; the prompt's tail (past its last full block) and every generated
  token are ``TOKEN_UNIQUE + request index``, unique to the request.
- A fake executor: each ``schedule()`` is answered with one sampled token for every
  request whose computed tokens reach its current length, then ``update_from_output``.
- The clock: a request is added when the clock reaches its arrival (``arrival <= T``);
  a step that starts at ``T`` lasts routesim's step-cost formula on its ``U, Q, n, K``
  (VLLM-SCHEDULER.md §4), evaluated left to right then multiplied by 1.0; an idle
  scheduler jumps to the next arrival; a step that schedules nothing (all running
  requests preempted) lasts 0 ms.
- A hidden step cost (issue 25, opt-in): a case whose ``replica`` holds ``hidden_cost``
  (conformance/serving_log.py writes such cases) has its steps timed by
  ``hidden_step_ms`` (a roofline, max(memory time, compute time) + overhead, times
  log-normal noise from ``random.Random(seed)``) instead, and its results carry every
  request's ``token_ms`` (the end of each step that sampled one of its tokens). Cases
  without the key (every committed recording) run exactly as before.
- A closed-loop client (issue 25, opt-in): a case with ``client`` = {``max_concurrency``
  N, ``intended_send_ms`` (R,), ``in_ms``, ``return_ms`` (R,)} has its arrivals made
  here: request ``k`` is sent at max(its intended time, the time the client saw the
  (k − N + 1)-th completion among requests 0..k−1) — a semaphore of N slots, FIFO — and
  reaches the scheduler ``in_ms`` later; the client sees request ``j`` complete
  ``return_ms[j]`` after the end of the step that sampled its last token. Its requests'
  ``arrival_ms`` must be intended + ``in_ms`` (the earliest each can come); results
  carry every request's actual ``arrival_ms``. The pool's block counts are not taken
  (``free``, ``cached``, ``referenced`` are absent): they cost a walk of the pool per
  step. Cases without the key run exactly as before.
- Timeouts (opt-in): a case whose ``replica`` holds ``timeout_ms`` has every request
  still unfinished at its deadline ``arrival_ms + timeout_ms`` aborted
  (``Scheduler.finish_requests(..., FINISHED_ABORTED)``, as the API server's abort does)
  the way the engine core processes aborts: one received while the engine thread waits
  for a step's output (the synchronous step; the oldest batch of the asynchronous queue)
  — deadline strictly inside the wait — before that output's ``update_from_output``
  (EC:611-613, EC:713-715); one at the output's time after it (routesim's phase 1
  precedes its phase 3); one while the thread is not waiting at once, before the next
  ``schedule()`` (``_process_input_queue``) — after adding the requests that have
  arrived, since the input queue holds a request's add before its abort (an abort of
  a request not yet added, processed from ``aborts_queue``, is ignored by vLLM). Several aborts due in
  one step are processed one call each, in deadline then request order (vLLM's own
  ``finish_requests`` takes a batch in a set's order, string hashes, so any order is
  one it can take). Results carry each request's ``aborted_ms`` (None if it completed).
- The decode side of prefill/decode disaggregation (issue 42 item 5, opt-in,
  synchronous loop only): a case whose requests carry ``transfer_ms`` (a request's
  transfer latency) is run with a KV connector loaded by vLLM's own factory
  (``KVTransferConfig(kv_connector="DecodeSideConnector", kv_connector_module_path=
  "decode_connector", kv_role="kv_consumer")``, conformance/decode_connector.py, NIXL
  pull mode's decode-side scheduler behaviour). Such a request is sent with
  ``kv_transfer_params = {"do_remote_prefill": True}``; when vLLM's scheduler admits it
  into ``WAITING_FOR_REMOTE_KVS`` the connector's metadata names the tokens to read
  (P − the block-aligned local hit), and the driver, playing the worker, starts the
  read with that step: it ends ``transfer_ms + transfer_ms_per_token`` (the replica's)
  × tokens after the step's start, and is reported in ``finished_recving``
  (``KVConnectorOutput`` in ``update_from_output``) at the end of the first step that
  ends at or after it. When nothing can be scheduled while reads are in flight, vLLM's
  engine spins on empty steps (``EngineCore.step`` schedules and executes while
  ``has_requests()``, v1/engine/core.py:598-601; the model runner answers an empty
  batch with the connector's finished reads, ``kv_connector_no_forward``,
  v1/worker/gpu_model_runner.py:4249-4252); on the step clock the driver jumps to the next read's
  end (or the next arrival, whichever is first; a read ending exactly at an arrival is
  reported first) and makes one empty step there (a *poll*, not recorded) that reports
  it. Step records add ``loads`` ([request, local hit, tokens read] per admission into
  ``WAITING_FOR_REMOTE_KVS``) and ``promoted`` (requests whose read was done, scheduled
  from ``WAITING_FOR_REMOTE_KVS``); a step that schedules nothing is recorded only if it
  admitted a load or preempted. Results add every remote request's ``load`` =
  [admission ms, local hit, tokens read, read end ms, reported ms, promotion ms].
  Requests without ``transfer_ms`` are local (the selective rule's short prompts).
"""

import bisect
import collections
import json
import os
import random
import sys
import warnings
from pathlib import Path

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
warnings.simplefilter("ignore")

import torch  # noqa: E402
import vllm  # noqa: E402
from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_request_block_hasher,
    init_none_hash,
)
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

MODEL_DIR = Path(__file__).resolve().parent / "llama-3.1-8b"
TOKEN_UNIQUE = 70000          # tail and generated tokens: TOKEN_UNIQUE + request index
MAX_REQUESTS = 128256 - TOKEN_UNIQUE - 1000   # stay inside the vocabulary, below the EOS ids
DIGIT = 1 << 16               # an id's tokens are its base-2^16 digits
RESPONSE_BASE = 1 << 50       # a conversation's response ids (conformance/cases.py)
HASH_ALGO = "sha256"          # vLLM's default prefix_caching_hash_algo


class CaseError(ValueError):
    pass


def block_tokens(block_id, b):
    """The ``b`` token ids of a prompt block with routesim id ``block_id``."""
    if block_id < 0:
        raise CaseError(f"block id {block_id} < 0")
    digits = []
    v = block_id
    while v:
        digits.append(v % DIGIT)
        v //= DIGIT
    if len(digits) > b:
        raise CaseError(f"block id {block_id} does not fit in {b} tokens of 16 bits")
    return digits + [0] * (b - len(digits))


def prompt_tokens(index, P, ids, b, objs=None):
    """Request ``index``'s prompt token ids: each block id's tokens, a conversation's
    response id (``RESPONSE_BASE + q·2^16 + j``) the tokens of block j of request q's
    prompt and output as vLLM holds them (``objs``: request id -> Request; q must have
    finished), then the tail ``TOKEN_UNIQUE + index``."""
    if len(ids) != P // b:
        raise CaseError(f"request {index}: {len(ids)} block ids for {P} prompt tokens "
                        f"(floor(P/b) = {P // b} expected)")
    toks = []
    for bid in ids:
        if int(bid) >= RESPONSE_BASE:
            q, j = divmod(int(bid) - RESPONSE_BASE, 1 << 16)
            src = (objs or {}).get(str(q))
            if src is None or not src.is_finished():
                raise CaseError(f"request {index}: a response id of request {q}, which has not finished")
            toks.extend(list(src.all_token_ids)[j * b:(j + 1) * b])
            continue
        toks.extend(block_tokens(int(bid), b))
    toks.extend([TOKEN_UNIQUE + index] * (P - len(toks)))
    return toks


def step_ms(c, U, Q, n, K, f=1.0):
    """routesim's step cost (token-model.md §2 step 3), evaluated as the engine does."""
    return f * (c["base"] + c["per_prefill_token"] * U + c["per_prefill_token_pair"] * Q
                + c["per_decode_sequence"] * n + c["per_kv_token"] * K)


def hidden_step_ms(h, U, Q, n, K, R, rng):
    """The hidden roofline cost of one step, in ms (issue 25).

    ``h``: ``overhead_ms``, ``weight_bytes``, ``kv_bytes_per_token``, ``bandwidth_Bps``
    (effective, efficiency included), ``flops_per_token`` (2 x parameters),
    ``attn_flops_per_pair`` (4 x layers x hidden), ``peak_flops`` (effective),
    ``noise_sigma``. ``R`` = the KV tokens the prefill chunks attend to (sum of c + x).
    Memory time: the weights once plus the KV read (decoders' K and prefills' R);
    compute time: linear FLOPs of the U + n tokens plus attention FLOPs of the Q prefill
    pairs and the K decode pairs. d = overhead + max(memory, compute), times
    exp(sigma * N(0, 1)). With ``mixed_kv_factor`` (issue 41, opt-in: a non-roofline
    truth) a step with prefill tokens (U > 0) also pays ``mixed_kv_factor`` times its
    decoders' KV read (K tokens) before the noise: docs/model.md's ``mixed`` form.
    """
    mem = (h["weight_bytes"] + h["kv_bytes_per_token"] * (K + R)) / h["bandwidth_Bps"]
    comp = (h["flops_per_token"] * (U + n) + h["attn_flops_per_pair"] * (Q + K)) / h["peak_flops"]
    d = h["overhead_ms"] + 1000.0 * max(mem, comp)
    if h.get("mixed_kv_factor") and U > 0:
        d += 1000.0 * h["mixed_kv_factor"] * h["kv_bytes_per_token"] * K / h["bandwidth_Bps"]
    return d * rng.lognormvariate(0.0, h["noise_sigma"])


def decode_side_transfer_config():
    """The ``KVTransferConfig`` of a decode-side replica: the stand-in connector of
    conformance/decode_connector.py, by module path (vLLM's factory imports it;
    this directory is on ``sys.path`` as the script's own), as a KV consumer."""
    return KVTransferConfig(kv_connector="DecodeSideConnector",
                            kv_connector_module_path="decode_connector",
                            kv_role="kv_consumer")


def make_scheduler(rep, max_len, remote=False):
    """vLLM's scheduler for the case's replica: ``AsyncScheduler`` with
    ``async_scheduling = True`` when the replica says ``"async_scheduling": true``
    (what ``VllmConfig`` picks by default for the default executors), else the
    synchronous ``Scheduler``; with ``remote``, a decode-side replica
    (:func:`decode_side_transfer_config`)."""
    b = int(rep["block_size"])
    asynchronous = bool(rep.get("async_scheduling", False))
    chunked = bool(rep["chunked_prefill"])
    caching = bool(rep["prefix_caching"])
    budget = int(rep["max_num_batched_tokens"])
    # vLLM refuses an unchunked replica whose budget is below max_model_len
    # (SchedulerConfig.verify_max_model_len): unchunked, max_model_len is the budget.
    max_model_len = budget if not chunked else max_len
    model = ModelConfig(model=str(MODEL_DIR), skip_tokenizer_init=True,
                        max_model_len=max_model_len, dtype="bfloat16", seed=0)
    sched = SchedulerConfig(max_num_seqs=int(rep["max_num_seqs"]),
                            max_num_batched_tokens=budget,
                            enable_chunked_prefill=chunked,
                            max_model_len=max_model_len, is_encoder_decoder=False,
                            async_scheduling=asynchronous, policy="fcfs")
    cache = CacheConfig(block_size=b, enable_prefix_caching=caching,
                        prefix_caching_hash_algo=HASH_ALGO)
    num_blocks = int(rep["num_blocks"]) + 1     # + vLLM's null block
    cache.num_gpu_blocks = num_blocks
    vc = VllmConfig(model_config=model, cache_config=cache, scheduler_config=sched,
                    device_config=DeviceConfig(device="cpu"),
                    kv_transfer_config=decode_side_transfer_config() if remote else None)
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec(["model.layers.0.self_attn.attn"],
                         FullAttentionSpec(block_size=b, num_kv_heads=8, head_size=128,
                                           dtype=torch.bfloat16))])
    cls = AsyncScheduler if asynchronous else Scheduler
    s = cls(vllm_config=vc, kv_cache_config=kv,
                  structured_output_manager=StructuredOutputManager(vc),
                  block_size=b, log_stats=False)
    hasher = None
    if caching:
        fn = get_hash_fn_by_name(HASH_ALGO)
        init_none_hash(fn)
        hasher = get_request_block_hasher(b, fn)
    # Observe (not change) evictions: count the calls of the pool's own eviction
    # that removed a cached hash.
    pool = s.kv_cache_manager.block_pool
    evict = pool._maybe_evict_cached_block
    counter = [0]

    def counted(block):
        hit = evict(block)
        counter[0] += bool(hit)
        return hit

    pool._maybe_evict_cached_block = counted
    return s, hasher, counter


def block_counts(s):
    """(free, cached, referenced) blocks of the pool, the null block left out: free =
    ref 0 without a hash, cached = ref 0 with a hash (evictable), referenced = ref > 0."""
    free = cached = ref = 0
    for blk in s.kv_cache_manager.block_pool.blocks:
        if blk.is_null:
            continue
        if blk.ref_cnt > 0:
            ref += 1
        elif blk.block_hash is not None:
            cached += 1
        else:
            free += 1
    return free, cached, ref


class Run:
    """What the synchronous and the asynchronous loop share: the case checked, vLLM's
    scheduler built, the arrivals (open loop, or made by the closed-loop client), the
    requests added as the clock reaches them, a step's terms and what each request saw."""

    def __init__(self, case):
        rep = case["replica"]
        self.case = case
        self.b = int(rep["block_size"])
        self.costs = rep["step_ms"]
        self.hidden = rep.get("hidden_cost")
        self.rng = random.Random(self.hidden["seed"]) if self.hidden else None
        reqs = self.reqs = case["requests"]
        n_req = self.n_req = len(reqs)
        if n_req > MAX_REQUESTS:
            raise CaseError(f"{n_req} requests: at most {MAX_REQUESTS}")
        for k, r in enumerate(reqs):
            if int(r["id"]) != k:
                raise CaseError(f"request ids must be 0, 1, ... in arrival order (row {k})")
            if k and r["arrival_ms"] < reqs[k - 1]["arrival_ms"]:
                raise CaseError(f"arrivals decrease at request {k}")
            if r["prompt_tokens"] + r["output_tokens"] > int(rep["num_blocks"]) * self.b:
                raise CaseError(f"request {k} larger than the KV pool")
        max_len = max(r["prompt_tokens"] + r["output_tokens"] for r in reqs)
        if not rep["chunked_prefill"] and max_len > int(rep["max_num_batched_tokens"]):
            raise CaseError("unchunked: a request longer than max_num_batched_tokens "
                            "(vLLM refuses max_model_len > max_num_batched_tokens)")
        self.remote = any("transfer_ms" in r for r in reqs)
        if self.remote:
            for key in ("async_scheduling", "timeout_ms"):
                if rep.get(key):
                    raise CaseError(f"remote prefill: not with the replica's {key}")
            if case.get("client") is not None or self.hidden:
                raise CaseError("remote prefill: not with a client or a hidden cost")
            if float(rep.get("transfer_ms_per_token", -1.0)) < 0.0:
                raise CaseError("remote prefill: the replica needs transfer_ms_per_token >= 0")
            for k, r in enumerate(reqs):
                if "transfer_ms" in r and not float(r["transfer_ms"]) > 0.0:
                    raise CaseError(f"request {k}: transfer_ms must be > 0")
        self.s, self.hasher, self.evicted = make_scheduler(rep, max_len, self.remote)
        self.reads = {}          # request id -> [admitted at, local hit, tokens, read end, reported, promoted]
        self.client = case.get("client")
        self.seen = []           # closed loop: client completion times so far, sorted
        self.actual = [None] * n_req
        self.objs = {}
        self.first = [None] * n_req
        self.done = [None] * n_req
        self.admissions = [[] for _ in range(n_req)]
        self.token_ms = [[] for _ in range(n_req)]
        self.l_admit = {}        # request id -> num_tokens at its current admission
        self.steps = []
        self.nxt = 0
        self.timeout = rep.get("timeout_ms")
        self.aborted = [None] * n_req

    def abort_due(self, lo, hi, closed):
        """Abort every added, unfinished request whose deadline D is in (lo, hi) — or
        D <= hi when ``closed`` (between steps) — one at a time, by (D, request)."""
        if self.timeout is None:
            return
        due = []
        for k in range(self.nxt):
            o = self.objs[str(k)]
            D = float(self.reqs[k]["arrival_ms"]) + float(self.timeout)
            if not o.is_finished() and (D <= hi if closed else lo < D < hi):
                due.append((D, k))
        for D, k in sorted(due):
            self.s.finish_requests(str(k), RequestStatus.FINISHED_ABORTED)
            self.aborted[k] = D

    def arrival(self, k):
        """Request k's arrival at the scheduler (ms), None while still unknown."""
        client = self.client
        if client is None:
            return float(self.reqs[k]["arrival_ms"])
        if self.actual[k] is None:
            N = int(client["max_concurrency"])
            if k < N:
                self.actual[k] = float(client["intended_send_ms"][k]) + float(client["in_ms"])
            elif len(self.seen) >= k - N + 1:
                self.actual[k] = (max(float(client["intended_send_ms"][k]), self.seen[k - N])
                                  + float(client["in_ms"]))
        return self.actual[k]

    def add_arrivals(self, T):
        """Add every request that has reached the scheduler by T (ms)."""
        while (self.nxt < self.n_req and self.arrival(self.nxt) is not None
               and self.arrival(self.nxt) <= T):
            k = self.nxt
            r = self.reqs[k]
            rid = str(k)
            extra = ({"kv_transfer_params": {"do_remote_prefill": True}}
                     if "transfer_ms" in r else None)
            sp = SamplingParams(max_tokens=int(r["output_tokens"]), ignore_eos=True,
                                temperature=0.0, extra_args=extra)
            obj = Request(rid, prompt_tokens(k, int(r["prompt_tokens"]),
                                             r.get("block_ids", []), self.b, self.objs),
                          sp, None, arrival_time=self.arrival(k) / 1000.0,
                          block_hasher=self.hasher)
            self.objs[rid] = obj
            self.s.add_request(obj)
            self.nxt += 1

    def schedule(self, sampled_if):
        """One ``schedule()``: the output, the step record's fields (without times), and
        the request ids that sample a token in it (``sampled_if(request)`` right after
        scheduling)."""
        objs = self.objs
        before = {rid: (o.status, o.num_tokens) for rid, o in objs.items()
                  if not o.is_finished()}
        running_before = [o.request_id for o in self.s.running]
        self.evicted[0] = 0
        out = self.s.schedule()
        sched = list(out.num_scheduled_tokens.items())
        preempted = [rid for rid in reversed(running_before)
                     if objs[rid].status == RequestStatus.PREEMPTED]
        U = 0
        Q = 0.0
        n = 0
        K = 0
        R = 0
        admitted = []
        promoted = []
        sampled = {}
        for rid, x in sched:
            o = objs[rid]
            c = o.num_computed_tokens - x          # computed before this chunk
            st, L = before[rid]
            if st in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
                self.l_admit[rid] = L
                admitted.append([int(rid), c])
                self.admissions[int(rid)].append(c)
            elif st == RequestStatus.WAITING_FOR_REMOTE_KVS:   # its read is done
                self.l_admit[rid] = L
                promoted.append(int(rid))
            if c < self.l_admit[rid]:              # prefilling (recompute included)
                U += x
                Q += x * (c + x / 2.0)
                R += c + x
            else:                                  # decoding: one token
                assert x == 1, (rid, x, c, self.l_admit[rid])
                n += 1
                K += c + x
            if sampled_if(o):
                sampled[rid] = TOKEN_UNIQUE + int(rid)
        step = {
            "sched": [[int(r), x] for r, x in sched],
            "preempted": [int(r) for r in preempted],
            "admitted": admitted,
            "U": U, "Q": Q, "n": n, "K": K,
            "evicted": self.evicted[0],
        }
        if self.remote:
            step["loads"] = self.loads(out)
            step["promoted"] = promoted
        if not sched:
            d = 0.0
        elif self.hidden:
            d = hidden_step_ms(self.hidden, U, Q, n, K, R, self.rng)
        else:
            d = step_ms(self.costs, U, Q, n, K)
        return out, step, sampled, d

    def loads(self, out):
        """The reads the connector's metadata for this ``schedule()`` names (admissions
        into ``WAITING_FOR_REMOTE_KVS``), as [request, local hit, tokens to read], in
        admission order; each is recorded in ``self.reads`` (its start and end are set
        by :meth:`start_reads`)."""
        rows = []
        for rid, tokens in out.kv_connector_metadata.reqs_to_recv.items():
            o = self.objs[rid]
            local = o.num_computed_tokens - tokens     # vLLM sets computed = local + read
            rows.append([int(rid), local, tokens])
            self.reads[rid] = [None, local, tokens, None, None, None]
        return rows

    def start_reads(self, step, T):
        """The worker starts this step's reads at its start ``T``: each ends
        ``transfer_ms + transfer_ms_per_token · tokens`` later (ms)."""
        per = float(self.case["replica"]["transfer_ms_per_token"])
        for k, _local, tokens in step.get("loads", ()):
            read = self.reads[str(k)]
            read[0] = T
            read[3] = T + (float(self.reqs[k]["transfer_ms"]) + per * tokens)

    def finished_reads(self, end):
        """The reads not yet reported that have ended by ``end`` (ms); marked reported."""
        done = set()
        for rid, read in self.reads.items():
            if read[4] is None and read[3] <= end:
                read[4] = end
                done.add(rid)
        return done

    def next_read_end(self):
        """The earliest end of a read not yet reported (ms), or None."""
        ends = [read[3] for read in self.reads.values() if read[4] is None]
        return min(ends) if ends else None

    def runner_output(self, sched, sampled, finished_recving=None):
        """The fake executor's answer: one token for each request that samples, and
        (decode side) the reads the worker reports finished."""
        ids = [rid for rid, _ in sched]
        kv = None if finished_recving is None else KVConnectorOutput(finished_recving=finished_recving)
        return ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                 sampled_token_ids=[[sampled[r]] if r in sampled else []
                                                    for r in ids],
                                 kv_connector_output=kv)

    def token(self, rid, end):
        """Request ``rid`` received a token at ``end`` (ms)."""
        k = int(rid)
        if self.first[k] is None:
            self.first[k] = end
        if self.hidden:
            self.token_ms[k].append(end)
        if self.objs[rid].is_finished():
            self.done[k] = end
            if self.client is not None:
                bisect.insort(self.seen, end + float(self.client["return_ms"][k]))

    def counts(self, step):
        if self.client is None:
            free, cached, ref = block_counts(self.s)
            step.update(free=free, cached=cached, referenced=ref)

    def result(self):
        per_req = []
        for k in range(self.n_req):
            o = self.objs[str(k)]
            if self.aborted[k] is None and (self.done[k] is None
                                            or o.num_output_tokens != self.reqs[k]["output_tokens"]):
                raise CaseError(f"request {k} did not complete")
            rec = {"id": k, "first_token_ms": self.first[k], "completion_ms": self.done[k],
                   "preemptions": o.num_preemptions, "hits": self.admissions[k]}
            if self.timeout is not None:
                rec["aborted_ms"] = self.aborted[k]
            if self.hidden:
                rec["token_ms"] = self.token_ms[k]
            if self.client is not None:
                rec["arrival_ms"] = self.actual[k]
            if self.remote and "transfer_ms" in self.reqs[k]:
                rec["load"] = self.reads.get(str(k))
            per_req.append(rec)
        return {"name": self.case.get("name"), "steps": self.steps, "requests": per_req}


def run_case(case):
    """vLLM's schedule of one case: synchronous, or asynchronous when the replica says
    ``"async_scheduling": true``; a decode-side case (remote prefill) by
    :func:`run_decode_side`."""
    run = Run(case)
    if run.remote:
        return run_decode_side(run)
    if case["replica"].get("async_scheduling", False):
        return run_async(run)
    return run_sync(run)


def run_decode_side(run):
    """``EngineCore.step`` on a decode-side replica (synchronous): as :func:`run_sync`,
    with the worker's part of the KV connector — the reads a step's ``schedule()``
    admitted start at its start, and every read ended by a step's end is reported in
    that step's output (``finished_recving``); when a step schedules nothing and
    changes nothing, the engine spins until the next read's end or arrival (a *poll*
    at a read's end reports it; polls are not recorded)."""
    s = run.s
    T = 0.0
    sampled_if = lambda o: o.num_computed_tokens >= o.num_tokens   # noqa: E731
    while True:
        run.add_arrivals(T)
        if not s.has_unfinished_requests():
            if run.nxt >= run.n_req:
                break
            T = max(T, run.arrival(run.nxt))
            continue
        out, step, sampled, d = run.schedule(sampled_if)
        run.start_reads(step, T)
        end = T + d
        finished = run.finished_reads(end)
        s.update_from_output(out, run.runner_output(list(out.num_scheduled_tokens.items()),
                                                    sampled, finished))
        for rid in sampled:
            run.token(rid, end)
        for k in step["promoted"]:
            run.reads[str(k)][5] = T
        step = {"T": T, "d": d, **step}
        idle = not step["sched"] and not step["preempted"]
        if not idle or step["loads"]:
            run.counts(step)
            run.steps.append(step)
        T = end
        if not idle or step["loads"] or finished:
            continue
        # Nothing scheduled, nothing changed: vLLM spins on empty steps until a read
        # ends or a request arrives.
        t_read = run.next_read_end()
        t_arr = run.arrival(run.nxt) if run.nxt < run.n_req else None
        if t_read is None and t_arr is None:
            raise CaseError(f"stall at T={T}: nothing scheduled, nothing in flight")
        if t_read is not None and (t_arr is None or t_read <= t_arr):
            T = max(T, t_read)
            poll = s.schedule()
            if poll.total_num_scheduled_tokens or poll.kv_connector_metadata.reqs_to_recv:
                raise CaseError(f"a poll at {T} scheduled work")
            s.update_from_output(poll, run.runner_output([], {}, run.finished_reads(T)))
        else:
            T = max(T, t_arr)
    return run.result()


def run_sync(run):
    """``EngineCore.step``: schedule, execute, update, one step at a time. A step starts
    at T, when the previous one ended (or at the next arrival when idle); the requests
    that have arrived by T are added first."""
    s = run.s
    T = 0.0
    while True:
        run.add_arrivals(T)
        run.abort_due(None, T, closed=True)     # deadlines up to T, between steps (after the adds:
        #                                         a request that came and timed out during the step)
        if not s.has_unfinished_requests():
            if run.nxt >= run.n_req:
                break
            T = max(T, run.arrival(run.nxt))
            continue
        out, step, sampled, d = run.schedule(lambda o: o.num_computed_tokens >= o.num_tokens)
        end = T + d
        run.abort_due(T, end, closed=False)      # received while the step ran (EC:611-613)
        s.update_from_output(out, run.runner_output(list(out.num_scheduled_tokens.items()), sampled))
        for rid in sampled:
            if run.aborted[int(rid)] is None:
                run.token(rid, end)
        step = {"T": T, "d": d, **step}
        run.counts(step)
        run.steps.append(step)
        if not step["sched"] and not step["preempted"]:
            raise CaseError(f"stall at T={T}: nothing scheduled, nothing preempted")
        T = end
    return run.result()


BATCH_QUEUE = 2     # VllmConfig.max_concurrent_batches with async scheduling (config/vllm.py:589-599)


def run_async(run):
    """``EngineCore.step_with_batch_queue`` with a batch queue of 2 and the
    ``AsyncScheduler`` (v1/engine/core.py:630-744), on the step clock:

    - The engine thread's clock ``now``: it schedules at ``now``; it waits for the
      oldest batch in the queue when the queue is full (or nothing more can be
      scheduled), and then ``now`` = that batch's end; it waits for the next arrival
      when it has no work (``has_work``: requests, or a batch in the queue).
    - The GPU runs the batches in the order they were scheduled, back to back: batch j
      starts at ``max(scheduled_at, end of batch j-1)`` and lasts the step cost of its
      ``U, Q, n, K`` (0 ms when nothing is scheduled).
    - Tokens reach the requests (first token, completion) when the engine processes the
      batch's output: ``update_from_output`` at ``now`` = the batch's end. The tokens are
      the ones that call returns (``EngineCoreOutput.new_token_ids``), so an output made
      stale by a preemption counts only if vLLM delivers it.
    - The requests that have arrived by ``now`` are added before each step
      (``run_busy_loop``: ``_process_input_queue``, then ``_process_engine_step``).

    Each step record adds ``S``, the time it was scheduled; ``T`` is when it started
    on the GPU."""
    s = run.s
    now = 0.0
    gpu_free = 0.0
    queue = collections.deque()       # (output, runner output, step), newest first
    while True:
        run.add_arrivals(now)
        run.abort_due(None, now, closed=True)   # not waiting: at once (_process_input_queue, in
        #                                         order: a request's add before its abort)
        if not s.has_requests() and not queue:
            if run.nxt >= run.n_req:
                break
            now = max(now, run.arrival(run.nxt))
            continue
        if s.has_requests():
            out, step, sampled, d = run.schedule(lambda o: not o.is_prefill_chunk)
            sched = list(out.num_scheduled_tokens.items())
            start = max(now, gpu_free)
            gpu_free = start + d
            step = {"S": now, "T": start, "d": d, **step}
            run.counts(step)
            run.steps.append(step)
            queue.appendleft((out, run.runner_output(sched, sampled), step))
            executed = out.total_num_scheduled_tokens > 0
            if len(queue) < BATCH_QUEUE and (executed or s.has_requests()):
                continue
            if (not executed and not step["preempted"] and s.has_unfinished_requests()
                    and all(not q[2]["sched"] for q in queue)):
                # Nothing runs and nothing can be scheduled: vLLM would spin until the
                # next arrival.
                if run.nxt >= run.n_req:
                    raise CaseError(f"stall at {now}: nothing scheduled, nothing in flight")
                while queue:                    # the empty batches return at once
                    o, mro, _ = queue.pop()
                    _deliver(run, s.update_from_output(o, mro), now)
                now = max(now, run.arrival(run.nxt))
                continue
        out, mro, step = queue.pop()
        end = max(now, step["T"] + step["d"])
        run.abort_due(now, end, closed=False)   # received while waiting: before the output (EC:713-715)
        now = end
        _deliver(run, s.update_from_output(out, mro), now)
    return run.result()


def _deliver(run, outputs, now):
    """The tokens ``update_from_output`` returned reach their requests at ``now``."""
    for eco in outputs.values():
        for o in eco.outputs:
            if o.new_token_ids:
                run.token(o.request_id, now)


def main(argv):
    if len(argv) != 3:
        print(__doc__.splitlines()[0], file=sys.stderr)
        print("usage: vllm_driver.py CASES.json OUT.json", file=sys.stderr)
        return 2
    cases = json.loads(Path(argv[1]).read_text())
    single = isinstance(cases, dict)
    if single:
        cases = [cases]
    results = []
    for case in cases:
        results.append(run_case(case))
    doc = {"vllm_version": vllm.__version__, "torch_version": torch.__version__,
           "results": results[0] if single else results}
    Path(argv[2]).write_text(json.dumps(doc, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
