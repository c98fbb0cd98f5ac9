"""The batching model's workload generator against docs/token-workload-vectors.md
(rows computed by an independent implementation of token-model.md §1.1 and §1.3)."""

import re
from pathlib import Path

import numpy as np
import pytest

from routesim.batching.workload import TokenWorkloadParams, generate

DOC = Path(__file__).resolve().parent.parent / "docs" / "token-workload-vectors.md"
TRACE = Path(__file__).resolve().parent.parent / "traces" / "azure-conv.csv"


def _section(letter):
    """The table rows (lists of cells) and the text of section (letter) of the vectors page."""
    text = DOC.read_text()
    start = text.index(f"## ({letter})")
    end = text.find("\n## (", start + 1)
    body = text[start:end if end > 0 else None]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in body.splitlines() if re.match(r"\|\s*\d", line)]
    return rows, body


def _check_rows(wl, rows, b=16):
    for k, t, cls, group, P, O, h, ids, first, last in rows:
        k = int(k)
        assert wl.t_ms[k] == pytest.approx(float(t), rel=1e-12)
        assert wl.prompt[k] == int(P) and wl.output[k] == int(O)
        assert wl.key[k] == pytest.approx(float(h), rel=1e-12)
        assert wl.group[k] == (-1 if group == "none" else int(group))
        blocks = wl.block_ids(k)
        assert blocks.size == int(ids) == int(P) // b
        assert blocks[0] == int(first) and blocks[-1] == int(last)


def test_section_a_defaults():
    rows, _ = _section("a")
    wl = generate(1, 40.0, (), 60_000.0)
    assert len(wl) == 2478
    assert wl.prompt.sum() == 6736853 and wl.output.sum() == 638397
    assert int((wl.group >= 0).sum()) == 1480
    assert int(((wl.t_ms >= 10_000) & (wl.t_ms < 60_000)).sum()) == 2063
    assert wl.t_ms[-1] == pytest.approx(59959.233053618176, rel=1e-12)
    _check_rows(wl, rows)


def test_section_b_rate_change_and_classes():
    rows, _ = _section("b")
    params = TokenWorkloadParams(p_long=0.3, prefix_probability=0.9)
    wl = generate(7, 25.0, ((500.0, 3.0),), 3_000.0, params)
    assert len(wl) == 189
    assert int((wl.t_ms < 500).sum()) == 9
    assert wl.prompt.sum() == 1163887 and wl.output.sum() == 156981
    assert wl.t_ms[-1] == pytest.approx(2990.5878170158767, rel=1e-12)
    _check_rows(wl, rows)


def _azure_rows(path, n):
    """(P, O) of the first n data rows, read with a plain split (the trace loader is tested elsewhere)."""
    lines = Path(path).read_text().splitlines()[1:n + 1]
    cells = [line.split(",") for line in lines]
    return np.array([int(c[1]) for c in cells]), np.array([int(c[2]) for c in cells])


@pytest.mark.skipif(not TRACE.exists(), reason="traces/azure-conv.csv not shipped yet")
def test_section_c_empirical_lengths():
    rows, _ = _section("c")
    wl = generate(3, 30.0, (), 60_000.0, lengths=_azure_rows(TRACE, 500))
    assert len(wl) == 1765
    assert wl.prompt.sum() == 1611091 and wl.output.sum() == 456094
    for row in rows:
        k, t, j, P, O, group, ids = row[:7]
        k = int(k)
        assert wl.t_ms[k] == pytest.approx(float(t), rel=1e-12)
        assert wl.prompt[k] == int(P) and wl.output[k] == int(O)
        g = group.split()[0]
        assert wl.group[k] == (-1 if g == "none" else int(g))
        blocks = wl.block_ids(k)
        assert blocks.size == int(ids)
        if len(row) > 7:
            assert blocks[0] == int(row[7]) and blocks[-1] == int(row[8])
