"""Claim 6 of the least-outstanding-routing study: cold replicas get flooded.
sweeps/token-routing-cold.toml (results/token-routing-cold/: cold.nc, cold_factor ×
ready_delay_ms × slow_start_ms × seed × replica, the requests arriving in the recovery's
first seconds; flood.nc and flood-ready.nc, the same arms over the first second after the
replica becomes eligible, without and with the readiness delay).

The recovered replica is the sweep's ``[cluster] start_down`` replica; the others are
the "warm" replicas. Its TTFT is ``replica_ttft_p50/p99`` (the completed cohort requests
that completed on it); the warm replicas' is the mean over them of theirs. The sweep
has no retries and no failures, so the attempts routed to the recovered replica
(``assigned``) are its requests, all of them in the cohort (it was down before), and
``assigned - replica_completed`` are its unfinished ones."""

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .common import FIGURES, lead, open_stage, save, spread

SWEEPS = ("sweeps/token-routing-cold.toml",)
STAGES = ("cold", "flood", "flood-ready")
COLOURS = {"cold": "#c0392b", "warm": "#4f7cac", "waiting": "#e8a09a", "warmth": "#7f7f7f"}
TIMELINE_INTERVAL_MS = 50.0


def load(root):
    """{stage name: Dataset} of the three stages, or None if any is missing."""
    d = Path(root) / "token-routing-cold"
    data = {s: open_stage(d / f"{s}.nc") for s in STAGES}
    return None if any(v is None for v in data.values()) else data


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
    return [float(c) for c in ds.cold_factor.values if warm or c > 1]


def one(ds, cf, rd, ss):
    return ds.sel(cold_factor=cf, ready_delay_ms=rd, slow_start_ms=ss)


def ttft(ds, var, cf, rd, ss):
    """(the recovered replica's ``var``, the mean of the warm replicas'), per seed."""
    d = one(ds, cf, rd, ss)[var]
    c = cold_replica(ds)
    warm = [r for r in d.replica.values if int(r) != c]
    return d.sel(replica=c), d.sel(replica=warm).mean("replica")


def change(ds, var, cf, rd, ss):
    """The recovered replica's ``var`` in an arm minus plain's, per seed (paired)."""
    return ttft(ds, var, cf, rd, ss)[0] - ttft(ds, var, cf, 0.0, 0.0)[0]


def share(ds, cf, rd, ss):
    """The recovered replica's share of the attempts routed in the window, per seed."""
    a = one(ds, cf, rd, ss).assigned
    return a.sel(replica=cold_replica(ds)) / a.sum("replica")


def first_second(data, cf, rd, ss):
    """Its share of the attempts routed in the first second after it became eligible."""
    flood = data["flood-ready"] if rd > 0 else data["flood"]
    d = flood.sel(cold_factor=cf, slow_start_ms=ss)
    if "ready_delay_ms" in d.dims:
        d = d.sel(ready_delay_ms=rd)
    a = d.assigned
    return a.sel(replica=cold_replica(flood)) / a.sum("replica")


def unfinished_cold(ds, cf, rd, ss):
    """Requests routed to the recovered replica and not completed by the horizon, per seed."""
    d = one(ds, cf, rd, ss).sel(replica=cold_replica(ds))
    return d.assigned - d.replica_completed


def fair(ds):
    return 1.0 / ds.sizes["replica"]


# -- verdict -------------------------------------------------------------------------

def findings(data):
    """The verdict's three tests, at every cold factor > 1: (flooded: the recovered
    replica gets more than 1/N of its first second's attempts on every seed under plain
    least_requests; hurt: its TTFT p99 is above the warm replicas' mean on every seed;
    cuts: {arm label: its TTFT p99 below plain's on every seed})."""
    ds = data["cold"]
    (_, _, _), *remedies = arms(ds)
    cfs = cold_factors(ds)
    flooded = all(lead(first_second(data, cf, 0.0, 0.0) - fair(ds)) == "above" for cf in cfs)
    hurt = all(lead(np.subtract(*ttft(ds, "replica_ttft_p99", cf, 0.0, 0.0))) == "above" for cf in cfs)
    cuts = {}
    for label, rd, ss in remedies:
        cuts[label] = all(lead(change(ds, "replica_ttft_p99", cf, rd, ss)) == "below" for cf in cfs)
    return flooded, hurt, cuts


