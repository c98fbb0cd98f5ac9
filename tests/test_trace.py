"""Timelines (routesim.trace): the traced run is the grid's run, its samples agree with
the naive reference simulator's per-request records, and the command line works."""

import math

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings, strategies as st

import reference
import routesim
from conftest import HEAD, parse, scenario_events, sweep_text
from routesim.config import ConfigError
from routesim.queue.params import PARAM
from routesim.queue.policies import NAMES
from routesim.theory import mean_demand_ms
from routesim.timeline import main as trace_main
from routesim.ranks import top_rank_nb
from routesim.queue.workload import WorkloadParams, generate

ALL_POLICIES = sorted(NAMES, key=NAMES.get)
SAME_RUN = f"""
[[stages]]
name = "grid"
policy = {ALL_POLICIES}
rate_rps = [250]
scenario = ["straggler", "failure"]
seeds = [1, 2]

[[stages]]
name = "exact"             # exact event-time mode, events at t = 0, tiny queues
policy = {ALL_POLICIES}
rate_rps = [400]
scenario = ["early"]
dt_ms = 0
queue_cap = 3
warmup_s = 1
measure_s = 3
seeds = [5]
"""


def _same(a: xr.DataArray, b: xr.DataArray):
    np.testing.assert_array_equal(a.values, b.values)  # NaN == NaN here


@pytest.mark.parametrize("stage", ["grid", "exact"])
def test_traced_run_has_the_grid_runs_metrics(stage):
    """The trace drives the same compiled step as the grid: every per-run result is equal."""
    sweep = parse(SAME_RUN)
    ds = routesim.run(sweep, stages=[stage], show_progress=False)[stage]
    per_run = [v for v in ds.data_vars if "policy" in ds[v].dims]
    for scenario in ds.scenario.values:
        for het in ds.heterogeneity.values:
            tl = routesim.trace(sweep, stage=stage, scenario=str(scenario), heterogeneity=str(het),
                                seed=[int(s) for s in ds.seed.values])
            assert list(tl.policy.values) == list(ds.policy.values)
            for name in per_run:
                grid_run = ds[name].sel(scenario=scenario, heterogeneity=het).squeeze(
                    [d for d in ("exploration", "rate_rps") if d in ds[name].dims], drop=True)
                if "seed" not in tl[name].dims:
                    grid_run = grid_run.squeeze("seed", drop=True)
                _same(tl[name].transpose(*grid_run.dims), grid_run)


def test_trace_of_a_results_dataset_uses_its_selection():
    sweep = parse("""
[[stages]]
name = "dev"
policy = ["adaptive"]
exploration = [0, 5]
rate_rps = [250]
scenario = ["early"]
warmup_s = 1
heterogeneity = ["default"]
measure_s = 3
seeds = [1]
select = { parameter = "exploration", maximize = "attainment" }
[[stages]]
name = "val"
policy = ["least_queue", "adaptive"]
rate_rps = [250]
scenario = ["early"]
warmup_s = 1
heterogeneity = ["default"]
measure_s = 3
seeds = [2]
""")
    res = routesim.run(sweep, show_progress=False)
    val = res["val"]
    from_ds = routesim.trace(val)                           # selection read from the attrs
    from_sweep = routesim.trace(sweep)                      # selection run again
    chosen = val.attrs["selected_exploration"]
    assert float(from_ds.exploration) == chosen == float(from_sweep.exploration)
    xr.testing.assert_identical(from_ds.drop_attrs(), from_sweep.drop_attrs())
    _same(from_ds.attainment, val.attainment.squeeze(drop=True))


# --- against the reference simulator's per-request records -------------------------

SLOW = """
[scenarios.slow]   # a straggler that fits a 4 s horizon, no failure: sheds happen at arrival
events = [{ at_s = 1.5, replica = 1, slowdown = 3.0 }, { at_s = 3.2, replica = 1, slowdown = 1.0 }]
"""
REF_STAGE = """
[[stages]]
name = "ref"
policy = ["round_robin", "latency_aware"]
rate_rps = [330]
scenario = ["slow"]
heterogeneity = ["default"]
queue_cap = 6
warmup_s = 1
measure_s = 3
seeds = [11]
"""


