"""Chunks (routesim/chunks.py): any chunk size gives the same Dataset, finished chunks
are kept as they complete, ``--resume`` after a kill recomputes exactly the missing
ones and gives the Dataset of an uninterrupted run, stale chunks are never reused, and
memory is bounded by the chunk size, not the grid."""

import hashlib
import json
import re
import signal
import subprocess
import sys
import time

import pytest
import xarray as xr

import routesim
from conftest import HEAD, ROOT, parse, sweep_text
from routesim import batch, chunks
from routesim.sweep import main

TWO_STAGES = """
[[stages]]
name = "dev"
policy = ["adaptive"]
exploration = [0, 0.5]
rate_rps = [175, 250]
scenario = ["steady", "straggler"]
seeds = { first = 1, count = 3 }
select = { parameter = "exploration", maximize = "attainment" }

[[stages]]
name = "val"
policy = ["least_queue", "adaptive"]
rate_rps = [250]
scenario = ["burst", "failure"]
seeds = { first = 11, count = 4 }
"""
"""dev: 2 × 2 × 2 × 2 × 3 = 48 runs; val (inherits dev's exploration): 2 × 2 × 2 × 4 = 32."""


@pytest.fixture(scope="module")
def in_process_run():
    """An engine run of the two stages in one go, in process, with the default chunk size:
    what every chunked or resumed run must reproduce."""
    return routesim.run(parse(TWO_STAGES), show_progress=False)


def assert_same(results, expected):
    assert list(results) == list(expected)
    for name, ds in expected.items():
        xr.testing.assert_identical(results[name], ds)


SIMULATE_RANGE = batch.simulate_range


class Counter:
    """Counts the chunks simulated in this process (wraps batch.simulate_range);
    ``fail_after`` raises Interrupted once that many chunks have been simulated."""

    def __init__(self, monkeypatch, fail_after=None):
        self.calls, self.fail_after = 0, fail_after
        monkeypatch.setattr(batch, "simulate_range", self)

    def __call__(self, grid, lo, hi):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise Interrupted
        self.calls += 1
        return SIMULATE_RANGE(grid, lo, hi)


class Interrupted(Exception):
    pass


def run(tmp_path, **kw):
    """The two stages with a checkpoint; returns (results, [ChunkCount per stage], [notes])."""
    counts, notes = [], []
    kw.setdefault("text", TWO_STAGES)
    sweep = parse(kw.pop("text"))
    results = routesim.run(sweep, show_progress=False, checkpoint=tmp_path / "chunks",
                           on_chunks=counts.append, note=notes.append, **kw)
    return results, counts, notes


