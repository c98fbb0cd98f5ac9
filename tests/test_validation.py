"""Simulation against queueing theory: the checks of routesim.studies.validation.

Each comparison is judged by its own standard error (Z·SE plus a stated deterministic
allowance, see routesim/studies/validation/checks.py); nothing here is tuned to the
draws. The checks are simulated once per session and shared by the tests that read them.
"""

import math
import re
from pathlib import Path

import numpy as np
import pytest

import routesim
from routesim import theory
from routesim.results import MADE_WITH, environment, made_with
from routesim.studies.validation import checks as v

DOC = Path(__file__).resolve().parents[1] / "docs" / "validation.md"


@pytest.fixture(scope="session")
def checks():
    """checks(name) -> the check's Result, simulated on first use; Little's law also
    covers every run of the other checks, as ``python -m routesim.validation`` does."""
    cache = {}

    def get(name):
        if name not in cache:
            others = tuple(get(n) for n in v.CHECKS if n != "littles_law") if name == "littles_law" else ()
            cache[name] = v.run_check(name, others=others)
        return cache[name]

    return get


def assert_all_pass(result, rows=None):
    rows = result.rows if rows is None else rows
    failed = [f"{r.case}: {r.quantity}: theory {r.theory:.6g}, simulated {r.simulated:.6g} ± {r.se:.2g} "
              f"(z = {r.z:+.2f}, tolerance {r.tolerance:.3g})" for r in rows if r.passed is False]
    assert not failed, f"{result.name}:\n" + "\n".join(failed)
    assert any(r.passed for r in rows), "nothing was judged"


# ----------------------------------------------------------------------------------
# The machinery


def test_every_sweep_parses_and_theory_checks_run_exact():
    for name, check in v.CHECKS.items():
        for quick in (False, True):
            sweep = routesim.parse_sweep(check.sweep(quick), f"{name}.toml")
            for stage in sweep.stages:
                if name not in ("littles_law", "discretization"):
                    assert stage.values["dt_ms"] == (0.0,), (name, stage.name)
                    assert stage.values["queue_cap"] == (math.inf,)


def test_checks_use_disjoint_seeds():
    ranges = []
    for name, check in v.CHECKS.items():
        sweep = routesim.parse_sweep(check.sweep(False))
        seeds = set().union(*(set(s.values["seed"]) for s in sweep.stages))
        ranges.append((name, seeds))
    for i, (a, sa) in enumerate(ranges):
        for b, sb in ranges[i + 1:]:
            assert not sa & sb, f"{a} and {b} share seeds"


def test_row_verdicts():
    row = v.Row("x", "c", "q", theory=1.0, simulated=1.3, se=0.1)
    assert row.z == pytest.approx(3.0) and row.passed
    assert not v.Row("x", "c", "q", 1.0, 1.5, 0.1).passed
    assert v.Row("x", "c", "q", 1.0, 1.5, 0.1, allowance=0.2).passed
    assert v.Row("x", "c", "q", 1.0, 9.0, 0.1, relation=">=").passed
    assert not v.Row("x", "c", "q", 1.0, 0.5, 0.1, relation=">=").passed
    assert not v.Row("x", "c", "q", 1.0, math.nan, 0.1).passed
    assert v.Row("x", "c", "q", 1.0, 5.0, 0.1, relation="report").passed is None


def test_control_variate_is_unbiased_and_its_se_honest():
    """y = 3 + 2(x - 1) + noise with E[x] = 1 known: over many synthetic experiments the
    estimate is centred on 3 and its SE matches its spread."""
    rng = np.random.default_rng(0)
    est, ses = [], []
    for _ in range(2000):
        x = 1.0 + rng.normal(0, 0.5, 16)
        y = 3.0 + 2.0 * (x - 1.0) + rng.normal(0, 0.1, 16)
        e, s = v.control_variate(y, x, 1.0)
        est.append(e)
        ses.append(s)
    est = np.array(est)
    assert abs(est.mean() - 3.0) < 5 * est.std() / math.sqrt(est.size)
    assert np.mean(ses) == pytest.approx(est.std(), rel=0.1)
    plain = 0.5 * 2.0 / 4.0  # sd of the plain mean of 16: 1.0 / √16
    assert est.std() < plain / 5


def test_token_service_moments_scale_with_speed():
    es, es2, es3 = v.token_service_moments(speed=1.0, jitter=(1.0, 1.0))
    assert (es, es2, es3) == pytest.approx(theory.token_demand_moments(k=3))
    s = v.token_service_moments(speed=0.5, jitter=(0.9, 1.1))
    j = theory.uniform_moments(0.9, 1.1)
    assert s == pytest.approx((es * 0.5 * j[0], es2 * 0.25 * j[1], es3 * 0.125 * j[2]))


