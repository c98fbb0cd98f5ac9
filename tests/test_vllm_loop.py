"""The vllm mode as a vLLM server runs (issue 40): vLLM's defaults and metrics.

- ``waiting_cap``: unbounded (``inf``) by default in the vllm mode, as vLLM's waiting
  queue (``RequestQueue`` has no bound); 512 in the reserve mode; a value the file sets
  is kept.
- ``prefix_hit_rate`` is vLLM's own metric (``PrefixCacheStats``: hits over queries of
  admissions of requests never preempted), ``preempted_hit_rate`` the re-admissions'
  (vLLM's ``preempted_hits`` / ``preempted_queries``), checked on a hand-worked case
  through the engine and the reference alike.
"""

from __future__ import annotations

import math
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import token_reference as ref

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from routesim.batching import runs as br  # noqa: E402
from routesim.config import load_sweep  # noqa: E402

from test_vllm_engine import run_engine  # noqa: E402


# --- waiting_cap -------------------------------------------------------------------

SWEEP = """\
[replica]
kind = "batching"
{replica}
[simulation]
warmup_s = 1.0
measure_s = 2.0
drain_s = 0.0
[workload]
p_long = 0.0
chat = {{ prompt = {{ median = 200, max = 1024 }}, output = {{ median = 20, max = 128 }} }}
[cluster.heterogeneity]
uniform = [1, 1]
[scenarios.steady]
events = []
[grid]
rate_rps = [5]
heterogeneity = ["uniform"]
scenario = ["steady"]
[[stages]]
name = "only"
policy = ["round_robin"]
seeds = {{ first = 1, count = 1 }}
{stage}
"""


def _grid(tmp_path, replica="", stage=""):
    from routesim.batching.grid import build
    path = tmp_path / "s.toml"
    path.write_text(SWEEP.format(replica=textwrap.dedent(replica), stage=textwrap.dedent(stage)))
    sweep = load_sweep(path)
    return sweep, build(sweep, sweep.stages[0])


@pytest.mark.parametrize("replica, stage, want", [
    ('scheduler = "reserve"', "", [512]),
    ('scheduler = "vllm"', "", [br.UNBOUNDED]),
    ('scheduler = "vllm"\nwaiting_cap = 512', "", [512]),                  # set: kept
    ('scheduler = "vllm"\nwaiting_cap = inf', "", [br.UNBOUNDED]),
    ('scheduler = "reserve"\nwaiting_cap = inf', "", [br.UNBOUNDED]),       # inf in either mode
    ("", 'scheduler = ["reserve", "vllm"]', [512, br.UNBOUNDED]),         # per run
    ("", 'scheduler = ["reserve", "vllm"]\nwaiting_cap = 64', [64, 64]),
])
def test_waiting_cap_default_follows_the_scheduler(tmp_path, replica, stage, want):
    _, grid = _grid(tmp_path, replica, stage)
    assert sorted(grid.params["waiting_cap"].tolist()) == want


def test_waiting_cap_attribute_says_what_the_runs_take(tmp_path):
    from routesim.batching.grid import _run_default_attr
    for replica, want in (('scheduler = "vllm"', math.inf), ('scheduler = "reserve"', 512)):
        sweep, _ = _grid(tmp_path, replica)
        assert _run_default_attr(sweep.model.param["waiting_cap"], sweep.stages[0].values) == want
    sweep, _ = _grid(tmp_path, stage='scheduler = ["reserve", "vllm"]')
    assert (_run_default_attr(sweep.model.param["waiting_cap"], sweep.stages[0].values)
            == "512 (scheduler = reserve), inf (scheduler = vllm)")


# --- prefix_hit_rate as vLLM counts it ------------------------------------------------

