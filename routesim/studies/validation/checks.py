"""Validation of the simulator against queueing theory, as sweeps.

Each check writes a sweep file's text, runs it through :func:`routesim.run` and
compares what the runs measured with a closed form of :mod:`routesim.theory`. The
theory checks run in exact event-time mode (``dt_ms = 0``); Little's law runs both
``dt = 0.5`` ms and exact mode, and the discretization check compares time steps with
exact mode:

- ``mm1``: one replica, exponential service: W = 1/(μ - λ), P(N >= i) = ρⁱ.
- ``mg1``: one replica, token demand with jitter: the Pollaczek–Khinchine mean wait,
  with E[S] and E[S²] summed exactly over the token distributions.
- ``md1``: one replica, constant demand: the M/D/1 mean wait.
- ``random``: random routing over N equal replicas: N independent M/M/1 queues.
- ``round_robin``: round robin over N equal replicas: N E_N/M/1 queues.
- ``power_of_two``: the supermarket fixed point s_i = λ^(2ⁱ - 1) as N grows; least
  queue between the pooled M/M/c (Erlang C) bound and power of two.
- ``littles_law``: mean_in_system = throughput × mean sojourn on every run of a varied
  grid and of every other check that ran.
- ``discretization``: the study's conditions at dt = 0.5, 0.1, 0.05 ms against exact.

Statistics. Seeds are independent replications: an estimate is the mean over k seeds
of a per-run value, and its standard error is sd/√k. A comparison passes when
``|simulated - theory| <= Z·SE + allowance``, Z fixed, the allowance a known
deterministic bias stated with each check (zero where there is none):

- mean sojourn: the cohort keeps completed requests only, and one arriving s before
  the horizon completes only if its sojourn is below s; to first order this lowers
  the mean by Var(W)/T <= E[W²]/T over a window T, the allowance (E[W²] from theory).
  Warm-up: ``WARMUP_S``, at least 20 relaxation times 1/(μ(1 - √ρ)²) of an M/M/1
  queue at the heaviest per-replica load of the checks (more regular arrivals, less
  variable service or shared queues relax faster), so the empty start leaves about
  e⁻²⁰ of the mean; the supermarket runs warm up for ``SUPERMARKET_WARMUP_S``, after
  which the mean-field ODE started empty is within rounding of its fixed point. A
  per-run mean is a ratio with O(1/n) bias for n requests a run. Both are far below
  the standard errors and not added.
- time averages (queue_tail, mean_in_system): no truncation bias; warm-up as above.
- supermarket: finite N shifts s_i by O(1/N); runs at N and 4N are extrapolated to
  N → ∞, s_∞ ≈ (4 s_4N - s_N)/3, and that is compared with the fixed point (with
  the utilization, whose expectation λ is exact, as a control variate).

Command line::

    python -m routesim.validation [--out docs/validation.md] [--quick] [--check NAME ...]
    python -m routesim.validation --sweep NAME [--quick]      # print a check's sweep file

Without ``--out`` the tables are printed. Exit status 1 when a comparison fails.
"""

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xarray as xr

from ... import theory
from ...files import write_text
from ...results import environment, made_with
from ...tables import fmt, markdown_table, text_table

Z = 4.0
"""Standard errors allowed between a simulated estimate and its theory value."""

SERVICE_MS = 10.0
"""Mean service time 1/μ of every replica of the theory checks (ms)."""

REFERENCE_MS = 11.0
"""reference_demand_ms of the theory checks: exponential and constant demand have this
mean, and a replica whose heterogeneity entry is m ms serves demand × m / REFERENCE_MS."""

FIRST_SEED = {"mm1": 1, "mg1": 1001, "md1": 2001, "random": 3001, "round_robin": 4001,
              "power_of_two": 5001, "littles_law": 6001, "discretization": 101}
"""First seed of each check: disjoint ranges, so that the checks are independent evidence
(the discretization check uses the study's validation seeds)."""

STUDY = Path(__file__).resolve().parents[3] / "sweeps" / "exploration.toml"
"""The study whose conditions the Little's-law and discretization checks run."""

COMMAND = "python -m routesim.validation --check {name}"

WARMUP_S = 20.0
"""Warm-up of the theory checks (s)."""


# ----------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class Row:
    """One theory-vs-simulation comparison.

    ``relation``: ``"="`` passes when |simulated - theory| <= Z·se + allowance;
    ``">="`` / ``"<="`` are one-sided (simulated >= theory - tolerance, or <= theory +
    tolerance); ``"report"`` is shown, not judged.
    """

    check: str
    case: str
    quantity: str
    theory: float
    simulated: float
    se: float
    allowance: float = 0.0
    relation: str = "="
    note: str = ""

    @property
    def z(self) -> float:
        return (self.simulated - self.theory) / self.se if self.se > 0 else math.nan

    @property
    def tolerance(self) -> float:
        return Z * self.se + self.allowance

    @property
    def passed(self) -> bool | None:
        if self.relation == "report":
            return None
        d, tol = self.simulated - self.theory, self.tolerance
        if not (np.isfinite(d) and np.isfinite(tol)):  # a NaN estimate fails
            return False
        ok = {"=": abs(d) <= tol, ">=": d >= -tol, "<=": d <= tol}[self.relation]
        return bool(ok)

    @property
    def command(self) -> str:
        return COMMAND.format(name=self.check)


@dataclass
class Result:
    """One check's comparisons, the Datasets it ran ({stage: Dataset}), its sweep
    text, wall time (s) and extra tables ({title: (headers, rows)})."""

    name: str
    rows: list
    datasets: dict
    sweep: str
    seconds: float
    tables: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(r.passed is not False for r in self.rows)

    @property
    def runs(self) -> int:
        return sum(ds.attainment.size for ds in self.datasets.values())


