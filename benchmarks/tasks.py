"""The measurements, each run in its own process: ``python -m benchmarks.tasks NAME JSON``.

Each task prints one line of JSON (see :func:`benchmarks.harness.emit`). Times are
wall-clock seconds from ``time.perf_counter``; ``cpu`` figures are the process's CPU
seconds (all threads) from ``time.process_time``. "Requests" are simulated arrivals:
every arrival of every run, warm-up included.
"""

import time

T_START = time.perf_counter()

import json  # noqa: E402
import sys  # noqa: E402

from .harness import STUDY, emit, from_tests, rss_now  # noqa: E402

STUDY_HEAD = STUDY.read_text().split("[[stages]]")[0]
POLICIES = ("round_robin", "least_queue", "latency_aware", "adaptive")


def _best(fn, repeats):
    """(best wall, CPU of that repeat, value) over ``repeats`` calls of ``fn``."""
    best = (float("inf"), 0.0, None)
    for _ in range(max(1, repeats)):
        c0, t0 = time.process_time(), time.perf_counter()
        value = fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if wall < best[0]:
            best = (wall, cpu, value)
    return best


def _study_engine(sweep, build, simulate, choose):
    """Grid build + simulate of every stage of the study, selection in between (not
    timed): {stage: (build s, simulate s, grid, outcome)}."""
    selected, out = {}, {}
    for stage in sweep.stages:
        t0 = time.perf_counter()
        grid = build(sweep, stage, selected)
        t1 = time.perf_counter()
        outcome = simulate(grid)
        t2 = time.perf_counter()
        out[stage.name] = (t1 - t0, t2 - t1, grid, outcome)
        if stage.select:
            selected[stage.select.parameter] = choose(sweep, grid, outcome, selected, stage)
    return out


def _chooser():
    from routesim.results import to_dataset
    from routesim.study import choose

    def pick(sweep, grid, outcome, selected, stage):
        return choose(to_dataset(sweep, grid, outcome, selected), stage.select)
    return pick


