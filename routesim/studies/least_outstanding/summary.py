"""The practitioner's summary at the top of docs/least-outstanding-routing.md (issue 44
item 5): what to deploy, by how much it beats the alternatives at the SLO, where the
advice reverses, and the long tables moved to an appendix. Every number is read from the
claims' loaded results by the claims' own functions; a claim that did not run leaves its
sentence out."""

import re

import numpy as np

from . import admission, capacities, cold_start, counts, retries, staleness
from .common import show

LONG = 8
"""A table of more than this many lines (header and rule included) goes to the appendix."""
APPENDIX = "Appendix: the long tables"
ANCHOR = "#" + re.sub(r"[^a-z0-9 -]", "", APPENDIX.lower()).replace(" ", "-")
"""The appendix heading's anchor as GitHub renders it."""


def summary(loaded) -> list:
    """Markdown lines of the summary from [(claim module, its data)]."""
    data = {claim.__name__.rsplit(".", 1)[1]: d for claim, d in loaded}
    lines = ["## What to deploy (the practitioner's summary)", ""]
    for part in (_deploy(data), _lead(data), _reversals(data), _operations(data)):
        lines += part
    return lines + [f"The evidence follows: the verdict table, each claim's section, and the long tables in "
                    f"the [appendix]({ANCHOR}).", ""]


def _deploy(data) -> list:
    caps = (data.get("capacities") or {}).get("default")
    if caps is None:
        return []
    by = {str(p): float(caps.capacity_rps.sel(policy=p)) for p in caps.policy.values}
    ranked = sorted(by, key=lambda p: -by[p] if np.isfinite(by[p]) else np.inf)
    top = by[ranked[0]]
    tied = [p for p in ranked if by[p] == top]
    words = ", ".join(f"{p} {capacities.cap_text(caps, by[p])} [{capacities.interval_text(caps, p)}]"
                      for p in ranked)
    rule = capacities.rule_of(caps).text(f"TTFT p99 ≤ {float(caps.attrs['capacity_bound']):,.0f} ms")
    lines = [f"**Deploy a work-aware score: {' or '.join(tied)}.** Capacity of 8 replicas at the SLO (the largest "
             f"rate at which {rule}; `routesim.capacity`, its 95 % bootstrap interval over seeds in brackets), "
             f"req/s: {words}."]
    more = [f"{(top / by[p] - 1) * 100:+.0f} % the traffic of {p}" if np.isfinite(by[p]) else
            f"more than {(top / float(caps.attrs['capacity_low']) - 1) * 100:+.0f} % the traffic of {p} (below the "
            f"searched range)" for p in ("least_requests", "round_robin") if p in by and p not in tied]
    if more and np.isfinite(top):
        lines[0] += (f" That is {', '.join(more)} at the same SLO (capacities are exact to the search's step, "
                     f"{_step(caps)} req/s).")
    return lines + [""]


def _step(ds):
    rates = np.unique(ds.rate_rps.values.astype(float))
    return f"{np.min(np.diff(rates)):g}" if rates.size > 1 else "?"


def _lead(data) -> list:
    d = data.get("counts")
    if d is None:
        return []
    comps = counts.main_comparisons(d)
    r = counts.LOAD if counts.LOAD in comps else max(comps)
    c = comps[r]
    return [f"**By how much, below capacity** (claim 1, {r:g} req/s, 8 replicas, the default mix with its 2 % "
            f"long class): least_tokens' TTFT p99 {show(c[('ttft_p99', 'least_requests')])} % against "
            f"least_requests and {show(c[('ttft_p99', 'round_robin')])} % against round_robin; its TPOT p99 "
            f"{show(c[('tpot_p99', 'least_requests')])} % against least_requests (claim 1's added TPOT clause: "
            "see its section).", ""]


