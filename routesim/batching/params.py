"""Every sweep key of the batching model (token-interface.md) with token-model.md's
default, its units and one line of help: the config reads this table, the grid
builds runs from it, the Dataset copies units and help into attrs and docs/keys.md
(:mod:`routesim.keys`) is rendered from it. ``MODEL`` is
the model as the pipeline sees it (routesim.schema).

A parameter's flat name is its stage-override key and Dataset dimension:
``step_ms = { base = … }`` is ``step_ms_base``, ``chat = { prompt = { median = … } }``
is ``chat_prompt_median``, ``[router] breaker = { consecutive = … }`` is
``breaker_consecutive``, ``[signals] mode`` is ``signal_mode``.
"""

import math

from .. import step_cost
from ..schema import LENGTHS_PARAMS, TRACE_LEAVES, TRACE_PARAMS, Param, ReplicaModel
from . import pd_keys, policies
from .dtypes import EVENT_NAMES

INF = math.inf

_CLASSES = {
    "chat": {"prompt": (1000.0, 0.9, 16, 16384), "output": (128.0, 1.0, 1, 2048)},
    "long": {"prompt": (12000.0, 0.5, 2048, 30000), "output": (2000.0, 0.6, 256, 32768)},
}


def _class_params():
    out = []
    for cls, parts in _CLASSES.items():
        for part, (median, sigma, lo, hi) in parts.items():
            base = f"{cls}_{part}"
            out += [
                Param(f"{base}_median", "workload", (cls, part, "median"), median, "tokens",
                      f"median of the {cls} class's {part}-token log-normal", low=0, low_open=True),
                Param(f"{base}_sigma", "workload", (cls, part, "sigma"), sigma, "1",
                      f"sigma of the {cls} class's {part}-token log-normal", low=0),
                Param(f"{base}_min", "workload", (cls, part, "min"), lo, "tokens",
                      f"smallest {part} of the {cls} class", kind=int, low=1),
                Param(f"{base}_max", "workload", (cls, part, "max"), hi, "tokens",
                      f"largest {part} of the {cls} class", kind=int, low=1),
            ]
    return out


