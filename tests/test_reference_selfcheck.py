"""Self-checks of the naive reference simulator (tests/reference.py).

Expectations come from docs/workload-vectors.md, from docs/model.md worked by hand, from
independent closed-form recurrences (single FIFO server) and from a replay of every
routing decision against its policy's rule (_check_decisions), never from numbers
copied out of a reference run.
"""

import importlib.util
import math
import pathlib

import numpy as np
import pytest

from conftest import workload_vectors

_spec = importlib.util.spec_from_file_location(
    "routesim_reference", pathlib.Path(__file__).with_name("reference.py"))
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)

HET = {"default": [8.0, 11.0, 16.0], "high": [6.0, 11.0, 22.0]}
SCENARIOS = {  # docs/model.md §4, in sweep-file form
    "steady": [],
    "burst": [{"at_s": 7, "rate_multiplier": 2.0}, {"at_s": 9, "rate_multiplier": 1.0}],
    "straggler": [{"at_s": 5, "replica": 1, "slowdown": 4.0}, {"at_s": 10, "replica": 1, "slowdown": 1.0}],
    "failure": [{"at_s": 6, "replica": 2, "fail": True}, {"at_s": 11, "replica": 2, "recover": True}],
}
DEFAULT_KW = dict(dt_ms=0.5, warmup_s=3.0, measure_s=12.0, slo_ms=50.0, queue_cap=50,
                  reference_demand_ms=11.0, alpha=0.15, exploration=0.35, reward_ceiling_ms=100.0,
                  prior_service_ms=11.0, workload=ref.DEFAULT_WORKLOAD)


def run_traced(**kw):
    args = dict(DEFAULT_KW)
    args.update(kw)
    return ref._simulate(**args)


# ------------------------------------------------------------------------------------
# Workload vectors (docs/workload-vectors.md)
# ------------------------------------------------------------------------------------

VECTORS = workload_vectors()


@pytest.mark.parametrize("v", VECTORS, ids=[f"seed{v['seed']}-{v['scenario']}" for v in VECTORS])
def test_workload_vectors(v):
    w = ref.generate_workload(v["seed"], v["rate_rps"], SCENARIOS[v["scenario"]], v["horizon_ms"])
    assert set(w) == {"t_ms", "prompt", "output", "jitter", "demand_ms"}
    assert all(len(x) == v["arrivals"] for x in w.values())
    for k, (t, prompt, output, jitter, demand) in v["rows"].items():
        assert abs(w["t_ms"][k] - t) <= 1e-9
        assert int(w["prompt"][k]) == prompt
        assert int(w["output"][k]) == output
        # jitter_min + (jitter_max − jitter_min)·U differs from the page's 0.9 + 0.2·U
        # by an ulp or two (1.1 − 0.9 = 0.20000000000000007): tolerate a few ulps.
        assert abs(w["jitter"][k] - jitter) <= 1e-15
        assert w["demand_ms"][k] == demand     # dyadic: exact
    assert np.all(np.diff(w["t_ms"]) > 0) and w["t_ms"][-1] < v["horizon_ms"]
    if v["window"] is not None:
        count, lo, hi = v["window"]
        assert int(np.sum((w["t_ms"] >= lo) & (w["t_ms"] < hi))) == count


def test_workload_rows_do_not_depend_on_block_size(monkeypatch):
    a = ref.generate_workload(3, 175, SCENARIOS["burst"], 15000.0)
    monkeypatch.setattr(ref, "_ROW_BLOCK", 7)
    b = ref.generate_workload(3, 175, SCENARIOS["burst"], 15000.0)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_time_change_properties():
    steady = ref.generate_workload(5, 250, [], 15000.0)
    burst = ref.generate_workload(5, 250, SCENARIOS["burst"], 15000.0)
    # before the burst the workloads are identical (same S_k, same segment)
    n_before = int(np.sum(steady["t_ms"] < 7000.0))
    np.testing.assert_array_equal(steady["t_ms"][:n_before], burst["t_ms"][:n_before])
    # tokens and jitter are per arrival index, independent of the rate profile
    m = min(len(steady["t_ms"]), len(burst["t_ms"]))
    for key in ("prompt", "output", "jitter", "demand_ms"):
        np.testing.assert_array_equal(steady[key][:m], burst[key][:m])
    # a multiplier set at time 0 is the same as a doubled base rate
    doubled = ref.generate_workload(5, 500, [], 15000.0)
    at_zero = ref.generate_workload(5, 250, [{"at_s": 0, "rate_multiplier": 2.0}], 15000.0)
    np.testing.assert_array_equal(doubled["t_ms"], at_zero["t_ms"])
    # multipliers are absolute and the later of two equal-time events wins
    tie = ref.generate_workload(5, 250, [{"at_s": 0, "rate_multiplier": 3.0},
                                         {"at_s": 0, "rate_multiplier": 2.0}], 15000.0)
    np.testing.assert_array_equal(doubled["t_ms"], tie["t_ms"])
    # a multiplier of 1 changes nothing beyond rounding
    ones = ref.generate_workload(5, 250, [{"at_s": 4, "rate_multiplier": 1.0}], 15000.0)
    assert len(ones["t_ms"]) == len(steady["t_ms"])
    assert np.max(np.abs(ones["t_ms"] - steady["t_ms"])) <= 1e-9


