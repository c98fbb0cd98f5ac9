"""Claim 9 of the least-outstanding-routing study: what routing cannot fix.
sweeps/token-routing-admission.toml (results/token-routing-admission/): ``held.nc`` (one
replica behind a rejecting front door: admission_max_tokens × seed), ``rates.nc`` (one
replica, no door: rate_rps × seed), ``open.nc``, ``reject.nc`` and ``queue.nc`` (8
replicas, least_tokens: rate_rps × seed) and ``burst-open.nc``, ``burst-reject.nc``,
``burst-queue.nc`` (the same three arms under a burst that ends: seed).

The threshold is computed here from ``held.nc`` (:func:`threshold`), never typed in: the
largest front-door cap on one replica's outstanding tokens τ at which the medians over
seeds of TTFT p99 and TPOT p99 meet the SLO (at that cap and every smaller one). The
8-replica stages must have run at that cap; :func:`arms` raises :class:`Mismatch`,
naming the value the curve gives, when they have not. Comparisons are paired by seed
(:func:`common.compare`); loads are placed against least_tokens' capacity at the SLO
(:func:`common.capacity`, read at document time)."""

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from .common import (ON_PAGE, ADDED, FIGURES, MECHANISM, MOONCAKE_ABOVE, SEEDS, capacity, compare, departures, details, exceptions, page_table, read, reading, results_root, save, show, squeeze,
                     steady_table, verdict_of)

SWEEPS = ("sweeps/token-routing-admission.toml", "sweeps/token-routing-admission-cost.toml")
NAME = "token-routing-admission"
COST = "token-routing-admission-cost"
VARIANTS = {"prefill-x2": "prefill × 2", "prefill-x4": "prefill × 4", "chunk-2048": "a 2,048-token chunk budget"}
"""The step-cost variants of the sensitivity sweep (its stages held-, open- and reject-<variant>)."""
POLICY = "least_tokens"
STAGES = ("held", "rates", "open", "reject", "queue", "burst-open", "burst-reject", "burst-queue")
AZURE = "azure-"
"""The Azure-length arm's stages are the main ones' names (but ``rates``) with this prefix."""
SERVER = "server-"
"""The server arm's stages (vLLM async + roofline, :mod:`.server`) are the main ones' names
(but ``rates``) with this prefix."""
ARMS = ("no door", "reject", "queue")
NEAR = 0.9
"""Goodput "held near capacity": at the top load, the door's goodput at least this
fraction of the no-door goodput at capacity (reported beside the verdict's tests)."""
COLORS = {"no door": "#888888", "reject": "#d62728", "queue": "#1f77b4"}
OUTCOMES = ("within SLO", "completed late", "rejected", "shed", "failed", "unfinished")
OUTCOME_COLORS = ("#2ca02c", "#bcbd22", "#d62728", "#9467bd", "#8c564b", "#7f7f7f")


class Mismatch(ValueError):
    """The sweep's max_tokens values are not the one the one-replica curve gives."""


def prepare(stages):
    """{stage: Dataset} as routesim.run returns them (or as read from the files) -> the
    same with the one-valued axes squeezed (their values kept as scalar coordinates)."""
    return {k: squeeze(ds).squeeze() for k, ds in stages.items()}


def load(root):
    """{stage: Dataset} for STAGES under results folder root, and "azure" and "server": the
    Azure-length and server arms' stages by the main design's names (None if any is
    missing); None if a main stage is missing."""
    d = Path(root) / NAME
    paths = {k: d / f"{k}.nc" for k in STAGES}
    if not all(p.exists() for p in paths.values()):
        return None
    data = prepare({k: read(p) for k, p in paths.items()})
    cost = Path(root) / COST          # the sensitivity sweep: optional, read when it has run
    for v in VARIANTS:
        files = {f"{s}-{v}": cost / f"{s}-{v}.nc" for s in ("held", "open", "reject")}
        data.update(prepare({k: read(p) for k, p in files.items() if p.exists()}))
    for ds in data.values():
        ds.attrs["results_root"] = str(root)       # for capacity(root, policy) at document time
    for arm, prefix in (("azure", AZURE), ("server", SERVER)):
        files = {k: d / f"{prefix}{k}.nc" for k in STAGES if k != "rates"}
        data[arm] = None
        if all(p.exists() for p in files.values()):
            data[arm] = prepare({k: read(p) for k, p in files.items()})
            for ds in data[arm].values():
                ds.attrs["results_root"] = str(root)
    return data


