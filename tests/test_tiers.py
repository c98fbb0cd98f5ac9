"""The test tiers (tests/tiers.py, README "## Development"): every test module has a kind,
every test the tables name exists, every marker is declared, a test of no module in the
table stops the run, and the fast tier's differential sample covers every policy,
scheduler and step cost of the registries (routesim/batching/dtypes.py,
routesim/queue/dtypes.py)."""

import ast
import itertools
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

import test_engine_vs_reference
import test_token_engine_vs_reference
import tiers
import token_reference
from conftest import parse
from registered import POLICIES, STEP_COSTS
from routesim.batching.dtypes import Scheduler
from routesim.queue.dtypes import Policy as QueuePolicy

HERE = Path(__file__).resolve().parent


def test_every_test_module_has_a_kind():
    on_disk = {p.stem for p in HERE.glob("test_*.py")}
    assert on_disk - set(tiers.MODULES) == set(), "test modules not in tests/tiers.py's MODULES"
    assert set(tiers.MODULES) - on_disk == set(), "MODULES names modules that do not exist"
    for module in tiers.MODULES:
        kind, tests = tiers.module_kinds(module)
        assert {kind, *tests.values()} <= set(tiers.KINDS), module


def test_every_test_named_in_the_table_exists():
    """A function MODULES names in a module that mixes kinds is a test of that module."""
    for module in tiers.MODULES:
        tree = ast.parse((HERE / f"{module}.py").read_text())
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        kind, tests = tiers.module_kinds(module)
        assert set(tests) <= defined, (module, sorted(set(tests) - defined))
        assert kind not in tests.values(), (module, kind)
    for module, tests in tiers.FAST.items():
        tree = ast.parse((HERE / f"{module}.py").read_text())
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert {t.split("[")[0] for t in tests} <= defined, (module, tests)


def test_every_marker_is_declared():
    """pyproject.toml declares each kind, slow and fast (and --strict-markers refuses any
    other marker)."""
    ini = tomllib.loads((HERE.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    declared = {line.split(":")[0] for line in ini["markers"]}
    assert declared == set(tiers.KINDS) | {"slow", "fast"}
    assert "--strict-markers" in ini["addopts"].split()


def _item(module, *marks, name="test_x"):
    """A stand-in for a collected test: its path, name and markers, as classify reads them."""
    item = SimpleNamespace(path=HERE / f"{module}.py", nodeid=f"tests/{module}.py::{name}", originalname=name, name=name,
                           marks=[getattr(pytest.mark, m).mark for m in marks])
    item.iter_markers = lambda: iter(item.marks)
    item.get_closest_marker = lambda name: next((m for m in item.marks if m.name == name), None)
    item.add_marker = lambda name: item.marks.append(getattr(pytest.mark, name).mark)
    return item


def test_an_unlisted_module_stops_the_run():
    with pytest.raises(pytest.UsageError, match="test_nowhere.py is not in tests/tiers.py's MODULES"):
        tiers.classify([_item("test_nowhere")])
    with pytest.raises(pytest.UsageError, match="a test has one kind"):
        tiers.classify([_item("test_tiers", "engine", "subprocess")])
    with pytest.raises(pytest.UsageError, match="both fast and slow"):
        tiers.classify([_item("test_token_engine_vs_reference", "fast", "slow")])


def test_the_fast_tier_is_the_unit_tests_and_what_is_marked_fast():
    def marks(module, *own, name="test_x"):
        item = _item(module, *own, name=name)
        tiers.classify([item])
        return sorted({m.name for m in item.marks})
    assert tiers.MODULES["test_tiers"] == "unit"
    assert marks("test_tiers") == ["fast", "unit"]
    assert marks("test_tiers", "slow") == ["slow", "unit"]
    assert marks("test_tiers", "engine") == ["engine"]                 # its own kind wins
    assert marks("test_token_engine_vs_reference") == ["differential"]
    assert marks("test_token_engine_vs_reference", "fast") == ["differential", "fast"]
    assert tiers.MODULES["test_cli"][1]["subprocess"] == ("test_subprocess",)
    assert marks("test_cli", name="test_subprocess") == ["subprocess"]      # the table's exception
    assert marks("test_cli", name="test_missing_file") == ["fast", "unit"]
    assert marks("test_cli", name="test_valid_tiny_sweep_writes_one_file") == ["engine", "fast"]   # FAST


def test_fast_params_reads_the_marks():
    @pytest.mark.parametrize("b", [1, pytest.param(2, marks=pytest.mark.fast)])
    @pytest.mark.parametrize("a, c", [("x", 0), ("y", 1)])
    def t(a, b, c):
        pass
    assert tiers.fast_params(t) == [dict(a="x", c=0, b=2), dict(a="y", c=1, b=2)]
    assert len(tiers.fast_params(pytest.mark.fast(t))) == 4
    assert tiers.fast_params(lambda: None) == []


def _batching_runs():
    """{(policy, scheduler, step cost)} of the fast tier's batching differential cases."""
    defaults = token_reference.defaults()
    seen = set()
    for name in dir(test_token_engine_vs_reference):
        function = getattr(test_token_engine_vs_reference, name)
        if name.startswith("test_") and callable(function):
            for case in tiers.fast_params(function):
                values = {**defaults, **case.get("extra", {}), **case}
                seen.add((values["policy"], values["scheduler"], values["step_cost"]))
    return seen


def test_the_fast_tier_samples_every_policy_scheduler_and_step_cost():
    """Every combination of the batching model's registries has a differential run in the
    fast tier (the runs themselves are test_engine_matches_reference_sampled's)."""
    want = {(p, s.name.lower(), c) for p, s, c in itertools.product(POLICIES, Scheduler, STEP_COSTS)}
    assert _batching_runs() >= want, sorted(want - _batching_runs())


def test_the_fast_tier_samples_every_queue_policy():
    """The queue model (no scheduler, no step cost): every policy of its registry has a
    differential run in the fast tier."""
    test = test_engine_vs_reference.test_the_sample_matches_the_reference
    assert any(m.name == "fast" for m in test.pytestmark)
    stage = parse(test_engine_vs_reference.sample_sweep()).stages[0]
    assert set(stage.values["policy"]) >= {p.name.lower() for p in QueuePolicy}
