"""Sweep file (TOML) -> validated, frozen description of every stage's grid.

Parsing has no side effects: nothing is created or written. Every problem raises
:class:`ConfigError`, which names the file and the key path (``stages[1].seeds``);
the command line prints it as one line and exits with status 2.
"""

import math
import tomllib
from pathlib import Path

from .. import models
from .checks import check_stage
from .layout import EVENT, FILE, GRID, REPLICA, SCENARIO, SEEDS, SELECT, STAGE
from .layout import names as key_names
from .parsed import Event, Selection, Stage, Sweep
from .reader import ConfigError, Reader, _join, _suggest, _typename

_GRID_KEYS = key_names(GRID)


def load_sweep(path) -> Sweep:
    """Read and validate a sweep file. Raises :class:`ConfigError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(path, "", f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(path, "", f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    return parse_sweep(text, path)


def parse_sweep(text: str, path="<string>") -> Sweep:
    """Validate a sweep file's text; ``path`` only labels messages."""
    rd = Reader(path)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        rd.fail("", f"malformed TOML: {exc}")
    kind = _kind(rd, doc)
    m = models.get(kind)
    rd.table(doc, "", (*key_names(FILE), "replica", *m.section_keys, "scenarios", "grid", "stages"))
    name = rd.string(doc.get("name", Path(str(path)).stem), "name")
    if not name or "/" in name or name.startswith("."):
        rd.fail("name", f"not usable as a folder name: {name!r}")

    base = {}  # parameter -> (tuple of values, given as list?)
    for section, keys in m.section_keys.items():
        rd.table(doc.get(section, {}), section, keys)
    for p in m.params:
        raw, key = _lookup(rd, doc, p, m)
        if raw is not None:
            base[p.name] = (rd.values(raw, key, lambda v, k, p=p: param_value(rd, p, v, k)),
                            isinstance(raw, list))

    het = _heterogeneity(rd, doc.get("cluster", {}).get("heterogeneity"), m)
    start_down = _start_down(rd, doc.get("cluster", {}).get("start_down", []))
    scenarios = _scenarios(rd, doc.get("scenarios"), m)
    grid = rd.table(doc.get("grid", {}), "grid", _GRID_KEYS)
    raw_stages = doc.get("stages")
    if not isinstance(raw_stages, list) or not raw_stages:
        rd.fail("stages", "expected at least one [[stages]] table")

    stages, selected = [], set()
    for index, raw in enumerate(raw_stages):
        stage = _stage(rd, index, raw, grid, base, het, scenarios, selected, m)
        _check_start_down(rd, start_down, het, stage)
        stages.append(stage)
        if stage.select:
            selected.add(stage.select.parameter)
    names = [s.name for s in stages]
    for i, s in enumerate(stages):
        if s.name in names[:i]:
            rd.fail(f"{s.key}.name", f"stage name {s.name!r} is used twice")
    return Sweep(name=name, path=path, text=text, heterogeneity=het, scenarios=scenarios,
                 stages=tuple(stages), kind=kind, start_down=start_down)


def _kind(rd, doc):
    """``[replica] kind``: which replica model the sweep runs."""
    replica = doc.get("replica", {})
    if not isinstance(replica, dict):
        rd.fail("replica", f"expected a table, got {_typename(replica)}")
    kind = rd.string(replica.get("kind", models.DEFAULT), "replica.kind")
    if kind not in models.KINDS:
        rd.fail("replica.kind", f"unknown replica model {kind!r}" + _suggest(kind, models.KINDS, "known"))
    if "replica" not in models.get(kind).section_keys:  # a model without replica keys
        rd.table(replica, "replica", key_names(REPLICA))
    return kind


def _start_down(rd, raw):
    """``[cluster] start_down``: 1-based replicas down from time 0 -> 0-based tuple."""
    key = "cluster.start_down"
    if not isinstance(raw, list):
        rd.fail(key, f"expected a list of replica numbers (1-based), got {_typename(raw)}")
    out = []
    for i, v in enumerate(raw):
        r = rd.number(v, f"{key}[{i}]", int)
        if r < 1:
            rd.fail(f"{key}[{i}]", f"replica numbers start at 1, got {r}")
        out.append(r - 1)
    if len(set(out)) != len(out):
        rd.fail(key, "a replica is listed twice")
    return tuple(out)


