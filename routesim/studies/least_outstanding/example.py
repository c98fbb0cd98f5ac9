"""Claim 1's worked example as a direct two-replica case (sweeps/token-routing-example.toml:
results/token-routing-example/example.nc, policy × seed × replica): twenty requests with
1,000-token prompts arrive together, nineteen generate 50 tokens and the last 4,000.
Not a claim of its own (``row`` is None): its section follows claim 1's."""

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from .common import FIGURES, details, open_stage, save
from .counts import worked_example

SWEEPS = ("sweeps/token-routing-example.toml",)
POLICIES = ("round_robin", "least_requests", "least_tokens")


def load(root):
    return open_stage(Path(root) / "token-routing-example" / "example.nc")


def requests(ds, policy="round_robin"):
    """Per request (file order): replica (1-based; round_robin places row k on replica
    k mod 2 + 1), output tokens, TTFT, TPOT and completion (ms), from a timeline traced
    from the Dataset's own sweep."""
    import routesim
    tl = routesim.trace(ds, policy=policy, interval_ms=100.0)
    ttft, tpot = tl.request_ttft.values.ravel(), tl.request_tpot.values.ravel()
    arrival = tl.request_arrival.values.ravel() * 1000.0
    n = ttft.size
    out = tl.request_output.values.ravel().astype(int)
    done = arrival + ttft + tpot * (out - 1)
    replica = np.arange(n) % 2 + 1
    return dict(replica=replica, output=out, ttft=ttft, tpot=tpot, done=done, arrival=arrival)


def placements_equal(ds):
    """Whether every policy put the same number of requests on each replica and got the
    same metrics (a router sees P + A for every request, so the long one looks short)."""
    a = ds.assigned.sel(policy=list(POLICIES))
    same_counts = bool((a == a.isel(policy=0)).all())
    same_ttft = bool((ds.ttft_p99 == ds.ttft_p99.isel(policy=0)).all())
    return same_counts and same_ttft


def verdict(ds):
    return None


def row(ds):
    return None


def figure(ds, figures_dir=FIGURES):
    r = requests(ds)
    fig = Figure(figsize=(10, 3.4))
    ax = fig.subplots()
    order = np.lexsort((r["done"], r["replica"]))
    for y, k in enumerate(order):
        color = "#1f77b4" if r["replica"][k] == 1 else "#d62728"
        first = r["arrival"][k] + r["ttft"][k]
        ax.plot([r["arrival"][k] / 1000, first / 1000], [y, y], color=color, lw=1, alpha=0.5)
        ax.plot([first / 1000, r["done"][k] / 1000], [y, y], color=color, lw=4)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_yticks(range(len(order)), [f"{'AB'[r['replica'][k] - 1]}: {r['output'][k]:,} tok"
                                     for k in order], fontsize=7)
    ax.set_xlabel("time (s; linear to 1 s, then log)")
    ax.set_title("The seed's worked example in the engine: each request from arrival (thin) and first "
                 "token to completion (thick); replica A blue, B red", fontsize=10)
    fig.tight_layout()
    return save(fig, "lor-claim1-example", figures_dir)


def section(ds):
    r = requests(ds)
    ex = worked_example()
    short = r["output"] < r["output"].max()
    a, b = short & (r["replica"] == 1), short & (r["replica"] == 2)
    long_ = ~short
    same = placements_equal(ds)
    return "\n".join(details("", *[   # all of it to the appendix, after claim 1's worked example
        "### The worked example, run in the engine", "",
        "`sweeps/token-routing-example.toml` replays the example as a trace "
        "(`traces/worked-example.csv`): twenty requests with 1,000-token prompts arrive "
        "together, placed in turn on two default replicas, so A holds ten that generate 50 "
        "tokens and B nine of those and the one that generates 4,000. "
        + ("round_robin, least_requests and least_tokens place them identically and give "
           "identical results: at arrival a router knows the prompt but not the output, so "
           "it counts the long request as P + A = 1,256 tokens like every other; the "
           "difference least_tokens can see appears only once the generation passes the "
           "allowance. " if same else
           "The three policies do not place them identically here. ")
        + f"The short requests' TPOT is {np.median(r['tpot'][a]):.2f} ms on A and "
        f"{np.median(r['tpot'][b]):.2f} ms on B (medians; the arithmetic above, decode only: "
        f"{ex['tpot_short_ms_a']:.2f} and {ex['tpot_short_ms_b']:.2f}); the last of them "
        f"finishes at {r['done'][a].max():.0f} ms on A and {r['done'][b].max():.0f} ms on B. "
        f"The long request keeps B busy until {r['done'][long_].max() / 1000:.1f} s, at "
        f"{np.median(r['tpot'][long_]):.2f} ms per token once alone. Under continuous "
        "batching the nine short requests beside it pay almost nothing.", "",
        "![Claim 1, the worked example](../figures/lor-claim1-example.png)"]) + [""])
