"""The least-outstanding-routing study (issue 13): runs, figures and document.

    python -m routesim.study_report run      # every sweeps/token-routing*.toml, then build
    python -m routesim.study_report build    # figures/ and docs/least-outstanding-routing.md
                                              # from results/token-routing*/ only

Each claim of the seed (least-outstanding-routing.txt) is a stage; a claim's verdict is
computed here from its Dataset, paired by seed (every policy sees the same workload per
seed): a difference is a *lead* only when every seed agrees, as in routesim/report.py.
Figures are written as PNG and SVG, deterministically (fixed SVG hash salt, no dates).
"""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import xarray as xr  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

SCALE_NS = (8, 32, 128, 256)
SWEEPS = (("sweeps/token-routing.toml",) + tuple(f"sweeps/token-routing-scale-{n}.toml" for n in SCALE_NS)
          + ("sweeps/token-routing-staleness.toml", "sweeps/token-routing-retry.toml",
             "sweeps/token-routing-hetero.toml"))
FAST_SHARE = 1.3 / 8.3    # the fast replica's share of capacity (claim 8)
PUBLISHED = {10: 14.0, 100: 354.0}   # a trained simulator's TTFT p99 degradation, % (issue 13)
RESULTS = Path("results/token-routing")
OUT = Path("docs/least-outstanding-routing.md")
FIGURES = Path("figures")
CAPACITY_RPS = 60.0     # 8 default replicas, sweeps/batching-capacity.toml
COLORS = {"round_robin": "#888888", "least_requests": "#1f77b4", "least_tokens": "#d62728"}

# The default step cost (token-model.md; sweeps/batching.toml's step_ms), for the
# worked example.
STEP = dict(base=6.5, per_prefill_token=0.0198, per_prefill_token_pair=8.4e-7,
            per_decode_sequence=0.10, per_kv_token=5.4e-5)


# -- paired comparisons ----------------------------------------------------------------

def paired(ds, var, a, b):
    """Per-seed difference var[a] - var[b] (a Dataset with a policy and a seed axis)."""
    return ds[var].sel(policy=a) - ds[var].sel(policy=b)


def lead(diff):
    """'below' if every seed's difference is < 0, 'above' if every one is > 0, else None."""
    d = np.asarray(diff)
    if (d < 0).all():
        return "below"
    if (d > 0).all():
        return "above"
    return None


def claim1_leads(ds):
    """{(variable, baseline): [lead per rate]} for least_tokens minus each baseline."""
    out = {}
    for var in ("ttft_p99", "tpot_p99", "attainment"):
        for base in ("least_requests", "round_robin"):
            d = paired(ds, var, "least_tokens", base)
            out[(var, base)] = [lead(d.sel(rate_rps=r)) for r in ds.rate_rps.values]
    return out


def claim1_verdict(ds):
    """holds / holds with qualification / does not hold, from the leads of least_tokens."""
    leads = claim1_leads(ds)
    good = {("ttft_p99", b): "below" for b in ("least_requests", "round_robin")}
    good.update({("tpot_p99", b): "below" for b in ("least_requests", "round_robin")})
    good.update({("attainment", b): "above" for b in ("least_requests", "round_robin")})
    wins = {k: all(x == good[k] for x in v) for k, v in leads.items()}
    losses = {k: any(x is not None and x != good[k] for x in v) for k, v in leads.items()}
    if all(wins.values()):
        return "holds"
    if any(wins.values()):
        return "holds with qualification"
    if any(losses.values()) or not any(wins.values()):
        return "does not hold in this model"


# -- the seed's worked example, by the engine's step-cost formula ---------------------

def decode_ms(n_seqs, kv_tokens):
    return STEP["base"] + STEP["per_decode_sequence"] * n_seqs + STEP["per_kv_token"] * kv_tokens


def worked_example(prompt=1000, short=50, long=4000, n=10):
    """Two replicas, ten requests each, already prefilled (prompt tokens each); replica A:
    ten outputs of `short`; replica B: nine of `short` and one of `long`. Returns the
    outstanding output tokens, the short requests' TPOT on each, when they finish, and
    how long B stays busy (decode iterations only; continuous batching)."""
    out = {"outstanding_a": n * short, "outstanding_b": (n - 1) * short + long,
           "count_a": n, "count_b": n}
    t = {"a": 0.0, "b": 0.0}
    for side, lengths in (("a", [short] * n), ("b", [short] * (n - 1) + [long])):
        done_short = None
        for i in range(max(lengths)):
            live = [L for L in lengths if L > i]
            kv = sum(prompt + i for _ in live)
            t[side] += decode_ms(len(live), kv)
            if i == short - 1:
                done_short = t[side]
        out[f"short_done_ms_{side}"] = done_short
        out[f"tpot_short_ms_{side}"] = done_short / short
        out[f"busy_ms_{side}"] = t[side]
    long_prompt = 12000   # the long class's median prompt
    out["long_prefill_ms"] = (STEP["per_prefill_token"] * long_prompt
                              + STEP["per_prefill_token_pair"] * long_prompt ** 2)
    return out


