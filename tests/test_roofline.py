"""The roofline step cost (issue 25 item 2; docs/model.md "The step cost").

``[replica] step_cost = "roofline"`` times an iteration as
``f · (base + max(weights + per_kv_token·(K + R), per_token·(U + n) + per_token_pair·(Q + K)))``.
The engine against the naive reference (tests/token_reference.py, ``_Sim.duration``)
run by run, for both schedulers, chunked and unchunked, on cases whose iterations are
memory-bound and compute-bound within one run (checked from the reference's own
iterations); then iteration durations computed by hand from the formula; then the
sweep keys: a table the stage's ``step_cost`` does not use is refused, and a linear
stage's Dataset carries no roofline attribute.
"""

import numpy as np
import pytest

import token_reference as ref
from routesim.batching import runs as br
from routesim.batching.workload import TokenWorkload
from routesim.config import ConfigError, parse_sweep
from test_token_engine_vs_reference import _compare, _engine, _reference_workload

ROOF = dict(step_cost="roofline")
# weights cheap and compute dear: a decode-only iteration is memory-bound with one
# sequence (0.15 > 0.1 ms) and compute-bound with two or more
SLOW_COMPUTE = dict(ROOF, roofline_ms_weights=0.15, roofline_ms_per_kv_token=1e-6, roofline_ms_per_token=0.1,
                    roofline_ms_per_token_pair=1e-6)
# (case of tests/test_token_engine_vs_reference.py, policy, extra parameters)
RESERVE = [
    ("light", "least_requests", ROOF),
    ("hetero-slowdown", "power_of_d", ROOF),
    ("preempting", "least_kv", ROOF),
    ("no-prefix-unchunked", "round_robin", ROOF),
    ("prefix-heavy", "prefix_affinity", ROOF),
    ("crash-retry-cold", "least_tokens", ROOF),
    ("queues-fill", "least_requests", SLOW_COMPUTE),
    ("prefix-heavy", "least_cost", SLOW_COMPUTE),
]
VLLM = dict(scheduler="vllm")
VLLM_RUNS = [
    ("light", "least_requests", dict(VLLM, **ROOF)),
    ("prefix-heavy", "prefix_affinity", dict(VLLM, **ROOF)),
    ("vllm-preempting", "least_kv", dict(VLLM, **ROOF)),
    ("vllm-preempting-unchunked", "round_robin", dict(VLLM, **ROOF)),
    ("vllm-timeouts-midstep", "power_of_d", dict(VLLM, **ROOF)),
    ("queues-fill", "least_requests", dict(VLLM, **SLOW_COMPUTE)),
    ("prefix-heavy", "least_tokens", dict(VLLM, prefix_caching=False, **SLOW_COMPUTE)),
]


def _ids(runs):
    return [f"{c}-{p}-{e.get('scheduler', 'reserve')}-{'slow' if 'roofline_ms_per_token' in e else 'default'}"
            for c, p, e in runs]


@pytest.mark.parametrize("case,policy,extra", RESERVE + VLLM_RUNS, ids=_ids(RESERVE + VLLM_RUNS))
def test_engine_matches_reference_roofline(case, policy, extra, monkeypatch):
    """Engine = reference, and the run's iterations are memory-bound and compute-bound
    (the max switches within the run): with the default figures, prefills are
    compute-bound and decodes memory-bound; with SLOW_COMPUTE, decode-only iterations
    are of both kinds."""
    seen = _spy(monkeypatch)
    _compare(case, policy, 1, **extra)
    assert any(mem for _pf, mem in seen) and any(not mem for _pf, mem in seen), seen
    if "roofline_ms_per_token" in extra:
        assert seen.get((False, True), 0) > 0 and seen.get((False, False), 0) > 0, seen
    else:
        assert seen.get((True, False), 0) > 0 and seen.get((False, True), 0) > 0, seen


def _spy(monkeypatch):
    """{(prefill-bearing?, memory-bound?): iterations}, filled by every later
    ``_Sim.duration`` call of the reference (its inputs classified by the formula)."""
    seen = {}
    orig = ref._Sim.duration

    def spy(self, rep, T, U, Q, n, K, R):
        p = self.p
        memory = p["roofline_ms_weights"] + p["roofline_ms_per_kv_token"] * (K + R)
        compute = p["roofline_ms_per_token"] * (U + n) + p["roofline_ms_per_token_pair"] * (Q + K)
        key = (U > 0, memory > compute)
        seen[key] = seen.get(key, 0) + 1
        return orig(self, rep, T, U, Q, n, K, R)

    monkeypatch.setattr(ref._Sim, "duration", spy)
    return seen


