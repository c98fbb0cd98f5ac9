"""Claim 2 of the least-outstanding-routing study: two random choices instead of a global
minimum. sweeps/token-routing-scale-8.toml (results/token-routing-scale-8/: ``pod``
power_of_d with a ``choices`` axis × seed, ``global`` least_tokens × seed, the
step-cost sensitivity ``prefill2``, ``prefill4``, ``chunk2048``, and ``signals``: d = 1,
2, 3 under a 50 ms periodic and periodic_local signal) and
sweeps/token-routing-scale-32.toml (results/token-routing-scale-32/pod.nc). The global
minimum under those signals is claim 3's runs (sweeps/token-routing-staleness.toml, at
this load: power_of_d d = 2 and least_tokens, fresh and at 50 ms signals)."""

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ..intervals import LEVEL
from .common import (ON_PAGE, FIGURES, MECHANISM, RELATIVE_BOUNDS, against, capacities, cell, compare, departures, details,
                     in_short, on_trace, open_stage, page_table, reading,
                     save, sensitivity_rows, show, stage_rate, steady_table, verdict_of, verdicts)

SWEEPS = ("sweeps/token-routing-scale-8.toml", "sweeps/token-routing-scale-32.toml")
NS = (8, 32)
SENSITIVITY = (("prefill2", "prefill ×2 as costly"), ("prefill4", "prefill ×4 as costly"),
               ("chunk2048", "max_batched_tokens = 2,048"))
"""The step-cost variants (issue 23 item 6): stage name, words."""
SIGNALS = (("periodic", "50 ms periodic"), ("periodic_local", "50 ms periodic_local"))
"""The realistic-signal arms of stage ``signals`` (issue 23 item 5): signal_mode, label."""
STAGES_8 = ("pod", "global", "signals", "azure", "server") + tuple(s for s, _ in SENSITIVITY)
MOONCAKE = "token-routing-mooncake/choices.nc"
"""The Mooncake arm's stage (sweeps/token-routing-mooncake.toml: power_of_d × choices 1,
2, 3 × seed at time scale 0.4, 0.8 × power_of_d's capacity there)."""
TAIL = "ttft_p99"
FIRST_STEP = 20.0
"""Claim 2's bound for "beats one choice by a lot", in % as :func:`.common.compare` takes
it: d = 2's TTFT p99 at most 1 / 1.2 of d = 1's (the geometric mean over seeds of the
ratio; −16.7 %), four times the study's 5 % for a lead in the log."""
FIRST_FALL = (1 / (1 + FIRST_STEP / 100) - 1) * 100
"""The first step's bound as a change, % (−16.7)."""


# -- claim 2 -----------------------------------------------------------------------

def load(root):
    """{"8": {stage: Dataset}, "32": Dataset or None, "caps": capacities, "signals": claim
    3's {stage: Dataset} or None}, or
    None when N = 8's fresh stages are missing. The sensitivity and signal stages, and
    claim 3's, may be missing (their parts are then left out)."""
    d8 = Path(root) / "token-routing-scale-8"
    n8 = {s: open_stage(d8 / f"{s}.nc") for s in STAGES_8}
    if n8["pod"] is None or n8["global"] is None:
        return None
    n32 = open_stage(Path(root) / "token-routing-scale-32" / "pod.nc")
    st = Path(root) / "token-routing-staleness"
    signals = {s: open_stage(st / f"{s}.nc") for s in ("fresh", "periodic", "local")}
    return {"8": n8, "32": n32, "caps": capacities(root, ("random", "power_of_d", "least_tokens")),
            "signals": None if any(v is None for v in signals.values()) else signals,
            "mooncake": open_stage(Path(root) / MOONCAKE)}


def steps(pod):
    """The prediction's two comparisons of TTFT p99 in one power_of_d Dataset with a
    ``choices`` axis: (d = 2 against d = 1, d = 3 against d = 2), relative."""
    t = pod[TAIL]
    return (compare(t.sel(choices=2), t.sel(choices=1), material=FIRST_STEP),
            compare(t.sel(choices=3), t.sel(choices=2)))


PREDICTED = (-1, 0)
"""d = 2 lower than d = 1 by at least FIRST_STEP; d = 3 no lead on d = 2 ("buys little")."""


def verdict_steps(pods):
    """The verdict from the steps of each power_of_d Dataset in ``pods``."""
    leads = [c[3] for pod in pods for c in steps(pod)]
    return verdict_of(leads, PREDICTED * len(pods))


def fresh_pods(data):
    return [data["8"]["pod"]] + ([data["32"]] if data["32"] is not None else [])


