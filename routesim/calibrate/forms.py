"""Every step-cost form fitted, and the forms compared by their error on held-out runs
(issue 41 item 4; docs/calibration.md).

**Fitting a form.** :func:`fit_form` fits any form of routesim.step_cost.FORMS to
reconstructed steps (calibrate.steps.Steps), each through its own design matrix:
``linear`` by calibrate.fit; the roofline and ``mixed`` (the roofline plus a column) by
calibrate.roofline's alternation between bounds; ``overlap``, whose ``kappa`` multiplies
a side the fit also estimates, by a profile: the roofline family's fit with ``kappa``
held, at every ``kappa`` of KAPPA_GRID (each fit starting from its neighbour's
assignment of bounds), then a golden-section search of the residual within one grid
step either side of the best of those, down to KAPPA_TOL, keeping the smallest residual
seen (deterministic: no random start). A form not in
FITTERS cannot be fitted (tests/test_forms.py holds every registered form to having one).

**Cross-validation over runs.** :func:`cross_validate` fits each form on the usable
steps of every run but one and predicts the held-out run's steps, for each run in turn;
a form's held-out error is the mean over the two step classes (prefill-bearing,
decode-only) of the RMS of ``(modelled − measured)/measured`` over their held-out steps
(each step counted once): each class counts alike, since decode-only steps outnumber the
others tens to one and would otherwise hide how a form prices the prefill-bearing
steps (where the forms differ). It is given also by class and per run. The form it
prefers (:func:`preferred`) is the one of fewest coefficients whose held-out RMS is
within PREFER_MARGIN of the smallest: a form must beat a simpler one by more than that
share of its error to be kept (on an exact log the roofline and ``mixed`` at
``per_mixed_kv_token = 0`` tie, and the simpler one is the answer).
"""

import numpy as np

from ..step_cost import BY_NAME, FORMS, linear, mixed, overlap
from ..step_cost import roofline as roofline_form
from . import STEP_KEYS, fit, roofline

KAPPA_GRID = np.linspace(0.0, 1.0, 11)
"""The first pass of overlap's profile over kappa (steps of 0.1)."""
KAPPA_TOL = 1e-7
"""The second pass (golden section) stops when its bracket is this narrow."""
PREFER_MARGIN = 0.02
"""A more complex form is preferred only if its held-out RMS is below (1 − this) × a
simpler form's (and within it of the best)."""


def keys_of(name) -> tuple:
    """Form ``name``'s table keys, in its coefficients' order."""
    return STEP_KEYS if name == linear.NAME else roofline.keys_of(BY_NAME[name])


def _linear(steps, ratios, tie, physical):
    return fit.fit(steps, ratios["linear"], tie, physical=physical)


def _roofline_family(form):
    def fitter(steps, ratios, tie, physical):
        return roofline.fit(steps, ratios["roofline"], tie, form)
    return fitter


def _overlap(steps, ratios, tie, physical, kappa=None):
    """overlap's fit: ``kappa`` held when given (a resample's refit), else profiled."""
    if kappa is not None:
        return roofline.fit(steps, ratios["roofline"], tie, overlap, (kappa,))
    seen = []

    def at(k, start=None):
        seen.append(roofline.fit(steps, ratios["roofline"], tie, overlap, (float(k),), start))
        return seen[-1]

    start = None
    for k in KAPPA_GRID:
        start = at(k, start).memory_bound
    best = min(seen, key=lambda f: f.rel_sd)
    step = KAPPA_GRID[1] - KAPPA_GRID[0]
    a, b = max(0.0, best.coef["kappa"] - step), min(1.0, best.coef["kappa"] + step)
    g = (np.sqrt(5) - 1) / 2
    x1, x2 = b - g * (b - a), a + g * (b - a)
    f1, f2 = at(x1, best.memory_bound).rel_sd, at(x2, best.memory_bound).rel_sd
    while b - a > KAPPA_TOL:
        if f1 <= f2:
            b, x2, f2 = x2, x1, f1
            x1 = b - g * (b - a)
            f1 = at(x1, best.memory_bound).rel_sd
        else:
            a, x1, f1 = x1, x2, f2
            x2 = a + g * (b - a)
            f2 = at(x2, best.memory_bound).rel_sd
    return min(seen, key=lambda f: f.rel_sd)


HELD = {overlap.NAME: ("kappa",)}
"""{form name: its coefficients a resample's refit holds at the fit's value} (their
resampled spread is not measured)."""

FITTERS = {linear.NAME: _linear, roofline_form.NAME: _roofline_family(roofline_form),
           mixed.NAME: _roofline_family(mixed), overlap.NAME: _overlap}
"""{form name: fitter(steps, ratios, tie, physical) -> a fit with ``coef``, ``predict``}."""


def ratios_of(derived=None) -> dict:
    """{"linear": the linear pairs' ratios, "roofline": the roofline family's}: from a
    model/hardware description (``derived``: hardware.derive(...)) or routesim's defaults."""
    from . import hardware
    if derived:
        return {"linear": derived["ratios"], "roofline": derived["roofline_ratios"]}
    return {"linear": dict(hardware.DEFAULT_RATIOS), "roofline": dict(roofline.DEFAULT_RATIOS)}


