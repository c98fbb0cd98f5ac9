"""Whole grids: bookkeeping, the behaviour the seed describes, selection, determinism."""

import os
import subprocess
import sys

import numpy as np
import xarray as xr
from hypothesis import HealthCheck, given, settings, strategies as st

import routesim
from conftest import HEAD, ROOT, assert_invariants, parse
from routesim import batch, grid as grid_mod
from routesim.config import Selection
from routesim.results import to_dataset
from routesim.study import objective


def test_differential_grids_keep_every_request(differential):
    for _, ds in differential.values():
        assert_invariants(ds)


def _run(stages, **kw):
    return routesim.run(parse(stages), show_progress=False, **kw)


def test_round_robin_gives_the_straggler_its_share_while_eligible():
    """With queues that never fill, E never changes, so round robin rotates exactly:
    the straggler gets 1/N of the assignments, to within one request."""
    ds = _run("""
[[stages]]
name = "rr"
policy = ["round_robin"]
rate_rps = [100, 175]
scenario = ["straggler"]
queue_cap = 100000
seeds = { first = 1, count = 4 }
""")["rr"]
    assert_invariants(ds)
    a = ds.assigned
    assert int((a.max("replica") - a.min("replica")).max()) <= 1
    share = (a.sel(replica=1) / a.sum("replica"))
    assert np.allclose(share, 1 / 3, atol=1 / float(a.sum("replica").min()))


def test_load_aware_policies_shift_load_away_from_the_straggler():
    """Common random numbers: the same arrivals with and without the slowdown. Latency
    aware and adaptive send replica 1 clearly less when it straggles; round robin
    (queues never full at 100 req/s within 5 s) sends it the same third."""
    ds = _run("""
[[stages]]
name = "shift"
policy = ["round_robin", "latency_aware", "adaptive"]
rate_rps = [100]
scenario = ["steady", "straggler"]
seeds = { first = 1, count = 6 }
""")["shift"]
    assert_invariants(ds)
    share = ds.assigned.sel(replica=1) / ds.assigned.sum("replica")
    drop = share.sel(scenario="steady") - share.sel(scenario="straggler")
    assert float(abs(drop.sel(policy="round_robin")).max()) < 0.01
    for pol in ("latency_aware", "adaptive"):
        # the slowdown lasts 5 of the 12 measured seconds; a 4x slower replica should
        # lose well over a tenth of the load it had
        assert float(drop.sel(policy=pol).min()) > 0.1 * float(share.sel(policy=pol, scenario="steady").min())


def test_overload_fills_queues_to_the_cap_and_sheds():
    """At 600 req/s (about twice capacity) every queue sits at the cap and arrivals are
    shed, and every shed request is counted."""
    sweep = parse("""
[[stages]]
name = "overload"
policy = ["round_robin", "least_queue", "latency_aware", "adaptive"]
rate_rps = [600]
scenario = ["steady", "failure"]
seeds = [1, 2]
""")
    g = grid_mod.build(sweep, sweep.stages[0])
    out = batch.simulate(g)
    cap = int(g.params["queue_cap"][0])
    assert (out.replicas["qlen"] <= cap).all()
    assert (out.replicas["qlen"] >= cap - 1).all()
    assert (out.metrics["shed"] > 0).all()
    m = out.metrics
    assert (m["arrivals"] == m["completed"] + m["shed"] + m["unfinished"]).all()
    # the shed fraction is at least what capacity cannot serve: 1 - μ/λ with μ <= 1/(min service)
    assert (m["shed_rate"] > 0.3).all()


def test_selection_maximizes_the_mean_over_conditions():
    ds = _run("""
[[stages]]
name = "dev"
policy = ["adaptive"]
exploration = [0, 0.5, 5]
rate_rps = [175, 250]
scenario = ["steady", "straggler"]
seeds = [1, 2]
select = { parameter = "exploration", maximize = "attainment" }
[[stages]]
name = "val"
policy = ["adaptive"]
rate_rps = [175]
scenario = ["steady"]
seeds = [9]
""")
    dev, val = ds["dev"], ds["val"]
    by_hand = [np.mean([dev.attainment.sel(exploration=c, rate_rps=r, heterogeneity=h, scenario=s).mean().item()
                        for r in (175, 250) for h in ("default", "high") for s in ("steady", "straggler")])
               for c in (0, 0.5, 5)]
    assert np.allclose(objective(dev, Selection("exploration", "attainment")).values, by_hand)
    best = (0, 0.5, 5)[int(np.argmax(by_hand))]
    assert dev.attrs["selects_exploration"] == best
    assert val.attrs["selected_exploration"] == best
    assert float(val.exploration.values[0]) == best


