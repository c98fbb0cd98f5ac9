"""Record dtypes and integer codes shared by the Python side and the compiled kernels.

Every dtype is aligned (``np.dtype([...], align=True)``) so it maps onto a C struct
inside Numba. Times are in milliseconds of simulated time throughout.
"""

from enum import IntEnum

import numpy as np


class Policy(IntEnum):
    """Routing policy codes. The sweep-file name is ``name.lower()``."""

    ROUND_ROBIN = 0
    LEAST_QUEUE = 1
    LATENCY_AWARE = 2
    ADAPTIVE = 3
    RANDOM = 4
    POWER_OF_TWO = 5


class Demand(IntEnum):
    """How a request's demand is drawn (``workload.demand``)."""

    TOKENS = 0       # from its prompt and output tokens (model.md §2)
    EXPONENTIAL = 1  # exponential with mean reference_demand_ms, from U[k,1]
    CONSTANT = 2     # exactly reference_demand_ms


class EventKind(IntEnum):
    """Scenario event codes (model.md §4)."""

    RATE = 0      # rate multiplier: already folded into the workload's arrival times
    SLOWDOWN = 1  # set a replica's scenario slowdown factor (absolute, not cumulative)
    FAIL = 2      # mark unhealthy, re-route its waiting queue head first
    RECOVER = 3   # mark healthy again, statistics untouched


EVENT_NAMES = {EventKind.RATE: "rate_multiplier", EventKind.SLOWDOWN: "slowdown",
               EventKind.FAIL: "fail", EventKind.RECOVER: "recover"}
"""Each event kind by the key that states it in a sweep file (and in a trace's ``event_kind``)."""


class Status(IntEnum):
    """What became of a request (one byte per request per run)."""

    PENDING = 0   # not yet arrived, or waiting in a queue
    SERVING = 1
    DONE = 2
    SHED = 3


PARAMS = np.dtype(
    [
        ("policy", np.int32),          # Policy code
        ("queue_cap", np.int64),       # waiting requests per replica, in service not counted
        ("dt_ms", np.float64),         # step; 0 = exact event-time mode
        ("warmup_ms", np.float64),
        ("horizon_ms", np.float64),    # warm-up + measurement
        ("slo_ms", np.float64),
        ("alpha", np.float64),         # EWMA weight of every estimate
        ("exploration", np.float64),   # adaptive's c
        ("reward_ceiling_ms", np.float64),  # adaptive's L
        ("prior_service_ms", np.float64),   # ŝ₀
        ("choices", np.int64),         # power_of_two's sample size d
        ("event_start", np.int64),     # first row of this run's scenario in the event table
        ("event_count", np.int64),
        ("workload", np.int64),        # index of this run's workload (and router stream)
    ],
    align=True,
)
"""Everything one run needs besides its workload: shape ``(runs,)``."""

REPLICA = np.dtype(
    [
        ("base_speed", np.float64),  # ref_ms[i] / reference demand (service-time multiplier)
        ("slowdown", np.float64),    # scenario factor in force; speed_i = base_speed · slowdown
        ("healthy", np.bool_),
        ("busy", np.bool_),
        ("elig", np.bool_),          # in E: healthy and qlen < queue_cap (kept in step)
        ("dirty", np.bool_),         # on this step's list of replicas that may start
        ("serving", np.int32),       # request index in service, -1 when idle
        ("start_ms", np.float64),    # when the request in service started
        ("end_ms", np.float64),      # time it completes (a grid time in discrete mode)
        ("head", np.int32),          # FIFO waiting queue as a linked list over requests
        ("tail", np.int32),
        ("qlen", np.int64),          # waiting requests, the one in service not counted
        ("s_hat", np.float64),       # ŝ_i, EWMA of observed service time (ms)
        ("r_bar", np.float64),       # r̄_i, EWMA of reward max(0, 1 - s_obs / L)
        ("n_obs", np.int64),         # n_i, completed observations
        ("routed", np.int64),        # routing decisions onto it at any time (re-routes included)
        ("assigned", np.int64),      # routing decisions onto it in [warm-up, horizon)
        ("completed", np.int64),     # completions on it in (warm-up, horizon]
        ("area", np.float64),        # ∫ o_i dt over the window so far (request·ms)
        ("t_mark", np.float64),      # time up to which ``area`` is integrated
        ("mean_in_system", np.float64),  # after the run: area ÷ window, the time-average o_i
    ],
    align=True,
)
"""State of one replica of one run: arrays of shape ``(runs, replicas)``."""

