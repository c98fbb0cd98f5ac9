"""The least-outstanding study on the server it speaks of (issue 44 item 2), its main arm:
its capacity table and every claim's design rerun on vLLM's default loop (``scheduler =
"vllm"``, asynchronous scheduling) with the roofline step cost of Llama-3.1-8B on an H100
(the form's default constants, routesim/step_cost/roofline.py), the page's replica
(reserve scheduler, linear 8B cost) kept as the sensitivity arm (each claim's section).
sweeps/token-routing-server.toml (results/token-routing-server/): stage ``capacity`` by
``python -m routesim.capacity`` (capacity-capacity.nc), stage ``counts`` by ``python -m
routesim.sweep`` (counts.nc: claim 1's three policies at loads placed against this
server's capacities). The other claims' server arms are stages ``server`` (or
``server-<x>``) of their own sweep files, at the same multiple of the same policy's
capacity as their design, the capacity here the server's (a claim's ``SERVER_BASIS``):
a claim module gives the arm as ``server(data)`` in its design's shape and its
prediction as ``SERVER_PREDICTION``, or says why not with ``SERVER_WHY``. Not a claim of
its own (no ``clauses``): its verdicts are the verdict table's main columns
(:func:`main_cells`), the page's replica's its sensitivity column (:func:`page_column`)."""

from pathlib import Path

import numpy as np

from ... import capacity as capacity_mod
from . import capacities, counts, factorial, workloads
from .common import (FIGURES, SERVER_ARM, SERVER_CAPACITY, SERVER_SEARCH, SERVER_SWEEP, arm_cell, details, finished, mark_finished, open_stage, read, save,
                     show, squeeze, steady_words, unsteady_cells, verdict_cells, verdict_word, verdicts)

SWEEP = SERVER_SWEEP
SWEEPS = (SWEEP,)
"""Run by :func:`run` (the study command hands this file to it, not to the sweep loop)."""
RESULTS = SERVER_CAPACITY[0]
SEARCH = SERVER_SEARCH
"""The capacity stage's search (:data:`.common.SERVER_SEARCH`)."""
RUN = ("counts", "factorial")
"""The stages :func:`run` hands to ``python -m routesim.sweep`` after the search."""
MEASURED = "measured on the server (mean [95 % interval])"
"""The verdict table's measured column: the server arm's, the study's main arm."""
PAGE_COLUMN = "on the page's replica (mechanism; added)"
"""The verdict table's sensitivity column: the page's replica (each claim's section)."""
NOT_RUN = "not run"
CLAIMS = workloads.CLAIMS
"""The claims whose server arm the column and the section read (claim 1's is this
module's own stage ``counts``)."""

PREDICTION = (
    "**Prediction** (written in this module before the comparisons ran, after a cost probe of "
    "two least_tokens runs at 41 req/s). (1) The seed's mechanism holds on the server as on the "
    "page's replica: least_tokens' TTFT p99 below least_requests' and round_robin's. Its cause "
    "is prefill queued behind the long class's 12,000-token prompts, and the roofline prices "
    "prefill higher than the page's formula (0.0271 ms per computed token, the FLOPs at 60 % of "
    "the H100's peak, against 0.0198 plus the pair term: a 12,000-token prompt about 390 ms "
    "against 300 ms), so a count's misjudgement costs as much or more. (2) Capacities at the "
    "TTFT SLO do not rise: the TTFT tail is prefill, which the cheaper decode step (100 "
    "sequences of 1,100 tokens: about 15 ms against 22.6 ms) does not shorten, and the "
    "asynchronous loop starts a request that arrives during a busy batch one batch later; the "
    "order stays round_robin last, the work-aware scores first. (3) TPOT falls for every "
    "policy (cheaper decode), but least_tokens' TPOT p99 stays above least_requests' (the "
    "added clause still fails): it places short requests beside the long prompts' prefill "
    "chunks, the steps that set a decoder's tail, and the roofline makes such a step "
    "costlier. (4) vLLM admits without reserving a prompt's whole KV and preempts by "
    "recomputation; with the default pool at these loads it rarely needs to.")