def _arm(data, which):
    """The arm ``which`` ("azure" or "server", as :func:`load` keys it) in the design's
    shape, its loads placed against least_tokens' capacity searched for that arm
    (``capacity_stage``: :func:`capacity_of`); None if it did not run."""
    a = data.get(which)
    return None if a is None else dict(a, capacity_stage=which)


def azure(data):
    """The Azure-length arm (stages ``azure-<stage>`` but ``rates``), placed against the
    capacity on Azure lengths, for :func:`clauses` (:func:`_arm`)."""
    return _arm(data, "azure")


def server(data):
    """The server arm (stages ``server-<stage>`` but ``rates``: the design on vLLM's
    asynchronous loop with the roofline cost, :mod:`.server`), placed against the
    capacity on the server, for :func:`clauses` (:func:`_arm`)."""
    return _arm(data, "server")


def capacity_of(data):
    """(least_tokens' capacity req/s, seeds' low, high, measured) for this results root, on
    the workload of the capacity search ``data["capacity_stage"]`` (default "default")."""
    return capacity(results_root(data["open"]), POLICY, data.get("capacity_stage", "default"))


# -- the one-replica curve and its threshold ------------------------------------------

def curve(held):
    """Medians over seeds of batch_mean, TTFT p99 and TPOT p99 by front-door cap."""
    return held[["batch_mean", "ttft_p99", "tpot_p99"]].median("seed")


def meets(med, ds):
    """Per point of a curve: both p99 medians within the sweep's SLO."""
    return (med.ttft_p99 <= ds.attrs["slo_ttft_ms"]) & (med.tpot_p99 <= ds.attrs["slo_tpot_ms"])


def threshold(held):
    """The largest cap (tokens) at which the SLO is met there and at every smaller cap."""
    ok = np.logical_and.accumulate(meets(curve(held), held).values)
    if not ok[0]:
        raise Mismatch("the one-replica curve misses the SLO at its smallest cap: "
                       "extend the held stage's admission_max_tokens downwards")
    return float(held.admission_max_tokens.values[np.flatnonzero(ok)[-1]])


def plain_limit(rates):
    """Without a door: (largest rate meeting the SLO at it and below, its median batch,
    the next rate's median batch), or None if the first misses."""
    med = curve(rates)
    ok = np.logical_and.accumulate(meets(med, rates).values)
    if not ok[0]:
        return None
    i = np.flatnonzero(ok)[-1]
    nxt = float(med.batch_mean[i + 1]) if i + 1 < med.sizes["rate_rps"] else float("nan")
    return float(rates.rate_rps[i]), float(med.batch_mean[i]), nxt


# -- the 8-replica arms ---------------------------------------------------------------

def _cap(ds):
    return float(np.atleast_1d(ds.admission_max_tokens.values)[0])


def arms(data, prefix=""):
    """{"no door", "reject", "queue"}: the 8-replica Datasets (rate_rps × seed; with
    ``prefix="burst-"`` the burst stages, seed) at the threshold the one-replica curve
    gives; Mismatch if the sweep did not run it."""
    x = threshold(data["held"])
    rej, que = data[f"{prefix}reject"], data[f"{prefix}queue"]
    if _cap(rej) != x or _cap(que) != x:
        raise Mismatch(f"the one-replica curve gives max_tokens = {x:,.0f}, but {SWEEPS[0]} runs "
                       f"{prefix}reject at {_cap(rej):,.0f} and {prefix}queue at {_cap(que):,.0f}: set them "
                       f"to {x:,.0f} and rerun the sweep")
    return {"no door": data[f"{prefix}open"], "reject": rej, "queue": que}


