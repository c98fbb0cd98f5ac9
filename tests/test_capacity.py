"""python -m routesim.capacity: the rule that defines capacity, the search against a
plain sweep of every rate, and bad input.

The expectations are independent of the search: the rule is checked on hand-made
pass/fail sequences; the search's capacities are recomputed from a plain
``routesim.run`` of the same stage at every rate the search evaluated (so the
sub-grid the search simulates must give the same runs as the whole grid), and, where
the criterion is monotone over the whole lattice, equal the brute-force capacity.
"""

import math

import numpy as np
import pytest
import xarray as xr

import routesim
from routesim import capacity
from routesim.config import parse_sweep

QUEUE = """
name = "cap-queue"
[simulation]
dt_ms = 0
warmup_s = 1
measure_s = 4
slo_ms = 60
[cluster.heterogeneity]
default = [8, 11, 16]
[scenarios.steady]
events = []
[grid]
rate_rps = [100, 340]
heterogeneity = ["default"]
scenario = ["steady"]
[[stages]]
name = "rates"
policy = ["round_robin", "least_queue"]
seeds = { first = 1, count = 3 }
"""

BATCHING = """
name = "cap-batching"
[replica]
kind = "batching"
[simulation]
warmup_s = 2
measure_s = 8
[cluster.heterogeneity]
uniform = [1, 1]
[scenarios.steady]
events = []
[grid]
rate_rps = [4, 40]
heterogeneity = ["uniform"]
scenario = ["steady"]
[[stages]]
name = "policies"
policy = ["round_robin", "least_tokens"]
seeds = { first = 1, count = 2 }
"""


def test_capacity_is_the_last_rate_of_an_unbroken_run_of_passes():
    rates = np.array([10.0, 20.0, 30.0, 40.0, 50.0])
    assert capacity.capacity_of(rates, np.array([True, True, True, False, False])) == 30.0
    # a pass above a failure does not count: capacity holds at every lower rate
    assert capacity.capacity_of(rates, np.array([True, False, True, True, True])) == 10.0
    assert capacity.capacity_of(rates, np.array([True] * 5)) == 50.0
    assert math.isnan(capacity.capacity_of(rates, np.array([False, True, True, True, True])))


def test_criterion_counts_nan_as_a_failure():
    c = capacity.Criterion("ttft_p99", 1000.0, at_most=True)
    assert list(c.holds(np.array([999.0, 1000.0, 1000.5, np.nan]))) == [True, True, False, False]
    a = capacity.Criterion("attainment", 0.9, at_most=False)
    assert list(a.holds(np.array([0.95, 0.9, 0.5, np.nan]))) == [True, True, False, False]
    # median over seeds with a NaN: counted as the worst value, so it moves the median up
    assert c.median(np.array([[100.0, np.nan, 300.0]]), axis=1)[0] == 300.0


def test_candidates_lie_inside_the_bracket_on_the_resolution():
    s = capacity.Search(low=20, high=80, points=6, resolution=1.0)
    assert capacity.candidates_first(s) == [20.0, 32.0, 44.0, 56.0, 68.0, 80.0]
    inner = capacity.candidates(44.0, 56.0, s)
    assert inner == [46.0, 47.0, 49.0, 51.0, 53.0, 54.0]
    assert capacity.candidates(44.0, 45.0, s) == []  # one step wide: nothing between
    half = capacity.Search(low=1, high=2, points=3, resolution=0.25)
    assert capacity.candidates(1.0, 2.0, half) == [1.25, 1.5, 1.75]


def _write(tmp_path, text):
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return path


def _evaluated(out, pol):
    """The rates the search ran for a policy (its only row in these sweeps)."""
    ev = out.evaluated.sel(policy=pol)
    return out.rate_rps.values[ev.any([d for d in ev.dims if d != "rate_rps"]).values]


def _brute(sweep, stage_name, rates):
    """Every rate of ``rates`` run as a plain sweep stage."""
    import dataclasses
    stage = next(s for s in sweep.stages if s.name == stage_name)
    values = dict(stage.values)
    values["rate_rps"] = tuple(rates)
    swept = dataclasses.replace(sweep, stages=(dataclasses.replace(stage, values=values),))
    return routesim.run(swept, show_progress=False)[stage_name]


