"""Every number docs/scheduler-modes.md states, derived from the study's Datasets.

A Dataset here has a ``scheduler`` axis (the study's arms, :data:`SCHEDULERS`: "reserve",
"vllm_sync" and "vllm", the vllm mode in vLLM's default asynchronous loop), a ``policy``
and a ``seed`` axis, and for the example a ``rate_rps`` axis (the capacity search's runs: NaN where a
row did not run a rate); every other axis of length one is dropped (:func:`prepare`).
Comparisons are between two arms, ``pair = (a, b)`` (a − b; default :data:`MODE`, the vllm
mode against reserve; :data:`LOOP`, the asynchronous loop against the synchronous one),
paired by seed: the same seed gives every arm, and every policy, the same workload.

**Intervals.** The mean of per-seed differences with a 95 % percentile bootstrap
interval (``scipy.stats.bootstrap``, 9,999 resamples of the seeds, a fixed generator:
deterministic). When every seed gives the same difference (a trace and a deterministic
policy: the seeds repeat one run) the interval is that value: there is no sampling
variation to resample. A difference is *claimed* only when the interval excludes 0.
"""

import itertools
import math

import numpy as np

from ... import results
from ..intervals import excludes_zero, interval

SCHEDULERS = ("reserve", "vllm_sync", "vllm")
"""The study's arms in order (routesim.studies.scheduler_modes.design.ARMS)."""
MODE = ("vllm", "reserve")
"""The vllm mode as a user gets it (asynchronous loop) against reserve: P1-P4."""
LOOP = ("vllm", "vllm_sync")
"""vLLM's asynchronous loop against its synchronous one, the same scheduler: P5, P6."""
METRICS = {
    # name: (label, how the difference is taken, its unit, lower is better)
    "prefix_hit_rate": ("prefix hit rate", "points", "pp", False),
    "preemptions": ("preemptions", "absolute", "", True),
    "ttft_p99": ("TTFT p99", "relative", "%", True),
    "itl_p99": ("ITL p99", "relative", "%", True),
    "tpot_p99": ("TPOT p99", "relative", "%", True),
}
"""The compared metrics (routesim/batching/metrics.py): the prefix hit rate's difference
in percentage points, preemptions' in counts, the latency tails' relative (vllm / reserve
− 1, per seed, in %)."""
LOOP_METRICS = {
    "ttft_p50": ("TTFT p50", "relative", "%", True),
    "ttft_p99": METRICS["ttft_p99"],
    "e2e_p99": ("E2E p99", "relative", "%", True),
    "itl_p99": METRICS["itl_p99"],
    "tpot_p99": METRICS["tpot_p99"],
}
"""The metrics of the loop comparison (:data:`LOOP`): the asynchronous loop delays a
request's first chunk, so TTFT's median and tail and the end-to-end tail beside the
decode tails."""
RANKED = ("ttft_p99", "itl_p99", "tpot_p99")
"""The metrics a routing conclusion is about: which of two policies has the lower tail."""
STEADY = ("backlog_growth", "kv_occupancy_first", "kv_occupancy_last")


def prepare(ds):
    """The Dataset with every length-one axis other than scheduler, policy and seed
    dropped (the example keeps rate_rps), transposed to (scheduler, policy, [rate_rps,]
    seed, ...)."""
    keep = {"scheduler", "policy", "seed", "rate_rps", "replica"}
    ds = ds.squeeze([d for d in ds.dims if ds.sizes[d] == 1 and d not in keep], drop=True)
    if "rate_rps" in ds.dims and ds.sizes["rate_rps"] == 1:
        ds = ds.squeeze("rate_rps", drop=True)
    order = [d for d in ("scheduler", "policy", "rate_rps", "seed") if d in ds.dims]
    return ds.transpose(*order, ...)


def arms(ds):
    """The Dataset's arms, in its order: a list of str."""
    return [str(s) for s in ds.scheduler.values]


def per_seed_difference(ds, var, how=None, pair=MODE):
    """Arm a minus arm b per seed, ``pair = (a, b)`` (an array over the remaining axes):
    ``how`` (default the metric's own, :data:`METRICS` or :data:`LOOP_METRICS`)
    "relative" gives a / b − 1 in %, "points" the difference × 100 (a fraction in
    percentage points), "absolute" the difference."""
    how = how or {**METRICS, **LOOP_METRICS}[var][1]
    v, r = ds[var].sel(scheduler=pair[0]), ds[var].sel(scheduler=pair[1])
    if how == "relative":
        return (v / r - 1.0) * 100.0
    if how == "points":
        return (v - r) * 100.0
    return v - r


