"""docs/scheduler-modes.md from the study's Datasets alone (:mod:`.measure`): every
number in it is computed from ``results/scheduler-modes/{example,mooncake}.nc``."""

import math
from pathlib import Path

from . import RESULTS, STEM
from ..intervals import LEVEL, RESAMPLES, interval_text
from .design import NEAR, SEARCH
from .measure import (CLOSE_PCT, DECODE, KV_READERS, LOOP, LOOP_METRICS, MATERIAL_PCT, METRICS, MODE, RANKED,
                      SCHEDULERS, below_capacity, capacities, capacity_differences, capacity_order_changes,
                      changes, close_counts, closeness, differences, medians, steadiness, verdict_close,
                      verdict_hits, verdict_loop_decode, verdict_loop_ttft, verdict_preemptions, verdict_routing)

SYNC = ("vllm_sync", "reserve")
"""The vllm scheduler in the synchronous loop against reserve: which of P4's reversals
the scheduler makes and which the loop."""

PREDICTION = (
    "**Prediction (written from conformance/VLLM-SCHEDULER.md §6 before the results).** "
    "(P1) *Prefix hits fall a little under vllm* (D6, D8): vLLM hashes and caches every full "
    "block, a prompt's tail filled by generated tokens and every generated block included, and "
    "these blocks, unique to their request, join the cached end of the free queue with the "
    "shared prefixes; under reserve only a prompt's id'd blocks are cached and the rest is free "
    "at release, taken before any cached block is evicted. So vllm evicts shared prefixes "
    "sooner, and hits less; a preempted request's re-admission hits more (D7), but preemptions "
    "are rare. "
    "(P2) *vllm preempts at least as much* (D1–D3): reserve holds a prompt's whole KV from "
    "its admission; vllm takes blocks chunk by chunk behind a gate that reserves nothing, so it "
    "commits more of the pool, and a decode or a continuing chunk that finds no block preempts. "
    "Where the pool never fills, neither preempts. "
    f"(P3) *Below capacity the latency tails are close* (within {CLOSE_PCT:g} %, mean over "
    "seeds) for the policies that read only outstanding requests or tokens, which the two "
    "schedulers account alike; the policies that read a replica's referenced blocks or resident "
    f"prefixes ({', '.join(KV_READERS)}) see different signals (under vllm the referenced blocks "
    "grow chunk by chunk, D1, and a prompt's blocks become hittable when their chunk is "
    "scheduled, D4) and differ most. "
    "(P4) *No routing conclusion changes*: no ordering of two policies by a latency tail "
    "reverses, and no capacity ordering.")

PREDICTION_LOOP = (
    "**Prediction for the loops (written from vLLM 0.30.0's `EngineCore.step_with_batch_queue` and "
    "docs/model.md's mapping of it, after the three-arm runs were started and before any of their results "
    "were read).** With a batch queue of 2, the next batch is scheduled while the previous one executes, "
    "so a request that arrives while a step executes joins one step later than under the synchronous "
    "loop: the batch it would have joined was scheduled before it arrived. The scheduler is the same, "
    "so the delay is one step, tens of milliseconds, added to some requests' wait. "
    "(P5) *The asynchronous loop raises TTFT, most at the tail*: TTFT p99 rises (vllm / vllm_sync − 1 "
    "above 0) and rises more than TTFT p50 in most cells (policy × load below capacity on the example). "
    f"(P6) *It leaves the decode tails alone*: ITL p99 and TPOT p99 within ±{CLOSE_PCT:g} % in every "
    "such cell (a running request decodes one token per step in both loops, its next step scheduled "
    "with a placeholder for the token in flight).")


def _f(x, digits=1, signed=False):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def _ci(v, digits=1):
    return interval_text(v, digits, "exact")


def _cap(c, low, high):
    if math.isnan(c):
        return f"< {low:g}"
    return f"≥ {c:g}" if c >= high else f"{c:g}"


def _pairs(items):
    return "; ".join(f"{a} {'<' if s < 0 else '>'} {b}" for a, b, s in items) or "none"


def _delta_table(ds, rate, pair=MODE, metrics=METRICS):
    diff = differences(ds, None if rate is None else [rate], pair, metrics)
    head = "| policy | " + " | ".join(f"Δ {metrics[m][0]}" + (f" ({metrics[m][2]})" if metrics[m][2] else "")
                                      for m in metrics) + " |"
    rows = [head, "|---" * (len(metrics) + 1) + "|"]
    for p in ds.policy.values:
        rows.append(f"| {p} | " + " | ".join(_ci(diff[(m, str(p), rate)], 0 if m == "preemptions" else 1)
                                               for m in metrics) + " |")
    return rows


