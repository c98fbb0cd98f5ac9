"""The least-outstanding-routing study (issue 13; the seed: least-outstanding-routing.txt).

Each claim of the seed is a module with the same five functions: ``load(root)`` (its
Datasets under the results folder ``root``, or None if not run), ``verdict(data)``,
``row(data)`` (its line of the verdict table), ``figure(data, figures_dir)`` (the paths
written) and ``section(data)`` (its part of docs/least-outstanding-routing.md, its details
marked by :func:`common.details` for the appendix document beside it). Every
policy sees the same workload per seed (common random numbers), so comparisons are
paired by seed; a difference is a *lead* under :data:`common.RULE` (a paired bootstrap
interval that excludes 0 and a material effect; issue 23).

    python -m routesim.least_outstanding              # every sweep, then figures and the documents
    python -m routesim.figures results/token-routing/ # figures/lor-*.png and .svg only
    python -m routesim.report results/token-routing/  # docs/least-outstanding-routing.md and its appendix only
"""

import importlib
from pathlib import Path

import numpy as np

from . import (admission, affinity, capacities, choices, cold_start, counts, example, learning, preemption,
               retries, server, staleness, summary, workloads)
from ...files import write_texts
from .common import RULE, details, in_workers, read, rule_version, shared_design, verdict_cells, verdict_word, verdicts

CLAIMS = (capacities, counts, example, choices, staleness, affinity, preemption, cold_start, retries, learning, admission,
          server, workloads)
"""The claims' modules in the document's order (``capacities`` is the capacity table,
``example`` claim 1's worked example, ``server`` the study's main arm on vLLM's loop with a
roofline cost (the verdict table's main columns) and ``workloads`` every claim on real
workloads (a column of it): sections without a row of their own)."""

SWEEPS = tuple(s for claim in CLAIMS for s in claim.SWEEPS)
RESULTS = Path("results/token-routing")
"""The folder users name on the command line; every stage's results sit beside it."""
OUT = Path("docs/least-outstanding-routing.md")

LEAVES_OUT = (
    "Output lengths are drawn from two log-normal classes (every claim also replays Azure's lengths: "
    "\"On real workloads\"), not from a real tokenizer and model; one step-cost formula per arm (on the page's "
    "replica claims 1 to 5 and 9 rerun with prefill twice and four times as costly and a 2,048-token chunk budget, "
    "claim 3 at 50 ms only); the router knows prompt lengths exactly and adds a fixed output allowance (claim 1's "
    "clairvoyant arm bounds what knowing the output would be worth); no network, no tokenization cost at the "
    "router, no speculative decoding, no multi-GPU parallelism, no autoscaling. A cold replica warms with time "
    "since its recovery, not with the work it serves; the front door has no deadline of its own (the clients' "
    "timeouts stand for one). The server reruns each claim's main design alone (claim 2 at N = 8, claim 3 at "
    "50 ms): the mechanism, sensitivity and real-workload stages run on the page's replica only. Claims 1 to 5 "
    "are also measured under a 50 ms scrape (claim 3 also at 10 and 100 ms and with four routers); no other "
    "period or number of routers is run.")


def is_study(results_dir) -> bool:
    """Whether a results folder is this study's (``results/token-routing``)."""
    return Path(results_dir).resolve().name == RESULTS.name


def _loaded(results_dir):
    """(claim module, its data) of every claim whose results exist, in :data:`CLAIMS`'
    order; ``server`` and ``workloads`` (last) rerun the claims before them and are given
    their data rather than reading every file again."""
    root = Path(results_dir).parent
    done = {}
    for claim in CLAIMS:
        data = claim.load(root, done) if claim in (server, workloads) else claim.load(root)
        if data is not None:
            done[claim.__name__] = data
            yield claim, data


def figures(results_dir=RESULTS, figures_dir=Path("figures")) -> list:
    """Draw every claim's figure whose results exist, the claims shared among worker
    processes (common.in_workers: matplotlib holds the interpreter); returns the paths
    written, in the claims' order."""
    jobs = [(claim.__name__, data, Path(figures_dir)) for claim, data in _loaded(results_dir)]
    return [p for paths in in_workers(_draw, jobs) for p in paths]


def _draw(job) -> list:
    """One claim's figures: job = (its module's name, its data, the figures folder)."""
    name, data, figures_dir = job
    return importlib.import_module(name).figure(data, figures_dir)


