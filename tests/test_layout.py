"""The package's layout (issue 20): one interface per replica model, and a pipeline that
never asks which model it runs.

- No import cycle among routesim's modules, counting every ``import`` (at the top of a
  module or inside a function). Importing a name from the root package (``from . import
  __version__``) is not an edge: the root is initialized before any of its modules.
  routesim.models finds a model's package by name (``importlib``), which is the one
  seam a model is plugged in at.
- Outside routesim/models.py and the model packages, no module of the pipeline names a
  model or tests a kind. The studies, each about one model's results, live apart under
  routesim/studies/; the command lines that run them (routesim/figures.py, report.py,
  least_outstanding.py, validation.py, scheduler_modes.py, disaggregation.py) are the pipeline's and name no model either.
- The pipeline does not import the studies; only those command lines do.
- Every model package provides the interface routesim.schema.ReplicaModel calls.
"""

import ast
import inspect
import re
from pathlib import Path

import pytest

from routesim import models

PACKAGE = Path(__file__).resolve().parents[1] / "routesim"
STUDIES = "studies"
"""The folder of the studies (each about one model's results), not of the pipeline."""
COMMANDS = {"figures.py", "report.py", "least_outstanding.py", "validation.py", "scheduler_modes.py",
            "disaggregation.py"}
"""The command lines of the studies: of the pipeline, and the only part of it that imports them."""
INTERFACE = {
    "params": ("MODEL", "check_stage"),
    "grid": ("build", "estimate_bytes", "Outcome", "default_chunk_size", "simulate_range", "to_dataset"),
    "metrics": ("VARIABLES",),
    "summary": ("policy_table",),
    "timeline": ("run", "summary"),
    "engine": ("KERNEL",),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package(name: str) -> bool:
    return (PACKAGE.parent / name.replace(".", "/") / "__init__.py").exists()


def imports(path: Path) -> set:
    """The routesim modules a file imports, anywhere in it."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "routesim"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "routesim":
                continue
            for alias in node.names:  # ``from . import models``: a module, not a name
                sub = f"{target}.{alias.name}"
                out.add(sub if is_package(sub) or (PACKAGE.parent / (sub.replace(".", "/") + ".py")).exists()
                        else target)
    out.discard("routesim")
    out.discard(name)
    return out


def graph() -> dict:
    return {module_name(p): imports(p) for p in PACKAGE.rglob("*.py")}


def cycles(edges: dict) -> list:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_the_cycle_check_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def pipeline_modules():
    model_dirs = {models.PACKAGES[k].split(".")[-1] for k in models.KINDS}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in model_dirs or rel.parts[0] == STUDIES or rel.name == "models.py":
            continue
        yield path


KIND_PATTERNS = [re.compile(p) for p in (
    r"""["'](queue|batching)["']""",                 # a model's name as a string
    r"replica_kind",                                 # a Dataset's kind, read by hand
    r"\b(sweep|grid|model|m)\.kind\s*(==|!=|in\b)",     # a model's kind tested (an event's kind is fine)
    r"getattr\([^)]*[\"']kind[\"']",
    r"\b(from|import)\s+(routesim)?\.*(queue|batching)\b",   # a model's modules
    r"\broutesim\.(queue|batching)\b",
)]


def test_the_pipeline_names_no_model():
    found = []
    for path in pipeline_modules():
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if any(p.search(code) for p in KIND_PATTERNS):
                found.append(f"{path.relative_to(PACKAGE)}:{i}: {line.strip()}")
    assert found == []


def test_only_the_commands_import_the_studies():
    studies = f"routesim.{STUDIES}"
    found = []
    for path in pipeline_modules():
        if path.relative_to(PACKAGE).as_posix() in COMMANDS:
            continue
        found += [f"{path.relative_to(PACKAGE)} imports {m}" for m in sorted(imports(path))
                  if m == studies or m.startswith(studies + ".")]
    assert found == []


def test_the_commands_exist():
    assert all((PACKAGE / name).is_file() for name in COMMANDS)


def test_the_name_check_sees_a_kind_test():
    lines = ['if sweep.kind == "batching":', "from .queue.engine import run_batch_nb",
             'ds.attrs.get("replica_kind")', 'getattr(grid, "kind", "queue")']
    assert all(any(p.search(line) for p in KIND_PATTERNS) for line in lines)


