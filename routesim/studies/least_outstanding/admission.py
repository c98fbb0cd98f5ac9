"""Claim 9 of the least-outstanding-routing study: what routing cannot fix.
sweeps/token-routing-admission.toml (results/token-routing-admission/): ``held.nc`` (one
replica behind a rejecting front door: admission_max_tokens × seed), ``rates.nc`` (one
replica, no door: rate_rps × seed), ``open.nc``, ``reject.nc`` (× admission_max_tokens)
and ``queue.nc`` (8 replicas, least_tokens: rate_rps × seed).

The threshold is computed here from ``held.nc`` (:func:`threshold`), never typed in: the
largest front-door cap on one replica's outstanding tokens τ at which the medians over
seeds of TTFT p99 and TPOT p99 meet the SLO (at that cap and every smaller one). The
8-replica stages must have run at that cap; :func:`arms` raises :class:`Mismatch`,
naming the value the curve gives, when they have not."""

from pathlib import Path

import numpy as np
import xarray as xr
from matplotlib.figure import Figure

from .common import CAPACITY_RPS, FIGURES, lead, save, spread, squeeze

SWEEPS = ("sweeps/token-routing-admission.toml",)
NAME = "token-routing-admission"
STAGES = ("held", "rates", "open", "reject", "queue")
NEAR = 0.9
"""Goodput "held near capacity": at the top load, at least this fraction of the goodput
the cluster reaches at capacity (60 req/s) without a door, on every seed."""
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
    """{stage: Dataset} for STAGES under results folder root, or None if any is missing."""
    d = Path(root) / NAME
    paths = {k: d / f"{k}.nc" for k in STAGES}
    if not all(p.exists() for p in paths.values()):
        return None
    return prepare({k: xr.open_dataset(p, engine="h5netcdf") for k, p in paths.items()})


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

def arms(data):
    """{"no door", "reject", "queue"}: the 8-replica Datasets (rate_rps × seed) at the
    threshold the one-replica curve gives; Mismatch if the sweep did not run it."""
    x = threshold(data["held"])
    caps = np.atleast_1d(data["reject"].admission_max_tokens.values).tolist()
    q = float(data["queue"].admission_max_tokens)
    if x not in caps or q != x:
        raise Mismatch(f"the one-replica curve gives max_tokens = {x:,.0f}, but "
                       f"{SWEEPS[0]} runs reject at {caps} and queue at {q:,.0f}: set them to "
                       f"{x:,.0f} (reject: with its neighbours) and rerun the sweep")
    rej = data["reject"]
    if "admission_max_tokens" in rej.dims:
        rej = rej.sel(admission_max_tokens=x)
    return {"no door": data["open"], "reject": rej, "queue": data["queue"]}


def outcomes(ds):
    """Every cohort request's one outcome, per run: completed within the SLO, completed
    late, rejected, shed, failed, unfinished (their sum is ``arrivals``)."""
    met = (ds.attainment * ds.arrivals).round()
    return {"within SLO": met, "completed late": ds.completed - met, "rejected": ds.rejected,
            "shed": ds.shed, "failed": ds.failed, "unfinished": ds.unfinished}


def conserved(data):
    """(runs checked, runs where arrivals = completed + failed + rejected + shed + unfinished)."""
    n = ok = 0
    for k in ("held", "rates", "open", "reject", "queue"):
        if k not in data:
            continue
        ds = data[k]
        s = ds.completed + ds.failed + ds.rejected + ds.shed + ds.unfinished
        n += int(ds.arrivals.size)
        ok += int((s == ds.arrivals).sum())
    return n, ok


def numbers(data):
    """Per-seed measures behind the verdict, at the threshold the curve gives."""
    a = arms(data)
    rates = a["no door"].rate_rps.values
    top = float(rates.max())
    over = [float(r) for r in rates if r > CAPACITY_RPS]
    g_cap = a["no door"].goodput.sel(rate_rps=CAPACITY_RPS)
    out = {"top": top, "over": over, "g_cap": g_cap,
           "falls": a["no door"].goodput.sel(rate_rps=top) - g_cap}
    for arm in ("reject", "queue"):
        g = a[arm].goodput
        out[arm] = {"ratio": g.sel(rate_rps=top) / g_cap,
                    "beats": {r: lead(g.sel(rate_rps=r) - a["no door"].goodput.sel(rate_rps=r))
                              for r in over}}
    return out


