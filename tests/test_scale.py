"""Large and long runs: a thousand replicas, unbounded queues, long horizons."""

import tracemalloc

import numpy as np

import routesim
from conftest import HEAD, assert_invariants
from routesim import batch, grid as grid_mod
from routesim.results import to_dataset


def _sweep(n, stage):
    head = HEAD.replace("default = [8, 11, 16]\nhigh = [6, 11, 22]", f"big = {[11] * n}")
    return routesim.parse_sweep(head + stage, "scale.toml")


def test_a_thousand_replicas_with_unbounded_queues():
    """Power of two choices over 1,000 exponential replicas at 70% load, exact mode."""
    n = 1000
    rate = 0.7 * n * 1000 / 11  # req/s
    sweep = _sweep(n, f"""
[[stages]]
name = "big"
policy = ["power_of_two", "random"]
heterogeneity = ["big"]
scenario = ["steady"]
rate_rps = [{rate}]
queue_cap = inf
workload = {{ demand = "exponential" }}
dt_ms = 0
warmup_s = 1
measure_s = 2
seeds = [1]
""")
    g = grid_mod.build(sweep, sweep.stages[0])
    out = batch.simulate(g)
    ds = to_dataset(sweep, g, out, {})
    assert_invariants(ds)
    assert (ds.shed == 0).all()
    # 70% of replicas' time busy on average: the fraction holding >= 1 request is the
    # utilization, λ/(n μ) = 0.7, up to the run's noise (~1e5 requests)
    assert np.allclose(ds.queue_tail.sel(level=1), 0.7, atol=0.02)
    # power of two keeps the tail far shorter than random (M/M/1 has 0.7^3 = 0.34 at >= 3)
    tail3 = ds.queue_tail.sel(level=3).squeeze()
    assert float(tail3.sel(policy="power_of_two")) < 0.5 * float(tail3.sel(policy="random"))


def test_scratch_memory_does_not_grow_with_the_queue_cap():
    """Queues are linked lists through the requests: a run's memory is per replica and
    per arrival, never queue_cap × replicas."""
    stage = """
[[stages]]
name = "cap"
policy = ["least_queue"]
heterogeneity = ["big"]
scenario = ["steady"]
rate_rps = [50]
queue_cap = {cap}
warmup_s = 1
measure_s = 1
seeds = [1]
"""
    peaks = []
    for cap in (50, 100000, "inf"):
        sweep = _sweep(1000, stage.format(cap=cap))
        g = grid_mod.build(sweep, sweep.stages[0])
        batch.simulate(g)  # compile outside the measurement
        tracemalloc.start()  # numpy reports its allocations to tracemalloc
        batch.simulate(g)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    # 1,000 replicas x 100,000 slots of 4 bytes would be 400 MB; the run needs ~1 MB
    assert max(peaks) < 4 * 2**20
    assert max(peaks) - min(peaks) < 0.01 * max(peaks)


def test_a_long_horizon():
    """Thirty simulated minutes of one replica: M/M/1 at ρ = 0.5 stays stable and the
    count of arrivals is Poisson-plausible."""
    sweep = _sweep(1, """
[[stages]]
name = "long"
policy = ["least_queue"]
heterogeneity = ["big"]
scenario = ["steady"]
rate_rps = [45.45]
queue_cap = inf
workload = { demand = "exponential" }
dt_ms = 0
warmup_s = 60
measure_s = 1740
seeds = [2]
""")
    ds = routesim.run(sweep, show_progress=False)["long"]
    assert_invariants(ds)
    lam = 45.45 * 1740
    assert abs(ds.arrivals.item() - lam) < 5 * np.sqrt(lam)
    assert ds.unfinished.item() < 50
