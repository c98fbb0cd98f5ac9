"""The SimPy peer of the benchmarks (benchmarks/simpy_model.py) against the engine.

The SimPy model is a separate implementation of docs/model.md §2–§6 that shares only
the workload generator with the engine, so the two must agree run by run exactly
(counts equal, floats within 1e-9): on every study condition with one seed, on the
hardest conditions with several seeds, and on the ``constants`` grid of conftest.py,
where every constant of docs/model.md has a distinct non-default value.
"""

import math
import sys

import numpy as np
import pytest

pytest.importorskip("simpy")

from conftest import CONSTANTS_HEAD, ROOT, parse, reference_workload, scenario_events  # noqa: E402

if str(ROOT) not in sys.path:  # benchmarks/ is not installed with the package
    sys.path.append(str(ROOT))

import routesim  # noqa: E402
from benchmarks import simpy_model  # noqa: E402
from routesim.queue.params import PARAM  # noqa: E402

POLICIES = '["round_robin", "least_queue", "latency_aware", "adaptive"]'
GRID = f"""
[[stages]]
name = "exact"             # every study condition (rate x heterogeneity x scenario), one seed
policy = {POLICIES}
seeds = [101]

[[stages]]
name = "hard"              # the hardest conditions, several seeds each
policy = {POLICIES}
rate_rps = [250]
heterogeneity = ["high"]
scenario = ["steady", "straggler", "failure"]
seeds = {{ first = 201, count = 6 }}
"""
CONSTANTS_GRID = f"""
[[stages]]
name = "constants"         # every constant changed (the SimPy model is discrete, tokens only)
policy = {POLICIES}
seeds = [8, 9]
"""
COUNTS = ("arrivals", "completed", "shed", "unfinished")
FLOATS = ("latency_p50", "latency_p90", "latency_p95", "latency_p99", "latency_mean",
          "latency_max", "slo_miss_rate", "shed_rate", "attainment", "goodput", "throughput")


def _points(ds):
    dims = list(ds.attainment.dims)
    for idx in np.ndindex(ds.attainment.shape):
        yield {d: ds[d].values[i].item() for d, i in zip(dims, idx)}


@pytest.fixture(scope="module")
def paired():
    """{stage: (engine Dataset, {point: SimPy metrics})}."""
    out = {}
    for sweep in (parse(GRID), parse(CONSTANTS_GRID, CONSTANTS_HEAD)):
        results = routesim.run(sweep, show_progress=False)
        for stage in sweep.stages:
            ds = results[stage.name]
            fixed = {p: stage.values[p][0] for p in PARAM if p not in ds.dims}
            assert fixed["demand"] == "tokens"
            simpy_runs = {}
            for point in _points(ds):
                value = {**fixed, **point}
                simpy_runs[tuple(point.items())] = simpy_model.simulate_run(
                    policy=point["policy"], seed=point["seed"], rate_rps=point["rate_rps"],
                    ref_ms=list(sweep.heterogeneity[point["heterogeneity"]]),
                    events=scenario_events(sweep.text, point["scenario"]),
                    **{k: value[k] for k in ("dt_ms", "warmup_s", "measure_s", "slo_ms", "queue_cap",
                                             "reference_demand_ms", "alpha", "exploration",
                                             "reward_ceiling_ms", "prior_service_ms")},
                    workload=reference_workload(fixed))
            out[stage.name] = (ds, simpy_runs)
    return out


def _same(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= 1e-9 * max(1.0, abs(a))


@pytest.mark.parametrize("stage", ["exact", "hard", "constants"])
def test_every_run_matches_the_engine_exactly(paired, stage):
    ds, simpy_runs = paired[stage]
    mismatches = []
    for key, got in simpy_runs.items():
        run = ds.sel(dict(key))
        for name in COUNTS:
            if int(run[name]) != got[name]:
                mismatches.append((key, name, int(run[name]), got[name]))
        for name in FLOATS:
            if not _same(float(run[name]), got[name]):
                mismatches.append((key, name, float(run[name]), got[name]))
        for name in ("assigned", "replica_completed"):
            if list(run[name].values) != got[name]:
                mismatches.append((key, name, list(run[name].values), got[name]))
    assert len(simpy_runs) == ds.attainment.size
    assert not mismatches, f"{len(mismatches)} mismatches, first: {mismatches[:3]}"
