"""Where a batching run's CPU time goes, by compiled function (issue 43, item 5: "if a
target is out of reach, say which part of the time is what, measured").

    python -m benchmarks.cpu_profile [--mode reserve|vllm|vllm_async] [--rate RPS] [--runs N] [--study]
    python -m benchmarks.cpu_profile --scale

- The default (needs Linux ``perf``): the benchmark's 60 s run of the example cluster
  (benchmarks/batching.py's ``modes``: 8 replicas, least_tokens, seed 1) simulated
  ``--runs`` times in a child process under ``perf record``. The child compiles the
  batching model into an empty cache (code loaded from Numba's cache has no symbol
  table) and writes ``/tmp/perf-<pid>.map``, the address and size of every function
  each compiled library defines, which perf reads for code it cannot otherwise name;
  then each sample in routesim's compiled code is counted to its function (inlined
  callees count to their caller). Prints each function's share of those samples: the
  compile's own samples (LLVM, the interpreter) are not routesim's and are left out.
  ``--study``: a run of the least-outstanding study's server arm instead (:data:`STUDY`:
  1,200 s of warm-up, a 60 s window drained, the long class, the roofline step cost).
- ``--scale``: CPU per iteration against the mean batch (running sequences a step),
  per scheduler mode, on the same runs at 10, 20, 30 and 40 req/s, seeds 1 and 2
  (alternated in one process, best of 3 each, one thread), and the least-squares line
  ``ns per iteration = a + b · batch`` of each mode: ``b`` is what a running sequence
  costs a step, ``a`` what a step costs besides.

Not part of ``python -m benchmarks`` (perf is not on every machine).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

from .harness import ROOT

MODES = ("reserve", "vllm", "vllm_async")
SAMPLE_S = 5.0
"""CPU seconds of simulation the profile samples by default (about 10,000 samples)."""


STUDY = {"warmup_s": 1200.0, "measure_s": 60.0, "drain_s": 600.0, "p_long": 0.02, "step_cost": "roofline"}
"""``--study``: a run of the least-outstanding study's server arm (sweeps/token-routing-server.toml:
1,200 s warm-up, a 60 s window, the long class, the roofline step cost)."""


def _run(mode, rate, seed=1, study=False):
    """The benchmark's 60 s run under scheduler ``mode`` (benchmarks.batching.MODES), or
    with ``study`` a run of the least-outstanding study's server arm (:data:`STUDY`)."""
    from . import batching as b
    values = b._values(**STUDY) if study else b._values(warmup_s=10.0, measure_s=50.0)
    base = b._Run(values, "least_tokens", 8, rate, seed)
    return b._variants(base, {mode: b.MODES[mode]})[mode]


def _write_perf_map():
    """Write /tmp/perf-<pid>.map: every function defined by a compiled routesim library
    (its LLVM module, present because this process compiled it), address and size (to
    the next function's address, at most 64 KiB). Returns the number of functions."""
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher

    import routesim
    syms = set()
    for info in pkgutil.walk_packages(routesim.__path__, "routesim."):
        module = importlib.import_module(info.name)
        for d in vars(module).values():
            if not isinstance(d, CPUDispatcher):
                continue
            for ov in d.overloads.values():
                lib = ov.library
                for fn in lib._final_module.functions:
                    if not fn.is_declaration and (a := lib.get_pointer_to_function(fn.name)):
                        syms.add((a, fn.name))
    syms = sorted(syms)
    with open(f"/tmp/perf-{os.getpid()}.map", "w") as f:
        for (a, name), (nxt, _) in zip(syms, syms[1:] + [(syms[-1][0] + 4096, "")]):
            f.write(f"{a:x} {min(nxt - a, 1 << 16):x} {name}\n")
    return len(syms)


def child(mode, rate, runs, study=False):
    """In the child (under perf): compile, map the symbols, simulate ``runs`` times (0:
    as many as take about :data:`SAMPLE_S` of CPU, from one run's time)."""
    import math
    import time
    r = _run(mode, rate, study=study)
    r.simulate()
    n = _write_perf_map()
    if runs <= 0:
        c0 = time.process_time()
        r.simulate()
        runs = max(3, math.ceil(SAMPLE_S / max(time.process_time() - c0, 1e-3)))
    c0 = time.process_time()
    for _ in range(runs):
        r.simulate()
    print(f"{mode}: {runs} runs, {(time.process_time() - c0) / runs * 1e3:.1f} CPU ms a run; {n} compiled "
          f"functions mapped", file=sys.stderr)


