"""Claim 7 of the least-outstanding-routing study: the retry trap, with realistic clients
(issue 23 item 4). sweeps/token-routing-retry.toml (results/token-routing-retry/):
``crash-a.nc`` and ``crash-b.nc`` (scenario none | crash × retry_budget × seed; clients
a and b), ``black-hole.nc`` (retry_avoid_previous × breaker_consecutive × seed) and
``after.nc`` (the crash-a arms measured in the next window).

Every measure is per seed over the cohort (the requests arriving in the window), and the
cohort is drained, so ``attempts`` counts every attempt of every cohort request:
``attempts / arrivals`` is the attempts per request. Comparisons are paired by seed
(:func:`common.compare`)."""


import numpy as np
from matplotlib.figure import Figure

from .common import (PAGE_ARM, ADDED, FIGURES, MECHANISM, MOONCAKE_BELOW, capacity, compare, departures, details, exceptions, load_stages, page_table, reading,
                     replicas_at,
                     results_root, save, scenario_events, show, steady_table, verdict_of)

SWEEPS = ("sweeps/token-routing-retry.toml",)
NAME = "token-routing-retry"
STAGES = ("crash-a", "crash-b", "black-hole", "after")
INF = float("inf")
BUDGET = 0.2
"""The retry budget tested (Envoy's default)."""
POLICY = "least_requests"
CALM = (1.10, 0.90)
"""The no-incident control is *calm* when its median attempts per request is at most
1.10 and its median attainment at least 90 %: a control that is itself a retry storm
(the former design's 1.93 attempts per request, 27 % attainment) cannot show what an
incident adds."""


AZURE = "azure-"
"""The Azure-length arm's stages are the main ones' names with this prefix, their
scenarios the main ones' with the suffix "-azure" (the incidents moved with the warm-up)."""
SERVER = "server-"
"""The server arm's stages (vLLM async + roofline, :mod:`.server`) are the main ones' names
with this prefix, their scenarios the main ones'."""


def load(root):
    """{stage: Dataset} of :data:`STAGES`, and "azure" and "server": the Azure-length and
    server arms' (None if any is missing); None if a main stage is missing."""
    data = load_stages(root, NAME, STAGES)
    if data is not None:
        data["azure"] = load_stages(root, NAME, [AZURE + s for s in STAGES])
        data["server"] = load_stages(root, NAME, [SERVER + s for s in STAGES])
    return data


def azure(data):
    """The Azure-length arm in the design's shape (its stages and scenarios under the main
    design's names), for :func:`clauses`; None if it did not run."""
    az = data.get("azure")
    if az is None:
        return None
    out = {}
    for s in STAGES:
        ds = az[AZURE + s]
        if "scenario" in ds.dims:
            ds = ds.assign_coords(scenario=[str(x).removesuffix("-azure") for x in ds.scenario.values])
        out[s] = ds
    return out


def server(data):
    """The server arm (stages ``server-*``: the design's four stages on vLLM's asynchronous
    loop with the roofline cost, :mod:`.server`) in the design's shape, for
    :func:`clauses`; None if it did not run."""
    sv = data.get("server")
    return None if sv is None else {s: sv[SERVER + s] for s in STAGES}


def per_request(ds):
    """Attempts per cohort request, per run (drained: every retry counted)."""
    return ds.attempts / ds.arrivals


def arm(ds, scenario, budget):
    return ds.sel(scenario=scenario, retry_budget=budget)


def client(ds):
    """'2 s to the first token, 30 s per attempt' from a stage's attrs."""
    return (f"{float(ds.attrs['ttft_timeout_ms']) / 1000:g} s to the first token, "
            f"{float(ds.attrs['timeout_ms']) / 1000:g} s per attempt")


def calm(ds):
    """(median attempts per request, median attainment, calm?) of a stage's no-incident
    control without the budget."""
    c = arm(ds, "none", INF)
    a, t = float(per_request(c).median()), float(c.attainment.median())
    return a, t, a <= CALM[0] and t >= CALM[1]


