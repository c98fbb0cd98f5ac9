"""The compiled engine's scheduler = "vllm" mode against vLLM 0.30.0's own scheduler
(issue 22): the 400 recorded cases (conformance/recorded/, VLLM-SCHEDULER.md §3), each
replayed on one replica through the engine's run kernel (``engine.run_one_nb``, as the
sweep runs it, with the case's requests as a trace's rows and their block ids in full),
compared request by request with the recording: first-token and completion times bit
for bit, and per case the preemptions, completions and prefix-hit tokens.

The same for vLLM's default loop, asynchronous scheduling (issue 40; the engine's
``async_scheduling = true``, routesim/batching/vllm_async_replica.py): the 400 cases of
conformance/recorded/vllm-0.30.0-async.json.gz, recorded with vLLM's own
``AsyncScheduler`` and batch queue of 2 (VLLM-SCHEDULER.md §9).

All 400 cases of a recording go through one compiled call (``_run_cases``), so the
suite costs one compilation per loop and well under a second of simulation.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numba as nb
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from conformance import record  # noqa: E402
from routesim.batching import runs as br  # noqa: E402
from routesim.batching.dtypes import KEPT, METRICS, Fate  # noqa: E402
from routesim.batching.engine import run_one_nb  # noqa: E402
from routesim.batching import vllm_async_replica, vllm_replica  # noqa: E402
from routesim.batching.workload import TokenWorkload, segments_from_ids  # noqa: E402

import token_reference as ref  # noqa: E402

KEY_STEP = 0.6180339887498949


def case_values(case):
    """The case as flat parameter values: one replica, every request in the cohort (no
    warm-up) and a window long enough for every step (counters are of the window); the
    loop the case was recorded with (``async_scheduling``)."""
    rep = case["replica"]
    c = rep["step_ms"]
    v = ref.defaults()
    v.update(max_batch=rep["max_num_seqs"], kv_blocks=rep["num_blocks"], block_tokens=rep["block_size"],
             max_batched_tokens=rep["max_num_batched_tokens"], chunked_prefill=rep["chunked_prefill"],
             step_ms_base=c["base"], step_ms_per_prefill_token=c["per_prefill_token"],
             step_ms_per_prefill_token_pair=c["per_prefill_token_pair"],
             step_ms_per_decode_sequence=c["per_decode_sequence"], step_ms_per_kv_token=c["per_kv_token"],
             warmup_s=0.0, measure_s=1e7, drain_s=0.0, scheduler="vllm", prefix_caching=bool(rep["prefix_caching"]),
             async_scheduling=bool(rep.get("async_scheduling", False)))
    if "timeout_ms" in rep:   # the timeout cases (vLLM's aborts, VLLM-MODE.md 18)
        v.update(timeout_ms=float(rep["timeout_ms"]))
    return v


def case_workload(case):
    """The case's requests as the engine's workload (a CSV trace's rows with every block id)."""
    reqs = case["requests"]
    ids = [i for q in reqs for i in q["block_ids"]]
    off = np.cumsum([0] + [len(q["block_ids"]) for q in reqs])
    seg_key, seg_len, seg_off = segments_from_ids(np.array(ids, np.int64), off)
    n = len(reqs)
    return TokenWorkload(t_ms=np.array([q["arrival_ms"] for q in reqs], float),
                         prompt=np.array([q["prompt_tokens"] for q in reqs], np.int64),
                         output=np.array([q["output_tokens"] for q in reqs], np.int64),
                         key=np.array([(k * KEY_STEP) % 1.0 for k in range(n)]),
                         group=np.full(n, -1, np.int64), seg_key=seg_key, seg_len=seg_len, seg_off=seg_off)


def _runner(state_nb):
    """A compiled loop over cases with the scheduler whose state ``state_nb`` makes."""
    @nb.njit
    def run_cases(params, rep, events, wl_t, wl_P, wl_O, wl_key, seg_key, seg_len, seg_off, wl_off, ru, metrics,
                  keep):
        for r in range(params.shape[0]):
            p = params[r]
            lo = wl_off[r]
            hi = wl_off[r + 1]
            W = vllm_replica.workload_nb(p, seg_key, seg_len, seg_off[lo + r:hi + r + 1], wl_P[lo:hi], wl_O[lo:hi])
            vst, pk, pk_len, pk_off = state_nb(p, 1, W, seg_key, seg_len, seg_off[lo + r:hi + r + 1], wl_P[lo:hi],
                                               wl_O[lo:hi])
            run_one_nb(p, rep[r], events, wl_t[lo:hi], wl_P[lo:hi], wl_O[lo:hi], wl_key[lo:hi], pk, pk_len, pk_off,
                       ru, metrics[r], np.zeros(0), np.zeros((0, 1), SAMPLE_T), np.zeros(0, CLUSTER_T), keep[lo:hi],
                       vst, np.zeros(0, np.int64), np.zeros(0))  # no conversations
    return run_cases


_RUN_CASES = {False: _runner(vllm_replica.state_nb), True: _runner(vllm_async_replica.state_nb)}
"""``async_scheduling`` → the compiled loop over cases."""


from routesim.batching.dtypes import CLUSTER_SAMPLE as CLUSTER_T, SAMPLE as SAMPLE_T  # noqa: E402


def run_engine(cases):
    """(metrics (cases,), keep (requests,) KEPT, offsets) of the engine on the cases (all
    recorded with one loop)."""
    wls = [case_workload(c) for c in cases]
    packed = br.Packed.of(wls)
    params = np.concatenate([br.params_row(case_values(c), "round_robin", n_replicas=1).reshape(1)
                             for c in cases])
    rep = br.replica_records(params, np.ones((len(cases), 1)))  # factors, roles, settings
    metrics = np.zeros(len(cases), METRICS)
    keep = np.zeros(packed.off[-1], KEPT)
    asynchronous = {bool(c["replica"].get("async_scheduling", False)) for c in cases}
    assert len(asynchronous) == 1
    _RUN_CASES[asynchronous.pop()](params, rep, br.event_rows([]), packed.t, packed.prompt, packed.output, packed.key,
               packed.seg_key, packed.seg_len, packed.seg_off, packed.off, np.zeros(0), metrics, keep)
    return metrics, keep, packed.off


@pytest.fixture(scope="module")
def recording():
    return record.load()


@pytest.fixture(scope="module")
def engine(recording):
    return run_engine(recording["cases"])


@pytest.fixture(scope="module")
def async_recording():
    return record.load(record.RECORDED_ASYNC)


@pytest.fixture(scope="module")
def async_engine(async_recording):
    return run_engine(async_recording["cases"])


def case_differences(case, res, metrics, keep):
    """Every difference of one case between the engine and vLLM's recording."""
    diffs = []
    reqs = res["requests"]
    if len(keep) != len(reqs):
        return [("requests", len(keep), len(reqs))]
    for k, q in enumerate(reqs):
        if q.get("aborted_ms") is not None:   # a timeout: vLLM aborted it, routesim fails it
            if keep[k]["outcome"] != Fate.FAILED:
                diffs.append((f"request {k}", "outcome", int(keep[k]["outcome"]), "failed"))
            continue
        if keep[k]["outcome"] != Fate.COMPLETED:
            diffs.append((f"request {k}", "outcome", int(keep[k]["outcome"]), "completed"))
            continue
        for field, want in (("first_ms", q["first_token_ms"]), ("done_ms", q["completion_ms"])):
            got = float(keep[k][field])
            if got != want:
                diffs.append((f"request {k}", field, got, want))
    pre = sum(q["preemptions"] for q in reqs)
    # vLLM's PrefixCacheStats: a request's first admission is a new one (queries P: no
    # token generated yet), its later ones re-admissions after a preemption, filed apart;
    # without prefix caching nothing is queried; a request aborted before its admission
    # never queried
    hits = sum(q["hits"][0] for q in reqs if q["hits"])
    queries = (sum(c["prompt_tokens"] for c, q in zip(case["requests"], reqs) if q["hits"])
               if case["replica"]["prefix_caching"] else 0)
    rehits = sum(sum(q["hits"][1:]) for q in reqs)
    completed = sum(q.get("aborted_ms") is None for q in reqs)
    for field, got, want in (("preemptions", int(metrics["preemptions"]), pre),
                             ("completed", int(metrics["completed"]), completed),
                             ("hit_tokens", int(metrics["hit_tokens"]), hits),
                             ("admit_tokens", int(metrics["admit_tokens"]), queries),
                             ("preempted_hit_tokens", int(metrics["preempted_hit_tokens"]), rehits)):
        if got != want:
            diffs.append(("case", field, got, want))
    return diffs


def _all_differences(recording, engine):
    """Each case of the recording that differs: its name -> its first differences."""
    metrics, keep, off = engine
    bad = {}
    for c, (case, res) in enumerate(zip(recording["cases"], recording["results"])):
        diffs = case_differences(case, res, metrics[c], keep[off[c]:off[c + 1]])
        if diffs:
            bad[case["name"]] = diffs[:3]
    return bad


def test_every_recorded_case_is_identical(recording, engine):
    """All 400 cases: every request's first-token and completion times bit for bit, and
    the case's preemptions, completions and hit tokens."""
    bad = _all_differences(recording, engine)
    assert not bad, f"{len(bad)} of {len(recording['cases'])} cases differ from vLLM, e.g. {list(bad.items())[:4]}"


def test_every_async_recorded_case_is_identical(async_recording, async_engine):
    """vLLM's default loop (asynchronous scheduling): all 400 cases as above, against the
    recording of vLLM's AsyncScheduler and batch queue."""
    assert all(c["replica"]["async_scheduling"] is True for c in async_recording["cases"])
    bad = _all_differences(async_recording, async_engine)
    assert not bad, (f"{len(bad)} of {len(async_recording['cases'])} cases differ from vLLM's asynchronous loop, "
                     f"e.g. {list(bad.items())[:4]}")


@pytest.fixture(scope="module")
def timeout_recording():
    return record.load(record.RECORDED_TIMEOUTS)


def test_every_timeout_case_is_identical(timeout_recording):
    """The 100 cases with a timeout (conformance/cases.py make_timeout_case): vLLM's
    scheduler with its requests aborted at arrival + timeout_ms as EngineCore.step
    processes aborts (before the step's outputs, EC:611-613; VLLM-MODE.md 18). Every
    aborted request fails, every other one as above; preemptions and hits include the
    aborted requests' admissions."""
    cases = timeout_recording["cases"]
    assert len(cases) == 100 and all("timeout_ms" in c["replica"] for c in cases)
    aborted = sum(q["aborted_ms"] is not None for r in timeout_recording["results"] for q in r["requests"])
    assert aborted > 1000        # the cases exercise aborts (1,588 of 2,089 requests)
    bad = _all_differences(timeout_recording, run_engine(cases))
    assert not bad, f"{len(bad)} of {len(cases)} timeout cases differ from vLLM, e.g. {list(bad.items())[:4]}"


def test_every_async_timeout_case_is_identical():
    """The 100 timeout cases under vLLM's default loop (aborts while the engine waits
    for a batch processed before its output, EC:713-715; VLLM-MODE.md 31)."""
    rec = record.load(record.RECORDED_TIMEOUTS_ASYNC)
    assert all(c["replica"]["async_scheduling"] is True for c in rec["cases"])
    bad = _all_differences(rec, run_engine(rec["cases"]))
    assert not bad, f"{len(bad)} of {len(rec['cases'])} async timeout cases differ from vLLM, e.g. {list(bad.items())[:4]}"


def test_the_loops_differ_on_the_recorded_cases(recording, engine, async_recording, async_engine):
    """The synchronous engine on the asynchronous recording differs (a request that
    arrives while a batch runs starts one batch later: VLLM-SCHEDULER.md §9), so the test
    above tells the loops apart."""
    assert len(_all_differences(async_recording, engine)) > 100


def test_the_comparison_can_fail(recording, engine):
    """A one-ulp change of a time or one more preemption is reported."""
    import copy
    import math
    metrics, keep, off = engine
    res = copy.deepcopy(recording["results"][0])
    res["requests"][0]["completion_ms"] = math.nextafter(res["requests"][0]["completion_ms"], math.inf)
    assert case_differences(recording["cases"][0], res, metrics[0], keep[off[0]:off[1]])
    res = copy.deepcopy(recording["results"][0])
    res["requests"][0]["preemptions"] += 1
    assert case_differences(recording["cases"][0], res, metrics[0], keep[off[0]:off[1]])


FRESH_SEED = 2026
"""The fresh cases' default seed: no recording draws make_case with it (conformance/cases.py:
seed 1 for the 400 cases, 7,001 under the timeout cases, 9,001 under the decode cases; the
live reference tests 7); its timeout cases draw 9,026. ``ROUTESIM_FRESH_SEED`` picks another,
so each check can be on cases nobody has seen."""


@pytest.mark.skipif(not record.venv_python().exists(),
                    reason="no vLLM environment (tools/vllm-env, or VLLM_VENV) to run vLLM live")
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_live_fresh_cases_are_identical(asynchronous):
    """Held-out cases, never recorded: 150 of make_case's kinds and 50 with a timeout,
    run live in vLLM 0.30.0 (tools/vllm-env) and through the engine, compared as the
    recorded ones are (every request's first-token and completion times bit for bit, and
    each case's preemptions, completions and hit tokens). ``ROUTESIM_FRESH_SEED=S
    VLLM_VENV=DIR python -m pytest tests/test_vllm_engine.py -k live`` checks another 200."""
    import os

    from conformance import cases as case_gen
    seed = int(os.environ.get("ROUTESIM_FRESH_SEED", FRESH_SEED))
    cases = ([case_gen.make_case(seed, i) for i in range(150)]
             + [case_gen.make_timeout_case(seed, i) for i in range(50)])
    for case in cases:
        case["replica"]["async_scheduling"] = asynchronous
    rec = {"cases": cases, "results": record.run_driver(cases)["results"]}
    bad = _all_differences(rec, run_engine(cases))
    assert not bad, f"{len(bad)} of {len(cases)} fresh cases (seed {seed}) differ from vLLM, e.g. {list(bad.items())[:4]}"