def demangle(symbol):
    """Numba's mangled name (``_ZN8routesim8batching6engine10run_one_nbB3v42...``) as
    ``batching.engine.run_one_nb``; None for a symbol not of routesim."""
    head = "_ZN8routesim"
    if not symbol.startswith(head):
        return None
    parts, i = [], len(head)
    while (m := re.match(r"\d+", symbol[i:])):
        k = int(m.group(0))
        i += len(m.group(0))
        parts.append(symbol[i:i + k])
        i += k
    return ".".join(parts) or None


def shares(report_text):
    """{function: share of routesim's samples} from ``perf report --sort sym`` text."""
    got = {}
    for line in report_text.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[\.\]\s+(\S+)", line)
        name = m and demangle(m.group(2))
        if name:
            got[name] = got.get(name, 0.0) + float(m.group(1))
    total = sum(got.values())
    return {k: v / total for k, v in sorted(got.items(), key=lambda kv: -kv[1])} if total else {}


def profile(mode, rate, runs, study=False):
    if not shutil.which("perf"):
        print("error: benchmarks.cpu_profile needs Linux perf on the PATH (or use --scale)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(tmp, "cache"), NUMBA_NUM_THREADS="1")
        subprocess.run(["perf", "record", "-q", "-F", "1999", "-o", data, sys.executable, "-m", "benchmarks.cpu_profile",
                        "--child", "--mode", mode, "--rate", str(rate), "--runs", str(runs)] + ["--study"] * study,
                       cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        text = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "sym", "--percent-limit", "0"],
                              capture_output=True, text=True, check=True).stdout
    got = shares(text)
    print(f"{mode}, {rate:g} req/s: each compiled function's share of the samples in routesim's compiled code")
    for name, s in got.items():
        if s >= 0.005:
            print(f"  {100 * s:5.1f} %  {name}")
    return 0


def scale(repeats=3):
    import numpy as np

    from . import batching as b
    rows = []
    for rate in (10.0, 20.0, 30.0, 40.0):
        for seed in (1, 2):
            base = b._Run(b._values(warmup_s=10.0, measure_s=50.0), "least_tokens", 8, rate, seed)
            runs = b._variants(base, b.MODES)
            best, out = b._alternately(runs, repeats)
            for m in runs:
                it = int(out[m]["iterations"])
                rows.append((m, rate, seed, float(out[m]["batch_mean"]), best[m] * 1e9 / it, best[m] * 1e3))
    print("mode        rate  seed  mean batch  ns/iteration  CPU ms a run")
    for m, rate, seed, batch, ns, ms in rows:
        print(f"{m:<10}  {rate:4g}  {seed:4d}  {batch:10.1f}  {ns:12.0f}  {ms:12.1f}")
    print("\nleast squares, ns per iteration = a + b · mean batch:")
    for m in MODES:
        x = np.array([r[3] for r in rows if r[0] == m])
        y = np.array([r[4] for r in rows if r[0] == m])
        bb, a = np.polyfit(x, y, 1)
        print(f"  {m:<10}  a = {a:6.0f} ns   b = {bb:6.1f} ns per running sequence")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cpu_profile", description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=MODES, default="vllm")
    ap.add_argument("--rate", type=float, default=40.0, help="req/s (default 40)")
    ap.add_argument("--runs", type=int, default=0, help=f"runs simulated under perf (default: about {SAMPLE_S:g} CPU s of them)")
    ap.add_argument("--scale", action="store_true", help="CPU per iteration against the batch, every mode")
    ap.add_argument("--study", action="store_true",
                    help="a run of the least-outstanding study's server arm (1,200 s warm-up, roofline cost)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.mode, a.rate, a.runs, a.study)
        return 0
    return scale() if a.scale else profile(a.mode, a.rate, a.runs, a.study)


if __name__ == "__main__":
    sys.exit(main())
