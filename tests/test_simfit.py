"""Fit by simulation (routesim/calibrate/simfit.py) and per-request logs
(routesim/calibrate/request_log.py): issue 41, item 5."""

import numpy as np
import pytest

from routesim.calibrate import hardware, logs, request_log, simfit


def test_an_axis_moves_at_its_edge_and_halves_inside():
    a = simfit.Axis("memory", {"roofline_ms_weights": 6.0}, center=1.0, step=4.0)
    assert [a.at(k) for k in (-1, 0, 1)] == [0.25, 1.0, 4.0]
    moved = a.narrowed(1)                       # best at the edge: the centre moves, the step stays
    assert (moved.center, moved.step) == (4.0, 4.0)
    inside = a.narrowed(0)                      # best inside: the factor's square root
    assert (inside.center, inside.step) == (1.0, 2.0)
    lin = simfit.Axis("client_overhead_ms", {"client_overhead_ms": 0.0}, "lin", center=3.0, step=8.0)
    assert lin.at(-1) == 0.0                    # a shift is floored at 0
    assert lin.narrowed(0).step == 4.0
    tiny = simfit.Axis("x", {"x": 1.0}, center=1.0, step=1.021)
    assert tiny.narrowed(0).step == simfit.RESOLUTION["log"] and tiny.narrowed(0).resolved


def test_candidates_are_every_combination_moving_the_targets_together():
    start = {"base": 4.0, "weights": 6.0, "per_kv_token": 5e-5, "per_token": 0.03, "per_token_pair": 9e-7}
    axes = simfit.roofline_axes(start, 10.0)
    offs, vals = simfit.candidates(axes)
    assert offs.shape == (27, 3) and len({tuple(o) for o in offs}) == 27
    # memory moves weights and per_kv_token by one factor: their ratio is the start's
    assert np.allclose(vals["roofline_ms_per_kv_token"] / vals["roofline_ms_weights"], 5e-5 / 6.0)
    assert np.allclose(vals["roofline_ms_per_token_pair"] / vals["roofline_ms_per_token"], 9e-7 / 0.03)
    assert sorted(set(vals["client_overhead_ms"])) == [2.0, 10.0, 18.0]
    assert "roofline_ms_base" not in vals       # held at its start


def test_figures_are_nearest_rank_of_the_cohort():
    log = simfit.Log("x", np.array([0.0, 1000.0, 2000.0, 3000.0]), np.ones(4, np.int64),
                     np.array([1, 3, 5, 2]), np.array([10.0, 20.0, 30.0, 40.0]), np.array([10.0, 40.0, 70.0, 50.0]),
                     cohort_from_s=1.0)
    m = simfit.measured(log)
    # cohort: the last three; TPOT (E2E - TTFT)/(O - 1) = 10, 10, 10 ms
    assert m == {"ttft_p50": 30.0, "ttft_p90": 40.0, "e2e_p50": 50.0, "tpot_p50": 10.0}


@pytest.mark.parametrize("text, where", [
    ("request_id,send_ms,prompt_tokens,output_tokens,ttft_ms\n0,0,1,1,5\n", "header: missing column(s) e2e_ms"),
    ("request_id,send_ms,prompt_tokens,output_tokens,ttft_ms,e2e_ms\n0,0,1,1,5,4\n", "row 2: e2e_ms: 4 is below"),
    ("request_id,send_ms,prompt_tokens,output_tokens,ttft_ms,e2e_ms\n0,0,1,1,5,6\n1,x,1,1,5,6\n", "row 3: send_ms"),
    ("request_id,send_ms,prompt_tokens,output_tokens,ttft_ms,e2e_ms\n0,0,1.5,1,5,6\n", "row 2: prompt_tokens"),
    ("request_id,send_ms,prompt_tokens,output_tokens,ttft_ms,e2e_ms\n0,0,1,1,5,6\n0,1,1,1,5,6\n", "row 3: request_id"),
    ("request_id,send_ms,prompt_tokens,output_tokens,ttft_ms,e2e_ms\n", "file: no requests"),
])
def test_a_bad_per_request_log_names_the_file_and_row(tmp_path, text, where):
    p = tmp_path / "log.csv"
    p.write_text(text)
    with pytest.raises(logs.LogError) as e:
        request_log.read(p)
    assert str(e.value).startswith(f"{p}: {where}")