"""The server arm's prediction, fixed before its runs (issue 44 item 2)."""
PLACEMENT = (
    "**The first placement.** An earlier version searched these capacities over 4 seeds (round_robin 36, "
    "least_requests 44, least_tokens and power_of_d 48, least_kv 32, least_cost 24 req/s) and placed "
    "every server arm against them, so that least_kv and least_cost fell below round_robin. Over 16 "
    "seeds four of them are one 4 req/s step lower and least_kv's and least_cost's higher, and neither "
    "falls below round_robin. Every arm was placed again at its design's multiple of the capacities "
    "over 16 seeds and rerun (claim 1 at 41 req/s, where it ran at 43); the predictions, written before "
    "the first runs, name that placement's loads. Stage `factorial` was not moved: 36 req/s, "
    "round_robin's capacity at 4 seeds. Both placements ran claims 2 to 9's arms over 8 seeds and claim 1's "
    "at one load (43, then 41 req/s); this version runs them over 16 seeds, as the page's replica, and claim "
    "1's at its design's three loads, and over 16 seeds the server's one-replica curve puts claim 9's threshold at "
    "250,000 tokens (275,000 over 8), where its doors now run.")
"""Why the server arms' loads differ from those their predictions name (history, fixed)."""


def run(results_root, quiet=False, resume=False) -> int:
    """The capacity search, then the stages of :data:`RUN`, into
    ``results_root``/token-routing-server/; under ``resume`` each of the two this command
    finished with the same sweep file, routesim and arguments is kept
    (:func:`.common.finished`; an unfinished sweep keeps its chunks). Returns an exit status."""
    from ... import sweep as sweep_cli
    out = Path(results_root) / RESULTS
    if not (resume and finished(out, "capacity", SWEEP, ["capacity-capacity.nc"], SEARCH)):
        rc = capacity_mod.main([SWEEP, *SEARCH, "--out", str(out)] + ["--quiet"] * quiet)
        if rc:
            return rc
        mark_finished(out, "capacity", SWEEP, SEARCH)
    stages = [x for s in RUN for x in ("--stage", s)]
    if resume and finished(out, "stages", SWEEP, [f"{s}.nc" for s in RUN], stages):
        return 0
    rc = sweep_cli.main([SWEEP, *stages, "--out", str(out)] + ["--quiet", "--no-tables"] * quiet
                        + ["--resume"] * resume)
    if rc == 0:
        mark_finished(out, "stages", SWEEP, stages)
    return rc


def load(root, loaded=None):
    """{"capacity": the search's Dataset (policy × rate_rps × seed), "counts": claim 1's
    stage in :func:`.counts.load`'s shape (policy × rate_rps × seed), "root", "factorial":
    :func:`.factorial.load`'s Dataset or None, "claims": {claim module's name: its data}
    of the claims of :data:`CLAIMS` that loaded}, or None unless the first two ran.
    ``loaded``: the claims' data the caller has already loaded ({module name: data}, the
    study's ``_loaded``), else each claim is loaded here (by name, as
    :func:`.workloads.load`: the figures' workers get the data pickled)."""
    folder = Path(root) / RESULTS
    cap, cts = folder / "capacity-capacity.nc", folder / "counts.nc"
    if not (cap.exists() and cts.exists()):
        return None
    ds = open_stage(cts)
    if "rate_rps" not in ds.dims:
        ds = ds.expand_dims(rate_rps=[float(ds.attrs["rate_rps"])])
    if loaded is None:
        loaded = {claim.__name__: claim.load(root) for claim in CLAIMS if claim is not counts}
    claims = {c.__name__: loaded[c.__name__] for c in CLAIMS if loaded.get(c.__name__) is not None}
    return {"capacity": squeeze(read(cap)), "counts": ds, "root": Path(root), "factorial": factorial.load(folder),
            "claims": claims}


def claim1(data):
    """Claim 1's data on the server in :mod:`.counts`' shape ({"root", "counts"})."""
    return {"root": data["root"], "counts": data["counts"]}


