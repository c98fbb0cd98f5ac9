"""The least-outstanding study's capacity table (routesim/studies/least_outstanding/
capacities.py) on hand-built results whose capacities follow from the rule (the largest
evaluated rate at which TTFT p99 is at most 1 s in at least 90 % of the seeds' windows,
and no window is unsteady, there and at every lower one), read back by common.capacity;
the study command runs it first and keeps it under --resume."""

import numpy as np
import pytest
import xarray as xr

from routesim.results import write_atomic
from routesim.studies.least_outstanding import __main__ as cli
from routesim.studies.least_outstanding import capacities
from routesim.studies.least_outstanding.common import CAPACITY_RESULTS, capacity

DET = ("round_robin", "least_requests", "least_tokens", "least_kv", "least_cost")
# TTFT p99 (ms) per time scale 0.5, 1, 1.5: least_tokens meets 1 s up to scale 1;
# round_robin not even at 0.5; least_kv at 0.5 only; the others never
TTFT = {"round_robin": (1200, 1300, 2000), "least_requests": (1100, 1200, 1300), "least_tokens": (700, 950, 1400),
        "least_kv": (990, 1010, 900), "least_cost": (1500, 1500, 1500)}
# power_of_d's four seeds at each scale: at 0.5, 3 of 4 windows within 1 s (under
# 0.9 · 4; the median, (850 + 900) / 2 = 875 ms, would pass)
POD = ((800, 850, 900, 1200), (900, 1000, 1100, 1300), (1500, 1600, 1700, 1800))
ARRIVALS = {"0.5": 900, "1": 900, "1.5": 900}      # the same trace span at every scale
MEASURE = {"0.5": 600.0, "1": 300.0, "1.5": 200.0}


def stage(policies, ttft, seeds, scale):
    """One mooncake stage's Dataset as python -m routesim.sweep writes it: length-one
    rate_rps, heterogeneity, scenario and trace_time_scale axes, a per-replica variable."""
    shape = (len(policies), 1, 1, 1, len(seeds), 1)
    dims = ("policy", "rate_rps", "heterogeneity", "scenario", "seed", "trace_time_scale")
    t = np.asarray(ttft, float).reshape(shape)
    full = np.ones(shape)
    ds = xr.Dataset({"ttft_p99": (dims, t), "arrivals": (dims, ARRIVALS[scale] * full),
                     "backlog_growth": (dims, 0 * full), "kv_occupancy_first": (dims, 0.9 * full),
                     "kv_occupancy_last": (dims, 0.9 * full),
                     "assigned": (dims + ("replica",), np.ones(shape + (8,)))},
                    coords={"policy": list(policies), "rate_rps": [1.0], "heterogeneity": ["uniform8"],
                            "scenario": ["steady"], "seed": list(seeds), "trace_time_scale": [float(scale)],
                            "replica": np.arange(1, 9)})
    ds.attrs.update(measure_s=MEASURE[scale], slo_ttft_ms=1000.0, warmup_s=60.0)
    return ds


@pytest.fixture
def folder(tmp_path):
    out = tmp_path / CAPACITY_RESULTS
    for k, s in enumerate(capacities.SCALES):
        write_atomic(stage(DET, [[TTFT[p][k]] for p in DET], [1], s), out / f"mooncake-{s}.nc")
        write_atomic(stage(["power_of_d"], [POD[k]], [1, 2, 3, 4], s), out / f"mooncake-{s}-pod.nc")
    return out


