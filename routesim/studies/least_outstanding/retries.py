"""Claim 7 of the least-outstanding-routing study: the retry trap.
sweeps/token-routing-retry.toml (results/token-routing-retry/): crash.nc (retry_budget ×
seed), black-hole.nc (retry_avoid_previous × breaker_consecutive × seed), no-incident.nc
(the crash's control: retry_budget × seed) and recovery.nc (scenario × warmup_s ×
timeout_ms × retry_budget × seed: incidents that end, measured in two windows after they
end, against the same seeds with no incident)."""

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .common import CAPACITY_RPS, FIGURES, lead, open_stage, replicas_at, save, scenario_events, spread

SWEEPS = ("sweeps/token-routing-retry.toml",)
INF = float("inf")
CONTROL = "none"
"""The recovery stage's scenario with no incident (the paired control)."""
ENDED = ("crash-recover", "black-hole")
"""The recovery stage's incidents, both over before its first metrics window."""
TIMELINE = dict(timeout_ms=10000, seed=[1, 2, 3], interval_ms=100.0)
"""The timeline figure's condition: the 10 s timeout (the no-incident storm builds slowly
enough there to see an incident move it), seeds 1-3, sampled every 100 ms."""
COLOURS = {"none": "#444444", "crash-recover": "#d62728", "black-hole": "#1f77b4"}
STATE = {"below": "stays degraded", "above": "is better than with no incident",
         None: "is back at the no-incident level"}
"""How the system stands after an incident, by the lead of its attainment over no incident."""


def load(root):
    """(crash, black hole, no-incident control, recovery) Datasets, or None if any is missing."""
    d = Path(root) / "token-routing-retry"
    out = tuple(open_stage(d / f"{s}.nc") for s in ("crash", "black-hole", "no-incident", "recovery"))
    return None if any(x is None for x in out) else out


def amplification(ds):
    return ds.attempts / ds.arrivals


def routed(ds):
    """Attempts routed in the window (retries of earlier requests included) per request
    arriving in it: the load the replicas are offered, relative to the arrivals. Unlike
    attempts per cohort request, it does not miss the retries that fall after the horizon
    (a short window with a long timeout would hide nearly all of them)."""
    return ds.assigned.sum("replica") / ds.arrivals


def _value(ds, var):
    if var == "amplification":
        return amplification(ds)
    if var == "routed":
        return routed(ds)
    return ds[var] * (100 if var == "attainment" else 1)


def after(rec, var, scenario):
    """Per seed: var after the incident minus the same seed with no incident (dims
    warmup_s × timeout_ms × retry_budget × seed); attainment in percentage points,
    "amplification" for attempts per cohort request, "routed" for :func:`routed`."""
    return _value(rec.sel(scenario=scenario), var) - _value(rec.sel(scenario=CONTROL), var)


def windows(rec):
    """[(warm-up s, '[45 s, 65 s)')] of the recovery stage, earliest first."""
    m = float(rec.attrs["measure_s"])
    return [(float(w), f"[{w:g} s, {w + m:g} s)") for w in sorted(rec.warmup_s.values)]


def storm(rec):
    """Per seed: attainment (pp) of the no-incident control without the budget minus with
    it: < 0 when retries degrade the system with no incident at all."""
    c = rec.sel(scenario=CONTROL)
    return (c.attainment.sel(retry_budget=INF) - c.attainment.sel(retry_budget=0.2)) * 100


def parts(data):
    """The claim's tests, each True when every seed agrees:
    budget — in the crash the 20 % budget cuts attempts per request and raises attainment;
    contain — in the black hole breaker + retry_avoid_previous raise attainment over neither;
    lingers / persists — after the crash ends, without the budget, attainment is below the
    no-incident control at every timeout in the first / the last window;
    cures — with the budget it is not (no window or timeout where every seed is below);
    storm — without the budget, with no incident, attainment is below the budgeted
    control's at every timeout in the last window (retries degrade the system by themselves)."""
    crash, hole, _, rec = data
    a = amplification(crash)
    budget = (lead(a.sel(retry_budget=0.2) - a.sel(retry_budget=INF)) == "below"
              and lead(crash.attainment.sel(retry_budget=0.2)
                       - crash.attainment.sel(retry_budget=INF)) == "above")
    both = hole.attainment.sel(retry_avoid_previous=True, breaker_consecutive=5)
    neither = hole.attainment.sel(retry_avoid_previous=False, breaker_consecutive=0)
    gap = after(rec, "attainment", "crash-recover")
    (first, _), (last, _) = windows(rec)[0], windows(rec)[-1]
    ts = rec.timeout_ms.values
    below = lambda d: lead(d) == "below"  # noqa: E731
    return dict(
        budget=budget,
        contain=lead(both - neither) == "above",
        lingers=all(below(gap.sel(warmup_s=first, timeout_ms=t, retry_budget=INF)) for t in ts),
        persists=all(below(gap.sel(warmup_s=last, timeout_ms=t, retry_budget=INF)) for t in ts),
        cures=not any(below(gap.sel(warmup_s=w, timeout_ms=t, retry_budget=0.2))
                      for w, _ in windows(rec) for t in ts),
        storm=all(below(storm(rec).sel(warmup_s=last, timeout_ms=t)) for t in ts))