TOKEN_PARAMS = (
    # [replica] (§2)
    Param("waiting_cap", "replica", ("waiting_cap",), 512, "requests", "waiting requests a replica accepts (preempted ones not counted against it; inf: unbounded); unless set, 512 with scheduler = \"reserve\" and inf with \"vllm\" (vLLM's waiting queue has no bound)", kind=int, low=1, allow_inf=True, default_when=("scheduler", (("vllm", INF),))),
    Param("max_batch", "replica", ("max_batch",), 256, "sequences", "running sequences per replica", kind=int, low=1),
    Param("kv_blocks", "replica", ("kv_blocks",), 16384, "blocks", "KV cache blocks per replica", kind=int, low=1),
    Param("block_tokens", "replica", ("block_tokens",), 16, "tokens", "tokens per KV block (b)", kind=int, low=1),
    Param("max_batched_tokens", "replica", ("max_batched_tokens",), 8192, "tokens", "tokens one iteration computes (decode tokens included)", kind=int, low=1),
    Param("chunked_prefill", "replica", ("chunked_prefill",), True, "", "spread a prompt's computation over iterations", kind=bool),
    Param("scheduler", "replica", ("scheduler",), "reserve", "", "how a replica schedules and manages its KV blocks: reserve (a prompt's whole KV reserved at admission, token-model.md §2) or vllm (vLLM V1 0.30.0's scheduler and KV-cache manager, docs/model.md)", kind=str, options=("reserve", "vllm")),
    Param("prefix_caching", "replica", ("prefix_caching",), True, "", "cache and reuse KV blocks across requests (false: scheduler = \"vllm\" only)", kind=bool),
    Param("async_scheduling", "replica", ("async_scheduling",), True, "", "vLLM's asynchronous scheduling, vLLM 0.30.0's default: a batch queue of 2, the next batch scheduled while the previous one runs (conformance/VLLM-MODE.md 25-35); false: vLLM's synchronous loop", kind=bool, when=("scheduler", ("vllm",))),
    *step_cost.PARAMS,
    Param("cold_factor", "replica", ("cold_factor",), 1.0, "1", "time factor just after a recovery (1: no cold start)", low=0, low_open=True),
    Param("cold_tau_ms", "replica", ("cold_tau_ms",), 2000.0, "ms", "decay time of the cold-start factor", low=0, low_open=True),
    Param("ready_delay_ms", "replica", ("ready_delay_ms",), 0.0, "ms", "time after a recovery before the replica is eligible", low=0),
    Param("fail_fast_ms", "replica", ("fail_fast_ms",), 2.0, "ms", "time a black-holed replica takes to fail an attempt", low=0, low_open=True),
    # the engine loop's timing (issue 40; docs/model.md "The engine loop's timing")
    Param("step_cpu_ms", "replica", ("step_cpu_ms",), 0.0, "ms", "CPU time of every step besides its step cost (scheduling, input preparation, output processing), not scaled by the time factor", low=0),
    Param("step_cpu_ms_per_seq", "replica", ("step_cpu_ms_per_seq",), 0.0, "ms", "CPU time of a step per sequence it schedules", low=0),
    Param("ingress_ms", "replica", ("ingress_ms",), 0.0, "ms", "time from an attempt's routing until it joins the replica's waiting queue (the API server's hand-over to the engine loop), not scaled by the time factor", low=0),
    Param("ingress_ms_per_token", "replica", ("ingress_ms_per_token",), 0.0, "ms", "ingress time per prompt token (tokenization)", low=0),
    # [simulation] (§7)
    Param("dt_ms", "simulation", ("dt_ms",), 0.0, "ms", "the batching model runs in exact event time only (0)", low=0),
    Param("warmup_s", "simulation", ("warmup_s",), 10.0, "s", "warm-up before the measured cohort", low=0, low_open=True),
    Param("measure_s", "simulation", ("measure_s",), 50.0, "s", "measurement window after warm-up", low=0, low_open=True),
    Param("drain_s", "simulation", ("drain_s",), 600.0, "s", "time past the horizon the cohort may take to leave (0: stop at the horizon)", low=0),
    Param("slo_ttft_ms", "simulation", ("slo_ttft_ms",), 1000.0, "ms", "time-to-first-token objective", low=0, low_open=True),
    Param("slo_ttft_ms_per_prompt_token", "simulation", ("slo_ttft_ms_per_prompt_token",), 0.0, "ms/token", "the TTFT objective's allowance per prompt token: a request's TTFT target is slo_ttft_ms plus this times its prompt tokens (0: slo_ttft_ms for every request)", low=0),
    Param("slo_tpot_ms", "simulation", ("slo_tpot_ms",), 50.0, "ms", "time-per-output-token objective", low=0, low_open=True),
    # [workload] (§1)
    Param("p_long", "workload", ("p_long",), 0.02, "1", "probability that a request is of the long class", low=0, high=1),
    *_class_params(),
    Param("prefix_probability", "workload", ("prefix", "probability"), 0.6, "1", "probability that a prompt starts with a group's system prompt", low=0, high=1),
    Param("prefix_groups", "workload", ("prefix", "groups"), 32, "groups", "prefix groups (K)", kind=int, low=1),
    Param("prefix_zipf", "workload", ("prefix", "zipf"), 1.1, "1", "Zipf exponent of the group popularity", low=0),
    Param("prefix_tokens", "workload", ("prefix", "tokens"), 1536, "tokens", "length of every group's prefix (L)", kind=int, low=1),
    Param("context_limit", "workload", ("context_limit",), 32768, "tokens", "prompt plus output of one request", kind=int, low=1),
    # conversations (docs/model.md "Conversations"): sessions of turns, synthetic workload only
    Param("conversation_turns_mean", "workload", ("conversation", "turns_mean"), 1.0, "turns", "mean turns of a session (geometric; 1: single requests, no conversations)", low=1),
    Param("conversation_turns_max", "workload", ("conversation", "turns_max"), 8, "turns", "most turns of a session", kind=int, low=1),
    Param("conversation_think_s", "workload", ("conversation", "think_s"), 10.0, "s", "mean think time (exponential) from a turn's response to the next turn's send", low=0),
    Param("conversation_text_median", "workload", ("conversation", "text_median"), 200.0, "tokens", "median of a follow-up turn's new user text (log-normal; its prompt is the conversation so far plus it)", low=0, low_open=True),
    Param("conversation_text_sigma", "workload", ("conversation", "text_sigma"), 1.0, "1", "sigma of a follow-up turn's new user text log-normal", low=0),
    Param("trace_chains", "workload", ("trace", "chains"), False, "", "a trace request that holds an earlier one's full hash blocks (at least 2) and room for its response reuses that request's prompt and response blocks (docs/model.md \"Conversations\")", kind=bool, when=("source", ("trace",))),
    Param("max_in_flight", "workload", ("max_in_flight",), 0, "requests", "closed-loop client: requests in flight at most, the next one sent when one ends (0: open loop)", kind=int, low=0),
    Param("client_overhead_ms", "workload", ("client_overhead_ms",), 0.0, "ms", "client overhead: added to the TTFT and E2E the client measures and to the time it holds a slot", low=0),
    # [policy] (§5)
    *policies.PARAMS,
    # [signals] (§3)
    Param("signal_mode", "signals", ("mode",), "fresh", "", "what the router sees: fresh, periodic or periodic_local", kind=str, options=("fresh", "periodic", "periodic_local")),
    Param("period_ms", "signals", ("period_ms",), 50.0, "ms", "publication period of every replica's load (0: fresh)", low=0, when=("signal_mode", ("periodic", "periodic_local"))),
    Param("routers", "signals", ("routers",), 1, "routers", "independent routers, each with its own view", kind=int, low=1),
    # [client] (§6)
    Param("timeout_ms", "client", ("timeout_ms",), INF, "ms", "per-attempt timeout (inf: none)", low=0, low_open=True, allow_inf=True),
    Param("ttft_timeout_ms", "client", ("ttft_timeout_ms",), INF, "ms", "per-attempt deadline of the first token, from routing (inf: none)", low=0, low_open=True, allow_inf=True),
    Param("max_attempts", "client", ("max_attempts",), 1, "attempts", "attempts per request (1: no retries)", kind=int, low=1),
    Param("backoff_ms", "client", ("backoff_ms",), 20.0, "ms", "first retry's backoff, doubled per attempt", low=0, low_open=True),
    Param("retry_avoid_previous", "client", ("retry_avoid_previous",), True, "", "a retry avoids the replicas the request failed on", kind=bool),
    # [router] (§6)
    Param("retry_budget", "router", ("retry_budget",), INF, "1", "retries in flight per attempt in flight (inf: no budget)", low=0, allow_inf=True),
    Param("min_retry_concurrency", "router", ("min_retry_concurrency",), 3, "retries", "retries in flight the budget always allows", kind=int, low=0),
    Param("breaker_consecutive", "router", ("breaker", "consecutive"), 0, "failures", "consecutive failures that eject a replica (0: off)", kind=int, low=0),
    Param("breaker_eject_ms", "router", ("breaker", "eject_ms"), 1000.0, "ms", "first ejection's length, times the ejections so far", low=0, low_open=True),
    Param("breaker_max_ejected_fraction", "router", ("breaker", "max_ejected_fraction"), 0.1, "1", "share of replicas that may be ejected at once (at least one)", low=0, high=1),
    Param("admission_max_tokens", "router", ("admission", "max_tokens"), INF, "tokens", "front door: turn requests away when every replica holds more (inf: off)", low=0, allow_inf=True),
    Param("admission_mode", "router", ("admission", "mode"), "reject", "", "front door: reject, or queue at the router", kind=str, options=("reject", "queue")),
    # [pools] (docs/model.md "Prefill/decode disaggregation")
    *pd_keys.PARAMS,
)
TOKEN_PARAMS += pd_keys.pool_params({p.name: p for p in TOKEN_PARAMS})  # [pools.prefill_replica], …
TOKEN_PARAM = {p.name: p for p in TOKEN_PARAMS}

