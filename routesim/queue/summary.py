"""The queue model's printed table of a stage (what ``python -m routesim.sweep`` prints)."""

import numpy as np
import xarray as xr

from ..tables import fmt, text_table


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


def policy_table(ds: xr.Dataset) -> str:
    """The stage's policy table, as text."""
    return text_table(*policy_rows(ds))