def appendix_path(out) -> Path:
    """The appendix document written beside the document ``out``: its "-appendix" twin
    (docs/least-outstanding-routing-appendix.md)."""
    out = Path(out)
    return out.with_name(f"{out.stem}-appendix{out.suffix}")


def document(results_dir=RESULTS, out=OUT) -> tuple:
    """(docs/least-outstanding-routing.md's text, its appendix document's text) from the
    results: the practitioner's summary first (:mod:`.summary`), the design every claim
    shares and the verdict rule, the verdict table, the claims' sections (each one's
    details moved to the appendix, :func:`appendix_path` of ``out``, the document's
    file), what the model leaves out, the old verdicts against the new."""
    loaded = list(_loaded(results_dir))
    appendix_name = appendix_path(out).name
    parts = ["# Least-outstanding routing when request costs vary: the seed's claims tested",
             "",
             "Generated by `python -m routesim.report results/token-routing/` with its appendix, "
             f"[{appendix_name}]({appendix_name}) (figures: `python -m routesim.figures results/token-routing/`; "
             "run everything with `python -m routesim.least_outstanding`). Each claim is a stage measured in a "
             "steady state, on drained cohorts, at loads placed against each policy's capacity at the SLO.",
             "",
             *summary.summary(loaded, appendix_name),
             "## How the claims are measured", "", shared_design(), "", RULE, "",
             *verdict_table(loaded)]
    on_server = dict(loaded).get(server)
    sections = ["\n".join([_section(claim, data, on_server), *_verdict_line(claim, data, on_server)])
                for claim, data in loaded]
    window = _window_note(results_dir)
    sections.append("\n".join(["## What the model leaves out", "", LEAVES_OUT, "", calibration_note(), "",
                               *(details("The cohorts", window) if window else []), "",
                               *old_against_new(loaded, on_server)]))
    sections, appendix = summary.to_appendix(sections, appendix_name)
    parts += sections
    head = ["# Least-outstanding routing: the appendix", "",
            f"The details of [the document]({Path(out).name}), "
            "generated with it by the same commands: under each of its sections' headings, what that "
            "section's pointer names (the long tables, the steady state, the sensitivity runs, the "
            "secondary comparisons).", ""]
    return ("\n".join(parts).rstrip("\n") + "\n",
            "\n".join(head + appendix).rstrip("\n") + "\n")


def write(results_dir=RESULTS, out=OUT) -> list:
    """Write the document to ``out`` and its appendix beside it (:func:`appendix_path`),
    both computed before either is written and each written whole
    (:func:`routesim.files.write_texts`); returns their paths."""
    text, appendix = document(results_dir, out)
    return write_texts({Path(out): text, appendix_path(out): appendix})


ROOFLINE = Path("examples/llama-3.1-8b-h100.toml")
"""The roofline description the calibration note prices a decode step with."""


def calibration_note(n_seqs=100, tokens=1100) -> str:
    """What a user should calibrate (issue 44 item 2): one decode step of ``n_seqs``
    sequences of ``tokens`` tokens each (ms) priced by the server arm's step cost (the
    roofline at its default constants, :mod:`routesim.step_cost.roofline`), by the page's
    linear 8B formula (:func:`.counts.decode_ms`) and by the roofline of :data:`ROOFLINE`
    at full bandwidth (``python -m routesim.calibrate --model``'s priors)."""
    from ...calibrate import hardware
    from ...step_cost import roofline
    k = n_seqs * tokens
    served = float(roofline.duration(np.array([p.default for p in roofline.PARAMS]), 0, 0, n_seqs, k, 0))
    linear = counts.decode_ms(n_seqs, k)
    pri = hardware.derive(hardware.read(ROOFLINE))["priors"]
    floor = pri["base"] + pri["per_decode_sequence"] * n_seqs + pri["per_kv_token"] * k
    return (f"**What to calibrate.** A decode step of {n_seqs} sequences of {tokens:,} tokens costs {served:.1f} ms "
            "on the server, the main arm (the roofline of Llama-3.1-8B on one H100 SXM at its default fractions of "
            f"the datasheet: 80 % of the bandwidth, 60 % of the FLOPs, a 4 ms overhead); at {linear:.1f} ms on the "
            f"page's linear 8B cost, the sensitivity arm; at {floor:.1f} ms, a floor a real kernel does not reach, "
            f"on the same roofline at the datasheet's full bandwidth (`{ROOFLINE}`). Every capacity here inherits "
            "its arm's decode price: before planning with one, fit the step cost to your server's measured steps "
            "(`python -m routesim.calibrate LOG --cost roofline`, docs/calibration.md: the bandwidth fraction and "
            "the overhead set the decode price, the FLOPs fraction the prefill behind the TTFT tail) and rerun the "
            "capacity search.")