def _check_start_down(rd, start_down, het, stage):
    if not start_down:
        return
    n_rep = len(het[stage.values["heterogeneity"][0]])
    for i, r in enumerate(start_down):
        if r >= n_rep:
            rd.fail(f"cluster.start_down[{i}]", f"replica {r + 1} does not exist in stage "
                    f"{stage.name!r} (replicas are 1..{n_rep})")


def _lookup(rd, doc, p, m, section_table=None, prefix=""):
    """The raw value of parameter ``p`` in a section table (None when absent), and its key path."""
    node = doc.get(p.section, {}) if section_table is None else section_table
    key = _join(prefix, p.section)
    for k in p.path[:-1]:
        key = _join(key, k)
        node = node.get(k, {})
        rd.table(node, key, m.leaves[k])
    return node.get(p.path[-1]), _join(key, p.path[-1])


def param_value(rd, p, value, key):
    if p.kind is bool:
        if not isinstance(value, bool):
            rd.fail(key, f"expected true or false, got {_typename(value)}")
        return value
    if p.kind is str:
        v = rd.string(value, key)
        if p.options and v not in p.options:  # no options: any string (a trace's path)
            rd.fail(key, f"unknown value {v!r}" + _suggest(v, p.options, "known"))
        return v
    if p.allow_inf and isinstance(value, float) and value == math.inf:
        return math.inf
    if p.words and isinstance(value, str):
        if value not in p.words:
            rd.fail(key, f"expected a number or {' or '.join(map(repr, p.words))}, got {value!r}"
                    + _suggest(value, p.words, "known"))
        return value
    v = rd.number(value, key, p.kind)
    lower_ok = v > p.low if p.low_open else v >= p.low
    if not lower_ok or v > p.high:
        bound = f"> {p.low:g}" if p.low_open else f">= {p.low:g}"
        if p.high < math.inf:
            bound += f" and <= {p.high:g}"
        rd.fail(key, f"must be {bound}, got {v!r}")
    return v


def _heterogeneity(rd, raw, m):
    if raw is None:
        return dict(m.heterogeneity)
    key = "cluster.heterogeneity"
    if not isinstance(raw, dict) or not raw:
        rd.fail(key, "expected a table of named settings, e.g. default = [8, 11, 16]")
    out = {}
    for name, ms in raw.items():
        k = _join(key, name)
        if not isinstance(ms, list) or not ms:
            rd.fail(k, f"expected a non-empty list of {m.help_heterogeneity}, one per replica")
        out[name] = tuple(rd.number(v, f"{k}[{i}]") for i, v in enumerate(ms))
        for i, v in enumerate(out[name]):
            if v <= 0:
                rd.fail(f"{k}[{i}]", f"must be > 0, got {v!r}")
    return out


def _scenarios(rd, raw, m):
    if raw is None:
        raw = {"steady": {"events": []}}
    rd.table(raw, "scenarios", list(raw) if isinstance(raw, dict) else ())
    out = {}
    for name, body in raw.items():
        key = _join("scenarios", name)
        rd.table(body, key, key_names(SCENARIO))
        events = body.get("events", [])
        if not isinstance(events, list):
            rd.fail(_join(key, "events"), f"expected a list of event tables, got {_typename(events)}")
        parsed = [_event(rd, ev, f"{key}.events[{i}]", m) for i, ev in enumerate(events)]
        out[name] = tuple(sorted(parsed, key=lambda e: e.at_s))  # stable: ties keep file order
    return out