# ------------------------------------------------------------------------------------
# Conservation and invariants on full runs (all policies × scenarios × heterogeneity)
# ------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("het", ["default", "high"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("policy", ref.POLICIES)
def test_full_run_conservation(policy, scenario, het):
    seed = 1 + ref.POLICIES.index(policy)
    res, tr = run_traced(policy=policy, seed=seed, rate_rps=250, ref_ms=HET[het],
                         events=SCENARIOS[scenario])
    assert res["arrivals"] == res["completed"] + res["shed"] + res["unfinished"]
    # cohort arrivals come from the workload alone (common random numbers)
    t = tr["workload"]["t_ms"]
    assert res["arrivals"] == int(np.sum((t >= 3000.0) & (t < 15000.0)))
    # statistics are kept for every policy: n_i counts all completions on replica i
    done = np.array(tr["done"])
    assert sum(res["final_n"]) == int(np.sum(~np.isnan(done)))
    assert res["throughput"] * 12.0 == pytest.approx(sum(res["replica_completed"]))
    assert len(res["assigned"]) == len(res["replica_completed"]) == 3
    # every cohort request routed at least once was assigned in [W, H)
    assert sum(res["assigned"]) >= res["arrivals"] - res["shed"] - _never_routed(tr)
    # every decision follows its policy's rule, round robin's cursor counting re-routes:
    # round robin sends a third of 250 req/s to replica 2 (load about 0.9), so it has a
    # queue to re-route when it fails
    _check_decisions(tr, policy=policy, seed=seed, n_rep=3, events=SCENARIOS[scenario], dt=0.5)
    if policy == "round_robin" and scenario == "failure":
        assert tr["rerouted"] > 0
    lat = [res[f"latency_p{p}"] for p in (50, 90, 95, 99)]
    assert lat == sorted(lat) and lat[-1] <= res["latency_max"]
    assert 0 <= res["attainment"] <= 1 and 0 <= res["shed_rate"] <= 1
    assert res["goodput"] * 12.0 == pytest.approx(res["attainment"] * res["arrivals"])


def _never_routed(tr):
    # cohort requests that were neither placed nor shed (arrived in the very last step)
    return sum(1 for q, a in enumerate(tr["arrival"])
               if tr["W"] <= a < tr["H"] and tr["replica"][q] < 0 and not tr["shed"][q])


def _check_decisions(tr, *, policy, seed, n_rep, events, dt, queue_cap=50, choices=2, alpha=0.15,
                     exploration=0.35, L=100.0, prior=11.0):
    """Replay every routing decision of a run from its records and check it against the
    rule of docs/model.md §5 (§8 for the randomized policies): the eligible set, the
    outstanding counts and the router's statistics at each decision are rebuilt from
    the decision list, the start and completion times and the events alone. Round
    robin's cursor is the number of accepted decisions before, re-routes included.
    Returns the number of accepted decisions."""
    replica_events = sorted((_grid_ceil(ev["at_s"] * 1000.0, dt), i, ev) for i, ev in enumerate(events)
                            if "replica" in ev)
    times = [t for t, _, _ in replica_events]
    assert len(set(times)) == len(times), "precondition: no two replica events at one time"
    fails = {}
    for t, _, ev in replica_events:
        if ev.get("fail"):
            fails.setdefault(int(ev["replica"]) - 1, []).append(t)
    start, done = tr["start"], tr["done"]
    completions = sorted((r for r in range(len(done)) if not math.isnan(done[r])), key=lambda r: done[r])
    per = {"random": 1, "power_of_two": choices}.get(policy, 0)
    child = np.random.SeedSequence(seed).spawn(1)[0]
    u = np.random.Generator(np.random.PCG64(child)).random(per * len(tr["decisions"]))
    healthy, next_event = [True] * n_rep, 0
    s_hat, r_bar, n, next_done = [prior] * n_rep, [1.0 - prior / L] * n_rep, [0] * n_rep, 0
    on = [[] for _ in range(n_rep)]           # requests placed on each replica, not completed
    where, since = {}, {}                     # request -> the replica it is on, and from when
    accepted, last_T = 0, -math.inf
    for j, (kind, q, choice) in enumerate(tr["decisions"]):
        if kind == "arrival":
            T = _grid_ceil(tr["arrival"][q], dt)
        else:                                 # at the first failure of its replica since it got there
            T = min(f for f in fails[where[q]] if f >= since[q])
        assert T >= last_T
        last_T = T
        while next_done < len(completions) and done[completions[next_done]] <= T:   # phase 1
            r = completions[next_done]
            i, x = tr["replica"][r], done[r] - start[r]
            s_hat[i] = (1 - alpha) * s_hat[i] + alpha * x
            r_bar[i] = (1 - alpha) * r_bar[i] + alpha * max(0.0, 1 - x / L)
            n[i] += 1
            on[i].remove(r)
            next_done += 1
        while next_event < len(replica_events) and replica_events[next_event][0] <= T:   # phase 2
            ev = replica_events[next_event][2]
            if ev.get("fail") or ev.get("recover"):
                healthy[int(ev["replica"]) - 1] = bool(ev.get("recover"))
            next_event += 1
        waiting = [sum(1 for r in rs if not start[r] < T) for rs in on]
        o = [len(rs) for rs in on]
        if kind == "reroute":                 # it was waiting on a replica that has failed
            assert not healthy[where[q]] and not start[q] < T
            on[where[q]].remove(q)
            waiting[where[q]] -= 1
            o[where[q]] -= 1
        E = [i for i in range(n_rep) if healthy[i] and waiting[i] < queue_cap]
        us = u[j * per:(j + 1) * per]
        if not E:
            want = None
        elif policy == "round_robin":
            want = E[accepted % len(E)]
        elif policy == "least_queue":
            want = min(E, key=lambda i: (o[i], i))
        elif policy == "latency_aware":
            want = min(E, key=lambda i: ((o[i] + 1) * s_hat[i], i))
        elif policy == "adaptive":
            total = sum(n)
            score = {i: (r_bar[i] + exploration * math.sqrt(math.log(total + 1) / (n[i] + 1)))
                     - (o[i] * s_hat[i]) / L for i in E}
            want = max(E, key=lambda i: (score[i], -i))
        elif policy == "random":
            want = E[math.floor(us[0] * len(E))]
        else:                                 # power_of_two: a partial shuffle, then the least outstanding
            e, d = list(E), min(choices, len(E))
            for k in range(d):
                m = k + math.floor(us[k] * (len(E) - k))
                e[k], e[m] = e[m], e[k]
            want = min(e[:d], key=lambda i: (o[i], i))
        assert choice == want, (j, kind, q, T, E, o, choice, want)
        if choice is not None:
            on[choice].append(q)
            where[q], since[q] = choice, T
            accepted += 1
    return accepted


def test_failure_rerouting():
    res, tr = run_traced(policy="least_queue", seed=11, rate_rps=250, ref_ms=HET["high"],
                         events=SCENARIOS["failure"])
    assert tr["rerouted"] > 0          # replica 2 had a queue at 6 s
    for q, i in enumerate(tr["replica"]):
        if i == 1 and not math.isnan(tr["start"][q]):
            assert not (6000.0 <= tr["start"][q] < 11000.0)   # no traffic while failed
    assert res["arrivals"] == res["completed"] + res["shed"] + res["unfinished"]