@dataclass(frozen=True)
class Check:
    """A check: its sweep text, and the analysis of that sweep's Datasets into rows
    (and tables)."""

    name: str
    title: str
    sweep: Callable[[bool], str]
    analyze: Callable[[dict, bool], tuple]
    doc: str


# ----------------------------------------------------------------------------------
# Sweep text


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return "inf" if v == math.inf else repr(v)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return "[" + ", ".join(_toml(v) for v in value) + "]"


def _stage_text(stage: dict) -> str:
    return "\n[[stages]]\n" + "\n".join(f"{k} = {_toml(v)}" for k, v in stage.items()) + "\n"


def sweep_text(name: str, heterogeneity: dict, stages: list, *, demand="exponential",
               jitter=(1.0, 1.0), warmup_s=WARMUP_S, measure_s=100.0) -> str:
    """A sweep file for a theory check: exact mode, unbounded queues, reference demand
    ``REFERENCE_MS``, one steady scenario; ``stages`` are dicts of stage keys."""
    lines = [
        f"# written by routesim.validation for the check {name!r}",
        f'name = "validation-{name}"',
        "",
        "[simulation]",
        "dt_ms = 0",
        f"warmup_s = {_toml(float(warmup_s))}",
        f"measure_s = {_toml(float(measure_s))}",
        "",
        "[cluster]",
        "queue_cap = inf",
        f"reference_demand_ms = {_toml(REFERENCE_MS)}",
        "[cluster.heterogeneity]",
        *(f"{k} = {_toml([float(x) for x in v])}" for k, v in heterogeneity.items()),
        "",
        "[workload]",
        f"demand = {_toml(demand)}",
        f"jitter = {_toml({'min': float(jitter[0]), 'max': float(jitter[1])})}",
        "",
        "[scenarios.steady]",
        "events = []",
        "",
    ]
    return "\n".join(lines) + "".join(_stage_text({**st, "scenario": ["steady"]}) for st in stages)


def _study_head(study=STUDY) -> str:
    """The study's sweep file without its stages: its constants, scenarios and grid."""
    return Path(study).read_text(encoding="utf-8").split("[[stages]]")[0]


def _sizes(quick: bool, seeds: int, window_s: float) -> tuple[int, float]:
    """(seeds, window) of a check: ``--quick`` halves the seeds (at least 8) and
    quarters the window."""
    return (max(8, seeds // 2), window_s / 4.0) if quick else (seeds, window_s)


def warmup_margin() -> dict:
    """How long the warm-ups are: the heaviest per-replica load ρ of the theory checks,
    the relaxation time 1/(μ(1 − √ρ)²) of an M/M/1 queue at it (ms), ``WARMUP_S`` in
    those, and how far the supermarket mean-field ODE started empty is from its fixed
    point after ``SUPERMARKET_WARMUP_S``."""
    rho = max(*ONE_REPLICA_LOADS, *CLUSTER_LOADS, SUPERMARKET_LOAD)
    tau_ms = SERVICE_MS / (1.0 - math.sqrt(rho)) ** 2
    s = theory.supermarket_transient(SUPERMARKET_LOAD, SUPERMARKET_WARMUP_S * 1000.0 / SERVICE_MS)
    fixed = np.array([theory.supermarket_tail(SUPERMARKET_LOAD, i) for i in range(s.size)])
    return {"rho": rho, "tau_ms": tau_ms, "relaxations": WARMUP_S * 1000.0 / tau_ms,
            "supermarket_residual": float(np.abs(s - fixed).max())}


def _equal(n):
    return [SERVICE_MS] * n


# ----------------------------------------------------------------------------------
# Statistics


def seed_stats(values) -> tuple[float, float]:
    """Mean and standard error (sd/√k) of k per-seed values."""
    v = np.asarray(values, dtype=float).ravel()
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size))


def control_variate(y, x, x_mean) -> tuple[float, float]:
    """E[y] from per-seed values y and a control x whose expectation ``x_mean`` is known:
    the least-squares line of y on x evaluated at ``x_mean``, and its standard error
    s·√(1/k + (x_mean − x̄)²/Σ(x − x̄)²), s² the residual variance on k − 2 degrees of
    freedom. Removes the part of y's noise that x explains."""
    y, x = np.asarray(y, dtype=float).ravel(), np.asarray(x, dtype=float).ravel()
    k = y.size
    sxx = float(np.sum((x - x.mean()) ** 2))
    beta = float(np.sum((x - x.mean()) * (y - y.mean()))) / sxx
    resid = y - y.mean() - beta * (x - x.mean())
    s2 = float(np.sum(resid ** 2)) / (k - 2)
    est = y.mean() + beta * (x_mean - x.mean())
    return float(est), math.sqrt(s2 * (1.0 / k + (x_mean - x.mean()) ** 2 / sxx))


def per_seed(da: xr.DataArray) -> np.ndarray:
    """One value per seed: the mean over every other dimension."""
    others = [d for d in da.dims if d != "seed"]
    return np.asarray(da.mean(others).values if others else da.values, dtype=float)


def _sojourn_row(check, case, ds, w, w2, quantity="mean sojourn W (ms)", offset=0.0, note=""):
    """Mean sojourn (minus ``offset``) against theory ``w`` (minus ``offset``), the
    allowance the truncation bound E[W²]/T."""
    mean, se = seed_stats(per_seed(ds.latency_mean) - offset)
    return Row(check, case, quantity, w - offset, mean, se,
               allowance=w2 / (ds.attrs["measure_s"] * 1000.0), note=note)


def _tail_rows(check, case, ds, expected, levels=(1, 2, 3)):
    rows = []
    for i in levels:
        mean, se = seed_stats(per_seed(ds.queue_tail.sel(level=i)))
        rows.append(Row(check, case, f"P(N ≥ {i})", expected(i), mean, se))
    return rows