def _event(rd, ev, key, m):
    actions_known = tuple(m.event_kinds)
    rd.table(ev, key, (*key_names(EVENT), *actions_known))
    if "at_s" not in ev:
        rd.fail(_join(key, "at_s"), "missing: every event needs a time in seconds")
    at_s = rd.number(ev["at_s"], _join(key, "at_s"))
    if at_s < 0:
        rd.fail(_join(key, "at_s"), f"must be >= 0, got {at_s!r}")
    actions = [a for a in actions_known if a in ev]
    if len(actions) != 1:
        rd.fail(key, "needs exactly one of " + ", ".join(actions_known))
    action = actions[0]
    akey = _join(key, action)
    if action == "rate_multiplier":
        if "replica" in ev:
            rd.fail(_join(key, "replica"), "a rate change applies to the whole cluster")
        v = rd.number(ev[action], akey)
        if v <= 0:
            rd.fail(akey, f"must be > 0, got {v!r}")
        return Event(at_s, m.event_kinds[action], -1, v, key)
    if "replica" not in ev:
        rd.fail(_join(key, "replica"), f"missing: a {action} event names a replica (1-based)")
    replica = rd.number(ev["replica"], _join(key, "replica"), int)
    if replica < 1:
        rd.fail(_join(key, "replica"), f"replica numbers start at 1, got {replica}")
    if action == "slowdown":
        v = rd.number(ev[action], akey)
        if v <= 0:
            rd.fail(akey, f"must be > 0, got {v!r}")
        return Event(at_s, m.event_kinds[action], replica - 1, v, key)
    if ev[action] is not True:
        rd.fail(akey, f"expected true, got {ev[action]!r}")
    return Event(at_s, m.event_kinds[action], replica - 1, 0.0, key)


def _stage(rd, index, raw, grid, base, het, scenarios, selected, m):
    key = f"stages[{index}]"
    rd.table(raw, key, (*key_names(STAGE),
                        *(p.name for p in m.params if p.section != "workload")))
    name = rd.string(raw.get("name", f"stage{index + 1}"), _join(key, "name"))
    if not name or "/" in name or name.startswith("."):
        rd.fail(_join(key, "name"), f"not usable as a file name: {name!r}")

    def axis(k, item, default=None):
        if k in raw:
            return rd.values(raw[k], _join(key, k), item)
        if k in grid:
            return rd.values(grid[k], _join("grid", k), item)
        if default is None:
            rd.fail(_join(key, k), "missing: give it in the stage or in [grid]")
        return default

    def known(names, what):
        def item(v, k):
            v = rd.string(v, k)
            if v not in names:
                rd.fail(k, f"unknown {what} {v!r}" + _suggest(v, names, "known"))
            return v
        return item

    def rate(v, k):
        v = rd.number(v, k)
        if v <= 0:
            rd.fail(k, f"must be > 0, got {v!r}")
        return v

    def policy(v, k):
        for other in models.every():
            if isinstance(v, str) and v not in m.policies and v in other.policies:
                rd.fail(k, f"policy {v!r} belongs to the {other.kind} model; this sweep's "
                           f"[replica] kind is {m.kind!r}")
        return known(list(m.policies), "policy")(v, k)

    values = {
        "policy": axis("policy", policy),
        "rate_rps": axis("rate_rps", rate, default=()),  # () until the source is known
        "heterogeneity": axis("heterogeneity", known(list(het), "heterogeneity")),
        "scenario": axis("scenario", known(list(scenarios), "scenario")),
        "seed": _seeds(rd, raw.get("seeds"), _join(key, "seeds")),
    }
    swept, inherit = [], []
    overrides = {}
    if "workload" in raw:
        wl = rd.table(raw["workload"], _join(key, "workload"), m.section_keys["workload"])
        for p in m.params:
            if p.section == "workload":
                v, k = _lookup(rd, {}, p, m, wl, prefix=key)
                if v is not None:
                    overrides[p.name] = (v, k)
    for p in m.params:
        if p.section != "workload" and p.name in raw:
            overrides[p.name] = (raw[p.name], _join(key, p.name))
    for p in m.params:
        if p.name in overrides:
            v, k = overrides[p.name]
            vals = rd.values(v, k, lambda x, kk, p=p: param_value(rd, p, x, kk))
            as_list = isinstance(v, list)
        elif p.name in selected:
            vals, as_list = (p.default,), False
            inherit.append(p.name)
        elif p.name in base:
            vals, as_list = base[p.name]
        else:
            vals, as_list = (p.default,), False
        values[p.name] = vals
        if p.name not in m.dims and (as_list or len(vals) > 1):
            swept.append(p.name)

    _trace_rate(rd, key, raw, grid, values)
    select = None
    if "select" in raw:
        select = _selection(rd, raw["select"], _join(key, "select"), values, m)
        if select.parameter not in m.dims + tuple(swept):
            rd.fail(_join(key, "select.parameter"),
                    f"{select.parameter!r} is not swept in stage {name!r}: give it a list of values")
    stage = Stage(name=name, key=key, values=values, swept=tuple(swept), select=select,
                  inherit=tuple(inherit), standard=m.dims, given=frozenset(overrides) | frozenset(base))
    where = {n: k for n, (_, k) in overrides.items()}
    where["heterogeneity"] = _join(key if "heterogeneity" in raw else "grid", "heterogeneity")
    check_stage(rd, stage, het, scenarios, where, m)
    return stage