def test_plan_covers_every_run_once_in_order():
    for runs in (0, 1, 7, 23, 64):
        for size in (1, 7, 64, 1000):
            ranges = chunks.plan(runs, size)
            assert [r for lo, hi in ranges for r in range(lo, hi)] == list(range(runs))
            assert all(0 < hi - lo <= size for lo, hi in ranges)
            assert len(ranges) == -(-runs // size)


@pytest.mark.parametrize("size", [1, 7, None], ids=["1", "7", "default"])
def test_any_chunk_size_gives_the_same_datasets(in_process_run, size):
    assert_same(routesim.run(parse(TWO_STAGES), show_progress=False, chunk_size=size), in_process_run)


def test_interrupted_run_resumes_with_only_the_missing_chunks(tmp_path, in_process_run, monkeypatch):
    """An exception after 5 chunks (dev has 16 of size 3) leaves those 5 on disk;
    resuming (which takes the stored chunk size) simulates only the other 11, then val
    (in chunks of the default size: it has none stored)."""
    Counter(monkeypatch, fail_after=5)
    with pytest.raises(Interrupted):
        run(tmp_path, chunk_size=3)
    folder = tmp_path / "chunks" / "dev"
    assert len(list(folder.glob("[0-9]*.npz"))) == 5
    manifest = json.loads((folder / chunks.MANIFEST).read_text())
    assert manifest["chunk_size"] == 3 and manifest["chunks"] == 16 and manifest["runs"] == 48

    counter = Counter(monkeypatch)
    results, counts, notes = run(tmp_path, resume=True)
    assert_same(results, in_process_run)
    assert [(c.stage, c.chunks, c.resumed, c.computed) for c in counts[:1]] == [("dev", 16, 5, 11)]
    assert (counts[1].resumed, counts[1].computed) == (0, counts[1].chunks)
    assert counter.calls == 11 + counts[1].chunks and notes == []
    assert not (tmp_path / "chunks").exists(), "the checkpoint is removed once every stage is done"


def test_resume_of_a_finished_stage_simulates_nothing_of_it(tmp_path, in_process_run, monkeypatch):
    """Interrupted in val: dev is read back whole, its selection made again from it."""
    Counter(monkeypatch, fail_after=16 + 4)
    with pytest.raises(Interrupted):
        run(tmp_path, chunk_size=3)
    counter = Counter(monkeypatch)
    results, counts, _ = run(tmp_path, resume=True, chunk_size=3)
    assert_same(results, in_process_run)
    assert [(c.resumed, c.computed) for c in counts] == [(16, 0), (4, 7)]
    assert counter.calls == 7


def _interrupted(tmp_path, monkeypatch, after=5):
    Counter(monkeypatch, fail_after=after)
    with pytest.raises(Interrupted):
        run(tmp_path, chunk_size=3)


@pytest.mark.parametrize("change,reason", [
    (dict(text=TWO_STAGES.replace('name = "val"', '# a comment\nname = "val"')), "the sweep file changed"),
    (dict(chunk_size=4), "the chunk size changed (3 -> 4)"),
    ("package", "routesim changed"),
], ids=["sweep-file", "chunk-size", "package"])
def test_stale_chunks_are_discarded_with_one_line(tmp_path, in_process_run, monkeypatch, change, reason):
    _interrupted(tmp_path, monkeypatch)
    kw = dict(chunk_size=3)
    if change == "package":
        monkeypatch.setattr(chunks, "_DIGEST", "0.1.1+0123456789abcdef")
    else:
        kw.update(change)
    counter = Counter(monkeypatch)
    results, counts, notes = run(tmp_path, resume=True, **kw)
    assert len(notes) == 1 and reason in notes[0] and "stale" in notes[0] and "\n" not in notes[0]
    assert str(tmp_path / "chunks" / "dev") in notes[0]
    assert counts[0].resumed == 0 and counter.calls == sum(c.chunks for c in counts)
    if "text" not in kw:
        assert_same(results, in_process_run)


def test_without_resume_old_chunks_are_removed_not_reused(tmp_path, in_process_run, monkeypatch):
    """Not silently (issue 39): one line says how many finished chunks go, and that
    --resume would have reused them."""
    _interrupted(tmp_path, monkeypatch)
    counter = Counter(monkeypatch)
    results, counts, notes = run(tmp_path, chunk_size=3)
    assert_same(results, in_process_run)
    assert [c.resumed for c in counts] == [0, 0] and counter.calls == 16 + 11
    assert notes == [f"{tmp_path / 'chunks' / 'dev'}: starting fresh, discarding 5 finished chunks of an "
                     "earlier run of this sweep (--resume would have reused them)"]


def test_without_resume_stale_chunks_are_said_to_be_stale(tmp_path, monkeypatch):
    """Chunks of an edited sweep file: discarded, and --resume could not have used them."""
    _interrupted(tmp_path, monkeypatch)
    Counter(monkeypatch)
    _, _, notes = run(tmp_path, text=TWO_STAGES.replace('name = "val"', '# a comment\nname = "val"'))
    assert len(notes) == 1 and "discarding 5 finished chunks" in notes[0], notes
    assert "stale: the sweep file changed" in notes[0] and "--resume would not have reused them" in notes[0]


def test_damaged_chunk_and_stray_temporary_are_dealt_with(tmp_path, in_process_run, monkeypatch):
    """A kill during a write leaves only a temporary (removed on resume); a chunk file
    damaged from outside is computed again rather than trusted."""
    _interrupted(tmp_path, monkeypatch)
    folder = tmp_path / "chunks" / "dev"
    (folder / ".000005.npz.abc.tmp").write_bytes(b"half a file")
    (folder / "000002.npz").write_bytes(b"not a zip file")
    counter = Counter(monkeypatch)
    results, counts, _ = run(tmp_path, resume=True)
    assert_same(results, in_process_run)
    assert (counts[0].resumed, counts[0].computed) == (4, 12) and counter.calls == 12 + counts[1].chunks
    assert not list((tmp_path / "chunks").glob("**/*.tmp"))


def test_resume_with_nothing_stored_just_runs(tmp_path, in_process_run, monkeypatch):
    counter = Counter(monkeypatch)
    results, counts, notes = run(tmp_path, resume=True)
    assert_same(results, in_process_run)
    assert notes == [] and [c.resumed for c in counts] == [0, 0]
    assert counter.calls == sum(c.chunks for c in counts)


# --- the command line, killed with SIGKILL ---------------------------------------------

KILL_STAGES = """
[[stages]]
name = "dev"
policy = ["adaptive"]
exploration = [0, 0.5]
rate_rps = [250]
scenario = ["steady", "straggler"]
seeds = { first = 1, count = 8 }
select = { parameter = "exploration", maximize = "attainment" }

[[stages]]
name = "val"
policy = ["round_robin", "least_queue", "adaptive"]
rate_rps = [250]
scenario = ["steady", "straggler"]
seeds = { first = 21, count = 8 }
"""
"""dev: 2 × 2 × 2 × 8 = 64 runs, 32 chunks of 2; val: 3 × 2 × 2 × 8 = 96 runs, 48 chunks."""


def _files(folder):
    """{chunk file name: (inode, mtime_ns)} of the finished chunks in ``folder``."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.glob("[0-9]*.npz")}


def _start(path, out, log, *extra):
    return subprocess.Popen([sys.executable, "-m", "routesim.sweep", str(path), "--out", str(out), *extra],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def _kill_when(proc, folder, at_least, timeout=300):
    """SIGKILL ``proc`` as soon as ``folder`` holds ``at_least`` finished chunks."""
    t0 = time.monotonic()
    while len(list(folder.glob("[0-9]*.npz"))) < at_least:
        assert proc.poll() is None, "the sweep finished before it could be killed"
        assert time.monotonic() - t0 < timeout
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL


def _counts(log_text, stage):
    """(chunks, resumed, computed) that the command line printed for ``stage``."""
    m = re.search(rf"^{stage}: (\d+) chunks, (?:(\d+) resumed from \S+, )?(\d+) computed", log_text, re.M)
    assert m, log_text
    return int(m[1]), int(m[2] or 0), int(m[3])


def test_sigkill_then_resume_recomputes_only_missing_chunks(tmp_path):
    path = tmp_path / "kill.toml"
    path.write_text(sweep_text(KILL_STAGES))
    assert main([str(path), "--out", str(tmp_path / "ref"), "--quiet"]) == 0  # uninterrupted

    out = tmp_path / "out"
    dev, val = out / ".chunks" / "dev", out / ".chunks" / "val"
    # 1. killed part-way through dev
    with open(tmp_path / "1.log", "w") as log:
        _kill_when(_start(path, out, log, "--chunk-size", "2"), dev, 8)
    first = _files(dev)
    assert 8 <= len(first) < 32 and not val.exists() and not (out / "dev.nc").exists()

    # 2. the same command with --resume, killed again part-way through val
    with open(tmp_path / "2.log", "w") as log:
        _kill_when(_start(path, out, log, "--chunk-size", "2", "--resume"), val, 8)
    text = (tmp_path / "2.log").read_text()
    assert _counts(text, "dev") == (32, len(first), 32 - len(first))
    now = _files(dev)
    assert {k: now[k] for k in first} == first, "a finished chunk was written again"
    second = _files(val)
    assert 8 <= len(second) < 48

    # 3. resumed to the end
    proc = subprocess.run([sys.executable, "-m", "routesim.sweep", str(path), "--out", str(out),
                           "--chunk-size", "2", "--resume"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert _counts(proc.stdout, "dev") == (32, 32, 0)
    assert _counts(proc.stdout, "val") == (48, len(second), 48 - len(second))
    assert not (out / ".chunks").exists()
    assert sorted(p.name for p in out.iterdir()) == ["dev.nc", "val.nc"]
    for name in ("dev", "val"):
        with xr.open_dataset(tmp_path / "ref" / f"{name}.nc", engine="netcdf4") as want, xr.open_dataset(out / f"{name}.nc", engine="netcdf4") as got:
            xr.testing.assert_identical(got.load(), want.load())


# --- memory ----------------------------------------------------------------------------

MEMORY_SCRIPT = r"""
import json, re, resource, sys
import routesim
from routesim import batch, grid as grid_mod

def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024

big, tiny = (routesim.parse_sweep(t, "m.toml") for t in json.loads(sys.argv[1]))
routesim.run(tiny, show_progress=False, checkpoint=sys.argv[2] + "-warm")  # the same path: kernels in place
try:
    with open("/proc/self/clear_refs", "w") as f:  # reset the peak to the current size
        f.write("5")
except OSError:
    pass
base = rss_kib()
ds = routesim.run(big, show_progress=False, checkpoint=sys.argv[2])["big"]
# the high-water mark that clear_refs reset (getrusage's ru_maxrss keeps the old peak)
peak = int(re.search(r"VmHWM:\s+(\d+) kB", open("/proc/self/status").read()).group(1))
grid = grid_mod.build(big, big.stages[0])
size = batch.default_chunk_size(grid)
chunked, runs = grid_mod.estimate_bytes(big, big.stages[0], size)
whole, _ = grid_mod.estimate_bytes(big, big.stages[0], runs)
print(json.dumps(dict(runs=runs, cells=int(ds.attainment.size), chunk=size, base_kib=base,
                      grow_kib=peak - base, chunked=chunked, whole=whole)))
"""


def _memory_stage(name, alphas, seeds):
    alpha = ", ".join(f"{0.01 * (i + 1):.2f}" for i in range(alphas))
    return f"""
[[stages]]
name = "{name}"
policy = ["round_robin", "least_queue", "latency_aware", "adaptive"]
rate_rps = [150]
scenario = ["steady"]
alpha = [{alpha}]
seeds = {{ first = 1, count = {seeds} }}
warmup_s = 0.5
measure_s = 0.5
dt_ms = 0
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the resident set")
def test_large_grid_stays_within_the_memory_bound(tmp_path):
    """51,200 runs (4 policies × 2 heterogeneities × 50 alphas × 128 seeds, 1 s each).

    Stated bound: the growth of the peak resident set over the warmed-up process is at
    most 1.25 × ``grid.estimate_bytes`` at the default chunk size + 16 MiB (workloads,
    per-run inputs and outputs, and one chunk's scratch). The same estimate for a
    single chunk of every run is far above it, so the bound holds only because the
    grid runs in chunks."""
    texts = [HEAD + _memory_stage("big", 50, 128), HEAD + _memory_stage("tiny", 1, 1)]
    proc = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, json.dumps(texts), str(tmp_path / "chunks")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    assert m["runs"] == m["cells"] >= 50_000
    bound = 1.25 * m["chunked"] + 16 * 2**20
    assert m["whole"] > 2 * bound, "the grid is too small to show that chunking bounds memory"
    assert m["grow_kib"] * 1024 <= bound, (
        f"peak grew {m['grow_kib'] / 1024:.0f} MiB; bound {bound / 2**20:.0f} MiB "
        f"({m['runs']:,} runs, chunks of {m['chunk']})")


# --- command-line options ----------------------------------------------------------------

@pytest.mark.parametrize("option,value,fragment", [
    ("--workers", "0", "must be >= 1"), ("--workers", "two", "whole number")])
def test_bad_workers_option(tmp_path, capsys, option, value, fragment):
    path = tmp_path / "s.toml"
    path.write_text(sweep_text(TWO_STAGES))
    assert main([str(path), "--out", str(tmp_path / "out"), option, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and option in err and fragment in err and str(path) in err
    assert not (tmp_path / "out").exists()


def test_scheduler_and_workers_are_exclusive(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "s.toml"), "--workers", "2", "--scheduler", "tcp://127.0.0.1:8786"])
    assert exc.value.code == 2 and "not allowed with" in capsys.readouterr().err


def test_resume_from_the_command_line_in_process(tmp_path, monkeypatch, capsys):
    """--resume through main(): stale note on stderr, counts on stdout."""
    path = tmp_path / "s.toml"
    path.write_text(sweep_text(TWO_STAGES))
    out = tmp_path / "out"
    Counter(monkeypatch, fail_after=5)
    with pytest.raises(Interrupted):
        main([str(path), "--out", str(out), "--chunk-size", "3"])
    capsys.readouterr()
    Counter(monkeypatch)
    assert main([str(path), "--out", str(out), "--resume"]) == 0
    cap = capsys.readouterr()
    assert _counts(cap.out, "dev") == (16, 5, 11) and cap.err.count("note:") == 0
    Counter(monkeypatch, fail_after=5)
    with pytest.raises(Interrupted):
        main([str(path), "--out", str(out), "--chunk-size", "3", "--quiet"])
    path.write_text(sweep_text(TWO_STAGES) + "\n# edited\n")
    Counter(monkeypatch)
    assert main([str(path), "--out", str(out), "--resume", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "note:" in err and "stale" in err and "the sweep file changed" in err


def test_a_changed_trace_file_makes_stored_chunks_stale(tmp_path):
    """The chunks of a stage that replays a trace depend on the trace's bytes: an edited
    trace gives another digest, said in words; a stage without data files keeps the
    digest it had before data files were fingerprinted."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_ms,prompt_tokens,output_tokens\n0,10,5\n")
    before = chunks.Fingerprint.of("text", "s", {}, 4, 16, data_files=[trace])
    trace.write_text("arrival_ms,prompt_tokens,output_tokens\n0,10,6\n")
    after = chunks.Fingerprint.of("text", "s", {}, 4, 16, data_files=[trace])
    assert before.digest != after.digest
    assert after.differences(dict(vars(before), digest=before.digest)) == ["a trace file it replays changed"]
    plain = chunks.Fingerprint.of("text", "s", {}, 4, 16)
    legacy = hashlib.sha256(json.dumps([chunks.FORMAT, plain.sweep, plain.package, plain.stage, 4, 16]).encode())
    assert plain.digest == legacy.hexdigest()