def test_round_robin_rotation_and_failure():
    res, tr = run_traced(policy="round_robin", seed=2, rate_rps=150, ref_ms=[11.0, 11.0, 11.0],
                         events=[{"at_s": 1, "replica": 2, "fail": True},
                                 {"at_s": 2, "replica": 2, "recover": True}],
                         warmup_s=0.0, measure_s=3.0)
    t = tr["arrival"]
    assert not any(tr["shed"])
    before = [q for q in range(len(t)) if t[q] < 1000.0]
    assert [tr["replica"][q] for q in before] == [q % 3 for q in before]
    during = [q for q in range(len(t)) if 1000.0 < t[q] <= 2000.0]
    reps = [tr["replica"][q] for q in during]
    assert 1 not in reps
    assert all(a != b for a, b in zip(reps, reps[1:]))   # alternates over E = [0, 2]
    # every decision is E[cursor mod |E|], with E as the failure leaves it
    _check_decisions(tr, policy="round_robin", seed=2, n_rep=3, events=[
        {"at_s": 1, "replica": 2, "fail": True}, {"at_s": 2, "replica": 2, "recover": True}], dt=0.5)


def test_round_robin_equal_replicas_assign_in_rotation():
    res, tr = run_traced(policy="round_robin", seed=4, rate_rps=200, ref_ms=[11.0, 11.0, 11.0],
                         events=[], warmup_s=0.0, measure_s=2.0)
    n = len(tr["arrival"])
    assert tr["replica"] == [q % 3 for q in range(n)]
    assert res["assigned"] == [len(range(i, n, 3)) for i in range(3)]
    assert res["rr_cursor"] == n


# ------------------------------------------------------------------------------------
# Hand-computable tiny cases
# ------------------------------------------------------------------------------------

def test_single_replica_by_hand():
    """seed 1, rate 100 (rows 0-2 of docs/workload-vectors.md), one replica with speed 1.

    q0 arrives 7.1707 → in step (7.0, 7.5] → starts 7.5; service 31.78125·1.08973 = 34.633
       → end 42.133 → completes at 42.5 (s_obs = 35.0); latency 42.5 − 7.17074.
    q1 arrives 10.908 (busy) → starts 42.5 right after q0's completion in the same step;
       service 5.84765625·0.98184 = 5.741 → end 48.24 → completes 48.5 (s_obs = 6.0).
    q2 arrives 18.884 → starts 48.5; service 7.0703125·1.00763 = 7.124 → end 55.62
       → completes 56.0 (s_obs = 7.5).  The horizon is 60 ms; q3.. are unfinished.
    """
    res, tr = run_traced(policy="least_queue", seed=1, rate_rps=100, ref_ms=[11.0], events=[],
                         warmup_s=0.0, measure_s=0.06)
    assert tr["start"][:3] == [7.5, 42.5, 48.5]
    assert tr["done"][:3] == [42.5, 48.5, 56.0]
    lat = [42.5 - 7.170744167610923, 48.5 - 10.907959052703097, 56.0 - 18.884010925896934]
    assert res["completed"] == 3
    assert res["latency_max"] == pytest.approx(max(lat), abs=1e-9)
    assert res["latency_p50"] == pytest.approx(sorted(lat)[1], abs=1e-9)
    assert res["latency_mean"] == pytest.approx(sum(lat) / 3, abs=1e-9)
    assert res["arrivals"] == res["completed"] + res["unfinished"]
    # ŝ: 11 → 14.6 → 13.31 → 12.4385 ; r̄: 0.89 → 0.854 → 0.8669 → 0.875615
    assert res["final_s_hat"][0] == pytest.approx(12.4385, abs=1e-12)
    assert res["final_r_bar"][0] == pytest.approx(0.875615, abs=1e-12)
    assert res["final_n"] == [3]
    assert res["throughput"] == pytest.approx(3 / 0.06)
    assert res["slo_miss_rate"] == 0.0
    assert res["attainment"] == pytest.approx(3 / res["arrivals"])


def _grid_ceil(x, dt):
    """The smallest grid time j·dt with j·dt >= x (x lies in step j); x itself in exact
    mode (dt = 0)."""
    if dt == 0:
        return x
    j = max(0, math.ceil(x / dt))
    while j > 0 and (j - 1) * dt >= x:
        j -= 1
    while j * dt < x:
        j += 1
    return j * dt


def _fifo_recurrence(arr, demand, jitter, speed_at, cap, dt, t_end):
    """Single FIFO server with waiting cap, from the model's phase order:
    start_q = max(grid_ceil(a_q), completion of the previous accepted request);
    completion = grid_ceil(start + service); q is shed when the number of earlier
    accepted requests still waiting when q is routed (start >= grid_ceil(a_q)) is >= cap.
    In exact mode (dt = 0) every time is its own: a start at a_q happens after q is
    routed, and a completion at a_q before it."""
    start, done, shed = [math.nan] * len(arr), [math.nan] * len(arr), [False] * len(arr)
    accepted = []
    prev_done = 0.0
    for q, a in enumerate(arr):
        T = _grid_ceil(a, dt)
        if T > t_end:
            break
        waiting = sum(1 for r in accepted if not start[r] < T)   # nan (never starts) counts
        if waiting >= cap:
            shed[q] = True
            continue
        accepted.append(q)
        s = max(T, prev_done)
        if s > t_end or math.isnan(prev_done):
            prev_done = math.nan
            continue
        start[q] = s
        end = s + demand[q] * speed_at(s) * jitter[q]
        c = _grid_ceil(end, dt)
        if c > t_end:
            prev_done = math.nan
            continue
        done[q] = prev_done = c
    return start, done, shed


