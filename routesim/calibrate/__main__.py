"""python -m routesim.calibrate LOG: fit a replica's step cost from a serving log.

    python -m routesim.calibrate LOG [--model MODEL.toml] [--out DIR]
                                 [--cost linear|roofline]
                                 [--max-batched-tokens N] [--jitter-ms MS]
                                 [--tie auto|always|never] [-q]

Reads the log (routesim.calibrate.logs: .csv, .jsonl, or vLLM's benchmark .json),
reconstructs the engine's steps from its token bursts (calibrate.steps), fits
token-model.md §2.3's linear step cost (calibrate.fit; ``--cost linear``, the default)
or the roofline (calibrate.roofline; ``--cost roofline``, docs/model.md "The step
cost") and prints the ``step_ms`` (or ``step_cost``/``roofline_ms``) lines to paste into
a sweep, the front-end overhead and the residuals per step class. Writes
``DIR/<log stem>-step-ms.toml`` (``-roofline-ms.toml``: the table, the overhead, the
fit's figures) and ``DIR/<log stem>-steps.png`` (``-roofline-steps.png``: modelled
against measured step times). A bad log or
description is one line on stderr naming the file and the row or key, exit status 2,
nothing written; so is an ``--out`` that cannot be written, and a log whose fit makes
the first step longer than the measured time to first token (a negative front-end
overhead, beyond ``--jitter-ms``: the log cannot support the fit).
"""

import argparse
import sys
from pathlib import Path

from . import STEP_KEYS

DEFAULT_OUT = "results/calibration"


def step_ms_line(coef) -> str:
    """The sweep line ``step_ms = { base = …, … }`` (docs/keys.md)."""
    return "step_ms = { " + ", ".join(f"{k} = {coef[k]:.6g}" for k in STEP_KEYS) + " }"


def roofline_lines(coef) -> list:
    """The sweep lines ``step_cost = "roofline"`` and ``roofline_ms = { … }``."""
    from .roofline import ROOFLINE_KEYS
    return ['step_cost = "roofline"',
            "roofline_ms = { " + ", ".join(f"{k} = {coef[k]:.6g}" for k in ROOFLINE_KEYS) + " }"]


def calibrate(log, model=None, max_batched_tokens=8192, jitter_ms=0.5, tie="auto", cost="linear"):
    """Everything the command prints, as a dict (raises LogError on bad input)."""
    from . import fit, hardware, logs, roofline, steps

    recs = logs.read(log)
    desc = hardware.read(model) if model else None
    derived = hardware.derive(desc) if desc else None
    st = steps.reconstruct(recs, max_batched_tokens, jitter_ms, path=log)
    try:
        if cost == "roofline":
            ratios = derived["roofline_ratios"] if desc else dict(roofline.DEFAULT_RATIOS)
            f = roofline.fit(st, ratios, tie)
        else:
            ratios = derived["ratios"] if desc else dict(hardware.DEFAULT_RATIOS)
            f = fit.fit(st, ratios, tie, physical=desc is not None)
    except ValueError as exc:
        raise logs.LogError(log, "steps", str(exc)) from None
    iso = steps.isolated(recs, st)
    return {"records": recs, "steps": st, "fit": f, "cost": cost, "description": desc, "ratios": ratios,
            "efficiency": (roofline.efficiencies(f, derived["roofline_priors"])
                           if cost == "roofline" and desc else None),
            "residuals": fit.residuals(st, f),
            "overhead": nonnegative_overhead(fit.overhead(recs, st, f, max_batched_tokens, iso), log, jitter_ms, st),
            "per_token": sum(r.per_token for r in recs)}


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
    lines = [f"calibrate: {log}: {len(res['records'])} requests ({res['per_token']} with per-token timestamps), "
             f"{st.end_ms.size} steps reconstructed, {int(st.usable.sum())} with a measured duration "
             f"({int((st.usable & st.prefill).sum())} prefill-bearing, {int((st.usable & ~st.prefill).sum())} decode-only)"]
    d = res["description"]
    src = (f"{d['model'].get('name') or 'model'} on {d['hardware'].get('name') or 'hardware'}" if d
           else "routesim's default step_ms (no --model)")
    if res["cost"] == "roofline":
        lines += _render_roofline(res, src)
    else:
        lines += ["", f"fit: weighted least squares on relative error, {f.steps} steps, residual s.d. "
                  f"{100 * f.rel_sd:.1f} %", f"{'coefficient':<24} {'value':>12} {'s.e.':>10}  note"]
        notes = {"per_prefill_token_pair": ("prefill", f.tied["prefill"]),
                 "per_decode_sequence": ("decode", f.tied["decode"])}
        for k in STEP_KEYS:
            note = ""
            if k in notes:
                pair, rho = notes[k]
                note = (f"tied: = {rho:.4g} x {'per_prefill_token' if pair == 'prefill' else 'per_kv_token'}"
                        f" ({src}); {f.why[pair]}" if rho is not None else f.why[pair])
            lines.append(f"{k:<24} {f.coef[k]:>12.4g} {f.se[k]:>10.2g}  {note}")
        lines += ["", "[replica]   # paste into a sweep", step_ms_line(f.coef), ""]
    if o["requests"]:
        lines.append(f"front-end overhead (TTFT minus the modelled first step, {o['requests']} requests sent to an "
                     f"idle engine): median {o.get('measured_ms', o['median_ms']):.1f} ms (p10 {o['p10_ms']:.1f}, p90 {o['p90_ms']:.1f})")
        if "measured_ms" in o:
            lines.append(f"(a median of {o['measured_ms']:.2g} ms is within --jitter-ms of 0: no measurable "
                         "overhead; a sweep takes none below 0)")
        lines += ["[workload]  # paste into a sweep (docs/model.md \"Closed-loop clients\")",
                  f"client_overhead_ms = {o['median_ms']:.3g}"]
    else:
        lines.append("front-end overhead: no request was sent to an idle engine (a lower-load log measures it)")
    lines += ["", f"{'residuals (modelled - measured)/measured':<42} {'steps':>6} {'mean %':>8} {'rms %':>7} {'mean |err| ms':>14}"]
    for name, r in res["residuals"].items():
        lines.append(f"{name:<42} {r['steps']:>6} {100 * r['mean']:>8.1f} {100 * r['rms']:>7.1f} {r['mae_ms']:>14.2f}")
    return "\n".join(lines)