OLD_VERDICTS = {"counts": "does not hold", "choices": "holds with qualification", "staleness": "holds",
                "affinity": "does not hold", "preemption": "does not hold", "cold_start": "holds",
                "retries": "holds with qualification", "learning": "does not hold", "admission": "does not hold"}
"""The verdicts of docs/least-outstanding-routing.md before issue 44 (main b12cdbc): the
whole prediction, the mean of per-seed ratios, a lead where none was predicted not
counted against."""


def _short(claim):
    return claim.__name__.rsplit(".", 1)[1]


def _judged(loaded):
    """[(claim, data)] of the loaded claims that have a verdict of their own (:func:`clauses`)."""
    return [(claim, data) for claim, data in loaded if hasattr(claim, "clauses")]


def _section(claim, data, on_server) -> str:
    """A section of the document: a claim's with its main arm's lines after its design
    (:func:`.server.section_lines`; none when the server arm did not run), any other
    section as its module writes it."""
    if claim not in server.CLAIMS:
        return claim.section(data)
    return claim.section(data, main=server.section_lines(claim, on_server))


def _verdict_line(claim, data, on_server) -> list:
    """The closing line of a claim's section: its two verdicts on the server, the main
    arm (:func:`.server.main_cells`; the verdict table gives what went the other way),
    then on the page's replica, this section's runs; the page's alone where the server
    arm did not run; [] for a section without a verdict of its own."""
    if not hasattr(claim, "clauses"):
        return []
    mech, added = verdict_cells(verdicts(claim.clauses(data)), claim.ADDED_WORDS)
    main = server.main_cells(claim, on_server)
    if main is None:
        return [f"**Verdict.** The seed's mechanism: *{mech}*. Clauses the prediction added: *{added}*.", ""]
    return [f"**Verdict.** On the server (the main arm): the seed's mechanism *{verdict_word(main[1])}*; added: "
            f"*{verdict_word(main[2])}*. On the page's replica (these runs): the seed's mechanism *{mech}*; added: "
            f"*{added}*.", ""]


VERDICT_TABLE = (
    "## The verdicts", "",
    "The verdicts on the server, the main arm (section \"On the server it speaks of\"; its comparisons in each "
    "claim's section); the page's replica is the sensitivity column, marked where it differs from "
    "the server; the Azure-length arm, run on the page's replica, is marked where it differs from that replica.",
    "")
"""The verdict table's heading and the paragraph that says which arm its columns read."""


def verdict_table(loaded) -> list:
    """Markdown lines of the verdict table (:data:`VERDICT_TABLE` first, a blank line
    last): per claim with a row, its claim and prediction, what was measured on the server
    and its two verdicts there (:func:`.server.main_cells`; :func:`.server.not_run_cells`
    where its server arm did not run), its verdicts on the page's replica against the
    server's (:func:`.server.page_column`), and on Azure lengths against the page's
    replica's (:func:`.workloads.column`)."""
    on_server, of = dict(loaded).get(server), dict(loaded)
    lines = [*VERDICT_TABLE,
             f"| claim | prediction | {server.MEASURED} | the seed's mechanism | clauses the prediction added | "
             f"{server.PAGE_COLUMN} | {workloads.COLUMN} |", "|---|---|---|---|---|---|---|"]
    for claim, row, page_cells in verdict_rows(loaded):
        main = server.main_cells(claim, on_server)
        cells = main or server.not_run_cells(claim, on_server)
        lines.append(f"| {row[0]} | {row[1]} | {' | '.join(cells)} | {server.page_column(claim, of[claim], main)} | "
                     f"{workloads.column(claim, of[claim], page_cells)} |")
    return lines + [""]


def verdict_rows(loaded):
    """[(claim module, row, (mechanism cell, added cell))] of the verdict table: each
    claim's row (claim, prediction, measured, …) and its two verdicts
    (:func:`common.verdict_cells`)."""
    out = []
    for claim, data in _judged(loaded):
        row = claim.row(data)
        if row is not None:
            out.append((claim, row, verdict_cells(verdicts(claim.clauses(data)), claim.ADDED_WORDS)))
    return out


