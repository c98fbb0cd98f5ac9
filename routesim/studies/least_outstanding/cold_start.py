"""Claim 6 of the least-outstanding-routing study: cold replicas get flooded.
sweeps/token-routing-cold.toml (results/token-routing-cold/): ``before.nc`` (the 7 warm
replicas' steady state before the recovery: seed), ``cold.nc`` (cold_factor ×
ready_delay_ms × slow_start_ms × seed × replica: the requests arriving in the
recovery's first seconds, drained), ``flood.nc`` and ``flood-ready.nc`` (the attempts
routed in the first second after the replica becomes eligible, without and with the
readiness delay: slow_start_ms × seed × replica).

The recovered replica is the sweep's ``[cluster] start_down`` replica; the others are
the "warm" replicas. Its TTFT is ``replica_ttft_p50/p99`` (the completed cohort requests
that completed on it); the warm replicas' is the mean over them of theirs. The sweep
has no retries and no failures, so the attempts routed to the recovered replica
(``assigned``) are its requests, all of them in the cohort (it was down before).
Comparisons are paired by seed (:func:`common.compare`)."""


import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .common import (ON_PAGE, PAGE_ARM, FIGURES, MECHANISM, MOONCAKE_BELOW, capacity, compare, details, load_stages, page_table, reading, results_root, save, show, steady_table,
                     verdict_of)

SWEEPS = ("sweeps/token-routing-cold.toml",)
STAGES = ("before", "cold", "flood", "flood-ready")
POLICY = "least_requests"
COLOURS = {"cold": "#c0392b", "warm": "#4f7cac", "waiting": "#e8a09a", "warmth": "#7f7f7f"}
TIMELINE_INTERVAL_MS = 50.0


AZURE = {"cold": "azure-cold", "flood": "azure-flood", "flood-ready": "azure-flood-ready"}
"""The Azure-length arm's stages, by the main design's stage each stands for."""
SERVER = {k: "server-" + k for k in AZURE}
"""The server arm's stages (vLLM async + roofline, :mod:`.server`), by the main design's stage
each stands for."""


def load(root):
    """{stage name: Dataset} of the four stages, and "azure" and "server": the
    Azure-length and server arms' stages by their names (:data:`AZURE`, :data:`SERVER`;
    None if any is missing); None if a main stage is missing."""
    data = load_stages(root, "token-routing-cold", STAGES)
    if data is not None:
        data["azure"] = load_stages(root, "token-routing-cold", AZURE.values())
        data["server"] = load_stages(root, "token-routing-cold", SERVER.values())
    return data


def _arm(data, which, names):
    """The arm ``which`` (as :func:`load` keys it) in the design's shape: its stages
    under the main design's names (``names``: main stage -> the arm's); None if it did
    not run."""
    a = data.get(which)
    return None if a is None else {k: a[s] for k, s in names.items()}


def azure(data):
    """The Azure-length arm in the design's shape, for :func:`clauses`; None if it did not
    run."""
    return _arm(data, "azure", AZURE)


def server(data):
    """The server arm (stages ``server-*``: the design's three stages on vLLM's
    asynchronous loop with the roofline cost, :mod:`.server`) in the design's shape, for
    :func:`clauses`; None if it did not run."""
    return _arm(data, "server", SERVER)


# -- what the sweep says -------------------------------------------------------------

def _sweep(ds):
    from ...results import sweep_of
    return sweep_of(ds)


def cold_replica(ds) -> int:
    """The recovering replica (1-based): the sweep's start_down replica."""
    (r,) = _sweep(ds).start_down
    return int(r) + 1


def _stage_value(ds, name):
    """A stage's single value of a grid axis (open_stage drops length-one coordinates)."""
    (stage,) = [s for s in _sweep(ds).stages if s.name == ds.attrs["stage"]]
    (v,) = stage.values[name]
    return v


def rate_rps(ds) -> float:
    return float(_stage_value(ds, "rate_rps"))


def _events(ds):
    return _sweep(ds).scenarios[_stage_value(ds, "scenario")]


