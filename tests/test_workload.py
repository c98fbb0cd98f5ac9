"""The workload generator against workload-vectors.md and model.md §2."""

import numpy as np
import pytest

from routesim.workload import WorkloadParams, generate

# (seed, rate, rate events (ms, multiplier), arrivals, rows k -> (t_ms, prompt, output, jitter, demand))
VECTORS = [
    (1, 100, [], 1531, {
        0: (7.170744167610923, 1288, 412, 1.0897298894274488, 31.78125),
        1: (10.907959052703097, 569, 42, 0.9818398272738322, 5.84765625),
        2: (18.884010925896934, 386, 73, 1.0076286626438558, 7.0703125),
        1530: (14974.29208588948, 837, 77, 1.0415633826694832, 9.08203125)}),
    (7, 250, [(7000.0, 2.0), (9000.0, 1.0)], 4184, {
        0: (3.9243354521382106, 505, 16, 0.9450414379981183, 3.97265625),
        1: (5.351985540263618, 1952, 93, 1.0642456836765533, 14.4375),
        2: (11.73155102825243, 286, 206, 0.9556851224201547, 14.9921875),
        4183: (14989.227951407203, 345, 51, 1.0468753582681396, 5.53515625)}),
]


@pytest.mark.parametrize("seed,rate,events,count,rows", VECTORS, ids=["seed1-steady", "seed7-burst"])
def test_reference_rows(seed, rate, events, count, rows):
    w = generate(seed, rate, events, 15000.0)
    assert len(w) == count
    for k, (t, prompt, output, jitter, demand) in rows.items():
        assert abs(w.t_ms[k] - t) <= 1e-9
        assert (w.prompt[k], w.output[k]) == (prompt, output)
        # jitter = 0.9 + (1.1 - 0.9)·U: (1.1 - 0.9) is 0.2 plus 1 ulp, so allow a few ulps
        assert w.jitter[k] == pytest.approx(jitter, rel=0, abs=1e-15)
        assert w.demand_ms[k] == demand


def test_burst_window_count():
    w = generate(7, 250, [(7000.0, 2.0), (9000.0, 1.0)], 15000.0)
    assert int(((w.t_ms >= 7000) & (w.t_ms < 9000)).sum()) == 941


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
