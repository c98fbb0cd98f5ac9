"""Naive, plain-Python reference simulator for routesim's request-level model.

This is the literal reading of ``docs/model.md`` sections 1-6 (plus its section 8,
the decisions where the design page is silent), written for obviousness, not speed:
one run at a time, one Python loop over EVERY time step (empty steps included; the
fast engine may skip them, the reference deliberately does not), plain lists for
queues.  The fast engine is checked against this file, so the two must stay
independent: nothing here imports from ``routesim``.

Beyond the page (the lead's extensions):
  * dt_ms = 0 is the exact event-time mode (_simulate_exact): jump to the next
    arrival / end of service / scenario event and apply the same four phases there.
  * demand = "tokens" | "exponential" | "constant" (generate_workload).
  * policies "random" and "power_of_two" (keyword choices), fed by router_uniforms(seed, n),
    a flat stream consumed from its start in decision order (1 or `choices` per decision).
  * time averages over [W, H]: mean_in_system, mean_in_system_replica, queue_tail[0..16].

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

POLICIES = ("round_robin", "least_queue", "latency_aware", "adaptive")   # deterministic routers
RANDOMIZED_POLICIES = ("random", "power_of_two")  # baselines fed by router_uniforms()
ALL_POLICIES = POLICIES + RANDOMIZED_POLICIES
DEMANDS = ("tokens", "exponential", "constant")
TAIL_LEVELS = 17   # queue_tail[i] for i = 0 .. 16

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
                      workload: dict = DEFAULT_WORKLOAD, *, demand: str = "tokens",
                      reference_demand_ms: float = 11.0) -> dict[str, np.ndarray]:
    """keys: 't_ms', 'prompt', 'output', 'jitter', 'demand_ms' (one entry per arrival, arrival order)

    demand (tokens, times and jitter are the same whatever it is):
      "tokens"      demand_ms = demand_base + prompt·per_prompt + output·per_output (model.md §2)
      "exponential" demand_ms = −reference_demand_ms · log1p(−U[k,1])  (mean reference_demand_ms,
                    the inverse transform of the same uniform that feeds Box–Muller's R)
      "constant"    demand_ms = reference_demand_ms
    """
    if demand not in DEMANDS:
        raise ValueError(f"unknown demand {demand!r}; expected one of {DEMANDS}")
    D = float(reference_demand_ms)
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
        if demand == "tokens":
            d = w["demand_base"] + prompt * w["demand_per_prompt"] + output * w["demand_per_output"]
        elif demand == "exponential":
            d = -D * float(np.log1p(-u1))      # inverse transform of U[k,1]
        else:  # "constant"
            d = D

        t_list.append(t)
        prompt_list.append(prompt)
        output_list.append(output)
        jitter_list.append(jitter)
        demand_list.append(d)

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
        # time integrals over [W, H] (see _Run.accumulate)
        self.area = 0.0                                   # ∫ o_i dt
        self.time_at_level = [0.0] * TAIL_LEVELS          # time with o_i = l (l = 16: 16 or more)

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
# Randomized baselines: random and power_of_two
# --------------------------------------------------------------------------------------

def router_uniforms(seed: int, count: int) -> np.ndarray:
    """The router's own flat stream of uniforms, separate from the workload's.

    Generator(PCG64(SeedSequence(seed).spawn(1)[0])).random(count); element j does
    not depend on count, so drawing a safe upper bound up front changes nothing."""
    child = np.random.SeedSequence(seed).spawn(1)[0]
    return np.random.Generator(np.random.PCG64(child)).random(count)


def _choose_random(replicas: list[Replica], queue_cap: int, u: float) -> int | None:
    """E[floor(u·m)] (clamped to m − 1), or None (shed) when m = |E| = 0."""
    E = _eligible(replicas, queue_cap)
    m = len(E)
    if m == 0:
        return None
    return E[min(math.floor(u * m), m - 1)]


def _choose_power_of_two(replicas: list[Replica], queue_cap: int, us: list[float]) -> int | None:
    """Sample d = min(len(us), m) distinct candidates from E by a partial Fisher–Yates
    shuffle driven by us[0 .. d−1], then pick the least outstanding o_i, ties to the
    lowest id (not the first drawn).  None (shed) when m = 0."""
    E = _eligible(replicas, queue_cap)
    m = len(E)
    if m == 0:
        return None
    e = list(E)                       # work on a copy
    d = min(len(us), m)
    for j in range(d):
        k = min(j + math.floor(us[j] * (m - j)), m - 1)
        e[j], e[k] = e[k], e[j]
    candidates = sorted(e[:d])        # ascending ids: the first strict minimum is the lowest id
    best, best_val = None, None
    for i in candidates:
        val = replicas[i].outstanding()
        if best is None or val < best_val:
            best, best_val = i, val
    return best


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
# One run: the state and the four phases, shared by both time modes
# --------------------------------------------------------------------------------------

class _Run:
    """Everything one run keeps, and the four phases of model.md §3 as methods.  The
    two time modes (_simulate_discrete, _simulate_exact) differ only in which times T
    they process and, in discrete mode, in that a completion is observed at the grid
    time after its end rather than at its end."""

    def __init__(self, *, policy, seed, rate_rps, ref_ms, events, warmup_s, measure_s,
                 queue_cap, reference_demand_ms, alpha, exploration, reward_ceiling_ms,
                 prior_service_ms, workload, demand, choices):
        if policy not in ALL_POLICIES:
            raise ValueError(f"unknown policy {policy!r}")
        if policy == "power_of_two" and not (isinstance(choices, (int, np.integer)) and choices >= 1):
            raise ValueError(f"choices must be an integer >= 1, got {choices!r}")
        self.policy = policy
        self.queue_cap = queue_cap
        self.exploration = exploration
        self.choices = int(choices)
        self.W = warmup_s * 1000.0                       # warm-up end, ms
        self.H = (warmup_s + measure_s) * 1000.0         # horizon, ms
        self.L = float(reward_ceiling_ms)
        self.a = float(alpha)

        self.wl = generate_workload(seed, rate_rps, events, self.H, workload,
                                    demand=demand, reference_demand_ms=reference_demand_ms)
        self.arr_t = [float(x) for x in self.wl["t_ms"]]
        self.demand = [float(x) for x in self.wl["demand_ms"]]
        self.jitter = [float(x) for x in self.wl["jitter"]]
        n_req = len(self.arr_t)

        self.replicas = [Replica(ref, reference_demand_ms, prior_service_ms, self.L) for ref in ref_ms]
        n_rep = len(self.replicas)
        self.rr_cursor = 0

        # router uniforms, drawn up front: every decision is an arrival or a re-route,
        # and each fail event re-routes at most n_req requests
        n_fail = sum(1 for ev in events if _event_kind(ev) == "fail")
        per_decision = {"random": 1, "power_of_two": self.choices}.get(policy, 0)
        self.u = [float(x) for x in router_uniforms(seed, n_req * (1 + n_fail) * per_decision)]
        self.u_used = 0                   # uniforms consumed so far, from the start

        # per-request records
        self.req_replica = [-1] * n_req
        self.req_start = [math.nan] * n_req
        self.req_done = [math.nan] * n_req       # completion time
        self.req_shed = [False] * n_req
        self.rerouted = 0                        # accepted re-routes (for tests)
        self.decisions = []                      # (kind, request, replica or None), in order

        self.assigned = [0] * n_rep              # routing decisions at times in [W, H)
        self.replica_completed = [0] * n_rep     # completions at times in (W, H]
        self.completions_in_window = 0           # any request, completion time in (W, H]

        # time integrals over [W, H] (accumulate())
        # (per replica: Replica.area, Replica.time_at_level)
        self.span = 0.0                           # Σ lengths integrated (= H − W up to rounding)
        self.area_total = 0.0                     # ∫ Σ_i o_i dt

        # scenario events that act on replicas (rate events live in the workload)
        self.sched = [(t, ev) for (t, _, ev) in _sorted_events(events) if _event_kind(ev) != "rate"]
        self.next_event = 0
        self.next_arrival = 0

    # ---- what comes next ----
    def next_arrival_time(self) -> float:
        return self.arr_t[self.next_arrival] if self.next_arrival < len(self.arr_t) else math.inf

    def next_event_time(self) -> float:
        return self.sched[self.next_event][0] if self.next_event < len(self.sched) else math.inf

    def earliest_end(self) -> float:
        ends = [r.end for r in self.replicas if r.in_service is not None]
        return min(ends) if ends else math.inf

    # ---- time integrals ----
    def accumulate(self, t_prev: float, T: float) -> None:
        """Add the state held over (t_prev, T] ∩ [W, H] to the time integrals.  Called
        at each processed time T BEFORE the step is applied, and once more up to H."""
        lo = max(t_prev, self.W)
        hi = min(T, self.H)
        if not hi > lo:
            return
        length = hi - lo
        self.span += length
        total = 0
        for r in self.replicas:
            o = r.outstanding()                          # o_i = waiting + in service
            total += o
            r.area += length * o
            r.time_at_level[o if o < TAIL_LEVELS else TAIL_LEVELS - 1] += length   # level min(o_i, 16)
        self.area_total += length * total

    def queue_tail(self) -> list[float]:
        """queue_tail[l] = time average over [W, H] of the fraction of replicas with
        o_i >= l, l = 0..16 = mean over replicas of (time with o_i >= l) / (time).
        The suffix sums run from the top level down, so the list is non-increasing in
        floating point too, and queue_tail[0] is exactly 1."""
        n_rep = len(self.replicas)
        if not self.span > 0 or n_rep == 0:
            return [float("nan")] * TAIL_LEVELS
        tail = [0.0] * TAIL_LEVELS
        for r in self.replicas:
            times = r.time_at_level
            at_least = [0.0] * TAIL_LEVELS               # time with o_i >= l
            at_least[TAIL_LEVELS - 1] = times[TAIL_LEVELS - 1]
            for level in range(TAIL_LEVELS - 2, -1, -1):
                at_least[level] = times[level] + at_least[level + 1]
            for level in range(TAIL_LEVELS):
                tail[level] += at_least[level] / at_least[0]
        return [x / n_rep for x in tail]

    # ---- routing ----
    def _take_uniforms(self, count: int) -> list[float]:
        us = self.u[self.u_used:self.u_used + count]
        assert len(us) == count, "router uniforms exhausted (the up-front bound is wrong)"
        self.u_used += count
        return us

    def route(self) -> int | None:
        """One routing decision with the state as it is now (None = shed)."""
        if self.policy == "random":
            return _choose_random(self.replicas, self.queue_cap, self._take_uniforms(1)[0])
        if self.policy == "power_of_two":
            return _choose_power_of_two(self.replicas, self.queue_cap, self._take_uniforms(self.choices))
        return _choose(self.policy, self.replicas, self.queue_cap, self.rr_cursor, self.exploration, self.L)

    def place(self, q: int, i: int | None, decision_time: float) -> None:
        """Accept request q on replica i (append to its waiting queue) or shed it."""
        if i is None:
            self.req_shed[q] = True
            return
        self.replicas[i].waiting.append(q)
        self.req_replica[q] = i
        if self.policy == "round_robin":
            self.rr_cursor += 1                 # advances only on an accepted request
        if self.W <= decision_time < self.H:
            self.assigned[i] += 1

    # ---- the four phases ----
    def complete(self, i: int, T: float) -> None:
        """1. Replica i's in-service request completes at T."""
        r = self.replicas[i]
        a, L = self.a, self.L
        q = r.in_service
        s_obs = T - r.start                                # observed service time
        r.s_hat = (1 - a) * r.s_hat + a * s_obs            # ŝ ← (1−α)ŝ + α s_obs
        r.r_bar = (1 - a) * r.r_bar + a * max(0.0, 1 - s_obs / L)  # r̄ ← (1−α)r̄ + α max(0, 1 − s_obs/L)
        r.n = r.n + 1                                      # n ← n + 1
        self.req_done[q] = T
        r.in_service = None
        if self.W < T <= self.H:
            self.completions_in_window += 1
            self.replica_completed[i] += 1

    def apply_next_event(self) -> None:
        """2. The next scenario event (sorted list + pointer: time order, ties in list order)."""
        ev_t, ev = self.sched[self.next_event]
        self.next_event += 1
        kind = _event_kind(ev)
        i = int(ev["replica"]) - 1      # 1-based in the sweep file
        if not 0 <= i < len(self.replicas):
            raise ValueError(f"event names replica {ev['replica']} of {len(self.replicas)}: {ev!r}")
        r = self.replicas[i]
        if kind == "slowdown":
            r.slowdown = float(ev["slowdown"])   # SET, not multiplied
        elif kind == "fail":
            r.healthy = False                    # unhealthy first: not eligible for its own queue
            moved, r.waiting = r.waiting, []
            for q in moved:                      # head first, original arrival time kept
                choice = self.route()
                self.decisions.append(("reroute", q, choice))
                self.place(q, choice, ev_t)
                if choice is not None:
                    self.rerouted += 1
            # its in-service request stays and finishes
        elif kind == "recover":
            r.healthy = True                     # statistics untouched

    def arrive_next(self) -> None:
        """3. The next arrival is routed with the state as left by everything before it."""
        q = self.next_arrival
        self.next_arrival += 1
        choice = self.route()
        self.decisions.append(("arrival", q, choice))
        self.place(q, choice, self.arr_t[q])

    def start_idle(self, T: float) -> None:
        """4. Each replica with an empty slot starts its queue head at T."""
        for r in self.replicas:
            if r.in_service is None and r.waiting:
                q = r.waiting.pop(0)
                r.in_service = q
                r.start = T
                r.end = T + self.demand[q] * r.speed() * self.jitter[q]   # (demand·speed)·jitter, speed read now
                self.req_start[q] = T


def _phases(run: _Run, T: float) -> None:
    """model.md §3: the four phases of the step that ends at T (discrete mode: the step
    (T - dt, T]; exact mode: the event time T)."""
    # 1. Completions: in-service requests with end <= T complete at T, in replica id order.
    for i, r in enumerate(run.replicas):
        if r.in_service is not None and r.end <= T:
            run.complete(i, T)
    # 2. Scenario events up to T, in time order, ties in list order (an event at time 0
    #    falls into the first step).
    while run.next_event_time() <= T:
        run.apply_next_event()
    # 3. Arrivals up to T, in arrival order.
    while run.next_arrival_time() <= T:
        run.arrive_next()
    # 4. Starts at T.
    run.start_idle(T)


def _simulate_discrete(run: _Run, dt: float) -> int:
    """model.md §3: one Python loop over EVERY grid step (empty steps too); returns K."""
    K = round(run.H / dt)                   # number of steps
    for k in range(K):                      # step from t_k to t_{k+1}
        t_k = k * dt
        t_next = (k + 1) * dt               # t_{k+1} = (k+1)·dt, never a running sum
        run.accumulate(t_k, t_next)         # the state held over (t_k, t_{k+1}]
        # every arrival of this step has its time in (t_k, t_{k+1}] (arrivals are sorted)
        assert run.next_arrival_time() > t_k or k == 0
        _phases(run, t_next)
    run.accumulate(K * dt, run.H)           # finish at H (nothing when K·dt >= H)
    return K


def _simulate_exact(run: _Run) -> int:
    """Exact event-time mode (dt = 0): jump from event time to event time.

    The next time T is the smallest of the next arrival time, the earliest end of a
    request in service and the next scenario event time; at T the same four phases as
    a discrete step run: (1) every request whose end == T completes at T (replicas in
    id order), (2) scenario events at T, (3) arrivals at T, (4) idle replicas start
    their queue head at T.  Stops after the last T <= H.  Returns the number of times
    processed."""
    t_prev = 0.0
    processed = 0
    while True:
        T = min(run.next_arrival_time(), run.earliest_end(), run.next_event_time())
        if T > run.H:                       # also when nothing is left (inf)
            break
        run.accumulate(t_prev, T)           # the state held over (t_prev, T]
        t_prev = T
        _phases(run, T)                     # T is the earliest end: "end <= T" is "end == T"
        processed += 1
    run.accumulate(t_prev, run.H)           # finish at H
    return processed


def _simulate(*, policy, seed, rate_rps, ref_ms, events, dt_ms, warmup_s, measure_s, slo_ms,
              queue_cap, reference_demand_ms, alpha, exploration, reward_ceiling_ms,
              prior_service_ms, workload, demand="tokens", choices=2):
    """Run one simulation; return (metrics dict, trace dict).  dt_ms > 0 steps the grid
    (model.md §3), dt_ms = 0 is the exact event-time mode.  The trace holds
    per-request records for tests: arrival, replica (last placement), start,
    completion (nan if not completed), shed flag, the routing decisions in order,
    plus the workload."""
    dt = float(dt_ms)
    if not dt >= 0:
        raise ValueError(f"dt_ms must be > 0 (discrete) or 0 (exact), got {dt_ms!r}")
    run = _Run(policy=policy, seed=seed, rate_rps=rate_rps, ref_ms=ref_ms, events=events,
               warmup_s=warmup_s, measure_s=measure_s, queue_cap=queue_cap,
               reference_demand_ms=reference_demand_ms, alpha=alpha, exploration=exploration,
               reward_ceiling_ms=reward_ceiling_ms, prior_service_ms=prior_service_ms,
               workload=workload, demand=demand, choices=choices)
    if dt > 0:
        K = _simulate_discrete(run, dt)
    else:
        K = _simulate_exact(run)
    W, H = run.W, run.H
    arr_t, req_done, req_shed = run.arr_t, run.req_done, run.req_shed

    # ---- metrics over the cohort: arrivals in [W, H) ----
    arrivals = completed = shed = unfinished = 0
    latencies = []
    for q in range(len(arr_t)):
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
    span = run.span
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
        "throughput": run.completions_in_window / measure_s,
        "assigned": run.assigned,
        "replica_completed": run.replica_completed,
        # time averages over [W, H] (divided by the integrated length, = H − W up to rounding)
        "mean_in_system": run.area_total / span if span > 0 else nan,
        "mean_in_system_replica": [r.area / span if span > 0 else nan for r in run.replicas],
        "queue_tail": run.queue_tail(),
        "final_s_hat": [r.s_hat for r in run.replicas],
        "final_r_bar": [r.r_bar for r in run.replicas],
        "final_n": [r.n for r in run.replicas],
        "rr_cursor": run.rr_cursor,
        "router_uniforms_used": run.u_used,
    }
    trace = {
        "workload": run.wl,
        "arrival": arr_t,
        "replica": run.req_replica,
        "start": run.req_start,
        "done": req_done,
        "shed": req_shed,
        "rerouted": run.rerouted,
        "decisions": run.decisions,
        "W": W,
        "H": H,
        "K": K,          # discrete: number of grid steps; exact: number of times processed
    }
    return result, trace


