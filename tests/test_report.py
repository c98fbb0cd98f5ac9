"""The validation document: written from the Datasets alone, the same bytes on
regeneration, numbers that are the data's, and a reading that follows the seed rule."""

import re
import shutil

import numpy as np
import pytest
import xarray as xr

from routesim import report as cli
from routesim.studies.serving import figures as F
from routesim.studies.serving import report as R
from test_figures import tiny_results


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    root = tiny_results()
    out = tmp_path_factory.mktemp("docs") / "docs" / "serving-validation.md"
    assert cli.main([str(root / "tiny"), "--out", str(out), "--figures", str(out.parent.parent / "figures"),
                   "--load-curve", str(root / "load-curve"), "--quiet"]) == 0
    return out, out.read_text(encoding="utf-8")


def test_regenerating_gives_the_same_bytes(doc):
    out, text = doc
    root = tiny_results()
    again = R.build(root / "tiny", out.parent.parent / "figures", out, root / "load-curve")
    assert again.encode() == out.read_bytes()


def test_sections_and_figures(doc):
    out, text = doc
    for heading in ("## Protocol", "### Metric definitions", "### What the model leaves out",
                    "## Selection of the exploration weight", "## Validation: every policy",
                    "## Validation by scenario", "## Timelines", "## The queueing hockey stick",
                    "## How fast the estimates follow a straggler", "## Who wins where"):
        assert heading in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    stems = {link.rsplit("/", 1)[1][:-4] for link in links}
    assert all(link.startswith("../figures/") for link in links)
    # exactly the figures `python -m routesim.figures` writes for the same results
    root = tiny_results()
    assert stems == {stem for stem, _ in F.jobs(root / "tiny", root / "load-curve")}


def _open(path):
    with xr.open_dataset(path, engine="netcdf4") as f:
        return f.load()


def _rows(text, first_header):
    """Rows of the Markdown table whose header starts with ``first_header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_policy_table_is_the_data(doc):
    _, text = doc
    val = _open(tiny_results() / "tiny" / "validation.nc")
    rows = {r[0]: r for r in _rows(text, "policy | runs")}
    for p in val.policy.values:
        one = val.sel(policy=p)
        row = rows[F.label(str(p))]
        assert row[1] == str(one.attainment.size)
        assert row[2] == f"{100 * float(one.attainment.mean()):.2f}"
        assert row[4] == f"{float(one.latency_p99.median()):.1f}"
        p99 = one.latency_p99.values
        assert row[5] == f"{np.nanmin(p99):.1f}–{np.nanmax(p99):.1f}"
        assert row[6] == f"{100 * float(one.shed_rate.mean()):.2f}"


def test_selection_table_is_the_data(doc):
    _, text = doc
    dev = _open(tiny_results() / "tiny" / "development.nc")
    rows = _rows(text, "c (exploration)")
    assert [r[0] for r in rows] == [f"{c:g}" for c in dev.exploration.values]
    obj = 100 * dev.attainment.mean("seed").mean(["policy", "rate_rps", "heterogeneity", "scenario"])
    assert [r[1] for r in rows] == [f"{x:.2f}" for x in obj.values]
    chosen = [r[0] for r in rows if r[-1] == "**selected**"]
    assert chosen == [f"{dev.attrs['selects_exploration']:g}"]


def test_the_document_changes_with_the_data(tmp_path, doc):
    """Nothing is hard-coded: perturb the validation attainment and the tables follow."""
    _, text = doc
    root = tiny_results()
    shutil.copytree(root / "tiny", tmp_path / "tiny")
    path = tmp_path / "tiny" / "validation.nc"
    with xr.open_dataset(path, engine="netcdf4") as f:
        val = f.load()
    val["attainment"] = val.attainment.where(val.policy != "round_robin", 1.0)
    val.to_netcdf(path, engine="netcdf4")
    changed = R.build(tmp_path / "tiny", "figures", tmp_path / "doc.md", None)
    rows = {r[0]: r for r in _rows(changed, "policy | runs")}
    assert rows["Round Robin"][2] == "100.00"
    assert "A simpler policy wins overall:** Round Robin" in changed
    assert "hockey stick" not in changed   # no load-curve results given


@pytest.mark.parametrize("lo, hi, inside, word", [
    (-0.1, 0.2, True, "within"), (0.0, 0.0, True, "within"), (0.1, 0.3, False, "ahead on every seed"),
    (-0.3, -0.1, False, "behind on every seed"), (0.0, 0.2, False, "never behind"), (-0.2, 0.0, False, "never ahead")])
def test_seed_range_rule(lo, hi, inside, word):
    assert R.within(lo, hi) is inside
    assert word in R.verdict((lo + hi) / 2, lo, hi)


def test_command_line_refuses_a_folder_without_results(tmp_path, capsys):
    assert cli.main([str(tmp_path), "--out", str(tmp_path / "x.md")]) == 2
    assert "no result files" in capsys.readouterr().err
    assert not (tmp_path / "x.md").exists()
