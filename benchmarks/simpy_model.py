"""The request-level routing model (model.md §2–§6) written in SimPy, as a peer.

This is how a researcher would write the tiny-cluster routing lab with SimPy, the
standard process-based discrete-event library for Python: one SimPy process per
replica (take the queue head, serve it, complete it), one process that releases the
arrivals and calls a plain router function, one process per scenario that fires its
events. It shares nothing with the engine but the workload: the arrivals come from
``routesim.queue.workload.generate`` so that a run here replays exactly the engine's
arrivals (common random numbers, model.md §2), and its per-run metrics can be
compared with the engine's one to one.

Time. The model is discrete (model.md §3): every arrival, event and completion is
processed at the first grid time ``k·dt >= t`` (``k >= 1``), and inside one step the
order is completions, scenario events, arrivals, starts. SimPy's clock here counts
steps, and each kind of work happens at a fixed fraction of its step::

    k + 0.00  completions          k + 0.50  arrivals
    k + 0.25  scenario events      k + 0.75  starts

(the fractions are exact in binary, so the order never depends on rounding). Grid
time ``T = k·dt`` in ms is what every formula sees, computed as the product ``k * dt``
as model.md asks. Only the discrete mode (``dt > 0``) is modelled.

``simulate_run(...)`` takes the same arguments as the naive reference
(``tests/reference.py``) and returns the metrics of model.md §6 in the same form.
"""

from __future__ import annotations

import math
from collections import deque

import simpy

from routesim.queue.workload import WorkloadParams, generate

COMPLETE, EVENT, ARRIVE, START = 0.0, 0.25, 0.5, 0.75
"""Where in its step each kind of work happens (model.md §3, steps 1-4)."""

POLICIES = ("round_robin", "least_queue", "latency_aware", "adaptive")

WORKLOAD_KEYS = {  # reference.DEFAULT_WORKLOAD key -> WorkloadParams field
    "prompt_median": "prompt_median", "prompt_sigma": "prompt_sigma",
    "prompt_min": "prompt_min", "prompt_max": "prompt_max",
    "output_median": "output_median", "output_sigma": "output_sigma",
    "output_min": "output_min", "output_max": "output_max",
    "demand_base": "demand_base", "demand_per_prompt": "demand_per_prompt",
    "demand_per_output": "demand_per_output", "jitter_min": "jitter_min", "jitter_max": "jitter_max",
}


def grid_step(t: float, dt: float) -> int:
    """k of the first grid time ``k·dt >= t``, with ``k >= 1`` (the step containing t)."""
    k = math.ceil(t / dt)
    if k > 1 and (k - 1) * dt >= t:  # t / dt rounded up past an exact grid time
        k -= 1
    elif k * dt < t:                 # ... or down below one
        k += 1
    return max(k, 1)


class Replica:
    """A FIFO waiting queue plus one in-service slot, and the router's statistics of it."""

    def __init__(self, sim: "Simulation", i: int, ref_ms: float):
        self.sim, self.i = sim, i
        self.base_speed = ref_ms / sim.reference_demand_ms   # ref_ms[i] / 11 ms
        self.slowdown = 1.0
        self.healthy = True
        self.waiting: deque[int] = deque()
        self.serving: int | None = None
        self.start_ms = 0.0
        self.s_hat = sim.prior_service_ms                            # ŝ₀
        self.r_bar = 1.0 - sim.prior_service_ms / sim.reward_ceiling_ms  # 1 - ŝ₀ / L
        self.n_obs = 0
        self.assigned = 0
        self.completed = 0
        self.work = sim.env.event()       # succeeds when a request joins an empty queue
        sim.env.process(self.serve())

    def outstanding(self) -> int:
        return len(self.waiting) + (self.serving is not None)

    def enqueue(self, q: int) -> None:
        self.waiting.append(q)
        if not self.work.triggered:
            self.work.succeed()

    def serve(self):
        env, sim = self.sim.env, self.sim
        while True:
            if not self.waiting:
                self.work = env.event()
                yield self.work
            k = math.floor(env.now)
            yield env.timeout(k + START - env.now)          # starts come last in the step
            if not self.waiting:                            # re-routed away by a failure
                continue
            q = self.waiting.popleft()
            T = k * sim.dt
            self.serving, self.start_ms = q, T
            service = sim.demand[q] * (self.base_speed * self.slowdown) * sim.jitter[q]
            k_end = grid_step(T + service, sim.dt)
            yield env.timeout(k_end + COMPLETE - env.now)
            T = k_end * sim.dt
            self.observe(T - self.start_ms)                  # s_obs = T - start
            sim.done_ms[q] = T
            self.serving = None
            if T > sim.warmup_ms:
                self.completed += 1
                sim.throughput += 1

    def observe(self, s_obs: float) -> None:
        a, L = self.sim.alpha, self.sim.reward_ceiling_ms
        self.s_hat = (1 - a) * self.s_hat + a * s_obs
        self.r_bar = (1 - a) * self.r_bar + a * max(0.0, 1 - s_obs / L)
        self.n_obs += 1


