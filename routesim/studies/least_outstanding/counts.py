"""Claim 1 of the least-outstanding-routing study: counts lie when costs vary.
sweeps/token-routing.toml (results/token-routing/<stage>.nc): the main design (stage
``counts``, policy × rate_rps × seed, and the clairvoyant arm ``exact``), the long
class's two traits separated (``prompt-only``, ``output-only``, ``neither`` and their
``-exact`` arms; "both" is the main design), the Azure lengths (``azure``), a 50 ms
scrape (``signals``: policy × seed × signal_mode) and the step-cost sensitivity
(``prefill-x2``, ``prefill-x4``, ``chunk-2048``); and the seed's worked two-replica
example computed from the engine's step-cost formula. Comparisons are paired by seed
under :data:`.common.RULE`."""

from pathlib import Path

import numpy as np
import xarray as xr
from matplotlib.figure import Figure

from ... import step_cost
from ..intervals import LEVEL
from .common import (ON_PAGE, PAGE_ARM, ADDED, FIGURES, MECHANISM, RELATIVE_BOUNDS, STEADY, capacity, compare, departures, details, in_short,
                     page_table, reading,
                     on_trace, open_stage, save, show,
                     steady_table, rate_text, verdict_of, verdicts)

SWEEPS = ("sweeps/token-routing.toml", "sweeps/token-routing-mooncake.toml")
RESULTS = "token-routing"
MOONCAKE = "token-routing-mooncake"
"""The Mooncake condition's results folder (its own sweep file: a trace stage cannot share
token-routing.toml's [grid] rate_rps)."""
POLICIES = ("round_robin", "least_requests", "least_tokens")
BASES = ("least_requests", "round_robin")
COLORS = {"round_robin": "#888888", "least_requests": "#1f77b4", "least_tokens": "#d62728",
          "exact": "#2ca02c"}
METRICS = (("ttft_p99", "TTFT p99", "relative", -1), ("tpot_p99", "TPOT p99", "relative", -1),
           ("attainment", "attainment", "points", +1))
"""The prediction's comparisons, least_tokens against each of :data:`BASES`: (variable,
name, how :func:`.common.compare` compares, the predicted sign of the lead)."""
CELLS = (("neither", "neither"), ("prompt-only", "long prompts only"), ("output-only", "long outputs only"),
         ("counts", "both (the default)"))
"""The factorial's cells: (stage, name); the long class keeps the traits named."""
CONDITIONS = (("fresh", "the baseline (fresh signals)", 41),
              ("periodic", "50 ms periodic scrape", 41),
              ("periodic_local", "50 ms scrape + own placements (periodic_local)", 41),
              ("azure", "Azure conversation lengths (§1.3)", 41),
              ("azure", "Azure lengths at 90 req/s (about 0.9 × their capacity)", 90),
              ("prefill-x2", "prefill ×2", 41), ("prefill-x4", "prefill ×4", 41),
              ("chunk-2048", "max_batched_tokens 2,048", 41),
              ("fresh", "the baseline at 23 req/s", 23), ("prefill-x2-light", "prefill ×2 at 23 req/s", 23),
              ("prefill-x4-light", "prefill ×4 at 23 req/s", 23),
              ("mooncake", "Mooncake excerpt (objective scaled to prompt)", 0))
"""The conditions under which the verdict is recomputed: (name, label, load req/s; 0 for a
trace's own arrivals, whose rate_rps coordinate is 0)."""
LOAD = 41
"""req/s: the mechanism, signal and sensitivity stages' load (0.9 × 46 req/s)."""


def headline_load(loads) -> float:
    """The load (req/s) a headline quotes of a stage run at ``loads``: :data:`LOAD` where
    it ran, else its highest."""
    return LOAD if LOAD in loads else max(loads)

OLD_VERDICT = "holds with qualification"
OLD_DESIGN = ("loads 30–65 req/s placed against a 60 req/s capacity read from 10 s + 50 s windows "
              "without drain (above every policy's sustained capacity at 55 and 65), 16 seeds, a "
              "lead only when every seed agreed; it found a TTFT lead at every load and mostly no "
              "TPOT or attainment lead")
"""The former document's verdict and design (docs/least-outstanding-routing.md before issue 23)."""

STEP = step_cost.defaults(step_cost.linear)
"""The default step cost (token-model.md; sweeps/batching.toml's step_ms), for the worked
example: {step_ms key: ms}."""


def _sci(x) -> str:
    """``x`` as ``%g`` writes it, the exponent without its leading zero (5.4e-5)."""
    return f"{x:g}".replace("e-0", "e-")


def load(root):
    """{stage: Dataset} of sweeps/token-routing.toml under the results root ``root``
    (every length-one axis dropped; ``counts`` keeps rate_rps) and "mooncake", the stage of
    sweeps/token-routing-mooncake.toml (None if not run), with the root itself under
    "root" (for :func:`.common.capacity`); None if stage counts has not run."""
    folder = Path(root) / RESULTS
    if not (folder / "counts.nc").exists():
        return None
    data = {"root": Path(root)}
    for f in sorted(folder.glob("*.nc")):
        ds = open_stage(f)
        if f.stem in ("counts", "exact") and "rate_rps" not in ds.dims:
            ds = ds.expand_dims(rate_rps=[float(ds.attrs["rate_rps"])])
        data[f.stem] = ds
    data["mooncake"] = open_stage(Path(root) / MOONCAKE / "mooncake.nc")
    return data


