"""The serving validation's document (docs/serving-validation.md) from its result
Datasets alone: the protocol, the selection table, the per-policy and per-scenario
validation tables, the figures (as :mod:`.figures` writes them) and a plain reading of
who wins where. Every number comes from the Datasets, or from timelines the report
traces itself from the sweep text the Datasets carry; regenerating it gives the same
bytes.
"""

import os
from pathlib import Path

import numpy as np
import xarray as xr

from ...results import made_with, sweep_of
from ...tables import fmt, markdown_table
from ...timeline import INTERVAL_MS, ROLLING_COMPLETIONS
from ..folders import load
from . import figures as F
from .resultset import capacity_rps, condition, lag_trace, load_curve_stage, mean_demand, reach_time
from .resultset import selected_parameter, squeeze, stages, steady, straggler_event
from .resultset import straggler_share, sweep_event_text, timeline_scenarios

DEFAULT_OUT = Path("docs") / "serving-validation.md"
CONDITION_DIMS = ("rate_rps", "heterogeneity", "scenario")

# What the model leaves out: prose with no numbers in it (the numbers are the protocol's).
LEAVES_OUT = """\
This is a deliberately small model of one thing, the interaction between routing
decisions and queueing. It leaves out, among much else: continuous batching, KV-cache
and prefix locality, token-level scheduling, separate first-token and inter-token
latencies (latency here is end to end), memory pressure, autoscaling, admission
control, network effects, request priorities and model parallelism. Prefill and
decode exist only as cost terms in a request's synthetic demand; the per-token costs
are not measurements of any real accelerator, and the SLO is illustrative. The
policies ignore the token counts they could observe and compare replicas by request
count. Arrivals are Poisson, which is a convenient synthetic baseline, not a claim
about production traffic. No number in this document is a benchmark of a real system."""


# --------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------

def pct(x):
    """A fraction as a percentage with two decimals."""
    return fmt(100 * x, ".2f")


def pp(x):
    """A difference of fractions in signed percentage points."""
    return fmt(100 * x, "+.2f")


def ms(x):
    return fmt(x, ".1f")


def num(x):
    """A parameter value as written in a sweep file."""
    return f"{x:g}" if isinstance(x, (float, np.floating)) else str(x)


def label(p):
    return F.label(str(p))


def _seeds(ds):
    s = [int(x) for x in ds.seed.values]
    if s == list(range(s[0], s[0] + len(s))):
        return f"{s[0]}–{s[-1]}" if len(s) > 1 else str(s[0])
    return ", ".join(map(str, s))


def _and(items):
    return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + items[-1]


def _list(values, unit=""):
    vals = [num(v) for v in values]
    text = ", ".join(vals[:-1]) + (" and " if len(vals) > 1 else "") + vals[-1]
    return text + unit


# --------------------------------------------------------------------------------------
# Comparisons
# --------------------------------------------------------------------------------------

def seed_means(da: xr.DataArray) -> xr.DataArray:
    """Per seed (and policy), the mean over the condition dimensions present."""
    return da.mean([d for d in CONDITION_DIMS if d in da.dims])


def paired(a: xr.DataArray, b: xr.DataArray):
    """(mean difference, min, max over seeds of the per-seed difference) of a − b."""
    d = a - b
    return float(d.mean()), float(d.min()), float(d.max())


def within(lo, hi) -> bool:
    """A difference is within the seed range when its per-seed values change sign
    (some seeds favour one side, some the other) or are all zero."""
    return (lo < 0 < hi) or (lo == 0 and hi == 0)


def verdict(diff, lo, hi):
    if within(lo, hi):
        return "within the seed range"
    if lo > 0:
        return "ahead on every seed"
    if hi < 0:
        return "behind on every seed"
    return "never behind on any seed (tied on some)" if lo == 0 else "never ahead on any seed (tied on some)"


