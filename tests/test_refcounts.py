"""The batching engine's compiled code, as compiled: reference counts and signatures.

One child process compiles the batching model from nothing (an empty ``NUMBA_CACHE_DIR``:
code loaded from a cache has no LLVM IR, and a cached kernel would not compile its
callees) by running a small sweep of every batching policy, then reports, for every
compiled function of routesim, its signatures and the ``NRT_incref`` / ``NRT_decref``
calls left in its own body of the optimised LLVM IR (``inspect_llvm``; the body
includes whatever LLVM inlined into it).

- Reference counts: each is an atomic increment or decrement of an array's count, at
  every call. The functions of the event loop (``run_one_nb`` and everything it calls
  per time or per iteration) must keep at most the counts stated below, each with its
  reason; routesim/nrt.py says how a function is written so that Numba prunes them.
- Allocations: the sweep is run again once compiled, and NRT's statistics
  (``NUMBA_NRT_STATS``) must show every allocation freed once its results are gone:
  routesim's functions borrow their arguments (routesim/nrt.py), so a wrong borrow
  would show as a leak or an early free.
- Signatures: a function compiled twice (a literal ``0``, ``True`` or an enum member
  where elsewhere a typed value is passed) costs a second compilation on every cold
  start. Every routesim dispatcher has exactly one.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SHRINK = {"warmup_s = 1200": "warmup_s = 1", "measure_s = 60": "measure_s = 2", "drain_s = 600": "drain_s = 1",
          "rate_rps = [23, 41, 60]": "rate_rps = [41]", "count = 16": "count = 1"}
"""sweeps/batching.toml (every batching policy) made small: 3 s, one load, one seed."""


def small_example() -> str:
    text = (ROOT / "sweeps" / "batching.toml").read_text()
    for old, new in SHRINK.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


OUT_OF_LOOP = {
    # run once per run, not per iteration: they allocate (and free) arrays
    "run_one_nb", "finish_metrics_nb", "_per_replica_ttft", "of_weighted_nb",
    # growth, outside the event loop's inner loop: a new, larger array each
    "reserve_nb", "_gap_room_nb",
    # scheduler = "vllm": every prompt block's key, once per run before the event loop
    "prompt_keys_nb",
    # a scheduler's state (scheduler.py), allocated once per run before the event loop,
    # and what it takes from the run's workload (once per workload)
    "state_nb", "workload_nb", "own_nb",
    # prefill/decode pools: the run's disaggregation metrics, once per run after the loop
    "pd_engine.finish_nb",
}
"""Functions whose reference counts are not per iteration (not checked)."""

ALLOWED = {
    # name (or module.function): (NRT_incref and NRT_decref calls at most, each; why)
}
"""Event-loop functions allowed some reference counts, and why: none since routesim's
functions borrow their arguments and mark a call's error exit as a raise
(routesim/nrt.py). Add one only with its reason (a rare path); never raise one
without a reason."""


def _child(out: Path):
    """In the child: run the small example sweep, then write {name: {signatures, incref, decref}}."""
    import gc
    import importlib
    import pkgutil
    import tempfile

    from numba.core.registry import CPUDispatcher
    from numba.core.runtime import rtsys

    import routesim

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sweep.toml"
        path.write_text(small_example())
        routesim.run(routesim.load_sweep(path), show_progress=False)  # compiles (and starts NRT)
        gc.collect()
        before = rtsys.get_allocation_stats()
        results = routesim.run(routesim.load_sweep(path), show_progress=False)
        del results
        gc.collect()
        after = rtsys.get_allocation_stats()
    found = {"NRT": {"alloc": after.alloc - before.alloc, "free": after.free - before.free,
                     "mi_alloc": after.mi_alloc - before.mi_alloc, "mi_free": after.mi_free - before.mi_free}}
    for info in pkgutil.walk_packages(routesim.__path__, "routesim."):
        module = importlib.import_module(info.name)
        for attr, d in vars(module).items():
            if not isinstance(d, CPUDispatcher) or not d.__module__.startswith("routesim") or not d.overloads:
                continue
            name = f"{d.__module__}.{d.__name__}"
            if name in found:
                continue
            inc = dec = 0
            for ov in d.overloads.values():
                body = re.search(r'define [^\n]*@"?' + re.escape(ov.fndesc.mangled_name) + r'"?\(.*?\n}\n',
                                 ov.library.get_llvm_str(), re.S).group(0)
                inc = max(inc, len(re.findall(r"call void @NRT_incref\(", body)))
                dec = max(dec, len(re.findall(r"call void @NRT_decref\(", body)))
            found[name] = {"signatures": [str(s) for s in d.signatures], "incref": inc, "decref": dec}
    out.write_text(json.dumps(found, indent=1))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("refcounts")
    out = tmp / "compiled.json"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp / "cache"), NUMBA_NRT_STATS="1", PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, __file__, str(out)], env=env, cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.read_text())


def test_the_engine_was_compiled(compiled):
    for name in ("routesim.batching.engine.run_one_nb", "routesim.batching.replica.start_nb",
                 "routesim.batching.replica.finish_nb", "routesim.batching.router.route_nb",
                 "routesim.batching.timers.push_nb", "routesim.batching.blocks.evict_nb"):
        assert name in compiled, name


def test_event_loop_reference_counts_do_not_creep(compiled):
    over = {}
    for name, c in compiled.items():
        if (name == "NRT" or not name.startswith("routesim.batching.") or name.rsplit(".", 1)[1] in OUT_OF_LOOP
                or name.removeprefix("routesim.batching.") in OUT_OF_LOOP):   # (a name, or module.name)
            continue
        allowed = ALLOWED.get(name.removeprefix("routesim.batching."),
                              ALLOWED.get(name.rsplit(".", 1)[1], (0, "")))[0]
        if c["incref"] > allowed or c["decref"] > allowed:
            over[name] = (c["incref"], c["decref"])
    assert not over, f"NRT_incref/NRT_decref calls left (see routesim/nrt.py): {over}"


def test_every_allocation_is_freed_once(compiled):
    """Borrowed arguments (routesim/nrt.py) neither leak nor free early: over the sweep,
    once its results are gone, as many of NRT's allocations (and memory-info records)
    freed as made."""
    n = compiled["NRT"]
    assert n["alloc"] == n["free"] and n["mi_alloc"] == n["mi_free"], n


def test_one_signature_each(compiled):
    many = {name: c["signatures"] for name, c in compiled.items() if name != "NRT" and len(c["signatures"]) != 1}
    assert not many, f"compiled more than once: {many}"


if __name__ == "__main__":
    _child(Path(sys.argv[1]))
