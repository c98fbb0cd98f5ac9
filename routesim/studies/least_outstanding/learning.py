"""Claim 8 of the least-outstanding-routing study: count-based capacity learning
over-learns, tested within sustained capacity (issue 23 item 7).
sweeps/token-routing-hetero.toml (results/token-routing-hetero/hetero.nc: policy ×
rate_rps × seed × replica). Comparisons are paired by seed (:func:`common.compare`)."""


import numpy as np
from matplotlib.figure import Figure

from .common import (PAGE_ARM, FIGURES, MECHANISM, MOONCAKE_ABOVE, capacity, compare, departures, details, exceptions, load_stages, open_stage, page_table, rate_text, reading, results_root, save, show,
                     steady_table, times_text, verdict_of)

SWEEPS = ("sweeps/token-routing-hetero.toml",)
POLICIES = ("round_robin", "least_tokens", "rate_weighted")


def load(root):
    """The hetero stage's Dataset (its results root kept: :func:`common.load_stages`), or None."""
    data = load_stages(root, "token-routing-hetero", ("hetero",))
    return data and data["hetero"]


def azure(ds, stage="azure"):
    """The Azure-length arm (stage ``azure`` beside the design's, in its shape: policy ×
    rate_rps × seed × replica), for :func:`clauses`; None if it did not run. ``stage``:
    another arm's stage read the same way (:func:`server`)."""
    az = open_stage(results_root(ds) / "token-routing-hetero" / f"{stage}.nc")
    if az is not None and "rate_rps" not in az.dims:
        az = az.expand_dims(rate_rps=[float(az.attrs["rate_rps"])])
    return az


def server(ds):
    """The server arm (stage ``server``: the design at two loads on vLLM's asynchronous
    loop with the roofline cost, :mod:`.server`), for :func:`clauses`; None if it did not
    run."""
    return azure(ds, "server")


def rates(ds):
    return [float(r) for r in np.atleast_1d(ds.rate_rps.values)]


def fast_share(ds):
    """Per run: replica 1's share of the attempts routed in the window."""
    return ds.assigned.sel(replica=1) / ds.assigned.sum("replica")


def capacity_share(ds):
    """Replica 1's share of the cluster's capacity: speeds are 1 / time factor."""
    speed = 1.0 / ds.time_factor.squeeze(drop=True)
    return float(speed.sel(replica=1) / speed.sum("replica"))


def _faster_pct(ds):
    return (1.0 / float(ds.time_factor.squeeze(drop=True).sel(replica=1)) - 1) * 100


def _at(ds, policy, rate, var="share"):
    d = ds.sel(policy=policy)
    if "rate_rps" in d.dims:
        d = d.sel(rate_rps=rate)
    return (fast_share(d) if var == "share" else d[var]).values


def comparisons(ds):
    """{(name, rate): (compare result, predicted sign)} at each load: over —
    rate_weighted's fast-replica share against its share of capacity (points); more —
    against least_tokens' share (points)."""
    out = {}
    cs = capacity_share(ds)
    for r in rates(ds):
        rw = _at(ds, "rate_weighted", r)
        out[("over", r)] = (compare(rw, np.full(rw.shape, cs), "points"), +1)
        out[("more", r)] = (compare(rw, _at(ds, "least_tokens", r), "points"), +1)
    return out


ADDED_WORDS = ""
"""Both comparisons are the seed's (count-based learning over-learns; scoring by work in
flight avoids the feedback): the prediction adds nothing."""
AZURE_BASIS = "least_tokens"
"""The policy whose capacity the Azure-length arm's loads are placed against (:mod:`.workloads`)."""
MOONCAKE_WHY = MOONCAKE_ABOVE
SERVER_BASIS = "least_tokens"
"""The policy whose capacity on the server the server arm's loads are placed against (:mod:`.server`)."""
SERVER_PREDICTION = (
    "**Prediction on the server** (stage `server`, 38 and 45 req/s, written before its runs). The time "
    "factor scales the roofline's step as it scales the linear cost's, so the fast replica is 30 % "
    "faster on either; rate_weighted's weights follow the completions it is sent, a feedback that does "
    "not depend on the cost's form. As on the page's replica rate_weighted gives the fast replica less "
    "than its 15.7 % share of capacity and less than least_tokens does: the claim *does not hold*, no "
    "change.")
"""The server arm's prediction (issue 44 item 2), fixed before its runs."""
SERVER_PREDICTED = ("does not hold", "none added")
"""The verdicts :data:`SERVER_PREDICTION` states (the seed's mechanism, the added clauses), for
:func:`.server.held`."""


