"""Naive, plain-Python reference simulator for routesim's request-level model.

This is the literal reading of ``/work/shared/design/model.md`` sections 1-6 (plus
the lead's decisions where the page is silent), written for obviousness, not speed:
one run at a time, one Python loop over EVERY time step (empty steps included; the
fast engine may skip them, the reference deliberately does not), plain lists for
queues.  The fast engine is checked against this file, so the two must stay
independent: nothing here imports from ``routesim``.

Symbols follow model.md: ``dt``, grid times ``t_k = k*dt``, horizon ``H``, warm-up
``W``, replica statistics ``ŝ_i`` (s_hat), ``r̄_i`` (r_bar), ``n_i`` (n), outstanding
load ``o_i``, eligible set ``E``, EWMA weight ``α``, reward ceiling ``L``,
exploration weight ``c``, rate profile ``λ(t)`` and its integral ``Λ(t)``.

Floating-point operation order (the fast engine must use the same to match
bit-for-bit on grid rounding):
  speed_i   = (ref_ms[i] / reference_demand_ms) * slowdown_i
  service   = (demand * speed_i) * jitter
  end       = start + service
  ŝ         = (1-α)*ŝ + α*s_obs
  r̄         = (1-α)*r̄ + α*max(0, 1 - s_obs/L)
  score_ada = (r̄ + c*sqrt(ln(T+1)/(n+1))) - (o*ŝ)/L
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_WORKLOAD = dict(prompt_median=384, prompt_sigma=0.8, prompt_min=16, prompt_max=4096,
                        output_median=88, output_sigma=0.8, output_min=4, output_max=1024,
                        demand_base=1.0, demand_per_prompt=1/256, demand_per_output=1/16,
                        jitter_min=0.9, jitter_max=1.1)

POLICIES = ("round_robin", "least_queue", "latency_aware", "adaptive")

_ROW_BLOCK = 1024  # rows of U drawn per rng.random call; row k does not depend on it


# --------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------

def _event_kind(ev: dict) -> str:
    """Classify a sweep-file event dict: 'rate', 'slowdown', 'fail' or 'recover'."""
    if "rate_multiplier" in ev:
        return "rate"
    if "slowdown" in ev:
        return "slowdown"
    if ev.get("fail"):
        return "fail"
    if ev.get("recover"):
        return "recover"
    raise ValueError(f"unrecognised event {ev!r}")


def _sorted_events(events: list[dict]) -> list[tuple[float, int, dict]]:
    """(time_ms, list_index, event) in time order, ties in list order (stable sort)."""
    out = []
    for idx, ev in enumerate(events):
        at_ms = float(ev["at_s"]) * 1000.0
        if at_ms < 0:
            raise ValueError(f"event before time 0: {ev!r}")
        _event_kind(ev)  # validate
        out.append((at_ms, idx, ev))
    out.sort(key=lambda item: (item[0], item[1]))
    return out


# --------------------------------------------------------------------------------------
# Workload (model.md §2)
# --------------------------------------------------------------------------------------

def _rate_segments(rate_rps: float, events: list[dict]) -> list[tuple[float, float, float]]:
    """Piecewise-constant rate profile as segments (a_j, λ_j, Λ(a_j)).

    λ(t) per ms = rate_rps/1000 × multiplier; the multiplier starts at 1 and each
    rate_multiplier event SETS it (absolute) from its time onward.  Every rate event
    opens a new segment (events at equal times give zero-length segments, so the
    later one in the list wins).  Λ(a_j) is the sequential sum of
    λ_i × (a_{i+1} − a_i) over the preceding segments.
    """
    base = rate_rps / 1000.0
    segments = [(0.0, base * 1.0, 0.0)]  # (a_0 = 0, λ_0, Λ(0) = 0)
    for at_ms, _, ev in _sorted_events(events):
        if _event_kind(ev) != "rate":
            continue
        a_prev, lam_prev, Lam_prev = segments[-1]
        Lam_here = Lam_prev + lam_prev * (at_ms - a_prev)   # Λ(a_j)
        segments.append((at_ms, base * float(ev["rate_multiplier"]), Lam_here))
    return segments


def _inverse_Lambda(S: float, segments) -> float:
    """t = Λ⁻¹(S): in the segment j containing S (the last j with Λ(a_j) <= S),
    t = a_j + (S − Λ(a_j)) / λ_j.  Returns inf when the rate is zero from there on."""
    j = 0
    for idx, (_, _, Lam_a) in enumerate(segments):
        if Lam_a <= S:
            j = idx
    a_j, lam_j, Lam_a_j = segments[j]
    if lam_j == 0.0:
        return math.inf   # only possible in the last segment: no further arrivals
    return a_j + (S - Lam_a_j) / lam_j


def generate_workload(seed: int, rate_rps: float, events: list[dict], horizon_ms: float,
                      workload: dict = DEFAULT_WORKLOAD) -> dict[str, np.ndarray]:
    """keys: 't_ms', 'prompt', 'output', 'jitter', 'demand_ms' (one entry per arrival, arrival order)"""
    w = workload
    segments = _rate_segments(rate_rps, events)
    rng = np.random.Generator(np.random.PCG64(seed))

    t_list, prompt_list, output_list, jitter_list, demand_list = [], [], [], [], []
    S = 0.0          # S_k = E_0 + ... + E_k, summed left to right
    U = None
    row = _ROW_BLOCK
    while True:
        if row == _ROW_BLOCK:                  # need a fresh block of uniforms
            U = rng.random((_ROW_BLOCK, 4))    # row k belongs to arrival k
            row = 0
        u0, u1, u2, u3 = (float(x) for x in U[row])
        row += 1

        E = float(-np.log1p(-u0))              # E_k, unit-rate exponential
        S = S + E
        t = _inverse_Lambda(S, segments)       # t_k = Λ⁻¹(S_k)
        if t >= horizon_ms:
            break

        # Box–Muller
        R = float(np.sqrt(-2.0 * np.log1p(-u1)))
        z1 = R * float(np.cos(2.0 * np.pi * u2))
        z2 = R * float(np.sin(2.0 * np.pi * u2))

        prompt = int(np.clip(np.rint(w["prompt_median"] * np.exp(w["prompt_sigma"] * z1)),
                             w["prompt_min"], w["prompt_max"]))
        output = int(np.clip(np.rint(w["output_median"] * np.exp(w["output_sigma"] * z2)),
                             w["output_min"], w["output_max"]))
        jitter = w["jitter_min"] + (w["jitter_max"] - w["jitter_min"]) * u3
        demand = w["demand_base"] + prompt * w["demand_per_prompt"] + output * w["demand_per_output"]

        t_list.append(t)
        prompt_list.append(prompt)
        output_list.append(output)
        jitter_list.append(jitter)
        demand_list.append(demand)

    return {
        "t_ms": np.array(t_list, dtype=np.float64),
        "prompt": np.array(prompt_list, dtype=np.int64),
        "output": np.array(output_list, dtype=np.int64),
        "jitter": np.array(jitter_list, dtype=np.float64),
        "demand_ms": np.array(demand_list, dtype=np.float64),
    }


# --------------------------------------------------------------------------------------
# Cluster state
# --------------------------------------------------------------------------------------

class Replica:
    """One replica: a FIFO waiting queue plus one in-service slot, and the router's
    statistics about it (kept for every policy)."""

    def __init__(self, ref_ms: float, reference_demand_ms: float, prior_service_ms: float, L: float):
        self.ref_ms = float(ref_ms)
        self.reference_demand_ms = float(reference_demand_ms)
        self.slowdown = 1.0          # scenario factor, SET by slowdown events
        self.healthy = True
        self.waiting: list[int] = []  # request ids, head = index 0
        self.in_service: int | None = None
        self.start = 0.0              # start time of the in-service request
        self.end = 0.0                # its end time
        # router statistics
        self.s_hat = float(prior_service_ms)              # ŝ_i, starts at ŝ₀
        self.r_bar = 1.0 - float(prior_service_ms) / L    # r̄_i, starts at 1 − ŝ₀/L
        self.n = 0                                        # n_i

    def speed(self) -> float:
        # speed_i = ref_ms[i] / reference demand × scenario factor in force
        return (self.ref_ms / self.reference_demand_ms) * self.slowdown

    def outstanding(self) -> int:
        # o_i = waiting + in service (0 or 1)
        return len(self.waiting) + (1 if self.in_service is not None else 0)


def _eligible(replicas: list[Replica], queue_cap: int) -> list[int]:
    """E: healthy replicas with fewer than queue_cap waiting requests, ascending ids."""
    return [i for i, r in enumerate(replicas) if r.healthy and len(r.waiting) < queue_cap]


def _choose(policy: str, replicas: list[Replica], queue_cap: int, rr_cursor: int,
            exploration: float, L: float) -> int | None:
    """The replica the policy picks for one request, or None (shed).  Ties go to the
    lowest id: scan in id order and replace only on a strictly better value."""
    E = _eligible(replicas, queue_cap)
    if not E:
        return None

    if policy == "round_robin":
        # E[cursor mod |E|]; the caller advances the cursor on acceptance
        return E[rr_cursor % len(E)]

    if policy == "least_queue":
        # argmin o_i
        best, best_val = None, None
        for i in E:
            val = replicas[i].outstanding()
            if best is None or val < best_val:
                best, best_val = i, val
        return best

    if policy == "latency_aware":
        # argmin (o_i + 1) · ŝ_i
        best, best_val = None, None
        for i in E:
            r = replicas[i]
            val = (r.outstanding() + 1) * r.s_hat
            if best is None or val < best_val:
                best, best_val = i, val
        return best

    if policy == "adaptive":
        # T = Σ n_i over ALL replicas (eligible or not)
        T = 0
        for r in replicas:
            T += r.n
        # argmax r̄_i + c · sqrt(ln(T + 1) / (n_i + 1)) − o_i · ŝ_i / L
        best, best_val = None, None
        for i in E:
            r = replicas[i]
            val = r.r_bar + exploration * math.sqrt(math.log(T + 1) / (r.n + 1)) - r.outstanding() * r.s_hat / L
            if best is None or val > best_val:
                best, best_val = i, val
        return best

    raise ValueError(f"unknown policy {policy!r}")


# --------------------------------------------------------------------------------------
# Metrics helpers (model.md §6)
# --------------------------------------------------------------------------------------

def nearest_rank(sorted_values: list[float], p: int) -> float:
    """sorted[r − 1] with r = ceil(p·n/100), computed exactly in integers."""
    n = len(sorted_values)
    if n == 0:
        return float("nan")
    r = (p * n + 99) // 100
    return sorted_values[r - 1]


def _ratio(num: int, den: int) -> float:
    return num / den if den > 0 else float("nan")


# --------------------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------------------

def _simulate(*, policy, seed, rate_rps, ref_ms, events, dt_ms, warmup_s, measure_s, slo_ms,
              queue_cap, reference_demand_ms, alpha, exploration, reward_ceiling_ms,
              prior_service_ms, workload):
    """Run one simulation; return (metrics dict, trace dict).  The trace holds
    per-request records for tests: arrival, replica (last placement), start,
    completion (nan if not completed), shed flag, plus the workload."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}")
    dt = float(dt_ms)
    if not dt > 0:
        raise ValueError("the reference implements the discrete-time mode only (dt_ms > 0)")

    W = warmup_s * 1000.0                       # warm-up end, ms
    H = (warmup_s + measure_s) * 1000.0         # horizon, ms
    K = round(H / dt)                           # number of steps
    L = float(reward_ceiling_ms)
    a = float(alpha)

    wl = generate_workload(seed, rate_rps, events, H, workload)
    arr_t = [float(x) for x in wl["t_ms"]]
    demand = [float(x) for x in wl["demand_ms"]]
    jitter = [float(x) for x in wl["jitter"]]
    n_req = len(arr_t)

    replicas = [Replica(ref, reference_demand_ms, prior_service_ms, L) for ref in ref_ms]
    n_rep = len(replicas)
    rr_cursor = 0

    # per-request records
    req_replica = [-1] * n_req
    req_start = [math.nan] * n_req
    req_done = [math.nan] * n_req       # completion time
    req_shed = [False] * n_req
    rerouted = 0                        # accepted re-routes (for tests)

    assigned = [0] * n_rep              # routing decisions at times in [W, H)
    replica_completed = [0] * n_rep     # completions at times in (W, H]
    completions_in_window = 0           # any request, completion time in (W, H]

    # scenario events that act on replicas (rate events live in the workload)
    sched = [(t, ev) for (t, _, ev) in _sorted_events(events) if _event_kind(ev) != "rate"]
    next_event = 0
    next_arrival = 0

    def place(q: int, i: int | None, decision_time: float) -> None:
        """Accept request q on replica i (append to its waiting queue) or shed it."""
        nonlocal rr_cursor
        if i is None:
            req_shed[q] = True
            return
        replicas[i].waiting.append(q)
        req_replica[q] = i
        if policy == "round_robin":
            rr_cursor += 1                  # advances only on an accepted request
        if W <= decision_time < H:
            assigned[i] += 1

    for k in range(K):                      # step from t_k to t_{k+1}; empty steps too
        t_k = k * dt
        t_next = (k + 1) * dt               # t_{k+1} = (k+1)·dt, never a running sum

        # 1. Completions: in-service requests with end <= t_{k+1} complete at t_{k+1}.
        for i, r in enumerate(replicas):
            if r.in_service is not None and r.end <= t_next:
                q = r.in_service
                s_obs = t_next - r.start                       # observed service time
                r.s_hat = (1 - a) * r.s_hat + a * s_obs        # ŝ ← (1−α)ŝ + α s_obs
                r.r_bar = (1 - a) * r.r_bar + a * max(0.0, 1 - s_obs / L)  # r̄ ← (1−α)r̄ + α max(0, 1 − s_obs/L)
                r.n = r.n + 1                                  # n ← n + 1
                req_done[q] = t_next
                r.in_service = None
                if W < t_next <= H:
                    completions_in_window += 1
                    replica_completed[i] += 1

        # 2. Scenario events with time in (t_k, t_{k+1}], time order, ties in list order.
        #    (Sorted list + pointer; an event at time 0 falls into the first step.)
        while next_event < len(sched) and sched[next_event][0] <= t_next:
            ev_t, ev = sched[next_event]
            next_event += 1
            kind = _event_kind(ev)
            i = int(ev["replica"]) - 1      # 1-based in the sweep file
            if not 0 <= i < n_rep:
                raise ValueError(f"event names replica {ev['replica']} of {n_rep}: {ev!r}")
            r = replicas[i]
            if kind == "slowdown":
                r.slowdown = float(ev["slowdown"])   # SET, not multiplied
            elif kind == "fail":
                r.healthy = False                    # unhealthy first: not eligible for its own queue
                moved, r.waiting = r.waiting, []
                for q in moved:                      # head first, original arrival time kept
                    choice = _choose(policy, replicas, queue_cap, rr_cursor, exploration, L)
                    place(q, choice, ev_t)
                    if choice is not None:
                        rerouted += 1
                # its in-service request stays and finishes
            elif kind == "recover":
                r.healthy = True                     # statistics untouched

        # 3. Arrivals with time in (t_k, t_{k+1}], in arrival order.
        while next_arrival < n_req and arr_t[next_arrival] <= t_next:
            q = next_arrival
            next_arrival += 1
            assert arr_t[q] > t_k or k == 0
            place(q, _choose(policy, replicas, queue_cap, rr_cursor, exploration, L), arr_t[q])

        # 4. Starts: each replica with an empty slot starts its queue head at t_{k+1}.
        for i, r in enumerate(replicas):
            if r.in_service is None and r.waiting:
                q = r.waiting.pop(0)
                r.in_service = q
                r.start = t_next
                r.end = t_next + demand[q] * r.speed() * jitter[q]   # speed read now
                req_start[q] = t_next

    # ---- metrics over the cohort: arrivals in [W, H) ----
    arrivals = completed = shed = unfinished = 0
    latencies = []
    for q in range(n_req):
        if not (W <= arr_t[q] < H):
            continue
        arrivals += 1
        if not math.isnan(req_done[q]):
            completed += 1
            latencies.append(req_done[q] - arr_t[q])   # end-to-end latency
        elif req_shed[q]:
            shed += 1
        else:
            unfinished += 1
    assert arrivals == completed + shed + unfinished

    latencies.sort()
    on_time = sum(1 for x in latencies if x <= slo_ms)
    missed = sum(1 for x in latencies if x > slo_ms)
    nan = float("nan")
    result = {
        "arrivals": arrivals,
        "completed": completed,
        "shed": shed,
        "unfinished": unfinished,
        "latency_p50": nearest_rank(latencies, 50),
        "latency_p90": nearest_rank(latencies, 90),
        "latency_p95": nearest_rank(latencies, 95),
        "latency_p99": nearest_rank(latencies, 99),
        "latency_mean": (sum(latencies) / len(latencies)) if latencies else nan,
        "latency_max": latencies[-1] if latencies else nan,
        "slo_miss_rate": _ratio(missed, completed),
        "shed_rate": _ratio(shed, arrivals),
        "attainment": _ratio(on_time, arrivals),
        "goodput": on_time / measure_s,
        "throughput": completions_in_window / measure_s,
        "assigned": assigned,
        "replica_completed": replica_completed,
        "final_s_hat": [r.s_hat for r in replicas],
        "final_r_bar": [r.r_bar for r in replicas],
        "final_n": [r.n for r in replicas],
        "rr_cursor": rr_cursor,
    }
    trace = {
        "workload": wl,
        "arrival": arr_t,
        "replica": req_replica,
        "start": req_start,
        "done": req_done,
        "shed": req_shed,
        "rerouted": rerouted,
        "W": W,
        "H": H,
        "K": K,
    }
    return result, trace


def simulate_run(*, policy: str, seed: int, rate_rps: float, ref_ms: list[float], events: list[dict],
                 dt_ms=0.5, warmup_s=3.0, measure_s=12.0, slo_ms=50.0, queue_cap=50,
                 reference_demand_ms=11.0, alpha=0.15, exploration=0.35, reward_ceiling_ms=100.0,
                 prior_service_ms=11.0, workload: dict = DEFAULT_WORKLOAD) -> dict:
    """One run of model.md §1–6; returns the metrics of §6 plus the final router
    statistics (final_s_hat, final_r_bar, final_n, per replica) and rr_cursor."""
    result, _ = _simulate(policy=policy, seed=seed, rate_rps=rate_rps, ref_ms=ref_ms, events=events,
                          dt_ms=dt_ms, warmup_s=warmup_s, measure_s=measure_s, slo_ms=slo_ms,
                          queue_cap=queue_cap, reference_demand_ms=reference_demand_ms, alpha=alpha,
                          exploration=exploration, reward_ceiling_ms=reward_ceiling_ms,
                          prior_service_ms=prior_service_ms, workload=workload)
    return result
