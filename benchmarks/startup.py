"""One small run's whole process (issue 43, item 6): ``python -m benchmarks --only startup``.

A study of one run is decided by start-up, not by simulation: the issue's comparison with
BLIS ran one replica on a 1,000-request trace at 8 req/s, where routesim simulates for a
few milliseconds. :data:`ONE_RUN` is that sweep (the first 1,000 requests of the shipped
Azure conversation trace, time-scaled to 8 req/s, one replica, one policy, one seed).

- The whole command ``python -m routesim.sweep ONE_RUN --out TMP -q``: cold (an empty
  compilation cache: every kernel the run uses compiles) and warm (best of 5, wall and
  CPU), against the target of 0.5 s warm.
- ``phases`` (a task, its own process, warm): the same command's work, phase by phase,
  CPU and wall: the imports, Numba's CPU target (its registries; routesim/conf.py keeps
  its BLAS probe from importing scipy.linalg), reading the sweep (and its trace), each
  kernel loaded from the cache, the run itself, the Dataset, the netCDF file, the table.
"""

import time

T_START = time.perf_counter()
C_START = time.process_time()

import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from routesim.replay import replay_sweep  # noqa: E402

from .harness import ROOT, emit, run_measured  # noqa: E402

TRACE = ROOT / "traces" / "azure-conv.csv"
ONE_RUN = dict(
    name="one-run", replica={"kind": "batching"}, simulation={"warmup_s": 5, "measure_s": 120},
    workload={"trace": {"path": str(TRACE), "format": "azure", "time_scale": 1.728, "start_s": 0, "duration_s": 216}},
    header="# One run (benchmarks/startup.py): 1 replica, the first 1,000 requests of the Azure\n"
           "# conversation trace (216 s of it) replayed at 8 req/s (time_scale 1.728: 125 s).\n")
"""The one-run sweep's parts (routesim.replay.replay_sweep's arguments)."""
TARGET_S = 0.5
"""The issue's target for the warm whole process (BLIS's is about 1 s)."""


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def one_run_sweep(folder):
    """Write :data:`ONE_RUN` into ``folder``; its path."""
    path = folder / "one-run.toml"
    path.write_text(replay_sweep(**ONE_RUN))
    return path


# =====================================================================================
# The task (its own process)
# =====================================================================================

def phases(path, out):
    """The command's work on ``path``, phase by phase, in this fresh process, as
    ``python -m routesim.sweep PATH --out OUT -q`` does it: {phase: [CPU s, wall s]},
    and the seconds of each kernel loaded from the cache."""
    from pathlib import Path
    marks = [("start", C_START, T_START)]

    def mark(name):
        marks.append((name, time.process_time(), time.perf_counter()))

    from numba.core import caching          # the timers of the loads
    mark("import numba")
    loads = []
    load_overload = caching.Cache.load_overload

    def timed_load(self, sig, target_context):
        c0 = time.process_time()
        value = load_overload(self, sig, target_context)
        loads.append([self._name.split(" at ")[0].removeprefix("<function "), time.process_time() - c0])
        return value
    caching.Cache.load_overload = timed_load

    from routesim import startup
    startup.without_dask()                  # as the command's own process
    import routesim.conf  # noqa: F401     (sets Numba's CPU target up, as the command's first compiled module does)
    mark("Numba's CPU target (its registries; routesim.conf hides scipy.linalg)")
    import routesim.sweep  # noqa: F401
    from routesim.config import load_sweep
    mark("import the command")
    import xarray  # noqa: F401
    mark("import xarray and pandas")
    from routesim import study
    from routesim.results import write_atomic
    from routesim.summary import render
    mark("import the pipeline")
    sweep = load_sweep(Path(path))
    mark("read the sweep file and its trace")
    results = study.run(sweep, show_progress=False)
    mark("the run (kernels loaded, simulated, Dataset made)")
    (ds,) = results.values()  # the sweep's one stage (routesim.replay names it)
    write_atomic(ds, Path(out) / "one.nc")
    mark("the netCDF file (netCDF4)")
    render(ds, None)
    mark("the table")
    out = {b[0]: [b[1] - a[1], b[2] - a[2]] for a, b in zip(marks, marks[1:])}
    emit(dict(phases=out, loads=loads, cpu_s=time.process_time() - C_START,
              wall_s=time.perf_counter() - T_START))


