"""What every claim of the least-outstanding-routing study shares: the verdict rule
(paired comparisons by seed, bootstrap intervals, a material effect), the steady-state
rows, the measured capacities, loading a stage's Dataset, and how
its figures are saved (:mod:`routesim.studies.plotting`: PNG and SVG, fixed SVG hash
salt, no dates)."""

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402

from ... import results  # noqa: E402
from .. import plotting  # noqa: E402
from ..intervals import LEVEL, RESAMPLES, excludes_zero, interval  # noqa: E402

PROVISIONAL_CAPACITY = {"round_robin": 40.0, "random": 38.0, "least_requests": 45.0, "least_tokens": 46.0,
                        "least_kv": 46.0, "least_cost": 46.0, "power_of_d": 46.0, "rate_weighted": 37.0}
"""Capacity at the 1 s TTFT p99 SLO of 8 default replicas, default workload, 1,200 s
warm-up, 60 s window, drained, 16 seeds, by the median rule (``python -m routesim.capacity
sweeps/batching.toml --low 10 --high 56``, the README before issue 44): what the designs were placed against before the study's own capacity
stage ran; :func:`capacity` reads the measured value."""
CAPACITY_RESULTS = "token-routing-capacity"
"""The capacity stage's results folder (results/token-routing-capacity/<stage>-capacity.nc,
stages ``default`` and ``mooncake``: ``python -m routesim.capacity``'s files)."""

MOONCAKE_ABOVE = "least_tokens' capacity there is known only to exceed 4.6 req/s"
"""Why a claim whose load is placed against least_tokens' capacity does not run on the
Mooncake excerpt (its ``MOONCAKE_WHY``, :mod:`.workloads`): the excerpt's capacity search
(sweeps/token-routing-capacity.toml) bounds it only from below."""
MOONCAKE_BELOW = "its load's policy has a capacity there below the smallest rate replayed, 1.53 req/s"
"""The same for a claim whose load is placed against another policy's capacity: the
search bounds it only from above."""


_READ = {}


def _key(path):
    st = path.stat()
    return (path, st.st_mtime_ns, st.st_size)


def in_workers(fn, items) -> list:
    """``[fn(x) for x in items]``, computed in spawned worker processes, one per core
    (at most one per item), when there are two or more cores and a worker can start
    (:func:`_can_spawn`); here otherwise. ``fn`` a module-level function; items and
    results are pickled."""
    items = list(items)
    cores = len(os.sched_getaffinity(0))
    if cores < 2 or len(items) < 2 or not _can_spawn():
        return [fn(x) for x in items]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(min(cores, len(items)), mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(fn, items))


def _can_spawn():
    """Can a spawned worker start without running the caller's script again? A worker
    imports the parent's main module: safely when it was run with ``-m`` (this study's
    commands, pytest) or there is none (an interactive session, a notebook); a script
    run by its path would run again in every worker (and one read from standard input
    cannot), so ``fn`` runs here."""
    main = sys.modules.get("__main__")
    return getattr(main, "__spec__", None) is not None or getattr(main, "__file__", None) is None


def read(path):
    """The Dataset in the results file ``path``, in memory and read-only, read once per
    process while the file stays the same (its path, modification time and size): the
    document and the figures read most files several times. A shallow copy each time, so
    a caller's attrs and variables are its own."""
    key = _key(Path(path).resolve())
    if key not in _READ:
        ds = results.load(key[0])
        for v in ds.variables.values():
            v.values.flags.writeable = False   # (a shared array: changing it in place raises)
        _READ[key] = ds
    return _READ[key].copy(deep=False)


SERVER_SWEEP = "sweeps/token-routing-server.toml"
SERVER_SEARCH = ("--stage", "capacity", "--low", "24", "--high", "56", "--points", "3", "--resolution", "4")
"""The server arm's sweep file and its capacity search (:mod:`.server`'s ``SWEEP`` and
``SEARCH``): rates on multiples of 4 req/s, 3 a round, from 24 to 56 req/s (a vllm run
costs 11 to 14 reserve runs: the budget's resolution)."""
SERVER_CAPACITY = ("token-routing-server", "capacity")
"""The server arm's capacity search (:mod:`.server`): its results folder and stage."""