def ranking(att: xr.DataArray):
    """Policies sorted by mean attainment, best first (ties: Dataset order)."""
    means = att.mean([d for d in att.dims if d != "policy"])
    order = sorted(range(means.sizes["policy"]), key=lambda i: (-float(means.values[i]), i))
    return [str(means.policy.values[i]) for i in order], means


def winners(att: xr.DataArray):
    """Per condition: (condition dict, best policy, runner-up, mean margin, seed min, seed max)."""
    out = []
    for idx in np.ndindex(*(att.sizes[d] for d in CONDITION_DIMS)):
        cond = {d: att[d].values[i].item() for d, i in zip(CONDITION_DIMS, idx)}
        pols, means = ranking(att.sel(cond))
        best, second = pols[0], pols[1] if len(pols) > 1 else pols[0]
        diff, lo, hi = paired(att.sel({**cond, "policy": best}), att.sel({**cond, "policy": second}))
        out.append((cond, best, second, diff, lo, hi))
    return out


# --------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------

def protocol(dev, val, sweep) -> str:
    a = val.attrs
    hets = [str(h) for h in val.heterogeneity.values]
    scens = [str(s) for s in val.scenario.values]
    n_cond = int(np.prod([val.sizes[d] for d in CONDITION_DIMS]))
    per_policy = n_cond * val.sizes["seed"]
    lines = ["## Protocol", ""]
    lines.append(
        f"**Cluster.** {val.sizes['replica']} replicas, each a FIFO waiting queue plus one request in "
        f"service, at most {a['queue_cap']} waiting requests per replica; an arrival with no healthy "
        f"replica with queue room is shed. Each heterogeneity setting gives every replica's mean service "
        f"time for the reference request of {num(a['reference_demand_ms'])} ms of demand: "
        + "; ".join(f"`{h}`: {', '.join(num(x) for x in val.mean_service_ms.sel(heterogeneity=h).values)} ms"
                    for h in hets) + ".")
    lines.append("")
    demand = mean_demand(val)
    lines.append(
        f"**Workload.** Poisson arrivals; prompt and output tokens are bounded log-normals (medians "
        f"{num(a['prompt_tokens_median'])} and {num(a['output_tokens_median'])} tokens); a request's demand "
        f"is {num(a['demand_ms_base'])} ms + {num(a['demand_ms_per_prompt_token'])} ms per prompt token + "
        f"{num(a['demand_ms_per_output_token'])} ms per output token (mean {demand:.2f} ms with the jitter of "
        f"{num(a['jitter_min'])}–{num(a['jitter_max'])}), served at the replica's speed at service start. "
        "Common random numbers: for a given seed every policy replays exactly the same requests.")
    lines.append("")
    lines.append(
        f"**Time and cohort.** Steps of {num(a['dt_ms'])} ms; {num(a['warmup_s'])} s of warm-up, then "
        f"{num(a['measure_s'])} s of measurement. The cohort is every request arriving in "
        f"[{num(a['warmup_s'])} s, {num(a['warmup_s'] + a['measure_s'])} s); at the horizon each is "
        "completed, shed or unfinished, and nothing is drained after the cutoff, so latency percentiles "
        f"are conditional on finishing. The SLO is {num(a['slo_ms'])} ms end to end.")
    lines.append("")
    lines.append(
        f"**Conditions.** {n_cond} = {val.sizes['rate_rps']} base rates ({_list(val.rate_rps.values, ' req/s')}) "
        f"× {len(hets)} heterogeneity settings × {len(scens)} scenarios, each weighted equally. Scenario "
        "events fire at fixed simulated times shared by every policy and seed:")
    lines.append("")
    for s in scens:
        evs = sweep.scenarios[s]
        lines.append(f"- `{s}`: " + ("; ".join(sweep_event_text(e) for e in evs) if evs else "no events") + ".")
    lines.append("")
    pols = [label(p) for p in val.policy.values]
    router = (f"The router sees only queue state, health and the statistics of completed requests "
              f"(EWMA weight α = {num(a['alpha'])}, prior ŝ₀ = {num(a['prior_service_ms'])} ms, reward "
              f"ceiling L = {num(a['reward_ceiling_ms'])} ms).")
    if dev is not None:
        param = selected_parameter(dev)
        n_dev = int(np.prod([dev.sizes[d] for d in CONDITION_DIMS]))
        lines.append(
            f"**Stages.** *Development:* {', '.join(label(p) for p in dev.policy.values)} with "
            f"{param} c ∈ {{{', '.join(num(x) for x in dev[param].values)}}} × {n_dev} conditions × "
            f"{dev.sizes['seed']} seeds ({_seeds(dev)}), {dev.attainment.size:,} runs; the value with the "
            "highest mean over conditions of the mean attainment over seeds is selected. "
            f"*Validation:* {', '.join(pols)} (Adaptive with the selected c = {num(val.attrs.get('selected_' + param, np.nan))}) "
            f"× {n_cond} conditions × {val.sizes['seed']} separate seeds ({_seeds(val)}): {per_policy} runs per "
            f"policy, {val.attainment.size:,} in all. {router}")
    else:
        lines.append(f"**Runs.** {', '.join(pols)} × {n_cond} conditions × {val.sizes['seed']} seeds "
                     f"({_seeds(val)}): {per_policy} runs per policy. {router}")
    lines.append("")
    lines.append(
        "**Summaries.** Across seeds a policy is summarized by mean attainment, medians of the per-run "
        "latency percentiles (runs with no completed request excluded), and the min–max range of p99 "
        "across runs, which is descriptive, not a confidence interval. Differences between two policies "
        "are paired by seed (same requests): a difference is *within the seed range* when some seeds "
        "favour one policy and some the other (or all tie); only a difference with the same sign on every "
        "seed is called a lead.")
    lines.append("")
    lines.append("### Metric definitions")
    lines.append("")
    names = ("arrivals", "completed", "shed", "unfinished", "latency_p50", "latency_p99", "attainment",
             "shed_rate", "goodput", "throughput", "assigned")
    rows = [[f"`{n}`", val[n].attrs.get("units", ""), val[n].attrs.get("description", "")]
            for n in names if n in val]
    lines.append(markdown_table(["variable", "units", "definition"], rows, "lll"))
    lines.append("")
    lines.append("Percentiles are nearest rank: the ⌈p·n/100⌉-th smallest of the n completed cohort latencies.")
    lines.append("")
    lines.append("### What the model leaves out")
    lines.append("")
    lines.append(LEAVES_OUT)
    return "\n".join(lines)


