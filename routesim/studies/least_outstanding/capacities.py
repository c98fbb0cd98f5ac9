"""The least-outstanding study's capacity table (issue 23 item 1): each compared policy's
capacity at the SLO (``python -m routesim.capacity``'s default rule: TTFT p99 at most 1 s
in at least 90 % of the seeds' windows and no window unsteady), on the default workload
and on the Mooncake excerpt;
the document's first section. Not a claim (``row`` is None): every claim places its
loads against these figures (:func:`.common.capacity`).

``run(results_root, quiet, resume)`` computes it (the study command calls it before the
sweeps): stage ``default`` of sweeps/token-routing-capacity.toml by ``python -m
routesim.capacity`` (results/token-routing-capacity/default-capacity.nc), and the
stage ``azure`` (the same search on Azure lengths: azure-capacity.nc), and the
``mooncake-*`` stages by ``python -m routesim.sweep``; a trace brings its own arrivals,
so its load is set by ``time_scale``, not searched on ``rate_rps``: the capacity rule
(:func:`routesim.capacity.capacities`) is applied over the three time scales, each
read as the request rate of its window, and written as
results/token-routing-capacity/mooncake-capacity.nc in ``python -m routesim.capacity``'s
layout (``capacity_rps``: policy; ``capacity_rps_seed``: policy × seed; the runs: policy
× rate_rps × seed)."""

from pathlib import Path

import numpy as np
import xarray as xr

from ... import capacity as capacity_mod
from ... import steady
from .common import (CAPACITY_RESULTS, FIGURES, SERVER_CAPACITY, SERVER_SEARCH, SERVER_SWEEP, departures, details, finished, mark_finished, read,
                     save, squeeze)

SWEEP = "sweeps/token-routing-capacity.toml"
SWEEPS = (SWEEP,)
"""Run by :func:`run` (the study command hands this file to it, not to the sweep loop)."""
SEARCH = ("--stage", "default", "--points", "3", "--resolution", "2")
"""The default stage's search: rates on multiples of 2 req/s, 3 a round, inside the
stage's rate_rps bracket (28 to 48 req/s: below every policy's capacity, round_robin's 34
included)."""
AZURE_SEARCH = ("--stage", "azure", "--points", "3", "--resolution", "4")
"""The search on Azure lengths (issue 44 item 4; results/token-routing-capacity/
azure-capacity.nc), on multiples of 4 req/s inside the stage's bracket (88 to 112 req/s):
every claim's Azure-length arm is placed against its capacities (:mod:`.workloads`)."""
POLICIES = ("round_robin", "least_requests", "least_tokens", "power_of_d", "least_kv", "least_cost")
SCALES = ("0.5", "1", "1.5")
"""The Mooncake stages' time scales (stages mooncake-<scale> and mooncake-<scale>-pod)."""


def _mooncake_stages():
    return [f"mooncake-{s}{pod}" for s in SCALES for pod in ("", "-pod")]


def run(results_root, quiet=False, resume=False) -> int:
    """Run the capacity stage into ``results_root``/token-routing-capacity/; under
    ``resume`` a part this command finished with the same sweep file, routesim and search
    is kept (:func:`.common.finished`). Returns an exit status."""
    from ... import sweep as sweep_cli
    out = Path(results_root) / CAPACITY_RESULTS
    for part, search in (("default", SEARCH), ("azure", AZURE_SEARCH)):
        if not (resume and finished(out, part, SWEEP, [f"{part}-capacity.nc"], search)):
            rc = capacity_mod.main([SWEEP, *search, "--out", str(out)] + ["--quiet"] * quiet)
            if rc:
                return rc
            mark_finished(out, part, SWEEP, search)
    stages = [x for s in _mooncake_stages() for x in ("--stage", s)]
    if not (resume and finished(out, "mooncake", SWEEP, ["mooncake-capacity.nc"], stages)):
        rc = sweep_cli.main([SWEEP, *stages, "--out", str(out)] + ["--quiet", "--no-tables"] * quiet
                            + ["--resume"] * resume)
        if rc:
            return rc
        from ...results import write_atomic
        write_atomic(mooncake_capacity(out), out / "mooncake-capacity.nc")
        mark_finished(out, "mooncake", SWEEP, stages)
    return 0


def _criterion(ds):
    from ...batching.params import MODEL
    return capacity_mod.latency_criterion(MODEL, float(ds.attrs.get("slo_ttft_ms", 1000.0)),
                                          (ds.attrs.get("slo_ttft_ms_per_prompt_token", 0.0),))