def test_a_per_request_log_round_trips_and_a_per_token_log_reduces_to_it(tmp_path):
    log = request_log.read("examples/serving-log.csv")
    recs = logs.read("examples/serving-log.csv")
    first = min(recs, key=lambda r: r.send_ms)
    assert log.ttft_ms[0] == first.token_ms[0] - first.send_ms and log.e2e_ms[0] == first.token_ms[-1] - first.send_ms
    request_log.write(log, tmp_path / "r.csv")
    back = request_log.read(tmp_path / "r.csv")
    assert np.allclose(back.ttft_ms, log.ttft_ms, atol=5e-4) and np.array_equal(back.output, log.output)


def test_the_fit_recovers_the_harness_hidden_roofline_from_per_request_times():
    """examples/serving-log.csv: vLLM's real scheduler under a hidden roofline
    (conformance/serving_log.py: memory efficiency 0.8, compute 0.6, base 4 ms, 3 % noise;
    12 ms in and 6 ms out of the front end). Its per-request times only, the fit from
    efficiencies 0.7 and 10 ms: the final step of a factor axis is 2 %, so the truth's
    efficiencies should be within about one step and a half (3 %); the overhead within
    2 ms (the final step 0.5 ms; the front end's 12 ms before the scheduler is not
    routesim's overhead after the last token, which shifts the queueing a little)."""
    from conformance import serving_log as sl
    log = request_log.read("examples/serving-log.csv")
    pri = hardware.derive(hardware.read("examples/llama-3.1-8b-h100.toml"))["roofline_priors"]
    start = {"base": sl.GPU["overhead_ms"], "weights": pri["weights"] / 0.7, "per_kv_token": pri["per_kv_token"] / 0.7,
             "per_token": pri["per_token"] / 0.7, "per_token_pair": pri["per_token_pair"] / 0.7}
    rep = dict(scheduler="vllm", async_scheduling=False, prefix_caching=False, max_batch=256, kv_blocks=28000, block_tokens=16,
               max_batched_tokens=8192, chunked_prefill=True, step_cost="roofline", roofline_ms=start)
    res = simfit.fit([log], rep, simfit.roofline_axes(start, 10.0))
    mem = pri["weights"] / res.values["roofline_ms_weights"]
    comp = pri["per_token"] / res.values["roofline_ms_per_token"]
    assert abs(mem / sl.GPU["mem_efficiency"] - 1) < 0.03
    assert abs(comp / sl.GPU["compute_efficiency"] - 1) < 0.03
    truth_ms = sl.FRONTEND["in_ms"] + sl.FRONTEND["out_ms"]
    assert abs(res.values["client_overhead_ms"] - truth_ms) <= 2.0
    assert res.error < 0.01 and res.candidates == 27 * res.rounds


def test_the_narrowing_walks_to_a_minimum_and_says_when_it_did_not_settle(monkeypatch):
    """simulate replaced by a bowl whose minimum is at memory factor 3 and an overhead
    of 21 ms (errors computes from the fake metrics): the narrowing walks there from 1
    and 10 ms, to within its resolution; with too few rounds it says it did not settle."""
    log = simfit.Log("x", np.array([0.0, 1000.0]), np.ones(2, np.int64), np.full(2, 3, np.int64),
                     np.array([10.0, 10.0]), np.array([30.0, 30.0]))
    axes = [simfit.Axis("memory", {"roofline_ms_weights": 1.0}),
            simfit.Axis("client_overhead_ms", {"client_overhead_ms": 0.0}, "lin", center=10.0, step=8.0)]

    def fake(logs, replica, vals):
        from routesim.batching.dtypes import METRICS
        m = np.zeros((1, len(vals["client_overhead_ms"])), METRICS)
        bad = np.abs(np.log(vals["roofline_ms_weights"] / 3.0)) + np.abs(vals["client_overhead_ms"] - 21.0) / 100
        m["completed"] = 2
        for name, truth in simfit.measured(log).items():
            m[name] = truth * (1 + bad)
        return m

    monkeypatch.setattr(simfit, "simulate", fake)
    res = simfit.fit([log], {}, axes)
    assert res.converged and res.rounds < simfit.MAX_ROUNDS
    assert abs(res.values["roofline_ms_weights"] / 3.0 - 1) < 0.02 and abs(res.values["client_overhead_ms"] - 21) <= 0.5
    short = simfit.fit([log], {}, axes, max_rounds=2)
    assert not short.converged and short.rounds == 2
