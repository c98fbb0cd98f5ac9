"""Self-checks of the naive reference simulator (tests/reference.py).

Expectations come from workload-vectors.md, from model.md worked by hand, and from
independent closed-form recurrences (single FIFO server), never from numbers copied
out of a reference run.
"""

import importlib.util
import math
import pathlib

import numpy as np
import pytest

_spec = importlib.util.spec_from_file_location(
    "routesim_reference", pathlib.Path(__file__).with_name("reference.py"))
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)

HET = {"default": [8.0, 11.0, 16.0], "high": [6.0, 11.0, 22.0]}
SCENARIOS = {  # model.md §4, in sweep-file form
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
# Workload vectors (workload-vectors.md)
# ------------------------------------------------------------------------------------

VECTORS = [
    # (seed, rate, scenario, n_arrivals, rows)
    (1, 100, "steady", 1531, [
        (0, 7.170744167610923, 1288, 412, 1.0897298894274488, 31.78125),
        (1, 10.907959052703097, 569, 42, 0.9818398272738322, 5.84765625),
        (2, 18.884010925896934, 386, 73, 1.0076286626438558, 7.0703125),
        (1530, 14974.29208588948, 837, 77, 1.0415633826694832, 9.08203125),
    ]),
    (7, 250, "burst", 4184, [
        (0, 3.9243354521382106, 505, 16, 0.9450414379981183, 3.97265625),
        (1, 5.351985540263618, 1952, 93, 1.0642456836765533, 14.4375),
        (2, 11.73155102825243, 286, 206, 0.9556851224201547, 14.9921875),
        (4183, 14989.227951407203, 345, 51, 1.0468753582681396, 5.53515625),
    ]),
]


@pytest.mark.parametrize("seed,rate,scenario,n_arrivals,rows", VECTORS)
def test_workload_vectors(seed, rate, scenario, n_arrivals, rows):
    w = ref.generate_workload(seed, rate, SCENARIOS[scenario], 15000.0)
    assert set(w) == {"t_ms", "prompt", "output", "jitter", "demand_ms"}
    assert all(len(v) == n_arrivals for v in w.values())
    for k, t, prompt, output, jitter, demand in rows:
        assert abs(w["t_ms"][k] - t) <= 1e-9
        assert int(w["prompt"][k]) == prompt
        assert int(w["output"][k]) == output
        # jitter_min + (jitter_max − jitter_min)·U differs from the page's 0.9 + 0.2·U
        # by an ulp or two (1.1 − 0.9 = 0.20000000000000007): tolerate a few ulps.
        assert abs(w["jitter"][k] - jitter) <= 1e-15
        assert w["demand_ms"][k] == demand     # dyadic: exact
    assert np.all(np.diff(w["t_ms"]) > 0) and w["t_ms"][-1] < 15000.0


def test_burst_window_count():
    w = ref.generate_workload(7, 250, SCENARIOS["burst"], 15000.0)
    t = w["t_ms"]
    assert int(np.sum((t >= 7000.0) & (t < 9000.0))) == 941


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
    if policy == "round_robin":
        assert res["rr_cursor"] == sum(1 for r in tr["replica"] if r >= 0) + tr["rerouted"]
    else:
        assert res["rr_cursor"] == 0
    lat = [res[f"latency_p{p}"] for p in (50, 90, 95, 99)]
    assert lat == sorted(lat) and lat[-1] <= res["latency_max"]
    assert 0 <= res["attainment"] <= 1 and 0 <= res["shed_rate"] <= 1
    assert res["goodput"] * 12.0 == pytest.approx(res["attainment"] * res["arrivals"])


def _never_routed(tr):
    # cohort requests that were neither placed nor shed (arrived in the very last step)
    return sum(1 for q, a in enumerate(tr["arrival"])
               if tr["W"] <= a < tr["H"] and tr["replica"][q] < 0 and not tr["shed"][q])


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
    assert res["rr_cursor"] == len(t) + tr["rerouted"]


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
    """seed 1, rate 100 (rows 0-2 of workload-vectors.md), one replica with speed 1.

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
    """The smallest grid time j·dt with j·dt >= x (x lies in step j)."""
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
    accepted requests still waiting when q is routed (start >= grid_ceil(a_q)) is >= cap."""
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
    """model.md §5: with c = 0 adaptive is latency-aware rescaled (until rewards clip)."""
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
