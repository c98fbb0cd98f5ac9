"""The workload generator against docs/workload-vectors.md and docs/model.md §2."""

import numpy as np
import pytest

from conftest import WORKLOAD_VECTORS, workload_vectors
from routesim.queue.workload import WorkloadParams, generate

VECTORS = workload_vectors()


def _rate_events(events):
    """A scenario's rate events (sweep-file form) as the generator takes them: (ms, multiplier)."""
    return [(float(ev["at_s"]) * 1000.0, float(ev["rate_multiplier"])) for ev in events
            if "rate_multiplier" in ev]


def test_every_row_of_the_page_is_read():
    lines = WORKLOAD_VECTORS.read_text().splitlines()
    headings = [line for line in lines if line.startswith("seed ")]
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| k ")]
    assert len(VECTORS) == len(headings) >= 2
    assert sum(len(v["rows"]) for v in VECTORS) == len(rows) >= 8
    assert {v["scenario"] for v in VECTORS} == {"steady", "burst"}


@pytest.mark.parametrize("v", VECTORS, ids=[f"seed{v['seed']}-{v['scenario']}" for v in VECTORS])
def test_reference_rows(v):
    w = generate(v["seed"], v["rate_rps"], _rate_events(v["events"]), v["horizon_ms"])
    assert len(w) == v["arrivals"]
    for k, (t, prompt, output, jitter, demand) in v["rows"].items():
        assert abs(w.t_ms[k] - t) <= 1e-9
        assert (w.prompt[k], w.output[k]) == (prompt, output)
        # jitter = 0.9 + (1.1 - 0.9)·U: (1.1 - 0.9) is 0.2 plus 1 ulp, so allow a few ulps
        assert w.jitter[k] == pytest.approx(jitter, rel=0, abs=1e-15)
        assert w.demand_ms[k] == demand
    if v["window"] is not None:
        count, lo, hi = v["window"]
        assert int(((w.t_ms >= lo) & (w.t_ms < hi)).sum()) == count


def test_burst_only_rescales_time():
    """Common random numbers: a rate profile changes arrival times, never the draws."""
    steady = generate(3, 175, [], 15000.0)
    burst = generate(3, 175, [(7000.0, 2.0), (9000.0, 1.0)], 15000.0)
    n = min(len(steady), len(burst))
    assert np.array_equal(steady.prompt[:n], burst.prompt[:n])
    assert np.array_equal(steady.jitter[:n], burst.jitter[:n])
    before = steady.t_ms < 7000
    assert np.array_equal(steady.t_ms[before], burst.t_ms[: before.sum()])
    # inside the burst the remaining time is halved: t' = 7000 + (t - 7000) / 2
    t, tb = steady.t_ms[:n], burst.t_ms[:n]
    inside = (t >= 7000) & (t < 11000)
    assert inside.sum() > 500
    assert np.allclose(tb[inside], 7000 + (t[inside] - 7000) / 2, rtol=0, atol=1e-9)


def test_prefix_does_not_depend_on_horizon():
    short, long = generate(5, 100, [], 2000.0), generate(5, 100, [], 20000.0)
    assert np.array_equal(short.t_ms, long.t_ms[: len(short)])
    assert long.t_ms[len(short)] >= 2000.0 > short.t_ms[-1]


def test_reference_request_demands_eleven_ms():
    p = WorkloadParams()
    assert p.demand_base + 512 * p.demand_per_prompt + 128 * p.demand_per_output == 11.0


def test_arrival_count_is_poisson():
    """Mean and variance of the count over seeds match Poisson(λ·H) within 5 standard errors."""
    counts = np.array([len(generate(s, 100, [], 3000.0)) for s in range(400)])
    mean = 100 * 3.0
    assert abs(counts.mean() - mean) < 5 * np.sqrt(mean / counts.size)
    assert abs(counts.var(ddof=1) / mean - 1) < 5 * np.sqrt(2 / (counts.size - 1))
