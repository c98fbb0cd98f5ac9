"""The least-outstanding study on real workloads (issue 44 item 4): every claim's verdict
recomputed on the Azure conversation trace's prompt and output lengths, and on the
Mooncake excerpt where its design can be placed there.

The Azure-length arm of a claim is its own design (its paired comparisons, its seeds)
with every request's lengths from a row of traces/azure-conv.csv (token-model.md §1.3:
no long class; the arrivals and prefix groups kept), in new stages of the claim's sweep
file, at a load placed as the claim's own: the same multiple of the same policy's
capacity, measured on Azure lengths (stage ``azure`` of
sweeps/token-routing-capacity.toml, :data:`.capacities.AZURE_SEARCH`). A claim module
gives the arm as ``azure(data)`` (its data in its design's shape, or None when it did not
run) and states why not with ``AZURE_WHY`` where it cannot; its Mooncake arm is
``mooncake(data)``, and ``MOONCAKE_WHY`` says why a claim cannot run there. The
verdicts are the claim's own ``clauses`` under the study's rule (:func:`.common.verdicts`).
Not a claim of its own (no ``clauses``): the verdict table's column (:func:`column`) and
a section."""

from pathlib import Path

import numpy as np

from . import admission, affinity, choices, cold_start, counts, learning, preemption, retries, staleness
from .common import (CAPACITY_RESULTS, MECHANISM, _outcome, arm_cell, details, read, show, squeeze, verdict_cells,
                     verdict_word, verdicts)

SWEEPS = ()
"""Its stages are in the claims' sweep files, its capacity search in
sweeps/token-routing-capacity.toml (run by :func:`.capacities.run`)."""
CLAIMS = (counts, choices, staleness, affinity, preemption, cold_start, retries, learning, admission)
COLUMN = "on Azure lengths (mechanism; added)"
"""The verdict table's column of the Azure-length arm."""
NOT_RUN = "not run"


def _short(claim):
    return claim.__name__.rsplit(".", 1)[1]


def load(root, loaded=None):
    """{"root", "capacity": the Azure capacity search's Dataset (policy × rate_rps ×
    seed) or None, "claims": {claim module's name: its data} of the claims that loaded},
    or None when the Azure search has not run. ``loaded``: the claims' data the caller
    has already loaded ({module name: data}, the study's ``_loaded``), else each claim of
    :data:`CLAIMS` is loaded here. Names, not modules: the study draws its figures in
    worker processes, which get each claim's data pickled."""
    path = Path(root) / CAPACITY_RESULTS / "azure-capacity.nc"
    if not path.exists():
        return None
    if loaded is None:
        loaded = {claim.__name__: claim.load(root) for claim in CLAIMS}
    claims = {c.__name__: loaded[c.__name__] for c in CLAIMS if loaded.get(c.__name__) is not None}
    return {"root": Path(root), "capacity": squeeze(read(path)), "claims": claims}


def arm(claim, data, which="azure"):
    """A claim's ``which`` arm ("azure" or "mooncake") in its design's shape (the claim's
    own function of that name), or None when it did not run or the claim has none."""
    f = getattr(claim, which, None)
    return None if f is None or data is None else f(data)


def verdicts_of(claim, data, which="azure"):
    """The claim's verdicts (:func:`.common.verdicts`) on its ``which`` arm, or None."""
    a = arm(claim, data, which)
    return None if a is None else verdicts(claim.clauses(a))


def why_not(claim, which="azure") -> str:
    """Why the claim has no ``which`` arm, in a few words (the claim's ``AZURE_WHY`` or
    ``MOONCAKE_WHY``)."""
    return getattr(claim, f"{which.upper()}_WHY", "the stages have not run")


def column(claim, data, page_cells):
    """The verdict table's :data:`COLUMN` cell of ``claim`` (its data ``data``): its
    verdicts on Azure lengths (:func:`.common.arm_cell`, brief: what went the other way is
    in the appendix's tables) and whether they change from the page's ``page_cells``
    (mechanism cell, added cell, :func:`.common.verdict_cells`), or "not run: why"."""
    v = verdicts_of(claim, data)
    if v is None:
        return f"{NOT_RUN}: {why_not(claim)}"
    return arm_cell(v, claim.ADDED_WORDS, page_cells, brief=True)


