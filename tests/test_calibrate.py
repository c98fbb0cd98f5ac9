"""python -m routesim.calibrate (issue 25): logs, burst reconstruction, the fit, bad input.

The expectations come from outside the code under test: a small continuous-batching
engine written here (token-model.md §2, FCFS, chunked prefill, no preemption) times its
steps with known coefficients and writes the log; the fit must give them back to
numerical precision, and the overhead the front end added.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from routesim.batching.params import LEAVES
from routesim.calibrate import STEP_KEYS, fit, hardware, logs, roofline, steps
from routesim.calibrate.__main__ import main

TRUE = {"base": 7.0, "per_prefill_token": 0.02, "per_prefill_token_pair": 3e-6,
        "per_decode_sequence": 0.15, "per_kv_token": 6e-5}
IN_MS, OUT_MS = 9.0, 4.0
ROOT = Path(__file__).resolve().parents[1]


def linear_ms(coef, U, Q, n, K, R):
    return (coef["base"] + coef["per_prefill_token"] * U + coef["per_prefill_token_pair"] * Q
            + coef["per_decode_sequence"] * n + coef["per_kv_token"] * K)


def roofline_ms(coef, U, Q, n, K, R):
    """docs/model.md "The step cost": base + max(memory, compute)."""
    return coef["base"] + max(coef["weights"] + coef["per_kv_token"] * (K + R),
                              coef["per_token"] * (U + n) + coef["per_token_pair"] * (Q + K))


def engine(arrivals, P, O, coef, budget, cost=linear_ms):
    """Token times (ms, step ends) of each request on one FCFS chunked-prefill replica."""
    waiting = list(range(len(arrivals)))
    running, c, g = [], [0] * len(P), [0] * len(P)
    toks = [[] for _ in P]
    T = 0.0
    while waiting or running:
        if not running and arrivals[waiting[0]] > T:
            T = arrivals[waiting[0]]
        dec = [r for r in running if c[r] >= P[r]]
        n, K = len(dec), sum(P[r] + g[r] for r in dec)
        B, U, Q, chunks = budget - n, 0, 0.0, {}
        for r in [r for r in running if c[r] < P[r]]:
            x = min(P[r] - c[r], B)
            if x > 0:
                chunks[r], B = x, B - x
        while waiting and arrivals[waiting[0]] <= T and B > 0:
            r = waiting.pop(0)
            running.append(r)
            chunks[r] = x = min(P[r], B)
            B -= x
        R = 0
        for r, x in chunks.items():
            U += x
            Q += x * (c[r] + x / 2.0)
            R += c[r] + x
        T += cost(coef, U, Q, n, K, R)
        for r, x in chunks.items():
            c[r] += x
        for r in list(running):
            if c[r] >= P[r] and (r in dec or r in chunks):
                g[r] += 1
                toks[r].append(T)
                if g[r] == O[r]:
                    running.remove(r)
    return toks


def synthetic_log(path, seed=3, count=120, rate_per_ms=1 / 700, budget=512, coef=TRUE, cost=linear_ms,
                  in_per_token=0.0):
    """The test engine's log: request k reaches the engine at ``arrivals[k]``, sent
    ``IN_MS + in_per_token · P`` before (the ingress), its tokens reach the client OUT_MS
    after their step ends."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate_per_ms, count)).tolist()
    P = rng.integers(20, 1500, count).tolist()
    O = rng.integers(3, 60, count).tolist()
    toks = engine(arrivals, P, O, coef, budget, cost)
    lines = ["request_id,send_ms,prompt_tokens,output_tokens,token_ms"]
    for k in range(count):
        send = arrivals[k] - (IN_MS + in_per_token * P[k])
        lines.append(f"r{k},{send!r},{P[k]},{O[k]}," + " ".join(repr(t + OUT_MS) for t in toks[k]))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_step_keys_are_the_sweeps():
    assert STEP_KEYS == LEAVES["step_ms"]


def test_exact_log_gives_back_its_coefficients(tmp_path):
    log = synthetic_log(tmp_path / "exact.csv")
    recs = logs.read(log)
    st = steps.reconstruct(recs, max_batched_tokens=512, jitter_ms=1e-6)
    # the log exercises both kinds of step (49 prefill-bearing ones are measured: 5 fewer since
    # a prefill beside an unplaceable one is no longer placed by a guess)
    assert st.usable.sum() > 500 and (st.usable & st.prefill).sum() > 40
    f = fit.fit(st, hardware.DEFAULT_RATIOS, tie="never")
    for k in STEP_KEYS:
        assert f.coef[k] == pytest.approx(TRUE[k], rel=1e-6), k
    assert f.rel_sd < 1e-9
    o = fit.overhead(recs, st, f, 512, steps.isolated(recs, st))
    assert o["requests"] > 5
    assert o["median_ms"] == pytest.approx(IN_MS + OUT_MS, abs=1e-6)
    assert o["p10_ms"] == pytest.approx(IN_MS + OUT_MS, abs=1e-6)


@pytest.mark.parametrize("seed", [4, 5, 6, 7, 8, 10, 11])
def test_every_measured_step_is_the_engines(tmp_path, seed):
    """Exact logs of other seeds: every step the reconstruction measures is one the test
    engine ran, with its work and duration. (These seeds once mismeasured 1-8 steps each:
    a prefill that ended in a step no decoder chained (begun after an idle engine, at an
    unseen time) and could not be placed left that step's offer looking whole to the next
    request, which was then placed in the wrong steps; base came back 34 % off on seed 5.)"""
    recs = logs.read(synthetic_log(tmp_path / "exact.csv", seed=seed))
    st = steps.reconstruct(recs, max_batched_tokens=512, jitter_ms=1e-6)
    m = st.usable
    assert m.sum() > 2500
    np.testing.assert_allclose(linear_ms(TRUE, st.U[m], st.Q[m], st.n[m], st.K[m], st.R[m]), st.d_ms[m], rtol=1e-9)


