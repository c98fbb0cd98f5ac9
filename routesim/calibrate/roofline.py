"""Fit the roofline step cost (docs/model.md "The step cost") to reconstructed steps.

``d = base + max(weights + per_kv_token·(K + R), per_token·(U + n) + per_token_pair·(Q + K))``
(ms), the sweep's ``roofline_ms`` table. The max makes it piecewise linear: once every
step is assigned to its bound (memory or compute), the fit is the linear one of
calibrate.fit, weighted least squares on relative error with coefficients ``>= 0``
(``base > 0``), on the design

    memory-bound step:  [1, 1, K + R, 0,     0    ]
    compute-bound step: [1, 0, 0,     U + n, Q + K]

So the fit alternates: assign every step to the larger side under the current
coefficients, refit, until no assignment changes (at most ``MAX_ROUNDS``). It starts
from decode-only steps memory-bound and prefill-bearing steps compute-bound (the
roofline's usual split). Standard errors are the final linear fit's (assignment held).

**The roofline's family.** A form that shares the roofline's two sides (``overlap``,
``mixed``: routesim.step_cost) is fitted the same way, on its own design
(``form.columns(U, Q, n, K, R, memory, *held)``): ``mixed`` adds a column the fit
estimates; ``overlap``'s ``kappa`` enters nonlinearly, so it is ``held`` here and
profiled by calibrate.forms.

**Ties.** A pair that shares one resource — (weights, per_kv_token): bytes over the
bandwidth; (per_token, per_token_pair): FLOPs over the peak — is tied to the
model/hardware description's ratio (calibrate.hardware ``roofline_ratios``; without one,
routesim's default ``roofline_ms``) when its untied fit leaves a coefficient
undetermined (a relative s.e. above ``fit.TIE_REL_SE``, or a column the data never
exercises), or always (``tie = "always"``). With a description, each coefficient is also
an **efficiency**: the description's time at full bandwidth or peak over the fitted one.
"""

from dataclasses import dataclass

import numpy as np

from ..step_cost import defaults, roofline
from .fit import TIE_REL_SE, Fit, se_of, tied_wls

ROOFLINE_KEYS = tuple(p.path[-1] for p in roofline.PARAMS)
"""The ``[replica] roofline_ms`` keys, in the design's column order (routesim.step_cost.roofline)."""
PAIRS = {"memory": roofline.MEMORY, "compute": roofline.COMPUTE}
"""Each tie as (fitted, partner): a tied partner is ρ × the fitted coefficient."""
_D = defaults(roofline)
DEFAULT_RATIOS = {"memory": _D["per_kv_token"] / _D["weights"], "compute": _D["per_token_pair"] / _D["per_token"]}
"""Without ``--model``: the ratios of routesim's default roofline_ms (docs/model.md)."""
MAX_ROUNDS = 50


@dataclass(frozen=True)
class RooflineFit(Fit):
    """A :class:`fit.Fit` whose ``coef`` and ``se`` are by the form's keys (ROOFLINE_KEYS
    for the roofline; a held coefficient's s.e. NaN), plus ``memory_bound`` (steps,)
    bool of the fitted steps, ``rounds`` of assignment and ``form`` (a module of
    routesim.step_cost.FORMS of the roofline's family)."""
    memory_bound: np.ndarray
    rounds: int
    form: object = roofline

    def sides(self, U, Q, n, K, R):
        """(memory time, compute time) in ms, as docs/model.md evaluates them."""
        return roofline.sides(self._c(), U, Q, n, K, R)

    def predict(self, U, Q, n, K, R=0.0):
        """Modelled step time (ms): the form's formula (the roofline's base + max(memory, compute))."""
        return self.form.duration(self._c(), U, Q, n, K, R)

    def _c(self):
        return [self.coef[k] for k in keys_of(self.form)]


def keys_of(form) -> tuple:
    """The form's table keys, in its coefficients' order."""
    return tuple(p.path[-1] for p in form.PARAMS)


def design(steps, mask, memory, form=roofline, held=()):
    """X (N, columns) of the masked steps with each one's bound (``memory`` (N,) bool):
    the form's design (5 columns for the roofline) with ``held`` its coefficients not
    fitted; y (N,) ms."""
    X = form.columns(*(getattr(steps, a)[mask] for a in ("U", "Q", "n", "K", "R")), memory, *held)
    return X, steps.d_ms[mask]


