"""Claim 4 of the least-outstanding-routing study: the tie-break line matters.
sweeps/token-routing-affinity.toml (results/token-routing-affinity/: zipf-tie.nc
power_of_d × rate_rps × tie_tolerance × seed; zipf-affinity.nc prefix_affinity ×
rate_rps × balance_abs × seed; zipf-baselines.nc least_tokens and least_cost × rate_rps ×
seed; the same three on the Mooncake excerpt as mooncake-*.nc, the deterministic
policies without a seed axis, since a trace's seed drives only the router stream)."""

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import xarray as xr
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from .common import FIGURES, lead, open_stage, save, spread

SWEEPS = ("sweeps/token-routing-affinity.toml",)
STAGES = ("zipf-tie", "zipf-affinity", "zipf-baselines",
          "mooncake-tie", "mooncake-affinity", "mooncake-baselines")
TRACE = Path(__file__).resolve().parents[3] / "traces" / "mooncake-conv.jsonl"
CAPACITY = 52.0   # req/s: this workload's capacity (the sweep file's comment says how measured)
WHERE = (("zipf", 26.0, "Zipf groups, 26 req/s (0.5 × capacity)"),
         ("zipf", 47.0, "Zipf groups, 47 req/s (0.9 × capacity)"),
         ("mooncake", None, "Mooncake excerpt (time_scale 1.5)"))
METRICS = ("prefix_hit_rate", "ttft_p50", "ttft_p99", "share", "gap")


def load(root):
    """{stage name: Dataset} of the six stages, or None if any is missing."""
    d = Path(root) / "token-routing-affinity"
    stages = {name: open_stage(d / f"{name}.nc") for name in STAGES}
    return None if any(ds is None for ds in stages.values()) else stages


def hot(ds):
    """The hot-replica measures, added to a stage's Dataset: ``share``, the largest
    replica's share of the attempts routed in the window (1/8 when even), and ``gap``,
    how far the most loaded replica's outstanding requests grew over the window beyond
    the median replica's: assigned − replica_completed is, per replica, the change of its
    outstanding requests between warm-up and horizon (no failures or retries here)."""
    grew = ds.assigned - ds.replica_completed
    return ds.assign(share=ds.assigned.max("replica") / ds.assigned.sum("replica"),
                     gap=grew.max("replica") - grew.median("replica"))


def arms(data, workload, rate=None):
    """One Dataset (arm × seed) of METRICS for a workload (and a rate for the Zipf
    groups): power_of_d at each tie_tolerance ("pod 0" … "pod 0.5"), least_tokens,
    least_cost and prefix_affinity at each balance_abs ("PA 4" …). A policy run once (the
    deterministic ones on the trace) is repeated over power_of_d's seeds."""
    def pick(name):
        ds = hot(data[f"{workload}-{name}"])
        return ds.sel(rate_rps=rate) if rate is not None else ds
    tie = pick("tie")
    seeds = tie.seed
    out, names = [], []

    def add(name, ds):
        ds = ds[list(METRICS)]
        for dim in [d for d in ds.dims if d != "seed"]:
            ds = ds.squeeze(dim, drop=True)
        for c in [c for c in ds.coords if c != "seed"]:
            ds = ds.drop_vars(c)
        if "seed" not in ds.dims:
            ds = ds.expand_dims(seed=seeds.values)
        out.append(ds)
        names.append(name)

    for t in tie.tie_tolerance.values:
        add(f"pod {t:g}", tie.sel(tie_tolerance=t))
    base = pick("baselines")
    for p in ("least_tokens", "least_cost"):
        add(p, base.sel(policy=p))
    aff = pick("affinity")
    for b in aff.balance_abs.values:
        add(f"PA {b:g}", aff.sel(balance_abs=b))
    return xr.concat(out, dim=xr.DataArray(names, dims="arm", name="arm"))


def tolerances(data):
    return [float(t) for t in data["zipf-tie"].tie_tolerance.values]


