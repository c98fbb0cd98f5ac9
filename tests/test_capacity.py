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


def runs(ttft, rates, growth=None, rise=None, fall=None, preempt=None):
    """A hand-made Dataset of runs as the search leaves them, one policy × rates × seeds:
    ``ttft`` (rates, seeds) TTFT p99 ms; 1,000 cohort arrivals a run; a run's backlog
    growth (requests), KV occupancy rise and attainment fall (fractions) and preemptions
    (of its 1,000 arrivals) 0 unless given."""
    t = np.asarray(ttft, float)[None]
    zero = np.zeros_like(t)
    dims = ("policy", "rate_rps", "seed")

    def given(x):
        return zero if x is None else np.array(x, float)[None]

    return xr.Dataset({"ttft_p99": (dims, t), "arrivals": (dims, zero + 1000),
                       "backlog_growth": (dims, given(growth)),
                       "kv_occupancy_first": (dims, zero + 0.8), "kv_occupancy_last": (dims, 0.8 + given(rise)),
                       "attainment_first": (dims, zero + 0.95), "attainment_last": (dims, 0.95 - given(fall)),
                       "preemptions": (dims, given(preempt))},
                      coords={"policy": ["p"], "rate_rps": np.asarray(rates, float),
                              "seed": np.arange(1, t.shape[-1] + 1)})


TTFT = capacity.Criterion("ttft_p99", 1000.0, at_most=True)


def _cap(ds, rule, what="capacity_rps"):
    return float(capacity.capacities(ds, TTFT, rule)[what].sel(policy="p"))


@pytest.mark.parametrize("collapse", ["slo", "growth", "rise", "fall", "full"])
def test_the_median_accepts_a_minority_of_collapsed_seeds_and_the_planner_rule_refuses(collapse):
    """Ten seeds at 30, 40 and 50 req/s; at 50 every window misses the SLO. At 40, three
    seeds collapse (the median rule reads only the median TTFT, 500 ms, and accepts 40):
    by the SLO itself (5 s) — 7 of 10 windows within, under 9 = 0.9 · 10 — or, within
    the SLO, by one sign of the per-run check each: backlog +60 of 1,000 arrivals (6 % >
    5 %), KV occupancy +31 points (> 30), attainment -11 points (> 10), or a cache that
    ends the window 96 % full (>= 95 %; from 80 %, a rise of 16 points, under 30) while
    the run preempted 20 of its 1,000 arrivals (2 % > 1 %; docs/model.md "Steady state
    and collapse")."""
    rates = [30, 40, 50]
    ttft = np.full((3, 10), 500.0)
    ttft[2] = 3000.0
    trend = {k: np.zeros((3, 10)) for k in ("growth", "rise", "fall", "preempt")}
    if collapse == "slo":
        ttft[1, :3] = 5000.0
    elif collapse == "full":
        trend["rise"][1, :3] = 0.16
        trend["preempt"][1, :3] = 20.0
    else:
        trend[collapse][1, :3] = {"growth": 60.0, "rise": 0.31, "fall": 0.11}[collapse]
    ds = runs(ttft, rates, **trend)
    assert _cap(ds, capacity.Rule("median")) == 40.0
    assert _cap(ds, capacity.Rule()) == 30.0
    # figures just inside the thresholds (backlog +5 %, KV +29 pts, attainment -9.9 pts;
    # full at 94 % while preempting 2 %, or at 96 % while preempting 1 %) do not collapse
    if collapse == "full":
        for rise, preempt in ((0.14, 20.0), (0.16, 10.0)):
            trend["rise"][1, :3], trend["preempt"][1, :3] = rise, preempt
            assert _cap(runs(ttft, rates, **trend), capacity.Rule()) == 40.0
    elif collapse != "slo":
        trend[collapse][1, :3] = {"growth": 50.0, "rise": 0.29, "fall": 0.099}[collapse]
        assert _cap(runs(ttft, rates, **trend), capacity.Rule()) == 40.0
    # each seed's own capacity: the three sick seeds 30, the others 40
    seeds = capacity.capacities(ds, TTFT, capacity.Rule()).capacity_rps_seed.sel(policy="p").values
    assert list(seeds) == [30.0] * 3 + [40.0] * 7


@pytest.mark.parametrize("quantile,within,passes", [
    (0.9, 9, True), (0.9, 8, False), (0.7, 7, True), (0.7, 6, False), (1.0, 10, True), (1.0, 9, False),
    (0.05, 1, True)])