def selection(dev) -> str:
    from ...config import Selection
    from ...study import objective
    param = selected_parameter(dev)
    chosen = dev.attrs[f"selects_{param}"]
    d = squeeze(dev, keep=(param,) + CONDITION_DIMS + ("seed", "replica"))
    obj = objective(d, Selection(param, "attainment"))
    cond = d.attainment.mean("seed")
    rel = cond - cond.isel({param: 0})
    seed_obj = seed_means(d.attainment)
    rows = []
    values = [v.item() for v in d[param].values]
    for k, c in enumerate(values):
        r = rel.isel({param: k})
        so = seed_obj.isel({param: k})
        rows.append([num(c), pct(float(obj.values[k])), pp(float(r.mean())),
                     f"{pp(float(r.min()))} to {pp(float(r.max()))}",
                     f"{pct(float(so.min()))}–{pct(float(so.max()))}",
                     "**selected**" if c == chosen else ""])
    order = sorted(range(len(values)), key=lambda k: (-float(obj.values[k]), k))
    best, second = order[0], order[1] if len(order) > 1 else order[0]
    diff, lo, hi = paired(seed_obj.isel({param: best}), seed_obj.isel({param: second}))
    span = float(obj.max() - obj.min())
    lines = [f"## Selection of the exploration weight ({dev.attainment.size:,} development runs)", ""]
    lines.append(markdown_table([f"c ({param})", "mean attainment %", f"change from c = {num(values[0])} (pp)",
                        "per-condition change (pp)", "objective per seed, min–max %", ""],
                       rows, "lrrrrl"))
    lines.append("")
    lines.append(
        f"The selected value is c = {num(chosen)}. Across all candidates the objective spans "
        f"{span * 100:.2f} percentage points, while one condition's mean attainment moves by up to "
        f"{100 * float(abs(rel).max()):.2f} points between candidates, and the objective itself varies by "
        f"about {100 * float((seed_obj.max('seed') - seed_obj.min('seed')).mean()):.1f} points from seed to seed. "
        f"The best value beats the runner-up (c = {num(values[second])}) by {fmt(100 * diff, '+.3f')} points on average, "
        f"per seed from {pp(lo)} to {pp(hi)}: {verdict(diff, lo, hi)}. "
        + ("The choice of c therefore matters little for attainment in this model; it is a tie-break "
           "among near-equal candidates, not evidence that more exploration helps."
           if within(lo, hi) else "The selected value is ahead on every development seed."))
    return "\n".join(lines)