GRID_FILES = 32
"""Trace files in the trace-grid measurement (the issue's grid over 32 trace files)."""


def trace_grid_sweeps(folder):
    """Write into ``folder`` :data:`GRID_FILES` traces of 1,000 Azure rows (windows of the
    shipped conversation trace, 30 rows apart) and two sweeps of the same runs' size: one
    run per file (``files.toml``), and the first file with one run per seed
    (``seeds.toml``, power_of_d so that each seed is its own run). Their paths."""
    rows = TRACE.read_text().splitlines()
    for k in range(GRID_FILES):
        (folder / f"t{k:02d}.csv").write_text("\n".join([rows[0], *rows[1 + 30 * k:1001 + 30 * k]]) + "\n")
    files = ", ".join(f'"t{k:02d}.csv"' for k in range(GRID_FILES))
    head = ('[replica]\nkind = "batching"\n[simulation]\nwarmup_s = 5\nmeasure_s = 120\n'
            '[workload]\nsource = "trace"\ntrace = { path = "t00.csv", format = "azure", time_scale = 1.728 }\n'
            '[cluster.heterogeneity]\nuniform = [1]\n[grid]\nheterogeneity = ["uniform"]\nscenario = ["steady"]\n'
            '[[stages]]\nname = "s"\npolicy = "power_of_d"\n')
    paths = folder / "files.toml", folder / "seeds.toml"
    paths[0].write_text(f'name = "files"\n{head}seeds = {{ first = 1, count = 1 }}\n'
                        f'workload = {{ trace = {{ path = [{files}] }} }}\n')
    paths[1].write_text(f'name = "seeds"\n{head}seeds = {{ first = 1, count = {GRID_FILES} }}\n')
    return paths


def trace_grid(folder):
    """A task: the CPU of reading and running each sweep of :func:`trace_grid_sweeps`
    (``load_sweep`` + ``routesim.run``, kernels warm, the trace cache emptied before each,
    alternated, best of 3): {"files_s", "seeds_s"}."""
    import routesim
    from routesim import traces
    files, seeds = trace_grid_sweeps(Path(folder))
    routesim.run(routesim.load_sweep(seeds), show_progress=False)   # the kernels loaded
    best = {"files_s": math.inf, "seeds_s": math.inf}
    for _ in range(3):
        for key, path in (("files_s", files), ("seeds_s", seeds)):
            traces._load_cached.cache_clear()
            c0 = time.process_time()
            routesim.run(routesim.load_sweep(path), show_progress=False)
            best[key] = min(best[key], time.process_time() - c0)
    emit(best)


# =====================================================================================
# The section (in the suite's process)
# =====================================================================================

