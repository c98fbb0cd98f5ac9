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

import sys
from pathlib import Path

import numpy as np
import pytest

import token_reference as ref

if str(Path(__file__).resolve().parents[1]) not in sys.path:  # conformance/ (as test_vllm_conformance.py)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from routesim.batching.workload import (RESPONSE_ID, UNIQUE_ID, ConversationParams, TokenWorkload,
                                        conversations, follow_up_segments, generate)
from routesim.batching import runs as br
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
    got_ref = ref.simulate(_reference_workload(wl), values, [1.0], [], "round_robin", 0, check=True)
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


# ------------------------------------------------------------------ sends after think time

def _reference_conv(wl):
    """The reference's workload of a TokenWorkload with conversations."""
    out = _reference_workload(wl)
    out.prev = [int(x) for x in wl.prev]
    out.think = [float(x) for x in wl.think_ms]
    return out


def _conv(values, rate, seed, cp):
    horizon = (values["warmup_s"] + values["measure_s"]) * 1000.0
    wp = br.workload_params(values)
    return conversations(generate(seed, rate, (), horizon, wp), seed, cp, wp)


def _records(wl, values, factors, policy="round_robin", seed=1, events=()):
    """The engine's run with its per-request records: (METRICS record, KEPT (requests,))."""
    from routesim.arrivals import router_stream
    from routesim.batching.dtypes import KEPT, METRICS
    from routesim.batching.engine import no_timeline, run_args, run_one_nb
    p = br.params_row(values, policy, n_replicas=len(factors), event_count=len(events))
    packed = br.Packed.of([wl])
    count = br.router_draws(policy, values["choices"], len(wl), values["max_attempts"])
    ru = router_stream(seed, count)
    rep = br.replica_records(p.reshape(1), np.array([factors], float))[0]  # factors, roles, settings
    mt = np.zeros(1, METRICS)
    keep = np.zeros(len(wl), KEPT)
    run_one_nb(mt=mt[0:1][0], **dict(no_timeline(len(factors)), keep=keep),
               **run_args(p.reshape(1), 0, rep, br.event_rows(list(events)), packed.t, packed.prompt, packed.output,
                          packed.key, packed.seg_key, packed.seg_len, packed.seg_off, packed.off, ru,
                          np.array([0, count]), packed.next, packed.think))
    return mt[0], keep


SESSION = ConversationParams(turns_mean=3.0, turns_max=5, think_ms=300.0, text_median=150.0)


def test_a_follow_up_is_sent_its_think_time_after_the_previous_response():
    """From the engine's per-request records: every follow-up whose predecessor
    completed at c is sent at (c + client_overhead_ms) + think if that is before the
    horizon, else never; a follow-up of a turn that did not complete is never sent."""
    for ovh in (0.0, 25.0):
        values = _values(dict(warmup_s=1.0, measure_s=5.0, max_batch=8, client_overhead_ms=ovh,
                              timeout_ms=3000.0))
        wl = _conv(values, 4.0, 5, SESSION)
        F = int(np.sum(wl.prev < 0))
        _mt, keep = _records(wl, values, [1.0, 1.0])
        H = 6000.0
        sent = done = unsent_after_failure = 0
        for k in range(F, len(wl)):
            q = wl.prev[k]
            if keep[q]["outcome"] == 1 and (keep[q]["done_ms"] + ovh) + wl.think_ms[k] < H:  # Fate.COMPLETED
                assert keep[k]["sent_ms"] == (keep[q]["done_ms"] + ovh) + wl.think_ms[k]
                sent += 1
            else:
                assert np.isnan(keep[k]["sent_ms"]) and keep[k]["attempts"] == 0
                done += keep[q]["outcome"] == 1
                unsent_after_failure += keep[q]["outcome"] not in (0, 1)
        assert sent > 15 and done > 0, (sent, done)  # both branches taken
    assert unsent_after_failure > 0  # (timeouts under load with the overhead)