def policy_table(val) -> str:
    v = squeeze(val)
    rows = []
    for p in v.policy.values:
        one = v.sel(policy=p)
        p99 = one.latency_p99.values.ravel()
        p99 = p99[np.isfinite(p99)]
        rows.append([label(p), one.attainment.size, pct(float(one.attainment.mean())),
                     ms(float(one.latency_p50.median())), ms(float(one.latency_p99.median())),
                     f"{ms(p99.min())}–{ms(p99.max())}" if p99.size else "—",
                     pct(float(one.shed_rate.mean())), fmt(float(one.goodput.median()), ".1f")])
    order, means = ranking(v.attainment)
    best = order[0]
    seeds = seed_means(v.attainment)
    diffs = []
    for p in order[1:]:
        diff, lo, hi = paired(seeds.sel(policy=p), seeds.sel(policy=best))
        diffs.append([label(p), pp(diff), f"{pp(lo)} to {pp(hi)}", verdict(diff, lo, hi)])
    lines = ["## Validation: every policy", ""]
    lines.append(markdown_table(["policy", "runs", "mean attainment %", "median p50 ms", "median p99 ms",
                        "p99 min–max ms", "mean shed %", "median goodput req/s"], rows))
    lines.append("")
    lines.append(f"Paired by seed against the best mean attainment ({label(best)}); each seed's value is "
                 f"its mean over the {int(np.prod([v.sizes[d] for d in CONDITION_DIMS]))} conditions:")
    lines.append("")
    lines.append(markdown_table(["policy", f"attainment − {label(best)} (pp)", "per-seed range (pp)", "verdict"],
                       diffs, "lrrl"))
    return "\n".join(lines)


def scenario_tables(val) -> str:
    v = squeeze(val)
    pols = [str(p) for p in v.policy.values]
    lines = ["## Validation by scenario", "",
             "Mean attainment over seeds (%) and median p99 (ms) per condition; the best attainment is "
             "in bold. *Margin* is the best policy's lead over the runner-up, with its per-seed range."]
    win = {(c["rate_rps"], c["heterogeneity"], c["scenario"]): (b, s, d, lo, hi)
           for c, b, s, d, lo, hi in winners(v.attainment)}
    for s in v.scenario.values:
        s = str(s)
        lines += ["", f"### {s}", ""]
        rows = []
        for h in v.heterogeneity.values:
            for r in v.rate_rps.values:
                one = v.sel(scenario=s, heterogeneity=h, rate_rps=r)
                best, second, d, lo, hi = win[(r.item(), str(h), s)]
                att = [pct(float(one.attainment.sel(policy=p).mean())) for p in pols]
                att = [f"**{a}**" if p == best else a for a, p in zip(att, pols)]
                p99 = [ms(float(one.latency_p99.sel(policy=p).median())) for p in pols]
                rows.append([str(h), num(r.item())] + att + p99 +
                            [f"{label(best)} {pp(d)} ({pp(lo)} to {pp(hi)})" +
                             (", within the seed range" if within(lo, hi) else f", {verdict(d, lo, hi)}")])
        heads = ["heterogeneity", "rate req/s"] + [f"{label(p)} attain %" for p in pols] + \
                [f"{label(p)} p99 ms" for p in pols] + ["best: margin pp (per seed)"]
        lines.append(markdown_table(heads, rows, "ll" + "r" * (2 * len(pols)) + "l"))
    return "\n".join(lines)