def recovery_s(ds) -> float:
    """Time of the recovery (s) in the stage's scenario."""
    return float(next(e.at_s for e in _events(ds) if e.replica == cold_replica(ds) - 1))


def arms(ds):
    """[(label, ready_delay_ms, slow_start_ms)]: plain, readiness delay, slow start, both."""
    rd = float(ds.ready_delay_ms.max())
    ss = float(ds.slow_start_ms.max())
    return [("plain", 0.0, 0.0), (f"readiness delay {rd / 1000:g} s", rd, 0.0),
            (f"slow start {ss / 1000:g} s", 0.0, ss), ("both", rd, ss)]


def cold_factors(ds, warm=False):
    """The swept cold factors (> 1 only, unless ``warm``)."""
    return [float(c) for c in np.atleast_1d(ds.cold_factor.values) if warm or c > 1]


def _sel(ds, **at):
    """``ds.sel`` on the axes ``ds`` has (a stage that ran one value has none)."""
    return ds.sel({k: v for k, v in at.items() if k in ds.dims})


def one(ds, cf, rd, ss):
    return _sel(ds, cold_factor=cf, ready_delay_ms=rd, slow_start_ms=ss)


def ttft(ds, var, cf, rd, ss):
    """(the recovered replica's ``var``, the mean of the warm replicas'), per seed."""
    d = one(ds, cf, rd, ss)[var]
    c = cold_replica(ds)
    warm = [r for r in d.replica.values if int(r) != c]
    return d.sel(replica=c), d.sel(replica=warm).mean("replica")


def share(ds, cf, rd, ss):
    """The recovered replica's share of the attempts routed in the window, per seed."""
    a = one(ds, cf, rd, ss).assigned
    return a.sel(replica=cold_replica(ds)) / a.sum("replica")


def first_second(data, rd, ss):
    """Its share of the attempts routed in the first second after it became eligible
    (the flood stages' cold factor), per seed."""
    flood = data["flood-ready"] if rd > 0 else data["flood"]
    a = _sel(flood, ready_delay_ms=rd, slow_start_ms=ss).assigned
    return a.sel(replica=cold_replica(flood)) / a.sum("replica")


def flood_factor(data):
    """The flood stages' cold factor (from the sweep: a one-valued axis is dropped)."""
    return float(_stage_value(data["flood"], "cold_factor"))


def fair(ds):
    return 1.0 / ds.sizes["replica"]


# -- verdict -------------------------------------------------------------------------

def comparisons(data):
    """{name: (compare result, predicted sign, what)} at the largest cold factor:
    flood — plain least_requests' first-second share for the recovered replica against
    the fair share 1/N (points); hurt — its TTFT p99 against the warm replicas' mean
    (relative); and each remedy's TTFT p99 for it against plain's (relative)."""
    ds = data["cold"]
    cf = max(cold_factors(ds))
    fs = first_second(data, 0.0, 0.0).values
    out = {"flood": (compare(fs, np.full(fs.shape, fair(ds)), "points"), +1,
                     "first-second share − 1/N, pp")}
    c, w = ttft(ds, "replica_ttft_p99", cf, 0.0, 0.0)
    out["hurt"] = (compare(c.values, w.values), +1, "its TTFT p99 / the warm replicas' − 1, %")
    for label, rd, ss in arms(ds)[1:]:
        out[label] = (compare(ttft(ds, "replica_ttft_p99", cf, rd, ss)[0].values, c.values), -1,
                      f"its TTFT p99 with {label} / plain's − 1, %")
    return out


