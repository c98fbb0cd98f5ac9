"""The closed forms of routesim.theory against textbook values and special cases."""

import math

import numpy as np
import pytest

from routesim import theory
from routesim.queue.workload import WorkloadParams, generate


def test_mm1_sojourn_textbook():
    assert theory.mm1_sojourn(0.5, 1.0) == pytest.approx(2.0)   # ρ = 0.5, μ = 1: W = 2
    assert theory.mm1_sojourn(0.08, 0.1) == pytest.approx(50.0)  # 1/μ = 10 ms, ρ = 0.8
    assert theory.mm1_tail(0.5, 3) == pytest.approx(0.125)


def test_unstable_loads_are_refused():
    for f in (lambda: theory.mm1_sojourn(1.0, 1.0), lambda: theory.mg1_wait(2.0, 0.5, 1.0),
              lambda: theory.en_m1_sigma(3, 1.2, 1.0), lambda: theory.supermarket_tail(1.0, 2),
              lambda: theory.erlang_c(2, 2.0)):
        with pytest.raises(ValueError):
            f()


def test_pollaczek_khinchine_reduces_to_mm1_and_md1():
    lam, mu = 0.7, 1.0
    es, es2, es3 = theory.exponential_moments(1 / mu)
    assert (es, es2, es3) == pytest.approx((1.0, 2.0, 6.0))
    assert theory.mg1_sojourn(lam, es, es2) == pytest.approx(theory.mm1_sojourn(lam, mu))
    # M/M/1's FIFO sojourn is exponential: E[W²] = 2 W²
    w = theory.mm1_sojourn(lam, mu)
    assert theory.mg1_sojourn_m2(lam, es, es2, es3) == pytest.approx(2 * w * w)
    # M/D/1, λ = 0.5, d = 1: W_q = 0.5 / (2 · 0.5) = 0.5, W = 1.5; half the M/M/1 wait
    assert theory.md1_sojourn(0.5, 1.0) == pytest.approx(1.5)
    assert theory.mg1_wait(0.5, 1.0, 1.0) == pytest.approx(theory.mg1_wait(0.5, *theory.exponential_moments(1.0)[:2]) / 2)


def test_md1_second_moment_textbook():
    # M/D/1 (d = 1, λ = 0.5): E[W_q²] = 2 W_q² + λ d³ / (3 (1 - ρ)) = 0.5 + 1/3
    wq = 0.5
    expected = (2 * wq * wq + 0.5 / 1.5) + 2 * wq * 1.0 + 1.0
    assert theory.mg1_sojourn_m2(0.5, 1.0, 1.0, 1.0) == pytest.approx(expected)


def test_e1_m1_is_mm1():
    for rho in (0.1, 0.5, 0.8, 0.95):
        assert theory.en_m1_sigma(1, rho, 1.0) == pytest.approx(rho, abs=1e-12)
        assert theory.en_m1_sojourn(1, rho, 1.0) == pytest.approx(theory.mm1_sojourn(rho, 1.0), rel=1e-10)


def test_e2_m1_closed_form():
    # σ(2ρ + 1 - σ)² = 4ρ² has the root σ = (1 + 4ρ - √(1 + 8ρ)) / 2 in (0, 1); ρ = 0.5: (3 - √5)/2
    assert theory.en_m1_sigma(2, 0.5, 1.0) == pytest.approx((3 - math.sqrt(5)) / 2, abs=1e-12)
    for rho in (0.2, 0.7, 0.9):
        assert theory.en_m1_sigma(2, rho, 1.0) == pytest.approx((1 + 4 * rho - math.sqrt(1 + 8 * rho)) / 2, abs=1e-12)


def test_en_m1_tends_to_dm1():
    # D/M/1 at ρ = 0.5: σ = exp(-(1 - σ)/ρ), σ ≈ 0.203188 (textbook); Erlang-n → deterministic
    sigma = 0.5
    for _ in range(200):
        sigma = math.exp(-(1 - sigma) / 0.5)
    assert sigma == pytest.approx(0.2031878, abs=1e-6)
    assert theory.en_m1_sigma(4000, 0.5, 1.0) == pytest.approx(sigma, abs=1e-3)
    # regular arrivals queue less: σ falls with n
    s = [theory.en_m1_sigma(n, 0.8, 1.0) for n in (1, 2, 4, 8)]
    assert s == sorted(s, reverse=True)


def test_gim1_tail():
    assert theory.gim1_tail(0.3, 0.5, 0) == 1.0
    assert theory.gim1_tail(0.3, 0.5, 1) == 0.5           # utilization
    assert theory.gim1_tail(0.5, 0.5, 3) == pytest.approx(theory.mm1_tail(0.5, 3))  # σ = ρ: M/M/1


def test_erlang_c_textbook():
    for rho in (0.1, 0.5, 0.9):
        assert theory.erlang_c(1, rho) == pytest.approx(rho)       # c = 1: P(wait) = ρ
    assert theory.erlang_c(2, 1.0) == pytest.approx(1 / 3)         # c = 2, a = 1
    # against the direct formula C = (aᶜ/c!)(c/(c-a)) / (Σ_{k<c} aᵏ/k! + (aᶜ/c!)(c/(c-a)))
    for c, a in ((4, 3.2), (10, 8.0), (50, 40.0)):
        top = a ** c / math.factorial(c) * c / (c - a)
        direct = top / (sum(a ** k / math.factorial(k) for k in range(c)) + top)
        assert theory.erlang_c(c, a) == pytest.approx(direct, rel=1e-12)


