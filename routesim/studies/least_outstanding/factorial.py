"""Which part of the server moves the KV-aware policies (issue 44, the server arm's open
question): on vLLM's asynchronous loop with the roofline cost, least_kv's and least_cost's
capacities fall by more than the other policies' (42 → 36 and 40 → 32 req/s at 16 seeds;
at 4 seeds the search put them below round_robin's, which 16 seeds do not bear out). The
server differs from the page's replica in two parts, its scheduler and its step cost;
stage ``factorial`` of sweeps/token-routing-server.toml (results/token-routing-server/
factorial.nc) crosses them, ``scheduler`` × ``step_cost`` × policy at one load, paired by
seed, and this module reads which part carries the move."""

from pathlib import Path

import numpy as np

from .common import compare, details, open_stage, show, steady_words, verdict_of

STAGE = "factorial"
BASE = "round_robin"
POLICIES = ("least_kv", "least_cost")
SCHEDULERS = (("reserve", "the page's scheduler"), ("vllm", "vLLM's asynchronous loop"))
COSTS = (("linear", "the page's linear cost"), ("roofline", "the roofline H100 cost"))
PREDICTION = (
    "**Prediction** (written before stage `factorial` ran, on its seeds 101-108). The last stop's "
    "hypothesis was the scheduler: vLLM allocates a prompt's KV blocks chunk by chunk as it computes "
    "them, where the page's scheduler reserves the whole prompt when it admits it, so on vLLM a "
    "replica that has just been given work still looks empty to least_kv. A pilot on seeds 1-4 (every "
    "cell at 30 and 36 req/s; least_kv's TTFT p99 against round_robin's, medians over seeds) did not "
    "bear it out: at 36 req/s +27 % on the page's scheduler with the roofline cost, +20 % on vLLM with "
    "it, +16 and +13 % with the linear cost; at 30 req/s +18, +16, -7 and +1 %. The prediction for the "
    "new seeds: the step cost carries the move (least_kv's and least_cost's TTFT p99 against "
    "round_robin's higher with the roofline than with the linear cost, under either scheduler); the "
    "scheduler moves neither by a material amount.")
"""This stage's prediction, fixed before its runs."""


def load(folder):
    """Stage ``factorial``'s Dataset (policy × scheduler × step_cost × seed) in the server
    arm's results ``folder``, or None if it did not run."""
    return open_stage(Path(folder) / f"{STAGE}.nc")


METRICS = (("ttft_p99", "TTFT p99"), ("ttft_p50", "TTFT p50"))
"""What each cell compares, against round_robin's: the tail the capacities follow, and the median."""


def _ratio(ds, var, policy, **cell):
    """Per seed (shape (seed,)): ``policy``'s ``var`` over round_robin's in ``cell``."""
    sel = ds[var].sel(**cell)
    return (sel.sel(policy=policy) / sel.sel(policy=BASE)).values


def comparisons(ds, var="ttft_p99"):
    """{(policy, scheduler, step_cost): compare(policy's ``var``, round_robin's)} in
    every cell, and {(policy, "cost", scheduler): the roofline's ratio against the linear
    cost's}, {(policy, "scheduler", step_cost): vllm's against reserve's}: ratios of
    per-seed ratios, paired by seed (:func:`.common.compare`, relative, in %)."""
    out = {}
    for p in POLICIES:
        for s, _ in SCHEDULERS:
            for c, _ in COSTS:
                cell = ds[var].sel(scheduler=s, step_cost=c)
                out[(p, s, c)] = compare(cell.sel(policy=p).values, cell.sel(policy=BASE).values)
        for s, _ in SCHEDULERS:
            out[(p, "cost", s)] = compare(_ratio(ds, var, p, scheduler=s, step_cost="roofline"),
                                          _ratio(ds, var, p, scheduler=s, step_cost="linear"))
        for c, _ in COSTS:
            out[(p, "scheduler", c)] = compare(_ratio(ds, var, p, scheduler="vllm", step_cost=c),
                                               _ratio(ds, var, p, scheduler="reserve", step_cost=c))
    return out


def verdict(cmp, policy):
    """The prediction's verdict for ``policy`` under the study's rule
    (:func:`.common.verdict_of`): the roofline against the linear cost predicted to raise
    its TTFT p99 against round_robin's under each scheduler (+1), vLLM against the page's
    scheduler predicted to move it by no material amount under either cost (0)."""
    keys = [(("cost", s), +1) for s, _ in SCHEDULERS] + [(("scheduler", c), 0) for c, _ in COSTS]
    return verdict_of([cmp[(policy, *k)][3] for k, _ in keys], [sign for _, sign in keys])