def capacity(root, policy, stage="default"):
    """(capacity req/s, seeds' low, seeds' high, measured) of ``policy`` under the
    results root ``root``: the study's capacity stage ``stage`` ("server": the server
    arm's search, :data:`SERVER_CAPACITY`) if it ran and searched that policy
    (measured True), else :data:`PROVISIONAL_CAPACITY` (measured False, the seeds' range
    NaN; e.g. rate_weighted, which the capacity stage does not search)."""
    folder, name = SERVER_CAPACITY if stage == "server" else (CAPACITY_RESULTS, stage)
    path = Path(root) / folder / f"{name}-capacity.nc"
    if path.exists():
        ds = squeeze(read(path))
        if policy in ds.policy.values:
            c = float(ds.capacity_rps.sel(policy=policy).squeeze())
            seeds = ds.capacity_rps_seed.sel(policy=policy).values.astype(float).ravel()
            fin = seeds[np.isfinite(seeds)]
            lo, hi = (float(fin.min()), float(fin.max())) if fin.size else (np.nan, np.nan)
            return (c, lo, hi, True)
    if stage != "default":
        return (np.nan, np.nan, np.nan, False)
    return (PROVISIONAL_CAPACITY[policy], np.nan, np.nan, False)


def capacities(root, policies):
    """{policy: (capacity req/s, seeds' low, high, measured)} from :func:`common.capacity`
    (``power_of_d`` with one choice is ``random``)."""
    out = {}
    for p in policies:
        try:
            out[p] = capacity(root, p)
        except (KeyError, ValueError):
            out[p] = (np.nan, np.nan, np.nan, False)
    return out


def against(rate, caps):
    """'0.76 × least_tokens' 46 req/s, …' for a load ``rate`` (req/s) and
    :func:`capacities`' dict; each capacity marked measured or provisional."""
    parts = []
    for p, (c, lo, hi, measured) in caps.items():
        if not np.isfinite(c):
            parts.append(f"{p}'s capacity not measured")
            continue
        seeds = f", seeds {lo:g}–{hi:g}" if measured and np.isfinite(lo) else ""
        how = "measured" if measured else "provisional, README"
        parts.append(f"{rate / c:.2f} × {p}'s {c:g} req/s ({how}{seeds})")
    return "; ".join(parts)


def rate_text(c) -> str:
    """A capacity (req/s) in words: '%g', or "below the searched range" when NaN."""
    return f"{c:g}" if np.isfinite(c) else "below the searched range"


def times_text(rate, c) -> str:
    """A load ``rate`` as a multiple of a capacity ``c`` ('0.93 ×'), "—" when ``c`` is NaN."""
    return f"{rate / c:.2f} ×" if np.isfinite(c) else "—"


def cell(c, digits=0, unit="%"):
    """A comparison as 'mean [low, high] unit', bold with its direction when a lead."""
    text = show(c, digits, unit)
    return f"**{text}**" if c[3] else text


def tally(named):
    """Words for [(name, comparison, predicted sign)]: which led as predicted, which the
    other way (a lead where none was predicted counts here too), which did not lead."""
    groups = {"as predicted": [], "the other way": [], "without a lead": []}
    for name, c, pred in named:
        groups[_outcome(c[3], pred)].append(name)
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in groups.items() if v)


def exceptions(named, start=True) -> str:
    """Words for [(name, comparison, predicted sign)] that name only the comparisons not
    as predicted (:func:`_outcome`) when they are the fewer: 'Every comparison as
    predicted', 'As predicted but: a (without a lead), b (the other way)', 'Every
    comparison the other way'; otherwise every group (:func:`tally`). Lower case when not
    ``start``."""
    outs = [(name, _outcome(c[3], pred)) for name, c, pred in named]
    odd = [(name, o) for name, o in outs if o != "as predicted"]
    kinds = {o for _, o in odd}
    if not odd:
        words = "every comparison as predicted"
    elif len(odd) == len(outs) and len(kinds) == 1:
        words = f"every comparison {odd[0][1]}"
    elif 2 * len(odd) <= len(outs):
        words = "as predicted but: " + ", ".join(f"{name} ({o})" for name, o in odd)
    else:
        words = tally(named)
    return words[0].upper() + words[1:] if start else words