def test_command_line_prints_a_sweep_and_writes_a_report(tmp_path, capsys):
    assert v.main(["--sweep", "md1", "--quick"]) == 0
    text = capsys.readouterr().out
    sweep = routesim.parse_sweep(text)
    assert [s.name for s in sweep.stages] == [f"rho{r:g}" for r in v.ONE_REPLICA_LOADS]
    out = tmp_path / "validation.md"
    assert v.main(["--check", "md1", "--quick", "--out", str(out)]) == 0
    doc = out.read_text()
    assert "M/D/1" in doc and "--check md1 --quick" in doc and "FAIL" not in doc
    assert made_with({"routesim_version": routesim.__version__, **environment()}) in doc.splitlines()


# ----------------------------------------------------------------------------------
# One replica


def test_mm1(checks):
    """M/M/1 at ρ = 0.3, 0.5, 0.8: mean sojourn 1/(μ - λ), L = ρ/(1 - ρ), P(N >= i) = ρⁱ."""
    assert_all_pass(checks("mm1"))


def test_mg1_pollaczek_khinchine(checks):
    """Token demand: mean wait by P–K from the exact E[S], E[S²] of the token distributions."""
    assert_all_pass(checks("mg1"))


def test_md1(checks):
    assert_all_pass(checks("md1"))


# ----------------------------------------------------------------------------------
# Several replicas


def test_random_routing_is_independent_mm1_queues(checks):
    assert_all_pass(checks("random"))


def test_round_robin_is_en_m1(checks):
    """Each replica under round robin is E_N/M/1; it must also beat M/M/1 at the same load
    (regular arrivals queue less), by more than its standard error."""
    res = checks("round_robin")
    assert_all_pass(res)
    for r in res.rows:
        if r.quantity.startswith("mean sojourn"):
            rho = float(r.case.split("ρ = ")[1].split()[0])
            mm1 = theory.mm1_sojourn(rho / v.SERVICE_MS, 1 / v.SERVICE_MS)
            assert r.simulated + v.Z * r.se < mm1


@pytest.mark.slow
def test_power_of_two_approaches_the_supermarket_fixed_point(checks):
    res = checks("power_of_two")
    assert_all_pass(res, [r for r in res.rows if "N → ∞" in r.case])
    # the finite-N excess shrinks with N: s_3, s_4 of N = 4N₀ are closer to the fixed point
    n1, n2 = v.SUPERMARKET_N
    for i in (3, 4):
        dev = {n: abs(float(res.datasets[f"n{n}"].queue_tail.sel(policy="power_of_two", level=i).mean())
                      - theory.supermarket_tail(v.SUPERMARKET_LOAD, i)) for n in (n1, n2)}
        assert dev[n2] < dev[n1]


@pytest.mark.slow
def test_least_queue_between_erlang_c_and_power_of_two(checks):
    res = checks("power_of_two")
    rows = [r for r in res.rows if r.quantity.startswith("least queue")]
    assert len(rows) == 4
    assert_all_pass(res, rows)


# ----------------------------------------------------------------------------------
# Little's law and the time step


@pytest.mark.slow
def test_littles_law_on_every_run(checks):
    """Every run of a varied grid (all policies, scenarios, dt = 0.5 and exact, queue caps
    3, 50, unbounded, two demand distributions) and of every other check."""
    res = checks("littles_law")
    assert_all_pass(res)
    covered = {r.case.split(" (")[0].split("/")[0] for r in res.rows}
    assert covered >= {n for n in v.CHECKS if n != "littles_law"} | {"varied-tokens", "varied-exponential"}


@pytest.mark.slow
def test_discrete_time_converges_to_exact(checks):
    """At dt = 0.05 ms p99 and attainment are within the stated tolerance of exact mode,
    and the distance shrinks as dt does (pooled over the four policies)."""
    res = checks("discretization")
    assert_all_pass(res)
    ds = res.datasets["discretization"]
    for metric in v.METRICS:
        d = {dt: v.paired_differences(ds, dt)[metric] for dt in v.DISCRETIZATION_DT}
        distance = [abs(d[dt][0]) for dt in v.DISCRETIZATION_DT]
        assert distance == sorted(distance, reverse=True) and len(set(distance)) == len(distance), (metric, d)
        coarse = d[v.DISCRETIZATION_DT[0]]
        assert abs(coarse[0]) > v.Z * coarse[1], "the coarse step's error must be measurable"


@pytest.mark.slow
def test_the_document_is_generated(checks):
    """docs/validation.md is the output of the validation command on this code: every
    number in it comes from these runs (wall times aside)."""
    results = {name: checks(name) for name in v.CHECKS}
    fresh = v.markdown(results, quick=False, seconds=0.0)

    def strip(text):   # wall times, and the commit and versions it was made with
        text = "\n".join(line for line in text.split("\n") if not line.startswith(MADE_WITH))
        text = re.sub(r"\d+ s of wall time", "N s of wall time", text)
        return re.sub(r"[\d.]+ s here", "N s here", text)

    assert DOC.exists(), "run: python -m routesim.validation --out docs/validation.md"
    assert strip(DOC.read_text(encoding="utf-8")) == strip(fresh), (
        "docs/validation.md is out of date: python -m routesim.validation --out docs/validation.md")


def test_warm_ups_are_long_enough():
    m = v.warmup_margin()
    assert m["relaxations"] >= 20
    assert m["supermarket_residual"] < 1e-9