def test_chunking_and_single_runs_give_the_same_results():
    sweep = parse("""
[[stages]]
name = "s"
policy = ["least_queue", "adaptive"]
rate_rps = [250]
scenario = ["burst", "failure"]
seeds = [4, 5]
""")
    g = grid_mod.build(sweep, sweep.stages[0])
    whole = batch.simulate(g)
    for chunk in (1, 3):
        part = batch.simulate(g, chunk_size=chunk)
        assert whole.metrics.tobytes() == part.metrics.tobytes()
        assert whole.replicas.tobytes() == part.replicas.tobytes()


_THREE = """
[[stages]]
name = "a"
policy = ["round_robin"]
rate_rps = [175]
seeds = [1]
[[stages]]
name = "b"
policy = ["least_queue"]
rate_rps = [175]
seeds = [2]
[[stages]]
name = "c"
policy = ["adaptive"]
rate_rps = [175]
seeds = [3]
"""


def test_callbacks_behind_run_in_order_and_are_finished_on_return():
    """behind=True: the same calls in the same order as without it, on another thread,
    each stage's on_stage after its on_chunks, every one of them over when run returns
    (a slow callback is waited for)."""
    import threading
    import time

    def record(into):
        def on_chunks(c):
            into.append(("chunks", c.stage, threading.get_ident()))

        def on_stage(stage, ds):
            time.sleep(0.2)
            into.append(("stage", stage.name, ds.attainment.values.tobytes()))
        return on_chunks, on_stage

    now, later = [], []
    a = _run(_THREE, on_stage=record(now)[1], on_chunks=record(now)[0])
    b = _run(_THREE, on_stage=record(later)[1], on_chunks=record(later)[0], behind=True)
    assert [x[:2] for x in later] == [x[:2] for x in now] == [
        (k, s) for s in "abc" for k in ("chunks", "stage")]
    assert [x[2] for x in later if x[0] == "stage"] == [x[2] for x in now if x[0] == "stage"]
    me = threading.get_ident()
    assert all(x[2] == me for x in now if x[0] == "chunks")
    assert all(x[2] != me for x in later if x[0] == "chunks")
    for name in "abc":
        xr.testing.assert_identical(a[name], b[name])


def test_a_callback_error_behind_is_raised_and_the_stages_stop():
    """The first stage's on_stage fails on the background thread: run raises its error,
    and the stage after next does not start (callbacks run at most one stage behind)."""
    import time

    import pytest

    started = []

    def on_chunks(c):
        started.append(c.stage)

    def on_stage(stage, ds):
        if stage.name == "a":
            time.sleep(0.3)  # (still running when stage b has finished)
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        _run(_THREE, on_stage=on_stage, on_chunks=on_chunks, behind=True)
    assert started[0] == "a" and "c" not in started


def test_stages_finished_before_an_error_are_still_written_behind(tmp_path, monkeypatch):
    """A later stage fails in the main thread: the queued callbacks of the stages before
    it still run to the end before the error leaves run()."""
    import pytest
    import time

    from routesim import study

    done = []

    def on_stage(stage, ds):
        time.sleep(0.3)
        done.append(stage.name)

    real = study._run_stage

    def failing(sweep, stage, *args):
        if stage.name == "b":
            raise RuntimeError("stage b broke")
        return real(sweep, stage, *args)

    monkeypatch.setattr(study, "_run_stage", failing)
    with pytest.raises(RuntimeError, match="stage b broke"):
        _run(_THREE, on_stage=on_stage, behind=True)
    assert done == ["a"]


def _cli(tmp_path, name, threads):
    env = dict(os.environ, NUMBA_NUM_THREADS=str(threads))
    out = tmp_path / name
    subprocess.run([sys.executable, "-m", "routesim.sweep", str(tmp_path / "s.toml"), "--out", str(out),
                    "--quiet"], check=True, env=env, cwd=ROOT)
    return xr.open_dataset(out / "d.nc", engine="netcdf4").load()


