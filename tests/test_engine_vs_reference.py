"""The compiled engine against the naive reference (tests/reference.py), run by run.

Counts must agree exactly, floats within 1e-9: every policy × scenario × both
heterogeneities × several seeds and rates, plus an overloaded grid with tiny queues,
failures (re-route sheds), an event at t = 0 and a finer step; exact event-time mode
with every policy and demand distribution; the randomized policies with several
sample sizes.
"""

import math

import numpy as np
import pytest

import reference
from conftest import scenario_events
from routesim.config import PARAM

COUNTS = ("arrivals", "completed", "shed", "unfinished")
FLOATS = ("latency_p50", "latency_p90", "latency_p95", "latency_p99", "latency_mean",
          "latency_max", "slo_miss_rate", "shed_rate", "attainment", "goodput", "throughput",
          "mean_in_system")
VECTORS = {"assigned": "assigned", "replica_completed": "replica_completed",
           "replica_mean_in_system": "mean_in_system_replica", "queue_tail": "queue_tail"}


def _points(ds):
    dims = [d for d in ds.attainment.dims]
    for idx in np.ndindex(ds.attainment.shape):
        yield {d: ds[d].values[i].item() for d, i in zip(dims, idx)}


def _close(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


@pytest.mark.parametrize("stage", ["study", "stress", "exact", "random"])
def test_every_run_matches_the_reference(differential, stage):
    sweep, results = differential
    ds = results[stage]
    values = sweep.stages[[s.name for s in sweep.stages].index(stage)].values
    fixed = {p: values[p][0] for p in PARAM if p not in ds.dims}
    wl = {f"{k[0]}_{k[1]}": fixed[f"{k[0]}_tokens_{k[1]}"]
          for k in [(a, b) for a in ("prompt", "output") for b in ("median", "sigma", "min", "max")]}
    wl.update(demand_base=fixed["demand_ms_base"], demand_per_prompt=fixed["demand_ms_per_prompt_token"],
              demand_per_output=fixed["demand_ms_per_output_token"],
              jitter_min=fixed["jitter_min"], jitter_max=fixed["jitter_max"])
    mismatches = []
    checked = 0
    for point in _points(ds):
        run = ds.sel(point)
        ref = reference.simulate_run(
            policy=point["policy"], seed=point["seed"], rate_rps=point["rate_rps"],
            ref_ms=list(sweep.heterogeneity[point["heterogeneity"]]),
            events=scenario_events(sweep.text, point["scenario"]),
            **{k: point[k] if k in point else fixed[k] for k in (
                "exploration", "demand", "choices", "dt_ms", "warmup_s", "measure_s", "slo_ms", "queue_cap",
                "reference_demand_ms", "alpha", "reward_ceiling_ms", "prior_service_ms")},
            workload=wl)
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
        checked += 1
    assert checked == ds.attainment.size
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:3]}"


def test_stress_grid_exercises_shedding_and_reroutes(differential):
    """The stress grid is only a good differential case if it actually sheds."""
    _, results = differential
    ds = results["stress"]
    assert (ds.shed > 0).all()
    # failure at 6 s: the failed replica's queue is re-routed; with queues of 3 some are shed
    assert float(ds.shed_rate.sel(scenario="failure").min()) > 0