def in_short(groups) -> str:
    """Words for {label: [(where, lead, predicted sign)]}: each label's usual outcome
    (:func:`_outcome`) and only its exceptions, e.g. 'TPOT p99 vs round_robin: without a
    lead (the other way at 23)' (a reading that does not repeat its table)."""
    parts = []
    for label, cases in groups.items():
        outs = [(_outcome(lead, pred), where) for where, lead, pred in cases]
        kinds = [o for o, _ in outs]
        usual = max(dict.fromkeys(kinds), key=kinds.count)
        rest = {}
        for o, where in outs:
            if o != usual:
                rest.setdefault(o, []).append(where)
        words = ", ".join(f"{o} at {', '.join(w)}" for o, w in rest.items())
        parts.append(f"{label}: {usual}" + (" everywhere" if not rest and len(outs) > 1 else "")
                     + (f" ({words})" if words else ""))
    return "; ".join(parts)


def _outcome(lead, pred):
    """"as predicted", "the other way" or "without a lead" for a lead (−1, 0, +1) and
    its predicted sign (0: no lead predicted, so any lead is the other way)."""
    if pred == 0:
        return "as predicted" if lead == 0 else "the other way"
    return "as predicted" if lead == pred else "without a lead" if lead == 0 else "the other way"


def sensitivity_rows(main_verdict, variants):
    """Markdown rows 'variant | load | comparisons | verdict | survives' for
    ``variants``: (words, load req/s (a number, or the loads as words), [(label,
    comparison, digits, unit)], verdict)."""
    rows = ["| step cost | load req/s | comparisons | verdict | survives |", "|---|---|---|---|---|"]
    for words, rate, comps, v in variants:
        shown = "; ".join(f"{label} {cell(c, d, u)}" for label, c, d, u in comps)
        load = rate if isinstance(rate, str) else f"{rate:g}"
        rows.append(f"| {words} | {load} | {shown} | {v} | {'yes' if v == main_verdict else 'no'} |")
    return rows


def stage_rate(ds):
    """A stage's one load (req/s), an axis dropped by :func:`common.open_stage`."""
    return float(ds.attrs["rate_rps"]) if "rate_rps" not in ds.dims else float(ds.rate_rps.values[0])


def results_root(ds):
    """The results root a Dataset was loaded from (:func:`load_stages` and the claims' own
    loaders keep it in ``attrs["results_root"]``), for :func:`capacity` at document time."""
    return Path(ds.attrs.get("results_root", "results"))


FIGURES = Path("figures")
DPI = 110
"""Resolution of the study's PNGs."""


SEEDS = 16
"""Seeds of every design of the rebuilt study (issue 23): the same number for every
claim, so one rule decides every verdict with the same power."""

MATERIAL = {"relative": 5.0, "points": 1.0}
"""The smallest effect that counts as a lead: 5 % for a latency tail or any other
positive quantity compared as a ratio (the geometric mean over seeds of a / b at least
1.05 or at most 1 / 1.05: symmetric in the log), 1 percentage point for a share
(attainment, hit rate, a share of placements) compared as a difference. A claim that
needs another bound states it beside its design."""

RELATIVE_BOUNDS = ((1 / (1 + MATERIAL["relative"] / 100) - 1) * 100, MATERIAL["relative"])
"""The material bound of a ratio as the changes a figure marks, % (−4.76, +5)."""

RULE = (
    "**The verdict rule.** Every comparison is paired by seed (the same seed gives every "
    f"arm the same workload), over {SEEDS} seeds. A ratio (a latency tail, any positive "
    "quantity) is compared as the mean over seeds of the log-ratio ln(a / b), shown "
    "back-transformed: the geometric-mean change exp(mean) − 1 in %, its interval the "
    "back-transformed interval of the mean log-ratio (so +100 % and −50 % are the same size "
    "of effect); a share is compared as a difference in percentage points. A difference is "
    f"a *lead* when the {LEVEL:.0%} percentile bootstrap interval of the mean per-seed "
    f"difference (`scipy.stats.bootstrap`, {RESAMPLES:,} resamples of the seeds, a fixed "
    "generator) excludes 0 **and** the effect is material: a ratio at least "
    f"{1 + MATERIAL['relative'] / 100:g} or at most 1 / {1 + MATERIAL['relative'] / 100:g}, "
    f"a share at least {MATERIAL['points']:g} percentage point. A comparison whose "
    "prediction is *no lead* (\"buys little\") fails when it leads either way. Each claim's "
    "comparisons are split into **the seed's mechanism** (what the seed document argues) and "
    "**clauses the prediction added** (tails, policies or conditions the study's prediction "
    "wrote in beyond the seed), and each part gets its own verdict: it *holds* when each of "
    "its comparisons is as predicted, *holds with qualification* when some are and none "
    "goes the other way, and *does not hold* otherwise. `identical` marks a comparison "
    "whose arms gave the same value on every seed, `no data` one with fewer than two "
    "seeds where both arms have a value (e.g. a ratio to 0), and `v (no spread)` one whose "
    "seeds repeat one run. Intervals are written `mean [low, high]`: a ratio's in %, a "
    "share's in pp, a count's or goodput's as a difference in its unit.")
