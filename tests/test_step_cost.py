"""The step costs (routesim/step_cost/; docs/model.md "The step cost"), and the third
form, ``overlap`` (issue 43 item 2): the roofline with memory and compute time only
partly overlapped,

    d = f · (base + max(M, C) + kappa · min(M, C)),
    M = weights + per_kv_token·(K + R),  C = per_token·(U + n) + per_token_pair·(Q + K).

Iteration durations worked by hand from that formula; its two limits (kappa 0: the
roofline, kappa 1: the serial sum) against the roofline's own runs; the engine against
the naive reference (tests/token_reference.py, which re-derives the formula from the
page) run by run for both schedulers, on cases whose iterations are memory-bound and
compute-bound within one run; the sweep keys; and each registered form's plain formula
against its compiled one and its design matrix.
"""

import numpy as np
import pytest

import token_reference as ref
from registered import STEP_COSTS
from routesim import step_cost
from routesim.batching import runs as br
from routesim.config import ConfigError
from test_roofline import CHUNKED_E2E, CHUNKED_TTFT, SLOW_COMPUTE, WHOLE_E2E, WHOLE_TTFT, _one_request, _parse
from test_token_engine_vs_reference import _compare

OVERLAP = dict(step_cost="overlap", overlap_ms_kappa=0.5)

# Defaults (the roofline's): base 4, weights 5.99, per_kv_token 4.89e-5, per_token 0.0271,
# per_token_pair 8.84e-7; kappa 0.5. The sides M and C of each iteration are those worked
# in tests/test_roofline.py (a 1000-token prompt, no prefix, then two decodes):
#   chunk 1 (U 512, Q 131072, R 512):  M 6.0150368, C 13.991067648
#        -> 4 + 13.991067648 + 0.5·6.0150368 = 20.998586048 ms
#   chunk 2 (U 488, Q 368928, R 1000): M 6.0389, C 13.550932352
#        -> 4 + 13.550932352 + 0.5·6.0389 = 20.570382352 ms
#   decode (n 1, K 1001): M 6.0389489, C 0.0271 + 8.84e-7·1001 = 0.027984884
#        -> 4 + 6.0389489 + 0.5·0.027984884 = 10.052941342 ms
#   decode (n 1, K 1002): M 6.0389978, C 0.027985768 -> 10.052990684 ms
#   unchunked (U 1000, Q 500000, R 1000): M 6.0389, C 27.542 -> 4 + 27.542 + 3.01945 = 34.56145 ms
DECODES = 10.052941342 + 10.052990684
CHUNKED = (20.998586048 + 20.570382352, 20.998586048 + 20.570382352 + DECODES)
WHOLE = (34.56145, 34.56145 + DECODES)


@pytest.mark.parametrize("scheduler", ["reserve", "vllm"])
@pytest.mark.parametrize("chunked", [True, False])
def test_overlap_steps_by_hand(scheduler, chunked):
    extra = dict(OVERLAP, scheduler=scheduler, chunked_prefill=chunked, max_batch=4)
    if chunked:
        extra["max_batched_tokens"] = 512
    got, want = _one_request(1000, 3, **extra)
    ttft, e2e = CHUNKED if chunked else WHOLE
    for out in (got, want):
        assert int(out["completed"]) == 1
        assert float(out["ttft_p50"]) == pytest.approx(ttft, rel=1e-12)
        assert float(out["e2e_mean"]) == pytest.approx(e2e, rel=1e-12)


@pytest.mark.parametrize("chunked", [True, False])
def test_overlap_limits(chunked):
    """kappa 0 is the roofline (the same figures as tests/test_roofline.py's worked
    steps); kappa 1 is base + M + C (the sides above, summed)."""
    extra = dict(step_cost="overlap", chunked_prefill=chunked, max_batch=4)
    if chunked:
        extra["max_batched_tokens"] = 512
    got, want = _one_request(1000, 3, overlap_ms_kappa=0.0, **extra)
    ttft, e2e = (CHUNKED_TTFT, CHUNKED_E2E) if chunked else (WHOLE_TTFT, WHOLE_E2E)
    for out in (got, want):
        assert float(out["ttft_p50"]) == pytest.approx(ttft, rel=1e-12)
        assert float(out["e2e_mean"]) == pytest.approx(e2e, rel=1e-12)
    serial = (4 + 6.0389489 + 0.027984884) + (4 + 6.0389978 + 0.027985768)
    pre = ((4 + 6.0150368 + 13.991067648) + (4 + 6.0389 + 13.550932352) if chunked
           else 4 + 6.0389 + 27.542)
    got, want = _one_request(1000, 3, overlap_ms_kappa=1.0, **extra)
    for out in (got, want):
        assert float(out["ttft_p50"]) == pytest.approx(pre, rel=1e-12)
        assert float(out["e2e_mean"]) == pytest.approx(pre + serial, rel=1e-12)


