"""Claim 5 of the least-outstanding-routing study: occupancy predicts preemption.
sweeps/token-routing-preemption.toml (results/token-routing-preemption/preemption.nc:
policy × seed × kv_blocks). "Occupancy at admission" is ``placement_occupancy``: the
chosen replica's referenced blocks / kv_blocks just before each placement, averaged
over the window (docs/model.md §9, Metrics)."""

import itertools
import warnings
from pathlib import Path

import numpy as np
import xarray as xr
from scipy import stats
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .common import CAPACITY_RPS, FIGURES, lead, paired, save, spread, squeeze

SWEEPS = ("sweeps/token-routing-preemption.toml",)
POLICIES = ("least_kv", "least_cost", "least_requests", "least_tokens")
KV_AWARE = ("least_kv", "least_cost")
BASE = "least_requests"
COLORS = {"least_kv": "#2ca02c", "least_cost": "#9467bd", "least_requests": "#1f77b4",
          "least_tokens": "#d62728"}
MARKERS = ("o", "s", "^", "D")


def prepare(ds):
    """A stage's Dataset (as routesim.run returns it or as read) with a kv_blocks axis,
    even when the sweep ran one pool size."""
    ds = squeeze(ds)
    ds = ds.squeeze([d for d in ds.dims if ds.sizes[d] == 1
                     and d not in ("kv_blocks", "policy", "seed", "replica")])
    if "kv_blocks" not in ds.dims:
        ds = ds.expand_dims("kv_blocks")
    return ds.transpose("kv_blocks", "policy", "seed", ...)


def load(root):
    """The preemption stage's Dataset (kv_blocks × policy × seed × replica), or None."""
    path = Path(root) / "token-routing-preemption" / "preemption.nc"
    return prepare(xr.open_dataset(path, engine="h5netcdf")) if path.exists() else None


def pools(ds):
    return [int(k) for k in ds.kv_blocks.values]


def leads(ds, var):
    """{(policy, kv_blocks): lead of var[policy] - var[least_requests]} for the KV-aware
    policies."""
    return {(p, k): lead(paired(ds.sel(kv_blocks=k), var, p, BASE))
            for p in KV_AWARE for k in pools(ds)}


def relation(ds):
    """Within-seed comparisons of every pair of policies, at every pool size: whether the
    one with the lower mean placement occupancy also preempted less. Returns
    {(a, b): (agree, n)}, n counting the (seed, pool) cases whose preemptions differ."""
    out = {}
    for a, b in itertools.combinations(POLICIES, 2):
        do = paired(ds, "placement_occupancy", a, b).values.ravel()
        dp = paired(ds, "preemptions", a, b).values.ravel()
        m = (dp != 0) & (do != 0)
        out[(a, b)] = (int((np.sign(do[m]) == np.sign(dp[m])).sum()), int(m.sum()))
    return out


def rank_correlation(ds):
    """{(policy, kv_blocks): Spearman's rank correlation over seeds between mean
    placement occupancy and preemptions} (average ranks for ties)."""
    out = {}
    for k in pools(ds):
        for p in POLICIES:
            s = ds.sel(kv_blocks=k, policy=p)
            x = s.placement_occupancy.values.astype(float)
            y = s.preemptions.values.astype(float)
            ok = np.isfinite(x) & np.isfinite(y)
            with warnings.catch_warnings():  # a constant column has no correlation: NaN
                warnings.simplefilter("ignore", stats.ConstantInputWarning)
                out[(p, k)] = float(stats.spearmanr(x[ok], y[ok]).statistic)
    return out


def verdict(ds):
    """holds: least_kv and least_cost each preempt less than least_requests on every seed
    at every pool size, with a lower placement occupancy and a lower TPOT p99 on every
    seed; with qualification when they preempt less on every seed at one pool size at
    least (but not all of the above); otherwise does not hold."""
    fewer = leads(ds, "preemptions")
    occ = leads(ds, "placement_occupancy")
    tpot = leads(ds, "tpot_p99")
    if all(x == "below" for d in (fewer, occ, tpot) for x in d.values()):
        return "holds"
    if any(x == "below" for x in fewer.values()):
        return "holds with qualification"
    return "does not hold in this model"