def clauses(ds):
    """[(label, comparison, predicted sign, part)] of :func:`comparisons`: all the seed's."""
    return [(f"{k} at {r:g}", v[0], v[1], MECHANISM) for (k, r), v in comparisons(ds).items()]


def verdict(ds):
    """:func:`common.verdict_of` over :func:`comparisons`' leads and predicted signs."""
    c = comparisons(ds)
    return verdict_of([v[0][3] for v in c.values()], [v[1] for v in c.values()])


FIGURE = "lor-claim8-hetero"
"""The stem of the claim's figure (:func:`main_figure`)."""


def figure(ds, figures_dir=FIGURES):
    """The page's replica's figure (:func:`main_figure`)."""
    return main_figure(ds, figures_dir)


def main_figure(ds, figures_dir=FIGURES, arm=PAGE_ARM):
    """figures/<FIGURE><arm's suffix>.png/.svg: the fast replica's share of attempts and the
    TTFT p99 per policy and load on ``arm`` (a dot per seed, a bar at the median)."""
    rs = rates(ds)
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    ax, ax2 = fig.subplots(1, 2)
    rng = np.random.default_rng(0)            # horizontal jitter of the seeds' dots only
    colours = ("#444444", "#1f77b4", "#d62728")
    for j, r in enumerate(rs):
        for i, p in enumerate(POLICIES):
            x = i + (j - (len(rs) - 1) / 2) * 0.3
            for a, v in ((ax, _at(ds, p, r) * 100), (ax2, _at(ds, p, r, "ttft_p99"))):
                a.plot(x + rng.uniform(-0.05, 0.05, v.size), v, "o" if j == 0 else "^", ms=3,
                       alpha=0.55, color=colours[i], label=f"{r:g} req/s" if i == 0 and a is ax else None)
                a.plot([x - 0.1, x + 0.1], [np.median(v)] * 2, "-", color=colours[i], lw=2)
    ax.axhline(capacity_share(ds) * 100, color="k", ls="--", lw=1)
    ax.text(-0.45, capacity_share(ds) * 100 + 0.2, f"its share of capacity ({capacity_share(ds) * 100:.1f} %)",
            fontsize=7.5, va="bottom")
    for a in (ax, ax2):
        a.set_xticks(range(len(POLICIES)), POLICIES)
        a.grid(axis="y", lw=0.3, alpha=0.5)
    ax.set_ylabel("fast replica's share of attempts (%)")
    ax.legend(fontsize=7.5, loc="upper left")
    ax2.set_ylabel("TTFT p99 (ms)")
    ax2.set_yscale("log")
    fig.suptitle(f"Claim 8 {arm.words}: replica 1 {_faster_pct(ds):.0f} % faster, {ds.sizes['replica']} replicas, "
                 f"{' and '.join(f'{r:g}' for r in rs)} req/s (o, ^; a dot per seed, bar at the median; "
                 f"{ds.sizes['seed']} seeds)", fontsize=9.5)
    return save(fig, FIGURE + arm.suffix, figures_dir)