def reading(val, share=None) -> str:
    v = squeeze(val)
    att = v.attainment
    order, means = ranking(att)
    seeds = seed_means(att)
    best = order[0]
    lines = ["## Who wins where", ""]
    ranked = ", ".join(f"{label(p)} {pct(float(means.sel(policy=p)))} %" for p in order)
    lines.append(f"- **Overall** mean attainment: {ranked}.")
    close = []
    for p in order[1:]:
        diff, lo, hi = paired(seeds.sel(policy=p), seeds.sel(policy=best))
        if within(lo, hi):
            close.append((p, diff, lo, hi))
    if close:
        parts = _and([f"{label(p)} is at {pp(d)} pp (per seed {pp(lo)} to {pp(hi)})" for p, d, lo, hi in close])
        lines.append(f"  Compared with {label(best)}, {parts}: within the seed range, so "
                     + ("these policies are" if len(close) > 1 else "the two are")
                     + " not distinguishable overall on this evidence.")
    behind = [p for p in order[1:] if p not in [c[0] for c in close]]
    for p in behind:
        diff, lo, hi = paired(seeds.sel(policy=p), seeds.sel(policy=best))
        lines.append(f"  {label(p)} is behind {label(best)} on every seed ({pp(diff)} pp on average, "
                     f"per seed {pp(lo)} to {pp(hi)}).")
    if best != F.ACCENT and F.ACCENT in order:
        lines.append(f"- **A simpler policy wins overall:** {label(best)} has the highest mean attainment, "
                     f"not {label(F.ACCENT)}.")
    elif best == F.ACCENT and close:
        lines.append(f"- {label(F.ACCENT)} has the highest mean attainment, but not by more than the seed range.")
    ws = winners(att)
    n = len(ws)
    counts = {p: sum(1 for w in ws if w[1] == p) for p in order}
    clear = {p: sum(1 for w in ws if w[1] == p and not within(w[4], w[5])) for p in order}
    text = ", ".join(f"{label(p)} {counts[p]}" for p in order if counts[p])
    n_clear = sum(clear.values())
    lines.append(f"- **Conditions won** (highest mean attainment, of {n}): {text}. "
                 + (f"In {n_clear} of them the winner is never behind the runner-up on any seed ("
                    + ", ".join(f"{label(p)} {clear[p]}" for p in order if clear[p]) + "); in the other "
                    f"{n - n_clear} the lead is within the seed range."
                    if n_clear else "Every one of these leads is within the seed range."))
    for s in v.scenario.values:
        sub = [w for w in ws if w[0]["scenario"] == s.item()]
        c = {p: sum(1 for w in sub if w[1] == p) for p in order}
        clear_s = sum(1 for w in sub if not within(w[4], w[5]))
        lines.append(f"  - `{s.item()}`: " + ", ".join(f"{label(p)} {c[p]}" for p in order if c[p])
                     + f" of {len(sub)}; "
                     + (f"{clear_s} without a seed on which the runner-up does better." if clear_s
                        else "all within the seed range."))
    worst = order[-1]
    last = sum(1 for w in ws if ranking(att.sel(w[0]))[0][-1] == worst)
    lines.append(f"- **Lowest attainment:** {label(worst)} is last in {last} of {n} conditions; "
                 f"its mean is {pp(float(means.sel(policy=worst) - means.sel(policy=best)))} pp from "
                 f"{label(best)}.")
    med = {p: float(v.latency_p99.sel(policy=p).median()) for p in order}
    tail = sorted(order, key=lambda p: (med[p], order.index(p)))
    p99_seed = v.latency_p99.median([d for d in CONDITION_DIMS if d in v.latency_p99.dims])
    parts = []
    for p in tail[1:]:
        diff, lo, hi = paired(p99_seed.sel(policy=p), p99_seed.sel(policy=tail[0]))
        word = {"ahead on every seed": "higher on every seed", "behind on every seed": "lower on every seed"}.get(
            verdict(diff, lo, hi), verdict(diff, lo, hi))
        parts.append(f"{label(p)} {fmt(lo, '+.1f')} to {fmt(hi, '+.1f')} ms ({word})")
    lines.append("- **Tail latency** (median p99 over all runs): "
                 + ", ".join(f"{label(p)} {ms(med[p])} ms" for p in tail)
                 + f". Per seed (median over conditions), the difference from {label(tail[0])}: "
                 + "; ".join(parts) + ".")
    if "latency_aware" in order and F.ACCENT in order:
        diff, lo, hi = paired(seeds.sel(policy=F.ACCENT), seeds.sel(policy="latency_aware"))
        lines.append(f"- **Adaptive against Latency Aware** (the rule it reduces to without exploration): "
                     f"{pp(diff)} pp of attainment, per seed {pp(lo)} to {pp(hi)}, {verdict(diff, lo, hi)}.")
    if share is not None:
        med = share.sel(period="during").median("seed")
        parts = []
        for r in share.rate_rps.values:
            m = med.sel(rate_rps=r)
            low = sorted([str(p) for p in share.policy.values], key=lambda p: (float(m.sel(policy=p)), p))
            parts.append(f"at {num(r.item())} req/s " + ", ".join(f"{label(p)} {pct(float(m.sel(policy=p)))} %"
                                                             for p in low))
        lines.append("- **Straggler:** share of assignments sent to the slow replica during the slowdown "
                     "(median over seeds): " + "; ".join(parts) + ".")
    return "\n".join(lines)