def test_same_dataset_twice_and_with_one_or_two_threads(tmp_path):
    (tmp_path / "s.toml").write_text(HEAD + """
[[stages]]
name = "d"
policy = ["round_robin", "least_queue", "latency_aware", "adaptive"]
rate_rps = [175, 250]
seeds = { first = 1, count = 3 }
""")
    one = _cli(tmp_path, "one", 1)
    two = _cli(tmp_path, "two", 2)
    again = _cli(tmp_path, "again", 2)
    assert_invariants(one)
    xr.testing.assert_identical(one, two)
    xr.testing.assert_identical(two, again)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rate=st.sampled_from([50, 200, 400, 900]), cap=st.integers(1, 8),
       dt=st.sampled_from([0.25, 0.5, 1.0, 2.0]), het=st.lists(st.integers(3, 40), min_size=1, max_size=5),
       fail_at=st.floats(0, 1.9), down=st.floats(0.05, 2.0), slow=st.floats(0.2, 6.0))
def test_bookkeeping_holds_for_any_small_cluster(rate, cap, dt, het, fail_at, down, slow):
    n = len(het)
    head = HEAD.replace("default = [8, 11, 16]\nhigh = [6, 11, 22]", f"x = {het}")
    stage = f"""
[scenarios.random]
events = [{{ at_s = {fail_at}, replica = {n}, fail = true }}, {{ at_s = {fail_at / 2}, replica = 1, slowdown = {slow} }},
          {{ at_s = {min(fail_at + down, 3.9)}, replica = {n}, recover = true }}]
[[stages]]
name = "h"
policy = ["round_robin", "least_queue", "latency_aware", "adaptive"]
heterogeneity = ["x"]
scenario = ["random"]
rate_rps = [{rate}]
queue_cap = {cap}
dt_ms = {dt}
warmup_s = 1
measure_s = 3
seeds = [7]
"""
    sweep = routesim.parse_sweep(head + stage, "h.toml")
    g = grid_mod.build(sweep, sweep.stages[0])
    out = batch.simulate(g)
    ds = to_dataset(sweep, g, out, {})
    assert_invariants(ds)
    assert (out.replicas["qlen"] <= cap).all()
    assert (out.replicas["qlen"] >= 0).all()


_ONE = _THREE.split("[[stages]]\nname = \"b\"")[0]
"""Stage a of _THREE alone."""


def _slow_first_run(monkeypatch, ready_after_s):
    """A stage whose chunk takes 0.4 s, its engine reported ready ``ready_after_s``
    seconds after the stage starts (None: never, inf: ready at the start), with the
    compile note's threshold at 0.1 s: the notes it gives."""
    import time

    from routesim import schema, study

    start = [None]
    real = batch.simulate_range

    def slow(grid, lo, hi):
        start[0] = start[0] or time.perf_counter()
        time.sleep(0.4)
        return real(grid, lo, hi)

    def ready(self):
        if ready_after_s == float("inf"):
            return True
        return ready_after_s is not None and start[0] is not None and time.perf_counter() - start[0] > ready_after_s

    monkeypatch.setattr(study, "COMPILE_NOTE_S", 0.1)
    monkeypatch.setattr(batch, "simulate_range", slow)
    monkeypatch.setattr(schema.ReplicaModel, "engine_ready", ready)
    notes = []
    _run(_ONE, note=notes.append)
    return notes


def test_a_stage_says_once_that_it_compiles_when_its_engine_is_not_ready_in_time(monkeypatch):
    notes = _slow_first_run(monkeypatch, None)
    assert len(notes) == 1 and "compiling the queue model's kernels" in notes[0], notes


def test_a_ready_engine_or_one_ready_in_time_gives_no_compile_note(monkeypatch):
    assert _slow_first_run(monkeypatch, float("inf")) == []
    assert _slow_first_run(monkeypatch, 0.0) == []   # (a cache load: ready before the threshold)


def test_the_engine_is_ready_once_a_run_has_gone_through_it():
    """ReplicaModel.engine_ready reads the kernel's overloads: not ready in a new process, ready
    after one run there (loaded from the cache or compiled)."""
    from conftest import sweep_text

    text = sweep_text(_ONE, HEAD)
    script = ("import routesim\n"
              "from routesim import models\n"
              "q = models.get('queue')\n"
              "print(q.engine_ready())\n"
              f"routesim.run(routesim.parse_sweep({text!r}, 'a.toml'), show_progress=False)\n"
              "print(q.engine_ready())\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True"]
