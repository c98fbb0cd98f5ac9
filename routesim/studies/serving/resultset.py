"""The serving validation's results as its figures and its report read them: one home
for both.

Telling a results folder's stages apart, squeezing a Dataset to the dimensions a
figure or table expects, the traced condition and scenarios, the timelines traced
from the sweep text a Dataset carries, and the derived numbers (mean demand,
capacity, how fast ŝ follows a straggler, the straggler's share of the routing
decisions). :mod:`.figures` only draws these and :mod:`.report` only writes them.
"""

from pathlib import Path

import numpy as np
import xarray as xr

from ...queue.dtypes import EVENT_NAMES, EventKind
from ...results import sweep_of

LAG_ALPHAS = (0.05, 0.3, 0.6)
"""α values of the estimate-lag figure and table, besides the sweep's own."""

TIMELINE_KINDS = (("straggler", EventKind.SLOWDOWN), ("failure", EventKind.FAIL))
"""The timelines drawn and reported: (key, the event kind of their scenario)."""


# --------------------------------------------------------------------------------------
# A results folder's stages
# --------------------------------------------------------------------------------------

def selected_parameter(ds: xr.Dataset):
    """The parameter a stage's Dataset selects (its ``selects_<name>`` attr), or None."""
    return next((k[len("selects_"):] for k in ds.attrs if k.startswith("selects_")), None)


def stages(results: dict):
    """(development, validation): the selecting stage and the stage that compares policies."""
    dev = next((ds for ds in results.values() if selected_parameter(ds) is not None), None)
    val = next((ds for ds in reversed(list(results.values())) if ds.sizes.get("policy", 0) > 1), None)
    return dev, val


def squeeze(ds: xr.Dataset, keep=("policy", "rate_rps", "heterogeneity", "scenario", "seed", "replica")):
    """Drop length-1 dimensions not in ``keep``; refuse a Dataset with other swept ones."""
    for d in list(ds.dims):
        if d in keep or d in ("level",):
            continue
        if ds.sizes[d] == 1:
            ds = ds.isel({d: 0})
        elif d != "exploration" or "exploration" not in keep:
            raise ValueError(f"cannot plot a Dataset swept over {d!r} ({ds.sizes[d]} values)")
    return ds


def steady(ds: xr.Dataset) -> xr.Dataset:
    """The ``steady`` scenario of a Dataset (else its first), when scenario is a dimension."""
    if "scenario" in ds.dims:
        return ds.sel(scenario="steady") if "steady" in ds.scenario.values else ds.isel(scenario=0)
    return ds


def scenario_with(sweep, kind):
    """The first scenario of the sweep with an event of this kind (a slowdown > 1 for SLOWDOWN)."""
    for name, events in sweep.scenarios.items():
        for e in events:
            if e.kind == kind and (kind != EventKind.SLOWDOWN or e.value > 1):
                return name
    return None


def scenario_in(val: xr.Dataset, kind, sweep=None):
    """:func:`scenario_with` when the Dataset ran that scenario, else None."""
    name = scenario_with(sweep if sweep is not None else sweep_of(val), kind)
    return name if name is not None and name in [str(s) for s in val.scenario.values] else None


def timeline_scenarios(val: xr.Dataset, sweep=None) -> dict:
    """{key: scenario name} of the :data:`TIMELINE_KINDS` the Dataset ran, in order."""
    sweep = sweep if sweep is not None else sweep_of(val)
    found = {key: scenario_in(val, kind, sweep) for key, kind in TIMELINE_KINDS}
    return {key: name for key, name in found.items() if name is not None}


def condition(val: xr.Dataset) -> dict:
    """The traced condition: the highest rate, the default (else first) heterogeneity, the first seed."""
    hets = [str(h) for h in val.heterogeneity.values]
    return dict(rate_rps=float(val.rate_rps.values.max()),
                heterogeneity="default" if "default" in hets else hets[0],
                seed=int(val.seed.values[0]))


# --------------------------------------------------------------------------------------
# Scenario events
# --------------------------------------------------------------------------------------

def event_text(at_s, kind: str, replica: int, value, long=False) -> str:
    """``"<t> s: <what>"`` of one event (``kind`` as in :data:`dtypes.EVENT_NAMES`,
    ``replica`` 1-based): short for a figure's title, ``long`` for the report."""
    t = f"{at_s:g} s"
    if kind == "rate_multiplier":
        return f"{t}: arrival rate ×{value:g}" if long else f"{t}: rate ×{value:g}"
    if kind == "slowdown":
        if value == 1:
            return f"{t}: replica {replica} back to full speed"
        return f"{t}: replica {replica} serves ×{value:g} slower" if long else f"{t}: replica {replica} slowdown ×{value:g}"
    if kind == "fail":
        return f"{t}: replica {replica} fails" + (" (its waiting queue is re-routed)" if long else "")
    return f"{t}: replica {replica} recovers"


