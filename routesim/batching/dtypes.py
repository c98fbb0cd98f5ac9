"""Record dtypes and integer codes of the batching model (token-model.md), and beside a
record dtype the compiled resets of its records (a replica's or a request's fields as
at a run's start, or as a crash leaves them).

Every dtype is aligned so it maps onto a C struct inside Numba. Times in ms, sizes in
tokens or KV blocks as each field says.
"""

from enum import IntEnum

import numba as nb
import numpy as np

from ..conf import JIT
from ..step_cost import COEFFICIENTS


class Score(IntEnum):
    """``policy.score``: what power_of_d compares (§5)."""

    REQUESTS = 0
    TOKENS = 1
    KV = 2
    COST = 3


class Signals(IntEnum):
    """``signals.mode`` (§3)."""

    FRESH = 0
    PERIODIC = 1
    PERIODIC_LOCAL = 2


class Scheduler(IntEnum):
    """``replica.scheduler`` (docs/model.md "scheduler = \"vllm\"")."""

    RESERVE = 0    # token-model.md §2: a prompt's whole KV reserved at admission
    VLLM = 1       # vLLM V1 0.30.0's scheduler and KV-cache manager (routesim/batching/vllm_replica.py)
    VLLM_ASYNC = 2  # the same with vLLM's asynchronous scheduling (async_scheduling; vllm_async_replica.py)


VLLM_MODE = (Scheduler.VLLM, Scheduler.VLLM_ASYNC)
"""The codes of ``scheduler = "vllm"``, either loop: their runs report the vllm mode's
variables (metrics.VLLM_VARIABLES). A new vLLM loop adds its code here."""


class Role(IntEnum):
    """A replica's role: the pool it serves in (routesim/batching/pools.py). Every replica
    is ``COLOCATED`` today (prefill and decode on one replica); ``PREFILL`` and ``DECODE``
    are the pools of a disaggregated cluster, to come."""

    COLOCATED = 0
    PREFILL = 1
    DECODE = 2


class PairRoute(IntEnum):
    """How a router picks a (prefill, decode) pair (``[pools] route``, pd_keys.ROUTES)."""

    INDEPENDENT = 0
    SELECTIVE = 1
    TRANSFER_AWARE = 2


class PdStage(IntEnum):
    """Where a disaggregated attempt is on its way (docs/model.md "Prefill/decode
    disaggregation"; ``REQUEST.pd``). ``NONE``: a co-located attempt (or one served whole
    on a decode replica by the selective rule)."""

    NONE = 0
    PREFILL = 1      # on its prefill replica (waiting or running)
    HANDOFF = 2      # prefilled: in its decode replica's waiting queue, no block there
    RECEIVING = 3    # blocks allocated on the decode replica, its transfer in progress
    TRANSFERRED = 4  # transfer ended: at the front of the decode replica's waiting queue
    DECODE = 5       # admitted on the decode replica (its one-token step, then decoding)


class Admission(IntEnum):
    """``router.admission.mode`` (§6)."""

    REJECT = 0
    QUEUE = 1


class EventKind(IntEnum):
    """Scenario event codes of the batching model (§6 and model.md §4)."""

    RATE = 0       # folded into the workload's arrival times
    SLOWDOWN = 1
    FAIL = 2
    RECOVER = 3
    FAIL_FAST = 4


EVENT_NAMES = {EventKind.RATE: "rate_multiplier", EventKind.SLOWDOWN: "slowdown", EventKind.FAIL: "fail",
               EventKind.FAIL_FAST: "fail_fast", EventKind.RECOVER: "recover"}
"""Each event kind by the key that states it in a sweep file (and in a trace's ``event_kind``)."""


class Fate(IntEnum):
    """What became of a request (§7): exactly one per cohort request."""

    PENDING = 0     # not yet routed, or in flight
    COMPLETED = 1
    FAILED = 2
    REJECTED = 3
    SHED = 4


