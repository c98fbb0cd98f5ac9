"""How benchmarks/ hangs together (issue 20, "one idea, one home"): its modules import
one another without a cycle, even through imports inside functions, and they load the
tests' naive references by file, without touching ``sys.path``."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def own_imports(path):
    """The benchmarks modules a file imports, at its top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            out |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("benchmarks."):
            out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("benchmarks.")}
    return out


def cycle(graph):
    """One import cycle of ``graph`` ({module: modules it imports}) as a list, else None."""
    done, path = set(), []

    def visit(m):
        if m in path:
            return path[path.index(m):] + [m]
        if m in done:
            return None
        path.append(m)
        for n in sorted(graph.get(m, ())):
            found = visit(n)
            if found:
                return found
        path.pop()
        done.add(m)
        return None

    for m in sorted(graph):
        found = visit(m)
        if found:
            return found
    return None


def test_no_import_cycle_in_benchmarks():
    graph = {p.stem: own_imports(p) for p in BENCHMARKS.glob("*.py")}
    assert graph["__main__"] >= {"batching", "report"}      # the check sees imports at all
    assert cycle(graph) is None


def test_the_check_sees_a_cycle_through_a_function():
    assert cycle({"report": {"batching"}, "batching": {"harness", "report"}, "harness": set()}) \
        == ["batching", "report", "batching"]


def test_benchmarks_leave_sys_path_alone():
    """Test code the benchmarks compare against (tests/reference.py, token_reference.py,
    conftest.py) comes through benchmarks.harness.from_tests, by its file."""
    uses = [f"{p.name}:{node.lineno}" for p in sorted(BENCHMARKS.glob("*.py"))
            for node in ast.walk(ast.parse(p.read_text(), str(p)))
            if isinstance(node, ast.Attribute) and node.attr == "path"
            and isinstance(node.value, ast.Name) and node.value.id == "sys"]
    assert uses == []


