"""The black-hole timeline figure (``timeline-black-hole``): the batching model's
black-hole incident on one seed (sweeps/incidents.toml, ``results/incidents/``),
without and with containment, drawn and saved with :mod:`routesim.studies.plotting`'s
style."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from .resultset import BLACK_HOLE_ARMS, black_hole_event, black_hole_stage, black_hole_trace  # noqa: E402

NAME = "timeline-black-hole"
"""File stem of the figure (``figures/<stem>.png`` and ``.svg``)."""

BLACK_HOLE_COLOURS = {"hole": "#c0392b", "others": "#4f7cac", "ejected": "#d9d9d9", "incident": "#f2e3d5"}


def _bins(t, per_interval, width_s):
    """Per-interval counts summed into bins of ``width_s``: (bin end times, per second)."""
    dt = float(t[1] - t[0])
    k = max(1, int(round(width_s / dt)))
    n = (per_interval.shape[-1] - 1) // k
    x = per_interval[..., 1:1 + n * k].reshape(per_interval.shape[:-1] + (n, k)).sum(axis=-1)
    return t[1:1 + n * k:k] + (k - 1) * dt, x / (k * dt)


def _spans(t, flag):
    """(start, end) of the runs of ``flag`` true."""
    out, start = [], None
    for x, f in zip(t, flag):
        if f and start is None:
            start = x
        elif not f and start is not None:
            out.append((start, x))
            start = None
    if start is not None:
        out.append((start, float(t[-1])))
    return out


def black_hole_figure(tl: xr.Dataset) -> Figure:
    """The black-hole incident on one seed: one row per arm (without containment; with
    the breaker and retry_avoid_previous). Columns: attempts routed per second to the
    black hole and to an average other replica; outstanding requests as the router
    sees them; attempts failing per second. The black hole's interval is shaded, the
    breaker's ejections of it drawn as grey bands."""
    rep, start, end = black_hole_event(tl)
    end_s = end if end is not None else float(tl.time.values[-1])
    lo, hi = max(0.0, start - 4.0), min(float(tl.time.values[-1]), end_s + 4.0)
    t = tl.time.values
    win = (t >= lo) & (t <= hi)
    c = BLACK_HOLE_COLOURS
    fig = Figure(figsize=(7.6, 4.9), layout="constrained")
    axes = fig.subplots(len(BLACK_HOLE_ARMS), 3, sharex=True)
    titles = ("attempts routed to a replica\n(per s, 250 ms bins)",
              "outstanding requests on a replica,\nas the router sees them",
              "attempts failing, whole cluster\n(per s, 250 ms bins)")
    tops = [0.0, 0.0, 0.0]
    others = [r for r in tl.replica.values if int(r) != rep]
    for row, arm in enumerate(BLACK_HOLE_ARMS):
        one = tl.sel(arm).squeeze()
        hole = one.sel(replica=rep)
        ax = axes[row]
        tb, a_hole = _bins(t, hole.assignments.values, 0.25)
        _, a_rest = _bins(t, one.assignments.sel(replica=others).mean("replica").values, 0.25)
        keep = (tb >= lo) & (tb <= hi)
        ax[0].step(tb[keep], a_rest[keep], where="post", color=c["others"], lw=1.0, label="average other replica")
        ax[0].step(tb[keep], a_hole[keep], where="post", color=c["hole"], lw=1.3, label=f"replica {rep} (black hole)")
        ax[1].plot(t[win], one.view_requests.sel(replica=others).mean("replica").values[win], color=c["others"], lw=1.0)
        ax[1].plot(t[win], hole.view_requests.values[win], color=c["hole"], lw=1.3)
        _, fails = _bins(t, one.failures_interval.values, 0.25)
        ax[2].step(tb[keep], fails[keep], where="post", color="black", lw=1.0)
        tops = [max(tops[0], float(a_hole[keep].max()), float(a_rest[keep].max())),
                max(tops[1], float(one.view_requests.sel(replica=others).mean("replica").values[win].max()),
                    float(hole.view_requests.values[win].max())),
                max(tops[2], float(fails[keep].max()))]
        ejections = _spans(t, hole.ejected.values.astype(bool))
        for a in ax:
            a.axvspan(start, end_s, color=c["incident"], alpha=0.6, lw=0, zorder=0)
            for e0, e1 in ejections:
                a.axvspan(e0, e1, color=c["ejected"], alpha=0.9, lw=0, zorder=0.5)
        n_ej = len(ejections)
        failed = int(one.failed)
        text = "no breaker, retries may return to it" if row == 0 else \
            f"breaker ejects it {n_ej} time{'s' if n_ej != 1 else ''}; retries avoid it"
        ax[0].set_ylabel(("without containment" if row == 0 else "with breaker (5 failures)\n+ retry_avoid_previous"),
                         fontsize=8.5, fontweight="bold")
        ax[2].text(0.98, 0.97, f"{text}\nattainment {100 * float(one.attainment):.1f} %, "
                   f"{failed} request{'s' if failed != 1 else ''} failed",
                   transform=ax[2].transAxes, ha="right", va="top", fontsize=7,
                   bbox=dict(fc="white", ec="none", alpha=0.85, pad=1.5), zorder=5)
    for row in range(len(BLACK_HOLE_ARMS)):
        for k in range(3):
            axes[row, k].set_ylim(0, (1.45 if k == 2 else 1.12) * max(tops[k], 1.0))
            axes[row, k].set_xlim(lo, hi)
    for k, title in enumerate(titles):
        axes[0, k].set_title(title, fontsize=8.5)
        axes[-1, k].set_xlabel("time (s)")
    handles = [Line2D([], [], color=c["hole"], lw=1.3, label=f"replica {rep} (black hole)"),
               Line2D([], [], color=c["others"], lw=1.0, label="average of the other replicas"),
               Line2D([], [], color="black", lw=1.0, label="all replicas"),
               matplotlib.patches.Patch(color=c["incident"], label=f"replica {rep} fails fast"),
               matplotlib.patches.Patch(color=c["ejected"], label="ejected by the breaker")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=7.5)
    pol = str(np.atleast_1d(tl.policy.values)[0])
    fig.suptitle(f"Black hole: replica {rep} answers every attempt with an error {tl.attrs.get('fail_fast_ms', 2):g} ms "
                 f"later from {start:g} s to {end_s:g} s\n{pol}, {float(tl.rate_rps):g} req/s on "
                 f"{tl.sizes['replica']} replicas, seed {int(tl.seed)}: looking emptiest, it draws the traffic",
                 fontsize=9)
    return fig


def jobs(incidents_dir):
    """[(stem, function returning a Figure)]: the black-hole figure when the incidents
    results folder (None: none) holds the black-hole stage, else nothing."""
    if incidents_dir is None:
        return []
    bh = black_hole_stage(incidents_dir)
    if bh is None:
        return []
    return [(NAME, lambda: black_hole_figure(black_hole_trace(bh)))]
