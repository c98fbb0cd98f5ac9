"""python -m routesim.calibrate LOG: fit a replica's step cost from a serving log.

    python -m routesim.calibrate LOG [--model MODEL.toml] [--out DIR]
                                 [--max-batched-tokens N] [--jitter-ms MS]
                                 [--tie auto|always|never] [--quiet]

Reads the log (routesim.calibrate.logs: .csv, .jsonl, or vLLM's benchmark .json),
reconstructs the engine's steps from its token bursts (calibrate.steps), fits
token-model.md §2.3's step cost (calibrate.fit) and prints the ``step_ms`` table to
paste into a sweep, the front-end overhead and the residuals per step class. Writes
``DIR/<log stem>-step-ms.toml`` (the table, the overhead, the fit's figures) and
``DIR/<log stem>-steps.png`` (modelled against measured step times). A bad log or
description is one line on stderr naming the file and the row or key, exit status 2,
nothing written.
"""

import argparse
import sys
from pathlib import Path

from . import STEP_KEYS

DEFAULT_OUT = "results/calibration"


def step_ms_line(coef) -> str:
    """The sweep line ``step_ms = { base = …, … }`` (token-interface.md's keys)."""
    return "step_ms = { " + ", ".join(f"{k} = {coef[k]:.6g}" for k in STEP_KEYS) + " }"


def calibrate(log, model=None, max_batched_tokens=8192, jitter_ms=0.5, tie="auto"):
    """Everything the command prints, as a dict (raises LogError on bad input)."""
    from . import fit, hardware, logs, steps

    recs = logs.read(log)
    desc = hardware.read(model) if model else None
    ratios = hardware.derive(desc)["ratios"] if desc else dict(hardware.DEFAULT_RATIOS)
    st = steps.reconstruct(recs, max_batched_tokens, jitter_ms, path=log)
    try:
        f = fit.fit(st, ratios, tie, physical=desc is not None)
    except ValueError as exc:
        raise logs.LogError(log, "steps", str(exc)) from None
    iso = steps.isolated(recs, st)
    return {"records": recs, "steps": st, "fit": f, "description": desc, "ratios": ratios,
            "residuals": fit.residuals(st, f),
            "overhead": fit.overhead(recs, st, f, max_batched_tokens, iso),
            "per_token": sum(r.per_token for r in recs)}


def render(res, log) -> str:
    """The printed report."""
    st, f, o = res["steps"], res["fit"], res["overhead"]
    lines = [f"calibrate: {log}: {len(res['records'])} requests ({res['per_token']} with per-token timestamps), "
             f"{st.end_ms.size} steps reconstructed, {int(st.usable.sum())} with a measured duration "
             f"({int((st.usable & st.prefill).sum())} prefill-bearing, {int((st.usable & ~st.prefill).sum())} decode-only)"]
    d = res["description"]
    src = (f"{d['model'].get('name') or 'model'} on {d['hardware'].get('name') or 'hardware'}" if d
           else "routesim's default step_ms (no --model)")
    lines += ["", f"fit: weighted least squares on relative error, {f.steps} steps, residual s.d. {100 * f.rel_sd:.1f} %",
              f"{'coefficient':<24} {'value':>12} {'s.e.':>10}  note"]
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
                     f"idle engine): median {o['median_ms']:.1f} ms (p10 {o['p10_ms']:.1f}, p90 {o['p90_ms']:.1f})")
        lines += ["[workload]  # paste into a sweep (docs/model.md \"Closed-loop clients\")",
                  f"client_overhead_ms = {o['median_ms']:.3g}"]
    else:
        lines.append("front-end overhead: no request was sent to an idle engine (a lower-load log measures it)")
    lines += ["", f"{'residuals (modelled - measured)/measured':<42} {'steps':>6} {'mean %':>8} {'rms %':>7} {'mean |err| ms':>14}"]
    for name, r in res["residuals"].items():
        lines.append(f"{name:<42} {r['steps']:>6} {100 * r['mean']:>8.1f} {100 * r['rms']:>7.1f} {r['mae_ms']:>14.2f}")
    return "\n".join(lines)


def toml_text(res, log) -> str:
    """The written table: the sweep line, the overhead and the fit's figures."""
    f, o = res["fit"], res["overhead"]
    out = [f"# python -m routesim.calibrate {log}", "[replica]", step_ms_line(f.coef), "",
           "[calibration]", f"overhead_ms = {o['median_ms']:.6g}", f"overhead_requests = {o['requests']}",
           f"steps_fitted = {f.steps}", f"residual_sd = {f.rel_sd:.6g}",
           "standard_error = { " + ", ".join(f"{k} = {f.se[k]:.6g}" for k in STEP_KEYS) + " }",
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
    ap.add_argument("--quiet", action="store_true", help="print only the step_ms line")
    a = ap.parse_args(argv)
    from .logs import LogError

    if a.max_batched_tokens < 1 or not a.jitter_ms > 0:
        print("error: --max-batched-tokens must be >= 1 and --jitter-ms > 0", file=sys.stderr)
        return 2
    try:
        res = calibrate(a.log, a.model, a.max_batched_tokens, a.jitter_ms, a.tie)
    except LogError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from . import figure
    from ..files import write_text

    stem = Path(a.log).stem
    out = Path(a.out)
    table = write_text(out / f"{stem}-step-ms.toml", toml_text(res, a.log))
    png = figure.draw(res["steps"], res["fit"], out / f"{stem}-steps.png", title=f"{Path(a.log).name}")
    if a.quiet:
        print(step_ms_line(res["fit"].coef))
    else:
        print(render(res, a.log))
        print(f"\nwrote {table} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
