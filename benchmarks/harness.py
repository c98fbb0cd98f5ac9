"""Running measurements: one subprocess per measurement, its wall time and peak RSS.

Every figure of the suite comes from a fresh Python process, so that each one's peak
resident memory is its own (read from ``os.wait4``'s rusage of that child), the
number of compiled-kernel threads can be pinned (``NUMBA_NUM_THREADS``), and a cold
start can be made with an empty compilation cache (``NUMBA_CACHE_DIR`` pointing at a
new folder) without touching the user's cache.
"""

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "sweeps" / "exploration.toml"
TESTS = ROOT / "tests"
MARK = "BENCHMARK-RESULT "


@dataclass
class Child:
    """A finished subprocess: wall time (s), CPU time (s, all threads), peak RSS (bytes),
    and the JSON result it printed (``{}`` for a plain command)."""

    wall: float
    cpu: float
    max_rss: int
    result: dict = field(default_factory=dict)
    stdout: str = ""


def run_measured(argv, env=None, timeout=1800.0, cwd=ROOT) -> Child:
    """Run ``argv`` to the end; its wall time, its own CPU time and peak RSS (from
    ``os.wait4``) and the result it printed. Raise with its stderr when it fails."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    out_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-{os.getpid()}-{time.time_ns()}.out"
    err_path = out_path.with_suffix(".err")
    t0 = time.perf_counter()
    with open(out_path, "w") as fo, open(err_path, "w") as fe:
        proc = subprocess.Popen(argv, cwd=cwd, env=full_env, stdout=fo, stderr=fe)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                raise RuntimeError(f"{' '.join(map(str, argv))} took more than {timeout:.0f} s")
            time.sleep(0.005)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    out, err = out_path.read_text(), err_path.read_text()
    out_path.unlink(missing_ok=True)
    err_path.unlink(missing_ok=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed ({proc.returncode}):\n{err[-3000:]}")
    result = {}
    for line in out.splitlines():
        if line.startswith(MARK):
            result = json.loads(line[len(MARK):])
    return Child(wall=wall, cpu=usage.ru_utime + usage.ru_stime, max_rss=usage.ru_maxrss * 1024,
                 result=result, stdout=out)


def task(name: str, env=None, timeout=1800.0, **kwargs) -> Child:
    """Run ``benchmarks.tasks.<name>(**kwargs)`` in a fresh process."""
    return run_measured([sys.executable, "-m", "benchmarks.tasks", name, json.dumps(kwargs)],
                        env=env, timeout=timeout)


def emit(result: dict) -> None:
    """Inside a task: hand the result to the parent."""
    print(MARK + json.dumps(result), flush=True)


def rss_now() -> tuple[int, int]:
    """(current RSS, peak RSS) of this process in bytes, from /proc/self/status."""
    cur = peak = 0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    cur = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) * 1024
    except OSError:
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return cur, peak


def from_tests(name: str):
    """The module tests/<name>.py (a naive reference the benchmarks compare the engine
    against, or conftest.py), loaded from that file. tests/ is not a package and not on
    ``sys.path``; the module is registered as ``sys.modules[name]``, the name the tests
    import it by, so it loads once per process and is the tests' own when they have it."""
    import importlib.util

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, TESTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module       # before running it: dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def machine() -> dict:
    """What the figures were measured on."""
    import numba
    import numpy

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                capture_output=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "routesim"], cwd=ROOT,
                               text=True, capture_output=True).stdout.strip()
        commit += " (routesim/ modified)" if dirty else ""
    except OSError:
        commit = "?"
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem / 2**30, 1) if mem else None,
        "python": platform.python_version(), "numpy": numpy.__version__, "numba": numba.__version__,
        "os": f"{platform.system()} {platform.release()}", "commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }


def load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")
