"""The serving validation's figures, as PNG and SVG, from its result Datasets (and from
timelines traced from the sweep text those Datasets carry):

- ``development-objective``: the selection objective against the exploration weight;
- ``validation-attainment``: mean attainment per policy and condition;
- ``validation-p99``: median p99 and its min–max range across seeds;
- ``timeline-<scenario>``: timelines of the straggler and failure scenarios;
- ``load-curve``: the queueing hockey stick (from ``results/load-curve/``);
- ``estimate-lag``: the straggler's ŝ against its true mean service, several α.

Every figure uses :data:`PALETTE` (one colour per policy; adaptive in the accent
colour), and is drawn and saved with :mod:`routesim.studies.plotting`'s style:
byte-for-byte deterministic, fixed SVG hash salt, no dates or software versions in
the files.
"""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from ...queue.dtypes import EventKind  # noqa: E402
from .. import plotting  # noqa: E402
from ..folders import load  # noqa: E402
from .resultset import capacity_rps, lag_trace, load_curve_stage, mean_demand, reach_time  # noqa: E402
from .resultset import scenario_in, selected_parameter, squeeze, stages, steady  # noqa: E402
from .resultset import straggler_event, timeline_scenarios, timeline_traces, trace_events_text  # noqa: E402

PALETTE = {
    "round_robin": "#8c8c8c",    # grey
    "least_queue": "#4f7cac",    # muted blue
    "latency_aware": "#5e9c76",  # muted green
    "adaptive": "#e8590c",       # accent: strong orange
    "random": "#b59b72",         # muted sand
    "power_of_two": "#8e77a8",   # muted violet
}
"""One colour per policy, used by every figure."""

LABELS = {"round_robin": "Round Robin", "least_queue": "Least Queue", "latency_aware": "Latency Aware",
          "adaptive": "Adaptive", "random": "Random", "power_of_two": "Power of Two"}
ACCENT = "adaptive"
_SPARE = ("#a0522d", "#6b8e23", "#708090", "#b8860b")

NAMES = {
    "development": "development-objective",
    "attainment": "validation-attainment",
    "p99": "validation-p99",
    "straggler": "timeline-straggler",
    "failure": "timeline-failure",
    "load_curve": "load-curve",
    "lag": "estimate-lag",
}
"""File stem of each figure (``figures/<stem>.png`` and ``.svg``)."""


def colour(policy) -> str:
    if policy in PALETTE:
        return PALETTE[policy]
    return _SPARE[sum(map(ord, str(policy))) % len(_SPARE)]


def label(policy) -> str:
    return LABELS.get(policy, str(policy))


def _width(policy):
    return 2.0 if policy == ACCENT else 1.4


def _z(policy):
    return 3 if policy == ACCENT else 2


# --------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------

def development_figure(dev: xr.Dataset) -> Figure:
    """Left: the objective (mean over conditions of the mean attainment over seeds)
    against c, the selected value marked. Right: each condition's attainment relative
    to its value at the first c, with the mean."""
    from ...study import objective
    from ...config import Selection
    dev = squeeze(dev, keep=("exploration", "rate_rps", "heterogeneity", "scenario", "seed", "replica"))
    param = selected_parameter(dev)
    chosen = float(dev.attrs[f"selects_{param}"])
    obj = 100 * objective(dev, Selection(param, "attainment"))
    c = obj[param].values
    per = 100 * dev.attainment.mean("seed")
    conds = per.stack(condition=[d for d in per.dims if d != param]).transpose(param, "condition")
    rel = conds - conds.isel({param: 0})

    fig = Figure(figsize=(7.4, 3.4), layout="constrained")
    a, b = fig.subplots(1, 2)
    col = colour(ACCENT)
    a.plot(c, obj.values, color=col, lw=2, marker="o", ms=5, zorder=3)
    i = int(np.argmin(np.abs(c - chosen)))
    a.plot([c[i]], [obj.values[i]], marker="*", ms=15, color=col, mec="black", mew=0.8, zorder=4,
           ls="none", label=f"selected c = {chosen:g}")
    a.set_xlabel(_param_label(param))
    a.set_ylabel("mean attainment over conditions (%)")
    span = float(obj.max() - obj.min())
    a.set_title(f"Selection objective: {conds.sizes['condition']} conditions × {dev.sizes['seed']} seeds\n"
                f"(whole range {span:.2f} percentage points)")

    for k in range(rel.sizes["condition"]):
        b.plot(c, rel.values[:, k], color="#9a9a9a", lw=0.7, alpha=0.7, zorder=2)
    b.plot(c, rel.mean("condition").values, color=col, lw=2, marker="o", ms=4, zorder=3,
           label="mean over conditions")
    b.plot([], [], color="#9a9a9a", lw=0.7, label="one condition (mean over seeds)")
    b.axhline(0, color="black", lw=0.6)
    b.axvline(chosen, color=col, lw=0.8, ls=":")
    b.set_xlabel(_param_label(param))
    b.set_ylabel(f"change from c = {c[0]:g} (percentage points)")
    b.set_title(f"Each condition relative to c = {c[0]:g}\n(the spread the mean hides)")
    handles = a.get_legend_handles_labels()[0] + b.get_legend_handles_labels()[0]
    fig.legend(handles=handles, loc="outside lower center", ncol=3)
    return fig


