"""Closed forms from queueing theory that the simulator is validated against.

Plain Python and NumPy (no SciPy): each function is a textbook formula, stated in
its docstring, with times in any one unit (rates per that unit). The simulator's
validation (:mod:`routesim.studies.validation`) compares them with exact-mode runs.

Notation: λ arrival rate, μ service rate (1/μ the mean service time), ρ = λ/μ (or
λ E[S]) the load, W the mean sojourn (waiting + service), W_q the mean wait.
"""

import math

import numpy as np

# ----------------------------------------------------------------------------------
# One server


def mm1_sojourn(lam, mu):
    """M/M/1 mean sojourn W = 1 / (μ - λ)."""
    _stable(lam / mu)
    return 1.0 / (mu - lam)


def mm1_tail(rho, level):
    """M/M/1 stationary P(N >= level) = ρ^level (N: requests waiting + in service)."""
    _stable(rho)
    return rho ** level


def mg1_wait(lam, es, es2):
    """Pollaczek–Khinchine mean wait of M/G/1: W_q = λ E[S²] / (2 (1 - λ E[S]))."""
    rho = lam * es
    _stable(rho)
    return lam * es2 / (2.0 * (1.0 - rho))


def mg1_sojourn(lam, es, es2):
    """M/G/1 mean sojourn W = E[S] + W_q (Pollaczek–Khinchine)."""
    return es + mg1_wait(lam, es, es2)


def mg1_sojourn_m2(lam, es, es2, es3):
    """M/G/1 FIFO second moment of the sojourn, E[W²] (Takács):
    E[W_q²] = 2 W_q² + λ E[S³] / (3 (1 - ρ)), and W = W_q + S with W_q, S independent,
    so E[W²] = E[W_q²] + 2 W_q E[S] + E[S²]."""
    wq = mg1_wait(lam, es, es2)
    wq2 = 2.0 * wq * wq + lam * es3 / (3.0 * (1.0 - lam * es))
    return wq2 + 2.0 * wq * es + es2


def md1_sojourn(lam, d):
    """M/D/1 mean sojourn: P–K with E[S] = d, E[S²] = d², W = d + λ d² / (2 (1 - λ d))."""
    return mg1_sojourn(lam, d, d * d)


def exponential_moments(mean, k=3):
    """E[S], E[S²], ..., E[S^k] of an exponential with this mean: n! mean^n."""
    return tuple(math.factorial(n) * mean ** n for n in range(1, k + 1))


# ----------------------------------------------------------------------------------
# GI/M/1: E_n/M/1, the queue a replica sees under round robin over n replicas


def gim1_sigma(laplace, mu, tol=1e-15, max_iter=1_000_000):
    """The root σ in (0, 1) of σ = A*(μ (1 - σ)), A* the Laplace–Stieltjes transform of
    the interarrival time (stable queue: λ < μ). In GI/M/1 an arrival finds n requests
    with probability (1 - σ) σⁿ, and the FIFO sojourn is exponential with rate μ (1 - σ).

    g(σ) = A*(μ(1 - σ)) is increasing and convex with g(0) > 0 and g(1) = 1, so the
    iteration σ ← g(σ) from 0 rises monotonically to the smallest root.
    """
    sigma = 0.0
    for _ in range(max_iter):
        nxt = laplace(mu * (1.0 - sigma))
        if abs(nxt - sigma) <= tol:
            return nxt
        sigma = nxt
    raise ArithmeticError("σ = A*(μ(1 - σ)) did not converge (is the queue stable?)")


def erlang_laplace(n, rate):
    """A*(s) of the Erlang-n interarrival time of a stream of rate ``rate`` (mean 1/rate):
    n phases of rate n·rate, A*(s) = (n·rate / (n·rate + s))ⁿ."""
    return lambda s: (n * rate / (n * rate + s)) ** n


def en_m1_sigma(n, lam, mu):
    """σ of E_n/M/1 with arrival rate λ (Erlang-n interarrivals of mean 1/λ)."""
    _stable(lam / mu)
    return gim1_sigma(erlang_laplace(n, lam), mu)