def verdicts_of(data):
    """Claim 1's verdicts on the server (:func:`.common.verdicts` of :func:`.counts.clauses`)."""
    return verdicts(counts.clauses(claim1(data)))


def verdict(data):
    """None: the server arm's verdicts are the verdict table's column (:func:`column`)."""
    return None


def row(data):
    return None


def figure(data, figures_dir=FIGURES):
    """The capacities' figure (:func:`capacity_figure`) and each claim's main figure of its
    server arm (:func:`claim_figures`)."""
    return capacity_figure(data, figures_dir) + claim_figures(data, figures_dir)


def drawn(claim):
    """The claim's ``main_figure(data, figures_dir, arm)`` (:class:`.common.Arm`), or None:
    the claims whose figure reads only their design's main stages draw it for the server
    arm too; the others' figures read stages that run on the page's replica alone
    (mechanism, sensitivity)."""
    return getattr(claim, "main_figure", None)


def claim_figures(data, figures_dir=FIGURES) -> list:
    """Each claim's main figure (:func:`drawn`) of its server arm that ran
    (figures/<its FIGURE>-server.png/.svg, :data:`.common.SERVER_ARM`); the paths written."""
    paths = []
    for claim in CLAIMS:
        draw, a = drawn(claim), arm_of(claim, data)
        if draw is not None and a is not None:
            paths += draw(a, figures_dir, SERVER_ARM)
    return paths


def figure_line(claim) -> list:
    """The lines linking ``claim``'s server figure (:func:`claim_figures`), [] if it has none."""
    if drawn(claim) is None:
        return []
    return [f"![On the server](../figures/{claim.FIGURE}{SERVER_ARM.suffix}.png)", ""]