def verdict(data):
    """holds: the budget contains the crash, the breaker and retry_avoid_previous the black
    hole, and without the budget the crash leaves a degradation that persists while the
    budget removes it, in a system that is healthy without an incident (a metastable
    trap); with qualification when the budget half holds, or the crash's degradation
    lingers without the budget and the budget cures it."""
    p = parts(data)
    if p["budget"] and p["contain"] and p["lingers"] and p["persists"] and p["cures"] and not p["storm"]:
        return "holds"
    if p["budget"] or (p["lingers"] and p["cures"]):
        return "holds with qualification"
    return "does not hold in this model"


# -- the figures ----------------------------------------------------------------------

def _arms(data):
    crash, hole, control, _ = data
    arms = [("no incident, no budget", control.sel(retry_budget=INF)),
            ("no incident, 20 % budget", control.sel(retry_budget=0.2)),
            ("crash, no budget", crash.sel(retry_budget=INF)),
            ("crash, 20 % budget", crash.sel(retry_budget=0.2))]
    for avoid in (False, True):
        for brk in (0, 5):
            arms.append((f"black hole, retry_avoid_previous={str(avoid).lower()}, breaker {brk}",
                         hole.sel(retry_avoid_previous=avoid, breaker_consecutive=brk)))
    return arms