CLIENT_PARAMS = ("max_in_flight", "client_overhead_ms")
"""The closed-loop client's keys (docs/model.md "Closed-loop clients"): [workload] keys
that do not change the requests (not in a workload's cache key), and Dataset attributes
only when not 0."""

STEP_CPU_PARAMS = ("step_cpu_ms", "step_cpu_ms_per_seq")
"""The engine loop's CPU time of a step: not with vLLM's asynchronous loop (its overlap
with the GPU's work is not modelled)."""

LOOP_PARAMS = STEP_CPU_PARAMS + ("ingress_ms", "ingress_ms_per_token")
"""The engine loop's timing (docs/model.md "The engine loop's timing"): default 0, and
Dataset attributes only when not 0 (so a Dataset of before them is unchanged)."""

SCALED_SLO_PARAMS = ("slo_ttft_ms_per_prompt_token",)
"""The TTFT objective scaled to prompt length (issue 44): default 0, and a Dataset
attribute only when not 0 (so a Dataset of before it is unchanged)."""

ZERO_UNRECORDED = CLIENT_PARAMS + LOOP_PARAMS + SCALED_SLO_PARAMS
"""Keys a Dataset records as attributes only when not 0."""

SECTION_KEYS = {
    "replica": ("kind", "waiting_cap", "max_batch", "kv_blocks", "block_tokens", "max_batched_tokens",
                "chunked_prefill", "scheduler", "prefix_caching", "async_scheduling", "step_cost", *step_cost.LEAVES, "cold_factor", "cold_tau_ms", "ready_delay_ms",
                "fail_fast_ms", *LOOP_PARAMS),
    "simulation": ("dt_ms", "warmup_s", "measure_s", "drain_s", "slo_ttft_ms", "slo_ttft_ms_per_prompt_token", "slo_tpot_ms"),
    "cluster": ("heterogeneity", "start_down"),
    "workload": ("p_long", "chat", "long", "prefix", "context_limit", "source", "trace", "lengths",
                 "conversation", "max_in_flight", "client_overhead_ms"),
    "policy": tuple(p.path[0] for p in policies.PARAMS),
    "signals": ("mode", "period_ms", "routers"),
    "client": ("timeout_ms", "ttft_timeout_ms", "max_attempts", "backoff_ms", "retry_avoid_previous"),
    "router": ("retry_budget", "min_retry_concurrency", "breaker", "admission"),
    pd_keys.SECTION: pd_keys.SECTION_KEYS,
}
"""Keys each top-level table of a batching sweep may hold."""

