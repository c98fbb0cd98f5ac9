"""The batching model's printed table of a stage (what ``python -m routesim.sweep`` prints)."""

import itertools

import numpy as np
import xarray as xr

from .. import steady
from ..tables import fmt, legend as legend_text, slo_text, text_table

TOKEN_LABELS = ("policy", "scenario", "heterogeneity")
"""Label columns of the batching table that are left-aligned (besides swept keys with text values)."""

TOKEN_STANDARD = ("policy", "rate_rps", "heterogeneity", "scenario", "seed")



def _median(values) -> float:
    """The median of the values that are not NaN; NaN (without NumPy's all-NaN warning,
    which a user would read as a fault) when none is, e.g. the client's wait in an open
    loop's rows."""
    v = np.asarray(values, dtype=float).ravel()
    v = v[~np.isnan(v)]
    return float(np.median(v)) if v.size else float("nan")


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
    ejections (median over runs). Unfinished: percent of cohort arrivals still in the
    system when the run stopped. When the Dataset has them: ITL p99 (median over runs)
    and the steady-state check (``routesim.steady``): backlog growth and the rise of KV
    occupancy over the window, medians over runs; how many of the row's runs the per-run
    check flags (``k/n``); and ``no`` in the steady column when any run is flagged or the
    medians show a trend. With a closed-loop client (``client_wait_p99`` in the Dataset):
    the client's wait p99 and the throughput (completions in the window per second;
    medians over runs), since a closed loop's goodput counts every cohort request,
    whenever the client sent it. With prefill/decode pools (``transfer_count`` in the
    Dataset): the TTFT's four parts (p50s of the disaggregated requests: prefill queue,
    prefill, transfer, decode queue), the transfers ended in the window, the busiest
    replica link's utilisation and the share of placements sent to a pair (medians over
    runs; :func:`pd_cells`)."""
    groups = [d for d in ("rate_rps", "scenario", "heterogeneity") if ds.sizes.get(d, 1) > 1]
    swept = [d for d in ds.attainment.dims if d not in TOKEN_STANDARD]
    has = {v: v in ds and float(ds[v].sum()) > 0 for v in ("rejected", "retries", "wasted_tokens", "breaker_ejections")}
    itl = "itl_p99" in ds
    client = "client_wait_p99" in ds
    pools = "transfer_count" in ds
    check = steady.has_check(ds)
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
            fmt(_median(sub.ttft_p99.values), ".0f"),
            fmt(_median(sub.tpot_p99.values), ".1f"),
            *([fmt(_median(sub.itl_p99.values), ".0f")] if itl else []),
            fmt(_median(sub.e2e_p99.values), ".0f"),
            fmt(_median(sub.preemptions.values), ".0f"),
            fmt(100 * _median(sub.prefix_hit_rate.values), ".1f"),
            lost("shed"), lost("failed"), lost("unfinished"),
        ]
        if has["rejected"]:
            row.append(lost("rejected"))
        if has["retries"]:
            row.append(fmt(float(sub.attempts.sum()) / arrivals, ".3f") if arrivals else "—")
        if has["wasted_tokens"]:
            row.append(fmt(_median(sub.wasted_tokens.values) / 1000.0, ".1f"))
        if has["breaker_ejections"]:
            row.append(fmt(_median(sub.breaker_ejections.values), ".0f"))
        row.append(fmt(_median(sub.goodput.values), ".1f"))
        if client:
            row += [fmt(_median(sub.client_wait_p99.values), ".0f"),
                    fmt(_median(sub.throughput.values), ".1f")]
        if pools:
            row += pd_cells(sub)
        if check:
            growth, rise = steady.trend(sub)
            bad, ran = steady.count_unsteady(sub)
            row += [fmt(_median(sub.backlog_growth.values), ".0f"), fmt(100 * rise, "+.1f"), f"{bad}/{ran}",
                    "yes" if steady.is_steady(growth, rise) and not bad else "no"]
        rows.append(row)
    headers = [names.get(d, d) for d in order] + [
        "runs", "attain %", "TTFT p99 ms", "TPOT p99 ms", *(["ITL p99 ms"] if itl else []), "E2E p99 ms",
        "preempt", "prefix hit %", "shed %", "failed %", "unfinished %"]
    headers += [h for h, on in (("rejected %", has["rejected"]), ("attempts/req", has["retries"]),
                                ("wasted k tok", has["wasted_tokens"]), ("ejections", has["breaker_ejections"])) if on]
    headers.append("goodput/s")
    if client:
        headers += ["client wait p99 ms", "throughput/s"]
    if pools:
        headers += list(PD_HEADERS)
    if check:
        headers += ["backlog Δ", "KV occ. Δ pts", "runs not steady", "steady"]
    return headers, rows


PD_HEADERS = ("pre-queue ms", "prefill ms", "transfer ms", "dec-queue ms", "transfers", "link util %", "paired %")
"""The columns of prefill/decode disaggregation (:func:`pd_cells`)."""


def pd_cells(sub: xr.Dataset) -> list:
    """A row's disaggregation cells: the p50s of the TTFT's parts (ms), transfers ended
    in the window, the busiest replica's link utilisation (%) and the share of
    placements sent to a pair (%), each the median over the row's runs (a co-located
    run's parts are NaN and left out; its utilisation and pairs are 0 and NaN)."""
    busiest = sub.link_utilization.max("replica") if "replica" in sub.link_utilization.dims else sub.link_utilization
    return [fmt(_median(sub[f"ttft_{part}_p50"].values), ".1f")
            for part in ("prefill_queue", "prefill", "transfer", "decode_queue")] + [
        fmt(_median(sub.transfer_count.values), ".0f"), fmt(100 * _median(busiest.values), ".1f"),
        fmt(100 * _median(sub.disaggregated_share.values), ".0f")]


