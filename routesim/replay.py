"""A sweep that replays a trace on one replica: the TOML text that calibrate's fit by
simulation, validate, the conformance cases and the start-up benchmark write beside
their trace (docs/traces.md; each key as docs/keys.md describes it).

One run: one replica (``[cluster.heterogeneity] one = [1]``), the steady scenario, one
stage with one policy and one seed. The caller gives the sections' keys as dicts of
Python values (``True``, numbers, strings, nested dicts for inline tables, lists).
"""


_ESCAPED = {'"': '\\"', "\\": "\\\\", **{chr(c): f"\\u{c:04x}" for c in (*range(0x20), 0x7F)}}
"""What a TOML basic string must escape: the quote, the backslash, control characters."""


def toml_value(v) -> str:
    """``v`` (bool, int, float, str, list or dict of those) as a TOML value; floats by
    ``repr``, so that reading the text gives ``v`` back bit for bit."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + "".join(_ESCAPED.get(ch, ch) for ch in v) + '"'
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return repr(float(v)) if isinstance(v, float) else str(v)


def _keys(section: dict) -> str:
    return "".join(f"{k} = {toml_value(v)}\n" for k, v in section.items())


def replay_sweep(name: str, replica: dict, simulation: dict, workload: dict,
                 policy: str = "round_robin", header: str = "") -> str:
    """The sweep's TOML: ``replica`` the [replica] keys (``kind`` included),
    ``simulation`` the [simulation] keys (``warmup_s``, ``measure_s``, …), ``workload``
    the [workload] keys after ``source = "trace"`` (``trace = {path, format, …}``, …);
    ``header`` comment lines (each starting with ``#``) put first."""
    return (f"{header}name = {toml_value(name)}\n\n[replica]\n{_keys(replica)}\n"
            f"[simulation]\n{_keys(simulation)}\n"
            "[cluster.heterogeneity]\none = [1]\n\n"
            f"[workload]\nsource = \"trace\"\n{_keys(workload)}\n"
            "[scenarios.steady]\nevents = []\n\n"
            "[grid]\nheterogeneity = [\"one\"]\nscenario = [\"steady\"]\n\n"
            f"[[stages]]\nname = \"replay\"\npolicy = [{toml_value(policy)}]\n"
            "seeds = { first = 1, count = 1 }\n")