def _arm(data, stage, policy):
    """A stage's runs of ``policy`` ("exact": its -exact stage's least_tokens)."""
    if policy == "exact":
        ex = "exact" if stage == "counts" else f"{stage}-exact"
        ds = data.get(ex)
        if ds is None:
            return None
        return ds.sel(policy="least_tokens") if "policy" in ds.dims else ds
    ds = data.get(stage)
    if ds is None:
        return None
    return ds.sel(policy=policy) if "policy" in ds.dims else ds


def condition(data, name, load=LOAD):
    """{policy: Dataset over seeds} of one condition at ``load`` (:data:`CONDITIONS`);
    None if not run. round_robin reads no signal: under a scrape its fresh runs (the
    baseline's, stage counts: the same warm-up, window and seeds) stand."""
    counts = data["counts"]
    if name == "fresh":
        if load not in counts.rate_rps.values:
            return None
        return {p: counts.sel(policy=p, rate_rps=load) for p in POLICIES}
    if name in ("periodic", "periodic_local"):
        sig, control = data.get("signals"), condition(data, "fresh", load)
        if sig is None or control is None:
            return None
        one = sig.sel(signal_mode=name) if "signal_mode" in sig.dims else sig
        return {"round_robin": control["round_robin"],
                **{p: one.sel(policy=p) for p in POLICIES if p != "round_robin"}}
    ds = data.get(name)
    if ds is None:
        return None
    if "rate_rps" in ds.dims:
        if load not in ds.rate_rps.values:
            return None
        ds = ds.sel(rate_rps=load)
    elif float(ds.attrs.get("rate_rps", load)) != load:
        return None
    return {p: ds.sel(policy=p) for p in POLICIES}


def comparisons(arms):
    """{(variable, baseline): compare(least_tokens, baseline)} over :data:`METRICS` ×
    :data:`BASES` for one condition's {policy: Dataset over seeds}."""
    return {(var, b): compare(arms["least_tokens"][var].values, arms[b][var].values, how)
            for var, _, how, _ in METRICS for b in BASES}


def verdict_at(comps):
    """The rule's verdict on one set of :func:`comparisons`."""
    return verdict_of([comps[(var, b)][3] for var, _, _, _ in METRICS for b in BASES],
                      [sign for _, _, _, sign in METRICS for b in BASES])


def main_comparisons(data):
    """{rate: comparisons} of the main design (fresh signals, default lengths)."""
    counts = data["counts"]
    return {float(r): comparisons({p: counts.sel(policy=p, rate_rps=r) for p in POLICIES})
            for r in counts.rate_rps.values}


MECHANISM_METRICS = ("ttft_p99",)
"""The seed's mechanism: a count misjudges the work outstanding, so a replica's queue
behind it grows unseen: least_tokens' lower TTFT tail (the wait to be served). The
prediction added TPOT p99 and attainment (:data:`ADDED_WORDS`)."""
ADDED_WORDS = "TPOT p99 and attainment"
AZURE_BASIS = "least_tokens"
"""The policy whose capacity the Azure-length arm's loads are placed against (:mod:`.workloads`)."""


def clauses(data):
    """[(label, comparison, predicted sign, part)] of every main-design comparison
    (least_tokens against least_requests and round_robin, on TTFT p99, TPOT p99 and
    attainment, at every load): :func:`.common.verdicts`' input."""
    return [(f"{name} vs {b} at {r:g}", c[(var, b)], sign, MECHANISM if var in MECHANISM_METRICS else ADDED)
            for r, c in main_comparisons(data).items() for var, name, _, sign in METRICS for b in BASES]


def verdict(data):
    """The rule's verdict on every main-design comparison (:func:`clauses`, all together)."""
    return verdicts(clauses(data))["whole"]


def azure(data):
    """The Azure-length arm in the main design's shape ({"root", "counts"}: stage
    ``azure``, policy × rate_rps × seed, at 41 and 90 req/s), for :func:`clauses`; None
    if it did not run."""
    ds = data.get("azure")
    if ds is None:
        return None
    if "rate_rps" not in ds.dims:
        ds = ds.expand_dims(rate_rps=[float(ds.attrs["rate_rps"])])
    return {"root": data["root"], "counts": ds}


def mooncake(data):
    """The Mooncake condition in the main design's shape (its rate the trace's measured
    one: :func:`.common.on_trace`), or None if it did not run."""
    ds = data.get("mooncake")
    if ds is None:
        return None
    return {"root": data["root"], "counts": on_trace(ds)}


def _unit(how):
    return "%" if how == "relative" else "pp"


def _lead_words(comps):
    """Which comparisons lead, as predicted or against."""
    good, bad = [], []
    for var, name, how, sign in METRICS:
        for b in BASES:
            m, lo, hi, ld = comps[(var, b)]
            if ld == sign:
                good.append(f"{name} vs {b}")
            elif ld == -sign:
                bad.append(f"{name} vs {b}")
    return good, bad


def row(data):
    """(claim, prediction, measured, verdict) for the verdict table."""
    comps = main_comparisons(data)
    hi = max(comps)
    c = comps[hi]
    measured = (f"at {hi:g} req/s least_tokens vs least_requests: TTFT p99 {show(c[('ttft_p99', 'least_requests')])} %, "
                f"TPOT p99 {show(c[('tpot_p99', 'least_requests')])} %; vs round_robin: TTFT p99 "
                f"{show(c[('ttft_p99', 'round_robin')])} %")
    against = [(r, var, name, b) for r, cs in comps.items() for var, name, how, sign in METRICS for b in BASES
               if cs[(var, b)][3] == -sign]
    if against:
        r, var, name, b = against[0]
        how = dict((v, h) for v, _, h, _ in METRICS)[var]
        measured += (f"; against the prediction: {name} vs {b} at {r:g} req/s {show(comps[r][(var, b)])} "
                     f"{_unit(how)}" + (f" (and {len(against) - 1} more)" if len(against) > 1 else ""))
    measured += _azure_words(data)
    return ("1. Counts lie when costs vary",
            "least_tokens beats least_requests and round_robin on TPOT p99, TTFT p99 and attainment",
            measured, verdict(data))