def _param_label(param):
    return "exploration weight c" if param == "exploration" else param


def attainment_figure(val: xr.Dataset) -> Figure:
    """Heatmaps of mean attainment over seeds: one panel per heterogeneity setting,
    rows scenario × rate, columns policies."""
    val = squeeze(val)
    att = 100 * val.attainment.mean("seed")
    pols = [str(p) for p in val.policy.values]
    hets = [str(h) for h in val.heterogeneity.values]
    scens = [str(s) for s in val.scenario.values]
    rates = val.rate_rps.values
    n_rows = len(scens) * len(rates)
    fig = Figure(figsize=(3.0 + 1.5 * len(hets) * len(pols) / 2, 1.2 + 0.28 * n_rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(hets), sharey=True))
    cmap = matplotlib.colormaps["cividis"]
    im = None
    for ax, h in zip(axes, hets):
        grid = np.array([[float(att.sel(policy=p, heterogeneity=h, scenario=s, rate_rps=r))
                          for p in pols] for s in scens for r in rates])
        im = ax.imshow(grid, cmap=cmap, vmin=0, vmax=100, aspect="auto")
        for (y, x), v in np.ndenumerate(grid):
            txt = "—" if not np.isfinite(v) else f"{v:.1f}"
            ax.text(x, y, txt, ha="center", va="center", fontsize=7.5,
                    color="black" if (np.isfinite(v) and v > 55) else "white")
        ax.set_xticks(range(len(pols)), [label(p) for p in pols], rotation=30, ha="right")
        for t, p in zip(ax.get_xticklabels(), pols):
            t.set_color(colour(p))
            t.set_fontweight("bold")
        ax.set_yticks(range(n_rows), [f"{s} · {r:g} req/s" for s in scens for r in rates])
        for k in range(1, len(scens)):
            ax.axhline(k * len(rates) - 0.5, color="white", lw=2)
        ax.set_title(f"heterogeneity: {h}")
        ax.grid(False)
        for side in ("left", "bottom"):
            ax.spines[side].set_visible(False)
        ax.tick_params(length=0)
    fig.colorbar(im, ax=list(axes), label=f"mean attainment over {val.sizes['seed']} seeds (%)", shrink=0.8)
    return fig