ADDED_WORDS = ""
"""The flood, its harm and both remedies (ramp gradually, exclude until ready) are the
seed's: the prediction adds nothing."""
AZURE_BASIS = "least_requests"
"""The policy whose capacity the Azure-length arm's load is placed against (:mod:`.workloads`)."""
MOONCAKE_WHY = MOONCAKE_BELOW
SERVER_BASIS = "least_requests"
"""The policy whose capacity on the server the server arm's load is placed against (:mod:`.server`)."""
SERVER_PREDICTION = (
    "**Prediction on the server** (stages `server-cold`, `server-flood` and `server-flood-ready`, 36 req/s, "
    "written before their runs, after a cost probe of 8 runs). A count still cannot see a cold replica, so "
    "least_requests floods it; the roofline's cheaper decode step (about 12-15 ms against the page's 22.6 ms at "
    "100 sequences) finishes requests sooner, so the warm replicas hold fewer in flight and the recovered one "
    "catches up sooner: a smaller first-second share than the page's 51 %, still far above the fair 12.5 %. "
    "The cold factor multiplies the roofline step as it does the page's, and the flood queues behind its "
    "slow prefills (priced higher by the roofline), so its TTFT p99 stays far above the warm replicas'; "
    "slow start, the readiness delay and both cut it. Every test as on the page's replica: the seed's "
    "mechanism *holds*; none added. No change.")
"""The server arm's prediction (issue 44 item 2), fixed before its runs."""
SERVER_PREDICTED = ("holds", "none added")
"""The verdicts :data:`SERVER_PREDICTION` states (the seed's mechanism, the added clauses), for
:func:`.server.held`."""


def clauses(data):
    """[(label, comparison, predicted sign, part)] of :func:`comparisons`: all the seed's."""
    return [(k, v[0], v[1], MECHANISM) for k, v in comparisons(data).items()]


def verdict(data):
    """:func:`common.verdict_of` over :func:`comparisons`' leads and predicted signs."""
    c = comparisons(data)
    return verdict_of([v[0][3] for v in c.values()], [v[1] for v in c.values()])


# -- table row -----------------------------------------------------------------------

def row(data):
    """(claim, prediction, measured, verdict) for the verdict table."""
    ds = data["cold"]
    cf = max(cold_factors(ds))
    c = comparisons(data)
    sh = first_second(data, 0.0, 0.0) * 100
    _, ready, slow, both = arms(ds)
    return ("6. Cold replicas get flooded",
            "least_requests floods a just-recovered (cold) replica; a readiness delay and slow "
            "start cut the TTFT of the requests sent to it",
            f"first-second share {float(sh.median()):.0f} % (fair {fair(ds) * 100:.1f} %; "
            f"{show(c['flood'][0], 1, 'pp')}); cold_factor {cf:g}: its TTFT p99 against warm "
            f"{show(c['hurt'][0], 0, '%')}; {slow[0]} {show(c[slow[0]][0], 0, '%')}, {ready[0]} "
            f"{show(c[ready[0]][0], 0, '%')}, both {show(c[both[0]][0], 0, '%')}",
            verdict(data))


# -- figures -------------------------------------------------------------------------