def test_the_quantile_boundary(quantile, within, passes):
    """Ten seeds at one rate, ``within`` of them meeting the SLO: the rate passes when
    ``within / 10 >= quantile`` (0.7 · 10 is 7.000000000000001 in floating point: 7 of 10
    still make 70 %)."""
    ttft = np.array([[500.0] * within + [1500.0] * (10 - within)])
    c = _cap(runs(ttft, [20]), capacity.Rule("quantile", quantile))
    assert (c == 20.0) if passes else math.isnan(c)
    assert capacity.needed(0.7, 10) == 7 and capacity.needed(0.9, 16) == 15


def _exact_interval(own, rates, need, level=0.95):
    """The exact percentile bootstrap interval of the capacity, enumerating every one of
    the n**n equally likely resamples of n seeds (``own``: each seed's own capacity, it
    meets the SLO at every rate up to it and none above): a resample passes a rate when
    at least ``need`` of its seeds meet it there; the ends are the smallest capacities
    whose cumulative share reaches (1 - level) / 2 and (1 + level) / 2."""
    import itertools
    n = len(own)
    caps = []
    for sample in itertools.product(range(n), repeat=n):
        c = -math.inf
        for r in rates:
            if sum(r <= own[s] for s in sample) < need:
                break
            c = r
        caps.append(c)
    caps = np.sort(caps)
    cdf = np.arange(1, caps.size + 1) / caps.size
    return tuple(float(caps[np.argmax(cdf >= p)]) for p in ((1 - level) / 2, (1 + level) / 2))


@pytest.mark.parametrize("quantile,need", [(0.75, 3), (0.5, 2)])
def test_the_bootstrap_interval_against_the_exact_bootstrap(quantile, need):
    """Four seeds whose own capacities are 50, 40, 30 and 10 on the rates 10…50: the
    2,000 resamples give the interval of the exact bootstrap distribution (256
    resamples, enumerated). The designs keep every cumulative share at least 0.026 from
    2.5 % and 97.5 % (5 standard errors of a share from 2,000 draws), so the Monte Carlo
    ends cannot differ from the exact ones but by a 1-in-a-million draw."""
    rates = [10.0, 20.0, 30.0, 40.0, 50.0]
    own = [50.0, 40.0, 30.0, 10.0]
    ttft = np.array([[500.0 if r <= o else 1500.0 for o in own] for r in rates])
    out = capacity.capacities(runs(ttft, rates), TTFT, capacity.Rule("quantile", quantile))
    got = (float(out.capacity_rps_low.sel(policy="p")), float(out.capacity_rps_high.sel(policy="p")))
    assert got == _exact_interval(own, rates, need)
    assert got[0] <= float(out.capacity_rps.sel(policy="p")) <= got[1]
    # deterministic: the same Dataset gives the same interval
    again = capacity.capacities(runs(ttft, rates), TTFT, capacity.Rule("quantile", quantile))
    assert float(again.capacity_rps_low.sel(policy="p")) == got[0]


def test_a_bootstrap_end_below_the_lowest_rate_is_nan():
    """Two seeds, one failing the lowest rate: half the resamples hold it, and with the
    quantile rule's no-failure demand (q = 1) they have no capacity; the low end is NaN
    (shown "< low"), the high end the other seed's 20."""
    ttft = np.array([[500.0, 1500.0], [500.0, 1500.0]])
    out = capacity.capacities(runs(ttft, [10, 20]), TTFT, capacity.Rule("quantile", 1.0))
    assert math.isnan(float(out.capacity_rps.sel(policy="p")))
    assert math.isnan(float(out.capacity_rps_low.sel(policy="p")))
    assert float(out.capacity_rps_high.sel(policy="p")) == 20.0


def test_the_tables_print_the_interval_the_counts_and_each_seed():
    """The collapse design of the test above (growth): capacity 30 by the quantile rule,
    every seed within the SLO and steady there; at 40, 10 of 10 within and 3 not
    steady; the seeds' own capacities 30 (three) and 40 (seven), so every resample's
    capacity is 30 or 40 and so is each end of the interval."""
    ttft = np.full((3, 10), 500.0)
    ttft[2] = 3000.0
    growth = np.zeros((3, 10))
    growth[1, :3] = 60.0
    out = capacity.capacities(runs(ttft, [30, 40, 50], growth=growth), TTFT, capacity.Rule())
    text = capacity.table(out, ["policy"])
    row = text.splitlines()[2].split()
    assert row[:2] == ["p", "30"] and row[2] in ("30–30", "30–40")
    assert row[3:5] == ["30–40", "10/10"] and row[6] == "0/10"
    assert "40: 10/10 within SLO, 3 not steady" in text
    seeds = capacity.seed_table(out, ["policy"]).splitlines()
    assert seeds[0].split()[:3] == ["policy", "seed", "1"] and seeds[2].split() == ["p"] + ["30"] * 3 + ["40"] * 7


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