def en_m1_sojourn(n, lam, mu):
    """E_n/M/1 mean sojourn 1 / (μ (1 - σ)). Round robin over n equal replicas under
    Poisson(Λ) arrivals gives each replica Erlang-n interarrivals at rate λ = Λ/n."""
    return 1.0 / (mu * (1.0 - en_m1_sigma(n, lam, mu)))


def gim1_tail(sigma, rho, level):
    """GI/M/1 time-average P(N >= level) = ρ σ^(level - 1) for level >= 1 (1 at level 0)."""
    return 1.0 if level == 0 else rho * sigma ** (level - 1)


# ----------------------------------------------------------------------------------
# Many servers


def erlang_c(c, a):
    """Erlang C: the probability that an arrival waits in M/M/c with offered load
    a = λ/μ (< c). Erlang B by its recursion B_k = a B_{k-1} / (k + a B_{k-1}), then
    C = c B / (c - a (1 - B)). For c = 1, C = ρ."""
    if not a < c:
        raise ValueError(f"unstable: offered load {a!r} >= servers {c!r}")
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    return c * b / (c - a * (1.0 - b))


def mmc_sojourn(lam, mu, c):
    """M/M/c mean sojourn W = 1/μ + C(c, λ/μ) / (c μ - λ): one central queue feeding c
    servers, a lower bound on any routing to c separate queues of the same servers."""
    return 1.0 / mu + erlang_c(c, lam / mu) / (c * mu - lam)


