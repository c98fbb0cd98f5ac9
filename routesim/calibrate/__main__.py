"""python -m routesim.calibrate LOG [LOG ...]: fit a replica's step cost from serving logs.

    python -m routesim.calibrate LOG [LOG ...] [--model MODEL.toml] [--out DIR]
                                 [--cost linear|roofline|overlap|mixed | --compare-forms]
                                 [--max-batched-tokens N] [--jitter-ms MS]
                                 [--tie auto|always|never] [--ingress [--return-ms MS]] [-q]

Reads the logs (routesim.calibrate.logs: .csv, .jsonl, or vLLM's benchmark .json; each
file one run, or several runs with a ``run`` column), reconstructs each run's engine
steps from its token bursts on its own clock (calibrate.steps: the burst threshold
estimated from the run's timestamps unless ``--jitter-ms`` gives it), fits
token-model.md §2.3's linear step cost (calibrate.fit; ``--cost linear``, the default)
or another form of routesim.step_cost (``--cost roofline``, ``overlap``, ``mixed``:
calibrate.forms, docs/model.md "The step cost") to the steps of every run, and prints the
``step_ms`` (or ``step_cost`` and the form's table) lines to paste into a sweep with two standard errors
(the regression's, and the spread of refits over resampled runs or time blocks:
calibrate.uncertainty), the coefficients the log cannot separate, the front-end
overhead and the residuals per step class. Writes ``DIR/<first log's stem>-step-ms.toml``
(``-<form>-ms.toml``: the table, the overhead, the fit's figures) and
``DIR/<stem>-steps.png`` (``-<form>-steps.png``: modelled against measured step
times); with several logs the stem is ``<first>-and-<n>-more``.

``--ingress`` also fits the engine loop's ingress (``[replica] ingress_ms`` and
``ingress_ms_per_token``: docs/model.md "The engine loop's timing") from every request
whose first step shows when it reached the scheduler (calibrate.ingress: the step
boundary a request sent to a busy engine joined, and the requests sent to an idle one),
prints it with its resampled standard error and writes it with the sweep lines, the
client's overhead then being ``--return-ms`` (the way back from a step's end to the
client, default 0: a client's log cannot tell it from the ingress).

``--compare-forms`` instead fits every form on all runs but one and predicts the
held-out run's steps, for each run in turn (calibrate.forms: at least two runs), prints
each form's held-out error, and the sweep lines of the form cross-validation prefers,
fitted on every run; it writes nothing.

Exit status 2, one line on stderr naming the file and the row or key, nothing written:
a bad log, description or ``--out``; and a log that cannot support the fit — two step
clocks merged into one run, no burst threshold that keeps every step whole (or a
``--jitter-ms`` that splits bursts into pseudo-steps or merges two steps), fewer than
MIN_CLASS_STEPS usable steps of a kind, or a fit that makes the first step longer than
the measured time to first token (a negative front-end overhead beyond the burst
threshold). Exit status 3: written and printed, with one ``warning:`` line a problem on
stderr (a coefficient at its bound, an efficiency above 1, a kind of step whose
residual RMS exceeds RESIDUAL_MAX), each saying what would fix it.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

from ..step_cost import FORMS
from . import STEP_KEYS, uncertainty

DEFAULT_OUT = "results/calibration"


def step_ms_line(coef) -> str:
    """The sweep line ``step_ms = { base = …, … }`` (docs/keys.md)."""
    return "step_ms = { " + ", ".join(f"{k} = {coef[k]:.6g}" for k in STEP_KEYS) + " }"


def form_lines(name, coef) -> list:
    """The sweep lines of form ``name`` (not the linear one): ``step_cost = "<name>"`` and
    ``<its table> = { … }``."""
    from ..step_cost import BY_NAME
    from .forms import keys_of
    return [f'step_cost = "{name}"',
            f"{BY_NAME[name].TABLE} = {{ " + ", ".join(f"{k} = {coef[k]:.6g}" for k in keys_of(name)) + " }"]


def calibrate(log, model=None, max_batched_tokens=8192, jitter_ms=None, tie="auto", cost="linear",
              return_ms=None):
    """Everything the command prints, as a dict (raises LogError on bad input, or on a
    log that cannot support the fit). ``log``: one path or a list of them, each file one
    run or several (a ``run`` column); ``jitter_ms`` None: each run's burst threshold
    estimated from its own timestamps (calibrate.steps); ``return_ms`` not None: fit the
    ingress too (``res["ingress"]``, :func:`fit_ingress`), the way back being that."""
    from . import fit, forms, roofline

    name, labels, st, recs, iso, jitter, desc, derived = reconstruct(log, model, max_batched_tokens, jitter_ms)
    both = forms.ratios_of(derived)
    ratios = both["linear" if cost == "linear" else "roofline"]
    keys = forms.keys_of(cost)
    try:
        f = forms.fit_form(cost, st, both, tie, physical=desc is not None)
    except ValueError as exc:
        from .logs import LogError
        raise LogError(name, "steps", str(exc)) from None
    refit = forms.refitter(cost, f, both, physical=desc is not None)
    held = {p: r is not None for p, r in f.tied.items()}
    tolerance = max([j.threshold_ms for j in jitter] + [0.0])
    res = {"records": recs, "runs": labels, "jitter": jitter, "steps": st, "fit": f,
           "cost": cost, "description": desc, "ratios": ratios, "keys": keys,
           "efficiency": (roofline.efficiencies(f, derived["roofline_priors"])
                          if cost != "linear" and desc else None),
           "residuals": fit.residuals(st, f),
           "overhead": nonnegative_overhead(fit.overhead(recs, st, f, max_batched_tokens, iso), name, tolerance, st),
           "per_token": sum(r.per_token for r in recs)}
    refuse_thin(res, name)
    res["resampled"] = uncertainty.bootstrap(st, lambda s: refit(s, held).coef, keys)
    for k in forms.HELD.get(cost, ()):          # held in every resample: no spread measured
        res["resampled"]["se"][k] = np.nan
    res["inseparable"] = uncertainty.inseparable(f, keys, partners(res), res["resampled"]["se"])
    res["warnings"] = warnings(res)
    if return_ms is not None:
        res["ingress"] = fit_ingress(res, iso, max_batched_tokens, tolerance, return_ms, name)
    return res


def fit_ingress(res, iso, budget, resolution_ms, return_ms, name) -> dict:
    """The ingress keys (calibrate.ingress.fit_ingress) of the fitted log; LogError when
    too few requests show their lag, or when ``return_ms`` is more than the lag."""
    from . import ingress
    from .logs import LogError
    obs = ingress.observations(res["records"], res["steps"], iso, res["fit"], budget)
    out = ingress.fit_ingress(obs, max(resolution_ms, 1e-3), return_ms)
    if out is None:
        raise LogError(name, "ingress", f"only {obs.P.size} request{'s' * (obs.P.size != 1)} show when they reached "
                       f"the scheduler (the fit needs {ingress.MIN_REQUESTS}): calibrate from a longer per-token log")
    if out["ingress_ms"] < 0:
        raise LogError(name, "--return-ms", f"{return_ms:g} ms is more than the requests' measured lag "
                       f"({out['ingress_ms'] + return_ms:.3g} ms from send to scheduler and back): give the way back "
                       "from a step's end to the client, or omit --return-ms")
    return out


def reconstruct(log, model=None, max_batched_tokens=8192, jitter_ms=None):
    """(the logs' names, the runs' labels, their steps, records, isolated, burst
    thresholds, the description and what it derives (None without ``model``)): what every
    fit starts from (raises LogError on a bad log or description)."""
    from . import hardware, logs, steps
    paths = [log] if isinstance(log, (str, Path)) else list(log)
    name = ", ".join(str(p) for p in paths)
    runs = [run for p in paths for run in logs.runs(p, logs.read(p))]
    desc = hardware.read(model) if model else None
    derived = hardware.derive(desc) if desc else None
    st, recs, iso, jitter = steps.reconstruct_runs(runs, max_batched_tokens, jitter_ms)
    return name, [label for label, _ in runs], st, recs, iso, jitter, desc, derived


def compare_forms(log, model=None, max_batched_tokens=8192, jitter_ms=None, tie="auto") -> dict:
    """Every form cross-validated over the logs' runs (calibrate.forms): ``rows`` (one a
    form), ``preferred`` (its name), ``fit`` (the preferred form fitted on every run),
    ``runs`` (how many). Raises LogError on bad input or fewer than two runs."""
    from . import forms
    from .logs import LogError
    name, _, st, _, _, _, desc, derived = reconstruct(log, model, max_batched_tokens, jitter_ms)
    ratios = forms.ratios_of(derived)
    try:
        rows = forms.cross_validate(st, ratios=ratios, tie=tie, physical=desc is not None)
        best = forms.preferred(rows)
        f = forms.fit_form(best, st, ratios, tie, physical=desc is not None)
    except ValueError as exc:
        raise LogError(name, "steps", f"{exc} (give several logs, one a run, or a run column)"
                       if "at least 2 runs" in str(exc) else str(exc)) from None
    return {"rows": rows, "preferred": best, "fit": f, "runs": len(np.unique(st.run[st.usable]))}


def render_comparison(cmp, log) -> str:
    """The printed comparison: the table, the preferred form and its sweep lines."""
    from .forms import table
    best, coef = cmp["preferred"], cmp["fit"].coef
    lines = [f"calibrate: {log}: every step-cost form fitted on all runs but one, the held-out run's steps "
             f"predicted ({cmp['runs']} runs)", "", table(cmp["rows"], best), "",
             f"preferred by cross-validation: {best}, fitted on every run:",
             "[replica]   # paste into a sweep",
             *(form_lines(best, coef) if best != "linear" else [step_ms_line(coef)])]
    return "\n".join(lines)


MIN_CLASS_STEPS = 10
"""Fewer usable steps of a kind (prefill-bearing, decode-only) than this: refused."""
RESIDUAL_MAX = 0.2
"""A kind of step whose residual RMS exceeds this (relative): a warning."""


def pairs(res) -> dict:
    """The fitted form's tie pairs {pair: (fitted, partner)} (column indices)."""
    from .fit import PAIRS
    from .roofline import PAIRS as ROOF_PAIRS
    return PAIRS if res["cost"] == "linear" else ROOF_PAIRS


