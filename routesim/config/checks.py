"""Checks that need a whole stage: bounds between keys, events, replica counts, the
traces it replays or draws lengths from; then the model's own (``MODEL.check_stage``)."""

from pathlib import Path

from .. import models
from ..schema import TRACE_FORMATS, TRACE_PARAMS
from .reader import _join


def check_stage(rd, stage, het, scenarios, where, m):
    """Checks that need the whole stage: bounds between keys, events, replica counts.
    ``where`` maps a parameter (or "heterogeneity") to the key path that gave its value."""
    v = stage.values
    param = m.param

    def src(name):
        p = param[name]
        return where.get(name, _join(p.section, ".".join(p.path)))

    for lo, hi in m.min_max:
        if min(v[hi]) < max(v[lo]):
            rd.fail(src(lo) if lo in where or hi not in where else src(hi),
                    f"min > max ({max(v[lo])!r} > {min(v[hi])!r}) in stage {stage.name!r}")
    counts = {len(het[h]) for h in v["heterogeneity"]}
    if len(counts) > 1:
        rd.fail(where["heterogeneity"],
                "settings with different replica counts cannot share one grid: "
                + ", ".join(f"{h} has {len(het[h])}" for h in v["heterogeneity"]))
    n_rep = counts.pop()
    # the batching model's runs go on past the horizon for up to drain_s (token-model.md §7)
    horizon_s = min(v["warmup_s"]) + min(v["measure_s"]) + min(v.get("drain_s", (0.0,)))
    for s in v["scenario"]:
        for ev in scenarios[s]:
            if ev.at_s >= horizon_s:
                what = "the horizon plus the drain" if "drain_s" in v else "the horizon"
                rd.fail(_join(ev.key, "at_s"), f"an event at {ev.at_s:g} s is outside {what} of stage "
                              f"{stage.name!r} ({horizon_s:g} s)")
            if ev.replica >= n_rep:
                rd.fail(_join(ev.key, "replica"), f"replica {ev.replica + 1} does not exist in stage {stage.name!r} "
                              f"(replicas are 1..{n_rep})")
    _check_traces(rd, stage, src, m)
    m.check_stage(rd, stage, src, n_rep)


def trace_file(sweep_path, path) -> Path:
    """A trace's file: ``path`` as the sweep gives it, relative to the sweep file's folder."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else Path(str(sweep_path)).parent / p


def _check_traces(rd, stage, src, m):
    """The trace keys of a stage (docs/traces.md): every trace is read (once per process:
    the loader caches it), every replay window is cut and every row that could be
    simulated is checked against the KV pool, so that a trace problem is one ConfigError
    naming the key (and in its message the trace file and line) before anything runs."""
    from .. import traces
    v = stage.values

    def parent(name):  # workload.trace.path -> workload.trace
        return src(name).rsplit(".", 1)[0]

    def load(path_name, format_name, what):
        out = []
        for path in v[path_name]:
            if path == "":
                rd.fail(src(path_name), f"missing: {what} needs a path")
            for fmt in v[format_name]:
                if fmt == "":
                    rd.fail(src(format_name), f"missing: {what} needs a format "
                                              f"({', '.join(TRACE_FORMATS)})")
                try:
                    out.append(traces.load_trace(trace_file(rd.path, path), fmt))
                except traces.TraceError as e:
                    rd.fail(src(path_name), str(e))
        return out

    if not m.trace_axes and any(len(v[p.name]) > 1 for p in TRACE_PARAMS):
        name = next(p.name for p in TRACE_PARAMS if len(v[p.name]) > 1)
        others = " or ".join(f'kind = "{o.kind}"' for o in models.every() if o.trace_axes)
        rd.fail(src(name), f"the {m.kind} model does not take a trace key as a grid axis yet: "
                           f"give one value (a list works with [replica] {others})")
    pool = None
    if m.block_ids:  # every request's blocks must fit one replica's pool
        pool = {b: min(v["kv_blocks"]) * b for b in v["block_tokens"]}
    lengths = "lengths_trace" in m.param and v["lengths_trace"] != ("",)
    if v["source"][0] != "trace":
        if any(v[p.name] != (p.default,) for p in TRACE_PARAMS if p.name != "source"):
            name = next(p.name for p in TRACE_PARAMS if p.name != "source" and v[p.name] != (p.default,))
            rd.fail(parent(name), 'a trace is given but source is "synthetic": add source = "trace" '
                                  "(or use lengths = { trace, format } for its token counts only)")
        if not lengths:
            if "lengths_format" in m.param and v["lengths_format"] != ("",):
                rd.fail(src("lengths_trace"), "missing: lengths = { … } needs a trace (a path)")
            return
        for tr in load("lengths_trace", "lengths_format", "lengths = { … }"):
            P, O = traces.lengths_table(tr)
            for b, tokens in pool.items():
                try:
                    traces.check_fits(P, O, tokens, lines=tr.line, path=tr.path)
                except traces.TraceError as e:
                    rd.fail(parent("lengths_trace"), f"{e} (with block_tokens = {b}; every row may be drawn)")
        return
    if lengths:
        rd.fail(parent("lengths_trace"), 'lengths = { … } gives synthetic requests a trace\'s token counts; '
                                         'with source = "trace" the trace gives them already')
    if "demand" in m.param and any(d != "tokens" for d in v["demand"]):
        rd.fail(src("demand"), 'a trace\'s demand comes from its token counts: demand must be "tokens"')
    key = parent("trace_path")
    horizons = sorted({(w + s) * 1000.0 for w in v["warmup_s"] for s in v["measure_s"]})
    for tr in load("trace_path", "trace_format", 'source = "trace"'):
        for b in (pool or {traces.NO_IDS: None}):  # the queue model needs no block ids
            for hbt in v["trace_hash_block_tokens"]:
                H = (hbt or tr.hash_block_tokens or b) if pool else b
                if H % b:
                    rd.fail(src("trace_hash_block_tokens"), f"{tr.path}: a trace hash block of {H} "
                            f"tokens is not a whole number of KV blocks of block_tokens = {b}")
                for scale in v["trace_time_scale"]:
                    for start in v["trace_start_s"]:
                        for duration in v["trace_duration_s"]:
                            for horizon in horizons:
                                try:
                                    rp = traces.replay(tr, block_tokens=b, start_s=start,
                                                       duration_s=duration, time_scale=scale,
                                                       horizon_ms=horizon, hash_block_tokens=H)
                                    if pool:
                                        traces.check_fits(rp.prompt, rp.output, pool[b],
                                                          lines=rp.line, path=tr.path)
                                except traces.TraceError as e:
                                    rd.fail(key, str(e))
