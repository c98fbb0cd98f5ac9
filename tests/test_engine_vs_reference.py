"""The compiled engine against the naive reference (tests/reference.py), run by run.

Counts must agree exactly, floats within 1e-9, per-replica vectors element by element.
The grids (tests/conftest.py) and what each covers:

- ``study``: the four deterministic policies × the four scenarios of docs/model.md §4
  × both heterogeneity settings × two rates × two seeds, every constant at its default.
- ``stress``: overload (420 req/s), queues of 3, a slowdown from an event at t = 0, and
  failures whose re-routes are accepted and shed, on a finer step (0.25 ms) and in the
  exact event-time mode (dt = 0).
- ``exact``: the exact mode with all six policies, the three demand distributions and
  every kind of event: rate changes, the straggler's slowdown, a failure, and the
  ``early`` scenario (a slowdown at t = 0, a failure and recovery, a second slowdown).
- ``random``: the randomized policies with 1, 2 and 3 choices and queues of 4, on the
  grid and in the exact mode, with failures and re-route sheds.
- ``constants``: every constant of docs/model.md §1–§6 at a distinct non-default value
  (reference demand 13 ms, ŝ₀ 7 ms, α 0.3, L 60 ms, c 0.2, SLO 35 ms, dt 0.4 ms, a
  1.5 s + 3.5 s horizon, jitter 0.8–1.25, other token medians, sigmas, bounds and
  per-token costs, replicas of 9 / 12.5 / 20 ms, 3 choices) with ``queue_cap = inf``:
  every policy, two rates, two seeds, both time modes, token and exponential demand,
  slowdowns and rate changes (two at t = 0), and an outage of all three replicas
  (re-routes shed with no cap).

``test_the_grids_exercise_what_they_claim`` checks from the reference's own records
that the re-routes and sheds these grids are meant to produce do happen.
"""

import math

import numpy as np
import pytest

import reference
import routesim
from conftest import parse, reference_workload, scenario_events
from routesim.queue.dtypes import Policy
from routesim.queue.params import PARAM

STAGES = ("study", "stress", "exact", "random", "constants")
COUNTS = ("arrivals", "completed", "shed", "unfinished")
FLOATS = ("latency_p50", "latency_p90", "latency_p95", "latency_p99", "latency_mean",
          "latency_max", "slo_miss_rate", "shed_rate", "attainment", "goodput", "throughput",
          "mean_in_system")
VECTORS = {"assigned": "assigned", "replica_completed": "replica_completed",
           "replica_mean_in_system": "mean_in_system_replica", "queue_tail": "queue_tail"}
REFERENCE_ARGS = ("exploration", "demand", "choices", "dt_ms", "warmup_s", "measure_s", "slo_ms",
                  "queue_cap", "reference_demand_ms", "alpha", "reward_ceiling_ms", "prior_service_ms")


def _points(ds):
    dims = [d for d in ds.attainment.dims]
    for idx in np.ndindex(ds.attainment.shape):
        yield {d: ds[d].values[i].item() for d, i in zip(dims, idx)}


def _close(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


_RUNS = {}


def _reference_runs(differential, stage):
    """[(point, engine run, reference metrics, reference routing decisions)] of a stage,
    the reference simulated once per point."""
    if stage not in _RUNS:
        sweep, ds = differential[stage]
        values = sweep.stages[[s.name for s in sweep.stages].index(stage)].values
        fixed = {p: values[p][0] for p in PARAM if p not in ds.dims}
        wl = reference_workload(fixed)
        runs = []
        for point in _points(ds):
            res, trace = reference._simulate(
                policy=point["policy"], seed=point["seed"], rate_rps=point["rate_rps"],
                ref_ms=list(sweep.heterogeneity[point["heterogeneity"]]),
                events=scenario_events(sweep.text, point["scenario"]),
                **{k: point[k] if k in point else fixed[k] for k in REFERENCE_ARGS},
                workload=wl)
            runs.append((point, ds.sel(point), res, trace["decisions"]))
        assert len(runs) == ds.attainment.size
        _RUNS[stage] = runs
    return _RUNS[stage]


def _mismatches(runs) -> list:
    """(point, variable, engine, reference) of every disagreement in ``runs``
    (_reference_runs)."""
    mismatches = []
    for point, run, ref, _ in runs:
        for name in COUNTS:
            if int(run[name]) != ref[name]:
                mismatches.append((point, name, int(run[name]), ref[name]))
        for name in FLOATS:
            if not _close(float(run[name]), ref[name]):
                mismatches.append((point, name, float(run[name]), ref[name]))
        for name, ref_name in VECTORS.items():
            ours, theirs = run[name].values.tolist(), list(ref[ref_name])
            if len(ours) != len(theirs) or not all(map(_close, ours, theirs)):
                mismatches.append((point, name, ours, theirs))
    return mismatches


@pytest.mark.parametrize("stage", STAGES)
def test_every_run_matches_the_reference(differential, stage):
    mismatches = _mismatches(_reference_runs(differential, stage))
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:3]}"