@pytest.mark.parametrize("cap", [1, 3, 50])
@pytest.mark.parametrize("policy", ref.POLICIES)
def test_single_replica_matches_fifo_recurrence(policy, cap):
    # overloaded (rate 150 on one 11 ms replica) and straggling 4× in (0.4 s, 0.8 s]
    events = [{"at_s": 0.4, "replica": 1, "slowdown": 4.0}, {"at_s": 0.8, "replica": 1, "slowdown": 1.0}]
    res, tr = run_traced(policy=policy, seed=9, rate_rps=150, ref_ms=[11.0], events=events,
                         warmup_s=0.2, measure_s=1.0, queue_cap=cap)
    w = tr["workload"]
    speed_at = lambda s: (11.0 / 11.0) * (4.0 if 400.0 <= s < 800.0 else 1.0)  # grid-aligned events
    start, done, shed = _fifo_recurrence(list(w["t_ms"]), list(w["demand_ms"]), list(w["jitter"]),
                                         speed_at, cap, 0.5, 1200.0)
    assert np.array_equal(tr["start"], start, equal_nan=True)
    assert np.array_equal(tr["done"], done, equal_nan=True)
    assert tr["shed"] == shed
    if cap < 50:
        assert res["shed"] > 0
    assert res["arrivals"] == res["completed"] + res["shed"] + res["unfinished"]
    # ŝ from the recurrence's completions, in completion order
    s_hat, n = 11.0, 0
    for q in range(len(done)):
        if not math.isnan(done[q]):
            s_hat = 0.85 * s_hat + 0.15 * (done[q] - start[q])
            n += 1
    assert res["final_n"] == [n]
    assert res["final_s_hat"][0] == pytest.approx(s_hat, rel=1e-12)


def test_queue_cap_zero_and_failure_at_time_zero_shed_everything():
    for kw in (dict(queue_cap=0, events=[]),
               dict(events=[{"at_s": 0, "replica": 1, "fail": True}])):
        for policy in ref.POLICIES:
            res = ref.simulate_run(policy=policy, seed=3, rate_rps=100, ref_ms=[11.0],
                                   warmup_s=0.5, measure_s=1.0, **kw)
            assert res["arrivals"] > 0 and res["shed"] == res["arrivals"]
            assert res["shed_rate"] == 1.0 and res["attainment"] == 0.0 and res["goodput"] == 0.0
            assert math.isnan(res["latency_p50"]) and math.isnan(res["slo_miss_rate"])
            assert res["throughput"] == 0.0 and res["assigned"] == [0] and res["rr_cursor"] == 0


def test_no_arrivals_gives_nan_rates():
    res = ref.simulate_run(policy="adaptive", seed=1, rate_rps=0.001, ref_ms=[8.0, 11.0, 16.0],
                           events=[], warmup_s=0.1, measure_s=0.1)
    assert res["arrivals"] == 0
    assert math.isnan(res["shed_rate"]) and math.isnan(res["attainment"])
    assert res["goodput"] == 0.0


def test_adaptive_with_c0_matches_latency_aware_before_clipping():
    """docs/model.md §5: with c = 0 adaptive is latency-aware rescaled (until rewards clip)."""
    kw = dict(seed=5, rate_rps=175, ref_ms=HET["default"], events=[], warmup_s=1.0, measure_s=3.0)
    la, tr_la = run_traced(policy="latency_aware", **kw)
    ad, tr_ad = run_traced(policy="adaptive", exploration=0.0, **kw)
    services = [d - s for d, s in zip(tr_ad["done"], tr_ad["start"]) if not math.isnan(d)]
    assert max(services) < 100.0      # precondition: no reward clipped
    assert tr_la["replica"] == tr_ad["replica"]
    assert la["assigned"] == ad["assigned"]


def test_nearest_rank():
    xs = list(range(1, 101))
    assert [ref.nearest_rank(xs, p) for p in (50, 90, 95, 99)] == [50, 90, 95, 99]
    assert [ref.nearest_rank([7.0], p) for p in (50, 99)] == [7.0, 7.0]
    assert ref.nearest_rank([1, 2, 3], 50) == 2            # ceil(1.5) = 2
    assert ref.nearest_rank(list(range(1, 11)), 95) == 10  # ceil(9.5) = 10
    assert ref.nearest_rank(list(range(1, 21)), 95) == 19  # 19 exactly, no float round-up
    assert math.isnan(ref.nearest_rank([], 50))


# ------------------------------------------------------------------------------------
# Exact event-time mode (dt_ms = 0)
# ------------------------------------------------------------------------------------

FLAT = dict(ref.DEFAULT_WORKLOAD, jitter_min=1.0, jitter_max=1.0)   # jitter exactly 1.0


def test_exact_single_replica_by_hand():
    """seed 1, rate 100, one replica of speed 1, constant demand 11 ms, no jitter: every
    service is exactly 11 ms and starts the moment the replica is free.
    a = 7.1707, 10.9080, 18.8840, 22.8848, 24.3240, 38.2015 (then 70.8 > 60)
    q0 7.1707 → 18.1707; q1 18.1707 → 29.1707; q2 29.1707 → 40.1707; q3 40.1707 → 51.1707;
    q4 starts 51.1707, would end 62.1707 > H = 60: unfinished, as is q5 (waiting)."""
    res, tr = run_traced(policy="least_queue", seed=1, rate_rps=100, ref_ms=[11.0], events=[],
                         warmup_s=0.0, measure_s=0.06, dt_ms=0, demand="constant", workload=FLAT)
    a = tr["arrival"]
    assert len(a) == 6 and tr["workload"]["jitter"].tolist() == [1.0] * 6
    assert tr["workload"]["demand_ms"].tolist() == [11.0] * 6
    s0 = a[0]
    starts = [s0, s0 + 11.0, s0 + 11.0 + 11.0, s0 + 11.0 + 11.0 + 11.0]
    assert tr["start"][:4] == starts
    assert tr["done"][:4] == [s + 11.0 for s in starts]
    assert tr["start"][4] == starts[3] + 11.0 and math.isnan(tr["done"][4])
    assert math.isnan(tr["start"][5]) and math.isnan(tr["done"][5])
    assert res["completed"] == 4 and res["unfinished"] == 2 and res["shed"] == 0
    lat = sorted(d - x for d, x in zip(tr["done"][:4], a))
    assert res["latency_mean"] == pytest.approx(sum(lat) / 4, abs=1e-12)
    assert res["latency_max"] == lat[-1]
    # every s_obs is 11 (up to rounding of (s + 11) − s): ŝ stays 11, r̄ stays 0.89
    assert res["final_s_hat"][0] == pytest.approx(11.0, abs=1e-12)
    assert res["final_r_bar"][0] == pytest.approx(0.89, abs=1e-12)
    assert res["final_n"] == [4]
    # in system: q0 from 7.17, then 1..3 until q4 ends beyond H (q1 joins at 10.9, ...)
    steps = sorted([(x, +1) for x in a] + [(d, -1) for d in tr["done"][:4]])
    area, n, t_prev = 0.0, 0, 0.0
    for t, delta in steps:
        area += (t - t_prev) * n
        n, t_prev = n + delta, t
    area += (60.0 - t_prev) * n
    assert res["mean_in_system"] == pytest.approx(area / 60.0, rel=1e-12)