def _azure_words(data) -> str:
    """The Azure-length arm in the verdict row (issue 44 item 4): least_tokens' TTFT p99
    against each baseline at 90 req/s (0.9 × the capacity on those lengths; its 41 req/s
    in the appendix), or "" if it did not run."""
    parts = []
    for load in (90,):
        arms = condition(data, "azure", load)
        if arms is not None:
            c = comparisons(arms)
            parts.append(f"at {load:g} req/s vs least_requests {show(c[('ttft_p99', 'least_requests')])} %, "
                         f"vs round_robin {show(c[('ttft_p99', 'round_robin')])} %")
    return f"; Azure lengths, TTFT p99: {'; '.join(parts)}" if parts else ""


# -- tables ---------------------------------------------------------------------------

def _median(ds, var, scale=1.0):
    return float(np.nanmedian(ds[var].values)) * scale


def main_table(data):
    counts = data["counts"]
    root = data["root"]
    lines = ["| load req/s | vs | ΔTTFT p99 % | ΔTPOT p99 % | ΔITL p99 % | Δattainment pp | verdict here |",
             "|---|---|---|---|---|---|---|"]
    for r in counts.rate_rps.values:
        arms = {p: counts.sel(policy=p, rate_rps=r) for p in POLICIES}
        comps = comparisons(arms)
        v = verdict_at(comps)
        for b in BASES:
            itl = compare(arms["least_tokens"].itl_p99.values, arms[b].itl_p99.values, "relative")
            lines.append(f"| {r:g} ({_against(root, r)}) | {b} | {show(comps[('ttft_p99', b)])} | "
                         f"{show(comps[('tpot_p99', b)])} | {show(itl)} | "
                         f"{show(comps[('attainment', b)], 2)} | {v if b == BASES[0] else ''} |")
    return "\n".join(lines)


def _against(root, rate):
    """'0.93× / 1.03× / 0.91×': the load against each compared policy's capacity."""
    parts = []
    for p in POLICIES:
        c = capacity(root, p)[0]
        parts.append(f"{rate / c:.2f}×" if np.isfinite(c) else "—")
    return " / ".join(parts)


def medians_table(data):
    """Medians over seeds per load and arm (the exact arm beside the three policies)."""
    counts = data["counts"]
    lines = ["| load req/s | arm | TTFT p99 ms | TPOT p99 ms | ITL p99 ms | attainment % | preemptions |",
             "|---|---|---|---|---|---|---|"]
    for r in counts.rate_rps.values:
        for p in (*POLICIES, "exact"):
            one = _arm(data, "counts", p)
            if one is None:
                continue
            one = one.sel(rate_rps=r)
            name = "least_tokens, exact outputs" if p == "exact" else p
            lines.append(f"| {r:g} | {name} | {_median(one, 'ttft_p99'):.0f} | {_median(one, 'tpot_p99'):.1f} | "
                         f"{_median(one, 'itl_p99'):.0f} | {_median(one, 'attainment', 100):.2f} | "
                         f"{_median(one, 'preemptions'):.0f} |")
    return "\n".join(lines)


def mechanism_rows(data):
    """Per factorial cell at :data:`LOAD`: medians of TTFT p99 per arm and the paired
    comparisons (least_tokens vs each base, exact vs least_tokens, on TTFT p99 and
    TPOT p99). Cells not run are left out."""
    out = []
    for stage, name in CELLS:
        arms = {}
        for p in (*POLICIES, "exact"):
            a = _arm(data, stage, p)
            if a is not None and "rate_rps" in a.dims:
                a = a.sel(rate_rps=LOAD) if LOAD in a.rate_rps.values else None
            if a is not None:
                arms[p] = a
        if not all(p in arms for p in POLICIES):
            continue
        row = dict(stage=stage, name=name, arms=arms,
                   lr=compare(arms["least_tokens"].ttft_p99.values, arms["least_requests"].ttft_p99.values),
                   rr=compare(arms["least_tokens"].ttft_p99.values, arms["round_robin"].ttft_p99.values),
                   tpot=compare(arms["least_tokens"].tpot_p99.values, arms["least_requests"].tpot_p99.values))
        if "exact" in arms:
            row["exact"] = compare(arms["exact"].ttft_p99.values, arms["least_tokens"].ttft_p99.values)
        out.append(row)
    return out


def mechanism_table(rows):
    lines = ["| long class keeps | TTFT p99 ms rr / lr / lt / exact | lt vs lr ΔTTFT p99 % | lt vs rr ΔTTFT p99 % "
             "| exact vs lt ΔTTFT p99 % | lt vs lr ΔTPOT p99 % |", "|---|---|---|---|---|---|"]
    for r in rows:
        a = r["arms"]
        meds = " / ".join(f"{_median(a[p], 'ttft_p99'):.0f}" if p in a else "—" for p in (*POLICIES, "exact"))
        lines.append(f"| {r['name']} | {meds} | {show(r['lr'])} | {show(r['rr'])} | "
                     f"{show(r['exact']) if 'exact' in r else '—'} | {show(r['tpot'])} |")
    return "\n".join(lines)