def outcomes(ds):
    """Every cohort request's one outcome, per run: completed within the SLO, completed
    late, rejected, shed, failed, unfinished (their sum is ``arrivals``)."""
    met = (ds.attainment * ds.arrivals).round()
    return {"within SLO": met, "completed late": ds.completed - met, "rejected": ds.rejected,
            "shed": ds.shed, "failed": ds.failed, "unfinished": ds.unfinished}


def conserved(data):
    """(runs checked, runs where arrivals = completed + failed + rejected + shed + unfinished)."""
    n = ok = 0
    for k in STAGES:
        if k not in data:
            continue
        ds = data[k]
        s = ds.completed + ds.failed + ds.rejected + ds.shed + ds.unfinished
        n += int(ds.arrivals.size)
        ok += int((s == ds.arrivals).sum())
    return n, ok


def loads(data):
    """(every load, the loads above capacity, the largest load at or below it) of the
    8-replica stages, req/s, against :func:`capacity_of`."""
    rates = [float(r) for r in data["open"].rate_rps.values]
    cap = capacity_of(data)[0]
    over = [r for r in rates if r > cap]
    at = max([r for r in rates if r <= cap], default=min(rates))
    return rates, over, at


def material(data):
    """The smallest goodput difference (req/s) that counts as a lead for a door against no
    door: 5 % (the study's relative bound) of no door's median goodput at the load at
    capacity. A difference, not a ratio: beyond capacity no door's goodput falls to 0,
    where a ratio is undefined."""
    _, _, at = loads(data)
    return 0.05 * float(data["open"].goodput.sel(rate_rps=at).median())


def comparisons(data):
    """{name: (compare result, predicted sign)}: falls — no door's goodput at the top load
    minus its goodput at the load at capacity (req/s, lead when at least :func:`material`:
    goodput falls to 0 there, where a ratio has no log); reject@r / queue@r — the
    door's goodput minus no door's at each load r above capacity (req/s, lead when at
    least :func:`material`); burst-reject / burst-queue — the same under the burst."""
    a = arms(data)
    rates, over, at = loads(data)
    top = max(rates)
    m = material(data)
    g = {n: ds.goodput for n, ds in a.items()}
    out = {"falls": (compare(g["no door"].sel(rate_rps=top).values, g["no door"].sel(rate_rps=at).values,
                             "absolute", m), -1)}
    for n in ("reject", "queue"):
        for r in over:
            out[f"{n}@{r:g}"] = (compare(g[n].sel(rate_rps=r).values, g["no door"].sel(rate_rps=r).values,
                                         "absolute", m), +1)
    b = arms(data, "burst-")
    for n in ("reject", "queue"):
        out[f"burst-{n}"] = (compare(b[n].goodput.values, b["no door"].goodput.values, "absolute", m), +1)
    return out


ADDED_WORDS = "queueing at the door without a deadline"
"""The seed: beyond capacity "the correct response is to refuse or to queue at the front
door", at the threshold of the latency-versus-batch curve, its queue the deadline-aware
admission of another seed. Refusing is its mechanism; the model's door queues without a
deadline, a clause the prediction added."""
AZURE_BASIS = "least_tokens"
"""The policy whose capacity the Azure-length arm's loads are placed against (:mod:`.workloads`)."""
MOONCAKE_WHY = MOONCAKE_ABOVE
SERVER_BASIS = "least_tokens"
"""The policy whose capacity on the server the server arm's loads are placed against (:mod:`.server`)."""
SERVER_PREDICTION = (
    "**Prediction on the server** (stages `server-*`, written before their runs). One replica's curve "
    "gives a threshold near the page's 250,000 tokens: the KV pool (262,144 tokens) bounds it on both "
    "replicas, and the roofline's cheaper decode step meets the TPOT SLO at a larger batch, while its "
    "dearer prefill chunks lengthen the steps that set the TPOT tail. Beyond capacity no door's goodput "
    "falls (vLLM admits without reserving a prompt's KV, so its waiting list grows in the replica and "
    "every TTFT with it), and refusing at the threshold raises it, also under the burst: the seed's "
    "mechanism *holds*. The door's queue has no deadline, so at 2.09 × capacity it grows without bound "
    "and its requests miss the TTFT SLO in the queue: queueing *does not hold*. No change.")