def holds_goodput(num, arm):
    """The door beats no door on every seed at every load above capacity, and keeps the
    top load's goodput within NEAR of the no-door goodput at capacity on every seed."""
    m = num[arm]
    return all(b == "above" for b in m["beats"].values()) and bool((m["ratio"] >= NEAR).all())


def verdict(data):
    """holds: without a door least_tokens' goodput at the top load is below its goodput at
    capacity on every seed (routing creates no capacity), and both reject and queue at
    the curve's threshold hold it (holds_goodput); with qualification when only one of
    them does; else does not hold."""
    num = numbers(data)
    falls = lead(num["falls"]) == "below"
    rej, que = holds_goodput(num, "reject"), holds_goodput(num, "queue")
    if falls and rej and que:
        return "holds"
    if falls and (rej or que):
        return "holds with qualification"
    return "does not hold in this model"


# -- figure ---------------------------------------------------------------------------

def _band(ax, x, v, color, label, style="o-", scale=1.0, lw=1.5):
    v = v * scale
    ax.plot(x, v.median("seed"), style, color=color, label=label, lw=lw, ms=4)
    ax.fill_between(x, v.min("seed"), v.max("seed"), color=color, alpha=0.12)


def figure(data, figures_dir=FIGURES):
    held, rates = data["held"], data["rates"]
    x = threshold(held)
    a = arms(data)
    slo_ttft, slo_tpot = held.attrs["slo_ttft_ms"], held.attrs["slo_tpot_ms"]
    fig = Figure(figsize=(13, 7.6))
    axes = fig.subplots(2, 3)

    # (top left, middle) the one-replica latency-versus-batch curves
    mh, mr = curve(held), curve(rates)
    caps = held.admission_max_tokens.values
    for ax, var, slo, title in ((axes[0, 0], "tpot_p99", slo_tpot, "TPOT p99 (ms)"),
                                (axes[0, 1], "ttft_p99", slo_ttft, "TTFT p99 (ms)")):
        lo, hi = held[var].min("seed"), held[var].max("seed")
        ax.errorbar(mh.batch_mean, mh[var], yerr=[mh[var] - lo, hi - mh[var]], fmt="o-",
                    color="#d62728", ms=4, lw=1.5, elinewidth=0.8, alpha=0.9,
                    label="held by a front door at τ ≤ cap (15 req/s)")
        ax.plot(mr.batch_mean, mr[var], "s--", color="#888888", ms=4, lw=1.2,
                label="no door, 2–15 req/s")
        ax.axhline(slo, color="k", lw=0.8, ls=":")
        ax.text(0.02, slo, f"SLO {slo:g} ms", fontsize=7, va="bottom", ha="left",
                transform=ax.get_yaxis_transform())
        i = int(np.flatnonzero(caps == x)[0])
        ax.plot(mh.batch_mean[i], mh[var][i], "*", color="k", ms=13, zorder=5,
                label=f"threshold: cap {x / 1000:.0f}k tokens")
        for j in (0, 2, 4, 6, 8, 10):
            if j < caps.size:
                ax.annotate(f"{caps[j] / 1000:.0f}k", (float(mh.batch_mean[j]), float(mh[var][j])),
                            textcoords="offset points", xytext=(-4, 7), fontsize=7, color="#d62728")
        ax.set_xlabel("mean batch on one replica (sequences)")
        ax.set_ylabel(title)
        ax.set_title(f"one replica: {title} against batch", fontsize=10)
    axes[0, 1].set_yscale("log")
    axes[0, 0].legend(fontsize=7, loc="lower right")

    # (top right) where every request went, at the top load
    num = numbers(data)
    top = num["top"]
    names = list(a)
    left = np.zeros(len(names))
    for out, color in zip(OUTCOMES, OUTCOME_COLORS):
        share = np.array([float((outcomes(a[n].sel(rate_rps=top))[out]
                                 / a[n].arrivals.sel(rate_rps=top)).median()) * 100 for n in names])
        axes[0, 2].barh(range(len(names)), share, left=left, color=color, label=out)
        left += share
    axes[0, 2].set_yticks(range(len(names)), [n if n == "no door" else f"{n} at {x / 1000:.0f}k"
                                              for n in names])
    axes[0, 2].invert_yaxis()
    axes[0, 2].set_xlim(0, 100)
    axes[0, 2].set_xlabel("share of arrivals (%, median over seeds)")
    axes[0, 2].set_title(f"8 replicas at {top / CAPACITY_RPS:g} × capacity: every request's outcome",
                         fontsize=10)
    axes[0, 2].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)

    # (bottom) 8 replicas against offered load
    lx = a["no door"].rate_rps.values / CAPACITY_RPS
    rej_all = data["reject"]
    for ax, var, scale, title in ((axes[1, 0], "goodput", 1, "goodput (requests/s within SLO)"),
                                  (axes[1, 1], "attainment", 100, "SLO attainment (% of arrivals)"),
                                  (axes[1, 2], "tpot_p99", 1, "TPOT p99 (ms)")):
        for n, ds in a.items():
            label = n if n == "no door" else f"{n} at {x / 1000:.0f}k"
            _band(ax, lx, ds[var], COLORS[n], label, scale=scale)
        if var != "attainment" and "admission_max_tokens" in rej_all.dims:
            for c, style in zip([c for c in rej_all.admission_max_tokens.values if c != x], (":", "-.")):
                v = rej_all[var].sel(admission_max_tokens=c).median("seed") * scale
                ax.plot(lx, v, style, color="#d62728", lw=1, label=f"reject at {c / 1000:.0f}k")
        ax.axvline(1, color="k", lw=0.6, ls=":")
        ax.set_xlabel("offered load / capacity (60 req/s)")
        ax.set_title(f"8 replicas, least_tokens: {title}", fontsize=10)
    axes[1, 2].axhline(slo_tpot, color="k", lw=0.8, ls=":")
    axes[1, 2].text(0.02, slo_tpot, f"SLO {slo_tpot:g} ms", fontsize=7, va="bottom",
                    transform=axes[1, 2].get_yaxis_transform())
    adm = a["reject"]
    _band(axes[1, 1], lx, adm.attainment * adm.arrivals / (adm.arrivals - adm.rejected),
          COLORS["reject"], "reject: % of admitted", style="^--", scale=100, lw=1)
    axes[1, 0].legend(fontsize=7, loc="center right")
    axes[1, 1].legend(fontsize=7)
    fig.suptitle("Claim 9: what routing cannot fix — front-door admission at the threshold read "
                 "from one replica's latency-versus-batch curve (median; bands and bars: "
                 "min–max over seeds)", fontsize=10)
    fig.tight_layout()
    return save(fig, "lor-claim9-admission", figures_dir)