def simulate_run(*, policy: str, seed: int, rate_rps: float, ref_ms: list[float], events: list[dict],
                 dt_ms=0.5, warmup_s=3.0, measure_s=12.0, slo_ms=50.0, queue_cap=50,
                 reference_demand_ms=11.0, alpha=0.15, exploration=0.35, reward_ceiling_ms=100.0,
                 prior_service_ms=11.0, workload: dict = DEFAULT_WORKLOAD, demand: str = "tokens",
                 choices: int = 2) -> dict:
    """One run of model.md §1–6; returns the metrics of §6, the time averages
    mean_in_system, mean_in_system_replica and queue_tail, the final router
    statistics (final_s_hat, final_r_bar, final_n, per replica), rr_cursor and
    router_uniforms_used.  dt_ms = 0 selects the exact event-time mode."""
    result, _ = _simulate(policy=policy, seed=seed, rate_rps=rate_rps, ref_ms=ref_ms, events=events,
                          dt_ms=dt_ms, warmup_s=warmup_s, measure_s=measure_s, slo_ms=slo_ms,
                          queue_cap=queue_cap, reference_demand_ms=reference_demand_ms, alpha=alpha,
                          exploration=exploration, reward_ceiling_ms=reward_ceiling_ms,
                          prior_service_ms=prior_service_ms, workload=workload, demand=demand,
                          choices=choices)
    return result
