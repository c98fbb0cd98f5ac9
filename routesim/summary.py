"""Readable summary tables of a stage's Dataset (what the command line prints)."""

import numpy as np
import xarray as xr

from .config import Selection
from .metrics import VARIABLES
from .study import objective
from .tables import fmt, text_table


def policy_rows(ds: xr.Dataset):
    """Per policy (and per exploration weight when several): the headline numbers.

    attainment: mean over runs; p50, p99, shed rate, goodput: median over runs (runs
    without a completed request excluded from latency); p99 range: min–max over runs.
    """
    rows = []
    by_expl = ds.sizes["exploration"] > 1
    for pol in ds.policy.values:
        for c in ds.exploration.values:
            sub = ds.sel(policy=pol, exploration=c)
            p99 = sub.latency_p99.values.ravel()
            p99 = p99[np.isfinite(p99)]
            rows.append([pol] + ([f"{c:g}"] if by_expl else []) + [
                sub.attainment.size,
                fmt(100 * float(np.nanmean(sub.attainment.values)), ".2f"),
                fmt(float(np.nanmedian(sub.latency_p50.values)), ".1f"),
                fmt(float(np.nanmedian(sub.latency_p99.values)), ".1f"),
                f"{fmt(p99.min() if p99.size else np.nan, '.1f')}–{fmt(p99.max() if p99.size else np.nan, '.1f')}",
                fmt(100 * float(np.nanmedian(sub.shed_rate.values)), ".2f"),
                fmt(float(np.nanmedian(sub.goodput.values)), ".1f"),
            ])
    headers = ["policy"] + (["c"] if by_expl else []) + [
        "runs", "attain %", "p50 ms", "p99 ms", "p99 min–max ms", "shed %", "goodput/s"]
    return headers, rows


def token_policy_rows(ds: xr.Dataset):
    """The batching model's headline numbers per policy (and per rate when several):
    attainment mean over runs; TTFT, TPOT and end-to-end p99, preemptions and prefix
    hit rate: medians over runs; shed and failed: percent of cohort arrivals."""
    rows = []
    by_rate = ds.sizes["rate_rps"] > 1
    for rate in ds.rate_rps.values:
        for pol in ds.policy.values:
            sub = ds.sel(policy=pol, rate_rps=rate)
            arrivals = float(sub.arrivals.sum())
            lost = (lambda v: fmt(100 * float(sub[v].sum()) / arrivals, ".2f") if arrivals else "—")
            rows.append(([f"{rate:g}"] if by_rate else []) + [
                pol, sub.attainment.size,
                fmt(100 * float(np.nanmean(sub.attainment.values)), ".2f"),
                fmt(float(np.nanmedian(sub.ttft_p99.values)), ".0f"),
                fmt(float(np.nanmedian(sub.tpot_p99.values)), ".1f"),
                fmt(float(np.nanmedian(sub.e2e_p99.values)), ".0f"),
                fmt(float(np.nanmedian(sub.preemptions.values)), ".0f"),
                fmt(100 * float(np.nanmedian(sub.prefix_hit_rate.values)), ".1f"),
                lost("shed"), lost("failed"),
                fmt(float(np.nanmedian(sub.goodput.values)), ".1f"),
            ])
    headers = (["req/s"] if by_rate else []) + [
        "policy", "runs", "attain %", "TTFT p99 ms", "TPOT p99 ms", "E2E p99 ms", "preempt",
        "prefix hit %", "shed %", "failed %", "goodput/s"]
    return headers, rows


def selection_rows(ds: xr.Dataset, select: Selection):
    obj = objective(ds, select)
    chosen = ds.attrs.get(f"selects_{select.parameter}")
    if ds.attrs.get("replica_kind") == "batching":
        from .batching.metrics import VARIABLES as table
    else:
        table = VARIABLES
    percent = table[select.metric][0] == "1"  # a fraction: shown in % like the policy table
    rows = [[f"{v:g}" if isinstance(v, float) else v, f"{100 * o:.4f}" if percent else f"{o:.6g}",
             "← selected" if v == chosen else ""]
            for v, o in zip(obj[select.parameter].values.tolist(), obj.values.tolist())]
    goal = "max" if select.maximize else "min"
    return [select.parameter, f"mean {select.metric}{' %' if percent else ''} ({goal})", ""], rows


def render(ds: xr.Dataset, select: Selection | None = None) -> str:
    """The stage's printed summary: its selection table (if any) and its policy table."""
    title = f"stage {ds.attrs['stage']}: {ds.attainment.size} runs"
    for k, v in ds.attrs.items():
        if k.startswith("selected_"):
            title += f", {k[len('selected_'):]} = {v:g} (selected)"
    parts = [title]
    if select is not None:
        parts.append(text_table(*selection_rows(ds, select), align="lrl"))
    if ds.attrs.get("replica_kind") == "batching":
        headers, rows = token_policy_rows(ds)
        lead = "rl" if headers[0] == "req/s" else "l"
        parts.append(text_table(headers, rows, align=lead + "r" * (len(headers) - len(lead))))
    else:
        parts.append(text_table(*policy_rows(ds)))
    return "\n\n".join(parts)
