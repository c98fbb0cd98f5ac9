"""The disaggregation study (docs/disaggregation.md; routesim/studies/disaggregation/).

Two parts. The derivations on small Datasets and values built by hand, whose right
answers follow from their construction: how the stages join along the ``arm`` axis, the
per-seed capacity differences (a seed below the lowest load counted as 0), the best
split, and every claim's verdict rule, each driven to each of its outcomes. Then a
reduced run of the same design (the study's sweep file with 3 seeds, two loads per
synthetic workload and Mooncake at one time scale), through the command's own steps
(design.run, the figure, the document): the document carries every claim with a verdict
of the rules' vocabulary, and two findings of the full study come out of the reduced runs
as well: at 160 req/s the code trace's 6:2 split under selective routing has a higher
goodput than co-location, and at 60 req/s the chat mix's 2:6 split has a lower one.
"""

import math
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from routesim.studies.disaggregation import design, measure
from routesim.studies.disaggregation.design import COLOCATED, arm

VERDICTS = {"holds", "holds with qualification", "does not hold", "nothing to compare"}


# ---------------------------------------------------------------------------------------
# The arms and the join
# ---------------------------------------------------------------------------------------

def _stage(goodput, pd=False, replicas=8):
    """A stage Dataset as study.run returns one: (policy, rate_rps, seed[, pair_route]),
    ``goodput`` an array over (rate, seed) (the same for every route), with a
    per-replica variable and, for a split, a disaggregation variable."""
    g = np.asarray(goodput, float)
    dims = ("policy", "rate_rps", "seed")
    data = {"goodput": (dims, g[None]), "assigned": (dims + ("replica",), np.ones((1, *g.shape, replicas)))}
    coords = {"policy": ["least_tokens"], "rate_rps": [10.0, 20.0][:g.shape[0]], "seed": np.arange(1, g.shape[1] + 1),
              "replica": np.arange(1, replicas + 1)}
    ds = xr.Dataset(data, coords=coords)
    if pd:
        routes = list(design.ROUTES)
        ds = ds.expand_dims(pair_route=routes).transpose("policy", "rate_rps", "seed", "pair_route", "replica")
        ds["transfer_count"] = (("pair_route", "rate_rps", "seed"),
                                np.arange(len(routes) * g.size).reshape(len(routes), *g.shape).astype(np.int64))
        ds.attrs["threshold_tokens"] = 512
    return ds


def test_the_arms_are_co_located_then_every_split_under_every_rule():
    assert design.ARMS[0] == COLOCATED
    assert len(design.ARMS) == 1 + len(design.SPLITS) * len(design.ROUTES)
    assert arm((6, 2), "selective") == "6:2 selective"
    assert measure.split_of("6:2 selective") == (6, 2) and measure.route_of("6:2 selective") == "selective"
    assert measure.split_of(COLOCATED) is None and measure.route_of(COLOCATED) is None
    assert all(p + d == 8 for p, d in design.SPLITS)


def test_join_puts_every_stage_and_route_on_one_arm_axis():
    stages = {"chat-colocated": _stage([[1, 2], [3, 4]])}
    for k, s in enumerate(design.SPLITS):
        stages[design.stage_name("chat", s)] = _stage([[10 * k, 1], [2, 3]], pd=True)
    ds = design.join(stages, "chat")
    assert [str(a) for a in ds.arm.values] == list(design.ARMS)
    assert ds.goodput.dims == ("arm", "rate_rps", "seed")
    assert "pair_route" not in ds.dims and "policy" not in ds.dims
    # the co-located arm lacks the disaggregation variable: NaN there, the stage's values elsewhere
    assert np.isnan(ds.transfer_count.sel(arm=COLOCATED)).all()
    np.testing.assert_array_equal(ds.transfer_count.sel(arm="4:4 selective").values, [[4, 5], [6, 7]])
    np.testing.assert_array_equal(ds.goodput.sel(arm="4:4 independent").values, [[10, 1], [2, 3]])
    assert ds.attrs["threshold_tokens"] == 512