"""The server arm's prediction (issue 44 item 2), fixed before its runs."""
SERVER_PREDICTED = ("holds", "does not hold")
"""The verdicts :data:`SERVER_PREDICTION` states (the seed's mechanism, the added clauses), for
:func:`.server.held`."""


def clauses(data):
    """[(label, comparison, predicted sign, part)] of :func:`comparisons`: the queue's added."""
    return [(k, v[0], v[1], ADDED if "queue" in k else MECHANISM) for k, v in comparisons(data).items()]


def verdict(data):
    """:func:`common.verdict_of` over :func:`comparisons`' leads and predicted signs."""
    c = comparisons(data)
    return verdict_of([v[0][3] for v in c.values()], [v[1] for v in c.values()])


def sensitivity(data):
    """{variant: (threshold tokens, compare result of reject / no door goodput at the
    variant's load, survives)} for the step-cost variants that ran; Mismatch if a
    variant's reject stage did not run at its own curve's threshold."""
    out = {}
    for v in VARIANTS:
        if f"held-{v}" not in data:
            continue
        try:
            x = threshold(data[f"held-{v}"])
        except Mismatch:               # no cap meets the SLO: the verdict's threshold does not exist
            out[v] = (float("nan"), None, False)
            continue
        rej, nod = data[f"reject-{v}"], data[f"open-{v}"]
        if _cap(rej) != x:
            raise Mismatch(f"the {v} curve gives max_tokens = {x:,.0f}, but {SWEEPS[1]} runs reject-{v} at "
                           f"{_cap(rej):,.0f}: set it to {x:,.0f} and rerun the sweep")
        c = compare(rej.goodput.values, nod.goodput.values, "absolute", material(data))
        out[v] = (x, c, c[3] == +1)
    return out


def held_near(data, arm):
    """The door's goodput at the top load over no door's at capacity, per seed (ratio)."""
    a = arms(data)
    rates, _, at = loads(data)
    return a[arm].goodput.sel(rate_rps=max(rates)) / a["no door"].goodput.sel(rate_rps=at)


# -- figure ---------------------------------------------------------------------------

def _band(ax, x, v, color, label, style="o-", scale=1.0):
    v = v * scale
    ax.plot(x, v.median("seed"), style, color=color, label=label, lw=1.5, ms=4)
    ax.fill_between(x, v.min("seed"), v.max("seed"), color=color, alpha=0.12)


