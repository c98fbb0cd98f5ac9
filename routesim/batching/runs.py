"""From flat parameter values to the batch kernel's arrays, and back.

``params_row`` turns one run's flat parameter values (the names of
token-interface.md, flattened as the config does: ``step_ms_base``,
``breaker_consecutive`` …) into a ``PARAMS`` record; ``Packed`` concatenates
workloads; ``simulate`` runs a set of runs through the engine.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from .dtypes import EVENT, METRICS, PARAMS, REPLICA, SETTING_NAMES, Admission, PairRoute, Role, Scheduler, Score, Signals
from .. import step_cost
from . import pd_keys
from .pools import roles
from .engine import run_batch
from .scheduler import Shared
from .params import LOOP_PARAMS, MODEL, TOKEN_PARAM
from .policies import NAMES, PARAMS as POLICY_PARAMS, uniforms_per_decision
from .workload import TokenWorkload

UNBOUNDED = np.iinfo(np.int64).max
"""The kernel's ``waiting_cap`` for ``inf`` (unbounded, the vllm mode's default): a count
no queue reaches. A replica's waiting queue is a list linked through the run's request
records (:mod:`.lists`), so nothing is sized by the cap and a queue never holds more than
the run's requests."""

RECORDED = tuple(p for p in POLICY_PARAMS if p.kind in (int, float) and not p.words)
"""The ``[policy]`` keys copied as they are into the PARAMS field of their name (every
number but allowance_tokens, which also takes "exact"; ``score`` is coded below)."""


def params_row(values: dict, policy: str, *, n_replicas: int, event_start: int = 0,
               event_count: int = 0, workload: int = 0) -> np.ndarray:
    """One run's PARAMS record (shape ``()``) from its flat parameter values."""
    v = values
    p = np.zeros((), PARAMS)
    p["policy"] = NAMES[policy]
    p["score"] = Score[str(v["score"]).upper()]
    p["n_replicas"] = n_replicas
    p["block_tokens"] = v["block_tokens"]
    for prm in RECORDED:  # the policies' numbers, each in the field of its name
        p[prm.name] = v[prm.name]
    for name in ("cold_factor",
                 "cold_tau_ms", "ready_delay_ms", "fail_fast_ms", "period_ms", "routers", "timeout_ms",
                 "ttft_timeout_ms",
                 "max_attempts", "backoff_ms", "retry_budget", "min_retry_concurrency",
                 "breaker_consecutive", "breaker_eject_ms", "breaker_max_ejected_fraction",
                 "admission_max_tokens"):
        p[name] = v[name]
    p["retry_avoid_previous"] = bool(v["retry_avoid_previous"])
    p["signal_mode"] = Signals[str(v["signal_mode"]).upper()]
    if p["period_ms"] == 0:  # a periodic mode with period 0 is fresh
        p["signal_mode"] = Signals.FRESH
    p["admission_mode"] = Admission[str(v["admission_mode"]).upper()]
    p["scheduler"] = Scheduler[str(v.get("scheduler", "reserve")).upper()]
    if p["scheduler"] == Scheduler.VLLM and v.get("async_scheduling", False):
        p["scheduler"] = Scheduler.VLLM_ASYNC  # vLLM's asynchronous loop (vllm_async_replica.py)
    p["prefix_caching"] = bool(v.get("prefix_caching", True))
    p["max_in_flight"] = v.get("max_in_flight", 0)  # the closed-loop client (0: open loop)
    p["client_overhead_ms"] = v.get("client_overhead_ms", 0.0)
    for name in LOOP_PARAMS:  # the engine loop's timing (0: none)
        p[name] = v.get(name, 0.0)
    _pools_row(p, v, policy)
    own = {name: v.get(name, TOKEN_PARAM[name].default) for name in pd_keys.POOL_KEYS}
    _settings_row(p, "", own)
    for role in pd_keys.ROLES:  # each pool's: its own where set, else the run's
        _settings_row(p, f"{role}_", {n: v.get(pd_keys.pool_name(role, n), x) for n, x in own.items()})
    for name, most in (("max_batch", "most_batch"), ("kv_blocks", "most_kv_blocks")):  # the kernel's scratch
        p[most] = max(p[f"{r}_{name}"] for r in pd_keys.ROLES) if p["prefill_replicas"] > 0 else p[name]
    p["warmup_ms"] = v["warmup_s"] * 1000.0
    p["horizon_ms"] = (v["warmup_s"] + v["measure_s"]) * 1000.0
    p["limit_ms"] = p["horizon_ms"] + v["drain_s"] * 1000.0
    p["quarter_ms"] = v["measure_s"] * 250.0
    p["slo_ttft_ms"] = v["slo_ttft_ms"]
    p["slo_ttft_ms_per_token"] = v.get("slo_ttft_ms_per_prompt_token", 0.0)  # (0: one target)
    p["slo_tpot_ms"] = v["slo_tpot_ms"]
    p["exact_output"] = v["allowance_tokens"] == "exact"
    p["allowance"] = 0 if p["exact_output"] else v["allowance_tokens"]
    p["event_start"] = event_start
    p["event_count"] = event_count
    p["workload"] = workload
    return p