def share_table(share, info) -> str:
    rows = []
    for r in share.rate_rps.values:
        for p in share.policy.values:
            cells = []
            for per in share.period.values:
                x = share.sel(rate_rps=r, policy=p, period=per)
                cells.append(f"{pct(float(x.median()))} ({pct(float(x.min()))}–{pct(float(x.max()))})")
            rows.append([num(r.item()), label(p)] + cells)
    e = info["edges"]
    heads = ["rate req/s", "policy", f"before: ({num(e[0])} s, {num(e[1])} s]",
             f"during: ({num(e[1])} s, {num(e[2])} s]", f"after: ({num(e[2])} s, {num(e[3])} s]"]
    return markdown_table(heads, rows, "rlrrr")


def lag_table(tl) -> str:
    rep, onset, factor, recovery = straggler_event(tl)
    t = tl.time.values
    rows = []
    for p in tl.policy.values:
        for a in tl.alpha.values:
            one = tl.sel(policy=p, alpha=a, replica=rep)
            up, down = [], []
            for s in np.atleast_1d(one.seed.values) if "seed" in one.dims else [None]:
                o = one.sel(seed=s) if s is not None else one
                up.append(reach_time(t, o.s_hat.values, o.mean_service.values, onset))
                if recovery is not None:
                    down.append(reach_time(t, o.s_hat.values, o.mean_service.values, recovery))
            up, down = 1000 * np.array(up), 1000 * np.array(down)

            def cell(x):
                x = x[np.isfinite(x)]
                return f"{np.median(x):.0f} ({x.min():.0f}–{x.max():.0f})" if x.size else "—"
            rows.append([label(p), f"{a:g}", cell(up), cell(down) if recovery is not None else "—"])
    return markdown_table(["policy", "α", "to 90 % of the step up, ms", "to 90 % of the step down, ms"], rows, "lrrr")