# -- figures ---------------------------------------------------------------------------

def _save(fig, stem, figures_dir):
    figures_dir = Path(figures_dir)
    figures_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(figures_dir / f"{stem}.png", dpi=110, metadata={"Software": None})
    import matplotlib as mpl
    with mpl.rc_context({"svg.hashsalt": "routesim"}):
        fig.savefig(figures_dir / f"{stem}.svg", metadata={"Date": None, "Creator": None})


def figure_claim1(ds, figures_dir=FIGURES):
    fig = Figure(figsize=(11, 3.6))
    axes = fig.subplots(1, 3)
    x = ds.rate_rps.values / CAPACITY_RPS
    for ax, (var, title, scale) in zip(axes, (("ttft_p99", "TTFT p99 (ms)", 1),
                                              ("tpot_p99", "TPOT p99 (ms)", 1),
                                              ("attainment", "SLO attainment (%)", 100))):
        for p in ("round_robin", "least_requests", "least_tokens"):
            v = ds[var].sel(policy=p) * scale
            ax.plot(x, v.median("seed"), "o-", color=COLORS[p], label=p)
            ax.fill_between(x, v.min("seed"), v.max("seed"), color=COLORS[p], alpha=0.15)
        ax.set_title(title)
        ax.set_xlabel("offered load / capacity (60 req/s)")
        if var == "ttft_p99":
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.suptitle("Claim 1: counts against tokens, 8 replicas, long class on "
                 "(median and min–max over seeds)", fontsize=10)
    fig.tight_layout()
    _save(fig, "lor-claim1-counts", figures_dir)


# -- document --------------------------------------------------------------------------

def _rng(d, digits=0, scale=1.0):
    d = np.asarray(d) * scale
    return f"{np.mean(d):+.{digits}f} [{np.min(d):+.{digits}f}, {np.max(d):+.{digits}f}]"


def section_claim1(ds):
    rates = [int(r) for r in ds.rate_rps.values]
    leads = claim1_leads(ds)
    rows = ["| load (req/s) | vs | ΔTTFT p99 ms | ΔTPOT p99 ms | Δattainment pp |",
            "|---|---|---|---|---|"]
    for r in rates:
        for b in ("least_requests", "round_robin"):
            s = ds.sel(rate_rps=r)
            rows.append(f"| {r} ({r / CAPACITY_RPS:.2f}×) | {b} | "
                        f"{_rng(paired(s, 'ttft_p99', 'least_tokens', b))} | "
                        f"{_rng(paired(s, 'tpot_p99', 'least_tokens', b), 1)} | "
                        f"{_rng(paired(s, 'attainment', 'least_tokens', b), 2, 100)} |")
    ex = worked_example()
    n_seeds = ds.sizes["seed"]
    ttft_all = all(x == "below" for b in ("least_requests", "round_robin")
                   for x in leads[("ttft_p99", b)])
    text = [
        "## Claim 1: counts lie when costs vary",
        "",
        "**Prediction (the seed).** With heavy-tailed outputs, scoring replicas by "
        "outstanding tokens (`least_tokens`) beats counting requests (`least_requests`) "
        "and counting arrivals (`round_robin`): lower TPOT p99 and TTFT p99, higher "
        "attainment.",
        "",
        f"**Design.** Stage `counts` of `sweeps/token-routing.toml`: 8 default replicas, "
        f"the default workload with the long class on (2 % of requests: prompts of "
        f"median 12,000 tokens, outputs of median 2,000), loads {', '.join(map(str, rates))} "
        f"req/s (0.5–1.1 × the capacity of 60 req/s), {n_seeds} seeds, 10 s warm-up and "
        f"50 s measured. Differences are least_tokens minus the baseline, per seed: mean "
        f"[min, max] over seeds.",
        "",
        *rows,
        "",
        "![Claim 1](../figures/lor-claim1-counts.png)",
        "",
        "**Reading.** "
        + ("TTFT p99 is lower under least_tokens than under both count-based policies on "
           "every seed at every load. " if ttft_all else
           "TTFT p99 is not lower under least_tokens on every seed at every load. ")
        + _other_leads(leads, rates) + " Scoring "
        "by tokens keeps the long prompts apart, so fewer short requests wait behind a "
        "12,000-token prefill; it does not change how fast decoding runs once admitted.",
        "",
        "**The seed's worked example, by this model's step cost.** Two replicas hold ten "
        "requests each, all prefilled with 1,000-token prompts; on A ten produce 50 tokens, "
        "on B nine produce 50 and one produces 4,000. Counted, they are equal (10 and 10); "
        f"in outstanding output tokens B owes {ex['outstanding_b']:,} against A's "
        f"{ex['outstanding_a']:,}, {ex['outstanding_b'] / ex['outstanding_a']:.1f}× (the "
        "seed's \"factor of eight\"). But under continuous batching the nine short requests "
        "are *not* stuck behind the long one for thousands of iterations: each iteration "
        "advances every sequence, and a short request leaves after its 50th. By the decode "
        f"cost (6.5 ms + 0.10 ms per sequence + 5.4e-5 ms per KV token) they finish at "
        f"{ex['short_done_ms_a']:.0f} ms on A and {ex['short_done_ms_b']:.0f} ms on B, TPOT "
        f"{ex['tpot_short_ms_a']:.2f} against {ex['tpot_short_ms_b']:.2f} ms. What the long "
        f"request costs is B's time afterwards (busy {ex['busy_ms_b'] / 1000:.1f} s against "
        f"{ex['busy_ms_a'] / 1000:.2f} s), at a small per-iteration price, and above all "
        f"its prefill: a 12,000-token prompt takes about {ex['long_prefill_ms']:.0f} ms of "
        "compute that every co-resident sequence waits through. That is why the sweep finds "
        "the gain in TTFT, not in TPOT.",
        "",
    ]
    return "\n".join(text)


