"""An ``--out`` that cannot be written (issue 39, item 1): every command that writes
files checks it before it computes anything, and refuses it like any bad input: one
line ``error: <file>: --out: <what is wrong>``, exit status 2, nothing written.

The tests run as root, and root writes into a folder whatever its mode bits say, so a
chmod'ed read-only folder would not fail here. The bad paths are ones that fail for
root too: an existing regular file, a path whose parent is a regular file, a new folder
under /proc, and /proc itself (an existing folder that takes no new files: the
operating system refuses root there, as it refuses anyone a read-only folder).
"""

import subprocess
import sys
from pathlib import Path

import pytest

from routesim import files
from routesim.calibrate.__main__ import main as calibrate_main
from routesim.capacity import main as capacity_main
from routesim.sweep import main as sweep_main
from routesim.timeline import main as trace_main
from test_cli import TINY

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "examples" / "serving-log.csv"

BAD_FOLDERS = {
    "a-file": (lambda tmp: tmp / "afile", "is a file, not a folder"),
    "under-a-file": (lambda tmp: tmp / "afile" / "sub", "is a file, not a folder"),
    "new-folder-under-proc": (lambda tmp: Path("/proc/routesim-test-out"), "cannot create the folder"),
    "proc-itself": (lambda tmp: Path("/proc"), "cannot write into /proc"),
}


def setup(tmp_path):
    """The working folder of a case: the tiny sweep and a regular file ``afile``; the
    names it holds, to check that a refusal adds none."""
    (tmp_path / "tiny.toml").write_text(TINY)
    (tmp_path / "afile").write_text("a regular file\n")
    return sorted(p.name for p in tmp_path.iterdir())


def commands(tmp_path, out):
    """Each command with this ``--out``: (name, main, argv, the file its errors name).
    Each argv passes every other check, so only ``--out`` can be refused."""
    sweep = tmp_path / "tiny.toml"
    return [
        ("sweep", sweep_main, [str(sweep), "--out", str(out), "-q"], sweep),
        ("capacity", capacity_main, [str(sweep), "--low", "10", "--high", "50", "--out", str(out), "-q"], sweep),
        ("calibrate", calibrate_main, [str(LOG), "--out", str(out), "-q"], LOG),
        ("trace", trace_main, [str(sweep), "--scenario", "steady", "--out", str(out / "t.nc"), "-q"], sweep),
    ]


@pytest.mark.parametrize("case", list(BAD_FOLDERS))
@pytest.mark.parametrize("command", ["sweep", "capacity", "calibrate", "trace"])
def test_a_bad_out_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, command, case):
    monkeypatch.chdir(tmp_path)  # a default results/ folder would land here, and be noticed
    before = setup(tmp_path)
    folder, fragment = BAD_FOLDERS[case]
    name, main, argv, named = next(c for c in commands(tmp_path, folder(tmp_path)) if c[0] == command)
    assert main(argv) == 2
    cap = capsys.readouterr()
    lines = cap.err.splitlines()
    assert len(lines) == 1 and cap.out == "", cap.err
    assert lines[0].startswith(f"error: {named}: --out: ") and fragment in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not Path("/proc/routesim-test-out").exists()


def test_trace_out_that_is_a_folder(tmp_path, monkeypatch, capsys):
    """A trace's ``--out`` is a file: an existing folder there is refused."""
    monkeypatch.chdir(tmp_path)
    setup(tmp_path)
    (tmp_path / "folder.nc").mkdir()
    assert trace_main([str(tmp_path / "tiny.toml"), "--scenario", "steady", "--out", str(tmp_path / "folder.nc")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out: {tmp_path / 'folder.nc'} is a folder, not a file" in err


def test_subprocess_sweep_into_proc(tmp_path):
    """A real ``python -m routesim.sweep``: no traceback, status 2, one line."""
    setup(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "routesim.sweep", "tiny.toml", "--out", "/proc/routesim-x"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "error: tiny.toml: --out: cannot create the folder /proc/routesim-x: No such file or directory\n"


def test_the_probe_leaves_nothing_behind(tmp_path):
    """A writable new folder passes and is not left behind (the writers create it);
    a failing probe removes the parents it created."""
    assert files.unwritable(tmp_path / "a" / "b" / "c") is None
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "f").write_text("")
    assert "is a file" in files.unwritable(tmp_path / "f" / "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    assert files.unwritable(tmp_path) is None and sorted(p.name for p in tmp_path.iterdir()) == ["f"]
