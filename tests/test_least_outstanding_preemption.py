"""Claim 5 of the least-outstanding-routing study (occupancy predicts preemption), rebuilt
on issue 23's rule: the verdict logic on hand-built Datasets whose answer is known by
construction, and the comparisons recomputed from a reduced run of the same design
(sweeps/token-routing-preemption.toml's fresh stage and its realistic-signal arm, a 50 ms
periodic and periodic_local scrape: 4 seeds and a 300 s warm-up instead of 16 seeds and
1,200 s). The full design found least_kv preempting less and placing less
often on a replica above 90 % than least_requests, with a higher TPOT p99; a change to the
engine that flips the tail of occupancy at placement fails here. The claim's row, section
and figure are drawn from the same run. The step-cost variants and the scheduler = "vllm"
arm are recomputed the same way from a reduced run of their own stages."""

import numpy as np
import pytest
import xarray as xr

from conftest import SWEEPS, assert_renders, run_reduced, swap_labels, write_results
from routesim.studies.least_outstanding import preemption
from routesim.studies.least_outstanding.common import MECHANISM, verdicts

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


def test_claim5_mechanism_verdict_recomputed_and_flipped(out, tmp_path):
    # least_kv's placements above 90 % lead (the test above): the mechanism's verdict is
    # not "does not hold"; with least_kv's and least_requests' runs exchanged it is
    data = preemption.load(write_results(tmp_path / "results", out))
    v = verdicts(preemption.clauses(data))
    assert v["mechanism"] != "does not hold" and v["whole"] == preemption.verdict(data)
    data["preemption"] = swap_labels(data["preemption"], "policy", "least_kv", "least_requests")
    v = verdicts(preemption.clauses(data))
    assert "least_kv placement_occupancy_high" in v["against"][MECHANISM] and v["mechanism"] == "does not hold"


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


def test_the_step_cost_rows_and_the_vllm_words_by_construction():
    base = arms(-5, -0.05, -0.02, 0.9)                             # least_kv alone: holds
    steady = {"backlog_growth": (("policy", "seed"), np.zeros((3, N))),
              "arrivals": (("policy", "seed"), np.full((3, N), 2000.0)),
              "kv_occupancy_first": (("policy", "seed"), np.full((3, N), 0.6)),
              "kv_occupancy_last": (("policy", "seed"), np.full((3, N), 0.6))}
    data = {"preemption": base,
            "prefill2": arms(-5, -0.05, -0.02, 0.9).assign_attrs(kv_blocks=6144, rate_rps=26.0),
            "prefill4": arms(-5, -0.05, 0.0, 0.9).assign_attrs(kv_blocks=4608, rate_rps=20.0),
            "chunk2048": arms(-5, -0.05, 0.0, 1.25).assign_attrs(kv_blocks=8192, rate_rps=35.0),
            "vllm": arms(-5, -0.05, 0.0, 1.25).assign(**steady).assign_attrs(warmup_s=1200)}
    rows = preemption.sensitivity(data)
    assert [(r[1], r[3]) for r in rows] == [(26.0, "holds"), (20.0, "holds with qualification"),
                                            (35.0, "does not hold")]
    assert rows[0][0] == "prefill ×2 as costly, 6,144 blocks"
    # the vllm arm: flat occupancy and backlog, so steady; TPOT p99 +25 %: does not hold,
    # against holds with the default scheduler
    words = preemption.vllm_words(data)
    assert "1,200 s of warm-up" in words and "every arm steady" in words
    assert "*does not hold*, against *holds* with the default scheduler" in words
    # occupancy rising 10 points over the window: not steady, named
    rising = data["vllm"].assign(kv_occupancy_last=(("policy", "seed"), np.full((3, N), 0.7)))
    assert "not steady" in preemption.vllm_words(dict(data, vllm=rising))


@pytest.fixture(scope="module")
def sens(tmp_path_factory):
    """The step-cost variants and the scheduler = "vllm" arm, reduced as :func:`out`
    (4 seeds, 300 s of warm-up; each variant's load and pool as the sweep file sets them)."""
    return run_reduced(tmp_path_factory.mktemp("preemption-sens"), SWEEPS / "token-routing-preemption.toml",
                       {"warmup_s = 1200": "warmup_s = 300", "count = 16 }": "count = 4 }"},
                       stages=["preemption"] + [s for s, _ in preemption.ARMS] + ["vllm"],
                       cut_before="# The Azure-length arm")


def test_claim5_the_step_cost_variants_and_vllm(sens, tmp_path):
    data = preemption.load(write_results(tmp_path / "results", sens))
    # the vllm arm runs at the warm-up every other stage of the sweep runs at
    assert data["vllm"].attrs["warmup_s"] == data["preemption"].attrs["warmup_s"] == 300
    assert data["vllm"].attrs["scheduler"] == "vllm"
    rows = {words.rsplit(", ", 1)[0]: r for words, *r in preemption.sensitivity(data)}
    assert len(rows) == 3
    for stage, words in preemption.ARMS + (("vllm", None),):
        ds = data[stage]
        if words is not None:
            assert rows[words][2] == preemption.verdict_for(ds, ("least_kv",))
        # scoring by occupancy steers placements away from a replica above 90 %, which a
        # count of requests does not look at, whatever a step costs or whichever scheduler
        e = preemption.effects(ds, "least_kv")
        assert e["placement_occupancy_high"][3] == -1, (stage, e["placement_occupancy_high"])
    assert preemption.vllm_words(data).startswith('With `scheduler = "vllm"` (300 s of warm-up')
