"""The batching model (token-model.md) in the suite: ``python -m benchmarks --only batching``.

Measurements, each in a fresh process (``python -m benchmarks.batching NAME JSON``), all
through the public entry points: ``routesim.batching.workload.generate``,
``routesim.batching.runs.{params_row, Packed, simulate}`` and the command line
``python -m routesim.sweep sweeps/batching.toml``.

- ``peers``: one short run (8 replicas, 10 s warm-up + 5 s, 40 req/s) on the engine and
  on the naive reference of the tests (tests/token_reference.py), one thread, the same
  workload handed to both; their counts must agree.
- ``realtime``: a 60 s run (10 s + 50 s) of 8 replicas at 40 req/s, every policy x 2
  seeds, one thread: simulated seconds per second of a core, iterations and requests
  per second of a core; and the floor kernel (benchmarks/floor.py) on the same
  workloads in the same process, timed alternately with the engine: ns per iteration
  of each, and their ratio.
- ``modes``: the same 60 s runs with ``[replica] scheduler = "reserve"``, ``"vllm"``
  (``async_scheduling = false``) and ``"vllm"`` with vLLM's asynchronous loop, the same
  workload handed to each, simulated alternately, one thread: ms per run and ns per
  iteration of each, and their ratios to reserve and of the two vllm loops; what a
  scheduler takes from the workload alone (the vllm mode's prompt keys, made once per
  workload in a sweep) timed apart and counted amortised over the policies.
- ``pd``: the same 60 s runs co-located and split into 2 prefill and 6 decode replicas
  (docs/model.md "Prefill/decode disaggregation"), the same workload handed to both,
  simulated alternately, one thread: CPU ms per run of each and their ratio.
- ``scale``: one curve per process, one thread: replicas 8 -> 1,024 (``power_of_d``,
  5 req/s per replica), batch size (rate up on 8 replicas), decode length (outputs up
  at a fixed rate: the batch grows, requests per iteration do not), horizon.
- The whole command on ``sweeps/batching.toml``: cold (empty compilation cache), warm,
  peak RSS.
"""

import time

T_START = time.perf_counter()

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from .harness import ROOT, emit, from_tests, rss_now, run_measured  # noqa: E402

SWEEP = ROOT / "sweeps" / "batching.toml"
POLICIES = ("round_robin", "random", "least_requests", "least_tokens", "least_kv", "least_cost",
            "power_of_d", "prefix_affinity", "rate_weighted")
PEER_POLICIES = ("power_of_d", "least_tokens", "prefix_affinity", "round_robin")
COUNTS = ("arrivals", "completed", "failed", "rejected", "shed", "unfinished", "preemptions")
PEER_SIM = "a trained peer simulator of this field advertises about 200x"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# =====================================================================================
# Tasks (run in their own process)
# =====================================================================================

def _values(**overrides):
    """Every flat parameter at token-model.md's defaults (the reference's table, over the
    engine's for any key the reference does not state), overridden."""
    from routesim.batching.params import MODEL
    v = {p.name: p.default for p in MODEL.params}
    v.update(from_tests("token_reference").defaults())
    v.update(overrides)
    return v


class _Run:
    """One run through the public entry points: its workload, its arrays, and a timer."""

    def __init__(self, values, policy, replicas, rate, seed):
        import numpy as np

        from routesim.batching import runs as br
        from routesim.batching.workload import generate
        from routesim.arrivals import router_stream

        self.br, self.np = br, np
        self.values, self.policy, self.replicas, self.rate, self.seed = values, policy, replicas, rate, seed
        self.horizon_ms = (values["warmup_s"] + values["measure_s"]) * 1000.0
        self.wparams = br.workload_params(values)
        t0 = time.perf_counter()
        self.wl = generate(seed, rate, (), self.horizon_ms, self.wparams)
        self.gen_s = time.perf_counter() - t0
        self.params = br.params_row(values, policy, n_replicas=replicas).reshape(1)
        self.packed = br.Packed.of([self.wl])
        count = br.router_draws(policy, values["choices"], len(self.wl), values["max_attempts"], values)
        self.ru = router_stream(seed, count)
        self.ru_off = np.array([0, count], np.int64)
        self.factors = np.ones((1, replicas))
        self.events = br.event_rows([])

    def generate(self):
        from routesim.batching.workload import generate
        return generate(self.seed, self.rate, (), self.horizon_ms, self.wparams)

    def simulate(self, shared=False):
        """The run's metrics. ``shared``: its workload's part of the scheduler's state
        (``scheduler.workload``: the vllm mode's prompt keys) as a sweep's run has it when
        another run of the grid on the same workload made it (kept by ``packed.shared``);
        else (a single run, and every repeat of one) made by this run."""
        if not shared:
            self.packed.shared.clear()
        m, rep = self.br.simulate(self.params, self.factors, self.events, self.packed, self.ru, self.ru_off)
        return m[0]

    def keys(self):
        """The run's workload's part of the scheduler's state made alone (what a single
        run makes, and a grid once per workload)."""
        from routesim.batching import scheduler
        pk = self.packed
        return scheduler.workload(self.params[0], pk.seg_key, pk.seg_len, pk.seg_off, pk.prompt, pk.output)

    def floor(self):
        """The floor kernel on this run's workload: (iterations, mean batch)."""
        from .floor import floor_run_nb

        v = self.values
        return floor_run_nb(self.packed.t, self.packed.prompt, self.packed.output, self.replicas, self.horizon_ms,
                            self.horizon_ms + v["drain_s"] * 1000.0, int(v["allowance_tokens"]),
                            int(v["block_tokens"]), int(v["kv_blocks"]), int(v["max_batch"]),
                            int(v["max_batched_tokens"]), int(v["waiting_cap"]), float(v["step_ms_base"]),
                            float(v["step_ms_per_prefill_token"]), float(v["step_ms_per_prefill_token_pair"]),
                            float(v["step_ms_per_decode_sequence"]), float(v["step_ms_per_kv_token"]))

    def best(self, fn, repeats):
        """(best wall s, best CPU s, value of the last call)."""
        wall = cpu = float("inf")
        value = None
        for _ in range(max(1, repeats)):
            c0, t0 = time.process_time(), time.perf_counter()
            value = fn()
            wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
        return wall, cpu, value