LEAVES = {
    **step_cost.LEAVES,
    "chat": ("prompt", "output"), "long": ("prompt", "output"),
    "prompt": ("median", "sigma", "min", "max"), "output": ("median", "sigma", "min", "max"),
    "prefix": ("probability", "groups", "zipf", "tokens"),
    "conversation": ("turns_mean", "turns_max", "think_s", "text_median", "text_sigma"),
    "breaker": ("consecutive", "eject_ms", "max_ejected_fraction"),
    "admission": ("max_tokens", "mode"),
    **pd_keys.LEAVES,
}
"""Keys of each inline table."""

MIN_MAX = tuple((f"{c}_{part}_min", f"{c}_{part}_max") for c in _CLASSES for part in ("prompt", "output"))

DIMS = ("policy", "rate_rps", "heterogeneity", "scenario", "seed")
"""Dimensions of every batching stage's Dataset, in this order; swept parameters follow."""

DEFAULT_HETEROGENEITY = {"uniform": (1.0,) * 8}
"""Without ``[cluster.heterogeneity]``: eight reference replicas."""

MODEL = ReplicaModel(
    kind="batching", package=__package__, params=TOKEN_PARAMS + TRACE_PARAMS + LENGTHS_PARAMS,
    section_keys=SECTION_KEYS, leaves={**LEAVES, **TRACE_LEAVES, "trace": TRACE_LEAVES["trace"] + ("chains",)}, dims=DIMS, policies=tuple(policies.NAMES),
    event_kinds={name: code for code, name in EVENT_NAMES.items()},
    min_max=MIN_MAX, heterogeneity=DEFAULT_HETEROGENEITY,
    help_heterogeneity="time factors (1 = the reference replica)", block_ids=True, trace_axes=True,
    typed_set_values=True, capacity_latency=("ttft_p99", "slo_ttft_ms"), writes_behind=True,
    capacity_scaled=("ttft_excess_p99", "slo_ttft_ms_per_prompt_token"))


def check_stage(rd, stage, src, replicas):
    """token-model.md's "What a sweep must satisfy", for every combination a stage holds
    (a cluster of ``replicas`` replicas)."""
    v = stage.values
    if max(v["dt_ms"]) > 0:
        rd.fail(src("dt_ms"), "the batching model runs in exact event time only: dt_ms must be 0, "
                              f"got {max(v['dt_ms']):g}")
    _check_scheduler(rd, stage, src)
    _check_step_cost(rd, stage, src)
    pd_keys.check_stage(rd, stage, src, replicas)
    _check_conversations(rd, stage, src)
    synthetic_lengths = v["source"] == ("synthetic",) and "" in v["lengths_trace"]
    for p_long in v["p_long"] if synthetic_lengths else ():  # a trace's rows: _check_traces
        classes = [c for c, on in (("chat", p_long < 1), ("long", p_long > 0)) if on]
        prefix = max(v["prefix_tokens"]) if max(v["prefix_probability"]) > 0 else 0
        prompt = prefix + max(max(v[f"{c}_prompt_max"]) for c in classes)
        limit = min(v["context_limit"])
        if prompt >= limit:
            rd.fail(src("context_limit"), f"the largest prompt ({prompt} tokens: prefix plus the largest "
                    f"class prompt) must be below context_limit ({limit}) in stage {stage.name!r}")
        largest = min(max(v["context_limit"]),
                      max(prefix + max(v[f"{c}_prompt_max"]) + max(v[f"{c}_output_max"]) for c in classes))
        for name in ("kv_blocks", *(n for n in pd_keys.POOL_NAMES if n.endswith("_kv_blocks") and n in stage.given)):
            pool = min(k * b for k in v[name] for b in v["block_tokens"])
            if largest > pool:
                rd.fail(src(name), f"a request of {largest} tokens could never fit in a KV pool of "
                        f"{pool} tokens ({name} × block_tokens) in stage {stage.name!r}")