def _solve(steps, mask, memory, tied, ratios, form, held):
    X, y = design(steps, mask, memory, form, held)
    return tied_wls(X, y, tied, ratios, PAIRS)


def _assign(steps, mask, tied, ratios, form=roofline, held=(), start=None):
    """Alternate assignment and fit to a fixed point: (coefficients, covariance, s.d., at
    bound, memory, rounds). ``start``: the assignment to begin with (default: decode-only
    steps memory-bound, the rest compute-bound)."""
    memory = steps.U[mask] == 0 if start is None else start
    for rounds in range(1, MAX_ROUNDS + 1):
        c, cov, sd, at = _solve(steps, mask, memory, tied, ratios, form, held)
        mem, comp = roofline.sides(c, *(getattr(steps, a)[mask] for a in ("U", "Q", "n", "K", "R")))
        now = mem >= comp
        if np.array_equal(now, memory):
            break
        memory = now
    return c, cov, sd, at, memory, rounds


def fit(steps, ratios=None, tie="auto", form=roofline, held=(), start=None) -> RooflineFit:
    """Fit the usable steps of ``steps`` (calibrate.steps.Steps). ``ratios``: {"memory":
    per_kv_token/weights, "compute": per_token_pair/per_token} (default
    DEFAULT_RATIOS); ``tie``: "auto", "always", "never", or {pair: bool} (the ties held);
    ``form``: the roofline or a form of its family, whose last ``len(held)``
    coefficients are held at ``held`` (module docstring); ``start``: the assignment of the
    usable steps to begin from (a neighbouring fit's ``memory_bound``)."""
    ratios = dict(DEFAULT_RATIOS) if ratios is None else ratios
    mask = steps.usable
    if mask.sum() < 6:
        raise ValueError(f"only {int(mask.sum())} usable steps: the roofline needs decode and prefill steps")
    if isinstance(tie, dict):                       # the ties held as given (a resample's refit)
        tied, why = dict(tie), {p: "held" for p in PAIRS}
    else:
        tied = {p: tie == "always" for p in PAIRS}
        why = {p: "tie = always" if tie == "always" else "tie = never" for p in PAIRS}
    c, cov, sd, at, memory, rounds = _assign(steps, mask, tied, ratios, form, held, start)
    se = se_of(cov)
    if tie == "auto":
        X, _ = design(steps, mask, memory, form, held)
        for pair, (a, b) in PAIRS.items():
            unused = [ROOFLINE_KEYS[j] for j in (a, b) if not np.any(X[:, j])]
            rel = [se[j] / c[j] if c[j] > 0 and np.isfinite(se[j]) else np.inf for j in (a, b)]
            tied[pair] = bool(unused) or max(rel) > TIE_REL_SE
            why[pair] = (f"{', '.join(unused)} not in the data" if unused else
                         f"untied: relative s.e. {max(rel):.2g} > {TIE_REL_SE:g}" if tied[pair] else
                         f"separable: relative s.e. {rel[0]:.2g}, {rel[1]:.2g}")
        if any(tied.values()):
            c, cov, sd, at, memory, r2 = _assign(steps, mask, tied, ratios, form, held, memory)
            rounds += r2
    keys = keys_of(form)
    p = len(keys) - len(held)
    cov_all = np.full((len(keys), len(keys)), np.nan)
    cov_all[:p, :p] = cov
    c_all = np.concatenate([c, np.asarray(held, dtype=float)])
    return RooflineFit(dict(zip(keys, c_all.tolist())), dict(zip(keys, se_of(cov_all).tolist())),
                       {p: (ratios[p] if tied[p] else None) for p in PAIRS}, why, int(mask.sum()), sd,
                       cov_all, tuple(k for k, a in zip(keys, at) if a), memory, rounds, form)


def efficiencies(f: RooflineFit, priors) -> dict:
    """{key: description's time at full bandwidth or peak / fitted time} for the four
    resource coefficients (``priors``: hardware.derive(...)["roofline_priors"], ms)."""
    return {k: (priors[k] / f.coef[k] if f.coef[k] > 0 else np.inf) for k in ROOFLINE_KEYS[1:]}