def test_exact_tokens_demand_by_hand():
    """Rows 0-2 of docs/workload-vectors.md in exact mode: completions at start + service."""
    res, tr = run_traced(policy="least_queue", seed=1, rate_rps=100, ref_ms=[11.0], events=[],
                         warmup_s=0.0, measure_s=0.06, dt_ms=0)
    w = tr["workload"]
    service = [float(w["demand_ms"][q]) * 1.0 * float(w["jitter"][q]) for q in range(3)]
    # 34.633, 5.741, 7.124: q0 7.1707 → 41.8039; q1 41.8039 → 47.5453; q2 47.5453 → 54.6695
    assert tr["start"][0] == tr["arrival"][0]
    assert tr["done"][0] == tr["arrival"][0] + service[0]
    assert tr["start"][1] == tr["done"][0] and tr["done"][1] == tr["start"][1] + service[1]
    assert tr["start"][2] == tr["done"][1] and tr["done"][2] == tr["start"][2] + service[2]
    assert tr["done"][2] == pytest.approx(54.6695, abs=1e-4)
    assert res["completed"] == 3


def _at_s_for(ms):
    """A float at_s with at_s * 1000.0 == ms exactly (an event at exactly that time)."""
    x = ms / 1000.0
    for _ in range(16):
        if x * 1000.0 == ms:
            return x
        x = float(np.nextafter(x, math.inf if x * 1000.0 < ms else -math.inf))
    raise AssertionError(f"no at_s for {ms!r}")


def test_exact_ties_completion_then_event_then_arrival():
    """Two replicas of equal speed, service D = a1 − a0 exactly, so q0 ends exactly at a1.
    At T = a1 the order is: q0 completes (replica 0 idle again), then the slowdown of
    replica 0 at a1 is applied, then q1 is routed (least queue: both empty → id 0), then
    q1 starts on replica 0 at a1 with the new speed.  Routing before the completion would
    have sent q1 to replica 1; starting before the event would have served it at speed 1."""
    a = ref.generate_workload(1, 100, [], 60.0)["t_ms"].tolist()
    D = a[1] - a[0]
    assert a[0] + D == a[1]                                   # precondition: an exact tie
    events = [{"at_s": _at_s_for(a[1]), "replica": 1, "slowdown": 2.0}]
    res, tr = run_traced(policy="least_queue", seed=1, rate_rps=100, ref_ms=[D, D], events=events,
                         warmup_s=0.0, measure_s=0.06, dt_ms=0, demand="constant",
                         reference_demand_ms=D, workload=FLAT)
    assert tr["replica"][:3] == [0, 0, 0]
    assert tr["start"][:2] == [a[0], a[1]]
    assert tr["done"][0] == a[1]                              # completes exactly at its end
    assert tr["done"][1] == a[1] + (D * 2.0) * 1.0            # served at the slowed speed
    assert a[1] + 2 * D < a[2] and tr["start"][2] == a[2]     # q2 finds replica 0 idle
    assert tr["done"][0] - tr["start"][0] == D                 # s_obs = T − start, exactly D here
    # the same with a failure of replica 1 at a1: the event precedes the arrival, so q1 goes to 1
    events = [{"at_s": _at_s_for(a[1]), "replica": 1, "fail": True}]
    _, tr = run_traced(policy="least_queue", seed=1, rate_rps=100, ref_ms=[D, D], events=events,
                       warmup_s=0.0, measure_s=0.06, dt_ms=0, demand="constant",
                       reference_demand_ms=D, workload=FLAT)
    assert tr["replica"][:3] == [0, 1, 1] and tr["done"][0] == a[1]


@pytest.mark.parametrize("cap", [1, 3, 50])
@pytest.mark.parametrize("policy", ref.ALL_POLICIES)
def test_exact_single_replica_matches_fifo_recurrence(policy, cap):
    events = [{"at_s": 0.4, "replica": 1, "slowdown": 4.0}, {"at_s": 0.8, "replica": 1, "slowdown": 1.0}]
    res, tr = run_traced(policy=policy, seed=9, rate_rps=150, ref_ms=[11.0], events=events,
                         warmup_s=0.2, measure_s=1.0, queue_cap=cap, dt_ms=0)
    w = tr["workload"]
    speed_at = lambda s: (11.0 / 11.0) * (4.0 if 400.0 <= s < 800.0 else 1.0)  # event first at a tie
    start, done, shed = _fifo_recurrence(list(w["t_ms"]), list(w["demand_ms"]), list(w["jitter"]),
                                         speed_at, cap, 0.0, 1200.0)
    assert np.array_equal(tr["start"], start, equal_nan=True)
    assert np.array_equal(tr["done"], done, equal_nan=True)
    assert tr["shed"] == shed
    if cap < 50:
        assert res["shed"] > 0
    assert res["arrivals"] == res["completed"] + res["shed"] + res["unfinished"]


def test_exact_queue_cap_zero_and_failure_at_time_zero_shed_everything():
    for kw in (dict(queue_cap=0, events=[]),
               dict(events=[{"at_s": 0, "replica": 1, "fail": True}])):
        for policy in ref.ALL_POLICIES:
            res = ref.simulate_run(policy=policy, seed=3, rate_rps=100, ref_ms=[11.0], dt_ms=0,
                                   warmup_s=0.5, measure_s=1.0, **kw)
            assert res["arrivals"] > 0 and res["shed"] == res["arrivals"]
            assert res["throughput"] == 0.0 and res["assigned"] == [0]
            assert res["mean_in_system"] == 0.0 and res["queue_tail"][1] == 0.0


