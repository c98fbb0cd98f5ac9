"""docs/disaggregation.md from the study's Datasets alone (:mod:`.measure`): every
number in it is computed from ``results/disaggregation/{chat,code,mooncake}.nc``; the
prediction (:data:`PREDICTION`) is fixed text, written before the full runs."""

import math
from pathlib import Path

from . import RESULTS, STEM
from ...batching.pd_keys import ROUTES
from ..intervals import LEVEL, RESAMPLES, interval, interval_text
from .design import COLOCATED, SPLITS, SWEEP, WORKLOADS, arm
from .measure import (CLOSE_PCT, CRITERION, LINK_BUSY, RULE, TRANSFER_SHARE, arms, best_arm, capacities,
                      capacity_diffs, load_axis, loads, median, paired, parts, pd_arms, steady_loads,
                      verdict_at_least, verdict_close, verdict_every_load, verdict_gain, verdict_lower,
                      verdict_no_gain, verdict_ratio, verdict_small)

NAMES = {"chat": "the chat mix", "code": "the Azure code trace's lengths", "mooncake": "the Mooncake excerpt"}

PREDICTION = (
    "**Prediction (fixed in routesim/studies/disaggregation/document.py before the full runs' "
    "results were read; reasoned from DistServe's and Splitwise's argument and this model's step cost, after one placement "
    "probe of the same arms that set the loads, so not blind to that probe).** A co-located replica "
    "runs prefill chunks in the same iterations as decodes, so a long prompt stretches its neighbours' "
    "inter-token gaps; a split removes that interference at the price of a fixed pool ratio, a KV "
    "transfer and one more queue. "
    "(C1) *No split raises the chat mix's capacity*: its prompts (median 1,000 tokens, 60 % sharing a "
    "cached prefix) make prefill a small part of each iteration, so co-location costs little, while a "
    "split leaves one pool idle when the other is the bottleneck. "
    "(C2) *The prefill-heavy split 6:2 raises the code trace's capacity*: prompts of about 2,000 tokens "
    "with about 30 output tokens; co-located, the prefill chunks drive TPOT p99 past its SLO as the load "
    "grows, while two decode replicas suffice for the short outputs. "
    "(C3) *Some split raises Mooncake's goodput at both time scales*: prompts of 13,700 tokens on average "
    "keep co-located TPOT p99 far above 50 ms whenever a long prompt is prefilled beside decodes. "
    "(C4) *The long-prompt workloads' best split has more prefill replicas than the chat mix's* (code's "
    "and Mooncake's against chat's). "
    "(C5) *At the lightest load every split lowers TPOT p99* (independent routing, every workload): the "
    "decode replicas compute no prompt but each request's one-token step. "
    f"(C6) *Transfer-aware routing's goodput is within ±{CLOSE_PCT:g} % of independent routing's* at "
    "every load an arm sustains: the links are lightly used (C8), so the link term rarely changes the "
    "choice, and the queue term orders the prefill replicas as least_tokens does. "
    "(C7) *Selective routing's capacity is at least independent's in every split of chat and code, and "
    "higher in some*: a prompt whose uncached part is short is served whole on its decode replica, which "
    "relieves the prefill pool. "
    f"(C8) *The KV transfer is under {100 * TRANSFER_SHARE:.0f} % of the TTFT p50 and the busiest link under "
    f"{100 * LINK_BUSY:.0f} % busy* at every load an arm sustains: a 2,000-token prompt is 262 MB, 5 ms at 50 GB/s.")


def _f(x, digits=1, signed=False):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:+,.{digits}f}" if signed else f"{x:,.{digits}f}"


def _ci(v, digits=1):
    return interval_text(v, digits, "every seed")


def _load(ds, x):
    return f"{x:g} req/s" if load_axis(ds) == "rate_rps" else f"time scale {x:g}"