def test_mooncake_capacity_by_the_rule(folder, tmp_path):
    ds = capacities.mooncake_capacity(folder)
    # the offered rates: 900 arrivals over 600, 300 and 200 s
    assert list(ds.rate_rps.values) == [1.5, 3.0, 4.5]
    cap = {str(p): float(ds.capacity_rps.sel(policy=p)) for p in ds.policy.values}
    assert cap["least_tokens"] == 3.0
    assert cap["least_kv"] == 1.5               # 900 ms at 1.5 does not count: 1.01 s failed below it
    assert np.isnan(cap["round_robin"]) and np.isnan(cap["least_cost"]) and np.isnan(cap["least_requests"])
    assert np.isnan(cap["power_of_d"])          # 3 of 4 windows within 1 s at 0.5 (median 875 ms)
    # each seed by itself: seed 1 800/900/1500 -> 3.0; seed 4 1200 -> none
    seeds = ds.capacity_rps_seed.sel(policy="power_of_d").values
    assert seeds[0] == 3.0 and np.isnan(seeds[3])
    # a deterministic policy's one run stands for every seed
    assert np.all(ds.capacity_rps_seed.sel(policy="least_tokens").values == 3.0)
    write_atomic(ds, folder / "mooncake-capacity.nc")
    assert capacity(tmp_path, "least_tokens", "mooncake") == (3.0, 3.0, 3.0, True)
    c = capacity(tmp_path, "power_of_d", "mooncake")
    # its seeds' own: 800/900/1500 and 850/1000/1600 -> 3.0; 900/1100 -> 1.5; 1200 -> none
    assert np.isnan(c[0]) and (c[1], c[2]) == (1.5, 3.0)
    # a deterministic policy's interval is its capacity (every resample is the same run)
    assert float(ds.capacity_rps_low.sel(policy="least_tokens")) == 3.0 == float(
        ds.capacity_rps_high.sel(policy="least_tokens"))
    table = capacities.mooncake_table(ds)
    assert "| least_tokens | 700 | 950 | 1,400 | 90 → 90 | 3 |" in table
    assert "| round_robin | 1,200 | 1,300 | 2,000 | 90 → 90 | < 1.5 |" in table


def default_capacity(tmp_path):
    """A default-capacity.nc as python -m routesim.capacity writes it, by hand: rates
    36, 40, 44, 48; capacity 44 for least_tokens (median TTFT p99 under 1 s to 44),
    none for round_robin."""
    rates = [36.0, 40.0, 44.0, 48.0]
    pols = ["round_robin", "least_tokens"]
    ttft = np.array([[[1100, 1200]] * 4, [[500, 600], [700, 800], [900, 950], [1500, 1600]]], float)
    grow = np.zeros_like(ttft)
    grow[1, 2] = [60, 60]                              # least_tokens' runs at 44: 60 of 2,640 arrivals
    dims = ("policy", "rate_rps", "seed")
    ds = xr.Dataset({"ttft_p99": (dims, ttft), "arrivals": (dims, np.full_like(ttft, 2640)),
                     "backlog_growth": (dims, grow), "kv_occupancy_first": (dims, np.full_like(ttft, 0.8)),
                     "kv_occupancy_last": (dims, np.full_like(ttft, 0.82)),
                     "capacity_rps": ("policy", [np.nan, 44.0]),
                     "capacity_rps_seed": (("policy", "seed"), [[np.nan, np.nan], [44.0, 44.0]])},
                    coords={"policy": pols, "rate_rps": rates, "seed": [1, 2]})
    ds.attrs.update(capacity_bound=1000.0, capacity_low=36.0, capacity_high=48.0, capacity_points=3,
                    capacity_resolution=2.0, warmup_s=1200.0, measure_s=60.0, drain_s=600.0, p_long=0.02)
    write_atomic(ds, tmp_path / CAPACITY_RESULTS / "default-capacity.nc")
    return ds


def test_default_table_and_the_warm_up_check(tmp_path):
    default_capacity(tmp_path)
    data = capacities.load(tmp_path)
    assert data["mooncake"] is None
    t = capacities.table(data["default"])
    # 60 / 2,640 = 2.3 % of arrivals in each run: within a run's 5 %, but the median is
    # above a cell's 2 %: not steady; a file written before the interval shows none
    assert "| least_tokens | 44 | — | 44 | 925 | +60 | 80 → 82 | 0 of 2 | no |" in t
    assert "| round_robin | < 36 | — | < 36 | — | — | — | — | — |" in t
    text = capacities.section(data)
    assert text.startswith("## Capacity at the SLO") and "least_tokens; their capacity is an upper bound" in text
    assert capacities.row(data) is None and capacities.verdict(data) is None
    paths = capacities.figure(data, tmp_path / "figures")
    assert sorted(p.name for p in paths) == ["lor-capacity.png", "lor-capacity.svg"]