def _ref_samples(policy, sweep_file, interval_ms=10.0, window=250, tput_ms=1000.0):
    fixed = {k: PARAM[k].default for k in PARAM}
    fixed.update(queue_cap=6, warmup_s=1.0, measure_s=3.0)
    result, tr = reference._simulate(
        policy=policy, seed=11, rate_rps=330.0, ref_ms=[8.0, 11.0, 16.0],
        events=scenario_events(sweep_file, "slow"), exploration=fixed["exploration"],
        workload=reference.DEFAULT_WORKLOAD,
        **{k: fixed[k] for k in ("dt_ms", "warmup_s", "measure_s", "slo_ms", "queue_cap",
                                 "reference_demand_ms", "alpha", "reward_ceiling_ms", "prior_service_ms")})
    dt = fixed["dt_ms"]
    arr = np.array(tr["arrival"])
    slot = np.maximum(1, np.ceil(arr / dt)) * dt            # the step that routes the arrival
    rep = np.array(tr["replica"])
    start, done, shed = np.array(tr["start"]), np.array(tr["done"]), np.array(tr["shed"])
    order = np.lexsort((rep, np.where(np.isnan(done), np.inf, done)))   # completion order
    order = order[np.isfinite(done[order])]
    c_t, c_lat = done[order], done[order] - arr[order]
    times = np.arange(0, 4000.0 + 1e-9, interval_ms)
    out = {k: [] for k in ("queue", "in_service", "placed", "p99", "tput", "shed", "done", "on_time")}
    for s in times:
        seen = slot <= s
        out["queue"].append([int(np.sum(seen & (rep == i) & ~(start <= s))) for i in range(3)])
        out["in_service"].append([int(np.sum((rep == i) & (start <= s) & ~(done <= s))) for i in range(3)])
        out["placed"].append([int(np.sum(seen & (rep == i))) for i in range(3)])
        k = int(np.sum(c_t <= s))
        last = np.sort(c_lat[max(0, k - window):k])
        out["p99"].append(last[math.ceil(0.99 * len(last)) - 1] if len(last) else np.nan)
        out["tput"].append(np.sum((c_t > s - tput_ms) & (c_t <= s)) / (tput_ms / 1000))
        out["shed"].append(int(np.sum(seen & shed)))
        out["done"].append(k)
        out["on_time"].append(int(np.sum((c_t <= s) & (c_lat <= fixed["slo_ms"]))))
    return {k: np.array(v) for k, v in out.items()}, result


@pytest.mark.parametrize("policy", ["round_robin", "latency_aware"])
def test_samples_agree_with_the_reference_simulator(policy):
    text = sweep_text(REF_STAGE, HEAD + SLOW)
    tl = routesim.trace(routesim.parse_sweep(text, "ref.toml")).sel(policy=policy)
    ref, result = _ref_samples(policy, text)
    assert (ref["shed"][-1] > 0) and (ref["queue"].max() == 6), "the case should fill queues and shed"
    np.testing.assert_array_equal(tl.queue.values, ref["queue"])
    np.testing.assert_array_equal(tl.in_service.values, ref["in_service"])
    np.testing.assert_array_equal(tl.assignments.cumsum("time").values, ref["placed"])
    np.testing.assert_allclose(tl.rolling_p99.values, ref["p99"], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(tl.rolling_throughput.values, ref["tput"])
    np.testing.assert_array_equal(tl.sheds.cumsum("time").values, ref["shed"])
    np.testing.assert_array_equal(tl.completions.cumsum("time").values, ref["done"])
    np.testing.assert_array_equal(tl.on_time.cumsum("time").values, ref["on_time"])
    np.testing.assert_allclose(tl.s_hat.isel(time=-1).values, result["final_s_hat"], rtol=1e-12)
    np.testing.assert_array_equal(tl.n_obs.isel(time=-1).values, result["final_n"])


def test_timeline_bookkeeping():
    """Every arrival is accounted for at every sample; queues stay within the cap; the
    speed factor follows the events; the true mean service is speed × mean demand."""
    sweep = parse("""
[[stages]]
name = "s"
policy = ["round_robin", "adaptive"]
rate_rps = [300]
scenario = ["failure", "straggler"]
heterogeneity = ["default"]
seeds = [3]
""")
    traces = {s: routesim.trace(sweep, scenario=s, interval_ms=50) for s in ("failure", "straggler")}
    for tl in traces.values():
        cap = tl.attrs["queue_cap"]
        assert int(tl.queue.max()) <= cap and int(tl.queue.min()) >= 0
        in_system = tl.queue.sum("replica") + tl.in_service.sum("replica")
        arrived = tl.arrived.cumsum("time")
        gone = tl.sheds.cumsum("time") + tl.completions.cumsum("time")
        assert (arrived == gone + in_system).all()
        assert (tl.on_time <= tl.completions).all()
        assert np.allclose(tl.time.diff("time"), 0.05) and float(tl.time[-1]) == 15.0
        assert tl.rolling_p99.isel(time=0).isnull().all()
        assert np.allclose(tl.mean_service, tl.speed * tl.attrs["mean_demand_ms"])
    speed = traces["straggler"].speed.sel(policy="adaptive", replica=1)
    base = 8.0 / 11.0
    assert np.allclose(speed.sel(time=slice(0, 5.0 - 1e-9)), base)
    assert np.allclose(speed.sel(time=slice(5.0, 10.0 - 1e-9)), 4 * base)
    assert np.allclose(speed.sel(time=slice(10.0, None)), base)
    failed = traces["failure"]
    healthy = failed.healthy.sel(policy="round_robin", replica=2)
    assert (healthy.sel(time=slice(6.0, 11.0 - 1e-9)) == 0).all()
    assert (healthy.sel(time=slice(0, 6.0 - 1e-9)) == 1).all() and int(healthy.isel(time=-1)) == 1
    assert list(failed.event_kind.values) == ["fail", "recover"]


def test_a_parameter_list_becomes_a_dimension():
    sweep = parse("""
[[stages]]
name = "s"
policy = ["latency_aware"]
rate_rps = [250]
scenario = ["straggler"]
heterogeneity = ["default"]
seeds = [4]
""")
    tl = routesim.trace(sweep, alpha=[0.05, 0.5])
    assert tl.s_hat.dims == ("policy", "alpha", "time", "replica")
    slow, fast = tl.s_hat.sel(policy="latency_aware", replica=1, time=5.3, method="nearest").values
    assert slow < fast  # a larger α follows the slowdown sooner
    assert "alpha" not in tl.attrs
    with pytest.raises(ConfigError, match="alpha"):
        routesim.trace(sweep, alpha=1.5)
    with pytest.raises(ConfigError, match="scenario"):
        routesim.trace(sweep, scenario="nope")
    with pytest.raises(ConfigError, match="interval_ms"):
        routesim.trace(sweep, interval_ms=0)


def test_mean_demand_matches_a_large_sample():
    values = {k: (p.default,) for k, p in PARAM.items()}
    exact = mean_demand_ms(values)
    w = generate(1, 50_000.0, (), 10_000.0, WorkloadParams())
    sample = float(np.mean(w.demand_ms * w.jitter))
    assert abs(exact - sample) < 0.005 * exact
    assert mean_demand_ms({**values, "demand": ("constant",)}) == pytest.approx(11.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1e4, allow_nan=False), max_size=300), st.sampled_from([1, 50, 90, 99, 100]))