def test_exact_and_discrete_converge_as_dt_shrinks():
    """Round robin without sheds routes identically at every dt, so each replica is the
    same FIFO queue.  On the grid an arrival is seen up to dt late and a completion up
    to dt late, so a request's completion lag δ_q obeys
    δ_q <= max(dt, δ_prev − idle) + dt, idle = the exact idle time before it: the gap
    closes in proportion to dt."""
    kw = dict(policy="round_robin", seed=5, rate_rps=150, ref_ms=HET["default"], events=[],
              warmup_s=0.2, measure_s=0.8)
    exact, tr_e = run_traced(dt_ms=0, **kw)
    gaps = {}
    for dt in (0.4, 0.04):
        res, tr = run_traced(dt_ms=dt, **kw)
        assert tr["replica"] == tr_e["replica"]
        for i in range(3):
            lag, prev_done = 0.0, 0.0
            for q in (q for q, r in enumerate(tr_e["replica"]) if r == i):
                if math.isnan(tr_e["done"][q]) or math.isnan(tr["done"][q]):
                    break
                idle = tr_e["start"][q] - prev_done
                lag = max(dt, lag - idle) + dt                # the bound on δ_q
                gap = tr["done"][q] - tr_e["done"][q]
                assert -1e-9 <= gap <= lag + 1e-9             # the grid only ever delays
                prev_done = tr_e["done"][q]
        both = [(d, e) for d, e in zip(tr["done"], tr_e["done"]) if not (math.isnan(d) or math.isnan(e))]
        assert len(both) >= res["completed"] - 3
        gaps[dt] = max(d - e for d, e in both)
        assert abs(res["latency_mean"] - exact["latency_mean"]) <= 3 * dt
        # Little: Δ(in system) ≈ λ · Δ(latency), λ = 0.15 per ms
        assert abs(res["mean_in_system"] - exact["mean_in_system"]) <= 0.5 * dt
    assert gaps[0.04] < gaps[0.4] / 5


@pytest.mark.parametrize("policy,scenario,dt", [
    (policy, scenario, dt) for policy in ref.ALL_POLICIES for scenario in SCENARIOS for dt in (0, 0.5)
    if dt == 0 or policy in ref.RANDOMIZED_POLICIES])   # discrete deterministic: test_full_run_conservation
def test_short_run_conservation(policy, scenario, dt):
    """Bookkeeping in the exact mode (every policy) and for the randomized baselines."""
    short = {"steady": [], "burst": [{"at_s": 1, "rate_multiplier": 2.0}, {"at_s": 1.5, "rate_multiplier": 1.0}],
             "straggler": [{"at_s": 1, "replica": 1, "slowdown": 4.0}, {"at_s": 1.5, "replica": 1, "slowdown": 1.0}],
             "failure": [{"at_s": 1, "replica": 2, "fail": True}, {"at_s": 1.5, "replica": 2, "recover": True}]}
    seed = 1 + ref.ALL_POLICIES.index(policy)
    res, tr = run_traced(policy=policy, seed=seed, rate_rps=300, ref_ms=HET["high"], events=short[scenario],
                         warmup_s=0.5, measure_s=1.5, queue_cap=5, dt_ms=dt)
    assert res["arrivals"] == res["completed"] + res["shed"] + res["unfinished"]
    t = tr["workload"]["t_ms"]
    assert res["arrivals"] == int(np.sum((t >= 500.0) & (t < 2000.0)))
    assert sum(res["final_n"]) == int(np.sum(~np.isnan(np.array(tr["done"]))))
    assert res["throughput"] * 1.5 == pytest.approx(sum(res["replica_completed"]))
    if scenario == "failure":
        assert tr["rerouted"] > 0 or res["shed"] > 0
    if dt == 0:
        assert _never_routed(tr) == 0                         # every arrival < H is processed
    assert sum(res["assigned"]) >= res["arrivals"] - res["shed"] - _never_routed(tr)
    _check_decisions(tr, policy=policy, seed=seed, n_rep=3, events=short[scenario], dt=dt, queue_cap=5)
    _check_time_averages(res, tr, dt, events=short[scenario])


# ------------------------------------------------------------------------------------
# Demand distributions
# ------------------------------------------------------------------------------------

def test_exponential_demand():
    D = 11.0
    tok = ref.generate_workload(2, 1000, [], 8000.0)
    exp = ref.generate_workload(2, 1000, [], 8000.0, demand="exponential", reference_demand_ms=D)
    for key in ("t_ms", "prompt", "output", "jitter"):          # only the demand changes
        np.testing.assert_array_equal(tok[key], exp[key])
    n = len(exp["demand_ms"])
    assert n > 7000
    # the inverse transform of the same U[k, 1], recomputed from the generator
    U = np.random.Generator(np.random.PCG64(2)).random((n, 4))
    np.testing.assert_allclose(exp["demand_ms"], -D * np.log1p(-U[:, 1]), rtol=1e-14, atol=0)
    mean = float(np.mean(exp["demand_ms"]))
    assert abs(mean - D) <= 5 * D / math.sqrt(n)               # exponential: sd = mean
    assert float(np.std(exp["demand_ms"])) == pytest.approx(D, rel=0.1)
    assert np.all(exp["demand_ms"] >= 0)


def test_constant_demand_and_no_jitter():
    w = ref.generate_workload(4, 200, [], 3000.0, FLAT, demand="constant", reference_demand_ms=7.5)
    tok = ref.generate_workload(4, 200, [], 3000.0)
    assert np.all(w["demand_ms"] == 7.5) and np.all(w["jitter"] == 1.0)
    np.testing.assert_array_equal(w["prompt"], tok["prompt"])
    np.testing.assert_array_equal(w["t_ms"], tok["t_ms"])
    with pytest.raises(ValueError):
        ref.generate_workload(4, 200, [], 3000.0, demand="pareto")
    # a replica of speed 2 (ref 15 ms for a 7.5 ms reference demand) serves everything in 15 ms
    _, tr = run_traced(policy="least_queue", seed=4, rate_rps=40, ref_ms=[15.0], events=[], dt_ms=0,
                       warmup_s=0.0, measure_s=1.0, demand="constant", reference_demand_ms=7.5, workload=FLAT)
    services = [d - s for d, s in zip(tr["done"], tr["start"]) if not math.isnan(d)]
    assert len(services) > 20 and all(x == pytest.approx(15.0, abs=1e-12) for x in services)