SETTINGS = (
    ("waiting_cap", np.int64),        # requests (runs.UNBOUNDED: inf)
    ("max_batch", np.int64),          # sequences
    ("kv_blocks", np.int64),          # blocks per replica
    ("max_batched_tokens", np.int64),
    ("chunked_prefill", np.bool_),
    ("step_cost", np.int64),          # step-cost code (routesim.step_cost: FORMS[code])
    ("cost", np.float64, (COEFFICIENTS,)),  # its coefficients, in its PARAMS order (ms, or 1)
    ("step_cpu_ms", np.float64),      # the engine loop: CPU time of a step, and per sequence
    ("step_cpu_ms_per_seq", np.float64),
)
"""A replica's settings that a pool may set for itself (routesim/batching/pd_keys.py
``POOL_KEYS``): PARAMS holds them for the run (``[replica]``'s) and for each pool
(``prefill_<name>``, ``decode_<name>``), and each REPLICA record its own pool's
(runs.replica_records), which is what the engine reads."""
SETTING_NAMES = tuple(f[0] for f in SETTINGS)

PARAMS = np.dtype(
    [
        ("policy", np.int32),             # policy code (routesim.batching.policies: POLICIES[code])
        ("score", np.int32),              # Score code (power_of_d)
        ("n_replicas", np.int64),
        ("waiting_cap", np.int64),        # requests
        ("max_batch", np.int64),          # sequences
        ("kv_blocks", np.int64),          # blocks per replica
        ("block_tokens", np.int64),       # b
        ("max_batched_tokens", np.int64),
        ("chunked_prefill", np.bool_),
        ("scheduler", np.int64),          # Scheduler code
        ("prefix_caching", np.bool_),     # scheduler = "vllm": blocks are hashed and hit
        ("step_cost", np.int64),          # step-cost code (routesim.step_cost: FORMS[code])
        ("cost", np.float64, (COEFFICIENTS,)),  # its coefficients, in its PARAMS order (ms, or 1)
        ("warmup_ms", np.float64),
        ("horizon_ms", np.float64),
        ("limit_ms", np.float64),         # horizon + drain: nothing after it is processed
        ("quarter_ms", np.float64),       # q = measure_s · 250 (kv_occupancy_first/last)
        ("slo_ttft_ms", np.float64),
        ("slo_ttft_ms_per_token", np.float64),  # a request's TTFT target: slo_ttft_ms + this · P
        ("slo_tpot_ms", np.float64),
        ("choices", np.int64),            # d
        ("allowance", np.int64),          # A, tokens
        ("exact_output", np.bool_),       # allowance_tokens = "exact": A becomes each request's O
        ("tie_tolerance", np.float64),
        ("prefill_weight", np.float64),   # w of the cost score
        ("balance_abs", np.float64),
        ("balance_rel", np.float64),
        ("cache_threshold", np.float64),
        ("affinity_balance_abs", np.float64),  # session_affinity's overload rule
        ("affinity_balance_rel", np.float64),
        ("window_ms", np.float64),
        ("slow_start_ms", np.float64),
        ("slow_start_aggression", np.float64),
        ("slow_start_min_weight", np.float64),
        ("cold_factor", np.float64),
        ("cold_tau_ms", np.float64),
        ("ready_delay_ms", np.float64),
        ("fail_fast_ms", np.float64),
        ("step_cpu_ms", np.float64),          # the engine loop: CPU time of a step, and per sequence
        ("step_cpu_ms_per_seq", np.float64),
        ("ingress_ms", np.float64),           # the engine loop: an attempt's way to the scheduler, and per prompt token
        ("ingress_ms_per_token", np.float64),
        ("signal_mode", np.int64),        # Signals code
        ("period_ms", np.float64),
        ("routers", np.int64),
        ("timeout_ms", np.float64),       # inf: none
        ("ttft_timeout_ms", np.float64),  # first-token deadline from routing; inf: none
        ("max_attempts", np.int64),
        ("backoff_ms", np.float64),
        ("retry_avoid_previous", np.bool_),
        ("retry_budget", np.float64),     # inf: none
        ("min_retry_concurrency", np.int64),
        ("breaker_consecutive", np.int64),  # 0: off
        ("breaker_eject_ms", np.float64),
        ("breaker_max_ejected_fraction", np.float64),
        ("admission_max_tokens", np.float64),  # inf: off
        ("admission_mode", np.int64),     # Admission code
        ("max_in_flight", np.int64),      # closed-loop client: requests in flight at most (0: open loop)
        ("client_overhead_ms", np.float64),  # added to the TTFT and E2E the client measures, and to its slots
        # prefill/decode disaggregation ([pools], routesim/batching/pd_keys.py): 0 prefill replicas, co-located
        ("prefill_replicas", np.int64),   # replicas 0 .. prefill_replicas-1 serve in the prefill pool
        ("pair_route", np.int64),         # PairRoute code
        ("prefill_policy", np.int32),     # policy codes ("same" resolved to the run's policy)
        ("decode_policy", np.int32),
        ("threshold_tokens", np.int64),   # selective: uncached prompt tokens served whole on the decode replica
        ("transfer_token_ms", np.float64),  # transfer_aware: ms per token of prefill work ahead
        ("lease_ms", np.float64),         # held blocks outlive a lost decode side by this
        ("link_latency_ms", np.float64),
        ("link_bandwidth", np.float64),   # bytes/ms (GB/s × 10⁶) of each replica's link each way
        ("kv_bytes_per_token", np.int64),
        ("most_batch", np.int64),         # the largest max_batch and kv_blocks of the run's replicas (scratch sizes)
        ("most_kv_blocks", np.int64),
        *((f"{role}_{f[0]}", *f[1:]) for role in ("prefill", "decode") for f in SETTINGS),  # each pool's settings
        ("event_start", np.int64),        # first row of this run's scenario in the event table
        ("event_count", np.int64),
        ("workload", np.int64),           # index of this run's workload and router stream
    ],
    align=True,
)
"""Everything one run needs besides its workload, factors and events: shape ``(runs,)``."""

