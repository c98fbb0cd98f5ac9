"""python -m routesim.validate CONFIG.toml [--out DIR] [--fit RUN ...] [--cdf RUN] [-q]

The evidence before trusting a capacity (issue 41, item 6): given the logs of several
runs of one server configuration, fit the step cost on the runs named for fitting by
simulation (routesim.calibrate.simfit: per-request times suffice), replay every run
with the fit as it was produced (open loop at its logged send times, or closed loop at
its ``max_in_flight``), and print per run and in summary the prediction's error on
TTFT, E2E and the inter-token time (mean, p50, p90, p99), on throughput, and which
runs were saturated. Writes under ``--out`` (default ``results/validate/<config
stem>/``) the printed text (``validate.txt``), the fitted parameters to paste into a
sweep (``fit.toml``) and a figure (``validate.png``: predicted against measured per
run; the CDFs of one run).

The configuration (paths relative to it)::

    name = "vLLM harness"               # optional: a title for the printout
    model = "llama-3.1-8b-h100.toml"    # optional: calibrate's model/hardware description

    [replica]                            # the server: any [replica] key of a sweep
    scheduler = "vllm"                   # (docs/keys.md); step_cost is "roofline"
    max_batch = 256
    kv_blocks = 28000
    block_tokens = 16
    max_batched_tokens = 8192
    prefix_caching = false

    [fit]                                # optional: the fit's start and axes
    axes = ["memory", "compute", "client_overhead_ms"]
    memory_efficiency = 0.7              # the start, with a model description
    compute_efficiency = 0.7
    overhead_ms = 10

    [[runs]]
    log = "run-1rps.csv"                 # a per-request or per-token log (calibrate.request_log)
    name = "1 req/s"                     # optional (default: the file's stem)
    fit = true                           # optional: a fitting run
    max_in_flight = 0                    # optional: the client's cap (closed loop)
    from_s = 0                           # optional: compare the requests sent in [from_s, to_s)
    to_s = 30                            # (s from the first send; the others load the server);
                                         # a fitting run's comparison runs to the end

The fitting runs: those with ``fit = true`` (or named by ``--fit``), else the runs of
the lowest third by offered load (at least one). The roofline's coefficients start
from the description at the start efficiencies (``weights`` and ``per_kv_token`` at
``memory_efficiency``, ``per_token`` and ``per_token_pair`` at
``compute_efficiency``), or from ``[replica] roofline_ms`` (default routesim's).

The inter-token time is each request's mean gap, (E2E − TTFT)/(O − 1): what a
per-request log gives. A run is **saturated** when, at a send of a compared request,
the requests in flight (sent, not finished) reached the server's ``max_batch`` or the
client's ``max_in_flight`` (requests then wait for a slot), or when its queue grew (the
median TTFT of the last quarter of its compared requests, by send time, is more than
twice that of the first quarter); the same rule on the prediction says where routesim
saturates. Exit status 0, or 2 on bad input (one line naming the file and the key or
row; nothing written).
"""

import argparse
import math
import sys
import tempfile
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .config.reader import ConfigError, Reader
from .ranks import nearest_rank
from .tables import fmt, legend, text_table

TOP_KEYS = ("name", "model", "replica", "fit", "runs")
RUN_KEYS = ("log", "name", "fit", "max_in_flight", "from_s", "to_s")
FIT_KEYS = ("axes", "memory_efficiency", "compute_efficiency", "overhead_ms", "base_ms")
START = {"memory_efficiency": 0.7, "compute_efficiency": 0.7, "overhead_ms": 10.0}
STATS = ("mean", "p50", "p90", "p99")
LATENCIES = ("ttft", "e2e", "itl")
TARGETS = (("ttft", "p50", 10.0), ("e2e", "p50", 5.0), ("itl", "mean", 5.0))
"""The issue's targets on every run below saturation: (latency, statistic, |error| %)."""
THROUGHPUT_TARGET = 5.0
"""Saturated throughput within this many per cent."""


@dataclass(frozen=True)
class Run:
    log: object            # simfit.Log
    path: Path
    fit: bool