def supermarket_tail(lam, level, d=2):
    """Fixed point of the supermarket model (join the shortest of d sampled queues, N →
    ∞, per-server load λ < 1 with μ = 1): the fraction of servers with at least i
    requests is s_i = λ^((dⁱ - 1)/(d - 1)), λ^(2ⁱ - 1) for d = 2 and λⁱ for d = 1."""
    _stable(lam)
    if d == 1:
        return lam ** level
    return lam ** ((d ** level - 1) // (d - 1))


def supermarket_sojourn(lam, d=2, mu=1.0, tol=1e-16):
    """Mean sojourn at the supermarket fixed point: by Little, Σ_{i>=1} s_i / λ over μ,
    i.e. (1/μ) Σ_{i>=1} λ^((dⁱ - d)/(d - 1)); for d = 1 the M/M/1 value 1/(μ - λμ)."""
    _stable(lam)
    total, i = 0.0, 1
    while True:
        term = supermarket_tail(lam, i, d) / lam
        total += term
        if term < tol * total or i > 10_000:
            return total / mu
        i += 1


# ----------------------------------------------------------------------------------
# The token workload of model.md §2


def _phi(x):
    """Standard normal CDF Φ(x) (±inf allowed)."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def token_pmf(median, sigma, lo, hi):
    """Exact distribution of ``clip(rint(median · exp(sigma · z)), lo, hi)``, z ~ N(0, 1):
    (values, probabilities). P(k) = Φ(z(k + ½)) - Φ(z(k - ½)) with z(x) = (ln x - ln median)/sigma
    for lo < k < hi; the ends collect the clipped mass. (rint's ties, at exact
    half-integers, have probability zero.)"""
    k = np.arange(lo, hi + 1, dtype=np.float64)
    if sigma == 0:
        p = (k == min(max(round(median), lo), hi)).astype(float)
        return k, p
    # z at which median · exp(sigma · z) = k ± ½; the open ends clipped
    z = (np.log(np.maximum(np.r_[k - 0.5, hi + 0.5], 1e-300)) - math.log(median)) / sigma
    cdf = np.array([_phi(x) for x in z])
    cdf[0], cdf[-1] = 0.0, 1.0
    return k, np.diff(cdf)


def mean_tokens(median, sigma, lo, hi) -> float:
    """E[tokens] of :func:`token_pmf`, exactly up to float rounding."""
    if sigma == 0:
        return float(min(max(round(median), lo), hi))
    k, p = token_pmf(median, sigma, lo, hi)
    return float(np.dot(k, p))


def mean_demand_ms(values: dict) -> float:
    """E[demand × jitter] of the workload (model.md §2), exactly up to float rounding.

    ``values``: parameter name -> tuple whose first item is used (the names of
    :data:`DEMAND_PARAMETERS` of the queue model's params). Token demand sums over the token distributions
    (:func:`mean_tokens`); jitter is uniform; the exponential and constant demands have
    mean ``reference_demand_ms``.
    """
    def tokens(kind):
        return mean_tokens(values[f"{kind}_tokens_median"][0], values[f"{kind}_tokens_sigma"][0],
                           int(values[f"{kind}_tokens_min"][0]), int(values[f"{kind}_tokens_max"][0]))

    kind = values.get("demand", ("tokens",))[0]
    if kind == "tokens":
        d = (values["demand_ms_base"][0]
             + values["demand_ms_per_prompt_token"][0] * tokens("prompt")
             + values["demand_ms_per_output_token"][0] * tokens("output"))
    else:  # exponential with this mean, or this constant
        d = values["reference_demand_ms"][0]
    return d * 0.5 * (values["jitter_min"][0] + values["jitter_max"][0])


def _moments(values, probs, k):
    return np.array([np.sum(probs * values ** n) for n in range(k + 1)])  # E[X⁰..Xᵏ]


def _sum_moments(ma, mb):
    """Raw moments of A + B (independent) from theirs, E[(A+B)ⁿ] = Σ C(n,j) E[Aʲ] E[Bⁿ⁻ʲ]."""
    k = len(ma) - 1
    return np.array([sum(math.comb(n, j) * ma[j] * mb[n - j] for j in range(n + 1))
                     for n in range(k + 1)])


def token_demand_moments(prompt=(384.0, 0.8, 16, 4096), output=(88.0, 0.8, 4, 1024),
                         base=1.0, per_prompt=1 / 256, per_output=1 / 16, k=3):
    """E[D], ..., E[Dᵏ] of demand D = base + per_prompt·prompt + per_output·output, exactly
    (to float rounding) by summing over the two token distributions (``(median, sigma,
    min, max)`` each). Prompt and output come from z1, z2 of one Box–Muller pair, which
    are independent standard normals, so the two token counts are independent."""
    kp, pp = token_pmf(*prompt)
    ko, po = token_pmf(*output)
    mp = _moments(base + per_prompt * kp, pp, k)
    mo = _moments(per_output * ko, po, k)
    return tuple(_sum_moments(mp, mo)[1:])


def uniform_moments(a, b, k=3):
    """E[J], ..., E[Jᵏ] of J uniform on [a, b] (a point mass when a == b)."""
    if a == b:
        return tuple(a ** n for n in range(1, k + 1))
    return tuple((b ** (n + 1) - a ** (n + 1)) / ((n + 1) * (b - a)) for n in range(1, k + 1))


def product_moments(mx, my):
    """Moments of X·Y for independent X, Y: E[(XY)ⁿ] = E[Xⁿ] E[Yⁿ]."""
    return tuple(a * b for a, b in zip(mx, my))


def _stable(rho):
    if not 0 <= rho < 1:
        raise ValueError(f"unstable or invalid load ρ = {rho!r}: need 0 <= ρ < 1")


def supermarket_transient(lam, t, d=2, levels=40, h=0.05):
    """s_i(t), i = 0..levels, of the supermarket model's mean-field ODE started empty
    (μ = 1; Mitzenmacher): ds_i/dt = λ(s_{i-1}^d - s_i^d) - (s_i - s_{i+1}), s_0 = 1,
    integrated by fourth-order Runge–Kutta with step ``h``. Its distance from the fixed
    point at time t bounds what an empty start leaves after a warm-up of t service times."""
    _stable(lam)
    s = np.zeros(levels + 2)
    s[0] = 1.0

    def rate(x):
        dx = np.zeros_like(x)
        dx[1:-1] = lam * (x[:-2] ** d - x[1:-1] ** d) - (x[1:-1] - x[2:])
        return dx

    for _ in range(int(round(t / h))):
        k1 = rate(s)
        k2 = rate(s + 0.5 * h * k1)
        k3 = rate(s + 0.5 * h * k2)
        k4 = rate(s + h * k3)
        s = s + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    return s[:-1]
