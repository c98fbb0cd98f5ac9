"""The table, the targets and docs/performance.md, with the previous figures beside the new.

The figures of a run are a flat ``{key: number}`` dict. docs/performance.md carries
them verbatim in an HTML comment at its end, so the next run can read the committed
figures back (``git show HEAD:docs/performance.md``, else the file on disk) and print
them beside its own: a regression is then one glance away.
"""

import json
import math
import re
import subprocess

from .harness import ROOT

DOC = ROOT / "docs" / "performance.md"
_BLOCK = re.compile(r"<!-- benchmark-figures\n(.*?)\n-->", re.S)
GIB = 2**30

ROWS = [
    # key, label, unit, scale, better ("low"/"high")
    ("study.cold_s", "full study, whole command, cold (empty compilation cache)", "s", 1, "low"),
    ("study.warm_s", "full study, whole command, warm", "s", 1, "low"),
    ("study.warm_cpu_s", "full study, whole command, warm: CPU time (all threads)", "s", 1, "low"),
    ("engine.cold_s", "full study, engine only, cold (first pass, compiling)", "s", 1, "low"),
    ("engine.warm_s", "full study, engine only, warm (build + simulate)", "s", 1, "low"),
    ("engine.warm_cpu_s", "full study, engine only, warm: CPU time (all threads)", "s", 1, "low"),
    ("engine.one_thread_s", "full study, engine only, warm, 1 thread", "s", 1, "low"),
    ("engine.req_per_core_s", "simulated requests per second per core (1 thread)", "M/s", 1e-6, "high"),
    ("engine.req_per_core_s_2t", "simulated requests per second per core (2 threads)", "M/s", 1e-6, "high"),
    ("import.s", "imports of the command line", "s", 1, "low"),
    ("peers.engine_ms", "one run, engine, 1 thread (build + simulate), CPU", "ms", 1e3, "low"),
    ("peers.simpy_ms", "one run, SimPy model, CPU", "ms", 1e3, "low"),
    ("peers.reference_ms", "one run, naive reference (tests/reference.py), CPU", "ms", 1e3, "low"),
    ("peers.simpy_ratio", "SimPy / engine, per run per core", "x", 1, "high"),
    ("peers.reference_ratio", "reference / engine, per run per core", "x", 1, "high"),
    ("study.cold_rss", "peak RSS, study command, cold", "MiB", 2**-20, "low"),
    ("study.warm_rss", "peak RSS, study command, warm", "MiB", 2**-20, "low"),
    ("engine.rss", "peak RSS, engine only (study grids, in-process)", "MiB", 2**-20, "low"),
    ("peers.engine_rss", "peak RSS, engine peer process", "MiB", 2**-20, "low"),
    ("peers.simpy_rss", "peak RSS, SimPy peer process", "MiB", 2**-20, "low"),
    ("peers.reference_rss", "peak RSS, reference peer process", "MiB", 2**-20, "low"),
    ("generation.queue_s", "workload generation, queue model, 32 seeds (routesim.ieee_math)", "ms", 1e3, "low"),
    ("generation.queue_numpy_s", "the same with NumPy's exp/log1p/sin/cos (baseline)", "ms", 1e3, "low"),
    ("generation.queue_ratio", "queue-model generation, routesim / NumPy baseline", "x", 1, "low"),
    ("generation.token_s", "workload generation, batching model, 32 seeds (routesim.ieee_math)", "ms", 1e3, "low"),
    ("generation.token_numpy_s", "the same with NumPy's exp/log1p/sin/cos/power (baseline)", "ms", 1e3, "low"),
    ("generation.token_ratio", "batching-model generation, routesim / NumPy baseline", "x", 1, "low"),
    ("big.wall_s", "{big} grid, whole command (chunked)", "s", 1, "low"),
    ("big.rss", "{big} grid, peak RSS", "MiB", 2**-20, "low"),
    # the batching model (benchmarks/batching.py)
    ("batching.cold_s", "batching example, whole command, cold (empty compilation cache)", "s", 1, "low"),
    ("batching.cold_cpu_s", "batching example, whole command, cold: CPU time", "s", 1, "low"),
    ("batching.compile_s", "batching kernels, compilation alone (cold minus warm, the example shrunk to 3 s)", "s", 1, "low"),
    ("batching.compile_cpu_s", "batching kernels, compilation alone: CPU time", "s", 1, "low"),
    ("batching.warm_s", "batching example, whole command, warm", "s", 1, "low"),
    ("batching.warm_cpu_s", "batching example, whole command, warm: CPU time", "s", 1, "low"),
    ("batching.peak_rss", "batching example, peak RSS (cold or warm)", "MiB", 2**-20, "low"),
    ("batching.study_s", "least-outstanding study, whole command, warm", "s", 1, "low"),
    ("batching.study_cpu_s", "least-outstanding study, whole command, warm: CPU time", "s", 1, "low"),
    ("batching.run60_ms", "batching, one 60 s run of 8 replicas at 40 req/s, 1 thread", "ms", 1, "low"),
    ("batching.realtime_x", "batching, faster than real time (1 core, workload included)", "x", 1, "high"),
    ("batching.iter_per_core_s", "batching, simulated iterations per second per core", "M/s", 1e-6, "high"),
    ("batching.req_per_core_s", "batching, simulated requests per second per core", "k/s", 1e-3, "high"),
    ("batching.peer_engine_ms", "batching, short run, engine, 1 thread, CPU", "ms", 1, "low"),
    ("batching.peer_reference_ms", "batching, short run, naive reference, CPU", "ms", 1, "low"),
    ("batching.reference_ratio", "batching reference / engine, per run per core", "x", 1, "high"),
    ("batching.ns_per_iteration", "batching, 60 s runs, engine ns per iteration, 1 thread, CPU", "ns", 1, "low"),
    ("batching.floor_ns_per_iteration", "batching, the same runs, floor kernel ns per iteration", "ns", 1, "low"),
    ("batching.floor_ratio", "batching engine / floor kernel, per iteration", "x", 1, "low"),
    ("batching.vllm_run60_ms", "batching, the same 60 s run with scheduler = \"vllm\", 1 thread, CPU", "ms", 1, "low"),
    ("batching.vllm_ratio", "batching, scheduler = \"vllm\" / \"reserve\", per run", "x", 1, "low"),
    ("batching.vllm_iteration_ratio", "batching, scheduler = \"vllm\" / \"reserve\", per iteration", "x", 1, "low"),
    ("batching.vllm_async_run60_ms", "batching, the same 60 s run with scheduler = \"vllm\", async_scheduling, 1 "
     "thread, CPU", "ms", 1, "low"),
    ("batching.vllm_async_ratio", "batching, \"vllm\" async_scheduling / \"reserve\", per run", "x", 1, "low"),
    ("batching.vllm_async_sync_ratio", "batching, \"vllm\" async_scheduling / synchronous, per run", "x", 1, "low"),
    ("batching.pd_ratio", "batching, prefill/decode pools (2:6) / co-located, the same 60 s runs, per run", "x", 1,
     "low"),
    ("batching.signal_ratio.periodic50", "batching, a 50 ms periodic signal / fresh, per run (study runs)", "x", 1,
     "low"),
    ("batching.signal_ratio.periodic10", "batching, a 10 ms periodic signal / fresh, per run", "x", 1, "low"),
    ("batching.signal_ratio.local50", "batching, a 50 ms periodic_local signal / fresh, per run", "x",
     1, "low"),
    # one small run's whole process (benchmarks/startup.py)
    ("startup.one_run_s", "one run (1 replica, 1,000 trace requests), whole command, warm", "s", 1, "low"),
    ("startup.one_run_cpu_s", "one run, whole command, warm: CPU time", "s", 1, "low"),
    ("startup.one_run_cold_s", "one run, whole command, cold (empty compilation cache)", "s", 1, "low"),
    ("startup.one_run_cold_cpu_s", "one run, whole command, cold: CPU time", "s", 1, "low"),
    ("startup.one_run_rss", "one run, whole command, peak RSS", "MiB", 2**-20, "low"),
]