def table(ds):
    """Markdown: per cell each policy's TTFT p99 and p50 against round_robin's, then each
    part's move (ratios of ratios)."""
    cmps = {var: comparisons(ds, var) for var, _ in METRICS}
    cols = [(var, p) for var, _ in METRICS for p in POLICIES]
    names = dict(METRICS)
    lines = ["| scheduler | step cost | " + " | ".join(f"{p}: {names[v]} vs {BASE} %" for v, p in cols) + " |",
             "|---|---|" + "---|" * len(cols)]
    rows = [(s, c, (s, c)) for s, _ in SCHEDULERS for c, _ in COSTS]
    rows += [(s, "roofline against linear", ("cost", s)) for s, _ in SCHEDULERS]
    rows += [("vllm against reserve", c, ("scheduler", c)) for c, _ in COSTS]
    for a, b, key in rows:
        lines.append(f"| {a} | {b} | " + " | ".join(show(cmps[v][(p, *key)]) for v, p in cols) + " |")
    return "\n".join(lines)


def stacked(ds):
    """{policy: the most requests a replica held at once (mean over replicas, median over
    seeds and cells)}: how far each policy piles work on one replica."""
    most = ds.replica_max_outstanding.mean("replica")
    return {str(p): float(most.sel(policy=p).median()) for p in ds.policy.values}


def sentence(ds) -> str:
    """The section's paragraph on the question: each policy's verdict and moves, then
    what the medians show in every cell."""
    cmp, med = comparisons(ds), comparisons(ds, "ttft_p50")
    rate = float(ds.attrs.get("rate_rps", np.nan))
    scheduler = any(cmp[(p, "scheduler", c)][3] for p in POLICIES for c, _ in COSTS)
    parts = "; ".join(f"{p}: the roofline against the linear cost moves it {show(cmp[(p, 'cost', 'vllm')])} % on "
                      f"vLLM, {show(cmp[(p, 'cost', 'reserve')])} % on the page's scheduler; vLLM against the page's "
                      f"scheduler {show(cmp[(p, 'scheduler', 'roofline')])} % with the roofline, "
                      f"{show(cmp[(p, 'scheduler', 'linear')])} % with the linear cost (prediction: "
                      f"*{verdict(cmp, p)}*)" for p in POLICIES)
    cells = [(s, c) for s, _ in SCHEDULERS for c, _ in COSTS]
    above = all(med[(p, s, c)][3] > 0 for p in POLICIES for s, c in cells)
    p50 = "; ".join(f"{p} " + ", ".join(show(med[(p, s, c)]) for s, c in cells) for p in POLICIES)
    most = stacked(ds)
    return (f"**Which part of the server moves least_kv and least_cost** (stage `{STAGE}`: scheduler × step cost "
            f"at {rate:g} req/s, {ds.sizes['seed']} fresh seeds, each policy's TTFT p99 against round_robin's, "
            "paired by seed; the prediction and the table in the appendix). "
            + ("The scheduler, as the last stop guessed, moves them: " if scheduler else
               "Not the scheduler, as the last stop guessed: ") + parts + ". "
            "Within a cell a window's TTFT p99 varies too much between seeds to order the policies; the median "
            f"does not: TTFT p50 against round_robin's ({' / '.join(f'{s}, {c}' for s, c in cells)}) {p50} %"
            + (", above it in every cell" if above else "")
            + ". They pile more requests onto one replica: the most a replica held at once was "
            + ", ".join(f"{p} {most[p]:.0f}" for p in (BASE, *POLICIES))
            + " (mean over replicas, median over runs). Why the roofline widens that penalty more than the linear "
            "cost does is not established here.")


def brief(ds) -> str:
    """A clause for the practitioner's summary: whether the scheduler moves the KV-aware
    policies against round_robin, and in how many of the comparisons the cost does."""
    cmp = comparisons(ds)
    sched = sum(cmp[(p, "scheduler", c)][3] != 0 for p in POLICIES for c, _ in COSTS)
    cost = sum(cmp[(p, "cost", s)][3] > 0 for p in POLICIES for s, _ in SCHEDULERS)
    n = len(POLICIES) * 2
    return (("vLLM's scheduler does not move them" if not sched else f"vLLM's scheduler moves them in {sched} of {n} "
             "comparisons") + f"; the roofline cost raises their TTFT p99 against round_robin's in {cost} of {n} "
            f"(stage `{STAGE}`)")


def lines(ds) -> list:
    """The section's details for the appendix: the paragraph, the prediction, the table
    and the steady state (16 seeds put neither KV-aware policy below round_robin on the
    server, the reversal this stage was built to explain: it is no longer a headline)."""
    return details("Which part of the server moves the KV-aware policies", sentence(ds), "", PREDICTION, "",
                   table(ds), "", "Steady state: " + steady_words(ds, ("scheduler", "step_cost", "policy")) + ".")
