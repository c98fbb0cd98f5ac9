"""The conventions a user expects of a command line (issue 39, item 7): one ``routesim``
command for every ``python -m routesim.X``, ``--version``, ``-q`` wherever ``--quiet``
is, quiet meaning no progress (the results still printed), no progress bar in a log,
and the per-run numbers as CSV."""

import ast
import io
import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pandas as pd
import pytest
import xarray as xr

import routesim.__main__ as console
from routesim import progress
from test_cli import TINY

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "routesim"


def runnable_modules() -> set:
    """Every ``python -m routesim.X`` of the package, from its source: a top-level
    module with an ``if __name__ == "__main__"`` block, or a top-level package (not the
    studies, whose commands are top-level modules) with a ``__main__.py``."""
    found = set()
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        if path.stem != "__main__" and any(
                isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body):
            found.add(path.stem)
    found |= {p.parent.name for p in PACKAGE.glob("*/__main__.py") if p.parent.name != "studies"}
    return found


def test_every_python_m_command_is_a_subcommand():
    assert set(console.COMMANDS) == runnable_modules()
    assert all(module == f"routesim.{name}" for name, (module, _) in console.COMMANDS.items())


def test_the_console_script_is_declared_and_installed():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"routesim": "routesim.__main__:console"}
    exe = shutil.which("routesim", path=str(Path(sys.executable).parent))
    assert exe, "no routesim script beside this Python: reinstall (pip install -e .)"
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith(f"routesim {version('routesim')}, ")


def test_version_names_the_package_and_the_commit():
    proc = subprocess.run([sys.executable, "-m", "routesim", "--version"], capture_output=True, text=True,
                          timeout=120, cwd="/")
    assert proc.returncode == 0 and proc.stderr == ""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    want = f"routesim {version('routesim')}, {'commit ' + head if head else 'not a git checkout'}"
    assert proc.stdout.startswith(want), proc.stdout
    assert re.fullmatch(r"routesim \S+, (commit [0-9a-f]{40}( \(uncommitted changes\))?|not a git checkout)\n",
                        proc.stdout)


def test_version_of_a_subcommand(capsys):
    assert console.main(["sweep", "--version"]) == 0
    assert capsys.readouterr().out == console.version_text() + "\n"


def test_routesim_sweep_is_python_m_routesim_sweep(tmp_path):
    """The same bytes out and the same status, through either form (a missing file)."""
    forms = ([sys.executable, "-m", "routesim", "sweep"], [sys.executable, "-m", "routesim.sweep"])
    runs = [subprocess.run([*f, "nope.toml", "--out", "o"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120) for f in forms]
    assert runs[0].returncode == runs[1].returncode == 2
    assert (runs[0].stdout, runs[0].stderr) == (runs[1].stdout, runs[1].stderr)
    assert runs[0].stderr.startswith("error: nope.toml: cannot read")


def test_usage_and_unknown_command(capsys):
    assert console.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(re.search(rf"^  {name} +\S", out, re.M) for name in console.COMMANDS)
    assert console.main(["swep"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: routesim: unknown command 'swep'")
    assert console.main([]) == 2 and "usage: routesim" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:.* found in sys.modules after import:RuntimeWarning")  # tests import them
@pytest.mark.parametrize("name", list(console.COMMANDS))
def test_every_command_takes_q(name, capsys):
    """``-q`` is ``--quiet`` wherever ``--quiet`` is (every command has it). In this
    process, where other tests have imported the commands' modules (routesim.trace
    among them, which an import turns into the function)."""
    import routesim.trace  # noqa: F401
    assert console.main([name, "--help"]) == 0
    assert re.search(r"-q, --quiet", capsys.readouterr().out)


# --- progress bars -----------------------------------------------------------------------

def test_progress_bars_are_all_made_in_one_place():
    """No module but routesim/progress.py builds a tqdm bar (tqdm.write is fine)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name != "progress.py":
            for i, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"\btqdm\s*\(", line.split("#")[0]):
                    found.append(f"{path.relative_to(ROOT)}:{i}")
    assert found == []


def test_no_bar_when_stderr_is_not_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with progress.bar(3, "x", "step") as b:
        b.update(3)
    assert b.disable and sys.stderr.getvalue() == ""


# --- quiet, tables, CSV --------------------------------------------------------------------

def _sweep(tmp_path, *options):
    (tmp_path / "tiny.toml").write_text(TINY)
    return subprocess.run([sys.executable, "-m", "routesim.sweep", "tiny.toml", "--out", "out", *options],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)


def _no_bar(stderr):
    """No progress bar in a log: stderr holds only whole ``note:`` lines (a first
    compilation's), no carriage return, no bar's rate."""
    assert "\r" not in stderr and "chunk/s" not in stderr and "it/s" not in stderr, stderr
    assert all(line.startswith("note: ") for line in stderr.splitlines()), stderr


def test_a_sweep_into_a_log(tmp_path):
    proc = _sweep(tmp_path)
    assert proc.returncode == 0, proc.stderr
    _no_bar(proc.stderr)
    assert "stage tiny: 2 runs" in proc.stdout and "wrote out/tiny.nc" in proc.stdout and "done in" in proc.stdout


def test_quiet_prints_the_tables_and_nothing_else(tmp_path):
    proc = _sweep(tmp_path, "-q")
    assert proc.returncode == 0, proc.stderr
    _no_bar(proc.stderr)
    assert proc.stdout.startswith("stage tiny: 2 runs\n") and "attain %" in proc.stdout
    assert "wrote" not in proc.stdout and "done in" not in proc.stdout and "chunks" not in proc.stdout


def test_no_tables_with_quiet_prints_nothing(tmp_path):
    proc = _sweep(tmp_path, "-q", "--no-tables")
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    _no_bar(proc.stderr)


def test_csv_holds_every_run_and_its_numbers(tmp_path):
    """One row per run, a column per run dimension and per per-run variable, the
    Dataset's numbers exactly (per-replica and per-level variables left out)."""
    proc = _sweep(tmp_path, "-q", "--csv")
    assert proc.returncode == 0, proc.stderr
    ds = xr.load_dataset(tmp_path / "out" / "tiny.nc")
    table = pd.read_csv(tmp_path / "out" / "tiny.csv")
    dims = list(ds.attainment.dims)
    per_run = [v for v in ds.data_vars if set(ds[v].dims) == set(dims)]
    assert list(table.columns) == dims + per_run
    assert "assigned" not in table and "queue_tail" not in table and "replica" not in table
    assert len(table) == ds.attainment.size == 2
    for _, row in table.iterrows():
        run = ds.sel({d: row[d] for d in dims})
        for v in per_run:
            assert row[v] == run[v].item() or (pd.isna(row[v]) and pd.isna(run[v].item())), v
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["tiny.csv", "tiny.nc"]


def test_quiet_trace_still_prints_its_summary(tmp_path, capsys):
    from routesim.timeline import main as trace_main
    (tmp_path / "tiny.toml").write_text(TINY)
    out = tmp_path / "t.nc"
    assert trace_main([str(tmp_path / "tiny.toml"), "--scenario", "steady", "--out", str(out), "-q"]) == 0
    cap = capsys.readouterr()
    assert cap.out.startswith("trace: rate_rps = 50.0") and "wrote" not in cap.out and out.exists()
    assert cap.err == ""
