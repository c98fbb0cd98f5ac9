"""The practitioner's summary at the top of docs/least-outstanding-routing.md (issue 44
item 5): what to deploy, by how much it beats the alternatives at the SLO, where the
advice reverses; and :func:`to_appendix`, which moves the sections' details to the
appendix document beside it. Every number is read from the claims' loaded results by
the claims' own functions; a claim that did not run leaves its sentence out."""

import re

import numpy as np

from . import admission, capacities, cold_start, counts, retries, server, staleness, workloads
from .common import DETAILS_CLOSE, DETAILS_END, DETAILS_OPEN, show

APPENDIX = "the appendix"
"""What the document calls its companion document (docs/least-outstanding-routing-appendix.md)."""


def summary(loaded, appendix_name) -> list:
    """Markdown lines of the summary from [(claim module, its data)]; ``appendix_name``
    the appendix document's file name (a link beside the document). Its first paragraphs
    read the study's main arm, the server (:mod:`.server`), where it ran, else the page's
    replica; the page's replica follows as the sensitivity arm."""
    data = {claim.__name__.rsplit(".", 1)[1]: d for claim, d in loaded}
    lines = ["## What to deploy (the practitioner's summary)", ""]
    page = []
    if _on_server(data):
        lead = _lead_words(data.get("counts"))
        page = server.page_lines(data["server"], data.get("counts"), lead and f"Claim 1 at {lead[0]:g} req/s: {lead[1]}.")
    real = workloads.summary_lines(data["workloads"]) if data.get("workloads") is not None else []
    for part in (_deploy(data), _lead(data), page, _reversals(data), real, _operations(data)):
        lines += part
    return lines + [f"The evidence follows: the verdict table, each claim's section; the long tables, the steady "
                    f"state and the sensitivity runs in [{APPENDIX}]({appendix_name}).", ""]


ON_SERVER = "on the server (vLLM's default loop, a roofline H100 cost)"
"""How the summary names the study's main arm (:mod:`.server`)."""


def _main_capacity(data):
    """(the main arm's capacity search, its Dataset, or None; the words naming the arm):
    the server's where it ran, else the page's replica's (stage ``default``)."""
    if _on_server(data):
        return data["server"]["capacity"], f" {ON_SERVER}"
    return (data.get("capacities") or {}).get("default"), ""


def _deploy(data) -> list:
    caps, where = _main_capacity(data)
    if caps is None:
        return []
    by = {str(p): float(caps.capacity_rps.sel(policy=p)) for p in caps.policy.values}
    ranked = sorted(by, key=lambda p: -by[p] if np.isfinite(by[p]) else np.inf)
    top = by[ranked[0]]
    tied = [p for p in ranked if by[p] == top]
    words = ", ".join(f"{p} {capacities.cap_text(caps, by[p])} [{capacities.interval_text(caps, p)}]"
                      for p in ranked)
    rule = capacities.rule_of(caps).text(f"TTFT p99 ≤ {float(caps.attrs['capacity_bound']):,.0f} ms")
    lines = [f"**Deploy a work-aware score: {' or '.join(tied)}.** Capacity of 8 replicas{where} at the SLO (the "
             f"largest rate at which {rule}; `routesim.capacity`, its 95 % bootstrap interval over "
             f"{caps.sizes['seed']} seeds in brackets), req/s: {words}."]
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
    """The paragraph on claim 1's headline on the main arm: the server's stage ``counts``
    where it ran, else the page's replica's."""
    d, where = (server.claim1(data["server"]), " on the server") if _on_server(data) else (data.get("counts"), "")
    if d is None:
        return []
    r, words = _lead_words(d)
    return [f"**By how much, below capacity** (claim 1{where}, {r:g} req/s, 8 replicas, the default mix with its "
            f"2 % long class): {words} (claim 1's added TPOT clause: see its section).", ""]


def _lead_words(d):
    """(load, words): claim 1's headline from its data ``d`` (:func:`.counts.load`'s shape,
    on either replica) at :data:`.counts.LOAD` (else its highest load), least_tokens' TTFT
    p99 against each baseline and its TPOT p99 against least_requests; None for no data."""
    if d is None:
        return None
    comps = counts.main_comparisons(d)
    r = counts.headline_load(comps)
    c = comps[r]
    return r, (f"least_tokens' TTFT p99 {show(c[('ttft_p99', 'least_requests')])} % against least_requests and "
               f"{show(c[('ttft_p99', 'round_robin')])} % against round_robin; its TPOT p99 "
               f"{show(c[('tpot_p99', 'least_requests')])} % against least_requests")


def _main(data, claim):
    """``claim``'s data on the summary's arm, in its design's shape: its server arm when the
    server arm ran (:func:`.server.arm_of`: None where the claim's did not), else the
    page's replica's."""
    if _on_server(data):
        return server.arm_of(claim, data["server"])
    return data.get(claim.__name__.rsplit(".", 1)[1])


def _on_server(data) -> bool:
    """Whether the summary's arm is the server (its arm ran)."""
    return data.get("server") is not None


