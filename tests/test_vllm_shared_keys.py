"""What a run's scheduler takes from its workload alone (scheduler.py: ``workload_nb``,
``W``; the vllm mode's prompt keys, vllm_blocks.prompt_keys_nb), made once per workload
and ``WORKLOAD_FIELDS`` and shared by the runs of a grid (``scheduler.Shared``, on
``runs.Packed``).

The expectations are independent of the sharing: the state a run builds from a shared
``W`` is the state prompt_keys_nb's own output gives (what each run computed for itself
before the sharing); a ``W`` handed out for any sequence of runs is the ``W`` made
afresh for that run (so a key that leaves out a field ``W`` depends on fails); and a
batch of runs sharing one workload gives, run by run, the bytes each run gives alone.
"""

import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from routesim.batching import runs as br  # noqa: E402
from routesim.batching import scheduler as sc  # noqa: E402
from routesim.batching import vllm_async_replica as va  # noqa: E402
from routesim.batching import vllm_blocks as vb  # noqa: E402
from routesim.batching import vllm_replica as vr  # noqa: E402
from routesim.batching.dtypes import PARAMS, Scheduler, Signals  # noqa: E402
from routesim.batching.workload import RESPONSE_ID, REQUEST_ID, TokenWorkload, segments_from_ids  # noqa: E402


def _workload(prompts, outputs):
    """A workload of prompts given as block ids (a repeated id: a shared block; an id
    ``RESPONSE_ID + q·REQUEST_ID + j``: request q's own block j, as a conversation's later
    turn holds), 5 tokens past the ids' blocks, and the given output lengths."""
    ids = [i for x in prompts for i in x]
    off = np.cumsum([0] + [len(x) for x in prompts])
    seg_key, seg_len, seg_off = segments_from_ids(np.array(ids, np.int64), off)
    n = len(prompts)
    return TokenWorkload(t_ms=np.arange(n, dtype=float), prompt=np.array([16 * len(x) + 5 for x in prompts]),
                         output=np.array(outputs, np.int64), key=np.full(n, 0.5), group=np.full(n, -1, np.int64),
                         seg_key=seg_key, seg_len=seg_len, seg_off=seg_off)


@st.composite
def workloads(draw):
    """Prompts over a few ids (so that prompts share blocks, under the same or another
    parent), some holding an earlier request's own blocks (a later turn)."""
    n = draw(st.integers(1, 8))
    outputs = draw(st.lists(st.integers(1, 80), min_size=n, max_size=n))
    prompts = []
    for s in range(n):
        blocks = draw(st.lists(st.integers(1, 6), max_size=6))
        if s > 0 and draw(st.booleans()):  # a later turn: request q's blocks past its prompt ids
            q = draw(st.integers(0, s - 1))
            blocks = blocks + [RESPONSE_ID + q * REQUEST_ID + len(prompts[q]) + j
                               for j in range(draw(st.integers(1, 2)))]
        prompts.append(blocks)
    return _workload(prompts, outputs)


def _p(block_tokens, max_attempts, scheduler=Scheduler.VLLM, signals=Signals.FRESH):
    p = np.zeros(1, PARAMS)
    p["block_tokens"] = block_tokens
    p["max_attempts"] = max_attempts
    p["signal_mode"] = int(signals)
    p["scheduler"] = int(scheduler)
    p["kv_blocks"] = 64
    p["max_batch"] = 8
    p["max_batched_tokens"] = 256
    return p[0]


@settings(max_examples=60, deadline=None)
@given(wl=workloads(), block_tokens=st.sampled_from([8, 16, 32]), max_attempts=st.sampled_from([1, 2, 3]),
       asyn=st.booleans(), signals=st.sampled_from(list(Signals)))