def choose(sim: "Simulation") -> Replica | None:
    """The router (model.md §5): the replica for the next request, or None to shed."""
    eligible = [r for r in sim.replicas if r.healthy and len(r.waiting) < sim.queue_cap]
    if not eligible:
        return None
    policy = sim.policy
    if policy == "round_robin":
        return eligible[sim.cursor % len(eligible)]
    if policy == "least_queue":
        return min(eligible, key=Replica.outstanding)    # min keeps the first of equals
    if policy == "latency_aware":
        return min(eligible, key=lambda r: (r.outstanding() + 1) * r.s_hat)
    if policy == "adaptive":
        log_t = math.log(sum(r.n_obs for r in sim.replicas) + 1)
        c, L = sim.exploration, sim.reward_ceiling_ms
        scores = [r.r_bar + c * math.sqrt(log_t / (r.n_obs + 1)) - r.outstanding() * r.s_hat / L
                  for r in eligible]
        return eligible[scores.index(max(scores))]
    raise ValueError(f"unknown policy {policy!r}")


class Simulation:
    """One run: the cluster, its workload and its scenario, in one SimPy environment."""

    def __init__(self, *, policy, seed, rate_rps, ref_ms, events, dt_ms, warmup_s, measure_s,
                 slo_ms, queue_cap, reference_demand_ms, alpha, exploration, reward_ceiling_ms,
                 prior_service_ms, workload):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}")
        if not dt_ms > 0:
            raise ValueError("the SimPy model is discrete: dt_ms must be > 0")
        self.policy, self.dt = policy, float(dt_ms)
        self.warmup_ms = warmup_s * 1000.0
        self.horizon_ms = (warmup_s + measure_s) * 1000.0
        self.measure_s = float(measure_s)
        self.last_step = round(self.horizon_ms / self.dt)   # K: the horizon on the grid
        self.slo_ms, self.queue_cap = slo_ms, queue_cap
        self.reference_demand_ms, self.alpha = reference_demand_ms, alpha
        self.exploration, self.reward_ceiling_ms = exploration, reward_ceiling_ms
        self.prior_service_ms = prior_service_ms

        timed = sorted(((float(e["at_s"]) * 1000.0, n, e) for n, e in enumerate(events)),
                       key=lambda x: x[:2])
        rate_events = [(t, float(e["rate_multiplier"])) for t, _, e in timed if "rate_multiplier" in e]
        wp = WorkloadParams(**{WORKLOAD_KEYS[k]: v for k, v in (workload or {}).items()})
        wl = generate(seed, rate_rps, rate_events, self.horizon_ms, wp)
        self.arrival_ms = wl.t_ms.tolist()
        self.demand = wl.demand_ms.tolist()
        self.jitter = wl.jitter.tolist()
        self.done_ms = [math.nan] * len(self.arrival_ms)
        self.shed = [False] * len(self.arrival_ms)

        self.env = simpy.Environment()
        self.replicas = [Replica(self, i, ref) for i, ref in enumerate(ref_ms)]
        self.cursor = 0
        self.throughput = 0
        self.env.process(self.arrivals())
        self.env.process(self.scenario([(t, e) for t, _, e in timed if "rate_multiplier" not in e]))

    def at(self, t_ms: float, phase: float) -> simpy.Timeout:
        """Wait until the given phase of the step containing ``t_ms``."""
        return self.env.timeout(grid_step(t_ms, self.dt) + phase - self.env.now)

    def route(self, q: int, t_decision: float) -> None:
        replica = choose(self)
        if replica is None:
            self.shed[q] = True
            return
        replica.enqueue(q)
        self.cursor += 1              # round robin's cursor: accepted requests only
        if self.warmup_ms <= t_decision < self.horizon_ms:
            replica.assigned += 1

    def arrivals(self):
        for q, t in enumerate(self.arrival_ms):
            if grid_step(t, self.dt) + ARRIVE > self.env.now:
                yield self.at(t, ARRIVE)
            self.route(q, t)

    def scenario(self, events):
        for t, e in events:
            yield self.at(t, EVENT)
            replica = self.replicas[int(e["replica"]) - 1]   # 1-based in the sweep file
            if "slowdown" in e:
                replica.slowdown = float(e["slowdown"])
            elif e.get("fail"):
                replica.healthy = False                     # not eligible for its own queue
                moved, replica.waiting = replica.waiting, deque()
                for q in moved:                             # head first, arrival time kept
                    self.route(q, t)
            elif e.get("recover"):
                replica.healthy = True

    def run(self) -> dict:
        self.env.run(until=self.last_step + 0.875)          # through step K's starts
        return self.metrics()

    def metrics(self) -> dict:
        """Model.md §6 over the cohort (arrivals in [warm-up, horizon))."""
        arrivals = shed = 0
        latencies = []
        for q, t in enumerate(self.arrival_ms):
            if not self.warmup_ms <= t < self.horizon_ms:
                continue
            arrivals += 1
            if not math.isnan(self.done_ms[q]):
                latencies.append(self.done_ms[q] - t)
            elif self.shed[q]:
                shed += 1
        completed = len(latencies)
        total = sum(latencies)           # in arrival order, as the engine sums
        latencies.sort()
        on_time = sum(1 for x in latencies if x <= self.slo_ms)
        nan = math.nan

        def rank(p):
            return latencies[(p * completed + 99) // 100 - 1] if completed else nan

        return {
            "arrivals": arrivals, "completed": completed, "shed": shed,
            "unfinished": arrivals - completed - shed,
            "latency_p50": rank(50), "latency_p90": rank(90), "latency_p95": rank(95),
            "latency_p99": rank(99),
            "latency_mean": total / completed if completed else nan,
            "latency_max": latencies[-1] if completed else nan,
            "slo_miss_rate": (completed - on_time) / completed if completed else nan,
            "shed_rate": shed / arrivals if arrivals else nan,
            "attainment": on_time / arrivals if arrivals else nan,
            "goodput": on_time / self.measure_s,
            "throughput": self.throughput / self.measure_s,
            "assigned": [r.assigned for r in self.replicas],
            "replica_completed": [r.completed for r in self.replicas],
            "requests": len(self.arrival_ms),
        }


def simulate_run(*, policy: str, seed: int, rate_rps: float, ref_ms, events, dt_ms=0.5,
                 warmup_s=3.0, measure_s=12.0, slo_ms=50.0, queue_cap=50, reference_demand_ms=11.0,
                 alpha=0.15, exploration=0.35, reward_ceiling_ms=100.0, prior_service_ms=11.0,
                 workload: dict | None = None) -> dict:
    """One run of model.md §2–§6 in SimPy; the metrics of §6 (plus ``requests``, the
    arrivals simulated). Arguments as ``tests/reference.simulate_run``; ``events`` in
    sweep-file form (``{"at_s": 6, "replica": 2, "fail": True}``, 1-based replicas)."""
    return Simulation(policy=policy, seed=seed, rate_rps=rate_rps, ref_ms=list(ref_ms),
                      events=events, dt_ms=dt_ms, warmup_s=warmup_s, measure_s=measure_s,
                      slo_ms=slo_ms, queue_cap=queue_cap, reference_demand_ms=reference_demand_ms,
                      alpha=alpha, exploration=exploration, reward_ceiling_ms=reward_ceiling_ms,
                      prior_service_ms=prior_service_ms, workload=workload).run()