def _summary_figure(data, arm):
    ds = data["cold"]
    cfs = cold_factors(ds, warm=True)
    ams = arms(ds)
    c_rep = cold_replica(ds)
    fig = Figure(figsize=(11.5, 5.6), layout="constrained")
    gs = fig.add_gridspec(2, len(cfs) + 1, width_ratios=[1] * len(cfs) + [1.0])
    x = np.arange(len(ams))
    rng = np.random.default_rng(0)            # horizontal jitter of the seeds' dots only
    jit = rng.uniform(-0.09, 0.09, ds.sizes["seed"])
    axes = {}
    for r, (var, name) in enumerate((("replica_ttft_p99", "TTFT p99"), ("replica_ttft_p50", "TTFT p50"))):
        for k, cf in enumerate(cfs):
            ax = fig.add_subplot(gs[r, k], sharey=axes.get((r, 0)))
            axes[(r, k)] = ax
            for i, (label, rd, ss) in enumerate(ams):
                c, w = ttft(ds, var, cf, rd, ss)
                ax.plot(i - 0.17 + jit, w.values, "o", ms=3, color=COLOURS["warm"], alpha=0.55)
                ax.plot(i + 0.17 + jit, c.values, "o", ms=3, color=COLOURS["cold"], alpha=0.55)
                ax.plot([i - 0.31, i - 0.03], [float(w.median())] * 2, "-", color=COLOURS["warm"], lw=2)
                ax.plot([i + 0.03, i + 0.31], [float(c.median())] * 2, "-", color=COLOURS["cold"], lw=2)
            ax.set_yscale("log")
            ax.set_xticks(x, ["plain", "ready\ndelay", "slow\nstart", "both"] if r == 1 else [""] * len(ams),
                          fontsize=8)
            ax.grid(axis="y", which="both", lw=0.3, alpha=0.5)
            if r == 0:
                ax.set_title(f"cold_factor {cf:g}" + (" (warm recovery, control)" if cf == 1 else ""),
                             fontsize=9)
            if k == 0:
                ax.set_ylabel(f"{name} (ms)")
            else:
                ax.tick_params(labelleft=False)
    ax = fig.add_subplot(gs[:, -1])
    for i, (label, rd, ss) in enumerate(ams):
        v = first_second(data, rd, ss).values * 100
        ax.plot(i + jit, v, "o", ms=3.2, color=COLOURS["cold"], alpha=0.55)
        ax.plot([i - 0.25, i + 0.25], [np.median(v)] * 2, "-", color=COLOURS["cold"], lw=2)
    ax.axhline(fair(ds) * 100, color="k", ls="--", lw=0.9)
    ax.text(-0.45, fair(ds) * 100 + 1, f"fair share 1/{ds.sizes['replica']}", ha="left",
            va="bottom", fontsize=7.5)
    ax.set_xticks(x, ["plain", "ready\ndelay", "slow\nstart", "both"], fontsize=8)
    ax.set_ylabel(f"replica {c_rep}'s share of the attempts routed in\nthe first second it is eligible (%)")
    ax.set_title(f"the flood (cold_factor {flood_factor(data):g}; a dot per seed)", fontsize=9)
    ax.set_ylim(0, None)
    rd = ams[1][1] / 1000
    ss = ams[2][2] / 1000
    fig.legend(handles=[Line2D([], [], marker="o", ls="", color=COLOURS["cold"],
                               label=f"replica {c_rep}, recovered at {recovery_s(ds):g} s: "
                               "TTFT of the requests that completed on it "
                               "(a dot per seed, bar: median)"),
                        Line2D([], [], marker="o", ls="", color=COLOURS["warm"],
                               label=f"the {ds.sizes['replica'] - 1} warm replicas "
                               "(mean of their per-replica values)")],
               loc="outside lower center", ncol=2, fontsize=8)
    fig.suptitle(f"Claim 6 {arm.words}: {POLICY}, {rate_rps(ds):g} req/s on {ds.sizes['replica']} replicas;\n"
                 f"TTFT of the requests arriving in the {_window_s(ds):g} s after replica {c_rep} recovers "
                 f"(ready delay {rd:g} s, slow start {ss:g} s; {ds.sizes['seed']} seeds)", fontsize=9.5)
    return fig


def _window_s(ds):
    """Seconds from the recovery to the end of the cohort's arrival window."""
    return float(ds.attrs["warmup_s"]) + float(ds.attrs["measure_s"]) - recovery_s(ds)


def timeline(data, seed=None):
    """The batching trace of stage cold at the largest cold factor, every arm, one seed
    (the first unless ``seed``), every 50 ms, to the end of the window + 10 s."""
    from ...timeline import trace
    ds = data["cold"]
    ams = arms(ds)
    return trace(ds, seed=int(ds.seed.values[0]) if seed is None else seed, interval_ms=TIMELINE_INTERVAL_MS,
                 cold_factor=max(cold_factors(ds)),
                 ready_delay_ms=sorted({a[1] for a in ams}), slow_start_ms=sorted({a[2] for a in ams}))


def _bins(t, per_interval, width_s):
    dt = float(t[1] - t[0])
    k = max(1, int(round(width_s / dt)))
    n = (per_interval.shape[-1] - 1) // k
    x = per_interval[..., 1:1 + n * k].reshape(per_interval.shape[:-1] + (n, k)).sum(axis=-1)
    return t[1:1 + n * k:k] - dt, x / (k * dt)     # bin start times, per second