def verdict(data):
    """holds: at every cold factor > 1, plain least_requests floods the recovered replica
    (first-second share above 1/N on every seed), its TTFT p99 is above the warm
    replicas' on every seed, and the readiness delay, slow start and both each cut it
    below plain's on every seed; with qualification when flood and harm hold but only
    some remedies cut it on every seed; otherwise does not hold."""
    flooded, hurt, cuts = findings(data)
    if flooded and hurt and all(cuts.values()):
        return "holds"
    if flooded and hurt and any(cuts.values()):
        return "holds with qualification"
    return "does not hold in this model"


# -- table row -----------------------------------------------------------------------

def row(data):
    """(claim, prediction, measured, verdict) for the verdict table."""
    ds = data["cold"]
    cf = max(cold_factors(ds))
    plain, ready, slow, _ = arms(ds)
    sh = first_second(data, cf, 0.0, 0.0) * 100
    c, w = ttft(ds, "replica_ttft_p99", cf, 0.0, 0.0)
    dr = change(ds, "replica_ttft_p99", cf, ready[1], ready[2])
    dss = change(ds, "replica_ttft_p99", cf, slow[1], slow[2])
    return ("6. Cold replicas get flooded",
            "least_requests floods a just-recovered (cold) replica; a readiness delay and slow "
            "start cut the TTFT of the requests sent to it",
            f"cold_factor {cf:g}: it gets {sh.median().item():.0f} % of its first second's "
            f"attempts (per seed {sh.min().item():.0f} to {sh.max().item():.0f} %; fair "
            f"{fair(ds) * 100:.1f} %); its TTFT p99 {c.median().item():,.0f} ms against "
            f"{w.median().item():,.0f} ms on warm replicas; median change with {slow[0]} "
            f"{dss.median().item():+,.0f} ms (per seed {dss.min().item():+,.0f} to "
            f"{dss.max().item():+,.0f}), with {ready[0]} {dr.median().item():+,.0f} ms "
            f"({dr.min().item():+,.0f} to {dr.max().item():+,.0f})",
            verdict(data))


# -- figures -------------------------------------------------------------------------

def _summary_figure(data):
    ds = data["cold"]
    cfs = cold_factors(ds, warm=True)
    ams = arms(ds)
    c_rep = cold_replica(ds)
    fig = Figure(figsize=(11.5, 5.6), layout="constrained")
    gs = fig.add_gridspec(2, len(cfs) + 1, width_ratios=[1] * len(cfs) + [1.15])
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
    markers = {1.0: "s", 3.0: "^", 5.0: "o"}
    for j, cf in enumerate(cfs):
        for i, (label, rd, ss) in enumerate(ams):
            v = first_second(data, cf, rd, ss).values * 100
            off = (j - (len(cfs) - 1) / 2) * 0.22
            ax.plot(i + off + jit * 0.6, v, markers.get(cf, "o"), ms=3.2, color=COLOURS["cold"],
                    alpha=0.25 + 0.3 * j, mfc="none" if cf == 1 else None)
    ax.axhline(fair(ds) * 100, color="k", ls="--", lw=0.9)
    ax.text(-0.45, fair(ds) * 100 + 1, f"fair share 1/{ds.sizes['replica']}", ha="left",
            va="bottom", fontsize=7.5)
    ax.set_xticks(x, ["plain", "ready\ndelay", "slow\nstart", "both"], fontsize=8)
    ax.set_ylabel(f"replica {c_rep}'s share of the attempts routed in\nthe first second it is eligible (%)")
    ax.set_title("the flood (one dot per seed)", fontsize=9)
    ax.set_ylim(0, None)
    ax.legend(handles=[Line2D([], [], marker=markers.get(cf, "o"), ls="", color=COLOURS["cold"],
                              mfc="none" if cf == 1 else None, label=f"cold_factor {cf:g}") for cf in cfs],
              fontsize=7.5, loc="upper right")
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
    fig.suptitle(f"Claim 6: least_requests, {rate_rps(ds):g} req/s on {ds.sizes['replica']} replicas; "
                 f"TTFT of the requests arriving in the {_window_s(ds):g} s after replica {c_rep} recovers "
                 f"(ready delay {rd:g} s, slow start {ss:g} s; {ds.sizes['seed']} seeds)", fontsize=9.5)
    return fig