def tie_effects(a, tol):
    """Per-seed differences of power_of_d at tie_tolerance ``tol`` minus at 0."""
    d = a.sel(arm=f"pod {tol:g}") - a.sel(arm="pod 0")
    return {m: d[m] for m in ("prefix_hit_rate", "ttft_p50", "ttft_p99")}


def findings(data):
    """Per workload: ``hits`` — the positive tolerances that raise the hit rate on every
    seed; ``pays`` — those that also lower TTFT p50 on every seed without raising TTFT p99
    on every seed; ``tail`` — those that raise TTFT p99 on every seed."""
    out = {}
    for workload, rate, label in WHERE:
        a = arms(data, workload, rate)
        f = {"hits": [], "pays": [], "tail": []}
        for t in tolerances(data)[1:]:
            e = tie_effects(a, t)
            hit = lead(e["prefix_hit_rate"]) == "above"
            faster = lead(e["ttft_p50"]) == "below"
            tail = lead(e["ttft_p99"]) == "above"
            f["hits"] += [t] * hit
            f["pays"] += [t] * (hit and faster and not tail)
            f["tail"] += [t] * tail
        out[label] = f
    return out


def verdict(data):
    """The seed: favouring the replica that holds the prefix when loads are close raises
    the hit rate and lowers TTFT. holds: on every workload (Zipf groups at 0.5 and 0.9 ×
    capacity, Mooncake) some positive tie_tolerance raises power_of_d's hit rate and
    lowers its TTFT p50 on every seed, without raising its TTFT p99 on every seed; with
    qualification when that happens on some workload only; does not hold when on none
    (whether or not the hit rate rises)."""
    pays = [bool(f["pays"]) for f in findings(data).values()]
    if all(pays):
        return "holds"
    if any(pays):
        return "holds with qualification"
    return "does not hold in this model"