STEP_COST_KEYS = step_cost.KEYS
"""Each step cost's parameters (``step_cost`` names which one a run uses)."""


def unused_params(values, given=frozenset()) -> set:
    """The parameters no run of a stage uses (``values``: the stage's parameter -> tuple
    of values; ``given``: the names its file sets): the table of a step cost that neither
    ``step_cost`` nor a pool's names, ``step_cost`` itself when every run is linear,
    every ``[pools]`` key when no run has a prefill pool (a pool's replica key it does
    not set is ``[replica]``'s, recorded there: grid.to_dataset), and
    ``async_scheduling`` when no run has ``scheduler = "vllm"``. The Dataset leaves them
    out of its attributes, so a linear, co-located reserve stage's Dataset is what it
    was before the roofline, the pools and asynchronous scheduling existed."""
    used = set(values["step_cost"]) | pd_keys.forms(values, given)
    out = {n for cost, names in STEP_COST_KEYS.items() if cost not in used for n in names}
    out |= pd_keys.unused(values)
    if "vllm" not in values["scheduler"]:
        out.add("async_scheduling")  # the reserve scheduler's loop is its own
    return out | ({"step_cost"} if values["step_cost"] == (step_cost.DEFAULT,) else set())


def _check_step_cost(rd, stage, src):
    """A step-cost table the stage's ``step_cost`` never uses is refused (it would be
    silently ignored)."""
    v = stage.values
    for cost, names in STEP_COST_KEYS.items():
        if cost in v["step_cost"] or cost in pd_keys.forms(v, stage.given):  # (a pool's coefficients default to these)
            continue
        given = [n for n in names if n in stage.given]
        if given:
            table = TOKEN_PARAM[given[0]].path[0]
            rd.fail(src(given[0]), f'{table} is the {cost} step cost\'s, but step_cost is '
                    f'{" or ".join(repr(c) for c in v["step_cost"])} in stage {stage.name!r}: '
                    f'add step_cost = "{cost}" (or a list of costs), or leave {table} out')


def _check_conversations(rd, stage, src):
    """Conversations (a ``conversation_turns_mean`` above 1) are a synthetic session model
    with open-loop first turns: not with a trace (whose own sessions, where it has any,
    are its rows) nor with a closed-loop client (whose sends follow its slots, not the
    users' think times)."""
    v = stage.values
    if max(v["conversation_turns_mean"]) <= 1 or max(v["conversation_turns_max"]) <= 1:
        return
    if "trace" in v["source"]:
        rd.fail(src("conversation_turns_mean"), "conversation needs source = \"synthetic\" (a trace replays its "
                f"own rows) in stage {stage.name!r}")
    if max(v["max_in_flight"]) > 0:
        rd.fail(src("conversation_turns_mean"), "conversation needs an open loop (max_in_flight = 0): a "
                f"follow-up turn is sent when its user has read the response and thought, in stage {stage.name!r}")
    limit = max(v["context_limit"])  # a follow-up's prompt and output may take the whole context
    pool = min(k * b for k in v["kv_blocks"] for b in v["block_tokens"])
    if limit > pool:
        rd.fail(src("kv_blocks"), f"a conversation's turn may hold up to context_limit = {limit} tokens, more "
                f"than a KV pool of {pool} tokens (kv_blocks × block_tokens) in stage {stage.name!r}")
    if "vllm" in v["scheduler"] and False in v["chunked_prefill"] and limit > min(v["max_batched_tokens"]):
        rd.fail(src("max_batched_tokens"), f'scheduler = "vllm" without chunked prefill needs every request '
                f"within max_batched_tokens ({min(v['max_batched_tokens'])}); a conversation's turn may hold up "
                f"to context_limit = {limit} tokens in stage {stage.name!r}")