def partners(res) -> tuple:
    """The keys tied to another (ρ × it), which the fit did not estimate on their own."""
    return tuple(res["keys"][b] for p, (a, b) in pairs(res).items() if res["fit"].tied[p] is not None)


def refuse_thin(res, name):
    """LogError when a kind of step has fewer than MIN_CLASS_STEPS usable steps: the
    coefficients it carries would rest on a handful of points."""
    from .logs import LogError
    st = res["steps"]
    for kind, mask in (("prefill-bearing", st.usable & st.prefill), ("decode-only", st.usable & ~st.prefill)):
        n = int(mask.sum())
        if n < MIN_CLASS_STEPS:
            raise LogError(name, "steps", f"only {n} {kind} step{'s' * (n != 1)} with a measured duration (the fit "
                           f"needs {MIN_CLASS_STEPS} of each kind): calibrate from a longer log"
                           + (", with requests arriving while others decode" if kind == "prefill-bearing" else ""))


def warnings(res) -> list:
    """One line a problem the fit shows but does not refuse on (the command exits 3): a
    coefficient at its bound, an efficiency above 1, a kind of step the form does not
    fit (residual RMS above RESIDUAL_MAX). Each says what would fix it."""
    f, out = res["fit"], []
    for k in f.bound:
        out.append(f"{k} = {f.coef[k]:.3g}, at its bound: the log does not determine it (its steps pull it below "
                   "0); calibrate from a longer log, or tie it (--tie always" + ("" if res["description"] else
                                                                                   " with --model") + ")")
    sep = {(a, b): r for a, b, r in res["inseparable"]}
    for k, e in (res["efficiency"] or {}).items():
        if e > 1:
            other = [(b if a == k else a, r) for (a, b), r in sep.items() if k in (a, b)]
            what = "memory bandwidth" if k in ("weights", "per_kv_token") else "peak"
            why = (f"the log does not separate it from {other[0][0]} (correlation {other[0][1]:+.2f}): fix one, or "
                   "calibrate from runs with more compute-bound steps" if other else "check the description (--model)")
            out.append(f"{k} efficiency {e:.3f} > 1, faster than the description's {what}: {why}")
    for kind, r in res["residuals"].items():
        if r["steps"] and r["rms"] > RESIDUAL_MAX:
            out.append(f"{kind} steps' residual RMS {100 * r['rms']:.1f} % > {100 * RESIDUAL_MAX:g} %: the {res['cost']} "
                       "step cost does not fit them" + ("; try --cost roofline" if res["cost"] == "linear" else ""))
    return out