def token_align(headers, rows) -> str:
    """'l'/'r' per column of :func:`token_policy_rows`: label columns left (a swept
    key's too, unless its values are numbers), every number right."""
    out = []
    for k, h in enumerate(headers):
        if h in TOKEN_LABELS:
            out.append("l")
        elif h == "steady":
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


POOLED = ("shed %", "failed %", "unfinished %", "rejected %", "attempts/req")
"""Columns that count over every request that arrived, all runs of the row pooled."""


def ttft_slo_text(ds: xr.Dataset) -> str:
    """The TTFT objective as text: ``"1000 ms"``, or scaled to prompt length (a Dataset
    attribute only when not 0) ``"500 ms + 0.1 ms/token × prompt tokens"``."""
    base = slo_text(ds, "slo_ttft_ms")
    per = "slo_ttft_ms_per_prompt_token"
    if per in ds.dims or ds.attrs.get(per, 0) > 0:
        return f"{base} + {slo_text(ds, per, 'ms/token')} × prompt tokens"
    return base


def legend(ds: xr.Dataset, headers) -> str:
    """The lines under the table: what the columns are, the SLOs' values included."""
    slo = f"TTFT ≤ {ttft_slo_text(ds)} and TPOT ≤ {slo_text(ds, 'slo_tpot_ms')}"
    items = [("attain %", f"mean over runs of each run's share of arrivals completed within the SLO ({slo})"),
             (", ".join(h for h in POOLED if h in headers), "per request arrived, all runs pooled"),
             ("backlog Δ", "growth of the requests in the system over the window"),
             ("KV occ. Δ pts", "rise of the KV occupancy from the window's first quarter to its last"),
             ("runs not steady", f"runs of the row whose own window was not steady: {steady.run_rule()}"),
             ("steady", f"no when a run is not steady or the medians over runs show backlog Δ above "
                        f"{100 * steady.BACKLOG_SHARE:g} % of arrivals or KV occ. Δ above "
                        f"{100 * steady.OCCUPANCY_RISE:g} pts"),
             (", ".join(PD_HEADERS[:4]), "prefill/decode pools: the parts of the TTFT of the disaggregated "
                                         "requests (their p50s): routing to admission on the prefill replica, "
                                         "the prefill, the KV transfer, the rest on the decode replica"),
             ("link util %", "the busiest replica's link: (bytes/ms out + in) / (2 bandwidth) over the window"),
             ("paired %", "placements sent to a pair (the selective rule serves the others on a decode replica)"),
             ("every other column but runs", "median over runs of each run's value")]
    return legend_text([(h, m) for h, m in items if h.startswith("every other") or (h and h.split(", ")[0] in headers)])


def policy_table(ds: xr.Dataset) -> str:
    """The stage's policy table, as text, with its legend and a warning for the rows that
    were not steady."""
    headers, rows = token_policy_rows(ds)
    text = text_table(headers, rows, align=token_align(headers, rows)) + "\n\n" + legend(ds, headers)
    if "steady" in headers:
        col = headers.index("steady")
        unsteady = sum(r[col] == "no" for r in rows)
        if unsteady:
            text += (f"\n\nwarning: {unsteady} of {len(rows)} rows were not in a steady state over their window "
                     f"({steady.rule()}): their numbers describe a transient (the KV cache still filling: lengthen "
                     f"warmup_s) or a collapse (the load is beyond what those runs sustain)")
    return text
