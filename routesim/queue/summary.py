"""The queue model's printed table of a stage (what ``python -m routesim.sweep`` prints)."""

import numpy as np
import xarray as xr

from ..tables import fmt, legend as legend_text, slo_text, text_table


def policy_rows(ds: xr.Dataset):
    """Per policy (and per exploration weight when several): the headline numbers
    (:data:`LEGEND` says what each column is).

    attainment: mean over runs; p50, p99, goodput: median over runs (runs without a
    completed request excluded from latency); p99 range: min–max over runs; shed: the
    requests shed over the requests arrived, all runs of the row pooled.
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
                _pooled(sub.shed, sub.arrivals),
                fmt(float(np.nanmedian(sub.goodput.values)), ".1f"),
            ])
    headers = ["policy"] + (["c"] if by_expl else []) + [
        "runs", "attain %", "p50 ms", "p99 ms", "p99 min–max ms", "shed %", "goodput/s"]
    return headers, rows


def _pooled(part, whole) -> str:
    """``part`` over ``whole``, each summed over every run, in % (— when nothing arrived)."""
    total = float(whole.sum())
    return fmt(100 * float(part.sum()) / total, ".2f") if total else fmt(None, "")


def legend(ds: xr.Dataset, headers) -> str:
    """The lines under the table: what each of ``headers`` is, the SLO's value included."""
    meaning = {
        "attain %": (f"mean over runs of each run's share of arrivals completed within the SLO "
                     f"({slo_text(ds, 'slo_ms')} end to end)"),
        "p50 ms, p99 ms, goodput/s": "median over runs of each run's value",
        "p99 min–max ms": "lowest and highest run's p99",
        "shed %": "requests shed / requests arrived, all runs pooled",
        "c": "adaptive's exploration weight",
    }
    return legend_text([(h, m) for h, m in meaning.items() if all(x in headers for x in h.split(", "))])


def policy_table(ds: xr.Dataset) -> str:
    """The stage's policy table, as text, with its legend."""
    headers, rows = policy_rows(ds)
    return text_table(headers, rows) + "\n\n" + legend(ds, headers)