"""The rule stated once at the top of the document; :func:`compare` applies it."""

_VERSION = ["new"]
"""The rule :func:`compare` and :func:`verdict_of` apply: "new" (log-ratios; a lead where
none was predicted counts against), "log" (log-ratios, the former verdict rule) or "old"
(the former document's: the mean of per-seed ratios, a lead where none was predicted never
counted against). Set only through :func:`rule_version`, for the old-against-new table."""


@contextlib.contextmanager
def rule_version(version):
    """Apply the rule ``version`` ("old", "log" or "new", :data:`_VERSION`) inside the block."""
    if version not in ("old", "log", "new"):
        raise ValueError(f"rule version: {version!r}")
    before, _VERSION[0] = _VERSION[0], version
    try:
        yield
    finally:
        _VERSION[0] = before


def compare(a, b, how="relative", material=None):
    """Paired comparison of arm ``a`` against arm ``b`` (arrays over seeds, the same
    seeds in the same order). ``how`` "relative": the per-seed log-ratio ln(a / b), its
    mean and interval back-transformed to exp(x) − 1 in % (a seed where either arm is 0
    or not finite has no log-ratio and is left out, except both 0: identical, 0);
    "points": (a − b) × 100, for shares given as fractions, in percentage points;
    "absolute": a − b in the values' unit. Returns (mean, low, high, lead) with the
    interval of :func:`routesim.studies.intervals.interval` and lead −1 (a lower), +1
    (a higher) or 0 under :data:`RULE`: the interval excludes 0 and the effect is at least
    ``material`` (default :data:`MATERIAL` for ``how``, in % for a ratio: |ln ratio| at
    least ln(1 + material / 100); 0 for "absolute"). NaNs when fewer than two seeds have
    a value (:func:`show` writes "no data")."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if material is None:
        material = MATERIAL.get(how, 0.0)
    if how == "relative" and _VERSION[0] == "old":
        d = (a / b - 1.0) * 100.0
    elif how == "relative":
        with np.errstate(divide="ignore", invalid="ignore"):
            d = np.where((a == 0) & (b == 0), 0.0, np.log(a / b))
        m, lo, hi = _interval_of(d)
        sign = excludes_zero((m, lo, hi))
        lead = sign if np.isfinite(m) and abs(m) >= np.log1p(material / 100.0) else 0
        return (*(float(np.expm1(x) * 100.0) for x in (m, lo, hi)), lead)
    elif how == "points":
        d = (a - b) * 100.0
    elif how == "absolute":
        d = a - b
    else:
        raise ValueError(f"how: {how!r}")
    m, lo, hi = _interval_of(d)
    sign = excludes_zero((m, lo, hi))
    return (m, lo, hi, sign if np.isfinite(m) and abs(m) >= material else 0)


_INTERVALS = {}
""":func:`_interval_of`'s results by the bytes of their input: the document computes most
comparisons several times (a row, a section, the verdicts, the old rule's), each a 9,999-
resample bootstrap with a fixed generator, so the same input gives the same interval."""


def _interval_of(d):
    """:func:`interval` of the finite per-seed differences ``d``; NaNs when fewer than two
    (computed once per distinct ``d`` in a process: :data:`_INTERVALS`)."""
    d = np.asarray(d, float)
    if np.isfinite(d).sum() < 2:
        return (np.nan, np.nan, np.nan)
    key = d.tobytes()
    if key not in _INTERVALS:
        _INTERVALS[key] = interval(d)
    return _INTERVALS[key]


def show(c, digits=0, unit=""):
    """'mean [low, high]' (signed) of a :func:`compare` result, with ``unit``, to
    ``digits`` decimals, or up to :data:`MORE_DIGITS` more where fewer would print the
    interval's two ends alike ("+0.002 [+0.001, +0.003]", not "+0.0 [+0.0, +0.0]");
    "identical" when every seed gave both arms the same value, "no data" when fewer than
    two seeds have a value, 'mean (no spread)' when every seed gave the same difference."""
    m, lo, hi = c[:3]
    u = f" {unit}" if unit else ""
    if not np.isfinite(m):
        return "no data"
    if m == lo == hi == 0:
        return "identical"
    if m == lo == hi:
        return f"{m:+.{digits}f}{u} (no spread)"
    d = digits
    while round(lo, d) == round(hi, d) and d < digits + MORE_DIGITS:
        d += 1
    return f"{m:+.{d}f} [{lo:+.{d}f}, {hi:+.{d}f}]{u}"


MORE_DIGITS = 3
""":func:`show`'s most decimals beyond those asked, to tell an interval's ends apart."""


def verdict_of(leads, predicted):
    """A verdict from comparisons' leads (−1, 0, +1) and the predicted signs (0: no lead
    predicted), under :data:`RULE`: "holds" when every comparison is as predicted, "holds
    with qualification" when some are and none goes the other way (a lead against the
    predicted sign, or any lead where none was predicted), "does not hold" otherwise."""
    pairs = list(zip(leads, predicted))
    if _VERSION[0] == "new":
        outcomes = [_outcome(x, p) for x, p in pairs]
        right, wrong = outcomes.count("as predicted"), outcomes.count("the other way")
    else:   # the former rule: a lead where none was predicted was never counted against
        right = sum(1 for x, p in pairs if x == p)
        wrong = sum(1 for x, p in pairs if x == -p and x != 0)
    if right == len(pairs) and pairs:
        return "holds"
    if right and not wrong:
        return "holds with qualification"
    return "does not hold"


MECHANISM, ADDED = "mechanism", "added"
"""The two parts of a claim's prediction (:func:`verdicts`): the seed's mechanism and the
clauses the study's prediction added to it."""


