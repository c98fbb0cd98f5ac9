"""Every module the project imports is either Python's own or declared in pyproject.toml.

A package that the code imports but pyproject.toml does not name works on the machine
that happens to have it and fails for a new user (issue 18: scipy). This test reads
every ``import`` under routesim/, scripts/, benchmarks/ and tests/ (direct imports
only: what a library imports on its own behalf is caught by .ci/run, which installs
the project into a new virtual environment), maps each top-level module to the
distribution that installs it, and requires that distribution to be declared where
that code may use it:

- routesim/ and scripts/ (what a user runs): the core dependencies, or the ``cluster``
  extra (routesim.cluster imports ``distributed`` only when a sweep asks for Dask);
- tests/ and benchmarks/: any of the above or the ``test`` extra.
"""

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOWED_EXTRAS = {"routesim": ("cluster",), "scripts": ("cluster",),
                  "tests": ("cluster", "test"), "benchmarks": ("cluster", "test")}


def normalize(name):
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement):
    """'xarray[io]>=2024.1' -> 'xarray'."""
    return normalize(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1))


def declared(extras):
    """The distributions pyproject.toml declares as dependencies and in ``extras``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {requirement_name(r) for r in project["dependencies"]}
    for extra in extras:
        names |= {requirement_name(r) for r in project["optional-dependencies"][extra]}
    return names


def local_modules():
    """Top-level names that are the project's own: its packages (conformance/ is the
    vLLM conformance suite's, imported by its tests) and the modules that tests/,
    scripts/ and benchmarks/ import from their own folder."""
    names = {"routesim", "benchmarks", "tests", "scripts", "conformance"}
    for folder in ("tests", "scripts", "benchmarks"):
        names |= {p.stem for p in (ROOT / folder).glob("*.py")}
    return names


def imported(path):
    """{top-level module name: first line number} of every absolute import in a file."""
    out = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.setdefault(alias.name.split(".")[0], node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.setdefault(node.module.split(".")[0], node.lineno)
    return out


def undeclared():
    """Lines 'file:line imports X (...)' for every import that is not declared."""
    providers = importlib.metadata.packages_distributions()
    local = local_modules()
    problems = []
    for folder, extras in ALLOWED_EXTRAS.items():
        allowed = declared(extras)
        for path in sorted((ROOT / folder).rglob("*.py")):
            for module, line in imported(path).items():
                if module in sys.stdlib_module_names or module in local:
                    continue
                dists = {normalize(d) for d in providers.get(module, ())}
                where = f"{path.relative_to(ROOT)}:{line} imports {module}"
                if not dists:
                    problems.append(f"{where}, which no installed distribution provides")
                elif not dists & allowed:
                    problems.append(f"{where} (from {', '.join(sorted(dists))}), "
                                    f"not declared for {folder}/ in pyproject.toml")
    return problems


def test_every_import_is_declared():
    assert undeclared() == []


def test_the_check_sees_an_undeclared_import(tmp_path, monkeypatch):
    """The check itself can fail: a module importing a package that pyproject.toml does
    not declare (pytest, from the test extra, in a file under routesim/) is reported."""
    fake = tmp_path / "routesim"
    fake.mkdir()
    (fake / "leak.py").write_text("import numpy\n\ndef f():\n    import pytest\n")
    for folder in ("tests", "scripts", "benchmarks"):
        (tmp_path / folder).mkdir()
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert undeclared() == ["routesim/leak.py:4 imports pytest (from pytest), "
                            "not declared for routesim/ in pyproject.toml"]