def _median_table(ds, rate):
    med = {m: medians(ds, m, rate) for m in ("ttft_p99", "itl_p99", "tpot_p99", "preemptions",
                                             "prefix_hit_rate", "attainment")}
    st = steadiness(ds, rate)
    arms = [str(s) for s in ds.scheduler.values]
    rows = ["| policy | TTFT p99 ms | ITL p99 ms | TPOT p99 ms | preemptions | prefix hit % | attainment % | "
            "backlog growth | KV occ. first→last % |", "|---|---|---|---|---|---|---|---|---|"]
    for p in ds.policy.values:
        p = str(p)

        def both(m, scale=1.0, digits=0):
            return " / ".join(_f(med[m][(s, p)] * scale, digits) for s in arms)
        growth = " / ".join(_f(st[(s, p)][0], 0) for s in arms)
        occ = " / ".join(f"{_f(st[(s, p)][1] * 100, 0)}→{_f(st[(s, p)][2] * 100, 0)}" for s in arms)
        rows.append(f"| {p} | {both('ttft_p99')} | {both('itl_p99')} | {both('tpot_p99', 1, 1)} | "
                    f"{both('preemptions')} | {both('prefix_hit_rate', 100, 1)} | {both('attainment', 100, 1)} | "
                    f"{growth} | {occ} |")
    return rows


def _changes_table(settings, pair=MODE):
    rows = [f"| setting | metric | pairs ordered under {pair[1]} | kept under {pair[0]} | lost | gained | reversed |",
            "|---|---|---|---|---|---|---|"]
    for label, per in settings.items():
        for m, c in per.items():
            rows.append(f"| {label} | {METRICS[m][0]} | {c['decided']} | {c['kept']} | {_pairs(c['lost'])} | "
                        f"{_pairs(c['gained'])} | {_pairs(c['reversed'])} |")
    return rows


def _spread(diff, metric, rates):
    """(lowest mean, highest mean, intervals that exclude 0, cells) of ``metric`` over
    the cells of ``diff`` at ``rates``."""
    vals = [v[0] for (m, _, r), v in diff.items() if m == metric and r in rates and math.isfinite(v[0])]
    n = sum(1 for (m, _, r), v in diff.items() if m == metric and r in rates and (v[1] > 0 or v[2] < 0))
    cells = sum(1 for (m, _, r) in diff if m == metric and r in rates)
    return (min(vals) if vals else math.nan, max(vals) if vals else math.nan, n, cells)


def findings(data):
    """Everything the document's verdicts rest on, as plain values (the tests read it)."""
    ex, mc = data["example"], data["mooncake"]
    rates = [float(r) for r in ex.rate_rps.values if bool(ex.arrivals.sel(rate_rps=r).notnull().all())]
    cap = capacities(ex)
    best_reserve = max((c for (s, _), (c, _, _) in cap.items() if s == "reserve" and math.isfinite(c)),
                       default=math.nan)
    below = below_capacity(ex, best_reserve)
    dx = differences(ex, rates)
    dm = differences(mc)
    settings = {f"example, {r:g} req/s": {m: changes(ex, m, r) for m in RANKED} for r in rates}
    settings["Mooncake"] = {m: changes(mc, m) for m in RANKED}
    strict = {f"example, {r:g} req/s": {m: changes(ex, m, r, material=0.0) for m in RANKED} for r in rates}
    strict["Mooncake"] = {m: changes(mc, m, material=0.0) for m in RANKED}
    cap_changes = capacity_order_changes(ex, SEARCH.resolution)
    dlx = differences(ex, rates, LOOP, LOOP_METRICS)
    return {
        "rates": rates, "below": below, "seeds": ex.sizes["seed"], "best_reserve": best_reserve, "diff_example": dx, "diff_mooncake": dm,
        "settings": settings, "strict": strict, "capacity_changes": cap_changes,
        "close": close_counts(dx, below), "capacity_diff": capacity_differences(ex),
        "P1": verdict_hits({**dx, **{(m, p, "mc"): v for (m, p, _), v in dm.items()}}),
        "P2": verdict_preemptions(ex, rates),
        "P2_mooncake": verdict_preemptions(mc),
        "P3": verdict_close(dx, below),
        "P4": verdict_routing(settings, cap_changes),
        "diff_loop_example": dlx, "diff_loop_mooncake": differences(mc, None, LOOP, LOOP_METRICS),
        "loop_close": close_counts(dlx, below, DECODE), "capacity_diff_loop": capacity_differences(ex, LOOP),
        "capacity_changes_loop": capacity_order_changes(ex, SEARCH.resolution, LOOP),
        "settings_loop": _settings(ex, mc, rates, LOOP), "settings_sync": _settings(ex, mc, rates, SYNC),
        "P5": verdict_loop_ttft(dlx, below),
        "P6": verdict_loop_decode(dlx, below),
        "wall": {name: {s: float(d.attrs[f"wall_s_{s}"]) for s in SCHEDULERS} for name, d in data.items()},
        "cpu": {name: {s: float(d.attrs[f"cpu_s_{s}"]) for s in SCHEDULERS} for name, d in data.items()},
        "runs": {name: {s: int(d.attrs[f"runs_{s}"]) for s in SCHEDULERS} for name, d in data.items()},
    }


