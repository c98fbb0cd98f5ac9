"""Claim 5 of the least-outstanding-routing study (occupancy predicts preemption), rebuilt
on issue 23's rule: the verdict logic on hand-built Datasets whose answer is known by
construction, and the comparisons recomputed from a reduced run of the same design
(sweeps/token-routing-preemption.toml's fresh stage and its realistic-signal arm, a 50 ms
periodic and periodic_local scrape: 4 seeds and a 300 s warm-up instead of 16 seeds and
1,200 s). The full design found least_kv preempting less and placing less
often on a replica above 90 % than least_requests, with a higher TPOT p99; a change to the
engine that flips the tail of occupancy at placement fails here. The claim's row, section
and figure are drawn from the same run."""

import numpy as np
import pytest
import xarray as xr

from conftest import SWEEPS, assert_renders, run_reduced, write_results
from routesim.studies.least_outstanding import preemption

RNG = np.random.default_rng(3)
N = 16


def stage(values):
    """A Dataset policy × seed: values {variable: {policy: per-seed array}}."""
    policies = list(next(iter(values.values())))
    return xr.Dataset({var: (("policy", "seed"), np.array([v[p] for p in policies], float))
                       for var, v in values.items()},
                      coords={"policy": policies, "seed": np.arange(1, N + 1)})


def arms(kv_pre, kv_high, kv_occ, kv_tpot):
    """least_kv, least_cost (alike) and least_requests; least_requests: 10 preemptions,
    10 % of placements above 0.9, mean occupancy 0.6, TPOT p99 30 ms, with seed noise."""
    e = RNG.normal(0, 1, N)
    base = {"preemptions": 10 + e, "placement_occupancy_high": 0.10 + 0.005 * e,
            "placement_occupancy": 0.6 + 0.001 * e, "tpot_p99": 30 * (1 + 0.01 * e)}
    kv = {"preemptions": base["preemptions"] + kv_pre, "placement_occupancy_high": base["placement_occupancy_high"] + kv_high,
          "placement_occupancy": base["placement_occupancy"] + kv_occ, "tpot_p99": base["tpot_p99"] * kv_tpot}
    return stage({var: {"least_kv": kv[var], "least_cost": kv[var], "least_requests": base[var]} for var in base})


def test_the_verdict_by_construction():
    # 5 fewer preemptions, 5 pp fewer placements above 90 %, 2 pp lower mean, TPOT -10 %
    assert preemption.verdict({"preemption": arms(-5, -0.05, -0.02, 0.9)}) == "holds"
    # the mean occupancy unchanged: some comparisons lead as predicted, none the other way
    assert preemption.verdict({"preemption": arms(-5, -0.05, 0.0, 0.9)}) == "holds with qualification"
    # TPOT p99 25 % higher: a lead the other way
    assert preemption.verdict({"preemption": arms(-5, -0.05, 0.0, 1.25)}) == "does not hold"
    # half a preemption fewer is below the claim's bound of one
    e = preemption.effects(arms(-0.5, -0.05, 0.0, 1.0), "least_kv")
    assert e["preemptions"][3] == 0 and e["placement_occupancy_high"][3] == -1


def test_relation_counts_pairs_where_both_differ():
    ds = stage({"placement_occupancy_high": {p: np.full(N, x) for p, x in
                                             zip(preemption.POLICIES, (0.0, 0.0, 0.1, 0.05))},
                "preemptions": {p: np.full(N, x) for p, x in zip(preemption.POLICIES, (0, 1, 9, 9))}})
    # pairs (kv, cost): tail equal, left out; (kv, req) and (cost, req) agree; (kv, tokens)
    # and (cost, tokens) agree; (req, tokens): preemptions equal, left out
    assert preemption.relation(ds) == (4 * N, 4 * N)


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return run_reduced(tmp_path_factory.mktemp("preemption"), SWEEPS / "token-routing-preemption.toml",
                       {"warmup_s = 1200": "warmup_s = 300", "count = 16 }": "count = 4 }"},
                       cut_before='[[stages]]\nname = "prefill2"')


def test_claim5_kv_aware_routing_places_less_often_above_90_percent(out, tmp_path):
    data = preemption.load(write_results(tmp_path / "results", out))
    for policy in preemption.KV_AWARE:
        e = preemption.effects(data["preemption"], policy)
        assert e["placement_occupancy_high"][3] == -1, policy


def test_claim5_row_section_and_figure_render(out, tmp_path):
    assert_renders(preemption, write_results(tmp_path / "results", out), tmp_path / "figures")


def signal_stage(periodic, local):
    """The realistic-signal stage by hand: :func:`arms`' Datasets (each mode's effects
    as arms' arguments) along signal_mode."""
    modes = {"periodic": arms(*periodic), "periodic_local": arms(*local)}
    return xr.concat([ds.expand_dims(signal_mode=[m]) for m, ds in modes.items()], "signal_mode")


def test_the_scrape_verdict_and_its_changes_by_construction():
    fresh = arms(-5, -0.05, -0.02, 0.9)                       # holds
    data = {"preemption": fresh,
            # periodic: as fresh; periodic_local: no effect on preemptions (0 < 1), TPOT 25 % higher
            "signals": signal_stage((-5, -0.05, -0.02, 0.9), (0, -0.05, -0.02, 1.25))}
    assert preemption.verdict(data) == "holds"
    assert preemption.verdict(data, "periodic") == "holds"
    assert preemption.verdict(data, "periodic_local") == "does not hold"
    assert preemption.changes(data, "periodic", "least_kv") == []
    assert preemption.changes(data, "periodic_local", "least_kv") == [("preemptions", -1, 0), ("tpot_p99", -1, 1)]
    row = preemption.row(data)
    assert row[2].endswith("under a 50 ms scrape the same rule gives: periodic holds, periodic_local does not hold")
    assert row[3] == "holds"


def test_claim5_under_a_scrape(out, tmp_path):
    data = preemption.load(write_results(tmp_path / "results", out))
    for mode in preemption.SIGNAL_MODES:
        for policy in preemption.KV_AWARE:
            # occupancy moves slowly: a 50 ms old one still steers placements away from a
            # replica above 90 %, which a count of requests does not look at
            e = preemption.effects(preemption.scrape(data, mode), policy)
            assert e["placement_occupancy_high"][3] == -1, (mode, policy)
    # periodic_local adds a router's placements to the request count (docs/model.md):
    # least_requests, which reads it, does not run as under periodic
    lr = data["signals"].sel(policy="least_requests")
    assert not np.array_equal(lr.ttft_p99.sel(signal_mode="periodic").values,
                              lr.ttft_p99.sel(signal_mode="periodic_local").values)