def _dots(ax, ds, var, scale=1.0):
    ks = pools(ds)
    offsets = np.linspace(-0.18, 0.18, len(ks)) if len(ks) > 1 else [0.0]
    rng = np.random.default_rng(0)          # a fixed jitter, for a deterministic figure
    for i, p in enumerate(POLICIES):
        for k, off, mk in zip(ks, offsets, MARKERS):
            v = ds[var].sel(policy=p, kv_blocks=k).values * scale
            x = i + off + rng.uniform(-0.04, 0.04, v.size)
            ax.plot(x, v, mk, color=COLORS[p], alpha=0.45, ms=4, mfc="none")
            ax.plot([i + off - 0.08, i + off + 0.08], [np.median(v)] * 2, "-", color="k", lw=2)
    ax.set_xticks(range(len(POLICIES)), POLICIES, fontsize=8)
    ax.set_xlim(-0.5, len(POLICIES) - 0.5)


def _pool_legend(ds):
    return [Line2D([], [], ls="", marker=mk, color="#555555", mfc="none",
                   label=f"{k:,} blocks") for k, mk in zip(pools(ds), MARKERS)]


def figure(ds, figures_dir=FIGURES):
    fig = Figure(figsize=(11, 7.6))
    (a1, a2), (a3, a4) = fig.subplots(2, 2)
    ks = pools(ds)
    _dots(a1, ds, "preemptions")
    a1.set_ylabel(f"preemptions in the {ds.attrs['measure_s']:g} s window (8 replicas)")
    a1.set_title("preemptions (one mark per seed; bar: median)", fontsize=10)
    a1.legend(handles=_pool_legend(ds), fontsize=8, loc="upper left")
    _dots(a2, ds, "tpot_p99")
    a2.set_ylabel("TPOT p99 (ms)")
    a2.set_title("TPOT p99 (one mark per seed; bar: median)", fontsize=10)
    for p in POLICIES:
        for k, mk in zip(ks, MARKERS):
            s = ds.sel(policy=p, kv_blocks=k)
            a3.plot(s.placement_occupancy * 100, s.preemptions, mk, color=COLORS[p],
                    alpha=0.6, ms=4.5, mfc="none")
    a3.set_xlabel("mean KV occupancy of the chosen replica at placement (%)")
    a3.set_ylabel(f"preemptions in the {ds.attrs['measure_s']:g} s window")
    a3.set_title("every run: occupancy at placement against preemptions", fontsize=10)
    a3.legend(handles=[Line2D([], [], ls="", marker="o", color=COLORS[p], label=p)
                       for p in POLICIES] + _pool_legend(ds), fontsize=7, ncol=2)
    for p, mk0 in (("least_kv", "o"), ("least_cost", "s")):
        for k, mk in zip(ks, MARKERS):
            s = ds.sel(kv_blocks=k)
            do = paired(s, "placement_occupancy", p, BASE) * 100
            dp = paired(s, "preemptions", p, BASE)
            a4.plot(do, dp, mk, color=COLORS[p], alpha=0.6, ms=4.5, mfc="none")
    lo, hi = a4.get_ylim()
    a4.set_ylim(lo, max(hi, 0) + 0.14 * (hi - lo))
    for x, ha, text in ((0.02, "left", "← lower occupancy at placement"),
                        (0.98, "right", "higher occupancy at placement →")):
        a4.text(x, 0.97, text, transform=a4.transAxes, ha=ha, va="top", fontsize=8,
                color="#555555")
    a4.axhline(0, color="k", lw=0.8)
    a4.axvline(0, color="k", lw=0.8)
    a4.set_xlabel("Δ occupancy at placement against least_requests (pp)")
    a4.set_ylabel("Δ preemptions against least_requests\n(below 0: fewer)")
    a4.set_title("same seed, KV-aware policy minus least_requests", fontsize=10)
    a4.legend(handles=[Line2D([], [], ls="", marker="o", color=COLORS[p], label=f"{p} − {BASE}")
                       for p in KV_AWARE] + _pool_legend(ds), fontsize=7)
    rate = float(ds.rate_rps)
    fig.suptitle(f"Claim 5: KV pressure — 8 replicas, pools of {' and '.join(f'{k:,}' for k in ks)} "
                 f"blocks (default 16,384), {rate:g} req/s ({rate / CAPACITY_RPS:.2f} × capacity), "
                 f"{ds.sizes['seed']} seeds", fontsize=10)
    fig.tight_layout()
    return save(fig, "lor-claim5-preemption", figures_dir)