def changes(claim, data):
    """{"old", "former", "log", "whole", "mechanism", "added", "reason"} for one claim:
    the document's former verdict (:data:`OLD_VERDICTS`), the former rule recomputed on
    these runs, the rule with log-ratios only, the whole prediction under the new rule,
    its two parts, and why the verdict changed, in words."""
    with rule_version("old"):
        former = claim.verdict(data)
    with rule_version("log"):
        log = claim.verdict(data)
    v = verdicts(claim.clauses(data))
    old = OLD_VERDICTS.get(_short(claim))
    why = []
    if old is not None and former != old:
        why.append(f"the former rule on these runs gives *{former}*, not *{old}*")
    if log != former:
        why.append(f"log-ratios: *{former}* → *{log}*")
    if v["whole"] != log:
        why.append(f"a lead where none was predicted counts against: *{log}* → *{v['whole']}*")
    if v["added"] is not None and v["mechanism"] != v["whole"]:
        why.append(f"the seed's mechanism judged apart from the added clauses ({claim.ADDED_WORDS}: "
                   f"*{v['added']}*)")
    return {"old": old, "former": former, "log": log, **v, "reason": "; ".join(why) or "no change"}


def old_against_new(loaded, on_server=None) -> list:
    """Markdown lines: the table of the former verdicts against the new ones, with the
    reason for each change (:func:`changes`, on the page's replica, where the former
    verdicts were given), and the verdicts on the server, the main arm
    (:func:`.server.main_cells` of ``on_server``, the server arm's data; "not run")."""
    judged = _judged(loaded)
    if not judged:
        return []
    lines = ["**Old verdicts against new** (issue 44 item 3). *Old*: this document's verdict before (the whole "
             "prediction, the mean of per-seed ratios, a lead where none was predicted not counted); then the "
             "same comparisons under the rule at the top, whole and in its two parts, and the reason for each "
             "change, on the page's replica, where the old verdicts were given; last, the verdicts now, on the "
             "server.", "",
             "| claim | old | whole, new rule | the seed's mechanism | added clauses | reason | "
             "on the server, the main arm (mechanism; added) |",
             "|---|---|---|---|---|---|---|"]
    for claim, data in judged:
        row, c = claim.row(data), changes(claim, data)
        name = row[0] if row is not None else _short(claim)
        main = server.main_cells(claim, on_server)
        now = f"{verdict_word(main[1])}; {verdict_word(main[2])}" if main else server.NOT_RUN
        lines.append(f"| {name} | {c['old'] or '—'} | {c['whole']} | {c['mechanism']} | "
                     f"{c['added'] or 'none added'} | {c['reason']} | {now} |")
    return lines


def _window_note(results_dir) -> str:
    """The cohorts' ends, per sweep: the window and the drain (token-model.md §7: the
    cohort is the arrivals in [warm-up, horizon); each is followed for up to drain_s
    past the horizon), and how much of the cohort was still unfinished at the stop."""
    rows = []
    for d in sorted(Path(results_dir).parent.glob("token-routing*")):
        shares, windows, drains = [], set(), set()
        for f in sorted(d.glob("*.nc")):
            ds = read(f)
            if "unfinished" not in ds or "arrivals" not in ds:
                continue   # (the capacity stage's files: their runs are in the capacity table)
            shares.append(float((ds.unfinished.sum() / ds.arrivals.sum()).values) * 100)
            windows.add(float(ds.attrs["measure_s"]))
            drains.add(float(ds.attrs.get("drain_s", float("nan"))))
        if shares:
            w = "/".join(f"{x:g}" for x in sorted(windows))
            dr = "/".join(f"{x:g}" for x in sorted(drains))
            rows.append(f"| `{d.name}` | {w} | {dr} | {min(shares):.1f}–{max(shares):.1f} |")
    if not rows:
        return ""
    return "\n".join([
        "**The cohorts.** Each stage measures the requests that arrive in its window and, "
        "after the window, stops taking new arrivals and follows the cohort for up to its "
        "drain (token-model.md §7): a request still in the system then counts as unfinished, "
        "and the latency percentiles cover the completed ones. With the drain, a cohort "
        "request is unfinished only where the load stays beyond capacity. Unfinished share "
        "of the cohort, per sweep (range over its stages, all runs together):", "",
        "| results | window (s) | drain (s) | unfinished % |", "|---|---|---|---|", *rows])
