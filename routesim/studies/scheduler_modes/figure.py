"""figures/scheduler-modes.png (and .svg): the three arms side by side.

Top: the example cluster's capacity at the SLO per policy and arm (median rule; bars:
the seeds' own capacities), and the TTFT p99 per policy and arm on the example at
:data:`~.design.NEAR` req/s and on the Mooncake excerpt (one mark per seed). Below: per
policy, paired by seed, with the 95 % bootstrap interval (:mod:`.measure`), vllm −
reserve (:data:`~.measure.MODE`) and vllm − vllm_sync (:data:`~.measure.LOOP`) one above
the other, one panel per metric: the example at NEAR req/s, then Mooncake.
"""

import math

import numpy as np
from matplotlib import ticker
from matplotlib.figure import Figure

from .. import plotting
from . import STEM
from .measure import LOOP, LOOP_METRICS, METRICS, MODE, SCHEDULERS, capacities, differences

COLORS = {"reserve": "#4c72b0", "vllm_sync": "#55a868", "vllm": "#dd8452"}
LABELS = {"reserve": 'scheduler = "reserve" (default)',
          "vllm_sync": 'scheduler = "vllm", async_scheduling = false',
          "vllm": 'scheduler = "vllm" (async_scheduling = true, its default)'}
OFFSETS = {"reserve": -0.24, "vllm_sync": 0.0, "vllm": 0.24}
"""Each arm's row offset in the top panels."""
COMPARISONS = ((MODE, "#dd8452", -0.15, "vllm − reserve"), (LOOP, "#8172b3", 0.15, "vllm − vllm_sync"))
"""The bottom panels' two comparisons: (pair, colour, row offset, label)."""
PANELS = {m: {**METRICS, **LOOP_METRICS}[m] for m in ("prefix_hit_rate", "preemptions", "ttft_p50", "ttft_p99",
                                                       "itl_p99", "tpot_p99")}
"""The bottom panels' metrics: the compared metrics and TTFT p50, where the loops differ most."""
DPI = 110


def _policies(ds):
    return [str(p) for p in ds.policy.values]


def _capacity(ax, ds, resolution):
    pols = _policies(ds)
    cap = capacities(ds)
    low = float(ds.attrs["capacity_low"])
    y = np.arange(len(pols))
    for s in SCHEDULERS:
        off = OFFSETS[s]
        for i, p in enumerate(pols):
            c, lo, hi = cap[(s, p)]
            if math.isnan(c):
                ax.annotate(f"< {low:g}", (low, i + off), xytext=(3, 0), textcoords="offset points",
                            va="center", fontsize=7, color=COLORS[s])
                continue
            ax.barh(i + off, c, height=0.23, color=COLORS[s], alpha=0.85)
            if c >= float(ds.attrs["capacity_high"]):
                ax.annotate(f"≥ {c:g}", (c, i + off), xytext=(3, 0), textcoords="offset points",
                            va="center", fontsize=7, color=COLORS[s])
            if math.isfinite(lo):
                ax.plot([lo, hi], [i + off] * 2, color="k", lw=1)
    ax.set_yticks(y, pols)
    ax.invert_yaxis()
    ax.set_xlim(low - resolution, float(ds.attrs["capacity_high"]) + resolution)
    ax.set_xlabel("capacity at the SLO (req/s)")
    ax.set_title("example: capacity (median TTFT p99 ≤ SLO)\nbar: median rule; line: the seeds' own range",
                 fontsize=9)


def _tail(ax, ds, var, rate, title):
    pols = _policies(ds)
    for s in SCHEDULERS:
        off = OFFSETS[s]
        for i, p in enumerate(pols):
            x = ds[var].sel(scheduler=s, policy=p)
            if rate is not None:
                x = x.sel(rate_rps=rate)
            v = x.values.astype(float) / 1000.0
            ax.plot(v, np.full(v.size, i + off), "o", ms=3.5, mfc="none", color=COLORS[s], alpha=0.8)
            ax.plot([np.median(v)] * 2, [i + off - 0.1, i + off + 0.1], "-", color=COLORS[s], lw=2)
    ax.set_yticks(np.arange(len(pols)), pols)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.xaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.set_xlabel(f"{METRICS[var][0]} (s, log scale)")
    ax.set_title(title, fontsize=9)