@pytest.mark.parametrize("kind", models.KINDS)
def test_every_model_provides_the_interface(kind):
    model = models.get(kind)
    assert model.kind == kind
    for part, names in INTERFACE.items():
        module = model.part(part)
        missing = [n for n in names if not hasattr(module, n)]
        assert missing == [], f"{module.__name__} lacks {missing}"


# --- the batching engine's seams (issue 43) -----------------------------------------------

BATCHING = PACKAGE / "batching"
SCHEDULER_MODULES = {"vllm_replica", "vllm_async_replica", "vllm_blocks"}
"""Modules of a scheduler alone: the event loop reaches them only through scheduler.py.
(replica.py also holds what both schedulers share: the engine may import that.)"""
OPERATION_NAMES = {"state_nb", "workload_nb", "table_slots_nb", "has_work_nb", "start_nb", "decode_on_nb", "finish_nb", "cancel_nb",
                   "crash_nb", "emits_only_nb", "decodes_on_nb"}
"""A scheduler's operations and the reserve scheduler's own conditions (scheduler.OPERATIONS)."""


def scheduler_branches(source: str) -> list:
    """The places in ``source`` (a module's text) that ask which scheduler runs: an
    ``is None`` / ``is not None`` test (the old dispatch on the vllm state's presence),
    a ``scheduler`` field or the ``Scheduler`` codes, an import of a scheduler's module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Attribute) and node.attr == "scheduler":
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Name) and node.id == "Scheduler":
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            names = {a.name for a in node.names}
            if ({node.module} | names) & SCHEDULER_MODULES or (node.module == "replica" and names & OPERATION_NAMES) \
                    or (node.module is None and "replica" in names):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_event_loop_asks_no_scheduler():
    """engine.py (run_one_nb and its phases) calls scheduler.py's operations and never
    branches on which scheduler runs; only scheduler.py dispatches."""
    assert scheduler_branches((BATCHING / "engine.py").read_text()) == []


def test_every_scheduler_state_pickles_by_reference():
    """A scheduler's ``STATE`` class must be found under its own name in its module:
    Numba's cache pickles a cached ``state_nb``'s return type, and a class pickle cannot
    find by name goes by value, so that a later process that loads ``state_nb`` from the
    cache gets instances of a copy the dispatch (``scheduler.STATES``) does not know, and
    ``run_one_nb`` fails to compile a new specialisation with a KeyError (found by
    helpers running tests after subprocesses had filled the cache)."""
    import pickle

    from routesim.batching import scheduler
    for module in scheduler.MODULES.values():
        assert pickle.loads(pickle.dumps(module.STATE)) is module.STATE, module.__name__


def test_the_branch_check_sees_a_scheduler_branch():
    snippets = ["if vst is not None:\n    pass", "quick = vst is None", "x = p.scheduler == 1",
                "from . import vllm_replica as vm", "from .replica import finish_nb",
                "if p['scheduler'] == Scheduler.VLLM:\n    pass"]
    assert all(scheduler_branches(s) for s in snippets)


def test_every_scheduler_implements_every_operation():
    from routesim.batching import scheduler
    from routesim.batching.dtypes import PARAMS, Scheduler
    assert set(scheduler.MODULES) == set(Scheduler)
    assert len(scheduler.STATES) == len(scheduler.MODULES)  # each its own state type: the dispatch's key
    for code, module in scheduler.MODULES.items():
        assert hasattr(module.STATE, "_fields"), module.__name__
        ops = dict(scheduler.OPERATIONS, state_nb=inspect.signature(scheduler.state),
                   workload_nb=inspect.signature(scheduler.workload))
        fields = module.WORKLOAD_FIELDS
        assert set(fields) <= set(PARAMS.names), f"{module.__name__}.WORKLOAD_FIELDS: {fields}"
        for name, signature in ops.items():
            f = getattr(module, name, None)
            assert f is not None, f"{module.__name__} lacks {name}"
            assert hasattr(f, "py_func"), f"{module.__name__}.{name} is not compiled"
            assert list(inspect.signature(f.py_func).parameters) == list(signature.parameters), \
                f"{module.__name__}.{name}{inspect.signature(f.py_func)}: not {name}{signature}"


def test_the_routers_take_their_choice_set_from_the_pool():
    """pools.members_nb is the one place that says which replicas a request is routed
    among: only the engine calls it, and the routers' eligibility loop iterates over the
    list it is given, not over every replica."""
    def calls(path):
        return [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)
                and "members_nb" in ast.unparse(n.func)]
    callers = [p.name for p in sorted(BATCHING.glob("*.py")) if calls(p)]
    assert callers == ["engine.py"]
    tree = ast.parse((BATCHING / "router.py").read_text())
    eligible = next(f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "eligible_nb")
    loops = [ast.unparse(n.iter) for n in ast.walk(eligible) if isinstance(n, ast.For)]
    assert loops and loops[0] == "range(pool.shape[0])", loops


LONGEST = 120
"""Lines a function of routesim/batching may take at most (style.md: small functions)."""
LONG = {"engine.run_one_nb": 327}
"""Functions still over :data:`LONGEST`, each at most its length here: the event loop,
whose phases that run at every time cost more as functions than inline (measured:
docs/architecture.md, "The batching engine's seams"; issue 43). Lower a number as the
split goes on; never raise one."""


def function_lengths(folder: Path) -> dict:
    """{"module.function": lines} of every function defined in ``folder``'s modules."""
    out = {}
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[f"{path.stem}.{node.name}"] = node.end_lineno - node.lineno + 1
    return out