def nonnegative_overhead(o, log, jitter_ms, st) -> dict:
    """The front-end overhead ``o`` (:func:`fit.overhead`) as the sweep takes it
    (``client_overhead_ms >= 0``). A negative median says that the fitted step cost
    makes the first step of the requests sent to an idle engine longer than the time to
    their first token measured: within the timestamps' resolution (``jitter_ms``) of 0
    it is no measurable overhead, and becomes 0 with the measured median kept as
    ``measured_ms``; further below, the log cannot support the fit (too few
    prefill-bearing steps, or timestamps taken after the engine), a LogError."""
    m = o["median_ms"]
    if not o["requests"] or m >= 0:
        return o
    if m >= -jitter_ms:
        return dict(o, median_ms=0.0, measured_ms=m)
    from .logs import LogError
    prefill = int((st.usable & st.prefill).sum())
    raise LogError(log, "overhead", f"the fitted step cost makes the first step longer than the measured time to "
                   f"first token (median {m:.1f} ms over {o['requests']} request{'s' * (o['requests'] > 1)} sent "
                   f"to an idle engine, below -{jitter_ms:g} ms): this log cannot support the fit "
                   f"({prefill} prefill-bearing step{'s' * (prefill != 1)} with a measured duration); "
                   "calibrate from a longer low-load log")