def _one_request(P, O, **extra):
    """Engine metrics of one request (P prompt tokens, O output, no shared prefix) alone
    on one idle replica, arriving at 100 ms, in the window."""
    values = ref.defaults()
    values.update(warmup_s=0.05, measure_s=10.0, drain_s=0.0, **extra)
    b = values["block_tokens"]
    wl = TokenWorkload(t_ms=np.array([100.0]), prompt=np.array([P], np.int64), output=np.array([O], np.int64),
                       key=np.array([0.5]), group=np.array([-1], np.int64),
                       seg_key=np.array([1 << 40], np.int64), seg_len=np.array([P // b], np.int64),
                       seg_off=np.array([0, 1], np.int64))
    got, _rep = _engine(wl, values, [1.0], [], "round_robin", 1)
    want = ref.simulate(_reference_workload(wl), values, [1.0], [], "round_robin", 1)
    return got, want


# Defaults: base 4, weights 5.99, per_kv_token 4.89e-5, per_token 0.0271, per_token_pair 8.84e-7.
# A 1000-token prompt in chunks of 512 and 488 (budget 512), then two decodes:
#   chunk 1: U 512, Q 512·256 = 131072, R 512: memory 5.99 + 0.0250368 = 6.0150368,
#            compute 13.8752 + 0.115867648 = 13.991067648 -> 17.991067648 ms (compute-bound)
#   chunk 2: U 488, Q 488·(512 + 244) = 368928, R 1000: memory 6.0389,
#            compute 13.2248 + 0.326132352 = 13.550932352 -> 17.550932352 ms
#   decode (n 1, K 1001): memory 5.99 + 0.0489489 = 6.0389489, compute 0.027984884 -> 10.0389489 ms
#   decode (n 1, K 1002): memory 6.0389978 -> 10.0389978 ms (memory-bound)
CHUNKED_TTFT = 17.991067648 + 17.550932352
CHUNKED_E2E = CHUNKED_TTFT + 10.0389489 + 10.0389978
# Unchunked (budget 8192), the same prompt at once: U 1000, Q 500000, R 1000: memory 6.0389,
# compute 27.1 + 0.442 = 27.542 -> 31.542 ms; then the same two decodes.
WHOLE_TTFT = 31.542
WHOLE_E2E = WHOLE_TTFT + 10.0389489 + 10.0389978


@pytest.mark.parametrize("scheduler", ["reserve", "vllm"])
@pytest.mark.parametrize("chunked", [True, False])
def test_a_step_by_hand(scheduler, chunked):
    extra = dict(step_cost="roofline", scheduler=scheduler, chunked_prefill=chunked, max_batch=4)
    if chunked:
        extra["max_batched_tokens"] = 512
    got, want = _one_request(1000, 3, **extra)
    ttft, e2e = (CHUNKED_TTFT, CHUNKED_E2E) if chunked else (WHOLE_TTFT, WHOLE_E2E)
    for out in (got, want):
        assert int(out["completed"]) == 1
        assert float(out["ttft_p50"]) == pytest.approx(ttft, rel=1e-12)
        assert float(out["e2e_mean"]) == pytest.approx(e2e, rel=1e-12)


def test_a_slowdown_multiplies_the_roofline():
    """f multiplies base + max(…) as it multiplies the linear sum: twice as slow, twice
    the times (a time factor of 2 on the only replica)."""
    values = ref.defaults()
    values.update(warmup_s=0.05, measure_s=10.0, drain_s=0.0, step_cost="roofline")
    b = values["block_tokens"]
    wl = TokenWorkload(t_ms=np.array([100.0]), prompt=np.array([1000], np.int64), output=np.array([3], np.int64),
                       key=np.array([0.5]), group=np.array([-1], np.int64),
                       seg_key=np.array([1 << 40], np.int64), seg_len=np.array([1000 // b], np.int64),
                       seg_off=np.array([0, 1], np.int64))
    got, _ = _engine(wl, values, [2.0], [], "round_robin", 1)
    assert float(got["e2e_mean"]) == pytest.approx(2 * WHOLE_E2E, rel=1e-12)


def test_the_linear_cost_ignores_the_roofline_table():
    """step_cost = "linear" (the default) is the page's formula whatever roofline_ms holds."""
    base, _ = _one_request(1000, 3)
    other, _ = _one_request(1000, 3, roofline_ms_base=100.0, roofline_ms_per_token=1.0)
    assert float(base["e2e_mean"]) == float(other["e2e_mean"])
    # the page's formula: 6.5 + 0.0198·1000 + 8.4e-7·500000, then 6.5 + 0.10 + 5.4e-5·K (K 1001, 1002)
    assert float(base["ttft_p50"]) == pytest.approx(6.5 + 19.8 + 0.42, rel=1e-12)


SWEEP = """
name = "t"
[replica]
kind = "batching"
{replica}
[grid]
rate_rps = 1.0
heterogeneity = "uniform"
scenario = "steady"
[[stages]]
name = "s"
policy = "round_robin"
seeds = [1]
{stage}
"""


def _parse(replica="", stage=""):
    return parse_sweep(SWEEP.format(replica=replica, stage=stage), "t.toml")


def test_roofline_keys_are_sweep_keys():
    sw = _parse('step_cost = "roofline"\nroofline_ms = { base = 3.0, per_token = [0.02, 0.03] }')
    st = sw.stages[0]
    assert st.values["roofline_ms_base"] == (3.0,) and "roofline_ms_per_token" in st.swept
    # both costs side by side in one stage: both tables are used
    sw = _parse('step_cost = ["linear", "roofline"]\nstep_ms = { base = 7.0 }\nroofline_ms = { base = 3.0 }')
    assert "step_cost" in sw.stages[0].swept
    # a stage override
    sw = _parse('step_cost = "roofline"', 'roofline_ms_weights = 2.0')
    assert sw.stages[0].values["roofline_ms_weights"] == (2.0,)


@pytest.mark.parametrize("replica,stage,key,words", [
    ('roofline_ms = { base = 3.0 }', "", "replica.roofline_ms.base", "step_cost is 'linear'"),
    ('step_cost = "roofline"\nstep_ms = { per_kv_token = 1e-4 }', "", "replica.step_ms.per_kv_token",
     "step_cost is 'roofline'"),
    ("", "roofline_ms_per_token = 0.03", "stages[0].roofline_ms_per_token", "roofline_ms is the roofline"),
    ('step_cost = "quadratic"', "", "replica.step_cost", "unknown value"),
    ('step_cost = "roofline"\nroofline_ms = { base = 0 }', "", "replica.roofline_ms.base", "must be > 0"),
    ('step_cost = "roofline"\nroofline_ms = { weights = -1.0 }', "", "replica.roofline_ms.weights", "must be >= 0"),
    ('step_cost = "roofline"\nroofline_ms = { overhead = 1.0 }', "", "replica.roofline_ms.overhead", "unknown key"),
])
def test_bad_roofline_keys_are_refused(replica, stage, key, words):
    with pytest.raises(ConfigError) as e:
        _parse(replica, stage)
    assert e.value.key == key and words in e.value.message, str(e.value)


def test_a_bad_key_exits_2_with_one_line(tmp_path):
    import subprocess
    import sys
    f = tmp_path / "bad.toml"
    f.write_text(SWEEP.format(replica='roofline_ms = { base = 3.0 }', stage=""))
    out = subprocess.run([sys.executable, "-m", "routesim.sweep", str(f), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "replica.roofline_ms.base" in lines[0] and str(f) in lines[0], out.stderr


def test_which_parameters_a_dataset_records():
    """A linear stage's Dataset attributes are those of before the roofline (no
    step_cost, no other form's table); a roofline stage's drop step_ms_* (and every other
    form's table) instead."""
    from routesim.batching.params import unused_params
    from routesim.step_cost import KEYS

    def others(*used):  # the keys of every registered form but ``used``
        return {n for form, names in KEYS.items() if form not in used for n in names}

    from routesim.batching import pd_keys
    lin = _parse().stages[0].values
    # (the stage's scheduler is "reserve": vLLM's loop is not used; it has no prefill pool:
    # the [pools] keys are not used either)
    reserve = {"async_scheduling"} | pd_keys.unused(lin)
    assert lin["scheduler"] == ("reserve",) and "async_scheduling" not in pd_keys.unused(lin)
    assert unused_params(lin) == {"step_cost", *others("linear")} | reserve
    assert not any(n.startswith("step_ms_") for n in others("linear")) and "roofline_ms_base" in others("linear")
    roof = _parse('step_cost = "roofline"').stages[0].values
    assert unused_params(roof) == others("roofline") | reserve and "step_ms_base" in others("roofline")
    both = _parse('step_cost = ["linear", "roofline"]').stages[0].values
    assert unused_params(both) == others("linear", "roofline") | reserve


def test_params_row_codes_the_roofline():
    values = ref.defaults()
    values.update(step_cost="roofline", roofline_ms_weights=2.5)
    p = br.params_row(values, "round_robin", n_replicas=1)
    # the roofline's coefficients in its order (base, weights, per_kv_token, per_token, per_token_pair)
    assert int(p["step_cost"]) == 1 and list(p["cost"][:5]) == [4.0, 2.5, 4.89e-5, 0.0271, 8.84e-7]