ADDED_WORDS = ""
"""Both steps are the seed's ("sampling two and comparing beats sampling one, and sampling
more than two buys little"): the prediction adds nothing."""
AZURE_BASIS = "power_of_d"
"""The policy whose capacity the Azure-length arm's load is placed against (:mod:`.workloads`)."""
SERVER_BASIS = "power_of_d"
"""The policy whose capacity on the server the server arm's load is placed against (:mod:`.server`)."""
SERVER_PREDICTION = (
    "**Prediction on the server** (stage `server`: N = 8, d = 1, 2, 3, written before its runs). At 38 "
    "req/s one random choice is beyond its capacity (round_robin's is 36 there, and a random choice "
    "balances worse), so d = 2 beats d = 1 by far more than the 20 % bound; d = 3 still beats d = 2 by "
    "a material amount, as on the page's replica (-6.7 % at N = 8): at the same multiple of capacity the "
    "imbalance a third sample removes is about the same. The seed's mechanism *does not hold* (against: "
    "d3 vs d2), as on the page's replica: no change.")
"""The server arm's prediction (issue 44 item 2), fixed before its runs."""
SERVER_PREDICTED = ("does not hold", "none added")
"""The verdicts :data:`SERVER_PREDICTION` states (the seed's mechanism, the added clauses), for
:func:`.server.held`."""


def clauses(data):
    """[(label, comparison, predicted sign, part)] of the fresh-signal design's steps at
    every N run (:func:`.common.verdicts`' input): both the seed's mechanism."""
    return [(f"{name} at N = {n}", c, p, MECHANISM)
            for n, pod in zip((8, 32), fresh_pods(data))
            for name, c, p in zip(("d2 vs d1", "d3 vs d2"), steps(pod), PREDICTED)]


def azure(data):
    """The Azure-length arm (stage ``azure``: power_of_d d = 1, 2, 3 at N = 8) in the
    design's shape, for :func:`clauses`; None if it did not run."""
    return _alone(data["8"].get("azure"))


def _alone(pod):
    """An arm that reruns only the main design's N = 8 stage (``pod``: its Dataset, or
    None) in the design's shape, its other stages not run (None); None if it did not run."""
    return None if pod is None else {"8": {"pod": pod, "signals": None}, "32": None, "signals": None}


def server(data):
    """The server arm (stage ``server``: power_of_d d = 1, 2, 3 at N = 8 on vLLM's
    asynchronous loop with the roofline cost, :mod:`.server`) in the design's shape, for
    :func:`clauses`; None if it did not run."""
    return _alone(data["8"].get("server"))


def mooncake(data):
    """The Mooncake arm (:data:`MOONCAKE`: d = 1, 2, 3 at N = 8) in the design's shape, for
    :func:`clauses`; None if it did not run."""
    pod = data.get("mooncake")
    return None if pod is None else {"8": {"pod": on_trace(pod).squeeze("rate_rps")}, "32": None}


def verdict(data):
    """Under the study's rule: at every N run, d = 2's TTFT p99 below d = 1's by at least
    :data:`FIRST_STEP` % (a lead) and d = 3 without a lead on d = 2 (holds); some of these
    and none the other way (holds with qualification; a lead of d = 3 either way is the
    other way)."""
    return verdict_steps(fresh_pods(data))


def signal_pods(data):
    """[(label, power_of_d Dataset with a choices axis, least_tokens Dataset or None)]
    for each realistic signal of stage ``signals`` that ran; the least_tokens runs
    under the same signal are claim 3's (None if missing)."""
    ds = data["8"]["signals"]
    if ds is None:
        return []
    sig = data["signals"]
    glob = {} if sig is None else {"periodic": sig["periodic"].sel(period_ms=50), "periodic_local": sig["local"]}
    return [(label, ds.sel(signal_mode=mode), glob[mode].sel(policy="least_tokens") if mode in glob else None)
            for mode, label in SIGNALS if mode in ds.signal_mode.values]


def verdict_signals(data):
    """[(label, verdict)]: the claim's verdict by the same rule at N = 8 under each
    realistic signal of :func:`signal_pods`."""
    return [(label, verdict_steps([pod])) for label, pod, _ in signal_pods(data)]