CONV_CASES = {
    # name: (overrides, rate req/s, time factors, events, session model)
    "sessions": (dict(warmup_s=1.0, measure_s=4.0, max_batch=8), 6.0, [1.0, 1.0], [], SESSION),
    "sessions-no-think": (dict(warmup_s=1.0, measure_s=3.0, max_batch=8), 5.0, [1.0, 1.3], [],
                          ConversationParams(turns_mean=4.0, turns_max=6, think_ms=0.0, text_median=80.0)),
    "sessions-overhead-timeouts": (dict(warmup_s=1.0, measure_s=4.0, max_batch=4, client_overhead_ms=20.0,
                                        timeout_ms=2500.0, max_attempts=2, max_batched_tokens=2048), 6.0,
                                   [1.0, 1.0], [], SESSION),
    "sessions-front-door": (dict(warmup_s=1.0, measure_s=4.0, max_batch=4, admission_max_tokens=5000.0,
                                 admission_mode="queue", timeout_ms=3000.0), 5.0, [1.0, 1.0], [], SESSION),
    "sessions-reject-crash": (dict(warmup_s=1.0, measure_s=4.0, max_batch=4, admission_max_tokens=5000.0,
                                   max_attempts=2), 9.0, [1.0, 1.0, 1.0],
                              [(1500.0, "fail", 1, 0.0), (3000.0, "recover", 1, 0.0)], SESSION),
    "sessions-local-routers": (dict(warmup_s=1.0, measure_s=4.0, signal_mode="periodic_local", period_ms=50.0,
                                    routers=2), 7.0, [1.0, 1.0, 1.0], [], SESSION),
    "sessions-vllm": (dict(warmup_s=1.0, measure_s=4.0, scheduler="vllm", kv_blocks=2500, max_batch=8,
                           p_long=0.0), 6.0, [1.0, 1.0], [], SESSION),
    "sessions-vllm-preempting": (dict(warmup_s=1.0, measure_s=3.0, scheduler="vllm", kv_blocks=900, max_batch=8,
                                      p_long=0.0, client_overhead_ms=10.0), 7.0, [1.0, 1.0], [], SESSION),
}
CONV_POLICIES = ("round_robin", "least_tokens", "prefix_affinity", "session_affinity")


def _compare_conv(case, policy, seed):
    from test_token_engine_vs_reference import COUNTS, FLOAT_VECTORS, FLOATS, VECTORS, _close
    overrides, rate, factors, events, cp = CONV_CASES[case]
    values = _values(overrides)
    wl = _conv(values, rate, seed, cp)
    got, rep = _engine(wl, values, factors, events, policy, seed)
    want = ref.simulate(_reference_conv(wl), values, factors, events, policy, seed, _return_sim=True)
    bad = [f"{n}: engine {got[n]} reference {want[n]}" for n in COUNTS if int(got[n]) != want[n]]
    bad += [f"{n}: engine {got[n]!r} reference {want[n]!r}" for n in FLOATS
            if not _close(float(got[n]), float(want[n]))]
    bad += [f"{n}: engine {list(rep[f])} reference {list(want[n])}" for n, f in VECTORS.items()
            if list(rep[f]) != list(want[n])]
    bad += [f"{n}: engine {list(rep[f])} reference {list(want[n])}" for n, f in FLOAT_VECTORS.items()
            if not all(_close(float(x), float(y)) for x, y in zip(rep[f], want[n], strict=True))]
    assert not bad, f"{case} {policy} seed {seed}:\n" + "\n".join(bad)
    return want


@pytest.mark.parametrize("policy", CONV_POLICIES)
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_engine_matches_reference_on_conversations(case, policy):
    for seed in (1, 2):
        _compare_conv(case, policy, seed)


