"""Timelines of the batching model (routesim.trace on a batching sweep): recorded by the
engine's own run function, so a traced run's metrics equal the grid run's; the samples
are consistent with token-model.md; periodic signals hold between publications; the
incident summary and the black-hole figure commands run."""

import functools
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import routesim

ROOT = Path(__file__).resolve().parents[1]

# small and quick: 4 replicas, 12 req/s (about 0.7 × their capacity), 4 s + 8 s
HEAD = """
name = "tl"
[replica]
kind = "batching"
cold_factor = 4.0
waiting_cap = 6
[simulation]
warmup_s = 4
measure_s = 8
[cluster.heterogeneity]
uniform = [1, 1, 1, 1]
[client]
timeout_ms = 8000
max_attempts = 3
[scenarios.black-hole]
events = [{ at_s = 5, replica = 2, fail_fast = true }, { at_s = 9, replica = 2, recover = true }]
[scenarios.crash]
events = [{ at_s = 5, replica = 1, fail = true }, { at_s = 8, replica = 1, recover = true }]
[scenarios.steady]
events = []
[grid]
rate_rps = [12]
heterogeneity = ["uniform"]
"""
STAGES = """
[[stages]]
name = "incident"
policy = ["least_requests", "round_robin"]
scenario = ["black-hole", "crash"]
breaker_consecutive = [0, 3]
seeds = [7, 8]
"""
PERIODIC = """
[signals]
mode = "periodic"
period_ms = 200
[[stages]]
name = "stale"
policy = ["least_tokens"]
scenario = ["steady"]
seeds = [3]
"""


@functools.lru_cache(maxsize=None)
def sweep(tmp, text):
    path = Path(tmp) / f"s{abs(hash(text))}.toml"
    path.write_text(HEAD + text)
    return routesim.load_sweep(path)


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    return sweep(str(tmp_path_factory.mktemp("tl")), STAGES)


@pytest.fixture(scope="module")
def grid_ds(incident):
    return routesim.run(incident, show_progress=False)["incident"]


@pytest.fixture(scope="module")
def traces(incident):
    return {(scen, seed): routesim.trace(incident, scenario=scen, seed=seed)
            for scen in ("black-hole", "crash") for seed in (7, 8)}


def test_traced_runs_have_the_grid_runs_metrics(grid_ds, traces):
    names = [v for v in grid_ds.data_vars if "time" not in grid_ds[v].dims]
    for (scen, seed), tl in traces.items():
        one = grid_ds.sel(scenario=scen, seed=seed).isel(rate_rps=0, heterogeneity=0)
        for v in names:
            a, b = one[v].transpose(*tl[v].dims).values, tl[v].values
            np.testing.assert_array_equal(a, b, err_msg=f"{v} {scen} seed {seed}")


def test_per_request_latencies_give_the_runs_percentiles(traces):
    # §7 from the per-request variables, by hand: the cohort is the arrivals in
    # [warm-up, horizon); nearest rank p = sorted[ceil(p/100 · n) − 1]
    for (scen, seed), tl in traces.items():
        warm, horizon = tl.attrs["warmup_s"], tl.attrs["warmup_s"] + tl.attrs["measure_s"]
        runs = tl.arrivals.dims
        for idx in np.ndindex(*tl.arrivals.shape):
            one = tl.isel(dict(zip(runs, idx)))
            pol = dict(zip(runs, idx))
            arr = one.request_arrival.values
            cohort = (arr >= warm) & (arr < horizon)
            assert cohort.sum() == int(one.arrivals)
            for name in ("ttft", "tpot"):
                v = np.sort(one[f"request_{name}"].values[cohort])
                v = v[~np.isnan(v)]
                for q in (50, 99):
                    want = v[math.ceil(q / 100 * v.size) - 1]
                    assert want == float(one[f"{name}_p{q}"]), (scen, seed, pol, name, q)
            done = ~np.isnan(one.request_ttft.values[cohort])
            assert done.sum() == int(one.completed)


def test_samples_are_consistent_with_the_model(traces, incident):
    cap = int(incident.stages[0].values["waiting_cap"][0])
    for (scen, seed), tl in traces.items():
        # a down replica holds nothing: nothing running, nothing waiting, no blocks referenced
        down = tl.healthy == 0
        assert int(tl.running.where(down, 0).max()) == 0
        assert int(tl.waiting.where(down, 0).max()) == 0
        assert int(tl.kv_referenced.where(down, 0).max()) == 0
        # at most waiting_cap never-admitted attempts wait; preempted ones may exceed it
        # (none here: the KV pool is far from full at this load)
        assert int(tl.preemptions.max()) > 0 or int(tl.waiting.max()) <= cap
        # per-interval counts come from cumulative ones: never negative
        for v in ("assignments", "replica_emitted", "attempts_interval", "retries_interval",
                  "failures_interval", "sheds_interval", "rejected_interval", "completions_interval"):
            assert int(tl[v].min()) >= 0, v
        # fresh signals: the router's view is the truth (black-holed attempts included)
        np.testing.assert_array_equal(tl.view_tokens.values, tl.outstanding_tokens.values)
        np.testing.assert_array_equal(tl.view_requests.values, tl.outstanding_requests.values)
        assert (tl.kv_referenced_fraction >= 0).all() and (tl.kv_referenced_fraction <= 1).all()
        # events marked from their time on (the state after everything at times <= s)
        t = tl.time
        if scen == "black-hole":
            bh = tl.black_hole.sel(replica=2)
            assert (bh.where((t >= 5) & (t < 9)) == 1).sum() == ((t >= 5) & (t < 9)).sum() * bh.size // t.size
            assert int(bh.where((t < 5) | (t >= 9), 0).max()) == 0
            assert int(tl.healthy.min()) == 1
        else:
            h = tl.healthy.sel(replica=1)
            assert int(h.where((t >= 5) & (t < 8), 0).max()) == 0
            assert int(h.where((t < 5) | (t >= 8), 1).min()) == 1
            assert int(tl.black_hole.max()) == 0
            # a recovery from down is cold: warmth 4 at t_up, decaying to 1
            w = tl.warmth.sel(replica=1)
            assert float(w.sel(time=8.0).min()) == pytest.approx(4.0)
            assert float(w.sel(time=8.0 + 2.0).max()) == pytest.approx(1 + 3 * math.exp(-1))
            assert float(tl.warmth.sel(replica=[2, 3, 4]).max()) == 1.0
        # ejection only with the breaker on, only of a replica that fails attempts
        assert int(tl.ejected.sel(breaker_consecutive=0).max()) == 0
        # attempts per interval: the replicas' assignments summed; completions add up
        np.testing.assert_array_equal(tl.assignments.sum("replica").values, tl.attempts_interval.values)
        assert (tl.retries_interval.sum("time") <= tl.attempts_interval.sum("time")).all()