def _hand_case():
    """One replica, b = 4, 5 blocks, prefix caching. A (P = 8, ids [1, 2], O = 8) and B
    (P = 8, ids [1, 3], O = 10) arrive together. Worked by hand from vLLM's scheduler
    (VLLM-MODE.md 9-13):

    step 1: A admitted, hit 0 of 8 (2 blocks); B admitted, hits block 1 (A's): 4 of 8,
            takes 1 block (2 left); both emit (g = 1).
    step 2: each takes its third block at 9 tokens (0 left); steps 3-5 need none (A and
            B hash their third block at 12 tokens).
    step 6: A's 13th token needs a fourth block: none free, so B (the last admitted) is
            preempted with g = 5; its blocks go back last first (its third, then its
            second; the first is A's too) and A takes the first of them (B's third:
            evicted).
    step 7: B at the head: L = P + g = 13, hits ids 1 and 3 (8 tokens), its third key
            is gone; the gate needs 4 − 2 + 1 (its cached block 3) = 3 blocks, 1 free:
            refused.
    step 8: A emits its 8th token and completes; its 4 blocks go back (5 free).
    step 9: B re-admitted: hits 8 of its 13 queried tokens.

    vLLM's PrefixCacheStats: new admissions 4 hits of 16 queried (0.25); the preempted
    re-admission 8 of 13, filed apart. (The page's definition, re-admissions in, would
    be 12 / 29.)"""
    step = dict(base=5.0, per_prefill_token=0.01, per_prefill_token_pair=0.0, per_decode_sequence=0.1,
                per_kv_token=0.0)
    replica = dict(block_size=4, num_blocks=5, max_num_seqs=8, max_num_batched_tokens=64, chunked_prefill=True,
                   prefix_caching=True, step_ms=step)
    requests = [dict(id=0, arrival_ms=10.0, prompt_tokens=8, output_tokens=8, block_ids=[1, 2]),
                dict(id=1, arrival_ms=10.0, prompt_tokens=8, output_tokens=10, block_ids=[1, 3])]
    return dict(replica=replica, requests=requests)


def _reference(case):
    from test_vllm_engine import case_values
    reqs = case["requests"]
    wl = ref.Workload(t=[q["arrival_ms"] for q in reqs], prompt=[q["prompt_tokens"] for q in reqs],
                      output=[q["output_tokens"] for q in reqs], key=[0.1 * (k + 1) for k in range(len(reqs))],
                      blocks=[list(q["block_ids"]) for q in reqs])
    return ref.simulate(wl, case_values(case), [1.0], [], "round_robin", 1, check=True, log_steps=True)


def test_hit_rates_as_vllm_counts_them_hand_case():
    case = _hand_case()
    want = dict(prefix_hit_rate=4 / 16, preempted_hit_rate=8 / 13, preemptions=1)
    got = _reference(case)
    log = got["step_log"]["requests"]
    assert [q["hits"] for q in log] == [[0], [4, 8]] and [q["preemptions"] for q in log] == [0, 1]
    metrics, _, _ = run_engine([case])
    for name, value in want.items():
        assert got[name] == value, ("reference", name)
        assert metrics[0][name] == value, ("engine", name)


def test_no_prefix_caching_queries_nothing():
    """vLLM records no prefix-cache query when caching is off (KVCacheManager.
    record_prefix_cache_stats returns at once): both rates are NaN, not 0."""
    case = _hand_case()
    case["replica"]["prefix_caching"] = False
    got = _reference(case)
    metrics, _, _ = run_engine([case])
    for name in ("prefix_hit_rate", "preempted_hit_rate"):
        assert math.isnan(got[name]) and math.isnan(metrics[0][name]), name


def test_preempted_hit_rate_is_a_vllm_variable(tmp_path):
    """In a Dataset only when a run has scheduler = "vllm" (NaN in the reserve runs)."""
    import routesim
    for stage, present in (('scheduler = ["reserve"]', False), ('scheduler = ["reserve", "vllm"]', True)):
        path = tmp_path / "s.toml"
        path.write_text(SWEEP.format(replica="", stage=stage))
        ds = routesim.run(load_sweep(path), show_progress=False)["only"]
        assert ("preempted_hit_rate" in ds) == present
        if present:
            assert np.isnan(ds.preempted_hit_rate.sel(scheduler="reserve")).all()