def condition_rows(data):
    """[(name, label, comparisons, verdict, arms, load)] of every condition run."""
    out = []
    for name, label, load in CONDITIONS:
        arms = condition(data, name, load)
        if arms is None:
            continue
        comps = comparisons(arms)
        out.append((name, label, comps, verdict_at(comps), arms, load))
    return out


SATURATED = 0.95
"""A condition whose median KV occupancy over the window's last quarter reaches this
for some policy is beyond its capacity (the cache full): the section says so."""


def saturated(arms):
    return any(_median(a, "kv_occupancy_last") >= SATURATED for a in arms.values())


def _base_of(rows, load):
    """The baseline's comparisons at ``load`` (else at :data:`LOAD`)."""
    for name, _, comps, _, _, at in rows:
        if name == "fresh" and at == load:
            return comps
    return next(comps for name, _, comps, _, _, at in rows if name == "fresh" and at == LOAD)


def condition_table(rows):
    lines = ["| condition | lt vs lr ΔTTFT p99 % | lt vs rr ΔTTFT p99 % | lt vs lr ΔTPOT p99 % | "
             "lt vs lr ΔITL p99 % | KV occupancy, last quarter % (rr / lr / lt) | ranking by median TTFT p99 "
             "(best first) | verdict | survives? |", "|---|---|---|---|---|---|---|---|---|"]
    for name, label, comps, v, arms, load in rows:
        itl = compare(arms["least_tokens"].itl_p99.values, arms["least_requests"].itl_p99.values)
        kv = " / ".join(f"{_median(arms[p], 'kv_occupancy_last', 100):.0f}" for p in POLICIES)
        lines.append(f"| {label} | {show(comps[('ttft_p99', 'least_requests')])} | "
                     f"{show(comps[('ttft_p99', 'round_robin')])} | {show(comps[('tpot_p99', 'least_requests')])} | "
                     f"{show(itl)} | {kv} | {ranking(arms)} | {v} | "
                     f"{'—' if name == 'fresh' else survives(_base_of(rows, load), comps)} |")
    return "\n".join(lines)


def _short(var, b):
    return f"{dict((v, n) for v, n, _, _ in METRICS)[var]} vs {b}"


def survives(base, comps):
    """Whether the baseline's verdict survives in another condition's comparisons:
    "yes" (the same verdict from the same leads), "the verdict, not its leads: …"
    (the same word for other reasons) or "no: …", naming the comparisons whose lead
    changed (→ below / above / none)."""
    word = {-1: "below", 1: "above", 0: "none"}
    changed = [f"{_short(var, b)} → {word[comps[(var, b)][3]]}" for var, _, _, _ in METRICS for b in BASES
               if comps[(var, b)][3] != base[(var, b)][3]]
    if verdict_at(comps) != verdict_at(base):
        return "no: " + ", ".join(changed)
    return "yes" if not changed else "the verdict, not its leads: " + ", ".join(changed)


def ranking(arms, var="ttft_p99"):
    """The policies by median ``var`` (best first), ' < ' between them, '≈' where the
    paired comparison of neighbours is not a lead."""
    order = sorted(arms, key=lambda p: _median(arms[p], var))
    text = order[0]
    for a, b in zip(order, order[1:]):
        lead = compare(arms[b][var].values, arms[a][var].values)[3]
        text += (" < " if lead else " ≈ ") + b
    return text


def steady_rows(data):
    """A Dataset (condition × policy × seed) of the steady-state figures of every
    condition and factorial cell at :data:`LOAD`, for :func:`.common.steady_table`."""
    parts, names = [], []
    for name, label, _, _, arms, load in condition_rows(data):
        parts.append(xr.concat([arms[p][list(STEADY)].drop_vars(
            [c for c in arms[p][list(STEADY)].coords if c != "seed"]) for p in POLICIES], "policy")
            .assign_coords(policy=list(POLICIES)))
        names.append(f"{name} {load:g} req/s" if load else name)
    for r in mechanism_rows(data):
        if r["stage"] == "counts":
            continue
        arms = r["arms"]
        parts.append(xr.concat([arms[p][list(STEADY)].drop_vars(
            [c for c in arms[p][list(STEADY)].coords if c != "seed"]) for p in POLICIES], "policy")
            .assign_coords(policy=list(POLICIES)))
        names.append(r["stage"])
    if not parts:
        return None
    return xr.concat(parts, "condition", join="outer").assign_coords(condition=names)


# -- the distributions ------------------------------------------------------------------

CDF_RATE = LOAD
CDF_SEEDS = (1, 2, 3, 4)


def cohort_latencies(ds, rate=CDF_RATE, seeds=CDF_SEEDS):
    """{policy: (TTFT ms, TPOT ms)} of the completed cohort requests, pooled over seeds,
    from timelines traced from the counts Dataset's own sweep (per-request records)."""
    import routesim
    seeds = [s for s in seeds if s in ds.seed.values]
    tl = routesim.trace(ds, rate_rps=float(rate), seed=seeds, interval_ms=1000.0)
    warm = tl.attrs["warmup_s"]
    horizon = warm + tl.attrs["measure_s"]
    out = {}
    for pol in tl.policy.values:
        one = tl.sel(policy=pol)
        arr = one.request_arrival.values
        cohort = (arr >= warm) & (arr < horizon)
        vals = []
        for name in ("request_ttft", "request_tpot"):
            v = one[name].values[cohort]
            vals.append(np.sort(v[~np.isnan(v)]))
        out[str(pol)] = tuple(vals)
    return out