# -- claim 2: power of d choices against the global minimum ----------------------------

def scale_data(results_dir=RESULTS):
    """{N: (pod Dataset with a choices axis, global least_tokens Dataset)} for the Ns run."""
    base = Path(results_dir).parent
    out = {}
    for n in SCALE_NS:
        d = base / f"token-routing-scale-{n}"
        if (d / "pod.nc").exists() and (d / "global.nc").exists():
            pod = squeeze(xr.open_dataset(d / "pod.nc")).isel(policy=0, drop=True)
            glob = squeeze(xr.open_dataset(d / "global.nc")).isel(policy=0, drop=True)
            out[n] = (pod.squeeze(drop=True), glob.squeeze(drop=True))
    return out


def claim2_numbers(pod, glob):
    """Per-seed TTFT p99 steps: d1 -> d2, d2 -> d3, d2 -> global (ms, negative = better)."""
    t = pod.ttft_p99
    return {"d2_d1": (t.sel(choices=2) - t.sel(choices=1)).values,
            "d3_d2": (t.sel(choices=3) - t.sel(choices=2)).values,
            "d4_d2": (t.sel(choices=4) - t.sel(choices=2)).values,
            "g_d2": (glob.ttft_p99 - t.sel(choices=2)).values}


def claim2_verdict(data):
    """holds: two beats one on every seed at every N and three buys < 10 % of d=2's
    TTFT p99; with qualification: two beats one everywhere and the step from two to
    three is under half the step from one to two; else does not hold."""
    two_beats_one = all(lead(claim2_numbers(*v)["d2_d1"]) == "below" for v in data.values())
    small = all(abs(np.mean(claim2_numbers(*v)["d3_d2"])) < 0.1 * float(v[0].ttft_p99.sel(choices=2).mean())
                for v in data.values())
    half = all(abs(np.mean(claim2_numbers(*v)["d3_d2"])) < 0.5 * abs(np.mean(claim2_numbers(*v)["d2_d1"]))
               for v in data.values())
    if two_beats_one and small:
        return "holds"
    if two_beats_one and half:
        return "holds with qualification"
    return "does not hold in this model"


def figure_claim2(data, figures_dir=FIGURES):
    fig = Figure(figsize=(10, 3.8))
    ax, ax2 = fig.subplots(1, 2)
    ns = sorted(data)
    colors = {1: "#bbbbbb", 2: "#1f77b4", 3: "#2ca02c", 4: "#9467bd"}
    for c in (1, 2, 3, 4):
        v = np.array([data[n][0].ttft_p99.sel(choices=c).values for n in ns])
        ax.plot(ns, np.median(v, 1), "o-", color=colors[c], label=f"power_of_d, d = {c}")
        ax.fill_between(ns, v.min(1), v.max(1), color=colors[c], alpha=0.15)
    v = np.array([data[n][1].ttft_p99.values for n in ns])
    ax.plot(ns, np.median(v, 1), "s--", color="#d62728", label="least_tokens (global)")
    ax.fill_between(ns, v.min(1), v.max(1), color="#d62728", alpha=0.15)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("replicas N (load 0.9 × capacity)")
    ax.set_ylabel("TTFT p99 (ms)")
    ax.set_title("TTFT p99 against N (median, min–max over seeds)", fontsize=10)
    ax.legend(fontsize=8)
    # Theory orders of the maximum queue, for shape only (no fit claimed). The seed's
    # log log n / log log log n is negative or huge below n = e^e^e (about 3.8 million),
    # so the standard d-choice order ln ln n / ln d (Azar et al.) is drawn instead.
    n = np.array(ns, float)
    ax2.plot(ns, np.log(n) / np.log(np.log(n)), "o-", color="#bbbbbb",
             label="ln n / ln ln n (one choice)")
    for d in (2, 3, 4):
        ax2.plot(ns, np.log(np.log(n)) / np.log(d), "o-", color=colors[d],
                 label=f"ln ln n / ln {d} ({d} choices)")
    ax2.set_xscale("log", base=2)
    ax2.set_xticks(ns, [str(n) for n in ns])
    ax2.set_xlabel("replicas N")
    ax2.set_ylabel("order of the maximum queue")
    ax2.set_title("Orders of the maximum queue (theory, shape only)", fontsize=10)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, "lor-claim2-choices", figures_dir)