@dataclass(frozen=True)
class Config:
    path: Path
    name: str
    replica: dict
    start: dict            # roofline_ms start {key: ms}
    priors: dict | None    # the description's roofline_ms at full efficiency (calibrate.hardware)
    overhead_ms: float
    axes: tuple
    runs: tuple


# --- reading ------------------------------------------------------------------

def _start(rd, doc, base):
    """(The roofline's start {key: ms}: the description's at the start efficiencies, else
    [replica] roofline_ms over routesim's defaults; the description's priors or None)."""
    from .calibrate import hardware, logs
    from .step_cost import defaults, roofline
    fitk = doc.get("fit", {})
    start = defaults(roofline)
    start.update(doc["replica"].get("roofline_ms", {}))
    pri = None
    if "model" in doc:
        path = base / rd.string(doc["model"], "model")
        try:
            pri = hardware.derive(hardware.read(path))["roofline_priors"]
        except logs.LogError as exc:
            raise ConfigError(rd.path, "model", str(exc)) from None
        me = rd.number(fitk.get("memory_efficiency", START["memory_efficiency"]), "fit.memory_efficiency")
        ce = rd.number(fitk.get("compute_efficiency", START["compute_efficiency"]), "fit.compute_efficiency")
        for k, eff in (("memory_efficiency", me), ("compute_efficiency", ce)):
            if not 0 < eff <= 1:
                rd.fail(f"fit.{k}", f"must be in (0, 1], got {eff!r}")
        start.update(weights=pri["weights"] / me, per_kv_token=pri["per_kv_token"] / me,
                     per_token=pri["per_token"] / ce, per_token_pair=pri["per_token_pair"] / ce)
    if "base_ms" in fitk:
        start["base"] = rd.number(fitk["base_ms"], "fit.base_ms")
    return start, pri