# ------------------------------------------------------------------------------------
# Randomized baselines: random and power_of_two
# ------------------------------------------------------------------------------------

def test_router_uniforms_stream():
    u = ref.router_uniforms(7, 1000)
    np.testing.assert_array_equal(ref.router_uniforms(7, 10), u[:10])    # prefix independent of count
    child = np.random.SeedSequence(7).spawn(1)[0]
    np.testing.assert_array_equal(u, np.random.Generator(np.random.PCG64(child)).random(1000))
    assert not np.array_equal(u[:4], np.random.Generator(np.random.PCG64(7)).random(4))  # not the workload's
    assert len(ref.router_uniforms(7, 0)) == 0


def _replicas(outstanding, healthy=None):
    reps = []
    for i, o in enumerate(outstanding):
        r = ref.Replica(11.0, 11.0, 11.0, 100.0)
        if o > 0:
            r.in_service = 1000 + i
            r.waiting = list(range(o - 1))
        if healthy is not None:
            r.healthy = healthy[i]
        reps.append(r)
    return reps


def test_random_and_power_of_two_choices_by_hand():
    reps = _replicas([0, 5, 5, 0])
    # random: E[floor(u·m)]
    assert [ref._choose_random(reps, 50, u) for u in (0.0, 0.2499, 0.25, 0.74, 0.75)] == [0, 0, 1, 2, 3]
    assert ref._choose_random(reps, 50, float(np.nextafter(1.0, 0.0))) == 3
    # E = [0, 1, 3] when replica 2 is unhealthy: u = 0.5 → floor(1.5) = 1 → E[1] = 1
    assert ref._choose_random(_replicas([0, 5, 5, 0], healthy=[1, 1, 0, 1]), 50, 0.5) == 1
    # queue_cap: replicas 1 and 2 have 4 waiting, so with cap 4 E = [0, 3]
    assert ref._choose_random(reps, 4, 0.6) == 3
    assert ref._choose_random(_replicas([1], healthy=[0]), 50, 0.3) is None
    # power_of_two: e = [0, 1, 2, 3]; j=0: k = 0 + floor(0.6·4) = 2 → [2, 1, 0, 3];
    # j=1: k = 1 + floor(0.0·3) = 1 → candidates [2, 1], both o = 5 → lowest id 1
    assert ref._choose_power_of_two(reps, 50, [0.6, 0.0]) == 1
    # j=0: k = 3 → [3, 1, 2, 0]; j=1: k = 1 + floor(0.5·3) = 2 → [3, 2, 1, 0]; candidates [3, 2] → 3 (o = 0)
    assert ref._choose_power_of_two(reps, 50, [0.99, 0.5]) == 3
    # j=0: k = 1 → [1, 0, 2, 3]; j=1: k = 1 + floor(0.4·3) = 2 → [1, 2, 0, 3]; candidates [1, 2] → 1
    assert ref._choose_power_of_two(reps, 50, [0.3, 0.4]) == 1
    # choices >= m: least queue over E, whatever the uniforms
    assert ref._choose_power_of_two(_replicas([3, 1, 2]), 50, [0.9, 0.9, 0.9, 0.9]) == 1
    assert ref._choose_power_of_two(_replicas([2, 1, 1]), 50, [0.0, 0.0, 0.0]) == 1
    assert ref._choose_power_of_two(_replicas([2], healthy=[0]), 50, [0.5, 0.5]) is None


def test_random_routing_is_uniform_and_uses_one_uniform_per_decision():
    res, tr = run_traced(policy="random", seed=12, rate_rps=240, ref_ms=[11.0, 11.0, 11.0], events=[],
                         warmup_s=0.0, measure_s=5.0, dt_ms=0, queue_cap=10**6)
    n = len(tr["arrival"])
    assert n > 1000 and len(tr["decisions"]) == n and res["router_uniforms_used"] == n
    u = ref.router_uniforms(12, n)
    assert tr["replica"] == [math.floor(x * 3) for x in u]          # E = [0, 1, 2] throughout
    sd = math.sqrt(n * (1 / 3) * (2 / 3))
    for count in res["assigned"]:
        assert abs(count - n / 3) <= 5 * sd


@pytest.mark.parametrize("policy,per_decision", [("random", 1), ("power_of_two", 3)])
def test_consumption_counts_include_sheds_and_reroutes(policy, per_decision):
    events = [{"at_s": 0.5, "replica": 1, "fail": True}, {"at_s": 0.8, "replica": 2, "fail": True},
              {"at_s": 1.2, "replica": 1, "recover": True}]
    res, tr = run_traced(policy=policy, seed=6, rate_rps=400, ref_ms=HET["default"], events=events,
                         warmup_s=0.2, measure_s=1.3, dt_ms=0, queue_cap=2, choices=3)
    kinds = [k for k, _, _ in tr["decisions"]]
    assert kinds.count("arrival") == len(tr["arrival"])
    assert kinds.count("reroute") > 0
    assert any(c is None for _, _, c in tr["decisions"])          # some decisions shed
    assert res["router_uniforms_used"] == per_decision * len(tr["decisions"])
    # decision j used uniforms j·per .. j·per + per − 1, shed or not: each follows its rule
    _check_decisions(tr, policy=policy, seed=6, n_rep=3, events=events, dt=0, queue_cap=2, choices=3)
    for k, q, c in tr["decisions"]:          # no traffic to failed replicas (ids 0 and 1 here)
        a = tr["arrival"][q]
        if k == "reroute" or 500.0 <= a <= 1200.0:
            assert c != 0
        if 800.0 <= a <= 1200.0:
            assert c != 1
    assert res["arrivals"] == res["completed"] + res["shed"] + res["unfinished"]


@pytest.mark.parametrize("dt", [0, 0.5])
@pytest.mark.parametrize("choices", [3, 5])
def test_power_of_two_with_all_choices_is_least_queue(choices, dt):
    events = [{"at_s": 0.7, "replica": 2, "fail": True}, {"at_s": 1.0, "replica": 2, "recover": True}]
    kw = dict(seed=8, rate_rps=420, ref_ms=HET["default"], events=events, warmup_s=0.2, measure_s=1.3,
              queue_cap=3, dt_ms=dt)
    lq, tr_lq = run_traced(policy="least_queue", **kw)
    p2, tr_p2 = run_traced(policy="power_of_two", choices=choices, **kw)
    assert lq["shed"] > 0 and any(k == "reroute" for k, _, _ in tr_lq["decisions"])
    for key in ("replica", "shed", "decisions"):
        assert tr_lq[key] == tr_p2[key], key
    for key in ("start", "done"):
        assert np.array_equal(tr_lq[key], tr_p2[key], equal_nan=True), key
    for key in lq:
        if key != "router_uniforms_used":
            assert np.array_equal(np.array(lq[key]), np.array(p2[key]), equal_nan=True), key
    assert p2["router_uniforms_used"] == choices * len(tr_p2["decisions"])