def capacity_figure(data, figures_dir=FIGURES):
    """Each policy's capacity at the SLO on the page's replica and on the server, each with
    its bootstrap interval over seeds (lor-server.png and .svg)."""
    from matplotlib.figure import Figure
    ds = data["capacity"]
    pols = [str(p) for p in ds.policy.values]
    fig = Figure(figsize=(6.0, 4.0), layout="constrained")  # laid out at the PNG's dpi (.common.save)
    ax = fig.subplots()
    y = np.arange(len(pols))
    arms = ((_page_file(data["root"]), +0.14, "o", "#444444", "page's replica (reserve, linear 8B cost)"),
            (ds, -0.14, "s", "#d62728", "server (vLLM async, roofline H100)"))
    for arm, dy, marker, color, label in arms:
        if arm is None:
            continue
        at = arm.sel(policy=[p for p in pols if p in arm.policy.values])
        yy = np.array([pols.index(str(p)) for p in at.policy.values]) + dy
        ax.plot(at.capacity_rps.values.astype(float), yy, marker, color=color, mfc="none" if marker == "o" else color,
                label=f"{label}, {arm.sizes['seed']} seeds")
        if "capacity_rps_low" in at:
            ax.hlines(yy, at.capacity_rps_low.values.astype(float), at.capacity_rps_high.values.astype(float),
                      color=color, lw=1.2)
    ax.set_yticks(y, pols)
    ax.invert_yaxis()
    ax.set_xlabel(f"capacity at TTFT p99 ≤ {float(ds.attrs['capacity_bound']):,.0f} ms "
                  "(req/s; bar: 95 % interval over seeds)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1, frameon=False)
    ax.set_title("Capacity of 8 replicas: the page's replica against the server", fontsize=10)
    return save(fig, "lor-server", figures_dir)


def _page_file(root):
    """The page's replica's capacity search (the study's capacity stage), or None."""
    path = Path(root) / capacities.CAPACITY_RESULTS / "default-capacity.nc"
    return squeeze(read(path)) if path.exists() else None


def arm_of(claim, server):
    """``claim``'s server arm in its design's shape, or None when it did not run
    (``server`` None: the arm not run at all): claim 1's from this arm's stage ``counts``
    (:func:`claim1`), every other claim's from its ``server(data)``
    (:func:`.workloads.arm`, the claim's data as ``server["claims"]`` holds it)."""
    if server is None:
        return None
    if claim is counts:
        return claim1(server) if server.get("counts") is not None else None
    return workloads.arm(claim, server.get("claims", {}).get(claim.__name__), "server")


def section_lines(claim, server) -> list:
    """The main arm's lines of ``claim``'s section, placed after its design (a claim
    section's ``main``: :func:`.common.page_table`): the server arm's loads against the
    server's capacity, its seeds and steady state in brief, each comparison of its verdict
    (claim 1: :func:`comparison_table`, the claim's own columns; any other claim:
    :func:`.workloads.clause_table`) and whether the verdicts its prediction named held,
    then its figure (:func:`figure_line`); the prediction and the steady state cell by cell
    as details. [] when the arm did not run."""
    a = arm_of(claim, server)
    if a is None:
        return []
    if claim is counts:
        where, table, pred = f"stage `counts` of `{SWEEP}`", comparison_table(server).split("\n"), PREDICTION
        stages, held_words = [("counts", a["counts"])], ""
    else:
        stages = _stages(a)
        names = workloads._and([f"`{ds.attrs.get('stage', k)}`" for k, ds in stages])
        where = f"{'stage' if len(stages) == 1 else 'stages'} {names}, {placed(claim, a, server)}"
        table, pred = workloads.clause_table(claim, a), getattr(claim, "SERVER_PREDICTION", "")
        want = getattr(claim, "SERVER_PREDICTED", None)
        held_words = (f" The verdicts its prediction named before its runs: {held(verdicts(claim.clauses(a)), want)}."
                      if want else "")
    seeds = "/".join(str(n) for n in sorted({int(ds.sizes.get("seed", 0)) for _, ds in stages}))
    return [f"**On the server** ({where}; {seeds} seeds; {_steady_brief(stages)}): its verdict's "
            "comparisons, paired by seed." + held_words, "", *table, "", *figure_line(claim),
            *details("The server's prediction and steady state", pred, "",
                     "; ".join(f"Stage `{ds.attrs.get('stage', k)}`: {steady_words(ds, _by(ds))}"
                               for k, ds in stages) + "."), ""]


def _steady_brief(stages) -> str:
    """'every arm steady', or the runs flagged not steady by
    :func:`routesim.steady.count_unsteady` and the cells not steady
    (:func:`.common.unsteady_cells`, by their medians or their runs), each of how many,
    over the stages (:func:`_stages`' pairs)."""
    from ... import steady
    runs = [steady.count_unsteady(ds) for _, ds in stages]
    cells = [unsteady_cells(ds, _by(ds)) for _, ds in stages]
    bad_runs, bad_cells = sum(b for b, _ in runs), sum(len(c) for c, _ in cells)
    if not (bad_runs or bad_cells):
        return "every arm steady"
    return "; ".join([f"runs not steady: {bad_runs} of {sum(n for _, n in runs)}",
                      *([f"cells not steady: {bad_cells} of {sum(n for _, n in cells)}"] if bad_cells else [])])


def why_not(claim) -> str:
    """Why ``claim`` has no server arm (its ``SERVER_WHY``)."""
    return getattr(claim, "SERVER_WHY", "the stages have not run")


def main_cells(claim, server):
    """The verdict table's main cells of ``claim`` (a claim module) on the server, the
    study's main arm: (measured, the mechanism's cell, the added clauses' cell; the two
    of :func:`.common.verdict_cells`), or None when its server arm did not run.
    ``measured`` is the measured text of the claim's own verdict row of its arm ``a``
    (``row(a)[2]``: every claim's arm is in its design's shape)."""
    a = arm_of(claim, server)
    if a is None:
        return None
    return (claim.row(a)[2], *verdict_cells(verdicts(claim.clauses(a)), claim.ADDED_WORDS))


def not_run_cells(claim, server) -> tuple:
    """The main cells (:func:`main_cells`' three) of a claim whose server arm did not run:
    "not run: why" (:func:`why_not`; the server arm not run at all: :data:`NOT_RUN`),
    then :data:`NOT_RUN` twice."""
    return (NOT_RUN if server is None else f"{NOT_RUN}: {why_not(claim)}", NOT_RUN, NOT_RUN)


def page_column(claim, page, main) -> str:
    """The verdict table's :data:`PAGE_COLUMN` cell of ``claim``: its verdicts on the
    page's replica (``page``: the claim's data) and whether either changes from the
    server's (``main``: :func:`main_cells`), by the rule of the Azure-length column
    (:func:`.common.arm_cell`, brief); the page's verdicts alone when the server arm did
    not run (``main`` None)."""
    v = verdicts(claim.clauses(page))
    if main is None:
        mech, added = verdict_cells(v, claim.ADDED_WORDS)
        return f"{verdict_word(mech)}; {verdict_word(added)}"
    return arm_cell(v, claim.ADDED_WORDS, main[1:], brief=True)


def claim_arms(data) -> list:
    """[(claim module, its title, its server arm in the design's shape or None, its
    verdicts on the server or None, its verdicts on the page's replica)] of every claim of
    :data:`CLAIMS` but claim 1 (this module's own stage) whose data loaded."""
    out = []
    for claim in CLAIMS:
        d = data.get("claims", {}).get(claim.__name__)
        if claim is counts or d is None:
            continue
        a = workloads.arm(claim, d, "server")
        out.append((claim, workloads._title(claim, data["claims"]), a,
                    None if a is None else verdicts(claim.clauses(a)), verdicts(claim.clauses(d))))
    return out


def placed(claim, a, data) -> str:
    """'27 req/s: 0.84 × least_kv's 32 on the server': a server arm's loads against the
    server's capacity of the policy the claim's loads are placed against (the claim's
    ``SERVER_BASIS``; the capacity stage of this arm)."""
    rs, basis = workloads.rates(a), getattr(claim, "SERVER_BASIS", None)
    cap = data["capacity"]
    c = float(cap.capacity_rps.sel(policy=basis)) if basis in cap.policy.values else np.nan
    loads = ", ".join(f"{r:g}" for r in rs)
    if not np.isfinite(c):
        return f"{loads} req/s"
    return (f"{loads} req/s: {', '.join(f'{r / c:.2f}' for r in rs)} × {basis}"
            f"{chr(39) if basis.endswith('s') else chr(39) + 's'} {c:g} on the server")


def held(v, predicted) -> str:
    """Whether a prediction of the verdicts ``predicted`` (mechanism, added: a claim's
    ``SERVER_PREDICTED``) held against the verdicts ``v`` (:func:`.common.verdicts`):
    "held", "held in part" (one of the two) or "failed"."""
    got = (v["mechanism"], v["added"] or "none added")
    right = [a == b for a, b in zip(got, predicted)]
    return "held" if all(right) else "held in part" if any(right) else "failed"


def _num(title) -> str:
    return title.split(".")[0]


def claims_lines(data) -> list:
    """The section's paragraph on the claims rerun on the server: which ran, their
    seeds and warm-up, the verdicts that change against the page's replica and whether
    each prediction held, the claims not run (each arm's load, prediction, comparisons and
    steady state are in its claim's section: :func:`section_lines`)."""
    arms = claim_arms(data)
    ran = [(c, t, a, v, p) for c, t, a, v, p in arms if a is not None]
    if not ran:
        return []
    changes, outcome = [], {}
    for claim, title, a, v, page in ran:
        cells, pcells = verdict_cells(v, claim.ADDED_WORDS), verdict_cells(page, claim.ADDED_WORDS)
        moved = [k for k, x, y in (("mechanism", cells[0], pcells[0]), ("added", cells[1], pcells[1]))
                 if verdict_word(x) != verdict_word(y)]
        if moved:
            changes.append(f"claim {_num(title)} ({', '.join(moved)})")
        pred = getattr(claim, "SERVER_PREDICTED", None)
        if pred is not None:
            outcome.setdefault(held(v, pred), []).append(_num(title))
    skipped = [_num(t) for _, t, a, _, _ in arms if a is None]
    seeds = sorted({int(ds.sizes.get("seed", 0)) for _, _, a, _, _ in ran for _, ds in _stages(a)})
    warm = sorted({float(ds.attrs.get("warmup_s", np.nan)) for _, _, a, _, _ in ran for _, ds in _stages(a)})
    n = workloads._and([_num(t) for _, t, _, _, _ in ran])
    preds = ("each predicted verdict held" if list(outcome) == ["held"] else "the predicted verdicts " + "; ".join(
        f"{k} for {'claim' if len(ns) == 1 else 'claims'} {workloads._and(ns)}" for k, ns in outcome.items()))
    later = f" (a window its design starts later: {', '.join(f'{w:,.0f}' for w in warm[1:])} s)" if len(warm) > 1 else ""
    return [f"**Claims {n} on the server** ({'/'.join(map(str, seeds))} seeds, "
            f"{warm[0]:,.0f} s warm-up{later}, each at its design's multiple of the server's "
            "capacity; predictions written before the runs; each claim's comparisons in its section): "
            + (f"verdicts that differ from the page's replica: {workloads._and(changes)}" if changes
               else "every verdict as on the page's replica")
            + f"; {preds}."
            + (f" {'Claim' if len(skipped) == 1 else 'Claims'} {workloads._and(skipped)}: not run (cost)."
               if skipped else ""), ""]


def _stages(a):
    """[(name, Dataset)] of a claim's arm ``a`` (its Datasets, in a dict or alone), the
    stage of more than one replica, in order."""
    import xarray as xr
    if isinstance(a, xr.Dataset):
        return [("server", a)]
    if "whole" in a:   # a step-cost variant's dict (claim 3): its stage and its routers' stage
        return [("server", a["whole"]), ("server-routers", a["routers"])]
    out = []
    for k, ds in a.items():
        if isinstance(ds, dict):
            out += _stages(ds)
        elif isinstance(ds, xr.Dataset) and k != "whole":
            out.append((k, ds))
    return out


def _by(ds):
    """The axes a stage's steady-state words go by: every axis but seed and replica."""
    return tuple(d for d in ds.dims if d not in ("seed", "replica"))


def page_capacities(root):
    """{policy: capacity req/s} of the page's replica (the capacity stage), or {} if not run."""
    ds = _page_file(root)
    return {} if ds is None else {str(p): float(ds.capacity_rps.sel(policy=p)) for p in ds.policy.values}


def capacity_rows(data):
    """[(policy, page's capacity, server's capacity text, its interval, runs not steady at
    it / runs)] of every searched policy."""
    ds = data["capacity"]
    page = page_capacities(data["root"])
    out = []
    for p in ds.policy.values:
        c, *_, bad = capacities.at_capacity(ds, p)
        out.append((str(p), page.get(str(p), np.nan), capacities.cap_text(ds, c), capacities.interval_text(ds, p),
                    f"{bad[0]} of {bad[1]}" if bad is not None else "—"))
    return out


def best_capacity(ds):
    """The largest capacity of any policy (req/s; NaN if none)."""
    c = ds.capacity_rps.values.astype(float)
    return float(np.nanmax(c)) if np.isfinite(c).any() else np.nan


def headline(data) -> dict:
    """{baseline: (load, baseline, TTFT p99, TPOT p99, attainment comparisons)} of
    least_tokens against each baseline at claim 1's headline load
    (:func:`.counts.headline_load`)."""
    rows = comparison_rows(data)
    r = counts.headline_load({x[0] for x in rows})
    return {x[1]: x for x in rows if x[0] == r}


def comparison_rows(data):
    """[(load, baseline, TTFT p99, TPOT p99, attainment comparisons)] of least_tokens
    against each baseline at every load of the server's claim 1 stage."""
    return [(r, b, c[("ttft_p99", b)], c[("tpot_p99", b)], c[("attainment", b)])
            for r, c in counts.main_comparisons(claim1(data)).items() for b in counts.BASES]


def table(data):
    """The section's one table: per policy the two replicas' capacities, then claim 1's
    comparisons on the server."""
    lines = ["| policy | capacity, page's replica req/s | capacity, server req/s [95 % interval] | "
             "runs not steady at it |", "|---|---|---|---|"]
    for p, page, c, iv, bad in capacity_rows(data):
        lines.append(f"| {p} | {page:g} | {c} [{iv}] | {bad} |" if np.isfinite(page) else
                     f"| {p} | — | {c} [{iv}] | {bad} |")
    return "\n".join(lines)


def comparison_table(data):
    lines = ["| load req/s | least_tokens vs | ΔTTFT p99 % | ΔTPOT p99 % | Δattainment pp |", "|---|---|---|---|---|"]
    best = best_capacity(data["capacity"])
    for r, b, ttft, tpot, att in comparison_rows(data):
        lines.append(f"| {r:g} ({r / best:.2f} × {best:g}) | {b} | {show(ttft)} | {show(tpot)} | {show(att, 2)} |")
    return "\n".join(lines)


def section(data):
    """The document's section: the design, the capacity table and figure, claim 1's
    verdicts on the server; the prediction, claim 1's comparisons (with its figure on the
    server, when claim 1's own section did not run) and the steady state as details
    (:func:`.common.details`, the appendix)."""
    cap, cts = data["capacity"], data["counts"]
    v = verdicts_of(data)
    page = page_capacities(data["root"])
    rates = ", ".join(f"{float(r):g}" for r in cts.rate_rps.values)
    return "\n".join([
        "## On the server it speaks of", "",
        "**Design** (`" + SWEEP + "`). The study's main arm: its baseline on vLLM's default loop "
        "(`scheduler = \"vllm\"`, "
        "asynchronous scheduling) with the roofline step cost of Llama-3.1-8B on one H100 SXM (the form's "
        "defaults: weights and KV read at 80 % of 3,350 GB/s, FLOPs at 60 % of 989 TFLOP/s, 4 ms overhead; "
        "calibrate those fractions and the overhead to your server, `python -m routesim.calibrate --cost "
        f"roofline`): capacities by the study's rule over {cap.sizes['seed']} seeds, claim 1's three policies "
        f"at {rates} req/s over {cts.sizes['seed']}. A vllm run costs 11 to 14 reserve runs; the other claims "
        "in their sections. Each prediction was written in its module before the "
        "comparisons ran (in the appendix).", "",
        table(data), "",
        "![Capacities on the server](../figures/lor-server.png)", "",
        f"**Claim 1 on the server** (every load in its section): the seed's mechanism "
        f"*{v['mechanism']}*; added: *{v['added']}*.", "",
        *details("The claims on the server", *claims_lines(data)),
        *([] if counts.__name__ in data.get("claims", {}) else
          details("Claim 1 on the server (its section did not run)", PREDICTION, "", comparison_table(data), "",
                  *figure_line(counts))),
        *(factorial.lines(data["factorial"]) if data.get("factorial") is not None else []),
        *details("The search, the placement, the reading",
                 PLACEMENT, "",
                 f"The capacity search: `python -m routesim.capacity {SWEEP} {' '.join(SEARCH)}`.", "",
                 "Steady state: the capacity table's last column (the runs at each capacity). "
                 + _reading(data, page)), ""])


def _reading(data, page) -> str:
    """The prediction's points against the runs, in words: the capacities' moves against
    the page's replica, least_tokens' TPOT p99 against least_requests', the preemptions."""
    cap, cts = data["capacity"], data["counts"]
    moves = {p: (float(cap.capacity_rps.sel(policy=p)), page.get(str(p), np.nan)) for p in cap.policy.values}
    rose = [f"{p} {(s / a - 1) * 100:+.0f} %" for p, (s, a) in moves.items() if np.isfinite(s) and s > a]
    fell = [f"{p} {(s / a - 1) * 100:+.0f} %" for p, (s, a) in moves.items() if np.isfinite(s) and s < a]
    r, b, _, tpot, _ = headline(data)["least_requests"]
    pre = ", ".join(f"{p} {float(np.nanmedian(cts.preemptions.sel(policy=p, rate_rps=r))):g}"
                    for p in cts.policy.values)
    return ("**Reading.** Capacity against the page's replica: "
            + (f"higher for {', '.join(rose)}" if rose else "higher for none")
            + (f"; lower for {', '.join(fell)}" if fell else "")
            + f". least_tokens' TPOT p99 against least_requests' at {r:g} req/s: {show(tpot)} %"
            + {1: " (a lead: above it)", -1: " (a lead: below it)", 0: " (no lead)"}[tpot[3]]
            + f". Preemptions in the window there (median over seeds): {pre}.")


def _ranked(ds):
    """[(policy, capacity)] by capacity, highest first (NaN last)."""
    by = [(str(p), float(ds.capacity_rps.sel(policy=p))) for p in ds.policy.values]
    return sorted(by, key=lambda x: -x[1] if np.isfinite(x[1]) else np.inf)


def reversed_below(cap, page, base="round_robin"):
    """The policies whose capacity is above ``base``'s on the page's replica (``page``:
    {policy: req/s}) and below it on the server (``cap``: the search's Dataset)."""
    if base not in page or base not in cap.policy.values:
        return []
    srv = {p: c for p, c in _ranked(cap)}
    return [p for p, c in srv.items() if p != base and p in page and page[p] > page[base]
            and np.isfinite(c) and c < srv[base]]


def page_lines(data, page_counts=None, lead=None) -> list:
    """The practitioner's summary's paragraph on the page's replica, the sensitivity arm
    beside the server (the summary's first paragraphs read the server): its capacities
    with the server's in brackets, those apart by more than the server search's step,
    claim 1's headline there (``lead``: its words, given by the summary; None leaves it
    out) and the claims whose verdicts there differ from the server's (``page_counts``:
    claim 1's data on the page's replica, :func:`.counts.load`, or None)."""
    cap = data["capacity"]
    srv, page = dict(_ranked(cap)), page_capacities(data["root"])
    step = float(cap.attrs.get("capacity_resolution", np.nan))
    ranked = sorted(page, key=lambda p: -page[p] if np.isfinite(page[p]) else np.inf)
    words = ", ".join(f"{p} {page[p]:g}" + (f" ({capacities.cap_text(cap, srv[p])})" if p in srv else "")
                      for p in ranked)
    apart = [f"{p} {'higher' if page[p] > srv[p] else 'lower'}" for p in ranked
             if p in srv and np.isfinite(srv[p]) and abs(page[p] - srv[p]) > step]
    below, differ = reversed_below(cap, page), _differ(data, page_counts)
    if not (page or lead or differ):
        return []
    text = ("**On the page's replica** (the sensitivity arm: reserve scheduler, linear 8B cost)"
            + (f": capacity at the SLO, req/s (the server's in brackets): {words}" if page else "")
            + (f"; apart by more than the server search's {step:g} req/s step: {', '.join(apart)} here"
               if apart else "")
            + (f"; {workloads._and(below)} above round_robin here and below it on the server"
               + (f" ({factorial.brief(data['factorial'])})" if data.get("factorial") is not None else "")
               if below else "")
            + "." + (f" {lead}" if lead else "") + differ)
    return [text, ""]


def _differ(data, page_counts) -> str:
    """' Verdicts that differ from the server's: claims 1 (added) and 9 (mechanism).' over
    the claims whose server arm ran (claim 1 when ``page_counts`` is given), or "" when
    none ran."""
    ran = [(_num(t), v, p) for _, t, a, v, p in claim_arms(data) if a is not None]
    if page_counts is not None:
        ran.insert(0, ("1", verdicts_of(data), verdicts(counts.clauses(page_counts))))
    if not ran:
        return ""
    changed = [f"{n} ({', '.join(k for k in ('mechanism', 'added') if v[k] != p[k])})"
               for n, v, p in ran if (v["mechanism"], v["added"]) != (p["mechanism"], p["added"])]
    return (f" Verdicts that differ from the server's: {'claim' if len(changed) == 1 else 'claims'} "
            f"{workloads._and(changed)}." if changed else " Every verdict as on the server.")