@lru_cache(maxsize=None)
def mooncake_reuse(path=TRACE):
    """What any router could reach on the excerpt: the hit rate with an infinite cache
    shared by every replica (the leading 512-token blocks of each prompt seen before,
    over all prompt tokens), the part of it that is the one block every prompt starts
    with, and the median number of requests between a shared prefix's last use and its
    reuse, for reuses deeper than that first block; and the mean prompt (tokens)."""
    seen, hit, tokens, gaps, first = {}, 0, 0, [], 0
    with open(path) as f:
        for k, line in enumerate(f):
            r = json.loads(line)
            ids = r["hash_ids"][:r["input_length"] // 512]
            n = 0
            while n < len(ids) and ids[n] in seen:
                n += 1
            hit += 512 * n
            first += 512 * (n >= 1)
            tokens += r["input_length"]
            if n > 1:
                gaps.append(k - seen[ids[n - 1]])
            for i in ids:
                seen[i] = k
    return hit / tokens, first / tokens, float(np.median(gaps)), tokens / (k + 1)


# -- figure ------------------------------------------------------------------------

COLORS = {"pod": "#1f77b4", "least_tokens": "#555555", "least_cost": "#2ca02c", "PA": "#d62728"}
PANELS = (("prefix_hit_rate", "prefix hit rate (%)", 100, False),
          ("ttft_p50", "TTFT p50 (ms)", 1, False),
          ("ttft_p99", "TTFT p99 (ms)", 1, True),
          ("share", "largest replica's share\nof assignments (%)", 100, False),
          ("gap", "hot replica's backlog growth\nabove the median replica's (requests)", 1, False))


def _color(arm):
    return COLORS["PA"] if arm.startswith("PA") else COLORS.get(arm, COLORS["pod"])


def figure(data, figures_dir=FIGURES):
    fig = Figure(figsize=(17, 9.5))
    axes = fig.subplots(len(WHERE), len(PANELS))
    for r, (workload, rate, label) in enumerate(WHERE):
        a = arms(data, workload, rate)
        names = [str(n) for n in a.arm.values]
        npod = sum(n.startswith("pod") for n in names)
        x = np.array([i if i < npod else i + 0.6 for i in range(len(names))], dtype=float)
        for c, (var, title, scale, logy) in enumerate(PANELS):
            ax = axes[r, c]
            v = a[var] * scale
            med, lo, hi = (np.asarray(v.median("seed")), np.asarray(v.min("seed")),
                           np.asarray(v.max("seed")))
            ax.plot(x[:npod], med[:npod], "o-", color=COLORS["pod"])
            ax.fill_between(x[:npod], lo[:npod], hi[:npod], color=COLORS["pod"], alpha=0.15)
            lt = names.index("least_tokens")
            ax.axhline(med[lt], color=COLORS["least_tokens"], ls=":", lw=1)
            for i in range(npod, len(names)):
                ax.errorbar(x[i], med[i], yerr=[[med[i] - lo[i]], [hi[i] - med[i]]], fmt="o",
                            color=_color(names[i]), capsize=3)
            if var == "share":
                ax.axhline(100 / data["zipf-tie"].sizes["replica"], color="k", ls="--", lw=0.8)
            if logy:
                ax.set_yscale("log")
                ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 3, 5)))
                ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
                ax.yaxis.set_minor_formatter(NullFormatter())
            ax.set_xticks(x, [n.replace("pod ", "") for n in names], rotation=90, fontsize=8)
            ax.axvline(npod - 0.2, color="#cccccc", lw=0.8)
            if r == 0:
                ax.set_title(title, fontsize=9)
            if r == len(WHERE) - 1:
                ax.set_xlabel("tie_tolerance  |  references", fontsize=8)
            if c == 0:
                ax.set_ylabel(label.replace(", ", ",\n", 1), fontsize=9)
            ax.tick_params(axis="y", labelsize=8)
    handles = [Line2D([], [], color=COLORS["pod"], marker="o"),
               Patch(color=COLORS["pod"], alpha=0.15),
               Line2D([], [], color=COLORS["least_tokens"], marker="o", ls=":"),
               Line2D([], [], color=COLORS["least_cost"], marker="o", ls=""),
               Line2D([], [], color=COLORS["PA"], marker="o", ls=""),
               Line2D([], [], color="k", ls="--", lw=0.8)]
    fig.legend(handles, ["power_of_d (d = 2, tokens) by tie_tolerance: median",
                         "min–max over seeds", "least_tokens (no affinity; dotted: its median)",
                         "least_cost", "prefix_affinity (PA) by balance_abs",
                         "even share (1/8)"],
               loc="upper center", ncol=6, fontsize=8, bbox_to_anchor=(0.5, 0.965), frameon=False)
    fig.suptitle("Claim 4: the cache tie-break of power_of_d against least_tokens, least_cost "
                 "and prefix_affinity, 8 replicas (median over seeds; bars min–max; the "
                 "trace's deterministic policies run once)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return save(fig, "lor-claim4-affinity", figures_dir)


# -- document ----------------------------------------------------------------------

def _table(a):
    rows = ["| arm | hit rate % | TTFT p50 ms | TTFT p99 ms | largest share % | backlog gap |",
            "|---|---|---|---|---|---|"]
    for arm in a.arm.values:
        m = a.sel(arm=arm).median("seed")
        name = f"power_of_d, tie_tolerance {arm[4:]}" if arm.startswith("pod") else (
            f"prefix_affinity, balance_abs {arm[3:]}" if arm.startswith("PA") else arm)
        rows.append(f"| {name} | {float(m.prefix_hit_rate) * 100:.1f} | {float(m.ttft_p50):.0f} | "
                    f"{float(m.ttft_p99):.0f} | {float(m.share) * 100:.1f} | {float(m.gap):.0f} |")
    return rows


def _tols(ts):
    return ", ".join(f"{t:g}" for t in ts) if ts else "none"


def design(data):
    """The synthetic workload's prefix settings and the KV pool, from the Datasets' attrs:
    groups, tokens, probability, Zipf exponent, the hottest group's share of all
    requests, the groups' prefixes in KV blocks, and kv_blocks."""
    a = data["zipf-tie"].attrs
    g, s = int(a["prefix_groups"]), float(a["prefix_zipf"])
    w = np.arange(1, g + 1, dtype=float) ** -s
    tokens, p = int(a["prefix_tokens"]), float(a["prefix_probability"])
    return dict(groups=g, zipf=s, tokens=tokens, probability=p,
                hottest=p * w[0] / w.sum(), blocks=g * (tokens // int(a["block_tokens"])),
                kv_blocks=int(a["kv_blocks"]), block_tokens=int(a["block_tokens"]))


def section(data):
    f = findings(data)
    tols = tolerances(data)
    tmax = tols[-1]
    seeds = data["zipf-tie"].sizes["seed"]
    replicas = data["zipf-tie"].sizes["replica"]
    dz = design(data)
    lo = arms(data, "zipf", 26.0)
    hi = arms(data, "zipf", 47.0)
    mc = arms(data, "mooncake")
    e = tie_effects(hi, tmax)
    e_mc = tie_effects(mc, tmax)
    every = [(a, label) for (_, _, label), a in zip(WHERE, (lo, hi, mc))]

    def med(a, arm, var, scale=1.0):
        return float(a.sel(arm=arm)[var].median()) * scale

    def diff(a, x, y, var):
        return a.sel(arm=x)[var] - a.sel(arm=y)[var]

    def short(label):
        return label.split(" (")[0]

    def per(key):
        return "; ".join(f"{short(lab)}: {_tols(x[key])}" for lab, x in f.items())

    p50_some = [t for t in tols[1:] if lead(tie_effects(hi, t)["ttft_p50"]) == "below"]
    best_p99 = all(min(a.arm.values, key=lambda n: med(a, n, "ttft_p99")) == "least_tokens"
                   for a, _ in every)
    lc_worse = all(lead(diff(a, "least_cost", "least_tokens", "ttft_p99")) == "above"
                   for a in (lo, hi))
    tight_worse = lead(diff(hi, "PA 16", "least_tokens", "ttft_p99")) == "above"
    pod_hot = max(med(a, f"pod {t:g}", "gap") for a, _ in every for t in tols)
    lt_hot = max(med(a, "least_tokens", "gap") for a, _ in every)
    ceiling, first, reuse, mean_prompt = mooncake_reuse()
    pool = dz["kv_blocks"] * dz["block_tokens"]
    parts = [
        "## Claim 4: the tie-break line matters", "",
        "**Prediction (the seed).** When two replicas carry similar load, favour the one that "
        "already holds the prompt's prefix: prefill over a cached prefix is close to free, so "
        "\"a slightly busier replica with a warm prefix can finish sooner than an idle one "
        "without it\" — the cache tie-break should raise the prefix hit rate and lower TTFT, "
        "and a stable tie-break (cache affinity) is what the seed recommends when scores are "
        "close. The seed does not say how close is \"similar\", nor warn of the other side, "
        "which the issue adds: with too much affinity a popular prefix piles onto one replica "
        "and overloads it.", "",
        "**Design.** `sweeps/token-routing-affinity.toml`, 8 replicas. power_of_d as in the "
        "seed's `choose()` (d = 2, outstanding tokens + the request's), ties broken by the "
        f"cached prefix, with `tie_tolerance` {_tols(tols)} (a candidate within that fraction "
        "of the better score is tied; 0 = exact ties, which token scores rarely "
        "produce); against least_tokens (no affinity), least_cost (new prefill blocks + "
        "blocks in use) and prefix_affinity (SGLang's rule: follow the cache unless the "
        "busiest replica has more than `balance_abs` requests more than the least busy one, "
        "and 1.5 × as many), with `balance_abs` 4, 16 and 64 (SGLang's default). Synthetic "
        f"Zipf prefix groups: {dz['groups']} groups of {dz['tokens']:,} tokens, "
        f"{dz['probability'] * 100:.0f} % of prompts prefixed, Zipf {dz['zipf']:g}. The "
        "default 32 groups of 1,536 tokens fit in every replica's cache, so every policy "
        "already sits at the ceiling hit rate and routing cannot matter; here the prefixes "
        f"take {dz['blocks']:,} KV blocks ({dz['blocks'] / dz['kv_blocks']:.0f} replicas' "
        "whole pools: more than one replica keeps, less than the cluster can), and the "
        f"hottest group is {dz['hottest'] * 100:.1f} % of all requests "
        f"({dz['hottest'] * replicas:.1f} × a replica's even share). Loads 26 and 47 req/s, "
        f"0.5 and 0.9 × this workload's capacity ({CAPACITY:.0f} req/s, measured as for the "
        f"default workload), {seeds} seeds, 10 s + 40 s. The Mooncake excerpt replayed as in "
        "`sweeps/mooncake-replay.toml` (time_scale 1.5, 30 s + 360 s); its seed drives only "
        "power_of_d's draws, so the other policies run once. The hot replica: the largest "
        "replica's share of the attempts routed in the window, and the *backlog gap*, how "
        "much the most loaded replica's outstanding requests grew over the window (assigned "
        "− completed) beyond the median replica's. Medians over seeds:", ""]
    for a, label in every:
        parts += [f"*{label}*", "", *_table(a), ""]
    parts += [
        "![Claim 4](../figures/lor-claim4-affinity.png)", "",
        "**Reading.** The tie-break does move prefixes. Tolerances that raise power_of_d's "
        f"hit rate on every seed: {per('hits')}. At 0.9 × capacity, tie_tolerance {tmax:g} "
        f"adds {spread(e['prefix_hit_rate'], 1, 100)} points (mean [min, max] over seeds). "
        "It does not buy latency: there TTFT p50 changes by "
        f"{spread(e['ttft_p50'], 1)} ms (of {med(hi, 'pod 0', 'ttft_p50'):.0f} ms; lower on "
        f"{int((e['ttft_p50'] < 0).sum())} of {seeds} seeds"
        + ("; lower on every seed at tolerance " + _tols(p50_some) if p50_some else
           ", and on every seed at no tolerance")
        + f"), while TTFT p99 rises by {spread(e['ttft_p99'])} ms (tolerances raising it on "
        f"every seed: {per('tail')}). Tolerances that raise the hit rate and lower TTFT p50 "
        f"on every seed without raising TTFT p99 on every seed: {per('pays')}. Plausibly, "
        "with only two candidates the warm replica is often not among them, so the hit rate "
        "moves little; what the tie-break gives up is balance — a candidate up to "
        f"{tmax * 100:g} % busier is taken for its prefix — and the tail pays for it. It "
        "does not pile onto one hot replica: power_of_d's backlog gap stays at most "
        f"{pod_hot:.0f} requests at any tolerance and load, least_tokens' at most "
        f"{lt_hot:.0f}.", "",
        "Affinity itself is worth something in the median: prefix_affinity with SGLang's "
        f"defaults reaches a hit rate of {med(hi, 'PA 64', 'prefix_hit_rate', 100):.1f} % "
        f"against {med(hi, 'least_tokens', 'prefix_hit_rate', 100):.1f} % for least_tokens at "
        "0.9 × capacity, and the lowest TTFT p50 "
        f"({spread(diff(hi, 'PA 64', 'least_tokens', 'ttft_p50'))} ms against least_tokens, "
        "per seed). And it is where too much affinity overloads a hot replica: the rule "
        "follows the cache until the busiest replica is balance_abs requests ahead, and a "
        f"replica serves about {CAPACITY / replicas:.1f} req/s, so 64 queued requests are "
        f"seconds of wait. Its backlog gap is {med(hi, 'PA 64', 'gap'):.0f} requests at 0.9 × "
        f"capacity and {med(lo, 'PA 64', 'gap'):.0f} even at 0.5 × (where the hottest group "
        f"alone is {dz['hottest'] * WHERE[0][1] / (CAPACITY / replicas):.2f} of a replica's "
        "capacity), "
        f"against {med(hi, 'least_tokens', 'gap'):.0f} for least_tokens; with balance_abs 16 "
        f"and 4 it falls to {med(hi, 'PA 16', 'gap'):.0f} and {med(hi, 'PA 4', 'gap'):.0f}. "
        f"TTFT p99 follows: {med(hi, 'PA 64', 'ttft_p99') / 1000:.1f} s with balance_abs 64, "
        f"{med(hi, 'PA 16', 'ttft_p99') / 1000:.1f} s with 16, "
        f"{med(hi, 'PA 4', 'ttft_p99') / 1000:.1f} s with 4 (plausibly because its "
        "least_requests branch, then taken often, balances counts rather than work), against "
        f"{med(hi, 'least_tokens', 'ttft_p99') / 1000:.2f} s for least_tokens. The largest "
        "share of assignments hides this on the Zipf groups "
        f"({med(hi, 'PA 64', 'share', 100):.1f} % against "
        f"{med(hi, 'least_tokens', 'share', 100):.1f} %): the guard caps how far the hot "
        "replica's count can run ahead, and the damage is in its queue, not its share. On "
        f"Mooncake it shows: {med(mc, 'PA 64', 'share', 100):.1f} % of the assignments go to "
        f"one replica, and TTFT p99 is {med(mc, 'PA 64', 'ttft_p99') / 1000:.0f} s. "
        "least_cost raises the hit rate "
        f"({med(hi, 'least_cost', 'prefix_hit_rate', 100):.1f} % at 0.9 × capacity) but its "
        "load term counts blocks in use, blind to the waiting queue; its TTFT p99 is "
        + ("above least_tokens' on every seed at both loads." if lc_worse else
           "not below least_tokens' on every seed at both loads."), "",
        "On the Mooncake excerpt routing has little to work with: an infinite cache shared by "
        f"all replicas would reach a hit rate of {ceiling * 100:.0f} % "
        f"({first * 100:.1f} points of it the one 512-token block every prompt starts with), "
        "but a conversation's next turn comes a median of "
        f"{reuse:.0f} requests after its previous one, by when each replica has taken in "
        f"about {reuse / replicas * mean_prompt / pool:.1f} pools' worth of prompt "
        f"({reuse / replicas:.0f} prompts of {mean_prompt:,.0f} tokens on average). Every "
        f"policy stays between {float(mc.prefix_hit_rate.median('seed').min()) * 100:.1f} % "
        f"and {float(mc.prefix_hit_rate.median('seed').max()) * 100:.1f} %; tie_tolerance "
        f"{tmax:g} changes power_of_d's hit rate by {spread(e_mc['prefix_hit_rate'], 1, 100)} "
        f"points and its TTFT p99 by {spread(e_mc['ttft_p99'])} ms.", "",
        "In this model the tie-break line costs little at small tolerances and the tail at "
        "wide ones, and the latency it promises does not appear; "
        + ("the simplest policy without affinity, least_tokens, has the lowest TTFT p99 on "
           "every workload here." if best_p99 else
           "least_tokens, without affinity, does not have the lowest TTFT p99 everywhere.")
        + " Affinity strong enough to lower the median (prefix_affinity) is strong enough "
        "to overload the replica holding the hottest prefix; a tighter balance guard "
        "shrinks the overload"
        + (", but even with balance_abs 16 its TTFT p99 is above least_tokens' on every "
           "seed at 0.9 × capacity." if tight_worse else
           ", and with balance_abs 16 its TTFT p99 is not above least_tokens' on every seed "
           "at 0.9 × capacity."), ""]
    return "\n".join(parts)


def row(data):
    """(claim, prediction, measured, verdict) for the verdict table."""
    tmax = tolerances(data)[-1]
    hi = arms(data, "zipf", 47.0)
    e = tie_effects(hi, tmax)
    pa = hi.sel(arm="PA 64").gap - hi.sel(arm="least_tokens").gap
    return ("4. The tie-break line matters",
            "breaking near-ties by cached prefix raises the hit rate and lowers TTFT; "
            "too much affinity overloads a hot replica",
            f"Zipf groups at 0.9 × capacity, power_of_d tie_tolerance {tmax:g} against 0: hit "
            f"rate {spread(e['prefix_hit_rate'], 1, 100)} points, TTFT p50 "
            f"{spread(e['ttft_p50'], 1)} ms, TTFT p99 {spread(e['ttft_p99'])} ms; "
            f"prefix_affinity's hot replica {spread(pa)} requests of backlog beyond "
            "least_tokens'", verdict(data))