# ----------------------------------------------------------------------------------
# One replica


ONE_REPLICA_LOADS = {0.3: 100.0, 0.5: 200.0, 0.8: 800.0}
"""ρ -> measurement window (s) of the one-replica checks: a mean sojourn's variance
grows like (1 - ρ)⁻⁴, so the heavy load gets the long window."""
ONE_REPLICA_SEEDS = 32


def _one_replica_sweep(name, demand, jitter, quick):
    k, scale = _sizes(quick, ONE_REPLICA_SEEDS, 1.0)
    stages = [dict(name=f"rho{rho:g}", policy=["round_robin"], heterogeneity=["one"],
                   rate_rps=[1000.0 * rho / SERVICE_MS], measure_s=window * scale,
                   seeds={"first": FIRST_SEED[name], "count": k})
              for rho, window in ONE_REPLICA_LOADS.items()]
    return sweep_text(name, {"one": [SERVICE_MS]}, stages, demand=demand, jitter=jitter)


def _mm1_rows(check, case, ds, rho, in_system, label):
    """The M/M/1 predictions at load ``rho``: sojourn, mean in system (``in_system``,
    a variable of ``ds``), and the tail P(N >= i) = ρⁱ."""
    mu = 1.0 / SERVICE_MS
    w = theory.mm1_sojourn(rho * mu, mu)
    mean, se = seed_stats(per_seed(ds[in_system]))
    return ([_sojourn_row(check, case, ds, w, 2 * w * w),
             Row(check, case, label, rho / (1 - rho), mean, se)]
            + _tail_rows(check, case, ds, lambda i: theory.mm1_tail(rho, i)))


def _mm1_analyze(out, quick):
    rows = []
    for rho in ONE_REPLICA_LOADS:
        rows += _mm1_rows("mm1", f"ρ = {rho:g}", out[f"rho{rho:g}"], rho, "mean_in_system",
                          "mean in system L")
    return rows, {}


MM1 = Check(
    "mm1", "One replica, exponential service: M/M/1",
    lambda quick: _one_replica_sweep("mm1", "exponential", (1.0, 1.0), quick), _mm1_analyze,
    "One replica with exponential service of mean 1/μ under Poisson arrivals is M/M/1: "
    "W = 1/(μ − λ) (the sojourn is exponential, E[W²] = 2W²), L = ρ/(1 − ρ), P(N ≥ i) = ρⁱ.")


TOKEN_JITTER = (0.9, 1.1)


def token_service_moments(values=None, speed=SERVICE_MS / REFERENCE_MS, jitter=TOKEN_JITTER):
    """E[S], E[S²], E[S³] of the token workload's service time S = D · speed · J: D the
    demand of model.md §2 (exact sums over the two token distributions), J the
    uniform jitter, independent of D. ``values`` overrides workload parameters
    ({config parameter name: value})."""
    from ...queue.params import PARAM
    v = {p.name: p.default for p in PARAM.values()}
    v.update(values or {})
    d = theory.token_demand_moments(
        prompt=tuple(v[f"prompt_tokens_{x}"] for x in ("median", "sigma", "min", "max")),
        output=tuple(v[f"output_tokens_{x}"] for x in ("median", "sigma", "min", "max")),
        base=v["demand_ms_base"], per_prompt=v["demand_ms_per_prompt_token"],
        per_output=v["demand_ms_per_output_token"], k=3)
    s = theory.product_moments(d, theory.uniform_moments(*jitter, k=3))
    return tuple(m * speed ** (n + 1) for n, m in enumerate(s))


def _mg1_analyze(out, quick):
    es, es2, es3 = token_service_moments()
    rows = []
    for rho in ONE_REPLICA_LOADS:
        ds = out[f"rho{rho:g}"]
        lam = float(ds.rate_rps.values[0]) / 1000.0
        w = theory.mg1_sojourn(lam, es, es2)
        rows.append(_sojourn_row("mg1", f"ρ = λE[S] = {lam * es:.4f}", ds, w,
                                 theory.mg1_sojourn_m2(lam, es, es2, es3),
                                 quantity="mean wait W_q = W − E[S] (ms)", offset=es))
    return rows, {}


MG1 = Check(
    "mg1", "One replica, token demand: M/G/1 (Pollaczek–Khinchine)",
    lambda quick: _one_replica_sweep("mg1", "tokens", TOKEN_JITTER, quick), _mg1_analyze,
    "One replica serving the token workload of model.md §2 (log-normal prompt and output "
    "tokens, jitter 0.9–1.1) is M/G/1. Mean wait by Pollaczek–Khinchine, "
    "W_q = λE[S²]/(2(1 − ρ)), with E[S] and E[S²] summed exactly over the discretized, "
    "clipped token distributions (prompt and output are independent: z1 and z2 of one "
    "Box–Muller pair are independent normals) and the uniform jitter. The allowance uses "
    "Takács' E[W²], which needs E[S³].")


def _md1_analyze(out, quick):
    d, rows = SERVICE_MS, []
    for rho in ONE_REPLICA_LOADS:
        ds = out[f"rho{rho:g}"]
        lam = rho / d
        rows.append(_sojourn_row("md1", f"ρ = {rho:g}", ds, theory.md1_sojourn(lam, d),
                                 theory.mg1_sojourn_m2(lam, d, d * d, d ** 3),
                                 quantity="mean wait W_q = W − d (ms)", offset=d))
    return rows, {}


MD1 = Check(
    "md1", "One replica, constant demand: M/D/1",
    lambda quick: _one_replica_sweep("md1", "constant", (1.0, 1.0), quick), _md1_analyze,
    "One replica whose every request takes d = 1/μ is M/D/1: W_q = λd²/(2(1 − ρ)).")


# ----------------------------------------------------------------------------------
# Several replicas


