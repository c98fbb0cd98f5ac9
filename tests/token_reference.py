"""Naive, plain-Python reference simulator of the batching (token-level) model.

This is the literal reading of ``/work/shared/design/token-model.md`` (sections 1-7)
written for obviousness, not speed: one run at a time, one sequence at a time, every
iteration visited, every physical KV block of every replica kept as an explicit record
(state free / referenced / cached, refcount, id, position, last_use).  The compiled
engine (routesim/batching) is tested against this file run by run, so the two must stay
independent: nothing here imports ``routesim`` (but for the step costs' default constants,
``step_cost_defaults``) and nothing here was written by looking at the engine.

Interface
---------
``defaults()``                      a new dict of every flat parameter with the page's default
``generate_workload(seed, rate_rps, params, events, lengths=None) -> Workload``  (§1.1, §1.3)
``simulate(workload, params, factors, events, policy, seed, check=False) -> dict`` (§2-§7)

``events`` is a list of ``(at_ms, kind, replica, value)`` sorted by time (ties in listed
order); kind in rate_multiplier / slowdown / fail / fail_fast / recover; replica is 0-based
(-1 for rate_multiplier).  ``factors`` gives one time factor per replica.

scheduler = "vllm" (issue 22): params ``scheduler`` ("reserve", the default: the page,
unchanged) or "vllm" (vLLM V1 0.30.0's scheduler and KV-cache manager, the ``_Sim.v_*``
methods, from conformance/VLLM-SCHEDULER.md and vLLM's source), and ``prefix_caching``
(default True; False only with "vllm").  Its decisions are conformance/VLLM-MODE.md 1-24 and
docs/model.md "scheduler = \"vllm\"".  ``async_scheduling`` (issue 40; default False, only with
"vllm"): vLLM's default loop, EngineCore.step_with_batch_queue with a batch queue of 2 and the
AsyncScheduler (VLLM-SCHEDULER.md §9, VLLM-MODE.md 25-35).  ``simulate(..., log_steps=True)``
(one replica, vllm mode) adds ``step_log``: vLLM's recorded fields per step and per request
(asynchronous: per batch, with ``S``, the time it was scheduled), which
tests/test_vllm_conformance.py compares with vLLM's recordings exactly.

Prefill/decode disaggregation (issue 42): params ``prefill_replicas`` and
``decode_replicas`` (0: co-located, the default, unchanged), ``pair_route``,
``prefill_policy``, ``decode_policy``, ``threshold_tokens``, ``transfer_token_ms``,
``link_latency_ms``, ``link_bandwidth_gb_s``, ``kv_bytes_per_token``, ``lease_ms``:
docs/model.md "Prefill/decode disaggregation", read as written there (``_Sim.pd_*`` and
``Links``), reserve mode only, crashes, deadlines and retries included.  With pools,
``simulate`` adds the TTFT parts, ``transfer_count``, ``transfer_bytes``,
``link_utilization`` and ``disaggregated_share``, and each record's way (``pd``).  Each pool's
replica settings (``pool_settings``): a replica of the prefill (decode) pool takes
``prefill_<key>`` (``decode_<key>``) for each key of ``SETTING_KEYS`` the params hold,
else the run's ``<key>``: its KV pool, batch limits, chunking, step cost and its
coefficients, the step's CPU time; every reading of those below is the replica's own.  The
closed-loop client, the front door, the ingress and fast failures apply with pools as
the page's "The closed-loop client with pools", "The front door with pools" and "The
ingress and fast failures with pools" say.

Decisions (where token-model.md is silent; the lead copies them into docs/model.md)
-----------------------------------------------------------------------------------
Given by the lead:
 (a) period_ms = 0 with a periodic mode means the view is fresh.
 (b) least_queue is an alias of least_requests.
 (c) A request's arrival time counts as its first routing time: the first attempt's
     timeout deadline is a_r + timeout_ms even when the front door held it (see D19b).
 (d) fail sets a replica unhealthy; recover on an up replica that is not failing fast
     does nothing.
 (e) (issue 19, replaces "only times <= H are processed") The run goes on past the horizon
     up to its stop (§7 "Drain", /work/spec19.md 1): limit = H + drain_s*1000; every time
     T <= limit is processed as in §4; after processing a time T >= H with no cohort request
     in the system, stop = T; when the next time to process is > H and no cohort request
     is in the system, stop = H (nothing after H is processed); else the run ends at the
     limit (stop = limit; also when nothing more ever happens).  drain_s = 0 is the old run.
 (f) Cohort requests still in the system at the stop are unfinished.
Workload
 D1. Uniforms are drawn as rng.random((1024, 8)) blocks; row k is the same for any block
     size.  Generation stops at the first t_k >= horizon.  Rate profile as model.md:
     lambda_j = (rate_rps/1000)*multiplier, Lambda(a_j) = Lambda(a_{j-1}) +
     lambda_{j-1}*(a_j - a_{j-1}), t = a_j + (S - Lambda(a_j))/lambda_j in the last segment j
     with Lambda(a_j) <= S.  Scalar math uses Python's ``math``.
 D2. rint is round-half-even; the Zipf sums are left-to-right sums of (j+1)**(-s).
     §1.3: row j = floor(U[k,7]*n_rows); a prefixed request with P <= L has no group.
Replica (§2)
 D3. A free block is taken from a stack of free blocks (which one is unobservable).  Admission
     references the head's resident blocks first (so they cannot be evicted), then takes
     the others position by position.  An id repeated inside one prompt (traces only) is
     one block referenced twice.
 D4. The waiting cap only gates routing.  Preempted sequences return to the front of the
     waiting queue even beyond waiting_cap (so len(waiting) may exceed it; at most
     waiting_cap never-admitted attempts wait).  Attempts black-holed by a fail_fast
     replica are not in its waiting queue (they count in o_i and tau_i only, not in the cap).
 D5. Q is accumulated exactly (sum x*(2m+2c+x), halved); d = f*((((c0 + c_pf*U) +
     c_attn*Q) + c_dec*n) + c_kv*K), f = (factor*slowdown)*cold,
     cold = 1 + (cold_factor-1)*exp(-(T-t_up)/cold_tau_ms) (1.0 if never recovered).
     A slowdown event sets the replica's scenario factor (absolute, as in model.md).
 D5b. (issue 25) step_cost = "roofline": d = f*(base + max(weights + per_kv_token*(K + R),
     per_token*(U + n) + per_token_pair*(Q + K))), R = sum over the chunks of the KV each
     attends to (m + c + x; vllm mode: c + x); an iteration with no sequence lasts
     f*(base + weights).  (_Sim.duration; docs/model.md "The step cost".)
 D5c. (issue 43) step_cost = "overlap": memory and compute as D5b from the overlap_ms table,
     d = f*((base + max(memory, compute)) + kappa*min(memory, compute)); an iteration with no
     sequence lasts f*(base + weights).  (docs/model.md "The step cost".)
 D5d. (issue 41) step_cost = "mixed": memory and compute as D5b from the mixed_ms table,
     d = f*((base + max(memory, compute)) + per_mixed_kv_token*min(U, 1)*K): a step with
     prefill tokens pays its decoders' KV read again.  (docs/model.md "The step cost".)
 D6. A sequence's first-token time is kept across preemption.  At an iteration end the
     emitting sequences are visited in running-list (admission) order.
 D7. An iteration with no sequence (every decoding one preempted) still lasts f*c0.
 D8. A running sequence is decoding when c_s = u_s (then g_s >= 1).
Routing (§3, §5)
 D9. Publication times are ((i+1)*period_ms)/N + k*period_ms (float, that order).  A
     fail_fast replica publishes its true o_i and tau_i (black-holed attempts included).
 D10. periodic_local: additions are per router and reset (for every router) by the
     replica's publication; resident ids as seen = published ids UNION routed ids
     (prefix_affinity counts that union); referenced_i and kappa_i get no local additions.
 D11. Hash tie rule with the 0-based index i: frac(h + 0.6180339887498949*(i+1)),
     frac(x) = x - floor(x), the sum evaluated first.
 D12. power_of_d draws `choices` uniforms per decision even when |E| < choices or it
     sheds; random and rate_weighted draw one; a front-door stop draws none.
 D13. Slow start: t_e = 0 for replicas up from the start (so the ramp applies during
     [0, slow_start_ms) too, equally to all), t_e = t_up + ready_delay_ms after a recovery
     from down; the ramped score replaces the score before the tie rule.
 D14. Round robin: E[cursor mod |E|] over the (possibly avoid-previous-reduced) eligible
     set, one cursor per router, advanced on every placement (first attempts and retries).
 D15. retry_avoid_previous removes from E the replicas the request failed on (crashes
     included) when another eligible one remains; for every policy, before the shed test.
Failures, retries, containment (§6)
 D16. A completion at T beats a timeout at T (phase 1 first).  A fast failure and a
     timeout of one attempt at one T are one failure.
 D17. Budget: the retry goes when retries_in_flight < max(min_retry_concurrency,
     retry_budget*attempts_in_flight), counted per router after the failing attempts
     left "in flight" and including retries scheduled earlier in the same phase 3;
     retry_budget = inf switches the test off.  A retry is "in flight" from the failure
     that schedules it until its attempt ends.
 D18. Breaker per (router, replica).  Failures observed while ejected still count but
     the count is reset at re-admission.  Ejections are counted per router for the
     max(1, floor(max_ejected_fraction*N)) limit.  Ejection lasts eject_ms*times (this
     one included).
 D19. Front door: "above" is strict (tau_i > max_tokens).  In phase 6 the FIFOs of all
     routers are tried in request order of their heads; a router whose head fails the
     test is done for that time.  A new request takes the test even if its router's
     FIFO is non-empty (it would fail it).
 D19b. (from (c)) A request still at the front door at a_r + timeout_ms leaves it and
     fails there as its first attempt (phase 3, in request order; no replica, so no
     breaker count and nothing to avoid); the retry decision, budget and backoff are
     those of attempt 1, and its retry (attempt 2) skips the front door.
 D20. Events with replica -1 are only rate_multiplier (in simulate they only mark a
     time at which things happen).  recover on a down replica: t_up = T, ready at
     t_up + ready_delay_ms (a time at which things happen).  A crash abandons the
     replica's iteration and frees every block.
 D21. `attempts` counts placements on a replica (a shed, rejected or front-door-timed-out
     routing is not one); `retries` counts placements with attempt number >= 2;
     `assigned` counts placements by placement time.  `placement_occupancy` averages,
     over those placements, the chosen replica's referenced blocks / kv_blocks just
     before it, and `placement_occupancy_high` is the share of them where that was
     above 0.9; `replica_max_outstanding` is the largest len(waiting) + len(running) +
     len(pending_ff) just after one of them (0 if none); `replica_ttft_p50/p99` are the
     percentiles of the completed cohort's TTFT grouped by the replica it completed on.
Metrics (§7)
 D22. batch_mean counts every iteration started in [W, H), including ones abandoned by a
     crash or ending after H.  prefix_hit_rate, batch_mean, attainment, e2e_mean and the
     percentiles are NaN when their sets are empty; goodput/throughput are 0 then.
     scheduler = "vllm": prefix_hit_rate is vLLM's own metric (PrefixCacheStats): hits
     over queries (P + g) of admissions of attempts never preempted; a preempted
     attempt's re-admissions are preempted_hit_rate; without prefix caching nothing is
     queried (both NaN).  waiting_cap may be inf (unbounded; the pipeline's default in
     the vllm mode).
 D31. (issue 40) The engine loop's CPU time of a step: an iteration (either scheduler;
     the synchronous vllm loop) lasts d + (step_cpu_ms + step_cpu_ms_per_seq*members),
     d the step cost (D5-D5c, scaled by f), members the sequences it schedules (n +
     prefill chunks); the CPU part is not scaled by f.  Evaluated in that order; with
     both 0 the duration is d exactly.
 D32. (issue 40) The way of an attempt to its replica's scheduler (docs/model.md "The
     engine loop's timing"): an attempt placed at T on a replica that is not failing fast,
     with ingress = ingress_ms + ingress_ms_per_token*P > 0 (that order), is in transit
     until T + ingress: it counts in o_i, tau_i (as a black-holed one, D4, D28) and
     replica_max_outstanding, and against waiting_cap (unlike a black-holed one: so that at
     most waiting_cap never-admitted attempts wait once it joins); a crash or a deadline
     fails it there.  In phase 7 of its join time, before any iteration starts, it joins
     its replica's waiting queue at the back, the joins of one time by request index.
     Either scheduler, either vllm loop (each sees it at its next scheduling).  With both
     0 nothing changes.
 D23. kv_occupancy integrates, between consecutive times at which anything happens, the
     state left after all phases at the earlier time.
 D24. Percentile rank r = ceil((p/100)*n), value sorted[r-1].
Issue 19 (token-model.md §2 "Computed blocks", §3 "exact", §6 ttft_timeout_ms, §7 "Drain",
"Steady state", itl_*; decisions of /work/spec19.md, and where both are silent:)
 D25. "In the system" = arrived with no final outcome (front door, backoff, waiting,
     running, pending a fast failure).  Window metrics keep windows ending at H;
     replica_max_outstanding keeps its placements in [W, H) (as assigned); replica_ttft_*
     are cohort metrics (completions up to the stop).  wasted_tokens adds, at each failure
     processed (so at times <= stop), the tokens the attempt emitted in (W, H].
 D26. Computed flags: a block taken (at admission or growth) starts uncomputed; a block
     referenced at admission keeps its flag.  At an iteration end, right after c_s += x_s
     and before any token is emitted, each sequence that computed a chunk marks its id'd
     block j computed when m_s <= j*b and m_s + c_s >= (j+1)*b (check=True verifies the
     rule on every running sequence).  Every release (preemption, cancellation, fast
     failure and COMPLETION alike) applies one rule to an id'd block whose refcount drops
     to 0: computed -> cached, uncomputed -> free (no longer resident).  A completing
     sequence has computed every block it did not count as a hit, but a block it HIT while
     uncomputed (its reserver still computing it, or cancelled before) may still be
     uncomputed at its completion: at refcount 0 it becomes free, not cached.  A crash
     clears every flag.  The prefix-closure invariant is checked only on replicas that have
     not freed an uncomputed block since their last crash (§2 says closure may break).
 D27. First-token deadline = routing time + ttft_timeout_ms (a first attempt: a_r), only
     while the attempt's first_token is unset (kept across preemption).  At one T, one
     failure per attempt: fast failure, else whole-attempt timeout, else first-token
     timeout.  A first attempt at the front door fails there at a_r + min(timeout_ms,
     ttft_timeout_ms) (as a timeout when timeout_ms <= ttft_timeout_ms).
 D28. allowance_tokens = "exact": tau_i uses P_s + O_s per outstanding attempt (waiting,
     running, pending a fast failure); the tokens score and periodic_local's additions
     use P_r + O_r; everything else (front door) reads tau_i as seen.
 D29. ITL: every attempt placed on a replica keeps the times of the tokens it emitted (a
     list kept across preemption; a retry is a new attempt, a new list); a gap
     t_j - t_{j-1} (j >= 2) is a sample when W < t_j <= H.  itl_max = the largest.
 D30. backlog_growth = the in-system count (every request) after processing H minus the
     same after processing W (each: after every phase at that time, or, when nothing
     happens exactly then, the state left by the last time before it).  kv_occupancy_first/_last
     integrate like kv_occupancy (D23) over [W, W + q] and [H - q, H], q = measure_s*250,
     each / q / kv_blocks, mean over replicas.  attainment_first/_last = the attainment
     (within both SLOs) of the cohort requests whose intended arrival is in [W, W + q)
     and [H - q, H); NaN when none arrived there.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

RESPONSE_ID = 2**50   # a conversation's response id: block j of request q's sequence past its prompt's ids, 2^50 + q·2^16 + j

INF = math.inf
GOLDEN = 0.6180339887498949

POLICIES = ("round_robin", "random", "least_requests", "least_queue", "least_tokens", "least_kv",
            "least_cost", "power_of_d", "prefix_affinity", "rate_weighted", "session_affinity")
SLOW_START_POLICIES = ("least_requests", "least_tokens", "least_kv", "least_cost", "power_of_d")
EVENT_KINDS = ("rate_multiplier", "slowdown", "fail", "fail_fast", "recover")


def step_cost_defaults() -> dict:
    """Every step-cost parameter (``step_cost`` and each form's table) with its default,
    from routesim's step-cost registry (routesim/step_cost/): the reference's one import
    of routesim, for constants only."""
    from routesim import step_cost
    return {p.name: p.default for p in step_cost.PARAMS}


def defaults() -> dict:
    """A new dict of every flat parameter, with token-model.md's defaults."""
    return dict(
        # replica (§2)
        waiting_cap=512, max_batch=256, kv_blocks=16384, block_tokens=16,
        max_batched_tokens=8192, chunked_prefill=True,
        # step_cost (issue 25): "linear" (the page's step_ms), "roofline" (docs/model.md
        # "The step cost": base + max(memory, compute), the roofline_ms table); the forms'
        # constants are routesim's registry's (the one place they are written; the
        # formulas below are re-derived from the page, not imported)
        **step_cost_defaults(),
        cold_factor=1.0, cold_tau_ms=2000.0, ready_delay_ms=0.0, fail_fast_ms=2.0,
        # issue 22: "reserve" = token-model.md §2 (the page); "vllm" = vLLM V1 0.30.0's
        # scheduler and KV-cache manager (conformance/VLLM-SCHEDULER.md, conformance/VLLM-MODE.md)
        scheduler="reserve", prefix_caching=True,
        # issue 40: vLLM's default loop (EngineCore.step_with_batch_queue + AsyncScheduler,
        # VLLM-SCHEDULER.md §9, VLLM-MODE.md 25-35); only with scheduler = "vllm"
        async_scheduling=False,
        # simulation (§7)
        warmup_s=10.0, measure_s=50.0, drain_s=600.0, slo_ttft_ms=1000.0, slo_ttft_ms_per_prompt_token=0.0, slo_tpot_ms=50.0,
        # workload (§1.1)
        p_long=0.02,
        chat_prompt_median=1000, chat_prompt_sigma=0.9, chat_prompt_min=16, chat_prompt_max=16384,
        chat_output_median=128, chat_output_sigma=1.0, chat_output_min=1, chat_output_max=2048,
        long_prompt_median=12000, long_prompt_sigma=0.5, long_prompt_min=2048, long_prompt_max=30000,
        long_output_median=2000, long_output_sigma=0.6, long_output_min=256, long_output_max=32768,
        prefix_probability=0.6, prefix_groups=32, prefix_zipf=1.1, prefix_tokens=1536,
        context_limit=32768,
        # policy (§5)
        choices=2, score="tokens", allowance_tokens=256,   # an int >= 0 or "exact"
        tie_tolerance=0.0, prefill_weight=1.0,
        balance_abs=64, balance_rel=1.5, cache_threshold=0.3, window_ms=1000.0,
        affinity_balance_abs=64, affinity_balance_rel=1.5,
        slow_start_ms=0.0, slow_start_aggression=1.0, slow_start_min_weight=0.1,
        # signals (§3)
        signal_mode="fresh", period_ms=50.0, routers=1,
        # client and router containment (§6)
        timeout_ms=INF, ttft_timeout_ms=INF, max_attempts=1, backoff_ms=20.0, retry_avoid_previous=True,
        retry_budget=INF, min_retry_concurrency=3,
        breaker_consecutive=0, breaker_eject_ms=1000.0, breaker_max_ejected_fraction=0.1,
        admission_max_tokens=INF, admission_mode="reject",
        start_down=[],
        # the closed-loop client (issue 25; docs/model.md "Closed-loop clients")
        max_in_flight=0, client_overhead_ms=0.0,
        # prefill/decode disaggregation (issue 42; docs/model.md "Prefill/decode disaggregation")
        **pd_defaults(),
        # the engine loop's timing (issue 40; docs/model.md "The engine loop's timing")
        step_cpu_ms=0.0, step_cpu_ms_per_seq=0.0,
        ingress_ms=0.0, ingress_ms_per_token=0.0,
    )


def pd_defaults() -> dict:
    """``[pools]`` with docs/model.md's defaults: no prefill pool; Llama-3.1-8B's KV bytes
    per token in 16 bits (2 K/V · 32 layers · 8 KV heads · 128 · 2 bytes); the transfer-
    aware rule's time per token is the linear step cost's per prefill token."""
    return dict(prefill_replicas=0, decode_replicas=0, pair_route="independent",
                prefill_policy="same", decode_policy="same", threshold_tokens=0,
                transfer_token_ms=step_cost_defaults()["step_ms_per_prefill_token"], lease_ms=30000.0,
                link_latency_ms=1.0, link_bandwidth_gb_s=50.0, kv_bytes_per_token=2 * 32 * 8 * 128 * 2)


# =====================================================================================
# §1 Workload
# =====================================================================================

@dataclass
class Workload:
    t: list[float]            # arrival ms, sorted
    prompt: list[int]         # P
    output: list[int]         # O
    key: list[float]          # h
    blocks: list[list[int]]   # block ids, floor(P/b) per request
    # extras for tests and debugging (not part of the contract)
    group: list = field(default_factory=list)      # prefix group or None
    long: list = field(default_factory=list)       # True for the long class
    row: list = field(default_factory=list)        # §1.3 trace row j, else None
    # conversations (docs/model.md "Conversations"): request k's previous turn (None: a
    # first turn, whose t is its arrival) and a follow-up's think time (ms) after that
    # turn completes (its t is unused: inf)
    prev: list = None
    think: list = None
    # vllm mode's decode side (issue 42 item 5, VLLM-MODE.md 36-41): request k's read of
    # its prompt's KV from a prefill instance, (latency ms, ms per token read), or None
    # (a local request); one replica, synchronous loop
    remote: list = None


def horizon_ms(params: dict) -> tuple[float, float]:
    """(warm-up W, horizon H) in ms."""
    W = params["warmup_s"] * 1000.0
    H = W + params["measure_s"] * 1000.0
    return W, H


def _rate_segments(rate_rps: float, events: list) -> list[tuple[float, float, float]]:
    """Segments (a_j, lambda_j, Lambda(a_j)) of the piecewise-constant rate profile."""
    base = rate_rps / 1000.0
    segments = [(0.0, base * 1.0, 0.0)]
    for at_ms, kind, _replica, value in events:
        if kind != "rate_multiplier":
            continue
        a_prev, lam_prev, Lam_prev = segments[-1]
        Lam_here = Lam_prev + lam_prev * (at_ms - a_prev)
        segments.append((float(at_ms), base * float(value), Lam_here))
    return segments


def _inverse_Lambda(S: float, segments) -> float:
    j = 0
    for idx, (_a, _lam, Lam_a) in enumerate(segments):
        if Lam_a <= S:
            j = idx
    a_j, lam_j, Lam_a_j = segments[j]
    if lam_j == 0.0:
        return INF
    return a_j + (S - Lam_a_j) / lam_j


def _lognormal_tokens(median, sigma, lo, hi, z) -> int:
    """clip(rint(median * exp(sigma * z)), lo, hi)"""
    v = round(median * math.exp(sigma * z))   # round half to even, like rint
    return int(min(max(v, lo), hi))


def generate_workload(seed: int, rate_rps: float, params: dict, events: list,
                      lengths: tuple | None = None) -> Workload:
    """§1.1 synthetic workload (with §1.3 empirical lengths when ``lengths=(P_list, O_list)``)."""
    p = params
    _W, H = horizon_ms(p)
    b = int(p["block_tokens"])
    L = int(p["prefix_tokens"])
    K = int(p["prefix_groups"])
    s = float(p["prefix_zipf"])
    weights = [(j + 1) ** (-s) for j in range(K)]
    cumulative = []
    acc = 0.0
    for w in weights:               # left-to-right sums
        acc = acc + w
        cumulative.append(acc)
    total_w = acc
    segments = _rate_segments(rate_rps, events)
    rng = np.random.Generator(np.random.PCG64(seed))

    wl = Workload(t=[], prompt=[], output=[], key=[], blocks=[])
    S = 0.0
    k = 0
    U = None
    row_in_block = 1024
    while True:
        if row_in_block == 1024:
            U = rng.random((1024, 8))
            row_in_block = 0
        u = [float(x) for x in U[row_in_block]]
        row_in_block += 1

        S = S + (-math.log1p(-u[0]))
        t = _inverse_Lambda(S, segments)
        if t >= H:
            break

        is_long = u[1] < p["p_long"]
        cls = "long" if is_long else "chat"
        R = math.sqrt(-2.0 * math.log1p(-u[2]))
        z1 = R * math.cos(2.0 * math.pi * u[3])
        z2 = R * math.sin(2.0 * math.pi * u[3])
        prefixed = u[4] < p["prefix_probability"]
        g = None
        if prefixed:
            target = u[5] * total_w
            g = 0
            while cumulative[g] < target and g < K - 1:
                g += 1
        row = None
        if lengths is None:
            S_own = _lognormal_tokens(p[f"{cls}_prompt_median"], p[f"{cls}_prompt_sigma"],
                                      p[f"{cls}_prompt_min"], p[f"{cls}_prompt_max"], z1)
            O = _lognormal_tokens(p[f"{cls}_output_median"], p[f"{cls}_output_sigma"],
                                  p[f"{cls}_output_min"], p[f"{cls}_output_max"], z2)
            P = L + S_own if prefixed else S_own
            O = min(O, int(p["context_limit"]) - P)
        else:
            P_list, O_list = lengths
            n_rows = len(P_list)
            row = int(math.floor(u[7] * n_rows))
            P = int(P_list[row])
            O = int(O_list[row])
            if not (prefixed and P > L):
                g = None
        ids = []
        for j in range(P // b):
            if g is not None and j < L // b:
                ids.append(g * 2**20 + j)
            else:
                ids.append(2**40 + k * 2**16 + j)
        wl.t.append(t)
        wl.prompt.append(P)
        wl.output.append(O)
        wl.key.append(u[6])
        wl.blocks.append(ids)
        wl.group.append(g)
        wl.long.append(is_long)
        wl.row.append(row)
        k += 1
    return wl


# =====================================================================================
# §2 Replica state: blocks, sequences (attempts), replicas
# =====================================================================================

FREE, REFERENCED, CACHED = "free", "referenced", "cached"


class Block:
    """One physical KV block."""

    def __init__(self, index: int):
        self.index = index          # physical position in the pool
        self.state = FREE
        self.refcount = 0
        self.id = None              # block id (None: anonymous or free)
        self.position = -1          # j, its position in the prompt that made it resident
        self.prev_id = None         # beta_{j-1} of that prompt (for the prefix-closure check)
        self.last_use = 0.0
        self.epoch = 0              # times it became cached (validates cached_heap entries)
        self.computed = False       # §2 "Computed blocks": its tokens' KV has been computed

    def __repr__(self):
        return (f"Block({self.index},{self.state},rc={self.refcount},id={self.id},"
                f"j={self.position},lu={self.last_use},computed={self.computed})")


class VBlock:
    """One physical KV block of a replica with scheduler = "vllm" (vLLM's KVCacheBlock):
    its reference count and its hash (a key, see _Sim.v_intern), None when it has none."""

    __slots__ = ("index", "ref", "hash")

    def __init__(self, index: int):
        self.index = index
        self.ref = 0
        self.hash = None

    def __repr__(self):
        return f"VBlock({self.index},ref={self.ref},hash={self.hash})"


class Attempt:
    """One routing of a request to a replica; on a working replica it is a sequence."""

    def __init__(self, req, number, replica, router, T, deadline, ttft_deadline=INF):
        self.req = req
        self.number = number        # 1-based attempt number a
        self.replica = replica      # None: a first attempt that timed out at the front door
        self.router = router
        self.routed_at = T
        self.deadline = deadline            # whole-attempt timeout (timeout_ms)
        self.ttft_deadline = ttft_deadline  # first-token timeout (ttft_timeout_ms)
        self.ff_time = None         # time of its fast failure (black hole), else None
        self.join_at = None         # issue 40 (D32): in transit until it joins the waiting queue then
        self.where = "waiting"      # waiting | running | ff | transit | done
        # sequence state (§2)
        self.P = req.P
        self.O = req.O
        self.ids = req.ids
        self.g = 0                  # tokens generated, kept across preemption
        self.kv = 0                 # tokens whose KV is in the cache
        self.u = 0                  # tokens to compute (set at admission)
        self.c = 0                  # tokens computed so far
        self.m = 0                  # cached prefix at admission
        self.blocks: list[Block] = []   # block j of the sequence at index j
        self.first_token = None
        self.admit_order = -1
        self.window_tokens = 0      # tokens emitted in (W, H]
        self.token_times: list[float] = []   # the time of every token it emitted, in order (ITL)
        # scheduler = "vllm": vLLM's Request state
        self.computed = 0           # num_computed_tokens
        self.ncached = 0            # num_cached_block: leading blocks that have their hash
        self.l_adm = 0              # num_tokens at its current admission (P + g)
        self.hits = []              # hit tokens of each admission
        self.preemptions = 0        # num_preemptions
        self.v_prefilling = False   # in vLLM's _inflight_prefills (VLLM-MODE.md 38)
        # the decode side (VLLM-MODE.md 36-41): its prompt still to be read (the
        # request's do_remote_prefill), and its read: [admitted, local hit, tokens,
        # end, reported, promoted] (ms, tokens)
        self.v_remote = req.remote is not None
        self.read = None
        # async_scheduling: vLLM's num_output_placeholders, num_in_flight_tokens and
        # num_stale_output_tokens (VLLM-MODE.md 27-29)
        self.placeholders = 0
        self.inflight = 0
        self.stale = 0
        # issue 42, prefill/decode disaggregation: None (co-located), or where it is on its
        # way: prefill | handoff | receiving | transferred | decode
        self.pd_stage = None
        self.pd = None              # its way's times (docs/model.md: the TTFT parts)
        self.decode_replica = None
        self.held_on = None         # the prefill replica holding its blocks, after its prefill
        self.held_blocks: list[Block] = []
        self.lease_until = None     # ... until then, its decode side lost

    def decoding(self) -> bool:
        return self.c >= self.u


SETTING_KEYS = ("waiting_cap", "max_batch", "kv_blocks", "max_batched_tokens", "chunked_prefill",
                *step_cost_defaults(), "step_cpu_ms", "step_cpu_ms_per_seq")
"""The replica settings a pool may set for itself (issue 42; docs/model.md "Prefill/decode
disaggregation"): the step cost and its forms' coefficients among them."""


def pool_settings(p: dict, role: str) -> dict:
    """A replica's settings (SETTING_KEYS) in pool ``role`` ("colocated", "prefill",
    "decode"): the pool's own ``<role>_<key>`` where the params hold it, else the run's."""
    return {k: p.get(f"{role}_{k}", p[k]) if role != "colocated" else p[k] for k in SETTING_KEYS}


class Replica:
    def __init__(self, index, factor, settings):
        self.index = index
        self.factor = float(factor)
        self.s = settings           # its pool's settings (pool_settings)
        kv_blocks = self.kv_blocks = int(settings["kv_blocks"])
        self.slowdown = 1.0
        self.down = False
        self.fail_fast = False
        self.t_up = None            # time of its last recovery from down (cold start)
        self.ready_at = 0.0         # eligible from this time
        self.t_e = 0.0              # slow start: last became healthy and ready
        self.waiting: list[Attempt] = []
        self.running: list[Attempt] = []
        self.pending_ff: list[Attempt] = []
        self.transit: list[Attempt] = []     # issue 40 (D32): routed here, not yet at its scheduler
        self.receiving: list[Attempt] = []   # issue 42: allocated, their KV in transfer
        self.blocks = [Block(x) for x in range(kv_blocks)]
        self.tally = {FREE: kv_blocks, REFERENCED: 0, CACHED: 0}
        self.free_stack = list(range(kv_blocks - 1, -1, -1))   # pop() takes the top
        # cached blocks by eviction order (last_use, -position, id); stale entries are skipped
        self.cached_heap: list = []
        self.resident: dict[int, Block] = {}    # id -> block (referenced or cached)
        self.iteration = None       # the iteration in progress (dict) or None
        self.admissions = 0
        # an uncomputed id'd block was freed since the last crash: the resident ids may
        # no longer be prefix-closed (token-model.md §2, "Computed blocks"), so the
        # prefix-closure invariant is not checked on this replica
        self.freed_uncomputed = False

    def init_vllm(self, kv_blocks):
        """scheduler = "vllm": vLLM's BlockPool (BP:143-202) with kv_blocks usable blocks
        (the null block is vLLM's own, not routesim's): every block free, the free queue in
        block order; ``resident`` is cached_block_hash_to_block (hash -> {index: block},
        in insertion order), so the router's "resident ids" are the cached hashes."""
        self.vblocks = [VBlock(x) for x in range(kv_blocks)]
        self.fq = OrderedDict((x, None) for x in range(kv_blocks))   # head first
        self.resident = {}
        self.tally = {FREE: kv_blocks, REFERENCED: 0, CACHED: 0}
        self.deferred: list = []    # attempts cancelled during the step in progress
        self.evictions = 0
        # async_scheduling (VLLM-MODE.md 25-35): the engine's batch queue, oldest first
        # (each a dict: S, start, end, sched, sampled, log), when the GPU is free, and
        # vLLM's finished_req_ids being non-empty (a request finished or was aborted since
        # the last schedule(): Scheduler.has_requests() is then true)
        self.batches: list = []
        self.gpu_free = 0.0
        self.finished_since_schedule = False
        # the decode side (VLLM-MODE.md 37): vLLM's skipped_waiting, the attempts in
        # WAITING_FOR_REMOTE_KVS, in the order the waiting loop meets them
        self.skipped: list = []

    def set_state(self, blk: Block, state: str):
        """Every change of a block's state goes through here (keeps the tally and the
        stack of free blocks; check=True compares them with a scan of every block)."""
        if blk.state == state:
            return
        self.tally[blk.state] -= 1
        self.tally[state] += 1
        if state == FREE:
            self.free_stack.append(blk.index)
        blk.state = state
        if state == CACHED:
            blk.epoch += 1
            heapq.heappush(self.cached_heap,
                           ((blk.last_use, -blk.position, blk.id), blk.epoch, blk.index))

    def count(self, state) -> int:
        """Blocks in a state: free / referenced / cached."""
        return self.tally[state]

    def scan_count(self, state) -> int:
        return sum(1 for blk in self.blocks if blk.state == state)


class Request:
    def __init__(self, index, t, P, O, h, ids, router):
        self.index = index
        self.intended = t           # the arrival process's time (the cohort's)
        self.t = t                  # its send (= intended in an open loop; set when sent)
        self.left_at = None         # the time of its final outcome
        self.P = P
        self.O = O
        self.h = h
        self.ids = ids
        self.router = router
        self.outcome = None         # completed | failed | rejected | shed | (None: unfinished)
        self.attempts = 0           # placements on a replica
        self.tries = 0              # attempt numbers used (a front-door timeout uses one)
        self.retries_placed = 0     # placements with attempt number >= 2
        self.failed_on: set[int] = set()
        self.retry_due = None       # time its retry is due (in backoff)
        self.current = None         # attempt in flight
        self.ttft = None
        self.done_on = None
        self.completion = None
        self.first_token = None
        self.in_fifo = False
        self.arrived = False
        self.gen_keys = []          # scheduler = "vllm": keys of its blocks past the prompt's ids
        self.remote = None          # vllm mode's decode side: (latency ms, ms per token) of its read
        self.last_attempt = None
        self.next_turn = None       # a conversation's next turn (a Request), sent think ms after this completes
        self.prev_index = None      # ... and its previous turn's index
        self.think = 0.0


class Router:
    def __init__(self, n_replicas):
        self.cursor = 0
        self.fifo: list[Request] = []
        self.breaker_count = [0] * n_replicas
        self.ejected_until = [None] * n_replicas   # None: not ejected
        self.times_ejected = [0] * n_replicas
        self.completions = [[] for _ in range(n_replicas)]   # completion times (rate_weighted)
        # periodic_local additions since each replica's last publication
        self.local_o = [0] * n_replicas
        self.local_tau = [0] * n_replicas
        self.local_ids = [set() for _ in range(n_replicas)]


def affinity_rank(h: float, i: int) -> int:
    """session_affinity's rank of replica i for key h: splitmix64's finalizer of
    floor(h·2^53) XOR (i + 1)·0x9E3779B97F4A7C15, in 64-bit unsigned arithmetic."""
    m = (1 << 64) - 1
    z = (int(math.floor(h * 2.0**53)) ^ ((i + 1) * 0x9E3779B97F4A7C15)) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def nearest_rank(values: list[float], p: float) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    r = math.ceil((p / 100) * len(s))
    return s[r - 1]


# =====================================================================================
# The simulation
# =====================================================================================

class _Sim:
    def __init__(self, workload: Workload, params: dict, factors, events, policy, seed, check,
                 log_steps=False):
        p = dict(defaults())
        p.update(params)
        self.p = p
        if policy == "least_queue":
            policy = "least_requests"
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}")
        self.policy = policy
        self.check = check
        self.W, self.H = horizon_ms(p)
        self.b = int(p["block_tokens"])
        self.N = len(factors)
        self.kv_blocks = int(p["kv_blocks"])
        A = p["allowance_tokens"]
        if A == "exact":
            self.exact = True      # §3: every max(A, g_s) becomes O_s, P_r + A becomes P_r + O_r
            self.A = None
        else:
            if isinstance(A, bool) or not isinstance(A, (int, np.integer)) or A < 0:
                raise ValueError(f"allowance_tokens must be an integer >= 0 or 'exact', not {A!r}")
            self.exact = False
            self.A = int(A)
        drain_s = p["drain_s"]
        if not (math.isfinite(drain_s) and drain_s >= 0):
            raise ValueError(f"drain_s must be finite and >= 0, not {drain_s!r}")
        if not p["ttft_timeout_ms"] > 0:
            raise ValueError(f"ttft_timeout_ms must be > 0, not {p['ttft_timeout_ms']!r}")
        if not p["measure_s"] > 0:
            raise ValueError("measure_s must be > 0")
        self.limit = self.H + drain_s * 1000.0   # the drain's last time (§7 "Drain")
        self.stop = None
        self.mode = p["signal_mode"]
        if self.mode in ("periodic", "periodic_local") and p["period_ms"] == 0:
            self.mode = "fresh"   # decision (a)
        self.R = int(p["routers"])
        self.events = [tuple(e) for e in events]
        for at_ms, kind, replica, _v in self.events:
            if kind not in EVENT_KINDS:
                raise ValueError(f"unknown event kind {kind!r}")
            if kind != "rate_multiplier" and not (0 <= replica < self.N):
                raise ValueError(f"event {kind!r} needs a replica in 0..{self.N - 1}")
        self.next_event = 0
        self.rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed).spawn(1)[0]))
        self.uniforms_drawn = 0

        n_p = int(p["prefill_replicas"])   # issue 42: each pool's settings
        self.replicas = [Replica(i, f, pool_settings(p, "colocated" if n_p == 0 else "prefill" if i < n_p else "decode"))
                         for i, f in enumerate(factors)]
        # issue 22: the replica's scheduler and prefix caching (VLLM-MODE.md 1-3)
        sched = p["scheduler"]
        if sched not in ("reserve", "vllm"):
            raise ValueError(f"scheduler must be 'reserve' or 'vllm', not {sched!r}")
        if not isinstance(p["prefix_caching"], bool):
            raise ValueError(f"prefix_caching must be true or false, not {p['prefix_caching']!r}")
        if sched == "reserve" and not p["prefix_caching"]:
            raise ValueError("prefix_caching = false needs scheduler = 'vllm' "
                             "(the page's replica always caches)")
        self.vllm = sched == "vllm"
        self.caching = bool(p["prefix_caching"])
        if not isinstance(p["async_scheduling"], bool):
            raise ValueError(f"async_scheduling must be true or false, not {p['async_scheduling']!r}")
        if p["async_scheduling"] and not self.vllm:
            raise ValueError("async_scheduling = true needs scheduler = 'vllm'")
        self.asynchronous = bool(p["async_scheduling"])
        # issue 40: the CPU time of a step (D31); the asynchronous loop overlaps it with the
        # GPU's batch, which is not modelled yet
        self.cpu = (float(p["step_cpu_ms"]), float(p["step_cpu_ms_per_seq"]))
        if min(self.cpu) < 0 or not all(math.isfinite(x) for x in self.cpu):
            raise ValueError("step_cpu_ms and step_cpu_ms_per_seq must be finite and >= 0")
        if self.asynchronous and max(self.cpu) > 0:
            raise ValueError("step_cpu_ms with async_scheduling is not modelled")
        # issue 40: the way to the scheduler (D32)
        ingress = (p["ingress_ms"], p["ingress_ms_per_token"])
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0
                   for x in ingress):
            raise ValueError("ingress_ms and ingress_ms_per_token must be finite numbers >= 0")
        self.step_log = None
        if log_steps:
            if self.N != 1 or not self.vllm:
                raise ValueError("log_steps needs one replica and scheduler = 'vllm'")
            self.step_log = []
        self.chain = {}                 # (parent key, content) -> key (v_intern)
        self.chain_taken = set()
        if self.vllm:
            if int(p["max_batched_tokens"]) < int(p["max_batch"]):
                raise ValueError("scheduler = 'vllm' needs max_batched_tokens >= max_batch "
                                 "(vLLM refuses max_num_batched_tokens < max_num_seqs)")
            if not p["chunked_prefill"]:
                for k in range(len(workload.t)):
                    if workload.prompt[k] + workload.output[k] > int(p["max_batched_tokens"]):
                        raise ValueError(
                            f"scheduler = 'vllm' without chunked prefill: request {k} has "
                            f"P + O = {workload.prompt[k] + workload.output[k]} > "
                            f"max_batched_tokens (vLLM refuses max_model_len > "
                            f"max_num_batched_tokens)")
            for rep in self.replicas:
                rep.init_vllm(self.kv_blocks)
        for i in p["start_down"]:
            self.replicas[i].down = True
        self.routers = [Router(self.N) for _ in range(self.R)]
        self.requests = [Request(k, workload.t[k], workload.prompt[k], workload.output[k],
                                 workload.key[k], list(workload.blocks[k]),
                                 int(math.floor(workload.key[k] * self.R)))
                         for k in range(len(workload.t))]
        # conversations: a follow-up is sent think ms after its previous turn's response
        # reaches the client (completion + client_overhead_ms), if before the horizon (no send at or after it, as no arrival); a previous turn
        # that fails, is rejected or is shed ends its session
        self.turns_due: list[tuple[float, int]] = []   # (send time, request) of follow-ups due
        if workload.prev is not None:
            if int(p["max_in_flight"]) > 0:
                raise ValueError("conversations need an open loop (max_in_flight = 0)")
            for k, q in enumerate(workload.prev):
                if q is not None and q >= 0:
                    assert q < k and self.requests[q].next_turn is None
                    r = self.requests[k]
                    self.requests[q].next_turn = r
                    r.prev_index = q
                    r.think = float(workload.think[k])
                    r.intended = r.t = INF
        if self.vllm:
            for r in self.requests:         # the prompt blocks' keys (= ids when prefix-closed), in request order
                r.ids = self.v_prompt_keys(r.ids)
        # the decode side of vLLM's disaggregated serving (VLLM-MODE.md 36)
        self.remote_reads = workload.remote is not None and any(x is not None for x in workload.remote)
        if self.remote_reads:
            if (not self.vllm or self.asynchronous or self.N != 1 or self.events
                    or p["timeout_ms"] != INF or p["ttft_timeout_ms"] != INF):
                raise ValueError("remote reads (Workload.remote) need scheduler = 'vllm', "
                                 "async_scheduling = false, one replica, no events and no timeouts")
            for r, x in zip(self.requests, workload.remote):
                if x is not None:
                    lat, per = float(x[0]), float(x[1])
                    if not (lat > 0 and per >= 0 and math.isfinite(lat + per)):
                        raise ValueError(f"request {r.index}: a read needs latency > 0 and "
                                         f"ms per token >= 0, not {x!r}")
                    r.remote = (lat, per)
        self.next_arrival = 0
        self.in_flight: list[Attempt] = []
        self.readiness_times: list[float] = []
        self.crash_failures: list[Attempt] = []
        self.backoff: list[Request] = []          # requests waiting out a retry backoff
        # periodic signals: publication index k per replica and the published view
        self.pub_k = [0] * self.N
        self.published = [dict(o=0, tau=0, referenced=0, ids=frozenset()) for _ in range(self.N)]

        # metrics
        self.assigned = [0] * self.N
        self.replica_completed = [0] * self.N
        self.replica_tokens = [0] * self.N
        self.occupancy_at_placement: list[float] = []
        self.high_at_placement: list[bool] = []     # occupancy above 0.9 at each placement
        self.max_outstanding = [0] * self.N
        self.completions_window = 0
        self.tokens_window = 0
        self.wasted_tokens = 0
        self.preemptions = 0
        self.breaker_ejections = 0
        self.hit_num = 0
        self.hit_den = 0
        self.preempted_hit_num = 0   # vllm mode: re-admissions after a preemption (vLLM's
        self.preempted_hit_den = 0   # preempted_hits, preempted_queries)
        self.batch_num = 0.0
        self.batch_den = 0.0
        self.kv_area = [0.0] * self.N
        self.q = p["measure_s"] * 250.0           # a quarter of the window (§7 "Steady state")
        self.kv_area_first = [0.0] * self.N      # over [W, W + q]
        self.kv_area_last = [0.0] * self.N       # over [H - q, H]
        self.in_system_at_W = None               # requests in the system after time W
        self.in_system_at_H = None               # ... after time H
        self.all_attempts: list[Attempt] = []     # every attempt placed on a replica (ITL)
        self.cohort = [r for r in self.requests if self.W <= r.intended < self.H]
        # the closed-loop client: at most cap requests hold a slot, from their send to their
        # final outcome + client_overhead_ms (0: an open loop)
        self.cap = int(p["max_in_flight"])
        self.overhead = float(p["client_overhead_ms"])
        if self.cap < 0 or not (math.isfinite(self.overhead) and self.overhead >= 0):
            raise ValueError("max_in_flight must be >= 0 and client_overhead_ms finite and >= 0")
        self.waiting_at_H = None                 # requests not yet sent after time H
        self.cohort_cursor = 0                   # cohort[:cursor] have left the system for good
        self.trace: list = []      # (T, what, ...) log of decisions, for tests
        self.pd_init()

    # ---------------------------------------------------------------- helpers
    def in_window_open(self, T):     # [W, H)
        return self.W <= T < self.H

    def in_window_closed(self, T):   # (W, H]
        return self.W < T <= self.H

    def uniform(self) -> float:
        self.uniforms_drawn += 1
        return float(self.rng.random())

    # ---------------------------------------------------------------- blocks
    def take_block(self, rep: Replica, T: float):
        """A free block (the top of the free stack), else evict the cached block with the
        smallest last_use, then the largest position, then the smallest id, and take it;
        None if there is neither.  The caller makes the block referenced."""
        if not rep.free_stack:
            victim = None
            while rep.cached_heap:
                _key, epoch, index = heapq.heappop(rep.cached_heap)
                blk = rep.blocks[index]
                if blk.state == CACHED and blk.epoch == epoch:
                    victim = blk
                    break
            if self.check:   # the heap's pick is the plain scan's pick
                best = None
                for blk in rep.blocks:
                    if blk.state != CACHED:
                        continue
                    key = (blk.last_use, -blk.position, blk.id)
                    if best is None or key < (best.last_use, -best.position, best.id):
                        best = blk
                assert best is victim, (best, victim)
            if victim is None:
                return None
            del rep.resident[victim.id]
            self.trace.append((T, "evict", rep.index, victim.id, victim.position))
            victim.id = None
            victim.position = -1
            victim.prev_id = None
            rep.set_state(victim, FREE)
        blk = rep.blocks[rep.free_stack.pop()]
        assert blk.state == FREE
        blk.computed = False        # a block taken starts uncomputed (§2 "Computed blocks")
        return blk

    def reference(self, rep: Replica, blk: Block, T: float):
        blk.refcount += 1
        rep.set_state(blk, REFERENCED)
        blk.last_use = T

    def release_all(self, rep: Replica, a: Attempt, T: float):
        for blk in a.blocks:
            blk.refcount -= 1
            blk.last_use = T
            if blk.refcount == 0:
                if blk.id is None:
                    blk.position = -1
                    rep.set_state(blk, FREE)
                elif blk.computed:
                    rep.set_state(blk, CACHED)
                else:
                    # §2 "Computed blocks": an id'd block whose refcount drops to 0 while it
                    # is still uncomputed becomes free, not cached (it stops being resident)
                    del rep.resident[blk.id]
                    self.trace.append((T, "free_uncomputed", rep.index, blk.id, blk.position))
                    blk.id = None
                    blk.position = -1
                    blk.prev_id = None
                    rep.freed_uncomputed = True
                    rep.set_state(blk, FREE)
        a.blocks = []

    def mark_computed(self, s: Attempt):
        """§2 "Computed blocks", at an iteration end after the chunks are computed: the
        id'd block s holds at position j becomes computed when s does not count it in its
        cached prefix (m_s <= j b) and has computed all of its tokens (m_s + c_s >= (j+1) b)."""
        b = self.b
        for j in range(len(s.ids)):
            if s.m <= j * b and s.m + s.c >= (j + 1) * b:
                s.blocks[j].computed = True

    def hit(self, ids, P, g, resident) -> int:
        """Leading ids resident, capped at floor((P + g - 1)/b)."""
        n = 0
        while n < len(ids) and ids[n] in resident:
            n += 1
        return min(n, (P + g - 1) // self.b)

    def take_planned(self, rep: Replica, h: Attempt, T: float) -> bool:
        """Admission's blocks for ``h`` (§2 step 2b): every resident id'd block of its
        prompt referenced, the rest of ceil((P + g)/b) taken (D3); False, and nothing
        done, when those cannot be had."""
        b = self.b
        n_blocks = -(-(h.P + h.g) // b)
        plan = []     # per position: ("ref", block) | ("id", id) | ("anon", None)
        seen_new = set()
        for j in range(n_blocks):
            if j < len(h.ids):
                bid = h.ids[j]
                if bid in rep.resident:
                    plan.append(("ref", rep.resident[bid]))
                elif bid in seen_new:
                    plan.append(("dup", bid))
                else:
                    seen_new.add(bid)
                    plan.append(("id", bid))
            else:
                plan.append(("anon", None))
        need = sum(1 for kind, _ in plan if kind in ("id", "anon"))
        # cached blocks it is about to reference cannot be evicted for it
        to_ref = {blk.index: blk for kind, blk in plan if kind == "ref"}
        cached_free = rep.count(CACHED) - sum(1 for blk in to_ref.values() if blk.state == CACHED)
        available = rep.count(FREE) + cached_free
        if need > available:
            return False
        # admit
        rep.waiting.pop(0)
        for kind, obj in plan:
            if kind == "ref":
                self.reference(rep, obj, T)
        new_of_id = {}
        for j, (kind, obj) in enumerate(plan):
            if kind == "ref":
                h.blocks.append(obj)
            elif kind == "dup":
                blk = new_of_id[obj]
                self.reference(rep, blk, T)
                h.blocks.append(blk)
            else:
                blk = self.take_block(rep, T)
                assert blk is not None
                rep.set_state(blk, REFERENCED)
                blk.refcount = 1
                blk.last_use = T
                blk.position = j
                if kind == "id":
                    blk.id = obj
                    blk.prev_id = h.ids[j - 1] if j > 0 else None
                    rep.resident[obj] = blk
                    new_of_id[obj] = blk
                else:
                    blk.id = None
                h.blocks.append(blk)
        return True

    # ---------------------------------------------------------------- §2 iteration
    def preempt(self, rep: Replica, v: Attempt, T: float):
        self.release_all(rep, v, T)
        v.kv = 0
        v.c = 0
        v.u = 0
        v.m = 0
        rep.running.remove(v)
        rep.waiting.insert(0, v)
        v.where = "waiting"
        if self.in_window_open(T):
            self.preemptions += 1
        self.trace.append((T, "preempt", rep.index, v.req.index))

    def start_iteration(self, rep: Replica, T: float):
        if self.vllm:
            return self.v_start_iteration(rep, T)
        p = self.p
        b = self.b
        # 1. Growth
        preempted = False
        for s in list(rep.running):
            if s.where != "running" or not s.decoding():
                continue
            if s.kv % b == 0:
                while True:
                    blk = self.take_block(rep, T)
                    if blk is not None:
                        rep.set_state(blk, REFERENCED)
                        blk.refcount = 1
                        blk.id = None
                        blk.position = s.kv // b
                        blk.last_use = T
                        s.blocks.append(blk)
                        break
                    v = rep.running[-1]
                    self.preempt(rep, v, T)
                    preempted = True
                    if v is s:
                        break
            if s.where == "running":
                s.kv += 1
        decoding = [s for s in rep.running if s.decoding()]
        n = len(decoding)
        K = sum(s.kv for s in decoding)
        # 2. Prefill budget
        B = int(rep.s["max_batched_tokens"]) - n
        chunks = []   # (sequence, x, m_s, c_s before)
        chunked = bool(rep.s["chunked_prefill"])
        if chunked and B > 0:
            for s in list(rep.running):
                if s.decoding():
                    continue
                if B <= 0:
                    break
                x = min(s.u - s.c, B)
                chunks.append((s, x, s.m, s.c))
                B -= x
        if not preempted:
            first = True
            while rep.waiting:
                h = rep.waiting[0]
                if h.pd_stage == "handoff":    # issue 42: a decode replica allocates for a transfer
                    if not self.pd_allocate(rep, h, T):
                        break
                    continue
                if len(rep.running) >= int(rep.s["max_batch"]):
                    break
                if h.pd_stage == "transferred":   # issue 42: its one-token prefill
                    if not (B > 0 if chunked else 1 <= B or first):
                        break
                    B -= self.pd_admit_transferred(rep, h, T, chunks)
                    first = False
                    continue
                hit = self.hit(h.ids, h.P, h.g, rep.resident)
                m = b * hit
                u = h.P + h.g - m
                if chunked:
                    ok = B > 0
                else:
                    ok = u <= B or first
                if not ok:
                    break
                if not self.take_planned(rep, h, T):
                    break
                if h.pd_stage == "prefill":   # issue 42: the TTFT's prefill queue ends here
                    h.pd.setdefault("prefill_admit", T)
                h.kv = h.P + h.g
                h.m = m
                h.u = u
                h.c = 0
                h.where = "running"
                h.admit_order = rep.admissions
                rep.admissions += 1
                rep.running.append(h)
                if self.in_window_open(T):
                    self.hit_num += m
                    self.hit_den += h.P + h.g
                x = min(u, B) if chunked else u
                chunks.append((h, x, m, 0))
                B -= x
                first = False
                self.trace.append((T, "admit", rep.index, h.req.index, hit, u))
        # 3. Duration
        U = sum(x for _s, x, _m, _c in chunks)
        Q2 = sum(x * (2 * m + 2 * c + x) for _s, x, m, c in chunks)   # exact 2*Q
        Q = Q2 / 2
        R = sum(m + c + x for _s, x, m, c in chunks)   # KV the chunks attend to (roofline)
        members = n + len(chunks)
        d = self.duration(rep, T, U, Q, n, K, R) + self.step_cpu(rep, members)
        if self.in_window_open(T):
            self.batch_num += members * d
            self.batch_den += d
        rep.iteration = dict(start=T, end=T + d, d=d, chunks=chunks, decoding=decoding)
        self.trace.append((T, "iteration", rep.index, T + d, n, U, members))

    def duration(self, rep: Replica, T: float, U, Q, n, K, R) -> float:
        """An iteration's duration (ms) from its prefill tokens U, prefill attention pairs
        Q, KV tokens the prefill chunks attend to R, decoding sequences n and their KV K.
        f = (factor*slowdown)*cold.  Linear (D5): f*((((c0 + c_pf*U) + c_attn*Q) +
        c_dec*n) + c_kv*K).  Roofline (issue 25, docs/model.md "The step cost"):
        memory = weights + per_kv_token*(K + R), compute = per_token*(U + n) +
        per_token_pair*(Q + K), f*(base + max(memory, compute)).  Overlap (issue 43, D5c):
        the same sides from the overlap_ms table, f*((base + max) + kappa*min).  Mixed
        (issue 41, D5d): the same sides from the mixed_ms table, f*((base + max) +
        per_mixed_kv_token*min(U, 1)*K)."""
        cold = 1.0
        if rep.t_up is not None:
            cold = 1.0 + (self.p["cold_factor"] - 1.0) * math.exp(-(T - rep.t_up) / self.p["cold_tau_ms"])
        f = (rep.factor * rep.slowdown) * cold
        p = rep.s   # its pool's step cost
        if p["step_cost"] == "roofline":
            memory = p["roofline_ms_weights"] + p["roofline_ms_per_kv_token"] * (K + R)
            compute = p["roofline_ms_per_token"] * (U + n) + p["roofline_ms_per_token_pair"] * (Q + K)
            return f * (p["roofline_ms_base"] + max(memory, compute))
        if p["step_cost"] == "overlap":
            memory = p["overlap_ms_weights"] + p["overlap_ms_per_kv_token"] * (K + R)
            compute = p["overlap_ms_per_token"] * (U + n) + p["overlap_ms_per_token_pair"] * (Q + K)
            return f * ((p["overlap_ms_base"] + max(memory, compute)) + p["overlap_ms_kappa"] * min(memory, compute))
        if p["step_cost"] == "mixed":
            memory = p["mixed_ms_weights"] + p["mixed_ms_per_kv_token"] * (K + R)
            compute = p["mixed_ms_per_token"] * (U + n) + p["mixed_ms_per_token_pair"] * (Q + K)
            return f * ((p["mixed_ms_base"] + max(memory, compute)) + p["mixed_ms_per_mixed_kv_token"] * min(U, 1) * K)
        return f * ((((p["step_ms_base"] + p["step_ms_per_prefill_token"] * U)
                      + p["step_ms_per_prefill_token_pair"] * Q)
                     + p["step_ms_per_decode_sequence"] * n)
                    + p["step_ms_per_kv_token"] * K)

    def step_cpu(self, rep: Replica, members: int) -> float:
        """D31: the CPU time (ms) of a step of ``members`` scheduled sequences on ``rep``,
        besides its step cost: step_cpu_ms + step_cpu_ms_per_seq*members (its pool's), not
        scaled by f."""
        return float(rep.s["step_cpu_ms"]) + float(rep.s["step_cpu_ms_per_seq"]) * members

    def end_iteration(self, rep: Replica, T: float):
        if self.vllm:
            return self.v_end_iteration(rep, T)
        it = rep.iteration
        rep.iteration = None
        prefilled = set()
        computed_now = []
        for s, x, _m, _c in it["chunks"]:
            if s.where == "running" and s.replica == rep.index:
                s.c += x
                computed_now.append(s)
                if s.c == s.u:
                    prefilled.add(id(s))
        # only a sequence that computed a chunk can newly satisfy the rule (check=True
        # verifies it on every running sequence, see check_invariants)
        for s in computed_now:
            self.mark_computed(s)
        decoding = {id(s) for s in it["decoding"]}
        for s in list(rep.running):
            if id(s) not in decoding and id(s) not in prefilled:
                continue
            if s.pd_stage == "prefill":     # issue 42: the prefill replica's token is dropped
                self.pd_prefilled(rep, s, T)
                continue
            self.emit(rep, s, T)
            if s.g == s.O:
                # it computed every block it did not count as a hit; a block it hit while
                # still uncomputed (its reserver still computing it, or cancelled) may be
                # uncomputed yet: released like any other (refcount 0 and uncomputed: free)
                assert all(blk.computed or s.m > j * self.b
                           for j, blk in enumerate(s.blocks[:len(s.ids)])), "completing with uncomputed KV"
                if any(not blk.computed for blk in s.blocks[:len(s.ids)]):
                    self.trace.append((T, "complete_with_uncomputed_hit", rep.index, s.req.index))
                self.release_all(rep, s, T)
                rep.running.remove(s)
                self.complete(s, T)

    def complete(self, a: Attempt, T: float):
        a.where = "done"
        self.in_flight.remove(a)
        r = a.req
        r.current = None
        r.outcome = "completed"
        r.left_at = T
        r.completion = T
        r.first_token = a.first_token
        r.ttft = a.first_token - r.t
        r.done_on = a.replica
        if self.in_window_closed(T):
            self.completions_window += 1
            self.replica_completed[a.replica] += 1
        router = self.routers[a.router]
        router.breaker_count[a.replica] = 0
        router.completions[a.replica].append(T)
        self.trace.append((T, "complete", a.replica, r.index))
        if r.next_turn is not None:   # the user reads the response (client overhead later), thinks, sends
            due = (T + self.overhead) + r.next_turn.think
            if due < self.H:
                self.turns_due.append((due, r.next_turn.index))

    # =================================================================================
    # scheduler = "vllm" (issue 22): vLLM V1 0.30.0's scheduler and KV-cache manager,
    # read from conformance/VLLM-SCHEDULER.md (S = v1/core/sched/scheduler.py, M =
    # kv_cache_manager.py, T = single_type_kv_cache_manager.py, BP = block_pool.py);
    # every choice where vLLM has no counterpart is numbered in conformance/VLLM-MODE.md (numbered 1-41;
    # 25-35 for async_scheduling, 36-41 for the decode side's reads).
    # =================================================================================
    def v_intern(self, parent, content):
        """The key of a block whose parent block has key ``parent`` and whose tokens are
        ``content`` (a prompt block id, or ("gen", r) for a block of request r's prompt
        tail and generated tokens): vLLM's chained block hash (KU:638-667) as a routesim
        value.  A prompt block's key is its id the first time that id is met (so with
        prefix-closed ids every key IS the id); an id met again under another parent, and
        every generated block, gets a fresh key ("k", n) (VLLM-MODE.md 5)."""
        k = (parent, content)
        key = self.chain.get(k)
        if key is None:
            if isinstance(content, (int, np.integer)) and not isinstance(content, bool) \
                    and content not in self.chain_taken:
                key = content
            else:
                key = ("k", len(self.chain))
            self.chain_taken.add(key)
            self.chain[k] = key
        return key

    def v_prompt_keys(self, ids):
        """A prompt's block keys; a conversation's response id (RESPONSE_ID + q·2^16 + j:
        block j of earlier request q's prompt tail and response) is the key q's own block
        j has: the same tokens after the same blocks, so vLLM's chained hash is equal."""
        keys = []
        parent = None                      # vLLM's NONE_HASH
        for bid in ids:
            if bid >= RESPONSE_ID:
                q, j = divmod(bid - RESPONSE_ID, 2**16)
                parent = self.v_seq_key(self.requests[q], j)
            else:
                parent = self.v_intern(parent, bid)
            keys.append(parent)
        return keys

    def v_key(self, a: Attempt, j: int):
        """The key (hash) of block j of the attempt's token sequence (prompt, then generated
        tokens): the prompt block's key, else one unique to the request (D6, D7)."""
        return self.v_seq_key(a.req, j)

    def v_seq_key(self, r: Request, j: int):
        """The key of block j of request r's token sequence (its prompt's keys in r.ids)."""
        ids = r.ids
        if j < len(ids):
            return ids[j]
        while len(ids) + len(r.gen_keys) <= j:
            k = len(ids) + len(r.gen_keys)
            if k == 0:
                parent = None
            elif k - 1 < len(ids):
                parent = ids[k - 1]
            else:
                parent = r.gen_keys[k - 1 - len(ids)]
            r.gen_keys.append(self.v_intern(parent, ("gen", r.index)))
        return r.gen_keys[j - len(ids)]

    def v_touch(self, rep: Replica, blk: VBlock):
        """BlockPool.touch (BP:749-764): a hit block with ref 0 leaves the free queue."""
        if blk.ref == 0:
            del rep.fq[blk.index]
            rep.tally[CACHED if blk.hash is not None else FREE] -= 1
            rep.tally[REFERENCED] += 1
        blk.ref += 1

    def v_new_blocks(self, rep: Replica, n: int, T: float) -> list:
        """BlockPool.get_new_blocks (BP:664-697): n blocks popped from the head of the free
        queue; a popped block that has a hash is evicted (its hash leaves the map)."""
        out = []
        for _ in range(n):
            idx, _ = rep.fq.popitem(last=False)
            blk = rep.vblocks[idx]
            assert blk.ref == 0
            if blk.hash is not None:
                holders = rep.resident[blk.hash]
                del holders[idx]
                if not holders:
                    del rep.resident[blk.hash]
                self.trace.append((T, "evict", rep.index, blk.hash))
                blk.hash = None
                rep.evictions += 1
                rep.tally[CACHED] -= 1
            else:
                rep.tally[FREE] -= 1
            blk.ref = 1
            rep.tally[REFERENCED] += 1
            out.append(blk)
        return out

    def v_free(self, rep: Replica, a: Attempt):
        """KVCacheManager.free -> BlockPool.free_blocks (T:573-581, BP:770-800): the blocks
        are released tail first; of those that reach ref 0, the unhashed go to the FRONT of
        the free queue (in that order), the hashed to its BACK."""
        front, back = [], []
        for blk in reversed(a.blocks):
            blk.ref -= 1
            if blk.ref == 0:
                rep.tally[REFERENCED] -= 1
                if blk.hash is None:
                    front.append(blk)
                else:
                    back.append(blk)
        for blk in reversed(front):
            rep.fq[blk.index] = None
            rep.fq.move_to_end(blk.index, last=False)
        for blk in back:
            rep.fq[blk.index] = None
        rep.tally[FREE] += len(front)
        rep.tally[CACHED] += len(back)
        a.blocks = []
        a.ncached = 0

    def v_computed_blocks(self, rep: Replica, h: Attempt) -> list:
        """KVCacheManager.get_computed_blocks (M:265-321, T:741-836): the longest run of
        leading full blocks whose hashes are cached, at most floor((num_tokens - 1)/b)
        blocks; for a hash held by several blocks, the first inserted (get_one_block)."""
        if not self.caching:
            return []
        out = []
        for j in range((h.P + h.g - 1) // self.b):
            holders = rep.resident.get(self.v_key(h, j))
            if not holders:
                break
            out.append(next(iter(holders.values())))
        return out

    def v_allocate(self, rep: Replica, s: Attempt, x: int, T: float, hit=(), admission=False,
                   external=0) -> bool:
        """KVCacheManager.allocate_slots (M:370-601) for x new tokens (and the hit blocks of
        an admission): False (vLLM's None) when the free queue is too short.  The decode
        side's read (VLLM-MODE.md 38): ``external`` tokens to be read into new blocks, no
        block hashed until the read is done (delay_cache_blocks)."""
        b = self.b
        htok = len(hit) * b
        total_computed = s.computed + htok + external
        held = len(s.blocks)
        evictable = sum(1 for blk in hit if blk.ref == 0)

        def needed(ntok):
            return max(-(-ntok // b) - (len(hit) + held), 0) + evictable

        # the admission gate: the whole current sequence must fit (M:508-524, D2)
        if admission and needed(s.P + s.g) > len(rep.fq):
            return False
        need_slot = total_computed + x
        if needed(need_slot) > len(rep.fq):
            return False
        for blk in hit:
            self.v_touch(rep, blk)
        s.blocks.extend(hit)
        if admission:
            s.ncached = len(s.blocks)
        n_new = -(-need_slot // b) - len(s.blocks)
        if n_new > 0:
            s.blocks.extend(self.v_new_blocks(rep, n_new, T))
        if external:
            return True                        # delay_cache_blocks (M:585-588)
        # cache_blocks (M:595-599): every block full after this chunk gets its hash now,
        # when the chunk is scheduled (D4); a capped hit's block is recomputed into a new
        # block that gets the same hash (D5).  Tokens not yet known (async placeholders)
        # are not counted: min(..., num_tokens).
        self.v_cache_blocks(rep, s, min(total_computed + x, s.P + s.g))
        return True

    def v_cache_blocks(self, rep: Replica, s: Attempt, ntok: int):
        """KVCacheCoordinator.cache_blocks (C:335-359, T:470-526, BP:231-348), with prefix
        caching: every block j with ncached <= j < floor(ntok/b) gets its key (hash) and
        joins the hash map; ncached = max(ncached, floor(ntok/b))."""
        if not self.caching:
            return
        full = ntok // self.b
        for j in range(s.ncached, full):
            blk = s.blocks[j]
            assert blk.hash is None
            key = self.v_key(s, j)
            blk.hash = key
            rep.resident.setdefault(key, {})[blk.index] = blk
        s.ncached = max(s.ncached, full)

    def v_record_hits(self, h: Attempt, htok: int, L: int):
        """vLLM's prefix-cache statistics of an admission in the window
        (KVCacheManager.record_prefix_cache_stats, PrefixCacheStats.record): L = P + g
        tokens queried, htok hit; an attempt preempted before (num_preemptions > 0) is
        filed apart; with prefix caching off there is no lookup, so nothing is recorded."""
        if not self.caching:
            return
        if h.preemptions > 0:
            self.preempted_hit_num += htok
            self.preempted_hit_den += L
        else:
            self.hit_num += htok
            self.hit_den += L

    def v_preempt(self, rep: Replica, v: Attempt, T: float):
        """Scheduler._preempt_request (S:1477-1518); the caller popped v from running."""
        self.v_free(rep, v)
        v.computed = 0
        v.v_prefilling = False                 # S:1495
        # async: the output in flight becomes stale, the placeholders are zeroed (S:1500-1511)
        v.stale = v.inflight
        v.placeholders = 0
        v.preemptions += 1
        v.where = "waiting"
        rep.waiting.insert(0, v)
        if self.in_window_open(T):
            self.preemptions += 1
        self.trace.append((T, "preempt", rep.index, v.req.index))

    def v_counts(self, rep: Replica) -> dict:
        return dict(free=rep.tally[FREE], cached=rep.tally[CACHED], referenced=rep.tally[REFERENCED])

    def v_start_iteration(self, rep: Replica, T: float):
        """Phase 7 on a replica whose engine is free at T.  Synchronous: Scheduler.schedule()
        (S:561-1456), repeated at once while a step schedules nothing (every running
        request preempted: VLLM-MODE.md 16), and the step runs.  Asynchronous: the engine
        loop (v_engine)."""
        if self.asynchronous:
            return self.v_engine(rep, T)
        self.v_report_reads(rep, T)            # the idle engine's empty steps (VLLM-MODE.md 39)
        while True:
            batch = self.v_schedule(rep, T)
            if batch["sched"]:
                break
            if not batch["preempted"] and rep.skipped:
                # nothing to run until a read ends: idle (VLLM-MODE.md 39)
                if batch["log"] is not None:
                    batch["log"].update(self.v_counts(rep))
                return
            if not batch["preempted"]:
                raise RuntimeError(f"replica {rep.index} stalls at T={T}: nothing scheduled, "
                                   "nothing preempted")
            # VLLM-MODE.md 16: a step that schedules nothing runs no model: 0 ms, no iteration
            self.trace.append((T, "empty_step", rep.index))
            if batch["log"] is not None:
                batch["log"].update(self.v_counts(rep))
        d = self.duration(rep, T, *batch["terms"]) + self.step_cpu(rep, len(batch["sched"]))
        self.v_run_batch(rep, batch, T, d)
        rep.iteration = dict(start=T, end=T + d, d=d, sched=batch["sched"], log=batch["log"])

    def v_run_batch(self, rep: Replica, batch: dict, start: float, d: float):
        """A scheduled batch with something in it runs from ``start`` for ``d`` ms: its
        duration in the step log, batch_mean (a batch started in [W, H)), the trace."""
        U, _Q, n, _K, _R = batch["terms"]
        if batch["log"] is not None:
            batch["log"]["d"] = d
        members = len(batch["sched"])
        if self.in_window_open(start):
            self.batch_num += members * d
            self.batch_den += d
        self.trace.append((start, "iteration", rep.index, start + d, n, U, members))

    def v_schedule(self, rep: Replica, T: float) -> dict:
        """One Scheduler.schedule() (S:561-1456; with async_scheduling, AsyncScheduler's).
        Returns the batch: ``sched`` [(attempt, tokens x, computed before c)] in vLLM's order,
        ``sampled`` (async: the attempts whose chunk reaches their length, which sample a
        token: not is_prefill_chunk), ``preempted``, ``terms`` (U, Q, n, K, R of
        VLLM-SCHEDULER.md §4) and ``log`` (its step-log entry, or None)."""
        p = self.p
        b = self.b
        asyn = self.asynchronous
        budget = int(p["max_batched_tokens"])
        chunked = bool(p["chunked_prefill"])
        evictions_before = rep.evictions
        sched = []            # (attempt, tokens, computed before the step) in vLLM's order
        preempted = []
        admitted = []
        # 1. running requests, in running order (S:610-852)
        i = 0
        while i < len(rep.running) and budget > 0:
            s = rep.running[i]
            if asyn and s.placeholders > 0 and s.computed + 2 - s.placeholders >= s.P + s.O:
                i += 1                         # S:617-629: its last token is in flight
                continue
            # S:655-660: num_tokens + placeholders - num_computed_tokens
            x = min(s.P + s.g + s.placeholders - s.computed, budget)
            assert x > 0
            while True:
                ok = self.v_allocate(rep, s, x, T)
                if ok:
                    break
                v = rep.running.pop()          # the most recently admitted (S:753)
                self.v_preempt(rep, v, T)
                preempted.append(v)
                if v is s:
                    break
            if not ok:
                break                          # the running loop stops (S:797-799)
            sched.append((s, x, s.computed))
            budget -= x
            i += 1
        # 2. waiting requests, only if no request was preempted (S:855); the attempts in
        # WAITING_FOR_REMOTE_KVS (rep.skipped) first (S:2319, VLLM-MODE.md 37)
        loads = []
        promoted = []
        if not preempted:
            step_skipped = []
            while (rep.waiting or rep.skipped) and budget > 0 and len(rep.running) < int(p["max_batch"]):
                queue = rep.skipped if rep.skipped else rep.waiting
                h = queue[0]
                if h.where == "remote_kv":
                    queue.pop(0)
                    if h.read[4] is None:      # its read not reported yet (S:873-884)
                        step_skipped.append(h)
                        continue
                    self.v_promote(rep, h, T, sched, promoted)
                    budget -= 1
                    continue
                # S:886-894 skips a head whose stale output is still in flight; the loop
                # never schedules one (VLLM-MODE.md 27): its batch returns before the next
                # schedule()
                assert h.stale == 0, "a waiting head with stale output in flight"
                hit = self.v_computed_blocks(rep, h)
                htok = len(hit) * b
                L = h.P + h.g
                if h.v_remote:                 # the decode side: read the prompt (VLLM-MODE.md 38)
                    if not self.v_admit_read(rep, h, hit, T):
                        break
                    step_skipped.append(h)
                    loads.append(h)
                    continue
                x = L - htok
                if not chunked and x > budget:
                    break                      # S:1072-1078 (D10)
                x = min(x, budget)
                if not self.v_allocate(rep, h, x, T, hit, admission=True):
                    break                      # S:1173-1180: no skipping
                rep.waiting.pop(0)
                rep.running.append(h)
                h.where = "running"
                h.computed = htok
                h.l_adm = L
                h.v_prefilling = htok + x < L  # S:1271-1273
                h.hits.append(htok)
                h.admit_order = rep.admissions
                rep.admissions += 1
                if self.in_window_open(T):
                    self.v_record_hits(h, htok, L)
                sched.append((h, x, htok))
                admitted.append((h, htok))
                budget -= x
                self.trace.append((T, "admit", rep.index, h.req.index, len(hit), L - htok))
            rep.skipped = step_skipped + rep.skipped   # S:1291-1292
        # 3. _update_after_schedule (S:1520-1568; AsyncScheduler's, AS:19-49: a request whose
        # chunk reaches its length, placeholders included, gets one more output placeholder)
        sampled = []
        for s, x, _c in sched:
            s.computed += x
            if s.computed >= s.P + s.g + s.placeholders:
                s.v_prefilling = False         # S:1544-1546
            if asyn:
                s.inflight += x
                if s.computed >= s.P + s.g + s.placeholders:     # not is_prefill_chunk
                    s.placeholders += 1
                    sampled.append(s)
        rep.finished_since_schedule = False    # finished_req_ids handed to this batch
        # the step-cost terms (VLLM-SCHEDULER.md §4)
        U = 0
        Q = 0.0
        n = 0
        K = 0
        R = 0
        for s, x, c in sched:
            if c < s.l_adm:                    # prefilling (first prefill or recompute)
                U += x
                Q += x * (c + x / 2.0)
                R += c + x                     # its context and itself (roofline)
            else:                              # decoding
                n += 1
                K += c + x
        entry = None
        if self.step_log is not None and (not self.remote_reads or sched or preempted or loads):
            entry = dict(T=T, d=0.0, sched=[[s.req.index, x] for s, x, _c in sched],
                         preempted=[v.req.index for v in preempted],
                         admitted=[[h.req.index, m] for h, m in admitted],
                         U=U, Q=Q, n=n, K=K, evicted=rep.evictions - evictions_before)
            if self.remote_reads:          # VLLM-MODE.md 41
                entry.update(loads=[[h.req.index, h.read[1], h.read[2]] for h in loads],
                             promoted=[h.req.index for h in promoted])
            self.step_log.append(entry)
        return dict(sched=sched, sampled=sampled, preempted=preempted, terms=(U, Q, n, K, R),
                    log=entry)

    # ------------------------------------------------ the decode side (issue 42 item 5)
    # vLLM's scheduler with a KV connector in NIXL pull mode's decode-side behaviour
    # (conformance/decode_connector.py, conformance/vllm_driver.py); VLLM-MODE.md 36-41.
    def v_admit_read(self, rep: Replica, h: Attempt, hit: list, T: float) -> bool:
        """A waiting attempt whose prompt is to be read (S:914-1228): the connector matches
        P − the local hit; the whole prompt is allocated, nothing scheduled; the attempt
        goes to WAITING_FOR_REMOTE_KVS with num_computed = P and its read starts with this
        step (it ends latency + ms per token · tokens later).  False: it does not fit.
        The in-flight prefills' reservation (S:1153-1157) is 0 in the synchronous loop
        (VLLM-MODE.md 38); check=True asserts it."""
        b = self.b
        htok = len(hit) * b
        ext = h.P + h.g - htok                 # >= 1: the hit is capped below P
        if self.check:
            assert sum(max(-(-(a.P + a.g) // b) - len(a.blocks), 0)
                       for a in rep.running + rep.skipped if a.v_prefilling) == 0
        if not self.v_allocate(rep, h, 0, T, hit, admission=True, external=ext):
            return False
        rep.waiting.pop(0)
        h.v_remote = False                     # one read per request (NIXL: PS:187-190)
        h.where = "remote_kv"
        h.computed = htok + ext
        h.v_prefilling = True                  # S:1228
        if self.in_window_open(T):
            self.v_record_hits(h, htok, h.P + h.g)
        lat, per = h.req.remote
        h.read = [T, htok, ext, T + (lat + per * ext), None, None]
        self.trace.append((T, "read", rep.index, h.req.index, htok, ext))
        return True

    def v_promote(self, rep: Replica, h: Attempt, T: float, sched: list, promoted: list):
        """An attempt whose read was reported (_update_waiting_for_remote_kv, S:2919-2960):
        its blocks are hashed, num_computed = P − 1 (the last prompt token recomputed to
        sample the first one), and it is scheduled as a waiting request: one token, no
        lookup, its blocks already held (S:1007-1017, 1262-1273)."""
        self.v_cache_blocks(rep, h, h.computed)
        h.computed -= 1
        assert self.v_allocate(rep, h, 1, T)
        rep.running.append(h)
        h.where = "running"
        h.l_adm = h.P + h.g
        h.admit_order = rep.admissions
        rep.admissions += 1
        h.read[5] = T
        sched.append((h, 1, h.computed))
        promoted.append(h)
        self.trace.append((T, "promote", rep.index, h.req.index))

    def v_report_reads(self, rep: Replica, T: float):
        """The worker reports the reads ended by T (finished_recving), at a step's end or
        when the idle engine polls (its empty steps)."""
        for a in rep.skipped:
            if a.read[4] is None and a.read[3] <= T:
                a.read[4] = T

    def emit(self, rep: Replica, s: Attempt, T: float):
        """A token of attempt s reaches its client at T (first-token time kept across
        preemption, ITL, window counters)."""
        s.g += 1
        s.token_times.append(T)
        if self.in_window_closed(T):
            self.replica_tokens[rep.index] += 1
            self.tokens_window += 1
            s.window_tokens += 1
        if s.first_token is None:
            s.first_token = T

    def v_end_iteration(self, rep: Replica, T: float):
        """Phase 1 at the end of the step (synchronous) or of the batch the engine waits
        for (asynchronous, v_output).  Synchronous: Scheduler.update_from_output
        (S:1874-2290): in scheduled order, a request whose computed tokens reach its length
        samples a token; one that reaches O finishes and is freed at once.  Before it,
        the attempts cancelled during the step are freed, in the order they were
        cancelled (EngineCore.step processes the aborts received during the step before
        update_from_output, EC:611-613; VLLM-MODE.md 18)."""
        if self.asynchronous:
            return self.v_output(rep, T)
        it = rep.iteration
        rep.iteration = None
        for a in rep.deferred:
            self.v_free(rep, a)
        rep.deferred = []
        for s, _x, _c in it["sched"]:
            if s.where != "running" or s.replica != rep.index:
                continue                       # cancelled during the step: emits nothing
            if s.computed < s.P + s.g:
                continue                       # a partial chunk samples nothing
            self.emit(rep, s, T)
            if s.g == s.O:
                self.v_free(rep, s)
                rep.running.remove(s)
                self.complete(s, T)
        self.v_report_reads(rep, T)            # finished_recving in this step's output
        if it["log"] is not None:
            it["log"].update(self.v_counts(rep))

    # ------------------------------------------------ async_scheduling (issue 40)
    # vLLM's default loop: EngineCore.step_with_batch_queue (EC = v1/engine/core.py:630-744)
    # with a batch queue of 2 and the AsyncScheduler (AS = v1/core/sched/async_scheduler.py),
    # on the step clock of VLLM-SCHEDULER.md §9 and conformance/vllm_driver.py:run_async;
    # the decisions are VLLM-MODE.md 25-35.
    BATCH_QUEUE = 2     # VllmConfig.max_concurrent_batches with async scheduling

    def v_has_requests(self, rep: Replica) -> bool:
        """Scheduler.has_requests(): unfinished requests (waiting or running), or a request
        finished or aborted since the last schedule() (finished_req_ids non-empty)."""
        return bool(rep.running or rep.waiting or rep.finished_since_schedule)

    def v_engine(self, rep: Replica, T: float):
        """The engine loop (run_busy_loop + step_with_batch_queue) at the engine's clock T:
        schedule while the queue has room and there is something to schedule; else wait for
        the oldest batch -- processed here when it has already ended, else the engine blocks
        until its end (rep.iteration = that batch; phase 1 processes it).  Returns when the
        engine blocks or has no work.  The requests routed to the replica by T are in its
        waiting queue (added before each scheduling, EC:1403-1414)."""
        while True:
            if not self.v_has_requests(rep) and not rep.batches:
                return                         # idle until a request is routed here
            if self.v_has_requests(rep):
                batch = self.v_schedule(rep, T)
                start = max(T, rep.gpu_free)   # the GPU runs the batches back to back
                d = self.duration(rep, start, *batch["terms"]) if batch["sched"] else 0.0
                rep.gpu_free = start + d
                batch.update(S=T, start=start, end=start + d)
                if batch["log"] is not None:
                    batch["log"].update(S=T, T=start, **self.v_counts(rep))
                if batch["sched"]:
                    self.v_run_batch(rep, batch, start, d)
                else:
                    self.trace.append((T, "empty_step", rep.index))
                rep.batches.append(batch)
                if len(rep.batches) < self.BATCH_QUEUE and (batch["sched"] or self.v_has_requests(rep)):
                    continue                   # EC:684-692: do not block, schedule again
                if (not batch["sched"] and not batch["preempted"] and (rep.running or rep.waiting)
                        and all(not q["sched"] for q in rep.batches)):
                    raise RuntimeError(f"replica {rep.index} stalls at T={T}: nothing scheduled, "
                                       "nothing in flight")
            if rep.batches[0]["end"] > T:
                rep.iteration = rep.batches[0]     # blocked until it ends (EC:700-713)
                return
            self.v_output(rep, T)

    def v_output(self, rep: Replica, T: float):
        """The oldest batch's output reaches the engine at T (its end): the aborts received
        while it waited first (EC:713-715, VLLM-MODE.md 31), then update_from_output
        (S:1874-2290) with AsyncScheduler._update_request_with_output (AS:51-70): in
        scheduled order, each attempt not finished or aborted drains its in-flight and
        stale counts; one that sampled gets its token (stale or not: S:1947-1956, 2036),
        consumes a placeholder unless stale, has its blocks cached up to computed -
        placeholders if it was running, and finishes (freed at once) at O tokens -- from
        the running list, or from the waiting one if it was preempted meanwhile."""
        batch = rep.batches.pop(0)
        rep.iteration = None
        self.v_abort_deferred(rep)
        sampled = {id(s) for s in batch["sampled"]}
        for s, x, _c in batch["sched"]:
            s.inflight -= x
            stale = s.stale > 0
            if stale:
                s.stale -= x
                assert s.stale >= 0
            if s.where == "done" or id(s) not in sampled:
                continue                       # finished or aborted; or a partial chunk
            running = s.where == "running"
            self.emit(rep, s, T)
            if not stale:
                s.placeholders -= 1
                assert s.placeholders >= 0
            if running:
                self.v_cache_blocks(rep, s, s.computed - s.placeholders)
            if s.g == s.O:
                self.v_free(rep, s)
                (rep.running if running else rep.waiting).remove(s)
                rep.finished_since_schedule = True
                self.complete(s, T)

    def v_abort_deferred(self, rep: Replica):
        """The aborts received while the engine was busy, in the order received: each
        attempt's blocks are released (as vLLM's finish_requests, _free_request)."""
        for a in rep.deferred:
            self.v_free(rep, a)
            rep.finished_since_schedule = True
        rep.deferred = []

    def v_has_work(self, rep: Replica) -> bool:
        """Phase 7: does the replica's scheduler (engine) have anything to do?"""
        if self.asynchronous:
            return bool(self.v_has_requests(rep) or rep.batches)
        return bool(rep.running or rep.waiting or rep.skipped)

    def v_cancel(self, rep: Replica, a: Attempt):
        if a.where == "waiting":
            rep.waiting.remove(a)              # a waiting attempt holds no block
            if self.asynchronous:
                self.v_abort(rep, a)
        elif a.where == "running":
            rep.running.remove(a)
            if self.asynchronous:
                self.v_abort(rep, a)
            elif rep.iteration is not None:
                rep.deferred.append(a)         # freed when the step ends (VLLM-MODE.md 18)
            else:
                self.v_free(rep, a)
        elif a.where == "ff":
            rep.pending_ff.remove(a)
        elif a.where == "transit":             # D32: never reached the scheduler
            rep.transit.remove(a)
        a.where = "done"

    def v_abort(self, rep: Replica, a: Attempt):
        """async_scheduling (VLLM-MODE.md 31): an abort is processed at once when the engine
        is not waiting for a batch, else when that batch's output arrives, before it."""
        if rep.iteration is not None:
            rep.deferred.append(a)
        else:
            self.v_free(rep, a)
            rep.finished_since_schedule = True

    def v_check(self, rep: Replica):
        b = self.b
        fq = list(rep.fq)
        assert len(set(fq)) == len(fq)
        assert set(fq) == {blk.index for blk in rep.vblocks if blk.ref == 0}
        assert len(fq) + rep.tally[REFERENCED] == self.kv_blocks
        assert rep.tally[REFERENCED] == sum(1 for blk in rep.vblocks if blk.ref > 0)
        assert rep.tally[CACHED] == sum(1 for i in fq if rep.vblocks[i].hash is not None)
        assert rep.tally[FREE] == sum(1 for i in fq if rep.vblocks[i].hash is None)
        # every unhashed block of the queue precedes every hashed one (§1.8)
        seen_hashed = False
        for i in fq:
            if rep.vblocks[i].hash is not None:
                seen_hashed = True
            else:
                assert not seen_hashed, "an unhashed block behind a hashed one in the free queue"
        holders = {}
        for a in rep.running + rep.deferred + rep.skipped:
            for blk in a.blocks:
                holders[blk.index] = holders.get(blk.index, 0) + 1
        for blk in rep.vblocks:
            assert blk.ref == holders.get(blk.index, 0), (blk.index, blk.ref)
            if blk.hash is not None:
                assert self.caching
                assert rep.resident[blk.hash][blk.index] is blk
        assert sum(len(v) for v in rep.resident.values()) == sum(1 for blk in rep.vblocks if blk.hash is not None)
        for a in rep.running:
            assert a.where == "running" and a.replica == rep.index
            assert len(a.blocks) == -(-a.computed // b), (len(a.blocks), a.computed)
            assert 0 < a.computed <= a.P + a.g + a.placeholders and a.g < a.O
            if self.caching:
                for j in range(a.ncached):
                    assert a.blocks[j].hash == self.v_key(a, j)
                if self.asynchronous:
                    # hashed: the blocks full of known tokens at the last allocation, and
                    # up to computed - placeholders at the last output (AS:51-70)
                    assert a.ncached <= min(a.computed, a.P + a.g) // b
                    assert a.ncached >= min(a.computed - a.placeholders, a.P + a.g) // b
                else:
                    assert a.ncached == min(a.computed, a.P + a.g) // b or a.ncached >= a.computed // b
        for a in rep.waiting:
            assert a.where == "waiting" and not a.blocks and a.computed == 0 and a.placeholders == 0
        for a in rep.skipped:                  # WAITING_FOR_REMOTE_KVS: the whole prompt held
            assert a.where == "remote_kv" and a.computed == a.P and len(a.blocks) == -(-a.P // b)
            assert a.ncached == a.read[1] // b or not self.caching
        if self.asynchronous:
            in_flight = {}
            for q in rep.batches:
                for a, x, _c in q["sched"]:
                    in_flight[id(a)] = in_flight.get(id(a), 0) + x
            for a in rep.running + rep.waiting:
                assert a.inflight == in_flight.get(id(a), 0) and 0 <= a.stale <= a.inflight
                assert a.placeholders <= sum(1 for q in rep.batches for s in q["sampled"] if s is a)
            assert len(rep.batches) <= self.BATCH_QUEUE
            assert (rep.iteration is None) or rep.iteration is rep.batches[0]
        assert len(rep.running) <= self.p["max_batch"]
        if rep.down:
            assert not rep.running and not rep.waiting and rep.tally[FREE] == self.kv_blocks

    # ---------------------------------------------------------------- §6 events
    def apply_event(self, ev, T: float):
        _at, kind, i, value = ev
        self.trace.append((T, "event", kind, i, value))
        if kind == "rate_multiplier":
            return
        rep = self.replicas[i]
        if kind == "slowdown":
            rep.slowdown = float(value)
        elif kind == "fail":
            if rep.down:
                return
            rep.down = True
            rep.iteration = None          # abandoned: nothing emitted
            if self.pools:
                self.pd_crash(rep, T)      # issue 42: the pairs it is one side of
            victims = rep.waiting + rep.running + rep.pending_ff + rep.transit
            for a in rep.transit:
                self.trace.append((T, "lost_in_transit", "crash", a.req.index))
            for a in victims:
                a.blocks = []
                a.where = "done"
                self.crash_failures.append(a)
            rep.waiting, rep.running, rep.pending_ff, rep.transit = [], [], [], []
            if self.vllm:                 # VLLM-MODE.md 19: a restarted vLLM, every block free
                for a in rep.deferred:
                    a.blocks = []
                rep.init_vllm(self.kv_blocks)
                return
            for blk in rep.blocks:        # the KV cache is emptied
                rep.set_state(blk, FREE)
                blk.refcount = 0
                blk.id = None
                blk.position = -1
                blk.prev_id = None
                blk.last_use = T
                blk.computed = False
            rep.resident = {}
            rep.freed_uncomputed = False
        elif kind == "fail_fast":
            if rep.down:
                return
            rep.fail_fast = True
        elif kind == "recover":
            if rep.down:
                rep.down = False
                rep.fail_fast = False
                rep.t_up = T
                rep.ready_at = T + self.p["ready_delay_ms"]
                rep.t_e = rep.ready_at
                self.readiness_times.append(rep.ready_at)
            elif rep.fail_fast:
                rep.fail_fast = False

    def cancel(self, a: Attempt, T: float):
        """Remove an attempt from its replica (timeout), releasing its blocks."""
        rep = self.replicas[a.replica]
        if a.pd_stage in ("handoff", "receiving", "transferred"):
            return self.pd_cancel(a, T)
        if self.vllm:
            return self.v_cancel(rep, a)
        if a.where == "waiting":
            rep.waiting.remove(a)
        elif a.where == "running":
            self.release_all(rep, a, T)
            rep.running.remove(a)
        elif a.where == "ff":
            rep.pending_ff.remove(a)
        elif a.where == "transit":
            rep.transit.remove(a)
        a.where = "done"

    def phase_failures(self, T: float):
        failures = [(a, "crash") for a in self.crash_failures]
        self.crash_failures = []
        for a in list(self.in_flight):
            if a.where == "done":
                continue
            # the first-token deadline applies only while the attempt has emitted no token
            # (a token emitted at T came first: phase 1 precedes this phase)
            ttft_due = a.first_token is None and a.ttft_deadline == T
            if (a.ff_time is not None and a.ff_time == T) or a.deadline == T or ttft_due:
                if a.where == "transit":
                    self.trace.append((T, "lost_in_transit", "deadline", a.req.index))
                self.cancel(a, T)
                # one failure: a fast failure first, then a whole-attempt timeout
                if a.ff_time == T:
                    kind = "fast"
                elif a.deadline == T:
                    kind = "timeout"
                else:
                    kind = "ttft_timeout"
                failures.append((a, kind))
        for a, _kind in failures:         # all leave "in flight" first
            self.in_flight.remove(a)
            a.req.current = None
        # a first attempt still held at the front door at its deadline
        # a_r + min(timeout_ms, ttft_timeout_ms) (it has emitted no token)
        for router in self.routers:
            for r in list(router.fifo):
                if self.front_door_deadline(r) == T:
                    router.fifo.remove(r)
                    r.in_fifo = False
                    r.tries += 1
                    a = Attempt(r, r.tries, None, r.router, r.t, r.t + self.p["timeout_ms"],
                                r.t + self.p["ttft_timeout_ms"])
                    a.where = "done"
                    kind = ("front_door_timeout" if self.p["timeout_ms"] <= self.p["ttft_timeout_ms"]
                            else "front_door_ttft_timeout")
                    failures.append((a, kind))
        failures.sort(key=lambda item: item[0].req.index)
        p = self.p
        for a, kind in failures:
            r = a.req
            router = self.routers[a.router]
            i = a.replica
            self.wasted_tokens += a.window_tokens
            if i is not None:
                r.failed_on.add(i)
            self.trace.append((T, "fail", kind, i, r.index, a.number))
            # breaker
            if kind != "crash" and i is not None and p["breaker_consecutive"] > 0:
                router.breaker_count[i] += 1
                if router.ejected_until[i] is None and router.breaker_count[i] >= p["breaker_consecutive"]:
                    ejected_now = sum(1 for x in router.ejected_until if x is not None)
                    limit = max(1, math.floor(p["breaker_max_ejected_fraction"] * self.N))
                    if ejected_now + 1 <= limit:
                        router.times_ejected[i] += 1
                        router.ejected_until[i] = T + p["breaker_eject_ms"] * router.times_ejected[i]
                        if self.in_window_open(T):
                            self.breaker_ejections += 1
                        self.trace.append((T, "eject", a.router, i, router.ejected_until[i]))
            # retry decision
            if a.number < p["max_attempts"]:
                allowed = True
                if p["retry_budget"] != INF:
                    retries = sum(1 for x in self.in_flight if x.router == a.router and x.number >= 2)
                    retries += sum(1 for q in self.backoff if q.router == a.router)
                    attempts = sum(1 for x in self.in_flight if x.router == a.router)
                    allowed = retries < max(p["min_retry_concurrency"], p["retry_budget"] * attempts)
                if allowed:
                    r.retry_due = T + p["backoff_ms"] * 2.0 ** (a.number - 1)
                    self.backoff.append(r)
                    self.trace.append((T, "retry_scheduled", r.index, r.retry_due))
                else:
                    r.outcome = "failed"
                    r.left_at = T
                    self.trace.append((T, "budget_refused", r.index))
            else:
                r.outcome = "failed"
                r.left_at = T

    def phase_joins(self, T: float):
        """D32: the attempts in transit whose join time is T join their replica's waiting
        queue (at its back), in order of join time, then request index."""
        due = [a for a in self.in_flight if a.where == "transit" and a.join_at == T]
        for a in sorted(due, key=lambda a: (a.join_at, a.req.index)):
            rep = self.replicas[a.replica]
            rep.transit.remove(a)
            a.where = "waiting"
            rep.waiting.append(a)
            self.trace.append((T, "join", a.req.index, a.replica))

    def front_door_deadline(self, r: Request) -> float:
        return r.t + min(self.p["timeout_ms"], self.p["ttft_timeout_ms"])

    def phase_readmissions(self, T: float):
        for i in range(self.N):
            for ri, router in enumerate(self.routers):
                if router.ejected_until[i] is not None and router.ejected_until[i] <= T:
                    router.ejected_until[i] = None
                    router.breaker_count[i] = 0
                    self.trace.append((T, "readmit", ri, i))

    # ---------------------------------------------------------------- §3 signals
    def true_view(self, rep: Replica):
        A = self.A
        o = len(rep.waiting) + len(rep.running) + len(rep.pending_ff) + len(rep.receiving) + len(rep.transit)
        tau = 0
        for a in rep.waiting + rep.running + rep.pending_ff + rep.receiving + rep.transit:
            tau += a.P + (a.O if self.exact else max(A, a.g))
        referenced = rep.count(REFERENCED)
        return dict(o=o, tau=tau, referenced=referenced, ids=rep.resident)

    def pub_time(self, i: int) -> float:
        period = self.p["period_ms"]
        return ((i + 1) * period) / self.N + self.pub_k[i] * period

    def phase_publications(self, T: float):
        if self.mode == "fresh":
            return
        for i, rep in enumerate(self.replicas):
            if self.pub_time(i) == T:
                if rep.down:
                    self.published[i] = dict(o=0, tau=0, referenced=0, ids=frozenset())
                else:
                    v = self.true_view(rep)
                    self.published[i] = dict(o=v["o"], tau=v["tau"], referenced=v["referenced"],
                                             ids=frozenset(rep.resident.keys()))
                for router in self.routers:
                    router.local_o[i] = 0
                    router.local_tau[i] = 0
                    router.local_ids[i] = set()
                self.pub_k[i] += 1
                self.trace.append((T, "publish", i, self.published[i]["o"], self.published[i]["tau"]))

    def view(self, router_index: int, i: int):
        if self.mode == "fresh":
            return self.true_view(self.replicas[i])
        pub = self.published[i]
        if self.mode == "periodic":
            return pub
        router = self.routers[router_index]
        return dict(o=pub["o"] + router.local_o[i], tau=pub["tau"] + router.local_tau[i],
                    referenced=pub["referenced"], ids=pub["ids"] | router.local_ids[i])

    # ---------------------------------------------------------------- §5 routing
    def eligible(self, router: Router, T: float) -> list[int]:
        return [i for i, rep in enumerate(self.replicas)
                if not rep.down and len(rep.waiting) + len(rep.transit) < rep.s["waiting_cap"]
                and router.ejected_until[i] is None and T >= rep.ready_at]

    def score(self, name: str, r: Request, v: dict, i: int) -> float:
        """Replica i's score ``name`` for request r, seen as ``v``."""
        if name == "requests":
            return v["o"]
        if name == "tokens":
            return v["tau"] + r.P + self.own_allowance(r)
        if name == "kv":
            return v["referenced"] / self.replicas[i].kv_blocks
        if name == "cost":
            hit = self.hit(r.ids, r.P, 0, v["ids"])
            return self.p["prefill_weight"] * (-(-r.P // self.b) - hit) + v["referenced"]
        raise ValueError(f"unknown score {name!r}")

    def own_allowance(self, r: Request) -> int:
        """The request's own output allowance in P_r + A: A, or O_r when exact."""
        return r.O if self.exact else self.A

    def slow_start(self, s: float, i: int, T: float) -> float:
        p = self.p
        ss = p["slow_start_ms"]
        if ss <= 0 or self.policy not in SLOW_START_POLICIES:
            return s
        t_e = self.replicas[i].t_e
        if T - t_e < ss:
            ramp = ((T - t_e) / ss) ** (1.0 / p["slow_start_aggression"])
            return (s + 1) / max(p["slow_start_min_weight"], ramp)
        return s

    def hash_rule(self, r: Request, i: int) -> float:
        x = r.h + GOLDEN * (i + 1)
        return x - math.floor(x)

    def argmin_with_ties(self, r, cands, scores, ms, tolerance):
        best = min(scores[i] for i in cands)
        tied = [i for i in cands if scores[i] <= best * (1 + tolerance)]
        # largest m, then smallest hash
        return min(tied, key=lambda i: (-ms[i], self.hash_rule(r, i)))

    def choose(self, r: Request, E: list[int], T: float, pol=None) -> int:
        """The policy's pick among E (``pol``: the run's policy unless given)."""
        p = self.p
        pol = pol or self.policy
        router = self.routers[r.router]
        views = {i: self.view(r.router, i) for i in E}
        ms = {i: self.b * self.hit(r.ids, r.P, 0, views[i]["ids"]) for i in E}
        if pol == "round_robin":
            return E[router.cursor % len(E)]
        if pol == "random":
            u = self.uniform()
            return E[min(math.floor(u * len(E)), len(E) - 1)]
        if pol == "rate_weighted":
            u = self.uniform()
            window = p["window_ms"]
            weights = [1 + sum(1 for tc in router.completions[i] if T - window < tc <= T) for i in E]
            Wt = sum(weights)
            cum = 0
            for i, w in zip(E, weights):
                cum += w
                if u * Wt < cum:
                    return i
            return E[-1]
        if pol in ("least_requests", "least_tokens", "least_kv", "least_cost"):
            name = {"least_requests": "requests", "least_tokens": "tokens",
                    "least_kv": "kv", "least_cost": "cost"}[pol]
            scores = {i: self.slow_start(self.score(name, r, views[i], i), i, T) for i in E}
            return self.argmin_with_ties(r, E, scores, ms, p["tie_tolerance"])
        if pol == "power_of_d":
            d = int(p["choices"])
            us = [self.uniform() for _ in range(d)]
            e = list(E)
            dd = min(d, len(e))
            for j in range(dd):
                k = min(j + math.floor(us[j] * (len(e) - j)), len(e) - 1)
                e[j], e[k] = e[k], e[j]
            cands = e[:dd]
            scores = {i: self.slow_start(self.score(p["score"], r, views[i], i), i, T) for i in cands}
            return self.argmin_with_ties(r, cands, scores, ms, p["tie_tolerance"])
        if pol == "prefix_affinity":
            o = {i: views[i]["o"] for i in E}
            max_o, min_o = max(o.values()), min(o.values())
            if max_o - min_o > p["balance_abs"] and max_o > p["balance_rel"] * min_o:
                return self.argmin_with_ties(r, E, o, ms, p["tie_tolerance"])
            best_m = max(ms.values())
            if best_m > p["cache_threshold"] * r.P:
                tied = [i for i in E if ms[i] == best_m]
                return min(tied, key=lambda i: (o[i], self.hash_rule(r, i)))
            n_ids = {i: len(views[i]["ids"]) for i in E}
            fewest = min(n_ids.values())
            tied = [i for i in E if n_ids[i] == fewest]
            return min(tied, key=lambda i: (o[i], self.hash_rule(r, i)))
        if pol == "session_affinity":
            # docs/model.md "Session affinity": the session's home (its turns share h: the
            # candidate of smallest rank), unless it holds more than affinity_balance_abs
            # requests beyond the least loaded and more than affinity_balance_rel times them
            o = {i: views[i]["o"] for i in E}
            home = min(E, key=lambda i: (affinity_rank(r.h, i), i))
            low = min(o.values())
            if o[home] - low > p["affinity_balance_abs"] and o[home] > p["affinity_balance_rel"] * low:
                return self.argmin_with_ties(r, E, o, ms, p["tie_tolerance"])
            return home
        raise ValueError(pol)

    def draw_for_shed(self, pol=None):
        pol = pol or self.policy
        if pol in ("random", "rate_weighted"):
            self.uniform()
        elif pol == "power_of_d":
            for _ in range(int(self.p["choices"])):
                self.uniform()

    def route(self, r: Request, T: float, is_retry: bool) -> str:
        """Route one request at T: returns placed | shed | front_door."""
        if self.pools:
            return self.pd_route(r, T, is_retry)
        p = self.p
        router = self.routers[r.router]
        E = self.eligible(router, T)
        if is_retry and p["retry_avoid_previous"]:
            E2 = [i for i in E if i not in r.failed_on]
            if E2:
                E = E2
        if not E:
            self.draw_for_shed()
            r.outcome = "shed"
            r.left_at = T
            self.trace.append((T, "shed", r.index))
            return "shed"
        if not is_retry:
            limit = p["admission_max_tokens"]
            if all(self.view(r.router, i)["tau"] > limit for i in E):
                return "front_door"
        self.trace.append((T, "view", r.index,
                           {i: (self.view(r.router, i)["o"], self.view(r.router, i)["tau"]) for i in E}))
        i = self.choose(r, E, T)
        self.place(r, i, T)
        return "placed"

    def reach(self, rep, a: Attempt, P: int, T: float):
        """Attempt a (of a P-token prompt) reaches replica rep at T, routed there or handed
        off to it: a black-holed replica fails it fail_fast_ms later; else, after the
        ingress (D32: ingress_ms + ingress_ms_per_token · P, none at 0), it joins the
        back of the waiting queue."""
        ingress = self.p["ingress_ms"] + self.p["ingress_ms_per_token"] * P
        if rep.fail_fast:
            a.ff_time = T + self.p["fail_fast_ms"]
            a.where = "ff"
            rep.pending_ff.append(a)
        elif ingress > 0:
            a.join_at = T + ingress
            a.where = "transit"
            rep.transit.append(a)
        else:
            a.where = "waiting"
            rep.waiting.append(a)

    def place(self, r: Request, i: int, T: float):
        p = self.p
        router = self.routers[r.router]
        rep = self.replicas[i]
        r.attempts += 1
        r.tries += 1
        if r.tries >= 2:
            r.retries_placed += 1
        # decision (c): the first attempt's routing time is the arrival time (both deadlines)
        base = r.t if r.tries == 1 else T
        a = Attempt(r, r.tries, i, r.router, T, base + p["timeout_ms"], base + p["ttft_timeout_ms"])
        self.all_attempts.append(a)
        r.current = a
        r.last_attempt = a
        r.retry_due = None
        self.in_flight.append(a)
        window = self.in_window_open(T)
        if window:
            self.assigned[i] += 1
            self.occupancy_at_placement.append(rep.count(REFERENCED) / rep.kv_blocks)
            self.high_at_placement.append(rep.count(REFERENCED) / rep.kv_blocks > 0.9)
        self.reach(rep, a, r.P, T)
        if window:
            self.max_outstanding[i] = max(self.max_outstanding[i], len(rep.waiting) + len(rep.running)
                                          + len(rep.pending_ff) + len(rep.transit))
        router.cursor += 1
        if self.mode == "periodic_local":
            router.local_o[i] += 1
            router.local_tau[i] += r.P + self.own_allowance(r)
            router.local_ids[i] |= set(r.ids)
        self.trace.append((T, "route", r.index, i, a.number))

    def phase_routing(self, T: float):
        # front-door FIFOs first, in request order of their heads
        blocked = set()
        while True:
            heads = [(router.fifo[0].index, ri) for ri, router in enumerate(self.routers)
                     if router.fifo and ri not in blocked]
            if not heads:
                break
            _k, ri = min(heads)
            router = self.routers[ri]
            r = router.fifo[0]
            res = self.route(r, T, is_retry=False)
            if res == "front_door":
                blocked.add(ri)
            else:
                router.fifo.pop(0)
                r.in_fifo = False
        # then retries and arrivals due at T, in request order
        if self.cap > 0:
            return self.closed_loop_routing(T)
        due = []
        while self.next_arrival < len(self.requests) and self.requests[self.next_arrival].t == T:
            due.append((self.next_arrival, False))
            self.requests[self.next_arrival].arrived = True
            self.next_arrival += 1
        for when, k in [x for x in self.turns_due if x[0] == T]:   # follow-up turns sent now
            self.turns_due.remove((when, k))
            r = self.requests[k]
            r.intended = r.t = T
            r.arrived = True
            if self.W <= T < self.H:
                self.cohort.append(r)
            due.append((k, False))
        for r in self.backoff:
            if r.retry_due == T:
                due.append((r.index, True))
        due.sort()
        for k, is_retry in due:
            r = self.requests[k]
            if is_retry:
                r.retry_due = None
                self.backoff.remove(r)
            res = self.route(r, T, is_retry)
            if res == "front_door":
                self.stopped_at_front_door(r, T)

    def stopped_at_front_door(self, r: Request, T: float):
        """A new request the front door stops: it waits in its router's FIFO, or is rejected."""
        if self.p["admission_mode"] == "queue":
            r.in_fifo = True
            self.routers[r.router].fifo.append(r)
            self.trace.append((T, "fifo", r.index))
        else:
            r.outcome = "rejected"
            r.left_at = T
            self.trace.append((T, "reject", r.index))

    def holds_slot(self, r: Request, T: float) -> bool:
        """A sent request holds a client slot until its final outcome + the overhead."""
        return r.outcome is None or r.left_at + self.overhead > T

    def client_in_flight(self, T: float) -> int:
        return sum(1 for r in self.requests[:self.next_arrival] if self.holds_slot(r, T))

    def closed_loop_routing(self, T: float):
        """Phase 6 after the front door, closed loop: the retries due (all of requests
        already sent, so earlier in request order), then, in request order, each request
        whose intended time has come, while fewer than cap hold a slot (a shed or a
        rejection at T frees its slot at once when the overhead is 0)."""
        for r in sorted((r for r in self.backoff if r.retry_due == T), key=lambda r: r.index):
            r.retry_due = None
            self.backoff.remove(r)
            self.route(r, T, True)   # a retry never meets the front door
        while (self.next_arrival < len(self.requests) and self.requests[self.next_arrival].intended <= T
               and self.client_in_flight(T) < self.cap):
            r = self.requests[self.next_arrival]
            r.arrived = True
            r.t = T
            self.next_arrival += 1
            self.trace.append((T, "send", r.index))
            res = self.route(r, T, False)
            if res == "front_door":
                self.stopped_at_front_door(r, T)

    # =================================================================================
    # Prefill/decode disaggregation (issue 42), read from docs/model.md "Prefill/decode
    # disaggregation" (scheduler = "reserve"): pools, the pair's routing, the prefill
    # replica's dropped token and held blocks, the decode replica's allocation, the
    # transfer over the links (Links), the one-token prefill of the last prompt token.
    # Crashes of either side (mid-transfer too), deadlines, retries and the prefill side's
    # lease follow the page's "Failures"; the closed loop, the front door, the ingress
    # (on the routed replica, and on the decode replica at the hand-off) and black holes
    # (of the routed replica, or of the decode replica at the hand-off) its later paragraphs.
    # =================================================================================
    def pd_init(self):
        p = self.p
        self.pools = int(p["prefill_replicas"]) > 0
        if not self.pools:
            return
        n_p, n_d = int(p["prefill_replicas"]), int(p["decode_replicas"])
        if n_d < 1 or n_p + n_d != self.N:
            raise ValueError(f"prefill ({n_p}) and decode ({n_d}) must be >= 1 and add up to {self.N} replicas")
        if self.vllm:
            raise ValueError("pools need scheduler = 'reserve'")
        if p["pair_route"] not in ("independent", "selective", "transfer_aware"):
            raise ValueError(f"unknown pair_route {p['pair_route']!r}")
        self.role = ["prefill"] * n_p + ["decode"] * n_d
        self.links = Links(p["link_bandwidth_gb_s"] * 1e6, p["link_latency_ms"], window=(self.W, self.H))
        self.pd_held: list[Attempt] = []        # attempts whose prefill replica holds their blocks
        self.pd_handoffs: list[Attempt] = []    # prefills ended at this time, not yet handed off
        self.pd_placements = 0                  # placements in [W, H) (selective: pairs or not)
        self.pd_pairs = 0                       # ... of them sent to a pair

    def pd_policies(self):
        """(prefill policy, decode policy): "same" is the run's policy."""
        p = self.p
        pick = [p[k] if p[k] != "same" else self.policy for k in ("prefill_policy", "decode_policy")]
        return tuple("least_requests" if x == "least_queue" else x for x in pick)

    def pd_route(self, r: Request, T: float, is_retry: bool) -> str:
        """Phase 6 with pools: the pair (p, d), or (selective) the decode replica alone."""
        p = self.p
        rule = p["pair_route"]
        pol_p, pol_d = self.pd_policies()
        E = self.eligible(self.routers[r.router], T)
        E_p = [i for i in E if self.role[i] == "prefill"]
        E_d = [i for i in E if self.role[i] == "decode"]
        if is_retry and p["retry_avoid_previous"]:   # D15, in each pool
            E_p = [i for i in E_p if i not in r.failed_on] or E_p
            E_d = [i for i in E_d if i not in r.failed_on] or E_d
        if not E_p or not E_d:
            for pol in ((pol_p, pol_d) if rule == "independent" else (pol_d, pol_p)):
                self.draw_for_shed(pol)
            r.outcome = "shed"
            r.left_at = T
            self.trace.append((T, "shed", r.index))
            return "shed"
        limit = p["admission_max_tokens"]   # the front door: every eligible replica of both pools above it
        if not is_retry and all(self.view(r.router, i)["tau"] > limit for i in E_p + E_d):
            return "front_door"
        if self.in_window_open(T):
            self.pd_placements += 1
        if rule == "independent":
            i_p = self.choose(r, E_p, T, pol_p)
            i_d = self.choose(r, E_d, T, pol_d)
        else:
            i_d = self.choose(r, E_d, T, pol_d)
            m_d = self.b * self.hit(r.ids, r.P, 0, self.view(r.router, i_d)["ids"])
            if rule == "selective" and r.P - m_d <= p["threshold_tokens"]:
                self.place(r, i_d, T)        # served whole on the decode replica
                return "placed"
            if rule == "selective":
                i_p = self.choose(r, E_p, T, pol_p)
            else:
                i_p = min(E_p, key=lambda i: (self.pd_transfer_cost(r, i, i_d, m_d), self.hash_rule(r, i)))
        if self.in_window_open(T):
            self.pd_pairs += 1
        self.place(r, i_p, T)
        a = r.current
        a.pd_stage = "prefill"
        a.decode_replica = i_d
        a.pd = dict(routed=T, prefill=i_p, decode=i_d)
        if self.in_window_open(T):
            self.assigned[i_d] += 1
        if self.mode == "periodic_local":   # the router sent it to d too
            router = self.routers[r.router]
            router.local_o[i_d] += 1
            router.local_tau[i_d] += r.P + self.own_allowance(r)
            router.local_ids[i_d] |= set(r.ids)
        self.trace.append((T, "pair", r.index, i_p, i_d))
        return "placed"

    def pd_transfer_cost(self, r: Request, i: int, d: int, m_d: int) -> float:
        """transfer_aware: token_ms · (tau_p + P - m_p) + latency + bytes · max(n_out(p) + 1,
        n_in(d) + 1) / B, with the transfers in progress (started, not ended)."""
        p = self.p
        v = self.view(r.router, i)
        m_p = self.b * self.hit(r.ids, r.P, 0, v["ids"])
        n_out = sum(1 for x in self.links.transfers.values() if x["src"] == i)
        n_in = sum(1 for x in self.links.transfers.values() if x["dst"] == d)
        nbytes = (r.P - m_d) * p["kv_bytes_per_token"]
        return (p["transfer_token_ms"] * (v["tau"] + r.P - m_p) + self.links.L
                + nbytes * max(n_out + 1, n_in + 1) / self.links.B)

    def pd_prefilled(self, rep: Replica, s: Attempt, T: float):
        """Phase 1: s's prefill ended on rep (it emits nothing): it leaves the running list,
        keeps its blocks there, and is handed off to its decode replica after the
        iteration ends of every replica."""
        rep.running.remove(s)
        s.held_on = rep.index
        s.held_blocks = s.blocks
        s.blocks = []
        s.kv = s.c = s.u = s.m = 0
        s.replica = s.decode_replica
        s.pd_stage = "handoff"
        s.where = "waiting"
        s.pd["prefill_end"] = T
        self.pd_held.append(s)
        self.pd_handoffs.append(s)
        self.trace.append((T, "prefilled", rep.index, s.req.index))

    def pd_phase1(self, T: float):
        """After the iteration ends at T: the transfers that end at T (in end order, then
        start order: each to the front of its decode replica's waiting queue, those of one
        replica in that order), then the hand-offs, in request order, to the back."""
        if not self.pools:
            return
        for a in [a for a in self.pd_held if a.lease_until == T]:   # leases that run out
            self.pd_release_held(a, T)
        front = {}
        for a in self.links.advance(T):
            self.pd_transferred(a, T)
            front.setdefault(a.replica, []).append(a)
        for i, attempts in front.items():
            self.replicas[i].waiting[0:0] = attempts
        for a in sorted(self.pd_handoffs, key=lambda a: a.req.index):
            self.reach(self.replicas[a.replica], a, a.P, T)   # the decode side's API server, or its black hole
        self.pd_handoffs = []

    def pd_release_held(self, a: Attempt, T: float):
        """The prefill replica releases the blocks it held for a (as a completion does)."""
        blocks, a.blocks = a.blocks, a.held_blocks
        self.release_all(self.replicas[a.held_on], a, T)
        a.blocks = blocks
        a.held_blocks = []
        self.pd_held.remove(a)
        a.held_on = None

    def pd_lose_decode_side(self, a: Attempt, T: float):
        """a's decode side is lost (its decode replica crashed, or a deadline cancelled
        it) while its prefill replica holds its blocks: held until lease_ms from now."""
        if a.held_on is not None:
            a.lease_until = T + self.p["lease_ms"]

    def pd_cancel(self, a: Attempt, T: float):
        """A deadline cancels a on its decode replica, before its one-token step: handed
        off (in the waiting queue, no block there), receiving (the transfer stops, the
        decode replica releases) or transferred (waiting, holding its blocks)."""
        rep = self.replicas[a.replica]
        if a.pd_stage == "receiving":
            assert self.links.abort(a, T) == []
            rep.receiving.remove(a)
        elif a.where == "transit":                  # handed off, on its way to the decode side's scheduler
            rep.transit.remove(a)
        elif a.where == "ff":                       # handed off to a black-holed decode replica
            rep.pending_ff.remove(a)
        else:
            rep.waiting.remove(a)
        self.release_all(rep, a, T)
        self.pd_lose_decode_side(a, T)
        a.where = "done"

    def pd_crash(self, rep: Replica, T: float):
        """Phase 2, rep crashes (before its cache is emptied and its own waiting, running
        and black-holed attempts fail): the attempts it holds blocks for after their
        prefill fail (the read fails: vLLM's kv_load_failure_policy "fail"), their
        decode side letting go; the attempts it was to decode that are still on their
        prefill replica fail there; those it was receiving fail with their transfers
        stopped; every one of them whose blocks another prefill replica holds leaves
        them leased. Each fails as a crash of rep (failed_on, no breaker count)."""
        i = rep.index
        victims = []
        for a in [a for a in self.pd_held if a.held_on == i]:
            a.held_blocks = []                      # emptied with the cache
            self.pd_held.remove(a)
            a.held_on = None
            if a.lease_until is None:               # still on its way: on a decode replica
                self.pd_cancel(a, T)
                victims.append(a)
        for a in [a for a in self.in_flight if a.pd_stage == "prefill" and a.decode_replica == i
                  and a.where != "done"]:
            self.cancel(a, T)
            victims.append(a)
        for a in rep.receiving:
            assert self.links.abort(a, T) == []
            victims.append(a)
        for a in rep.waiting + rep.receiving + rep.transit + rep.pending_ff:
            self.pd_lose_decode_side(a, T)
        rep.receiving = []
        for a in victims:
            a.blocks = []
            a.where = "done"
            a.replica = i
            self.crash_failures.append(a)

    def pd_allocate(self, rep: Replica, h: Attempt, T: float) -> bool:
        """The decode replica's allocation for the handed-off head h: its local hit
        referenced, the rest of ceil(P/b) blocks taken (no budget, outside max_batch),
        and the transfer of P - m_d tokens starts; False when the blocks cannot be had."""
        hit = self.hit(h.ids, h.P, 0, rep.resident)
        if not self.take_planned(rep, h, T):
            return False
        h.m = self.b * hit
        h.where = "receiving"
        h.pd_stage = "receiving"
        rep.receiving.append(h)
        nbytes = (h.P - h.m) * self.p["kv_bytes_per_token"]
        self.links.start(h, T, h.held_on, rep.index, nbytes)
        h.pd.update(transfer_start=T, bytes=nbytes, decode_hit=h.m)
        if self.in_window_open(T):
            self.hit_num += h.m
            self.hit_den += h.P
        self.trace.append((T, "allocate", rep.index, h.req.index, hit))
        return True

    def pd_transferred(self, a: Attempt, T: float):
        """a's transfer ended at T: the prefill replica releases the blocks it held (as a
        completion does), the blocks taken on the decode replica are computed."""
        self.pd_release_held(a, T)
        rep = self.replicas[a.replica]
        rep.receiving.remove(a)
        for j in range(len(a.ids)):
            if a.m <= j * self.b:
                a.blocks[j].computed = True
        a.where = "waiting"
        a.pd_stage = "transferred"
        a.pd["transfer_end"] = T
        self.trace.append((T, "transferred", rep.index, a.req.index))

    def pd_admit_transferred(self, rep: Replica, h: Attempt, T: float, chunks: list) -> int:
        """Admission of a transferred head: its blocks held, kv = P, m = P - 1, u = 1;
        one chunk of one token (the last prompt token's recompute, which samples the
        first token).  Returns the tokens it takes from the budget (1)."""
        rep.waiting.pop(0)
        h.kv = h.P
        h.m = h.P - 1
        h.u = 1
        h.c = 0
        h.where = "running"
        h.pd_stage = "decode"
        h.admit_order = rep.admissions
        rep.admissions += 1
        rep.running.append(h)
        chunks.append((h, 1, h.m, 0))
        self.trace.append((T, "admit", rep.index, h.req.index, -1, 1))
        return 1

    def pd_has_work(self, rep: Replica, T: float) -> bool:
        """Phase 7: does an idle replica start an iteration?  With pools, an idle replica
        with nothing running first allocates for the handed-off heads of its waiting queue
        (no iteration for that); it starts one when something runs or waits to be admitted."""
        if self.pools and not rep.running:
            while rep.waiting and rep.waiting[0].pd_stage == "handoff":
                if not self.pd_allocate(rep, rep.waiting[0], T):
                    break
            return bool(rep.waiting) and rep.waiting[0].pd_stage != "handoff"
        return bool(rep.running or rep.waiting)

    def pd_holdings(self, rep: Replica) -> list:
        """The block lists rep holds for attempts outside its running list (check=True)."""
        if not self.pools:
            return []
        out = [a.held_blocks for a in self.pd_held if a.held_on == rep.index]
        out += [a.blocks for a in rep.receiving]
        out += [a.blocks for a in rep.waiting if a.pd_stage == "transferred"]
        return out

    def pd_results(self, out: dict):
        """The TTFT parts of the completed cohort's disaggregated requests (p50, p99), the
        transfers ended in (W, H] (count, bytes), each replica's link utilisation over
        [W, H] ((bytes out + in) / (2 B (H - W))), the selective rule's share of pairs,
        and each request's way (records)."""
        if not self.pools:
            return
        parts = dict(prefill_queue=[], prefill=[], transfer=[], decode_queue=[])
        for r in self.cohort:
            a = r.last_attempt
            if r.outcome != "completed" or a.pd_stage is None:
                continue
            x = a.pd
            parts["prefill_queue"].append(x["prefill_admit"] - x["routed"])
            parts["prefill"].append(x["prefill_end"] - x["prefill_admit"])
            parts["transfer"].append(x["transfer_end"] - x["transfer_start"])
            parts["decode_queue"].append(r.first_token - x["prefill_end"] - (x["transfer_end"] - x["transfer_start"]))
        for name, values in parts.items():
            out[f"ttft_{name}_p50"] = nearest_rank(values, 50)
            out[f"ttft_{name}_p99"] = nearest_rank(values, 99)
        ended = [(t, nb) for _k, t, nb in self.links.ended if self.in_window_closed(t)]
        out["transfer_count"] = len(ended)
        out["transfer_bytes"] = sum(nb for _t, nb in ended)
        if self.links.now < self.H:   # the window's bytes up to the horizon: the flows after the last change
            assert self.links.advance(self.H) == []   # (no transfer ends there: all were processed)
        span = 2 * self.links.B * (self.H - self.W)
        out["link_utilization"] = [(self.links.moved_out.get(i, 0.0) + self.links.moved_in.get(i, 0.0)) / span
                                   for i in range(self.N)]
        out["disaggregated_share"] = self.pd_pairs / self.pd_placements if self.pd_placements else math.nan
        for rec, r in zip(out["records"], self.requests):
            a = r.last_attempt
            rec["pd"] = dict(a.pd) if a is not None and a.pd_stage is not None else None

    # ---------------------------------------------------------------- main loop
    def next_time(self, after: float):
        c = []
        for rep in self.replicas:
            if rep.iteration is not None:
                c.append(rep.iteration["end"])
            elif self.remote_reads:            # an idle engine polls at a read's end
                c.extend(a.read[3] for a in rep.skipped if a.read[4] is None)
        if self.next_event < len(self.events):
            c.append(float(self.events[self.next_event][0]))
        for a in self.in_flight:
            if a.ff_time is not None:
                c.append(a.ff_time)
            if a.where == "transit":
                c.append(a.join_at)
            if a.deadline != INF:
                c.append(a.deadline)
            if a.first_token is None and a.ttft_deadline != INF:
                c.append(a.ttft_deadline)
        for router in self.routers:
            for x in router.ejected_until:
                if x is not None:
                    c.append(x)
        if self.mode != "fresh":
            for i in range(self.N):
                c.append(self.pub_time(i))
        if self.next_arrival < len(self.requests):
            if self.cap == 0 or self.client_in_flight(after) < self.cap:
                c.append(self.requests[self.next_arrival].intended)
            else:   # the cap is reached: the next send is when a slot frees
                c.extend(r.left_at + self.overhead for r in self.requests[:self.next_arrival]
                         if r.outcome is not None)
        for r in self.backoff:
            c.append(r.retry_due)
        c.extend(when for when, _ in self.turns_due)
        for router in self.routers:
            for r in router.fifo:
                c.append(self.front_door_deadline(r))
        c.extend(self.readiness_times)
        if self.pools and self.links.next_time() < INF:
            c.append(self.links.next_time())
        if self.pools:
            c.extend(a.lease_until for a in self.pd_held if a.lease_until is not None)
        c = [x for x in c if x > after]
        return min(c) if c else None

    def integrate(self, t0: float, t1: float):
        """Referenced blocks held constant over [t0, t1], into the three windows:
        [W, H] (kv_occupancy), [W, W + q] (_first), [H - q, H] (_last)."""
        for areas, a, b in ((self.kv_area, self.W, self.H),
                            (self.kv_area_first, self.W, self.W + self.q),
                            (self.kv_area_last, self.H - self.q, self.H)):
            lo, hi = max(t0, a), min(t1, b)
            if hi > lo:
                for i, rep in enumerate(self.replicas):
                    areas[i] += rep.count(REFERENCED) * (hi - lo)

    def requests_in_system(self) -> int:
        """Every request (cohort or not) arrived and not yet completed, failed for good,
        rejected or shed: at the front door, in a backoff, waiting or running on a
        replica, or pending a fast failure (a direct scan)."""
        return sum(1 for r in self.requests if r.arrived and r.outcome is None)

    def cohort_in_system(self) -> bool:
        """Is any cohort request still in the system?  (Cohort requests all arrive before
        the horizon, and this is asked at times >= H only; an outcome is final, so the
        scan resumes where it last stopped.)"""
        while self.cohort_cursor < len(self.cohort) and self.cohort[self.cohort_cursor].outcome is not None:
            self.cohort_cursor += 1
        return self.cohort_cursor < len(self.cohort)

    def snapshot_before(self, T_next: float):
        """backlog_growth: the state at W (or H) as it stands when the next time to
        process is after it (nothing happened exactly then)."""
        if self.in_system_at_W is None and T_next > self.W:
            self.in_system_at_W = self.requests_in_system()
        if self.in_system_at_H is None and T_next > self.H:
            self.in_system_at_H = self.requests_in_system()
            self.waiting_at_H = len(self.requests) - self.next_arrival

    def run(self):
        """§4 at every time, up to the stop of §7 "Drain": the first time T >= H after
        whose processing no cohort request is in the system (H itself when none is left
        by then), else the limit H + drain_s 1000."""
        prev = -INF
        last_t = 0.0
        while True:
            T = self.next_time(prev)
            T_next = INF if T is None else T
            self.snapshot_before(T_next)
            if T_next > self.H and not self.cohort_in_system():
                self.stop = self.H          # nothing after the horizon is processed
                break
            if T_next > self.limit:
                self.stop = self.limit       # the drain ran out (drain_s = 0: the horizon)
                break
            self.integrate(last_t, T)
            last_t = T
            prev = T
            # (1) iteration ends, replicas in id order
            for rep in self.replicas:
                if rep.iteration is not None and rep.iteration["end"] == T:
                    self.end_iteration(rep, T)
            self.pd_phase1(T)    # issue 42: transfer ends, then hand-offs
            # (2) scenario events
            while self.next_event < len(self.events) and self.events[self.next_event][0] == T:
                self.apply_event(self.events[self.next_event], T)
                self.next_event += 1
            # (3) attempt failures observed at T
            self.phase_failures(T)
            # (4) breaker re-admissions
            self.phase_readmissions(T)
            # (5) signal publications
            self.phase_publications(T)
            # (6) routing
            self.phase_routing(T)
            # (7) the attempts in transit that join now (D32), then iteration starts of idle
            # replicas with work
            self.phase_joins(T)
            for rep in self.replicas:
                if not rep.down and rep.iteration is None and (
                        self.v_has_work(rep) if self.vllm else self.pd_has_work(rep, T)):
                    self.start_iteration(rep, T)
            if self.check:
                self.check_invariants(T)
            if T == self.W:
                self.in_system_at_W = self.requests_in_system()
            if T == self.H:
                self.in_system_at_H = self.requests_in_system()
                self.waiting_at_H = len(self.requests) - self.next_arrival
            if T >= self.H and not self.cohort_in_system():
                self.stop = T
                break
        self.snapshot_before(INF)
        self.integrate(last_t, self.H)
        return self.results()

    # ---------------------------------------------------------------- invariants
    def check_invariants(self, T: float):
        p = self.p
        b = self.b
        for rep in self.replicas:
            if self.vllm:
                self.v_check(rep)
                continue
            free, ref, cached = rep.scan_count(FREE), rep.scan_count(REFERENCED), rep.scan_count(CACHED)
            assert free + ref + cached == rep.kv_blocks
            assert (free, ref, cached) == (rep.count(FREE), rep.count(REFERENCED), rep.count(CACHED))
            assert sorted(rep.free_stack) == [blk.index for blk in rep.blocks if blk.state == FREE]
            holders = {}
            for blocks in self.pd_holdings(rep):    # issue 42: held, receiving, transferred
                for blk in blocks:
                    holders[blk.index] = holders.get(blk.index, 0) + 1
            for a in rep.running:
                assert a.where == "running" and a.replica == rep.index
                assert len(a.blocks) == -(-a.kv // b), (len(a.blocks), a.kv)
                for j, blk in enumerate(a.blocks):
                    holders[blk.index] = holders.get(blk.index, 0) + 1
                    if j < len(a.ids):
                        assert blk.id == a.ids[j]
                    else:
                        assert blk.id is None
                assert 0 <= a.c <= a.u
                assert a.g < a.O
                assert a.kv == a.P + a.g      # reserved at admission, grown by one per decode step
                assert a.decoding() == (a.c == a.u) and (not a.decoding() or a.g >= 1)
            for a in rep.waiting:
                assert a.where == "waiting" and (a.pd_stage == "transferred" or not a.blocks and a.kv == 0)
            for blk in rep.blocks:
                assert blk.refcount == holders.get(blk.index, 0), blk
                if blk.state == REFERENCED:
                    assert blk.refcount > 0
                    if blk.id is None:
                        assert blk.refcount == 1
                elif blk.state == CACHED:
                    assert blk.refcount == 0 and blk.id is not None
                else:
                    assert blk.refcount == 0 and blk.id is None
                if blk.id is not None:
                    assert rep.resident.get(blk.id) is blk
            assert len(rep.resident) == sum(1 for blk in rep.blocks if blk.id is not None)
            # prefix closure: the predecessor in the prompt that made a block resident is
            # resident -- until an uncomputed block is freed (§2 "Computed blocks": blocks
            # computed after a hit on uncomputed ones may stay cached after those go)
            if not rep.freed_uncomputed:
                for bid, blk in rep.resident.items():
                    if blk.position > 0:
                        assert blk.prev_id in rep.resident, (bid, blk)
                for a in rep.running + rep.waiting:
                    k = 0
                    while k < len(a.ids) and a.ids[k] in rep.resident:
                        k += 1
                    assert all(x not in rep.resident for x in a.ids[k:])
            # computed blocks: every cached block is computed; the rule of §2 holds for every
            # running sequence (not only for those that computed a chunk in the last iteration)
            for blk in rep.blocks:
                if blk.state == CACHED:
                    assert blk.computed, blk
            for a in rep.running:
                for j in range(len(a.ids)):
                    if a.m <= j * b and a.m + a.c >= (j + 1) * b:
                        assert a.blocks[j].computed, (a.req.index, j, a.blocks[j])
            assert len(rep.running) <= rep.s["max_batch"]
            fresh_waiting = sum(1 for a in rep.waiting if a.g == 0 and a.admit_order < 0)
            routed_transit = sum(1 for a in rep.transit if a.pd_stage != "handoff")   # (a hand-off: not routed)
            assert fresh_waiting + routed_transit <= rep.s["waiting_cap"]
            if rep.down:
                assert not rep.running and not rep.waiting and not rep.pending_ff and free == rep.kv_blocks
            for a in rep.pending_ff:
                assert a.where == "ff" and not a.blocks
        for rep in self.replicas:
            for a in rep.transit:
                assert a.where == "transit" and not a.blocks and a.join_at > T and not rep.down
        for a in self.in_flight:
            assert a.where in ("waiting", "running", "ff", "receiving", "remote_kv", "transit")
            assert a.req.current is a and a.req.outcome is None
        for r in self.requests:
            if not r.arrived:
                continue
            states = [r.outcome is not None, r.current is not None, r.retry_due is not None, r.in_fifo]
            assert sum(states) == 1, (r.index, states)
            assert (r.retry_due is not None) == (r in self.backoff)

    # ---------------------------------------------------------------- §7 metrics
    def results(self) -> dict:
        p = self.p
        W, H = self.W, self.H
        measure_s = p["measure_s"]
        cohort = [r for r in self.requests if W <= r.intended < H]
        counts = dict(completed=0, failed=0, rejected=0, shed=0, unfinished=0)
        ttft, tpot, e2e = [], [], []
        excess = []             # TTFT minus the request's own objective (issue 44: scaled to its prompt)
        allowance = p.get("slo_ttft_ms_per_prompt_token", 0.0)
        ttft_on = [[] for _ in range(self.N)]
        good = 0
        good_set = set()
        attempts = retries = 0
        waits = []
        ovh = self.overhead     # the client measures its TTFT and E2E with its overhead
        for r in cohort:
            outcome = r.outcome if r.outcome is not None else "unfinished"
            counts[outcome] += 1
            attempts += r.attempts
            retries += r.retries_placed
            if r.arrived:
                waits.append(r.t - r.intended)
            if outcome == "completed":
                ttft.append(r.ttft + ovh)
                ttft_on[r.done_on].append(r.ttft + ovh)
                e2e.append(r.completion - r.t + ovh)
                target = p["slo_ttft_ms"] + allowance * r.P
                excess.append(r.ttft + ovh - target)
                ok = r.ttft + ovh <= target
                if r.O >= 2:
                    x = (r.completion - r.first_token) / (r.O - 1)
                    tpot.append(x)
                    ok = ok and x <= p["slo_tpot_ms"]
                if ok:
                    good += 1
                    good_set.add(r)
        arrivals = len(cohort)
        assert arrivals == sum(counts.values())
        out = dict(arrivals=arrivals, **counts)
        for name, vals in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
            for q in (50, 90, 99):
                out[f"{name}_p{q}"] = nearest_rank(vals, q)
        out["e2e_mean"] = sum(e2e) / len(e2e) if e2e else math.nan
        out["ttft_excess_p99"] = nearest_rank(excess, 99) if allowance > 0 else math.nan
        out["client_wait_p50"] = nearest_rank(waits, 50)
        out["client_wait_p99"] = nearest_rank(waits, 99)
        out["client_wait_mean"] = sum(waits) / len(waits) if waits else math.nan
        out["client_waiting"] = self.waiting_at_H
        out["attainment"] = good / arrivals if arrivals else math.nan
        out["goodput"] = good / measure_s
        out["throughput"] = self.completions_window / measure_s
        out["token_throughput"] = self.tokens_window / measure_s
        out["wasted_tokens"] = self.wasted_tokens
        out["preemptions"] = self.preemptions
        out["breaker_ejections"] = self.breaker_ejections
        out["prefix_hit_rate"] = self.hit_num / self.hit_den if self.hit_den else math.nan
        out["preempted_hit_rate"] = (self.preempted_hit_num / self.preempted_hit_den
                                     if self.preempted_hit_den else math.nan)
        span = H - W
        kv = [rep.kv_blocks for rep in self.replicas]   # each replica's share of its own pool
        out["kv_occupancy"] = (sum(area / span / k for area, k in zip(self.kv_area, kv)) / self.N
                               if span > 0 else math.nan)
        q = self.q
        out["kv_occupancy_first"] = sum(area / q / k for area, k in zip(self.kv_area_first, kv)) / self.N
        out["kv_occupancy_last"] = sum(area / q / k for area, k in zip(self.kv_area_last, kv)) / self.N
        out["backlog_growth"] = self.in_system_at_H - self.in_system_at_W
        # attainment of the cohort arriving in the window's first and last quarter
        for name, lo, hi in (("attainment_first", W, W + q), ("attainment_last", H - q, H)):
            part = [r for r in cohort if lo <= r.intended < hi]
            out[name] = sum(r in good_set for r in part) / len(part) if part else math.nan
        # ITL: every gap between consecutive tokens of one attempt, by its later token's time
        gaps = []
        for a in self.all_attempts:
            for j in range(1, len(a.token_times)):
                if self.in_window_closed(a.token_times[j]):
                    gaps.append(a.token_times[j] - a.token_times[j - 1])
        for qq in (50, 90, 99):
            out[f"itl_p{qq}"] = nearest_rank(gaps, qq)
        out["itl_max"] = max(gaps) if gaps else math.nan
        out["stop"] = self.stop             # not a contract metric: for tests
        out["batch_mean"] = self.batch_num / self.batch_den if self.batch_den else math.nan
        out["attempts"] = attempts
        out["retries"] = retries
        out["assigned"] = list(self.assigned)
        out["replica_completed"] = list(self.replica_completed)
        out["replica_tokens"] = list(self.replica_tokens)
        occ = self.occupancy_at_placement
        out["placement_occupancy"] = sum(occ) / len(occ) if occ else math.nan
        high = self.high_at_placement
        out["placement_occupancy_high"] = sum(high) / len(high) if high else math.nan
        out["replica_max_outstanding"] = list(self.max_outstanding)
        out["replica_ttft_p50"] = [nearest_rank(v, 50) for v in ttft_on]
        out["replica_ttft_p99"] = [nearest_rank(v, 99) for v in ttft_on]
        out["records"] = [dict(outcome=r.outcome if r.outcome is not None else "unfinished",
                               arrival=r.intended, sent=r.t if r.arrived else None,
                               ttft=r.ttft, completion=r.completion, left_at=r.left_at,
                               first_token=r.first_token, attempts=r.attempts)
                          for r in self.requests]
        self.pd_results(out)
        return out


class Links:
    """Prefill/decode disaggregation's KV transfers over the replicas' links, read
    literally from docs/model.md "The transfer and the link model" (issue 42).

    A transfer started at ``t0`` waits ``latency_ms`` using no bandwidth, then its bytes
    flow.  Every replica has one outgoing and one incoming link of ``bandwidth`` bytes/ms
    (GB/s × 10**6); while n_out(p) transfers flow out of p and n_in(d) into d, each flows
    at min(B / n_out(p), B / n_in(d)); rates change only when a transfer starts or ends
    flowing; a transfer ends when its last byte has flowed.  No max-min redistribution.

    Plain piecewise-constant integration: ``advance(T)`` walks every time in (now, T]
    at which something starts or ends flowing, moving each flowing transfer's bytes at
    its rate over each piece.  Transfers are keyed by the caller (a request, say) and
    kept in start order, the order of ends at one time.
    """

    def __init__(self, bandwidth: float, latency_ms: float, window=(0.0, 0.0)):
        self.B = bandwidth
        self.L = latency_ms
        self.now = 0.0
        self.transfers = {}   # key -> dict(src, dst, start, flows_at, left, bytes), start order
        self.ended = []       # (key, end time, bytes) in end order
        self.window = window  # (W, H): the bytes that flow in it, per replica and direction
        self.moved_out = {}
        self.moved_in = {}

    def start(self, key, T: float, src: int, dst: int, nbytes: float):
        """A transfer of ``nbytes`` from replica ``src`` to ``dst`` starts at ``T``."""
        assert T >= self.now and key not in self.transfers
        assert self.advance(T) == [], "the caller advances to T (and handles its ends) first"
        self.transfers[key] = dict(src=src, dst=dst, start=T, flows_at=T + self.L, left=float(nbytes),
                                   bytes=float(nbytes))

    def flowing(self, T: float) -> list:
        """The keys of the transfers whose bytes flow at ``T`` (latency over, bytes left)."""
        return [k for k, x in self.transfers.items() if x["flows_at"] <= T]

    def rates(self, T: float) -> dict:
        """key -> bytes/ms of every transfer flowing at ``T``."""
        keys = self.flowing(T)
        n_out, n_in = {}, {}
        for k in keys:
            x = self.transfers[k]
            n_out[x["src"]] = n_out.get(x["src"], 0) + 1
            n_in[x["dst"]] = n_in.get(x["dst"], 0) + 1
        return {k: min(self.B / n_out[self.transfers[k]["src"]], self.B / n_in[self.transfers[k]["dst"]])
                for k in keys}

    def next_time(self) -> float:
        """The next time something starts or ends flowing (inf: nothing is in transfer)."""
        t = INF
        for k, x in self.transfers.items():
            if x["flows_at"] > self.now:
                t = min(t, x["flows_at"])
        for k, r in self.rates(self.now).items():
            t = min(t, self.now + self.transfers[k]["left"] / r)
        return t

    def advance(self, T: float) -> list:
        """Everything up to and at ``T``: the keys of the transfers that ended, in end
        order (at one time, in start order)."""
        out = []
        while True:
            t = self.next_time()
            if t > T:
                break
            for k in self._flow(t):
                x = self.transfers.pop(k)
                self.ended.append((k, t, x["bytes"]))
                out.append(k)
        if T > self.now:
            assert self._flow(T) == []
        return out

    def _flow(self, t: float) -> list:
        """Every flowing transfer's bytes from now to ``t`` at its rate (no rate changes
        in between); the keys of those whose last byte flows at ``t``."""
        done = []
        W, H = self.window
        overlap = max(0.0, min(t, H) - max(self.now, W))
        for k, r in self.rates(self.now).items():
            x = self.transfers[k]
            if self.now + x["left"] / r == t:   # this piece's end is this transfer's
                x["left"] = 0.0
                done.append(k)
            else:
                x["left"] -= r * (t - self.now)
            if overlap > 0:
                self.moved_out[x["src"]] = self.moved_out.get(x["src"], 0.0) + r * overlap
                self.moved_in[x["dst"]] = self.moved_in.get(x["dst"], 0.0) + r * overlap
        self.now = t
        return done

    def abort(self, key, T: float):
        """The transfer ``key`` stops at ``T`` (a crash of either end): its link shares
        go to the others from then on.  Returns what ended up to T (see advance)."""
        out = self.advance(T)
        del self.transfers[key]
        return out


def simulate(workload: Workload, params: dict, factors: list[float], events: list, policy: str,
             seed: int, check: bool = False, _return_sim: bool = False,
             log_steps: bool = False) -> dict:
    """One run of the batching model (token-model.md §2-§7); see the module docstring."""
    sim = _Sim(workload, params, factors, events, policy, seed, check, log_steps)
    out = sim.run()
    if log_steps:
        out["step_log"] = dict(steps=sim.step_log, requests=[
            dict(id=r.index, completion_ms=r.completion,
                 # the last attempt's first token (a request that failed after its first
                 # token has one too: the driver records it, VLLM-MODE.md 18)
                 first_token_ms=r.last_attempt.first_token if r.last_attempt else r.first_token,
                 preemptions=r.last_attempt.preemptions if r.last_attempt else 0,
                 hits=list(r.last_attempt.hits) if r.last_attempt else [],
                 **({"load": r.last_attempt.read} if r.remote is not None and r.last_attempt else {}))
            for r in sim.requests])
    if _return_sim:
        out["_sim"] = sim
    return out