TARGETS = [
    # key, text, comparison, limit, unit label, scale
    ("engine.warm_s", "full study engine time (workload generation included), warm", "<", 0.5, "s", 1),
    ("study.warm_s", "whole command (imports, files) warm", "<", 4.0, "s", 1),
    ("peers.simpy_ratio", "per run per core vs SimPy", ">=", 100.0, "x", 1),
    ("peers.reference_ratio", "per run per core vs naive reference", ">=", 50.0, "x", 1),
    ("study.cold_s", "first run on a fresh clone, compilation included", "<", 30.0, "s", 1),
    ("study.peak_rss", "study's peak RSS", "<", 1.0, "GiB", 1 / GIB),
    ("big.rss", "{big} grid in bounded memory", "<", 2.0, "GiB", 1 / GIB),
    # the batching model (benchmarks/batching.py)
    ("batching.reference_ratio", "batching: per run per core vs naive reference", ">=", 500.0, "x", 1),
    ("batching.realtime_x", "batching: 60 s, 8 replicas, 40 req/s, 1 core, vs real time", ">=", 10000.0, "x", 1),
    ("batching.warm_s", "batching example (sweeps/batching.toml), whole command warm", "<=", 15.0, "s", 1),
    ("batching.floor_ratio", "batching: engine per iteration vs the floor kernel", "<=", 3.0, "x", 1),
    ("batching.vllm_ratio", "batching: scheduler = \"vllm\" (synchronous loop) / \"reserve\", per run", "<=", 2.0, "x", 1),
    ("batching.vllm_async_ratio", "batching: scheduler = \"vllm\" (vLLM's default, asynchronous loop) / \"reserve\", "
     "per run", "<=", 2.0, "x", 1),  # issue 43, item 5
    ("batching.cold_s", "batching example, first run on a fresh clone", "<=", 40.0, "s", 1),
    ("batching.study_s", "least-outstanding study, whole command warm", "<=", 600.0, "s", 1),  # issue 23
    ("startup.one_run_s", "one run (1 replica, 1,000 trace requests), whole command warm", "<=", 0.5, "s", 1),
    ("startup.trace_grid_overhead_ratio", "trace grid: each file's overhead vs a run's cost", "<", 1, "x", 1),
]