def _render_roofline(res, src) -> list:
    """The roofline fit's lines of the report: coefficients, s.e., efficiencies, ties."""
    from .roofline import PAIRS, ROOFLINE_KEYS
    f, eff = res["fit"], res["efficiency"]
    mem = int(f.memory_bound.sum())
    lines = ["", f"fit: roofline, weighted least squares on relative error, {f.steps} steps ({mem} memory-bound, "
             f"{f.steps - mem} compute-bound after {f.rounds} round{'s' if f.rounds > 1 else ''} of assignment), "
             f"residual s.d. {100 * f.rel_sd:.1f} %",
             f"{'coefficient':<24} {'value':>12} {'s.e.':>10} {'efficiency':>10}  note"]
    partner = {b: (pair, ROOFLINE_KEYS[a]) for pair, (a, b) in PAIRS.items()}
    for k in ROOFLINE_KEYS:
        note = ""
        if k in partner:
            pair, of = partner[k]
            rho = f.tied[pair]
            note = f"tied: = {rho:.4g} x {of} ({src}); {f.why[pair]}" if rho is not None else f.why[pair]
        e = f"{eff[k]:.3f}" if eff and k in eff else ""
        lines.append(f"{k:<24} {f.coef[k]:>12.4g} {f.se[k]:>10.2g} {e:>10}  {note}")
    if eff:
        lines.append("(efficiency: the description's time at full bandwidth or peak over the fitted time)")
    return lines + ["", "[replica]   # paste into a sweep", *roofline_lines(f.coef), ""]


def table_lines(res) -> list:
    """The sweep lines of the fitted step cost."""
    return roofline_lines(res["fit"].coef) if res["cost"] == "roofline" else [step_ms_line(res["fit"].coef)]


def toml_text(res, log) -> str:
    """The written table: the sweep line, the overhead and the fit's figures."""
    f, o = res["fit"], res["overhead"]
    cost = " --cost roofline" if res["cost"] == "roofline" else ""
    out = [f"# python -m routesim.calibrate {log}{cost}", "[replica]", *table_lines(res), "",
           "[calibration]", f"overhead_ms = {o['median_ms']:.6g}", f"overhead_requests = {o['requests']}",
           f"steps_fitted = {f.steps}", f"residual_sd = {f.rel_sd:.6g}",
           "standard_error = { " + ", ".join(f"{k} = {v:.6g}" for k, v in f.se.items()) + " }",
           "tied = { " + ", ".join(f"{p} = {'false' if r is None else repr(float(r))}" for p, r in f.tied.items()) + " }"]
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m routesim.calibrate", description=__doc__.splitlines()[0])
    ap.add_argument("log", help="serving log: .csv, .jsonl, or vLLM's benchmark result .json")
    ap.add_argument("--model", help="model/hardware description (TOML) that ties inseparable coefficients")
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"folder for the table and the figure (default {DEFAULT_OUT})")
    ap.add_argument("--max-batched-tokens", type=int, default=8192, help="the server's token budget per step")
    ap.add_argument("--jitter-ms", type=float, default=0.5, help="tokens closer than this are one step's burst")
    ap.add_argument("--tie", choices=("auto", "always", "never"), default="auto")
    ap.add_argument("--cost", choices=("linear", "roofline"), default="linear",
                    help="the step cost to fit: linear (step_ms) or roofline (roofline_ms)")
    ap.add_argument("-q", "--quiet", action="store_true", help="print only the sweep lines")
    a = ap.parse_args(argv)
    from ..files import unwritable
    from .logs import LogError

    if a.max_batched_tokens < 1 or not a.jitter_ms > 0:
        print("error: --max-batched-tokens must be >= 1 and --jitter-ms > 0", file=sys.stderr)
        return 2
    if why := unwritable(a.out):
        print(f"error: {LogError(a.log, '--out', why)}", file=sys.stderr)
        return 2
    try:
        res = calibrate(a.log, a.model, a.max_batched_tokens, a.jitter_ms, a.tie, a.cost)
    except LogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from . import figure
    from ..files import write_text

    stem = Path(a.log).stem
    out = Path(a.out)
    tag = "roofline-" if a.cost == "roofline" else ""
    table = write_text(out / f"{stem}-{tag or 'step-'}ms.toml", toml_text(res, a.log))
    png = figure.draw(res["steps"], res["fit"], out / f"{stem}-{tag}steps.png",
                      title=f"{Path(a.log).name} ({a.cost})" if tag else f"{Path(a.log).name}")
    if a.quiet:
        print("\n".join(table_lines(res)))
    else:
        print(render(res, a.log))
        print(f"\nwrote {table} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