def comparisons(data):
    """{name: (compare result, predicted sign, what it says)}: the claim's paired tests.

    amplify-a — the crash raises attempts per request against no incident (no budget);
    budget-a / budget-b — in the crash the budget lowers attempts per request (client a / b);
    attain-a / attain-b — and raises attainment (points);
    contain — in the black hole, breaker and retry_avoid_previous together raise
    attainment over neither;
    lingers — 30 s after the crash ends, without the budget, attainment is below the
    no-incident control's (a degradation that outlasts its trigger)."""
    out = {}
    a = data["crash-a"]
    amp = per_request(a)
    out["amplify-a"] = (compare(amp.sel(scenario="crash", retry_budget=INF).values,
                                amp.sel(scenario="none", retry_budget=INF).values), +1,
                        "crash − no incident, attempts per request, %")
    for k in ("a", "b"):
        ds = data[f"crash-{k}"]
        amp = per_request(ds).sel(scenario="crash")
        att = ds.attainment.sel(scenario="crash")
        out[f"budget-{k}"] = (compare(amp.sel(retry_budget=BUDGET).values, amp.sel(retry_budget=INF).values),
                              -1, "budget − none, attempts per request, %")
        out[f"attain-{k}"] = (compare(att.sel(retry_budget=BUDGET).values, att.sel(retry_budget=INF).values,
                                      "points"), +1, "budget − none, attainment, pp")
    h = data["black-hole"].attainment
    out["contain"] = (compare(h.sel(retry_avoid_previous=True, breaker_consecutive=breaker(data)).values,
                              h.sel(retry_avoid_previous=False, breaker_consecutive=0).values, "points"), +1,
                      "breaker + retry_avoid_previous − neither, attainment, pp")
    af = data["after"].attainment
    out["lingers"] = (compare(af.sel(scenario="crash", retry_budget=INF).values,
                              af.sel(scenario="none", retry_budget=INF).values, "points"), -1,
                      "after the crash − no incident, attainment, pp")
    return out


def breaker(data):
    return int(data["black-hole"].breaker_consecutive.values.max())


ADDED_WORDS = "the harm outlasts the crash"
"""The seed: a retry adds load to a degraded system; budgets, a breaker and a retry that
avoids the same path contain it. The prediction added that the degradation lingers after
the crash ("lingers")."""
AZURE_BASIS = "least_requests"
"""The policy whose capacity the Azure-length arm's load is placed against (:mod:`.workloads`)."""
MOONCAKE_WHY = MOONCAKE_BELOW
SERVER_BASIS = "least_requests"
"""The policy whose capacity on the server the server arm's load is placed against (:mod:`.server`)."""
SERVER_PREDICTION = (
    "**Prediction on the server** (stages `server-crash-a`, `server-crash-b`, `server-black-hole` and "
    "`server-after`, 36 req/s, written before their runs, after a cost probe of 4 runs). The control is calm "
    "at 0.82 × least_requests' capacity there. In the crash the 5 survivors are offered about 1.3 × their "
    "capacity for 30 s, as on the page's replica; vLLM admits without reserving a prompt's KV, so the "
    "survivors' queues grow in their waiting lists rather than at admission, and client a's 2 s first-token "
    "timeout retries as on the page's replica: the crash raises attempts per request, the budget lowers them "
    "and raises attainment for client a; client b's 5 s timeout rarely fires, so its budget changes little "
    "(as on the page's replica, without a lead). The breaker with retry_avoid_previous contains the black "
    "hole, which least_requests' count fills on either replica. The survivors' backlog drains within the 20 "
    "s before the next window: no lingering harm. The seed's mechanism *holds with qualification* (client "
    "b); the added clause *does not hold*. No change.")
"""The server arm's prediction (issue 44 item 2), fixed before its runs."""
SERVER_PREDICTED = ("holds with qualification", "does not hold")
"""The verdicts :data:`SERVER_PREDICTION` states (the seed's mechanism, the added clauses), for
:func:`.server.held`."""


def clauses(data):
    """[(label, comparison, predicted sign, part)] of :func:`comparisons`."""
    return [(k, v[0], v[1], ADDED if k == "lingers" else MECHANISM) for k, v in comparisons(data).items()]


def verdict(data):
    """:func:`common.verdict_of` over :func:`comparisons`' leads and predicted signs."""
    c = comparisons(data)
    return verdict_of([v[0][3] for v in c.values()], [v[1] for v in c.values()])


# -- the figure -----------------------------------------------------------------------

def _arms(data):
    """[(label, Dataset over seeds)] in the figure's and the table's order."""
    out = []
    for k in ("a", "b"):
        ds = data[f"crash-{k}"]
        for s in ("none", "crash"):
            for b in (INF, BUDGET):
                out.append((f"client {k}, {'no incident' if s == 'none' else 'crash'}, "
                            f"{'no budget' if b == INF else f'{b * 100:g} % budget'}", arm(ds, s, b)))
    h = data["black-hole"]
    brk = breaker(data)
    for av in (False, True):
        for bk in (0, brk):
            out.append((f"client a, black hole, avoid {'on' if av else 'off'}, breaker {'on' if bk else 'off'}",
                        h.sel(retry_avoid_previous=av, breaker_consecutive=bk)))
    af = data["after"]
    for s in ("none", "crash"):
        for b in (INF, BUDGET):
            out.append((f"client a, next window, {'no incident' if s == 'none' else 'crash ended'}, "
                        f"{'no budget' if b == INF else f'{b * 100:g} % budget'}", arm(af, s, b)))
    return out