def test_black_hole_is_ejected_with_the_breaker(traces):
    tl = traces[("black-hole", 7)].sel(policy="least_requests")
    t = tl.time
    during = (t > 5) & (t <= 9)
    off, on = tl.sel(breaker_consecutive=0), tl.sel(breaker_consecutive=3)
    # least_requests: the black hole looks emptiest and draws more than its 1/N of attempts
    share = off.assignments.sel(replica=2).where(during).sum() / off.assignments.where(during).sum()
    assert float(share) > 1 / 4
    assert int(on.ejected.sel(replica=2).where(during, 0).max()) == 1
    assert int(on.ejected.sel(replica=2).where(t < 5, 0).max()) == 0
    assert int(on.breaker_ejections) >= 1


def test_periodic_view_holds_between_publications(tmp_path):
    tl = routesim.trace(sweep(str(tmp_path), PERIODIC), interval_ms=10).squeeze()
    n, period = tl.sizes["replica"], 200.0
    t_ms = np.rint(tl.time.values * 1000.0)
    changes = 0
    for k, rep in enumerate(tl.replica.values):
        view = tl.view_tokens.sel(replica=rep).values
        truth = tl.outstanding_tokens.sel(replica=rep).values
        first = (k + 1) * period / n  # replica k publishes at (k+1)·period/N + j·period
        epoch = np.where(t_ms >= first, np.floor((t_ms - first) / period + 1e-9), -1)
        for e in np.unique(epoch):
            seg = view[epoch == e]
            assert (seg == seg[0]).all(), f"replica {rep}: view changed between publications"
            if e < 0:
                assert seg[0] == 0  # before the first publication: the empty replica
            else:  # at a publication the view is the truth
                j = int(np.flatnonzero(epoch == e)[0])
                if t_ms[j] == first + e * period:
                    assert view[j] == truth[j]
            changes += int(len(set(truth[epoch == e])) > 1)
    assert changes > 10  # the truth moved while the view held


def test_summary_shows_arms_and_incident_columns(grid_ds):
    from routesim.summary import render
    text = render(grid_ds)
    head = text.splitlines()[2]
    for col in ("scenario", "policy", "breaker_consecutive", "failed %", "attempts/req", "wasted k tok"):
        assert col in head
    lines = text.splitlines()
    table = lines[:lines.index("", 2)] if "" in lines[2:] else lines
    assert len(table) == 3 + 2 * 2 * 2 + 1  # title, blank, header, rule, rows
    steady = [row.split()[-1] for row in table[4:]]
    assert set(steady) <= {"yes", "no"}
    # a warning line under the table exactly when some row was not steady
    assert ("warning:" in text) == ("no" in steady)


def test_incidents_sweep_runs(tmp_path):
    out = tmp_path / "incidents"
    text = (ROOT / "sweeps" / "incidents.toml").read_text()
    text = text.replace("count = 16", "count = 1").replace("measure_s = 50", "measure_s = 35")
    (tmp_path / "incidents.toml").write_text(text)
    r = subprocess.run([sys.executable, "-m", "routesim.sweep", str(tmp_path / "incidents.toml"),
                        "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    for stage, cols in (("crash", ["retry_budget"]), ("black-hole", ["retry_avoid_previous", "breaker_consecutive"]),
                        ("cold-recovery", ["ready_delay_ms", "slow_start_ms"])):
        assert f"stage {stage}:" in r.stdout
        assert (out / f"{stage}.nc").is_file()
        for c in cols:
            assert c in r.stdout
    # the figure from these results, and the trace command on a batching sweep
    from routesim.studies import plotting
    from routesim.studies.incidents import figures as F, resultset as R
    tl = R.black_hole_trace(R.black_hole_stage(out))
    paths = plotting.render([(F.NAME, lambda: F.black_hole_figure(tl))], tmp_path / "figs")
    assert all(p.stat().st_size > 10_000 for p in paths)
    r = subprocess.run([sys.executable, "-m", "routesim.trace", str(tmp_path / "incidents.toml"),
                        "--stage", "black-hole", "--seed", "1", "--set", "breaker_consecutive=0,5",
                        "--out", str(tmp_path / "bh.nc")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "breaker_consecutive" in r.stdout and (tmp_path / "bh.nc").is_file()
