"""Chunks on a dask.distributed cluster (routesim/cluster.py): the same Datasets as in
process, kernels and grids built once per worker, a killed worker's chunks rerun
elsewhere, a lost scheduler reported with the finished chunks kept for --resume.

One local cluster of 2 worker processes serves the module (it takes seconds to start).
"""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import xarray as xr

import routesim
from conftest import ROOT, parse, sweep_text
from routesim import cluster
from routesim.sweep import main

STAGES = """
[[stages]]
name = "dev"
policy = ["adaptive"]
exploration = [0, 0.5]
rate_rps = [175, 250]
scenario = ["steady", "failure"]
seeds = { first = 1, count = 3 }
select = { parameter = "exploration", maximize = "attainment" }

[[stages]]
name = "val"
policy = ["round_robin", "latency_aware", "adaptive"]
rate_rps = [250]
scenario = ["burst", "straggler"]
seeds = { first = 11, count = 4 }
"""
"""dev: 48 runs; val: 3 × 2 × 2 × 4 = 48 runs, with dev's selected exploration."""


@pytest.fixture(scope="module")
def client():
    """A client of a LocalCluster of 2 worker processes, 1 thread each, started as
    ``--workers 2`` starts it."""
    with cluster.connect(workers=2) as c:
        c.wait_for_workers(2)
        yield c


@pytest.fixture(scope="module")
def in_process():
    return routesim.run(parse(STAGES), show_progress=False)


def assert_same(results, reference):
    assert list(results) == list(reference)
    for name, ds in reference.items():
        xr.testing.assert_identical(results[name], ds)


def stats(client):
    return client.run(cluster.worker_stats)