def figure(data, figures_dir=FIGURES):
    held, rates = data["held"], data["rates"]
    x = threshold(held)
    a = arms(data)
    b = arms(data, "burst-")
    cap = capacity_of(data)[0]
    slo_ttft, slo_tpot = held.attrs["slo_ttft_ms"], held.attrs["slo_tpot_ms"]
    fig = Figure(figsize=(13, 7.6), layout="constrained")
    axes = fig.subplots(2, 3)
    mh, mr = curve(held), curve(rates)
    caps = held.admission_max_tokens.values
    i = int(np.flatnonzero(caps == x)[0])
    for ax, var, slo, title in ((axes[0, 0], "tpot_p99", slo_tpot, "TPOT p99 (ms)"),
                                (axes[0, 1], "ttft_p99", slo_ttft, "TTFT p99 (ms)")):
        lo, hi = held[var].min("seed"), held[var].max("seed")
        ax.errorbar(mh.batch_mean, mh[var], yerr=[mh[var] - lo, hi - mh[var]], fmt="o-", color="#d62728",
                    ms=4, lw=1.5, elinewidth=0.8, label=f"held by a door at τ ≤ cap "
                    f"({float(held.rate_rps):g} req/s offered)")
        ax.plot(mr.batch_mean, mr[var], "s--", color="#888888", ms=4, lw=1.2,
                label=f"no door, {float(rates.rate_rps.min()):g}–{float(rates.rate_rps.max()):g} req/s")
        ax.axhline(slo, color="k", lw=0.8, ls=":")
        ax.plot(mh.batch_mean[i], mh[var][i], "*", color="k", ms=13, zorder=5,
                label=f"threshold: cap {x / 1000:.0f}k tokens")
        ax.set_xlabel("mean batch on one replica (sequences)")
        ax.set_title(f"one replica: {title} against batch", fontsize=10)
    axes[0, 1].set_yscale("log")
    axes[0, 0].legend(fontsize=7, loc="upper left")
    r = a["no door"].rate_rps.values
    for ax, var, scale, title in ((axes[0, 2], "goodput", 1.0, "goodput (req/s within the SLO)"),
                                  (axes[1, 0], "attainment", 100.0, "SLO attainment (%)"),
                                  (axes[1, 1], "ttft_p99", 1e-3, "TTFT p99 (s)")):
        for n, ds in a.items():
            _band(ax, r, ds[var], COLORS[n], n, scale=scale)
        ax.axvline(cap, color="k", lw=0.8, ls="--")
        ax.set_xlabel("offered load (req/s; dashed: capacity)")
        ax.set_title(f"8 replicas, {POLICY}: {title}", fontsize=10)
        ax.grid(lw=0.3, alpha=0.5)
    axes[0, 2].legend(fontsize=8)
    axes[1, 1].set_yscale("log")
    ax = axes[1, 2]
    bottom = np.zeros(len(ARMS))
    for k, col in zip(OUTCOMES, OUTCOME_COLORS):
        v = np.array([float(outcomes(b[n])[k].median()) for n in ARMS])
        ax.bar(np.arange(len(ARMS)), v, bottom=bottom, color=col, label=k)
        bottom += v
    ax.set_xticks(np.arange(len(ARMS)), ARMS)
    ax.set_ylabel("cohort requests (median over seeds)")
    ax.set_title("the burst: where every request went", fontsize=10)
    ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(1.01, 0.0))
    fig.suptitle(f"Claim 9 {ON_PAGE}: what routing cannot fix — one replica's curve gives the door's cap; 8 replicas "
                 f"across load and under a burst (median, min–max over {a['no door'].sizes['seed']} seeds)",
                 fontsize=10)
    return save(fig, "lor-claim9-admission", figures_dir)


# -- section --------------------------------------------------------------------------

def _seconds(ms) -> str:
    """A median latency in ms as seconds, "no data" when no run has one (no request of the
    window completed: every one refused, shed or unfinished)."""
    return f"{ms / 1000:.1f}" if np.isfinite(ms) else "no data"


def _k(tokens):
    return f"{tokens / 1000:g}k"


def _burst_events(ds):
    from ...results import sweep_of
    sweep = sweep_of(ds)
    (stage,) = [s for s in sweep.stages if s.name == ds.attrs["stage"]]
    (scen,) = stage.values["scenario"]
    return sweep.scenarios[scen]