def peers(replicas=8, rate=40.0, warmup_s=10.0, measure_s=5.0, policies=PEER_POLICIES, seed=1,
          repeats=15):
    """The engine and the naive reference on the same short runs, one thread (run with
    NUMBA_NUM_THREADS=1), simulation only (both are handed the same workload)."""
    ref = from_tests("token_reference")

    values = _values(warmup_s=warmup_s, measure_s=measure_s)
    out = []
    for policy in policies:
        r = _Run(values, policy, replicas, rate, seed)
        r.simulate()                                     # load the compiled kernels
        e_wall, e_cpu, m = r.best(r.simulate, repeats)
        wl = ref.Workload(t=[float(x) for x in r.wl.t_ms], prompt=[int(x) for x in r.wl.prompt],
                          output=[int(x) for x in r.wl.output], key=[float(x) for x in r.wl.key],
                          blocks=[[int(b) for b in r.wl.block_ids(k)] for k in range(len(r.wl))])
        c0, t0 = time.process_time(), time.perf_counter()
        want = ref.simulate(wl, values, [1.0] * replicas, [], policy, seed, check=False)
        r_wall, r_cpu = time.perf_counter() - t0, time.process_time() - c0
        differ = [n for n in COUNTS if int(m[n]) != int(want[n])]
        out.append(dict(policy=policy, requests=len(r.wl), iterations=int(m["iterations"]),
                        completed=int(m["completed"]), reference_completed=int(want["completed"]),
                        differ=differ, engine_s=e_wall, engine_cpu_s=e_cpu, reference_s=r_wall,
                        reference_cpu_s=r_cpu, gen_s=r.gen_s))
    emit(dict(runs=out, replicas=replicas, rate=rate, warmup_s=warmup_s, measure_s=measure_s,
              peak_rss=rss_now()[1]))


def _variants(base, overrides):
    """{name: _Run}: ``base``'s run (its workload and router stream, shared) under each
    ``{name: {parameter: value}}`` of ``overrides`` (flat parameter names, over base's)."""
    out = {}
    for name, changes in overrides.items():
        r = _Run.__new__(_Run)
        r.__dict__.update(base.__dict__)
        r.values = dict(base.values, **changes)
        r.params = base.br.params_row(r.values, base.policy, n_replicas=base.replicas).reshape(1)
        out[name] = r
    return out


def _alternately(runs, repeats):
    """Simulate the ``{name: _Run}`` once each (loading their kernels), then in turn
    ``repeats`` rounds: {name: best CPU s}, {name: the last run's metrics}."""
    for r in runs.values():
        r.simulate()
    best, out = {name: float("inf") for name in runs}, {}
    for _ in range(max(1, repeats)):
        for name, r in runs.items():
            _, cpu, m = r.best(r.simulate, 1)
            best[name] = min(best[name], cpu)
            out[name] = m
    return best, out


def realtime(replicas=8, rate=40.0, warmup_s=10.0, measure_s=50.0, policies=POLICIES, seeds=(1, 2),
             repeats=3):
    """60 s runs of the example cluster, one by one, one thread: per run the best of
    ``repeats`` simulations, and the workload generation's best apart."""
    values = _values(warmup_s=warmup_s, measure_s=measure_s)
    rows = []
    floors = []
    for policy in policies:
        for seed in seeds:
            r = _Run(values, policy, replicas, rate, seed)
            r.simulate()
            r.floor()
            wall = cpu = f_cpu = float("inf")
            for _ in range(max(1, repeats)):  # engine and floor alternately, best of each
                w, c, m = r.best(r.simulate, 1)
                wall, cpu = min(wall, w), min(cpu, c)
                if policy == "least_tokens":
                    f_cpu = min(f_cpu, r.best(r.floor, 1)[1])
            gen = r.best(r.generate, repeats)[1] if policy == policies[0] else None
            rows.append(dict(policy=policy, seed=seed, sim_s=wall, sim_cpu_s=cpu, gen_s=gen,
                             requests=len(r.wl), iterations=int(m["iterations"]),
                             completed=int(m["completed"]), batch_mean=float(m["batch_mean"])))
            if policy == "least_tokens":  # the floor routes by least_tokens: against that policy
                it, batch = r.floor()
                floors.append(dict(seed=seed, cpu_s=f_cpu, iterations=int(it), batch_mean=float(batch),
                                   engine_cpu_s=cpu, engine_iterations=int(m["iterations"]),
                                   engine_batch_mean=float(m["batch_mean"])))
    emit(dict(runs=rows, floor=floors, horizon_s=warmup_s + measure_s, replicas=replicas, rate=rate,
              peak_rss=rss_now()[1]))


def drain(replicas=8, rate=40.0, warmup_s=10.0, measure_s=50.0, policies=("least_tokens", "round_robin"),
          seeds=(1, 2), repeats=5):
    """What the drain costs (token-model.md's ``drain_s``): the same 60 s runs with
    ``drain_s = 0`` (stop at the horizon) and at the default (the cohort finishes),
    simulated alternately, one thread, best of ``repeats`` each."""
    rows = []
    for policy in policies:
        for seed in seeds:
            base = _Run(_values(warmup_s=warmup_s, measure_s=measure_s), policy, replicas, rate, seed)
            runs = _variants(base, {0.0: {"drain_s": 0.0}, None: {}})
            best, out = _alternately(runs, repeats)
            rows.append(dict(policy=policy, seed=seed, drain_s=runs[None].values["drain_s"],
                             off_cpu_s=best[0.0], on_cpu_s=best[None],
                             off_iterations=int(out[0.0]["iterations"]),
                             on_iterations=int(out[None]["iterations"]),
                             off_unfinished=int(out[0.0]["unfinished"]),
                             on_unfinished=int(out[None]["unfinished"])))
    emit(dict(runs=rows, replicas=replicas, rate=rate, horizon_s=warmup_s + measure_s))