def _deltas(axes, ds, rate, row_label):
    pols = _policies(ds)
    y = np.arange(len(pols))
    for pair, color, off, _ in COMPARISONS:
        diff = differences(ds, None if rate is None else [rate], pair, PANELS)
        for ax, var in zip(axes, PANELS):
            for i, p in enumerate(pols):
                m, lo, hi = diff[(var, p, rate)]
                claimed = (lo > 0 or hi < 0)
                if math.isfinite(lo):
                    ax.plot([lo, hi], [i + off] * 2, "-", color=color, lw=1.8 if claimed else 1.0)
                ax.plot([m], [i + off], "o", color=color, ms=4.5, mfc=color if claimed else "white")
    for j, (ax, (var, (label, how, unit, _))) in enumerate(zip(axes, PANELS.items())):
        ax.axvline(0, color="k", lw=0.8)
        ax.set_yticks(y, pols if j == 0 else [""] * len(pols))
        ax.invert_yaxis()
        what = {"relative": "a / b − 1", "points": "a − b", "absolute": "a − b"}[how]
        ax.set_xlabel(f"{what}" + (f" ({unit})" if unit else ""))
        ax.set_title(f"{row_label}: Δ {label}", fontsize=9)
        lo_, hi_ = ax.get_xlim()
        span = max(abs(lo_), abs(hi_), 1e-9)
        ax.set_xlim(-span, span)
        ax.xaxis.set_major_locator(ticker.MaxNLocator(5, symmetric=True))


def figure(data, figures_dir, resolution, near):
    """Draw the figure from {"example", "mooncake"} prepared Datasets (under the studies'
    style, :data:`routesim.studies.plotting.STYLE`) and save it; returns the paths."""
    import matplotlib
    with matplotlib.rc_context(plotting.STYLE):
        fig = _draw(data, resolution, near)
    return plotting.save(fig, figures_dir, STEM, DPI, rc=plotting.STYLE, freeze_layout=True)


def _draw(data, resolution, near):
    ex, mc = data["example"], data["mooncake"]
    fig = Figure(figsize=(19, 11.5), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.55])
    a, b, c = top.subplots(1, 3)
    _capacity(a, ex, resolution)
    _tail(b, ex, "ttft_p99", near, f"example at {near:g} req/s: TTFT p99\n(one mark per seed; bar: median)")
    _tail(c, mc, "ttft_p99", None, "Mooncake excerpt: TTFT p99\n(one mark per seed; bar: median)")
    handles = [b.plot([], [], "s", color=COLORS[s], label=LABELS[s])[0] for s in SCHEDULERS]
    top.legend(handles=handles, loc="outside upper center", ncol=3, fontsize=9, frameon=False)
    rows = bottom.subplots(2, len(PANELS))
    _deltas(rows[0], ex, near, f"example, {near:g} req/s")
    _deltas(rows[1], mc, None, "Mooncake")
    pairs = [rows[0][0].plot([], [], "o-", color=c, label=f"{label} (a − b)")[0] for _, c, _, label in COMPARISONS]
    bottom.legend(handles=pairs, loc="outside lower center", ncol=2, fontsize=9, frameon=False)
    bottom.suptitle("Paired by seed: mean and 95 % percentile bootstrap interval over the seeds (filled, thick: "
                    f"the interval excludes 0; example {ex.sizes['seed']} seeds, Mooncake "
                    f"{mc.sizes['seed']}: there only power_of_d varies with the seed, the other policies "
                    "repeat one run, so their interval is a point)", fontsize=9)
    fig.suptitle(f"The replica schedulers and vLLM's two loops: the example cluster (8 replicas, {ex.attrs['warmup_s']:g} s "
                 f"warm-up + {ex.attrs['measure_s']:g} s, drained) and the Mooncake excerpt (8 replicas, "
                 f"time scale 1.5, {mc.attrs['warmup_s']:g} s + {mc.attrs['measure_s']:g} s, drained)", fontsize=10.5)
    return fig