def test_bursts_on_a_hand_built_log(tmp_path):
    # a: 100-token prompt, tokens at 10, 20, 31; b (sent at 12) joins the step ending
    # at 31 with 50 prompt tokens and decodes at 43. Jitter 0.05 ms inside a burst.
    log = tmp_path / "hand.jsonl"
    log.write_text(json.dumps({"request_id": "a", "send_ms": 0, "prompt_tokens": 100, "output_tokens": 3,
                               "token_ms": [10, 20, 31.05]}) + "\n"
                   + json.dumps({"request_id": "b", "send_ms": 12, "prompt_tokens": 50, "output_tokens": 2,
                                 "token_ms": [31, 43]}) + "\n")
    st = steps.reconstruct(logs.read(log), max_batched_tokens=8192, jitter_ms=0.5)
    assert st.end_ms.tolist() == pytest.approx([10, 20, 31.025, 43])
    assert st.n.tolist() == [0, 1, 1, 1]
    assert st.K.tolist() == [0, 101, 102, 51]          # P + tokens generated before the step
    assert st.U.tolist() == [100, 0, 50, 0]
    assert st.Q.tolist() == [100 * 50, 0, 50 * 25, 0]
    assert st.chained.tolist() == [False, True, True, True]
    assert st.d_ms[1:].tolist() == pytest.approx([10, 11.025, 11.975])
    assert steps.isolated(logs.read(log), st).tolist() == [True, False]


def test_a_prefill_in_chunks_goes_back_over_the_budget(tmp_path):
    # a decodes every 10 ms; b (300 tokens, budget 128: offers 127 a step) ends its
    # prefill at 50: chunks 127, 127, 46 in the steps ending at 30, 40, 50.
    log = tmp_path / "chunks.csv"
    log.write_text("request_id,send_ms,prompt_tokens,output_tokens,token_ms\n"
                   "a,0,10,6,10 20 30 40 50 60\n"
                   "b,15,300,1,50\n")
    st = steps.reconstruct(logs.read(log), max_batched_tokens=128, jitter_ms=0.5)
    assert st.U.tolist() == [10, 0, 127, 127, 46, 0]
    assert st.Q[2:5].tolist() == [127 * 63.5, 127 * (127 + 63.5), 46 * (254 + 23)]
    assert st.usable.tolist() == [False, True, True, True, True, True]


def test_vllm_benchmark_json(tmp_path):
    doc = {"start_times": [100.0, 100.5], "ttfts": [0.02, 0.03], "itls": [[0.01, 0.01], [0.012]],
           "input_lens": [64, 32], "output_lens": [3, 3], "errors": ["", ""]}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    a, b = logs.read(path)
    assert a.send_ms == 100000.0 and a.token_ms.tolist() == pytest.approx([100020, 100030, 100040])
    assert a.per_token and not b.per_token and b.chunk_tokens is None   # b: 2 chunks for 3 tokens


def test_tie_always_keeps_the_ratio(tmp_path):
    st = steps.reconstruct(logs.read(synthetic_log(tmp_path / "t.csv")), 512, 1e-6)
    f = fit.fit(st, {"prefill": 1e-4, "decode": 1000.0}, tie="always")
    assert f.coef["per_prefill_token_pair"] == pytest.approx(1e-4 * f.coef["per_prefill_token"])
    assert f.coef["per_decode_sequence"] == pytest.approx(1000.0 * f.coef["per_kv_token"])


def test_the_description_gives_the_ratios(tmp_path):
    toml = tmp_path / "m.toml"
    toml.write_text("[model]\nlayers = 2\nhidden_size = 8\nheads = 2\nkv_heads = 1\nmlp_size = 16\nvocab = 10\n"
                    "[hardware]\nbandwidth_GBps = 1\npeak_tflops = 1\n")
    hw = hardware.derive(hardware.read(toml))
    params = 2 * (2 * 8 * 8 + 2 * 8 * 4 + 3 * 8 * 16) + 2 * 10 * 8
    assert hw["parameters"] == params
    assert hw["ratios"]["prefill"] == pytest.approx(4 * 2 * 8 / (2 * params))
    assert hw["ratios"]["decode"] == pytest.approx(8 * 10 / (2 * 2 * 4 * 2))


BAD = [
    ("a.csv", "request_id,send_ms,prompt_tokens,output_tokens\nx,0,1,1\n", "header: missing column(s) token_ms"),
    ("b.csv", "request_id,send_ms,prompt_tokens,output_tokens,token_ms\nx,0,10,2,5 zz\n", "row 2: token_ms"),
    ("c.csv", "request_id,send_ms,prompt_tokens,output_tokens,token_ms\nx,0,10,2,5 4\n", "row 2: token_ms: timestamps decrease"),
    ("d.csv", "request_id,send_ms,prompt_tokens,output_tokens,token_ms\nx,0,10,3,5 6\n", "row 2: token_ms: 2 timestamps for 3"),
    ("e.csv", "request_id,send_ms,prompt_tokens,output_tokens,token_ms\nx,0,-1,1,5\n", "row 2: prompt_tokens"),
    ("f.jsonl", '{"request_id": 1}\nnot json\n', "line 1: missing send_ms"),
    ("g.txt", "", "unknown format '.txt'"),
    ("h.json", '{"start_times": [1]}', "keys: missing ttfts"),
    ("i.csv", "request_id,send_ms,prompt_tokens,output_tokens,token_ms,run\nx,0,10,1,5,A\nx,0,10,1,5,B\n"
     "x,1,10,1,6,A\n", "request_id x: appears twice in run A"),
    ("j.csv", "request_id,send_ms,prompt_tokens,output_tokens,token_ms\nx,0,10,2,5 5\n",
     "request_id x: two tokens at the same time (5.000 ms)"),
]