MODES = {"reserve": {}, "vllm": {"scheduler": "vllm", "async_scheduling": False},
         "vllm_async": {"scheduler": "vllm", "async_scheduling": True}}
"""The schedulers ``modes`` times: {name: parameter overrides}; reserve is the baseline."""


def _shared_alternately(runs, repeats):
    """As :func:`_alternately`, each round timing each run three ways: a single run (its
    workload's part of the scheduler's state made in it), that part alone
    (``_Run.keys``), and the run with that part made before (``simulate(shared=True)``,
    as a sweep's other runs of the workload have it). Returns ({name: best CPU s} of
    each way, {name: the last run's metrics})."""
    for r in runs.values():
        r.simulate()
        r.keys()
    single, keys, given = ({name: float("inf") for name in runs} for _ in range(3))
    out = {}
    for _ in range(max(1, repeats)):
        for name, r in runs.items():
            _, cpu, m = r.best(r.simulate, 1)
            single[name] = min(single[name], cpu)
            keys[name] = min(keys[name], r.best(r.keys, 1)[1])
            r.simulate(shared=True)  # (makes it, untimed)
            _, cpu, given_m = r.best(lambda: r.simulate(shared=True), 1)
            given[name] = min(given[name], cpu)
            if given_m.tobytes() != m.tobytes():
                raise AssertionError(f"{name}: a run with its workload's part given is not the run")
            out[name] = m
    return single, keys, given, out


def modes(replicas=8, rate=40.0, warmup_s=10.0, measure_s=50.0, policies=("least_tokens", "round_robin"),
          seeds=(1, 2), repeats=3):
    """The replica schedulers (``[replica] scheduler``: "reserve", the default, and
    "vllm", docs/model.md, with its synchronous loop and with vLLM's asynchronous one,
    :data:`MODES`) on the same 60 s runs of the example cluster (one workload per policy
    and seed, handed to each), simulated alternately in one process, best of ``repeats``
    each, one thread: CPU ms per run and ns per iteration of each.

    A run's figure (``{mode}_cpu_s``) counts what the scheduler takes from the workload
    alone (``scheduler.workload``: the vllm mode's prompt keys, made once per workload in
    a sweep, ``runs.Packed.shared``) amortised over the ``policies``, which share the
    workload of a seed as a sweep's policies do: the run with that part given, plus the
    part's cost (``{mode}_keys_cpu_s``, per workload) over ``len(policies)``. A single
    run's, which makes the part itself, is ``{mode}_single_cpu_s``."""
    rows = []
    for policy in policies:
        for seed in seeds:
            base = _Run(_values(warmup_s=warmup_s, measure_s=measure_s), policy, replicas, rate, seed)
            runs = _variants(base, MODES)
            single, keys, given, out = _shared_alternately(runs, repeats)
            best = {s: given[s] + keys[s] / len(policies) for s in runs}
            rows.append(dict(policy=policy, seed=seed, requests=len(base.wl),
                             **{f"{s}_cpu_s": best[s] for s in runs},
                             **{f"{s}_single_cpu_s": single[s] for s in runs},
                             **{f"{s}_keys_cpu_s": keys[s] for s in runs},
                             **{f"{s}_given_cpu_s": given[s] for s in runs},
                             **{f"{s}_iterations": int(out[s]["iterations"]) for s in runs},
                             **{f"{s}_completed": int(out[s]["completed"]) for s in runs},
                             **{f"{s}_batch_mean": float(out[s]["batch_mean"]) for s in runs}))
    emit(dict(runs=rows, replicas=replicas, rate=rate, horizon_s=warmup_s + measure_s, repeats=repeats))


PD = {"co-located": {"prefill_replicas": 0, "decode_replicas": 0},
      "pd": {"prefill_replicas": 2, "decode_replicas": 6}}
"""What ``pd`` times: the example cluster co-located and split 2:6 into prefill and decode
pools (docs/model.md "Prefill/decode disaggregation", the [pools] defaults otherwise)."""


def pd(replicas=8, rate=40.0, warmup_s=10.0, measure_s=50.0, policies=("least_tokens", "round_robin"),
       seeds=(1, 2), repeats=3):
    """What prefill/decode disaggregation costs the engine: the same 60 s runs of the
    example cluster co-located and with pools (:data:`PD`; one workload per policy and
    seed, handed to both; the router stream drawn for the pools' two decisions a request),
    simulated alternately in one process, best of ``repeats`` each, one thread: CPU ms
    per run and ns per iteration of each."""
    rows = []
    for policy in policies:
        for seed in seeds:
            base = _Run(_values(warmup_s=warmup_s, measure_s=measure_s, **PD["pd"]), policy, replicas, rate, seed)
            runs = _variants(base, PD)
            best, out = _alternately(runs, repeats)
            rows.append(dict(policy=policy, seed=seed, requests=len(base.wl),
                             **{f"{s}_cpu_s": best[s] for s in runs},
                             **{f"{s}_iterations": int(out[s]["iterations"]) for s in runs},
                             **{f"{s}_completed": int(out[s]["completed"]) for s in runs}))
    emit(dict(runs=rows, replicas=replicas, rate=rate, horizon_s=warmup_s + measure_s, repeats=repeats))


SIGNALS = {"fresh": ("fresh", {}),
           "periodic50": ("50 ms periodic", {"signal_mode": "periodic", "period_ms": 50.0}),
           "periodic10": ("10 ms periodic", {"signal_mode": "periodic", "period_ms": 10.0}),
           "local50": ("50 ms periodic_local", {"signal_mode": "periodic_local", "period_ms": 50.0})}
"""The signals a run's routers may read (token-model.md §3): {id: (words, parameter overrides)}."""


