"""Every number docs/disaggregation.md states, derived from the study's Datasets, and
the claims' verdicts.

A Dataset here is one workload's (:func:`routesim.studies.disaggregation.design.join`):
dims (arm, load, seed[, replica]), the load ``rate_rps`` (chat, code) or
``trace_time_scale`` (Mooncake). Comparisons are paired by seed against the co-located
arm (the same seed gives every arm the same requests) with
:func:`routesim.studies.intervals.interval` (the mean of per-seed differences, its 95 %
percentile bootstrap interval); a difference is claimed only when the interval excludes 0.

**Capacity** is ``routesim.capacity``'s current rule (:data:`RULE`, the quantile rule:
the criterion holds in at least 90 % of the seeds' windows and every window is steady)
with the DistServe criterion :data:`CRITERION` (attainment of both SLOs at least 90 %),
applied to the loads the sweep evaluates (its grid is the resolution); each seed's own
capacity is the same rule on its runs, and the capacities are compared paired by seed.
"""

import math

import numpy as np

from ... import capacity, results
from ..intervals import excludes_zero, interval
from .design import COLOCATED, WORKLOADS

CRITERION = capacity.Criterion("attainment", 0.9, at_most=False)
"""The capacity criterion: at least 90 % of the cohort completed within both SLOs (TTFT
and TPOT), DistServe's goodput criterion."""
RULE = capacity.Rule()
"""``routesim.capacity``'s current default rule (quantile 0.9, every window steady)."""
CLOSE_PCT = 5.0
"""C6's bound: transfer-aware routing's goodput within this much of independent's (%)."""
TRANSFER_SHARE = 0.10
"""C8: the transfer's largest share of the TTFT p50 predicted."""
LINK_BUSY = 0.25
"""C8: the busiest link's largest utilisation predicted."""


def load_axis(ds) -> str:
    return "rate_rps" if "rate_rps" in ds.dims else "trace_time_scale"


def loads(ds) -> list:
    return [float(x) for x in ds[load_axis(ds)].values]


def arms(ds) -> list:
    return [str(a) for a in ds.arm.values]


def split_of(arm: str):
    """(prefill, decode) of an arm's name, None for co-located."""
    if arm == COLOCATED:
        return None
    p, d = arm.split(" ")[0].split(":")
    return int(p), int(d)


def route_of(arm: str):
    return None if arm == COLOCATED else arm.split(" ")[1]


def pd_arms(ds, route=None) -> list:
    return [a for a in arms(ds) if a != COLOCATED and (route is None or route_of(a) == route)]


def at(ds, var, arm, load=None):
    """``var`` of one arm (at one load): an array over seeds (and replicas)."""
    x = ds[var].sel(arm=arm)
    if load is not None:
        x = x.sel({load_axis(ds): load})
    return x.values.astype(float)


def median(ds, var, arm, load=None) -> float:
    v = at(ds, var, arm, load)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if v.size else math.nan


def paired(ds, var, a, b=COLOCATED, load=None, relative=False):
    """(mean, low, high) of arm a − arm b per seed (``relative``: a / b − 1, in %)."""
    x, y = at(ds, var, a, load), at(ds, var, b, load)
    d = (x / y - 1.0) * 100.0 if relative else x - y
    return interval(d)


def capacities(ds):
    """``routesim.capacity.capacities`` of a synthetic workload's runs (:data:`RULE`,
    :data:`CRITERION`): a Dataset with ``capacity_rps`` (arm), its interval and
    ``capacity_rps_seed`` (arm, seed)."""
    runs = ds.drop_vars([v for v in ds.data_vars if "replica" in ds[v].dims])
    if "replica" in runs.dims:
        runs = runs.drop_dims("replica")
    return capacity.capacities(runs, CRITERION, RULE, "1")


def capacity_diffs(cap) -> dict:
    """{arm: (mean, low, high)} of the per-seed capacity against co-located's, every
    disaggregated arm. A seed whose capacity is below the lowest load counts as 0."""
    seed = cap.capacity_rps_seed.fillna(0.0)
    base = seed.sel(arm=COLOCATED).values
    return {str(a): interval(seed.sel(arm=a).values - base) for a in cap.arm.values if str(a) != COLOCATED}


def best_arm(ds, cap=None) -> str:
    """The disaggregated arm with the highest capacity (synthetic loads), ties by the
    mean of its seeds' own capacities; with no capacity (``cap`` None: the trace), the
    highest median goodput at the heaviest load. Remaining ties by the median goodput at
    the heaviest load, then by name."""
    top = loads(ds)[-1]

    def key(a):
        if cap is None:
            c = s = 0.0
        else:
            c = float(cap.capacity_rps.sel(arm=a))
            c = c if math.isfinite(c) else -1.0
            s = float(cap.capacity_rps_seed.sel(arm=a).fillna(0.0).mean())
        return (-c, -s, -median(ds, "goodput", a, top), a)
    return min(pd_arms(ds), key=key)


def parts(ds, arm, load):
    """{part: median over seeds} of the TTFT's parts (p50s, ms) of one arm at one load,
    with the TTFT p50 and the busiest link's utilisation beside."""
    out = {p: median(ds, f"ttft_{p}_p50", arm, load) for p in ("prefill_queue", "prefill", "transfer", "decode_queue")}
    out["ttft_p50"] = median(ds, "ttft_p50", arm, load)
    link = ds["link_utilization"].sel(arm=arm, **{load_axis(ds): load}).max("replica").values.astype(float)
    out["link_max"] = float(np.median(link[np.isfinite(link)])) if np.isfinite(link).any() else math.nan
    return out