def render(res, log) -> str:
    """The printed report."""
    st, f, o = res["steps"], res["fit"], res["overhead"]
    runs = len(res["runs"])
    lines = [f"calibrate: {log}: {len(res['records'])} requests ({res['per_token']} with per-token timestamps)"
             + (f" in {runs} runs" if runs > 1 else "") + f", {st.end_ms.size} steps reconstructed, "
             f"{int(st.usable.sum())} with a measured duration "
             f"({int((st.usable & st.prefill).sum())} prefill-bearing, {int((st.usable & ~st.prefill).sum())} decode-only)",
             bursts_line(res["jitter"])]
    d = res["description"]
    src = (f"{d['model'].get('name') or 'model'} on {d['hardware'].get('name') or 'hardware'}" if d
           else "routesim's default step_ms (no --model)")
    b = res["resampled"]
    if res["cost"] != "linear":
        lines += _render_roofline(res, src)
    else:
        lines += ["", f"fit: weighted least squares on relative error, {f.steps} steps, residual s.d. "
                  f"{100 * f.rel_sd:.1f} %", f"{'coefficient':<24} {'value':>12} {'s.e.':>10} {'resampled':>10}  note"]
        notes = {"per_prefill_token_pair": ("prefill", f.tied["prefill"]),
                 "per_decode_sequence": ("decode", f.tied["decode"])}
        for k in STEP_KEYS:
            note = ""
            if k in notes:
                pair, rho = notes[k]
                note = (f"tied: = {rho:.4g} x {'per_prefill_token' if pair == 'prefill' else 'per_kv_token'}"
                        f" ({src}); {f.why[pair]}" if rho is not None else f.why[pair])
            lines.append(f"{k:<24} {f.coef[k]:>12.4g} {f.se[k]:>10.2g} {b['se'][k]:>10.2g}  {note}")
        lines += uncertainty_lines(res)
        lines += ["", "[replica]   # paste into a sweep", step_ms_line(f.coef), ""]
    if o["requests"]:
        lines.append(f"front-end overhead (TTFT minus the modelled first step, {o['requests']} requests sent to an "
                     f"idle engine): median {o.get('measured_ms', o['median_ms']):.1f} ms (p10 {o['p10_ms']:.1f}, p90 {o['p90_ms']:.1f})")
        if "measured_ms" in o:
            lines.append(f"(a median of {o['measured_ms']:.2g} ms is within the burst threshold of 0: no measurable "
                         "overhead; a sweep takes none below 0)")
        if "ingress" in res:
            lines.append("(with --ingress the sweep takes the ingress below instead, and the way back as "
                         "client_overhead_ms)")
        else:
            lines += ["[workload]  # paste into a sweep (docs/model.md \"Closed-loop clients\")",
                      f"client_overhead_ms = {o['median_ms']:.3g}"]
    else:
        lines.append("front-end overhead: no request was sent to an idle engine (a lower-load log measures it)")
    if "ingress" in res:
        lines += ingress_lines(res["ingress"])
    lines += ["", f"{'residuals (modelled - measured)/measured':<42} {'steps':>6} {'mean %':>8} {'rms %':>7} {'mean |err| ms':>14}"]
    for name, r in res["residuals"].items():
        lines.append(f"{name:<42} {r['steps']:>6} {100 * r['mean']:>8.1f} {100 * r['rms']:>7.1f} {r['mae_ms']:>14.2f}")
    return "\n".join(lines)