def test_the_servers_capacities_lead_and_the_pages_move_to_the_appendix(tmp_path):
    from routesim.studies.least_outstanding import server, summary
    from routesim.studies.least_outstanding.common import SERVER_CAPACITY
    page = default_capacity(tmp_path)
    # the server's search: least_tokens' runs one step lower (40), a steady cell there
    srv = page.copy(deep=True)
    srv["capacity_rps"] = ("policy", [np.nan, 40.0])
    srv["capacity_rps_seed"] = (("policy", "seed"), [[np.nan, np.nan], [40.0, 40.0]])
    write_atomic(srv, tmp_path / SERVER_CAPACITY[0] / f"{SERVER_CAPACITY[1]}-capacity.nc")
    data = capacities.load(tmp_path)
    kept, appendix = summary.to_appendix([capacities.section(data)], "twin.md")
    kept, appendix = kept[0], "\n".join(appendix)
    # the section reads the server: its command, its row (40: TTFT p99 700 and 800 there,
    # median 750; no backlog growth, so steady)
    assert kept.split("\n")[2].startswith("On the server, the main arm")
    assert f"`python -m routesim.capacity {' '.join((server.SWEEP, *server.SEARCH))}`" in kept
    assert "| least_tokens | 40 | — | 40 | 750 | +0 | 80 → 82 | 0 of 2 | yes |" in kept
    # the page's replica's capacity (44, not steady) is in the appendix, under its heading
    row = "| least_tokens | 44 | — | 44 | 925 | +60 | 80 → 82 | 0 of 2 | no |"
    assert row not in kept and row in appendix.split("### The page's replica's capacities")[1]
    # without the server's search the page's table is the section's
    (tmp_path / SERVER_CAPACITY[0] / f"{SERVER_CAPACITY[1]}-capacity.nc").unlink()
    assert row in capacities.section(capacities.load(tmp_path))


def test_run_keeps_what_it_finished_under_resume(tmp_path, monkeypatch):
    """Under --resume a search is kept when this command finished it (its record beside
    it, :func:`.common.finished`), not because a file of its name exists: a file from
    elsewhere, or from another routesim, may hold other capacities."""
    calls = []
    monkeypatch.setattr(capacities.capacity_mod, "main", lambda argv: calls.append(("capacity", argv)) or 0)
    from routesim import sweep as sweep_cli
    monkeypatch.setattr(sweep_cli, "main", lambda argv: calls.append(("sweep", argv)) or 0)
    monkeypatch.setattr(capacities, "mooncake_capacity", lambda folder: xr.Dataset())
    monkeypatch.setattr("routesim.results.write_atomic", lambda ds, path: None)
    out = tmp_path / CAPACITY_RESULTS
    out.mkdir()
    for stem in ("default", "azure", "mooncake"):
        (out / f"{stem}-capacity.nc").write_bytes(b"")
    # files without the command's record: each search runs, on the study's file and options
    assert capacities.run(tmp_path, quiet=True, resume=True) == 0
    assert calls[0] == ("capacity", [capacities.SWEEP, *capacities.SEARCH, "--out", str(out), "--quiet"])
    assert calls[1] == ("capacity", [capacities.SWEEP, *capacities.AZURE_SEARCH, "--out", str(out), "--quiet"])
    assert calls[2][0] == "sweep" and calls[2][1].count("--stage") == 6 and "--resume" in calls[2][1]
    # now finished: kept under --resume, run again without it
    calls.clear()
    assert capacities.run(tmp_path, quiet=True, resume=True) == 0
    assert calls == []
    assert capacities.run(tmp_path, quiet=True, resume=False) == 0
    assert [c[0] for c in calls] == ["capacity", "capacity", "sweep"]