def _settings_row(p, prefix: str, v: dict):
    """The replica settings (dtypes.SETTINGS) of PARAMS record ``p`` whose names start
    with ``prefix`` ("": the run's, "prefill_", "decode_": a pool's) from ``v``
    (pd_keys.POOL_KEYS -> value): ``waiting_cap`` inf as UNBOUNDED, the step cost as its
    code and coefficient vector."""
    p[prefix + "waiting_cap"] = UNBOUNDED if math.isinf(v["waiting_cap"]) else v["waiting_cap"]
    for name in ("max_batch", "kv_blocks", "max_batched_tokens", "step_cpu_ms", "step_cpu_ms_per_seq"):
        p[prefix + name] = v[name]
    p[prefix + "chunked_prefill"] = bool(v["chunked_prefill"])
    form = str(v["step_cost"])
    p[prefix + "step_cost"] = step_cost.BY_NAME[form].CODE
    coef = step_cost.coefficients(form, v)
    p[prefix + "cost"][:len(coef)] = coef


def _pools_row(p, v: dict, policy: str):
    """The ``[pools]`` fields of PARAMS record ``p`` (docs/model.md "Prefill/decode
    disaggregation"): a key the values lack takes its default (co-located); a pool's
    policy "same" is the run's ``policy``; the link's GB/s become bytes/ms."""
    get = {prm.name: v.get(prm.name, prm.default) for prm in pd_keys.PARAMS}
    p["prefill_replicas"] = get["prefill_replicas"]
    p["pair_route"] = PairRoute[str(get["pair_route"]).upper()]
    for name in ("prefill_policy", "decode_policy"):
        p[name] = NAMES[policy if get[name] == "same" else get[name]]
    for name in ("threshold_tokens", "transfer_token_ms", "lease_ms", "link_latency_ms", "kv_bytes_per_token"):
        p[name] = get[name]
    p["link_bandwidth"] = get["link_bandwidth_gb_s"] * 1e6


def event_rows(events) -> np.ndarray:
    """``(at_ms, kind name, replica 0-based or -1, value)`` tuples -> EVENT rows."""
    rows = np.zeros(len(events), EVENT)
    for j, (at_ms, kind, replica, value) in enumerate(events):
        rows[j] = (at_ms, int(MODEL.event_kinds[kind]), replica, value)
    return rows


@dataclass(frozen=True)
class Packed:
    """Workloads concatenated for the kernel; workload w's requests span
    ``off[w]:off[w + 1]`` and their segment offsets ``seg_off[off[w] + w : off[w + 1] + w + 1]``
    (into the flat ``seg_key``/``seg_len``)."""

    t: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    key: np.ndarray
    seg_key: np.ndarray
    seg_len: np.ndarray
    seg_off: np.ndarray
    off: np.ndarray
    next: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # conversations: next turn (-1: none), or empty
    think: np.ndarray = field(default_factory=lambda: np.zeros(0))  # ... and a follow-up's think time (ms), or empty
    shared: Shared = field(default_factory=Shared, compare=False, repr=False)
    """What the runs' schedulers take from these workloads alone, made once per workload
    (scheduler.Shared): every run of a grid simulated in this process shares it."""

    @classmethod
    def of(cls, workloads: list[TokenWorkload]) -> "Packed":
        off = np.zeros(len(workloads) + 1, np.int64)
        off[1:] = np.cumsum([len(w) for w in workloads])
        seg_parts, base = [], 0
        for w in workloads:
            seg_parts.append(w.seg_off + base)
            base += w.seg_key.size
        cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
        turns = {}
        if any(w.prev is not None and (w.prev >= 0).any() for w in workloads):
            turns = dict(next=cat([next_turns(w) for w in workloads], np.int64),
                         think=cat([w.think_ms if w.prev is not None else np.zeros(len(w)) for w in workloads],
                                   np.float64))
        return cls(**turns, t=cat([w.t_ms for w in workloads], np.float64),
                   prompt=cat([w.prompt for w in workloads], np.int64),
                   output=cat([w.output for w in workloads], np.int64),
                   key=cat([w.key for w in workloads], np.float64),
                   seg_key=cat([w.seg_key for w in workloads], np.int64),
                   seg_len=cat([w.seg_len for w in workloads], np.int64),
                   seg_off=cat(seg_parts, np.int64), off=off)