def test_the_conversation_cases_exercise_what_they_claim():
    """Follow-ups are sent in every case (and enter the cohort); the fault cases end
    sessions on a failed turn; the vllm cases hit response blocks."""
    for case in CONV_CASES:
        out = _compare_conv(case, "round_robin", 1)
        sim = out["_sim"]
        follow = [r for r in sim.requests if r.index >= sum(1 for x in _conv(_values(CONV_CASES[case][0]),
                                                                               CONV_CASES[case][1], 1,
                                                                               CONV_CASES[case][4]).prev if x < 0)]
        assert sum(r.arrived for r in follow) > 5, case
        if case in ("sessions-overhead-timeouts", "sessions-front-door", "sessions-reject-crash"):
            assert out["failed"] + out["rejected"] > 0, case
        if case == "sessions-vllm-preempting":
            assert out["preemptions"] > 0
        if case.startswith("sessions-vllm"):  # a follow-up's first admission hit past its predecessor's prompt
            b = 16
            assert any(r.last_attempt and r.last_attempt.hits
                       and r.last_attempt.hits[0] > (sim.requests[r.prev_index].P // b) * b for r in follow), case


# ------------------------------------------------------------------ the sweep file

from test_token_config import BASE, assert_refused, bad, run_cli  # noqa: E402,F401 (a fixture)

_CONV = ("context_limit = 8192", "context_limit = 8192\nconversation = { turns_mean = 3, think_s = 2 }")
CONV_BAD = [
    bad("turns-below-one", "workload.conversation.turns_mean", "must be >= 1",
        ("context_limit = 8192", "context_limit = 8192\nconversation = { turns_mean = 0.5 }")),
    bad("fractional-turns-max", "workload.conversation.turns_max", "whole number",
        ("context_limit = 8192", "context_limit = 8192\nconversation = { turns_max = 2.5 }")),
    bad("negative-think", "workload.conversation.think_s", "must be >= 0",
        ("context_limit = 8192", "context_limit = 8192\nconversation = { think_s = -1 }")),
    bad("zero-text", "workload.conversation.text_median", "must be > 0",
        ("context_limit = 8192", "context_limit = 8192\nconversation = { text_median = 0 }")),
    bad("misspelt-leaf", "workload.conversation.think_ms", "did you mean 'think_s'",
        ("context_limit = 8192", "context_limit = 8192\nconversation = { think_ms = 10 }")),
    bad("closed-loop", "workload.conversation.turns_mean", "open loop", _CONV,
        ("uniform = [1, 1, 1]", "uniform = [1, 1, 1]\n"), ('name = "policies"', 'name = "policies"\nworkload = { max_in_flight = 4 }')),
    bad("pool-below-context", "replica.kv_blocks", "context_limit = 8192", _CONV, ("kv_blocks = 4096", "kv_blocks = 400")),
    bad("bad-affinity", "policy.affinity_balance_abs", "must be >= 0",
        ("score = \"tokens\"", "score = \"tokens\"\naffinity_balance_abs = -1"),
        ('policy = ["round_robin", "least_tokens", "power_of_d"]', 'policy = ["session_affinity"]')),
    bad("chains-not-bool", "workload.trace.chains", "",
        ("context_limit = 8192", 'context_limit = 8192\nsource = "trace"\ntrace = { path = "t.csv", format = "csv", chains = 1 }')),
]


@pytest.mark.parametrize("text,key,fragment", CONV_BAD)
def test_bad_conversation_keys(tmp_path, run_cli, text, key, fragment):  # noqa: F811
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert_refused(*run_cli(path)[:3], path, key, fragment, tmp_path / "out")


def test_conversation_with_a_trace_is_refused(tmp_path, run_cli):  # noqa: F811
    (tmp_path / "t.csv").write_text("arrival_ms,prompt_tokens,output_tokens\n0,100,10\n500,120,10\n")
    text = BASE.replace("context_limit = 8192", 'context_limit = 8192\nsource = "trace"\n'
                        'trace = { path = "t.csv", format = "csv" }\nconversation = { turns_mean = 2 }'
                        ).replace("rate_rps = [3]\n", "")
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert_refused(*run_cli(path)[:3], path, "workload.conversation.turns_mean", "synthetic", tmp_path / "out")


def test_trace_chains(tmp_path):
    """A Mooncake row that holds an earlier row's full hash blocks (at least 2) and room
    for its response reuses that row's KV ids below its prompt's end and its response
    ids up to the response's last full block; a row sharing one block (a system prompt)
    or too short to hold the response keeps its own ids; a third turn inherits the
    second's reused ids."""
    import json
    from routesim import traces
    from routesim.batching.workload import response_ids, trace_chains
    rows = [dict(timestamp=0, input_length=1200, output_length=100, hash_ids=[7, 8, 9]),      # A: 2 full + partial
            dict(timestamp=10, input_length=700, output_length=5, hash_ids=[7, 20]),          # shares one block
            dict(timestamp=20, input_length=1600, output_length=40, hash_ids=[7, 8, 30, 33]),  # B: A + answer + text
            dict(timestamp=30, input_length=1250, output_length=5, hash_ids=[7, 8, 31]),      # too short for A's answer
            dict(timestamp=40, input_length=2200, output_length=5, hash_ids=[7, 8, 30, 40, 41])]  # C: follows B
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tr = traces.load_trace(path, "mooncake")
    rp = traces.replay(tr, block_tokens=B)
    ids, parent = trace_chains(rp, tr, B, 512)
    assert list(parent) == [-1, -1, 0, -1, 2]
    off = rp.block_offsets
    own = rp.block_ids

    def of(r):
        return ids[off[r]:off[r + 1]]
    assert np.array_equal(of(0), own[off[0]:off[1]]) and np.array_equal(of(1), own[off[1]:off[2]])
    assert np.array_equal(of(3), own[off[3]:off[4]])
    # B: A's 75 blocks (1200 // 16: A's partial third hash block too), A's response blocks 75..80
    # (1300 // 16 = 81), then its own from block 81 (in its own third hash block: 30·32 + 81 mod 32)
    b_ids = of(2)
    assert len(b_ids) == 1600 // B
    assert np.array_equal(b_ids[:75], of(0))
    assert np.array_equal(b_ids[75:81], response_ids(0, 75, 81))
    assert b_ids[81] == 30 * 32 + 81 % 32
    # C (the longest match: B's 3 full blocks, not row 3's 2): B's ids, A's among them, for its
    # 100 blocks (1600 // 16), B's response 100..101 (1640 // 16 = 102), then its own
    c_ids = of(4)
    assert np.array_equal(c_ids[:100], b_ids)
    assert np.array_equal(c_ids[100:102], response_ids(2, 100, 102))
    assert c_ids[102] == 40 * 32 + 102 % 32


# ------------------------------------------------------------------ vLLM's own scheduler

def _vllm_differences(path, strip_responses=False):
    """({case: first differences}, steps, follow-ups, those hitting past their previous
    prompt in vLLM) of the reference's vllm mode replaying a recording of conversation
    cases (conformance/record.py --conversations); ``strip_responses``: the follow-ups'
    response ids replaced by ids of their own (what routesim did before)."""
    import copy
    from conformance import compare_page, record
    rec = record.load(path)
    bad, steps, follow, past = {}, 0, 0, 0
    for case, res in zip(rec["cases"], rec["results"]):
        case = copy.deepcopy(case)
        b = case["replica"]["block_size"]
        for r in case["requests"]:
            resp = [x for x in r["block_ids"] if x >= RESPONSE_ID]
            if resp:
                follow += 1
                q = (resp[0] - RESPONSE_ID) >> 16
                hit = res["requests"][r["id"]]["hits"]
                past += bool(hit) and hit[0] > (case["requests"][q]["prompt_tokens"] // b) * b
            if strip_responses:
                r["block_ids"] = [UNIQUE_ID + r["id"] * 2**16 + j if x >= RESPONSE_ID else x
                                  for j, x in enumerate(r["block_ids"])]
        log = compare_page.vllm_log(case)
        diffs = compare_page.vllm_differences(case, res, log)
        if diffs:
            bad[case["name"]] = diffs[:3]
        steps += len(log["steps"])
    return bad, steps, follow, past


@pytest.mark.parametrize("loop", ["sync", "async"])
def test_vllm_agrees_on_conversations(loop):
    """vLLM 0.30.0's own scheduler (conformance/vllm_driver.py: a follow-up's response
    blocks carry the tokens vLLM generated) on 40 conversation cases
    (conformance/recorded/vllm-0.30.0-conversations*.json.gz): the reference's vllm mode
    is identical step by step (admission hits and times included), and most follow-ups
    hit past their previous turn's prompt, which they could not without the response
    ids (then every case with such a hit differs)."""
    from conformance import record
    path = record.RECORDED_CONV if loop == "sync" else record.RECORDED_CONV_ASYNC
    bad, steps, follow, past = _vllm_differences(path)
    assert not bad, f"{len(bad)} cases differ from vLLM, e.g. {list(bad.items())[:2]}"
    assert steps == record.load(path)["header"]["steps"]
    assert follow > 300 and past > follow // 2, (follow, past)
    stripped, _, _, _ = _vllm_differences(path, strip_responses=True)
    assert len(stripped) >= 20, len(stripped)


def _has_vllm():
    from conformance import record
    return record.venv_python().exists()


@pytest.mark.skipif(not _has_vllm(), reason="no vLLM environment (tools/vllm-env, or VLLM_VENV) to run vLLM live")
def test_live_vllm_agrees_on_fresh_conversations():
    """With vLLM here: fresh conversation cases (another seed than the recording's),
    both loops, run live and held to the reference."""
    import copy
    from conformance import cases as case_gen
    from conformance import compare_page, record
    fresh = [case_gen.make_conversation_case(7, i) for i in range(6)]
    for case in fresh[:6]:
        other = copy.deepcopy(case)
        other["replica"]["async_scheduling"] = True
        fresh.append(other)
    for case, res in zip(fresh, record.run_driver(fresh)["results"]):
        assert not compare_page.vllm_differences(case, res, compare_page.vllm_log(case)), case["name"]