def sweep_event_text(ev) -> str:
    """:func:`event_text` (long) of a sweep's Event."""
    return event_text(ev.at_s, EVENT_NAMES[ev.kind], ev.replica + 1, ev.value, long=True)


def trace_events_text(tl: xr.Dataset) -> str:
    """The events of a trace, short, joined by "; "."""
    return "; ".join(event_text(float(tl.event_time.values[k]), str(tl.event_kind.values[k]),
                                int(tl.event_replica.values[k]), float(tl.event_value.values[k]))
                     for k in range(tl.sizes.get("event", 0)))


def straggler_event(tl: xr.Dataset):
    """(replica, onset s, factor, recovery s or None) of a trace's first slowdown > 1."""
    kinds = tl.event_kind.values
    for k in range(kinds.shape[0]):
        if kinds[k] == "slowdown" and tl.event_value.values[k] > 1:
            rep = int(tl.event_replica.values[k])
            rec = [float(tl.event_time.values[m]) for m in range(k + 1, kinds.shape[0])
                   if kinds[m] == "slowdown" and int(tl.event_replica.values[m]) == rep]
            return rep, float(tl.event_time.values[k]), float(tl.event_value.values[k]), (rec[0] if rec else None)
    return None


# --------------------------------------------------------------------------------------
# Timelines traced from a Dataset's sweep text
# --------------------------------------------------------------------------------------

def timeline_traces(val: xr.Dataset) -> dict:
    """{"straggler": trace, "failure": trace} of every policy at :func:`condition`."""
    from ...timeline import trace
    return {key: trace(val, scenario=name, **condition(val)) for key, name in timeline_scenarios(val).items()}


def lag_trace(val: xr.Dataset, seed=None):
    """The straggler scenario at :func:`condition` (or the given seeds) for the policies
    that route on ŝ, with α swept over the sweep's value and :data:`LAG_ALPHAS`; None
    without a straggler."""
    from ...timeline import trace
    name = scenario_in(val, EventKind.SLOWDOWN)
    if name is None:
        return None
    pols = [p for p in ("latency_aware", "adaptive") if p in val.policy.values] or [str(val.policy.values[-1])]
    study = float(val.attrs.get("alpha", 0.15))
    cond = condition(val)
    if seed is not None:
        cond["seed"] = seed
    tl = trace(val, policy=pols, scenario=name, alpha=sorted(set(LAG_ALPHAS) | {study}), **cond)
    tl.attrs["alpha_study"] = study
    return tl


def reach_time(t, s_hat, true, onset, frac=0.9):
    """Seconds after ``onset`` until ŝ first covers ``frac`` of the step of the true
    mean (NaN if it never does before the next change of the true mean)."""
    i0 = int(np.searchsorted(t, onset, side="left"))
    before, after = true[max(i0 - 1, 0)], true[min(i0 + 1, len(true) - 1)]
    target = before + frac * (after - before)
    for i in range(i0, len(t)):
        if true[i] != after:
            break
        if (after > before and s_hat[i] >= target) or (after < before and s_hat[i] <= target):
            return float(t[i] - onset)
    return float("nan")


def straggler_share(val):
    """Share of the assignments that went to the straggling replica before, during and
    after the slowdown, per rate, policy and seed, at the figures' heterogeneity setting
    (None, None without a straggler scenario)."""
    from ...timeline import trace
    name = scenario_in(val, EventKind.SLOWDOWN)
    if name is None:
        return None, None
    cond = condition(val)
    shares = []
    for rate in val.rate_rps.values:
        tl = trace(val, scenario=name, rate_rps=float(rate), heterogeneity=cond["heterogeneity"],
                   seed=[int(s) for s in val.seed.values])
        rep, onset, factor, recovery = straggler_event(tl)
        end = float(tl.time.values[-1])
        edges = [float(tl.attrs["warmup_s"]), onset, recovery if recovery is not None else end, end]
        cum = tl.assignments.cumsum("time")
        parts = []
        for a, b in zip(edges[:-1], edges[1:]):  # decisions in (a, b]
            got = cum.sel(time=b, method="nearest") - cum.sel(time=a, method="nearest")
            parts.append(got.sel(replica=rep) / got.sum("replica"))
        share = xr.concat(parts, dim=xr.DataArray(["before", "during", "after"], dims="period"))
        shares.append(share.drop_vars([c for c in share.coords if c not in ("policy", "seed", "period")]))
    share = xr.concat(shares, dim=xr.DataArray(val.rate_rps.values, dims="rate_rps", name="rate_rps"))
    info = dict(name=name, replica=rep, onset=onset, factor=factor, recovery=recovery, edges=edges,
                heterogeneity=cond["heterogeneity"])
    return share, info