def next_turns(w: TokenWorkload) -> np.ndarray:
    """Each request's next turn in its conversation (-1: none), from ``w.prev``."""
    nxt = np.full(len(w), -1, np.int64)
    if w.prev is not None:
        k = np.flatnonzero(w.prev >= 0)
        nxt[w.prev[k]] = k
    return nxt


def router_draws(policy: str, choices: int, requests: int, max_attempts: int = 1, values: dict | None = None) -> int:
    """Uniforms a run may consume: one decision per attempt, at most; with a prefill pool
    (``values``' ``[pools]`` keys, when given), two: the prefill and the decode
    replica's, each by its pool's policy ("same": ``policy``)."""
    per = uniforms_per_decision(int(NAMES[policy]), int(choices))
    if values is not None and values.get("prefill_replicas", 0) > 0:
        per = sum(uniforms_per_decision(int(NAMES[policy if values.get(k, "same") == "same" else values[k]]),
                                        int(choices)) for k in ("prefill_policy", "decode_policy"))
    return requests * max_attempts * per


def replica_records(params: np.ndarray, factors: np.ndarray) -> np.ndarray:
    """The runs' replicas as the engine starts them: (runs, replicas) REPLICA with the
    stage's inputs set, each replica's time factor (``factors`` (runs, replicas)), its
    role (``params`` (runs,) PARAMS: ``prefill_replicas``, routesim/batching/pools.py)
    and its pool's settings (dtypes.SETTINGS: a co-located replica the run's, a prefill
    or decode replica its pool's ``prefill_<name>`` or ``decode_<name>``)."""
    rep = np.zeros(factors.shape, REPLICA)
    rep["factor"] = factors
    rep["role"] = roles(params["prefill_replicas"], factors.shape[1])
    for role, prefix in ((Role.COLOCATED, ""), (Role.PREFILL, "prefill_"), (Role.DECODE, "decode_")):
        at = rep["role"] == role
        for name in SETTING_NAMES:
            rep[name][at] = np.broadcast_to(params[prefix + name][:, None], rep[name].shape)[at]
    return rep


def simulate(params: np.ndarray, factors: np.ndarray, events: np.ndarray, packed: Packed,
             ru: np.ndarray, ru_off: np.ndarray):
    """Run every run: params (runs,) PARAMS, factors (runs, replicas) time factors.
    Returns (metrics (runs,) METRICS, replicas (runs, replicas) REPLICA)."""
    runs = params.shape[0]
    rep = replica_records(params, factors)
    metrics = np.zeros(runs, METRICS)
    run_batch(params, rep, events, packed.t, packed.prompt, packed.output, packed.key,
              packed.seg_key, packed.seg_len, packed.seg_off, packed.off, ru, ru_off, metrics, packed.next,
              packed.think, packed.shared)
    return metrics, rep


def conversation_params(values: dict):
    """The session model's parameters (docs/model.md "Conversations") from flat values."""
    from .workload import ConversationParams
    return ConversationParams(turns_mean=values["conversation_turns_mean"],
                              turns_max=int(values["conversation_turns_max"]),
                              think_ms=values["conversation_think_s"] * 1000.0,
                              text_median=values["conversation_text_median"],
                              text_sigma=values["conversation_text_sigma"])


def workload_params(values: dict):
    """§1.1's parameters from flat parameter values."""
    from .workload import Lengths, TokenWorkloadParams

    def lengths(c):
        return Lengths(*(values[f"{c}_{part}_{stat}"] for part in ("prompt", "output")
                         for stat in ("median", "sigma", "min", "max")))

    return TokenWorkloadParams(
        p_long=values["p_long"], chat=lengths("chat"), long=lengths("long"),
        prefix_probability=values["prefix_probability"], prefix_groups=int(values["prefix_groups"]),
        prefix_zipf=values["prefix_zipf"], prefix_tokens=int(values["prefix_tokens"]),
        context_limit=int(values["context_limit"]), block_tokens=int(values["block_tokens"]))