def differences(ds, rates=None, pair=MODE, metrics=METRICS):
    """{(metric, policy, rate or None): (mean, low, high)} of arm a − arm b (``pair``),
    paired by seed, for each of ``metrics`` at each of ``rates`` (None: the Dataset has
    no rate axis)."""
    out = {}
    for var in metrics:
        d = per_seed_difference(ds, var, pair=pair)
        for p in ds.policy.values:
            for r in (rates if rates is not None else [None]):
                x = d.sel(policy=p) if r is None else d.sel(policy=p, rate_rps=r)
                out[(var, str(p), r)] = interval(x.values)
    return out


def medians(ds, var, rate=None):
    """{(arm, policy): median over seeds of ``var``} (at ``rate``), every arm of ``ds``."""
    out = {}
    for s in arms(ds):
        for p in ds.policy.values:
            x = ds[var].sel(scheduler=s, policy=p)
            if rate is not None:
                x = x.sel(rate_rps=rate)
            v = x.values.astype(float)
            out[(s, str(p))] = float(np.median(v[np.isfinite(v)])) if np.isfinite(v).any() else math.nan
    return out


MATERIAL_PCT = 5.0
"""A routing conclusion is an ordering of two policies that is shown (the paired
interval excludes 0) and material: the policies' tails differ by at least this much
(mean over seeds of a / b − 1, in %). The same bound as P3's 'close'."""


def orderings(ds, var, scheduler, rate=None, material=MATERIAL_PCT):
    """{(a, b): -1 | 0 | +1} for every pair of policies (a before b in the Dataset's
    order): -1 when a's ``var`` is lower than b's (the interval of the per-seed
    difference a − b lies below 0, and the mean of a / b − 1 is at least ``material`` %
    in size), +1 when higher, 0 otherwise."""
    x = ds[var].sel(scheduler=scheduler)
    if rate is not None:
        x = x.sel(rate_rps=rate)
    pols = [str(p) for p in ds.policy.values]
    out = {}
    for a, b in itertools.combinations(pols, 2):
        xa, xb = x.sel(policy=a).values.astype(float), x.sel(policy=b).values.astype(float)
        sign = excludes_zero(interval(xa - xb))
        rel = np.mean(xa / xb - 1.0) * 100.0 if sign else 0.0
        out[(a, b)] = sign if abs(rel) >= material else 0
    return out


def changes(ds, var, rate=None, material=MATERIAL_PCT, pair=MODE):
    """How the pairwise orderings of policies on ``var`` (:func:`orderings`) differ
    between the arms ``pair = (new, old)``: {"reversed": [(a, b, old's sign)], "lost":
    [...], "gained": [...], "kept": n, "decided": n (pairs ordered under old)}.
    *Reversed*: both arms order the pair, oppositely; *lost*: old orders it, new does
    not; *gained*: the converse."""
    r = orderings(ds, var, pair[1], rate, material)
    v = orderings(ds, var, pair[0], rate, material)
    out = {"reversed": [], "lost": [], "gained": [], "kept": 0, "decided": sum(1 for x in r.values() if x)}
    for pair in r:
        a, b = r[pair], v[pair]
        if a and b and a != b:
            out["reversed"].append((*pair, a))
        elif a and not b:
            out["lost"].append((*pair, a))
        elif b and not a:
            out["gained"].append((*pair, b))
        elif a and a == b:
            out["kept"] += 1
    return out


def best(ds, var, scheduler, rate=None):
    """The policies with the lowest median over seeds of ``var`` and every policy whose
    paired interval against it holds 0 (not distinguishable from the best): a sorted list."""
    med = medians(ds, var, rate)
    pols = [str(p) for p in ds.policy.values]
    top = min(pols, key=lambda p: (med[(scheduler, p)], p))
    x = ds[var].sel(scheduler=scheduler)
    if rate is not None:
        x = x.sel(rate_rps=rate)
    tied = [p for p in pols if p == top
            or excludes_zero(interval((x.sel(policy=p) - x.sel(policy=top)).values)) == 0]
    return sorted(tied)


def capacities(ds):
    """{(arm, policy): (capacity, seeds' low, seeds' high)} (NaN: below the lowest
    rate searched), every arm of ``ds``."""
    out = {}
    for s in arms(ds):
        for p in ds.policy.values:
            c = float(ds.capacity_rps.sel(scheduler=s, policy=p))
            seeds = ds.capacity_rps_seed.sel(scheduler=s, policy=p).values.astype(float)
            lo = float(np.nanmin(seeds)) if np.isfinite(seeds).any() else math.nan
            hi = float(np.nanmax(seeds)) if np.isfinite(seeds).any() else math.nan
            out[(s, str(p))] = (c, lo, hi)
    return out