def _cap(cap, a):
    c = float(cap.capacity_rps.sel(arm=a))
    lo = float(cap.attrs["capacity_low"])
    hi = float(cap.attrs["capacity_high"])
    if math.isnan(c):
        return f"< {lo:g}"
    return f"≥ {c:g}" if c >= hi else f"{c:g}"


def findings(data) -> dict:
    """Everything the verdicts rest on, as plain values (the tests read it)."""
    caps = {w: capacities(data[w]) for w in ("chat", "code") if w in data}
    best = {w: best_arm(data[w], caps.get(w)) for w in WORKLOADS}
    diffs = {w: capacity_diffs(c) for w, c in caps.items()}
    mc = data["mooncake"]
    per_load = {x: {a: paired(mc, "goodput", a, load=x) for a in pd_arms(mc)} for x in loads(mc)}
    tpot = {f"{w} {p}:{d}": paired(data[w], "tpot_p99", arm((p, d), "independent"), load=loads(data[w])[0])
            for w in WORKLOADS for p, d in SPLITS}
    close, sel = {}, {}
    shares, links = [], []
    for w in WORKLOADS:
        ds, cap = data[w], caps.get(w)
        for s in SPLITS:
            ind, ta = arm(s, "independent"), arm(s, "transfer_aware")
            for x in steady_loads(ds, ind, cap):
                close[f"{w} {s[0]}:{s[1]} at {_load(ds, x)}"] = paired(ds, "goodput", ta, ind, x, relative=True)
            if cap is not None:
                seed = cap.capacity_rps_seed.fillna(0.0)
                sel[f"{w} {s[0]}:{s[1]}"] = interval(seed.sel(arm=arm(s, "selective")).values
                                                     - seed.sel(arm=ind).values)
        for a in pd_arms(ds):
            for x in steady_loads(ds, a, cap):
                pt = parts(ds, a, x)
                shares.append(pt["transfer"] / pt["ttft_p50"] if pt["ttft_p50"] > 0 else math.nan)
                links.append(pt["link_max"])
    return {
        "caps": caps, "best": best, "diffs": diffs, "per_load": per_load, "tpot": tpot, "close": close,
        "selective": sel, "shares": shares, "links": links,
        "C1": verdict_no_gain(diffs["chat"]),
        "C2": verdict_gain(diffs["code"], [arm((6, 2), r) for r in ROUTES]),
        "C3": verdict_every_load(per_load),
        "C4": verdict_ratio(best),
        "C5": verdict_lower(tpot),
        "C6": verdict_close(close),
        "C7": verdict_at_least(sel),
        "C8": verdict_small(shares, links),
    }


def _gain_text(diffs, caps_w):
    up = [(a, v) for a, v in diffs.items() if v[1] > 0]
    best = max(diffs.items(), key=lambda kv: kv[1][0])
    base = _cap(caps_w, COLOCATED)
    if up:
        return (f"co-located {base} req/s; raised by " + "; ".join(f"{a} {_ci(v, 0)}" for a, v in up))
    return f"co-located {base} req/s; the best split {best[0]} {_cap(caps_w, best[0])} ({_ci(best[1], 0)} req/s)"