def test_from_tests_loads_the_file_once():
    code = ("import sys\n"
            "before = list(sys.path)\n"
            "from benchmarks import batching, harness\n"
            "assert batching._values()['warmup_s'] > 0\n"
            "ref = sys.modules['token_reference']\n"
            "assert harness.from_tests('token_reference') is ref\n"
            "assert sys.path == before\n"
            "print(ref.__file__)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()) == ROOT / "tests" / "token_reference.py"


def test_every_module_the_benchmarks_load_from_tests_loads_alone():
    """Each tests/ module a benchmark loads (``from_tests("name")``) loads in a fresh
    process with tests/ off ``sys.path``, as ``python -m benchmarks`` runs it: not
    conftest.py, which imports its sibling tiers.py (``python -m benchmarks`` failed in its
    peers task with "No module named 'tiers'" until the benchmark stopped loading it)."""
    names = sorted({node.args[0].value for p in BENCHMARKS.glob("*.py")
                    for node in ast.walk(ast.parse(p.read_text(), str(p)))
                    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "from_tests"
                    and node.args and isinstance(node.args[0], ast.Constant)})
    assert {"reference", "token_reference"} <= set(names)
    for name in names:
        out = subprocess.run([sys.executable, "-c", f"from benchmarks import harness; harness.from_tests({name!r})"],
                             cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, f"{name}: {out.stderr[-500:]}"


def test_the_startup_task_runs_the_one_run_sweep(tmp_path):
    """``python -m benchmarks.startup phases`` (the startup section's task, its own
    process) runs the one-run sweep that benchmarks.startup writes and hands back its
    phases: it failed with a KeyError when the sweep's stage was renamed, which only a
    full ``python -m benchmarks`` found, 40 minutes in."""
    import json

    from benchmarks.harness import MARK
    from benchmarks.startup import one_run_sweep

    path = one_run_sweep(tmp_path)
    run = subprocess.run([sys.executable, "-m", "benchmarks.startup", "phases",
                          json.dumps({"path": str(path), "out": str(tmp_path / "one")})],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(next(line for line in run.stdout.splitlines() if line.startswith(MARK))[len(MARK):])
    assert "the run (kernels loaded, simulated, Dataset made)" in result["phases"]
    assert (tmp_path / "one" / "one.nc").stat().st_size > 0


def test_the_trace_grids_two_sweeps_hold_the_same_runs_but_for_their_files(tmp_path):
    """The trace-grid figure compares a run per file with a run per seed of one file: the
    two sweeps must differ in that alone (as many runs, the same replica and window), and
    the files must be distinct windows of the trace."""
    from benchmarks.startup import GRID_FILES, trace_grid_sweeps
    from routesim import load_sweep
    from routesim.traces import load_trace

    files, seeds = (load_sweep(p) for p in trace_grid_sweeps(tmp_path))
    (f,), (s,) = files.stages, seeds.stages
    assert len(f.values["trace_path"]) == GRID_FILES and len(f.values["seed"]) == 1
    assert len(s.values["trace_path"]) == 1 and len(s.values["seed"]) == GRID_FILES
    assert {k: v for k, v in f.values.items() if k not in ("trace_path", "seed")} == \
        {k: v for k, v in s.values.items() if k not in ("trace_path", "seed")}
    firsts = {float(load_trace(tmp_path / f"t{k:02d}.csv", "azure").prompt[:5].sum()) for k in range(GRID_FILES)}
    assert len(firsts) > GRID_FILES // 2                 # windows of the trace, not one file copied


def test_the_profile_names_numbas_symbols_and_shares_routesims_samples():
    """benchmarks/cpu_profile.py reads ``perf report``: a routesim symbol is Numba's
    Itanium-style mangled name (length-prefixed parts, then the ABI tag ``B…``), and a
    function's share is of routesim's samples alone (here 3.0 + 1.0 + 1.0 % of which
    run_one_nb's two entries make 4.0 / 5.0), the interpreter's and LLVM's left out."""
    from benchmarks.cpu_profile import demangle, shares
    assert demangle("_ZN8routesim8batching6engine10run_one_nbB3v42B56c8tJTIeFIjx") == "batching.engine.run_one_nb"
    assert demangle("_ZN8routesim8batching6blocks10_delete_nbB4v121B5") == "batching.blocks._delete_nb"
    assert demangle("_PyEval_EvalFrameDefault") is None
    report = """# Overhead  Symbol
    50.00%  [.] _PyEval_EvalFrameDefault
     3.00%  [.] _ZN8routesim8batching6engine10run_one_nbB3v42B56c8tJTIeFIjx
     1.00%  [.] _ZN8routesim8batching6engine10run_one_nbB3v43B56c8tJTIeFIjy
     1.00%  [.] _ZN8routesim8batching6blocks10_delete_nbB4v121B5
    45.00%  [.] llvm::DAGCombiner::Run
"""
    assert shares(report) == {"batching.engine.run_one_nb": 0.8, "batching.blocks._delete_nb": 0.2}


def test_the_targets_table_holds_issue_43s_speed_targets():
    """Issue 43's done-when: ``python -m benchmarks`` reports the vllm/reserve ratio, the
    compile and start-up times and the floor ratio against their targets (item 5: the vllm
    mode within 2x of the default per run; item 6: cold 40 s, warm 15 s, floor 3x, one run
    0.5 s). Each row says met or NOT MET by its own limit."""
    from benchmarks import report
    fig = {"batching.vllm_ratio": 1.9, "batching.vllm_async_ratio": 2.1, "batching.floor_ratio": 3.5,
           "batching.cold_s": 39.0, "batching.warm_s": 16.0, "startup.one_run_s": 0.4}
    rows = {r[0]: r[1:] for r in report.targets(fig)[1:]}
    met = {key: rows[text][2] for key, text, *_ in report.TARGETS if key in fig}
    assert met == {"batching.vllm_ratio": "met", "batching.vllm_async_ratio": "NOT MET",
                   "batching.floor_ratio": "NOT MET", "batching.cold_s": "met",
                   "batching.warm_s": "NOT MET", "startup.one_run_s": "met"}, met
    limits = {key: rows[text][0] for key, text, *_ in report.TARGETS if key in fig}
    assert limits == {"batching.vllm_ratio": "<= 2 x", "batching.vllm_async_ratio": "<= 2 x",
                      "batching.floor_ratio": "<= 3 x", "batching.cold_s": "<= 40 s",
                      "batching.warm_s": "<= 15 s", "startup.one_run_s": "<= 0.5 s"}, limits
