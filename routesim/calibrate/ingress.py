"""The engine loop's ingress fitted from a per-token log (issue 41 item 3; docs/model.md
"The engine loop's timing"; docs/calibration.md "The engine loop's ingress").

A request reaches the scheduler ``g = ingress_ms + ingress_ms_per_token · P`` after its
send (routesim's ``[replica]`` keys), joins the waiting queue then, and is admitted at the
first step boundary after it (a low-load log: nothing else holds it back). Its tokens reach
the client ``return_ms`` after their step ends. A client's log sees the steps' ends
shifted by ``return_ms`` too, so what it measures of a request is its *lag* ``ℓ = g +
return_ms``:

- **busy engine.** A request whose admission step ``a`` (steps.Steps.admit) began when
  step ``a − 1`` ended (chained) joined by that end: ``ℓ <= end[a−1] − send``; and if step
  ``a − 1`` left budget unused (so the request would have been taken had it been there),
  it joined after that step began, which is no earlier than ``end[a−2]``: ``ℓ >
  end[a−2] − send``. An interval (the lower bound dropped when step ``a − 1`` is the run's
  first or was full).
- **idle engine.** A request sent to an idle engine (steps.isolated) has ``ℓ`` = its TTFT
  minus its modelled prefill (fit.prefill_time): a value.

The model ``ℓ = (ingress_ms + return_ms) + ingress_ms_per_token · P + e``, ``e`` normal
with s.d. ``σ`` (one for the intervals, which carry only the timestamps' jitter, one for
the exact values, which carry the step cost's error in the modelled prefill too; each at
least the burst threshold: the timestamps' resolution), is fitted by maximum likelihood
over both kinds of observation (interval-censored and exact), and
its uncertainty is the spread of refits over requests resampled with replacement (seed
:data:`SEED`, each refit started from the full fit) and the timestamps' resolution: an
interval's ends are burst means, known to the burst threshold, so the constant is known
no finer than that and the per-token part no finer than that over the prompts' range
(the likelihood is flat inside the intervals: within that, the data cannot choose). The log cannot split ``ingress_ms`` from ``return_ms`` (both move every
observation alike): ``return_ms`` is the caller's (calibrate's ``--return-ms``, default
0: the whole lag is ingress). With one prompt length only, ``ingress_ms_per_token`` is
not determined and is held at 0.
"""

from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from .fit import prefill_time

SEED = 41
"""The resampling's seed (a fixed one: the same log gives the same figures)."""
REPLICATES = 200
"""Refits on resampled requests."""
TINY = 1e-9
"""ms per token below which ``ingress_ms_per_token`` is at its bound, 0 (a nanosecond per
token: no tokenizer is that fast)."""
MIN_REQUESTS = 10
"""Fewer observations than this: no fit (the log does not show the lag)."""


@dataclass(frozen=True)
class Observations:
    """One row per request that shows its lag: ``P`` (N,) prompt tokens, ``lo``/``hi``
    (N,) ms, the lag's bounds (``lo`` -inf when none; ``lo == hi`` an exact value, from a
    request sent to an idle engine)."""
    P: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @property
    def exact(self):
        return self.lo == self.hi

    def take(self, idx):
        return Observations(self.P[idx], self.lo[idx], self.hi[idx])


def observations(recs, steps, isolated, f, budget) -> Observations:
    """The lag of every request the log shows it for (the module's docstring): ``recs``
    (R,) records in the steps' order, ``steps`` their Steps (``admit``, ``first``),
    ``isolated`` (R,) bool, ``f`` the fitted step cost, ``budget`` the token budget."""
    P, lo, hi = [], [], []
    end, run = steps.end_ms, steps.run
    for i, r in enumerate(recs):
        u = r.prompt_tokens - r.cached_tokens
        if isolated[i]:
            lag = r.token_ms[0] - r.send_ms - prefill_time(f, u, r.cached_tokens, budget)
            P.append(r.prompt_tokens), lo.append(lag), hi.append(lag)
            continue
        a = int(steps.admit[i])
        if a < 1 or not steps.chained[a] or run[a - 1] != run[a]:
            continue                                   # not admitted at a boundary the log shows
        upper = end[a - 1] - r.send_ms
        lower = -np.inf
        left = budget - steps.n[a - 1] - steps.U[a - 1]  # budget step a - 1 left unused
        if a >= 2 and run[a - 2] == run[a] and left > 0:
            lower = end[a - 2] - r.send_ms
        P.append(r.prompt_tokens), lo.append(lower), hi.append(upper)
    return Observations(np.array(P, float), np.array(lo, float), np.array(hi, float))


def _nll(theta, obs, floor, slope):
    """The negative log-likelihood of (constant, per 1000 tokens, log of σ above ``floor``
    for the intervals, the same for the exact values)."""
    c, k, s_iv, s_ex = theta
    k = abs(k) / 1000.0 if slope else 0.0              # (per 1000 tokens: scaled like c; >= 0)
    g = c + k * obs.P
    ex = obs.exact
    sd = floor + np.exp(s_ex)
    out = np.sum(0.5 * ((obs.hi[ex] - g[ex]) / sd) ** 2 + np.log(sd))
    sd = floor + np.exp(s_iv)
    b = special.log_ndtr((obs.hi[~ex] - g[~ex]) / sd)
    a = special.log_ndtr((obs.lo[~ex] - g[~ex]) / sd)
    gap = np.clip(np.exp(a - b), 0.0, 1.0 - 1e-16)
    return out - np.sum(b + np.log1p(-gap))