def verdicts(clauses):
    """{"whole", "mechanism", "added"}: the verdicts (:func:`verdict_of`) of a claim's
    ``clauses`` [(label, comparison, predicted sign, part :data:`MECHANISM` or
    :data:`ADDED`)] all together, of the mechanism's and of the added ones ("added" None
    when the prediction added none); and "against": the labels of the comparisons that
    went the other way, per part."""
    def of(cs):
        return verdict_of([c[1][3] for c in cs], [c[2] for c in cs]) if cs else None
    parts = {k: [c for c in clauses if c[3] == k] for k in (MECHANISM, ADDED)}
    against = {k: [c[0] for c in cs if _outcome(c[1][3], c[2]) == "the other way"] for k, cs in parts.items()}
    return {"whole": of(clauses), "mechanism": of(parts[MECHANISM]), "added": of(parts[ADDED]),
            "against": against}


def verdict_cells(v, added_words):
    """The verdict table's two cells for :func:`verdicts`' dict ``v``: the mechanism's
    verdict, and the added clauses' (``added_words``: which they are) with what went the
    other way."""
    mech = v["mechanism"] + (f" (against: {', '.join(v['against'][MECHANISM])})" if v["against"][MECHANISM] else "")
    if v["added"] is None:
        return mech, "none added"
    bad = v["against"][ADDED]
    return mech, f"{v['added']}: {added_words}" + (f" (against: {', '.join(bad)})" if bad else "")


def arm_cell(v, added_words, page_cells, brief=False) -> str:
    """A verdict-table cell of an arm that reruns a claim (the server, real workloads):
    the arm's verdicts (:func:`verdicts`' dict ``v``) and whether either changes from the
    page's ``page_cells`` (mechanism cell, added cell, :func:`verdict_cells`): 'mechanism:
    m (against: …); added: a — no change', or with ``brief`` 'm; a — no change' (the
    verdicts alone, in the order of the table's two columns before)."""
    mech, added = verdict_cells(v, added_words)
    changed = [name for name, a, b in (("mechanism", mech, page_cells[0]), ("added", added, page_cells[1]))
               if verdict_word(a) != verdict_word(b)]
    change = f"**changes** ({', '.join(changed)})" if changed else "no change"
    if brief:
        return f"{verdict_word(mech)}; {verdict_word(added)} — {change}"
    return f"mechanism: {mech}; added: {verdict_word(added)} — {change}"