class State(IntEnum):
    """Where a request's current attempt is."""

    NONE = 0       # not routed yet, or finished
    WAITING = 1    # in a replica's waiting FIFO
    PREFILL = 2    # running, computing its prompt (c < u)
    DECODE = 3     # running, one token an iteration
    BLACKHOLE = 4  # placed on a replica failing fast: fails fail_fast_ms after routing
    BACKOFF = 5    # failed, its retry due at ``retry_ms``
    FRONT = 6      # held at its router's front door
    TRANSIT = 7    # routed, on its way to the replica's scheduler (ingress): joins its waiting queue later


class Due(IntEnum):
    """What a replica's schedule holds for a decoding sequence at an iteration."""

    OVER = 1       # at the end: g reaches the allowance A (τ grows with it from now on)
    DONE = 2       # at the end: its last token


REPLICA = np.dtype(
    [
        ("factor", np.float64),     # time factor of the heterogeneity setting (1 = reference)
        ("role", np.int64),         # Role code: the pool it serves in (the stage's input, like factor)
        *SETTINGS,                  # its pool's settings (the stage's input: runs.replica_records)
        ("slowdown", np.float64),   # scenario slowdown in force
        ("healthy", np.bool_),      # not down
        ("fail_fast", np.bool_),    # a black hole: eligible, fails every attempt
        ("cold", np.bool_),         # recovered from down at t_up: its time factor decays
        ("t_up", np.float64),
        ("ready_ms", np.float64),   # eligible from this time
        ("t_e", np.float64),        # last became healthy and ready (slow start)
        ("n_bh", np.int64),         # attempts black-holed here, pending their failure
        ("tau_bh", np.int64),       # their share of τ_i
        ("n_tr", np.int64),         # attempts in transit to this replica's scheduler (ingress)
        ("tau_tr", np.int64),       # their share of τ_i
        ("busy", np.bool_),         # an iteration is in progress
        ("end_ms", np.float64),     # when it ends
        ("begin_ms", np.float64),   # when it began (its decoding sequences' previous token)
        ("started", np.int64),      # iterations started (the one in progress is started - 1)
        ("n_run", np.int64),        # running sequences
        ("r_head", np.int64),       # running list, admission order: REQUEST.r_prev/r_next
        ("r_tail", np.int64),
        ("n_pre", np.int64),        # prefilling sequences (the replica's row of ``prefill``)
        ("n_dec", np.int64),        # decoding sequences
        ("kv_dec", np.int64),       # Σ kv over the decoding sequences (between iterations)
        ("n_over", np.int64),       # decoding sequences with g ≥ A
        ("w_head", np.int64),       # waiting FIFO: REQUEST.w_next
        ("w_tail", np.int64),
        ("n_wait", np.int64),
        ("anon", np.int64),         # referenced anonymous blocks
        ("idref", np.int64),        # referenced id'd blocks (refcount > 0)
        ("cached", np.int64),       # resident id'd blocks with refcount 0
        ("tau", np.int64),          # τ_i: Σ P_s + max(A, g_s) over waiting and running
        ("area", np.float64),       # ∫ referenced blocks dt over [warm-up, horizon] so far
        ("area_first", np.float64), # the same over the window's first quarter [warm-up, warm-up + q]
        ("area_last", np.float64),  # ... and its last, [horizon − q, horizon]
        ("area_ms", np.float64),    # time up to which the areas are integrated
        ("assigned", np.int64),     # attempts routed here in [warm-up, horizon)
        ("completed", np.int64),    # completions here in (warm-up, horizon]
        ("tokens", np.int64),       # tokens emitted here in (warm-up, horizon]
        ("placed", np.int64),       # attempts routed here, the whole run (timelines)
        ("done_all", np.int64),     # completions here, the whole run
        ("tokens_all", np.int64),   # tokens emitted here, the whole run
        ("max_out", np.int64),      # most attempts here (waiting, running, black-holed) just after a placement in [warm-up, horizon)
        ("occ_sum", np.float64),    # Σ referenced blocks / kv_blocks here at placements in [warm-up, horizon)
        ("n_recv", np.int64),       # disaggregation: attempts receiving their KV here (in o_i and τ_i)
        ("link_util", np.float64),  # disaggregation: link utilisation over the window (finished at the end)
        ("occ_high", np.int64),     # placements here in [warm-up, horizon) with referenced blocks > 0.9 kv_blocks
        ("ttft_p50", np.float64),   # TTFT percentiles of cohort requests completed here (finished at the end)
        ("ttft_p99", np.float64),
    ],
    align=True,
)
"""One replica's state and counters: shape ``(runs, replicas)`` on output."""