def test_the_study_command_runs_it_before_the_sweeps(tmp_path, monkeypatch):
    order = []
    monkeypatch.setattr(cli, "SWEEPS", (capacities.SWEEP, "sweeps/token-routing-example.toml"))
    monkeypatch.setattr(capacities, "run", lambda root, quiet, resume: order.append(("run", resume)) or 0)
    monkeypatch.setattr(cli.sweep_cli, "main", lambda argv: order.append(("sweep", argv[0])) or 0)
    rc = cli.main(["--quiet", "--resume", "--results-root", str(tmp_path / "results"),
                   "--figures", str(tmp_path / "f"), "--out", str(tmp_path / "doc.md")])
    assert rc == 0
    assert order == [("run", True), ("sweep", "sweeps/token-routing-example.toml")]


# The excerpt judged by a TTFT objective scaled to prompt length (issue 44: 1 s + 0.1 ms per
# prompt token): ttft_excess_p99 (p99 of TTFT − each request's objective, ms) per time scale;
# every flat TTFT p99 above 1 s (no flat capacity), least_tokens within its objective up to
# scale 1, round_robin never, power_of_d's seeds at 0.5 only 3 of 4 within
EXCESS = {"round_robin": (100, 300, 500), "least_requests": (50, 200, 400), "least_tokens": (-300, -50, 200),
          "least_kv": (-10, 20, -30), "least_cost": (400, 500, 600)}
POD_EXCESS = ((-100, -50, -20, 30), (-60, 10, 20, 40), (100, 200, 300, 400))


def scaled_stage(policies, excess, seeds, scale):
    ds = stage(policies, np.full((len(policies), len(seeds)), 6000.0), seeds, scale)
    ds["ttft_excess_p99"] = (ds.ttft_p99.dims, np.asarray(excess, float).reshape(ds.ttft_p99.shape))
    ds.attrs["slo_ttft_ms_per_prompt_token"] = 0.1
    return ds


def test_mooncake_capacity_by_an_objective_scaled_to_prompt_length(tmp_path):
    out = tmp_path / CAPACITY_RESULTS
    for k, s in enumerate(capacities.SCALES):
        write_atomic(scaled_stage(DET, [[EXCESS[p][k]] for p in DET], [1], s), out / f"mooncake-{s}.nc")
        write_atomic(scaled_stage(["power_of_d"], [POD_EXCESS[k]], [1, 2, 3, 4], s), out / f"mooncake-{s}-pod.nc")
    ds = capacities.mooncake_capacity(out)
    assert (ds.attrs["capacity_metric"], ds.attrs["capacity_bound"]) == ("ttft_excess_p99", 0.0)
    cap = {str(p): float(ds.capacity_rps.sel(policy=p)) for p in ds.policy.values}
    assert cap["least_tokens"] == 3.0            # -300, -50 within; +200 not
    assert cap["least_kv"] == 1.5                # -30 at 4.5 does not count: +20 failed below it
    assert np.isnan(cap["round_robin"]) and np.isnan(cap["least_requests"]) and np.isnan(cap["least_cost"])
    assert np.isnan(cap["power_of_d"])           # 3 of 4 windows within at 1.5 req/s
    table = capacities.mooncake_table(ds)
    assert "TTFT p99 ms (p99 of TTFT − objective) at 1.5 req/s (×0.5)" in table
    assert "| least_tokens | 6,000 (-300) | 6,000 (-50) | 6,000 (+200) | 90 → 90 | 3 |" in table
    text = capacities.section({"default": None, "mooncake": ds})
    assert ("99 % of completed requests within their own TTFT objective, 1,000 ms + 0.1 ms per prompt token "
            "(`ttft_excess_p99` ≤ 0)") in text
    assert "TTFT p99 ≤ 0 ms" not in text
    assert "No policy meets a flat 1,000 ms TTFT p99 even at the lightest load" in text
    assert "The capacities above are by each request's own objective, 1,000 ms + 0.1 ms per prompt token." in text
    assert capacities.figure({"default": None, "mooncake": ds}, tmp_path / "figures")