def scaled(ds) -> float:
    """The runs' TTFT allowance per prompt token (ms/token; 0: one flat objective,
    ``slo_ttft_ms``), a Dataset attribute only when not 0."""
    return float(ds.attrs.get("slo_ttft_ms_per_prompt_token", 0.0))


def objective_text(ds) -> str:
    """The capacity criterion in words: the flat ``"TTFT p99 ≤ 1,000 ms"``, or each
    request's own objective when scaled to prompt length (``ttft_excess_p99 ≤ 0``)."""
    base = float(ds.attrs.get("slo_ttft_ms", 1000.0))
    if not scaled(ds):
        return f"TTFT p99 ≤ {base:,.0f} ms"
    return (f"99 % of completed requests within their own TTFT objective, {base:,.0f} ms + {scaled(ds):g} ms "
            f"per prompt token (`ttft_excess_p99` ≤ 0)")


def _flat(ds):
    """A stage's Dataset with every length-one axis but policy and seed dropped, and the
    per-replica variables left out."""
    ds = ds.isel({d: 0 for d in ds.dims if d not in ("policy", "seed") and ds.sizes[d] == 1}, drop=True)
    return ds[[v for v in ds.data_vars if "replica" not in ds[v].dims]]


def mooncake_runs(folder):
    """The mooncake stages' runs as one Dataset, policy × rate_rps × seed: rate_rps is
    each time scale's offered rate (median cohort arrivals / window, s⁻¹, rounded to
    0.01); the deterministic policies' one seed stands for every seed (a trace's seed
    drives only the router stream, token-model.md §1.2, so their runs would be
    identical)."""
    parts, attrs = [], None
    for s in SCALES:
        det, pod = (_flat(read(Path(folder) / f"mooncake-{s}{x}.nc"))
                    for x in ("", "-pod"))
        det = det.isel(seed=0, drop=True).expand_dims(seed=pod.seed.values).transpose("policy", "seed")
        both = xr.concat([det, pod.transpose("policy", "seed")], "policy")
        rate = float(np.median(det.arrivals.values)) / float(det.attrs["measure_s"])
        parts.append(both.expand_dims(rate_rps=[round(rate, 2)]))
        attrs = attrs or dict(det.attrs)
    ds = xr.concat(parts, "rate_rps").transpose("policy", "rate_rps", "seed")
    ds.attrs = attrs
    return ds


def mooncake_capacity(folder):
    """mooncake-capacity.nc's Dataset: the runs of :func:`mooncake_runs` with
    ``capacity_rps`` (policy), its bootstrap interval and ``capacity_rps_seed`` (policy
    × seed) by ``routesim.capacity``'s default rule (:func:`routesim.capacity.capacities`),
    and the time scales in ``time_scales``."""
    ds = mooncake_runs(folder)
    ds = capacity_mod.capacities(ds, _criterion(ds), capacity_mod.Rule(), "ms")
    ds["time_scale"] = ("rate_rps", np.array([float(s) for s in SCALES]))
    return ds


def load(root):
    """{"default": default-capacity.nc, "mooncake": mooncake-capacity.nc (either None if
    not run), "server": the server arm's search (results/token-routing-server/
    capacity-capacity.nc, the study's main arm; None if not run)}, or None if neither of
    the first two ran."""
    folder = Path(root) / CAPACITY_RESULTS
    out = {}
    for stage in ("default", "mooncake"):
        p = folder / f"{stage}-capacity.nc"
        out[stage] = squeeze(read(p)) if p.exists() else None
    if not any(v is not None for v in out.values()):
        return None
    p = Path(root) / SERVER_CAPACITY[0] / f"{SERVER_CAPACITY[1]}-capacity.nc"
    out["server"] = squeeze(read(p)) if p.exists() else None
    return out


def verdict(data):
    return None


def row(data):
    return None


COLORS = {"round_robin": "#888888", "least_requests": "#1f77b4", "least_tokens": "#d62728",
          "power_of_d": "#9467bd", "least_kv": "#2ca02c", "least_cost": "#ff7f0e"}