CLUSTER = 4
"""Replicas of the random and round-robin checks."""
CLUSTER_LOADS = {0.5: 100.0, 0.8: 400.0}
"""Per-replica ρ -> measurement window (s) of the random and round-robin checks."""
CLUSTER_SEEDS = 32


def _cluster_sweep(name, policy, quick):
    k, scale = _sizes(quick, CLUSTER_SEEDS, 1.0)
    stages = [dict(name=f"rho{rho:g}", policy=[policy], heterogeneity=[f"n{CLUSTER}"],
                   rate_rps=[1000.0 * CLUSTER * rho / SERVICE_MS], measure_s=window * scale,
                   seeds={"first": FIRST_SEED[name], "count": k})
              for rho, window in CLUSTER_LOADS.items()]
    return sweep_text(name, {f"n{CLUSTER}": _equal(CLUSTER)}, stages)


def _random_analyze(out, quick):
    rows = []
    for rho in CLUSTER_LOADS:
        rows += _mm1_rows("random", f"N = {CLUSTER}, ρ = {rho:g} each", out[f"rho{rho:g}"], rho,
                          "replica_mean_in_system", "mean in system per replica")
    return rows, {}


RANDOM = Check(
    "random", "Random routing over N equal replicas: N independent M/M/1 queues",
    lambda quick: _cluster_sweep("random", "random", quick), _random_analyze,
    "Random routing splits a Poisson stream of rate λ into N independent Poisson streams "
    "of rate λ/N, so each of N equal exponential replicas is an M/M/1 queue at "
    "ρ = λ/(Nμ): mean sojourn 1/(μ − λ/N), ρ/(1 − ρ) requests per replica, and a "
    "replica holds at least i requests a fraction ρⁱ of the time.")


def _round_robin_analyze(out, quick):
    mu, rows = 1.0 / SERVICE_MS, []
    for rho in CLUSTER_LOADS:
        ds, case = out[f"rho{rho:g}"], f"N = {CLUSTER}, ρ = {rho:g} each"
        sigma = theory.en_m1_sigma(CLUSTER, rho * mu, mu)
        w = theory.en_m1_sojourn(CLUSTER, rho * mu, mu)
        rows.append(_sojourn_row("round_robin", case, ds, w, 2 * w * w,
                                 note=f"σ = {sigma:.6f}; M/M/1 at the same load: "
                                      f"W = {theory.mm1_sojourn(rho * mu, mu):.4g} ms"))
        rows += _tail_rows("round_robin", case, ds,
                           lambda i, r=rho, s=sigma: theory.gim1_tail(s, r, i))
    return rows, {}


ROUND_ROBIN = Check(
    "round_robin", "Round robin over N equal replicas: E_N/M/1",
    lambda quick: _cluster_sweep("round_robin", "round_robin", quick), _round_robin_analyze,
    "Round robin over N equal exponential replicas sends every N-th Poisson arrival to a "
    "replica, whose interarrival times are then Erlang-N: an E_N/M/1 queue. With σ the "
    "root in (0, 1) of σ = A*(μ(1 − σ)), A* the Laplace transform of the Erlang-N "
    "interarrival time, the sojourn is exponential with mean 1/(μ(1 − σ)) and a replica "
    "holds at least i ≥ 1 requests a fraction ρσ^(i−1) of the time.")


SUPERMARKET_N = (50, 200)
"""Replica counts N and 4N of the supermarket check."""
SUPERMARKET_LOAD = 0.8
SUPERMARKET_SEEDS = 16
SUPERMARKET_WINDOW_S = 10.0
SUPERMARKET_WARMUP_S = 2.0
"""Warm-up of the N and 4N runs: 200 service times."""
POOL_N = 4
"""Replicas of the small least-queue check, where M/M/c, least queue and power of two
are furthest apart."""
POOL_WINDOW_S = 100.0


def _power_of_two_sweep(quick):
    k, window = _sizes(quick, SUPERMARKET_SEEDS, SUPERMARKET_WINDOW_S)
    _, pool_window = _sizes(quick, SUPERMARKET_SEEDS, POOL_WINDOW_S)
    lam = SUPERMARKET_LOAD
    n1, n2 = SUPERMARKET_N
    seeds = {"first": FIRST_SEED["power_of_two"], "count": k}

    def stage(n, policies, **kw):
        return dict(name=f"n{n}", policy=policies, heterogeneity=[f"n{n}"],
                    rate_rps=[1000.0 * n * lam / SERVICE_MS], seeds=seeds, **kw)

    stages = [stage(POOL_N, ["power_of_two", "least_queue"], measure_s=pool_window, warmup_s=WARMUP_S),
              stage(n1, ["power_of_two", "least_queue"]), stage(n2, ["power_of_two"])]
    return sweep_text("power_of_two", {f"n{n}": _equal(n) for n in (POOL_N, n1, n2)}, stages,
                      warmup_s=SUPERMARKET_WARMUP_S, measure_s=window)