def sample_sweep() -> str:
    """The fast tier's sample of the queue model (tests/tiers.py): every policy of its
    registry (routesim/queue/dtypes.py), so that a new one is sampled without editing a
    list, in both time modes, on the ``early`` scenario (a slowdown at t = 0, a failure
    and recovery, a second slowdown) with queues of 4 and a 5 s horizon, seed 10 (the
    grids above use 1-9)."""
    policies = ", ".join(f'"{p.name.lower()}"' for p in Policy)
    return f"""
[[stages]]
name = "sample"
policy = [{policies}]
rate_rps = [300]
scenario = ["early"]
queue_cap = 4
dt_ms = [0.5, 0]
warmup_s = 1
measure_s = 4
seeds = [10]
"""


@pytest.fixture(scope="module")
def sample():
    sweep = parse(sample_sweep())
    return {name: (sweep, ds) for name, ds in routesim.run(sweep, show_progress=False).items()}


@pytest.mark.fast
def test_the_sample_matches_the_reference(sample):
    mismatches = _mismatches(_reference_runs(sample, "sample"))
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:3]}"


def test_the_constants_stage_changes_every_constant(differential):
    """No constant of the ``constants`` grid is at its default or equal to another
    constant in ms, so that no two can be mistaken for each other unnoticed."""
    sweep, ds = differential["constants"]
    values = sweep.stages[0].values
    for name, p in PARAM.items():
        if name not in ("demand",):
            assert all(v != p.default for v in values[name]), name
    assert list(values["queue_cap"]) == [math.inf]
    assert set(values["dt_ms"]) == {0.4, 0.0}
    ms = [values[n][0] for n in ("reference_demand_ms", "prior_service_ms", "reward_ceiling_ms", "slo_ms")]
    het = list(sweep.heterogeneity[str(ds.heterogeneity.values[0])])
    assert len(set(ms + het)) == len(ms + het) == 7
    assert 11.0 not in ms + het


def _reroutes(decisions):
    """(accepted, shed) re-routes among a run's routing decisions."""
    kinds = [c is not None for k, _, c in decisions if k == "reroute"]
    return sum(kinds), len(kinds) - sum(kinds)


@pytest.mark.parametrize("stage", ["stress", "random", "constants"])
def test_the_grids_exercise_what_they_claim(differential, stage):
    """From the reference's records: in each time mode of the stage, some failure
    re-routes a request and some re-route is shed."""
    _, ds = differential[stage]
    by_mode = {}
    for point, run, ref, decisions in _reference_runs(differential, stage):
        accepted, shed = _reroutes(decisions)
        mode = "exact" if point.get("dt_ms", ds.attrs.get("dt_ms")) == 0 else "grid"
        seen = by_mode.setdefault(mode, [0, 0])
        seen[0] += accepted > 0
        seen[1] += shed > 0
    assert set(by_mode) == {"exact", "grid"}
    for mode, (accepted, shed) in by_mode.items():
        assert accepted > 0, f"{stage}, {mode}: no failure re-routed a request"
        assert shed > 0, f"{stage}, {mode}: no re-route was shed"


def test_stress_grid_sheds(differential):
    """Queues of 3 at 420 req/s, beyond the capacity of either setting (about 290 and 315 req/s
    at the mean demand), shed in every run."""
    _, ds = differential["stress"]
    assert (ds.shed > 0).all()


def test_without_a_queue_cap_only_an_outage_sheds(differential):
    """queue_cap = inf: a healthy replica is always eligible, so nothing is shed unless
    every replica is down (model.md §5); in ``outage`` all three are down for 150 ms
    of the measurement, in which some 30 to 60 requests arrive (220 or 380 req/s)."""
    _, ds = differential["constants"]
    assert int(ds.shed.sel(scenario="mixed").max()) == 0
    assert (ds.shed.sel(scenario="outage") > 0).all()