# -- document -------------------------------------------------------------------------

def _rng(d, digits=0, scale=1.0):
    """'mean [min, max]' of per-seed values, unsigned."""
    d = np.asarray(d) * scale
    return f"{np.mean(d):.{digits}f} [{np.min(d):.{digits}f}, {np.max(d):.{digits}f}]"


def _k(tokens):
    return f"{tokens / 1000:.0f}k"


def section(data):
    held, rates = data["held"], data["rates"]
    x = threshold(held)
    a = arms(data)
    num = numbers(data)
    top, over = num["top"], num["over"]
    med = curve(held)
    ok = meets(med, held).values
    caps = held.admission_max_tokens.values
    i = int(np.flatnonzero(caps == x)[0])
    slo_ttft, slo_tpot = held.attrs["slo_ttft_ms"], held.attrs["slo_tpot_ms"]
    n_held, n_seeds = held.sizes["seed"], a["no door"].sizes["seed"]

    curve_rows = ["| cap on τ (tokens) | batch (sequences) | TTFT p99 ms | TPOT p99 ms | SLO met |",
                  "|---|---|---|---|---|"]
    for j, c in enumerate(caps):
        mark = " **← threshold**" if c == x else ""
        curve_rows.append(f"| {c:,.0f} | {float(med.batch_mean[j]):.1f} | {float(med.ttft_p99[j]):.0f} | "
                          f"{float(med.tpot_p99[j]):.1f} | {'yes' if ok[j] else 'no'}{mark} |")

    rates_all = a["no door"].rate_rps.values
    load_rows = ["| load | goodput, no door | reject − no door | queue − no door | "
                 "attainment %: no door / reject / queue |", "|---|---|---|---|---|"]
    for r in rates_all:
        g = {n: ds.goodput.sel(rate_rps=r) for n, ds in a.items()}
        att = " / ".join(f"{float(ds.attainment.sel(rate_rps=r).median()) * 100:.0f}" for ds in a.values())
        load_rows.append(f"| {r:g} req/s ({r / CAPACITY_RPS:.2f}×) | {_rng(g['no door'], 1)} | "
                         f"{spread(g['reject'] - g['no door'], 1)} | {spread(g['queue'] - g['no door'], 1)} | "
                         f"{att} |")

    out_rows = ["| arm at " + f"{top:g} req/s | arrivals | " + " | ".join(OUTCOMES) + " |",
                "|---|---|" + "---|" * len(OUTCOMES)]
    for n, ds in a.items():
        d = ds.sel(rate_rps=top)
        o = outcomes(d)
        out_rows.append(f"| {n} | {float(d.arrivals.median()):,.0f} | "
                        + " | ".join(f"{float(o[k].median()):,.0f}" for k in OUTCOMES) + " |")
    n_runs, n_ok = conserved(data)

    rej, que, nod = a["reject"], a["queue"], a["no door"]
    ratio_r, ratio_q = num["reject"]["ratio"] * 100, num["queue"]["ratio"] * 100
    left_pct = (num["falls"] / num["g_cap"] + 1) * 100
    adm = rej.sel(rate_rps=top)
    adm_att = adm.attainment * adm.arrivals / (adm.arrivals - adm.rejected) * 100
    tp = {n: float(ds.tpot_p99.sel(rate_rps=top).median()) for n, ds in a.items()}
    tt = {n: float(ds.ttft_p99.sel(rate_rps=top).median()) for n, ds in a.items()}
    pl = plain_limit(rates)
    rej_all = data["reject"]
    neigh = [c for c in np.atleast_1d(rej_all.admission_max_tokens.values) if c != x]
    neigh_txt = "; ".join(
        f"at {_k(c)} goodput {float(rej_all.goodput.sel(admission_max_tokens=c, rate_rps=top).median()):.1f} "
        f"req/s and TPOT p99 {float(rej_all.tpot_p99.sel(admission_max_tokens=c, rate_rps=top).median()):.1f} ms"
        for c in neigh)
    tpot8 = rej.tpot_p99.sel(rate_rps=over)
    tpot8_med = tpot8.median("seed")
    nd_top = outcomes(nod.sel(rate_rps=top))
    late, done = float(nd_top["completed late"].median()), float(nod.completed.sel(rate_rps=top).median())
    binding = ("inter-token latency, not TTFT, sets the threshold, as the seed says"
               if i + 1 < caps.size and float(med.ttft_p99[i + 1]) <= slo_ttft
               and float(med.tpot_p99[i + 1]) > slo_tpot else
               "TTFT, not only inter-token latency, limits it")
    unf_fifo = float((que.unfinished - rej.unfinished).sel(rate_rps=top).median())
    q_beat = [r for r, b in num["queue"]["beats"].items() if b == "below"]
    rej_holds, que_holds = holds_goodput(num, "reject"), holds_goodput(num, "queue")

    plain_txt = ("" if pl is None else
                 f" Without a door (the grey curve: one replica offered 2–15 req/s) the SLO's medians "
                 f"hold up to {pl[0]:g} req/s, at a mean batch of {pl[1]:.0f}, and fail at the next "
                 f"rate, mean batch {pl[2]:.0f}, below the held curve's {float(med.batch_mean[i]):.0f}: "
                 "plausibly because there the batch swings around its mean with the arrivals and "
                 "the p99 follows the swings, while a door holds it near the cap (not measured "
                 "here). That is why the threshold is read from the curve a door produces, and "
                 "the batch converted to tokens by the door itself (each point's cap), not by an "
                 "average number of tokens per sequence.")
    return "\n".join([
        "## Claim 9: what routing cannot fix", "",
        "**Prediction (the seed).** Routing balances load; it does not create capacity. When "
        "every replica's outstanding work is above the level at which inter-token latency "
        "meets its target, no assignment helps, and the correct response is to refuse or to "
        "queue at the front door; where that threshold sits is read from the model's "
        "latency-versus-batch curve. So: beyond capacity, least_tokens' goodput falls without "
        "admission control and is held near capacity with it (near: at least "
        f"{NEAR * 100:.0f} % of the no-door goodput at capacity, on every seed).", "",
        f"**Design.** `sweeps/token-routing-admission.toml`. (a) One default replica offered "
        f"15 req/s (2 × its share of capacity) behind a front door that rejects while its "
        f"outstanding tokens τ exceed a cap (token-model.md §6: a request is turned away when "
        f"every eligible replica's τ is above `max_tokens`), caps {_k(caps[0])}–{_k(caps[-1])}, "
        f"{n_held} seeds: each cap holds τ, and gives one point (mean batch, TTFT p99, TPOT p99) "
        "of the latency-versus-batch curve, with the batch set in the door's own unit. The "
        f"threshold is the largest cap at which the medians over seeds of TTFT p99 ≤ {slo_ttft:g} "
        f"ms and TPOT p99 ≤ {slo_tpot:g} ms, there and at every smaller cap (a median over "
        f"seeds, as for the rule that placed capacity at 60 req/s); it is computed by `admission.threshold` from the Dataset: "
        f"**{x:,.0f} tokens**, a mean batch of {float(med.batch_mean[i]):.0f} sequences. (b) 8 "
        f"replicas, least_tokens (claim 1's best), offered "
        f"{', '.join(f'{r / CAPACITY_RPS:g}' for r in rates_all)} × 60 req/s, {n_seeds} seeds "
        "(the same workload per seed in every arm): no door; reject at the threshold; queue "
        "at the threshold (an unbounded FIFO at the router, its head placed as soon as a "
        "replica's τ is at or below the cap). A sweep file holds numbers, so it runs reject at "
        f"{', '.join(_k(c) for c in np.atleast_1d(rej_all.admission_max_tokens.values))} and queue "
        f"at {_k(float(que.admission_max_tokens))}; the module checks that the curve's value is "
        "among them and refuses to write this section otherwise. 10 s warm-up, 50 s measured; "
        "goodput counts requests within both SLOs per second, attainment is over all arrivals.",
        "", *curve_rows, "",
        "Against offered load (goodput in requests/s; differences paired by seed, mean "
        "[min, max]; attainment medians):", "",
        *load_rows, "",
        f"Where every request went at {top:g} req/s (medians over seeds; each row's outcomes "
        f"add up to its arrivals on every run — checked on {n_ok} of {n_runs} runs of the "
        "sweep):", "",
        *out_rows, "",
        "![Claim 9](../figures/lor-claim9-admission.png)", "",
        f"**Reading.** Routing cannot create capacity: without a door, least_tokens' goodput "
        f"at {top / CAPACITY_RPS:g} × capacity is {_rng(left_pct)} % of its goodput at "
        f"capacity ({_rng(num['g_cap'], 1)} req/s; mean [min, max] over seeds)"
        + (", a collapse on every seed" if lead(num["falls"]) == "below" else "")
        + ". No request is turned away; they wait: the replicas' queues grow for the whole "
        f"run, TTFT p99 reaches {tt['no door'] / 1000:.0f} s, most arrivals are still waiting "
        f"at the horizon (unfinished), and of the {done:,.0f} that complete {late:,.0f} miss "
        "the SLO (medians). "
        f"Rejecting at the curve's threshold "
        + ("holds goodput: " if rej_holds else "does not hold goodput by this test: ")
        + f"at {top:g} req/s it is {_rng(ratio_r)} % of the no-door goodput at capacity, "
        f"and above no door on every seed at "
        + ", ".join(f"{r:g}" for r, b in num["reject"]["beats"].items() if b == "above")
        + " req/s; the requests it loses are rejected at once ("
        + f"{float(rej.rejected.sel(rate_rps=top).median()):,.0f}), and "
        f"{_rng(adm_att)} % of the admitted meet the SLO. At capacity itself the "
        f"door changes goodput by {spread(rej.goodput.sel(rate_rps=CAPACITY_RPS) - nod.goodput.sel(rate_rps=CAPACITY_RPS), 1)} "
        f"req/s, and below capacity it never acts. Queueing at the same threshold "
        + ("also holds goodput. " if que_holds else
           f"does not: at {top:g} req/s its goodput is {_rng(ratio_q)} % of the "
           "no-door goodput at capacity. The door protects the batch (TPOT p99 "
           f"{tp['queue']:.0f} ms against {tp['no door']:.0f} ms without one) but TTFT counts "
           f"the wait at the router, and an unbounded FIFO under sustained overload grows for "
           f"the whole run (TTFT p99 {tt['queue'] / 1000:.0f} s); the requests it holds at the "
           f"horizon are unfinished: {float(que.unfinished.sel(rate_rps=top).median()):,.0f} "
           f"against the reject arm's {float(rej.unfinished.sel(rate_rps=top).median()):,.0f} at "
           f"the same cap, and the difference, about {unf_fifo:,.0f}, is roughly what waits in "
           "the router's FIFO (behind both doors the replicas hold τ near the cap). ")
        + ("It is worse than no door on every seed at "
           + ", ".join(f"{r:g}" for r in q_beat) + " req/s. " if q_beat else "")
        + "A queue helps a burst that ends; against a load that stays above capacity only "
        "refusal keeps goodput. (A queue that drops what waited too long would sit between "
        "the two; the model's only deadline is the client's `timeout_ms`, which covers the "
        "whole attempt, decoding included, so it cannot stand for a queue deadline here.)", "",
        f"**The threshold.** On one replica the SLO's medians hold up to a cap of {x:,.0f} "
        f"tokens (TPOT p99 {float(med.tpot_p99[i]):.1f} ms; the next cap misses it"
        + (f", {float(med.tpot_p99[i + 1]):.1f} ms" if i + 1 < caps.size else "")
        + f"): {binding}. On 8 replicas rejecting at {_k(x)}, the cluster's TPOT p99 above "
        f"capacity has medians {float(tpot8_med.min()):.1f}–{float(tpot8_med.max()):.1f} ms by "
        f"load (per seed {float(tpot8.min()):.1f}–{float(tpot8.max()):.1f} ms): the threshold "
        "carries over to the cluster at the edge of the target, as it was read at the edge "
        f"on one replica; TTFT p99 is {tt['reject']:.0f} ms at {top:g} req/s. Its neighbours on the grid, at "
        f"{top:g} req/s: {neigh_txt} (against {float(rej.goodput.sel(rate_rps=top).median()):.1f} "
        f"req/s and {tp['reject']:.1f} ms at the threshold)" + _neighbours(rej_all, x, top, slo_tpot)
        + "." + plain_txt, ""])