def test_a_state_from_the_shared_keys_is_the_state_from_fresh_keys(wl, block_tokens, max_attempts, asyn, signals):
    """state_nb on a W (made once, used by two runs) builds what prompt_keys_nb gives a run
    by itself: the keys, offsets and one-block segments, the own bases, the private keys'
    entries (the run's own copy: the second run's is untouched by the first's writes) and
    the hash map's size. A run has private keys without retries, or with retries and fresh
    signals (vllm_blocks.py, "Private keys"); else every entry is ``SHARED`` (the segment
    table holds every key). With retries the map has room for every key (a failed
    attempt's keys enter it): prompt_keys_nb's count without private keys."""
    p = _p(block_tokens, max_attempts, Scheduler.VLLM_ASYNC if asyn else Scheduler.VLLM, signals)
    args = (wl.seg_key, wl.seg_len, wl.seg_off, wl.prompt, wl.output)
    pk, pk_off, gbase, own, keys = vb.prompt_keys_nb(*args, np.int64(block_tokens), True)
    ones = np.ones(pk.shape[0], np.int64)  # every key a one-block segment
    if max_attempts > 1:
        keys = vb.prompt_keys_nb(*args, np.int64(block_tokens), False)[4]
        if signals != Signals.FRESH:
            own[:] = vb.SHARED
    W = sc.workload(p, *args)
    first = sc.state(p, 2, W, *args)
    first[0].own[:] = 7  # a run writes its own entries
    X, seg_key, seg_len, seg_off = sc.state(p, 2, W, *args)
    assert type(X) is (va.STATE if asyn else vr.STATE)
    for got, want in ((X.pk, pk), (X.pk_off, pk_off), (seg_key, pk), (seg_len, ones), (seg_off, pk_off),
                      (X.gbase, gbase), (X.own, own)):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert X.slots == vr._slots_nb(p, 2, keys)


@settings(max_examples=40, deadline=None)
@given(wl=workloads(), runs=st.lists(st.tuples(st.sampled_from([8, 16]), st.sampled_from([1, 3]),
                                               st.sampled_from(list(Scheduler))), min_size=1, max_size=8))
def test_a_shared_w_is_the_w_made_for_the_run(wl, runs):
    """Whatever runs ask in whatever order, each is handed the W made afresh for it (a key
    that left out ``block_tokens`` would hand a run another's W), and
    a W is made once per distinct key."""
    shared = sc.Shared()
    args = (wl.seg_key, wl.seg_len, wl.seg_off, wl.prompt, wl.output)
    for b, attempts, code in runs:
        p = _p(b, attempts, code)
        got = sc.workload_of(shared, 0, p, *args)
        want = sc.workload(p, *args)
        assert type(got) is type(want)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert np.array_equal(g, w)
    assert shared.made == len({sc.workload_key(_p(*r)) for r in runs})


def test_the_two_vllm_loops_share_a_w_and_reserve_has_its_own():
    sync, asyn, reserve = (sc.workload_key(_p(16, 1, c)) for c in
                           (Scheduler.VLLM, Scheduler.VLLM_ASYNC, Scheduler.RESERVE))
    assert sync == asyn and reserve != sync
    assert sc.workload_key(_p(8, 1)) != sync
    assert sc.workload_key(_p(16, 3)) == sync  # (W does not depend on retries: the run's own entries do)


def test_a_w_past_the_budget_is_made_and_not_kept_and_a_copy_starts_empty():
    wl = _workload([[1, 2, 3], [1, 2, 4]], [40, 40])
    args = (wl.seg_key, wl.seg_len, wl.seg_off, wl.prompt, wl.output)
    p = _p(16, 1)
    shared = sc.Shared(budget=0)
    for _ in range(2):
        sc.workload_of(shared, 0, p, *args)
    assert shared.made == 2 and shared.kept() == 0 and shared.bytes == 0
    shared = sc.Shared()
    sc.workload_of(shared, 0, p, *args)
    sc.workload_of(shared, 0, p, *args)
    assert shared.made == 1 and shared.kept() == 1 and shared.bytes > 0
    copy = pickle.loads(pickle.dumps(shared))
    assert copy.kept() == 0 and copy.made == 0 and copy.budget == shared.budget
    shared.clear()
    assert shared.kept() == 0 and shared.bytes == 0