@pytest.mark.parametrize("text,criterion", [
    (QUEUE, capacity.Criterion("latency_p99", 60.0, at_most=True)),
    (BATCHING, capacity.Criterion("ttft_p99", 1000.0, at_most=True)),
])
def test_search_agrees_with_a_plain_sweep_of_its_rates(tmp_path, text, criterion):
    sweep = parse_sweep(text, tmp_path / "sweep.toml")
    stage = sweep.stages[0]
    low, high = min(stage.values["rate_rps"]), max(stage.values["rate_rps"])
    res = 20.0 if criterion.metric == "latency_p99" else 2.0
    search = capacity.Search(low=low, high=high, points=4, resolution=res)
    out = capacity.find(sweep, stage, criterion, search)
    lattice = np.arange(low, high + res / 2, res)
    full = _brute(sweep, stage.name, lattice)
    for pol in out.policy.values:
        rates = _evaluated(out, pol)
        assert set(rates) <= set(lattice)
        sub = full.sel(policy=pol, rate_rps=rates).squeeze()
        # the runs the search simulated on its sub-grids are the plain sweep's runs
        np.testing.assert_array_equal(
            out.sel(policy=pol, rate_rps=rates)[criterion.metric].squeeze().values, sub[criterion.metric].values)
        med = criterion.median(sub[criterion.metric].transpose("rate_rps", "seed").values, axis=1)
        expect = capacity.capacity_of(rates, criterion.holds(med))
        got = float(out.capacity_rps.sel(policy=pol).squeeze())
        assert got == expect or (math.isnan(got) and math.isnan(expect))
        # over the whole lattice: where the criterion is monotone there, the same answer
        every = criterion.holds(criterion.median(full.sel(policy=pol)[criterion.metric].squeeze()
                                                 .transpose("rate_rps", "seed").values, axis=1))
        if np.all(np.diff(every.astype(int)) <= 0):
            brute = capacity.capacity_of(lattice, every)
            assert got == brute or (math.isnan(got) and math.isnan(brute))
        # each seed's own capacity by the same rule
        for s, seed in enumerate(out.seed.values):
            own = capacity.capacity_of(rates, criterion.holds(sub[criterion.metric].sel(seed=seed).values))
            got_s = float(out.capacity_rps_seed.sel(policy=pol, seed=seed).squeeze())
            assert got_s == own or (math.isnan(got_s) and math.isnan(own))


def test_search_narrows_until_one_step_or_an_end(tmp_path):
    sweep = parse_sweep(QUEUE, tmp_path / "sweep.toml")
    stage = sweep.stages[0]
    search = capacity.Search(low=100, high=340, points=4, resolution=20.0)
    out = capacity.find(sweep, stage, capacity.Criterion("latency_p99", 60.0, at_most=True), search)
    for pol in out.policy.values:
        c = float(out.capacity_rps.sel(policy=pol).squeeze())
        ev = _evaluated(out, pol)
        if math.isnan(c) or c == 340:
            continue
        above = ev[ev > c]
        assert above.size and above[0] - c <= 20.0


def test_command_prints_a_table_and_writes_a_dataset(tmp_path, capsys):
    path = _write(tmp_path, QUEUE)
    out_dir = tmp_path / "out"
    assert capacity.main([str(path), "--out", str(out_dir), "--resolution", "20", "--points", "4"]) == 0
    text = capsys.readouterr().out
    assert "round 1:" in text and "capacity req/s" in text and "seeds' range" in text
    assert "round_robin" in text and "least_queue" in text
    ds = xr.open_dataset(out_dir / "rates-capacity.nc", engine="netcdf4")
    assert set(ds.capacity_rps.dims) == {"policy", "exploration", "heterogeneity", "scenario"}
    assert ds.attrs["capacity_metric"] == "latency_p99" and ds.attrs["capacity_bound"] == 60.0


@pytest.mark.parametrize("args,key", [
    (["--points", "1"], "--points"),
    (["--points", "two"], "--points"),
    (["--attainment", "1.5"], "--attainment"),
    (["--attainment", "0.9", "--slo-ms", "50"], "--attainment"),
    (["--slo-ms", "-3"], "--slo-ms"),
    (["--low", "300", "--high", "200"], "--high"),
    (["--resolution", "0"], "--resolution"),
    (["--stage", "nope"], "stages"),
])
def test_bad_options_are_one_line_and_write_nothing(tmp_path, capsys, args, key):
    path = _write(tmp_path, QUEUE)
    out_dir = tmp_path / "out"
    assert capacity.main([str(path), "--out", str(out_dir), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: {key}:")
    assert not out_dir.exists()


def test_a_search_says_once_per_round_that_it_compiles_while_its_engine_is_not_ready(tmp_path, capsys, monkeypatch):
    """The search's rounds give the compile note of routesim.study (on stderr, above the
    bar) while the model's engine is not ready: here never ready, each round slow."""
    import time

    from routesim import batch, schema, study

    real = batch.simulate

    def slow(grid, *a, **kw):
        time.sleep(0.3)
        return real(grid, *a, **kw)

    monkeypatch.setattr(study, "COMPILE_NOTE_S", 0.05)
    monkeypatch.setattr(batch, "simulate", slow)
    monkeypatch.setattr(schema.ReplicaModel, "engine_ready", lambda self: False)
    path = _write(tmp_path, QUEUE)
    assert capacity.main([str(path), "--out", str(tmp_path / "out"), "--resolution", "20", "--points", "4"]) == 0
    cap = capsys.readouterr()
    rounds = cap.out.count("round ")
    notes = [line for line in cap.err.splitlines() if line.startswith("note: compiling the queue model's kernels")]
    assert rounds >= 1 and len(notes) == rounds, (cap.out, cap.err)