def _window_s(ds):
    """Seconds from the recovery to the stop of arrivals (the cohort's arrival window)."""
    stop = min(e.at_s for e in _events(ds) if e.replica < 0)
    return stop - float(ds.attrs["warmup_s"])


def timeline(data, seed=None):
    """The batching trace of stage cold at the largest cold factor, every arm, one seed
    (the first unless ``seed``), every 50 ms."""
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
    lo, hi = t_up - 1.0, stop + 2.0
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
               mpatches.Patch(color="#d9d9d9", alpha=0.6, label="arrivals stopped (the cohort drains)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=7.5)
    fig.suptitle(f"Cold start: least_requests, {float(tl.rate_rps):g} req/s on {tl.sizes['replica']} replicas, "
                 f"seed {int(tl.seed)}; replica {c_rep} looks empty when it comes back and draws the traffic",
                 fontsize=9.5)
    return fig


def figure(data, figures_dir=FIGURES):
    """figures/lor-claim6-cold.png/.svg (TTFT per arm and the flood) and
    figures/lor-claim6-timeline.png/.svg (a trace of seed 1 at the largest cold factor)."""
    paths = save(_summary_figure(data), "lor-claim6-cold", figures_dir)
    paths += save(_timeline_figure(data, timeline(data)), "lor-claim6-timeline", figures_dir)
    return paths


# -- section -------------------------------------------------------------------------

def section(data):
    ds = data["cold"]
    ams = arms(ds)
    c_rep = cold_replica(ds)
    cfs_all = cold_factors(ds, warm=True)
    cfs = cold_factors(ds)
    n_seed = ds.sizes["seed"]
    rows = ["| cold_factor | arm | first-second share % | window share % | its TTFT p50 ms | its TTFT p99 ms "
            "| warm replicas' TTFT p99 ms | its p99 − plain's, per seed ms | its unfinished (all seeds) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for cf in cfs_all:
        for label, rd, ss in ams:
            c, w = ttft(ds, "replica_ttft_p99", cf, rd, ss)
            c50 = ttft(ds, "replica_ttft_p50", cf, rd, ss)[0]
            fs = first_second(data, cf, rd, ss) * 100
            ws = share(ds, cf, rd, ss) * 100
            diff = "—" if rd == 0 and ss == 0 else spread(change(ds, "replica_ttft_p99", cf, rd, ss))
            uf = int(unfinished_cold(ds, cf, rd, ss).sum())
            routed = int(one(ds, cf, rd, ss).assigned.sel(replica=c_rep).sum())
            rows.append(f"| {cf:g} | {label} | {fs.median().item():.0f} [{fs.min().item():.0f}, "
                        f"{fs.max().item():.0f}] | {ws.median().item():.1f} | {c50.median().item():,.0f} | "
                        f"{c.median().item():,.0f} [{c.min().item():,.0f}, {c.max().item():,.0f}] | "
                        f"{w.median().item():,.0f} | {diff} | {uf} of {routed:,} |")
    flooded, hurt, cuts = findings(data)
    plain, ready, slow, both = ams
    cf_hi = max(cfs)
    fs_all = np.concatenate([first_second(data, cf, 0.0, 0.0).values for cf in cfs_all]) * 100
    fs_slow = np.concatenate([first_second(data, cf, 0.0, slow[2]).values for cf in cfs_all]) * 100
    fs_ready = np.concatenate([first_second(data, cf, ready[1], 0.0).values for cf in cfs_all]) * 100
    hurt_by = {cf: np.subtract(*ttft(ds, "replica_ttft_p99", cf, 0.0, 0.0)) for cf in cfs_all}
    above_all = {}
    for cf in cfs_all:
        d = one(ds, cf, 0.0, 0.0).replica_ttft_p99
        warm = [r for r in d.replica.values if int(r) != c_rep]
        above_all[cf] = int((d.sel(replica=c_rep) > d.sel(replica=warm).max("replica")).sum())
    p50_ctrl = np.subtract(*ttft(ds, "replica_ttft_p50", 1.0, 0.0, 0.0))
    d_slow = change(ds, "replica_ttft_p99", cf_hi, 0.0, slow[2])
    d_both = change(ds, "replica_ttft_p99", cf_hi, both[1], both[2])
    # the readiness delay's exceptions: seeds where it raised the cold replica's p99
    worse = {cf: change(ds, "replica_ttft_p99", cf, ready[1], 0.0) for cf in cfs_all}
    worse_seeds = sorted({int(s) for cf in cfs for s in worse[cf].seed.values[worse[cf].values > 0]})
    ctrl_worse = [int(s) for s in worse_seeds if float(worse[1.0].sel(seed=s)) > 0]
    drain_s = float(ds.attrs["warmup_s"]) + float(ds.attrs["measure_s"]) - recovery_s(ds) - _window_s(ds)
    unf = sum(int(unfinished_cold(ds, cf, rd, ss).sum()) for cf in cfs_all for _, rd, ss in ams)
    unf_total = int(ds.unfinished.sum())
    arr_total = int(ds.arrivals.sum())

    def pct(v):
        return f"{np.median(v):.0f} % (per seed {np.min(v):.0f} to {np.max(v):.0f} %)"

    ready_text = (f"The {ready[0]} alone does not cut it on every seed: it changes replica {c_rep}'s "
                  "p99 by "
                  + " and ".join(f"{spread(worse[cf])} ms at cold_factor {cf:g}" for cf in cfs)
                  + ", lower on "
                  + " and ".join(f"{int((worse[cf] < 0).sum())} of {n_seed} seeds at {cf:g}" for cf in cfs)
                  + f" but higher on seed{'s' if len(worse_seeds) != 1 else ''} "
                  + ", ".join(str(s) for s in worse_seeds) + ". "
                  + (f"On {'all' if len(ctrl_worse) == len(worse_seeds) else len(ctrl_worse)} of "
                     f"{'them' if len(ctrl_worse) == len(worse_seeds) else 'those'} the warm control (cold_factor 1) "
                     "with the same delay is worse than its plain arm too, so on those seeds the requests the "
                     "delayed flood happens to catch, not the replica's warmth, decide its p99 (a p99 over a "
                     "few dozen requests is nearly their maximum). "
                     if ctrl_worse else "")
                  + f"The delay does not prevent the flood: once the replica is eligible its first-second share "
                  f"is {pct(fs_ready)}; it only lets the replica warm up first, so the flood meets a "
                  "faster replica.") if not cuts[ready[0]] else \
        (f"The {ready[0]} alone also cuts it on every seed at cold_factor {', '.join(f'{c:g}' for c in cfs)} "
         f"(by {'; '.join(f'{spread(worse[cf])} ms at {cf:g}' for cf in cfs)}), without preventing the flood "
         f"(first-second share {pct(fs_ready)}): the flood meets a faster replica.")
    return "\n".join([
        "## Claim 6: cold replicas get flooded", "",
        "**Prediction (the seed).** A replica that has just started has cold caches and serves "
        "its first requests slower than its steady-state rate; a router that floods it because "
        "its outstanding count is zero overloads it. Ramping traffic gradually (slow start) or "
        "excluding it until it reports ready cuts the TTFT of the requests sent to it.", "",
        f"**Design.** `sweeps/token-routing-cold.toml`: least_requests, {ds.sizes['replica']} default "
        f"replicas at {rate_rps(ds):g} req/s; replica {c_rep} is down from time 0 and recovers at "
        f"{recovery_s(ds):g} s with an empty cache and cold (step time × 1 + (cold_factor − 1)·e^(−t/τ), "
        f"τ = {float(ds.attrs['cold_tau_ms']) / 1000:g} s), cold_factor "
        f"{', '.join(f'{c:g}' for c in cfs_all)} (1: a warm recovery, the control). Arms: plain, "
        f"{ready[0]} (eligible from {recovery_s(ds) + ready[1] / 1000:g} s), {slow[0]} (Envoy's ramp, aggression "
        f"{float(ds.attrs['slow_start_aggression']):g}, from weight {float(ds.attrs['slow_start_min_weight']):g}) "
        f"and both. The measurement window starts at the recovery and arrivals stop {_window_s(ds):g} s "
        f"later (a rate multiplier of 1e-6), with the horizon {drain_s:g} s after that: the cohort is the "
        "requests of the recovery's first seconds, and they have time to "
        "complete. TTFT counts completed cohort requests only; ending the window at the horizon instead "
        f"would leave many of them still running, more on the slow replica, and bias its TTFT low. Left "
        f"unfinished here: {unf} of the requests routed to replica {c_rep} over all runs ({unf_total} of "
        f"{arr_total:,} cohort requests on all replicas: generations still running {drain_s:g} s after "
        "the last arrival). Per-replica TTFT is "
        "`replica_ttft_p50`/`p99`; warm replicas' is the mean of the other replicas' values. The flood is "
        f"measured directly by two more stages whose window is the first second after replica {c_rep} "
        "becomes eligible (at the recovery, or at the end of the readiness delay). "
        f"{n_seed} seeds, paired (every arm and cold factor sees the same workload per seed). Medians "
        "[min, max] over seeds; the per-seed change is mean [min, max]:", "",
        *rows, "",
        "![Claim 6](../figures/lor-claim6-cold.png)", "",
        "![Claim 6, timeline](../figures/lor-claim6-timeline.png)", "",
        f"**Reading.** The flood is real and does not depend on coldness: in the first second after it "
        f"recovers, plain least_requests sends replica {c_rep} {pct(fs_all)} of the attempts (fair share "
        f"{fair(ds) * 100:.1f} %), at every cold factor alike, since counts cannot see a cold replica. "
        f"{'It is flooded on every seed. ' if flooded else 'Not on every seed. '}"
        "What the flood costs depends on coldness. A warm recovery (cold_factor 1) takes its burst at "
        f"full speed: its TTFT p99 minus the warm replicas' is {spread(hurt_by[1.0])} ms per seed"
        + f" and its p50 {spread(p50_ctrl)} ms"
        + ". Cold, the burst queues behind slow prefills; the same difference is "
        + "; ".join(f"{spread(hurt_by[cf])} ms at cold_factor {cf:g} (replica {c_rep}'s p99 above every "
                    f"warm replica's on {above_all[cf]} of {n_seed} seeds)" for cf in cfs)
        + f"{' — above the warm mean on every seed' if hurt else ''}. "
        f"Slow start removes the flood: replica {c_rep}'s first-second share is {pct(fs_slow)}. It changes "
        f"its TTFT p99 by {spread(d_slow)} ms at cold_factor {cf_hi:g}"
        + (" (lower on every seed at every cold factor > 1)" if cuts[slow[0]] else "")
        + f"; with the readiness delay as well, by {spread(d_both)} ms"
        + (" (every seed)" if cuts[both[0]] else "") + ". " + ready_text
        + " In this model warmth returns with time since the recovery, not with work served, so a "
        "readiness delay warms the replica for free; a replica that warms only by serving (compiling "
        "kernels, filling caches on its first requests) would gain less from waiting. "
        f"Verdict: {verdict(data)}.", ""])