SLOW = dict(OVERLAP, **{k.replace("roofline_ms", "overlap_ms"): v for k, v in SLOW_COMPUTE.items() if k != "step_cost"})
# (case of tests/test_token_engine_vs_reference.py, policy, extra parameters)
RUNS = [
    ("light", "least_requests", OVERLAP),
    ("preempting", "least_kv", dict(OVERLAP, overlap_ms_kappa=1.0)),
    ("crash-retry-cold", "power_of_d", OVERLAP),
    ("queues-fill", "least_tokens", SLOW),
    ("light", "prefix_affinity", dict(OVERLAP, scheduler="vllm")),
    ("vllm-preempting", "least_cost", dict(OVERLAP, scheduler="vllm", overlap_ms_kappa=0.25)),
    ("queues-fill", "rate_weighted", dict(SLOW, scheduler="vllm")),
]


@pytest.mark.parametrize("case,policy,extra", RUNS,
                         ids=[f"{c}-{p}-{e.get('scheduler', 'reserve')}-{e['overlap_ms_kappa']}" for c, p, e in RUNS])
def test_engine_matches_reference_overlap(case, policy, extra, monkeypatch):
    """Engine = reference, with iterations bound by memory and by compute in one run
    (so both the max and the min take each side)."""
    seen = _spy(monkeypatch)
    _compare(case, policy, 1, **extra)
    assert True in seen and False in seen, seen


def _spy(monkeypatch):
    """{memory-bound?: iterations}, filled by every later ``_Sim.duration`` call of the
    reference (its inputs classified by the overlap table's sides)."""
    seen = {}
    orig = ref._Sim.duration

    def spy(self, rep, T, U, Q, n, K, R):
        p = self.p
        memory = p["overlap_ms_weights"] + p["overlap_ms_per_kv_token"] * (K + R)
        compute = p["overlap_ms_per_token"] * (U + n) + p["overlap_ms_per_token_pair"] * (Q + K)
        seen[memory > compute] = seen.get(memory > compute, 0) + 1
        return orig(self, rep, T, U, Q, n, K, R)

    monkeypatch.setattr(ref._Sim, "duration", spy)
    return seen


def test_overlap_keys_are_sweep_keys():
    sw = _parse('step_cost = "overlap"\noverlap_ms = { kappa = [0.0, 0.5, 1.0], base = 3.0 }')
    st = sw.stages[0]
    assert st.values["overlap_ms_kappa"] == (0.0, 0.5, 1.0) and st.values["overlap_ms_base"] == (3.0,)
    # the defaults are the roofline's (one home: routesim/step_cost/roofline.py), kappa 0
    assert st.values["overlap_ms_weights"] == (5.99,) and st.values["overlap_ms_per_token"] == (0.0271,)
    p = br.params_row({k: v[0] for k, v in st.values.items()}, "round_robin", n_replicas=1)
    assert int(p["step_cost"]) == 2 and list(p["cost"]) == [3.0, 5.99, 4.89e-5, 0.0271, 8.84e-7, 0.0]


@pytest.mark.parametrize("replica,key,words", [
    ('overlap_ms = { kappa = 0.5 }', "replica.overlap_ms.kappa", "step_cost is 'linear'"),
    ('step_cost = "overlap"\noverlap_ms = { kappa = 1.5 }', "replica.overlap_ms.kappa", "must be >= 0 and <= 1"),
    ('step_cost = "overlap"\noverlap_ms = { kappa = -0.1 }', "replica.overlap_ms.kappa", "must be >= 0 and <= 1, got -0.1"),
    ('step_cost = "overlap"\nroofline_ms = { base = 3.0 }', "replica.roofline_ms.base", "step_cost is 'overlap'"),
])
def test_bad_overlap_keys_are_refused(replica, key, words):
    with pytest.raises(ConfigError) as e:
        _parse(replica)
    assert e.value.key == key and words in e.value.message, str(e.value)