def capacity_differences(ds, pair=MODE):
    """{policy: (Δ capacity of arm a − arm b (``pair``), (mean, low, high) of the per-seed
    capacities' difference)}; NaN where either is below the lowest rate searched."""
    cap = capacities(ds)
    a, b = pair
    d = ds.capacity_rps_seed.sel(scheduler=a) - ds.capacity_rps_seed.sel(scheduler=b)
    return {str(p): (cap[(a, str(p))][0] - cap[(b, str(p))][0], interval(d.sel(policy=p).values))
            for p in ds.policy.values}


def capacity_order_changes(ds, resolution, pair=MODE):
    """Pairs of policies whose capacities (median rule) are ordered by more than one
    ``resolution`` step under one arm of ``pair = (new, old)`` and oppositely (by any
    amount) under the other: [(a, b, old's Δ, new's Δ)]. Below-range capacities count as
    the lowest rate searched minus one step."""
    cap = capacities(ds)
    low = float(ds.attrs.get("capacity_low", 0.0))

    def c(s, p):
        v = cap[(s, p)][0]
        return low - resolution if math.isnan(v) else v
    pols = [str(p) for p in ds.policy.values]
    out = []
    for a, b in itertools.combinations(pols, 2):
        dr, dv = c(pair[1], a) - c(pair[1], b), c(pair[0], a) - c(pair[0], b)
        if (abs(dr) > resolution and dr * dv < 0) or (abs(dv) > resolution and dr * dv < 0):
            out.append((a, b, dr, dv))
    return out


def steadiness(ds, rate=None):
    """{(arm, policy): (median backlog growth, median KV occupancy first, last)}."""
    return {key: (medians(ds, "backlog_growth", rate)[key], medians(ds, "kv_occupancy_first", rate)[key],
                  medians(ds, "kv_occupancy_last", rate)[key]) for key in medians(ds, "backlog_growth", rate)}


# ---------------------------------------------------------------------------------------
# The predictions' verdicts
# ---------------------------------------------------------------------------------------

KV_READERS = ("least_kv", "least_cost", "prefix_affinity")
"""Policies that read a replica's referenced blocks or resident ids, which the two
schedulers account differently (D1, D4); the others read only counts the schedulers
share (outstanding requests and tokens) or nothing."""
CLOSE_PCT = 5.0
"""P3's bound: 'close' latency tails differ by at most this much (per-seed mean, %)."""


def below_capacity(ds, capacity_rps):
    """The example's round-1 loads below ``capacity_rps`` (the best reserve policy's)."""
    return [float(r) for r in ds.rate_rps.values if r < capacity_rps and bool(ds.arrivals.sel(rate_rps=r).notnull().all())]


def verdict_hits(diff):
    """P1: the prefix hit rate is lower under vllm. 'holds' when the interval lies below
    0 for most (more than half) of the cells and the mean over cells is negative; 'holds
    with qualification' when only the mean is negative; 'does not hold' otherwise."""
    cells = [v for (m, _, _), v in diff.items() if m == "prefix_hit_rate" and np.isfinite(v[0])]
    below = sum(1 for v in cells if excludes_zero(v) < 0)
    mean = float(np.mean([v[0] for v in cells])) if cells else math.nan
    if mean < 0 and below * 2 > len(cells):
        return "holds"
    if mean < 0:
        return "holds with qualification"
    return "does not hold"


def verdict_preemptions(ds, rates=None, pair=MODE):
    """P2: vllm preempts at least as much as reserve (``pair``). Over every (policy, load)
    cell in which either arm preempted: 'holds' when no cell's interval lies below 0 and
    at least one lies above; 'holds with qualification' when none lies either side;
    'does not hold' when some cell's lies below 0; 'nothing to compare' when no run
    preempted."""
    d = per_seed_difference(ds, "preemptions", pair=pair)
    any_pre = (ds.preemptions.sel(scheduler=list(pair)).fillna(0) > 0).any("scheduler").any("seed")
    signs = []
    for p in ds.policy.values:
        for r in (rates if rates is not None else [None]):
            sel = {"policy": p} if r is None else {"policy": p, "rate_rps": r}
            if bool(any_pre.sel(sel)):
                signs.append(excludes_zero(interval(d.sel(sel).values)))
    if not signs:
        return "nothing to compare"
    if min(signs) < 0:
        return "does not hold"
    return "holds" if max(signs) > 0 else "holds with qualification"