def test_no_long_function_in_the_batching_model():
    lengths = function_lengths(BATCHING)
    over = {name: n for name, n in lengths.items() if n > LONG.get(name, LONGEST)}
    assert over == {}, f"functions over {LONGEST} lines (or over their LONG entry): {over}"
    assert all(lengths.get(name, 0) > LONGEST for name in LONG), "a LONG entry is no longer needed: remove it"


# The step-cost seam (issue 43 item 2): every form is one module found through the
# registry routesim.step_cost.FORMS, holding its parameters and its formula; its default
# constants are written there and nowhere else in the package.

def _step_cost():
    from routesim import step_cost
    return step_cost


def test_every_step_cost_is_one_registered_module():
    sc = _step_cost()
    assert [f.CODE for f in sc.FORMS] == list(range(len(sc.FORMS)))
    assert len(sc.BY_NAME) == len(sc.FORMS) and sc.DEFAULT in sc.BY_NAME
    for f in sc.FORMS:
        assert f.__name__ == f"routesim.step_cost.{f.NAME}", f.__name__
        for attr in ("TABLE", "SUMMARY", "PARAMS", "duration", "duration_nb", "columns"):
            assert hasattr(f, attr), f"{f.__name__} lacks {attr}"
        assert all(p.path[0] == f.TABLE and p.name == f"{f.TABLE}_{p.path[-1]}" for p in f.PARAMS)
        assert f.duration_nb.py_func is f.duration  # the engine's formula is the module's
    modules = {p.stem for p in (PACKAGE / "step_cost").glob("*.py")} - {"__init__"}
    assert modules == set(sc.BY_NAME), "a step-cost module that is not registered (or the reverse)"


def test_the_dispatcher_branches_on_every_form():
    import inspect
    sc = _step_cost()
    src = inspect.getsource(sc.duration_nb.py_func)
    missing = [f.NAME for f in sc.FORMS if f.NAME != sc.DEFAULT and f"{f.NAME}.CODE" not in src]
    assert missing == [] and f"{sc.DEFAULT}.duration_nb" in src


def _number_tokens(path):
    import io
    import tokenize
    out = set()
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.NUMBER:
            try:
                out.add(float(tok.string))
            except ValueError:
                pass
    return out


def test_step_cost_defaults_have_one_home():
    """A default coefficient with two or more significant digits (a number unlikely to
    stand for anything else) is written only in its form's module: calibrate and the
    sweep keys read it from the registry."""
    sc = _step_cost()
    home = {}
    for f in sc.FORMS:
        for p in f.PARAMS:
            digits = f"{float(p.default):.15g}".lstrip("0.").replace(".", "").split("e")[0].rstrip("0")
            if p.kind is float and len(digits) >= 2:
                home.setdefault(float(p.default), set()).add(f.__name__)
    assert len(home) >= 8
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        for value in _number_tokens(path) & set(home):
            if name not in home[value]:
                found.append(f"{path.relative_to(PACKAGE)}: {value!r}")
    assert found == []


# The policy seam (issue 43 item 3): every routing policy of the batching model is one
# module found through the registry routesim.batching.policies.POLICIES, its name written
# nowhere else in the model's code; every compiled step it has is dispatched.

STEPS = ("sample_nb", "weigh_nb", "choose_nb")
"""A policy's compiled steps, each with a dispatcher of the same name in the registry."""


def _policies():
    from routesim.batching import policies
    return policies