def _power_of_two_analyze(out, quick):
    lam, mu = SUPERMARKET_LOAD, 1.0 / SERVICE_MS
    n1, n2 = SUPERMARKET_N
    small, large = (out[f"n{n}"].sel(policy="power_of_two") for n in (n1, n2))
    r = n2 / n1

    def to_infinity(a_small, a_large):
        """Per seed: (r·y_rN − y_N)/(r − 1), the 1/N term cancelled."""
        return (r * per_seed(a_large) - per_seed(a_small)) / (r - 1)

    utils = {n: per_seed(ds.queue_tail.sel(level=1)) for n, ds in ((n1, small), (n2, large))}
    util = (r * utils[n2] - utils[n1]) / (r - 1)
    rows = []
    for i in range(1, 6):
        if i == 5:
            quantity, a1, a2, exp, spec = ("mean sojourn W (ms)", small.latency_mean, large.latency_mean,
                                           theory.supermarket_sojourn(lam, 2, mu), ".4f")
        else:
            quantity, a1, a2, exp, spec = (f"s_{i} = P(N ≥ {i})", small.queue_tail.sel(level=i),
                                           large.queue_tail.sel(level=i), theory.supermarket_tail(lam, i), ".5f")
        y = to_infinity(a1, a2)
        if i == 1:
            (est, se), how = seed_stats(y), "plain mean"
        else:
            (est, se), how = control_variate(y, util, lam), "control variate s_1 (E = λ)"
        raw = []
        for n, a in ((n1, a1), (n2, a2)):
            m, e = seed_stats(per_seed(a)) if i == 1 else control_variate(per_seed(a), utils[n], lam)
            raw.append(f"N = {n}: {m:{spec}} ± {e:{spec}}")
        rows.append(Row("power_of_two", f"λ = {lam:g}, N → ∞", quantity, exp, est, se,
                        note="; ".join(raw) + f"; extrapolated seed by seed, {how}"))
    for n in (POOL_N, n1):
        ds, case = out[f"n{n}"], f"N = {n}, λ = {lam:g}"
        lq, p2 = (per_seed(ds.latency_mean.sel(policy=p)) for p in ("least_queue", "power_of_two"))
        (mean, se), (p2m, p2se) = seed_stats(lq), seed_stats(p2)
        allowance = 2 * mean ** 2 / (ds.attrs["measure_s"] * 1000.0)  # truncation, E[W²] ≲ 2W²
        rows.append(Row("power_of_two", case, "least queue W ≥ M/M/c W (ms)",
                        theory.mmc_sojourn(n * lam * mu, mu, n), mean, se, allowance=allowance,
                        relation=">=", note=f"Erlang C({n}, {n * lam:g}) = {theory.erlang_c(n, n * lam):.5f}"))
        diff, dse = seed_stats(lq - p2)
        rows.append(Row("power_of_two", case, "least queue W − power of two W (ms)", 0.0, diff, dse,
                        relation="<=", note=f"power of two W = {p2m:.4f} ± {p2se:.2g} ms (paired SE)"))
    return rows, {}


POWER_OF_TWO = Check(
    "power_of_two", "Power of two choices and least queue over many replicas",
    _power_of_two_sweep, _power_of_two_analyze,
    "Power of two choices over N equal exponential replicas at load λ per replica (μ = 1): "
    "as N → ∞ the fraction of replicas holding at least i requests tends to the "
    "supermarket fixed point λ^(2ⁱ − 1), and the mean sojourn to Σ_{i≥1} λ^(2ⁱ − 2)/μ. At "
    "finite N both are off by O(1/N), so runs at N and 4N are extrapolated to N → ∞ seed "
    "by seed, (4 y_4N − y_N)/3, and compared. Most of a run's noise is its realized load, "
    "so the estimate uses the utilization s_1 as a control variate (its expectation λ is "
    "exact): the least-squares line of the per-seed values on s_1, read at s_1 = λ, with "
    "the SE of that prediction. Least queue lies between the pooled M/M/c (Erlang C: one "
    "central queue never idles a server while a request waits) and power of two (which "
    "sees two queues instead of all): the lower bound with the truncation allowance 2W²/T "
    "(E[W²] ≲ 2W²), the upper bound by the paired per-seed difference.")


# ----------------------------------------------------------------------------------
# Little's law


def little_residual(ds: xr.Dataset):
    """Per run: (r / L, |r| / bound) for Little's law over the measurement window.

    ``mean_in_system`` · T is the time requests spend in the system inside the window
    [w, H) of length T. A cohort request that completes contributes its sojourn minus
    the wait for the step that processes its arrival (in [0, dt): dt/2 on average for
    Poisson arrivals; 0 in exact mode). Every other request touching the window
    (carried in from the warm-up and completed in it, C_in = throughput·T − completed;
    unfinished at the horizon, U; shed after entering a queue, at most ``shed``)
    contributes between 0 and its sojourn, and C_in·W̄ is counted in X·W̄. So, with
    X = throughput and W̄ = latency_mean,

        r = L − X (W̄ − dt/2),    |r| T <= (C_in + U + shed) M + Z dt √(n/12),

    M bounding the sojourn of the edge requests (taken as ``latency_max``, the longest
    completed one) and the last term Z standard deviations of the n = completed
    uniform step offsets around their mean. A run in exact mode whose window starts
    and ends empty has a bound of zero: there the identity is exact, up to
    ``ROUNDING`` · L of floating-point error.
    """
    def value(name):
        return ds[name] if name in ds.coords else ds.attrs[name]

    window_ms = value("measure_s") * 1000.0
    dt = value("dt_ms")
    w = ds.latency_mean.fillna(0.0)
    r = ds.mean_in_system - ds.throughput / 1000.0 * (w - dt / 2.0)
    carried = (ds.throughput * window_ms / 1000.0 - ds.completed).round()
    bound = ((carried + ds.unfinished + ds.shed) * ds.latency_max.fillna(window_ms)
             + Z * dt * np.sqrt(ds.completed / 12.0)) / window_ms + ROUNDING * ds.mean_in_system
    rel = (r / ds.mean_in_system).where(ds.mean_in_system > 0, 0.0)
    ratio = xr.where(bound > 0, abs(r) / bound.where(bound > 0, 1.0), xr.where(abs(r) > 0, np.inf, 0.0))
    return rel, ratio