def section(data, main=()):
    """Claim 9's section; ``main``: the main arm's lines (:func:`.common.page_table`)."""
    held, rates = data["held"], data["rates"]
    x = threshold(held)
    a = arms(data)
    b = arms(data, "burst-")
    c = comparisons(data)
    cap, lo, hi, measured = capacity_of(data)
    rates_all, over, at = loads(data)
    top = max(rates_all)
    med = curve(held)
    ok = np.logical_and.accumulate(meets(med, held).values)
    caps = held.admission_max_tokens.values
    i = int(np.flatnonzero(caps == x)[0])
    slo_ttft, slo_tpot = held.attrs["slo_ttft_ms"], held.attrs["slo_tpot_ms"]
    cap_txt = (f"{cap:g} req/s" + (f", seeds {lo:g}–{hi:g}" if measured and np.isfinite(lo) else
                                   ", the README's provisional figure: the capacity stage has not run"))
    curve_rows = ["| cap on τ (tokens) | batch (sequences) | TTFT p99 ms | TPOT p99 ms | SLO met |",
                  "|---|---|---|---|---|"]
    for j, cc in enumerate(caps):
        mark = " **← threshold**" if cc == x else ""
        curve_rows.append(f"| {cc:,.0f} | {float(med.batch_mean[j]):.1f} | {float(med.ttft_p99[j]):.0f} | "
                          f"{float(med.tpot_p99[j]):.1f} | {'yes' if ok[j] else 'no'}{mark} |")
    load_rows = ["| load req/s | × capacity | goodput, no door | reject − no door, req/s | queue − no door, req/s | "
                 "attainment %: no door / reject / queue | TTFT p99 s: no door / reject / queue |",
                 "|---|---|---|---|---|---|---|"]
    for r in rates_all:
        g = {n: ds.goodput.sel(rate_rps=r).values for n, ds in a.items()}
        att = " / ".join(f"{float(ds.attainment.sel(rate_rps=r).median()) * 100:.0f}" for ds in a.values())
        tt = " / ".join(_seconds(float(ds.ttft_p99.sel(rate_rps=r).median())) for ds in a.values())
        load_rows.append(f"| {r:g} | {r / cap:.2f} | {np.median(g['no door']):.1f} | "
                         f"{show(compare(g['reject'], g['no door'], 'absolute'), 1)} | "
                         f"{show(compare(g['queue'], g['no door'], 'absolute'), 1)} | "
                         f"{att} | {tt} |")
    out_rows = ["| arm | arrivals | " + " | ".join(OUTCOMES) + " |", "|---|---|" + "---|" * len(OUTCOMES)]
    for label, group in ((f"{top:g} req/s", {n: ds.sel(rate_rps=top) for n, ds in a.items()}), ("burst", b)):
        for n, d in group.items():
            o = outcomes(d)
            out_rows.append(f"| {label}, {n} | {float(d.arrivals.median()):,.0f} | "
                            + " | ".join(f"{float(o[k].median()):,.0f}" for k in OUTCOMES) + " |")
    n_runs, n_ok = conserved(data)
    word = {1: "higher", -1: "lower", 0: "none"}
    tests = ["| test | comparison (paired by seed), goodput | mean [95 % interval] | predicted | lead |",
             "|---|---|---|---|---|"]
    for name, (res, pred) in c.items():
        if name == "falls":
            what = f"no door at {top:g} req/s − no door at {at:g} req/s"
        elif name.startswith("burst-"):
            what = f"{name[6:]} − no door, under the burst"
        else:
            arm_, r = name.split("@")
            what = f"{arm_} − no door at {r} req/s"
        tests.append(f"| {name} | {what} | {show(res, 1, 'req/s')} | {word[pred]} | {word[res[3]]} |")
    near = {n: held_near(data, n) * 100 for n in ("reject", "queue")}
    held_gap = {n: compare(a[n].goodput.sel(rate_rps=top).values, a["no door"].goodput.sel(rate_rps=at).values,
                           "absolute") for n in ("reject", "queue")}
    ev = _burst_events(b["no door"])
    mult = [e for e in ev if e.replica < 0]        # cluster-wide events: the rate multipliers
    burst_rate = float(b["no door"].rate_rps) if "rate_rps" in b["no door"].coords else float("nan")
    t0 = min(e.at_s for e in mult) if mult else float("nan")
    t1 = max(e.at_s for e in mult) if mult else float("nan")
    peak = max(float(e.value) for e in mult) if mult else float("nan")
    bq, br = (compare(b[n].goodput.values, b["no door"].goodput.values, "absolute") for n in ("queue", "reject"))
    qr = compare(b["queue"].goodput.values, b["reject"].goodput.values, "absolute")
    bo = {n: outcomes(d) for n, d in b.items()}
    v = verdict(data)
    pl = plain_limit(rates)
    binding = ("inter-token latency, not TTFT, sets the threshold, as the seed says"
               if i + 1 < caps.size and float(med.ttft_p99[i + 1]) <= slo_ttft
               and float(med.tpot_p99[i + 1]) > slo_tpot else
               "TTFT, not only inter-token latency, limits it")
    return "\n".join([
        "## Claim 9: what routing cannot fix", "",
        "**Prediction (the seed).** Routing balances load; it does not create capacity. When "
        "every replica's outstanding work is above the level at which inter-token latency "
        "meets its target, no assignment helps, and the correct response is to refuse or to "
        "queue at the front door; where that threshold sits is read from the model's "
        "latency-versus-batch curve. So: beyond capacity, least_tokens' goodput falls without "
        "admission control, and a door (reject or queue) at the curve's threshold raises it; under "
        "a burst that ends, too.", "",
        f"**Design.** `sweeps/token-routing-admission.toml`{departures(held)}. (a) One default replica offered "
        f"{float(held.rate_rps):g} req/s behind a front door that rejects while its outstanding tokens τ "
        f"exceed a cap (token-model.md §6), caps {_k(caps[0])}–{_k(caps[-1])}: each cap holds τ and gives one "
        "point (mean batch, TTFT p99, TPOT p99) of the latency-versus-batch curve. The threshold is the "
        f"largest cap at which the medians over seeds of TTFT p99 ≤ {slo_ttft:g} ms and TPOT p99 ≤ "
        f"{slo_tpot:g} ms, there and at every smaller cap, computed by `admission.threshold`: "
        f"**{x:,.0f} tokens**, a mean batch of {float(med.batch_mean[i]):.0f} sequences. (b) 8 replicas, "
        f"{POLICY}, offered {', '.join(f'{r:g}' for r in rates_all)} req/s "
        f"({', '.join(f'{r / cap:.2f}' for r in rates_all)} × {POLICY}' capacity at the SLO, {cap_txt}): "
        "no door; reject at the threshold; queue at the threshold (an unbounded FIFO at the router, its head "
        "placed as soon as a replica's τ is at or below the cap). (c) A burst that ends: "
        f"{burst_rate:g} req/s ({burst_rate / cap:.2f} ×) through the warm-up, then {peak:g} × that "
        f"({peak * burst_rate / cap:.2f} × capacity) from {t0:g} s to {t1:g} s, the window's first "
        f"{t1 - t0:g} s, then back: the same three arms. Goodput counts cohort requests within both SLOs per "
        "second of the window; attainment is over all arrivals. Every goodput comparison is "
        f"a difference in req/s, material from {material(data):.1f} req/s, 5 % of no door's goodput at capacity "
        "(beyond it no door's goodput falls to 0, where a ratio is undefined).", "",
        *page_table(main, "The claim's tests:", "", *tests, ""),
        "![Claim 9](../figures/lor-claim9-admission.png)", "",
        f"{reading(main)} {exceptions([(k, r, p) for k, r, p, _ in clauses(data)])}. Refusing at the door holds "
        "beyond capacity and under the burst; queueing without a deadline moves the wait to the router.", "",
        *details(
        "The curve, steady state, offered load, where every request went, the tests in words",
        "The one-replica curve (medians over seeds):", "", *curve_rows, "",
        "Steady state per load (no door; median over seeds: beyond capacity there is none, the backlog "
        "grows):", "", steady_table(a["no door"], ("rate_rps",)), "",
        "Against offered load (medians; door against no door: the paired mean [95 % interval]):", "",
        *load_rows, "",
        f"Where every request went (medians over seeds; each run's outcomes add up to its arrivals — checked "
        f"on {n_ok} of {n_runs} runs):", "", *out_rows, "",
        f"Routing cannot create capacity: without a door {POLICY}' goodput at {top:g} req/s "
        f"changes by {show(c['falls'][0], 1, 'req/s')} against its goodput at {at:g} req/s. Rejecting at the "
        f"curve's threshold gives at {top:g} req/s a goodput {show(held_gap['reject'], 1, 'req/s')} against no "
        f"door's at {at:g} req/s (at least {NEAR * 100:g} % of it on "
        f"{int((near['reject'] >= NEAR * 100).sum())} of {near['reject'].size} seeds), queueing "
        f"{show(held_gap['queue'], 1, 'req/s')} ({int((near['queue'] >= NEAR * 100).sum())} of "
        f"{near['queue'].size}): under sustained overload an "
        "unbounded FIFO grows for the whole run, and its requests' TTFT counts the wait at the router. Under "
        f"the burst, goodput against no door: reject {show(br, 1, 'req/s')}, queue {show(bq, 1, 'req/s')}; queue "
        f"against reject {show(qr, 1, 'req/s')}. Without a door the burst's excess waits in the replicas' "
        f"queues and most of the window's requests complete late ({float(bo['no door']['completed late'].median()):,.0f} "
        f"of {float(b['no door'].arrivals.median()):,.0f}, medians); a door that queues moves the same wait to "
        f"the router ({float(bo['queue']['completed late'].median()):,.0f} late) — with no deadline a FIFO "
        "is no better than the replicas' own queues — while a door that rejects turns away "
        f"{float(bo['reject']['rejected'].median()):,.0f} and serves "
        f"{float(bo['reject']['within SLO'].median()):,.0f} within the SLO. So the claim holds for refusing "
        "(beyond capacity and under the burst) and not for queueing, which under the burst leads the other "
        "way; by the rule at the top a lead against the prediction makes it *does not hold* as stated, "
        "refusal being the half that holds. (A queue that drops what waited too long would sit between "
        "the two; the model's only deadlines are the client's timeouts, which this design does not set.) "
        f"**The threshold.** On one replica the SLO's medians hold up to a cap of {x:,.0f} tokens (TPOT p99 "
        f"{float(med.tpot_p99[i]):.1f} ms, TTFT p99 {float(med.ttft_p99[i]):.0f} ms"
        + (f"; the next cap: {float(med.tpot_p99[i + 1]):.1f} ms and {float(med.ttft_p99[i + 1]):.0f} ms"
           if i + 1 < caps.size else "")
        + f"): {binding}."
        + ("" if pl is None else
           f" Without a door one replica meets the SLO's medians up to {pl[0]:g} req/s (mean batch "
           f"{pl[1]:.0f}; the next rate {pl[2]:.0f}).")
        + f" Verdict: {v}.", ""), *_sensitivity_text(data, x, top)])