def _colour(label):
    if "black hole" in label:
        return "#1f77b4"
    if "crash" in label:
        return "#d62728"
    return "#444444"


FIGURE = "lor-claim7-retry"
"""The stem of the claim's figure (:func:`main_figure`)."""


def figure(data, figures_dir=FIGURES):
    """The page's replica's figure (:func:`main_figure`)."""
    return main_figure(data, figures_dir)


def main_figure(data, figures_dir=FIGURES, arm=PAGE_ARM):
    """figures/<FIGURE><arm's suffix>.png/.svg: attempts per request, wasted tokens and
    attainment per arm of the design on ``arm`` (a dot per seed, a bar at the median)."""
    arms = _arms(data)
    fig = Figure(figsize=(12, 6.4), layout="constrained")
    axes = fig.subplots(1, 3, sharey=True)
    y = np.arange(len(arms))
    rng = np.random.default_rng(0)          # vertical jitter of the seeds' dots only
    for ax, (title, f) in zip(axes, (("attempts per request", per_request),
                                     ("wasted tokens (thousands)", lambda d: d.wasted_tokens / 1e3),
                                     ("SLO attainment (%)", lambda d: d.attainment * 100))):
        for i, (label, d) in enumerate(arms):
            v = np.asarray(f(d)).ravel()
            ax.plot(v, i + rng.uniform(-0.18, 0.18, v.size), "o", ms=2.5, alpha=0.45, color=_colour(label))
            ax.plot([np.median(v)] * 2, [i - 0.32, i + 0.32], "-", lw=2, color=_colour(label))
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", lw=0.3, alpha=0.5)
        for edge in (3.5, 7.5, 11.5):
            ax.axhline(edge, color="#bbbbbb", lw=0.6)
    axes[0].set_yticks(y, [label for label, _ in arms], fontsize=7.5)
    axes[0].invert_yaxis()
    a = data["crash-a"]
    fig.suptitle(f"Claim 7 {arm.words}: the retry trap — {POLICY}, {a.sizes['replica']} replicas at "
                 f"{float(a.attrs['rate_rps']):g} req/s, up to {int(a.attrs['max_attempts'])} attempts\n"
                 f"client a: {client(a)}; client b: {client(data['crash-b'])} "
                 f"({a.sizes['seed']} seeds: a dot each, bar at the median)", fontsize=9.5)
    return save(fig, FIGURE + arm.suffix, figures_dir)


# -- the document ---------------------------------------------------------------------

def _join(xs):
    xs = [str(x) for x in xs]
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]


def _median(v, digits=1, scale=1.0):
    return f"{float(np.median(np.asarray(v))) * scale:.{digits}f}"


def _table(data):
    rows = ["| arm | attempts per request | attainment % | failed % | TTFT p99 ms | wasted tokens |",
            "|---|---|---|---|---|---|"]
    for label, d in _arms(data):
        rows.append(f"| {label} | {_median(per_request(d), 3)} | {_median(d.attainment, 1, 100)} | "
                    f"{_median(d.failed / d.arrivals, 1, 100)} | {float(d.ttft_p99.median()):,.0f} | "
                    f"{float(d.wasted_tokens.median()):,.0f} |")
    return rows


def _tests(data):
    c = comparisons(data)
    rows = ["| test | comparison (paired by seed) | mean [95 % interval] | predicted | lead |",
            "|---|---|---|---|---|"]
    for name, (res, pred, what) in c.items():
        unit = "pp" if "pp" in what else "%"
        rows.append(f"| {name} | {what.rsplit(',', 1)[0]} | {show(res, 1 if unit == 'pp' else 1, unit)} | "
                    f"{'higher' if pred > 0 else 'lower'} | "
                    f"{ {1: 'higher', -1: 'lower', 0: 'none'}[res[3]]} |")
    return rows


def _events(data):
    a = data["crash-a"]
    down, at = replicas_at(scenario_events(a, "crash"), "fail")
    _, up = replicas_at(scenario_events(a, "crash"), "recover")
    h = data["black-hole"]
    hole, hat = replicas_at(scenario_events(h, h.attrs["scenario"]), "fail_fast")
    _, hup = replicas_at(scenario_events(h, h.attrs["scenario"]), "recover")
    return down, at[0], up[0], hole, hat[0], hup[0]