def _tails(lat):
    """The distributions in numbers, per policy: median TTFT and TPOT, and the share of
    requests above each SLO (TTFT 1 s, TPOT 50 ms)."""
    parts = []
    for pol, (ttft, tpot) in lat.items():
        parts.append(f"{pol}: median TTFT {np.median(ttft):.0f} ms, {np.mean(ttft > 1000) * 100:.2f} % "
                     f"above 1 s; median TPOT {np.median(tpot):.1f} ms, {np.mean(tpot > 50) * 100:.2f} % "
                     "above 50 ms")
    tok, req = lat["least_tokens"][0], lat["least_requests"][0]
    trade = np.median(tok) > np.median(req) and np.mean(tok > 1000) < np.mean(req > 1000)
    return "; ".join(parts) + (". Scoring by tokens trades a little at the median for the tail."
                               if trade else ".")


def figure_cdf(lat, figures_dir=FIGURES):
    fig = Figure(figsize=(10, 3.8))
    axes = fig.subplots(1, 2)
    for ax, k, name in zip(axes, (0, 1), ("TTFT (ms)", "TPOT (ms)")):
        for pol, v in lat.items():
            v = v[k]
            ccdf = 1.0 - np.arange(v.size) / v.size
            ax.step(v, ccdf, where="post", color=COLORS[pol], label=pol)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(1e-4, 1.05)
        ax.axhline(0.01, color="#888888", lw=0.6, ls=":")
        ax.text(ax.get_xlim()[0], 0.011, " p99", fontsize=7, color="#555555", va="bottom")
        ax.set_xlabel(name)
        ax.set_ylabel("share of requests above")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Claim 1 {ON_PAGE}: latency distributions at {CDF_RATE} req/s, completed cohort requests of seeds "
                 f"{CDF_SEEDS[0]}–{CDF_SEEDS[-1]} pooled (1,200 s warm-up, drained)", fontsize=10)
    fig.tight_layout()
    return save(fig, "lor-claim1-cdf", figures_dir)


# -- the seed's worked example, by the engine's step-cost formula ---------------------

def decode_ms(n_seqs, kv_tokens):
    return STEP["base"] + STEP["per_decode_sequence"] * n_seqs + STEP["per_kv_token"] * kv_tokens


def worked_example(prompt=1000, short=50, long=4000, n=10):
    """Two replicas, ten requests each, already prefilled (prompt tokens each); replica A:
    ten outputs of `short`; replica B: nine of `short` and one of `long`. Returns the
    outstanding output tokens, the short requests' TPOT on each, when they finish, and
    how long B stays busy (decode iterations only; continuous batching)."""
    out = {"outstanding_a": n * short, "outstanding_b": (n - 1) * short + long,
           "count_a": n, "count_b": n}
    t = {"a": 0.0, "b": 0.0}
    for side, lengths in (("a", [short] * n), ("b", [short] * (n - 1) + [long])):
        done_short = None
        for i in range(max(lengths)):
            live = [L for L in lengths if L > i]
            kv = sum(prompt + i for _ in live)
            t[side] += decode_ms(len(live), kv)
            if i == short - 1:
                done_short = t[side]
        out[f"short_done_ms_{side}"] = done_short
        out[f"tpot_short_ms_{side}"] = done_short / short
        out[f"busy_ms_{side}"] = t[side]
    long_prompt = 12000   # the long class's median prompt
    out["long_prefill_ms"] = (STEP["per_prefill_token"] * long_prompt
                              + STEP["per_prefill_token_pair"] * long_prompt ** 2)
    return out


# -- figures --------------------------------------------------------------------------

FIGURE = "lor-claim1-counts"
"""The stem of the claim's main figure (:func:`main_figure`)."""


def figure(data, figures_dir=FIGURES):
    """The page's replica's figures: the main one (:func:`main_figure`), the paired
    effects of the mechanism's and conditions' stages when they ran and the latency
    distributions at :data:`CDF_RATE` (traced from the counts sweep)."""
    counts = data["counts"]
    paths = main_figure(data, figures_dir)
    mech, conds = mechanism_rows(data), condition_rows(data)
    if len(mech) > 1 or len(conds) > 1:
        paths += figure_effects(mech, conds, figures_dir)
    if CDF_RATE in counts.rate_rps.values:
        paths += figure_cdf(cohort_latencies(counts), figures_dir)
    return paths


def main_figure(data, figures_dir=FIGURES, arm=PAGE_ARM):
    """figures/<FIGURE><arm's suffix>.png/.svg: each policy's TTFT, TPOT and ITL p99 and
    attainment against the load on ``arm`` (median and interquartile range over seeds),
    each policy's capacity there dotted."""
    counts = data["counts"]
    root = data["root"]
    fig = Figure(figsize=(13, 3.6))
    axes = fig.subplots(1, 4)
    x = counts.rate_rps.values
    for ax, (var, title, scale) in zip(axes, (("ttft_p99", "TTFT p99 (ms)", 1), ("tpot_p99", "TPOT p99 (ms)", 1),
                                              ("itl_p99", "ITL p99 (ms)", 1),
                                              ("attainment", "SLO attainment (%)", 100))):
        for p in (*POLICIES, "exact"):
            runs = _arm(data, "counts", p)
            if runs is None:
                continue
            v = runs[var] * scale
            label = "least_tokens, exact outputs" if p == "exact" else p
            ax.plot(x, v.median("seed"), "o-" if p != "exact" else "x--", color=COLORS[p], label=label)
            if p != "exact":
                ax.fill_between(x, v.quantile(0.25, "seed"), v.quantile(0.75, "seed"), color=COLORS[p], alpha=0.15)
        for p in POLICIES:
            c = capacity(root, p, arm.capacity)[0]
            if np.isfinite(c):
                ax.axvline(c, color=COLORS[p], lw=0.7, ls=":")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("offered load (req/s)")
        if var == "ttft_p99":
            ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Claim 1 {arm.words}: counts against tokens, 8 replicas, long class on, 1,200 s warm-up, drained "
                 f"(median and interquartile range over {counts.sizes['seed']} seeds; dotted: each policy's capacity)",
                 fontsize=10)
    fig.tight_layout()
    return save(fig, FIGURE + arm.suffix, figures_dir)