def section(ds, main=()):
    """Claim 8's section; ``main``: the main arm's lines (:func:`.common.page_table`)."""
    root = results_root(ds)
    rs = rates(ds)
    c = comparisons(ds)
    cs = capacity_share(ds) * 100
    caps = {p: capacity(root, p) for p in POLICIES}
    where = "; ".join(
        f"{p} {rate_text(caps[p][0])} req/s (" + ", ".join(times_text(r, caps[p][0]) for r in rs) + ")"
        for p in POLICIES)
    measured = all(x[3] for x in caps.values())
    rows = ["| load req/s | policy | fast replica's share % | TTFT p99 ms | TPOT p99 ms | attainment % |",
            "|---|---|---|---|---|---|"]
    for r in rs:
        for p in POLICIES:
            rows.append(f"| {r:g} | {p} | {np.median(_at(ds, p, r)) * 100:.1f} | "
                        f"{np.median(_at(ds, p, r, 'ttft_p99')):,.0f} | {np.median(_at(ds, p, r, 'tpot_p99')):.1f} | "
                        f"{np.median(_at(ds, p, r, 'attainment')) * 100:.1f} |")
    word = {1: "higher", -1: "lower", 0: "none"}
    tests = ["| load req/s | test | mean [95 % interval] pp | predicted | lead |", "|---|---|---|---|---|"]
    for (name, r), (res, pred) in c.items():
        what = ("rate_weighted's share − its share of capacity" if name == "over"
                else "rate_weighted's share − least_tokens'")
        tests.append(f"| {r:g} | {what} | {show(res, 2)} | {word[pred]} | {word[res[3]]} |")
    ttft = {r: compare(_at(ds, "rate_weighted", r, "ttft_p99"), _at(ds, "least_tokens", r, "ttft_p99"))
            for r in rs}
    lt = {r: compare(_at(ds, "least_tokens", r), np.full(ds.sizes["seed"], cs / 100), "points") for r in rs}
    rr = {r: compare(_at(ds, "rate_weighted", r), _at(ds, "round_robin", r), "points") for r in rs}
    v = verdict(ds)
    over_any = any(c[("over", r)][0][3] == 1 for r in rs)
    return "\n".join([
        "## Claim 8: count-based capacity learning over-learns", "",
        "**Prediction (the seed).** A router that learns capacity from completed requests "
        "sends a faster replica more traffic than its capacity warrants; scoring by work in "
        "flight does not.", "",
        f"**Design.** `sweeps/token-routing-hetero.toml`: {ds.sizes['replica']} replicas, replica 1 "
        f"{_faster_pct(ds):.0f} % faster (its share of the cluster's speed {cs:.1f} %), the default "
        f"workload, {' and '.join(f'{r:g}' for r in rs)} req/s — within sustained capacity, against each "
        f"policy's capacity at the SLO on 8 default replicas: {where}"
        + ("" if measured else "; the README's provisional figures, the capacity stage has not run")
        + f" (this cluster, one replica faster, has a little more). rate_weighted (weights from the "
        f"completions of the last {float(ds.attrs['window_ms']):g} ms) against least_tokens and round_robin"
        f"{departures(ds)}.", "",
        *page_table(main, "The claim's tests:", "", *tests, ""),
        f"![Claim 8](../figures/{FIGURE}.png)", "",
        f"{reading(main)} {exceptions([(k, r, p) for k, r, p, _ in clauses(ds)])}: "
        + ("rate_weighted over-learns" if over_any else "rate_weighted under-learns rather than over-learns")
        + "; its TTFT p99 against least_tokens': " + "; ".join(f"{show(ttft[r], 0, '%')} at {r:g} req/s" for r in rs)
        + ".", "",
        *details(
        "Medians, steady state, the tests in words, why the step cost was not varied",
        "Medians over seeds:", "",
        *rows, "",
        "Steady state (median over seeds):", "",
        steady_table(ds, ("rate_rps", "policy")), "",
        ""
        + ("Within capacity rate_weighted gives the fast replica more than its share of capacity at "
           + " and ".join(f"{r:g} req/s ({show(c[('over', r)][0], 2, 'pp')})" for r in rs
                          if c[("over", r)][0][3] == 1)
           if over_any else
           "Within capacity rate_weighted does not give the fast replica more than its share of capacity: "
           + "; ".join(f"{show(c[('over', r)][0], 2, 'pp')} at {r:g} req/s" for r in rs))
        + "; against least_tokens' share: "
        + "; ".join(f"{show(c[('more', r)][0], 2, 'pp')} at {r:g} req/s" for r in rs)
        + " (least_tokens' own share against capacity: "
        + "; ".join(f"{show(lt[r], 2, 'pp')} at {r:g}" for r in rs)
        + "); against round_robin's 1/8: "
        + "; ".join(f"{show(rr[r], 2, 'pp')} at {r:g}" for r in rs)
        + ". Where its share is below the fair one it under-learns rather than over-learns: plausibly "
        "because below capacity a replica completes what it was sent, so a weight learned from the last "
        "window's completions follows the traffic the router itself gave it, and the noise of a 1 s window "
        "of heavy-tailed completions, more than the replica's speed (not tested here). rate_weighted's "
        "TTFT p99 against least_tokens': "
        + "; ".join(f"{show(ttft[r], 0, '%')} at {r:g} req/s" for r in rs)
        + f". Verdict: {v}.", "",
        "**Sensitivity to the step cost** (issue 23 item 6): not rerun. The verdict compares shares of "
        "attempts, and the fast replica's speed is a multiple of whatever the step costs; it does not rest "
        "on one step-cost formula."), ""])


def row(ds):
    """(claim, prediction, measured, verdict) for the verdict table."""
    c = comparisons(ds)
    rs = rates(ds)
    return ("8. Count-based capacity learning over-learns",
            f"rate_weighted gives a {_faster_pct(ds):.0f} % faster replica more than its "
            f"{capacity_share(ds) * 100:.1f} % capacity share (and more than least_tokens does)",
            "; ".join(f"{r:g} req/s: share − capacity share {show(c[('over', r)][0], 2, 'pp')}, − least_tokens' "
                      f"{show(c[('more', r)][0], 2, 'pp')}" for r in rs), verdict(ds))