def section(data, main=()):
    """Claim 7's section; ``main``: the main arm's lines (:func:`.common.page_table`)."""
    a, b, h, af = (data[s] for s in STAGES)
    c = comparisons(data)
    n = a.sizes["replica"]
    rate = float(a.attrs["rate_rps"])
    cap, lo, hi, measured = capacity(results_root(a), POLICY)
    down, t_down, t_up, hole, t_hole, t_hole_up = _events(data)
    left = n - len(down)
    survivors = cap * left / n
    calm_a, calm_b = calm(a), calm(b)
    w0 = float(a.attrs["warmup_s"])
    m = float(a.attrs["measure_s"])
    wa = float(af.attrs["warmup_s"])
    lead_word = {1: "higher", -1: "lower", 0: "no lead"}
    v = verdict(data)

    def said(k, unit, digits=1):
        res = c[k][0]
        return f"{show(res, digits, unit)} ({lead_word[res[3]]})"

    calm_txt = " and ".join(
        f"client {k}: {x[0]:.3f} attempts per request, {x[1] * 100:.1f} % attainment"
        for k, x in (("a", calm_a), ("b", calm_b)))
    both_calm = calm_a[2] and calm_b[2]
    hole_rows = {(av, bk): h.attainment.sel(retry_avoid_previous=av, breaker_consecutive=bk)
                 for av in (False, True) for bk in (0, breaker(data))}
    single = {name: compare(hole_rows[key].values, hole_rows[(False, 0)].values, "points")
              for name, key in (("the breaker alone", (False, breaker(data))),
                                ("retry_avoid_previous alone", (True, 0)))}
    cap_txt = (f"{cap:g} req/s" + (f" (seeds {lo:g}–{hi:g})" if measured and np.isfinite(lo) else
                                   " (the README's provisional figure: the capacity stage has not run)"))
    return "\n".join([
        "## Claim 7: the retry trap", "",
        "**Prediction (the seed).** Retries add load to a degraded system; a retry budget and a "
        "per-replica breaker at the router contain it. Issue 13 asks, too, whether the system "
        "recovers after the incident ends or stays degraded (metastable).", "",
        f"**Design.** `sweeps/token-routing-retry.toml`{departures(a)}: {POLICY} at {rate:g} req/s "
        f"({rate / cap:.2f} × {POLICY}' capacity at the SLO, {cap_txt}); the window [{w0:g} s, {w0 + m:g} s), "
        "every retry of a cohort request counted. Clients with a first-token "
        f"timeout and a whole-attempt timeout, up to {int(a.attrs['max_attempts'])} attempts: client a "
        f"{client(a)}, client b {client(b)} (a 30 s attempt covers the chat class's outputs at the decode "
        "rate; the former design's 5 s whole-attempt timeout failed every output longer than about 300 "
        f"tokens, so its control was itself a retry storm). Crash: replicas {_join([r + 1 for r in down])} "
        f"crash at {t_down:g} s and recover at {t_up:g} s: for {t_up - t_down:g} s the {left} survivors, "
        f"about {survivors:.0f} req/s of capacity, are offered {rate:g} req/s ({rate / survivors:.2f} × "
        f"theirs), without and with a {BUDGET * 100:g} % retry budget, beside the same seeds with no "
        f"incident. Black hole: replica {_join([r + 1 for r in hole])} fails fast from {t_hole:g} s to "
        f"{t_hole_up:g} s ({POLICY} sees it nearly empty), client a, breaker ({breaker(data)} consecutive "
        "failures) and retry_avoid_previous off and on. After: client a's crash arms measured in the next "
        f"window, [{wa:g} s, {wa + m:g} s), {wa - t_up:g} s after the crash ended. Runs: "
        f"{sum(int(d.arrivals.size) for d in (data[s] for s in STAGES))}.", "",
        f"**The control is {'calm' if both_calm else 'not calm'}** (calm: median attempts per request at "
        f"most {CALM[0]:g} and attainment at least {CALM[1] * 100:g} %): {calm_txt}, without the budget.", "",
        *page_table(main, "The claim's tests:", "", *_tests(data), ""),
        f"![Claim 7](../figures/{FIGURE}.png)", "",
        f"{reading(main)} {exceptions([(k, r, p) for k, r, p, _ in clauses(data)])}"
        + (": the degradation does not outlast its trigger, so there is no metastable trap here."
           if c["lingers"][0][3] != -1 else ": the degradation outlasts its trigger."), "",
        *details(
        "Medians per arm, steady state, the tests in words, why the step cost was not varied",
        "Medians per arm:", "",
        *_table(data), "",
        "Steady state before the incident (the no-incident control, client a; median over seeds):", "",
        steady_table(a.sel(scenario="none"), ("retry_budget",)), "",
        f"With clients that give an attempt time to finish, the system is calm without an "
        f"incident ({calm_txt}) — the former design's retry storm was its 5 s whole-attempt timeout. "
        f"Client a's {float(a.attrs['timeout_ms']) / 1000:g} s attempt is still shorter than many of the long "
        "class's generations (median 2,000 output tokens), which time out and are retried from nothing: its "
        f"control wastes {float(arm(a, 'none', INF).wasted_tokens.median()):,.0f} tokens per window against "
        f"client b's {float(arm(b, 'none', INF).wasted_tokens.median()):,.0f} (medians). The "
        f"crash does add attempts: {said('amplify-a', '%')} per request against no incident (client a). "
        f"The budget's effect on the crash: attempts per request {said('budget-a', '%')} and attainment "
        f"{said('attain-a', 'pp')} with client a, {said('budget-b', '%')} and {said('attain-b', 'pp')} with "
        "client b"
        + (": nothing material, because the retries a crash makes (the attempts it kills, and first "
           "tokens late while the survivors are overloaded) are too few to meet a budget that allows "
           f"max(3, {BUDGET * 100:g} % of attempts in flight)." if all(c[k][0][3] == 0 for k in
                                                                    ("budget-a", "budget-b", "attain-a", "attain-b"))
           else ". Plausibly what the budget cuts is the retries of first tokens that came too late (the "
           "two timeouts' retries are not counted apart here): while the survivors are overloaded their "
           "queues outlast a short first-token timeout, every retry joins another queue, and the budget "
           "turns the surplus into failures at once (failed share in the crash: "
           + "; ".join(f"client {k} {_median(arm(data[f'crash-{k}'], 'crash', INF).failed / arm(data[f'crash-{k}'], 'crash', INF).arrivals, 1, 100)} % → "
                       f"{_median(arm(data[f'crash-{k}'], 'crash', BUDGET).failed / arm(data[f'crash-{k}'], 'crash', BUDGET).arrivals, 1, 100)} %"
                       for k in ("a", "b"))
           + "); the longer the first-token timeout, the fewer such retries and the less the budget "
           "matters (the review's whole-attempt-only clients, 30 or 120 s, found it did nothing measurable).")
        + f" In the black hole, breaker and retry_avoid_previous together "
        f"against neither change attainment by {said('contain', 'pp')}; "
        + "; ".join(f"{k} by {show(r, 1, 'pp')} ({lead_word[r[3]]})" for k, r in single.items())
        + f" (medians {_median(hole_rows[(False, 0)], 1, 100)} % with neither, "
        f"{_median(hole_rows[(True, breaker(data))], 1, 100)} % with both). "
        f"{wa - t_up:g} s after the crash ends, attainment without the budget against no incident: "
        f"{said('lingers', 'pp')}. Verdict: {v}.", "",
        "**Sensitivity to the step cost** (issue 23 item 6): not rerun. The black hole's containment does "
        "not depend on it (a fast failure takes milliseconds whatever a step costs); the crash's leads "
        "depend on it only through the survivors' capacity against the load, which a costlier prefill at "
        "the same load would change, so such a rerun would test a different overload, not this verdict "
        "(placing it needs the capacity per step-cost model, which the capacity stage does not measure)."), ""])


def row(data):
    """(claim, prediction, measured, verdict) for the verdict table."""
    c = comparisons(data)
    ca = calm(data["crash-a"])
    gap = float(data["after"].attrs["warmup_s"]) - _events(data)[2]
    return ("7. The retry trap",
            "retries amplify an incident; a 20 % budget contains a crash, a breaker and "
            "retry_avoid_previous a black hole",
            f"control calm ({ca[0]:.2f} attempts per request, {ca[1] * 100:.0f} % attainment); crash: "
            f"attempts per request {show(c['amplify-a'][0], 1, '%')} against no incident, budget "
            f"{show(c['budget-a'][0], 1, '%')} attempts, {show(c['attain-a'][0], 1, 'pp')} attainment; "
            f"black hole: breaker + avoid {show(c['contain'][0], 1, 'pp')}; {gap:g} s after the crash "
            f"{show(c['lingers'][0], 1, 'pp')}", verdict(data))