def _summary(f, data) -> list:
    mc = data["mooncake"]
    c3 = "; ".join(f"{_load(mc, x)}: best {max(d, key=lambda a: d[a][0])} {_ci(max(d.values(), key=lambda v: v[0]), 2)} req/s"
                   for x, d in f["per_load"].items())
    tp = [v for v in f["tpot"].values()]
    c6 = list(f["close"].values())
    sel = f["selective"]
    sh = [x for x in f["shares"] if math.isfinite(x)]
    ln = [x for x in f["links"] if math.isfinite(x)]
    return [
        "| claim | measured | verdict |",
        "|---|---|---|",
        f"| C1. no split raises the chat mix's capacity | {_gain_text(f['diffs']['chat'], f['caps']['chat'])} | {f['C1']} |",
        f"| C2. 6:2 raises the code trace's capacity | {_gain_text(f['diffs']['code'], f['caps']['code'])} | {f['C2']} |",
        f"| C3. some split raises Mooncake's goodput at both time scales | Δ goodput against co-located, {c3} | {f['C3']} |",
        "| C4. the long-prompt workloads' best split has more prefill replicas than chat's | best: "
        + ", ".join(f"{w} {f['best'][w]}" for w in WORKLOADS) + f" | {f['C4']} |",
        f"| C5. every split lowers TPOT p99 at the lightest load | Δ TPOT p99 (ms) {_f(min(v[0] for v in tp), 1, True)} "
        f"to {_f(max(v[0] for v in tp), 1, True)}; {sum(v[2] < 0 for v in tp)} of {len(tp)} intervals below 0, "
        f"{sum(v[1] > 0 for v in tp)} above | {f['C5']} |",
        f"| C6. transfer-aware within ±{CLOSE_PCT:g} % of independent in goodput | {len(c6)} cells (split × load an "
        f"arm sustains): means {_f(min((v[0] for v in c6), default=math.nan), 2, True)} to "
        f"{_f(max((v[0] for v in c6), default=math.nan), 2, True)} %; "
        f"{sum(v[1] > CLOSE_PCT or v[2] < -CLOSE_PCT for v in c6)} beyond | {f['C6']} |",
        "| C7. selective's capacity at least independent's, higher somewhere | selective − independent (req/s): "
        + "; ".join(f"{k} {_ci(v, 1)}" for k, v in sel.items()) + f" | {f['C7']} |",
        f"| C8. transfer < {100 * TRANSFER_SHARE:.0f} % of TTFT p50, busiest link < {100 * LINK_BUSY:.0f} % | transfer share "
        f"{_f(100 * min(sh, default=math.nan), 1)} to {_f(100 * max(sh, default=math.nan), 1)} %, busiest link "
        f"{_f(100 * min(ln, default=math.nan), 1)} to {_f(100 * max(ln, default=math.nan), 1)} % over "
        f"{len(sh)} cells | {f['C8']} |",
    ]


def _finding(f, data) -> str:
    """When disaggregation pays here, and at which ratio: from the capacities and
    Mooncake's goodput."""
    out = []
    for w in ("chat", "code"):
        d = f["diffs"][w]
        up = [a for a, v in d.items() if v[1] > 0]
        top = max(d, key=lambda a: d[a][0])
        if up:
            out.append(f"on {NAMES[w]} it pays at " + ", ".join(
                f"{a} (capacity {_cap(f['caps'][w], a)} against co-located's {_cap(f['caps'][w], COLOCATED)} req/s; "
                f"per seed {_ci(d[a], 1)} req/s)" for a in up))
        else:
            out.append(f"on {NAMES[w]} it does not pay: co-located's {_cap(f['caps'][w], COLOCATED)} req/s beats "
                       f"every split (the best, {top}, {_cap(f['caps'][w], top)} req/s)")
    mc = data["mooncake"]
    for x, d in f["per_load"].items():
        up = [a for a, v in d.items() if v[1] > 0]
        top = max(d, key=lambda a: d[a][0])
        base = median(mc, "goodput", COLOCATED, x)
        if up:
            out.append(f"on {NAMES['mooncake']} at {_load(mc, x)} it pays ({', '.join(up)}; co-located's goodput "
                       f"{base:.2f} req/s, {top}'s {median(mc, 'goodput', top, x):.2f})")
        else:
            out.append(f"on {NAMES['mooncake']} at {_load(mc, x)} it does not pay (co-located's goodput "
                       f"{base:.2f} req/s, the best split {top}'s {median(mc, 'goodput', top, x):.2f})")
    return "**Finding.** At 8 GPUs and these SLOs, " + "; ".join(out) + "."