def _check_scheduler(rd, stage, src):
    """The refusals of scheduler = "vllm" (spec22b §1-3): vLLM refuses these
    configurations, so the mode does too."""
    v = stage.values
    if False in v["prefix_caching"] and "reserve" in v["scheduler"]:
        rd.fail(src("prefix_caching"), 'prefix_caching = false needs scheduler = "vllm" (the reserve '
                                       f'scheduler always caches) in stage {stage.name!r}')
    if "async_scheduling" in stage.given and True in v["async_scheduling"] and "vllm" not in v["scheduler"]:
        rd.fail(src("async_scheduling"), 'async_scheduling = true needs scheduler = "vllm" (vLLM\'s '
                                         f'asynchronous loop; the reserve scheduler has its own) in stage {stage.name!r}')
    if "vllm" not in v["scheduler"]:
        return
    if True in v["async_scheduling"] and max(max(v[k]) for k in STEP_CPU_PARAMS) > 0:
        key = next(k for k in STEP_CPU_PARAMS if max(v[k]) > 0)
        rd.fail(src(key), f"{key} with vLLM's asynchronous loop is not modelled (it overlaps the CPU work "
                f"of one step with the next step's GPU work): set async_scheduling = false in stage "
                f"{stage.name!r}")
    if min(v["max_batched_tokens"]) < max(v["max_batch"]):
        rd.fail(src("max_batched_tokens"), f'scheduler = "vllm" needs max_batched_tokens >= max_batch '
                f'(vLLM refuses max_num_batched_tokens < max_num_seqs), got {min(v["max_batched_tokens"])} '
                f'< {max(v["max_batch"])} in stage {stage.name!r}')
    if False not in v["chunked_prefill"]:
        return
    budget = min(v["max_batched_tokens"])
    if v["source"] == ("synthetic",) and "" in v["lengths_trace"]:
        for p_long in v["p_long"]:
            classes = [c for c, on in (("chat", p_long < 1), ("long", p_long > 0)) if on]
            prefix = max(v["prefix_tokens"]) if max(v["prefix_probability"]) > 0 else 0
            largest = min(max(v["context_limit"]),
                          max(prefix + max(v[f"{c}_prompt_max"]) + max(v[f"{c}_output_max"]) for c in classes))
            if largest > budget:
                rd.fail(src("max_batched_tokens"), f'scheduler = "vllm" without chunked prefill needs every '
                        f"request's prompt plus output within max_batched_tokens ({budget}); a request of "
                        f"{largest} tokens (prefix, largest class prompt and output) may be drawn in stage "
                        f"{stage.name!r}")
        return
    for P, O, line, path in _rows(rd, stage):
        over = [k for k in range(len(P)) if P[k] + O[k] > budget]
        if over:
            k = over[0]
            where = f"{path}, line {line[k]}: " if line is not None else ""
            rd.fail(src("max_batched_tokens"), f'scheduler = "vllm" without chunked prefill needs every '
                    f"request's prompt plus output within max_batched_tokens ({budget}): {where}request {k} "
                    f"has {P[k] + O[k]} tokens in stage {stage.name!r}")


def _rows(rd, stage):
    """(prompt, output, lines, path) of every trace the stage replays or draws lengths from."""
    from .. import traces
    from ..config.checks import trace_file
    v = stage.values
    out = []
    if v["source"] == ("trace",):
        for path in v["trace_path"]:
            for fmt in v["trace_format"]:
                tr = traces.load_trace(trace_file(rd.path, path), fmt)
                for b in v["block_tokens"]:
                    for hbt in v["trace_hash_block_tokens"]:
                        H = hbt or tr.hash_block_tokens or b
                        for scale in v["trace_time_scale"]:
                            for start in v["trace_start_s"]:
                                for duration in v["trace_duration_s"]:
                                    for w in v["warmup_s"]:
                                        for m in v["measure_s"]:
                                            rp = traces.replay(tr, block_tokens=b, start_s=start,
                                                               duration_s=duration, time_scale=scale,
                                                               horizon_ms=(w + m) * 1000.0,
                                                               hash_block_tokens=H)
                                            out.append((rp.prompt, rp.output, rp.line, tr.path))
    else:
        for path in v["lengths_trace"]:
            for fmt in v["lengths_format"]:
                tr = traces.load_trace(trace_file(rd.path, path), fmt)
                P, O = traces.lengths_table(tr)
                out.append((P, O, tr.line, tr.path))
    return out