def p99_figure(val: xr.Dataset) -> Figure:
    """Median p99 across seeds (marker) and its min–max range (bar) per policy, rate,
    scenario (columns) and heterogeneity (rows); log scale, the SLO dashed."""
    val = squeeze(val)
    pols = [str(p) for p in val.policy.values]
    hets = [str(h) for h in val.heterogeneity.values]
    scens = [str(s) for s in val.scenario.values]
    rates = val.rate_rps.values
    p99 = val.latency_p99
    med, lo, hi = p99.median("seed"), p99.min("seed"), p99.max("seed")
    slo = float(val.attrs.get("slo_ms", np.nan))
    fig = Figure(figsize=(7.4, 1.0 + 2.2 * len(hets)), layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(hets), len(scens), sharex=True, sharey=True))
    width = 0.8 / len(pols)
    for r, h in enumerate(hets):
        for k, s in enumerate(scens):
            ax = axes[r, k]
            for j, p in enumerate(pols):
                x = np.arange(len(rates)) + (j - (len(pols) - 1) / 2) * width
                sel = dict(policy=p, heterogeneity=h, scenario=s)
                m, a, b = med.sel(sel).values, lo.sel(sel).values, hi.sel(sel).values
                ax.vlines(x, a, b, color=colour(p), lw=1.2, alpha=0.8, zorder=_z(p))
                ax.plot(x, m, ls="none", marker="o", ms=4 if p != ACCENT else 5, color=colour(p),
                        mec="white", mew=0.4, zorder=_z(p) + 1)
            if np.isfinite(slo):
                ax.axhline(slo, color="black", lw=0.8, ls="--", zorder=1)
            _log_ms_axis(ax)
            ax.set_xticks(range(len(rates)), [f"{x:g}" for x in rates])
            if r == 0:
                ax.set_title(s)
            if r == len(hets) - 1:
                ax.set_xlabel("arrival rate (req/s)")
            if k == 0:
                ax.set_ylabel(f"{h}\np99 latency (ms)")
    handles = [Line2D([], [], color=colour(p), marker="o", ms=4, lw=1.2, label=label(p)) for p in pols]
    handles.append(Line2D([], [], color="black", lw=0.8, ls="--", label=f"SLO {slo:g} ms"))
    fig.legend(handles=handles, loc="outside upper center", ncol=len(handles))
    fig.get_layout_engine().set(h_pad=0.04)
    return fig


def _log_ms_axis(ax):
    """A log axis of milliseconds labelled 10, 20, 50, 100, ... in plain numbers."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())


def _shade(col, k):
    """Replica k's shade of a policy colour: 0 darkest, then the colour, then lighter."""
    rgb = np.array(matplotlib.colors.to_rgb(col))
    if k == 0:
        return tuple(0.55 * rgb)
    if k == 1:
        return tuple(rgb)
    return tuple(1 - (1 - rgb) * max(0.25, 0.55 - 0.15 * (k - 2)))


def _mark_events(ax, tl):
    """Shade the interval of each scenario disturbance and mark every event time."""
    times = tl.event_time.values
    kinds = tl.event_kind.values
    start = None
    for k in range(times.shape[0]):
        t, kind, v = float(times[k]), str(kinds[k]), float(tl.event_value.values[k])
        ax.axvline(t, color="#555555", lw=0.8, ls=":", zorder=1)
        opening = kind == "fail" or (kind in ("slowdown", "rate_multiplier") and v != 1)
        if opening and start is None:
            start = t
        elif not opening and start is not None:
            ax.axvspan(start, t, color="#f2e3d5", alpha=0.6, lw=0, zorder=0)
            start = None
    if start is not None:
        ax.axvspan(start, float(tl.time.values[-1]), color="#f2e3d5", alpha=0.6, lw=0, zorder=0)


_REPLICA_STYLES = ("-", "--", ":", "-.")