def signal_rankings(data):
    """least_tokens against power_of_d d = 2, TTFT p99, in claim 3's runs at this load:
    [(words, comparison)] for fresh signals and the 50 ms periodic and periodic_local
    ones (the same warm-up on every arm), or [] if those runs are missing."""
    sig = data["signals"]
    if sig is None:
        return []
    arms = [("fresh signals", sig["fresh"]), ("a 50 ms periodic signal", sig["periodic"].sel(period_ms=50)),
            ("a 50 ms periodic_local signal", sig["local"])]
    return [(words, compare(ds[TAIL].sel(policy="least_tokens"), ds[TAIL].sel(policy="power_of_d")))
            for words, ds in arms]


def sensitivity(data):
    """[(words, load, comparisons, verdict)] of the step-cost variants that ran."""
    out = []
    for stage, words in SENSITIVITY:
        ds = data["8"][stage]
        if ds is None:
            continue
        a, b = steps(ds)
        out.append((words, stage_rate(ds), [("d2 vs d1", a, 0, "%"), ("d3 vs d2", b, 0, "%")],
                    verdict_of([a[3], b[3]], PREDICTED)))
    return out


def _arms(data):
    """[(label, Dataset with choices, global Dataset or None)] for the figure and tables."""
    n8 = data["8"]
    arms = [("N = 8, fresh", n8["pod"], n8["global"])]
    if data["32"] is not None:
        arms.append(("N = 32, fresh", data["32"], None))
    arms += [(f"N = 8, {label}", pod, glob) for label, pod, glob in signal_pods(data)]
    return arms


