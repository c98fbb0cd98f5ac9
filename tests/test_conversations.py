"""Conversations (issue 40 item 4): a follow-up turn's prompt is the conversation so
far (every earlier prompt and response) and the new user text, and its prompt blocks
carry the earlier turns' block identities, the response's included
(routesim/batching/workload.py ``follow_up_segments``; docs/model.md "Conversations").

Hand-worked: vLLM hashes full blocks of token ids (v1/core/kv_cache_utils.py
``request_block_hasher``: block j = tokens j·b … (j+1)·b − 1, chained on the block
before) and caches a request's full blocks up to its computed tokens
(kv_cache_manager.py ``allocate_slots``: ``min(computed + new, num_tokens)``). A turn of
P1 prompt and O1 output tokens computes KV for P1 + O1 − 1 tokens (its last token is
sampled, never fed back), so it leaves ``floor((P1 + O1 − 1)/b)`` full blocks cached,
and the next turn, whose first P1 + O1 tokens are the same, hits that many blocks (at
most ``floor((P2 − 1)/b)``). The reserve scheduler (token-model.md §2) caches only
prompt blocks: a follow-up hits its predecessor's ``floor(P1/b)`` prompt blocks.
"""

import numpy as np
import pytest

import token_reference as ref
from routesim.batching.workload import (RESPONSE_ID, UNIQUE_ID, ConversationParams, TokenWorkload,
                                        conversations, follow_up_segments, generate)
from test_token_engine_vs_reference import _engine, _reference_workload, _values

B = 16


def _two_turns(P1, O1, text, O2=5, t2=2000.0):
    """Turn 1 (request 0, at 0 ms: before the warm-up's end, so only turn 2's admission
    counts in prefix_hit_rate) and turn 2 (request 1, sent at ``t2``, long after turn 1
    completed), one replica."""
    P2 = P1 + O1 + text
    s1 = [(UNIQUE_ID + 0, P1 // B)]
    s2 = follow_up_segments(s1, P1, O1, 0, P2, 1, B)
    segs = s1 + s2
    return TokenWorkload(t_ms=np.array([0.0, t2]), prompt=np.array([P1, P2]), output=np.array([O1, O2]),
                         key=np.array([0.25, 0.25]), group=np.array([-1, -1]),
                         seg_key=np.array([s[0] for s in segs], np.int64),
                         seg_len=np.array([s[1] for s in segs], np.int64),
                         seg_off=np.array([0, len(s1), len(segs)], np.int64))


VALUES = dict(warmup_s=1.0, measure_s=2.0, block_tokens=B, kv_blocks=64, max_batch=4)


# (P1, O1, new text) -> turn 2's cached prefix in blocks: vllm, reserve
CASES = {
    # P1 + O1 = 70: 69 tokens computed, blocks 0-3 full; block 4 holds response tokens 64-69 and new text
    "straddling": ((40, 30, 20), 4, 2),
    # P1 + O1 = 64: the 64th token is never computed, so block 3 is not cached by turn 1
    "boundary": ((40, 24, 20), 3, 2),
    # P1 + O1 = 65: 64 tokens computed, block 3 full and cached
    "one-past": ((40, 25, 20), 4, 2),
    # a prompt of whole blocks: the response starts a block of its own
    "whole-blocks": ((32, 40, 9), 4, 2),
}


def test_follow_up_ids():
    """Turn 2's ids: turn 1's prompt ids, turn 1's blocks past them, then its own."""
    wl = _two_turns(40, 30, 20)
    assert list(wl.block_ids(1)) == [UNIQUE_ID, UNIQUE_ID + 1, RESPONSE_ID + 2, RESPONSE_ID + 3,
                                     UNIQUE_ID + 2**16 + 4]


@pytest.mark.parametrize("scheduler", ["vllm", "reserve"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_second_turn_hits(case, scheduler):
    (P1, O1, text), vllm_blocks, reserve_blocks = CASES[case]
    blocks = vllm_blocks if scheduler == "vllm" else reserve_blocks
    P2 = P1 + O1 + text
    want = blocks * B / P2
    wl = _two_turns(P1, O1, text)
    values = _values(dict(VALUES, scheduler=scheduler))
    got_ref = ref.simulate(_reference_workload(wl), values, [1.0], [], "round_robin", 0)
    metrics, _ = _engine(wl, values, [1.0], [], "round_robin", 0)
    assert got_ref["completed"] == 1 and metrics["completed"] == 1  # turn 2 (the cohort)
    assert got_ref["prefix_hit_rate"] == want
    assert metrics["prefix_hit_rate"] == want


def test_without_the_response_ids_vllm_misses_the_response():
    """The same turn 2 with ids of its own past turn 1's prompt (what routesim did
    before): vLLM mode hits only the prompt's 2 blocks."""
    wl = _two_turns(40, 30, 20)
    sk = wl.seg_key.copy()
    sk[sk >= RESPONSE_ID] = UNIQUE_ID + 2**16 + 2
    wl = TokenWorkload(**{**wl.__dict__, "seg_key": sk})
    values = _values(dict(VALUES, scheduler="vllm"))
    assert ref.simulate(_reference_workload(wl), values, [1.0], [], "round_robin", 0)["prefix_hit_rate"] == 2 * B / 90


def test_synthetic_sessions():
    """The session model: first turns are §1.1's requests unchanged; each follow-up's
    prompt is its predecessor's prompt + output + new text, and holds its predecessor's
    ids then the response's."""
    first = generate(3, 2.0, (), 30000.0)
    cp = ConversationParams(turns_mean=3.0, turns_max=5, think_ms=4000.0)
    w = conversations(first, 3, cp)
    F = len(first)
    assert np.array_equal(w.prompt[:F], first.prompt) and np.array_equal(w.t_ms[:F], first.t_ms)
    assert (w.prev[:F] == -1).all() and (w.prev[F:] >= 0).all() and (w.prev[F:] < np.arange(F, len(w))).all()
    assert np.isinf(w.t_ms[F:]).all() and (w.think_ms[F:] >= 0).all()
    assert len(w) > F + F // 2  # mean 3 turns, at most 5: about 1.9 follow-ups a session
    for k in range(F, len(w)):
        q = w.prev[k]
        assert w.prompt[k] > w.prompt[q] + w.output[q]
        ids, pids = w.block_ids(k), w.block_ids(q)
        assert len(ids) == w.prompt[k] // B
        assert np.array_equal(ids[:len(pids)], pids)
        a, c = w.prompt[q] // B, (w.prompt[q] + w.output[q]) // B
        assert np.array_equal(ids[a:c], RESPONSE_ID + q * 2**16 + np.arange(a, c))
        assert (ids[c:] >= UNIQUE_ID).all() and (ids[c:] < RESPONSE_ID).all()
        assert w.key[k] == w.key[q]
    # the session model off: the workload as it was
    same = conversations(first, 3, ConversationParams())
    assert len(same) == F and np.array_equal(same.seg_key, first.seg_key)
