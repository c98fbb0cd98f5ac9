"""The least-outstanding study's figures say what their intervals are of (issue 44): a
ratio (a latency tail) is compared as the mean over seeds of the log-ratio, shown as the
geometric-mean change exp(mean) − 1 (routesim/studies/least_outstanding/common.py,
``compare``), so a figure of such changes says "geometric mean", not "mean", and marks
the study's material bounds where they are (−4.76 % and +5 %: symmetric in the log,
not ±5 %)."""

import numpy as np
import pytest

from routesim.studies.least_outstanding import common, counts


def _captured(monkeypatch, module):
    figs = []
    monkeypatch.setattr(module, "save", lambda fig, stem, figures_dir: figs.append(fig) or [])
    return figs


def test_claim1_effects_label_a_geometric_mean_and_mark_the_material_bounds(monkeypatch, tmp_path):
    figs = _captured(monkeypatch, counts)
    c = (-10.0, -15.0, -5.0, -1)    # a compare() result: mean, low, high (%), lead
    mech = [{"name": "both (the default)", "lr": c, "rr": c}, {"name": "neither", "lr": c, "rr": c}]
    conds = [("fresh", "the baseline", {("ttft_p99", b): c for b in counts.BASES}, "holds", {}, 41),
             ("prefill-x2", "prefill ×2", {("ttft_p99", b): c for b in counts.BASES}, "holds", {}, 41)]
    counts.figure_effects(mech, conds, tmp_path)
    (fig,) = figs
    for ax in fig.axes:
        label = ax.get_xlabel()
        assert "geometric mean" in label, label
        dotted = sorted(line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == ":")
        np.testing.assert_allclose(dotted, sorted(common.RELATIVE_BOUNDS))
    assert common.RELATIVE_BOUNDS[0] == pytest.approx((1 / 1.05 - 1) * 100)   # −4.76 %