def figure(data, figures_dir=FIGURES):
    """TTFT p99 (median over seeds) against the rate at every evaluated point, per
    policy, the SLO and each capacity marked: default workload and Mooncake excerpt."""
    from matplotlib.figure import Figure
    shown = [(k, ds) for k, ds in (("default", data["default"]), ("mooncake", data["mooncake"])) if ds is not None]
    fig = Figure(figsize=(5.5 * len(shown), 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(shown)))
    for ax, (k, ds) in zip(axes, shown):
        for p in ds.policy.values:
            one = ds.sel(policy=p)
            ran = one.arrivals.notnull().any("seed").values
            x = ds.rate_rps.values[ran]
            y = one.ttft_p99.median("seed").values[ran]
            ax.plot(x, y, "o-", ms=3, color=COLORS.get(str(p), "#000000"), label=str(p))
            c = float(one.capacity_rps)
            if np.isfinite(c):
                ax.plot([c], [float(one.ttft_p99.sel(rate_rps=c).median("seed"))], "s", ms=8, mfc="none",
                        color=COLORS.get(str(p), "#000000"))
        if not scaled(ds):   # (scaled to prompt length: no one bound on the TTFT p99 to draw)
            ax.axhline(float(ds.attrs["capacity_bound"]), color="#444444", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_xlabel("offered load (req/s)")
        ax.set_ylabel("TTFT p99, median over seeds (ms)")
        ax.set_title({"default": "default workload (squares: capacity)",
                      "mooncake": "Mooncake excerpt (time scale 0.5, 1, 1.5)"
                                  + ("\nsquares: capacity by the objective scaled to prompt length" if scaled(ds) else "")
                      }[k], fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle("Capacity at the SLO (dashed: TTFT p99 1 s), 8 default replicas", fontsize=10)
    fig.tight_layout()
    return save(fig, "lor-capacity", figures_dir)


def at_capacity(ds, policy):
    """(capacity, seeds' low, seeds' high, TTFT p99 there (median, ms), backlog growth
    (median, requests), KV occupancy first and last quarter (medians, fractions),
    (runs not steady by ``routesim.steady``'s per-run check, runs, the cell steady by
    :func:`routesim.steady.cell_steady`)) of ``policy``; NaNs and None when it has no
    capacity in the searched range."""
    one = ds.sel(policy=policy)
    c = float(one.capacity_rps)
    seeds = one.capacity_rps_seed.values.astype(float)
    fin = seeds[np.isfinite(seeds)]
    lo, hi = (float(fin.min()), float(fin.max())) if fin.size else (np.nan, np.nan)
    if not np.isfinite(c):
        return (c, lo, hi, np.nan, np.nan, np.nan, np.nan, None)
    at = one.sel(rate_rps=c)
    return (c, lo, hi, float(np.nanmedian(at.ttft_p99)), float(np.nanmedian(at.backlog_growth)),
            float(np.nanmedian(at.kv_occupancy_first)), float(np.nanmedian(at.kv_occupancy_last)),
            (*steady.count_unsteady(at), steady.cell_steady(at)))


def interval_text(ds, p):
    """The capacity's bootstrap interval as text (a file from before the interval: —)."""
    if "capacity_rps_low" not in ds:
        return "—"
    lo, hi = (float(ds[f"capacity_rps_{e}"].sel(policy=p)) for e in ("low", "high"))
    return "—" if not np.isfinite(hi) else f"{cap_text(ds, lo)}–{hi:g}"


def cap_text(ds, c):
    if np.isfinite(c):
        return f"≥ {c:g}" if c >= ds.attrs["capacity_high"] else f"{c:g}"
    return f"< {ds.attrs['capacity_low']:g}"


def _rng(ds, lo, hi, seeds):
    if not np.isfinite(hi):
        return f"< {ds.attrs['capacity_low']:g}"
    low = f"< {ds.attrs['capacity_low']:g}" if np.isnan(seeds).any() else f"{lo:g}"
    return f"{low}–{hi:g}" if low != f"{hi:g}" else low


def table(ds):
    """Markdown rows: per policy, capacity, its bootstrap interval, the seeds' range and
    the steady-state figures of the runs at capacity."""
    lines = ["| policy | capacity req/s | 95 % interval | seeds' range | TTFT p99 at capacity ms | backlog growth | "
             "KV occupancy first → last % | runs not steady | steady |", "|---|---|---|---|---|---|---|---|---|"]
    for p in ds.policy.values:
        c, lo, hi, ttft, growth, first, last, bad = at_capacity(ds, p)
        seeds = ds.capacity_rps_seed.sel(policy=p).values.astype(float)
        head = f"| {p} | {cap_text(ds, c)} | {interval_text(ds, p)} | {_rng(ds, lo, hi, seeds)} |"
        if not np.isfinite(c):
            lines.append(f"{head} — | — | — | — | — |")
            continue
        lines.append(f"{head} {ttft:.0f} | {growth:+.0f} | {first * 100:.0f} → {last * 100:.0f} | "
                     f"{bad[0]} of {bad[1]} | {'yes' if bad[2] else 'no'} |")
    return "\n".join(lines)


def evaluated(ds):
    """The rates the search ran (any policy), ascending."""
    ran = ds.arrivals.notnull().any([d for d in ds.arrivals.dims if d != "rate_rps"])
    return [float(r) for r in ds.rate_rps.values[ran.values]]


def mooncake_table(ds):
    """Markdown rows: per policy, TTFT p99 (median over seeds) at each time scale (with an
    objective scaled to prompt length, the p99 of TTFT − objective beside it), and the
    capacity."""
    rates = ds.rate_rps.values
    what = "TTFT p99 ms (p99 of TTFT − objective)" if scaled(ds) else "TTFT p99 ms"
    head = " | ".join(f"{what} at {r:.1f} req/s (×{s:g})" for r, s in zip(rates, ds.time_scale.values))
    lines = [f"| policy | {head} | KV occupancy first → last % (highest load) | capacity req/s |",
             "|---|" + "---|" * (len(rates) + 2)]
    for p in ds.policy.values:
        one = ds.sel(policy=p)
        cells = " | ".join(f"{float(np.nanmedian(one.ttft_p99.sel(rate_rps=r))):,.0f}"
                           + (f" ({float(np.nanmedian(one.ttft_excess_p99.sel(rate_rps=r))):+,.0f})"
                              if scaled(ds) else "") for r in rates)
        top = one.sel(rate_rps=rates[-1])
        occ = (f"{float(np.nanmedian(top.kv_occupancy_first)) * 100:.0f} → "
               f"{float(np.nanmedian(top.kv_occupancy_last)) * 100:.0f}")
        lines.append(f"| {p} | {cells} | {occ} | {cap_text(ds, float(one.capacity_rps))} |")
    return "\n".join(lines)


def rule_of(ds):
    """The rule a capacity file was found by (a file from before issue 44: the median rule)."""
    return capacity_mod.Rule(ds.attrs.get("capacity_rule", "median"), float(ds.attrs.get("capacity_quantile", 0.9)))


def measured(ds, command, arm) -> list:
    """How the capacities of the search ``ds`` (a ``python -m routesim.capacity`` file) were
    measured, for ``arm`` (its words), by ``command`` (its argv after the module): the rule,
    the interval, the grid, whether every row is steady at capacity; then its table
    (:func:`table`)."""
    bound, seeds, rule = float(ds.attrs["capacity_bound"]), ds.sizes["seed"], rule_of(ds)
    unsteady = [str(p) for p in ds.policy.values if (at := at_capacity(ds, p)[7]) is not None and not at[2]]
    return [
        f"{arm} **How it was measured.** `python -m routesim.capacity {' '.join(command)}`: for each policy, the "
        f"largest evaluated rate at which {rule.text(f'TTFT p99 ≤ {bound:,.0f} ms')} (a window steady by the rule at "
        f"the top) there and at every lower evaluated rate, over {seeds} seeds{departures(ds)}; the interval is a "
        f"percentile bootstrap over seeds ({int(ds.attrs.get('capacity_resamples', capacity_mod.BOOTSTRAP_RESAMPLES))} "
        f"resamples), the seeds' range the same rule on each seed's own runs. Rates on multiples of "
        f"{float(ds.attrs['capacity_resolution']):g} req/s (a capacity is exact to that step), from "
        f"{float(ds.attrs['capacity_low']):g} to {float(ds.attrs['capacity_high']):g} req/s "
        f"({int(ds.arrivals.notnull().sum())} runs). "
        + ("Every row is steady at capacity (the steady-state figures of its runs there beside it): "
           f"{float(ds.attrs['warmup_s']):,.0f} s of warm-up is enough at these loads."
           if not unsteady else
           "Not steady at capacity: " + ", ".join(unsteady) + "; their capacity is an upper bound."),
        "", table(ds), ""]


def _search_ran(ds) -> str:
    return (f"Rates on multiples of {float(ds.attrs['capacity_resolution']):g} req/s, so the true capacity "
            "lies below the next rate on the grid; "
            f"{int(ds.attrs['capacity_points'])} a round inside each policy's bracket; evaluated: "
            f"{', '.join(f'{r:g}' for r in evaluated(ds))} req/s.")


def section(data):
    """The capacity section: the server's capacities (the study's main arm) when its
    search ran, the page's replica's moved to the appendix; else the page's replica's; the
    Mooncake excerpt's in a sentence, its table in the appendix."""
    d, m, srv = data["default"], data["mooncake"], data.get("server")
    text = ["## Capacity at the SLO", ""]
    page = [] if d is None else measured(d, (SWEEP, *SEARCH), "On the page's replica, the sensitivity arm.")
    main = srv if srv is not None else d
    if main is not None:
        text += [*(page if srv is None else measured(srv, (SERVER_SWEEP, *SERVER_SEARCH), "On the server, the main "
                                                     "arm (vLLM's default loop, the roofline H100 cost).")),
                 *details("How the search ran", _search_ran(main) + " The steady-state figures beside each capacity "
                          "are those of its runs there (medians over seeds), with the runs `routesim.steady` flags "
                          "and whether the cell is steady."),
                 *(details("The page's replica's capacities", *page, _search_ran(d))
                   if srv is not None and d is not None else []), ""]
    if m is not None:
        text += [_mooncake_short(m), ""]
        text += details(
            "The Mooncake excerpt",
            "**The Mooncake excerpt.** Replayed as in claim 4 (`traces/mooncake-conv.jsonl`, 8 "
            "default replicas, 512-token hash blocks, so a conversation's later turns find their "
            "earlier turns' prefix cached on the replica that served them), stages `mooncake-*` of "
            f"`{SWEEP}`. A trace brings its own arrivals, so the load is its `time_scale`; every "
            "time scale replays the same span of trace time (60 s of warm-up, then 300 s measured, "
            "in trace seconds), so the three loads differ only in rate, and the rate shown is the "
            "window's (cohort arrivals / window). The seed drives only the router stream: "
            f"power_of_d ran {m.sizes['seed']} seeds, the deterministic policies one (standing for "
            f"every seed). Capacity by the same rule "
            f"({rule_of(m).text(objective_text(m))}):",
            "",
            mooncake_table(m), "", _mooncake_reading(m))
    return "\n".join(text)


def lone_prefill_ms(prompt):
    """A lone prompt's prefill on an idle default replica, no cache hit (ms): its
    ceil(P / 8,192) chunk iterations by the step cost (token-model.md §2, step 3; the
    attention term sums to c_attn · P² / 2 over the chunks)."""
    from .counts import STEP
    p = np.asarray(prompt, float)
    return (STEP["base"] * np.ceil(p / 8192) + STEP["per_prefill_token"] * p
            + STEP["per_prefill_token_pair"] * p * p / 2)


SPAN_S = (60.0, 360.0)
"""The measured span of trace time of every Mooncake stage (s)."""


def _span_prompts():
    from ... import traces
    tr = traces.load_trace(Path(__file__).resolve().parents[3] / "traces" / "mooncake-conv.jsonl", "mooncake")
    keep = (tr.t_ms >= SPAN_S[0] * 1000) & (tr.t_ms < SPAN_S[1] * 1000)
    return tr.prompt[keep]


def _mooncake_short(m):
    """The Mooncake excerpt's capacities in one sentence, for the document (its table and
    reading are in the appendix)."""
    caps = ", ".join(f"{p} {cap_text(m, float(m.capacity_rps.sel(policy=p)))}" for p in m.policy.values)
    return (f"**The Mooncake excerpt** (`traces/mooncake-conv.jsonl`, 8 of the page's replicas; by {rule_of(m).text(objective_text(m))}), "
            f"capacity req/s: {caps}.")


def _mooncake_reading(m):
    """Why the flat objective has no capacity on the excerpt (when no policy meets it at
    the lightest load), and which objective the table's capacities are by."""
    bound = float(m.attrs.get("slo_ttft_ms", 1000.0))
    low = m.ttft_p99.sel(rate_rps=m.rate_rps.values[0]).median("seed")
    best = float(low.min())
    none = bool((low > bound).all())
    prompts = _span_prompts()
    slow = float(np.mean(lone_prefill_ms(prompts) > bound)) * 100
    floor = float(np.percentile(lone_prefill_ms(prompts), 99))
    flat = ((f"No policy meets {'a flat' if scaled(m) else 'the'} {bound:,.0f} ms TTFT p99 even at the lightest load "
             f"({float(m.rate_rps.values[0]):.1f} req/s; the best, {str(low.policy.values[int(np.argmin(low.values))])}, "
             f"{best:,.0f} ms): the excerpt's prompts are long: alone on an idle replica without a "
             f"cache hit, {slow:.0f} % of the measured span's prompts would take more than {bound:,.0f} ms "
             f"to prefill (their 99th percentile: {floor:,.0f} ms). Its TTFT tail is set by prefill, "
             "which cache hits shorten and routing cannot") if none else "")
    if scaled(m):
        return ((flat + "; an objective scaled to prompt length allows for it. " if flat else "")
                + f"The capacities above are by each request's own objective, {bound:,.0f} ms + {scaled(m):g} ms "
                  "per prompt token.")
    return (flat + ", so the study's SLO has no capacity here; claims that replay the excerpt place their loads "
            "as time scales.") if flat else "The capacities above apply the study's SLO to the excerpt."