def section(suite):
    """The one-run figures into suite.fig, their text into suite.detail["startup_text"]."""
    from . import report

    path = one_run_sweep(suite.tmp)
    env = {"NUMBA_CACHE_DIR": str(suite.tmp / "cache-startup"), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "routesim.sweep", str(path), "--out", str(suite.tmp / "one"), "-q"]
    log("startup: one run, whole command, cold (compiling into an empty cache)")
    cold = run_measured(argv, env=env, timeout=3600)
    warm = []
    for i in range(3 if suite.quick else 5):
        log(f"startup: one run, whole command, warm ({i + 1})")
        warm.append(run_measured(argv, env=env))
    best = min(warm, key=lambda c: c.wall)
    log("startup: one run, phase by phase")
    tasks = [run_measured([sys.executable, "-m", "benchmarks.startup", "phases",
                           json.dumps({"path": str(path), "out": str(suite.tmp / "one")})], env=env).result
             for _ in range(3)]
    p = min(tasks, key=lambda t: t["cpu_s"])
    fig = suite.fig
    fig.update({"startup.one_run_s": best.wall, "startup.one_run_cpu_s": min(c.cpu for c in warm),
                "startup.one_run_cold_s": cold.wall, "startup.one_run_cold_cpu_s": cold.cpu,
                "startup.one_run_rss": best.max_rss})
    for name, (cpu, _) in p["phases"].items():
        fig[f"startup.phase.{name}"] = cpu
    rows = [["phase (one warm process)", "CPU s", "wall s", "share of CPU"]]
    for name, (cpu, wall) in p["phases"].items():
        rows.append([name, report.fmt(cpu), report.fmt(wall), f"{100 * cpu / p['cpu_s']:.0f} %"])
    rows.append(["total", report.fmt(p["cpu_s"]), report.fmt(p["wall_s"]), "100 %"])
    loads = ", ".join(f"`{name}` {report.fmt(s * 1e3)} ms" for name, s in p["loads"])
    suite.detail["startup_text"] = "\n".join([
        "`python -m routesim.sweep ONE.toml --out TMP -q` (benchmarks/startup.py: one replica, "
        "the first 1,000 requests of `traces/azure-conv.csv` replayed at 8 req/s, one policy, "
        "one seed; the issue's side-by-side with BLIS). *Cold*: an empty compilation cache; "
        f"*warm*: the same command again, best of {len(warm)}. Cold "
        f"{report.fmt(cold.wall)} s wall, {report.fmt(cold.cpu)} s CPU; warm "
        f"{report.fmt(best.wall)} s wall, {report.fmt(fig['startup.one_run_cpu_s'])} s CPU, peak RSS "
        f"{report.fmt(best.max_rss, 2**-20)} MiB (target: at most {TARGET_S:g} s warm).",
        "",
        "Where a warm process spends it (the command's steps in one fresh process, best of 3 "
        "by CPU; the imports in the order the command makes them, each row what it adds):",
        "",
        report.md_table(rows),
        "",
        f"Kernels loaded from the cache (CPU): {loads}.",
        "",
        _trace_grid_text(suite, env),
    ])
    suite.note_load()


def _trace_grid_text(suite, env):
    """The trace grid's figures into suite.fig; its paragraph."""
    from . import report
    folder = suite.tmp / "trace-grid"
    folder.mkdir()
    log("startup: a grid over trace files against the same runs on one file")
    g = run_measured([sys.executable, "-m", "benchmarks.startup", "trace_grid", json.dumps({"folder": str(folder)})],
                     env=env).result
    per_file = (g["files_s"] - g["seeds_s"]) / GRID_FILES
    per_run = g["seeds_s"] / GRID_FILES
    suite.fig.update({"startup.trace_grid_file_ms": 1e3 * per_file, "startup.trace_grid_run_ms": 1e3 * per_run,
                      "startup.trace_grid_overhead_ratio": per_file / per_run})
    return (f"**A grid over trace files** (`benchmarks.startup.trace_grid`, one warm process, CPU, best of 3 "
            f"alternated): {GRID_FILES} files of 1,000 Azure rows, one run each "
            f"({report.fmt(g['files_s'])} s with reading and checking the sweep), against one of those files with "
            f"{GRID_FILES} seeds ({report.fmt(g['seeds_s'])} s): each file adds {report.fmt(1e3 * per_file)} ms "
            f"(parsing it, checking it against the pool, its own workload) to a run's {report.fmt(1e3 * per_run)} "
            f"ms, {report.fmt(per_file / per_run)}x (target: below 1x).")


if __name__ == "__main__":
    name, args = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    globals()[name](**args)