def _settings(ex, mc, rates, pair):
    """{setting: {metric: changes()}} of ``pair`` over round 1's loads and Mooncake."""
    out = {f"example, {r:g} req/s": {m: changes(ex, m, r, pair=pair) for m in RANKED} for r in rates}
    out["Mooncake"] = {m: changes(mc, m, pair=pair) for m in RANKED}
    return out


def _cost(f, a, b):
    """Arm a's CPU time over arm b's on the example: its arms run after Mooncake's, whose
    times include each engine's first compilation when Numba's cache is cold."""
    return f["cpu"]["example"][a] / f["cpu"]["example"][b]


def _reversed_pairs(f, key="settings"):
    """Every reversed ordering of ``f[key]``: [(setting, metric, a, b, the older arm's sign)]."""
    return [(label, m, a, b, s) for label, per in f[key].items() for m, c in per.items()
            for a, b, s in c["reversed"]]


def _recommendation(f):
    lo = hi = _cost(f, "vllm", "reserve")
    c = f["close"]
    beyond = [f"{p} {METRICS[m][0]} at {r:g} req/s {_ci(v)}" for (m, p, r), v in f["diff_example"].items()
              if m in RANKED and r in f["below"] and p not in KV_READERS and closeness(v) == "differs"]
    hits = max(abs(v[0]) for k, v in f["diff_example"].items() if k[0] == "prefix_hit_rate")
    rev = _reversed_pairs(f)
    readers = sorted({p for _, _, a, b, _ in rev for p in (a, b) if p in KV_READERS})
    only_readers = all(a in KV_READERS or b in KV_READERS for _, _, a, b, _ in rev)
    speed = (f"the vllm mode costs {lo:.1f}× reserve's CPU time on the example's runs here (the benchmark's "
             "one-thread figure on 60 s runs: `python -m benchmarks --only batching`, docs/performance.md)")
    if rev and not only_readers:
        return ("**Recommendation: make `scheduler = \"vllm\"` the default.** A routing conclusion between "
                "policies that read no KV blocks reverses between the schedulers (above), so the page's "
                f"semantics can mislead about which policy to choose; vllm is the one shown to schedule as vLLM "
                f"does (tests/test_vllm_engine.py: vLLM's own recorded schedules, bit for bit), and {speed}.")
    text = ("**Recommendation: keep `scheduler = \"reserve\"` the default for now, and run with `\"vllm\"` "
            "whatever must hold for vLLM itself.** " + speed[0].upper() + speed[1:] + ": as the default it would "
            "make every sweep, capacity search and test that much slower. Below capacity, of the latency-tail "
            f"cells (policy × metric × load) of the policies that read only outstanding requests or tokens, "
            f"{c[('others', 'close')]} are shown within ±{CLOSE_PCT:g} % of vLLM's semantics, "
            f"{c[('others', 'differs')]} beyond"
            + (f" ({', '.join(beyond)})" if beyond else "")
            + f" and {c[('others', 'undecided')]} are undecided with {f['seeds']} seeds; the prefix hit rate moves by "
            f"at most {hits:.2f} points on the example; and ")
    if rev:
        text += ("no ordering of two policies that read no KV blocks reverses. But the orderings that "
                 f"involve {', '.join(readers)} can reverse (\"Routing conclusions\" below): those policies "
                 "read a replica's referenced blocks or cached prefixes, which under reserve count a prompt's "
                 "whole reservation from its admission and under vllm only the blocks its scheduled chunks "
                 "reached (D1, D4), so their scores, and what they conclude, are the schedulers' own. A study "
                 "of a KV- or prefix-aware policy, a study under KV pressure (preemptions, P2), and any "
                 "absolute number promised for vLLM (a capacity to provision, a TTFT) should be run, or "
                 "checked, with `scheduler = \"vllm\"`. When the vllm engine's cost comes within about 2× "
                 "of reserve's, it should become the default: it is the semantics that was checked.")
    else:
        text += ("no routing conclusion measured here reverses (P4). The vllm mode is the one shown to "
                 "schedule as vLLM does (tests/test_vllm_engine.py: vLLM's own recorded schedules, bit for bit), so any absolute number promised "
                 "for vLLM (a capacity to provision, a TTFT, a preemption count) and any study under KV "
                 "pressure should be run, or checked, with it. When its cost comes within about 2× of "
                 "reserve's, it should become the default.")
    return text


