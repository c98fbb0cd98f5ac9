"""The generic plot (python -m routesim.plot): any metric of either model's results
against any dimension, the median over seeds and the 10-90 % band of the seeds drawn
from the data (checked against numpy's own median and quantiles), xarray's faceting,
the metrics listed, and every bad input one line and exit 2 with nothing written."""

import functools

import numpy as np
import pytest
import xarray as xr

import routesim
from conftest import SWEEPS, parse, run_reduced
from routesim import plot as P
from routesim.results import write_atomic

QUEUE = """
[[stages]]
name = "grid"
policy = ["round_robin", "least_queue", "adaptive"]
rate_rps = [100, 200, 250]
scenario = ["steady", "straggler"]
heterogeneity = ["default"]
seeds = [1, 2, 3, 4, 5]
"""


@functools.lru_cache(maxsize=None)
def queue_ds():
    return routesim.run(parse(QUEUE), show_progress=False)["grid"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """{"queue": path, "batching": path} of tiny results files written as the sweep writes them."""
    root = tmp_path_factory.mktemp("plot")
    q = root / "queue" / "grid.nc"
    write_atomic(queue_ds(), q)
    bds = run_reduced(root, SWEEPS / "batching.toml", {
        "warmup_s = 1200": "warmup_s = 5", "measure_s = 60": "measure_s = 10", "drain_s = 600": "drain_s = 30",
        "uniform = [1, 1, 1, 1, 1, 1, 1, 1]": "uniform = [1, 1]", "rate_rps = [23, 41, 60]": "rate_rps = [3, 9]",
        '"least_kv", "least_cost",\n          "power_of_d", "prefix_affinity", "rate_weighted"]': "]",
        "seeds = { first = 1, count = 16 }": "seeds = { first = 1, count = 3 }"})["policies"]
    b = root / "batching" / "policies.nc"
    write_atomic(bds, b)
    return {"queue": q, "batching": b}


def test_lines_are_the_median_over_seeds_and_the_band_the_seeds_range():
    ds = queue_ds()
    fig = P.plot(ds, "latency_p99", sel={"scenario": "straggler"})
    ax = fig.axes[0]
    data = ds.latency_p99.sel(scenario="straggler").squeeze(drop=True)   # policy, rate_rps, seed

    lines = ax.get_lines()
    assert len(lines) == ds.sizes["policy"]
    bands = ax.collections
    assert len(bands) == ds.sizes["policy"]
    for k, (line, band) in enumerate(zip(lines, bands)):
        v = data.isel(policy=k).transpose("rate_rps", "seed").values
        np.testing.assert_allclose(line.get_xdata(), ds.rate_rps.values)
        np.testing.assert_allclose(line.get_ydata(), np.median(v, axis=1))
        ys = band.get_paths()[0].vertices[:, 1]
        lo, hi = np.quantile(v, 0.1, axis=1), np.quantile(v, 0.9, axis=1)
        assert np.isclose(ys.min(), lo.min()) and np.isclose(ys.max(), hi.max())
        for y in np.concatenate([lo, hi]):
            assert np.isclose(ys, y).any()
        assert not np.allclose(lo, hi)  # the seeds differ: a real band
    title = ax.get_title(loc="left")
    assert "median over 5 seeds" in title and "10%–90%" in title and "scenario = straggler" in title
    assert ax.get_ylabel() == "latency_p99 (ms)"


def test_defaults_rate_on_x_policy_as_hue():
    r = P.roles(queue_ds().latency_p99.sel(scenario="steady"))
    assert r == {"x": "rate_rps", "hue": "policy", "col": None, "row": None}
    one_rate = queue_ds().latency_p99.isel(rate_rps=[0])
    assert P.roles(one_rate, col=None)["x"] == "scenario"   # rate has one value: the next dimension


def test_faceting_is_xarrays(tmp_path):
    ds = queue_ds()
    fig = P.plot(ds, "attainment", col="scenario", row="policy")
    titled = [ax for ax in fig.axes if ax.get_lines()]
    assert len(titled) == ds.sizes["scenario"] * ds.sizes["policy"]
    assert {ax.get_title() for ax in titled[:2]} == {"scenario = steady", "scenario = straggler"}
    for ax in titled:
        assert len(ax.get_lines()) == 1 and len(ax.collections) == 1


def test_a_categorical_axis_gets_error_bars():
    ds = queue_ds()
    fig = P.plot(ds, "goodput", x="policy", hue="rate_rps", sel={"scenario": "steady"})
    ax = fig.axes[0]
    assert len([c for c in ax.collections if c.__class__.__name__ == "LineCollection"]) == ds.sizes["rate_rps"]


def test_command_line_writes_a_deterministic_png_of_either_model(files, tmp_path, capsys):
    for kind, metric in (("queue", "latency_p99"), ("batching", "ttft_p99")):
        a, b = tmp_path / f"{kind}-a.png", tmp_path / f"{kind}-b.svg"
        extra = ["--sel", "scenario=steady"] if kind == "queue" else []
        assert P.main([str(files[kind]), metric, "--out", str(a), *extra]) == 0
        assert P.main([str(files[kind]), metric, "--out", str(b), *extra]) == 0
        assert a.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and b.read_text().lstrip().startswith("<?xml")
        again = tmp_path / "again.png"
        assert P.main([str(files[kind]), metric, "--out", str(again), *extra]) == 0
        assert again.read_bytes() == a.read_bytes()
    out = capsys.readouterr().out
    assert out.count("wrote ") == 6


def test_default_output_beside_the_results(files, capsys):
    assert P.main([str(files["batching"]), "goodput"]) == 0
    assert (files["batching"].parent / "policies-goodput.png").is_file()


def test_without_a_metric_it_lists_them(files, capsys):
    assert P.main([str(files["batching"])]) == 0
    out = capsys.readouterr().out
    ds = xr.load_dataset(files["batching"])
    for name, var in ds.data_vars.items():
        line = next(x for x in out.splitlines() if x.split() and x.split()[0] == name)
        assert var.attrs["description"] in line and (var.attrs["units"] or "-") in line.split()


def _bad_inputs(files, tmp):
    text = tmp / "notes.nc"
    text.write_text("not netCDF")
    foreign = tmp / "foreign.nc"
    xr.Dataset({"a": ("x", [1.0, 2.0])}).to_netcdf(foreign)
    q = str(files["queue"])
    return [
        ([str(tmp / "missing.nc"), "attainment"], "RESULTS: no such file"),
        ([str(text), "attainment"], "RESULTS: not a netCDF results file"),
        ([str(foreign), "a"], "RESULTS: not a routesim results file"),
        ([q, "latency_p999"], "latency_p999: no such metric in this file (did you mean 'latency_p99'?)"),
        ([q, "attainment", "--x", "speed"], "--x speed: attainment has no dimension 'speed'"),
        ([q, "attainment", "--sel", "scenario=storm"], "--sel scenario=storm: 'storm' is not a value of scenario"),
        ([q, "attainment", "--sel", "rate_rps=150", "--sel", "scenario=steady"], "--sel rate_rps=150"),
        ([q, "attainment", "--sel", "scenario"], "--sel scenario: expected DIM=VALUE"),
        ([q, "attainment"], "scenario: attainment also varies over scenario (2 values)"),
        ([q, "attainment", "--hue", "scenario", "--col", "scenario"], "scenario: a dimension can have only one"),
        ([q, "attainment", "--sel", "scenario=steady", "--out", str(tmp / "f.jpg")], "--out"),
    ]


def test_bad_input_is_one_line_exit_2_nothing_written(files, tmp_path, capsys):
    tmp = tmp_path / "in"
    tmp.mkdir()
    for args, fragment in _bad_inputs(files, tmp):
        before = sorted(p.name for p in tmp.iterdir()) + sorted(p.name for p in files["queue"].parent.iterdir())
        assert P.main(args) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {args[0]}: "), err
        assert fragment in err, (fragment, err)
        after = sorted(p.name for p in tmp.iterdir()) + sorted(p.name for p in files["queue"].parent.iterdir())
        assert before == after, args


def test_an_unwritable_out_is_one_line(files, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    args = [str(files["queue"]), "attainment", "--sel", "scenario=steady", "--out", str(blocker / "f.png")]
    assert P.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {files['queue']}: --out: {blocker} is a file, not a folder"), err


def test_routesim_plot_is_the_function():
    from matplotlib.figure import Figure
    fig = routesim.plot(queue_ds(), "goodput", hue="scenario", x="rate_rps", sel={"policy": "adaptive"})
    assert isinstance(fig, Figure)
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["steady", "straggler"]
    assert routesim.plot.main is P.main


def test_seeds_as_a_hue_are_drawn_each():
    ds = queue_ds()
    fig = P.plot(ds, "attainment", hue="seed", sel={"scenario": "steady", "policy": "adaptive"})
    ax = fig.axes[0]
    assert len(ax.get_lines()) == ds.sizes["seed"]
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(),
                               ds.attainment.sel(scenario="steady", policy="adaptive", seed=1).squeeze().values)
    assert "each seed's values" in ax.get_title(loc="left") and "median" not in ax.get_title(loc="left")