def steady_loads(ds, arm, cap) -> list:
    """The loads at or below an arm's capacity; with no capacity (``cap`` None: the
    trace), the loads at which the arm's median attainment meets :data:`CRITERION`."""
    if cap is None:
        return [x for x in loads(ds) if median(ds, "attainment", arm, x) >= CRITERION.bound]
    c = float(cap.capacity_rps.sel(arm=arm))
    return [x for x in loads(ds) if math.isfinite(c) and x <= c]


# ---------------------------------------------------------------------------------------
# The claims' verdicts: each a small function of plain values, so that a test can hold
# it to hand-built inputs.
# ---------------------------------------------------------------------------------------

def verdict_no_gain(diffs: dict) -> str:
    """C1: no split raises the capacity. ``diffs``: {arm: (mean, low, high)} of the
    paired capacity differences against co-located. 'does not hold' when some arm's
    interval lies above 0; 'holds' when every arm's lies below 0 or at most touches it
    with a mean at or below 0; 'holds with qualification' otherwise (a gain on average
    that the seeds do not show)."""
    if any(excludes_zero(v) > 0 for v in diffs.values()):
        return "does not hold"
    if all(v[0] <= 0 for v in diffs.values()):
        return "holds"
    return "holds with qualification"


def verdict_gain(diffs: dict, favoured) -> str:
    """C2: a split the claim favours (``favoured``: arms) raises the capacity. 'holds'
    when one of them has an interval above 0; 'holds with qualification' when only
    another split's does; 'does not hold' when none does."""
    up = [a for a, v in diffs.items() if excludes_zero(v) > 0]
    if any(a in favoured for a in up):
        return "holds"
    return "holds with qualification" if up else "does not hold"


def verdict_every_load(per_load: dict) -> str:
    """C3: at every load some split's goodput is above co-located's. ``per_load``:
    {load: {arm: (mean, low, high)}} of paired goodput differences. 'holds' when at
    every load some interval lies above 0; 'holds with qualification' when at some;
    'does not hold' when at none."""
    shown = [any(excludes_zero(v) > 0 for v in d.values()) for d in per_load.values()]
    if shown and all(shown):
        return "holds"
    return "holds with qualification" if any(shown) else "does not hold"


def verdict_ratio(best: dict) -> str:
    """C4: the long-prompt workloads' best split has more prefill replicas than the
    chat mix's. ``best``: {workload: arm}; 'holds' when both code's and Mooncake's best
    have more than chat's, 'holds with qualification' when one has, 'does not hold'
    otherwise."""
    chat = split_of(best["chat"])[0]
    more = [split_of(best[w])[0] > chat for w in ("code", "mooncake")]
    if all(more):
        return "holds"
    return "holds with qualification" if any(more) else "does not hold"


def verdict_lower(cells: dict) -> str:
    """C5: every cell's difference is below 0. ``cells``: {label: (mean, low, high)}.
    'holds' when every interval lies below 0; 'holds with qualification' when more than
    half do and none lies above; 'does not hold' otherwise."""
    signs = [excludes_zero(v) for v in cells.values()]
    if signs and all(s < 0 for s in signs):
        return "holds"
    if signs and sum(s < 0 for s in signs) * 2 > len(signs) and not any(s > 0 for s in signs):
        return "holds with qualification"
    return "does not hold"


def verdict_close(cells: dict, bound=CLOSE_PCT) -> str:
    """C6: every cell's relative difference (%) lies within ±bound. 'holds' when every
    interval does; 'does not hold' when some interval lies wholly beyond the bound;
    'holds with qualification' otherwise (none shown beyond, some too wide)."""
    beyond = [v for v in cells.values() if v[1] > bound or v[2] < -bound]
    if beyond:
        return "does not hold"
    if all(-bound <= v[1] and v[2] <= bound for v in cells.values()):
        return "holds"
    return "holds with qualification"


def verdict_at_least(cells: dict) -> str:
    """C7: no cell's difference is below 0, and some is above. ``cells``: {label:
    (mean, low, high)} of selective − independent. 'does not hold' when some interval
    lies below 0; 'holds' when none does and some lies above; 'holds with
    qualification' when none lies either side."""
    signs = [excludes_zero(v) for v in cells.values()]
    if any(s < 0 for s in signs):
        return "does not hold"
    return "holds" if any(s > 0 for s in signs) else "holds with qualification"


def verdict_small(shares: list, links: list) -> str:
    """C8: the transfer is under :data:`TRANSFER_SHARE` of the TTFT p50 and the busiest
    link under :data:`LINK_BUSY` in every cell (``shares``, ``links``: the cells'
    values; NaN cells skipped). 'holds' or 'does not hold'; 'nothing to compare' when
    every cell is NaN."""
    s = [x for x in shares if math.isfinite(x)]
    link = [x for x in links if math.isfinite(x)]
    if not s and not link:
        return "nothing to compare"
    return "holds" if all(x < TRANSFER_SHARE for x in s) and all(x < LINK_BUSY for x in link) else "does not hold"


def load(results_dir) -> dict:
    """{workload: Dataset} of the results folder's files that exist."""
    from pathlib import Path
    out = {}
    for w in WORKLOADS:
        path = Path(results_dir) / f"{w}.nc"
        if path.exists():
            out[w] = results.load(path)
    return out