def verdict_word(cell):
    """A verdict cell's verdict alone (its words before ':' or ' (')."""
    return cell.split(":")[0].split(" (")[0]


COMMON = {"replicas": 8, "warmup_s": 1200.0, "measure_s": 60.0, "drain_s": 600.0, "seeds": SEEDS}
"""The design every claim shares unless its section says otherwise (:func:`shared_design`,
:func:`departures`): replicas, warm-up (s), window (s), drain (s), seeds."""


def shared_design() -> str:
    """The paragraph stating once, near the document's top, what every claim's design
    shares (:data:`COMMON`) and when a window is steady (:func:`routesim.steady.rule`)."""
    from ... import steady
    c = COMMON
    return (f"**The design every claim shares** (a claim's design names only what differs). "
            f"{c['replicas']} default replicas of two kinds: the server (vLLM's default loop, a roofline step cost "
            "of Llama-3.1-8B on an H100), the main arm, and the page's replica (its reserve scheduler and linear 8B "
            "step cost), the sensitivity arm (each claim's reading and the figure before it); the "
            "default workload with its long class (2 % of requests: prompts of median 12,000 tokens, outputs "
            f"of median 2,000), a {c['warmup_s']:,.0f} s warm-up, a {c['measure_s']:g} s window whose arrivals "
            f"are followed to the end (drained, up to {c['drain_s']:g} s), {c['seeds']} seeds; every arm sees "
            "the same workload per seed (common random numbers), so comparisons are paired by seed. A run is "
            f"*steady* by `routesim.steady`'s check: {steady.rule()}; each design's steady-state figures "
            "(medians over seeds of backlog growth and of the KV occupancy of the window's first and last "
            "quarter) are in the appendix.")


def departures(ds, replicas=None) -> str:
    """What a stage's design changes of :data:`COMMON`, in words ('; 300 s warm-up, 4
    seeds'), "" when nothing: read from the Dataset ``ds``'s attrs and seed axis
    (``replicas`` given by the caller when it differs)."""
    out = []
    if replicas is not None and replicas != COMMON["replicas"]:
        out.append(f"{replicas} replicas")
    for key, words in (("warmup_s", "s warm-up"), ("measure_s", "s window"), ("drain_s", "s drain")):
        v = float(ds.attrs.get(key, COMMON[key]))
        if v != COMMON[key]:
            out.append(f"{v:,.0f} {words}")
    n = ds.sizes.get("seed", COMMON["seeds"])
    if n != COMMON["seeds"]:
        out.append(f"{n} seeds")
    return "; " + ", ".join(out) if out else ""


DETAILS_OPEN, DETAILS_CLOSE, DETAILS_END = "<!-- details:", "-->", "<!-- /details -->"
"""The markers around a section's details (:func:`details`)."""


def details(label, *lines) -> list:
    """``lines`` (markdown) marked as a section's details: the document keeps a pointer
    to them and its appendix document gets them, under the heading ``label``
    (:func:`.summary.to_appendix`)."""
    return [f"{DETAILS_OPEN} {label} {DETAILS_CLOSE}", *lines, DETAILS_END]


ON_PAGE = "on the page's replica"
"""What a claim's figure shows, in its title: the page's replica's runs (reserve
scheduler, linear 8B cost), the sensitivity arm (:data:`PAGE_ARM`)."""


class Arm(NamedTuple):
    """The arm a claim's main figure draws (a claim module's ``main_figure(data,
    figures_dir, arm)``): the words its title says it shows, the suffix of its files' stem
    (after the module's ``FIGURE``) and the capacity stage its capacities are read from
    (:func:`capacity`'s ``stage``)."""
    words: str
    suffix: str
    capacity: str