def _timeline_figure(data, tl):
    ds = data["cold"]
    ams = arms(ds)
    c_rep = cold_replica(ds)
    t_up = recovery_s(ds)
    stop = t_up + _window_s(ds)
    t = tl.time.values
    lo, hi = t_up - 1.0, stop + 0.25           # the trace ends at the horizon
    win = (t >= lo) & (t <= hi)
    warm = [r for r in tl.replica.values if int(r) != c_rep]
    fig = Figure(figsize=(9.5, 8.6), layout="constrained")
    gs = fig.add_gridspec(len(ams) + 1, 2, height_ratios=[0.8] + [1] * len(ams))
    top = fig.add_subplot(gs[0, 0])
    first = tl.sel(ready_delay_ms=0.0, slow_start_ms=0.0).squeeze()
    top.plot(t[win], first.warmth.sel(replica=c_rep).values[win], color=COLOURS["warmth"], lw=1.4)
    top.set_ylabel("step-time multiplier")
    top.set_title(f"replica {c_rep}'s warmth: its step time over a warm one's\n(cold_factor "
                  f"{float(tl.cold_factor):g}, τ {float(tl.attrs['cold_tau_ms']) / 1000:g} s; the same in every arm)",
                  fontsize=8.5)
    top.set_xlim(lo, hi)
    top.set_ylim(0.8, float(tl.cold_factor) * 1.08)
    top.grid(lw=0.3, alpha=0.5)
    cum = fig.add_subplot(gs[0, 1], sharex=top)
    arm_colours = ("#c0392b", "#e67e22", "#27ae60", "#8e44ad")
    after = t >= t_up
    most = 0.0
    for (label, rd, ss), col in zip(ams, arm_colours):
        one_arm = tl.sel(ready_delay_ms=rd, slow_start_ms=ss).squeeze()
        a = np.cumsum(np.where(after, one_arm.assignments.sel(replica=c_rep).values, 0))
        cum.step(t[win], a[win], where="post", color=col, lw=1.2, label=label)
        most = max(most, float(a[win].max()))
    every = np.cumsum(np.where(after, first.attempts_interval.values, 0)) / tl.sizes["replica"]
    cum.plot(t[win], every[win], color="k", ls="--", lw=0.9, label=f"1/{tl.sizes['replica']} of all attempts")
    cum.set_title(f"attempts routed to replica {c_rep} since it recovered", fontsize=8.5)
    cum.set_ylim(0, 1.75 * max(most, 1.0))
    cum.legend(fontsize=7, loc="upper left", ncol=3)
    cum.grid(lw=0.3, alpha=0.5)
    tops = [0.0, 0.0]
    rows = []
    for i, (label, rd, ss) in enumerate(ams):
        one_arm = tl.sel(ready_delay_ms=rd, slow_start_ms=ss).squeeze()
        a0 = fig.add_subplot(gs[i + 1, 0], sharex=top)
        a1 = fig.add_subplot(gs[i + 1, 1], sharex=top)
        rows.append((a0, a1))
        tb, a_cold = _bins(t, one_arm.assignments.sel(replica=c_rep).values, 0.25)
        _, a_warm = _bins(t, one_arm.assignments.sel(replica=warm).mean("replica").values, 0.25)
        keep = (tb >= lo) & (tb <= hi)
        a0.step(tb[keep], a_warm[keep], where="post", color=COLOURS["warm"], lw=1.0)
        a0.step(tb[keep], a_cold[keep], where="post", color=COLOURS["cold"], lw=1.3)
        cw = one_arm.waiting.sel(replica=c_rep).values[win]
        cr = one_arm.running.sel(replica=c_rep).values[win]
        a1.fill_between(t[win], 0, cw, step="post", color=COLOURS["waiting"], lw=0, alpha=0.9)
        a1.step(t[win], cr, where="post", color=COLOURS["cold"], lw=1.2)
        a1.step(t[win], one_arm.running.sel(replica=warm).mean("replica").values[win], where="post",
                color=COLOURS["warm"], lw=0.9)
        tops = [max(tops[0], float(a_cold[keep].max()), float(a_warm[keep].max())),
                max(tops[1], float(cw.max()), float(cr.max()))]
        for a in (a0, a1):
            a.axvline(t_up + rd / 1000, color="k", ls=":", lw=0.9)
            if ss > 0:
                a.axvspan(t_up + rd / 1000, min(hi, t_up + rd / 1000 + ss / 1000), color="#f4ead9", lw=0,
                          zorder=0)
            a.axvspan(stop, hi, color="#d9d9d9", alpha=0.6, lw=0, zorder=0.2)
            a.grid(lw=0.3, alpha=0.5)
        p50 = float(one_arm.replica_ttft_p50.sel(replica=c_rep))
        p99 = float(one_arm.replica_ttft_p99.sel(replica=c_rep))
        wp99 = float(one_arm.replica_ttft_p99.sel(replica=warm).mean("replica"))
        a1.text(0.985, 0.95, f"replica {c_rep}'s TTFT p50 {p50:,.0f} ms, p99 {p99:,.0f} ms\n"
                f"(warm replicas' p99: {wp99:,.0f} ms)", transform=a1.transAxes, ha="right", va="top",
                fontsize=7, bbox=dict(fc="white", ec="none", alpha=0.85, pad=1.5), zorder=5)
        a0.set_ylabel(label, fontsize=8.5, fontweight="bold")
    for a0, a1 in rows:
        a0.set_ylim(0, 1.12 * max(tops[0], 1.0))
        a1.set_ylim(0, 1.35 * max(tops[1], 1.0))
        a0.tick_params(labelbottom=False)
        a1.tick_params(labelbottom=False)
    rows[-1][0].tick_params(labelbottom=True)
    rows[-1][1].tick_params(labelbottom=True)
    rows[-1][0].set_xlabel("time (s)")
    rows[-1][1].set_xlabel("time (s)")
    rows[0][0].set_title("attempts routed to a replica (per s, 250 ms bins)", fontsize=8.5)
    rows[0][1].set_title(f"replica {c_rep}'s waiting and running sequences", fontsize=8.5)
    import matplotlib.patches as mpatches
    handles = [Line2D([], [], color=COLOURS["cold"], lw=1.3,
                      label=f"replica {c_rep} (recovered cold): attempts / running"),
               mpatches.Patch(color=COLOURS["waiting"], label=f"replica {c_rep} waiting"),
               Line2D([], [], color=COLOURS["warm"], lw=1.0, label="average warm replica: attempts / running"),
               Line2D([], [], color="k", ls=":", lw=0.9, label=f"replica {c_rep} eligible"),
               mpatches.Patch(color="#f4ead9", label="slow-start ramp"),
               mpatches.Patch(color="#d9d9d9", alpha=0.6, label="after the measured cohort's arrivals")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=7.5)
    fig.suptitle(f"Cold start {ON_PAGE}: least_requests, {float(tl.rate_rps):g} req/s on {tl.sizes['replica']} replicas, "
                 f"seed {int(tl.seed)};\nreplica {c_rep} looks empty when it comes back and draws the traffic",
                 fontsize=9.5)
    return fig