def fit_form(name, steps, ratios=None, tie="auto", physical=False):
    """Fit form ``name`` to the usable steps of ``steps`` (raises ValueError when it
    cannot: too few steps). ``ratios``: :func:`ratios_of`; ``tie``: as calibrate.fit."""
    return FITTERS[name](steps, ratios or ratios_of(), tie, physical)


def refitter(name, f, ratios, physical=False):
    """``refit(steps, tie) -> fit`` of form ``name`` holding what the fit ``f`` chose
    beyond its ties (overlap's kappa): what a resample refits."""
    if name == overlap.NAME:
        return lambda s, tie: _overlap(s, ratios, tie, physical, f.coef["kappa"])
    return lambda s, tie: FITTERS[name](s, ratios, tie, physical)


def _rel_errors(f, steps, mask):
    """(modelled − measured)/measured (M,) of the masked steps under the fit ``f``."""
    y = steps.d_ms[mask]
    m = f.predict(steps.U[mask], steps.Q[mask], steps.n[mask], steps.K[mask], steps.R[mask])
    return (m - y) / y


def _rms(x):
    return float(np.sqrt(np.mean(x ** 2))) if x.size else np.nan


def cross_validate(steps, names=None, ratios=None, tie="auto", physical=False) -> list:
    """Leave-one-run-out errors of every form in ``names`` (default: every registered
    form, in code order) on ``steps`` (at least two runs with usable steps; else
    ValueError). One dict per form: ``form``, ``coefficients`` (how many the fit
    estimates or profiles), ``prefill`` and ``decode`` (RMS of the relative error over
    the held-out steps of each class), ``heldout`` (their mean: module docstring),
    ``worst_run`` (the largest per-run ``heldout``), ``runs`` {run: that run's},
    ``insample`` (the same mean for the fit on every run), ``failed`` (runs whose
    training set the form could not fit: then heldout is NaN)."""
    names = names or tuple(f.NAME for f in FORMS)
    ratios = ratios or ratios_of()
    use = steps.usable
    runs = np.unique(steps.run[use])
    if runs.size < 2:
        raise ValueError(f"cross-validation over runs needs at least 2 runs with measured steps, got {runs.size}")
    rows = []
    for name in names:
        rel, cls, per, failed = [], [], {}, []
        for r in runs:
            test = use & (steps.run == r)
            try:
                f = fit_form(name, steps.take(np.flatnonzero(use & (steps.run != r))), ratios, tie, physical)
            except ValueError:
                failed.append(int(r))
                continue
            e = _rel_errors(f, steps, test)
            rel.append(e)
            cls.append(steps.prefill[test])
            per[int(r)] = _balanced(e, steps.prefill[test])
        e = np.concatenate(rel) if rel else np.zeros(0)
        p = np.concatenate(cls) if cls else np.zeros(0, dtype=bool)
        whole = fit_form(name, steps, ratios, tie, physical)
        rows.append({"form": name, "coefficients": len(keys_of(name)),
                     "heldout": _balanced(e, p) if not failed else np.nan, "prefill": _rms(e[p]), "decode": _rms(e[~p]),
                     "worst_run": max(per.values()) if per else np.nan, "runs": per,
                     "insample": _balanced(_rel_errors(whole, steps, use), steps.prefill[use]), "failed": failed})
    return rows


def _balanced(e, prefill):
    """Mean over the step classes present of the RMS of relative errors ``e`` (M,), by
    ``prefill`` (M,) bool."""
    return float(np.mean([_rms(e[m]) for m in (prefill, ~prefill) if m.any()])) if e.size else np.nan


def preferred(rows) -> str:
    """The form cross-validation prefers (module docstring): the fewest coefficients among
    the forms whose held-out RMS is within PREFER_MARGIN of the best, then the smallest
    error, then code order."""
    ok = [r for r in rows if np.isfinite(r["heldout"])]
    if not ok:
        raise ValueError("no form could be fitted on every run's complement")
    best = min(r["heldout"] for r in ok)
    near = [r for r in ok if r["heldout"] <= best / (1 - PREFER_MARGIN) + 1e-12]
    return min(near, key=lambda r: (r["coefficients"], r["heldout"]))["form"]


def table(rows, choice) -> str:
    """The printed comparison: one line a form, its held-out error (%: the mean of the
    classes' RMS), each class's RMS, its worst run's error, the in-sample error, and which
    form is preferred; then what the columns are."""
    from ..tables import text_table
    head = ["form", "coefficients", "held-out %", "prefill-bearing %", "decode-only %", "worst run %",
            "in-sample %", ""]
    body = [[r["form"], str(r["coefficients"]), _pct(r["heldout"]), _pct(r["prefill"]), _pct(r["decode"]),
             _pct(r["worst_run"]), _pct(r["insample"]),
             "preferred" if r["form"] == choice else (f"failed on run(s) {r['failed']}" if r["failed"] else "")]
            for r in rows]
    from ..tables import legend
    return text_table(head, body, align="lrrrrrrl") + "\n" + legend([
        ("held-out %", "RMS of (modelled - measured)/measured of each run's steps under the fit on the other runs, "
                       "the mean of the two step classes' (prefill-bearing, decode-only)"),
        ("worst run %", "the same for the worst held-out run"), ("in-sample %", "the same for the fit on every run"),
        ("preferred", f"the fewest coefficients within {100 * PREFER_MARGIN:g} % of the smallest held-out error")])


def _pct(x):
    from ..tables import fmt
    return fmt(100 * x, ".2f")