def test_power_of_two_two_choices_differs_and_balances():
    kw = dict(seed=8, rate_rps=250, ref_ms=[11.0, 11.0, 11.0], events=[], warmup_s=0.2, measure_s=2.0, dt_ms=0)
    lq = ref.simulate_run(policy="least_queue", **kw)
    p2 = ref.simulate_run(policy="power_of_two", **kw)
    rnd = ref.simulate_run(policy="random", **kw)
    assert p2["assigned"] != lq["assigned"]
    # sampling two and joining the shorter queue sits between random and least queue
    assert lq["mean_in_system"] <= p2["mean_in_system"] <= rnd["mean_in_system"]


# ------------------------------------------------------------------------------------
# Time averages: mean_in_system, mean_in_system_replica, queue_tail
# ------------------------------------------------------------------------------------

def _segments(tr, dt, events):
    """(replica, from, to) intervals each request spends in a replica's queue or slot,
    rebuilt from the trace: placed at the processing time of its arrival, moved at the
    processing time of the failure that re-routed it (or dropped there if shed), gone at
    its completion (or still there at H)."""
    H = tr["H"]
    fails = {int(ev["replica"]) - 1: [] for ev in events if ev.get("fail")}
    for ev in events:
        if ev.get("fail"):
            fails[int(ev["replica"]) - 1].append(_grid_ceil(ev["at_s"] * 1000.0, dt))
    hops = {}                                  # q -> [(replica or None, from)]
    for kind, q, c in tr["decisions"]:
        if kind == "arrival":
            hops[q] = [(c, _grid_ceil(tr["arrival"][q], dt))]
        else:                                  # the first failure of its replica after it got there
            prev, since = hops[q][-1]
            t = min(f for f in fails[prev] if f >= since)
            hops[q].append((c, t))
    segs = []
    for q, h in hops.items():
        end = tr["done"][q] if not math.isnan(tr["done"][q]) else H
        for (rep, t0), nxt in zip(h, h[1:] + [(None, end)]):
            if rep is not None:
                segs.append((rep, t0, nxt[1]))
    return segs


def _check_time_averages(res, tr, dt, events=()):
    W, H = tr["W"], tr["H"]
    n_rep = len(res["assigned"])
    segs = _segments(tr, dt, list(events))
    overlap = lambda a, b: max(0.0, min(b, H) - max(a, W))
    per = [sum(overlap(a, b) for r, a, b in segs if r == i) / (H - W) for i in range(n_rep)]
    assert res["mean_in_system"] == pytest.approx(sum(per), rel=1e-9, abs=1e-12)
    assert res["mean_in_system_replica"] == pytest.approx(per, rel=1e-9, abs=1e-12)
    tail = res["queue_tail"]
    assert len(tail) == 17 and tail[0] == 1.0
    assert all(x >= y for x, y in zip(tail, tail[1:])) and tail[-1] >= 0.0
    if tail[16] == 0.0:                         # E[o] = Σ_{l >= 1} P(o >= l), averaged over replicas
        assert sum(tail[1:]) * n_rep == pytest.approx(res["mean_in_system"], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("dt", [0, 0.5])
def test_mean_in_system_littles_law_one_replica(dt):
    """One replica, constant 11 ms demand, 30 req/s (ρ = 0.33): the time-average number in
    system equals the in-window sojourn time per ms, summed from the request trace, and
    is close to λ·W (Little) with the cohort's arrival rate and mean latency."""
    res, tr = run_traced(policy="least_queue", seed=21, rate_rps=30, ref_ms=[11.0], events=[],
                         warmup_s=0.5, measure_s=4.0, dt_ms=dt, demand="constant", workload=FLAT)
    W, H = tr["W"], tr["H"]
    assert res["shed"] == 0 and res["arrivals"] > 80
    sojourn = 0.0
    for q, a in enumerate(tr["arrival"]):
        end = tr["done"][q] if not math.isnan(tr["done"][q]) else H
        sojourn += max(0.0, min(end, H) - max(_grid_ceil(a, dt), W))
    assert res["mean_in_system"] == pytest.approx(sojourn / (H - W), rel=1e-12)
    assert res["mean_in_system_replica"] == [res["mean_in_system"]]
    little = res["arrivals"] / (H - W) * res["latency_mean"]        # λ · W
    assert res["mean_in_system"] == pytest.approx(little, rel=0.05)
    # one replica: queue_tail[1] is the busy fraction, the union of the in-system intervals
    busy, reach = 0.0, W
    for q, a in enumerate(tr["arrival"]):
        t0 = max(_grid_ceil(a, dt), reach)
        end = min(tr["done"][q] if not math.isnan(tr["done"][q]) else H, H)
        if end > t0:
            busy += end - t0
            reach = end
    assert res["queue_tail"][1] == pytest.approx(busy / (H - W), rel=1e-9)
    assert res["queue_tail"][1] == pytest.approx(30 * 11.0 / 1000, rel=0.2)   # ≈ ρ
    _check_time_averages(res, tr, dt)


@pytest.mark.parametrize("dt", [0, 0.5])
def test_queue_tail_under_overload_with_failure(dt):
    events = [{"at_s": 0.6, "replica": 2, "fail": True}, {"at_s": 1.1, "replica": 2, "recover": True}]
    res, tr = run_traced(policy="round_robin", seed=14, rate_rps=400, ref_ms=HET["high"], events=events,
                         warmup_s=0.3, measure_s=1.2, dt_ms=dt)
    tail = res["queue_tail"]
    assert tail[16] > 0.0 and tail[1] > tail[16]                 # long queues at times
    assert tr["rerouted"] > 0
    _check_time_averages(res, tr, dt, events)