def _reversals(data) -> list:
    out = []
    d = data.get("counts")
    if d is not None:
        for load in (90, counts.LOAD):
            arms = counts.condition(d, "azure", load)
            if arms is not None:
                c = counts.comparisons(arms)[("ttft_p99", "round_robin")]
                out.append(f"on Azure's real chat lengths (no long class) at {load:g} req/s least_tokens' TTFT p99 "
                           f"is {show(c)} % against round_robin's" + (": **round_robin is the better choice there**"
                                                                     if c[3] == 1 else ""))
                break
    s = data.get("staleness")
    if s is not None:
        p = staleness.LOCAL_MS
        per, loc = staleness.ranking(s, p), staleness.ranking(s, p, "local")
        out.append(f"when replicas publish their load every {p} ms (a scrape), power of two choices' TTFT p99 is "
                   f"{show(per)} % against least_tokens' (the global minimum herds on the stale value"
                   + ("; **use power of two there**" if per[3] == -1 else "") + f"); adding the router's own "
                   f"placements between scrapes (periodic_local) brings it to {show(loc)} %")
    caps = (data.get("capacities") or {}).get("mooncake")
    if caps is not None and not bool((caps.ttft_p99.median("seed") <= float(caps.attrs.get("slo_ttft_ms", 1000.0))).any()):
        out.append("on the Mooncake excerpt's long prompts no policy meets a flat 1 s TTFT p99 at any load run: "
                   "the tail is prefill, which routing does not shorten")
    if not out:
        return []
    text = "; ".join(out)
    return [f"**Where the advice reverses.** {text[0].upper()}{text[1:]}.", ""]


def _operations(data) -> list:
    out = []
    c = data.get("cold_start")
    if c is not None:
        comps = cold_start.comparisons(c)
        rem = [f"{k} {show(v[0])} %" for k, v in comps.items() if k not in ("flood", "hurt")]
        out.append(f"a recovered replica draws {show(comps['flood'][0])} pp more than its fair share in its first "
                   f"second; ramp it (its TTFT p99: {', '.join(rem)})")
    r = data.get("retries")
    if r is not None:
        comps = retries.comparisons(r)
        out.append(f"cap retries (a 20 % budget in a crash: attempts per request {show(comps['budget-a'][0])} %, "
                   f"attainment {show(comps['attain-a'][0])} pp) and use a breaker with retries that avoid the "
                   f"replica that failed (a black hole: attainment {show(comps['contain'][0])} pp)")
    a = data.get("admission")
    if a is not None:
        comps = admission.comparisons(a)
        top = max(admission.loads(a)[0])
        out.append(f"beyond capacity refuse at the door (goodput {show(comps[f'reject@{top:g}'][0], 1, 'req/s')} "
                   f"against no door at {top:g} req/s); a queue without a deadline does not help "
                   f"(goodput {show(comps[f'queue@{top:g}'][0], 1, 'req/s')})")
    if not out:
        return []
    text = "; ".join(out)
    return [f"**Operations.** {text[0].upper()}{text[1:]}.", ""]


def to_appendix(sections, title_of) -> tuple:
    """(sections with their long tables replaced by a pointer, the appendix's lines):
    ``sections`` the claims' markdown texts, ``title_of(i)`` the i-th's name. A table of
    more than :data:`LONG` lines moves, numbered A1, A2, … in the order met."""
    appendix, out, n = [f"## {APPENDIX}", ""], [], 0
    for i, text in enumerate(sections):
        kept, block = [], []

        def flush():
            nonlocal n
            if len(block) > LONG:
                n += 1
                head = block[0].strip("| ").split(" | ")
                kept.append(f"*Table A{n} ([appendix]({ANCHOR})): {', '.join(head[:4])}"
                            f"{', …' if len(head) > 4 else ''}; {len(block) - 2} rows.*")
                appendix.extend([f"**Table A{n}** ({title_of(i)}).", "", *block, ""])
            else:
                kept.extend(block)
            block.clear()
        for line in text.split("\n"):
            if line.startswith("|"):
                block.append(line)
                continue
            flush()
            kept.append(line)
        flush()
        out.append("\n".join(kept))
    return out, (appendix if n else [])