def _fit(obs, floor, slope, start=None):
    """((constant ms, per token ms, σ of the intervals ms, σ of the exact values ms), the
    optimizer's parameters) maximising the likelihood: two noise scales, since an exact
    value carries the step cost's error in its modelled prefill and an interval only the
    timestamps' jitter. ``start``: the parameters to start from (a resample's: the full
    fit's)."""
    if start is None:
        val = obs.hi[np.isfinite(obs.hi)]
        s0 = np.log(max(floor, 1.0))
        start = np.array([float(np.median(val)) if val.size else 0.0, 0.0, s0, s0])
    res = optimize.minimize(_nll, start, args=(obs, floor, slope), method="Nelder-Mead",
                            options={"xatol": 1e-6, "fatol": 1e-9, "maxiter": 40000, "maxfev": 80000})
    return _values(res.x, floor, slope), res.x


def _values(x, floor, slope):
    """The optimizer's parameters as (constant ms, per token ms, σ intervals, σ exact)."""
    c, k, s_iv, s_ex = x
    k = abs(float(k)) / 1000.0 if slope else 0.0
    k = k if k >= TINY else 0.0                        # at its bound: 0, not an optimizer's 1e-15
    return float(c), k, float(floor + np.exp(s_iv)), float(floor + np.exp(s_ex))


def consistent_ranges(obs, resolution_ms, slope) -> dict:
    """The range of each key (the lag's constant, ms, and ``ingress_ms_per_token``) over
    the lines ``c + k · P`` that pass through every interval of ``obs`` widened by
    ``resolution_ms`` (k >= 0; k = 0 without ``slope``): {key: (low, high)}, None when no
    line does (the intervals disagree beyond the resolution) or there are none. Four
    linear programs (scipy.optimize.linprog)."""
    keys = ("ingress_ms", "ingress_ms_per_token")
    if not obs.P.size:
        return dict.fromkeys(keys)
    upper = np.column_stack([np.ones_like(obs.P), obs.P])       # c + k P <= hi + r
    fin = np.isfinite(obs.lo)
    A = np.vstack([upper, -upper[fin]])                          # -(c + k P) <= -(lo - r)
    b = np.concatenate([obs.hi + resolution_ms, -(obs.lo[fin] - resolution_ms)])
    bounds = [(None, None), (0.0, None if slope else 0.0)]
    out = {}
    for i, key in enumerate(keys):
        ends = []
        for sign in (1.0, -1.0):
            cost = np.zeros(2)
            cost[i] = sign
            r = optimize.linprog(cost, A_ub=A, b_ub=b, bounds=bounds, method="highs")
            if r.status != 0:
                return dict.fromkeys(keys)
            ends.append(float(r.x[i]))
        out[key] = (ends[0], ends[1])
    return out


def fit_ingress(obs, floor_ms, return_ms=0.0) -> dict:
    """The ingress keys from the lag observations: ``ingress_ms`` (the fitted constant lag
    minus ``return_ms``), ``ingress_ms_per_token``, the noise s.d. ``sigma_ms`` of each
    kind of observation, the resampled standard errors ``se`` of the two keys,
    ``resolution_ms`` (``floor_ms``, the burst threshold: the lag is known no finer) and
    ``resolution`` of each key (the constant: that; the per-token part: that over the
    prompts' range), ``consistent`` each key's range over the lines through every
    interval (:func:`consistent_ranges`; None when they disagree), ``uncertainty`` each
    key's stated uncertainty: the larger of ``2 · se + resolution`` and the consistent
    range's width (the likelihood is flat across that range); the counts of ``exact`` and ``interval`` observations
    and ``per_token_fitted`` (False: one prompt length, held at 0). None when fewer than
    :data:`MIN_REQUESTS` requests show their lag."""
    n = obs.P.size
    if n < MIN_REQUESTS:
        return None
    slope = np.unique(obs.P).size > 1
    (c, k, sd_iv, sd_ex), x = _fit(obs, floor_ms, slope)
    se = np.full(4, np.nan)
    if c >= return_ms:                                 # (else the caller refuses it: no resampling)
        rng = np.random.default_rng(SEED)
        reps = np.array([_fit(obs.take(rng.integers(0, n, n)), floor_ms, slope, x)[0] for _ in range(REPLICATES)])
        se = reps.std(axis=0, ddof=1)
    spread = float(obs.P.max() - obs.P.min())
    ranges = consistent_ranges(obs.take(~obs.exact), floor_ms, slope)
    res = {"ingress_ms": floor_ms, "ingress_ms_per_token": floor_ms / spread if slope else np.nan}
    width = {key: (r[1] - r[0] if r is not None else 0.0) for key, r in ranges.items()}
    uncertainty = {key: max(2 * se[i] + res[key], width[key]) for i, key in enumerate(res)}
    return {"ingress_ms": c - return_ms, "ingress_ms_per_token": k, "return_ms": return_ms,
            "sigma_ms": {"interval": sd_iv, "exact": sd_ex}, "resolution_ms": floor_ms,
            "resolution": res, "uncertainty": uncertainty,
            "consistent": {key: (None if r is None else (r[0] - (return_ms if key == "ingress_ms" else 0.0),
                                                         r[1] - (return_ms if key == "ingress_ms" else 0.0)))
                           for key, r in ranges.items()},
            "se": {"ingress_ms": float(se[0]), "ingress_ms_per_token": float(se[1]) if slope else np.nan},
            "exact": int(obs.exact.sum()), "interval": int((~obs.exact).sum()), "per_token_fitted": bool(slope),
            "replicates": REPLICATES}
