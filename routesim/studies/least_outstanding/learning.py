"""Claim 8 of the least-outstanding-routing study: count-based capacity learning
over-learns. sweeps/token-routing-hetero.toml (results/token-routing-hetero/hetero.nc:
policy × seed × replica)."""

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from .common import FIGURES, lead, open_stage, save, spread

SWEEPS = ("sweeps/token-routing-hetero.toml",)


def load(root):
    return open_stage(Path(root) / "token-routing-hetero" / "hetero.nc")


def fast_share(ds):
    """Per seed (and policy): replica 1's share of the attempts routed in the window."""
    return ds.assigned.sel(replica=1) / ds.assigned.sum("replica")


def capacity_share(ds):
    """Replica 1's share of the cluster's capacity: speeds are 1 / time factor."""
    speed = 1.0 / ds.time_factor.squeeze(drop=True)
    return float(speed.sel(replica=1) / speed.sum("replica"))


def _faster_pct(ds):
    return (1.0 / float(ds.time_factor.squeeze(drop=True).sel(replica=1)) - 1) * 100


def verdict(ds):
    """holds if rate_weighted gives the fast replica more than its capacity share on
    every seed and more than least_tokens does on every seed; else does not hold."""
    sh = fast_share(ds)
    over = lead(sh.sel(policy="rate_weighted") - capacity_share(ds)) == "above"
    more = lead(sh.sel(policy="rate_weighted") - sh.sel(policy="least_tokens")) == "above"
    return "holds" if over and more else "does not hold in this model"


def figure(ds, figures_dir=FIGURES):
    fig = Figure(figsize=(10, 3.6))
    ax, ax2 = fig.subplots(1, 2)
    sh = fast_share(ds) * 100
    pols = ["round_robin", "least_tokens", "rate_weighted"]
    for i, p in enumerate(pols):
        v = sh.sel(policy=p).values
        ax.plot(np.full(v.size, i), v, "o", alpha=0.6)
        v2 = ds.ttft_p99.sel(policy=p).values
        ax2.plot(np.full(v2.size, i), v2, "o", alpha=0.6)
    ax.axhline(capacity_share(ds) * 100, color="k", ls="--", lw=1, label=f"its share of capacity ({capacity_share(ds) * 100:.1f} %)")
    ax.set_xticks(range(3), pols)
    ax.set_ylabel("fast replica's share of assignments (%)")
    ax.legend(fontsize=8)
    ax2.set_xticks(range(3), pols)
    ax2.set_ylabel("TTFT p99 (ms)")
    ax2.set_yscale("log")
    fig.suptitle(f"Claim 8: one replica {_faster_pct(ds):.0f} % faster, {ds.attrs['rate_rps']:g} req/s "
                 "(one dot per seed)", fontsize=10)
    fig.tight_layout()
    return save(fig, "lor-claim8-hetero", figures_dir)


def section(ds):
    sh = fast_share(ds) * 100
    rows = ["| policy | fast replica's share % | TTFT p99 ms |", "|---|---|---|"]
    for p in ("round_robin", "least_tokens", "rate_weighted"):
        rows.append(f"| {p} | {spread(sh.sel(policy=p), 1)} | {float(ds.ttft_p99.sel(policy=p).median()):.0f} |")
    dt = ds.ttft_p99.sel(policy="rate_weighted") - ds.ttft_p99.sel(policy="least_tokens")
    return "\n".join([
        "## Claim 8: count-based capacity learning over-learns", "",
        "**Prediction (the seed).** A router that learns capacity from completed requests "
        "sends a faster replica more traffic than its capacity warrants; scoring by work in "
        "flight does not.", "",
        f"**Design.** `sweeps/token-routing-hetero.toml`: {ds.sizes['replica']} replicas, replica 1 "
        f"{_faster_pct(ds):.0f} % faster, {ds.attrs['rate_rps']:g} req/s, rate_weighted against "
        f"least_tokens (and round_robin), {ds.sizes['seed']} seeds, {ds.attrs['warmup_s']:g} s + "
        f"{ds.attrs['measure_s']:g} s. Shares: mean [min, max] over seeds; TTFT p99: median.", "",
        *rows, "",
        "![Claim 8](../figures/lor-claim8-hetero.png)", "",
        f"**Reading.** rate_weighted's share for the fast replica scatters around its share "
        f"of capacity ({capacity_share(ds) * 100:.1f} %), above it on some seeds and below on others; "
        "it does not over-learn systematically in this model, and least_tokens' share "
        "overlaps it. What rate_weighted does do is route worse: its TTFT p99 minus "
        f"least_tokens' is {spread(dt)} ms per seed (mean [min, max]), since weights from a "
        "1 s window of completions are, plausibly, noisy with heavy-tailed costs (not tested here).", ""])



def row(ds):
    """(claim, prediction, measured, verdict) for the verdict table."""
    sh = fast_share(ds).sel(policy="rate_weighted") * 100
    return ("8. Count-based capacity learning over-learns",
            f"rate_weighted gives a {_faster_pct(ds):.0f} % faster replica more than its "
            f"{capacity_share(ds) * 100:.1f} % capacity share",
            f"rate_weighted's share {sh.mean().item():.1f} % (per seed {sh.min().item():.1f} "
            f"to {sh.max().item():.1f} %)", verdict(ds))