@nb.njit(**JIT)
def empty_nb(r):
    """Replica record r holds no work: no iteration, nothing running, waiting or
    black-holed (a run's start, or a crash)."""
    r.busy = False
    r.end_ms = np.inf
    r.n_run = 0
    r.r_head = -1
    r.r_tail = -1
    r.n_pre = 0
    r.n_dec = 0
    r.kv_dec = 0
    r.n_over = 0
    r.w_head = -1
    r.w_tail = -1
    r.n_wait = 0
    r.tau = 0
    r.n_bh = 0
    r.tau_bh = 0
    r.n_tr = 0
    r.tau_tr = 0
    r.n_recv = 0


@nb.njit(**JIT)
def start_replica_nb(r):
    """Replica record r as at a run's start: up, warm, ready, empty, every counter and
    area zero. Its ``factor``, ``role`` and settings (the stage's input) are kept; ``begin_ms`` is set by each
    iteration before it is read, the TTFT percentiles at the run's end."""
    r.slowdown = 1.0
    r.healthy = True
    r.fail_fast = False
    r.cold = False
    r.t_up = 0.0
    r.ready_ms = 0.0
    r.t_e = 0.0
    empty_nb(r)
    r.started = 0
    r.anon = 0
    r.idref = 0
    r.cached = 0
    r.area = 0.0
    r.area_first = 0.0
    r.area_last = 0.0
    r.area_ms = 0.0
    r.assigned = 0
    r.completed = 0
    r.tokens = 0
    r.placed = 0
    r.done_all = 0
    r.tokens_all = 0
    r.max_out = 0
    r.occ_sum = 0.0
    r.occ_high = 0
    r.link_util = 0.0