def load(path, fit_names=()) -> Config:
    """The checked configuration and its runs' logs; ConfigError or LogError on bad input."""
    import routesim
    from .calibrate import request_log, simfit
    path = Path(path)
    rd = Reader(path)
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as exc:
        rd.fail("", f"cannot read ({exc.strerror or exc})")
    except tomllib.TOMLDecodeError as exc:
        rd.fail("", f"malformed TOML: {exc}")
    rd.table(doc, "", TOP_KEYS)
    for key in ("replica", "runs"):
        if key not in doc:
            rd.fail(key, "missing")
    replica = dict(rd.table(doc["replica"], "replica", list(doc["replica"])))
    if replica.setdefault("step_cost", "roofline") != "roofline":
        rd.fail("replica.step_cost", "the fit's step cost is the roofline: leave step_cost out or set \"roofline\"")
    replica.pop("kind", None)
    fitk = rd.table(doc.get("fit", {}), "fit", FIT_KEYS)
    axes = fitk.get("axes", ["memory", "compute", "client_overhead_ms"])
    if not isinstance(axes, list) or not axes or not all(isinstance(a, str) for a in axes):
        rd.fail("fit.axes", "expected a non-empty list of axis names")
    named = ("memory", "compute", "base", "client_overhead_ms")
    fields = simfit.token_model().part("dtypes").PARAMS.names
    for a in axes:
        if a not in named and a not in fields:
            rd.fail("fit.axes", f"unknown axis {a!r}: {', '.join(named)} or a run parameter of the engine")
    if len(set(axes)) != len(axes):
        rd.fail("fit.axes", "an axis is named twice")
    start, priors = _start(rd, doc, path.parent)
    overhead = rd.number(fitk.get("overhead_ms", START["overhead_ms"]), "fit.overhead_ms")
    # the server's keys, checked by the sweep parser before anything runs
    probe = simfit.Log("probe", np.zeros(1), np.ones(1, np.int64), np.ones(1, np.int64), np.ones(1), np.ones(1))
    rep = dict(replica, roofline_ms=start)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "probe.csv").write_text(simfit.trace_text(probe))
        try:
            routesim.parse_sweep(simfit.sweep_text(probe, rep, "probe.csv"), path=Path(d) / "probe.toml")
        except ConfigError as exc:
            rd.fail(exc.key, exc.message)
    if not isinstance(doc["runs"], list) or not doc["runs"]:
        rd.fail("runs", "expected one or more [[runs]] tables")
    runs = []
    for i, r in enumerate(doc["runs"]):
        key = f"runs[{i}]"
        rd.table(r, key, RUN_KEYS)
        if "log" not in r:
            rd.fail(f"{key}.log", "missing")
        lp = path.parent / rd.string(r["log"], f"{key}.log")
        cap = rd.number(r.get("max_in_flight", 0), f"{key}.max_in_flight", int)
        frm = rd.number(r.get("from_s", 0.0), f"{key}.from_s")
        to = rd.number(r["to_s"], f"{key}.to_s") if "to_s" in r else math.inf
        if cap < 0 or frm < 0:
            rd.fail(f"{key}.{'max_in_flight' if cap < 0 else 'from_s'}", "must be >= 0")
        if not to > frm:
            rd.fail(f"{key}.to_s", f"must be above from_s ({frm:g}), got {to!r}")
        fit = r.get("fit", False)
        if not isinstance(fit, bool):
            rd.fail(f"{key}.fit", "expected true or false")
        name = rd.string(r.get("name", lp.stem), f"{key}.name")
        lg = request_log.read(lp, name, cap, frm, to)
        if not lg.cohort.any():
            rd.fail(f"{key}.from_s", f"no request of {lp} is sent in [{frm:g}, {to:g}) s from its first")
        runs.append(Run(lg, lp, fit))
    names = [r.log.name for r in runs]
    if len(set(names)) != len(names):
        rd.fail("runs", "two runs have one name: give each a name")
    for n in fit_names:
        if n not in names:
            raise ConfigError(path, "--fit", f"no run named {n!r} (runs: {', '.join(names)})")
    if fit_names:
        runs = [replace(r, fit=r.log.name in fit_names) for r in runs]
    if not any(r.fit for r in runs):
        order = sorted(range(len(runs)), key=lambda j: runs[j].log.rate_rps)
        low = set(order[:max(1, len(runs) // 3)])
        runs = [replace(r, fit=j in low) for j, r in enumerate(runs)]
    for i, r in enumerate(runs):
        if r.fit and r.log.cohort_to_s != math.inf:
            rd.fail(f"runs[{i}].to_s", f"{r.log.name} is a fitting run: its comparison runs to the end of its "
                    "log (leave to_s out)")
    return Config(path, doc.get("name", path.stem), replica, start, priors, overhead, tuple(axes), tuple(runs))


# --- replaying ------------------------------------------------------------------

def predict(log, replica: dict, values: dict) -> dict:
    """routesim's per-request times of ``log`` under the fitted ``values`` {flat: value}:
    {"ttft_ms", "e2e_ms": (R,) ms from the send, NaN where not completed}."""
    from .calibrate import simfit
    m = simfit.token_model()
    Fate, record = m.part("dtypes").Fate, m.part("timeline").record
    with tempfile.TemporaryDirectory() as d:
        g = simfit.grid_of(log, replica, {k: np.array([v]) for k, v in values.items()}, d)
    keep, sent = record(g, 0, np.zeros(1))[4:6]
    ovh = float(g.params["client_overhead_ms"][0])
    done = keep["outcome"] == Fate.COMPLETED
    n = len(log.send_ms)
    pad = lambda a: np.concatenate([a, np.full(n - a.shape[0], np.nan)])  # noqa: E731  (arrivals past the horizon)
    return {"ttft_ms": pad(np.where(done, keep["first_ms"] - sent + ovh, np.nan)),
            "e2e_ms": pad(np.where(done, keep["done_ms"] - sent + ovh, np.nan))}


def stats(log, ttft_ms, e2e_ms, max_batch) -> dict:
    """{(latency, stat): ms} over the cohort (LATENCIES × STATS), ``throughput`` (output
    tokens per second from the cohort's first send to its last token) and ``saturated``
    (module docstring); NaN statistics when a cohort request is missing."""
    from .calibrate.simfit import tpot
    c = log.cohort
    t, e, o, s = ttft_ms[c], e2e_ms[c], log.output[c], log.send_ms[c]
    out = {}
    if np.isnan(t).any():
        return {**{(lat, st): math.nan for lat in LATENCIES for st in STATS}, "throughput": math.nan,
                "saturated": True, "unfinished": int(np.isnan(t).sum())}
    vals = {"ttft": t, "e2e": e, "itl": tpot(e, t, o)}
    for lat, v in vals.items():
        v = v[np.isfinite(v)]
        out[(lat, "mean")] = float(v.mean())
        for st in STATS[1:]:
            out[(lat, st)] = nearest_rank(v, int(st[1:]))
    out["throughput"] = float(o.sum()) / ((float((s + e).max()) - float(s.min())) / 1000.0)
    out["saturated"] = saturated(log, ttft_ms, e2e_ms, max_batch)
    out["unfinished"] = 0
    return out


def in_flight(log, e2e_ms) -> np.ndarray:
    """(C,) requests of the whole log sent and not finished at each cohort request's send
    (itself included; ``e2e_ms`` (R,) from each send)."""
    s = log.send_ms
    t = s[log.cohort]
    started = np.searchsorted(np.sort(s), t, side="right")
    ended = np.searchsorted(np.sort(s + e2e_ms), t, side="right")
    return started - ended


def saturated(log, ttft_ms, e2e_ms, max_batch) -> bool:
    """The saturation rule of the module docstring: ``ttft_ms``, ``e2e_ms`` (R,) ms of the
    whole log; in flight over the cohort's sends, and the TTFT of its quarters."""
    cap = min(log.max_in_flight or max_batch, max_batch)
    if in_flight(log, e2e_ms).max() >= cap:
        return True
    t = ttft_ms[log.cohort]
    q = max(1, len(t) // 4)
    return bool(nearest_rank(t[-q:], 50) > 2.0 * nearest_rank(t[:q], 50))


def pct(pred, meas) -> float:
    return 100.0 * (pred - meas) / meas if meas else math.nan


# --- the printout -------------------------------------------------------------------

def fit_text(cfg, res) -> str:
    """The fit's lines: the error, the candidates and their rate, the parameters."""
    from .calibrate import simfit
    v = res.values
    rep = {k: v.get(f"roofline_ms_{k}", cfg.start[k]) for k in cfg.start}
    lines = [f"fit by simulation on {', '.join(r.log.name for r in cfg.runs if r.fit)}: "
             f"{res.candidates} candidates in {res.rounds} rounds ({res.runs} runs), axes {', '.join(cfg.axes)}",
             f"error minimised: {simfit.ERROR}: {100 * res.error:.2f} %"]
    if not res.converged:
        lines.append(f"warning: the grid did not settle in {res.rounds} rounds (the best was still at an edge or "
                     "above the resolution): the fit is the best candidate seen; check the start ([fit])")
    if "memory" in cfg.axes or "compute" in cfg.axes:
        lines.append("held at the start: " + ", ".join(
            f"{k} = {rep[k]:.4g}" for k in cfg.start if f"roofline_ms_{k}" not in v) + " (per-request times "
            "see base only in sums with the weights and the overhead)")
    if cfg.priors:
        eff = {"memory": cfg.priors["weights"] / rep["weights"], "compute": cfg.priors["per_token"] / rep["per_token"]}
        lines.append("efficiency (the description's time at full bandwidth or peak over the fitted): "
                     + ", ".join(f"{k} {v:.3f}" for k, v in eff.items())
                     + "".join(f"; {k} above 1: faster than the hardware allows, the roofline does not describe "
                               "these runs' steps" for k, v in eff.items() if v > 1))
    roof = ", ".join(f"{k} = {rep[k]:.6g}" for k in cfg.start)
    over = v.get("client_overhead_ms", cfg.replica.get("client_overhead_ms", 0.0))
    loop = [f"{k} = {v.get(k, cfg.replica.get(k, 0.0)):g}"    # the engine loop's keys set or fitted, not 0
            for k in simfit.token_model().part("params").LOOP_PARAMS if v.get(k, cfg.replica.get(k, 0.0))]
    lines += ["", "[replica]   # paste into a sweep", 'step_cost = "roofline"', f"roofline_ms = {{ {roof} }}",
              *loop, "[workload]", f"client_overhead_ms = {over:g}"]
    return "\n".join(lines)


def rows(cfg, measured, predicted):
    """(per-run table rows, error table rows)."""
    a, b = [], []
    for r in cfg.runs:
        m, p = measured[r.log.name], predicted[r.log.name]
        sat = f"{'yes' if m['saturated'] else 'no'}/{'yes' if p['saturated'] else 'no'}"
        role = "fit" if r.fit else ("closed" if r.log.max_in_flight else "open")
        a.append([r.log.name, f"{r.log.rate_rps:.3g}", role, sat]
                 + [f"{fmt(m[k], '.0f' if k[0] != 'itl' else '.2f')} / {fmt(p[k], '.0f' if k[0] != 'itl' else '.2f')}"
                    for k in (("ttft", "p50"), ("e2e", "p50"), ("itl", "mean"))]
                 + [f"{fmt(m['throughput'], '.0f')} / {fmt(p['throughput'], '.0f')}"])
        b.append([r.log.name] + [fmt(pct(p[(lat, st)], m[(lat, st)]), "+.1f") for lat in LATENCIES for st in STATS]
                 + [fmt(pct(p["throughput"], m["throughput"]), "+.1f")])
    return a, b


def summary(cfg, measured, predicted) -> list:
    """The summary's lines: mean and worst |error| of the held-out runs below saturation
    and at it, against the targets."""
    held = [r for r in cfg.runs if not r.fit]
    below = [r for r in held if not measured[r.log.name]["saturated"]]
    sat = [r for r in held if measured[r.log.name]["saturated"]]
    out = [f"held-out runs: {len(below)} below saturation, {len(sat)} saturated (measured)"]

    def err(rs, key):
        return np.array([abs(pct(predicted[r.log.name][key], measured[r.log.name][key])) for r in rs])

    table = []
    for label, rs in (("below saturation", below), ("saturated", sat)):
        if rs:
            cells = [err(rs, (lat, st)) for lat in LATENCIES for st in STATS] + [err(rs, "throughput")]
            table.append([label, len(rs)] + [f"{fmt(e.mean(), '.1f')} ({fmt(e.max(), '.1f')})" for e in cells])
    if table:
        out += ["", "held out: mean |error| % (worst)",
                text_table(["runs (measured)", "n"] + [f"{lat.upper()} {st}" for lat in LATENCIES for st in STATS]
                           + ["tokens/s"], table), ""]
    for lat, st, lim in TARGETS:
        e = err(below, (lat, st))
        miss = [r.log.name for r, x in zip(below, e) if not x <= lim]
        out.append(f"target {lat.upper()} {st} within {lim:g} % below saturation: "
                   + ("no run" if not below else "met on every run" if not miss
                      else f"missed on {len(miss)} of {len(below)} ({', '.join(miss)})"))
    e = err(sat, "throughput")
    miss = [r.log.name for r, x in zip(sat, e) if not x <= THROUGHPUT_TARGET]
    out.append(f"target saturated throughput within {THROUGHPUT_TARGET:g} %: "
               + ("no saturated run" if not sat else "met on every run" if not miss
                  else f"missed on {len(miss)} of {len(sat)} ({', '.join(miss)})"))
    first = next((r for r in sorted(cfg.runs, key=lambda r: r.log.rate_rps) if measured[r.log.name]["saturated"]), None)
    pfirst = next((r for r in sorted(cfg.runs, key=lambda r: r.log.rate_rps) if predicted[r.log.name]["saturated"]),
                  None)
    out.append("saturation reached: measured " + (f"from {first.log.name} ({first.log.rate_rps:.3g} req/s)"
                                                   if first else "in no run")
               + ", predicted " + (f"from {pfirst.log.name} ({pfirst.log.rate_rps:.3g} req/s)"
                                   if pfirst else "in no run"))
    return out


def report(cfg, res, measured, predicted) -> str:
    a, b = rows(cfg, measured, predicted)
    h1 = ["run", "req/s", "role", "saturated", "TTFT p50 ms", "E2E p50 ms", "ITL mean ms", "tokens/s"]
    h2 = ["run"] + [f"{lat.upper()} {st}" for lat in LATENCIES for st in STATS] + ["tokens/s"]
    parts = [f"validate: {cfg.name}: {len(cfg.runs)} runs", "", fit_text(cfg, res), "",
             text_table(h1, a), legend([
                 ("req/s", "requests over the span of their sends"),
                 ("role", "fit: a fitting run (in-sample); open/closed: held out, replayed open loop at its "
                          "sends or closed loop at its max_in_flight"),
                 ("saturated", "measured/predicted (requests in flight reached max_batch or max_in_flight, or the "
                               "last quarter's median TTFT is above twice the first's)"),
                 ("other columns", "measured / predicted; ITL = each request's mean inter-token time (E2E - TTFT)"
                                   "/(O - 1)")]),
             "", "error % (predicted - measured)/measured", text_table(h2, b), "", *summary(cfg, measured, predicted)]
    return "\n".join(parts) + "\n"


def figure(cfg, measured, predicted, per_request, cdf_run, path):
    """Predicted against measured per run (TTFT p50, E2E p50, ITL mean; throughput) and
    the CDFs of TTFT and E2E of run ``cdf_run``: a PNG at ``path``."""
    import matplotlib.pyplot as plt
    from .drawing import DPI, save_file
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.6))
    colors = {("ttft", "p50"): "#1b9e77", ("e2e", "p50"): "#d95f02", ("itl", "mean"): "#7570b3"}
    lo, hi = math.inf, 0.0
    for key, col in colors.items():
        for fit in (True, False):
            rs = [r for r in cfg.runs if r.fit == fit]
            x = [measured[r.log.name][key] for r in rs]
            y = [predicted[r.log.name][key] for r in rs]
            if not rs:
                continue
            ax[0].scatter(x, y, s=36, edgecolors=col, facecolors="none" if fit else col,
                          label=f"{key[0].upper()} {key[1]}" + (" (fitting runs)" if fit else " (held out)"))
            lo, hi = min(lo, np.nanmin(x + y)), max(hi, np.nanmax(x + y))
    ax[0].plot([lo / 1.5, hi * 1.5], [lo / 1.5, hi * 1.5], color="0.5", lw=0.8)
    ax[0].set(xscale="log", yscale="log", xlabel="measured (ms)", ylabel="routesim (ms)",
              title="per run: predicted against measured")
    ax[0].legend(fontsize=7, loc="upper left")
    x = np.array([measured[r.log.name]["throughput"] for r in cfg.runs])
    y = np.array([predicted[r.log.name]["throughput"] for r in cfg.runs])
    sat = np.array([measured[r.log.name]["saturated"] for r in cfg.runs])
    m = max(np.nanmax(x), np.nanmax(y)) * 1.05
    ax[1].fill_between([0, m], [0, 0.95 * m], [0, 1.05 * m], color="0.88", lw=0, label="±5 %", zorder=0)
    ax[1].plot([0, m], [0, m], color="0.5", lw=0.8, zorder=1)
    for pick, kw in ((~sat, dict(color="#1b9e77", label="below saturation (measured)")),
                     (sat, dict(color="#e7298a", marker="s", label="saturated (measured)"))):
        if pick.any():
            ax[1].scatter(x[pick], y[pick], zorder=2, **kw)
    ax[1].set(xlim=(0, m), ylim=(0, m), xlabel="measured (output tokens/s)", ylabel="routesim (output tokens/s)",
              title="throughput per run")
    ax[1].legend(fontsize=7, loc="upper left")
    run = next(r for r in cfg.runs if r.log.name == cdf_run)
    c = run.log.cohort
    for key, col in (("ttft_ms", "#1b9e77"), ("e2e_ms", "#d95f02")):
        for src, ls, lab in ((getattr(run.log, key)[c], "-", "measured"), (per_request[cdf_run][key][c], "--", "routesim")):
            v = np.sort(src[np.isfinite(src)])
            ax[2].step(v, np.arange(1, v.size + 1) / v.size, where="post", color=col, ls=ls,
                       label=f"{key[:-3].upper()} {lab}")
    ax[2].set(xscale="log", xlabel="ms", ylabel="share of requests", title=f"CDFs: {cdf_run}")
    ax[2].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    save_file(fig, path, DPI)
    plt.close(fig)


# --- the command --------------------------------------------------------------------

def main(argv=None) -> int:
    from .calibrate import logs, simfit
    from .files import unwritable, write_text
    ap = argparse.ArgumentParser(prog="python -m routesim.validate", description=__doc__.splitlines()[0])
    ap.add_argument("config", help="the validation TOML (module docstring)")
    ap.add_argument("--out", default=None, help="folder for validate.txt, fit.toml, validate.png "
                    "(default results/validate/<config stem>/)")
    ap.add_argument("--fit", action="append", default=[], metavar="RUN", help="a run to fit on (repeatable)")
    ap.add_argument("--cdf", default=None, metavar="RUN", help="the run whose CDFs are drawn (default: the "
                    "held-out run of highest load below saturation, else the last)")
    ap.add_argument("-q", "--quiet", action="store_true", help="leave out the progress, the fit's time and "
                    "'wrote ...' (the printout stays)")
    a = ap.parse_args(argv)
    try:
        cfg = load(a.config, a.fit)
        if a.cdf is not None and a.cdf not in [r.log.name for r in cfg.runs]:
            raise ConfigError(a.config, "--cdf", f"no run named {a.cdf!r}")
    except (ConfigError, logs.LogError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(a.out) if a.out else Path("results") / "validate" / cfg.path.stem
    why = unwritable(out)
    if why:
        print(f"error: --out: {why}", file=sys.stderr)
        return 2
    fitting = [r.log for r in cfg.runs if r.fit]
    axes = simfit.roofline_axes(cfg.start, cfg.overhead_ms, cfg.axes)
    replica = dict(cfg.replica, roofline_ms=cfg.start)
    if not a.quiet:
        print(f"validate: fitting on {len(fitting)} run(s) by simulation ...", file=sys.stderr)
    res = simfit.fit(fitting, replica, axes)
    if not a.quiet:       # the wall time on stderr: the printout and its files are the same on every run
        print(f"validate: {res.candidates} candidates in {res.seconds:.1f} s ({res.per_second:.0f} candidates/s, "
              f"each on {len(fitting)} log(s))", file=sys.stderr)
    fitted = dict(replica, roofline_ms={k: res.values.get(f"roofline_ms_{k}", cfg.start[k]) for k in cfg.start})
    values = {"client_overhead_ms": res.values.get("client_overhead_ms", cfg.replica.get("client_overhead_ms", 0.0))}
    measured, predicted, per_request = {}, {}, {}
    for r in cfg.runs:
        p = predict(r.log, fitted, values)
        per_request[r.log.name] = p
        mb = int(cfg.replica.get("max_batch", simfit.token_model().param["max_batch"].default))
        measured[r.log.name] = stats(r.log, r.log.ttft_ms, r.log.e2e_ms, mb)
        predicted[r.log.name] = stats(r.log, p["ttft_ms"], p["e2e_ms"], mb)
    text = report(cfg, res, measured, predicted)
    cdf = a.cdf or next((r.log.name for r in sorted(cfg.runs, key=lambda r: -r.log.rate_rps)
                         if not r.fit and not measured[r.log.name]["saturated"]), cfg.runs[-1].log.name)
    write_text(out / "validate.txt", text)
    write_text(out / "fit.toml", fit_text(cfg, res).split("\n\n", 1)[1] + "\n")
    figure(cfg, measured, predicted, per_request, cdf, out / "validate.png")
    print(text, end="")
    if not a.quiet:
        print(f"wrote {out / 'validate.txt'}, {out / 'fit.toml'} and {out / 'validate.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