def test_mmc_sojourn_textbook():
    assert theory.mmc_sojourn(0.6, 1.0, 1) == pytest.approx(theory.mm1_sojourn(0.6, 1.0))
    # M/M/2 with ρ = λ/(2μ): W = 1/(μ(1 - ρ²))
    for rho in (0.3, 0.8):
        assert theory.mmc_sojourn(2 * rho, 1.0, 2) == pytest.approx(1 / (1 - rho * rho))
    # pooling helps: M/M/c below c separate M/M/1 queues at the same load
    assert theory.mmc_sojourn(40.0, 1.0, 50) < theory.mm1_sojourn(0.8, 1.0)


def test_supermarket_fixed_point():
    for lam in (0.3, 0.8):
        for i in range(6):
            assert theory.supermarket_tail(lam, i, d=1) == pytest.approx(lam ** i)   # d = 1: λⁱ
    assert [theory.supermarket_tail(0.5, i) for i in range(4)] == pytest.approx([1, 0.5, 0.125, 0.5 ** 7])
    assert theory.supermarket_tail(0.8, 3, d=3) == pytest.approx(0.8 ** 13)      # (3³ - 1)/2 = 13
    # mean sojourn: d = 1 is M/M/1; power of two at λ = 0.8 is 1 + λ² + λ⁶ + λ¹⁴ + ...
    assert theory.supermarket_sojourn(0.8, d=1) == pytest.approx(theory.mm1_sojourn(0.8, 1.0))
    assert theory.supermarket_sojourn(0.8, mu=0.1) == pytest.approx(
        10 * sum(0.8 ** (2 ** i - 2) for i in range(1, 12)))


def test_token_pmf_is_a_distribution():
    k, p = theory.token_pmf(384.0, 0.8, 16, 4096)
    assert k[0] == 16 and k[-1] == 4096 and np.all(p >= 0)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    # rint(384 e^{0.8 z}) <= 384  <=>  z < ln(384.5/384)/0.8: just over half the mass
    assert p[k <= 384].sum() == pytest.approx(0.5 + math.log(384.5 / 384) / 0.8 / math.sqrt(2 * math.pi), abs=1e-6)
    k, p = theory.token_pmf(88.0, 0.0, 4, 1024)                # sigma = 0: a point mass
    assert p[k == 88] == 1.0 and p.sum() == 1.0


def test_uniform_and_product_moments():
    assert theory.uniform_moments(0.0, 1.0) == pytest.approx((1 / 2, 1 / 3, 1 / 4))
    assert theory.uniform_moments(1.0, 1.0) == (1.0, 1.0, 1.0)
    assert theory.uniform_moments(0.9, 1.1)[1] == pytest.approx(1 + 0.2 ** 2 / 12)  # E[J²] = 1 + Var
    assert theory.product_moments((1, 2, 6), (2, 5, 9)) == (2, 10, 54)


def test_token_demand_moments_match_the_workload():
    """Exact E[D], E[D²], E[D³] against a large sample drawn by routesim.queue.workload; the
    tolerance is 5 standard errors of the sample moments."""
    wl = generate(seed=7, rate_rps=1000.0, rate_events=(), horizon_ms=400_000.0)
    d = wl.demand_ms
    exact = theory.token_demand_moments(k=3)
    for n, m in enumerate(exact, start=1):
        x = d ** n
        se = x.std() / math.sqrt(x.size)
        assert abs(x.mean() - m) < 5 * se, (n, x.mean(), m, se)
    # prompt and output counts are independent (one Box–Muller pair): their correlation is ~0
    r = np.corrcoef(wl.prompt, wl.output)[0, 1]
    assert abs(r) < 5 / math.sqrt(d.size)


def test_token_demand_moments_match_the_trace_module():
    """A second implementation in the package (routesim.theory.mean_demand_ms) agrees."""
    from routesim.queue.params import PARAM
    from routesim.theory import mean_demand_ms
    values = {p.name: (p.default,) for p in PARAM.values()}
    assert theory.token_demand_moments(k=1)[0] == pytest.approx(mean_demand_ms(values), rel=1e-12)


def test_token_demand_moments_of_a_point_mass():
    # sigma = 0: prompt = 512, output = 128 exactly, the reference request's 11 ms
    m = theory.token_demand_moments(prompt=(512.0, 0.0, 16, 4096), output=(128.0, 0.0, 4, 1024))
    assert m == pytest.approx((11.0, 121.0, 1331.0))


def test_exponential_and_constant_demand_of_the_workload():
    """The distributions the theory checks assume: exponential demand with mean
    reference_demand_ms (E[D²] = 2 mean²), constant demand equal to it."""
    n = 200_000
    wl = generate(3, 1000.0, (), float(n), WorkloadParams(demand="exponential", reference_demand_ms=11.0))
    se = wl.demand_ms.std() / math.sqrt(len(wl))
    assert abs(wl.demand_ms.mean() - 11.0) < 5 * se
    x2 = wl.demand_ms ** 2
    assert abs(x2.mean() - 2 * 121.0) < 5 * x2.std() / math.sqrt(len(wl))
    wl = generate(3, 1000.0, (), 1000.0, WorkloadParams(demand="constant", reference_demand_ms=11.0))
    assert np.all(wl.demand_ms == 11.0)


def test_supermarket_transient_reaches_the_fixed_point():
    for d, lam in ((1, 0.5), (2, 0.8)):   # d = 1: the M/M/1 forward equations
        s = theory.supermarket_transient(lam, 300.0, d=d)
        fixed = [theory.supermarket_tail(lam, i, d) for i in range(s.size)]
        assert s == pytest.approx(fixed, abs=1e-9)
    # started empty, every level fills up monotonically towards it
    early, late = (theory.supermarket_transient(0.8, t) for t in (5.0, 20.0))
    assert np.all(early[1:6] < late[1:6]) and early[0] == late[0] == 1.0
    assert late[1] < 0.8