# --------------------------------------------------------------------------------------
# Capacity
# --------------------------------------------------------------------------------------

def mean_demand(ds: xr.Dataset) -> float:
    """E[demand × jitter] of a Dataset's workload parameters (its attrs)."""
    from ...queue.params import DEMAND_PARAMETERS
    from ...theory import mean_demand_ms
    return mean_demand_ms({n: (ds.attrs[n],) for n in DEMAND_PARAMETERS if n in ds.attrs})


def capacity_rps(ds: xr.Dataset, heterogeneity, mean_demand_ms) -> float:
    """Σ_i 1 / E[service_i] in requests/s: replica i serves a mean request in
    mean_service_ms[i] / reference demand × E[demand × jitter] (grid rounding ignored)."""
    ms = ds.mean_service_ms.sel(heterogeneity=heterogeneity).values
    return float(np.sum(1000.0 / (ms / float(ds.attrs["reference_demand_ms"]) * mean_demand_ms)))


# --------------------------------------------------------------------------------------
# Which folders hold the study's results
# --------------------------------------------------------------------------------------

SWEEP = "sweeps/exploration.toml"
"""The sweep whose results the serving study reads."""

STAGES = ("development", "validation")
"""Its stages: the selection and the comparison of policies (a folder may hold one of
them: ``--stage`` ran only that one)."""

LOAD_CURVE_SWEEP, LOAD_CURVE_STAGE = "sweeps/load-curve.toml", "load-curve"
"""The hockey stick's sweep and the stage the figure and the report read."""


def _describe(attrs: dict) -> str:
    """What a folder's stage files are: their stages, sweeps and models."""
    if not attrs:
        return "no stage files"
    stages = ", ".join(a.get("stage", f"{name} (not routesim results)") for name, a in attrs.items())
    sweeps = sorted({a["sweep_name"] for a in attrs.values() if "sweep_name" in a})
    kinds = sorted({a.get("replica_kind", "queue") for a in attrs.values() if "stage" in a})
    return (f"stage{'s' if len(attrs) > 1 else ''} {stages}" + (f" of the {', '.join(sweeps)} sweep" if sweeps else "")
            + (f", {' and '.join(kinds)} model" if kinds else ""))


def _queue_stages(attrs: dict) -> set:
    return {a["stage"] for a in attrs.values() if "stage" in a and a.get("replica_kind", "queue") == "queue"}


def not_the_study(results_dir):
    """None when a results folder holds the study's results (queue-model stages, each
    one of :data:`STAGES`), else the one line that says what it holds instead. Reads
    only the files' attributes."""
    from ..folders import stage_attrs
    attrs = stage_attrs(results_dir)
    names = {a.get("stage") for a in attrs.values()}
    if attrs and names <= set(STAGES) and _queue_stages(attrs) == names:
        return None
    return (f"{results_dir}: not the results of {SWEEP} (its stages {' and '.join(STAGES)}, queue model; "
            f"here: {_describe(attrs)}); for any sweep's results use python -m routesim.plot RESULTS.nc")


def load_curve_stage(load_curve_dir):
    """The load curve's stage Dataset (:data:`LOAD_CURVE_STAGE`, queue model) of a
    results folder, or None when the folder does not hold it."""
    from ..folders import load
    ds = load(load_curve_dir).get(LOAD_CURVE_STAGE)
    return ds if ds is not None and ds.attrs.get("replica_kind", "queue") == "queue" else None


def not_a_load_curve(load_curve_dir):
    """None when a folder holds the load curve's stage, else why not (one line)."""
    from ..folders import stage_attrs
    attrs = stage_attrs(load_curve_dir) if Path(load_curve_dir).is_dir() else {}
    if LOAD_CURVE_STAGE in _queue_stages(attrs):
        return None
    return (f"{load_curve_dir}: not the results of {LOAD_CURVE_SWEEP} (its stage {LOAD_CURVE_STAGE}, queue "
            f"model; here: {_describe(attrs)})")


def default_load_curve(results_dir):
    """``results/load-curve/`` beside ``results/<name>/``, when it exists (whatever it
    holds: :func:`not_a_load_curve` says whether it is the load curve)."""
    cand = Path(results_dir).resolve().parent / "load-curve"
    return cand if cand.is_dir() and cand != Path(results_dir).resolve() and any(cand.glob("*.nc")) else None