def _passes(rule_name, criterion, runs):
    """Per rate, the rule written out here on ``runs`` (rate_rps × seed): the median rule,
    or at least ceil(0.9 · seeds) windows meeting the criterion and no run past a
    per-run threshold (backlog growth 5 % of arrivals, KV rise 30 points, attainment
    fall 10 points; the queue model has none)."""
    m = runs[criterion.metric].transpose("rate_rps", "seed").values
    if rule_name == "median":
        return criterion.holds(criterion.median(m, axis=1))
    meet = criterion.holds(m).sum(axis=1) >= math.ceil(0.9 * m.shape[1])
    if "backlog_growth" not in runs:
        return meet
    r = runs[["arrivals", "backlog_growth", "kv_occupancy_first", "kv_occupancy_last", "attainment_first",
              "attainment_last"]].transpose("rate_rps", "seed")
    bad = ((r.backlog_growth / r.arrivals > 0.05) | (r.kv_occupancy_last - r.kv_occupancy_first > 0.30)
           | (r.attainment_first - r.attainment_last > 0.10))
    return meet & ~bad.values.any(axis=1)


@pytest.mark.parametrize("rule", ["quantile", "median"])
@pytest.mark.parametrize("text,criterion", [
    (QUEUE, capacity.Criterion("latency_p99", 60.0, at_most=True)),
    (BATCHING, capacity.Criterion("ttft_p99", 1000.0, at_most=True)),
])
def test_search_agrees_with_a_plain_sweep_of_its_rates(tmp_path, text, criterion, rule):
    sweep = parse_sweep(text, tmp_path / "sweep.toml")
    stage = sweep.stages[0]
    low, high = min(stage.values["rate_rps"]), max(stage.values["rate_rps"])
    res = 20.0 if criterion.metric == "latency_p99" else 2.0
    search = capacity.Search(low=low, high=high, points=4, resolution=res)
    out = capacity.find(sweep, stage, criterion, search, rule=capacity.Rule(rule))
    lattice = np.arange(low, high + res / 2, res)
    full = _brute(sweep, stage.name, lattice)
    for pol in out.policy.values:
        rates = _evaluated(out, pol)
        assert set(rates) <= set(lattice)
        sub = full.sel(policy=pol, rate_rps=rates).squeeze()
        # the runs the search simulated on its sub-grids are the plain sweep's runs
        np.testing.assert_array_equal(
            out.sel(policy=pol, rate_rps=rates)[criterion.metric].squeeze().values, sub[criterion.metric].values)
        expect = capacity.capacity_of(rates, _passes(rule, criterion, sub))
        got = float(out.capacity_rps.sel(policy=pol).squeeze())
        assert got == expect or (math.isnan(got) and math.isnan(expect))
        # over the whole lattice: where the criterion is monotone there, the same answer
        every = _passes(rule, criterion, full.sel(policy=pol).squeeze())
        if np.all(np.diff(every.astype(int)) <= 0):
            brute = capacity.capacity_of(lattice, every)
            assert got == brute or (math.isnan(got) and math.isnan(brute))
        # each seed's own capacity by the same rule
        for s, seed in enumerate(out.seed.values):
            own = capacity.capacity_of(rates, _passes(rule, criterion, sub.sel(seed=[seed])))
            got_s = float(out.capacity_rps_seed.sel(policy=pol, seed=seed).squeeze())
            assert got_s == own or (math.isnan(got_s) and math.isnan(own))


DONE = """
name = "cap-done"
[replica]
kind = "batching"
[workload]
p_long = 0
[simulation]
warmup_s = 30
measure_s = 120
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
seeds = { first = 1, count = 10 }
"""


