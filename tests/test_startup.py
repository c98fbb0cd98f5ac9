"""Start-up (issue 43, item 6): a process imports only what its command uses.

``import routesim`` costs nothing (its public names are imported on first use), Numba is
set up for routesim where the kernels are defined (routesim/conf.py), and a local sweep's
own process runs without dask, which xarray would otherwise import for nothing
(routesim/startup.py). Each check reads the modules a fresh process holds at its exit,
so it holds whatever this test process has imported."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import xarray as xr

import routesim
from routesim import startup
from test_cli import TINY

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numba", "xarray", "pandas", "scipy", "matplotlib", "dask", "distributed")
"""Top-level packages a command should import only when it uses them."""


REPORT = ("import atexit, json, sys\n"
          "atexit.register(lambda: print(json.dumps(sorted(n for n, m in sys.modules.items() if m is not None)),"
          " file=sys.stderr))\n")
"""Prepended to a process's code: at its exit, the modules it holds (a module made
unimportable, ``None`` in ``sys.modules``, is not held) as the last line of stderr."""


def held(code, cwd=ROOT, env=None):
    """(the modules a fresh ``python -c CODE`` holds at its exit, by full name, its
    completed process)."""
    proc = subprocess.run([sys.executable, "-c", REPORT + code], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.stderr.strip(), "the process printed nothing on stderr"
    return set(json.loads(proc.stderr.strip().splitlines()[-1])), proc


def imports(code, cwd=ROOT, env=None):
    """(the top-level packages a fresh ``python -c CODE`` holds at its exit, its
    completed process)."""
    modules, proc = held(code, cwd, env)
    return {name.split(".")[0] for name in modules}, proc


def fresh(code, env=None):
    """A fresh ``python -c CODE`` in the checkout that exits 0: its completed process."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def command(module, *args):
    """``python -m MODULE ARGS`` as code for :func:`imports`: the module run as the
    process's program, exactly as ``python -m`` runs it."""
    return (f"import runpy\nsys.argv = [{module!r}, *{list(map(str, args))!r}]\n"
            f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n")


def test_import_routesim_imports_no_heavy_package():
    names, proc = imports("import routesim; routesim.ConfigError; print(routesim.__version__)")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "routesim" in names                      # the reading sees imports at all
    assert names.isdisjoint(HEAVY), sorted(names & set(HEAVY))


def test_public_names_are_the_modules_own():
    from routesim.config import ConfigError, load_sweep, parse_sweep
    from routesim.study import run
    from routesim.timeline import trace
    assert (routesim.ConfigError, routesim.load_sweep, routesim.parse_sweep, routesim.run, routesim.trace) \
        == (ConfigError, load_sweep, parse_sweep, run, trace)
    assert callable(routesim.plot) and routesim.plot.__name__ == "routesim.plot"
    assert set(routesim.__all__) <= set(dir(routesim))
    with pytest.raises(AttributeError):
        routesim.no_such_name


def test_sweep_help_imports_no_heavy_package():
    names, proc = imports(command("routesim.sweep", "--help"))
    assert proc.returncode == 0 and "usage:" in proc.stdout
    assert names.isdisjoint(HEAVY), sorted(names & set(HEAVY))


def test_kernels_cache_where_compile_cache_says_without_import_routesim_doing_it():
    """routesim/conf.py (imported by every compiled module) points Numba's cache at the
    folder of this source before any kernel is defined, as ``import routesim`` did."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    code = ("from routesim.batching import engine\n"
            "from numba.core import config\n"
            "from routesim import compile_cache, nrt\n"
            "print(config.CACHE_DIR == str(compile_cache.folder()), nrt.PATCHED)\n"
            "print(engine.run_one_nb._cache._cache_path)\n")
    proc = fresh(code, env)
    from routesim import compile_cache, nrt
    first, path = proc.stdout.splitlines()
    assert first == f"True {nrt.PATCHED}"           # the folder, and Numba patched as before
    assert path.startswith(str(compile_cache.folder()))


@pytest.mark.skipif(importlib.util.find_spec("dask") is None, reason="dask is not installed: nothing to leave out")
def test_a_local_sweep_process_imports_no_dask_and_writes_the_same_dataset(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    names, proc = imports(command("routesim.sweep", path, "--out", tmp_path / "out", "-q"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {"numba", "xarray", "netCDF4"} <= names    # what the run uses
    assert names.isdisjoint({"dask", "distributed", "matplotlib"}), sorted(names & {"dask", "distributed"})
    want = routesim.run(routesim.load_sweep(path))["tiny"]   # here xarray sees dask
    with xr.open_dataset(tmp_path / "out" / "tiny.nc", engine="netcdf4") as got:
        xr.testing.assert_identical(got.load(), want)


def test_without_dask_leaves_a_process_that_uses_xarray_alone():
    """In a process that has imported xarray (this one), dask stays importable."""
    assert "xarray" in sys.modules
    assert startup.without_dask() is False
    assert sys.modules.get("dask", sys) is not None


def test_without_dask_in_a_fresh_process():
    code = ("from routesim import startup\n"
            "assert startup.without_dask()\n"
            "import xarray as xr, numpy as np\n"
            "ds = xr.Dataset({'a': ('x', np.arange(3))})\n"
            "try:\n"
            "    import dask\n"
            "except ImportError:\n"
            "    print('no dask')\n")
    assert fresh(code).stdout == "no dask\n"


def test_a_sweep_sets_numba_up_without_importing_scipy_linalg(tmp_path):
    """Numba's BLAS probe imports scipy.linalg (0.15-0.2 s) when its CPU target is set
    up; routesim/conf.py hides it then, so a sweep's process never imports it, and the
    Dataset is the one a process with scipy.linalg imported (this one) makes."""
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    modules, proc = held(command("routesim.sweep", path, "--out", tmp_path / "out", "-q"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {"numba.np.arraymath", "scipy"} <= modules            # the probe ran, and found no scipy.linalg
    assert not {m for m in modules if m.startswith("scipy.linalg")}
    import scipy.linalg  # noqa: F401  (here Numba finds its BLAS)
    want = routesim.run(routesim.load_sweep(path))["tiny"]
    with xr.open_dataset(tmp_path / "out" / "tiny.nc", engine="netcdf4") as got:
        xr.testing.assert_identical(got.load(), want)


def test_a_process_that_imported_scipy_linalg_keeps_it_and_numba_its_blas():
    code = ("import sys, scipy.linalg as L\n"
            "import routesim.conf\n"
            "from numba.np import arraymath\n"
            "print(sys.modules['scipy.linalg'] is L, arraymath._HAVE_BLAS)\n")
    assert fresh(code).stdout == "True True\n"


def test_no_routesim_code_calls_what_numbas_blas_probe_decides():
    """``arraymath._HAVE_BLAS`` (False in a routesim process, above) only chooses how
    np.correlate and np.convolve take an inner product: no routesim module may call them,
    or its kernels would depend on what the process imported first."""
    calls = re.compile(r"\b(?:np|numpy)\.(?:correlate|convolve)\s*\(")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "routesim").rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if calls.search(line)]
    assert found == []
    assert calls.search("y = np.convolve(a, b)")                # the pattern finds a call


def test_the_kernel_cache_is_named_by_compiled_code_not_by_prose():
    """compile_cache.digest covers every module that defines a Numba dispatcher (found by
    importing each routesim module and looking at what it defines), and no module that
    merely says "overload" or "njit" in its prose (an edit to a study's text must not
    throw the compiled kernels away)."""
    import importlib
    import pkgutil

    from numba.core.dispatcher import Dispatcher

    from routesim import compile_cache
    defining = set()
    for info in pkgutil.walk_packages(routesim.__path__, "routesim."):
        if info.name.endswith("__main__"):
            continue
        mod = importlib.import_module(info.name)
        if any(isinstance(v, Dispatcher) and getattr(v.py_func, "__module__", None) == mod.__name__
               for v in vars(mod).values()):
            defining.add(Path(mod.__file__).resolve())
    assert len(defining) > 20                       # the engine's, the queue model's, the policies' ...
    assert all(compile_cache.counted(p) for p in defining), [p for p in defining if not compile_cache.counted(p)]
    prose = [p for p in compile_cache.PACKAGE.rglob("*.py")
             if b"overload" in p.read_bytes() and not compile_cache.NUMBA.search(p.read_bytes())]
    assert prose, "a module with the word in its prose (a study's text) to check"
    assert not any(compile_cache.counted(p) for p in prose if "studies" in p.parts)