def test_every_policy_is_one_registered_module():
    pol = _policies()
    assert [m.CODE for m in pol.POLICIES] == list(range(len(pol.POLICIES)))
    for m in pol.POLICIES:
        assert m.__name__ == f"routesim.batching.policies.{m.NAME}", m.__name__
        assert m.RULE in ("sample", "argmin", "own") and isinstance(m.DRAWS, int) and m.DRAWS >= -1
        assert (m.SCORE is not None) == (m.RULE == "argmin"), m.NAME
        assert hasattr(m, "sample_nb") or m.RULE != "sample", f"{m.NAME} samples with no sample_nb"
        assert hasattr(m, "choose_nb") == (m.RULE == "own"), m.NAME
        assert all(p.section == "policy" for p in m.PARAMS)
    from routesim.batching.dtypes import PARAMS
    from routesim.batching.runs import RECORDED
    numbers = {p.name for p in pol.PARAMS if p.kind in (int, float) and not p.words}
    assert {p.name for p in RECORDED} == numbers and numbers <= set(PARAMS.names), "a policy key with no record field"
    shared = {"__init__", "scores"}
    modules = {p.stem for p in (PACKAGE / "batching" / "policies").glob("*.py")} - shared
    assert modules == {m.NAME for m in pol.POLICIES}, "a policy module that is not registered (or the reverse)"
    assert set(pol.NAMES) == {m.NAME for m in pol.POLICIES} | {a for m in pol.POLICIES for a in m.ALIASES}


def test_every_policy_step_is_dispatched():
    import inspect
    pol = _policies()
    missing = []
    for step in STEPS:
        src = inspect.getsource(getattr(pol, step).py_func)
        missing += [f"{m.NAME}.{step}" for m in pol.POLICIES if hasattr(m, step) and f"{m.NAME}.{step}(" not in src]
    assert missing == []


def test_no_policy_name_outside_its_module():
    """No string literal of the batching model's code is a policy's name, but in the
    policy's own module and the registry: the model finds policies through the registry."""
    pol = _policies()
    names = {m.NAME: m.__name__ for m in pol.POLICIES} | {a: m.__name__ for m in pol.POLICIES for a in m.ALIASES}
    found = []
    for path in sorted((PACKAGE / "batching").rglob("*.py")):
        mod = module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names and mod not in (
                    names[node.value], "routesim.batching.policies"):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}")
    assert found == []


def test_every_registered_policy_dispatches_to_its_module():
    """Each policy's code reaches its own module's steps in compiled code: the
    dispatchers' results equal the module's (an argmin policy's equal the argmin of its
    score), on candidates whose views differ."""
    import numpy as np
    import token_reference as ref
    from routesim.batching import runs
    from routesim.batching.dtypes import VIEW
    from routesim.batching.policies.scores import argmin_tied_nb
    pol = _policies()
    n = 5
    v = np.zeros(n, VIEW)
    v["o"] = [4, 1, 3, 1, 2]
    v["tau"] = [900, 300, 200, 700, 100]
    v["ref"] = [10, 50, 5, 40, 20]
    v["res"] = [3, 9, 1, 7, 2]
    v["hit"] = [0, 4, 1, 4, 0]
    v["weight"] = [1.0, 3.0, 1.0, 2.0, 1.0]
    u = np.array([0.37, 0.81, 0.12, 0.55])
    for m in pol.POLICIES:
        p = runs.params_row(ref.defaults(), m.NAME, n_replicas=n)[()]
        code = np.int64(m.CODE)
        assert pol.uniforms_nb(code, p["choices"]) == (p["choices"] if m.DRAWS < 0 else m.DRAWS)
        a, b = np.arange(n, dtype=np.int64), np.arange(n, dtype=np.int64)
        nc = pol.sample_nb(code, a, np.int64(n), p, u, np.int64(0), np.int64(3), v)
        want = m.sample_nb(b, np.int64(n), p, u, np.int64(0), np.int64(3), v) if hasattr(m, "sample_nb") else n
        assert nc == want and list(a) == list(b), m.NAME
        pick = pol.choose_nb(code, a, nc, p, v, np.int64(1000), np.int64(256), 0.25)
        if m.RULE == "sample":
            want = a[0]
        elif m.RULE == "own":
            want = m.choose_nb(a, nc, p, v, np.int64(1000), np.int64(256), 0.25)
        else:
            kind = np.int64(p["score"] if m.SCORE == -1 else m.SCORE)
            want = argmin_tied_nb(kind, a, nc, p, v, np.int64(1000), np.int64(256), 0.25)
        assert pick == want and pick in a[:nc], m.NAME