def load_curve_section(lc) -> str:
    v = steady(squeeze(lc))
    slo = float(v.attrs["slo_ms"])
    demand = mean_demand(v)
    rows = []
    for h in v.heterogeneity.values:
        cap = capacity_rps(v, h, demand)
        for p in v.policy.values:
            one = v.sel(policy=p, heterogeneity=h)
            p99 = one.latency_p99.median("seed").values
            att = one.attainment.mean("seed").values
            rates = v.rate_rps.values
            ok = [r for r, x in zip(rates, p99) if x <= slo]
            good = [r for r, x in zip(rates, att) if x >= 0.9]
            rows.append([str(h), f"{cap:.0f}", label(p), num(max(ok).item()) if ok else "none",
                         num(max(good).item()) if good else "none"])
    lines = ["## The queueing hockey stick", ""]
    lines.append(
        f"A separate sweep (`{v.attrs.get('sweep_file', 'sweeps/load-curve.toml')}`) runs every policy on the "
        f"`steady` scenario at {_list(v.rate_rps.values, ' req/s')}, {v.sizes['seed']} seeds each "
        f"({_seeds(v)}), with the same model constants and selection. Capacity is Σ 1 / E[service] over "
        "replicas, from the mean demand (grid rounding ignored).")
    lines.append("")
    lines.append(markdown_table(["heterogeneity", "capacity req/s", "policy", f"highest rate with median p99 ≤ {slo:g} ms",
                        "highest rate with attainment ≥ 90 %"], rows, "lrlrr"))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# The document
# --------------------------------------------------------------------------------------

def _figure(rel, stem, alt, caption):
    return f"![{alt}]({rel}/{stem}.png)\n\n*{caption}*"