def signals(replicas=8, rate=46.0, warmup_s=1200.0, measure_s=60.0, policy="least_tokens", seeds=(1, 2, 3, 4),
            repeats=6):
    """What a published signal costs: the least-outstanding study's runs (8 default
    replicas at 46 req/s, 1,200 s of warm-up + 60 s, drained) with fresh signals and
    each of :data:`SIGNALS`, one workload per seed handed to all, simulated alternately
    in one process, best of ``repeats`` each, one thread."""
    rows = []
    for seed in seeds:
        base = _Run(_values(warmup_s=warmup_s, measure_s=measure_s), policy, replicas, rate, seed)
        best, out = _alternately(_variants(base, {k: changes for k, (_, changes) in SIGNALS.items()}), repeats)
        rows.append(dict(seed=seed, requests=len(base.wl), **{f"{k}_cpu_s": best[k] for k in SIGNALS},
                         **{f"{k}_iterations": int(out[k]["iterations"]) for k in SIGNALS}))
    emit(dict(runs=rows, replicas=replicas, rate=rate, policy=policy, warmup_s=warmup_s, measure_s=measure_s,
              repeats=repeats))


CURVES = {
    # kind: (values, about)
    "replicas": ([8, 32, 128, 512, 1024],
                 "`power_of_d` (d = 2, score tokens), 5 req/s per replica (40 req/s on 8), "
                 "3 s warm-up + 2 s (short, for 1,024 replicas' sake); 32 / replicas seeds, at least 1"),
    "batch": ([5, 10, 20, 40, 60, 80, 120],
              "rate in req/s on 8 replicas (capacity about 60 req/s), `power_of_d`, 10 s + 20 s, "
              "2 seeds: the mean running batch grows with the rate"),
    "decode": ([32, 128, 512, 2048],
               "median output tokens of a request (`chat.output.median`; `max` 16 x median, no long "
               "class), 8 replicas at 20 req/s, `power_of_d`, 10 s + 20 s, 2 seeds: the batch grows "
               "with the outputs while the requests per iteration stay few, so this is the curve on "
               "which time per iteration should be flat (decoding is O(1) per sequence not due for "
               "anything); on the batch curve above, each iteration also carries more requests' "
               "work (routing, admission, prefill, completion) as the rate rises"),
    "horizon": ([15, 30, 60, 120, 300],
                "total horizon in s (10 s warm-up), 8 replicas at 40 req/s, `power_of_d`, "
                "seeds for about 240 simulated seconds per point. The default workload is not "
                "stationary over these horizons: its long class (2 %, outputs of 2,000 tokens "
                "median, up to 32,768) lives for minutes, so the batch and the requests per "
                "iteration keep growing; the next curve takes the long class out"),
    "horizon-chat": ([15, 60, 300],
                     "as above without the long class (`p_long = 0`): a stationary load"),
}


