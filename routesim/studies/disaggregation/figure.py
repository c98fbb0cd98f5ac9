"""figures/disaggregation.png (and .svg): one column per workload (chat, code, Mooncake).

Rows: the goodput (median over seeds) against the load for every arm; the goodput's
paired difference against co-located with its 95 % interval (independent routing, one
mark per split); TPOT p99 and TTFT p99 each over its SLO against the load (medians); the
TTFT's parts (p50s of the disaggregated requests) for every split and rule at the
per-arm tables' load (docs/disaggregation.md), the busiest link's utilisation written
above each bar.
"""

import math

import numpy as np
from matplotlib import ticker
from matplotlib.figure import Figure

from .. import plotting
from ...batching.pd_keys import ROUTES
from . import STEM
from .design import COLOCATED, SPLITS, WORKLOADS, arm
from .document import NAMES, _reference_load
from .measure import capacities, load_axis, loads, median, paired, parts

COLORS = {COLOCATED: "#222222", "2:6": "#4c72b0", "4:4": "#55a868", "6:2": "#dd8452"}
STYLES = {"independent": "-", "selective": "--", "transfer_aware": ":"}
PARTS = (("prefill_queue", "prefill queue", "#c7c7c7"), ("prefill", "prefill", "#4c72b0"),
         ("transfer", "transfer", "#c44e52"), ("decode_queue", "decode queue", "#8172b3"))
DPI = 110


def _color(a):
    return COLORS[a.split(" ")[0]] if a != COLOCATED else COLORS[COLOCATED]


def _xlabel(ds):
    return "offered load (req/s)" if load_axis(ds) == "rate_rps" else "trace time scale (× the trace's rate)"


def _goodput(ax, ds, title):
    xs = loads(ds)
    for a in [str(a) for a in ds.arm.values]:
        route = a.split(" ")[1] if a != COLOCATED else "independent"
        ax.plot(xs, [median(ds, "goodput", a, x) for x in xs], STYLES[route], marker="o", ms=3,
                color=_color(a), lw=2.4 if a == COLOCATED else 1.3, label=a)
    if load_axis(ds) == "rate_rps":
        ax.plot(xs, xs, color="0.6", lw=0.8, ls=(0, (1, 3)), label="goodput = load")
    ax.set_xlabel(_xlabel(ds))
    ax.set_ylabel("goodput (req/s within both SLOs)")
    ax.set_title(title, fontsize=9.5)


def _delta(ax, ds):
    xs = loads(ds)
    step = (xs[1] - xs[0]) if len(xs) > 1 else 1.0
    for k, s in enumerate(SPLITS):
        a = arm(s, "independent")
        off = (k - 1) * 0.12 * step
        for x in xs:
            m, lo, hi = paired(ds, "goodput", a, load=x)
            if not math.isfinite(m):
                continue
            claimed = lo > 0 or hi < 0
            ax.plot([x + off] * 2, [lo, hi], color=COLORS[a.split(" ")[0]], lw=1.8 if claimed else 0.9)
            ax.plot([x + off], [m], "o", ms=4, color=COLORS[a.split(" ")[0]],
                    mfc=COLORS[a.split(" ")[0]] if claimed else "white")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xlabel(_xlabel(ds))
    ax.set_ylabel("Δ goodput vs co-located (req/s)")
    ax.set_title("independent routing − co-located, paired by seed\n(mean, 95 % interval; filled: excludes 0)",
                 fontsize=9)


def _tails(ax, ds):
    xs = loads(ds)
    for a in [COLOCATED] + [arm(s, "independent") for s in SPLITS]:
        for var, slo, style, marker in (("tpot_p99", "slo_tpot_ms", "-", "o"), ("ttft_p99", "slo_ttft_ms", ":", "^")):
            bound = float(ds.attrs[slo])
            ax.plot(xs, [median(ds, var, a, x) / bound for x in xs], style, marker=marker, ms=3, color=_color(a),
                    lw=2.2 if a == COLOCATED else 1.2)
    ax.axhline(1.0, color="k", ls="--", lw=0.8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel(_xlabel(ds))
    ax.set_ylabel("p99 ÷ its SLO (log scale)")
    ax.set_title("TPOT p99 ÷ 50 ms (solid) and TTFT p99 ÷ 1 s (dotted); dashed: the SLO\n"
                 "co-located and independent routing, medians over seeds", fontsize=9)


def _parts(ax, ds, x, what):
    labels, bottoms = [], []
    for i, (s, r) in enumerate((s, r) for s in SPLITS for r in ROUTES):
        a = arm(s, r)
        pt = parts(ds, a, x)
        bottom = 0.0
        for key, _, color in PARTS:
            v = pt[key] if math.isfinite(pt[key]) else 0.0
            ax.bar(i, v, bottom=bottom, color=color, width=0.75)
            bottom += v
        bottoms.append(bottom)
        ax.annotate(f"{100 * pt['link_max']:.0f} %" if math.isfinite(pt["link_max"]) else "",
                    (i, bottom), xytext=(0, 2), textcoords="offset points", ha="center", fontsize=7)
        labels.append(f"{s[0]}:{s[1]} {r.replace('transfer_aware', 'tr.-aware')}")
    ax.set_xticks(np.arange(len(labels)), labels, rotation=60, ha="right", fontsize=7.5)
    ax.set_yscale("symlog", linthresh=100.0)
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel("TTFT p50 parts (ms, symlog)")
    ax.set_title(f"TTFT parts at {what} (p50s, disaggregated requests);\nabove each bar: the busiest link's utilisation",
                 fontsize=9)


def figure(data, figures_dir):
    """Draw the figure from {workload: Dataset} (under the studies' style) and save it;
    returns the paths."""
    import matplotlib
    with matplotlib.rc_context(plotting.STYLE):
        fig = _draw(data)
    return plotting.save(fig, figures_dir, STEM, DPI, rc=plotting.STYLE, freeze_layout=True)


def _draw(data):
    fig = Figure(figsize=(17, 19), layout="constrained")
    axes = fig.subplots(4, len(WORKLOADS))
    for j, w in enumerate(WORKLOADS):
        ds = data[w]
        cap = capacities(ds) if load_axis(ds) == "rate_rps" else None
        ref = _reference_load(ds, cap)
        _goodput(axes[0][j], ds, f"{NAMES[w]}: goodput, median over {ds.sizes['seed']} seeds")
        _delta(axes[1][j], ds)
        _tails(axes[2][j], ds)
        what = f"{ref:g} req/s" if cap is not None else f"time scale {ref:g}"
        _parts(axes[3][j], ds, ref, what)
    handles, labels = axes[0][0].get_legend_handles_labels()
    handles += [axes[3][0].bar([0], [0], color=c)[0] for _, _, c in PARTS]
    labels += [label for _, label, _ in PARTS]
    fig.legend(handles, labels, loc="outside lower center", ncol=7, fontsize=8.5, frameon=False)
    a0 = data["chat"].attrs
    fig.suptitle("Prefill/decode disaggregation against co-location, 8 replicas: splits prefill:decode (colour) "
                 "under the pair-routing rules (line style: independent solid, selective dashed, transfer-aware "
                 f"dotted); SLOs TTFT ≤ {a0['slo_ttft_ms']:g} ms and TPOT ≤ {a0['slo_tpot_ms']:g} ms",
                 fontsize=10.5)
    return fig
