"""Fit token-model.md §2.3's step cost to reconstructed steps, and the front-end overhead.

``d = c_0 + c_pf·U + c_attn·Q + c_dec·n + c_kv·K`` (ms) by weighted least squares on
the usable steps: each step's residual is divided by its measured duration (step-time
noise is multiplicative, so every step counts by its relative error), coefficients
bounded below by 0 (a sweep requires it; ``c_0 > 0``), solved by
``scipy.optimize.lsq_linear``. Standard errors: ``s² (XᵀWX)⁻¹`` of the free
coefficients, ``s²`` the weighted residual variance (N − p degrees of freedom); the same
matrix is the covariance ``cov`` whose correlations say which coefficients the log
cannot separate (calibrate.uncertainty, which also resamples the fit over runs or time
blocks: the spread a user would see).

**Ties.** A pair the data cannot separate — (c_pf, c_attn) or (c_dec, c_kv) — is fitted
as one coefficient on ``x₁ + ρ·x₂`` with ``c₂ = ρ·c₁``, ``ρ`` from the model/hardware
description (calibrate.hardware) or, without one, routesim's default ratio. ``tie =
"auto"`` ties a pair when its untied fit leaves either coefficient undetermined: a
relative standard error above ``TIE_REL_SE`` or a negative estimate (or a column the
data never exercises) — or, when ``ρ`` comes from a description (``physical``), when
the untied split is more than ``TIE_FACTOR`` times away from ``ρ``: the data then
separates the pair only by bending the line through a kink of the true cost (a
roofline: short prompts memory-bound, long ones compute-bound), which extrapolates
badly to full chunks.
"""

from dataclasses import dataclass

import numpy as np
from scipy.optimize import lsq_linear

from ..step_cost import linear
from . import STEP_KEYS

PAIRS = {"prefill": (1, 2), "decode": (4, 3)}
"""Each pair as (fitted, partner): a tied partner is ρ × the fitted coefficient."""
TIE_REL_SE = 0.5
TIE_FACTOR = 3.0


@dataclass(frozen=True)
class Fit:
    """``coef`` and ``se`` (ms per unit, by STEP_KEYS; se NaN for a coefficient at its
    bound), ``tied`` {pair: ρ or None}, ``why`` {pair: reason}, ``steps`` the number of
    steps fitted, ``rel_sd`` (residual relative s.d.), ``cov`` (p, p) the regression's
    covariance of the coefficients (NaN rows and columns for those at their bound),
    ``bound`` the keys the fit left at their bound (0, ``base`` near 0), tied partners
    included."""
    coef: dict
    se: dict
    tied: dict
    why: dict
    steps: int
    rel_sd: float
    cov: np.ndarray
    bound: tuple

    def predict(self, U, Q, n, K, R=0.0):
        """Modelled step time (ms), left to right as token-model.md §2.3 evaluates it
        (``R``, the prefill chunks' context, is the roofline's: unused here)."""
        return linear.duration([self.coef[k] for k in STEP_KEYS], U, Q, n, K, R)


def design(steps, mask):
    """(X (N, 5): 1, U, Q, n, K, the formula's own columns (routesim.step_cost.linear);
    y (N,) measured ms) of the masked steps."""
    X = linear.columns(*(getattr(steps, a)[mask] for a in ("U", "Q", "n", "K", "R")))
    return X, steps.d_ms[mask]


def _wls(X, y, bounded):
    """(coefficients (p,), covariance (p, p), relative residual s.d., at bound (p,) bool)
    of min Σ ((y − Xc)/y)²."""
    A = X / y[:, None]
    scale = np.abs(A).max(axis=0)
    scale[scale == 0] = 1.0
    As = A / scale
    if bounded:
        lb = np.zeros(X.shape[1])
        lb[0] = 1e-9 * scale[0]
        sol = lsq_linear(As, np.ones(len(y)), bounds=(lb, np.inf), method="bvls", tol=1e-14)
        cs, active = sol.x, sol.active_mask != 0
    else:
        cs = np.linalg.lstsq(As, np.ones(len(y)), rcond=None)[0]
        active = np.zeros(X.shape[1], dtype=bool)
    r = np.ones(len(y)) - As @ cs
    dof = max(len(y) - X.shape[1], 1)
    s2 = float(r @ r) / dof
    cov = np.full((X.shape[1], X.shape[1]), np.nan)
    free = ~active
    if free.any():
        cov[np.ix_(free, free)] = s2 * np.linalg.pinv(As[:, free].T @ As[:, free])
    return cs / scale, cov / np.outer(scale, scale), float(np.sqrt(s2)), active