@pytest.mark.parametrize("name,text,expected", BAD)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, name, text, expected):
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "out"
    assert main([str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(path) in err and expected in err, err
    assert "Traceback" not in err and not out.exists()


def test_a_bad_second_log_is_named(tmp_path, capsys):
    """Several logs: the one that is bad is the one named; nothing written."""
    good = synthetic_log(tmp_path / "good.csv", count=20)
    bad = tmp_path / "bad.csv"
    bad.write_text("request_id,send_ms,prompt_tokens,output_tokens,token_ms\nx,0,10,2,5 4\n")
    assert main([str(good), str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {bad}: row 2: token_ms: timestamps decrease\n" and not (tmp_path / "o").exists()


def test_bad_description_names_the_key(tmp_path, capsys):
    log = synthetic_log(tmp_path / "ok.csv", count=20)
    toml = tmp_path / "m.toml"
    toml.write_text("[model]\nlayers = 2\n[hardware]\nbandwidth_GBps = 1\npeak_tflops = 1\n")
    assert main([str(log), "--model", str(toml), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{toml}: [model] hidden_size: missing" in err and not (tmp_path / "out").exists()


def test_the_command_writes_the_table_and_the_figure(tmp_path, capsys):
    log = synthetic_log(tmp_path / "exact.csv")
    assert main([str(log), "--out", str(tmp_path / "o"), "--max-batched-tokens", "512",
                 "--jitter-ms", "1e-6", "--tie", "never"]) == 0
    printed = capsys.readouterr().out
    assert "step_ms = { base = 7, per_prefill_token = 0.02, per_prefill_token_pair = 3e-06, " \
           "per_decode_sequence = 0.15, per_kv_token = 6e-05 }" in printed
    assert (tmp_path / "o" / "exact-steps.png").stat().st_size > 1000
    assert "overhead_ms = 13" in (tmp_path / "o" / "exact-step-ms.toml").read_text()


# The roofline (issue 25 item 2; docs/model.md "The step cost"): chunks above ~220 tokens
# are compute-bound, shorter ones and every decode step memory-bound.
TRUE_ROOF = {"base": 3.0, "weights": 6.0, "per_kv_token": 5e-5, "per_token": 0.027, "per_token_pair": 9e-7}


def test_roofline_keys_are_the_sweeps():
    assert roofline.ROOFLINE_KEYS == LEAVES["roofline_ms"]


def test_exact_roofline_log_gives_back_its_coefficients(tmp_path):
    log = synthetic_log(tmp_path / "roof.csv", coef=TRUE_ROOF, cost=roofline_ms)
    recs = logs.read(log)
    st = steps.reconstruct(recs, max_batched_tokens=512, jitter_ms=1e-6)
    f = roofline.fit(st, tie="never")
    assert 0 < (~f.memory_bound).sum() < f.memory_bound.sum()       # both regimes in the log
    assert (f.memory_bound & (st.U[st.usable] > 0)).any()           # short chunks under the weights' read
    for k in roofline.ROOFLINE_KEYS:
        assert f.coef[k] == pytest.approx(TRUE_ROOF[k], rel=1e-6), k
    assert f.rel_sd < 1e-9
    o = fit.overhead(recs, st, f, 512, steps.isolated(recs, st))
    assert o["requests"] > 5 and o["median_ms"] == pytest.approx(IN_MS + OUT_MS, abs=1e-6)
    # the linear fit cannot: a line through both regimes leaves residuals far above 0
    assert fit.fit(st, hardware.DEFAULT_RATIOS, tie="never").rel_sd > 0.01


def test_the_shipped_log_gives_back_the_hidden_roofline():
    """examples/serving-log.csv: vLLM's scheduler timed by conformance/serving_log.py's
    hidden roofline with log-normal noise σ = 0.03 per step. The fit's own standard errors
    come from its residual s.d., which must be σ (the roofline form fits the steps to
    their noise: within 10 %, and the prefill-bearing steps' RMS within 1.5 σ, where the
    linear fit leaves 25 %); every coefficient must then be within 4 standard errors of
    the hidden one (a normal estimate misses that by chance with probability 6e-5), and
    the standard errors small enough for that to mean something: base, weights and
    per_token within 5 %, per_kv_token within 5 %, per_token_pair (6 % of a 4,096-token
    prefill, 37 such steps with 3 % noise each) within 50 %. Tied to the description's
    ratios (both hold exactly in the hidden cost) the fit must be within 4 s.e. too."""
    from conformance import serving_log as sl
    h = sl.hidden_cost(1)
    truth = {"base": h["overhead_ms"], "weights": 1000 * h["weight_bytes"] / h["bandwidth_Bps"],
             "per_kv_token": 1000 * h["kv_bytes_per_token"] / h["bandwidth_Bps"],
             "per_token": 1000 * h["flops_per_token"] / h["peak_flops"],
             "per_token_pair": 1000 * h["attn_flops_per_pair"] / h["peak_flops"]}
    sigma = h["noise_sigma"]
    recs = logs.read("examples/serving-log.csv")
    st = steps.reconstruct(recs, 8192, 0.5)
    desc = hardware.derive(hardware.read("examples/llama-3.1-8b-h100.toml"))
    room = {"base": 0.05, "weights": 0.05, "per_kv_token": 0.05, "per_token": 0.05, "per_token_pair": 0.5}
    for tie in ("never", "always"):
        f = roofline.fit(st, desc["roofline_ratios"], tie)
        assert abs(f.rel_sd - sigma) < 0.1 * sigma, (tie, f.rel_sd)
        assert fit.residuals(st, f)["prefill-bearing"]["rms"] < 1.5 * sigma, tie
        for k in roofline.ROOFLINE_KEYS:
            assert f.se[k] < room[k] * truth[k], (tie, k, f.se[k])
            assert abs(f.coef[k] - truth[k]) < 4 * f.se[k], (tie, k, f.coef[k], truth[k], f.se[k])
    # efficiencies: the hidden GPU's (serving_log.GPU: memory 0.8, compute 0.6)
    eff = roofline.efficiencies(f, desc["roofline_priors"])
    assert eff["weights"] == pytest.approx(sl.GPU["mem_efficiency"], rel=0.05)
    assert eff["per_token"] == pytest.approx(sl.GPU["compute_efficiency"], rel=0.05)
    o = fit.overhead(recs, st, f, 8192, steps.isolated(recs, st))
    assert o["median_ms"] == pytest.approx(sl.FRONTEND["in_ms"] + sl.FRONTEND["out_ms"], abs=1.0)


def test_the_roofline_command_prints_lines_a_sweep_takes(tmp_path, capsys):
    from routesim.config import parse_sweep
    log = synthetic_log(tmp_path / "roof.csv", coef=TRUE_ROOF, cost=roofline_ms)
    assert main([str(log), "--out", str(tmp_path / "o"), "--max-batched-tokens", "512", "--jitter-ms", "1e-6",
                 "--cost", "roofline", "--quiet"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.splitlines() == ['step_cost = "roofline"', "roofline_ms = { base = 3, weights = 6, "
                                    "per_kv_token = 5e-05, per_token = 0.027, per_token_pair = 9e-07 }"]
    sweep = parse_sweep(f'[replica]\nkind = "batching"\n{printed}\n[grid]\nrate_rps = 1.0\n'
                        'heterogeneity = "uniform"\nscenario = "steady"\n'
                        '[[stages]]\npolicy = "round_robin"\nseeds = [1]\n')
    assert sweep.stages[0].values["roofline_ms_per_token_pair"] == (9e-07,)
    assert (tmp_path / "o" / "roof-roofline-steps.png").stat().st_size > 1000
    assert "overhead_ms = 13" in (tmp_path / "o" / "roof-roofline-ms.toml").read_text()


def test_closed_loop_sends_by_hand():
    """conformance/serving_log.py's closed-loop rule, N = 2, against a semaphore worked
    by hand: requests 0 and 1 go at once; 2 takes the slot request 1 frees at 4; 3 the
    one request 2 frees at 7; 4 (intended at 5) waits for request 0's at 10."""
    from conformance import serving_log as sl
    assert sl.closed_loop_sends([0, 0, 0, 0, 5], [10, 4, 7, 20, 30], 2) == [0, 0, 4, 7, 10]
    # intended times later than every free slot are kept; N at least R: the open loop
    assert sl.closed_loop_sends([0, 1, 50], [3, 4, 60], 1) == [0, 3, 50]
    assert sl.closed_loop_sends([0, 1, 2], [30, 20, 10], 3) == [0, 1, 2]


def test_closed_loop_case():
    """A closed-loop case: intended sends all 0 at rate inf, arrivals in_ms later (the
    earliest each can come), and the client sees a request end out_ms plus its last
    token's jitter after the step (the same jitter the log's token times get)."""
    from conformance import serving_log as sl
    c = sl.case(float("inf"), 5, 3, max_concurrency=2)
    fe = sl.FRONTEND
    assert c["client"]["intended_send_ms"] == [0.0] * 5
    assert [r["arrival_ms"] for r in c["requests"]] == [fe["in_ms"]] * 5
    jit = sl.jitters(c, 3)
    assert c["client"]["return_ms"] == [fe["out_ms"] + float(j[-1]) for j in jit]
    assert all(0 <= j.min() and j.max() < fe["jitter_ms"] and j.size == sl.OUTPUT for j in jit)
    # an open-loop case is what it was: no client, arrivals the Poisson times
    o = sl.case(2.0, 5, 3)
    assert "client" not in o
    gaps = np.random.default_rng(3).exponential(500.0, 5)
    assert [r["arrival_ms"] for r in o["requests"]] == list(np.round(np.cumsum(gaps), 3))
    with pytest.raises(ValueError):
        sl.case(float("inf"), 5, 3)


def test_routesim_prediction_inputs(tmp_path):
    """The held-out prediction's trace and sweep (conformance/calibration_report.py) as
    routesim reads them: the trace's rows are the log's requests at the given times, and
    the sweep's replica is the harness's (serving_log.REPLICA) with the fitted roofline,
    overhead and max_in_flight."""
    from conformance import calibration_report as cr
    from conformance import serving_log as sl
    from routesim import load_sweep
    from routesim.traces import load_trace
    c = sl.case(2.0, 4, 1)
    times = [0.0, 12.5, 40.25, 41.0]
    (tmp_path / "t.csv").write_text(cr.trace_csv(times, c))
    tr = load_trace(tmp_path / "t.csv", "csv")
    assert list(tr.t_ms) == times
    assert list(tr.prompt) == [r["prompt_tokens"] for r in c["requests"]]
    assert list(tr.output) == [sl.OUTPUT] * 4
    roof = {"base": 4.0, "weights": 6.0, "per_kv_token": 5e-5, "per_token": 0.027, "per_token_pair": 9e-7}
    (tmp_path / "s.toml").write_text(cr.routesim_sweep("t.csv", roof, 18.5, 7, 100.0))
    sw = load_sweep(str(tmp_path / "s.toml"))
    text = (tmp_path / "s.toml").read_text()
    for line in ('scheduler = "vllm"', "prefix_caching = false", "max_batch = 256", "kv_blocks = 28000",
                 "block_tokens = 16", "max_batched_tokens = 8192", "chunked_prefill = true",
                 'step_cost = "roofline"', "max_in_flight = 7", "client_overhead_ms = 18.5"):
        assert line in text
    assert sw.name == "calibration-heldout"


# --- issue 41: logs as a real client records them -------------------------------------------

def rewrite(src, dst, token_ms=None, keep=None, **columns):
    """A copy of the CSV log ``src`` at ``dst``: ``token_ms(row_index, times) -> times``
    changes each row's timestamps, ``keep(row) -> bool`` drops rows, and each
    ``columns[name](row_index, row) -> value`` sets a column (added when new)."""
    import csv
    rows = list(csv.DictReader(src.read_text().splitlines()))
    out = []
    for i, r in enumerate(rows):
        if keep and not keep(r):
            continue
        if token_ms:
            r["token_ms"] = " ".join(repr(float(t)) for t in token_ms(i, np.array(r["token_ms"].split(), float)))
        for name, value in columns.items():
            r[name] = value(i, r)
        out.append(r)
    names = list(out[0])
    dst.write_text("\n".join([",".join(names)] + [",".join(str(r[k]) for k in names) for r in out]) + "\n")
    return dst


def client_jitter(spread_ms, seed):
    """Each token reaches the client up to ``spread_ms`` late, uniformly (a token_ms edit)."""
    rng = np.random.default_rng(seed)
    return lambda i, t: t + rng.uniform(0.0, spread_ms, t.size)


def same_steps(a, b):
    """The two reconstructions schedule the same work in the same steps."""
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("U", "Q", "n", "K", "R", "size"))


def loses_few(truth, got, recs, spread_ms, budget):
    """``got`` (a jittered log's steps) measures a subset of ``truth``'s steps, short of
    at most the steps of the prefills whose send lies within ``spread_ms`` after a step's
    end (jitter can move that end past the send, and the admission step is then
    ambiguous: steps.place drops it), each at most ⌈P / (budget − decoders)⌉ + 1 steps."""
    if np.any(got.usable & ~truth.usable):
        return False
    ends = truth.end_ms
    near = [r for r in recs if np.any((r.send_ms - ends > 0) & (r.send_ms - ends <= spread_ms))]
    room = sum(int(np.ceil(r.prompt_tokens / (budget - truth.n.max()))) + 1 for r in near)
    return int((truth.usable & ~got.usable).sum()) <= room


def test_the_burst_threshold_comes_from_the_log(tmp_path, capsys):
    """Issue 41's first failure: a client whose tokens arrive up to 0.9 ms late. With the
    old fixed 0.5 ms, bursts split into pseudo-steps of a fraction of a ms (a fit then set
    the decode terms to 0): refused, naming the request, with the log's own threshold.
    Estimated from the log, the threshold rebuilds every step of the jitter-free log (the
    test engine's steps are 7 ms or more, the spread under 0.9 ms; a few admissions made
    ambiguous: ``loses_few``), each measured duration within the spread of the true one,
    and the command fits it."""
    exact = synthetic_log(tmp_path / "exact.csv")
    noisy = rewrite(exact, tmp_path / "jittered.csv", client_jitter(0.9, 7))
    out = tmp_path / "out"
    assert main([str(noisy), "--out", str(out), "--max-batched-tokens", "512", "--jitter-ms", "0.5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {noisy}: request_id ")
    assert "pseudo-steps" in err and "the log's own estimate" in err and not out.exists()

    j = steps.estimate_jitter(logs.read(noisy))
    assert 0.5 < j.threshold_ms < 0.9 < j.separation_ms
    truth = steps.reconstruct(logs.read(exact), 512, 1e-6)
    got = steps.reconstruct(logs.read(noisy), 512, j.threshold_ms)
    assert same_steps(truth, got) and loses_few(truth, got, logs.read(exact), 0.9, 512)
    ok = got.usable
    assert np.abs(got.d_ms[ok] - truth.d_ms[ok]).max() < 0.9
    assert main([str(noisy), "--out", str(out), "--max-batched-tokens", "512", "--tie", "never", "-q"]) == 0
    assert (out / "jittered-step-ms.toml").exists()


def test_the_harness_log_with_more_client_jitter():
    """The known-truth log (vLLM's scheduler, serving_log.FRONTEND's jitter: uniform below
    0.2 ms): its estimated threshold is within that jitter (timestamps rounded to 1 µs), and
    with 0.7 ms more jitter on every token the estimate rebuilds the same steps (a few
    admissions made ambiguous: ``loses_few``), where the old 0.5 ms splits them."""
    from conformance import serving_log as sl
    src = ROOT / "examples" / "serving-log.csv"
    j0 = steps.estimate_jitter(logs.read(src))
    assert j0.threshold_ms <= sl.FRONTEND["jitter_ms"] + 0.001 < j0.separation_ms
    base = steps.reconstruct(logs.read(src), 8192, j0.threshold_ms)
    assert same_steps(base, steps.reconstruct(logs.read(src), 8192, 0.5))
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        noisy = rewrite(src, Path(d) / "noisy.csv", client_jitter(0.7, 11))
        recs = logs.read(noisy)
    j = steps.estimate_jitter(recs)
    got = steps.reconstruct(recs, 8192, j.threshold_ms)
    assert same_steps(base, got) and loses_few(base, got, logs.read(src), 0.9, 8192)
    with pytest.raises(logs.LogError, match="pseudo-steps"):
        steps.reconstruct(recs, 8192, 0.5)


def two_servers(tmp_path):
    """Two runs on two servers at the same time: the test engine with two seeds (their own
    arrivals and prompts), the second's clock 1.3 s later; (first log, second log)."""
    a = synthetic_log(tmp_path / "server-a.csv", seed=3)
    b = rewrite(synthetic_log(tmp_path / "raw-b.csv", seed=4), tmp_path / "server-b.csv",
                lambda i, t: t + 1300.0, send_ms=lambda i, r: repr(float(r["send_ms"]) + 1300.0))
    return a, b


def test_two_clocks_in_one_file_are_refused(tmp_path, capsys):
    """Issue 41's second failure: two servers' runs merged into one file (a fit gave base
    = 2.61 and every other coefficient 0, exit 0). Refused, whatever --jitter-ms: one
    line naming the file and a request, nothing written."""
    a, b = two_servers(tmp_path)
    merged = tmp_path / "merged.csv"
    body = a.read_text().splitlines() + ["b" + line for line in b.read_text().splitlines()[1:]]
    merged.write_text("\n".join(body) + "\n")
    out = tmp_path / "out"
    for extra in ([], ["--jitter-ms", "0.5"], ["--jitter-ms", "1e-6"]):
        assert main([str(merged), "--out", str(out), "--max-batched-tokens", "512", *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {merged}: request_id "), err
        assert "two step clocks interleave" in err and "one file per run, or a run column" in err
        assert not out.exists()


def test_runs_are_reconstructed_apart(tmp_path, capsys):
    """The same two runs as two files, or as one file with a run column: each run's steps
    on its own clock, and the fit gives back the coefficients both share, exactly; the
    two ways give the same table."""
    a, b = two_servers(tmp_path)
    tagged = tmp_path / "tagged.csv"
    ta = rewrite(a, tmp_path / "ta.csv", run=lambda i, r: "A")
    tb = rewrite(b, tmp_path / "tb.csv", run=lambda i, r: "B")
    tagged.write_text(ta.read_text() + "".join(tb.read_text().splitlines(True)[1:]))   # the same request ids
    printed = []
    for logs_ in ([str(tagged)], [str(a), str(b)]):
        assert main([*logs_, "--out", str(tmp_path / "o"), "--max-batched-tokens", "512", "--tie", "never",
                     "-q"]) == 0
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1]
    assert printed[0].strip() == ("step_ms = { base = 7, per_prefill_token = 0.02, per_prefill_token_pair = 3e-06, "
                                  "per_decode_sequence = 0.15, per_kv_token = 6e-05 }")
    assert (tmp_path / "o" / "server-a-and-1-more-step-ms.toml").exists()


def test_resampled_errors_follow_the_run_to_run_spread(tmp_path):
    """Six runs whose servers differ: each run's base drawn 7 ms × (1 + 0.1 z), the rest
    shared, no step noise. The fitted base is about the runs' mean, so a user calibrating
    on six other runs would see it move by about the s.d. of the runs' bases / √6; the
    resampled (runs) standard error must be within a factor 2 of that, where the
    regression's, which takes every step as independent, is several times smaller."""
    z = np.random.default_rng(8).standard_normal(6)
    bases = 7.0 * (1 + 0.1 * z)
    files = [synthetic_log(tmp_path / f"run{i}.csv", seed=20 + i, count=50, coef=dict(TRUE, base=float(b)))
             for i, b in enumerate(bases)]
    runs = [(str(p), logs.read(p)) for p in files]
    st, recs, iso, jit = steps.reconstruct_runs(runs, 512)
    f = fit.fit(st, hardware.DEFAULT_RATIOS, tie="never")
    from routesim.calibrate import uncertainty

    def refit(s):
        return fit.fit(s, hardware.DEFAULT_RATIOS, {"prefill": False, "decode": False}).coef

    b = uncertainty.bootstrap(st, refit, STEP_KEYS)
    assert b["kind"] == "runs" and b["units"] == 6 and b["replicates"] + b["failed"] == uncertainty.REPLICATES
    spread = bases.std(ddof=1) / np.sqrt(len(bases))
    assert 0.5 * spread < b["se"]["base"] < 2 * spread, (b["se"]["base"], spread)
    assert f.se["base"] < b["se"]["base"] / 3
    assert uncertainty.bootstrap(st, refit, STEP_KEYS, replicates=5)["se"] == \
        uncertainty.bootstrap(st, refit, STEP_KEYS, replicates=5)["se"]           # deterministic


def test_a_thin_log_is_refused(tmp_path, capsys):
    """Eight requests, each alone on the engine: no prefill-bearing step has a measured
    duration, so nothing determines the prefill terms."""
    thin = synthetic_log(tmp_path / "thin.csv", count=8, rate_per_ms=1 / 5000)
    assert main([str(thin), "--out", str(tmp_path / "o"), "--max-batched-tokens", "512"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: {thin}: steps: only 0 prefill-bearing steps" in err
    assert "calibrate from a longer log" in err and not (tmp_path / "o").exists()


@pytest.mark.slow  # 3 s
def test_warnings_exit_3_with_the_fit_written(tmp_path, capsys):
    """A fit the data do not support but the command does not refuse: printed and
    written, one ``warning:`` line a problem, exit status 3. (a) per_kv_token whose
    steps want it below 0 (a log made with a negative one) sits at its bound 0; (b) a
    description whose bandwidth and peak are a millionth of the fitted times': every
    efficiency above 1; (c) the linear form on the known-truth roofline log: its
    prefill-bearing steps' residual RMS is above 20 % (the kink of docs/calibration.md)."""
    out = tmp_path / "o"
    low = synthetic_log(tmp_path / "low.csv", coef=dict(TRUE, per_kv_token=-2e-5))
    assert main([str(low), "--out", str(out), "--max-batched-tokens", "512", "--tie", "never", "-q"]) == 3
    cap = capsys.readouterr()
    assert "per_kv_token = 0" in cap.out
    assert cap.err == (f"warning: {low}: per_kv_token = 0, at its bound: the log does not determine it (its steps "
                       "pull it below 0); calibrate from a longer log, or tie it (--tie always with --model)\n")
    assert (out / "low-step-ms.toml").exists()

    roof = synthetic_log(tmp_path / "roof.csv", coef=TRUE_ROOF, cost=roofline_ms)
    toml = tmp_path / "m.toml"
    toml.write_text("[model]\nlayers = 2\nhidden_size = 8\nheads = 2\nkv_heads = 1\nmlp_size = 16\nvocab = 10\n"
                    "[hardware]\nbandwidth_GBps = 1e-6\npeak_tflops = 1e-9\n")
    assert main([str(roof), "--out", str(out), "--max-batched-tokens", "512", "--cost", "roofline", "--model",
                 str(toml), "-q"]) == 3
    err = capsys.readouterr().err.splitlines()
    assert [w.split(": ")[2].split(" efficiency")[0] for w in err] == list(roofline.ROOFLINE_KEYS[1:])
    assert all(w.startswith(f"warning: {roof}: ") and "> 1, faster than the description's" in w for w in err)

    log = ROOT / "examples" / "serving-log.csv"
    assert main([str(log), "--model", str(ROOT / "examples" / "llama-3.1-8b-h100.toml"), "--out", str(out), "-q"]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {log}: prefill-bearing steps' residual RMS ") and err.count("\n") == 1
    assert "try --cost roofline" in err


def test_an_inseparable_pair_is_said(tmp_path, capsys):
    """Issue 41: the roofline's base/weights split undetermined, and not said. A
    roofline log with 3 % step noise whose prompts are short (20-300 tokens: hardly any
    compute-bound step, the only ones that tell base from weights) leaves the two
    estimates correlated and loose; the report names the pair and their sum, which the
    memory-bound steps pin."""
    rng = np.random.default_rng(5)

    def noisy(coef, *x):
        return roofline_ms(coef, *x) * float(np.exp(0.03 * rng.standard_normal()))

    log = tmp_path / "short.csv"
    rng0 = np.random.default_rng(2)
    arrivals = np.cumsum(rng0.exponential(700, 120)).tolist()
    P = rng0.integers(20, 300, 120).tolist()
    O = rng0.integers(3, 60, 120).tolist()
    toks = engine(arrivals, P, O, TRUE_ROOF, 512, noisy)
    log.write_text("request_id,send_ms,prompt_tokens,output_tokens,token_ms\n" + "".join(
        f"r{k},{arrivals[k] - IN_MS!r},{P[k]},{O[k]}," + " ".join(repr(t + OUT_MS) for t in toks[k]) + "\n"
        for k in range(120)))
    main([str(log), "--out", str(tmp_path / "o"), "--max-batched-tokens", "512", "--cost", "roofline",
          "--tie", "never"])
    printed = capsys.readouterr().out
    assert "not separated by this log: base and weights (their estimates correlate -" in printed, printed
    assert "base + weights = " in printed


# The engine loop's ingress (issue 41 item 3; calibrate.ingress): the step boundary each
# request joined bounds its lag (ingress + the way back), the requests sent to an idle
# engine give it; fitted from both, with a resampled standard error.

def test_the_test_engines_hidden_ingress_is_recovered(tmp_path):
    """The test engine's log with an ingress of IN_MS + 0.004 ms per prompt token and a way
    back of OUT_MS: --return-ms OUT_MS gives back both ingress keys within their stated
    uncertainty; most requests show their lag by a boundary they joined (not only those
    sent to an idle engine)."""
    from routesim.calibrate import ingress
    from routesim.calibrate.__main__ import calibrate
    log = synthetic_log(tmp_path / "ingress.csv", count=160, rate_per_ms=1 / 250, in_per_token=0.004)
    res = calibrate(log, max_batched_tokens=512, jitter_ms=1e-6, tie="never", return_ms=OUT_MS)
    g = res["ingress"]
    assert g["interval"] > g["exact"] > 0 and g["per_token_fitted"], g
    for key, truth in (("ingress_ms", IN_MS), ("ingress_ms_per_token", 0.004)):
        assert abs(g[key] - truth) <= g["uncertainty"][key] + 1e-9, (key, g)
        lo, hi = g["consistent"][key]
        assert lo - 1e-9 <= truth <= hi + 1e-9, (key, g)    # every boundary allows the truth
    assert g["uncertainty"]["ingress_ms"] < 1.5 and g["uncertainty"]["ingress_ms_per_token"] < 0.002, g
    # the busy engine's requests alone (their admission boundaries) determine it too
    st, recs = res["steps"], res["records"]
    obs = ingress.observations(recs, st, steps.isolated(recs, st), res["fit"], 512)
    busy = ingress.fit_ingress(obs.take(~obs.exact), 1e-3, OUT_MS)
    for key, truth in (("ingress_ms", IN_MS), ("ingress_ms_per_token", 0.004)):
        assert abs(busy[key] - truth) <= busy["uncertainty"][key] + 1e-9, (key, busy)
    assert busy["uncertainty"]["ingress_ms"] < 2.0, busy
    # without the way back the log's lag is all ingress: the constant grows by OUT_MS
    res0 = calibrate(log, max_batched_tokens=512, jitter_ms=1e-6, tie="never", return_ms=0.0)
    assert res0["ingress"]["ingress_ms"] == pytest.approx(g["ingress_ms"] + OUT_MS, abs=1e-3)


@pytest.mark.slow  # 5 s: fits the shipped harness log
def test_the_shipped_harness_log_gives_back_its_hidden_ingress():
    """examples/serving-log.csv: vLLM's scheduler with conformance/serving_log.py's front end
    (12 ms from send to scheduler, 6 ms back, jitter below 0.2 ms): --return-ms 6 gives back
    12 ms within two resampled s.e. and the burst threshold, and no per-token part."""
    from conformance import serving_log as sl
    from routesim.calibrate.__main__ import calibrate
    res = calibrate(ROOT / "examples" / "serving-log.csv", ROOT / "examples" / "llama-3.1-8b-h100.toml",
                    cost="roofline", return_ms=sl.FRONTEND["out_ms"])
    g = res["ingress"]
    for key, truth in (("ingress_ms", sl.FRONTEND["in_ms"]), ("ingress_ms_per_token", 0.0)):
        assert abs(g[key] - truth) <= g["uncertainty"][key], (key, g)
    assert g["uncertainty"]["ingress_ms"] < 1.0, g
    assert g["interval"] > 100, g


def calibrate_ingress(log):
    from routesim.calibrate.__main__ import calibrate
    return calibrate(log, max_batched_tokens=512, jitter_ms=1e-6, tie="never", return_ms=4.0)["ingress"]


def test_the_ingress_command_prints_and_writes_sweep_lines(tmp_path, capsys):
    """--ingress: the printed [replica] lines and the written table carry ingress_ms and
    ingress_ms_per_token, which a sweep takes; client_overhead_ms is the way back given."""
    log = synthetic_log(tmp_path / "ingress.csv", count=160, in_per_token=0.004)
    out = tmp_path / "o"
    assert main([str(log), "--out", str(out), "--max-batched-tokens", "512", "--jitter-ms", "1e-6",
                 "--tie", "never", "--ingress", "--return-ms", "4"]) == 0
    printed = capsys.readouterr().out
    assert "client_overhead_ms = 4\n" in printed and "client_overhead_ms = 13" not in printed
    table = (out / "ingress-step-ms.toml").read_text()
    assert table.startswith("# python -m routesim.calibrate ") and "--ingress --return-ms 4" in table.splitlines()[0]
    replica = table.split("[calibration]")[0].split("[replica]\n")[1]
    assert "ingress_ms = " in replica and "ingress_ms_per_token = " in replica
    from routesim.config import parse_sweep
    sweep = parse_sweep(f'[replica]\nkind = "batching"\n{replica}\n[workload]\nclient_overhead_ms = 4\n'
                        '[grid]\nrate_rps = 1.0\nheterogeneity = "uniform"\nscenario = "steady"\n'
                        '[[stages]]\npolicy = "round_robin"\nseeds = [1]\n')
    g = calibrate_ingress(log)
    assert sweep.stages[0].values["ingress_ms"] == (pytest.approx(g["ingress_ms"], rel=1e-5),)
    assert sweep.stages[0].values["ingress_ms_per_token"] == (pytest.approx(g["ingress_ms_per_token"], rel=1e-5),)


@pytest.mark.parametrize("args, expected", [
    (["--return-ms", "4"], "--return-ms needs --ingress"),
    (["--ingress", "--return-ms", "-1"], "--return-ms needs --ingress and a finite number >= 0"),
    (["--ingress", "--return-ms", "400"], "--return-ms: 400 ms is more than the requests' measured lag"),
])
def test_bad_ingress_options_are_one_line_and_write_nothing(tmp_path, capsys, args, expected):
    log = synthetic_log(tmp_path / "ingress.csv", count=160, in_per_token=0.004)
    out = tmp_path / "out"
    assert main([str(log), "--out", str(out), "--max-batched-tokens", "512", "--jitter-ms", "1e-6", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: ") and expected in err, err
    assert "Traceback" not in err and not out.exists()