def verdict(data):
    """None: the arm's verdicts are the verdict table's column (:func:`column`)."""
    return None


def row(data):
    return None


def figure(data, figures_dir=None):
    return []


def capacities(data):
    """{policy: capacity req/s} on Azure lengths."""
    cap = data["capacity"]
    return {str(p): float(cap.capacity_rps.sel(policy=p)) for p in cap.policy.values}


def clause_table(claim, a) -> list:
    """Markdown rows of a claim's arm ``a``: every comparison of its ``clauses``, its
    part, the mean [95 % interval] (in the unit of the claim's own table), the prediction
    and the outcome."""
    sign = {1: "higher", -1: "lower", 0: "no lead"}
    rows = ["| comparison | part | mean [95 % interval] | predicted | outcome |", "|---|---|---|---|---|"]
    for label, c, pred, part in claim.clauses(a):
        rows.append(f"| {label} | {'mechanism' if part == MECHANISM else 'added'} | {show(c, 1)} | {sign[pred]} | "
                    f"{_outcome(c[3], pred)} |")
    return rows


def rates(a) -> list:
    """The loads (req/s) of a claim's arm ``a`` (its Datasets, in a dict or alone): every
    rate_rps of its stages of more than one replica (a trace stage's measured rate, not
    its 0), sorted."""
    import xarray as xr
    found = set()
    for ds in (a.values() if isinstance(a, dict) else [a]):
        if isinstance(ds, dict):
            found.update(rates(ds))
        elif isinstance(ds, xr.Dataset) and ds.sizes.get("replica", 1) > 1:
            vals = ds.rate_rps.values if "rate_rps" in ds.coords else [ds.attrs.get("rate_rps", 0)]
            found.update(float(r) for r in np.atleast_1d(vals) if float(r) > 0)
    return sorted(found)


def placed(claim, a, data) -> str:
    """'80 req/s: 0.80 × power_of_d's 100 on these lengths': the Azure arm's loads against
    the capacity on Azure lengths of the policy the claim's loads are placed against
    (the claim's ``AZURE_BASIS``)."""
    rs, basis = rates(a), getattr(claim, "AZURE_BASIS", None)
    c = capacities(data).get(basis, np.nan) if basis else np.nan
    if not rs:
        return ""
    if not np.isfinite(c):
        return f"{', '.join(f'{r:g}' for r in rs)} req/s"
    return (f"{', '.join(f'{r:g}' for r in rs)} req/s: {', '.join(f'{r / c:.2f}' for r in rs)} × "
            f"{basis}{chr(39) if basis.endswith('s') else chr(39) + 's'} {c:g} on these lengths")


def _title(claim, loaded):
    d = loaded.get(claim.__name__)
    r = claim.row(d) if d is not None and hasattr(claim, "row") else None
    return r[0] if r is not None else _short(claim)


def arm_lines(data, which) -> list:
    """[(claim title, its verdict cells or None, why not)] of every claim on the arm
    ``which``."""
    out = []
    for claim in CLAIMS:
        d = data["claims"].get(claim.__name__)
        v = verdicts_of(claim, d, which)
        cells = verdict_cells(v, claim.ADDED_WORDS) if v is not None else None
        out.append((claim, _title(claim, data["claims"]), cells, why_not(claim, which)))
    return out