def _rules(f, data) -> str:
    """Which pair-routing rule wins where: per workload and split, the rule with the
    highest capacity (synthetic loads; ties by the mean of the seeds' own capacities)
    or median goodput at the heaviest load (the trace), and where the rules tie."""
    wins, ties = [], []
    for w in WORKLOADS:
        ds, cap = data[w], f["caps"].get(w)
        for s in SPLITS:
            def score(r):
                a = arm(s, r)
                if cap is None:
                    return (round(median(ds, "goodput", a, loads(ds)[-1]), 2),)
                c = float(cap.capacity_rps.sel(arm=a))
                return (c if math.isfinite(c) else -1.0, float(cap.capacity_rps_seed.sel(arm=a).fillna(0.0).mean()))
            sc = {r: score(r) for r in ROUTES}
            top = max(sc.values())
            best = [r for r in ROUTES if sc[r] == top]
            label = f"{w} {s[0]}:{s[1]}"
            if len(best) == len(ROUTES):
                ties.append(label)
            else:
                what = (f"capacity {_cap(cap, arm(s, best[0]))} req/s" if cap is not None
                        else f"goodput {top[0]:.2f} req/s at {_load(ds, loads(ds)[-1])}")
                others = ", ".join(f"{r} " + (_cap(cap, arm(s, r)) if cap is not None else f"{sc[r][0]:.2f}")
                                   for r in ROUTES if r not in best)
                wins.append(f"{label}: {' and '.join(best)} ({what}; {others})")
    return ("**Which pair-routing rule wins where** (the capacity, ties by the mean of the seeds' own capacities; "
            "on the trace the goodput at its heavier load): " + ("; ".join(wins) if wins else "nowhere")
            + (f". The three rules tie in {', '.join(ties)}." if ties else ".")
            + f" Transfer-aware routing stays within ±{CLOSE_PCT:g} % of independent routing's goodput (C6: {f['C6']}).")


def _capacity_table(ds, cap) -> list:
    rows = ["| arm | capacity req/s | 95 % interval | seeds' range | Δ against co-located, per seed | "
            "steady at capacity (backlog growth; KV occ. first→last %) |", "|---|---|---|---|---|---|"]
    diffs = capacity_diffs(cap)
    for a in arms(ds):
        seeds = cap.capacity_rps_seed.sel(arm=a).values
        lo, hi = float(cap.capacity_rps_low.sel(arm=a)), float(cap.capacity_rps_high.sel(arm=a))
        c = float(cap.capacity_rps.sel(arm=a))
        rng = "—" if all(map(math.isnan, seeds)) else f"{_f(min(seeds), 0)}–{_f(max(seeds), 0)}"
        if math.isfinite(c):
            st = (f"{median(ds, 'backlog_growth', a, c):+.0f}; {100 * median(ds, 'kv_occupancy_first', a, c):.0f}→"
                  f"{100 * median(ds, 'kv_occupancy_last', a, c):.0f}")
        else:
            st = "—"
        rows.append(f"| {a} | {_cap(cap, a)} | {_f(lo, 0)}–{_f(hi, 0)} | {rng} | "
                    f"{'—' if a == COLOCATED else _ci(diffs[a], 1)} | {st} |")
    return rows


def _goodput_table(ds) -> list:
    head = "| arm | " + " | ".join(_load(ds, x) for x in loads(ds)) + " |"
    rows = [head, "|---" * (len(loads(ds)) + 1) + "|"]
    for a in arms(ds):
        rows.append(f"| {a} | " + " | ".join(_f(median(ds, "goodput", a, x), 1 if load_axis(ds) == "rate_rps" else 2)
                                           for x in loads(ds)) + " |")
    return rows


def _delta_table(ds) -> list:
    head = "| arm | " + " | ".join(_load(ds, x) for x in loads(ds)) + " |"
    rows = [head, "|---" * (len(loads(ds)) + 1) + "|"]
    for a in pd_arms(ds):
        rows.append(f"| {a} | " + " | ".join(_ci(paired(ds, "goodput", a, load=x), 2) for x in loads(ds)) + " |")
    return rows