def _frac(pair_counts):
    agree = sum(a for a, _ in pair_counts)
    n = sum(n for _, n in pair_counts)
    return agree, n


def _how_often(agree, n):
    """Words for a share of within-seed comparisons that agree."""
    if n == 0:
        return "no case to compare"
    f = agree / n
    if f >= 0.8:
        return "mostly yes"
    if f <= 0.2:
        return "mostly the reverse"
    return "no consistent direction"


def _per_pool(ds, var, cmp):
    """'n of N at k blocks, ...' counting seeds where cmp(var[p] - var[BASE]) for each
    KV-aware policy p and pool size k."""
    out = []
    for k in pools(ds):
        s = ds.sel(kv_blocks=k)
        counts = [int(cmp(paired(s, var, p, BASE)).sum()) for p in KV_AWARE]
        out.append(f"{' and '.join(map(str, counts))} of {ds.sizes['seed']} at {k:,} blocks")
    return "; ".join(out)


def section(ds):
    ks = pools(ds)
    n_seeds = ds.sizes["seed"]
    rows = ["| pool (blocks) | policy | preemptions | occupancy at placement % | "
            "time-average occupancy % | TPOT p99 ms | TTFT p99 ms | attainment % |",
            "|---|---|---|---|---|---|---|---|"]
    for k in ks:
        for p in POLICIES:
            s = ds.sel(kv_blocks=k, policy=p)
            pre = s.preemptions
            rows.append(f"| {k:,} | {p} | {float(pre.median()):.0f} [{float(pre.min()):.0f}, "
                        f"{float(pre.max()):.0f}] | {float(s.placement_occupancy.median()) * 100:.1f} | "
                        f"{float(s.kv_occupancy.median()) * 100:.1f} | {float(s.tpot_p99.median()):.1f} | "
                        f"{float(s.ttft_p99.median()):,.0f} | {float(s.attainment.median()) * 100:.1f} |")
    diff = []
    for k in ks:
        s = ds.sel(kv_blocks=k)
        for p in KV_AWARE:
            dp = paired(s, "preemptions", p, BASE)
            do = paired(s, "placement_occupancy", p, BASE)
            dt = paired(s, "tpot_p99", p, BASE)
            diff.append(f"| {k:,} | {p} | {spread(dp)} ({int((dp < 0).sum())} of {n_seeds} fewer) | "
                        f"{spread(do, 1, 100)} ({int((do < 0).sum())} lower) | "
                        f"{spread(dt, 1)} ({int((dt < 0).sum())} lower) |")
    fewer, occ, tpot = (leads(ds, v) for v in ("preemptions", "placement_occupancy", "tpot_p99"))
    every = [k for k in ks if all(fewer[(p, k)] == "below" for p in KV_AWARE)]
    dps = paired(ds, "preemptions", list(KV_AWARE), BASE)
    worst = float(dps.where(dps >= 0).max()) if bool((dps >= 0).any()) else -1.0
    do = paired(ds, "placement_occupancy", list(KV_AWARE), BASE) * 100
    dt = paired(ds, "tpot_p99", list(KV_AWARE), BASE)
    dk = paired(ds, "kv_occupancy", list(KV_AWARE), BASE) * 100
    occ_all = all(x == "below" for x in occ.values())
    tpot_all = all(x == "below" for x in tpot.values())
    mo = ds.replica_max_outstanding.max("replica").median("seed")
    stacks = all(float(mo.sel(kv_blocks=ks[0], policy=p)) > float(mo.sel(kv_blocks=ks[0], policy=BASE))
                 for p in KV_AWARE)
    rel = relation(ds)
    all_agree, all_n = _frac(rel.values())
    tok_agree, tok_n = _frac([rel[(p, "least_tokens")] for p in KV_AWARE])
    pairs = [(f"least_kv against {BASE}", rel[("least_kv", BASE)]),
             (f"least_cost against {BASE}", rel[("least_cost", BASE)]),
             ("least_kv and least_cost against least_tokens", (tok_agree, tok_n)),
             (f"{BASE} against least_tokens", rel[(BASE, "least_tokens")])]
    yes = [name for name, (a, n) in pairs if _how_often(a, n) == "mostly yes"]
    po = ds.placement_occupancy.median("seed")
    highest = {k: str(po.sel(kv_blocks=k).idxmax("policy").item()) for k in ks}
    v = verdict(ds)
    rate = float(ds.rate_rps)
    reading = [
        "**Reading.** Preemptions: least_kv and least_cost preempt less than least_requests "
        + (f"on every seed at {' and '.join(f'{k:,}' for k in every)} blocks; " if every else
           "on no pool size on every seed; ")
        + f"seeds with fewer, least_kv and least_cost: {_per_pool(ds, 'preemptions', lambda d: d < 0)}"
        + (f" (on the others equal, or at most {worst:+.0f}). " if worst >= 0 else ". "),
        "Occupancy at placement is "
        + ("lower under both KV-aware policies on every seed at every pool size, as predicted. "
           if occ_all else
           f"not lower on every seed (seeds lower, least_kv and least_cost: "
           f"{_per_pool(ds, 'placement_occupancy', lambda d: d < 0)}); the paired differences "
           f"are {spread(do, 1)} pp over both policies, pools and seeds, while the time-average "
           f"occupancy differs by {spread(dk, 1)} pp. "),
        "TPOT p99 is "
        + ("lower on every seed, as predicted. " if tpot_all else
           f"not lower: the paired differences are {spread(dt, 1)} ms (seeds lower, least_kv "
           f"and least_cost: {_per_pool(ds, 'tpot_p99', lambda d: d < 0)}). "),
        "Occupancy counts only the blocks of running sequences, not the requests waiting "
        "on a replica"
        + (", so an occupancy score can keep sending requests to a replica whose queue is "
           "long: " if stacks else "; ")
        + "the largest number of requests outstanding on one replica (median over seeds, "
        f"at {ks[0]:,} blocks) is {float(mo.sel(kv_blocks=ks[0], policy='least_kv')):.0f} "
        f"under least_kv, {float(mo.sel(kv_blocks=ks[0], policy='least_cost')):.0f} under "
        f"least_cost and {float(mo.sel(kv_blocks=ks[0], policy=BASE)):.0f} under least_requests. "
        + ("Whether that is what costs the TPOT (larger batches, more prefill beside "
           "decoding) is not isolated here." if stacks and not tpot_all else ""),
    ]
    rc = rank_correlation(ds)
    do_tok = paired(ds, "placement_occupancy", "least_tokens", list(KV_AWARE)) * 100
    do_near = abs(paired(ds, "placement_occupancy", list(KV_AWARE), BASE)) * 100
    same_highest = len(set(highest.values())) == 1
    up = all(bool((ds[v].sel(kv_blocks=ks[0]).median("seed")
                   > ds[v].sel(kv_blocks=ks[-1]).median("seed")).all())
             for v in ("placement_occupancy", "preemptions")) if len(ks) > 1 else None
    relation_text = (
        "**The relation.** Two readings. *Across seeds, within one "
        "policy and pool size*, the mean occupancy at placement ranks the runs by "
        f"preemptions {'well' if min(rc.values()) >= 0.7 else 'loosely'}: Spearman's rank correlation over the {n_seeds} seeds is "
        f"{min(rc.values()):.2f} to {max(rc.values()):.2f} over the "
        f"{len(rc)} policy × pool cells (the scatter's rising cloud); a seed whose "
        "workload fills the caches more both places at a higher occupancy and preempts "
        "more, so this is the workload speaking, not the router. *Within a seed, across "
        "policies*, the policy with the lower mean occupancy at placement preempted less "
        f"in {all_agree} of {all_n} comparisons of two policies (every pair of the four "
        "at each pool size; equal preemptions left out). By pair: "
        + "; ".join(f"{name} {a} of {n} ({_how_often(a, n)})" for name, (a, n) in pairs)
        + ". "
        + (f"{highest[ks[0]]} places at the highest median occupancy at every pool size. "
           if same_highest else "The policy placing at the highest median occupancy is "
           + ", ".join(f"{highest[k]} at {k:,} blocks" for k in ks) + ". ")
        + f"Per seed, least_tokens places {spread(do_tok, 1)} pp above the KV-aware "
        f"policies, while these place within {float(do_near.max()):.1f} pp of "
        "least_requests on every seed"
        + (". Between the pool sizes, occupancy and preemptions rise together (the pool, "
           "not the routing)" if up else "")
        + ". So the mean occupancy at admission "
        + (f"told which of two routers preempts less only for {', '.join(yes)}, not in general"
           if yes else "did not tell which of two routers preempts less for any pair")
        + "; the seed's mechanism is about the tail (placing on a replica near 90 %), which a mean over placements "
        "cannot show and the engine does not record. "
        f"Verdict: {v}" + (" (the KV-aware policies preempt less, but not through a lower "
                           "mean occupancy at placement, and not with a lower TPOT)."
                           if v == "holds with qualification" and not (occ_all or tpot_all)
                           else "."))
    return "\n".join([
        "## Claim 5: occupancy predicts preemption", "",
        "**Prediction (the seed).** \"A replica at ninety percent occupancy will soon be "
        "forced to preempt\": scoring replicas by KV-cache occupancy (least_kv; least_cost "
        "scores the blocks in use plus the request's new prefill blocks) keeps the "
        "occupancy of the replica a request is placed on lower and preempts less than "
        "counting requests (least_requests), and fewer preemptions mean a lower TPOT p99.", "",
        f"**Design.** `sweeps/token-routing-preemption.toml`: 8 default replicas whose KV "
        f"pool is cut to {' and '.join(f'{k:,}' for k in ks)} blocks of 16 tokens (the "
        f"default is 16,384; with it preemptions begin only at 65 req/s), at {rate:g} req/s "
        f"({rate / CAPACITY_RPS:.2f} × the capacity of 60 req/s), least_kv, least_cost, "
        f"least_requests and least_tokens (claim 1's best, for reference), "
        f"{n_seeds} seeds, {ds.attrs['warmup_s']:g} s + {ds.attrs['measure_s']:g} s. "
        "Occupancy at placement is `placement_occupancy`, the chosen replica's referenced "
        "blocks over its pool just before each placement, averaged over the window's "
        "placements; time-average occupancy is `kv_occupancy`. Medians over seeds "
        "(preemptions: median [min, max]):", "",
        *rows, "",
        "Paired by seed, KV-aware policy minus least_requests, mean [min, max] over seeds:", "",
        "| pool (blocks) | policy | Δ preemptions | Δ occupancy at placement pp | Δ TPOT p99 ms |",
        "|---|---|---|---|---|",
        *diff, "",
        "![Claim 5](../figures/lor-claim5-preemption.png)", "",
        "".join(reading), "",
        relation_text, ""])


def row(ds):
    """(claim, prediction, measured, verdict) for the verdict table."""
    ks = pools(ds)
    parts = []
    for k in ks:
        d = paired(ds.sel(kv_blocks=k), "preemptions", "least_kv", BASE)
        parts.append(f"{d.mean().item():+.0f} ({d.min().item():+.0f} to {d.max().item():+.0f}) at {k:,} blocks")
    do = paired(ds, "placement_occupancy", "least_kv", BASE) * 100
    dt = paired(ds, "tpot_p99", "least_kv", BASE)
    return ("5. Occupancy predicts preemption",
            "least_kv (and least_cost) place at lower KV occupancy and preempt less than "
            "least_requests; TPOT p99 falls",
            "least_kv − least_requests per seed: preemptions " + ", ".join(parts)
            + f"; occupancy at placement {do.mean().item():+.1f} pp ({do.min().item():+.1f} to "
            f"{do.max().item():+.1f}); TPOT p99 {dt.mean().item():+.1f} ms ({dt.min().item():+.1f} "
            f"to {dt.max().item():+.1f})", verdict(ds))
