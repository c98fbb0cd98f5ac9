"""The vllm mode's private keys (routesim/batching/vllm_blocks.py, "Private keys"): without
retries, a key only one request's blocks have is renamed the own key of its position
and kept in ``own`` (an array indexed by the own key) instead of the segment table.

Keys are identities only (vLLM's hash map compares them), so the renaming must keep
exactly which blocks of which requests share a key; and a run must do exactly what it
does with every key in the segment table, which ``max_attempts > 1`` keeps (no key is
private then), on a run where no attempt fails so no retry happens.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from routesim.batching import runs as br  # noqa: E402
from routesim.batching import vllm_blocks as vb  # noqa: E402
from routesim.batching.workload import (RESPONSE_ID, ConversationParams, TokenWorkload, conversations,  # noqa: E402
                                        generate, segments_from_ids)
from test_token_engine_vs_reference import GROWING, _engine, _values  # noqa: E402

B = 16


def _handmade():
    """Ids repeated under other parents (fresh keys), a shared prefix, ids of one prompt
    only, and a prompt of no id."""
    ids = [[1, 2, 3], [5, 2, 3], [1, 2, 9, 10], [7], [], [1, 2, 3, 11]]
    off = np.cumsum([0] + [len(x) for x in ids])
    seg_key, seg_len, seg_off = segments_from_ids(np.array([i for x in ids for i in x], np.int64), off)
    n = len(ids)
    return TokenWorkload(t_ms=np.arange(n, dtype=float), prompt=np.array([B * len(x) + 5 for x in ids]),
                         output=np.full(n, 40), key=np.full(n, 0.5), group=np.full(n, -1, np.int64),
                         seg_key=seg_key, seg_len=seg_len, seg_off=seg_off)


def _generated(seed, turns, values=None, rate=3.0):
    """A synthetic workload (shared prefixes; ``values``' lengths and horizon), with
    conversations' follow-up turns (their prompts hold earlier requests' response blocks)
    when ``turns``."""
    values = values or _values(dict(block_tokens=B, warmup_s=1.0, measure_s=20.0))
    params = br.workload_params(values)
    wl = generate(seed, rate, (), (values["warmup_s"] + values["measure_s"]) * 1000.0, params)
    if turns:
        wl = conversations(wl, seed, ConversationParams(turns_mean=3.0, turns_max=5, think_ms=500.0), params)
    return wl


WORKLOADS = {"handmade": _handmade, "synthetic": lambda: _generated(1, False),
             "conversations": lambda: _generated(2, True)}


def _keys(wl, private):
    """(every block key of every request, as key_of_nb gives it: (request, block) -> key,
    the prompt keys pk, their offsets, gbase, the own entries, the count of table keys)
    with ``private`` on or off."""
    pk, pk_off, _, gbase, own, kept = vb.prompt_keys_nb(wl.seg_key, wl.seg_len, wl.seg_off, wl.prompt, wl.output,
                                                        np.int64(B), private)
    every = {(s, j): int(vb.key_of_nb(pk, pk_off, gbase, s, j))
             for s in range(len(wl)) for j in range((int(wl.prompt[s]) + int(wl.output[s])) // B + 1)}
    return every, pk, pk_off, gbase, own, kept


@pytest.mark.parametrize("name", WORKLOADS)
def test_the_renaming_keeps_which_blocks_share_a_key(name):
    wl = WORKLOADS[name]()
    before, pk0, pk_off, gbase, own0, kept0 = _keys(wl, False)
    after, pk1, _, _, own1, kept1 = _keys(wl, True)
    # the same partition of the blocks: a key maps to one key, and back
    forward, backward = {}, {}
    for block, k in before.items():
        assert forward.setdefault(k, after[block]) == after[block], block
        assert backward.setdefault(after[block], k) == k, block
    # a prompt key changes exactly when no other prompt block has it, into its position's own key
    counts = {}
    for k in pk0:
        counts[int(k)] = counts.get(int(k), 0) + 1
    own_range = (pk0 <= -2) & (pk0 >= -1 - own0.shape[0])  # a later turn's response blocks: q's own keys
    renamed = 0
    for s in range(len(wl)):
        for w in range(pk_off[s], pk_off[s + 1]):
            j = w - pk_off[s]
            if counts[int(pk0[w])] == 1 and not own_range[w]:
                assert pk1[w] == -2 - gbase[s] - j
                renamed += 1
            else:
                assert pk1[w] == pk0[w]
    assert renamed > 0
    # without retries the own keys no prompt holds are private; a later turn's are not
    shared = {int(-2 - k) for k in pk0[own_range]}
    assert (name == "conversations") == (len(shared) > 0)
    assert {o for o in range(own1.shape[0]) if own1[o, vb.O_REP] == vb.SHARED} == shared
    assert np.all(own1[:, vb.O_REP][[o for o in range(own1.shape[0]) if o not in shared]] == vb.FREE)
    assert np.all(own0[:, vb.O_REP] == vb.SHARED)  # with retries nothing is private
    # the hash map's size counts the blocks whose key is not private (with retries: every block)
    assert kept0 == len(before)
    assert kept1 == sum(vb.private_nb(own1, np.int64(k)) < 0 for k in after.values()) < kept0


def _kv_bound(seed, turns):
    """The reference comparison's small pools that preempt (every request fits), 2
    replicas, no failure: its values and workload."""
    values = _values(dict(GROWING, kv_blocks=300, max_batch=16, scheduler="vllm", context_limit=3000))
    return values, _generated(seed, turns, values, 14.0)


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("turns", [False, True])
def test_a_run_with_private_keys_is_the_run_with_every_key_in_the_table(async_scheduling, turns):
    values, wl = _kv_bound(3, turns)
    values["async_scheduling"] = async_scheduling
    out = {}
    for attempts in (1, 3):  # 3: no key is private; no attempt fails, so none is retried
        values["max_attempts"] = attempts
        m, rep = _engine(wl, values, [1.0, 1.0], [], "least_tokens", 1)
        out[attempts] = (m, rep)
    m1, rep1 = out[1]
    m3, rep3 = out[3]
    assert m1["preemptions"] > 0 and m1["retries"] == 0 == m3["retries"]
    assert m1["preempted_hit_rate"] > 0  # re-admissions hit their own cached blocks
    assert m1.tobytes() == m3.tobytes() and rep1.tobytes() == rep3.tobytes()