def _tails_table(ds, x) -> list:
    rows = ["| arm | attainment % | TTFT p50 ms | TTFT p99 ms | TPOT p99 ms | ITL p99 ms | prefill queue | prefill | "
            "transfer | decode queue | busiest link % | transfers | paired % | backlog growth | KV occ. first→last % |",
            "|---" * 15 + "|"]
    for a in arms(ds):
        pt = parts(ds, a, x) if a != COLOCATED else {}

        def m(v, scale=1.0, digits=0):
            return _f(median(ds, v, a, x) * scale, digits)
        pd_cells = (" | ".join(_f(pt[p], 1) for p in ("prefill_queue", "prefill", "transfer", "decode_queue"))
                    + f" | {_f(100 * pt['link_max'], 1)} | {m('transfer_count')} | {m('disaggregated_share', 100)}"
                    if pt else "— | — | — | — | — | — | —")
        rows.append(f"| {a} | {m('attainment', 100, 1)} | {m('ttft_p50')} | {m('ttft_p99')} | {m('tpot_p99', 1, 1)} | "
                    f"{m('itl_p99', 1, 1)} | {pd_cells} | {m('backlog_growth')} | "
                    f"{m('kv_occupancy_first', 100)}→{m('kv_occupancy_last', 100)} |")
    return rows


def _reference_load(ds, cap):
    """The load the per-arm table shows: the co-located arm's capacity (synthetic
    loads; the lowest load when it has none), the heavier time scale on the trace."""
    if cap is None:
        return loads(ds)[-1]
    c = float(cap.capacity_rps.sel(arm=COLOCATED))
    return c if math.isfinite(c) else loads(ds)[0]


def _routes_text(ds, cap) -> str:
    """Which pair-routing rule wins where, in each split: the capacities (synthetic
    loads) or the goodput at every load (the trace)."""
    out = []
    for s in SPLITS:
        if cap is not None:
            vals = {r: float(cap.capacity_rps.sel(arm=arm(s, r))) for r in ROUTES}
            out.append(f"{s[0]}:{s[1]} " + ", ".join(f"{r} {_cap(cap, arm(s, r))}" for r in ROUTES))
        else:
            vals = {r: [median(ds, "goodput", arm(s, r), x) for x in loads(ds)] for r in ROUTES}
            out.append(f"{s[0]}:{s[1]} " + ", ".join(f"{r} " + "/".join(f"{v:.2f}" for v in vals[r]) for r in ROUTES))
    return "; ".join(out)