PAGE_ARM = Arm(ON_PAGE, "", "default")
"""The page's replica's runs: figures/<FIGURE>.png, beside each claim's reading."""
SERVER_ARM = Arm("on the server", "-server", "server")
"""The server arm's runs (:mod:`.server`): figures/<FIGURE>-server.png, beside its table."""
PAGE_TABLE = "The page's replica's table"
"""The appendix heading of a claim section's main table on the page's replica, moved
there when the section shows the main arm's (:func:`page_table`)."""


def page_table(main, *lines) -> list:
    """A claim section's main table on the page's replica (``lines``: its sentence, a
    blank line, its rows): in place when the section has no main arm (``main`` empty: the
    server arm did not run), else the main arm's lines (``main``:
    :func:`.server.section_lines`) take its place and the table moves to the appendix
    under :data:`PAGE_TABLE`."""
    return list(lines) if not main else [*main, *details(PAGE_TABLE, *lines)]


def reading(main) -> str:
    """The head of a claim section's reading, which reads the page's replica's runs: says
    so when the section also shows the main arm (``main`` not empty)."""
    return "**Reading, on the page's replica.**" if main else "**Reading.**"


STEADY = ("backlog_growth", "kv_occupancy_first", "kv_occupancy_last")
"""The window's steady-state figures (routesim/batching/metrics.py) every design prints."""


def steadiness(ds, dims=("seed",)):
    """A Dataset of the steady-state figures' medians over ``dims`` (default the seeds):
    backlog growth (requests) and KV occupancy over the window's first and last quarter
    (fractions), one value per remaining cell."""
    return ds[list(STEADY)].median(list(dims))


def steady_table(ds, by, dims=("seed",)):
    """Markdown rows of the steady-state figures per value of the axes ``by`` (a tuple
    of names of ``ds``'s axes): 'backlog growth' (median over seeds, requests) and 'KV
    occupancy first → last quarter' (median, %); printed beside each design."""
    med = steadiness(ds, dims)
    lines = ["| " + " | ".join(by) + " | backlog growth | KV occupancy first → last % |",
             "|" + "---|" * (len(by) + 2)]
    import itertools
    for key in itertools.product(*(ds[b].values for b in by)):
        one = med.sel(dict(zip(by, key)))
        lines.append("| " + " | ".join(_value(k) for k in key)
                     + f" | {float(one.backlog_growth):+.0f} | {float(one.kv_occupancy_first) * 100:.0f} → "
                       f"{float(one.kv_occupancy_last) * 100:.0f} |")
    return "\n".join(lines)


def unsteady_cells(ds, by=("policy",)) -> tuple:
    """({cell's words: (runs flagged, runs)} of the cells of the axes ``by`` of ``ds`` not
    steady by :func:`routesim.steady.cell_steady`, the number of cells)."""
    import itertools

    from ... import steady
    by = (by,) if isinstance(by, str) else tuple(by)
    cells = {cell_label(by, key) or "its runs": ds.sel(dict(zip(by, key)))
             for key in itertools.product(*(ds[b].values for b in by))}
    return {k: steady.count_unsteady(sub) for k, sub in cells.items() if not steady.cell_steady(sub)}, len(cells)


def steady_words(ds, by=("policy",)):
    """Whether each cell of the axes ``by`` of ``ds`` was steady by
    :func:`routesim.steady.cell_steady` (its medians, and each of its runs: the count of
    runs flagged is given), in words (the rule itself is stated once, at the document's
    top: :func:`shared_design`)."""
    flagged = unsteady_cells(ds, by)[0]
    if not flagged:
        return "every arm steady by `routesim.steady`'s rule"
    return "not steady by `routesim.steady`'s rule: " + ", ".join(
        f"{k} ({bad} of {n} runs flagged)" if bad else k for k, (bad, n) in flagged.items())


def _value(v) -> str:
    """An axis value as the document writes it: a number by ``:g`` (45, 0.2, inf), anything
    else (a name, a bool) by ``str``."""
    return f"{v:g}" if isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_)) else str(v)


def cell_label(by, key) -> str:
    """A cell's name in words, its values ``key`` on the axes ``by`` (tuples of one length):
    a policy by its name, any other axis as ``axis=value`` (``rate_rps=45``), separated by
    spaces, so that a list of cells can be separated by commas; "" for no axis."""
    return " ".join(_value(v) if b == "policy" else f"{b}={_value(v)}" for b, v in zip(by, key))