REQUEST = np.dtype(
    [
        ("P", np.int64),            # prompt tokens
        ("O", np.int64),            # output tokens
        ("A", np.int64),            # its output allowance in τ: A, or O when allowance_tokens = "exact"
        ("cohort", np.bool_),       # arrived in [warm-up, horizon)
        ("g", np.int64),            # tokens generated (while decoding: at iteration j0)
        ("kv", np.int64),           # tokens whose KV is in the cache (decoding: before iteration j0)
        ("j0", np.int64),           # decoding: its replica's first iteration of decoding
        ("u", np.int64),            # tokens to compute since admission
        ("c", np.int64),            # of them computed
        ("m", np.int64),            # cached prefix at admission (tokens)
        ("x", np.int64),            # chunk computed in the iteration in progress
        ("state", np.int8),         # State code
        ("over", np.bool_),         # counted in its replica's n_over
        ("res", np.int64),          # decoding: its KV crosses a block boundary at iterations ≡ res (mod b)
        ("outcome", np.int8),       # Fate code
        ("replica", np.int64),      # where its attempt is, -1 when none
        ("done_rep", np.int64),     # where it completed, -1 until then
        ("w_next", np.int64),       # waiting FIFO neighbours, -1 at the ends
        ("w_prev", np.int64),
        ("r_prev", np.int64),       # running list neighbours, -1 at the ends
        ("r_next", np.int64),
        ("adm", np.int64),          # admission number (running-list order)
        ("epoch", np.int64),        # bumped when it enters or leaves decoding: older schedule entries are void
        ("first_ms", np.float64),   # first-token time (NaN until then)
        ("done_ms", np.float64),    # completion time (NaN until then)
        ("attempts", np.int64),     # placements on a replica
        ("tries", np.int64),        # attempt numbers used (a front-door timeout uses one)
        ("retries", np.int64),      # placements with attempt number ≥ 2
        ("router", np.int64),       # floor(h·R)
        ("deadline", np.float64),   # the current attempt's timeout
        ("ft_deadline", np.float64),  # the current attempt's first-token deadline
        ("last_ms", np.float64),    # preempted after emitting: its last token's time (an ITL gap's start)
        ("bh_ms", np.float64),      # black-holed: when it fails
        ("retry_ms", np.float64),   # in backoff: when its retry is due
        ("gw", np.int64),           # tokens the current attempt had emitted by the warm-up's end
        ("gh", np.int64),           # ... by the horizon (set when the run goes past it)
        ("n_failed", np.int64),     # replicas it failed on (the first n of its row of ``failed``)
        ("f_next", np.int64),       # next in its router's front-door FIFO
        # disaggregation (docs/model.md "Prefill/decode disaggregation")
        ("pd", np.int8),            # PdStage code of the current attempt
        ("pd_d", np.int64),         # its decode replica (-1: none)
        ("held", np.int64),         # the prefill replica holding its prompt's blocks (-1: none)
        ("t_route", np.float64),    # ms: routed to its pair
        ("t_padmit", np.float64),   # ms: first admitted on its prefill replica
        ("t_pend", np.float64),     # ms: its prefill ended
        ("t_xs", np.float64),       # ms: its transfer started
        ("t_xe", np.float64),       # ms: its transfer ended
    ],
    align=True,
)
"""Per-run scratch, one record per request of the workload."""


@nb.njit(**JIT)
def start_request_nb(q):
    """Request record q as at a run's start: not yet arrived anywhere (no attempt, no
    list, no outcome), nothing emitted, no deadline, its times NaN or ∞. Its workload
    fields (``P``, ``O``, ``A``, ``cohort``, ``router``) are the caller's."""
    q.g = 0
    q.kv = 0
    q.j0 = 0
    q.u = 0
    q.c = 0
    q.m = 0
    q.x = 0
    q.state = State.NONE
    q.over = False
    q.res = 0
    q.outcome = Fate.PENDING
    q.replica = -1
    q.done_rep = -1
    q.w_next = -1
    q.w_prev = -1
    q.r_prev = -1
    q.r_next = -1
    q.adm = 0
    q.epoch = 0
    q.first_ms = np.nan
    q.done_ms = np.nan
    q.attempts = 0
    q.tries = 0
    q.retries = 0
    q.deadline = np.inf
    q.ft_deadline = np.inf
    q.last_ms = np.nan
    q.bh_ms = np.inf
    q.retry_ms = np.inf
    q.gw = 0
    q.gh = 0
    q.n_failed = 0
    q.f_next = -1
    q.pd = 0
    q.pd_d = -1
    q.held = -1
    q.t_route = np.nan
    q.t_padmit = np.nan
    q.t_pend = np.nan
    q.t_xs = np.nan
    q.t_xe = np.nan


SAMPLE = np.dtype(
    [
        ("waiting", np.int64), ("running", np.int64), ("blackholed", np.int64), ("kv_referenced", np.int64),
        ("kv_cached", np.int64), ("outstanding_tokens", np.int64), ("healthy", np.bool_),
        ("fail_fast", np.bool_), ("ejected", np.bool_), ("warmth", np.float64),
        ("view_requests", np.int64), ("view_tokens", np.int64),
        ("placed", np.int64), ("done", np.int64), ("tokens", np.int64),
    ],
    align=True,
)
"""One replica at a timeline sample (router 0's ejection and view); counts cumulative."""