def ingress_lines(g) -> list:
    """The printed ingress: its fit, what it rests on, and the sweep lines."""
    se = g["se"]
    per = (f"ingress_ms_per_token {g['ingress_ms_per_token']:.3g} (s.e. {se['ingress_ms_per_token']:.2g})"
           if g["per_token_fitted"] else "ingress_ms_per_token 0 (held: one prompt length, the log does not "
           "determine it)")
    return ["", f"ingress (send to scheduler, from {g['interval']} requests' admission step boundaries and "
            f"{g['exact']} requests sent to an idle engine; maximum likelihood, s.e. of {g['replicates']} refits on "
            f"resampled requests, seed 41): ingress_ms {g['ingress_ms']:.3g} (s.e. {se['ingress_ms']:.2g}), {per}; "
            f"the timestamps resolve the lag to {g['resolution_ms']:.2g} ms, so ingress_ms to "
            f"{g['resolution']['ingress_ms']:.2g} ms" + (f" and ingress_ms_per_token to "
                                                          f"{g['resolution']['ingress_ms_per_token']:.2g} ms"
                                                          if g["per_token_fitted"] else "")
            + ", the requests' admission boundaries allow " + consistent_text(g)
            + f"; stated uncertainty: ingress_ms ±{g['uncertainty']['ingress_ms']:.2g}"
            + (f", ingress_ms_per_token ±{g['uncertainty']['ingress_ms_per_token']:.2g}" if g["per_token_fitted"] else "")
            + " (the larger of 2 s.e. + the resolution and that range)",
            f"(the log measures ingress + the way back: --return-ms {g['return_ms']:g} ms taken as the way back)",
            "[replica]   # paste into a sweep (docs/model.md \"The engine loop's timing\")",
            f"ingress_ms = {g['ingress_ms']:.4g}", f"ingress_ms_per_token = {g['ingress_ms_per_token']:.4g}",
            "[workload]", f"client_overhead_ms = {g['return_ms']:.4g}"]


def consistent_text(g) -> str:
    """The ranges of the ingress keys every admission boundary allows, as text."""
    c = g["consistent"]
    if c["ingress_ms"] is None:
        return "no single line (they disagree beyond the resolution)"
    return (f"ingress_ms {c['ingress_ms'][0]:.3g}-{c['ingress_ms'][1]:.3g}"
            + (f", ingress_ms_per_token {c['ingress_ms_per_token'][0]:.3g}-{c['ingress_ms_per_token'][1]:.3g}"
               if g["per_token_fitted"] else ""))


def bursts_line(jitter) -> str:
    """How the steps were cut from the token bursts: the threshold, estimated or given."""
    if not jitter[0].estimated:
        return f"steps: token bursts split at gaps above --jitter-ms {jitter[0].threshold_ms:g} ms"
    thr = [j.threshold_ms for j in jitter]
    sep = min(j.separation_ms for j in jitter)
    over = f" (over {len(jitter)} runs: {min(thr):.3g}-{max(thr):.3g} ms)" if min(thr) < max(thr) else ""
    return (f"steps: token bursts split at gaps above {max(thr):.3g} ms{over}, estimated from the log (a step's "
            f"tokens arrive within it, steps at least {sep:.3g} ms apart; --jitter-ms overrides)")


def uncertainty_lines(res) -> list:
    """What the two standard errors are, and the coefficients the log cannot separate."""
    b, f, keys = res["resampled"], res["fit"], res["keys"]
    dropped = f", {b['failed']} refused" if b["failed"] else ""
    lines = [f"(s.e.: the regression's; resampled: s.d. of {b['replicates']} refits on block-bootstrap resamples of "
             f"{b['units']} {b['kind']}{dropped}, seed {uncertainty.SEED})"]
    rb = b["corr"]
    for a, c, r in res["inseparable"]:
        i, j = keys.index(a), keys.index(c)
        both = f", resampled {rb[i, j]:+.2f}" if rb.shape == (len(keys), len(keys)) else ""
        cov = f.cov[np.ix_([i, j], [i, j])]
        total = (f": {a} + {c} = {f.coef[a] + f.coef[c]:.4g} (s.e. {np.sqrt(cov.sum()):.2g}) is what it determines"
                 if a == "base" and c == "weights" else "")
        pair = next((p for p, (x, y) in pairs(res).items() if {keys[x], keys[y]} == {a, c}), None)
        why = (f"left untied by --tie auto ({f.why[pair].removeprefix('separable: ')}); --tie always ties them "
               "to the description's ratio" if pair and f.why[pair].startswith("separable") else
               f"untied ({f.why[pair]})" if pair else
               "not tied: no description relates them")
        lines.append(f"not separated by this log: {a} and {c} (their estimates correlate {r:+.2f}{both}; {why}){total}")
    return lines


