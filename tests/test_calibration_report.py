"""conformance/calibration_report.py's sections that need no vLLM (issue 41): the hidden
cost in the roofline's ms terms, and ``--only``, which regenerates a section of an
existing document in place (the text from its heading to the next ``## ``)."""

import pytest

from conformance import calibration_report as cr
from conformance import serving_log as sl

DOC = "# T\n\nintro\n\n## 4. Fit by simulation: old\n\nold text\n\n## 5. Step-cost forms x\n\nforms\n\n## 6. Public logs\n\nend\n"


def test_splice_replaces_one_section_and_keeps_the_rest():
    out = cr.splice(DOC, "## 4. Fit by simulation", ["## 4. Fit by simulation: new", "", "new text", ""])
    assert out == DOC.replace("## 4. Fit by simulation: old\n\nold text\n", "## 4. Fit by simulation: new\n\nnew text\n")
    last = cr.splice(DOC, "## 6. Public logs", ["## 6. Public logs", "", "changed"])
    assert last.endswith("forms\n\n## 6. Public logs\n\nchanged\n") and last.startswith("# T\n\nintro\n\n## 4.")
    with pytest.raises(ValueError, match="no section"):
        cr.splice(DOC, "## 9. Nothing", ["x"])


def test_only_refuses_an_unknown_section_or_a_document_without_it(tmp_path, capsys, monkeypatch):
    doc = tmp_path / "calibration.md"
    doc.write_text(DOC.replace("## 5. Step-cost forms x\n\nforms\n\n", ""))
    before = doc.read_text()
    assert cr.main(["--only", "nonsense", "--out", str(doc)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --only: unknown section nonsense")
    # the forms section is missing: refused before any section is computed, the file untouched
    monkeypatch.setattr(cr, "SECTIONS", {name: (head, lambda: pytest.fail("computed"))
                                         for name, (head, _) in cr.SECTIONS.items()})
    assert cr.main(["--only", "simfit,forms", "--out", str(doc)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {doc}: no section '## 5. Step-cost forms'")
    assert doc.read_text() == before
    assert cr.main(["--only", "forms", "--out", str(tmp_path / "absent.md")]) == 2
    assert not (tmp_path / "absent.md").exists()
    # present: replaced in place, the rest kept
    monkeypatch.setattr(cr, "SECTIONS", {"simfit": ("## 4. Fit by simulation", lambda: ["## 4. Fit by simulation: n", "", "n"])})
    assert cr.main(["--only", "simfit", "--out", str(doc)]) == 0
    assert doc.read_text() == before.replace("## 4. Fit by simulation: old\n\nold text\n", "## 4. Fit by simulation: n\n\nn\n")


def test_hidden_roofline_in_ms():
    """The harness's hidden cost in ms: weights time = bytes / effective bandwidth, and the
    mixed-step coefficient = factor × the KV read per token."""
    h = sl.hidden_cost(0, 3.0)
    ms = cr.hidden_roofline_ms(h)
    assert ms["base"] == sl.GPU["overhead_ms"]
    assert ms["weights"] == pytest.approx(1000 * h["weight_bytes"] / (sl.GPU["bandwidth_Bps"] * sl.GPU["mem_efficiency"]))
    assert ms["per_token"] == pytest.approx(1000 * h["flops_per_token"] / (sl.GPU["peak_flops"] * sl.GPU["compute_efficiency"]))
    assert ms["per_mixed_kv_token"] == pytest.approx(3.0 * ms["per_kv_token"])
    assert "per_mixed_kv_token" not in cr.hidden_roofline_ms(sl.hidden_cost(0))