CLUSTER_SAMPLE = np.dtype(
    [("retries", np.int64), ("failures", np.int64), ("shed", np.int64), ("rejected", np.int64),
     ("timeouts", np.int64), ("ttft_timeouts", np.int64)],
    align=True,
)
"""The cluster at a timeline sample: cumulative counts (failures: every attempt failure;
timeouts and ttft_timeouts: those by the whole-attempt and by the first-token deadline)."""

VIEW = np.dtype(
    [("o", np.int64), ("tau", np.int64), ("ref", np.int64), ("res", np.int64), ("hit", np.int64),
     ("ramp", np.float64), ("weight", np.float64), ("blocks", np.int64)],  # blocks: its kv_blocks
    align=True,
)
"""A router's view of one replica at a decision (routesim/batching/policies/)."""

KEPT = np.dtype(
    [("first_ms", np.float64), ("done_ms", np.float64), ("outcome", np.int8), ("attempts", np.int64),
     ("sent_ms", np.float64)],
    align=True,
)
"""What a timeline keeps of each request: its completing attempt's first token and
completion (NaN if none), its outcome and attempts, and its send (the arrival in an open
loop; NaN if a closed-loop client never sent it)."""

TIMER = np.dtype([("t", np.float64), ("req", np.int64), ("token", np.int64)], align=True)
"""A timed entry of a request (deadline, black-hole failure, retry), valid while the
request's attempt number is ``token``."""

SEG = np.dtype(
    [
        ("key", np.int64),          # id of the segment's first block
        ("replica", np.int64),      # its owner (a view's: see blocks.py)
        ("length", np.int64),       # resident blocks: a prefix of the segment (all of it while referenced)
        ("full", np.int64),         # the segment's blocks
        ("comp", np.int64),         # computed blocks: a prefix of the resident ones
        ("ref", np.int64),          # refcount (of every block of it)
        ("last", np.float64),       # last_use (ms)
        ("pos0", np.int64),         # position of its first block in the prompt that made it resident
        ("gen", np.int64),          # bumped each time it becomes cached (validates heap entries)
        ("prev", np.int64),         # slots of the owner's entries before and after it in its list, -1 none
        ("next", np.int64),
        ("head", np.int64),         # not of the entry: of the slot, the first slot of owner <slot>'s list
        ("mods", np.int32),         # not of the entry: of the slot, owner <slot>'s changes of a key or a
                                    # length (wrapping; it tells a publication whether anything changed)
        ("plen", np.int32),         # its length in its owner's published view, -1 not there (blocks.publish_nb)
        ("vgone", np.int32),        # not of the entry: of the slot, owner <slot>'s entries deleted while
                                    # in its published view (since the last publication)
        ("used", np.bool_),
        ("tail", np.bool_),         # its last block is computed (a capped hit computed it alone);
                                    # with length < full, that block is resident beyond a hole
    ],
    align=True,
)
"""A resident segment of one replica, in an open-addressing table keyed by (replica, key);
each owner's entries are also a doubly linked list (blocks.py)."""

CACHED = np.dtype(
    [("last", np.float64), ("negpos", np.int64), ("lastid", np.int64), ("key", np.int64),
     ("gen", np.int64), ("length", np.int64)],
    align=True,
)
"""A cached segment in eviction order: its last resident block (smallest ``last``, then
largest position, then smallest id) goes first."""

DUE = np.dtype(
    [("j", np.int64), ("adm", np.int64), ("kind", np.int64), ("req", np.int64), ("epoch", np.int64)],
    align=True,
)
"""A replica's schedule entry: at iteration ``j``, in admission order ``adm``."""

EVENT = np.dtype(
    [("t_ms", np.float64), ("kind", np.int64), ("replica", np.int64), ("value", np.float64)],
    align=True,
)