def _trace_rate(rd, key, raw, grid, values):
    """``rate_rps`` of a stage: required for synthetic arrivals; a trace brings its own
    arrivals, so a trace stage leaves it out and gets the single coordinate 0."""
    given = values["rate_rps"] != ()
    where = _join(key, "rate_rps") if "rate_rps" in raw else "grid.rate_rps"
    if len(values["source"]) > 1:
        rd.fail(_join(key, "workload.source") if "workload" in raw and "source" in raw["workload"]
                else "workload.source", "source cannot be a grid axis: replay a trace and draw "
                "synthetic requests in two stages")
    if values["source"][0] == "trace":
        if given:
            rd.fail(where, "a trace brings its own arrivals: leave rate_rps out (its coordinate is 0), "
                           "or keep synthetic arrivals with [workload] lengths = { trace, format }")
        values["rate_rps"] = (0.0,)
    elif not given:
        rd.fail(_join(key, "rate_rps"), "missing: give it in the stage or in [grid]")


def _seeds(rd, raw, key):
    if raw is None:
        rd.fail(key, "missing: give seeds = { first = 1, count = 8 } or a list")
    if isinstance(raw, dict):
        rd.table(raw, key, key_names(SEEDS))
        for k in key_names(SEEDS):
            if k not in raw:
                rd.fail(_join(key, k), "missing")
        first = rd.number(raw["first"], _join(key, "first"), int)
        count = rd.number(raw["count"], _join(key, "count"), int)
        if first < 0:
            rd.fail(_join(key, "first"), f"must be >= 0, got {first}")
        if count < 1:
            rd.fail(_join(key, "count"), f"empty axis: must be >= 1, got {count}")
        return range(first, first + count)  # lazy: a huge count is refused by check_memory, not built
    seeds = rd.values(raw, key, lambda v, k: rd.number(v, k, int))
    for i, s in enumerate(seeds):
        if s < 0:
            rd.fail(f"{key}[{i}]", f"must be >= 0, got {s}")
    return seeds


def _selection(rd, raw, key, values, m):
    rd.table(raw, key, key_names(SELECT))
    if "parameter" not in raw:
        rd.fail(_join(key, "parameter"), "missing: the parameter to select, e.g. \"exploration\"")
    param = rd.string(raw["parameter"], _join(key, "parameter"))
    if param not in m.param:
        rd.fail(_join(key, "parameter"), f"unknown parameter {param!r}" + _suggest(param, m.param))
    goals = [g for g in ("maximize", "minimize") if g in raw]
    if len(goals) != 1:
        rd.fail(key, "needs exactly one of maximize, minimize")
    scalar = [v for v in m.variables() if v not in ("assigned", "replica_completed", "replica_tokens")]
    metric = rd.string(raw[goals[0]], _join(key, goals[0]))
    if metric not in scalar:
        rd.fail(_join(key, goals[0]), f"unknown metric {metric!r}" + _suggest(metric, scalar))
    return Selection(param, metric, goals[0] == "maximize")
