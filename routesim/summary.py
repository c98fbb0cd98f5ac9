"""Readable summary tables of a stage's Dataset (what the command line prints)."""

import itertools

import numpy as np
import xarray as xr

from .config import Selection
from .queue.metrics import VARIABLES
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


TOKEN_LABELS = ("policy", "scenario", "heterogeneity")
"""Label columns of the batching table that are left-aligned (besides swept keys with text values)."""
TOKEN_STANDARD = ("policy", "rate_rps", "heterogeneity", "scenario", "seed")


def _key_text(v):
    v = v.item() if hasattr(v, "item") else v
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def token_policy_rows(ds: xr.Dataset):
    """The batching model's headline numbers per policy, and per rate, scenario and
    heterogeneity setting when there are several, and per value of each swept key:
    attainment mean over runs; TTFT, TPOT and end-to-end p99, preemptions and prefix
    hit rate: medians over runs; shed and failed: percent of cohort arrivals. When
    the Dataset has any: rejected (percent of cohort arrivals), attempts per cohort
    request (when any retry), wasted tokens (median over runs, thousands) and breaker
    ejections (median over runs)."""
    groups = [d for d in ("rate_rps", "scenario", "heterogeneity") if ds.sizes.get(d, 1) > 1]
    swept = [d for d in ds.attainment.dims if d not in TOKEN_STANDARD]
    has = {v: v in ds and float(ds[v].sum()) > 0 for v in ("rejected", "retries", "wasted_tokens", "breaker_ejections")}
    order = groups[:1] + groups[1:] + ["policy"] + swept  # rate first, as before
    names = {"rate_rps": "req/s", "scenario": "scenario", "heterogeneity": "heterogeneity", "policy": "policy"}
    rows = []
    for combo in itertools.product(*(ds[d].values for d in order)):
        sub = ds.sel(dict(zip(order, combo)))
        arrivals = float(sub.arrivals.sum())
        lost = (lambda v: fmt(100 * float(sub[v].sum()) / arrivals, ".2f") if arrivals else "—")
        labels = [f"{c:g}" if d == "rate_rps" else _key_text(c) for d, c in zip(order, combo)]
        row = labels + [
            sub.attainment.size,
            fmt(100 * float(np.nanmean(sub.attainment.values)), ".2f"),
            fmt(float(np.nanmedian(sub.ttft_p99.values)), ".0f"),
            fmt(float(np.nanmedian(sub.tpot_p99.values)), ".1f"),
            fmt(float(np.nanmedian(sub.e2e_p99.values)), ".0f"),
            fmt(float(np.nanmedian(sub.preemptions.values)), ".0f"),
            fmt(100 * float(np.nanmedian(sub.prefix_hit_rate.values)), ".1f"),
            lost("shed"), lost("failed"),
        ]
        if has["rejected"]:
            row.append(lost("rejected"))
        if has["retries"]:
            row.append(fmt(float(sub.attempts.sum()) / arrivals, ".3f") if arrivals else "—")
        if has["wasted_tokens"]:
            row.append(fmt(float(np.nanmedian(sub.wasted_tokens.values)) / 1000.0, ".1f"))
        if has["breaker_ejections"]:
            row.append(fmt(float(np.nanmedian(sub.breaker_ejections.values)), ".0f"))
        row.append(fmt(float(np.nanmedian(sub.goodput.values)), ".1f"))
        rows.append(row)
    headers = [names.get(d, d) for d in order] + [
        "runs", "attain %", "TTFT p99 ms", "TPOT p99 ms", "E2E p99 ms", "preempt",
        "prefix hit %", "shed %", "failed %"]
    headers += [h for h, on in (("rejected %", has["rejected"]), ("attempts/req", has["retries"]),
                                ("wasted k tok", has["wasted_tokens"]), ("ejections", has["breaker_ejections"])) if on]
    headers.append("goodput/s")
    return headers, rows


def token_align(headers, rows) -> str:
    """'l'/'r' per column of :func:`token_policy_rows`: label columns left (a swept
    key's too, unless its values are numbers), every number right."""
    out = []
    for k, h in enumerate(headers):
        if h in TOKEN_LABELS:
            out.append("l")
        elif k < headers.index("runs") and h != "req/s":
            numeric = all(_is_number(r[k]) for r in rows)
            out.append("r" if numeric else "l")
        else:
            out.append("r")
    return "".join(out)


def _is_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


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
        parts.append(text_table(headers, rows, align=token_align(headers, rows)))
    else:
        parts.append(text_table(*policy_rows(ds)))
    return "\n\n".join(parts)