def test_rerun_at_the_reported_capacity_the_windows_meet_the_slo_and_none_collapses(tmp_path):
    """Issue 44's "Done when": two replicas, ten seeds, a 120 s window (about 15 s to
    search and rerun). Run again as a plain sweep at each policy's reported capacity, at
    least 90 % of the windows (9 of 10) meet TTFT p99 <= 1 s and no run shows a collapse,
    by the thresholds written out here (backlog growth <= 5 % of arrivals, KV occupancy
    rise <= 30 points, attainment fall <= 10 points, not a cache >= 95 % full at the
    window's end while preempting more than 1 % of the arrivals); at the next rate the search
    evaluated above it, one of the two fails. The median rule on the same runs accepts
    at least as much (it asks less)."""
    sweep = parse_sweep(DONE, tmp_path / "sweep.toml")
    stage = sweep.stages[0]
    out = capacity.find(sweep, stage, TTFT, capacity.Search(low=4, high=40, points=4, resolution=2.0))
    caps = {str(p): float(out.capacity_rps.sel(policy=p).squeeze()) for p in out.policy.values}
    assert all(4 < c < 40 for c in caps.values()), caps

    def holds(runs):
        within = int((runs.ttft_p99.values <= 1000.0).sum())
        growth = runs.backlog_growth.values / runs.arrivals.values
        rise = runs.kv_occupancy_last.values - runs.kv_occupancy_first.values
        fall = runs.attainment_first.values - runs.attainment_last.values
        full = (runs.kv_occupancy_last.values >= 0.95) & (runs.preemptions.values > 0.01 * runs.arrivals.values)
        collapsed = (growth > 0.05) | (rise > 0.30) | (fall > 0.10) | full
        return within >= 9 and not collapsed.any()

    for pol, c in caps.items():
        ev = _evaluated(out, pol)
        above = ev[ev > c]
        plain = _brute(sweep, stage.name, [c] + ([float(above[0])] if above.size else []))
        assert plain.seed.size == 10
        assert holds(plain.sel(policy=pol, rate_rps=c).squeeze()), pol
        if above.size:
            assert not holds(plain.sel(policy=pol, rate_rps=float(above[0])).squeeze()), pol
        low, high = (float(out[f"capacity_rps_{e}"].sel(policy=pol).squeeze()) for e in ("low", "high"))
        assert low <= c <= high
    runs_only = out.drop_vars([v for v in out.data_vars if v.startswith("capacity_") or v in ("unsteady", "evaluated")])
    median = capacity.capacities(runs_only.squeeze(["heterogeneity", "scenario"], drop=True), TTFT,
                                 capacity.Rule("median"))
    for pol, c in caps.items():
        assert float(median.capacity_rps.sel(policy=pol)) >= c


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


def test_policy_searches_those_policies_and_per_seed_prints_each_seeds_capacity(tmp_path, capsys):
    path = _write(tmp_path, QUEUE)
    out_dir = tmp_path / "out"
    assert capacity.main([str(path), "--out", str(out_dir), "--resolution", "20", "--points", "4", "--policy",
                          "least_queue", "--per-seed", "-q"]) == 0
    text = capsys.readouterr().out
    ds = xr.open_dataset(out_dir / "rates-capacity.nc", engine="netcdf4")
    assert list(ds.policy.values) == ["least_queue"] and "round_robin" not in text
    head = next(line for line in text.splitlines() if line.startswith("policy") and "seed 1" in line)
    assert head.split() == ["policy", "seed", "1", "seed", "2", "seed", "3"]
    row = text.splitlines()[text.splitlines().index(head) + 2].split()
    own = ds.capacity_rps_seed.sel(policy="least_queue").values.ravel()
    assert row == ["least_queue"] + [capacity._rate_text(float(x), 100, 340) for x in own]


@pytest.mark.parametrize("args,key", [
    (["--points", "1"], "--points"),
    (["--points", "two"], "--points"),
    (["--attainment", "1.5"], "--attainment"),
    (["--attainment", "0.9", "--slo-ms", "50"], "--attainment"),
    (["--slo-ms", "-3"], "--slo-ms"),
    (["--low", "300", "--high", "200"], "--high"),
    (["--resolution", "0"], "--resolution"),
    (["--stage", "nope"], "stages"),
    (["--rule", "mean"], "--rule"),
    (["--quantile", "0"], "--quantile"),
    (["--quantile", "1.5"], "--quantile"),
    (["--quantile", "most"], "--quantile"),
    (["--rule", "median", "--quantile", "0.9"], "--quantile"),
    (["--policy", "least_tokens"], "--policy"),
    (["--policy", ","], "--policy"),
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
