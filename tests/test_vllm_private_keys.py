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
    pk, pk_off, gbase, own, kept = vb.prompt_keys_nb(wl.seg_key, wl.seg_len, wl.seg_off, wl.prompt, wl.output,
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
    assert np.all(own0[:, vb.O_REP] == vb.SHARED)  # not private: every key in the table
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
    values["signal_mode"], values["period_ms"] = "periodic", 50.0  # (with retries, no key private then)
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


def test_a_failed_attempts_keys_enter_the_table_as_if_always_there():
    """vllm_blocks.unprivate_nb: request 0's blocks hashed while its keys are private, then
    made shared, leave the table, the blocks and the entries as hashing them with every
    key in the table does (the first- and last-inserted block and the count of each key,
    a key held by two blocks included); a key no block holds only becomes shared; another
    request's private keys stay private."""
    from routesim.batching import blocks as bk
    g = 12  # request 0: own indices 0 ... 5; request 1: 6 ... 11
    states = []
    for private in (True, False):
        own = np.full((g, vb.OWN_FIELDS), vb.FREE if private else vb.SHARED, np.int32)
        bl = np.empty((2, vb.FIELDS, 16), np.int64)
        vq = np.zeros((2, vb.VQ_FIELDS), np.int64)
        for i in range(2):
            vb.reset_pool_nb(bl, vq, i)
        tab = bk.table_nb(64)
        added = 0
        # request 0 on replica 1: own keys 0, 1, 2 and key 1 again (a re-admission's block);
        # request 1 on replica 0: own key 7
        for i, x, o in ((1, 3, 0), (1, 5, 1), (1, 8, 2), (1, 9, 1), (0, 4, 7)):
            added += vb.hash_block_nb(tab, own, bl, vq, np.int64(i), np.int64(x), np.int64(-2 - o))
        if private:
            assert added == 0
            added += vb.unprivate_nb(tab, own, np.int64(0), np.int64(6))
        states.append((own, bl, vq, tab, added))
    (own1, bl1, vq1, tab1, added1), (own0, bl0, vq0, tab0, added0) = states
    assert added1 == 3 == added0 - 1  # keys 0, 1, 2 of request 0 (key 7 stays private)
    assert np.array_equal(bl1, bl0) and np.array_equal(vq1, vq0)
    for o in range(6):
        assert own1[o, vb.O_REP] == vb.SHARED
        h1, h0 = bk.find_nb(tab1, np.int64(1), np.int64(-2 - o)), bk.find_nb(tab0, np.int64(1), np.int64(-2 - o))
        assert (h1 >= 0) == (h0 >= 0) == (o <= 2)
        if h0 >= 0:
            e1, e0 = tab1[h1], tab0[h0]
            assert all(e1[f] == e0[f] for f in ("pos0", "full", "comp", "length"))
    assert tab1[bk.find_nb(tab1, np.int64(1), np.int64(-3))]["comp"] == 2  # key 1: blocks 5 and 9
    assert own1[7, vb.O_REP] == 0 and bk.find_nb(tab1, np.int64(0), np.int64(-9)) < 0