def _point(kind, value):
    """(parameter overrides, replicas, rate, seeds) of one point of a curve."""
    if kind == "replicas":
        return dict(warmup_s=3.0, measure_s=2.0), value, 5.0 * value, max(1, 32 // value)
    if kind == "batch":
        return dict(warmup_s=10.0, measure_s=20.0), 8, float(value), 2
    if kind == "decode":
        return (dict(warmup_s=10.0, measure_s=20.0, chat_output_median=value, chat_output_max=16 * value,
                     p_long=0.0), 8, 20.0, 2)
    if kind in ("horizon", "horizon-chat"):
        extra = dict(p_long=0.0) if kind == "horizon-chat" else {}
        return dict(warmup_s=10.0, measure_s=value - 10.0, **extra), 8, 40.0, max(1, 240 // value)
    raise ValueError(kind)


def scale(kind, values=None, policy="power_of_d", repeats=2):
    """One curve, one point after another in this process (one thread): time per run,
    per iteration, per request (CPU time of the one thread). A tiny run loads the compiled kernels first; a run whose
    first timed simulation takes more than 2 s is not repeated."""
    _Run(_values(warmup_s=0.2, measure_s=0.3), policy, 8, 40.0, 1).simulate()
    points = []
    for value in values or CURVES[kind][0]:
        overrides, replicas, rate, seeds = _point(kind, value)
        vals = _values(**overrides)
        sim = gen = 0.0
        iters = reqs = 0
        batch = []
        for seed in range(1, seeds + 1):
            r = _Run(vals, policy, replicas, rate, seed)
            wall, cpu, m = r.best(r.simulate, 1)
            if wall < 2.0 and repeats > 1:
                cpu = min(cpu, r.best(r.simulate, repeats - 1)[1])
            sim += cpu
            gen += r.gen_s
            iters += int(m["iterations"])
            reqs += len(r.wl)
            batch.append(float(m["batch_mean"]))
        points.append(dict(kind=kind, value=value, replicas=replicas, rate=rate, runs=seeds,
                           requests=reqs, iterations=iters, sim_s=sim, gen_s=gen,
                           ns_per_iteration=sim / iters * 1e9 if iters else float("nan"),
                           us_per_request=sim / reqs * 1e6 if reqs else float("nan"),
                           ms_per_run=sim / seeds * 1e3, batch_mean=sum(batch) / len(batch),
                           peak_rss=rss_now()[1]))
    emit(dict(points=points))


# =====================================================================================
# The section (in the suite's process)
# =====================================================================================

def _task(name, env, timeout=1800.0, **kwargs):
    return run_measured([sys.executable, "-m", "benchmarks.batching", name, json.dumps(kwargs)],
                        env=env, timeout=timeout)


def section(suite):
    """Run every batching measurement; figures into suite.fig, text into
    suite.detail["batching_text"]. (The report is imported here, not at the top: the
    measurements above run this module in fresh processes, which have no use for it.)"""
    from . import report

    q = suite.quick
    cache = suite.tmp / "cache-batching"       # cold command first, then every warm figure
    env = {"NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    one = dict(env, NUMBA_NUM_THREADS="1")
    fig = suite.fig
    sweep = SWEEP
    sweep_note = "" if sweep.exists() else " (sweeps/batching.toml missing: not measured)"

    texts = []
    if not sweep_note:
        argv = [sys.executable, "-m", "routesim.sweep", str(sweep), "--out", str(suite.tmp / "bout")]
        log("batching: whole command, cold (compiling into an empty cache)")
        cold = run_measured(argv, env=env, timeout=3600)
        best = None
        for i in range(1 if q else 2):
            log(f"batching: whole command, warm ({i + 1})")
            c = run_measured(argv, env=env, timeout=3600)
            best = c if best is None or c.wall < best.wall else best
        fig.update({"batching.cold_s": cold.wall, "batching.cold_cpu_s": cold.cpu,
                    "batching.cold_rss": cold.max_rss, "batching.warm_s": best.wall,
                    "batching.warm_cpu_s": best.cpu, "batching.warm_rss": best.max_rss,
                    "batching.peak_rss": max(cold.max_rss, best.max_rss)})
        suite.note_load()
        # Compilation alone: the example shrunk to 3 s, one load and one seed (every policy,
        # so the same kernels: tests/test_refcounts.py's small example), cold then warm in
        # one cache; the difference is what compiling costs a first run.
        small = suite.tmp / "batching-small.toml"
        small.write_text(from_tests("test_refcounts").small_example())
        cenv = dict(env, NUMBA_CACHE_DIR=str(suite.tmp / "cache-compile"))
        argv = [sys.executable, "-m", "routesim.sweep", str(small), "--quiet", "--out", str(suite.tmp / "sout")]
        log("batching: compilation alone (the example shrunk to 3 s), cold then warm")
        c_cold = run_measured(argv, env=cenv, timeout=3600)
        c_warm = run_measured(argv, env=cenv, timeout=3600)
        fig.update({"batching.compile_s": c_cold.wall - c_warm.wall,
                    "batching.compile_cpu_s": c_cold.cpu - c_warm.cpu})
        suite.note_load()
        # The least-outstanding study: every sweep, figures and document into TMP, once
        # the cache holds what the example did not compile (the timeline kernels, the
        # vllm scheduler's): the study's verdict tests run reduced stages of the same
        # designs (minutes, where a first run of the whole study takes as long as the
        # warm one). What they leave uncompiled, the timed run compiles (counted in it).
        out = suite.tmp / "study"
        argv = [sys.executable, "-m", "routesim.least_outstanding", "--quiet",
                "--results-root", str(out / "results"), "--figures", str(out / "figures"),
                "--out", str(out / "study.md")]
        log("batching: least-outstanding study: its verdict tests, to fill the cache")
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                        *sorted(str(f) for f in (ROOT / "tests").glob("test_least_outstanding_*.py"))],
                       env={**os.environ, **env}, cwd=ROOT, capture_output=True, timeout=3600)
        log("batching: least-outstanding study, whole command, warm")
        study = run_measured(argv, env=env, timeout=3600)
        fig.update({"batching.study_s": study.wall, "batching.study_cpu_s": study.cpu,
                    "batching.study_rss": study.max_rss})
        suite.note_load()

    log("batching: engine and naive reference on the same short runs, 1 thread")
    p = _task("peers", one, **({"policies": ["power_of_d"]} if q else {})).result
    runs = p["runs"]
    e_cpu = sum(r["engine_cpu_s"] for r in runs) / len(runs)
    r_cpu = sum(r["reference_cpu_s"] for r in runs) / len(runs)
    agree = sum(not r["differ"] for r in runs)
    fig.update({"batching.peer_engine_ms": e_cpu * 1e3, "batching.peer_reference_ms": r_cpu * 1e3,
                "batching.reference_ratio": r_cpu / e_cpu if agree == len(runs) else float("nan"),
                "batching.peer_agree": agree, "batching.peer_runs": len(runs)})
    prow = [["policy", "requests", "iterations", "completed (engine / reference)",
             "engine CPU ms", "reference CPU ms", "reference / engine"]]
    for r in runs:
        prow.append([f"`{r['policy']}`", f"{r['requests']:,}", f"{r['iterations']:,}",
                     f"{r['completed']:,} / {r['reference_completed']:,}"
                     + (f" (differ: {', '.join(r['differ'])})" if r["differ"] else ""),
                     report.fmt(r["engine_cpu_s"] * 1e3), report.fmt(r["reference_cpu_s"] * 1e3),
                     f"{r['reference_cpu_s'] / r['engine_cpu_s']:,.0f}x"])
    suite.note_load()

    log("batching: 60 s runs against real time, 1 thread")
    rt = _task("realtime", one, **({"policies": ["power_of_d", "least_tokens"], "seeds": [1]} if q else {})).result
    rr = rt["runs"]
    sim = sum(r["sim_cpu_s"] for r in rr) / len(rr)
    sim_wall = sum(r["sim_s"] for r in rr) / len(rr)
    gen = min(r["gen_s"] for r in rr if r["gen_s"] is not None)
    iters = sum(r["iterations"] for r in rr)
    reqs = sum(r["requests"] for r in rr)
    total_sim = sum(r["sim_cpu_s"] for r in rr)
    fig.update({"batching.run60_ms": sim * 1e3, "batching.run60_wall_ms": sim_wall * 1e3,
                "batching.gen60_ms": gen * 1e3,
                "batching.realtime_x": rt["horizon_s"] / (sim + gen),
                "batching.realtime_sim_only_x": rt["horizon_s"] / sim,
                "batching.iter_per_core_s": iters / total_sim, "batching.req_per_core_s": reqs / total_sim,
                "batching.realtime_rss": rt["peak_rss"]})
    fl = rt["floor"]
    if fl:
        e_ns = sum(f["engine_cpu_s"] for f in fl) / sum(f["engine_iterations"] for f in fl) * 1e9
        f_ns = sum(f["cpu_s"] for f in fl) / sum(f["iterations"] for f in fl) * 1e9
        fig.update({"batching.ns_per_iteration": e_ns, "batching.floor_ns_per_iteration": f_ns,
                    "batching.floor_ratio": e_ns / f_ns})
        log(f"batching: least_tokens engine {e_ns:.0f} ns per iteration, floor kernel {f_ns:.0f} ns "
            f"per iteration: {e_ns / f_ns:.2f}x the floor")
    by_policy = {}
    for r in rr:
        by_policy.setdefault(r["policy"], []).append(r)
    rtrow = [["policy", "CPU ms per run", "wall ms per run", "iterations per run", "mean batch",
              "ns per iteration", "µs per request", "x real time"]]
    for pol, rs in by_policy.items():
        s = sum(r["sim_cpu_s"] for r in rs)
        sw = sum(r["sim_s"] for r in rs)
        it = sum(r["iterations"] for r in rs)
        rq = sum(r["requests"] for r in rs)
        rtrow.append([f"`{pol}`", report.fmt(s / len(rs) * 1e3), report.fmt(sw / len(rs) * 1e3),
                      f"{it / len(rs):,.0f}",
                      report.fmt(sum(r["batch_mean"] for r in rs) / len(rs)),
                      report.fmt(s / it * 1e9), report.fmt(s / rq * 1e6),
                      f"{rt['horizon_s'] / (s / len(rs)):,.0f}x"])
    suite.note_load()

    log("batching: what the drain costs, 1 thread")
    dr = _task("drain", one, **({"policies": ["least_tokens"], "seeds": [1]} if q else {})).result
    drr = dr["runs"]
    off = sum(r["off_cpu_s"] for r in drr)
    on = sum(r["on_cpu_s"] for r in drr)
    off_it = sum(r["off_iterations"] for r in drr)
    on_it = sum(r["on_iterations"] for r in drr)
    fig.update({"batching.drain_ratio": on / off, "batching.drain_iter_ratio": on_it / off_it,
                "batching.drain_off_ns_iter": off / off_it * 1e9, "batching.drain_on_ns_iter": on / on_it * 1e9})
    drow = [["policy", "seed", "CPU ms per run, drain_s = 0", f"drained (drain_s = {drr[0]['drain_s']:g})",
             "ratio", "iterations (0 / drained)", "ns per iteration (0 / drained)", "unfinished (0 / drained)"]]
    for r in drr:
        drow.append([f"`{r['policy']}`", str(r["seed"]), report.fmt(r["off_cpu_s"] * 1e3),
                     report.fmt(r["on_cpu_s"] * 1e3), f"{r['on_cpu_s'] / r['off_cpu_s']:.2f}x",
                     f"{r['off_iterations']:,} / {r['on_iterations']:,}",
                     f"{report.fmt(r['off_cpu_s'] / r['off_iterations'] * 1e9)} / "
                     f"{report.fmt(r['on_cpu_s'] / r['on_iterations'] * 1e9)}",
                     f"{r['off_unfinished']:,} / {r['on_unfinished']:,}"])
    suite.note_load()

    log("batching: the vllm scheduler (both loops) against reserve on the same runs, 1 thread")
    mo = _task("modes", one, **({"policies": ["least_tokens"], "seeds": [1]} if q else {})).result
    mor = mo["runs"]
    ms = {s: sum(r[f"{s}_cpu_s"] for r in mor) / len(mor) * 1e3 for s in MODES}
    ns = {s: sum(r[f"{s}_cpu_s"] for r in mor) / sum(r[f"{s}_iterations"] for r in mor) * 1e9 for s in MODES}
    for s in MODES:
        fig.update({f"batching.{s}_run60_ms": ms[s], f"batching.{s}_ns_per_iteration": ns[s]})
        if s != "reserve":
            fig.update({f"batching.{s}_ratio": ms[s] / ms["reserve"],
                        f"batching.{s}_iteration_ratio": ns[s] / ns["reserve"]})
    fig["batching.vllm_async_sync_ratio"] = ms["vllm_async"] / ms["vllm"]
    log(f"batching: vllm {ms['vllm']:.0f} ms per run, vllm async {ms['vllm_async']:.0f} ms, reserve "
        f"{ms['reserve']:.0f} ms: {ms['vllm'] / ms['reserve']:.2f}x and {ms['vllm_async'] / ms['reserve']:.2f}x "
        f"(async / sync {ms['vllm_async'] / ms['vllm']:.2f}x); per iteration {ns['vllm']:.0f} / "
        f"{ns['vllm_async']:.0f} / {ns['reserve']:.0f} ns")
    names = " / ".join(MODES)
    morow = [["policy", "seed", "requests", f"CPU ms per run ({names})", "ratios to reserve",
              f"CPU ms a single run ({names})", f"CPU ms of the workload's keys ({names})",
              f"iterations ({names})", f"ns per iteration ({names})", f"mean batch ({names})"]]
    for r in mor:
        morow.append([f"`{r['policy']}`", str(r["seed"]), f"{r['requests']:,}",
                      " / ".join(report.fmt(r[f"{s}_cpu_s"] * 1e3) for s in MODES),
                      " / ".join(f"{r[f'{s}_cpu_s'] / r['reserve_cpu_s']:.2f}x" for s in MODES if s != "reserve"),
                      " / ".join(report.fmt(r[f"{s}_single_cpu_s"] * 1e3) for s in MODES),
                      " / ".join(report.fmt(r[f"{s}_keys_cpu_s"] * 1e3) for s in MODES),
                      " / ".join(f"{r[f'{s}_iterations']:,}" for s in MODES),
                      " / ".join(report.fmt(r[f"{s}_cpu_s"] / r[f"{s}_iterations"] * 1e9) for s in MODES),
                      " / ".join(report.fmt(r[f"{s}_batch_mean"]) for s in MODES)])
    suite.note_load()

    log("batching: prefill/decode pools (2:6) against co-located on the same runs, 1 thread")
    pdr = _task("pd", one, **({"policies": ["least_tokens"], "seeds": [1]} if q else {})).result["runs"]
    pd_ms = {s: sum(r[f"{s}_cpu_s"] for r in pdr) / len(pdr) * 1e3 for s in PD}
    fig["batching.pd_ratio"] = pd_ms["pd"] / pd_ms["co-located"]
    log(f"batching: pools {pd_ms['pd']:.0f} ms per run, co-located {pd_ms['co-located']:.0f} ms: "
        f"{fig['batching.pd_ratio']:.2f}x")
    suite.note_load()

    log("batching: what a published signal costs, 1 thread")
    si = _task("signals", one, **({"seeds": [1], "repeats": 2} if q else {})).result
    sir = si["runs"]
    scpu = {k: sum(r[f"{k}_cpu_s"] for r in sir) for k in SIGNALS}
    for k in SIGNALS:
        if k != "fresh":
            fig[f"batching.signal_ratio.{k}"] = scpu[k] / scpu["fresh"]
    log("batching: signals against fresh: " + ", ".join(f"{w} {scpu[k] / scpu['fresh']:.2f}x"
                                                        for k, (w, _) in SIGNALS.items()))
    sirow = [["seed", "requests"] + [f"CPU ms, {w}" for w, _ in SIGNALS.values()]
             + [f"iterations, {w}" for w, _ in SIGNALS.values()]]
    for r in sir:
        sirow.append([str(r["seed"]), f"{r['requests']:,}"] + [report.fmt(r[f"{k}_cpu_s"] * 1e3) for k in SIGNALS]
                     + [f"{r[f'{k}_iterations']:,}" for k in SIGNALS])
    suite.note_load()

    curves = {}
    for kind, (values, about) in CURVES.items():
        vals = values[::2] if q else values
        log(f"batching: scaling in {kind} ({', '.join(map(str, vals))}), 1 thread")
        pts = _task("scale", one, kind=kind, values=vals, timeout=1800).result["points"]
        curves[kind] = pts
        for pt in pts:
            fig[f"batching.scale.{kind}.{pt['value']}"] = pt["ns_per_iteration"]
            fig[f"batching.scale.{kind}.{pt['value']}.us_req"] = pt["us_per_request"]
        suite.note_load()

    # -- text ------------------------------------------------------------------------------
    prev = suite.prev
    texts += [
        "The second replica model (docs/model.md §9, token-model.md): continuous batching over "
        "a paged KV cache, one iteration at a time. Its figures are in the summary and "
        "targets tables above (rows \"batching\"); the details follow. Every engine figure "
        "is one compiled-kernel thread (`NUMBA_NUM_THREADS=1`), so \"per core\" is literal; "
        "the whole command uses both cores.",
        "",
        "### One run against the naive reference",
        "",
        f"{p['replicas']} replicas, {p['warmup_s']:g} s warm-up + {p['measure_s']:g} s at "
        f"{p['rate']:g} req/s, seed 1, default workload and replica; the engine "
        "(`routesim.batching.runs.simulate`, best of 15) and tests/token_reference.py (once) "
        "are handed the same workload, so neither time includes its generation; CPU time of "
        f"one process. Counts ({', '.join(COUNTS)}) agree on {agree}/{len(runs)} runs; the "
        "ratio is reported only when all agree.",
        "",
        report.md_table(prow),
        "",
        "### Against real time",
        "",
        f"A {rt['horizon_s']:g} s run (10 s warm-up + {rt['horizon_s'] - 10:g} s) of "
        f"{rt['replicas']} replicas at {rt['rate']:g} req/s, every policy x "
        f"{len(rr) // len(by_policy)} seed(s), each run alone through "
        "`routesim.batching.runs.simulate` (best of 3), one thread. Per run "
        f"{report.fmt(sim * 1e3)} ms of simulation + {report.fmt(gen * 1e3)} ms of workload "
        f"generation: {fig['batching.realtime_x']:,.0f}x faster than real time "
        f"({fig['batching.realtime_sim_only_x']:,.0f}x without the generation, which a sweep shares "
        f"between its policies); for scale, {PEER_SIM}. Iterations and requests per second per core below are over "
        "simulation time only.",
        "",
        report.md_table(rtrow),
        "",
        "### What the drain costs",
        "",
        f"The same {dr['horizon_s']:g} s runs ({dr['replicas']} replicas, {dr['rate']:g} req/s) "
        "stopped at the horizon (`drain_s = 0`) and drained (the default: the cohort of "
        "requests that arrived before the horizon runs on until it has finished), simulated "
        "alternately in one process, best of 5 each, one thread. A drained run simulates the "
        "cohort's tail as well, so it costs more iterations; the cost per iteration is the "
        f"figure to compare: {report.fmt(fig['batching.drain_off_ns_iter'])} ns undrained, "
        f"{report.fmt(fig['batching.drain_on_ns_iter'])} ns drained; a drained run costs "
        f"{fig['batching.drain_ratio']:.2f}x for {fig['batching.drain_iter_ratio']:.2f}x the iterations.",
        "",
        report.md_table(drow),
        "",
    ]
    texts += [
        "### The vllm scheduler against reserve",
        "",
        f"The same {mo['horizon_s']:g} s runs ({mo['replicas']} replicas, {mo['rate']:g} req/s, "
        "the default workload) with `[replica] scheduler = \"reserve\"` (the default), "
        "`\"vllm\"` with `async_scheduling = false` (the synchronous loop) and `\"vllm\"` with "
        "vLLM's asynchronous loop (docs/model.md), one workload per policy and seed handed to "
        f"each, simulated alternately in one process, best of {mo['repeats']} each, CPU, one "
        f"thread: vllm {report.fmt(fig['batching.vllm_run60_ms'])} ms per run and vllm async "
        f"{report.fmt(fig['batching.vllm_async_run60_ms'])} ms against reserve's "
        f"{report.fmt(fig['batching.reserve_run60_ms'])} ms ({fig['batching.vllm_ratio']:.2f}x and "
        f"{fig['batching.vllm_async_ratio']:.2f}x; async / sync "
        f"{fig['batching.vllm_async_sync_ratio']:.2f}x); "
        f"{report.fmt(fig['batching.vllm_ns_per_iteration'])} and "
        f"{report.fmt(fig['batching.vllm_async_ns_per_iteration'])} ns per iteration against "
        f"{report.fmt(fig['batching.reserve_ns_per_iteration'])} ns "
        f"({fig['batching.vllm_iteration_ratio']:.2f}x and {fig['batching.vllm_async_iteration_ratio']:.2f}x). "
        "The vllm step visits every running request (as vLLM does); the reserve step touches "
        "a decoding sequence only when something happens to it. The asynchronous loop "
        "schedules each batch while the previous one runs (a batch queue of 2). "
        "What a scheduler takes from the workload alone (the vllm mode's prompt keys, "
        "`scheduler.workload`) a sweep makes once per workload and shares among the runs "
        "that have it: a run's figure is the run with its workload's keys given plus their "
        f"cost amortised over the {len({r['policy'] for r in mor})} policies, "
        "which share each seed's workload as a sweep's policies do; the table gives a "
        "single run's figure (the keys made in it) and the keys' own cost per workload.",
        "",
        report.md_table(morow),
        "",
        "### What a published signal costs",
        "",
        f"The least-outstanding study's runs ({si['replicas']} default replicas at {si['rate']:g} req/s, "
        f"`{si['policy']}`, {si['warmup_s']:,g} s of warm-up + {si['measure_s']:g} s, drained) with fresh "
        "signals and with each replica's load published periodically (`[signals] mode`, "
        "`period_ms`; token-model.md §3), one workload per seed handed to every variant, "
        f"simulated alternately in one process, best of {si['repeats']} each, CPU, one thread. A run "
        "with a published signal costs, against a fresh one (the sums over the seeds): "
        + ", ".join(f"{w} {fig[f'batching.signal_ratio.{k}']:.2f}x" for k, (w, _) in SIGNALS.items() if k != "fresh")
        + ". The signal changes where requests go, so the iterations differ a little too.",
        "",
        report.md_table(sirow),
        "",
    ]
    if fl:
        texts += [
            "### Against the floor",
            "",
            "The floor kernel (benchmarks/floor.py: least_tokens routing, FIFO, chunked prefill, "
            "paged-KV block counts, a heap of completions per replica, the step formula; no prefix "
            "cache, preemption, failures, signals or metrics) on the same least_tokens workloads, "
            "in the same process, timed alternately with the engine (best of 3 each, CPU, one "
            f"thread): engine {report.fmt(fig['batching.ns_per_iteration'])} ns per iteration (mean "
            f"batch {report.fmt(sum(f['engine_batch_mean'] for f in fl) / len(fl))}), floor "
            f"{report.fmt(fig['batching.floor_ns_per_iteration'])} ns per iteration (mean batch "
            f"{report.fmt(sum(f['batch_mean'] for f in fl) / len(fl))}): "
            f"{fig['batching.floor_ratio']:.2f}x the floor (target: at most 3x).",
            "",
        ]
    texts += [
        "### Scaling (time per iteration should stay flat)",
        "",
        "One process per curve, one thread, each run the best of 2 simulations (1 when it "
        "takes over 2 s); "
        "CPU time; ns per iteration = simulation time over iterations started (all replicas), "
        "µs per request over arrivals (warm-up included).",
        "",
    ]
    for kind, pts in curves.items():
        rows = [["value", "replicas", "req/s", "runs", "requests", "iterations", "requests per iteration",
                 "mean batch", "ms per run", "ns per iteration", "previous", "µs per request",
                 "peak RSS MiB"]]
        for pt in pts:
            key = f"batching.scale.{kind}.{pt['value']}"
            rows.append([str(pt["value"]), str(pt["replicas"]), report.fmt(pt["rate"]), str(pt["runs"]),
                         f"{pt['requests']:,}", f"{pt['iterations']:,}",
                         report.fmt(pt["requests"] / pt["iterations"] if pt["iterations"] else None),
                         report.fmt(pt["batch_mean"]),
                         report.fmt(pt["ms_per_run"]), report.fmt(pt["ns_per_iteration"]),
                         report.fmt(prev.get(key)), report.fmt(pt["us_per_request"]),
                         report.fmt(pt["peak_rss"], 2**-20)])
        texts += [f"#### {kind}", "", CURVES[kind][1] + ".", "", report.md_table(rows), ""]
    if sweep_note:
        texts += [f"Whole command{sweep_note}.", ""]
    else:
        import tomllib
        sim = tomllib.loads(sweep.read_text())["simulation"]
        texts += [
            "### Whole command",
            "",
            "`python -m routesim.sweep sweeps/batching.toml --out TMP` (432 runs: 9 policies x "
            f"3 loads x 16 seeds, {sim['warmup_s']:,g} s of warm-up + {sim['measure_s']:,g} s, "
            f"drained for up to {sim['drain_s']:,g} s, 8 replicas; table printed, Datasets written), 2 "
            "threads. *Cold*: `NUMBA_CACHE_DIR` at a new, empty folder (every kernel compiles, "
            "as on a fresh clone); *warm*: the same command again with that folder, best of 2. "
            f"Cold {report.fmt(fig['batching.cold_s'])} s wall, {report.fmt(fig['batching.cold_cpu_s'])} s "
            f"CPU, peak RSS {report.fmt(fig['batching.cold_rss'], 2**-20)} MiB; warm "
            f"{report.fmt(fig['batching.warm_s'])} s wall, {report.fmt(fig['batching.warm_cpu_s'])} s CPU "
            f"(both threads), peak RSS {report.fmt(fig['batching.warm_rss'], 2**-20)} MiB. The "
            "machine is shared: compare the CPU times when the wall times look high.",
            "",
            "### The least-outstanding-routing study",
            "",
            "`python -m routesim.least_outstanding` with its results, figures and document in "
            "a temporary folder (every `sweeps/token-routing*.toml`, then every figure, the "
            "timelines they trace and the document), 2 threads, in the example's compilation "
            "cache after the study's verdict tests (tests/test_least_outstanding_*.py: reduced "
            "stages of the same designs) have compiled what the example does not use: "
            f"{report.fmt(fig['batching.study_s'])} s wall, {report.fmt(fig['batching.study_cpu_s'])} s "
            f"CPU, peak RSS {report.fmt(fig['batching.study_rss'], 2**-20)} MiB (target: at most "
            "10 minutes warm, issue 23's for the study rebuilt at 1,200 s warm-ups and 16 seeds).",
            "",
        ]
    suite.detail["batching_text"] = "\n".join(texts)


if __name__ == "__main__":
    name, args = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    globals()[name](**args)