def closeness(v, bound=CLOSE_PCT):
    """'close' when the interval (mean, low, high) lies within ±bound, 'differs' when it
    lies wholly beyond +bound or −bound, 'undecided' otherwise."""
    _, lo, hi = v
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "undecided"
    if -bound <= lo and hi <= bound:
        return "close"
    if lo > bound or hi < -bound:
        return "differs"
    return "undecided"


def close_counts(diff, rates, metrics=RANKED):
    """{("others" | "readers", 'close' | 'differs' | 'undecided'): cells} over the latency
    tails ``metrics`` at ``rates``; readers are :data:`KV_READERS`."""
    out = {(g, c): 0 for g in ("others", "readers") for c in ("close", "differs", "undecided")}
    for (m, p, r), v in diff.items():
        if m in metrics and r in rates:
            out[("readers" if p in KV_READERS else "others", closeness(v))] += 1
    return out


def verdict_close(diff, rates):
    """P3: below capacity the latency tails of the policies that do not read blocks
    (not :data:`KV_READERS`) are within ±:data:`CLOSE_PCT` % under vllm. 'does not hold'
    when one of those cells' interval lies wholly beyond the bound (a material difference
    shown); 'holds' when every one lies within it; 'holds with qualification' otherwise
    (none shown to differ, some intervals too wide to show closeness)."""
    c = close_counts(diff, rates)
    if c[("others", "differs")]:
        return "does not hold"
    return "holds with qualification" if c[("others", "undecided")] else "holds"


def verdict_routing(settings, capacity_changes):
    """P4: no routing conclusion changes. ``settings``: {label: {metric: changes()}}.
    'holds' when no (material) ordering reverses, nor any capacity ordering; 'holds with
    qualification' when every reversed ordering involves a policy that reads KV blocks
    or resident prefixes (:data:`KV_READERS`), whose signals the schedulers account
    differently; 'does not hold' when an ordering of two other policies reverses."""
    rev = [(a, b) for s in settings.values() for c in s.values() for a, b, _ in c["reversed"]]
    rev += [(a, b) for a, b, _, _ in capacity_changes]
    if not rev:
        return "holds"
    if all(a in KV_READERS or b in KV_READERS for a, b in rev):
        return "holds with qualification"
    return "does not hold"


DECODE = ("itl_p99", "tpot_p99")
"""P6's metrics: the decode tails, which the asynchronous loop should leave alone."""


def verdict_loop_ttft(diff, rates):
    """P5: the asynchronous loop raises TTFT, most at the tail. ``diff``: the loop
    comparison's differences (:data:`LOOP`, :data:`LOOP_METRICS`); the cells are the
    policies at ``rates``. 'does not hold' when the mean over cells of Δ TTFT p99 is not
    above 0, or when Δ TTFT p99 exceeds Δ TTFT p50 (means over seeds) in at most half the
    cells (the rise is not at the tail); 'holds' when moreover the TTFT p99 interval lies
    above 0 in more than half the cells; 'holds with qualification' otherwise (a rise at
    the tail on average, not shown cell by cell)."""
    keys = [(p, r) for (m, p, r) in diff if m == "ttft_p99" and r in rates and np.isfinite(diff[(m, p, r)][0])]
    if not keys:
        return "nothing to compare"
    p99 = [diff[("ttft_p99", p, r)] for p, r in keys]
    tail = sum(1 for (p, r), v in zip(keys, p99) if v[0] > diff[("ttft_p50", p, r)][0])
    if np.mean([v[0] for v in p99]) <= 0 or tail * 2 <= len(keys):
        return "does not hold"
    shown = sum(1 for v in p99 if excludes_zero(v) > 0)
    return "holds" if shown * 2 > len(keys) else "holds with qualification"


def verdict_loop_decode(diff, rates):
    """P6: the asynchronous loop leaves the decode tails (:data:`DECODE`) within
    ±:data:`CLOSE_PCT` % for every policy at ``rates``: :func:`verdict_close`'s rule over
    every policy, the block readers included (both arms are the same scheduler, so they
    account blocks alike)."""
    c = close_counts(diff, rates, DECODE)
    if c[("others", "differs")] + c[("readers", "differs")]:
        return "does not hold"
    return "holds with qualification" if c[("others", "undecided")] + c[("readers", "undecided")] else "holds"


def load(results_dir):
    """{"example": Dataset, "mooncake": Dataset} (prepared) of the results folder's files
    that exist."""
    from pathlib import Path
    out = {}
    for name in ("example", "mooncake"):
        path = Path(results_dir) / f"{name}.nc"
        if path.exists():
            out[name] = prepare(results.load(path))
    return out