def se_of(cov):
    """(p,) standard errors from a covariance (NaN where it is)."""
    return np.sqrt(np.clip(np.diag(cov), 0, None))


def _reduce(X, tied, ratios, pairs=PAIRS):
    """The design with every tied pair's two columns merged into x₁ + ρ·x₂, and the map
    back: ``expand(c_reduced) -> c (columns,)``. ``pairs``: {pair: (fitted, partner)}."""
    keep, merged = [], {}
    for j in range(X.shape[1]):
        pair = next((p for p, (a, b) in pairs.items() if j == b and tied[p]), None)
        if pair is None:
            keep.append(j)
    cols = []
    for j in keep:
        pair = next((p for p, (a, b) in pairs.items() if j == a and tied[p]), None)
        if pair:
            merged[j] = (pairs[pair][1], ratios[pair])
            cols.append(X[:, j] + ratios[pair] * X[:, pairs[pair][1]])
        else:
            cols.append(X[:, j])

    def expand(cr):
        c = np.zeros(X.shape[1])
        for v, j in zip(cr, keep):
            c[j] = v
            if j in merged:
                b, rho = merged[j]
                c[b] = rho * v
        return c

    return np.column_stack(cols), keep, expand


def tied_wls(X, y, tied, ratios, pairs=PAIRS):
    """The bounded weighted fit of ``y`` on ``X`` with every tied pair merged (``tied``
    {pair: bool}): (coefficients (columns,), covariance (columns, columns): a tied
    partner is ρ × its pair's, relative residual s.d., at bound (columns,) bool)."""
    Xr, keep, expand = _reduce(X, tied, ratios, pairs)
    cr, covr, sd, active = _wls(Xr, y, bounded=True)
    E = np.column_stack([expand(e) for e in np.eye(len(keep))])      # c = E c_reduced
    at = np.zeros(X.shape[1], dtype=bool)
    for j, a in zip(keep, active):
        at |= a & (E[:, keep.index(j)] != 0)
    cov = E @ np.nan_to_num(covr) @ E.T
    cov[at, :] = np.nan
    cov[:, at] = np.nan
    return expand(cr), cov, sd, at