def previous() -> tuple[dict, str]:
    """(figures, where from) of the last committed docs/performance.md, else the file."""
    for source, read in (("HEAD:docs/performance.md", _git_doc), ("docs/performance.md", _disk_doc)):
        text = read()
        if text:
            m = _BLOCK.search(text)
            if m:
                try:
                    return json.loads(m.group(1)), source
                except ValueError:
                    pass
    return {}, "none"


def _git_doc():
    try:
        r = subprocess.run(["git", "show", "HEAD:docs/performance.md"], cwd=ROOT, text=True,
                           capture_output=True)
        return r.stdout if r.returncode == 0 else ""
    except OSError:
        return ""


def _disk_doc():
    return DOC.read_text() if DOC.exists() else ""


MISSING = "–"
"""How a missing figure (None, NaN, ±inf) is shown here: an en dash, as docs/performance.md has
always had it (routesim.tables.NONE, the summaries' mark, is an em dash)."""


def fmt(value, scale=1.0) -> str:
    """``value * scale`` to about three significant figures (``,`` between thousands from
    1,000 up), through routesim.tables.fmt; :data:`MISSING` when there is no number."""
    if value is None:
        return MISSING
    v = value * scale
    a = abs(v)
    spec = ",.0f" if a >= 1000 else ".0f" if a >= 100 else ".1f" if a >= 10 else ".2f" if a >= 1 else ".3f"
    from routesim import tables   # here, not at the top: the suite's own process stays small
    text = tables.fmt(v, spec)
    return MISSING if text == tables.NONE else text


def change(new, old, better):
    if new is None or old is None or not old or any(isinstance(x, float) and math.isnan(x) for x in (new, old)):
        return ""
    r = new / old
    worse = r > 1.1 if better == "low" else r < 1 / 1.1
    return f"{r:.2f}x" + (" (worse)" if worse else "")


def _big(fig):
    return f"{int(fig.get('big.runs', 100_032)):,}-run"