def _render_roofline(res, src) -> list:
    """The fit's lines of the report for the roofline and its family: coefficients, s.e.,
    efficiencies, ties."""
    from .roofline import PAIRS, ROOFLINE_KEYS
    f, eff = res["fit"], res["efficiency"]
    mem = int(f.memory_bound.sum())
    lines = ["", f"fit: {res['cost']}, weighted least squares on relative error, {f.steps} steps ({mem} memory-bound, "
             f"{f.steps - mem} compute-bound after {f.rounds} round{'s' if f.rounds > 1 else ''} of assignment), "
             f"residual s.d. {100 * f.rel_sd:.1f} %",
             f"{'coefficient':<24} {'value':>12} {'s.e.':>10} {'resampled':>10} {'efficiency':>10}  note"]
    partner = {b: (pair, ROOFLINE_KEYS[a]) for pair, (a, b) in PAIRS.items()}
    for k in res["keys"]:
        note = ("profiled: the smallest residual over [0, 1], held in the resamples (calibrate.forms)"
                if k == "kappa" else "")
        if k in partner:
            pair, of = partner[k]
            rho = f.tied[pair]
            note = f"tied: = {rho:.4g} x {of} ({src}); {f.why[pair]}" if rho is not None else f.why[pair]
        e = f"{eff[k]:.3f}" if eff and k in eff else ""
        lines.append(f"{k:<24} {f.coef[k]:>12.4g} {f.se[k]:>10.2g} {res['resampled']['se'][k]:>10.2g} {e:>10}  {note}")
    if eff:
        lines.append("(efficiency: the description's time at full bandwidth or peak over the fitted time)")
    lines += uncertainty_lines(res)
    return lines + ["", "[replica]   # paste into a sweep", *form_lines(res["cost"], f.coef), ""]


def table_lines(res) -> list:
    """The sweep lines of the fitted step cost (and the ingress, when fitted)."""
    lines = form_lines(res["cost"], res["fit"].coef) if res["cost"] != "linear" else [step_ms_line(res["fit"].coef)]
    if "ingress" in res:
        g = res["ingress"]
        lines += [f"ingress_ms = {g['ingress_ms']:.6g}", f"ingress_ms_per_token = {g['ingress_ms_per_token']:.6g}"]
    return lines