def build(results_dir, figures_dir="figures", out_path=DEFAULT_OUT, load_curve_dir=None,
          show_progress=False) -> str:
    """The document's Markdown text."""
    steps = ["reading results", "tracing timelines", "writing"]
    bar = None
    if show_progress:
        from ...progress import bar as progress_bar
        bar = progress_bar(len(steps), "report", "step")

    def tick():
        if bar is not None:
            bar.update(1)

    results = load(results_dir)
    dev, val = stages(results)
    if val is None:
        raise ValueError(f"{results_dir}: no stage compares several policies")
    sweep = sweep_of(val)
    lc = None
    if load_curve_dir is not None:
        lc = load_curve_stage(load_curve_dir)
    tick()
    share, info = straggler_share(val)
    lag = lag_trace(val, seed=[int(s) for s in val.seed.values]) if info is not None else None
    tick()

    rel = Path(os.path.relpath(Path(figures_dir).resolve(), Path(out_path).resolve().parent)).as_posix()
    a = val.attrs
    parts = [
        "# Serving validation: routing policies on a tiny inference cluster",
        "",
        f"<!-- Generated by `python -m routesim.report {Path(results_dir).as_posix().rstrip('/')}/` from the "
        "result Datasets; do not edit by hand. -->",
        "",
        f"This document is generated from the result Datasets of the `{a['sweep_name']}` sweep "
        f"(`{a.get('sweep_file', '')}`, routesim {a.get('routesim_version', '')}). Every number in it is read from "
        "those Datasets, or from timelines traced by the same compiled engine from the sweep text they "
        "carry. It is a simulation: no number here is a measurement of a real serving system.",
        "",
        made_with(a),
        "",
        protocol(dev, val, sweep),
        "",
    ]
    if dev is not None:
        parts += [selection(dev), "",
                  _figure(rel, F.NAMES["development"], "selection objective against the exploration weight",
                          "Left: the selection objective (mean attainment over conditions) against the "
                          "exploration weight, the selected value starred. Right: each condition's mean "
                          "attainment relative to its value at the first candidate; the bold line is the mean."),
                  ""]
    parts += [policy_table(val), "",
              _figure(rel, F.NAMES["attainment"], "attainment heatmap",
                      f"Mean attainment over {val.sizes['seed']} seeds per policy and condition."), "",
              _figure(rel, F.NAMES["p99"], "median p99 with min–max range",
                      f"Median p99 (dot) and min–max across {val.sizes['seed']} seeds (bar) per policy, "
                      f"scenario and rate; log scale; dashed: the {num(a['slo_ms'])} ms SLO."), "",
              scenario_tables(val), ""]
    cond = condition(val)
    timeline_names = list(timeline_scenarios(val, sweep).values())
    if timeline_names:
        parts += ["## Timelines", "",
                  f"One run per policy at {num(cond['rate_rps'])} req/s, heterogeneity `{cond['heterogeneity']}`, "
                  f"seed {cond['seed']}, sampled every {INTERVAL_MS:g} ms by `routesim.trace`: per replica the "
                  f"waiting queue (replica 1 darkest), the p99 of the last {ROLLING_COMPLETIONS} completions against "
                  "the SLO, the throughput "
                  "over a trailing second and the requests shed so far; the disturbance is shaded.", ""]
        for name in timeline_names:
            events = "; ".join(sweep_event_text(e) for e in sweep.scenarios[name])
            parts += [_figure(rel, f"timeline-{name}", f"timeline of the {name} scenario",
                              f"The `{name}` scenario ({events})."), ""]
    if share is not None:
        t = share_table(share, info)
        parts += [f"Share of the routing decisions (re-routes included) sent to replica {info['replica']}, the "
                  f"straggler, before, during and after its slowdown in `{info['name']}`, heterogeneity "
                  f"`{info['heterogeneity']}`, traced for each of the {share.sizes['seed']} validation seeds: "
                  "median (min–max) in percent.", "", t, ""]
    if lc is not None:
        parts += [load_curve_section(lc), "",
                  _figure(rel, F.NAMES["load_curve"], "median p99 and attainment against arrival rate",
                          "Median p99 (top, log scale) and mean attainment (bottom) against the base "
                          "arrival rate, steady scenario; dotted: the capacity estimate."), ""]
    if lag is not None:
        rep, onset, factor, recovery = straggler_event(lag)
        before = float(lag.mean_service.sel(replica=rep).values.ravel()[0])
        parts += ["## How fast the estimates follow a straggler", "",
                  f"Replica {rep}'s true mean service time goes from {before:.2f} ms to {before * factor:.2f} ms "
                  f"at {onset:g} s" + (f" and back at {recovery:g} s" if recovery is not None else "")
                  + f" (its reference-request time of {num(float(val.mean_service_ms.sel(heterogeneity=cond['heterogeneity'], replica=rep)))} ms "
                  f"× {factor:g}, scaled by the mean demand of {mean_demand(val):.2f} ms per "
                  f"{num(a['reference_demand_ms'])} ms). ŝ is an EWMA over completions, so it moves only when "
                  f"replica {rep} completes requests. Time until ŝ first covers 90 % of each step, to the "
                  f"nearest 10 ms sample, median over the {val.sizes['seed']} validation seeds (min–max):", "",
                  lag_table(lag), "",
                  _figure(rel, F.NAMES["lag"], "estimate lag",
                          f"ŝ of replica {rep} against its true mean service time for several α, one seed; "
                          "larger α follows the step faster and is noisier."), ""]
    parts += [reading(val, share), ""]
    tick()
    if bar is not None:
        bar.close()
    return "\n".join(parts).rstrip("\n") + "\n"