def _sensitivity_text(data, x, top):
    """The step-cost sensitivity rows (issue 23 item 6), or nothing if that sweep has not run."""
    sens = sensitivity(data)
    if not sens:
        return []
    rows = ["| step cost | threshold (tokens) | reject − no door, goodput req/s | the lead survives |",
            "|---|---|---|---|",
            f"| default | {x:,.0f} | {show(comparisons(data)[f'reject@{top:g}'][0], 1)} | — |"]
    for v, (xv, c, ok) in sens.items():
        if c is None:
            h = curve(data[f"held-{v}"])
            rows.append(f"| {VARIANTS[v]} | none: at the smallest cap, {_k(float(h.admission_max_tokens[0]))}, "
                        f"TTFT p99 {float(h.ttft_p99[0]):,.0f} ms and TPOT p99 {float(h.tpot_p99[0]):.0f} ms "
                        "(medians) | — | no: there is no threshold to reject at |")
            continue
        rows.append(f"| {VARIANTS[v]} | {xv:,.0f} | {show(c, 1)} | {'yes' if ok else 'no'} |")
    return details(
        "Sensitivity to the step cost",
        "**Sensitivity to the step cost.** The threshold is read from a curve the step-cost model sets, "
        "so this verdict rests on it: `sweeps/token-routing-admission-cost.toml` reads each variant's "
        f"threshold from its own one-replica curve and rejects at it, {SEEDS} seeds, against no door at the "
        "top load (beyond capacity under every variant):", "", *rows) + [""]


def row(data):
    """(claim, prediction, measured, verdict) for the verdict table."""
    x = threshold(data["held"])
    c = comparisons(data)
    rates_all, over, at = loads(data)
    top = max(rates_all)
    return ("9. What routing cannot fix",
            "beyond capacity goodput falls without admission control; refusing or queueing at the "
            "threshold of one replica's latency-versus-batch curve raises it, also under a burst",
            f"threshold {x:,.0f} tokens; no door at {top:g} against {at:g} req/s {show(c['falls'][0], 1, 'req/s')}; "
            f"goodput against no door at {top:g} req/s: reject {show(c[f'reject@{top:g}'][0], 1, 'req/s')}, queue "
            f"{show(c[f'queue@{top:g}'][0], 1, 'req/s')}; burst: reject {show(c['burst-reject'][0], 1, 'req/s')}, "
            f"queue {show(c['burst-queue'][0], 1, 'req/s')} (refusing holds, queueing does not)", verdict(data))