def toml_text(res, log) -> str:
    """The written table: the sweep line, the overhead and the fit's figures."""
    f, o = res["fit"], res["overhead"]
    cost = f" --cost {res['cost']}" if res["cost"] != "linear" else ""
    if "ingress" in res:
        cost += f" --ingress --return-ms {res['ingress']['return_ms']:g}"
    log = " ".join(str(p) for p in log) if isinstance(log, (list, tuple)) else log
    out = [f"# python -m routesim.calibrate {log}{cost}", "[replica]", *table_lines(res), "",
           "[calibration]", f"overhead_ms = {o['median_ms']:.6g}", f"overhead_requests = {o['requests']}",
           f"steps_fitted = {f.steps}", f"residual_sd = {f.rel_sd:.6g}",
           "standard_error = { " + ", ".join(f"{k} = {v:.6g}" for k, v in f.se.items()) + " }",
           "standard_error_resampled = { " + ", ".join(f"{k} = {v:.6g}" for k, v in res["resampled"]["se"].items())
           + " }", f"resampled_over = \"{res['resampled']['units']} {res['resampled']['kind']}\"",
           "burst_threshold_ms = [" + ", ".join(f"{j.threshold_ms:.6g}" for j in res["jitter"]) + "]",
           "tied = { " + ", ".join(f"{p} = {'false' if r is None else repr(float(r))}" for p, r in f.tied.items()) + " }"]
    if "ingress" in res:
        g = res["ingress"]
        out += [f"ingress_return_ms = {g['return_ms']:.6g}",
                "ingress_standard_error = { " + ", ".join(f"{k} = {v:.6g}" for k, v in g["se"].items()) + " }",
                "ingress_uncertainty = { " + ", ".join(f"{k} = {v:.6g}" for k, v in g["uncertainty"].items()) + " }",
                f"ingress_requests = {{ interval = {g['interval']}, exact = {g['exact']} }}"]
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m routesim.calibrate", description=__doc__.splitlines()[0])
    ap.add_argument("log", nargs="+", help="serving log(s): .csv, .jsonl, or vLLM's benchmark result .json; "
                    "each file one run, or several with a run column")
    ap.add_argument("--model", help="model/hardware description (TOML) that ties inseparable coefficients")
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"folder for the table and the figure (default {DEFAULT_OUT})")
    ap.add_argument("--max-batched-tokens", type=int, default=8192, help="the server's token budget per step")
    ap.add_argument("--jitter-ms", type=float, default=None,
                    help="tokens closer than this are one step's burst (default: estimated from each run)")
    ap.add_argument("--tie", choices=("auto", "always", "never"), default="auto")
    ap.add_argument("--cost", choices=tuple(f.NAME for f in FORMS), default="linear",
                    help="the step cost to fit: linear (step_ms), roofline (roofline_ms), overlap (overlap_ms) "
                    "or mixed (mixed_ms): docs/model.md \"The step cost\"")
    ap.add_argument("--compare-forms", action="store_true",
                    help="fit every form on all runs but one, print each one's error on the held-out runs and "
                    "the preferred form's sweep lines (needs two runs or more; writes nothing)")
    ap.add_argument("--ingress", action="store_true",
                    help="fit the engine loop's ingress (ingress_ms, ingress_ms_per_token) from the step boundary each "
                    "request joined, and write it with the sweep lines")
    ap.add_argument("--return-ms", type=float, default=None,
                    help="with --ingress: the way back from a step's end to the client (ms, default 0), which a "
                    "client's log cannot tell from the ingress; written as client_overhead_ms")
    ap.add_argument("-q", "--quiet", action="store_true", help="print only the sweep lines")
    a = ap.parse_args(argv)
    from ..files import unwritable
    from .logs import LogError

    if a.max_batched_tokens < 1 or not (a.jitter_ms is None or a.jitter_ms > 0):
        print("error: --max-batched-tokens must be >= 1 and --jitter-ms > 0", file=sys.stderr)
        return 2
    if a.return_ms is not None and not (a.ingress and np.isfinite(a.return_ms) and a.return_ms >= 0):
        print("error: --return-ms needs --ingress and a finite number >= 0", file=sys.stderr)
        return 2
    name = ", ".join(a.log)
    if a.compare_forms:
        try:
            cmp = compare_forms(a.log if len(a.log) > 1 else a.log[0], a.model, a.max_batched_tokens, a.jitter_ms,
                                a.tie)
        except LogError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(render_comparison(cmp, name))
        return 0
    if why := unwritable(a.out):
        print(f"error: {LogError(name, '--out', why)}", file=sys.stderr)
        return 2
    try:
        res = calibrate(a.log if len(a.log) > 1 else a.log[0], a.model, a.max_batched_tokens, a.jitter_ms,
                        a.tie, a.cost, (a.return_ms or 0.0) if a.ingress else None)
    except LogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from . import figure
    from ..files import write_text

    stem = Path(a.log[0]).stem + (f"-and-{len(a.log) - 1}-more" if len(a.log) > 1 else "")
    out = Path(a.out)
    tag = f"{a.cost}-" if a.cost != "linear" else ""
    table = write_text(out / f"{stem}-{tag or 'step-'}ms.toml", toml_text(res, a.log))
    title = Path(a.log[0]).name + (f" and {len(a.log) - 1} more" if len(a.log) > 1 else "")
    png = figure.draw(res["steps"], res["fit"], out / f"{stem}-{tag}steps.png",
                      title=f"{title} ({a.cost})" if tag else title)
    if a.quiet:
        print("\n".join(table_lines(res)))
    else:
        print(render(res, name))
        print(f"\nwrote {table} and {png}")
    for w in res["warnings"]:
        print(f"warning: {name}: {w}", file=sys.stderr)
    return 3 if res["warnings"] else 0


if __name__ == "__main__":
    sys.exit(main())