def test_top_rank_is_the_nearest_rank(values, p):
    a = np.array(values, dtype=np.float64)
    got = top_rank_nb(a, p, np.empty(max(1, a.size)))
    if a.size == 0:
        assert math.isnan(got)
    else:
        assert got == np.sort(a)[math.ceil(p * a.size / 100) - 1]


def test_command_line(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(sweep_text("""
[[stages]]
name = "s"
policy = ["least_queue", "adaptive"]
rate_rps = [100, 250]
scenario = ["straggler"]
heterogeneity = ["default"]
seeds = [6, 7]
"""))
    out = tmp_path / "t.nc"
    assert trace_main([str(path), "--rate", "250", "--policy", "adaptive,least_queue", "--seed", "7",
                       "--out", str(out), "--quiet"]) == 0
    tl = xr.open_dataset(out, engine="netcdf4").load()
    assert list(tl.policy.values) == ["adaptive", "least_queue"] and int(tl.seed) == 7
    api = routesim.trace(routesim.load_sweep(path), policy=["adaptive", "least_queue"], rate_rps=250, seed=7)
    xr.testing.assert_equal(tl.drop_vars("event_kind"), api.drop_vars("event_kind"))
    assert trace_main([str(path), "--rate", "250", "--set", "alpha=0.1,0.2", "--out", str(tmp_path / "a.nc")]) == 0
    captured = capsys.readouterr()
    assert "wrote" in captured.out and "attain %" in captured.out
    for argv, flag in ((["--seed", "7"], "--rate"), (["--rate", "250", "--scenario", "nope"], "--scenario"),
                       (["--rate", "x"], "--rate"), (["--rate", "250", "--set", "alpha=3"], "--set alpha"),
                       (["--rate", "250", "--set", "nope=1"], "--set nope")):
        bad = tmp_path / "bad.nc"
        assert trace_main([str(path), *argv, "--out", str(bad)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {path}: {flag}:"), err
        assert not bad.exists()


def test_routesim_trace_is_always_the_function():
    import importlib
    importlib.import_module("routesim.trace")
    assert routesim.trace is routesim.timeline.trace