def section_claim2(data):
    rows = ["| N | req/s | TTFT p99 d=1 | d=2 | d=3 | d=4 | global | d2−d1 | d3−d2 | global−d2 |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for n in sorted(data):
        pod, glob = data[n]
        num = claim2_numbers(pod, glob)
        med = [float(pod.ttft_p99.sel(choices=c).median()) for c in (1, 2, 3, 4)]
        rows.append(f"| {n} | {round(0.9 * 7.5 * n)} | " + " | ".join(f"{m:.0f}" for m in med)
                    + f" | {float(glob.ttft_p99.median()):.0f} | {_rng(num['d2_d1'])} | "
                    f"{_rng(num['d3_d2'])} | {_rng(num['g_d2'])} |")
    seeds = next(iter(data.values()))[0].sizes["seed"]
    leads3 = [lead(claim2_numbers(*data[n])["d3_d2"]) for n in sorted(data)]
    return "\n".join([
        "## Claim 2: two random choices instead of a global minimum", "",
        "**Prediction (the seed).** Sampling two replicas and taking the less loaded beats "
        "sampling one by a lot; sampling more than two buys little.", "",
        f"**Design.** `sweeps/token-routing-scale-N.toml` for N = "
        f"{', '.join(map(str, sorted(data)))}: the default workload at 0.9 × capacity "
        f"(7.5 req/s per replica × N × 0.9), power_of_d on outstanding tokens with d = 1 "
        f"(one random choice), 2, 3, 4 against the global least_tokens, {seeds} seeds, 5 s "
        "+ 20 s, fresh signals. Medians in ms; differences per seed, mean [min, max].", "",
        *rows, "",
        "![Claim 2](../figures/lor-claim2-choices.png)", "",
        "**Reading.** Two choices roughly halve TTFT p99 against one at every N, on every "
        "seed. The step from two to three is smaller but not negligible: "
        + ("lower on every seed" if all(x == "below" for x in leads3) else
           "lower on every seed at N = " + ", ".join(str(n) for n, x in zip(sorted(data), leads3)
                                                 if x == "below"))
        + ", about a fifth of the first step; four is close to the global minimum, which "
        "with fresh signals is the best or tied. Nothing here grows with N: with a load "
        "per replica held fixed, TTFT p99 is flat from 8 to 256 replicas for every d, so "
        "the asymptotic orders (right panel) are not visible at these sizes; the benefit "
        "of more choices is about the tail of one replica's prefill queue, not about the "
        "maximum over many. The maximum queue length itself is not a result variable of "
        "the batching model yet, so the theory curves are shown for shape only; the seed's "
        "log log n / log log log n is not usable at these sizes (ln ln ln n is negative "
        "below n = 16 and near zero for long after), so the figure draws the standard "
        "d-choice order ln ln n / ln d.", ""])


# -- claim 3: staleness ------------------------------------------------------------------

def staleness_data(results_dir=RESULTS):
    p = Path(results_dir).parent / "token-routing-staleness" / "staleness.nc"
    return squeeze(xr.open_dataset(p)).squeeze(drop=True) if p.exists() else None


def degradation(ds, policy, mode="periodic", routers=1):
    """Per-seed TTFT p99 change, %, against period 0 (same policy, mode and routers)."""
    t = ds.ttft_p99.sel(policy=policy, signal_mode=mode, routers=routers)
    return (t / t.sel(period_ms=0) - 1) * 100


def claim3_verdict(ds, period=100):
    """holds: the global minimum's TTFT p99 at `period` is above its fresh value on every
    seed, power of two's is degraded less on average, and at `period` power of two is
    below the global minimum on every seed; with qualification when only the first two."""
    g = degradation(ds, "least_tokens").sel(period_ms=period)
    p = degradation(ds, "power_of_d").sel(period_ms=period)
    herd = lead(g) == "above"
    less = float(p.mean()) < float(g.mean())
    t = ds.ttft_p99.sel(signal_mode="periodic", routers=1, period_ms=period)
    beats = lead(t.sel(policy="power_of_d") - t.sel(policy="least_tokens")) == "below"
    if herd and less and beats:
        return "holds"
    if herd and less:
        return "holds with qualification"
    return "does not hold in this model"


def figure_claim3(ds, figures_dir=FIGURES):
    fig = Figure(figsize=(11, 3.8))
    axes = fig.subplots(1, 2, sharey=True)
    periods = ds.period_ms.values
    x = np.where(periods == 0, 2, periods)     # period 0 drawn at 2 ms on the log axis
    for ax, routers in zip(axes, (1, 4)):
        for policy, color in (("least_tokens", "#d62728"), ("power_of_d", "#1f77b4")):
            for mode, style in (("periodic", "o-"), ("periodic_local", "s--")):
                v = ds.ttft_p99.sel(policy=policy, signal_mode=mode, routers=routers)
                ax.plot(x, v.median("seed"), style, color=color, label=f"{policy}, {mode}")
                ax.fill_between(x, v.min("seed"), v.max("seed"), color=color, alpha=0.1)
        ax.set_xscale("log")
        ax.set_xticks(x, ["0"] + [f"{p:g}" for p in periods[1:]])
        ax.set_xlabel("signal period (ms)")
        ax.set_title(f"{routers} router{'s' if routers > 1 else ''}", fontsize=10)
    axes[0].set_ylabel("TTFT p99 (ms)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Claim 3: stale signals, 8 replicas at 0.9 × capacity "
                 "(median, min–max over seeds)", fontsize=10)
    fig.tight_layout()
    _save(fig, "lor-claim3-staleness", figures_dir)


def section_claim3(ds):
    rows = ["| policy | mode | routers | " + " | ".join(f"{p:g} ms" for p in ds.period_ms.values) + " |",
            "|---|---|---|" + "---|" * ds.sizes["period_ms"]]
    for policy in ("least_tokens", "power_of_d"):
        for mode in ("periodic", "periodic_local"):
            for routers in (1, 4):
                v = ds.ttft_p99.sel(policy=policy, signal_mode=mode, routers=routers).median("seed")
                rows.append(f"| {policy} | {mode} | {routers} | "
                            + " | ".join(f"{x:.0f}" for x in v.values) + " |")
    g10 = degradation(ds, "least_tokens").sel(period_ms=10)
    g100 = degradation(ds, "least_tokens").sel(period_ms=100)
    p100 = degradation(ds, "power_of_d").sel(period_ms=100)
    return "\n".join([
        "## Claim 3: every signal is stale", "",
        "**Prediction (the seed).** A signal one period old misleads the router: the global "
        "minimum herds onto the replica that looked emptiest, power of two choices degrades "
        "less at equal staleness, and a router that adds its own placements since the "
        "publication (periodic_local) recovers much of the loss.", "",
        f"**Design.** `sweeps/token-routing-staleness.toml`: 8 default replicas at 54 req/s "
        f"(0.9 × capacity), least_tokens and power_of_d (d = 2, tokens), signal periods "
        f"0–250 ms, periodic and periodic_local, 1 and 4 routers, {ds.sizes['seed']} seeds, "
        "5 s + 15 s. Median TTFT p99 (ms):", "",
        *rows, "",
        "![Claim 3](../figures/lor-claim3-staleness.png)", "",
        f"**Reading.** With one router and periodic signals, least_tokens' TTFT p99 rises "
        f"by {_rng(g10)} % at 10 ms and {_rng(g100)} % at 100 ms (mean [min, max] over "
        f"seeds), against {_rng(p100)} % for power of two at 100 ms; at 100 ms power of two "
        f"is {'below least_tokens on every seed' if claim3_verdict(ds) == 'holds' else 'below least_tokens in the median but not on every seed (hence the qualification)'}; "
        "at 250 ms its median is lower by far. periodic_local with "
        "one router removes nearly all of the loss (the router's own placements are the "
        "only changes it misses besides completions); with four routers each misses the "
        "others' placements and the herd returns, smaller. With plain periodic signals, 1 "
        "and 4 routers give identical results: every router sees the same publication and "
        "the routers' choices from it coincide. The published reference (a "
        "trained simulator's default weighted router: +14 % at 10 ms, +354 % at 100 ms) "
        "degrades faster than our least_tokens at 100 ms. Plausible reasons: its router "
        "weighs a queue signal that moves faster than outstanding tokens; its replicas, "
        "load and request mix differ; and here a period's staleness is bounded by one "
        "replica's iteration-level progress, which at 54 req/s over 8 replicas is about "
        "7 arrivals per replica per 100 ms.", ""])


# -- claim 7: the retry trap -------------------------------------------------------------

def retry_data(results_dir=RESULTS):
    d = Path(results_dir).parent / "token-routing-retry"
    if not ((d / "crash.nc").exists() and (d / "black-hole.nc").exists()):
        return None
    return tuple(squeeze(xr.open_dataset(d / f)).squeeze(drop=True) for f in ("crash.nc", "black-hole.nc"))


def amplification(ds):
    return ds.attempts / ds.arrivals


def claim7_verdict(crash, hole):
    """holds: the 20 % budget cuts amplification and raises attainment on every seed, and
    breaker + retry_avoid_previous raise attainment over neither on every seed; with
    qualification when only the budget half holds."""
    a = amplification(crash)
    budget = (lead(a.sel(retry_budget=0.2) - a.sel(retry_budget=np.inf)) == "below"
              and lead(crash.attainment.sel(retry_budget=0.2)
                       - crash.attainment.sel(retry_budget=np.inf)) == "above")
    both = hole.attainment.sel(retry_avoid_previous=True, breaker_consecutive=5)
    neither = hole.attainment.sel(retry_avoid_previous=False, breaker_consecutive=0)
    contain = lead(both - neither) == "above"
    if budget and contain:
        return "holds"
    if budget:
        return "holds with qualification"
    return "does not hold in this model"


def figure_claim7(crash, hole, figures_dir=FIGURES):
    fig = Figure(figsize=(11, 3.6))
    axes = fig.subplots(1, 3)
    arms = [("crash, no budget", crash.sel(retry_budget=np.inf)),
            ("crash, 20 % budget", crash.sel(retry_budget=0.2))]
    for avoid in (False, True):
        for brk in (0, 5):
            arms.append((f"black hole, avoid={'y' if avoid else 'n'}, breaker={brk}",
                         hole.sel(retry_avoid_previous=avoid, breaker_consecutive=brk)))
    y = np.arange(len(arms))
    for ax, (title, f) in zip(axes, (("attempts per request", amplification),
                                     ("wasted tokens (millions)", lambda d: d.wasted_tokens / 1e6),
                                     ("SLO attainment (%)", lambda d: d.attainment * 100))):
        for i, (name, d) in enumerate(arms):
            v = np.asarray(f(d))
            ax.plot([v.min(), v.max()], [i, i], "-", color="#888888")
            ax.plot(np.median(v), i, "o", color="#d62728" if i < 2 else "#1f77b4")
        ax.set_yticks(y, [a[0] for a in arms] if ax is axes[0] else [""] * len(arms), fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.invert_yaxis()
    fig.suptitle("Claim 7: the retry trap, least_requests, 8 replicas at 50 req/s, 5 s "
                 "timeouts, 3 attempts (median, min–max over seeds)", fontsize=10)
    fig.tight_layout()
    _save(fig, "lor-claim7-retry", figures_dir)


def section_claim7(crash, hole):
    rows = ["| arm | attempts per request | wasted tokens | attainment % | failed % |",
            "|---|---|---|---|---|"]
    arms = [("crash, no budget", crash.sel(retry_budget=np.inf)),
            ("crash, 20 % budget", crash.sel(retry_budget=0.2))]
    for avoid in (False, True):
        for brk in (0, 5):
            arms.append((f"black hole, retry_avoid_previous={str(avoid).lower()}, breaker {brk}",
                         hole.sel(retry_avoid_previous=avoid, breaker_consecutive=brk)))
    for name, d in arms:
        rows.append(f"| {name} | {float(amplification(d).median()):.2f} | "
                    f"{float(d.wasted_tokens.median()):,.0f} | {float(d.attainment.median()) * 100:.1f} | "
                    f"{float((d.failed / d.arrivals).median()) * 100:.1f} |")
    a = amplification(crash)
    da = a.sel(retry_budget=0.2) - a.sel(retry_budget=np.inf)
    dt = (crash.attainment.sel(retry_budget=0.2) - crash.attainment.sel(retry_budget=np.inf)) * 100
    both = hole.attainment.sel(retry_avoid_previous=True, breaker_consecutive=5)
    neither = hole.attainment.sel(retry_avoid_previous=False, breaker_consecutive=0)
    dh = (both - neither) * 100
    return "\n".join([
        "## Claim 7: the retry trap", "",
        "**Prediction (the seed).** Retries add load to a degraded system; a retry budget "
        "and a per-replica breaker at the router contain it.", "",
        f"**Design.** `sweeps/token-routing-retry.toml`: least_requests, 8 replicas at "
        f"50 req/s (0.83 × capacity), clients with a 5 s per-attempt timeout and up to 3 "
        f"attempts. Crash: replicas 3 and 6 fail at 20 s for good (6 left, 45 req/s of "
        f"capacity), without and with a 20 % retry budget. Black hole: replica 3 fails "
        f"fast from 20 s to 40 s, with and without the breaker (5 consecutive failures) and "
        f"retry_avoid_previous. {crash.sizes['seed']} seeds, 10 s + 40 s. Medians:", "",
        *rows, "",
        "![Claim 7](../figures/lor-claim7-retry.png)", "",
        f"**Reading.** In the crash, the budget changes attempts per request by {_rng(da, 2)} "
        f"and attainment by {_rng(dt, 1)} pp (mean [min, max] over seeds): without it, "
        "timed-out attempts are retried onto replicas already past capacity and more than "
        "half the attempts are retries. Wasted tokens, though, do not fall with the budget (table). In the black hole, breaker and "
        f"retry_avoid_previous together against neither change attainment by {_rng(dh, 1)} pp"
        + (", on every seed." if lead(dh) == "above" else
           ", not in one direction on every seed: the 5 s timeout, not the black hole, "
           "drives most retries at this load, and each containment alone does better in "
           "the median than both together; this half of the claim is not confirmed here.")
        + " Whether the system recovers after the incident (metastability) needs the "
        "timeline after the black hole ends; it is not measured in this version.", ""])


# -- claim 8: count-based capacity learning ----------------------------------------------

def hetero_data(results_dir=RESULTS):
    p = Path(results_dir).parent / "token-routing-hetero" / "hetero.nc"
    return squeeze(xr.open_dataset(p)).squeeze(drop=True) if p.exists() else None


def fast_share(ds):
    return ds.assigned.sel(replica=1) / ds.assigned.sum("replica")


def claim8_verdict(ds):
    """holds if rate_weighted gives the fast replica more than its capacity share on
    every seed and more than least_tokens does on every seed; else does not hold."""
    sh = fast_share(ds)
    over = lead(sh.sel(policy="rate_weighted") - FAST_SHARE) == "above"
    more = lead(sh.sel(policy="rate_weighted") - sh.sel(policy="least_tokens")) == "above"
    return "holds" if over and more else "does not hold in this model"


def figure_claim8(ds, figures_dir=FIGURES):
    fig = Figure(figsize=(10, 3.6))
    ax, ax2 = fig.subplots(1, 2)
    sh = fast_share(ds) * 100
    pols = ["round_robin", "least_tokens", "rate_weighted"]
    for i, p in enumerate(pols):
        v = sh.sel(policy=p).values
        ax.plot(np.full(v.size, i), v, "o", alpha=0.6)
        v2 = ds.ttft_p99.sel(policy=p).values
        ax2.plot(np.full(v2.size, i), v2, "o", alpha=0.6)
    ax.axhline(FAST_SHARE * 100, color="k", ls="--", lw=1, label="its share of capacity (15.7 %)")
    ax.set_xticks(range(3), pols)
    ax.set_ylabel("fast replica's share of assignments (%)")
    ax.legend(fontsize=8)
    ax2.set_xticks(range(3), pols)
    ax2.set_ylabel("TTFT p99 (ms)")
    ax2.set_yscale("log")
    fig.suptitle("Claim 8: one replica 30 % faster, 56 req/s (one dot per seed)", fontsize=10)
    fig.tight_layout()
    _save(fig, "lor-claim8-hetero", figures_dir)


def section_claim8(ds):
    sh = fast_share(ds) * 100
    rows = ["| policy | fast replica's share % | TTFT p99 ms |", "|---|---|---|"]
    for p in ("round_robin", "least_tokens", "rate_weighted"):
        rows.append(f"| {p} | {_rng(sh.sel(policy=p), 1)} | {float(ds.ttft_p99.sel(policy=p).median()):.0f} |")
    dt = ds.ttft_p99.sel(policy="rate_weighted") - ds.ttft_p99.sel(policy="least_tokens")
    return "\n".join([
        "## Claim 8: count-based capacity learning over-learns", "",
        "**Prediction (the seed).** A router that learns capacity from completed requests "
        "sends a faster replica more traffic than its capacity warrants; scoring by work in "
        "flight does not.", "",
        f"**Design.** `sweeps/token-routing-hetero.toml`: 8 replicas, replica 1 30 % faster, "
        f"56 req/s, rate_weighted against least_tokens (and round_robin), {ds.sizes['seed']} "
        "seeds, 10 s + 40 s. Shares: mean [min, max] over seeds; TTFT p99: median.", "",
        *rows, "",
        "![Claim 8](../figures/lor-claim8-hetero.png)", "",
        f"**Reading.** rate_weighted's share for the fast replica scatters around its share "
        f"of capacity ({FAST_SHARE * 100:.1f} %), above it on some seeds and below on others; "
        "it does not over-learn systematically in this model, and least_tokens' share "
        "overlaps it. What rate_weighted does do is route worse: its TTFT p99 minus "
        f"least_tokens' is {_rng(dt)} ms per seed (mean [min, max]), since weights from a "
        "1 s window of completions are, plausibly, noisy with heavy-tailed costs (not tested here).", ""])


def _other_leads(leads, rates):
    words = {"tpot_p99": "TPOT p99", "attainment": "attainment"}
    found = []
    for (var, base), per_rate in leads.items():
        if var == "ttft_p99":
            continue
        for r, x in zip(rates, per_rate):
            if x is not None:
                good = (x == "below") == (var != "attainment")
                found.append(f"{words[var]} against {base} at {r} req/s is "
                             f"{'better' if good else 'worse'} on every seed")
    if not found:
        return "TPOT p99 and attainment show no lead either way: the seeds disagree."
    return ("For TPOT p99 and attainment the seeds mostly disagree; the exceptions: "
            + "; ".join(found) + ".")


def verdict_rows(results_dir=RESULTS):
    rows = []
    p = Path(results_dir) / "counts.nc"
    if p.exists():
        ds = squeeze(xr.open_dataset(p))
        v = claim1_verdict(ds)
        d = paired(ds, "ttft_p99", "least_tokens", "least_requests")
        rel = (d / ds["ttft_p99"].sel(policy="least_requests")) * 100
        rows.append(("1. Counts lie when costs vary",
                     "least_tokens beats least_requests and round_robin on TPOT p99, TTFT p99 and attainment",
                     f"TTFT p99 vs least_requests {rel.mean().item():+.0f} % (per seed "
                     f"{rel.min().item():+.0f} to {rel.max().item():+.0f} %, all loads); "
                     "TPOT p99 and attainment: mostly no lead (see claim 1)", v))
    data = scale_data(results_dir)
    if data:
        v = claim2_verdict(data)
        first = [np.mean(claim2_numbers(*data[n])["d2_d1"]) for n in data]
        nxt = [np.mean(claim2_numbers(*data[n])["d3_d2"]) for n in data]
        d21 = np.concatenate([claim2_numbers(*data[n])["d2_d1"] for n in data])
        rows.append(("2. Two random choices instead of a global minimum",
                     "d = 2 beats d = 1 by a lot; d > 2 buys little (8 to 256 replicas)",
                     f"TTFT p99 d2−d1 {np.mean(d21):+.0f} ms (per seed {d21.min():+.0f} to "
                     f"{d21.max():+.0f}); d3−d2 {np.mean(nxt):+.0f} ms, "
                     f"{np.mean(nxt) / np.mean(first) * 100:.0f} % of the first step", v))
    ds = staleness_data(results_dir)
    if ds is not None:
        g = degradation(ds, "least_tokens")
        p = degradation(ds, "power_of_d").sel(period_ms=100)
        rows.append(("3. Every signal is stale",
                     "the global minimum herds as the period grows; power of two degrades less",
                     f"least_tokens TTFT p99 +{g.sel(period_ms=10).mean().item():.0f} % at 10 ms, "
                     f"+{g.sel(period_ms=100).mean().item():.0f} % at 100 ms (per seed "
                     f"{g.sel(period_ms=100).min().item():+.0f} to {g.sel(period_ms=100).max().item():+.0f}); "
                     f"power_of_d {p.mean().item():+.0f} % at 100 ms; published +14 % / +354 %",
                     claim3_verdict(ds)))
    rd = retry_data(results_dir)
    if rd is not None:
        crash, hole = rd
        a = amplification(crash)
        dt = (crash.attainment.sel(retry_budget=0.2) - crash.attainment.sel(retry_budget=np.inf)) * 100
        rows.append(("7. The retry trap",
                     "retries amplify an incident; a 20 % budget, a breaker and retry_avoid_previous contain it",
                     f"crash: attempts per request {float(a.sel(retry_budget=np.inf).median()):.2f} → "
                     f"{float(a.sel(retry_budget=0.2).median()):.2f} with the budget, attainment "
                     f"{dt.mean().item():+.0f} pp (per seed {dt.min().item():+.0f} to {dt.max().item():+.0f}); "
                     "black hole: see claim 7; recovery not measured", claim7_verdict(crash, hole)))
    ds = hetero_data(results_dir)
    if ds is not None:
        sh = fast_share(ds).sel(policy="rate_weighted") * 100
        rows.append(("8. Count-based capacity learning over-learns",
                     "rate_weighted gives a 30 % faster replica more than its 15.7 % capacity share",
                     f"rate_weighted's share {sh.mean().item():.1f} % (per seed {sh.min().item():.1f} "
                     f"to {sh.max().item():.1f} %)", claim8_verdict(ds)))
    return rows


def squeeze(ds):
    for dim in ("heterogeneity", "scenario"):
        if dim in ds.dims and ds.sizes[dim] == 1:
            ds = ds.isel({dim: 0}, drop=True)
    return ds


def build(results_dir=RESULTS, figures_dir=FIGURES, out_path=OUT):
    results_dir = Path(results_dir)
    parts = ["# Least-outstanding routing when request costs vary: the seed's claims tested",
             "",
             "Generated by `python -m routesim.study_report build` from "
             "`results/token-routing/` (run everything with `python -m routesim.study_report "
             "run`). Protocol: each claim is a stage; every policy sees the same workload per "
             "seed (common random numbers) and comparisons are paired by seed; a difference "
             "is a lead only when every seed agrees.",
             "",
             "| claim | prediction | measured (per-seed range) | verdict |",
             "|---|---|---|---|"]
    for row in verdict_rows(results_dir):
        parts.append("| " + " | ".join(row) + " |")
    parts.append("")
    p = results_dir / "counts.nc"
    if p.exists():
        ds = squeeze(xr.open_dataset(p))
        figure_claim1(ds, figures_dir)
        parts.append(section_claim1(ds))
    data = scale_data(results_dir)
    if data:
        figure_claim2(data, figures_dir)
        parts.append(section_claim2(data))
    ds = staleness_data(results_dir)
    if ds is not None:
        figure_claim3(ds, figures_dir)
        parts.append(section_claim3(ds))
    rd = retry_data(results_dir)
    if rd is not None:
        figure_claim7(*rd, figures_dir)
        parts.append(section_claim7(*rd))
    ds = hetero_data(results_dir)
    if ds is not None:
        figure_claim8(ds, figures_dir)
        parts.append(section_claim8(ds))
    parts += ["## What the model leaves out", "",
              "Output lengths are drawn from two log-normal classes, not from a real "
              "tokenizer and model; the step cost is one 8B-class formula for every "
              "replica; the router knows prompt lengths exactly and adds a fixed output "
              "allowance; there is no network, no tokenization cost at the router, no "
              "speculative decoding, no multi-GPU parallelism and no autoscaling. Claims 4, 5, 6 and 9 "
              "of issue 13 are not yet in this document.", ""]
    text = "\n".join(parts)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(text)
    return text


def run():
    from . import sweep as sweep_cli
    for path in SWEEPS:
        rc = sweep_cli.main([path, "--quiet"])
        if rc:
            return rc
    build()
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    cmd = argv[0] if argv else "run"
    if cmd == "run":
        return run()
    if cmd == "build":
        build()
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