def engine(repeats=5):
    """The study's engine time: grid build (workload generation) + batch.simulate, every
    stage; the first pass (compiling, or loading the compiled kernels from the cache),
    then the best of ``repeats`` warm passes."""
    import routesim
    from routesim import batch, grid as grid_mod

    t_import = time.perf_counter() - T_START
    sweep = routesim.load_sweep(STUDY)
    pick = _chooser()
    t0 = time.perf_counter()
    first = _study_engine(sweep, grid_mod.build, batch.simulate, pick)
    t_first = time.perf_counter() - t0
    cpus, builds, sims = [], [], []
    for _ in range(repeats):
        c0 = time.process_time()
        res = _study_engine(sweep, grid_mod.build, batch.simulate, pick)
        cpus.append(time.process_time() - c0)
        builds.append(sum(v[0] for v in res.values()))
        sims.append(sum(v[1] for v in res.values()))
    i = min(range(repeats), key=lambda k: builds[k] + sims[k])
    runs = sum(v[2].runs for v in first.values())
    requests = sum(int(v[2].arrivals().sum()) for v in first.values())
    emit(dict(import_s=t_import, first_pass_s=t_first, build_s=builds[i], simulate_s=sims[i],
              engine_s=builds[i] + sims[i], engine_median_s=sorted(b + s for b, s in zip(builds, sims))[repeats // 2],
              cpu_s=cpus[i], runs=runs, requests=requests, peak_rss=rss_now()[1]))


def breakdown(repeats=3, profile=True):
    """Where a warm run of the whole command spends its time, phase by phase, and the
    compiled side split into its kernels; plus a cProfile of the Python side."""
    import shutil
    import tempfile
    from pathlib import Path

    import routesim
    from routesim import batch, grid as grid_mod
    from routesim.results import to_dataset, write_atomic
    from routesim.study import choose
    from routesim.summary import render

    phases = {"imports": time.perf_counter() - T_START}
    t0 = time.perf_counter()
    sweep = routesim.load_sweep(STUDY)
    phases["read sweep file"] = time.perf_counter() - t0

    # the first call loads the compiled kernels from the disk cache
    tiny = routesim.parse_sweep(STUDY_HEAD + """
[[stages]]
name = "tiny"
policy = ["adaptive"]
rate_rps = [100]
scenario = ["steady"]
heterogeneity = ["default"]
warmup_s = 0.05
measure_s = 0.05
seeds = [1]
""", "tiny.toml")
    t0 = time.perf_counter()
    tiny_outcome = batch.simulate(grid_mod.build(tiny, tiny.stages[0]))
    phases["load compiled kernels (first call)"] = time.perf_counter() - t0

    # the first Dataset: xarray imports its optional array backends (dask, if installed)
    tiny_grid = grid_mod.build(tiny, tiny.stages[0])
    t0 = time.perf_counter()
    to_dataset(tiny, tiny_grid, tiny_outcome, {})
    first_ds = time.perf_counter() - t0
    steady_ds = _best(lambda: to_dataset(tiny, tiny_grid, tiny_outcome, {}), repeats)[0]
    phases["first Dataset (xarray's lazy imports)"] = max(0.0, first_ds - steady_ds)

    selected, grids, outs, dss, inherited = {}, {}, {}, {}, {}
    for stage in sweep.stages:
        inherited[stage.name] = dict(selected)
        grids[stage.name] = g = grid_mod.build(sweep, stage, selected)
        outs[stage.name] = o = batch.simulate(g)
        dss[stage.name] = ds = to_dataset(sweep, g, o, selected)
        if stage.select:
            selected[stage.select.parameter] = choose(ds, stage.select)

    acc = {}

    def add(name, seconds):
        acc[name] = acc.get(name, 0.0) + seconds

    tmp = Path(tempfile.mkdtemp(prefix="routesim-bench-"))
    try:
        for stage in sweep.stages:
            g, sel, ds = grids[stage.name], inherited[stage.name], dss[stage.name]
            add("workload generation (grid.build)", _best(lambda: grid_mod.build(sweep, stage, sel), repeats)[0])
            add("compiled batch (batch.simulate)", _best(lambda: batch.simulate(g), repeats)[0])
            add("Dataset assembly (to_dataset)",
                _best(lambda: to_dataset(sweep, g, outs[stage.name], sel), repeats)[0])
            if stage.select:
                add("selection (choose)", _best(lambda: choose(ds, stage.select), repeats)[0])
            add("summary table (render)", _best(lambda: render(ds, stage.select), repeats)[0])
            add("netCDF write (write_atomic)",
                _best(lambda: write_atomic(ds, tmp / f"{stage.name}.nc"), repeats)[0])
        phases.update(acc)

        kernels = {}
        try:
            from . import kernels as kmod
            for stage in sweep.stages:
                for name, secs in kmod.split(grids[stage.name], outs[stage.name], repeats).items():
                    kernels[name] = kernels.get(name, 0.0) + secs
        except Exception as exc:  # noqa: BLE001 - the engine's signatures moved: say so
            kernels = {"unavailable": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}

        top = []
        if profile:
            import cProfile
            import pstats
            prof = cProfile.Profile()
            prof.enable()
            res = routesim.run(sweep, show_progress=False)
            for name, ds in res.items():
                write_atomic(ds, tmp / f"{name}.nc")
            prof.disable()
            for (file, line, func), (_, nc, tt, ct, _) in pstats.Stats(prof).stats.items():
                top.append((tt, ct, nc, f"{Path(file).name}:{line}({func})" if line else func))
            top = sorted(top, reverse=True)[:15]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    emit(dict(phases=phases, kernels=kernels, profile=top,
              requests=sum(int(g.arrivals().sum()) for g in grids.values()),
              runs=sum(g.runs for g in grids.values()), peak_rss=rss_now()[1]))


def _conditions(rates, scenarios, policies, seeds, heterogeneity=("default",)):
    return [dict(policy=p, rate_rps=r, heterogeneity=h, scenario=s, seed=k)
            for p in policies for r in rates for h in heterogeneity for s in scenarios for k in seeds]


def peers(rates=(100, 250), scenarios=("steady", "burst", "straggler", "failure"), policies=POLICIES,
          seeds=(101,), repeats=10, which=("engine", "reference", "simpy")):
    """One run's cost on the engine (one thread: run with NUMBA_NUM_THREADS=1), the
    naive reference and the SimPy model, on the same study conditions, in this one
    process; and whether the peers' metrics agree with the engine's, run by run."""
    import math

    import routesim
    from routesim import batch, grid as grid_mod
    from routesim.results import to_dataset

    import tomllib

    reference = from_tests("reference")

    def scenario_events(text, name):   # the events in sweep-file form, as the reference takes them
        return tomllib.loads(text)["scenarios"][name]["events"]

    from . import simpy_model

    text = STUDY_HEAD + f"""
[[stages]]
name = "peers"
policy = {json.dumps(list(policies))}
rate_rps = {json.dumps(list(rates))}
scenario = {json.dumps(list(scenarios))}
heterogeneity = ["default"]
seeds = {json.dumps(list(seeds))}
"""
    sweep = routesim.parse_sweep(text, "peers.toml")
    stage = sweep.stages[0]
    out = {}
    grid = grid_mod.build(sweep, stage)
    outcome = batch.simulate(grid)          # warm-up
    ds = to_dataset(sweep, grid, outcome, {}).squeeze()
    if "engine" in which:
        best_cpu, best_wall = float("inf"), float("inf")
        for _ in range(repeats):
            c0, t0 = time.process_time(), time.perf_counter()
            batch.simulate(grid_mod.build(sweep, stage))
            best_wall = min(best_wall, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
        out["engine"] = dict(per_run_s=best_wall / grid.runs, cpu_per_run_s=best_cpu / grid.runs)
    runs = _conditions(rates, scenarios, policies, seeds)
    fixed = dict(dt_ms=0.5, warmup_s=3.0, measure_s=12.0, slo_ms=50.0, queue_cap=50,
                 reference_demand_ms=11.0, alpha=0.15, exploration=0.35, reward_ceiling_ms=100.0,
                 prior_service_ms=11.0)
    names = ("arrivals", "completed", "shed", "latency_p50", "latency_p99", "latency_mean", "attainment")
    for peer, fn in (("reference", reference.simulate_run), ("simpy", simpy_model.simulate_run)):
        if peer not in which:
            continue
        total, cpu, agree = 0.0, 0.0, 0
        for c in runs:
            kw = dict(policy=c["policy"], seed=c["seed"], rate_rps=float(c["rate_rps"]),
                      ref_ms=list(sweep.heterogeneity[c["heterogeneity"]]),
                      events=scenario_events(text, c["scenario"]), **fixed)
            c0, t0 = time.process_time(), time.perf_counter()
            m = fn(**kw)
            total += time.perf_counter() - t0
            cpu += time.process_time() - c0
            e = ds.sel({k: v for k, v in c.items() if k in ds.dims})
            agree += all(float(e[n]) == m[n] or (math.isnan(float(e[n])) and math.isnan(m[n]))
                         or abs(float(e[n]) - m[n]) <= 1e-9 * max(1.0, abs(m[n])) for n in names)
        out[peer] = dict(per_run_s=total / len(runs), cpu_per_run_s=cpu / len(runs), agree=agree)
    emit(dict(peers=out, runs=len(runs), requests_per_run=float(grid.arrivals().mean()),
              peak_rss=rss_now()[1]))


def _scaled(kind, value, policy):
    """A sweep (text) and a note for one point of a scaling curve."""
    head = STUDY_HEAD
    if kind == "runs":   # adaptive, 10 values of c sharing each workload, seeds to reach N
        n_c = min(value, 10)
        cs = [round(0.05 * i, 2) for i in range(n_c)]
        stage = f"""policy = ["adaptive"]
exploration = {json.dumps(cs)}
rate_rps = [175]
heterogeneity = ["default"]
scenario = ["steady"]
seeds = {{ first = 1, count = {value // n_c} }}"""
    elif kind == "replicas":  # the 8/11/16 ms pattern repeated; rate at 63 % of capacity
        ref = [(8, 11, 16)[i % 3] for i in range(value)]
        capacity = sum(1.0 / r for r in ref) * 1000.0
        rate = round(0.63 * capacity, 1)
        lines = head.splitlines(keepends=True)
        at = next(i for i, line in enumerate(lines) if line.startswith("[cluster.heterogeneity]"))
        lines.insert(at + 1, f"scaled = {json.dumps(ref)}\n")
        head = "".join(lines)
        seeds = max(1, min(256, int(2_000_000 // (rate * 15))))
        stage = f"""policy = ["{policy}"]
rate_rps = [{rate}]
heterogeneity = ["scaled"]
scenario = ["steady"]
seeds = {{ first = 1, count = {seeds} }}"""
    elif kind == "horizon":  # total horizon in s; warm-up 3 s
        stage = f"""policy = {json.dumps(list(POLICIES))}
rate_rps = [175]
heterogeneity = ["default"]
scenario = ["steady"]
measure_s = {value - 3}
seeds = {{ first = 1, count = {max(4, min(64, int(1_000_000 // (175 * value * 4))))} }}"""
    elif kind == "rate":
        stage = f"""policy = {json.dumps(list(POLICIES))}
rate_rps = [{value}]
heterogeneity = ["default"]
scenario = ["steady"]
seeds = {{ first = 1, count = {max(8, min(128, int(1_000_000 // (value * 15 * 4))))} }}"""
    else:
        raise ValueError(kind)
    return head + f'\n[[stages]]\nname = "point"\n{stage}\n'


def scale(kind, value, policy="least_queue", repeats=3):
    """One point of a scaling curve: engine time (build + simulate) and time per request."""
    import routesim
    from routesim import batch, grid as grid_mod

    sweep = routesim.parse_sweep(_scaled(kind, value, policy), "scale.toml")
    stage = sweep.stages[0]
    grid = grid_mod.build(sweep, stage)
    requests = int(grid.arrivals().sum())
    # warm the kernels on a few runs first, then time the whole grid
    batch.simulate(grid, chunk_size=1) if grid.runs == 1 else batch.simulate(grid_mod.build(sweep, stage))
    if requests > 5_000_000:
        repeats = 1
    build_s, _, _ = _best(lambda: grid_mod.build(sweep, stage), repeats)
    sim_s, sim_cpu, _ = _best(lambda: batch.simulate(grid), repeats)
    emit(dict(kind=kind, value=value, runs=grid.runs, requests=requests, replicas=grid.replicas,
              build_s=build_s, simulate_s=sim_s, simulate_cpu_s=sim_cpu, engine_s=build_s + sim_s,
              ns_per_request=(build_s + sim_s) / requests * 1e9,
              sim_ns_per_request=sim_s / requests * 1e9, peak_rss=rss_now()[1]))


def _numpy_transcendentals():
    """The workload modules' routesim.ieee_math functions swapped for NumPy's own (what
    generation used before it was made machine-independent): the baseline of
    :func:`generation`. Returns a function that puts routesim's back."""
    import numpy as np
    from routesim import arrivals
    from routesim.batching import workload as token
    from routesim.queue import workload as queue

    def box_muller(u, radius_column, angle_column):
        radius = np.sqrt(-2.0 * np.log1p(-u[:, radius_column]))
        angle = 2.0 * np.pi * u[:, angle_column]
        return radius * np.cos(angle), radius * np.sin(angle)

    swaps = {"exp_array": np.exp, "log1p_array": np.log1p, "power_array": np.power,
             "box_muller": box_muller}
    saved = []
    for module in (arrivals, queue, token):
        for name, fn in swaps.items():
            if hasattr(module, name):
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, fn)

    def restore():
        for module, name, fn in saved:
            setattr(module, name, fn)
    return restore


def generation(repeats=5, seeds=32):
    """Workload generation, routesim's (machine-independent, routesim.ieee_math) against
    NumPy's transcendental functions in the same code, same process: the queue study's
    draws (250 req/s, a burst doubling the rate from 7 s, 15 s, token demand) and the
    batching model's (40 req/s, 60 s, the default classes and prefix groups), ``seeds``
    workloads each; best of ``repeats``."""
    from routesim.batching.workload import TokenWorkloadParams
    from routesim.batching.workload import generate as token_generate
    from routesim.queue.workload import WorkloadParams
    from routesim.queue.workload import generate as queue_generate

    qp, tp = WorkloadParams(), TokenWorkloadParams()

    def queue():
        return sum(len(queue_generate(s, 250.0, [(7000.0, 2.0)], 15000.0, qp)) for s in range(1, seeds + 1))

    def token():
        return sum(len(token_generate(s, 40.0, [], 60000.0, tp)) for s in range(1, seeds + 1))

    queue(), token()                              # compile (or load) the kernels first
    out = {"seeds": seeds}
    for name, fn in (("queue", queue), ("token", token)):
        wall, _, n = _best(fn, repeats)
        out[f"{name}_s"], out[f"{name}_requests"] = wall, n
    restore = _numpy_transcendentals()
    for name, fn in (("queue", queue), ("token", token)):
        out[f"{name}_numpy_s"] = _best(fn, repeats)[0]
    restore()
    emit(out)


def imports():
    """Time to import what the command line imports before it runs a stage (Numba comes
    with the model's kernels, routesim/conf.py)."""
    import routesim.sweep  # noqa: F401
    import routesim.study  # noqa: F401
    import routesim.results  # noqa: F401
    import routesim.summary  # noqa: F401
    emit(dict(import_s=time.perf_counter() - T_START, peak_rss=rss_now()[1]))


if __name__ == "__main__":
    name, args = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    globals()[name](**args)