def test_local_cluster_has_two_worker_processes(client):
    info = stats(client)
    assert len(info) == 2 and len({s["pid"] for s in info.values()}) == 2
    assert os.getpid() not in {s["pid"] for s in info.values()}
    threads = client.run(lambda: __import__("numba").config.NUMBA_NUM_THREADS)
    assert set(threads.values()) == {max(1, (os.cpu_count() or 1) // 2)}


@pytest.mark.parametrize("size", [7, None], ids=["7", "default"])
def test_cluster_gives_the_in_process_datasets(client, in_process, size):
    assert_same(routesim.run(parse(STAGES), show_progress=False, client=client, chunk_size=size), in_process)


def test_workers_build_grids_and_load_kernels_once(client, in_process, tmp_path):
    """Chunks of 2 runs: 48 chunks over 2 stages, yet each worker builds each stage's
    grid at most once and loads (or compiles) the batch kernel once in its life."""
    before = stats(client)
    counts = []
    results = routesim.run(parse(STAGES), show_progress=False, client=client, chunk_size=2,
                           checkpoint=tmp_path / "chunks", on_chunks=counts.append)
    assert_same(results, in_process)
    after = stats(client)
    assert set(after) == set(before), "no worker should have died"
    assert sum(a["chunks"] - before[w]["chunks"] for w, a in after.items()) == 48 == sum(c.computed for c in counts)
    for w, a in after.items():
        assert a["grids_built"] - before[w]["grids_built"] <= 2
        assert a["kernel_loads"] == 1
    assert sum(a["chunks"] - before[w]["chunks"] > 0 for w, a in after.items()) == 2, "both workers take chunks"


def test_killed_worker_chunks_are_recomputed(client, in_process, monkeypatch):
    """SIGKILL a worker process that holds chunk work the run still needs, once 3 of the
    stage's 24 chunks are in: one in the middle of a chunk or, when the workers have run
    every chunk already (a loaded machine slows the client, not the chunks), one holding
    finished chunks the client has not fetched yet (as_completed still holds 20). Either
    way the scheduler reruns the lost chunks (the nanny starts a fresh worker), and the
    Datasets are those of the in-process run."""
    real, killed = cluster.compute, []

    def holding(client_):
        """The worker to kill: one running a chunk, else the one holding most unfetched chunks."""
        busy = [w for w, keys in client_.processing().items() if keys]
        if busy:
            return busy[0]
        held = {w: sum(str(k).startswith("routesim-") for k in keys) for w, keys in client_.has_what().items()}
        return max(held, key=held.get) if held and max(held.values()) else None

    def compute(client_, job, ranges, todo, tag):
        for n, item in enumerate(real(client_, job, ranges, todo, tag)):
            if n == 3 and not killed:
                w = holding(client_)
                assert w is not None, "no worker holds a chunk the run still needs"
                pid = client_.run(os.getpid, workers=[w])[w]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            yield item

    monkeypatch.setattr(cluster, "compute", compute)
    results = routesim.run(parse(STAGES), show_progress=False, client=client, chunk_size=2)
    assert killed, "no worker was busy to kill"
    assert_same(results, in_process)
    client.wait_for_workers(2, timeout=60)
    assert killed[0] not in {s["pid"] for s in stats(client).values()}


def test_command_line_on_the_cluster(client, tmp_path):
    """--scheduler ADDRESS writes the same files as a run in process."""
    path = tmp_path / "s.toml"
    path.write_text(sweep_text(STAGES))
    assert main([str(path), "--out", str(tmp_path / "here"), "--quiet"]) == 0
    assert main([str(path), "--out", str(tmp_path / "there"), "--quiet", "--chunk-size", "5",
                 "--scheduler", client.scheduler.address]) == 0
    for name in ("dev", "val"):
        with xr.open_dataset(tmp_path / "here" / f"{name}.nc", engine="netcdf4") as a, xr.open_dataset(tmp_path / "there" / f"{name}.nc", engine="netcdf4") as b:
            xr.testing.assert_identical(a.load(), b.load())
    assert sorted(p.name for p in (tmp_path / "there").iterdir()) == ["dev.nc", "val.nc"]


def test_worker_with_another_routesim_refuses_chunks(client, tmp_path, capsys, monkeypatch):
    """Workers must simulate with the client's code: a client whose package digest
    differs (as after an edit of the engine) gets a clear error, exit status 1."""
    from routesim import chunks
    monkeypatch.setattr(chunks, "_DIGEST", "0.0.1+0123456789abcdef")
    path = tmp_path / "s.toml"
    path.write_text(sweep_text(STAGES))
    assert main([str(path), "--out", str(tmp_path / "out"), "--quiet", "--scheduler", client.scheduler.address]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "install the same routesim on every worker" in last and "--resume" in last


def test_unreachable_scheduler_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "s.toml"
    path.write_text(sweep_text(STAGES))
    assert main([str(path), "--out", str(tmp_path / "out"), "--scheduler", f"tcp://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--scheduler" in err and "cannot reach" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_without_distributed_says_how_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    path = tmp_path / "s.toml"
    path.write_text(sweep_text(STAGES))
    assert main([str(path), "--out", str(tmp_path / "out"), "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--workers" in err and "pip install -e '.[cluster]'" in err
    assert not (tmp_path / "out").exists()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(predicate, what, timeout=120):
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_lost_scheduler_keeps_finished_chunks_for_resume(tmp_path, in_process):
    """A scheduler and a worker of their own, a sweep sent to them, the scheduler killed
    part-way: exit status 1, one line naming the scheduler and the kept chunks; then
    --resume in process finishes with the Datasets of an uninterrupted run."""
    path = tmp_path / "s.toml"
    path.write_text(sweep_text(STAGES))
    address = f"tcp://127.0.0.1:{_free_port()}"
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                              "--port", address.rsplit(":", 1)[1], "--no-dashboard"], **quiet)
    worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                               "--no-dashboard", "--no-nanny"], **quiet)
    out = tmp_path / "out"
    try:
        sweep = subprocess.Popen([sys.executable, "-m", "routesim.sweep", str(path), "--out", str(out),
                                  "--chunk-size", "1", "--scheduler", address],
                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        folder = out / ".chunks" / "dev"
        _wait_for(lambda: len(list(folder.glob("[0-9]*.npz"))) >= 4 or sweep.poll() is not None, "4 chunks")
        sched.send_signal(signal.SIGKILL)
        stdout, stderr = sweep.communicate(timeout=120)
    finally:
        for p in (sched, worker):
            p.kill()
            p.wait()
    assert sweep.returncode == 1, stdout + stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: lost the Dask scheduler at " + address), stderr
    kept = len(list(out.glob(".chunks/*/[0-9]*.npz")))
    assert f"{kept} finished chunks kept in {out / '.chunks'}" in last and "--resume" in last
    assert 4 <= kept and "Traceback" not in stderr

    assert main([str(path), "--out", str(out), "--chunk-size", "1", "--resume", "--quiet"]) == 0
    assert main([str(path), "--out", str(tmp_path / "ref"), "--quiet"]) == 0  # uninterrupted
    for name in in_process:
        with xr.open_dataset(out / f"{name}.nc", engine="netcdf4") as got, xr.open_dataset(tmp_path / "ref" / f"{name}.nc", engine="netcdf4") as want:
            xr.testing.assert_identical(got.load(), want.load())