def _figure_summary(data, figures_dir):
    fig = Figure(figsize=(11.5, 4.0))
    axes = fig.subplots(1, 3)
    arms = _arms(data)
    colours = ["#444444"] * 2 + ["#d62728"] * 2 + ["#1f77b4"] * 4
    labels = [name.replace("retry_avoid_previous=", "avoid=") for name, _ in arms]
    y = np.arange(len(arms))
    for ax, (title, f) in zip(axes, (("attempts per request", amplification),
                                     ("wasted tokens (millions)", lambda d: d.wasted_tokens / 1e6),
                                     ("SLO attainment (%)", lambda d: d.attainment * 100))):
        for i, (_, d) in enumerate(arms):
            v = np.asarray(f(d))
            ax.plot([v.min(), v.max()], [i, i], "-", color="#888888")
            ax.plot(np.median(v), i, "o", color=colours[i])
        ax.set_yticks(y, labels if ax is axes[0] else [""] * len(arms), fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.invert_yaxis()
    fig.suptitle("Claim 7: the retry trap, least_requests, 8 replicas at 50 req/s, 5 s "
                 "timeouts, 3 attempts, window [10 s, 50 s) (median, min–max over seeds)", fontsize=10)
    fig.tight_layout()
    return save(fig, "lor-claim7-retry", figures_dir)


def timeline_traces(rec):
    """{scenario: trace} of the recovery stage at :data:`TIMELINE`, both budgets, to the
    end of the last window."""
    import routesim
    last = windows(rec)[-1][0]
    return {s: routesim.trace(rec, scenario=s, retry_budget=[INF, 0.2], warmup_s=last, **TIMELINE)
            .squeeze(drop=True) for s in (CONTROL, *ENDED)}


def _bins(t, per_interval, width_s=1.0):
    """Per-interval counts (..., time) summed into bins of width_s: (bin end times, per second)."""
    dt = float(t[1] - t[0])
    k = max(1, int(round(width_s / dt)))
    n = (per_interval.shape[-1] - 1) // k
    x = per_interval[..., 1:1 + n * k].reshape(per_interval.shape[:-1] + (n, k)).sum(axis=-1)
    return t[k:1 + n * k:k], x / (k * dt)


def _figure_timeline(rec, tls, figures_dir):
    start, end = incident_span(rec)
    wins = windows(rec)
    arrivals = float(np.atleast_1d(tls[CONTROL].rate_rps.values)[0])
    fig = Figure(figsize=(11, 7.6), layout="constrained")
    axes = fig.subplots(3, 2, sharex=True, sharey="row")
    rows = ("attempts routed per second\n(first attempts and retries)", "retries routed per second",
            "TTFT rolling p99 (s)\n(last 250 completions)")
    for col, budget in enumerate((INF, 0.2)):
        for scen, tl in tls.items():
            colour = COLOURS[scen]
            one = tl.sel(retry_budget=budget)
            t = one.time.values
            tb, att = _bins(t, one.attempts_interval.transpose("seed", "time").values)
            _, ret = _bins(t, one.retries_interval.transpose("seed", "time").values)
            axes[0, col].plot(tb, att.mean(0), color=colour, lw=1.2)
            axes[1, col].plot(tb, ret.mean(0), color=colour, lw=1.2)
            p99 = one.ttft_rolling_p99.transpose("seed", "time").values
            ok = np.isfinite(p99).all(axis=0)
            axes[2, col].plot(t[ok], np.median(p99[:, ok], axis=0) / 1000, color=colour, lw=1.1)
        for ax in axes[:, col]:
            ax.axvspan(start, end, color="#f2e3d5", lw=0, zorder=0)
            for w, _ in wins:
                ax.axvline(w, color="black", lw=0.8, ls="--")
            ax.grid(alpha=0.3, lw=0.5)
        axes[0, col].axhline(arrivals, color="#888888", lw=0.8, ls=":")
        for k, (w, label) in enumerate(wins):
            axes[0, col].text(w + 0.6, 0.98, f"window {k + 1}", transform=axes[0, col].get_xaxis_transform(),
                              fontsize=8, va="top")
        axes[0, col].set_title("no retry budget" if budget == INF else "20 % retry budget", fontsize=10)
        axes[-1, col].set_xlabel("time (s)")
        axes[-1, col].set_xlim(0, float(t[-1]))
    for row, text in enumerate(rows):
        axes[row, 0].set_ylabel(text, fontsize=9)
    axes[0, 0].set_ylim(bottom=0)
    axes[1, 0].set_ylim(bottom=0)
    axes[2, 0].set_yscale("log")
    axes[2, 0].set_ylim(top=150)
    to = TIMELINE["timeout_ms"] / 1000
    axes[2, 0].text(0.01, 0.97, f"steps near {to:g} s and {2 * to:g} s: first tokens that came\n"
                    "after one or two timed-out attempts", transform=axes[2, 0].transAxes,
                    fontsize=7.5, va="top", ha="left")
    handles = [Line2D([], [], color=COLOURS[s], lw=1.3, label=describe(rec, s)) for s in (CONTROL, *ENDED)]
    handles += [Patch(color="#f2e3d5", label="incident"),
                Line2D([], [], color="black", lw=0.8, ls="--",
                       label="metrics windows start: " + ", ".join(label for _, label in wins)),
                Line2D([], [], color="#888888", lw=0.8, ls=":", label=f"arrivals ({arrivals:g} req/s)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8.5)
    seeds = ", ".join(str(int(s)) for s in np.atleast_1d(tls[CONTROL].seed.values))
    fig.suptitle(f"Claim 7: during and after the incident — least_requests, 8 replicas at {arrivals:g} req/s, "
                 f"{TIMELINE['timeout_ms'] / 1000:g} s timeout per attempt, up to 3 attempts\n"
                 f"counts: mean of seeds {seeds} in 1 s bins; TTFT: median of the seeds", fontsize=10)
    return save(fig, "lor-claim7-timeline", figures_dir)


def figure(data, figures_dir=FIGURES):
    rec = data[3]
    return _figure_summary(data, figures_dir) + _figure_timeline(rec, timeline_traces(rec), figures_dir)


# -- the document ---------------------------------------------------------------------

def describe(rec, scenario):
    """'replicas 3 and 6 crash, 20–40 s' (from the sweep's events) or 'no incident'."""
    from ...results import sweep_of
    events = sweep_of(rec).scenarios[scenario]
    if not events:
        return "no incident"
    down = [e for e in events if e.kind.name in ("FAIL", "FAIL_FAST")]
    reps = sorted({e.replica + 1 for e in down})
    what = "crash" if down[0].kind.name == "FAIL" else "fail fast (black hole)"
    who = (f"replica {reps[0]}" if len(reps) == 1 else "replicas " + _join([str(r) for r in reps]))
    verb = what if len(reps) > 1 else {"crash": "crashes", "fail fast (black hole)": "fails fast (black hole)"}[what]
    times = [e.at_s for e in events]
    return f"{who} {verb}, {min(times):g}–{max(times):g} s"


def incident_span(rec):
    """(first event, last event) of the recovery stage's incidents, s."""
    from ...results import sweep_of
    sweep = sweep_of(rec)
    times = [e.at_s for s in ENDED for e in sweep.scenarios[s]]
    return min(times), max(times)


def _join(xs):
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]


def _states(rec, diff, budget):
    """'stays degraded at 5, 10 and 20 s in [45 s, 65 s); … in [65 s, 85 s)' for one budget."""
    out = []
    for w, label in windows(rec):
        groups = {}
        for t in rec.timeout_ms.values:
            groups.setdefault(STATE[lead(diff.sel(warmup_s=w, timeout_ms=t, retry_budget=budget))],
                              []).append(f"{t / 1000:g}")
        out.append(", and ".join(f"{s} at {_join(ts)} s" for s, ts in groups.items()) + f" in {label}")
    return "; ".join(out)


def _recovery_rows(rec):
    rows = ["| timeout | budget | window | no incident: attainment % | attempts routed per arrival "
            "| TTFT p99 ms | after the crash: Δ attainment pp | Δ attempts routed per arrival "
            "| after the black hole: Δ attainment pp | Δ attempts routed per arrival |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for t in rec.timeout_ms.values:
        for b in (INF, 0.2):
            for w, label in windows(rec):
                c = rec.sel(scenario=CONTROL, timeout_ms=t, retry_budget=b, warmup_s=w)
                cells = [f"{t / 1000:g} s", "none" if b == INF else f"{b * 100:g} %", label,
                         f"{float(c.attainment.median()) * 100:.1f}", f"{float(routed(c).median()):.2f}",
                         f"{float(c.ttft_p99.median()):,.0f}"]
                for s in ENDED:
                    sel = dict(warmup_s=w, timeout_ms=t, retry_budget=b)
                    cells += [spread(after(rec, "attainment", s).sel(sel), 1),
                              spread(after(rec, "routed", s).sel(sel), 2)]
                rows.append("| " + " | ".join(cells) + " |")
    return rows


def _reading_recovery(data):
    _, _, _, rec = data
    p = parts(data)
    wins = windows(rec)
    (first, _), (last, last_label) = wins[0], wins[-1]
    _, end = incident_span(rec)
    ts = rec.timeout_ms.values
    n = rec.sizes["seed"]
    crash_gap = after(rec, "attainment", "crash-recover")
    hole_gap = after(rec, "attainment", "black-hole")
    crash_load = after(rec, "routed", "crash-recover").sel(retry_budget=INF)
    hole_batch = after(rec, "batch_mean", "black-hole").sel(retry_budget=INF)
    ctrl = rec.sel(scenario=CONTROL)
    st = storm(rec)
    out = [f"**After the incident.** Both incidents end at {end:g} s; the windows are "
           f"{_join([label for _, label in wins])}, "
           + _join([f"{w - end:g}–{w + float(rec.attrs['measure_s']) - end:g} s" for w, _ in wins])
           + " after. Against the same seeds with no incident, after the crash, without the budget, "
           f"the system {_states(rec, crash_gap, INF)} (attainment {spread(crash_gap.sel(retry_budget=INF), 1)} "
           f"pp over every window, timeout and seed; attempts routed per arrival "
           f"{spread(crash_load, 2)}). With the budget it {_states(rec, crash_gap, 0.2)} "
           f"({spread(crash_gap.sel(retry_budget=0.2), 1)} pp). After the black hole, without the budget, it "
           f"{_states(rec, hole_gap, INF)} ({spread(hole_gap.sel(retry_budget=INF), 1)} pp); with the budget it "
           f"{_states(rec, hole_gap, 0.2)} ({spread(hole_gap.sel(retry_budget=0.2), 1)} pp).", ""]
    if not p["storm"]:
        out += ["**What the model shows.** Without an incident the no-budget system is not below the budgeted "
                f"one on every seed at every timeout ({spread(st.sel(warmup_s=last), 1)} pp in {last_label}), so "
                "what remains after the crash is the incident's own doing"
                + (" — and it persists to the last window: a metastable state, which the budget removes."
                   if p["lingers"] and p["persists"] and p["cures"] else
                   ", though not in every window at every timeout on every seed (table)."), ""]
        return out

    def control_path(budget):
        """{timeout: (seeds falling from the first window to the last, median first, median last)}"""
        c = ctrl.attainment.sel(retry_budget=budget) * 100
        return {f"{t / 1000:g}": (int((c.sel(warmup_s=last, timeout_ms=t) < c.sel(warmup_s=first, timeout_ms=t)).sum()),
                                  float(c.sel(warmup_s=first, timeout_ms=t).median()),
                                  float(c.sel(warmup_s=last, timeout_ms=t).median())) for t in ts}

    load = routed(ctrl.sel(retry_budget=INF))
    load_first = {f"{t / 1000:g}": float(load.sel(warmup_s=first, timeout_ms=t).median()) for t in ts}
    load_last = {f"{t / 1000:g}": float(load.sel(warmup_s=last, timeout_ms=t).median()) for t in ts}
    closing = [f"{t / 1000:g}" for t in ts
               if lead(crash_gap.sel(warmup_s=first, timeout_ms=t, retry_budget=INF)) == "below"
               and lead(crash_gap.sel(warmup_s=last, timeout_ms=t, retry_budget=INF)) != "below"]
    hole_cells = [lead(hole_gap.sel(warmup_s=w, timeout_ms=t, retry_budget=INF)) for w, _ in wins for t in ts]
    held = [lead((ctrl.attainment.sel(warmup_s=last) - ctrl.attainment.sel(warmup_s=first))
                 .sel(retry_budget=0.2, timeout_ms=t)) != "below" for t in ts]
    text = ("**What the model shows.** "
            + ("Retries do keep the system degraded after the crash is over, and the 20 % budget removes "
               "that. " if p["lingers"] and p["cures"] else
               "The crash's after-effect is not one direction on every seed at every timeout, or the budget "
               "does not remove it everywhere (table). ")
            + "But this is not a metastable trap in the strict sense — a healthy state that an incident "
            "knocks the system out of and that it cannot regain: without the budget there is no healthy state "
            "to leave. With no incident at all, the no-budget control's attainment is below the budgeted "
            f"control's on every seed in {last_label} at every timeout ({spread(st.sel(warmup_s=last), 1)} pp), "
            "and it falls from window to window — "
            + "; ".join(f"at {t} s on {k} of {n} seeds, median {a:.1f} % → {b:.1f} %"
                        for t, (k, a, b) in control_path(INF).items())
            + " — while the attempts routed per arrival grow ("
            + "; ".join(f"{load_first[t]:.2f} → {load_last[t]:.2f} at {t} s" for t in load_first)
            + "): timed-out attempts are retried, the retries slow every generation, more attempts time "
            "out, and the storm grows while nothing fails (the figure's grey line). A crash adds work (lost "
            "generations, retries onto fewer replicas) and moves the system further along that road")
    if closing:
        crashed = rec.sel(scenario="crash-recover", retry_budget=INF).attainment * 100
        text += (f"; where the gap closes by {last_label} (at {_join(closing)} s) it is because the control "
                 "collapses too, not because the crashed system recovers (median attainment after the crash "
                 + "; ".join(f"{float(crashed.sel(warmup_s=first, timeout_ms=float(t) * 1000).median()):.1f} % → "
                             f"{float(crashed.sel(warmup_s=last, timeout_ms=float(t) * 1000).median()):.1f} % at {t} s"
                             for t in closing) + ")")
    n_above = sum(x == "above" for x in hole_cells)
    text += (". A black hole, which fails its attempts for good within milliseconds instead of queueing them, "
             f"sheds work: after it the replicas run smaller batches (batch_mean {spread(hole_batch, 0)} "
             f"sequences against no incident, without the budget), and the system is better than the control "
             f"on every seed in {n_above} of the {len(hole_cells)} windows × timeouts"
             + (" and below it in none" if "below" not in hole_cells else "") + ". ")
    budget_below = any(lead(after(rec, "attainment", s).sel(warmup_s=w, timeout_ms=t, retry_budget=0.2)) == "below"
                       for s in ENDED for w, _ in wins for t in ts)
    if all(held) and not budget_below:
        text += ("With the budget the no-incident system holds its level (no timeout where every seed falls "
                 "from the first window to the last: "
                 + "; ".join(f"{a:.1f} % → {b:.1f} % at {t} s" for t, (_, a, b) in control_path(0.2).items())
                 + f"), and after either incident it is at or above the control from the first window, "
                 f"{first - end:g} s after the incident ends.")
    else:
        text += ("With the budget, the no-incident system does not hold its level at every timeout, or an "
                 "incident leaves it below the control on every seed somewhere (table).")
    return out + [text, ""]


def section(data):
    crash, hole, control, rec = data
    rows = ["| arm | attempts per request | wasted tokens | attainment % | failed % |",
            "|---|---|---|---|---|"]
    for name, d in _arms(data):
        rows.append(f"| {name} | {float(amplification(d).median()):.2f} | "
                    f"{float(d.wasted_tokens.median()):,.0f} | {float(d.attainment.median()) * 100:.1f} | "
                    f"{float((d.failed / d.arrivals).median()) * 100:.1f} |")
    a, ac = amplification(crash), amplification(control)
    da = a.sel(retry_budget=0.2) - a.sel(retry_budget=INF)
    dt = (crash.attainment.sel(retry_budget=0.2) - crash.attainment.sel(retry_budget=INF)) * 100
    own_inf = a.sel(retry_budget=INF) - ac.sel(retry_budget=INF)
    own_02 = a.sel(retry_budget=0.2) - ac.sel(retry_budget=0.2)
    timeout_s = float(control.attrs["timeout_ms"]) / 1000
    tokens_in_timeout = 1000 * timeout_s / float(control.tpot_p50.sel(retry_budget=0.2).median())
    both = hole.attainment.sel(retry_avoid_previous=True, breaker_consecutive=5)
    neither = hole.attainment.sel(retry_avoid_previous=False, breaker_consecutive=0)
    dh = (both - neither) * 100
    alone_better = all(float(hole.attainment.sel(retry_avoid_previous=av, breaker_consecutive=bk).median())
                       > float(both.median()) for av, bk in ((True, 0), (False, 5)))
    n_rep = crash.sizes["replica"]
    rate = crash.attrs["rate_rps"]
    budget = float(crash.retry_budget.values[np.isfinite(crash.retry_budget.values)][0])
    down, down_at = replicas_at(scenario_events(crash, crash.attrs["scenario"]), "fail")
    hole_events = scenario_events(hole, hole.attrs["scenario"])
    hole_rep, hole_at = replicas_at(hole_events, "fail_fast")
    _, hole_end = replicas_at(hole_events, "recover")
    breaker = int(hole.breaker_consecutive.values.max())
    start, end = incident_span(rec)
    wins = windows(rec)
    ts = _join([f"{t / 1000:g}" for t in rec.timeout_ms.values])
    return "\n".join([
        "## Claim 7: the retry trap", "",
        "**Prediction (the seed).** Retries add load to a degraded system; a retry budget "
        "and a per-replica breaker at the router contain it. Issue 13 asks, too, whether the system "
        "recovers after the incident ends or stays degraded (metastable).", "",
        f"**Design.** `sweeps/token-routing-retry.toml`: least_requests, {n_rep} replicas at "
        f"{rate:g} req/s ({rate / CAPACITY_RPS:.2f} × capacity), clients with a {timeout_s:g} s "
        f"per-attempt timeout and up to {crash.attrs['max_attempts']} attempts. Crash: replicas "
        f"{_join([str(i) for i in down])} fail at {_join([f'{x:g}' for x in down_at])} s for good "
        f"({n_rep - len(down)} left, {(n_rep - len(down)) / n_rep * CAPACITY_RPS:g} req/s of "
        f"capacity), without and with a {budget * 100:g} % retry budget, beside a control with no "
        f"incident. Black hole: replica {_join([str(i) for i in hole_rep])} fails fast from "
        f"{_join([f'{x:g}' for x in hole_at])} s to {_join([f'{x:g}' for x in hole_end])} s, with and "
        f"without the breaker ({breaker} consecutive failures) and retry_avoid_previous. "
        f"{crash.sizes['seed']} seeds, {crash.attrs['warmup_s']:g} s + {crash.attrs['measure_s']:g} s. "
        f"Medians:", "",
        *rows, "",
        f"Recovery (stage `recovery`): incidents that end — replicas 3 and 6 crash from {start:g} s "
        f"to {end:g} s, or the black hole above — against the same seeds with no incident, per-attempt "
        f"timeouts of {ts} s, without and with the budget. The warm-up covers the incidents, so the "
        f"metrics (the requests arriving in a window) start after they end, while the backlog they "
        f"left is still there; two windows, {_join([label for _, label in wins])}, tell a gap that "
        f"closes from one that stays. {rec.sizes['seed']} seeds. No-incident columns: medians; Δ "
        f"columns: the incident minus no incident, per seed, mean [min, max]:", "",
        *_recovery_rows(rec), "",
        "![Claim 7](../figures/lor-claim7-retry.png)", "",
        "![Claim 7, timeline](../figures/lor-claim7-timeline.png)", "",
        f"**Reading.** In the crash, the budget changes attempts per request by {spread(da, 2)} "
        f"and attainment by {spread(dt, 1)} pp (mean [min, max] over seeds). "
        + ("Most of the amplification is not the crash's" if float((ac.sel(retry_budget=INF) - 1).median())
           > float(own_inf.median()) else "Some of the amplification is not the crash's")
        + f": with no incident, in the same window, the same clients already make "
        f"{float(ac.sel(retry_budget=INF).median()):.2f} attempts per request without the budget "
        f"({float(ac.sel(retry_budget=0.2).median()):.2f} with it); the crash adds {spread(own_inf, 2)} "
        f"without and {spread(own_02, 2)} with. The {timeout_s:g} s timeout covers the whole attempt, "
        f"and at the control's median TPOT it lasts about {tokens_in_timeout:,.0f} output tokens: longer "
        "generations time out whatever the load, and without a budget their retries load the replicas, "
        "which slows every generation and times out more. Wasted tokens "
        + ("do not fall" if float(crash.wasted_tokens.sel(retry_budget=0.2).median())
           >= float(crash.wasted_tokens.sel(retry_budget=INF).median()) else "fall")
        + " with the budget (table). In the black hole, breaker and "
        f"retry_avoid_previous together against neither change attainment by {spread(dh, 1)} pp"
        + (", on every seed." if lead(dh) == "above" else
           ", not in one direction on every seed: the 5 s timeout, not the black hole, "
           "drives most retries at this load"
           + (", and each containment alone does better in the median than both together"
              if alone_better else "")
           + "; this half of the claim is not confirmed here."), "",
        *_reading_recovery(data)])


def row(data):
    """(claim, prediction, measured, verdict) for the verdict table."""
    crash, hole, control, rec = data
    a, ac = amplification(crash), amplification(control)
    dt = (crash.attainment.sel(retry_budget=0.2) - crash.attainment.sel(retry_budget=INF)) * 100
    gap = after(rec, "attainment", "crash-recover")
    last, last_label = windows(rec)[-1]
    g_inf, g_02 = gap.sel(retry_budget=INF), gap.sel(retry_budget=0.2)
    st = storm(rec).sel(warmup_s=last)
    return ("7. The retry trap",
            "retries amplify an incident and keep the system degraded after it; a 20 % budget, "
            "a breaker and retry_avoid_previous contain it",
            f"crash: attempts per request {float(a.sel(retry_budget=INF).median()):.2f} → "
            f"{float(a.sel(retry_budget=0.2).median()):.2f} with the budget (no incident: "
            f"{float(ac.sel(retry_budget=INF).median()):.2f} → {float(ac.sel(retry_budget=0.2).median()):.2f}), "
            f"attainment {dt.mean().item():+.0f} pp (per seed {dt.min().item():+.0f} to {dt.max().item():+.0f}); "
            f"after a crash ends, attainment against no incident {float(g_inf.min()):+.0f} to "
            f"{float(g_inf.max()):+.0f} pp without the budget, {float(g_02.min()):+.0f} to "
            f"{float(g_02.max()):+.0f} pp with it (per seed, both windows, timeouts "
            + _join([f"{t / 1000:g}" for t in rec.timeout_ms.values])
            + (f" s), but with no incident the no-budget system is already {float(-st.max()):.0f} to "
               f"{float(-st.min()):.0f} pp below the budgeted one in {last_label}: a retry storm without a "
               "trigger, not a metastable trap" if parts(data)["storm"] else " s)")
            + "; black hole: containment not confirmed, see claim 7", verdict(data))