def timeline_figure(tl: xr.Dataset) -> Figure:
    """One row per policy: queue per replica, rolling p99 against the SLO, rolling
    throughput and cumulative sheds, with the scenario's events marked."""
    pols = [str(p) for p in tl.policy.values]
    t = tl.time.values
    slo = float(tl.attrs.get("slo_ms", np.nan))
    fig = Figure(figsize=(7.6, 0.9 + 1.75 * len(pols)), layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(pols), 4, sharex=True))
    titles = ("waiting queue (requests)", f"p99 of last {tl.attrs['rolling_completions']} (ms)",
              f"throughput, {tl.attrs['throughput_window_ms'] / 1000:g} s window (req/s)",
              "shed so far (requests)")
    p99_top = float(np.nanmax(tl.rolling_p99.values)) if np.isfinite(tl.rolling_p99.values).any() else 100.0
    sheds = tl.sheds.cumsum("time")
    shed_top = max(1.0, float(sheds.max()))
    tput_top = float(tl.rolling_throughput.max())
    q_top = float(tl.queue.max())
    for r, p in enumerate(pols):
        one = tl.sel(policy=p)
        col = colour(p)
        ax = axes[r, 0]
        for i, rep in enumerate(tl.replica.values):
            ax.plot(t, one.queue.sel(replica=rep).values, color=_shade(col, i), lw=0.9,
                    ls=_REPLICA_STYLES[i % len(_REPLICA_STYLES)], label=f"replica {rep}",
                    zorder=3 - 0.1 * i)
        ax.set_ylim(-0.02 * q_top - 0.5, 1.05 * q_top + 0.5)
        ax.set_ylabel(label(p), color=col, fontweight="bold", fontsize=9.5)
        ax = axes[r, 1]
        ax.plot(t, one.rolling_p99.values, color=col, lw=1.2)
        if np.isfinite(slo):
            ax.axhline(slo, color="black", lw=0.8, ls="--")
        _log_ms_axis(ax)
        ax.set_ylim(max(1.0, 0.5 * float(np.nanmin(tl.rolling_p99.values))), 1.5 * p99_top)
        ax = axes[r, 2]
        ax.plot(t, one.rolling_throughput.values, color=col, lw=1.2)
        ax.set_ylim(0, 1.08 * tput_top)
        ax = axes[r, 3]
        ax.plot(t, sheds.sel(policy=p).values, color=col, lw=1.2)
        ax.set_ylim(-0.02 * shed_top, 1.08 * shed_top)
        for ax in axes[r]:
            _mark_events(ax, tl)
    for k, title in enumerate(titles):
        axes[0, k].set_title(title, fontsize=8.5)
        axes[-1, k].set_xlabel("time (s)")
    handles = [Line2D([], [], color=_shade("#808080", i), lw=1.2, ls=_REPLICA_STYLES[i % 4],
                      label=f"replica {rep}" + (" (darkest)" if i == 0 else ""))
               for i, rep in enumerate(tl.replica.values)]
    handles.append(Line2D([], [], color="black", lw=0.8, ls="--", label=f"SLO {slo:g} ms"))
    handles.append(matplotlib.patches.Patch(color="#f2e3d5", label="disturbance"))
    scen = str(tl.scenario.values)
    fig.suptitle(f"{scen}: {float(tl.rate_rps):g} req/s, heterogeneity {str(tl.heterogeneity.values)}, "
                 f"seed {int(tl.seed)} — {trace_events_text(tl)}", fontsize=9)
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles))
    return fig