def _reversals(data) -> list:
    out = []
    d = data.get("counts")
    if d is not None:
        for load in (90, counts.LOAD):
            arms = counts.condition(d, "azure", load)
            if arms is not None:
                c = counts.comparisons(arms)[("ttft_p99", "round_robin")]
                out.append(f"on Azure's real chat lengths (no long class; the page's replica) at {load:g} req/s "
                           f"least_tokens' TTFT p99 is {show(c)} % against round_robin's"
                           + (": **round_robin is the better choice there**" if c[3] == 1 else ""))
                break
    s = _main(data, staleness)
    if s is not None:
        p = staleness.LOCAL_MS
        per, loc = staleness.ranking(s, p), staleness.ranking(s, p, "local")
        where = ", on the server" if _on_server(data) else ""
        out.append(f"when replicas publish their load every {p} ms (a scrape{where}), power of two choices' TTFT "
                   f"p99 is {show(per)} % against least_tokens' (the global minimum herds on the stale value"
                   + ("; **use power of two there**" if per[3] == -1 else "") + f"); adding the router's own "
                   f"placements between scrapes (periodic_local) brings it to {show(loc)} %")
    caps = (data.get("capacities") or {}).get("mooncake")
    if caps is not None and not bool((caps.ttft_p99.median("seed") <= float(caps.attrs.get("slo_ttft_ms", 1000.0))).any()):
        out.append("on the Mooncake excerpt's long prompts (the page's replica) no policy meets a flat 1 s TTFT p99 at "
                   "any load run: "
                   "the tail is prefill, which routing does not shorten")
    if not out:
        return []
    text = "; ".join(out)
    return [f"**Where the advice reverses.** {text[0].upper()}{text[1:]}.", ""]


def _operations(data) -> list:
    out = []
    c = _main(data, cold_start)
    if c is not None:
        comps = cold_start.comparisons(c)
        rem = [f"{k} {show(v[0])} %" for k, v in comps.items() if k not in ("flood", "hurt")]
        out.append(f"a recovered replica draws {show(comps['flood'][0])} pp more than its fair share in its first "
                   f"second; ramp it (its TTFT p99: {', '.join(rem)})")
    r = _main(data, retries)
    if r is not None:
        comps = retries.comparisons(r)
        out.append(f"cap retries (a 20 % budget in a crash: attempts per request {show(comps['budget-a'][0])} %, "
                   f"attainment {show(comps['attain-a'][0])} pp) and use a breaker with retries that avoid the "
                   f"replica that failed (a black hole: attainment {show(comps['contain'][0])} pp)")
    a = _main(data, admission)
    if a is not None:
        comps = admission.comparisons(a)
        top = max(admission.loads(a)[0])
        queue = comps[f"queue@{top:g}"][0]
        out.append(f"beyond capacity refuse at the door (goodput {show(comps[f'reject@{top:g}'][0], 1, 'req/s')} "
                   f"against no door at {top:g} req/s); a queue without a deadline "
                   f"{'helps too' if queue[3] == 1 else 'does not help'} (goodput {show(queue, 1, 'req/s')})")
    if not out:
        return []
    text = "; ".join(out)
    return [f"**Operations{' (on the server)' if _on_server(data) else ''}.** {text[0].upper()}{text[1:]}.", ""]


def to_appendix(sections, appendix_name) -> tuple:
    """(the sections with their details replaced by a pointer, the appendix document's
    lines): ``sections`` the markdown texts of the document's sections, each starting
    with its heading; a block between :func:`common.details`' markers moves to the
    appendix, under the section's heading, as a subsection headed by its label (none
    for an empty label). The section keeps, where its first block was, one line naming
    the blocks and linking the section's heading in ``appendix_name`` (the appendix
    file, beside the document). A section that is all one block (its heading inside)
    moves whole, without a pointer."""
    appendix, out, seen = [], [], {}

    def add(lines):   # appendix lines; returns the anchor of their first heading
        anchors = [_anchor(line.lstrip("#"), seen) for line in lines if line.startswith("#")]
        appendix.extend([*lines, ""])
        return anchors[0] if anchors else None

    for text in sections:
        kept, blocks = _split(text)
        main = [line for line in kept if line != POINTER]
        if not blocks:
            out.append(text)
        elif not any(line.strip() for line in main):
            for _, lines in blocks:
                add(_trim(lines))
        else:
            level = main[0].split(" ", 1)[0]
            anchor = add([main[0]])
            for label, lines in blocks:
                add(([f"{level}# {label}", ""] if label else []) + _trim(lines))
            labels = "; ".join(label for label, _ in blocks if label)
            link = f"*In [{APPENDIX}]({appendix_name}#{anchor}): {labels}.*"
            out.append("\n".join(link if line == POINTER else line for line in kept + [""] * (kept[-1] == POINTER)))
    return out, appendix


def _split(text) -> tuple:
    """(a section's lines outside its details blocks, :data:`POINTER` where the first
    block was, a blank line that would follow another once a block is out dropped;
    [(label, the block's lines)])."""
    kept, blocks, block = [], [], None
    for line in text.split("\n"):
        if block is None and line.startswith(DETAILS_OPEN):
            if not blocks:
                kept.append(POINTER)
            block = (line[len(DETAILS_OPEN):-len(DETAILS_CLOSE)].strip(), [])
        elif block is not None and line == DETAILS_END:
            blocks.append(block)
            block = None
        elif block is not None:
            block[1].append(line)
        elif not (blocks and line == "" and kept[-1] == ""):
            kept.append(line)
    if block is not None:
        raise ValueError(f"a details block without its end ({DETAILS_END!r}): {block[0]!r}")
    return kept, blocks


POINTER = "\0pointer"
"""A section's stand-in line for its pointer to the appendix while :func:`to_appendix` reads it."""


def _trim(lines) -> list:
    """``lines`` without leading and trailing blank lines."""
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return list(lines)


def _anchor(heading, seen) -> str:
    """The anchor GitHub gives a heading's text: lower case, punctuation dropped, spaces
    as hyphens, a repeat numbered -1, -2, … (``seen``: the anchors so far, updated)."""
    base = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
    n = seen.get(base, 0)
    seen[base] = n + 1
    return base if n == 0 else f"{base}-{n}"