@pytest.mark.parametrize("name", STEP_COSTS)
def test_each_form_compiled_is_its_formula(name):
    """The engine's compiled formula and calibrate's plain one agree bit for bit on
    scalars, and the plain one evaluates arrays element by element."""
    form = step_cost.BY_NAME[name]
    rng = np.random.default_rng(7)
    c = np.array([p.default for p in form.PARAMS], float)
    if name == "overlap":
        c[-1] = 0.3
    if name == "mixed":
        c[-1] = 2e-4
    c = np.concatenate([c, np.zeros(step_cost.COEFFICIENTS - c.size)])
    U, n, K, R = (rng.integers(0, 5000, 50) for _ in range(4))
    Q = rng.integers(0, 10 ** 7, 50) / 2.0
    plain = form.duration(c, U, Q, n, K, R)
    for k in range(50):
        x = (np.int64(U[k]), float(Q[k]), np.int64(n[k]), np.int64(K[k]), np.int64(R[k]))
        assert step_cost.duration_nb(np.int64(form.CODE), c, *x) == form.duration(c, *x) == plain[k]


def test_design_matrices_rebuild_the_formula():
    """X @ c is the formula (linear: always; roofline and overlap: with each step's bound
    side assigned as the formula's max does)."""
    rng = np.random.default_rng(3)
    U, n, K, R = (rng.integers(0, 3000, 40).astype(float) for _ in range(4))
    Q = rng.integers(0, 10 ** 6, 40) / 2.0
    lin = np.array([p.default for p in step_cost.linear.PARAMS])
    np.testing.assert_allclose(step_cost.linear.columns(U, Q, n, K, R) @ lin,
                               step_cost.linear.duration(lin, U, Q, n, K, R), rtol=1e-13)
    roof = np.array([p.default for p in step_cost.roofline.PARAMS])
    mem, comp = step_cost.roofline.sides(roof, U, Q, n, K, R)
    np.testing.assert_allclose(step_cost.roofline.columns(U, Q, n, K, R, mem >= comp) @ roof,
                               step_cost.roofline.duration(roof, U, Q, n, K, R), rtol=1e-13)
    ov = np.append(roof, 0.4)
    np.testing.assert_allclose(step_cost.overlap.columns(U, Q, n, K, R, mem >= comp, 0.4) @ roof,
                               step_cost.overlap.duration(ov, U, Q, n, K, R), rtol=1e-13)
    mx = np.append(roof, 3e-4)
    U[::3] = 0                                       # decode-only steps: no mixed term
    mem, comp = step_cost.roofline.sides(roof, U, Q, n, K, R)
    np.testing.assert_allclose(step_cost.mixed.columns(U, Q, n, K, R, mem >= comp) @ mx,
                               step_cost.mixed.duration(mx, U, Q, n, K, R), rtol=1e-13)
    np.testing.assert_array_equal(step_cost.mixed.duration(mx, U, Q, n, K, R)[::3],
                                  step_cost.roofline.duration(roof, U, Q, n, K, R)[::3])


# "mixed" (issue 41 item 4): the roofline plus per_mixed_kv_token·K in a step with prefill
# tokens. Engine = reference (tests/token_reference.py D5d), in runs whose steps are mixed
# (a prefill chunk beside decoders) and not, for both schedulers.
MIXED = dict(step_cost="mixed", mixed_ms_per_mixed_kv_token=2e-4)
MIXED_RUNS = [
    ("light", "least_requests", MIXED),
    ("preempting", "least_kv", MIXED),
    ("vllm-preempting", "least_cost", dict(MIXED, scheduler="vllm")),
]


@pytest.mark.parametrize("case,policy,extra", MIXED_RUNS,
                         ids=[f"{c}-{p}-{e.get('scheduler', 'reserve')}" for c, p, e in MIXED_RUNS])
def test_engine_matches_reference_mixed(case, policy, extra, monkeypatch):
    """Engine = reference, with mixed steps (prefill tokens beside decoders) and others."""
    seen = {}
    orig = ref._Sim.duration

    def spy(self, rep, T, U, Q, n, K, R):
        seen[U > 0 and n > 0] = seen.get(U > 0 and n > 0, 0) + 1
        return orig(self, rep, T, U, Q, n, K, R)

    monkeypatch.setattr(ref._Sim, "duration", spy)
    _compare(case, policy, 1, **extra)
    assert seen.get(True) and seen.get(False), seen