def load_curve_figure(lc: xr.Dataset) -> Figure:
    """Median p99 (top, log) and mean attainment (bottom) against the arrival rate,
    one line per policy, one column per heterogeneity setting; steady scenario."""
    lc = steady(squeeze(lc))
    pols = [str(p) for p in lc.policy.values]
    hets = [str(h) for h in lc.heterogeneity.values]
    rates = lc.rate_rps.values
    slo = float(lc.attrs.get("slo_ms", np.nan))
    demand = mean_demand(lc)
    fig = Figure(figsize=(7.2, 5.2), layout="constrained")
    axes = np.atleast_2d(fig.subplots(2, len(hets), sharex=True, sharey="row"))
    if axes.shape[0] != 2:
        axes = axes.T
    for k, h in enumerate(hets):
        cap = capacity_rps(lc, h, demand)
        for p in pols:
            one = lc.sel(policy=p, heterogeneity=h)
            kw = dict(color=colour(p), lw=_width(p), marker="o", ms=3.5, zorder=_z(p), label=label(p))
            axes[0, k].plot(rates, one.latency_p99.median("seed").values, **kw)
            axes[1, k].plot(rates, 100 * one.attainment.mean("seed").values, **kw)
        axes[0, k].axhline(slo, color="black", lw=0.8, ls="--", label=f"SLO {slo:g} ms")
        _log_ms_axis(axes[0, k])
        axes[0, k].set_title(f"heterogeneity: {h} ({', '.join(f'{x:g}' for x in lc.mean_service_ms.sel(heterogeneity=h).values)} ms)")
        for ax in axes[:, k]:
            ax.axvline(cap, color="#555555", lw=0.8, ls=":")
        axes[0, k].text(cap, 0.03, f"capacity ≈ {cap:.0f} req/s ", rotation=90, va="bottom", ha="right",
                        fontsize=7.5, color="#444444", transform=axes[0, k].get_xaxis_transform())
        axes[1, k].set_xlabel("arrival rate (req/s)")
        axes[1, k].set_ylim(0, 102)
    axes[0, 0].set_ylabel(f"median p99 over {lc.sizes['seed']} seeds (ms)")
    axes[1, 0].set_ylabel("mean attainment (%)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncol=len(handles))
    return fig


def estimate_lag_figure(tl: xr.Dataset) -> Figure:
    """ŝ of the straggler replica against its true mean service time: one row per
    policy, one column per α, with the time ŝ takes to cover 90 % of each step."""
    rep, onset, factor, recovery = straggler_event(tl)
    pols = [str(p) for p in tl.policy.values]
    alphas = tl.alpha.values if "alpha" in tl.dims else np.array([tl.attrs["alpha"]])
    t = tl.time.values
    end = recovery + 1.5 if recovery is not None else float(t[-1])
    win = (t >= onset - 1.0) & (t <= end)
    fig = Figure(figsize=(7.6, 1.3 + 1.9 * len(pols)), layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(pols), len(alphas), sharex=True, sharey=True))
    top = 0.0
    for r, p in enumerate(pols):
        for k, a in enumerate(alphas):
            ax = axes[r, k]
            one = tl.sel(policy=p, replica=rep)
            if "alpha" in one.dims:
                one = one.sel(alpha=a)
            s_hat, true = one.s_hat.values, one.mean_service.values
            top = max(top, float(s_hat[win].max()))
            ax.plot(t[win], s_hat[win], color=colour(p), lw=0.9, zorder=3)
            ax.plot(t[win], true[win], color="black", lw=1.0, ls="--", zorder=4)
            _mark_events(ax, tl)
            lines = [f"90 % of step up: {1000 * reach_time(t, s_hat, true, onset):.0f} ms"]
            if recovery is not None:
                lines.append(f"90 % of step down: {1000 * reach_time(t, s_hat, true, recovery):.0f} ms")
            ax.text(0.03, 0.97, "\n".join(lines), transform=ax.transAxes, va="top", ha="left", fontsize=7,
                    color="#333333", bbox=dict(fc="white", ec="none", alpha=0.8, pad=1.5), zorder=5)
            if r == 0:
                ax.set_title(f"α = {a:g}" + (" (study)" if np.isclose(a, tl.attrs.get("alpha_study", np.nan)) else ""))
            if r == len(pols) - 1:
                ax.set_xlabel("time (s)")
            if k == 0:
                ax.set_ylabel(f"{label(p)}\n" + r"$\hat{s}$ (ms)", color=colour(p), fontweight="bold")
    axes[0, 0].set_ylim(0, 1.05 * top)
    before = float(tl.mean_service.sel(replica=rep).values.ravel()[0])
    handles = [Line2D([], [], color="#666666", lw=0.9, label=r"$\hat{s}$ of replica " + f"{rep} (EWMA of observed service)"),
               Line2D([], [], color="black", lw=1.0, ls="--",
                      label=f"true mean service ({before:.1f} → {before * factor:.1f} ms)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=2)
    fig.suptitle(f"{str(tl.scenario.values)}, {float(tl.rate_rps):g} req/s, heterogeneity "
                 f"{str(tl.heterogeneity.values)}, seed {int(tl.seed)}: replica {rep} serves ×{factor:g} slower "
                 f"from {onset:g} s" + (f" to {recovery:g} s" if recovery is not None else ""), fontsize=9)
    return fig


# --------------------------------------------------------------------------------------
# A results folder's figures
# --------------------------------------------------------------------------------------

def jobs(results_dir, load_curve_dir=None):
    """[(stem, function returning a Figure)] for a results folder, in order."""
    results = load(results_dir)
    dev, val = stages(results)
    out = []
    if dev is not None:
        out.append((NAMES["development"], lambda: development_figure(dev)))
    if val is not None:
        out.append((NAMES["attainment"], lambda: attainment_figure(val)))
        out.append((NAMES["p99"], lambda: p99_figure(val)))
        traces = {}

        def timeline(key):
            if not traces:
                traces.update(timeline_traces(val))
            return timeline_figure(traces[key])
        for key, name in timeline_scenarios(val).items():
            out.append((f"timeline-{name}", lambda key=key: timeline(key)))
    if load_curve_dir is not None:
        lcv = load_curve_stage(load_curve_dir)
        if lcv is not None:
            out.append((NAMES["load_curve"], lambda: load_curve_figure(lcv)))
    if val is not None and scenario_in(val, EventKind.SLOWDOWN) is not None:
        out.append((NAMES["lag"], lambda: estimate_lag_figure(lag_trace(val))))
    return out


def render(results_dir, out_dir="figures", load_curve_dir=None, show_progress=False) -> list:
    """Render every figure of a results folder into ``out_dir``; return the written paths."""
    return plotting.render(jobs(results_dir, load_curve_dir), out_dir, show_progress)