# ---------------------------------------------------------------------------------------
# Capacities and the best split
# ---------------------------------------------------------------------------------------

def test_capacity_differences_are_paired_by_seed_and_a_seed_below_the_grid_counts_as_zero():
    seeds = {COLOCATED: [40.0, 40.0, 50.0], "2:6 independent": [math.nan, 20.0, 30.0],
             "6:2 independent": [50.0, 60.0, 60.0]}
    cap = xr.Dataset({"capacity_rps_seed": (("arm", "seed"), np.array(list(seeds.values())))},
                     coords={"arm": list(seeds), "seed": [1, 2, 3]})
    d = measure.capacity_diffs(cap)
    assert set(d) == {"2:6 independent", "6:2 independent"}
    assert d["2:6 independent"][0] == pytest.approx((-40 - 20 - 20) / 3)
    assert d["6:2 independent"][0] == pytest.approx((10 + 20 + 10) / 3) and d["6:2 independent"][1] > 0


def test_capacity_of_hand_built_runs_by_the_quantile_rule():
    # two arms, three loads, two seeds; attainment meets 90 % up to 20 req/s on one arm, 30 on the other
    att = {COLOCATED: [[1.0, 1.0], [0.95, 0.92], [0.5, 0.2]], "4:4 independent": [[1.0, 1.0], [1.0, 1.0], [0.99, 0.91]]}
    n = np.full((2, 3, 2), 600.0)
    ds = xr.Dataset({"attainment": (("arm", "rate_rps", "seed"), np.array(list(att.values()))),
                     "arrivals": (("arm", "rate_rps", "seed"), n),
                     "backlog_growth": (("arm", "rate_rps", "seed"), np.zeros_like(n)),
                     "kv_occupancy_first": (("arm", "rate_rps", "seed"), np.full_like(n, 0.1)),
                     "kv_occupancy_last": (("arm", "rate_rps", "seed"), np.full_like(n, 0.1))},
                    coords={"arm": list(att), "rate_rps": [10.0, 20.0, 30.0], "seed": [1, 2]})
    cap = measure.capacities(ds)
    assert float(cap.capacity_rps.sel(arm=COLOCATED)) == 20.0
    assert float(cap.capacity_rps.sel(arm="4:4 independent")) == 30.0
    assert measure.best_arm(ds.assign(goodput=ds.attainment), cap) == "4:4 independent"


# ---------------------------------------------------------------------------------------
# The verdict rules, each driven to each outcome
# ---------------------------------------------------------------------------------------

UP, DOWN, NONE, LEAN_UP = (5.0, 1.0, 9.0), (-5.0, -9.0, -1.0), (0.0, -1.0, 1.0), (1.0, -1.0, 3.0)


def test_c1_no_gain():
    assert measure.verdict_no_gain({"a": DOWN, "b": NONE}) == "holds"
    assert measure.verdict_no_gain({"a": DOWN, "b": LEAN_UP}) == "holds with qualification"
    assert measure.verdict_no_gain({"a": DOWN, "b": UP}) == "does not hold"


def test_c2_gain_of_a_favoured_split():
    assert measure.verdict_gain({"6:2 x": UP, "4:4 x": DOWN}, ["6:2 x"]) == "holds"
    assert measure.verdict_gain({"6:2 x": NONE, "4:4 x": UP}, ["6:2 x"]) == "holds with qualification"
    assert measure.verdict_gain({"6:2 x": NONE, "4:4 x": DOWN}, ["6:2 x"]) == "does not hold"


def test_c3_every_load():
    assert measure.verdict_every_load({1: {"a": UP, "b": DOWN}, 2: {"a": DOWN, "b": UP}}) == "holds"
    assert measure.verdict_every_load({1: {"a": UP}, 2: {"a": NONE}}) == "holds with qualification"
    assert measure.verdict_every_load({1: {"a": NONE}, 2: {"a": DOWN}}) == "does not hold"
    exact = (0.3, 0.3, 0.3)   # the seeds repeat one run: an exact difference counts
    assert measure.verdict_every_load({1: {"a": exact}}) == "holds"