METRICS = np.dtype(
    [
        ("arrivals", np.int64), ("completed", np.int64), ("failed", np.int64),
        ("rejected", np.int64), ("shed", np.int64), ("unfinished", np.int64),
        ("ttft_p50", np.float64), ("ttft_p90", np.float64), ("ttft_p99", np.float64),
        ("tpot_p50", np.float64), ("tpot_p90", np.float64), ("tpot_p99", np.float64),
        ("itl_p50", np.float64), ("itl_p90", np.float64), ("itl_p99", np.float64), ("itl_max", np.float64),
        ("e2e_p50", np.float64), ("e2e_p90", np.float64), ("e2e_p99", np.float64),
        ("e2e_mean", np.float64),
        ("attainment", np.float64), ("goodput", np.float64), ("throughput", np.float64),
        ("token_throughput", np.float64), ("wasted_tokens", np.int64),
        ("preemptions", np.int64), ("breaker_ejections", np.int64),
        ("prefix_hit_rate", np.float64), ("kv_occupancy", np.float64), ("batch_mean", np.float64),
        ("backlog_growth", np.int64), ("kv_occupancy_first", np.float64), ("kv_occupancy_last", np.float64),
        ("attempts", np.int64), ("retries", np.int64), ("placement_occupancy", np.float64),
        ("placement_occupancy_high", np.float64),
        ("attainment_first", np.float64), ("attainment_last", np.float64),
        # closed-loop client (max_in_flight > 0; Dataset variables only then)
        ("client_wait_p50", np.float64), ("client_wait_p99", np.float64), ("client_wait_mean", np.float64),
        ("client_waiting", np.int64),
        # scheduler = "vllm" (Dataset variable only then)
        ("preempted_hit_rate", np.float64),
        # prefill/decode disaggregation (Dataset variables only when a run has a prefill pool)
        ("ttft_prefill_queue_p50", np.float64), ("ttft_prefill_queue_p99", np.float64),
        ("ttft_prefill_p50", np.float64), ("ttft_prefill_p99", np.float64),
        ("ttft_transfer_p50", np.float64), ("ttft_transfer_p99", np.float64),
        ("ttft_decode_queue_p50", np.float64), ("ttft_decode_queue_p99", np.float64),
        ("transfer_count", np.int64), ("transfer_bytes", np.float64), ("disaggregated_share", np.float64),
        # a TTFT objective scaled to prompt length (slo_ttft_ms_per_prompt_token > 0; Dataset variable only then)
        ("ttft_excess_p99", np.float64),
        # accumulators, finished into the rates above
        ("hit_tokens", np.float64), ("admit_tokens", np.float64),
        ("preempted_hit_tokens", np.float64), ("preempted_tokens", np.float64),  # vllm: re-admissions
        ("busy_ms", np.float64), ("batch_ms", np.float64),
        ("done_any", np.int64), ("tokens_window", np.int64),
        ("iterations", np.int64),  # iterations started over the whole run (for benchmarks)
        ("entered", np.int64), ("entered_cohort", np.int64),  # arrivals so far (all, cohort)
        ("left", np.int64), ("left_cohort", np.int64),        # final outcomes so far (all, cohort)
        ("preempted_emitting", np.int64),  # preemptions of sequences that had emitted (each may add an ITL gap)
    ],
    align=True,
)
"""Per-run metrics (§7): shape ``(runs,)``."""

TRANSFER = np.dtype(
    [
        ("key", np.int64),          # the caller's key (the engine: the request)
        ("src", np.int64),          # the prefill replica it flows out of
        ("dst", np.int64),          # the decode replica it flows into
        ("start", np.float64),      # ms: when it started
        ("flows_at", np.float64),   # ms: start + latency, when its bytes start to flow
        ("left", np.float64),       # bytes still to flow
        ("nbytes", np.float64),     # bytes in all
    ],
    align=True,
)
"""A KV transfer in progress (prefill/decode disaggregation, routesim/batching/pd.py)."""

LINKS = np.dtype(
    [
        ("now", np.float64),        # ms: the time the transfers have been advanced to
        ("n", np.int64),            # transfers in progress (rows 0 .. n-1 of the TRANSFER array, start order)
        ("bandwidth", np.float64),  # B: bytes/ms of each replica's outgoing and incoming link
        ("latency", np.float64),    # ms before a transfer's bytes flow
        ("w", np.float64),          # ms: the measurement window (w, h]
        ("h", np.float64),
        ("ended", np.int64),        # transfers ended in (w, h]
        ("ended_bytes", np.float64),  # their bytes
    ],
    align=True,
)
"""The links' clock, parameters and window counts of one run (routesim/batching/pd.py)."""