def squeeze(ds):
    """Drop the heterogeneity and scenario axes when they hold one value."""
    for dim in ("heterogeneity", "scenario"):
        if dim in ds.dims and ds.sizes[dim] == 1:
            ds = ds.isel({dim: 0}, drop=True)
    return ds


def open_stage(path):
    """A stage's Dataset with every length-one axis dropped (its value kept in the attrs,
    beside the parameters that were never axes), or None if not run."""
    path = Path(path)
    if not path.exists():
        return None
    ds = read(path)
    for dim, n in ds.sizes.items():
        if n == 1 and dim in ds.coords:
            v = ds[dim].values[0]
            ds.attrs.setdefault(dim, v.item() if hasattr(v, "item") else v)
    return squeeze(ds).squeeze(drop=True)


def on_trace(ds):
    """A trace stage's Dataset (rate_rps 0: a trace brings its own arrivals) with its
    rate_rps the arrivals it measured per second of its window (median over its runs,
    req/s, to 0.1), so that a claim's labels name its load."""
    ds = ds.squeeze("rate_rps", drop=True) if "rate_rps" in ds.dims else ds
    rate = round(float(ds.arrivals.median()) / float(ds.attrs["measure_s"]), 1)
    return ds.expand_dims(rate_rps=[rate])


def load_stages(root, folder, stages):
    """{stage: Dataset} (:func:`common.open_stage`) of ``stages`` under ``root/folder``, or
    None if any is missing; each Dataset's attrs keep ``results_root`` for
    :func:`common.capacity` at document time."""
    d = Path(root) / folder
    data = {s: open_stage(d / f"{s}.nc") for s in stages}
    if any(v is None for v in data.values()):
        return None
    for ds in data.values():
        ds.attrs["results_root"] = str(root)
    return data


def save(fig, stem, figures_dir):
    """Write ``stem``.png (at :data:`DPI`) and ``stem``.svg into figures_dir, their layout
    frozen first (:func:`routesim.studies.plotting.save`); returns both paths."""
    return plotting.save(fig, figures_dir, stem, DPI, freeze_layout=True)


def scenario_events(ds, name):
    """A scenario's events as written in the sweep file the Dataset carries (its attrs'
    ``sweep_text``): a list of {at_s, replica, fail | fail_fast | recover | ...}."""
    import tomllib
    return tomllib.loads(ds.attrs["sweep_text"])["scenarios"][name]["events"]


def replicas_at(events, kind):
    """(sorted replicas, times) of the events of one kind (e.g. "fail")."""
    hits = [e for e in events if e.get(kind)]
    return sorted({e["replica"] for e in hits}), sorted({e["at_s"] for e in hits})


FINISHED = ".finished-{}.json"
"""In a results folder: the record that the study command ran one part of it (a sweep, a
capacity search) to its end, and what that part's results depend on. A sweep drops its
chunks once it ends, so without the record ``--resume`` would run a finished part again;
with it, it keeps the part while the record still holds (:func:`finished`)."""


def _record(sweep_path, argv) -> dict:
    """What a part's results depend on: :func:`routesim.study.results_key` of its sweep
    file (the file's text, routesim's source, the traces it reads) and the arguments it
    ran with (``argv``, without its output folder)."""
    from ...config import load_sweep
    from ...study import results_key
    return {**results_key(load_sweep(sweep_path)), "argv": [str(a) for a in argv]}


def finished(folder, part, sweep_path, files, argv=()) -> bool:
    """Whether ``folder`` holds ``part`` as the study command finished it with the same
    sweep file, routesim, traces and ``argv`` (its record, :data:`FINISHED`), and each of
    ``files`` (names in ``folder``) is there."""
    folder = Path(folder)
    try:
        kept = json.loads((folder / FINISHED.format(part)).read_text())
    except (OSError, ValueError):
        return False
    return kept == _record(sweep_path, argv) and all((folder / f).is_file() for f in files)


def mark_finished(folder, part, sweep_path, argv=()):
    """Write ``part``'s record in ``folder`` (:data:`FINISHED`): it has run to its end."""
    from ...files import write_text
    write_text(Path(folder) / FINISHED.format(part), json.dumps(_record(sweep_path, argv), indent=1) + "\n")