def test_c4_ratio():
    assert measure.verdict_ratio({"chat": "4:4 a", "code": "6:2 b", "mooncake": "6:2 c"}) == "holds"
    assert measure.verdict_ratio({"chat": "4:4 a", "code": "6:2 b", "mooncake": "4:4 c"}) == "holds with qualification"
    assert measure.verdict_ratio({"chat": "4:4 a", "code": "2:6 b", "mooncake": "4:4 c"}) == "does not hold"


def test_c5_lower_everywhere():
    assert measure.verdict_lower({"a": DOWN, "b": DOWN}) == "holds"
    assert measure.verdict_lower({"a": DOWN, "b": DOWN, "c": NONE}) == "holds with qualification"
    assert measure.verdict_lower({"a": DOWN, "b": DOWN, "c": UP}) == "does not hold"
    assert measure.verdict_lower({"a": DOWN, "b": NONE}) == "does not hold"   # half is not most


def test_c6_close():
    assert measure.verdict_close({"a": (0.5, -1.0, 2.0)}) == "holds"
    assert measure.verdict_close({"a": (0.5, -1.0, 2.0), "b": (3.0, -2.0, 8.0)}) == "holds with qualification"
    assert measure.verdict_close({"a": (0.5, -1.0, 2.0), "b": (7.0, 6.0, 8.0)}) == "does not hold"
    assert measure.verdict_close({"a": (-7.0, -8.0, -5.5)}) == "does not hold"


def test_c7_at_least():
    assert measure.verdict_at_least({"a": UP, "b": NONE}) == "holds"
    assert measure.verdict_at_least({"a": NONE, "b": (0.0, 0.0, 0.0)}) == "holds with qualification"
    assert measure.verdict_at_least({"a": UP, "b": DOWN}) == "does not hold"


def test_c8_small():
    assert measure.verdict_small([0.05, math.nan], [0.1]) == "holds"
    assert measure.verdict_small([0.05, 0.12], [0.1]) == "does not hold"
    assert measure.verdict_small([0.05], [0.3]) == "does not hold"
    assert measure.verdict_small([math.nan], []) == "nothing to compare"


# ---------------------------------------------------------------------------------------
# A reduced run of the design
# ---------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_reduced_run_gives_the_document_the_figure_and_two_findings(tmp_path):
    from routesim.config import load_sweep
    from routesim.studies.disaggregation.document import document, findings
    from routesim.studies.disaggregation.figure import figure

    sweep = design.reduced(load_sweep(design.SWEEP), seeds=range(1, 4),
                           rates={"chat": (20.0, 60.0), "code": (60.0, 160.0)}, time_scales=(1.5,))
    paths = design.run(tmp_path / "results", sweep)
    data = measure.load(tmp_path / "results")
    assert set(data) == set(paths) == set(design.WORKLOADS)
    assert data["chat"].sizes["seed"] == 3 and measure.loads(data["code"]) == [60.0, 160.0]

    code, chat = data["code"], data["chat"]
    assert measure.paired(code, "goodput", "6:2 selective", load=160.0)[1] > 0
    assert measure.paired(chat, "goodput", "2:6 independent", load=60.0)[2] < 0

    f = findings(data)
    assert all(f[f"C{i}"] in VERDICTS for i in range(1, 9))
    text = document(data)
    for i in range(1, 9):
        assert f"| C{i}. " in text
    assert "**Finding.**" in text and "nan" not in text.lower()
    assert "from `results/disaggregation/{chat,code,mooncake}.nc`" in text
    assert "from `elsewhere/pd/{chat,code,mooncake}.nc`" in document(data, Path("elsewhere/pd"))
    png, svg = figure(data, tmp_path / "figures")
    assert png.stat().st_size > 50_000 and svg.exists()


def test_no_run_without_results_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    from routesim.studies.disaggregation.__main__ import main
    out, figs = tmp_path / "doc.md", tmp_path / "figures"
    code = main(["--no-run", "--results", str(tmp_path / "none"), "--figures", str(figs), "--out", str(out), "-q"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and "chat.nc" in err
    assert not out.exists() and not figs.exists()