def figure_effects(mech, conds, figures_dir=FIGURES):
    """The paired effects with their intervals: per factorial cell and per condition,
    least_tokens' TTFT p99 against least_requests and round_robin."""
    fig = Figure(figsize=(12, 4.2))
    axes = fig.subplots(1, 2)
    groups = ((axes[0], [(r["name"], {"least_requests": r["lr"], "round_robin": r["rr"],
                                      "exact": r.get("exact")}) for r in mech],
               f"the long class's traits, {LOAD} req/s"),
              (axes[1], [(label, {b: comps[("ttft_p99", b)] for b in BASES}) for _, label, comps, _, _, _ in conds],
               f"conditions, {LOAD} req/s unless named"))
    for ax, rows, title in groups:
        for k, (label, cs) in enumerate(rows):
            for j, (b, c) in enumerate(cs.items()):
                if c is None:
                    continue
                y = k + (j - 1) * 0.22
                name = {"exact": "exact outputs vs least_tokens"}.get(b, f"least_tokens vs {b}")
                ax.errorbar(c[0], y, xerr=[[c[0] - c[1]], [c[2] - c[0]]], fmt="o", color=COLORS[b], ms=4,
                            capsize=2, label=name if k == 0 else None)
        ax.axvline(0, color="#444444", lw=0.7)
        for s in RELATIVE_BOUNDS:                          # the study's material bounds
            ax.axvline(s, color="#aaaaaa", lw=0.5, ls=":")
        ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(f"TTFT p99 change, % (geometric mean, {100 * LEVEL:g} % interval)\n"
                      f"dotted: the material bounds, {RELATIVE_BOUNDS[0]:+.1f} and {RELATIVE_BOUNDS[1]:+g} %",
                      fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(f"Claim 1 {ON_PAGE}: where least_tokens' TTFT advantage comes from, and whether it survives", fontsize=10)
    fig.tight_layout()
    return save(fig, "lor-claim1-effects", figures_dir)


# -- the section ----------------------------------------------------------------------

def section(data, main=()):
    """Claim 1's section; ``main``: the main arm's lines (:func:`.common.page_table`)."""
    counts = data["counts"]
    root = data["root"]
    rates = [float(r) for r in counts.rate_rps.values]
    caps = {p: capacity(root, p) for p in POLICIES}
    measured = all(c[3] for c in caps.values())
    cap_words = ", ".join(f"{p} {rate_text(c[0])}" for p, c in caps.items())
    comps = main_comparisons(data)
    v = verdict(data)
    good, bad = [], []
    for r, c in comps.items():
        g, b = _lead_words(c)
        good += [f"{x} at {r:g}" for x in g]
        bad += [f"{x} at {r:g}" for x in b]
    mech, conds = mechanism_rows(data), condition_rows(data)
    ex = worked_example()
    text = [
        "## Claim 1: counts lie when costs vary",
        "",
        "**Prediction (the seed).** With heavy-tailed outputs, scoring replicas by "
        "outstanding tokens (`least_tokens`) beats counting requests (`least_requests`) "
        "and counting arrivals (`round_robin`): lower TPOT p99 and TTFT p99, higher "
        "attainment.",
        "",
        f"**Design.** `sweeps/token-routing.toml`, the shared design{departures(counts, counts.sizes.get('replica'))}. "
        f"Loads {', '.join(f'{r:g}' for r in rates)} req/s, each shown as a multiple of round_robin's / "
        f"least_requests' / least_tokens' capacity ({cap_words} req/s, "
        f"{'measured' if measured else 'provisional: the capacity stage has not run'}); least_tokens against each "
        "baseline. ITL p99 (every gap between two tokens, a prefill chunk's stall included) stands beside TPOT p99.",
        "",
        *page_table(main, main_table(data), ""),
        f"![Claim 1](../figures/{FIGURE}.png)",
        "",
        f"{reading(main)} {_short_reading(comps)}. Why the gain is in TTFT, not TPOT: the seed's worked example "
        "by this model's step cost (in the appendix).",
        "",
    ]
    text += details(
        "Medians per arm and steady state",
        "Medians over seeds; the clairvoyant arm (stage `exact`: least_tokens told every request's true output "
        "length, `allowance_tokens = \"exact\"`) bounds what predicting output lengths could be worth:",
        "",
        medians_table(data),
        "",
        "Steady state (median over seeds):",
        "",
        steady_table(counts, ("rate_rps", "policy")))
    if len(mech) > 1:
        text += details(
            "The mechanisms, separated",
            f"**The mechanisms, separated** (issue 23 item 3). At {LOAD} req/s the long class (the "
            "same 2 % of requests, the same draws) keeps its long prompts only, its long outputs "
            "only, both (the main design) or neither (stages `prompt-only`, `output-only`, "
            "`neither`, each with its exact arm). Paired TTFT p99 differences, % (lt least_tokens, "
            "lr least_requests, rr round_robin, exact the clairvoyant arm):",
            "",
            mechanism_table(mech),
            "",
            _mechanism_reading(mech))
    if len(conds) > 1:
        block = [
            f"**Signals, real lengths and the step cost** (issue 23 items 5 and 6). The verdict "
            f"recomputed at {LOAD} req/s under each condition, from the same six comparisons (TTFT "
            "p99, TPOT p99 and attainment against both baselines): a 50 ms periodic scrape "
            "(`signal_mode = \"periodic\"`, `period_ms = 50`) and the same with the router's own "
            "placements added between scrapes (`periodic_local`), "
            + (f"with the baseline's {_warmup(data, 'signals')} s of warm-up, window and seeds, so the "
               "baseline is their fresh control and the scrape's effect is paired by seed with it"
               if _warmup(data, "signals") == _warmup(data, "counts") else
               f"with {_warmup(data, 'signals')} s of warm-up against the baseline's "
               f"{_warmup(data, 'counts')} s (so not paired on the same window)")
            + " (round_robin, which reads no signal, taken from the baseline); the Azure conversation trace's "
            "prompt and output lengths (`lengths = { trace = \"traces/azure-conv.csv\", format = "
            "\"azure\" }`, token-model.md §1.3: no long class, so a lighter load; also at 90 req/s, about 0.9 × "
            f"its own capacity by a probe, with {_warmup(data, 'azure')} s of warm-up: its KV cache stays "
            "nearly empty, and the steady-state table below shows it level); prefill twice and four "
            "times as costly (`per_prefill_token` and `per_prefill_token_pair` scaled together), at "
            f"{LOAD} req/s and at 23 req/s (stages `prefill-x2-light`, `prefill-x4-light`); a "
            "2,048-token chunk budget (`max_batched_tokens = 2048`)"
            + (_mooncake_words(data["mooncake"]) if data.get("mooncake") is not None else "")
            + ". 'Survives' compares the verdict and its six leads with the baseline's at the same load "
            f"(at 41 req/s for the Azure lengths at 90{' and the Mooncake excerpt' if data.get('mooncake') is not None else ''}).",
            "",
            condition_table(conds),
            "",
            _condition_reading(conds) + " " + _scrape_reading(data),
            "",
        ]
        steady = steady_rows(data)
        if steady is not None:
            block += [f"Steady state of the stages at {LOAD} req/s (median over seeds):", "",
                      steady_table(steady, ("condition", "policy")), ""]
        text += details("Signals, real lengths and the step cost", *block,
                        "![Claim 1, effects](../figures/lor-claim1-effects.png)")
    if CDF_RATE in counts.rate_rps.values:
        text += details(
            "The whole distributions",
            f"The whole distributions at {CDF_RATE} req/s (completed cohort requests of seeds "
            f"{CDF_SEEDS[0]}–{CDF_SEEDS[-1]}, traced from the same sweep): {_tails(cohort_latencies(counts))}",
            "",
            "![Claim 1, distributions](../figures/lor-claim1-cdf.png)")
    text += details(
        "On vLLM's loop, the old verdict, the seed's worked example",
        "The main design rerun on vLLM's asynchronous loop with a roofline H100 cost: the section \"On the "
        "server it speaks of\" (the other conditions above keep the page's replica: a vllm run costs 11 to 14 "
        "reserve runs).",
        "",
        f"**Old verdict beside new.** The former document: *{OLD_VERDICT}* ({OLD_DESIGN}). Now: "
        f"*{v}*, on drained steady-state windows at loads placed against each policy's capacity, "
        f"under the interval rule. " + _why(v, good, bad),
        "",
        "**The seed's worked example, by this model's step cost.** Two replicas hold ten "
        "requests each, all prefilled with 1,000-token prompts; on A ten produce 50 tokens, "
        "on B nine produce 50 and one produces 4,000. Counted, they are equal (10 and 10); "
        f"in outstanding output tokens B owes {ex['outstanding_b']:,} against A's "
        f"{ex['outstanding_a']:,}, {ex['outstanding_b'] / ex['outstanding_a']:.1f}× (the "
        "seed's \"factor of eight\"). But under continuous batching the nine short requests "
        "are *not* stuck behind the long one for thousands of iterations: each iteration "
        "advances every sequence, and a short request leaves after its 50th. By the decode "
        f"cost ({STEP['base']:g} ms + {STEP['per_decode_sequence']:.2f} ms per sequence + "
        f"{_sci(STEP['per_kv_token'])} ms per KV token) they finish at "
        f"{ex['short_done_ms_a']:.0f} ms on A and {ex['short_done_ms_b']:.0f} ms on B, TPOT "
        f"{ex['tpot_short_ms_a']:.2f} against {ex['tpot_short_ms_b']:.2f} ms. What the long "
        f"request costs is B's time afterwards (busy {ex['busy_ms_b'] / 1000:.1f} s against "
        f"{ex['busy_ms_a'] / 1000:.2f} s), at a small per-iteration price, and above all "
        f"its prefill: a 12,000-token prompt takes about {ex['long_prefill_ms']:.0f} ms of "
        "compute that every co-resident sequence waits through, and its KV, held for its whole "
        "long generation. That is why the sweep finds the gain in TTFT, not in TPOT.")
    return "\n".join(text + [""])


def _short_reading(comps) -> str:
    """The main table's outcomes in a few words (:func:`.common.in_short`): per metric and
    baseline, the usual outcome over the loads and the exceptions."""
    return in_short({f"{name} vs {b}": [(f"{r:g}", c[(var, b)][3], sign) for r, c in comps.items()]
                     for var, name, _, sign in METRICS for b in BASES})


def _mechanism_reading(mech):
    parts = []
    for r in mech:
        lr, rr = r["lr"], r["rr"]
        words = []
        for c, b in ((lr, "least_requests"), (rr, "round_robin")):
            if c[3] < 0:
                words.append(f"beats {b} ({show(c)} %)")
            elif c[3] > 0:
                words.append(f"loses to {b} ({show(c)} %)")
            else:
                words.append(f"has no lead over {b}")
        ex = r.get("exact")
        extra = ""
        if ex is not None:
            extra = ("; knowing the outputs " + ("helps" if ex[3] < 0 else "hurts" if ex[3] > 0 else "adds nothing material")
                     + f" ({show(ex)} %)")
        tp = r["tpot"]
        tpot = (f"; its TPOT p99 against least_requests {show(tp)} %"
                + {-1: " (a lead)", 1: " (a lead the other way)", 0: " (no lead)"}[tp[3]])
        parts.append(f"with {r['name']}, least_tokens " + " and ".join(words) + tpot + extra)
    text = "; ".join(parts)
    return "**Reading** (TTFT p99 unless named). " + text[:1].upper() + text[1:] + "."


def _warmup(data, stage):
    ds = data.get(stage)
    return f"{float(ds.attrs['warmup_s']):,.0f}" if ds is not None else "—"


def scrape_cost(data):
    """{(mode, policy): compare(policy under the scrape, policy fresh)}, TTFT p99,
    relative: stage signals against the baseline (stage counts at :data:`LOAD`, the same
    warm-up, window and seeds)."""
    control = condition(data, "fresh")
    out = {}
    for mode in ("periodic", "periodic_local"):
        arms = condition(data, mode)
        if arms is None or control is None:
            continue
        for p in POLICIES[1:]:
            out[(mode, p)] = compare(arms[p].ttft_p99.values, control[p].ttft_p99.values)
    return out


def _verdict_under(data, mode):
    arms = condition(data, mode)
    return verdict_at(comparisons(arms)) if arms is not None else "was not run"


def _scrape_reading(data):
    cost = scrape_cost(data)
    if not cost:
        return ""
    return ("The scrape arm's prediction (the seed, written in the sweep file before the 1,200 s runs): "
            "the claim as made holds under the scrape too, both global minima herd on a stale signal "
            "(claim 3), and periodic_local recovers much of the loss. By the same rule the claim "
            + "; ".join(f"{_verdict_under(data, m)} under {m}" for m in ("periodic", "periodic_local")) + ". "
            "What the scrape costs each policy (its TTFT p99 against its own fresh runs, the baseline's, "
            "paired by seed, %): " + "; ".join(f"{p} under {mode} {show(c)}" for (mode, p), c in cost.items())
            + ".")


def _mooncake_words(ds):
    """The Mooncake condition in the section's list of conditions (stage ``mooncake``)."""
    base, per = float(ds.attrs["slo_ttft_ms"]), float(ds.attrs.get("slo_ttft_ms_per_prompt_token", 0.0))
    return ("; the Mooncake excerpt (`traces/mooncake-conv.jsonl` at time scale 1, "
            f"{float(ds.attrs['warmup_s']):g} s of warm-up and {float(ds.attrs['measure_s']):g} s measured, "
            "512-token hash blocks: its own arrivals, long prompts and shared prefixes), whose attainment is "
            + (f"by a TTFT objective scaled to prompt length, {base:,.0f} ms + {per:g} ms per prompt token (no policy "
               "meets a flat 1 s TTFT p99 there: the capacity section)" if per > 0 else
               f"by the flat {base:,.0f} ms TTFT objective")
            + "; a trace's seed drives only the router stream, which these policies do not draw, so its seeds "
              "repeat one replay (\"no spread\")")


def _condition_reading(conds):
    base = conds[0]
    was = ranking(base[4])
    others = [c for c in conds[1:] if c[0] != "fresh"]
    kept = [label for name, label, comps, _, _, load in others if survives(_base_of(conds, load), comps) == "yes"]
    other = [label for name, label, comps, _, _, load in others if survives(_base_of(conds, load), comps) != "yes"]
    moved = [f"{label}: {ranking(arms)}" for name, label, _, _, arms, load in others
             if load == LOAD and ranking(arms) != was]
    full = [label for name, label, _, _, arms, _ in conds if saturated(arms)]
    return (f"**Reading.** At {LOAD} req/s with fresh signals the verdict is *{base[3]}* and the ranking by TTFT "
            f"p99 {was}. " + (f"Verdict and leads survive (against the baseline at the same load): "
                              f"{', '.join(kept)}. " if kept else "No condition keeps both the verdict and its leads. ")
            + (f"Something changes (see the last column) under: {', '.join(other)}. " if other else "")
            + (f"The ranking at {LOAD} req/s changes: {'; '.join(moved)}. " if moved else
               f"The ranking at {LOAD} req/s does not change. ")
            + (f"Beyond capacity (the KV cache {SATURATED:.0%} full or more over the window's last quarter), so "
               f"a comparison of overloaded clusters: {', '.join(full)}." if full else ""))


def _why(v, good, bad):
    if v == OLD_VERDICT:
        return ("The verdict is unchanged, but now rests on intervals and steady state: "
                + (f"leads as predicted: {', '.join(good)}" if good else "no lead as predicted")
                + (f"; against: {', '.join(bad)}." if bad else "."))
    if bad:
        return ("It changes because the interval rule counts a material lead the other way, which "
                f"unanimity never did: {', '.join(bad)}.")
    if not good:
        return "It changes because no comparison is a material lead under the interval rule."
    return "It changes because every comparison is now a material lead as predicted."

