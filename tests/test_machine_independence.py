"""The same Dataset whatever SIMD paths NumPy picks (README, "Reproducibility").

NumPy chooses an implementation of its transcendental functions at run time from the
CPU's features, and the AVX-512, AVX2 and baseline paths round differently. A process
started with ``NPY_DISABLE_CPU_FEATURES`` uses the others, as a machine without those
features would. Each process below generates the workloads of both models and runs a
stage of each (the queue study's development stage; the batching example, reduced),
and prints a digest of every workload array and of every variable and coordinate of
every Dataset; the digests must be equal, byte for byte, to the default process's.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import hashlib, sys
from pathlib import Path
import numpy as np
import routesim
from routesim.batching.workload import TokenWorkloadParams, generate as token_generate
from routesim.queue.workload import WorkloadParams, generate as queue_generate

root = Path(sys.argv[1])
h = hashlib.sha256()
def add(name, a):
    if a is None:  # an optional field a workload leaves out (a conversation's, without sessions)
        h.update(name.encode() + b"None")
        return
    a = np.asarray(a)
    assert a.dtype != object, name  # its bytes would be addresses, not values
    h.update(name.encode() + str(a.dtype).encode() + a.tobytes())

for seed in (1, 2, 3):
    q = queue_generate(seed, 250.0, [(7000.0, 2.0)], 15000.0, WorkloadParams(demand="tokens"))
    e = queue_generate(seed, 250.0, [], 15000.0, WorkloadParams(demand="exponential"))
    t = token_generate(seed, 40.0, [(20000.0, 1.5)], 60000.0, TokenWorkloadParams())
    for prefix, w in (("queue", q), ("exponential", e), ("token", t)):
        for field, value in vars(w).items():
            add(f"{prefix}{seed}.{field}", value)

queue = (root / "sweeps" / "exploration.toml").read_text()
queue = queue[:queue.index('name = "validation"')].rsplit("[[stages]]", 1)[0]
batching = (root / "sweeps" / "batching.toml").read_text()
batching = batching.replace("count = 16", "count = 2").replace("warmup_s = 1200", "warmup_s = 10")
batching = batching.replace("measure_s = 60", "measure_s = 20")
assert "warmup_s = 10" in batching and "measure_s = 20" in batching, "sweeps/batching.toml changed its window"
for name, text in (("queue", queue), ("batching", batching)):
    for stage, ds in routesim.run(routesim.parse_sweep(text, name + ".toml"),
                                  show_progress=False).items():
        for var in sorted(ds.variables):
            add(f"{name}.{stage}.{var}", ds[var].values)
print(h.hexdigest())
"""

FEATURES = {
    "no AVX-512": "AVX512_SPR AVX512_ICL X86_V4",
    "no AVX-512, no AVX2": "AVX512_SPR AVX512_ICL X86_V4 X86_V3",
}


def digest(disabled=None):
    env = dict(os.environ)
    env.pop("NPY_DISABLE_CPU_FEATURES", None)
    if disabled:
        env["NPY_DISABLE_CPU_FEATURES"] = disabled
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.strip()


def dispatchable(names):
    """Whether this machine's NumPy would otherwise dispatch to one of these groups
    (disabling a feature the CPU lacks tests nothing)."""
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    return any(n in __cpu_dispatch__ and __cpu_features__.get(n) for n in names.split())


@pytest.fixture(scope="module")
def default_digest():
    return digest()


@pytest.mark.slow
@pytest.mark.parametrize("case", FEATURES)
def test_same_bits_without_simd_features(case, default_digest):
    if not dispatchable(FEATURES[case]):
        pytest.skip(f"this CPU has none of {FEATURES[case]}: NumPy takes the same paths")
    assert digest(FEATURES[case]) == default_digest


def test_numpy_itself_differs_there():
    """Why the test above matters on this machine: NumPy's own log1p and exp give other
    bits with AVX-512 disabled (when the CPU has it)."""
    if not dispatchable(FEATURES["no AVX-512"]):
        pytest.skip("no AVX-512 here")
    code = ("import numpy as np, hashlib; u = np.random.Generator(np.random.PCG64(1)).random(100000);"
            "print(hashlib.sha256(np.log1p(-u).tobytes() + np.exp(3 * u).tobytes()).hexdigest())")
    out = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=dict(os.environ, **({"NPY_DISABLE_CPU_FEATURES": f} if f else {}))).stdout
           for f in ("", FEATURES["no AVX-512"])]
    assert out[0] != out[1]