def table(fig: dict, prev: dict) -> list[list[str]]:
    rows = [["measure", "now", "previous", "now/prev", "unit"]]
    for key, label, unit, scale, better in ROWS:
        if key in fig or key in prev:
            rows.append([label.format(big=_big(fig)), fmt(fig.get(key), scale), fmt(prev.get(key), scale),
                         change(fig.get(key), prev.get(key), better), unit])
    return rows


def targets(fig: dict) -> list[list[str]]:
    rows = [["target", "limit", "measured", "met"]]
    for key, text, op, limit, unit, scale in TARGETS:
        text = text.format(big=_big(fig))
        v = fig.get(key)
        if v is None:
            rows.append([text, f"{op} {limit:g} {unit}", "not measured", MISSING])
            continue
        got = v * scale
        if isinstance(got, float) and math.isnan(got):
            rows.append([text, f"{op} {limit:g} {unit}", "not comparable", MISSING])
            continue
        ok = {"<": got < limit, "<=": got <= limit}.get(op, got >= limit)
        rows.append([text, f"{op} {limit:g} {unit}", f"{fmt(got)} {unit}", "met" if ok else "NOT MET"])
    return rows


def text_table(rows) -> str:
    """routesim.tables.text_table of a table built as one list, its header row first."""
    from routesim import tables
    return tables.text_table(rows[0], rows[1:])


def md_table(rows, align=None) -> str:
    """routesim.tables.markdown_table of a table built as one list, its header row first."""
    from routesim import tables
    return tables.markdown_table(rows[0], rows[1:], align)


def scaling_rows(points: list, prev: dict) -> list[list[str]]:
    rows = [["value", "runs", "requests", "engine ns/request", "previous", "simulate ns/request",
             "workload ns/request", "peak RSS MiB"]]
    for p in points:
        key = f"scale.{p['kind']}.{p['value']}"
        rows.append([str(p["value"]), f"{p['runs']:,}", f"{p['requests']:,}", fmt(p["ns_per_request"]),
                     fmt(prev.get(key)), fmt(p["sim_ns_per_request"]),
                     fmt(p["build_s"] / p["requests"] * 1e9), fmt(p["peak_rss"], 2**-20)])
    return rows


def write_doc(fig, prev, prev_source, meta, detail) -> str:
    """The text of docs/performance.md."""
    m = meta["machine"]
    lines = [
        "# Performance",
        "",
        "<!-- Generated by `python -m benchmarks` (benchmarks/report.py): do not edit by hand;",
        "     run the suite again instead. The figures at the end are read back by the next run. -->",
        "",
        "Generated by `python -m benchmarks` on "
        f"{m['date']}: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}, "
        f"Python {m['python']}, NumPy {m['numpy']}, Numba {m['numba']}; routesim at {m['commit']}. "
        f"Load average from other processes during the run: {meta['load']} (the machine is shared; "
        "wall times are the best of several repeats, CPU times are given where contention matters).",
        "",
        f"Previous figures: {prev_source}.",
        "",
        "## Summary",
        "",
        md_table(table(fig, prev), ["l", "r", "r", "r", "l"]),
        "",
        "## Targets (2 cores, warm cache unless stated)",
        "",
        md_table(targets(fig), ["l", "l", "r", "l"]),
        "",
        "## One run against its peers",
        "",
        detail["peers_text"],
        "",
        "## The batching model",
        "",
        detail.get("batching_text", "Not measured in this run."),
        "",
        "## One run's whole process",
        "",
        detail.get("startup_text", "Not measured in this run."),
        "",
        "## Scaling (time per simulated request should stay roughly flat)",
        "",
        detail["scaling_text"],
        "",
        "## Where the time goes (warm, whole command, 2 threads)",
        "",
        detail["breakdown_text"],
        "",
        "## Hot spots found, what was fixed, and what is left",
        "",
        detail["findings_text"],
        "",
        "## How it is measured",
        "",
        detail["method_text"],
        "",
        "<!-- benchmark-figures",
        json.dumps(fig, indent=0, sort_keys=True),
        "-->",
        "",
    ]
    return "\n".join(lines)