# --- the engine loop's CPU time of a step (issue 40 item 3) ---------------------------

def _loop_case(n_requests):
    """``n_requests`` requests of P = 8 (two blocks of 4, ids of their own), O = 3,
    arriving together at 10 ms on one replica; the linear step cost with only c_0 = 5 ms
    and c_pf = 0.25 ms per prefill token."""
    step = dict(base=5.0, per_prefill_token=0.25, per_prefill_token_pair=0.0, per_decode_sequence=0.0,
                per_kv_token=0.0)
    replica = dict(block_size=4, num_blocks=64, max_num_seqs=8, max_num_batched_tokens=64, chunked_prefill=True,
                   prefix_caching=True, step_ms=step)
    requests = [dict(id=k, arrival_ms=10.0, prompt_tokens=8, output_tokens=3, block_ids=[10 * k + 1, 10 * k + 2])
                for k in range(n_requests)]
    return dict(replica=replica, requests=requests)


def _both(case, factor=1.0, **values):
    """(engine metrics, reference metrics) of a case on one replica of time factor
    ``factor``, with ``values`` over the case's (test_vllm_engine.case_values)."""
    from test_vllm_engine import case_values, case_workload
    v = case_values(case)
    v.update(values)
    p = br.params_row(v, "round_robin", n_replicas=1)
    metrics, _ = br.simulate(p.reshape(1), np.array([[factor]]), br.event_rows([]),
                             br.Packed.of([case_workload(case)]), np.zeros(0), np.zeros(2, np.int64))
    reqs = case["requests"]
    wl = ref.Workload(t=[q["arrival_ms"] for q in reqs], prompt=[q["prompt_tokens"] for q in reqs],
                      output=[q["output_tokens"] for q in reqs], key=[0.1 * (k + 1) for k in range(len(reqs))],
                      blocks=[list(q["block_ids"]) for q in reqs])
    return metrics[0], ref.simulate(wl, v, [factor], [], "round_robin", 1, check=True)


@pytest.mark.parametrize("scheduler", ["reserve", "vllm"])
@pytest.mark.parametrize("n, factor, ttft, e2e", [
    # one request: its prefill step 1·(5 + 0.25·8) + (1.5 + 0.5·1) = 9 ms, then two decode
    # steps of 5 + 2 = 7 ms: TTFT 9, E2E 23
    (1, 1.0, 9.0, 23.0),
    # time factor 2 scales the step cost, not the CPU time: 2·7 + 2 = 16, decodes 2·5 + 2 = 12
    (1, 2.0, 16.0, 40.0),
    # two at once: 5 + 0.25·16 + (1.5 + 0.5·2) = 11.5, decodes 5 + 2.5 = 7.5: E2E 26.5
    (2, 1.0, 11.5, 26.5),
])
def test_step_cpu_time_hand_cases(scheduler, n, factor, ttft, e2e):
    """step_cpu_ms = 1.5 and step_cpu_ms_per_seq = 0.5 on hand-worked steps (docs/model.md
    "The engine loop's timing"), either scheduler, through the engine and the reference."""
    got, want = _both(_loop_case(n), factor, scheduler=scheduler, step_cpu_ms=1.5, step_cpu_ms_per_seq=0.5)
    for name, value in (("ttft_p50", ttft), ("ttft_p99", ttft), ("e2e_p99", e2e), ("completed", n)):
        assert want[name] == value, ("reference", name, want[name])
        assert got[name] == value, ("engine", name, got[name])


def test_step_cpu_time_zero_is_the_step_cost_alone():
    got, want = _both(_loop_case(1))
    assert got["ttft_p50"] == want["ttft_p50"] == 7.0 and got["e2e_p99"] == want["e2e_p99"] == 17.0