def little_rows(check: str, datasets: dict) -> list:
    """Little's law on every run of the Datasets: one row per Dataset, passing when
    every run's residual is within its edge bound (largest |r|/bound <= 1); the note
    gives the mean relative residual r/L over runs with its SE."""
    rows = []
    for stage, ds in datasets.items():
        rel, ratio = little_residual(ds)
        values = rel.values.ravel()
        n = values.size
        mean = float(values.mean())
        se = float(values.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
        rows.append(Row(
            check, f"{stage} ({n} runs)", "largest |r| / bound over runs", 1.0,
            float(ratio.max()), 0.0, relation="<=",
            note=(f"r/L over runs: mean {mean:+.2e} ± {se:.1e}, largest |r/L| "
                  f"{float(abs(rel).max()):.2e}")))
    return rows


ROUNDING = 1e-9
"""Relative floating-point slack of Little's law on a run with nothing at its edges."""

LITTLE_GRID = dict(
    policy=["round_robin", "least_queue", "latency_aware", "adaptive", "random", "power_of_two"],
    rate_rps=[100.0, 250.0], heterogeneity=["default", "high"],
    scenario=["steady", "burst", "straggler", "failure"],
    dt_ms=[0.5, 0.0], queue_cap=[3, 50, math.inf],
)
LITTLE_SEEDS = 2


def _little_sweep(quick, study=STUDY):
    stages = "".join(_stage_text(dict(name=f"varied-{demand}", workload={"demand": demand},
                                      seeds={"first": FIRST_SEED["littles_law"], "count": LITTLE_SEEDS}, **LITTLE_GRID))
                     for demand in ("tokens", "exponential"))
    return _study_head(study) + stages


def _little_analyze(out, quick):
    return little_rows("littles_law", out), {}


LITTLES_LAW = Check(
    "littles_law", "Little's law on every run", _little_sweep, _little_analyze,
    "Little's law, L = X·W, on every run: of a varied grid (the study's settings with all "
    "six policies, the four scenarios, rates 100 and 250 req/s, both heterogeneity "
    "settings, dt = 0.5 ms and exact, queue caps 3, 50 and unbounded, token and "
    "exponential demand) and of every other check. Over a finite window it holds up to "
    "edge terms (requests carried in from the warm-up, unfinished or shed at the horizon) "
    "and, in discrete mode, the dt/2 a request waits on average for the step that "
    "processes its arrival, during which it is not yet in the system: "
    "r = L − X(W̄ − dt/2) must satisfy |r|·T ≤ (C_in + U + shed)·M + Z·dt·√(n/12) on "
    "every run (C_in requests carried in, U unfinished, M the longest sojourn, n "
    "completed; see `little_residual`). In exact mode a run whose window starts and ends "
    "empty has a bound of zero: there the identity must hold to rounding. The table "
    "gives per Dataset the largest |r|/bound over its runs, the notes the mean of r/L.")


# ----------------------------------------------------------------------------------
# Discretization


DISCRETIZATION_DT = (0.5, 0.1, 0.05)
"""Time steps compared with exact mode; the first is the study's, the last is judged."""
DISCRETIZATION_SEEDS = 12
POLICIES = ("round_robin", "least_queue", "latency_aware", "adaptive")
METRICS = {"latency_p99": "p99 relative difference", "attainment": "attainment difference"}


def _discretization_sweep(quick, study=STUDY):
    seeds = {"first": FIRST_SEED["discretization"],
             "count": DISCRETIZATION_SEEDS // 2 if quick else DISCRETIZATION_SEEDS}
    return _study_head(study) + _stage_text(dict(
        name="discretization", policy=list(POLICIES), dt_ms=[*DISCRETIZATION_DT, 0.0], seeds=seeds))


def paired_differences(ds: xr.Dataset, dt: float, policy: str = "all") -> dict:
    """{metric: (mean, SE)} of the run-by-run differences from exact mode at ``dt``:
    p99 relative (p99_dt / p99_exact − 1), attainment absolute; the mean over conditions
    and policies (``"all"``) or one policy, its SE over seeds (each seed's runs share
    arrivals, so a seed is one replication)."""
    sub, exact = ds.sel(dt_ms=dt), ds.sel(dt_ms=0.0)
    if policy != "all":
        sub, exact = sub.sel(policy=policy), exact.sel(policy=policy)
    return {"latency_p99": seed_stats(per_seed(sub.latency_p99 / exact.latency_p99 - 1.0)),
            "attainment": seed_stats(per_seed(sub.attainment - exact.attainment))}


def _discretization_analyze(out, quick):
    ds = out["discretization"]
    coarse, judged = DISCRETIZATION_DT[0], DISCRETIZATION_DT[-1]
    scale = judged / coarse
    rows, table = [], []
    for pol in (*POLICIES, "all"):
        diffs = {dt: paired_differences(ds, dt, pol) for dt in DISCRETIZATION_DT}
        for dt in DISCRETIZATION_DT[:-1]:
            for metric, label in METRICS.items():
                b, se = diffs[dt][metric]
                rows.append(Row("discretization", f"dt = {dt:g} ms, {pol}", f"mean {label} from exact",
                                0.0, b, se, relation="report"))
        for metric, label in METRICS.items():
            (b, se), (bc, sec) = diffs[judged][metric], diffs[coarse][metric]
            rows.append(Row(
                "discretization", f"dt = {judged:g} ms, {pol}", f"|mean {label}| from exact",
                abs(bc) * scale, abs(b), math.hypot(se, sec * scale), relation="<=",
                note=f"tolerance {scale:g} × |{bc:.5f}| (dt = {coarse:g} ms)"))
    for pol in (*POLICIES, "all"):
        for dt in (*DISCRETIZATION_DT, 0.0):
            sub = ds.sel(dt_ms=dt) if pol == "all" else ds.sel(dt_ms=dt, policy=pol)
            line = [pol, "exact" if dt == 0 else f"{dt:g}", 100 * float(np.nanmean(sub.attainment.values)),
                    float(np.nanmedian(sub.latency_p50.values)), float(np.nanmedian(sub.latency_p99.values))]
            if dt == 0:
                table.append(line + [None] * 4)
                continue
            ex = ds.sel(dt_ms=0.0) if pol == "all" else ds.sel(dt_ms=0.0, policy=pol)
            d = paired_differences(ds, dt, pol)
            table.append(line + [float(abs(sub.latency_p99 - ex.latency_p99).mean()),
                                 100 * float(abs(sub.attainment - ex.attainment).mean()),
                                 tuple(100 * x for x in d["latency_p99"]),
                                 tuple(100 * x for x in d["attainment"])])
    headers = ["policy", "dt (ms)", "attainment %", "p50 ms (median)", "p99 ms (median)",
               "mean abs Δp99 (ms)", "mean abs Δattainment (pts)", "Δp99 % (mean ± SE)",
               "Δattainment pts (mean ± SE)"]
    return rows, {"The study's headline metrics by time step": (headers, table)}


DISCRETIZATION = Check(
    "discretization", "Discrete time converges to exact mode", _discretization_sweep,
    _discretization_analyze,
    "The study's 24 conditions and four policies (adaptive with the file's exploration "
    "weight) on the study's validation seeds, at dt = 0.5, 0.1 and 0.05 ms and in exact "
    "mode, each run paired with its exact-mode twin. The distance from exact mode is the "
    "mean paired difference of p99 (relative) and of attainment (absolute), with its SE "
    "over seeds (a seed's runs share arrivals, so a seed is one replication). Tolerance at "
    "dt = 0.05 ms: a tenth of the distance at dt = 0.5 ms (plus Z·SE). Why: every delay "
    "discrete time adds is a fraction of one step (an arrival waits < dt for its step; a "
    "service is rounded up to whole steps, dt/2 on average; with routing held fixed a "
    "latency grows by less than one step per service it waits for or receives, plus one), "
    "so the error is first order in dt; the amplification of longer services into latency "
    "is convex in the load, which makes a tenth of the dt = 0.5 ms error an upper estimate "
    "for latency. A difference between exact mode and the limit of discrete time, which "
    "does not shrink with dt, fails it. The mean absolute difference, also shown, has a "
    "floor that does not shrink with dt: a timing change alters later decisions of the "
    "state-dependent policies (and of round robin once a queue cap binds), after which "
    "paired runs decorrelate; the paired mean averages that noise out.")


# ----------------------------------------------------------------------------------
# Running and reporting


CHECKS = {c.name: c for c in (MM1, MG1, MD1, RANDOM, ROUND_ROBIN, POWER_OF_TWO, LITTLES_LAW,
                              DISCRETIZATION)}
"""Every check, in report order."""


def _run(text: str) -> dict:
    from ... import parse_sweep, run
    return run(parse_sweep(text, "<validation>"), show_progress=False)


def run_check(name: str, quick=False, others=()) -> Result:
    """Run one check. For ``littles_law``, ``others`` are Results whose every run is
    checked too."""
    check = CHECKS[name]
    t0 = time.perf_counter()
    text = check.sweep(quick)
    out = _run(text)
    rows, tables = check.analyze(out, quick)
    for res in others:
        rows += little_rows(name, {f"{res.name}/{s}": ds for s, ds in res.datasets.items()})
    return Result(name, rows, out, text, time.perf_counter() - t0, tables)


def run_checks(names=None, quick=False, progress=None) -> dict:
    """Run the named checks (default all) and return {name: Result} in report order;
    Little's law also covers every run of the others."""
    names = list(CHECKS) if names is None else [n for n in CHECKS if n in set(names)]
    results = {}
    for name in [n for n in names if n != "littles_law"]:
        if progress:
            progress(name)
        results[name] = run_check(name, quick)
    if "littles_law" in names:
        if progress:
            progress("littles_law")
        results["littles_law"] = run_check("littles_law", quick, others=tuple(results.values()))
    return {n: results[n] for n in names}


def _f(x, spec=".4g"):
    """A cell: a number by :func:`tables.fmt`, a (value, SE) pair as "v ± se", a string as is."""
    if isinstance(x, tuple):
        return f"{_f(x[0], spec)} ± {_f(x[1], spec)}"
    if isinstance(x, str):
        return x
    return fmt(x, spec)


ROW_HEADERS = ["case", "quantity", "theory", "simulated ± SE", "z", "tolerance", "result"]


def row_cells(r: Row) -> list:
    rel = {"=": "", ">=": "≥ ", "<=": "≤ ", "report": ""}[r.relation]  # what simulated must be
    verdict = {True: "pass", False: "FAIL", None: "(reported)"}[r.passed]
    simulated = _f(r.simulated, ".6g") + (f" ± {_f(r.se, '.2g')}" if r.se != 0 else "")
    return [r.case, r.quantity, rel + _f(r.theory, ".6g"), simulated, _f(r.z, "+.2f"),
            _f(r.tolerance, ".3g"), verdict]


def _table_cells(rows):
    return [[_f(c, ".2f") if isinstance(c, (float, tuple)) or c is None else c for c in row] for row in rows]


def _anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def markdown(results: dict, quick: bool, seconds: float) -> str:
    """The report (docs/validation.md): per check its statement, command, comparisons
    and notes; the discretization table."""
    from ... import __version__
    flag = " --quick" if quick else ""
    rows = [r for res in results.values() for r in res.rows]
    judged = [r for r in rows if r.passed is not None]
    failed = [r for r in judged if not r.passed]
    margin = warmup_margin()
    lines = [
        "# Validation against queueing theory",
        "",
        f"<!-- generated by `python -m routesim.validation --out docs/validation.md{flag}`: do not edit -->",
        "",
        f"Generated by `python -m routesim.validation --out docs/validation.md{flag}` (routesim "
        f"{__version__}{', quick sizes' if quick else ''}; {seconds:.0f} s of wall time): "
        f"{len(judged) - len(failed)} of {len(judged)} judged comparisons pass"
        + (f", **{len(failed)} fail**." if failed else "."),
        "",
        made_with({"routesim_version": __version__, **environment()}),
        "",
        "Each check is a sweep written by `routesim/studies/validation/checks.py` (print it with "
        "`python -m routesim.validation --sweep NAME`) and run in exact event-time mode "
        "(`dt_ms = 0`) unless the time step is its subject; the closed forms are in "
        "`routesim/theory.py`. An estimate is the mean over k independent seeds of a per-run "
        f"value and SE = sd/√k. A comparison passes when |simulated − theory| ≤ {Z:g}·SE + "
        "allowance (one-sided for bounds), the allowance a known deterministic bias: for mean "
        "sojourns the cohort's loss of requests unfinished at the horizon, at most E[W²]/T over a "
        "window T; for Little's law and the time step, the bounds stated with them. "
        f"Warm-ups are {WARMUP_S:g} s, {margin['relaxations']:.1f} relaxation times "
        f"1/(μ(1 − √ρ)²) = {margin['tau_ms']:.0f} ms of an M/M/1 queue at the heaviest "
        f"per-replica load ρ = {margin['rho']:g} (more regular arrivals, less variable service "
        "and shared queues relax faster), which leaves about "
        f"e^−{margin['relaxations']:.0f} of the empty start; the supermarket runs at "
        f"N = {SUPERMARKET_N[0]} and {SUPERMARKET_N[1]} warm up for {SUPERMARKET_WARMUP_S:g} s, "
        f"after which the mean-field ODE started empty is within {margin['supermarket_residual']:.0e} "
        "of its fixed point. "
        f"z = (simulated − theory)/SE; tolerance = {Z:g}·SE + allowance.",
        "",
        f"Replicas of the theory checks have mean service time 1/μ = {SERVICE_MS:g} ms "
        f"(heterogeneity entry {SERVICE_MS:g} ms with reference demand {REFERENCE_MS:g} ms), "
        "unbounded queues and no jitter unless stated.",
        "",
        markdown_table(["check", "judged", "pass", "largest abs z (two-sided)", "runs", "reproduce"],
                  [[f"[{CHECKS[n].title}](#{_anchor(CHECKS[n].title)})",
                    sum(r.passed is not None for r in res.rows), sum(r.passed is True for r in res.rows),
                    _f(max((abs(r.z) for r in res.rows if r.relation == "=" and np.isfinite(r.z)),
                           default=math.nan), ".2f"),
                    f"{res.runs:,}", f"`{COMMAND.format(name=n)}{flag}`"]
                   for n, res in results.items()], aligned=False),
    ]
    for name, res in results.items():
        check = CHECKS[name]
        k = {int(ds.sizes["seed"]) for ds in res.datasets.values()}
        lines += ["", f"## {check.title}", "", check.doc, "",
                  f"Reproduce: `{COMMAND.format(name=name)}{flag}` — {res.runs:,} runs, "
                  f"{', '.join(map(str, sorted(k)))} seeds, {res.seconds:.1f} s here.", "",
                  markdown_table(ROW_HEADERS, [row_cells(r) for r in res.rows], aligned=False)]
        notes = [f"- {r.case}, {r.quantity}: {r.note}" for r in res.rows if r.note]
        if notes:
            lines += [""] + notes
        for title, (headers, trows) in res.tables.items():
            lines += ["", f"### {title}", "",
                      "Per policy over the conditions and seeds: mean attainment and median p50 "
                      "and p99 (the headline numbers `python -m routesim.sweep` prints), then "
                      "the differences from exact mode, run by run (`all`: the four policies "
                      "pooled).", "", markdown_table(headers, _table_cells(trows), aligned=False)]
    return "\n".join(lines) + "\n"


def render_text(results: dict) -> str:
    parts = []
    for name, res in results.items():
        parts += [f"{CHECKS[name].title}  ({res.runs:,} runs, {res.seconds:.1f} s)",
                  text_table(ROW_HEADERS, [row_cells(r) for r in res.rows])]
        for title, (headers, trows) in res.tables.items():
            parts += ["", title, text_table(headers, _table_cells(trows))]
        parts.append("")
    return "\n".join(parts)


def _parser():
    ap = argparse.ArgumentParser(prog="python -m routesim.validation",
                                 description="Validate the simulator against queueing theory.")
    ap.add_argument("--out", type=Path, default=None,
                    help="write the Markdown report here (e.g. docs/validation.md)")
    ap.add_argument("--quick", action="store_true", help="fewer seeds and shorter windows")
    ap.add_argument("--check", action="append", default=None, choices=list(CHECKS), metavar="NAME",
                    help="run only this check (repeatable): " + ", ".join(CHECKS))
    ap.add_argument("--sweep", default=None, choices=list(CHECKS), metavar="NAME",
                    help="print the sweep file of a check and exit")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return ap


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.sweep:
        sys.stdout.write(CHECKS[args.sweep].sweep(args.quick))
        return 0
    from ...files import unwritable_file
    if args.out and (why := unwritable_file(args.out)):
        print(f"error: --out: {why}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    results = run_checks(args.check, quick=args.quick,
                         progress=None if args.quiet else
                         lambda n: print(f"running {n} ...", file=sys.stderr, flush=True))
    seconds = time.perf_counter() - t0
    if args.out:
        write_text(args.out, markdown(results, args.quick, seconds))
        if not args.quiet:
            print(f"wrote {args.out} ({seconds:.0f} s)", file=sys.stderr)
    else:
        print(render_text(results))
    failed = [r for res in results.values() for r in res.rows if r.passed is False]
    for r in failed:
        print(f"FAILED {r.check}: {r.case}: {r.quantity}: theory {r.theory:.6g}, "
              f"simulated {r.simulated:.6g} ± {r.se:.2g} (z = {r.z:+.2f})", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