@pytest.mark.parametrize("attempts", [1, 3])
def test_runs_sharing_a_workload_are_the_runs_alone(attempts):
    """One batch of runs on one workload (both vllm loops and reserve, two policies, a
    crash, so that with retries attempts move between replicas) gives each run's bytes as
    that run simulated alone with a workload of its own, and makes each W once."""
    from routesim.arrivals import router_stream
    from routesim.batching.workload import generate
    from test_token_engine_vs_reference import GROWING, _values

    values = _values(dict(GROWING, block_tokens=16, warmup_s=1.0, measure_s=10.0, kv_blocks=300, max_batch=16,
                          context_limit=3000, max_attempts=attempts, timeout_ms=4000.0))
    wl = generate(5, 12.0, (), 11_000.0, br.workload_params(values))
    events = br.event_rows([(4000.0, "fail", 1, 0.0)])
    modes = [dict(scheduler="reserve"), dict(scheduler="vllm", async_scheduling=False),
             dict(scheduler="vllm", async_scheduling=True)]
    rows = [br.params_row(dict(values, **m), policy, n_replicas=3, event_count=1)
            for policy in ("least_tokens", "round_robin") for m in modes]
    params = np.concatenate([r.reshape(1) for r in rows])
    count = max(br.router_draws(pol, values["choices"], len(wl), attempts, values)
                for pol in ("least_tokens", "round_robin"))
    ru = router_stream(5, count)
    ru_off = np.array([0, count], np.int64)
    factors = np.ones((len(rows), 3))
    packed = br.Packed.of([wl])
    together, rep_t = br.simulate(params, factors, events, packed, ru, ru_off)
    assert packed.shared.made == 2  # reserve's, and the two vllm loops' one
    for r in range(len(rows)):
        alone, rep_a = br.simulate(params[r:r + 1], factors[r:r + 1], events, br.Packed.of([wl]), ru, ru_off)
        assert alone.tobytes() == together[r:r + 1].tobytes() and rep_a.tobytes() == rep_t[r:r + 1].tobytes(), r


@pytest.mark.parametrize("threads", [1, 2])
def test_a_batch_makes_each_workload_s_w_once_with_room_for_two(threads):
    """Runs of three workloads under two policies, given policy by policy (a grid's flat
    order, seed innermost), with room for two W's: each W is made once, whatever the
    threads (the runs of a workload are taken together, engine.dispatch_order, and the
    W's asked for least recently are forgotten first); every run's bytes are its bytes
    alone. Taken in the given order with the room full, the third workload's W would be
    made for each of its runs."""
    import numba
    from routesim.arrivals import router_stream
    from routesim.batching.workload import generate
    from test_token_engine_vs_reference import GROWING, _values

    values = _values(dict(GROWING, block_tokens=16, warmup_s=1.0, measure_s=6.0, kv_blocks=300, max_batch=16,
                          context_limit=3000, scheduler="vllm"))
    wls = [generate(seed, 12.0, (), 7_000.0, br.workload_params(values)) for seed in (1, 2, 3)]
    policies = ("least_tokens", "round_robin")
    params = np.concatenate([br.params_row(values, pol, n_replicas=3, workload=w).reshape(1)
                             for pol in policies for w in range(3)])
    draws = [max(br.router_draws(pol, values["choices"], len(wl), 1, values) for pol in policies) for wl in wls]
    ru = np.concatenate([router_stream(s, c) for s, c in zip((1, 2, 3), draws)])
    ru_off = np.concatenate([[0], np.cumsum(draws)]).astype(np.int64)
    factors = np.ones((len(params), 3))
    events = br.event_rows([])
    packed = br.Packed.of(wls)
    sizes = [sc._nbytes(sc.workload(params[w], packed.seg_key, packed.seg_len,
                                    packed.seg_off[packed.off[w] + w:packed.off[w + 1] + w + 1],
                                    packed.prompt[packed.off[w]:packed.off[w + 1]],
                                    packed.output[packed.off[w]:packed.off[w + 1]])) for w in range(3)]
    packed.shared.budget = sum(sorted(sizes)[1:])  # room for two, not three
    before = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        together, rep_t = br.simulate(params, factors, events, packed, ru, ru_off)
    finally:
        numba.set_num_threads(before)
    assert packed.shared.made == 3
    assert packed.shared.bytes <= packed.shared.budget
    for r in range(len(params)):
        alone, rep_a = br.simulate(params[r:r + 1], factors[r:r + 1], events, packed, ru, ru_off)
        assert alone.tobytes() == together[r:r + 1].tobytes() and rep_a.tobytes() == rep_t[r:r + 1].tobytes(), r


def test_the_w_asked_for_least_recently_is_forgotten_first():
    wl = _workload([[1, 2, 3], [1, 2, 4]], [40, 40])
    args = (wl.seg_key, wl.seg_len, wl.seg_off, wl.prompt, wl.output)
    p = _p(16, 1)
    size = sc._nbytes(sc.workload(p, *args))
    shared = sc.Shared(budget=2 * size)
    for w in (0, 1, 0, 2):  # 1 is then the least recently asked
        sc.workload_of(shared, w, p, *args)
    assert shared.made == 3 and shared.kept() == 2 and shared.bytes == 2 * size
    sc.workload_of(shared, 0, p, *args)
    sc.workload_of(shared, 2, p, *args)
    assert shared.made == 3
    sc.workload_of(shared, 1, p, *args)
    assert shared.made == 4 and shared.kept() == 2