def _neighbours(rej_all, x, top, slo_tpot):
    """What the caps below and above the threshold do at the top load (medians)."""
    at = lambda c, v: float(rej_all[v].sel(admission_max_tokens=c, rate_rps=top).median())  # noqa: E731
    caps = np.atleast_1d(rej_all.admission_max_tokens.values)
    if caps.size < 2 or "admission_max_tokens" not in rej_all.dims:
        return ""          # one cap run: no neighbours to compare
    g0, words = at(x, "goodput"), []
    for c in caps[caps < x][-1:]:
        words.append("a lower cap " + ("turns away goodput" if at(c, "goodput") < g0 else
                                       "keeps as much goodput"))
    for c in caps[caps > x][:1]:
        more = at(c, "goodput") > 1.02 * g0
        words.append("a higher one " + ("adds goodput" if more else "adds no goodput")
                     + (" and misses the TPOT p99 target" if at(c, "tpot_p99") > slo_tpot else ""))
    return (": " + ", ".join(words)) if words else ""


def row(data):
    """(claim, prediction, measured, verdict) for the verdict table."""
    x = threshold(data["held"])
    num = numbers(data)
    top = num["top"]
    r, q = num["reject"]["ratio"] * 100, num["queue"]["ratio"] * 100
    falls = (num["falls"] / num["g_cap"] + 1) * 100
    return ("9. What routing cannot fix",
            "beyond capacity goodput falls without admission control and is held near capacity "
            "with it (reject or queue), at a threshold read from one replica's latency-versus-batch curve",
            f"threshold {x:,.0f} tokens per replica; goodput at {top / CAPACITY_RPS:g} × capacity as % of "
            f"goodput at capacity: no door {falls.mean().item():.0f} % (per seed {falls.min().item():.0f} "
            f"to {falls.max().item():.0f}), reject {r.mean().item():.0f} % ({r.min().item():.0f} to "
            f"{r.max().item():.0f}), queue {q.mean().item():.0f} % ({q.min().item():.0f} to "
            f"{q.max().item():.0f})", verdict(data))