def document(data, results=None) -> str:
    """The document's text from ``data`` ({workload: Dataset}), read from the folder
    ``results`` (default: the study's, results/scheduler-modes)."""
    folder = Path(results if results is not None else RESULTS).as_posix()
    ex, mc = data["example"], data["mooncake"]
    f = findings(data)
    rates, below = f["rates"], f["below"]
    cap = capacities(ex)
    low, high = float(ex.attrs["capacity_low"]), float(ex.attrs["capacity_high"])
    n_ex, n_mc = ex.sizes["seed"], mc.sizes["seed"]
    spread = {m: _spread(f["diff_example"], m, rates) for m in METRICS}
    out = [
        "# What the vLLM scheduler and its asynchronous loop change, measured",
        "",
        "Generated by `python -m routesim.scheduler_modes` (from the results alone: "
        f"`python -m routesim.scheduler_modes --no-run`) from `{folder}/example.nc` and "
        "`mooncake.nc`; every number below is computed from them (routesim/studies/scheduler_modes/). "
        "`[replica] scheduler = \"reserve\"` (the default) is the design page's replica "
        "(token-model.md §2: a prompt's whole KV reserved at admission); `\"vllm\"` is vLLM V1 0.30.0's "
        "scheduler and KV-cache manager (docs/model.md, conformance/VLLM-SCHEDULER.md: the differences "
        "D1–D15). Three arms, paired by seed: `reserve`; `vllm`, the vllm mode as a user gets it, in vLLM "
        "0.30.0's default asynchronous loop (`async_scheduling = true`: a batch queue of 2, the next batch "
        "scheduled while the previous one executes, docs/model.md); and `vllm_sync`, the same scheduler in "
        "vLLM's synchronous loop (`async_scheduling = false`). Issue 22, item 3: how far today's semantics are "
        "from vLLM's on the example cluster and on the Mooncake excerpt, and whether any routing conclusion "
        "changes (P1–P4, vllm against reserve); issue 40: what the asynchronous loop changes against the "
        "synchronous one (P5, P6) and which loop should be the default. "
        "`tests/test_scheduler_modes.py` recomputes P1, P2 on Mooncake and P5 from reduced runs of this "
        "design (3 policies, a 30 s warm-up, round 1 of the capacity search); P4's reduced runs gave "
        "\"holds with qualification\" under the synchronous loop and \"holds\" under the asynchronous one, so "
        "they do not stand for the full design's P4 (the test records it as an expected failure); P2 on the "
        "example, P3 and P6 rest on cells near or above capacity, or on small differences, that a reduced run "
        "does not reach, and their rules are tested on small Datasets.",
        "",
        "| prediction | measured | verdict |",
        "|---|---|---|",
        f"| P1. prefix hits lower under vllm | Δ hit rate on the example {_f(spread['prefix_hit_rate'][0], 2, True)} "
        f"to {_f(spread['prefix_hit_rate'][1], 2, True)} pp over policies and loads "
        f"({spread['prefix_hit_rate'][2]} of {spread['prefix_hit_rate'][3]} intervals exclude 0) | {f['P1']} |",
        f"| P2. vllm preempts at least as much | Δ preemptions on the example {_f(spread['preemptions'][0], 1, True)} "
        f"to {_f(spread['preemptions'][1], 1, True)} per run ({spread['preemptions'][2]} of "
        f"{spread['preemptions'][3]} intervals exclude 0); on Mooncake "
        + ", ".join(f"{p} {_ci(f['diff_mooncake'][('preemptions', p, None)], 0)}" for p in map(str, mc.policy.values)
                    if (mc.preemptions.sel(policy=p) > 0).any())
        + f" | example: {f['P2']}; Mooncake: {f['P2_mooncake']} |",
        f"| P3. below capacity, tails within ±{CLOSE_PCT:g} % except the block readers | "
        f"at {', '.join(f'{r:g}' for r in below)} req/s, the TTFT, ITL and TPOT p99 of the "
        f"{ex.sizes['policy'] - len([p for p in ex.policy.values if p in KV_READERS])} other policies: "
        f"{f['close'][('others', 'close')]} cells shown within ±{CLOSE_PCT:g} %, "
        f"{f['close'][('others', 'differs')]} shown beyond, {f['close'][('others', 'undecided')]} undecided "
        f"(means {_f(min(_spread(f['diff_example'], m, below)[0] for m in RANKED), 1, True)} to "
        f"{_f(max(_spread(f['diff_example'], m, below)[1] for m in RANKED), 1, True)} % over all policies); "
        f"block readers: {f['close'][('readers', 'close')]} within, {f['close'][('readers', 'differs')]} "
        f"beyond, {f['close'][('readers', 'undecided')]} undecided | {f['P3']} |",
        f"| P4. no routing conclusion changes | reversed orderings: "
        f"{sum(len(c['reversed']) for s in f['settings'].values() for c in s.values())} ("
        + (", ".join(f"{a} vs {b}" for a, b in sorted({(a, b) for _, _, a, b, _ in _reversed_pairs(f)})) or "none")
        + f"; without the {MATERIAL_PCT:g} % bound: "
        f"{sum(len(c['reversed']) for s in f['strict'].values() for c in s.values())}); lost or gained: "
        f"{sum(len(c['lost']) + len(c['gained']) for s in f['settings'].values() for c in s.values())} of "
        f"{sum(c['decided'] for s in f['settings'].values() for c in s.values())} ordered pairs; capacity "
        f"orderings reversed: {len(f['capacity_changes'])} | {f['P4']} |",
        _p5_row(f),
        _p6_row(f),
        "",
        _recommendation(f),
        "",
        _loop_recommendation(f),
        "",
        "## Design",
        "",
        f"**The example cluster** (`sweeps/scheduler-modes.toml`): `sweeps/batching.toml`'s 8 reference "
        f"replicas, default workload and replica, all {ex.sizes['policy']} policies, the three arms, "
        f"{n_ex} seeds (paired: a seed gives every policy and every arm the same workload), "
        f"{ex.attrs['warmup_s']:g} s of warm-up, a {ex.attrs['measure_s']:g} s window, drained "
        f"(drain_s {ex.attrs['drain_s']:g} s: the cohort finishes). The capacity at the SLO is "
        "`routesim.capacity`'s search (the median over seeds of TTFT p99 at most the sweep's "
        f"{ex.attrs['slo_ttft_ms']:g} ms, at that rate and every lower one evaluated): round 1 at "
        f"{', '.join(f'{r:g}' for r in rates)} req/s for every policy and arm, then every "
        f"{SEARCH.resolution:g} req/s inside each row's bracket (`python -m routesim.capacity "
        f"sweeps/scheduler-modes.toml --points {SEARCH.points} --resolution {SEARCH.resolution:g}` "
        "runs the same search); the fixed-load comparisons read round 1's runs. "
        + " + ".join(str(f["runs"]["example"][s]) for s in SCHEDULERS) + " runs (reserve, vllm_sync, vllm).",
        "",
        f"**The Mooncake excerpt** (`sweeps/scheduler-modes-mooncake.toml`): `sweeps/mooncake-replay.toml`'s "
        f"replay (8 replicas, time scale 1.5, {mc.attrs['warmup_s']:g} s + {mc.attrs['measure_s']:g} s of the "
        f"trace, its {mc.sizes['policy']} policies) with the three "
        f"arms, {n_mc} seeds, drained (600 s; mooncake-replay.toml stops at the horizon, so its "
        "printed figures differ). The trace brings its own arrivals: the seed drives only the router's "
        "stream, so only power_of_d varies with it; the other four policies repeat one run and their "
        "differences are exact for this trace, not estimates. "
        + (f"There is no capacity at the SLO here: no policy meets the {mc.attrs['slo_ttft_ms']:g} ms TTFT p99 "
           f"on this excerpt in any arm (the lowest median is {min(medians(mc, 'ttft_p99').values()):,.0f} ms), "
           "so the trace is compared at its own load." if min(medians(mc, "ttft_p99").values())
           > float(mc.attrs["slo_ttft_ms"]) else "The trace is compared at its own load."),
        "",
        f"**Budget.** On the example, vllm runs cost {_cost(f, 'vllm', 'reserve'):.1f}× reserve's CPU time and "
        f"vllm_sync runs {_cost(f, 'vllm_sync', 'reserve'):.1f}× (Mooncake's arms run first, so their times include "
        "each engine's first compilation when Numba's cache is cold, as in a fresh clone; "
        "this run, CPU seconds of both threads, then wall seconds on a machine shared with other work: "
        + "; ".join(f"{name} " + ", ".join(f"{s} {f['cpu'][key][s]:.0f} s, {f['wall'][key][s]:.0f} s"
                                             for s in SCHEDULERS)
                    for name, key in (("example", "example"), ("Mooncake", "mooncake")))
        + "; at most the sum of these CPU seconds, "
        f"{sum(v for d in f['cpu'].values() for v in d.values()) / 60:.0f} CPU minutes, on 2 idle cores about half "
        "that in wall time). The third arm, vllm_sync, costs about as much as vllm; the grid was kept whole for it "
        "so that every comparison is paired on the same runs. "
        f"Hence {n_ex} seeds, a {ex.attrs['warmup_s']:g} s warm-up (the example's 1,200 s lets the long class fill the KV cache "
        "fully: README, \"Capacity at an SLO\"; the steady-state figures are printed beside every "
        "result, and a window that is not steady is one whose KV occupancy still rises) and a capacity "
        f"resolution of {SEARCH.resolution:g} req/s.",
        "",
        f"**Statistics.** vllm − reserve per seed (the tails relative: vllm / reserve − 1; the hit "
        "rate in percentage points; preemptions in counts per run), its mean over seeds and a "
        f"{LEVEL:.0%} percentile bootstrap interval (`scipy.stats.bootstrap`, {RESAMPLES:,} resamples of "
        "the seeds, fixed generator). A difference is claimed (**≠**) only when the interval excludes "
        f"0; with {n_ex} seeds the interval is coarse, so an unclaimed difference is not shown to be 0. "
        "A *routing conclusion* is an ordering of two policies by a latency tail: a lower than b when the "
        "interval of the per-seed difference a − b lies below 0. It is *kept* when vllm orders the pair "
        "the same way, *lost* when vllm cannot order it, *gained* when only vllm can, *reversed* when "
        "vllm orders it the other way. An ordering counts only when it is also material: the two policies' "
        f"tails differ by at least {MATERIAL_PCT:g} % (mean over seeds of a / b − 1), the bound P3 calls "
        "close; the counts without that bound are given beside.",
        "",
        PREDICTION,
        "",
        PREDICTION_LOOP,
        "",
        f"![The three arms](../figures/{STEM}.png)",
        "",
        "## The example cluster",
        "",
        "### Capacity at the SLO",
        "",
        "| policy | reserve req/s (seeds' range) | vllm_sync req/s (seeds' range) | vllm req/s (seeds' range) | "
        "Δ vllm − reserve (median rule) | Δ per seed | Δ vllm − vllm_sync (median rule) | Δ per seed | "
        "steady at capacity (backlog growth; KV occ. first→last %, reserve / vllm_sync / vllm) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in ex.policy.values:
        p = str(p)
        cells = []
        for s in SCHEDULERS:
            c, lo, hi = cap[(s, p)]
            rng = "" if math.isnan(lo) else f" ({lo:g}–{hi:g})"
            cells.append(_cap(c, low, high) + rng)
        dc, dci = f["capacity_diff"][p]
        lc, lci = f["capacity_diff_loop"][p]
        st = []
        for s in SCHEDULERS:
            c = cap[(s, p)][0]
            if math.isnan(c):
                st.append("—")
                continue
            g, a, b = steadiness(ex, c)[(s, p)]
            st.append(f"{g:+.0f}; {a * 100:.0f}→{b * 100:.0f}")
        out.append(f"| {p} | {' | '.join(cells)} | {_f(dc, 0, True)} | {_ci(dci)} | {_f(lc, 0, True)} | {_ci(lci)} | "
                   f"{' / '.join(st)} |")
    moved = [p for p, (dc, _) in f["capacity_diff"].items() if math.isfinite(dc) and abs(dc) > SEARCH.resolution]
    out += [
        "",
        (f"Between vllm and reserve, capacities move by more than the {SEARCH.resolution:g} req/s resolution for "
         f"{', '.join(moved)}." if moved else
         f"No policy's capacity moves by more than the search's {SEARCH.resolution:g} req/s resolution.")
        + (" Capacity orderings of two policies that reverse: "
           + "; ".join(f"{a} − {b}: {dr:+g} under reserve, {dv:+g} under vllm" for a, b, dr, dv in f["capacity_changes"])
           + "." if f["capacity_changes"] else " No ordering of two policies by capacity reverses."),
        "",
        "### At fixed loads",
        "",
        "Per load, the spread over the policies of the mean per-seed difference (vllm − reserve; the loops "
        "apart in the next section) and how "
        "many of the policies' intervals exclude 0:",
        "",
        "| req/s | " + " | ".join(f"Δ {METRICS[m][0]}" + (f" ({METRICS[m][2]})" if METRICS[m][2] else "")
                                 for m in METRICS) + " |",
        "|---" * (len(METRICS) + 1) + "|",
    ]
    for r in rates:
        cells = []
        for m in METRICS:
            a, b, n, c = _spread(f["diff_example"], m, [r])
            d = 0 if m == "preemptions" else (2 if m == "prefix_hit_rate" else 1)
            cells.append(f"{_f(a, d, True)} to {_f(b, d, True)} ({n} of {c} ≠)")
        out.append(f"| {r:g} | " + " | ".join(cells) + " |")
    for r in (NEAR, rates[-1]):
        out += ["", f"**At {r:g} req/s** ({r / f['best_reserve']:.2f} × the best reserve capacity), medians over "
                "seeds, reserve / vllm_sync / vllm:", "", *_median_table(ex, r), "",
                "vllm − reserve, paired by seed, mean [95 % interval]:", "", *_delta_table(ex, r)]
    out += [
        "",
        "## The Mooncake excerpt",
        "",
        "Medians over seeds, reserve / vllm_sync / vllm:",
        "",
        *_median_table(mc, None),
        "",
        "vllm − reserve, paired by seed, mean [95 % interval] (exact: the seeds repeat one run):",
        "",
        *_delta_table(mc, None),
        "",
        *_loop_section(f, ex, mc, rates),
        "## Routing conclusions",
        "",
        "Orderings of two policies by each latency tail, per setting (example: round 1's loads), under "
        "reserve and under vllm:",
        "",
        *_changes_table(f["settings"]),
        "",
        _reading(f),
        "",
        _attribution(f),
        "",
        "## What this leaves out",
        "",
        f"One cluster shape and one trace; {n_ex} seeds on the example, so the intervals are coarse and "
        f"small differences go unclaimed; a {ex.attrs['warmup_s']:g} s warm-up, so near and above capacity the KV cache is "
        "still filling in some windows (their steady-state figures are printed above); no failure, "
        "retry, signal-staleness or heterogeneity scenario (the vllm mode runs them all; they are not "
        f"compared here); the capacity search's {SEARCH.resolution:g} req/s resolution; the engine loop's "
        "own timing (ingress, output processing, a step's CPU part: issue 40, item 3) left at zero in every "
        "arm (the asynchronous loop refuses it).",
        "",
    ]
    return "\n".join(out)


def _reading(f):
    rev = [(label, m, c["reversed"]) for label, per in f["settings"].items() for m, c in per.items() if c["reversed"]]
    strict = sum(len(c["reversed"]) for s in f["strict"].values() for c in s.values())
    moved = sum(len(c["lost"]) + len(c["gained"]) for s in f["settings"].values() for c in s.values())
    text = "**Reading.** "
    if rev:
        text += ("These orderings reverse: " + "; ".join(
            f"{label}, {METRICS[m][0]}: {_pairs(items)} under reserve" for label, m, items in rev) + ". ")
    else:
        text += "No material ordering of two policies by a latency tail reverses between the schedulers. "
    text += (f"Without the {MATERIAL_PCT:g} % bound, {strict} orderings reverse: the others are orderings by "
             f"a margin under {MATERIAL_PCT:g} %, such as the ITL p99 of loaded replicas, which is about one "
             "full step for every policy. "
             f"{moved} orderings are decided under one scheduler and not the other (listed in the table): pairs "
             f"near a tie, or whose interval over {f['seeds']} seeds touches 0 under one of them.")
    return text


def _p5_row(f):
    """The predictions table's row of P5 (the loops' TTFT)."""
    d, below = f["diff_loop_example"], f["below"]
    cells = [(p, r) for (m, p, r) in d if m == "ttft_p99" and r in below]
    p99 = [d[("ttft_p99", p, r)][0] for p, r in cells]
    p50 = [d[("ttft_p50", p, r)][0] for p, r in cells]
    shown = sum(1 for p, r in cells if d[("ttft_p99", p, r)][1] > 0)
    tail = sum(1 for a, b in zip(p99, p50) if a > b)
    return (f"| P5. async raises TTFT, most at the tail | at {', '.join(f'{r:g}' for r in below)} req/s, "
            f"Δ TTFT p99 (vllm / vllm_sync − 1) {_f(min(p99), 1, True)} to {_f(max(p99), 1, True)} % "
            f"(mean {_f(sum(p99) / len(p99), 1, True)}; {shown} of {len(cells)} intervals above 0), "
            f"Δ TTFT p50 {_f(min(p50), 1, True)} to {_f(max(p50), 1, True)} %; the p99 rises more than the "
            f"p50 in {tail} of {len(cells)} cells | {f['P5']} |")


def _p6_row(f):
    """The predictions table's row of P6 (the loops' decode tails)."""
    d, below, c = f["diff_loop_example"], f["below"], f["loop_close"]
    vals = [d[(m, p, r)][0] for (m, p, r) in d if m in DECODE and r in below]
    n = sum(c.values())
    return (f"| P6. async leaves ITL and TPOT p99 within ±{CLOSE_PCT:g} % | at the same loads, "
            f"{c[('others', 'close')] + c[('readers', 'close')]} of {n} cells shown within, "
            f"{c[('others', 'differs')] + c[('readers', 'differs')]} beyond, "
            f"{c[('others', 'undecided')] + c[('readers', 'undecided')]} undecided (means "
            f"{_f(min(vals), 1, True)} to {_f(max(vals), 1, True)} %) | {f['P6']} |")


def _loop_recommendation(f):
    """The closing note on the loops: which should be the vllm mode's default, with the
    figures it rests on."""
    d, below = f["diff_loop_example"], f["below"]
    p99 = [v[0] for (m, _, r), v in d.items() if m == "ttft_p99" and r in below]
    moved = [(p, dc) for p, (dc, _) in f["capacity_diff_loop"].items() if math.isfinite(dc) and dc != 0]
    p50 = [v[0] for (m, _, r), v in d.items() if m == "ttft_p50" and r in below]
    e2e = [v[0] for (m, _, r), v in d.items() if m == "e2e_p99" and r in below]
    rev = _reversed_pairs(f, "settings_loop")
    return ("**Which loop should be the vllm mode's default: the asynchronous one (`async_scheduling = true`), "
            "as now.** It is vLLM 0.30.0's own default, the loop a user's server runs unless told otherwise, so "
            "an absolute number promised for vLLM (a TTFT, a capacity) should come from it; the synchronous loop "
            "stays one key away for a server run with `--no-async-scheduling` (or an executor without it). "
            f"What it changes against the synchronous loop here, below capacity over policies and loads: TTFT p50 by "
            f"{_f(min(p50), 1, True)} to {_f(max(p50), 1, True)} %, TTFT p99 by {_f(min(p99), 1, True)} to "
            f"{_f(max(p99), 1, True)} % (P5: {f['P5']}), E2E p99 by {_f(min(e2e), 1, True)} to {_f(max(e2e), 1, True)} "
            "%; "
            "the capacity at the SLO "
            + (("by " + ", ".join(f"{p} {dc:+g}" for p, dc in moved) + " req/s") if moved else "of no policy")
            + f"; {len(rev)} material orderings of two policies reverse between the loops; and it costs "
            f"{_cost(f, 'vllm', 'vllm_sync'):.2f}× the synchronous loop's CPU time on the example's runs. The one "
            "step a request may wait is paid by every request that finds a replica with room, so it weighs most "
            "where the TTFT is short; a study whose conclusion rests on TTFT below saturation should say which "
            "loop its server runs.")


def _loop_section(f, ex, mc, rates):
    """The section on the loops: vllm (asynchronous) against vllm_sync, per load on the
    example, at NEAR per policy, on Mooncake, and the capacities."""
    d = f["diff_loop_example"]
    out = ["## The asynchronous loop against the synchronous one", "",
           "vllm − vllm_sync: the same scheduler, paired by seed (the tails relative: vllm / vllm_sync − 1). "
           "Per load on the example, the spread over the policies of the mean per-seed difference and how many "
           "intervals exclude 0:", "",
           "| req/s | " + " | ".join(f"Δ {LOOP_METRICS[m][0]} (%)" for m in LOOP_METRICS) + " |",
           "|---" * (len(LOOP_METRICS) + 1) + "|"]
    for r in rates:
        cells = []
        for m in LOOP_METRICS:
            a, b, n, c = _spread(d, m, [r])
            cells.append(f"{_f(a, 1, True)} to {_f(b, 1, True)} ({n} of {c} ≠)")
        out.append(f"| {r:g} | " + " | ".join(cells) + " |")
    out += ["", f"**At {NEAR:g} req/s**, vllm − vllm_sync, paired by seed, mean [95 % interval]:", "",
            *_delta_table(ex, NEAR, LOOP, LOOP_METRICS), "",
            "**On the Mooncake excerpt**, vllm − vllm_sync (exact: the seeds repeat one run, power_of_d apart):",
            "", *_delta_table(mc, None, LOOP, LOOP_METRICS), ""]
    moved = [p for p, (dc, _) in f["capacity_diff_loop"].items() if math.isfinite(dc) and abs(dc) > SEARCH.resolution]
    out += [("Capacities at the SLO (the table above) move between the loops by more than the "
             f"{SEARCH.resolution:g} req/s resolution for {', '.join(moved)}." if moved else
             f"No policy's capacity at the SLO moves between the loops by more than the {SEARCH.resolution:g} req/s "
             "resolution (the table above).")
            + (" Capacity orderings that reverse between the loops: " + "; ".join(
                f"{a} − {b}: {dr:+g} under vllm_sync, {dv:+g} under vllm" for a, b, dr, dv in f["capacity_changes_loop"])
               + "." if f["capacity_changes_loop"] else " No capacity ordering of two policies reverses between them."),
            ""]
    return out


def _attribution(f):
    """Which of the reversed orderings (vllm against reserve) the scheduler makes and
    which the loop: each one looked up under vllm_sync against reserve."""
    rev = _reversed_pairs(f)
    sync = {(label, m, a, b) for label, m, a, b, _ in _reversed_pairs(f, "settings_sync")}
    loop = _reversed_pairs(f, "settings_loop")
    text = "**The scheduler or the loop.** "
    if rev:
        by_sched = [r for r in rev if r[:4] in sync]
        text += (f"Of the {len(rev)} reversed orderings above, {len(by_sched)} reverse already between vllm_sync and "
                 f"reserve (the scheduler's) and {len(rev) - len(by_sched)} do not. ")
    text += (f"Between vllm_sync and reserve, {len(sync)} material orderings reverse"
             + (" (" + "; ".join(sorted({f"{a} vs {b}" for _, _, a, b in sync})) + ")" if sync else "")
             + f"; between vllm and vllm_sync, {len(loop)}"
             + (" (" + "; ".join(f"{label}, {METRICS[m][0]}: {a} {'<' if s < 0 else '>'} {b} under vllm_sync"
                                 for label, m, a, b, s in loop) + ")" if loop else "") + ".")
    return text