def fit(steps, ratios, tie="auto", physical=False) -> Fit:
    """Fit the usable steps of ``steps`` (calibrate.steps.Steps). ``ratios``: {"prefill":
    c_attn/c_pf, "decode": c_dec/c_kv}; ``tie``: "auto", "always", "never", or {pair:
    bool} (the ties held, as a resample refits a fit);
    ``physical``: the ratios come from a model/hardware description."""
    X, y = design(steps, steps.usable)
    if len(y) < 3:
        raise ValueError(f"only {len(y)} usable steps: the log needs a decoding request's consecutive tokens")
    if isinstance(tie, dict):                       # the ties held as given (a resample's refit)
        c, cov, sd, at = tied_wls(X, y, tie, ratios)
        return _make(c, cov, sd, at, tie, {p: "held" for p in PAIRS}, ratios, len(y))
    tied, why = {}, {}
    c0, cov0, _, _ = _wls(X, y, bounded=False)
    se0 = se_of(cov0)
    for pair, (a, b) in PAIRS.items():
        unused = [STEP_KEYS[j] for j in (a, b) if not np.any(X[:, j])]
        if tie == "always" or (tie == "auto" and unused):
            tied[pair] = True
            why[pair] = "tie = always" if tie == "always" else f"{', '.join(unused)} not in the data"
            continue
        rel = [se0[j] / abs(c0[j]) if c0[j] != 0 else np.inf for j in (a, b)]
        neg = [STEP_KEYS[j] for j in (a, b) if c0[j] < 0]
        split = c0[b] / c0[a] if c0[a] > 0 else np.inf
        far = physical and not (ratios[pair] / TIE_FACTOR <= split <= ratios[pair] * TIE_FACTOR)
        if tie == "auto" and (neg or max(rel) > TIE_REL_SE or far):
            tied[pair] = True
            why[pair] = (f"untied: {neg[0]} < 0" if neg else
                         f"untied: relative s.e. {max(rel):.2g} > {TIE_REL_SE:g}" if max(rel) > TIE_REL_SE else
                         f"untied split {split:.3g} is {max(split / ratios[pair], ratios[pair] / split):.1f}x "
                         f"the description's {ratios[pair]:.3g}")
        else:
            tied[pair] = False
            why[pair] = f"separable: relative s.e. {rel[0]:.2g}, {rel[1]:.2g}" if tie == "auto" else "tie = never"
    c, cov, sd, at = tied_wls(X, y, tied, ratios)
    return _make(c, cov, sd, at, tied, why, ratios, len(y))


def _make(c, cov, sd, at, tied, why, ratios, steps):
    return Fit(dict(zip(STEP_KEYS, c.tolist())), dict(zip(STEP_KEYS, se_of(cov).tolist())),
               {p: (ratios[p] if tied[p] else None) for p in PAIRS}, why, steps, sd, cov,
               tuple(k for k, a in zip(STEP_KEYS, at) if a))


def residuals(steps, f) -> dict:
    """Per step class ("prefill-bearing", "decode-only") of the usable steps under ``f``
    (a :class:`Fit` or a ``roofline.RooflineFit``): count,
    mean and RMS of (modelled − measured)/measured (1), mean |error| (ms)."""
    out = {}
    for name, mask in (("prefill-bearing", steps.usable & steps.prefill),
                       ("decode-only", steps.usable & ~steps.prefill)):
        y = steps.d_ms[mask]
        if not len(y):
            out[name] = {"steps": 0, "mean": np.nan, "rms": np.nan, "mae_ms": np.nan}
            continue
        m = f.predict(steps.U[mask], steps.Q[mask], steps.n[mask], steps.K[mask], steps.R[mask])
        rel = (m - y) / y
        out[name] = {"steps": int(len(y)), "mean": float(rel.mean()), "rms": float(np.sqrt((rel ** 2).mean())),
                     "mae_ms": float(np.abs(m - y).mean())}
    return out


def prefill_time(f, u, cached, budget):
    """Modelled time (ms) of a prefill of ``u`` tokens alone on an idle engine: chunks of
    the whole budget, then the rest; no decoders."""
    t, done = 0.0, cached
    while u > 0:
        x = min(u, budget)
        t += f.predict(x, x * (done + x / 2.0), 0, 0, done + x)
        done += x
        u -= x
    return t


def overhead(recs, steps, f, budget, isolated) -> dict:
    """Client/front-end overhead (ms): TTFT minus the modelled prefill of the requests
    sent to an idle engine (``isolated`` (R,) bool): median, 10th and 90th percentiles,
    count. It is the time before the engine (request handling) plus after it (streaming
    back): a log cannot split them."""
    o = np.array([r.token_ms[0] - r.send_ms - prefill_time(f, r.prompt_tokens - r.cached_tokens,
                                                            r.cached_tokens, budget)
                  for r, iso in zip(recs, isolated) if iso])
    if not o.size:
        return {"median_ms": np.nan, "p10_ms": np.nan, "p90_ms": np.nan, "requests": 0}
    return {"median_ms": float(np.median(o)), "p10_ms": float(np.percentile(o, 10)),
            "p90_ms": float(np.percentile(o, 90)), "requests": int(o.size)}