def section(data):
    """The document's section: the Azure capacities and how every claim's load was placed
    against them, the Mooncake excerpt claim by claim; each claim's comparisons on both
    as details (:func:`.common.details`, the appendix)."""
    cap = data["capacity"]
    from .capacities import cap_text, interval_text
    words = grouped(capacities(data), lambda p, c: f"{cap_text(cap, c)} [{interval_text(cap, p)}]")
    moon, why_not_run = [], {}
    for claim, title, cells, why in arm_lines(data, "mooncake"):
        n = title.split(".")[0]
        if cells is None:
            why_not_run.setdefault(why, []).append(n)
        else:
            moon.append(f"claim {n} *{verdict_word(cells[0])}*" + (
                f" (added: *{verdict_word(cells[1])}*)" if cells[1] != "none added" else ""))
    moon += [f"{'claim' if len(ns) == 1 else 'claims'} {_and(ns)} not run: {why}" for why, ns in why_not_run.items()]
    tables = []
    for which, name in (("azure", "Azure lengths"), ("mooncake", "the Mooncake excerpt")):
        for claim, title, cells, _ in arm_lines(data, which):
            if cells is None:
                continue
            a = arm(claim, data["claims"][claim.__name__], which)
            where = placed(claim, a, data) if which == "azure" else f"{', '.join(f'{r:g}' for r in rates(a))} req/s"
            tables += [f"**{title}, on {name}**" + (f" ({where})" if where.strip(" req/s") else "") + ":", "",
                       *clause_table(claim, a), ""]
    return "\n".join([
        "## On real workloads", "",
        f"**Azure lengths.** Every claim's design rerun with each request's lengths from a row of "
        f"`traces/azure-conv.csv` (no long class), at the same multiple of the same policy's capacity, "
        f"measured on these lengths (req/s, {cap.sizes['seed']} seeds): {words}. "
        + " ".join(notes(data)), "",
        f"**The Mooncake excerpt** (its own arrivals, or a slower replay where a claim's load asks; TTFT objective "
        f"1 s + 0.1 ms per prompt token): "
        + "; ".join(moon) + ".", "",
        *details("Every claim on real workloads, comparison by comparison",
                 "Each comparison as the claim's own table gives it (paired by seed; % for a ratio, pp for a share, "
                 "a count for preemptions, req/s for goodput), its part of the prediction and its outcome under the "
                 "rule at the top.", "", *tables), ""])


def notes(data) -> list:
    """The claims' sentences on what Azure lengths cannot give their mechanism: each
    claim's ``AZURE_NOTE``, or its ``azure_note(data)`` computed from its arm."""
    out = []
    for claim in CLAIMS:
        d = data["claims"].get(claim.__name__)
        if d is None:
            continue
        note = getattr(claim, "AZURE_NOTE", "") or (claim.azure_note(d) if hasattr(claim, "azure_note") else "")
        if note:
            out.append(note)
    return out


def _and(items) -> str:
    """'1, 2 and 3'."""
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def grouped(caps, text=lambda p, c: f"{c:g}") -> str:
    """Capacities in words, highest first, the policies of one value together:
    'round_robin 104; least_requests, least_tokens and least_kv 100' (``text`` writes a
    policy's value)."""
    groups = {}
    for p in sorted(caps, key=lambda p: -caps[p]):
        groups.setdefault(text(p, caps[p]), []).append(p)
    return "; ".join(f"{_and(ps)} {v}" for v, ps in groups.items())


def summary_lines(data) -> list:
    """The practitioner's summary's sentence on Azure lengths: the capacities, whether a
    work-aware score beats round_robin there, and the claims whose mechanism's verdict
    changes there."""
    caps = capacities(data)
    changed = []
    for claim, title, cells, _ in arm_lines(data, "azure"):
        d = data["claims"].get(claim.__name__)
        if cells is not None and d is not None and verdict_word(cells[0]) != verdicts(claim.clauses(d))["mechanism"]:
            changed.append(title.split(".")[0])
    rr = caps.get("round_robin")
    beat = [p for p in caps if p != "round_robin" and rr is not None and caps[p] > rr]
    return [f"**On Azure's chat lengths** (section \"On real workloads\") capacity at the SLO, req/s: {grouped(caps)}"
            + (": no score beats round_robin there" if rr is not None and not beat else "")
            + (f"; the seed's mechanism changes verdict for claims {_and(changed)}" if changed else "") + ".", ""]