def test_waiting_cap_attribute_of_a_selected_scheduler(tmp_path):
    """A stage that takes ``scheduler`` from an earlier stage's selection records the
    default of the scheduler selected (the Dataset of an empty outcome: no run needed)."""
    from routesim.batching.grid import Outcome, build, to_dataset
    path = tmp_path / "s.toml"
    path.write_text(SWEEP.format(replica="", stage='scheduler = ["reserve", "vllm"]\n'
                                 'select = { parameter = "scheduler", maximize = "attainment" }\n'
                                 '[[stages]]\nname = "after"\npolicy = ["round_robin"]\n'
                                 'seeds = { first = 2, count = 1 }'))
    sweep = load_sweep(path)
    after = sweep.stages[1]
    assert "scheduler" in after.inherit
    for scheduler, want in (("vllm", math.inf), ("reserve", 512)):
        grid = build(sweep, after, {"scheduler": scheduler})
        ds = to_dataset(sweep, grid, Outcome.empty(grid), {"scheduler": scheduler})
        assert ds.attrs["waiting_cap"] == want, scheduler


# --- the engine loop's ingress: an attempt's way to the scheduler (issue 40 item 3) --------

def _two_apart():
    """Two requests of P = 8, O = 3 (as :func:`_loop_case`), at 10 and 14 ms: the second
    arrives during the first's prefill."""
    case = _loop_case(2)
    case["requests"][1]["arrival_ms"] = 14.0
    return case


@pytest.mark.parametrize("scheduler", ["reserve", "vllm"])
@pytest.mark.parametrize("case, ttft, e2e", [
    # one request: ingress 2 + 0.25·8 = 4 ms, then its prefill step of 5 + 0.25·8 = 7 ms and
    # two decode steps of 5: TTFT 11, E2E 21 (the step cost alone: 7 and 17)
    (_loop_case(1), [11.0], [21.0]),
    # two at once: both join at 14, one prefill step of 5 + 0.25·16 = 9, decodes of 5:
    # TTFT 13, E2E 23
    (_loop_case(2), [13.0, 13.0], [23.0, 23.0]),
    # the first joins at 14 and prefills 14-21; the second, sent at 14, joins at 18 during
    # that step and waits for its end: a mixed step 21-28 (5 + 0.25·8) gives the first its
    # second token and the second its first, then decodes 28-33 and 33-38.
    # First: TTFT 11, E2E 33 - 10 = 23; second: TTFT 28 - 14 = 14, E2E 38 - 14 = 24.
    (_two_apart(), [11.0, 14.0], [23.0, 24.0]),
])
def test_ingress_hand_cases(scheduler, case, ttft, e2e):
    """ingress_ms = 2 and ingress_ms_per_token = 0.25 on hand-worked steps (docs/model.md
    "The engine loop's timing"), either scheduler, through the engine and the reference:
    an attempt joins the waiting queue 2 + 0.25·P ms after its routing, at that time's
    phase 7."""
    got, want = _both(case, scheduler=scheduler, ingress_ms=2.0, ingress_ms_per_token=0.25)
    n = len(case["requests"])
    for name, value in (("ttft_p50", min(ttft)), ("ttft_p99", max(ttft)), ("e2e_p50", min(e2e)),
                        ("e2e_p99", max(e2e)), ("completed", n)):
        assert want[name] == value, ("reference", name, want[name])
        assert got[name] == value, ("engine", name, got[name])


@pytest.mark.parametrize("loop", [dict(scheduler="reserve"), dict(scheduler="vllm"),
                                  dict(scheduler="vllm", async_scheduling=True)])
def test_ingress_shifts_a_lone_request(loop):
    """A request alone on an idle replica sees the same steps, only later: its TTFT and
    E2E grow by its ingress time exactly (3 + 0.5·8 = 7 ms), in every loop, engine and
    reference alike."""
    base, base_ref = _both(_loop_case(1), **loop)
    got, want = _both(_loop_case(1), ingress_ms=3.0, ingress_ms_per_token=0.5, **loop)
    for name in ("ttft_p50", "e2e_p50"):
        assert got[name] == base[name] + 7.0 and want[name] == base_ref[name] + 7.0, name