def figure(data, figures_dir=FIGURES):
    arms = _arms(data)
    fig = Figure(figsize=(12, 4.2))
    ax, ax2 = fig.subplots(1, 2)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"]
    for (label, pod, glob), color in zip(arms, colors):
        ds = pod.choices.values
        v = pod[TAIL]
        ax.plot(ds, v.median("seed"), "o-", color=color, label=label)
        ax.fill_between(ds, v.quantile(0.25, "seed"), v.quantile(0.75, "seed"), color=color, alpha=0.15)
        if glob is not None:
            ax.plot([5], [float(glob[TAIL].median())], "s", color=color)
    ax.set_yscale("log")
    ax.set_xticks([1, 2, 3, 4, 5], ["1", "2", "3", "4", "global"])
    ax.set_xlabel("power_of_d choices d (square: least_tokens, the global minimum)")
    ax.set_ylabel("TTFT p99 (ms), median; band: quartiles over seeds")
    ax.legend(fontsize=8)
    ax.set_title("TTFT p99 by the number of choices", fontsize=10)
    rows = [(label, steps(pod)) for label, pod, _ in arms]
    rows += [(words, (c[0][1], c[1][1])) for words, _, c, _ in sensitivity(data)]
    y = np.arange(len(rows))
    for k, (name, marker, color) in enumerate((("d = 2 vs d = 1", "o", "#1f77b4"),
                                               ("d = 3 vs d = 2", "s", "#2ca02c"))):
        m = np.array([r[1][k][0] for r in rows])
        lo = np.array([r[1][k][1] for r in rows])
        hi = np.array([r[1][k][2] for r in rows])
        ax2.errorbar(m, y + 0.15 * (k - 0.5), xerr=[m - lo, hi - m], fmt=marker, color=color,
                     capsize=3, label=name)
    ax2.axvline(0, color="k", lw=0.8)
    ax2.axvline(FIRST_FALL, color="#1f77b4", lw=0.8, ls=":")
    for x in RELATIVE_BOUNDS:
        ax2.axvline(x, color="#2ca02c", lw=0.8, ls=":")
    ax2.set_yticks(y, [r[0] for r in rows], fontsize=8)
    ax2.invert_yaxis()
    ax2.set_xlabel(f"TTFT p99 change, % (geometric mean over seeds, {LEVEL:.0%} interval)")
    ax2.set_title("The two steps, paired by seed (dotted: the material bounds)", fontsize=10)
    ax2.legend(fontsize=8, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    fig.suptitle(f"Claim 2 {ON_PAGE}: two random choices, {stage_rate(data['8']['pod']) / 8:g} req/s per replica "
                 f"(N = 8: {stage_rate(data['8']['pod']):g} req/s), "
                 f"{data['8']['pod'].sizes['seed']} seeds, steady state", fontsize=10)
    fig.tight_layout()
    return save(fig, "lor-claim2-choices", figures_dir)


def _median_row(label, pod, glob):
    med = {int(c): float(pod[TAIL].sel(choices=c).median()) for c in pod.choices.values}
    cells = " | ".join(f"{med[c]:,.0f}" if c in med else "—" for c in (1, 2, 3, 4))
    g = f"{float(glob[TAIL].median()):,.0f}" if glob is not None else "—"
    a, b = steps(pod)
    return f"| {label} | {cells} | {g} | {cell(a)} | {cell(b)} |"


def ranking(pod, glob):
    """least_tokens (the global minimum) against d = 2, TTFT p99: a comparison."""
    return compare(glob[TAIL], pod[TAIL].sel(choices=2))


def _steps_clause(pod, note):
    """'d = 2 changes … against d = 1 and d = 3 … against d = 2 (a lead; <note>)'."""
    a, b = steps(pod)
    kind = "a lead" if b[3] else "no lead"
    return (f"d = 2 changes TTFT p99 by {show(a, 0, '%')} against d = 1 and d = 3 by "
            f"{show(b, 1, '%')} against d = 2 ({kind}; {note})")


def _step_words(n, pod):
    """'At N = 8, d = 2 changes … ; d = 3 … (x % of the first step).'"""
    a, b = steps(pod)
    return f"At N = {n}, " + _steps_clause(pod, f"{abs(b[0] / a[0]) * 100:.0f} % of the first step") + "."


def _ranking_words(leads):
    """The ranking change, said plainly, from {words: lead of least_tokens against d = 2}."""
    fresh = leads["fresh signals"]
    stale = {w: x for w, x in leads.items() if w != "fresh signals"}
    name = {-1: "least_tokens ahead", 0: "no lead either way", 1: "power of two ahead"}
    said = f"Fresh: {name[fresh]}; " + "; ".join(f"{w}: {name[x]}" for w, x in stale.items())
    if any(x != fresh for x in stale.values()):
        return said + ": the ranking changes once the signal is a scrape"
    return said + ": the ranking does not change"


def section(data, main=()):
    """Claim 2's section; ``main``: the main arm's lines (:func:`.common.page_table`)."""
    n8, n32 = data["8"], data["32"]
    rate8 = stage_rate(n8["pod"])
    v = verdict(data)
    arms = _arms(data)
    rows = ["| arm | TTFT p99 d=1 | d=2 | d=3 | d=4 | global | d=2 vs d=1 | d=3 vs d=2 |",
            "|---|---|---|---|---|---|---|---|"]
    rows += [_median_row(label, pod, glob) for label, pod, glob in arms]
    steady = ["*N = 8, fresh (power_of_d by d; least_tokens below)*", "",
              steady_table(n8["pod"], ("choices",)), "", steady_table(n8["global"].expand_dims(policy=["least_tokens"]), ("policy",)), ""]
    if n32 is not None:
        steady += ["*N = 32, fresh*", "", steady_table(n32, ("choices",)), ""]
    pods = signal_pods(data)
    for label, pod, _ in pods:
        steady += [f"*N = 8, {label}*", "", steady_table(pod, ("choices",)), ""]
    scrape_text = ""
    if pods:
        fresh_b = steps(n8["pod"])[1]
        scrape_text = (" Under realistic signals (stage `signals`, N = 8; d = 1 reads no signal, so its runs are "
                       "the fresh arm's):")
        verdicts = verdict_signals(data)
        for (label, pod, _), (_, v_sig) in zip(pods, verdicts):
            scrape_text += (f" With a {label} signal, verdict {v_sig}: "
                            + _steps_clause(pod, f"fresh signals: {show(fresh_b, 1, '%')}") + ".")
        same = all(v_sig == verdict_steps([n8["pod"]]) for _, v_sig in verdicts)
        scrape_text += (" The verdict at N = 8 " + ("does not change" if same else "changes")
                        + " once the signal is a scrape.")
    fresh_rank = ranking(n8["pod"], n8["global"])
    rank_text = (f"With fresh signals (this design's runs) least_tokens' TTFT p99 is {cell(fresh_rank)} "
                 "against d = 2's")
    sig = signal_rankings(data)
    if sig:
        warm = data["signals"]["fresh"].attrs["warmup_s"]
        lt_lead = {words: c[3] for words, c in sig}
        rank_text += (f". The realistic-signal arm (claim 3's runs at this load, {warm:,.0f} s of "
                      "warm-up on every arm): least_tokens against d = 2, "
                      + "; ".join(f"{cell(c)} with {words}" for words, c in sig) + ". "
                      + _ranking_words(lt_lead))
    sens = sensitivity(data)
    caps = data["caps"]
    parts = [
        "## Claim 2: two random choices instead of a global minimum", "",
        "**Prediction (the seed).** Sampling two replicas and taking the less loaded beats "
        "sampling one by a lot; sampling more than two buys little.", "",
        f"**Design.** `sweeps/token-routing-scale-8.toml` and `-32.toml`: N = 8 at {rate8:g} req/s"
        f"{departures(n8['pod'])} and N = 32 at the same load per replica"
        + (f" ({stage_rate(n32):g} req/s)" if n32 is not None else "")
        + f"; power_of_d on outstanding tokens with d = 1 (one random choice), 2, 3 (and 4 "
        f"at N = 8) against the global least_tokens. The load is {against(rate8, caps)}: below "
        "every compared policy's capacity, random routing included, so every arm is steady. "
        "The realistic-signal arm is claim 3's runs: d = 1, 2, 3 under a 50 ms `periodic` and "
        "`periodic_local` scrape (predicted before its runs: the first step survives a scrape, "
        "and d = 3 buys no more than with fresh signals). "
        f"A lead of d = 2 over d = 1 must be a TTFT p99 at most 1 / {1 + FIRST_STEP / 100:g} of d = 1's "
        f"({FIRST_FALL:.1f} %, \"by a lot\"); d = 3 \"buys little\" when it has no lead on d = 2.", "",
        *page_table(main, "Medians over seeds (ms) and paired comparisons (bold: a lead):", "", *rows, ""),
        "![Claim 2](../figures/lor-claim2-choices.png)", "",
        f"{reading(main)} {_short_reading(data)}. least_tokens against d = 2, TTFT p99: " + _ranking_words(lt_lead if sig else {"fresh signals": fresh_rank[3]})
        + ".", ""]
    parts += details(
        "The design in full, the steady state, the comparisons in words",
        "N = 128 and 256 at 1,200 s warm-ups would cost 16 and 32 times an 8-replica run each, beyond the "
        "study's budget; the per-replica dynamics that need the warm-up (the long class filling each replica's "
        "KV cache) do not shorten with N, so a larger N with a shorter warm-up would not be steady. The load "
        "stays below random routing's capacity: above it one random choice's queue would grow without bound "
        "and the gap would measure the warm-up's length. Under the realistic-signal arm every router decision "
        "reads a signal published every 50 ms (`[signals] mode = \"periodic\"`, `period_ms = 50`), or that "
        "signal plus the router's own placements since (`\"periodic_local\"`); d = 1 reads no signal at all. "
        "Steady state (median over seeds: backlog growth over the window, requests; KV "
        "occupancy over its first and last quarter):", "",
        *steady,
        f"Fresh signals: verdict {v}. "
        + " ".join(_step_words(n, pod) for n, pod in zip(NS, fresh_pods(data))) + scrape_text
        + " " + rank_text + ".")
    if sens:
        block = ["**Sensitivity to the step cost** (the same comparisons; each variant's load "
                 "placed about as far below one random choice's capacity under that step cost "
                 "as the main design's, from exploratory runs written in the sweep file):", "",
                 *sensitivity_rows(v, sens), "", "Their steady state (median over seeds):", ""]
        for stage, words in SENSITIVITY:
            if n8[stage] is not None:
                block += [f"*{words}*", "", steady_table(n8[stage], ("choices",)), ""]
        parts += details("Sensitivity to the step cost", *block)
    return "\n".join(parts + [""])


def _short_reading(data) -> str:
    """The main table's outcomes in a few words (:func:`.common.in_short`): the first step
    and the second, per arm, the usual outcome and the exceptions."""
    arms = [(f"N = {n}", pod) for n, pod in zip(NS, fresh_pods(data))] + [(label, pod) for label, pod, _ in signal_pods(data)]
    pairs = [(where, steps(pod)) for where, pod in arms]
    share = [abs(b[0] / a[0]) * 100 for _, (a, b) in pairs if a[0]]
    return (in_short({"d = 2 vs d = 1": [(w, a[3], -1) for w, (a, _) in pairs],
                      "d = 3 vs d = 2 (predicted: no lead)": [(w, b[3], 0) for w, (_, b) in pairs]})
            + (f" (d = 3's change is {min(share):.0f}–{max(share):.0f} % of the first step's)" if share else ""))


def row(data):
    """(claim, prediction, measured, verdict) for the verdict table."""
    parts = []
    for n, pod in zip(NS, fresh_pods(data)):
        a, b = steps(pod)
        parts.append(f"N = {n}: d2 vs d1 {show(a, 0, '%')}, d3 vs d2 {show(b, 1, '%')}")
    parts += [f"{label}: {v}" for label, v in verdict_signals(data)]
    return ("2. Two random choices instead of a global minimum",
            "d = 2 beats d = 1 by a lot; d > 2 buys little",
            "TTFT p99, " + "; ".join(parts), verdict(data))
