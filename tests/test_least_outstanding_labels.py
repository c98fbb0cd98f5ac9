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


def test_steady_words_name_each_cell_by_its_axes():
    """The steady-state words name a cell by its axes (``retry_budget=inf``), a policy by
    its name alone, and separate cells by commas, so "none, inf, crash, 0.2" can no longer
    be read four ways. One run of four in one cell grew its backlog by half its arrivals,
    far past routesim.steady's per-run share (5 %): that cell alone is flagged."""
    import xarray as xr

    shape = (2, 2, 4)    # scenario × retry_budget × seed
    growth = np.zeros(shape)
    growth[1, 0, 2] = 500.0
    ds = xr.Dataset({"arrivals": (("scenario", "retry_budget", "seed"), np.full(shape, 1000.0)),
                     "backlog_growth": (("scenario", "retry_budget", "seed"), growth),
                     "kv_occupancy_first": (("scenario", "retry_budget", "seed"), np.full(shape, 0.5)),
                     "kv_occupancy_last": (("scenario", "retry_budget", "seed"), np.full(shape, 0.5))},
                    coords={"scenario": ["none", "crash"], "retry_budget": [np.inf, 0.2], "seed": np.arange(4)})
    words = common.steady_words(ds, ("scenario", "retry_budget"))
    assert words.endswith(": scenario=crash retry_budget=inf (1 of 4 runs flagged)"), words
    assert common.steady_words(ds.isel(seed=[0, 1]), ("scenario", "retry_budget")).startswith("every arm steady")
    assert common.cell_label(("policy", "rate_rps"), ("least_tokens", 45.0)) == "least_tokens rate_rps=45"
    assert common.cell_label((), ()) == ""
