"""docs/keys.md: the committed reference is a fresh render, documents every key the
parser accepts (derived from the declarations the parser reads), and every key the
shipped sweep files use (read from the files themselves, independently of the code)."""

import tomllib

import pytest

from conftest import ROOT, SWEEPS
from routesim import keys, models, sweep
from routesim.config import layout

DOC = ROOT / "docs" / "keys.md"


def documented() -> dict:
    """{heading: {key: set of model labels}} of docs/keys.md's tables, parsed from the
    Markdown (the key in the first column, the model in the column headed "model")."""
    out, heading, model_col = {}, None, None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            heading, model_col = line[3:], None
            out[heading] = {}
        elif line.startswith("| ") and heading is not None:
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if model_col is None:
                model_col = cells.index("model")
                continue
            out[heading].setdefault(cells[0].strip("`"), set()).add(cells[model_col])
    return out


def _takes(labels, kind) -> bool:
    return "both" in labels or any(kind in lab.split(", ") for lab in labels)


def test_committed_reference_is_a_fresh_render():
    assert DOC.read_text(encoding="utf-8") == keys.render(), \
        "docs/keys.md is stale: python -m routesim.keys --out docs/keys.md"


def _leaf_paths(m, section) -> set:
    """Every key path ``[section]`` takes in model ``m``: its ``section_keys``, inline
    tables expanded through ``leaves`` (the parser's rule); a model without replica
    keys takes ``[replica] kind``."""
    top = m.section_keys.get(section, ("kind",) if section == "replica" else ())
    tables = {p.path[:i] for p in m.params if p.section == section for i in range(1, len(p.path))}

    def walk(path):  # an inline table is one a parameter's path goes through
        if path in tables:
            return {q for sub in m.leaves[path[-1]] for q in walk(path + (sub,))}
        return {".".join(path)}
    return {q for k in top for q in walk((k,))}


@pytest.mark.parametrize("kind", models.KINDS)
def test_every_key_each_table_accepts_is_documented_and_no_other(kind):
    m = models.get(kind)
    doc = documented()
    for section in keys.sections():
        accepted = _leaf_paths(m, section)
        shown = {k for k, labels in doc[f"[{section}]"].items() if _takes(labels, kind)}
        assert accepted == shown, (section, accepted ^ shown)
    # the structure's tables, and the model's event actions and policies
    for heading, names in (("[scenarios.NAME]", layout.names(layout.SCENARIO)),
                           ("events = [{ … }]", (*layout.names(layout.EVENT), *m.event_kinds)),
                           ("[grid]", layout.names(layout.GRID)), ("[[stages]]", layout.names(layout.STAGE)),
                           ("seeds = { … }", layout.names(layout.SEEDS)),
                           ("select = { … }", layout.names(layout.SELECT))):
        shown = {k for k, labels in doc[heading].items() if _takes(labels, kind)}
        assert set(names) == shown, (heading, set(names) ^ shown)
    text = DOC.read_text()
    assert all(p in text for p in m.policies)
    assert {"name"} == set(doc["The file"])


def flat_names() -> set:
    """Every flat name in docs/keys.md's parameter tables (the column "flat name")."""
    out, col = set(), None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            col = None
        elif line.startswith("| "):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if col is None:
                col = cells.index("flat name") if "flat name" in cells else -1
            elif col >= 0 and cells[col]:
                out.add(cells[col].strip("`"))
    return out


def undocumented_sweep_keys(path, doc, flat) -> list:
    """(where, key) of every key of a sweep file that docs/keys.md does not list where
    the file uses it: read from the TOML alone (an inline table is walked into unless
    the reference lists it whole, as [cluster] heterogeneity, whose keys are names)."""
    missing = []

    def table(heading, d, prefix=""):
        for k, v in d.items():
            if f"{prefix}{k}" in doc[heading]:
                continue
            if isinstance(v, dict):
                table(heading, v, f"{prefix}{k}.")
            else:
                missing.append((heading, f"{prefix}{k}"))

    for k, v in tomllib.loads(path.read_text()).items():
        if k == "scenarios":
            for scen in v.values():
                table("[scenarios.NAME]", scen)
                for ev in scen.get("events", []):
                    table("events = [{ … }]", ev)
        elif k == "stages":
            for st in v:
                for sk, sv in st.items():
                    if sk == "workload":
                        table("[workload]", sv)
                    elif sk in ("seeds", "select") and isinstance(sv, dict):
                        table(f"{sk} = {{ … }}", sv)
                    elif sk not in doc["[[stages]]"] and sk not in flat:
                        missing.append(("[[stages]]", sk))
        elif isinstance(v, dict):
            table(f"[{k}]", v)
        elif k not in doc["The file"]:
            missing.append(("top level", k))
    return missing


def test_every_key_of_the_shipped_sweeps_is_documented():
    doc, flat = documented(), flat_names()
    files = sorted(SWEEPS.glob("*.toml"))
    assert len(files) > 10
    missing = {p.name: undocumented_sweep_keys(p, doc, flat) for p in files}
    assert not any(missing.values()), missing


def test_the_sweep_check_can_fail(tmp_path):
    """A key a file uses that the reference does not list is found, in each kind of place."""
    doc, flat = documented(), flat_names()
    p = tmp_path / "s.toml"
    p.write_text('colour = 1\n[workload]\nchat = { prompt = { mean = 3 } }\n[scenarios.a]\n'
                 'events = [{ at_s = 1, explode = true }]\n[[stages]]\nname = "x"\nspeed = 2\n'
                 'seeds = { first = 1, step = 2 }\n')
    assert set(undocumented_sweep_keys(p, doc, flat)) == {
        ("top level", "colour"), ("[workload]", "chat.prompt.mean"), ("events = [{ … }]", "explode"),
        ("[[stages]]", "speed"), ("seeds = { … }", "step")}


def test_list_keys_prints_the_reference(capsys):
    assert sweep.main(["--list-keys"]) == 0
    assert capsys.readouterr().out == keys.render()


def test_sweep_argument_is_still_required_without_list_keys(capsys):
    with pytest.raises(SystemExit) as exc:
        sweep.main([])
    assert exc.value.code == 2
    assert "the following arguments are required: sweep" in capsys.readouterr().err


def test_keys_command_writes_the_reference(tmp_path, capsys):
    out = tmp_path / "keys.md"
    assert keys.main(["--out", str(out)]) == 0
    assert out.read_text() == keys.render()
    assert keys.main([]) == 0
    assert capsys.readouterr().out.endswith(keys.render())


def test_the_step_cost_tables_follow_step_cost():
    """The reference's "used when" of the step-cost tables is the rule the parser
    enforces (routesim.batching.params.STEP_COST_KEYS, from the same declaration)."""
    from routesim.batching.params import STEP_COST_KEYS
    assert STEP_COST_KEYS["linear"] and all(n.startswith("step_ms_") for n in STEP_COST_KEYS["linear"])
    assert STEP_COST_KEYS["roofline"] and all(n.startswith("roofline_ms_") for n in STEP_COST_KEYS["roofline"])
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| `roofline_ms.")]
    assert len(rows) == len(STEP_COST_KEYS["roofline"]) and all('step_cost = "roofline"' in r for r in rows)