FIGURE = "lor-claim6-cold"
"""The stem of the claim's main figure (:func:`main_figure`)."""


def figure(data, figures_dir=FIGURES):
    """The page's replica's figures: the main one (:func:`main_figure`) and
    figures/lor-claim6-timeline.png/.svg (a trace of the first seed at the largest cold factor)."""
    paths = main_figure(data, figures_dir)
    paths += save(_timeline_figure(data, timeline(data)), "lor-claim6-timeline", figures_dir)
    return paths


def main_figure(data, figures_dir=FIGURES, arm=PAGE_ARM):
    """figures/<FIGURE><arm's suffix>.png/.svg: the recovered replica's TTFT against the
    warm ones' per arm and cold factor, and the flood (its first-second share), on ``arm``."""
    return save(_summary_figure(data, arm), FIGURE + arm.suffix, figures_dir)


# -- section -------------------------------------------------------------------------

def section(data, main=()):
    """Claim 6's section; ``main``: the main arm's lines (:func:`.common.page_table`)."""
    ds = data["cold"]
    before = data["before"]
    root = results_root(ds)
    ams = arms(ds)
    c_rep = cold_replica(ds)
    cfs_all = cold_factors(ds, warm=True)
    cf_hi = max(cold_factors(ds))
    n = ds.sizes["replica"]
    rate = rate_rps(ds)
    cap, lo, hi, measured = capacity(root, POLICY)
    cap_txt = (f"{cap:g} req/s" + (f", seeds {lo:g}–{hi:g}" if measured and np.isfinite(lo) else
                                   ", the README's provisional figure: the capacity stage has not run"))
    c = comparisons(data)
    rows = ["| cold_factor | arm | first-second share % | window share % | its TTFT p50 ms | its TTFT p99 ms "
            "| warm replicas' TTFT p99 ms | its p99 / plain's − 1 % |",
            "|---|---|---|---|---|---|---|---|"]
    for cf in cfs_all:
        for label, rd, ss in ams:
            cc, w = ttft(ds, "replica_ttft_p99", cf, rd, ss)
            c50 = ttft(ds, "replica_ttft_p50", cf, rd, ss)[0]
            fs = (f"{float(first_second(data, rd, ss).median()) * 100:.0f}" if cf == flood_factor(data) else "—")
            ws = share(ds, cf, rd, ss) * 100
            diff = ("—" if rd == 0 and ss == 0 else
                    show(compare(cc.values, ttft(ds, "replica_ttft_p99", cf, 0.0, 0.0)[0].values)))
            rows.append(f"| {cf:g} | {label} | {fs} | {float(ws.median()):.1f} | {float(c50.median()):,.0f} | "
                        f"{float(cc.median()):,.0f} | {float(w.median()):,.0f} | {diff} |")
    tests = ["| test | comparison (paired by seed) | mean [95 % interval] | predicted | lead |",
             "|---|---|---|---|---|"]
    word = {1: "higher", -1: "lower", 0: "none"}
    for name, (res, pred, what) in c.items():
        unit = "pp" if what.endswith("pp") else "%"
        tests.append(f"| {name} | {what.rsplit(',', 1)[0]} | {show(res, 1, unit)} | {word[pred]} | "
                     f"{word[res[3]]} |")
    plain, ready, slow, both = ams
    warm_ctrl = compare(*(x.values for x in ttft(ds, "replica_ttft_p99", 1.0, 0.0, 0.0))) if 1.0 in cfs_all else None
    fs_slow = first_second(data, 0.0, slow[2]) * 100
    fs_ready = first_second(data, ready[1], 0.0) * 100
    fs_plain = first_second(data, 0.0, 0.0) * 100
    unf, arr = int(ds.unfinished.sum()), int(ds.arrivals.sum())
    return "\n".join([
        "## Claim 6: cold replicas get flooded", "",
        "**Prediction (the seed).** A replica that has just started has cold caches and serves "
        "its first requests slower than its steady-state rate; a router that floods it because "
        "its outstanding count is zero overloads it. Ramping traffic gradually (slow start) or "
        "excluding it until it reports ready cuts the TTFT of the requests sent to it.", "",
        f"**Design.** `sweeps/token-routing-cold.toml`: {POLICY}, {n} default replicas at {rate:g} req/s "
        f"({rate / cap:.2f} × {POLICY}' capacity at the SLO on {n}, {cap_txt}; {rate / (cap * (n - 1) / n):.2f} × "
        f"the {n - 1} replicas' share of it, which carry the load before the recovery), the default workload. "
        f"Replica {c_rep} is down from time 0 and recovers at {recovery_s(ds):g} s, after a "
        f"{recovery_s(ds):g} s warm-up, with an empty cache and cold (step time × 1 + (cold_factor − 1)·e^(−t/τ), "
        f"τ = {float(ds.attrs['cold_tau_ms']) / 1000:g} s), cold_factor "
        f"{', '.join(f'{x:g}' for x in cfs_all)} (1: a warm recovery, the control). Arms: plain, "
        f"{ready[0]} (eligible from {recovery_s(ds) + ready[1] / 1000:g} s), {slow[0]} (Envoy's ramp, aggression "
        f"{float(ds.attrs['slow_start_aggression']):g}, from weight {float(ds.attrs['slow_start_min_weight']):g}) "
        f"and both. The cohort is the requests arriving in the recovery's first {_window_s(ds):g} s, drained "
        f"(drain_s = {float(ds.attrs['drain_s']):g}: each has time to complete, so the slow replica's TTFT is "
        f"not biased low; left unfinished: {unf} of the {arr:,} cohort requests of all runs). The flood "
        f"is measured by two more stages whose window is the first second after replica {c_rep} becomes "
        f"eligible (at the recovery, or at the end of the readiness delay), at cold_factor "
        f"{flood_factor(data):g}.", "",
        *page_table(main, f"The claim's tests at cold_factor {cf_hi:g}:", "", *tests, ""),
        f"![Claim 6](../figures/{FIGURE}.png)", "",
        f"{reading(main)} The flood is real: in the first second after it recovers, plain {POLICY} sends "
        f"replica {c_rep} a median {float(fs_plain.median()):.0f} % of the attempts (fair share "
        f"{fair(ds) * 100:.1f} %; {show(c['flood'][0], 1, 'pp')} above it), since a count cannot see a cold "
        "replica. What it costs depends on coldness"
        + (f": a warm recovery (cold_factor 1) takes the burst at full speed (its TTFT p99 against the warm "
           f"replicas' {show(warm_ctrl, 0, '%')}), a cold one queues it behind slow prefills "
           if warm_ctrl is not None else ": ")
        + f"({show(c['hurt'][0], 0, '%')} at cold_factor {cf_hi:g}). Slow start removes the flood (first-second "
        f"share {float(fs_slow.median()):.0f} %) and changes the cold replica's TTFT p99 by "
        f"{show(c[slow[0]][0], 0, '%')}; with the readiness delay as well by {show(c[both[0]][0], 0, '%')}. "
        f"The {ready[0]} alone changes it by {show(c[ready[0]][0], 0, '%')}: it does not prevent the flood "
        f"(first-second share once eligible {float(fs_ready.median()):.0f} %), it lets the replica warm first, "
        "so the flood meets a faster replica. In this model warmth returns with time since the recovery, not "
        "with work served, so a readiness delay warms the replica for free; a replica that warms only by "
        "serving would gain less from waiting.", "",
        *details(
            "Medians per arm, the state before the recovery, the timeline, why the step cost was not varied",
            "Medians over seeds per arm; the change against plain is the paired mean [95 % interval]:", "",
            *rows, "",
            "The state before the recovery (stage `before`: the window "
            f"[{float(before.attrs['warmup_s']):g} s, {float(before.attrs['warmup_s']) + float(before.attrs['measure_s']):g} s) "
            f"on the {n - 1} replicas; median over seeds; the occupancy is the mean over all {n} replicas, the "
            f"down one at 0):", "",
            _steady(before), "",
            "![Claim 6, timeline](../figures/lor-claim6-timeline.png)", "",
            "**Sensitivity to the step cost** (issue 23 item 6): not rerun. The flood is a property of the "
            "router's counts (a replica with nothing outstanding draws the traffic), and the harm is the cold "
            "factor's multiple of whatever the step costs, so the verdict does not rest on one step-cost "
            "formula."), ""])


def _steady(before):
    """The steady-state table of stage before (one row: the plain arm)."""
    ds = before.expand_dims(arm=["plain"]) if "arm" not in before.dims else before
    return steady_table(ds, ("arm",))