def document(data, results=None) -> str:
    """The document's text from ``data`` ({workload: Dataset}), read from the folder
    ``results`` (default: the study's, results/disaggregation)."""
    folder = Path(results if results is not None else RESULTS).as_posix()
    f = findings(data)
    chat, code, mc = data["chat"], data["code"], data["mooncake"]
    a0 = chat.attrs
    runs = sum(int(d.attrs["runs"]) for d in data.values())
    wall = sum(float(d.attrs["wall_s"]) for d in data.values())
    cpu = sum(float(d.attrs["cpu_s"]) for d in data.values())
    out = [
        "# Prefill/decode disaggregation against co-location, measured",
        "",
        "Generated by `python -m routesim.disaggregation` (from the results alone: "
        f"`python -m routesim.disaggregation --no-run`) from `{folder}/{{chat,code,mooncake}}.nc`; every "
        "number below is computed from them (routesim/studies/disaggregation/). Issue 42, item 6: at an equal GPU "
        "count, 8 reference replicas co-located against the same 8 split into a prefill and a decode pool "
        "(docs/model.md \"Prefill/decode disaggregation\": the prefill replica computes the prompt, its KV cache "
        "crosses a link to the decode replica, which emits the first token and decodes), at prefill:decode "
        "2:6, 4:4 and 6:2, under each pair-routing rule, on three workloads; the DistServe measure (goodput: "
        "requests per second completed within the TTFT and the TPOT SLO together) and the capacity at it. "
        "`tests/test_disaggregation.py` holds every verdict rule to hand-built inputs and regenerates a reduced "
        "version of the study.",
        "",
        *_summary(f, data),
        "",
        _finding(f, data),
        "",
        _rules(f, data),
        "",
        f"![Goodput, its paired differences and the TTFT's parts](../figures/{STEM}.png)",
        "",
        "## Design",
        "",
        f"`{SWEEP.relative_to(SWEEP.parents[1]).as_posix()}` (`python -m routesim.sweep` runs it alone and prints "
        "every stage's table, the TTFT parts and link figures included): 8 reference replicas "
        f"(`[replica]` of sweeps/batching.toml, `scheduler = \"reserve\"`, {a0['kv_blocks']:,} blocks of "
        f"{a0['block_tokens']} tokens, {a0['max_batched_tokens']:,} tokens an iteration, chunked prefill), "
        "`least_tokens` choosing in each pool (`prefill_policy = decode_policy = \"same\"`), the `[pools]` link "
        "defaults (1 ms latency, 50 GB/s each way per replica, Llama-3.1-8B's 131,072 KV bytes a token). "
        f"SLOs: TTFT ≤ {a0['slo_ttft_ms']:g} ms and TPOT ≤ {a0['slo_tpot_ms']:g} ms (every sweep's default; the goodput "
        "and attainment count a request that meets both). Arms: co-located, and each split under "
        "`route = \"independent\"` (each pool's least_tokens), `\"selective\"` (llm-d's decider: a prompt "
        f"whose uncached part on the chosen decode replica is at most {chat.attrs['threshold_tokens']} tokens is served "
        "whole there) and `\"transfer_aware\"` (the prefill replica minimising its queue plus the transfer at the "
        "link shares it would get).",
        "",
        f"- **Chat**: the chat mix of sweeps/disaggregation.toml (prompts median {a0['chat_prompt_median']:,.0f} "
        f"tokens, outputs median {a0['chat_output_median']:g}; {100 * a0['prefix_probability']:.0f} % of prompts in "
        f"{a0['prefix_groups']} prefix groups), Poisson arrivals at {', '.join(f'{x:g}' for x in loads(chat))} req/s, "
        f"{chat.sizes['seed']} seeds.",
        f"- **Code**: the Azure LLM inference trace 2023's code service (traces/azure-code.csv, 2,000 rows: prompts "
        "median 1,339 and mean 1,987 tokens, outputs median 13) as the length distribution (each request a row, "
        "`workload.lengths`), the same arrivals and prefix groups, at "
        f"{', '.join(f'{x:g}' for x in loads(code))} req/s, {code.sizes['seed']} seeds.",
        f"- **Mooncake**: the excerpt (traces/mooncake-conv.jsonl: prompts mean 13,721 tokens, outputs mean 352, "
        "its 512-token hash ids as prefix blocks) replayed with its own arrivals at time scales "
        f"{', '.join(f'{x:g}' for x in loads(mc))} (3.0 and 4.5 req/s), {mc.sizes['seed']} seeds: the seed "
        "drives only the router's stream, which least_tokens reads only to break ties, so the seeds may "
        "repeat one run (an interval marked exact). A trace has no rate axis, so no capacity: goodput at its "
        "own load.",
        "",
        f"**Window and steady state.** {a0['warmup_s']:g} s of warm-up and a {a0['measure_s']:g} s window for chat and "
        f"code (no long class: the KV cache fills within seconds), {mc.attrs['warmup_s']:g} s + "
        f"{mc.attrs['measure_s']:g} s for Mooncake, drained ({a0['drain_s']:g} s: the cohort finishes, so "
        "an overloaded arm's attainment counts its late requests as misses rather than leaving them out). The "
        "capacity tables give each arm's steady-state figures at its capacity (backlog growth over the "
        "window, KV occupancy in the window's first and last quarter); the per-arm tables give them at one "
        "load for every arm. A capacity is steady by construction: the rule requires every window at or below "
        "it to be steady.",
        "",
        f"**Capacity** is `routesim.capacity`'s current rule, the quantile rule (`capacity.Rule()`: the criterion "
        f"holds in at least {100 * RULE.quantile:.0f} % of the seeds' windows and every window is steady by "
        "routesim.steady's per-run check), with DistServe's criterion, attainment of both SLOs at least "
        f"{100 * CRITERION.bound:.0f} % (`python -m routesim.capacity --attainment 0.9` asks the same), evaluated on the "
        "sweep's loads (so its resolution is the load step: 10 req/s on chat, 20 on code) rather than a "
        "bracket search; a capacity at the highest load is shown as ≥. Each seed's own capacity (the same "
        "rule on its runs, a seed below the lowest load counted as 0) gives the paired differences.",
        "",
        f"**Statistics.** Paired by seed against co-located (or, for the rules, against independent routing in "
        f"the same split): the mean of per-seed differences and its {100 * LEVEL:.0f} % percentile bootstrap interval "
        f"(routesim/studies/intervals.py: `scipy.stats.bootstrap`, {RESAMPLES:,} resamples, fixed generator); a "
        "difference is claimed (**≠**) only when the interval excludes 0.",
        "",
        f"**Budget.** {runs:,} runs, {cpu:.0f} CPU seconds and {wall:.0f} s of wall time in this generation (per "
        "workload: " + ", ".join(f"{w} {float(data[w].attrs['wall_s']):.0f} s" for w in WORKLOADS) + "), on a "
        "2-core machine shared with other work (the first workload's time includes compiling the kernels when "
        "Numba's cache is cold, as in a fresh clone); the design was sized to stay well within 12 minutes there.",
        "",
        PREDICTION,
        "",
    ]
    for w in ("chat", "code"):
        ds, cap = data[w], f["caps"][w]
        ref = _reference_load(ds, cap)
        out += [f"## {NAMES[w][0].upper() + NAMES[w][1:]}", "",
                "### Capacity at the SLOs", "", *_capacity_table(ds, cap), "",
                "### Goodput (req/s, median over seeds)", "", *_goodput_table(ds), "",
                "Δ goodput against co-located (req/s), paired by seed, mean [95 % interval]:", "", *_delta_table(ds), "",
                f"### Every arm at {_load(ds, ref)} (co-located's capacity)", "",
                "Medians over seeds; the TTFT's parts are p50s in ms over the disaggregated requests (per request the "
                "four add up to its TTFT; their p50s need not add up to the TTFT p50); the busiest link is the "
                "replica whose link (bytes out + in over twice the bandwidth) "
                "was busiest; paired % is the share of placements sent to a pair (the selective rule serves the "
                "rest on the decode replica).", "", *_tails_table(ds, ref), "",
                f"**Pair-routing rules** (capacity, req/s): {_routes_text(ds, cap)}.", ""]
    out += ["## The Mooncake excerpt", "", "### Goodput (req/s, median over seeds)", "", *_goodput_table(mc), "",
            "Δ goodput against co-located (req/s), paired by seed, mean [95 % interval]:", "", *_delta_table(mc), ""]
    for x in loads(mc):
        out += [f"### Every arm at {_load(mc, x)}", "", *_tails_table(mc, x), ""]
    out += [f"**Pair-routing rules** (goodput at time scales {'/'.join(f'{x:g}' for x in loads(mc))}, req/s): "
            f"{_routes_text(mc, None)}.", "",
            "## What this leaves out", "",
            "One cluster size (8), one GPU type in both pools and the same `[replica]` settings (per-pool replica "
            "tables are a later increment of issue 42), one routing policy per pool (least_tokens), one selective "
            "threshold, one link (50 GB/s, no shared fabric: docs/model.md lists what the link model leaves out), "
            "the reserve scheduler only (a PD stage with `scheduler = \"vllm\"` is refused), no failures, retries "
            "or stale signals (the engine runs crashes and deadlines with pools; this study does not), one pair "
            "of SLOs, capacities at "
            "the load grid's resolution, and a short window.", ""]
    return "\n".join(out)
