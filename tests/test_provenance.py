"""What every Dataset records about how it was made (issue 39, "Provenance"): the git
commit, the versions the reproducibility promise depends on and the CPU; the same for
every run on one machine, whatever NumPy is told about the CPU; left out of the output
pins (tools/pin_outputs.py), which are about the output, not the environment."""

import importlib.util
import os
import platform
import subprocess
import sys

import llvmlite
import numba
import numpy as np
import xarray as xr

from conftest import ROOT, SWEEPS, run_reduced
from routesim import results
from routesim.results import ENVIRONMENT_ATTRS, git_commit, made_with

def _pins():
    spec = importlib.util.spec_from_file_location("pin_outputs", ROOT / "tools" / "pin_outputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _git(root, *args):
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_a_queue_dataset_records_its_environment(tmp_path):
    a = _queue_dataset(tmp_path).attrs
    assert a["python_version"] == platform.python_version()
    assert a["numpy_version"] == np.__version__ and a["xarray_version"] == xr.__version__
    assert a["numba_version"] == numba.__version__ and a["llvmlite_version"] == llvmlite.__version__
    assert a["cpu"].startswith(platform.machine() + ", Numba target ")
    head = _git(ROOT, "rev-parse", "HEAD") if (ROOT / ".git").exists() else None
    assert a["routesim_commit"].split()[0] == (head or "not")
    assert "Conventions" not in a          # the units are not UDUNITS' (results.provenance)


def _queue_dataset(tmp_path):
    text = (SWEEPS / "exploration.toml").read_text()
    text = text[:text.index("[[stages]]")] + """
[[stages]]
name = "tiny"
policy = ["round_robin"]
exploration = [0.35]
rate_rps = [250]
heterogeneity = ["default"]
scenario = ["steady"]
seeds = { first = 1, count = 1 }
"""
    return run_reduced(tmp_path, text)["tiny"]


def test_a_batching_dataset_records_its_environment(tmp_path):
    ds = run_reduced(tmp_path, SWEEPS / "incidents.toml", stages=["crash"],
                     replace={"count = 16": "count = 1", "retry_budget = [inf, 0.2]": "retry_budget = [inf]",
                              "measure_s = 50": "measure_s = 35"})["crash"]
    assert {k: ds.attrs[k] for k in ENVIRONMENT_ATTRS} == results.environment()


def test_commit_clean_dirty_and_outside_git(tmp_path):
    assert git_commit(tmp_path) == "not a git checkout"
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    _git(repo, "add", "a.py")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
    head = _git(repo, "rev-parse", "HEAD")
    assert git_commit(repo) == head
    (repo / "new.py").write_text("")                 # untracked: not a change to the checkout
    assert git_commit(repo) == head
    (repo / "a.py").write_text("x = 2\n")
    assert git_commit(repo) == f"{head} (uncommitted changes)"
    inner = repo / "inner"                           # a folder inside another repository
    inner.mkdir()
    assert git_commit(inner) == "not a git checkout"


def test_the_same_environment_whatever_numpy_is_told():
    """NPY_DISABLE_CPU_FEATURES changes the paths NumPy takes (and, by the README's
    promise, no Dataset): the recorded CPU is the machine's, so the attrs stay the same."""
    code = "import json, routesim.results as r; print(json.dumps(r.environment(), sort_keys=True))"
    out = []
    for disabled in ("", "AVX512_SPR AVX512_ICL X86_V4 X86_V3"):
        env = dict(os.environ)
        env.pop("NPY_DISABLE_CPU_FEATURES", None)
        if disabled:
            env["NPY_DISABLE_CPU_FEATURES"] = disabled
        out.append(subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                                  text=True, check=True).stdout)
    assert out[0] == out[1]


def test_pins_leave_the_environment_out(tmp_path):
    pins = _pins()
    ds = xr.Dataset({"x": ("i", np.arange(3.0))}, attrs={"stage": "s", **results.environment()})
    a, b, c = tmp_path / "a.nc", tmp_path / "b.nc", tmp_path / "c.nc"
    results.write_atomic(ds, a)
    results.write_atomic(ds.assign_attrs(routesim_commit="0" * 40, numpy_version="0.0", cpu="other"), b)
    results.write_atomic(ds.assign_attrs(stage="t"), c)
    assert pins.dataset_digest(a) == pins.dataset_digest(b) != pins.dataset_digest(c)


def test_pins_leave_a_documents_provenance_line_out(tmp_path):
    pins = _pins()
    before, after, other = tmp_path / "before.md", tmp_path / "after.md", tmp_path / "other.md"
    before.write_text("# T\n\nintro\n\nbody\n")
    after.write_text(f"# T\n\nintro\n\n{made_with(results.environment())}\n\nbody\n")
    other.write_text(f"# T\n\nintro\n\n{made_with({})}\n\nbody!\n")
    assert pins.document_digest(before) == pins.document_digest(after) != pins.document_digest(other)


def test_made_with_names_everything_recorded():
    attrs = {"routesim_version": "9.9", **{k: f"<{k}>" for k in ENVIRONMENT_ATTRS}}
    line = made_with(attrs)
    assert line.startswith(results.MADE_WITH + " routesim 9.9 (commit <routesim_commit>)")
    assert all(f"<{k}>" in line for k in ENVIRONMENT_ATTRS)
    assert made_with({}).count("not recorded") == len(ENVIRONMENT_ATTRS) + 1