ROUTER = np.dtype(
    [
        ("cursor", np.int64),       # round robin's cursor, advances on accepted requests
        ("completions", np.int64),  # completions (any request) in (warm-up, horizon]
        ("draws", np.int64),        # uniforms of the router stream consumed so far
        ("n_elig", np.int64),       # |E|
        ("n_dirty", np.int64),      # replicas on this step's start list
        ("heap_n", np.int64),       # busy replicas in the completion heap
    ],
    align=True,
)
"""Router state of one run: shape ``(runs,)``."""

METRICS = np.dtype(
    [
        ("arrivals", np.int64),
        ("completed", np.int64),
        ("shed", np.int64),
        ("unfinished", np.int64),
        ("latency_p50", np.float64),
        ("latency_p90", np.float64),
        ("latency_p95", np.float64),
        ("latency_p99", np.float64),
        ("latency_mean", np.float64),
        ("latency_max", np.float64),
        ("slo_miss_rate", np.float64),
        ("shed_rate", np.float64),
        ("attainment", np.float64),
        ("goodput", np.float64),
        ("throughput", np.float64),
        ("mean_in_system", np.float64),
    ],
    align=True,
)
"""Per-run metrics of model.md §6: shape ``(runs,)``."""

TAIL_LEVELS = 17
"""queue_tail is reported for i = 0 .. TAIL_LEVELS - 1 requests per replica."""

EVENT = np.dtype(
    [
        ("time_ms", np.float64),
        ("kind", np.int32),     # EventKind code
        ("replica", np.int32),  # 0-based; -1 for cluster-wide events
        ("value", np.float64),  # rate multiplier or slowdown factor; unused otherwise
    ],
    align=True,
)
"""One scenario event. A scenario is a contiguous, time-sorted block of the table."""

WORK = np.dtype(
    [
        ("heap_t", np.float64),  # completion heap: end time (min-heap) ...
        ("heap_i", np.int32),    # ... and its replica
        ("dirty", np.int32),     # replicas that may start at the end of this step
        ("bit", np.int32),       # Fenwick tree over replicas of the indicator "in E"
        ("sw_pos", np.int32),    # power_of_two's partial shuffle: moved positions ...
        ("sw_val", np.int32),    # ... and the replicas now at them
    ],
    align=True,
)
"""Index structures of one run: arrays of shape ``(runs, replicas + 1)``. They make a
step cost O(log replicas) for the policies that do not scan every replica."""

LEVEL = np.dtype(
    [
        ("count", np.int64),   # replicas holding this many requests now (last level: or more)
        ("area", np.float64),  # replica·ms at this load in the window so far
        ("t_mark", np.float64),  # time up to which ``area`` is integrated
        ("fraction", np.float64),  # after the run: time-average fraction of replicas
                                   # holding at least this many requests
    ],
    align=True,
)
"""Outstanding-load histogram of one run: arrays of shape ``(runs, TAIL_LEVELS)``."""

REQUEST = np.dtype(
    [
        ("next", np.int32),      # the request behind it in its waiting queue, -1 at the tail
        ("status", np.int8),     # Status code
        ("done_ms", np.float64), # completion time (NaN unless its status is DONE)
    ],
    align=True,
)
"""One request of one run: flat arrays, one block of ``arrivals`` rows per run."""
