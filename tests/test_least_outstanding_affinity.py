"""Claim 4 of the least-outstanding-routing study (the tie-break line matters), rebuilt on
issue 23's rule: the verdict logic on hand-built Datasets whose answer is known by
construction, and the comparisons recomputed from a reduced run of the same design
(sweeps/token-routing-affinity.toml at its high load: 4 seeds, a 100 s warm-up and a 30 s
window instead of 16 seeds, 1,200 s and 60 s). The claim's row, section and figure are
drawn from the same run."""

import numpy as np
import pytest
import xarray as xr

from conftest import SWEEPS, assert_renders, run_reduced, write_results
from routesim.studies.least_outstanding import affinity

N = 16
RNG = np.random.default_rng(11)


def tie_stage(hit, p50, p99):
    """power_of_d at two loads and tie_tolerance 0 and 0.1: the tolerance's effect given as
    (hit rate points added, TTFT p50 factor, TTFT p99 factor), the same at both loads."""
    seeds = np.arange(1, N + 1)
    e = RNG.standard_normal(N)
    base = {"prefix_hit_rate": 0.3 + 0.01 * e, "ttft_p50": 100 * (1 + 0.05 * e), "ttft_p99": 500 * (1 + 0.1 * e)}
    tied = {"prefix_hit_rate": base["prefix_hit_rate"] + hit, "ttft_p50": base["ttft_p50"] * p50,
            "ttft_p99": base["ttft_p99"] * p99}
    return xr.Dataset({v: (("rate_rps", "tie_tolerance", "seed"), [[base[v], tied[v]]] * 2) for v in base},
                      coords={"rate_rps": [20.0, 36.0], "tie_tolerance": [0.0, 0.1], "seed": seeds})


def effects(ds):
    return [affinity.tie_effects(ds.sel(tie_tolerance=0.1, rate_rps=r), ds.sel(tie_tolerance=0.0, rate_rps=r))
            for r in ds.rate_rps.values]


def test_the_verdict_by_construction():
    # 5 points more hits, TTFT p50 and p99 10 % lower at both loads: as predicted
    assert affinity.verdict_for(effects(tie_stage(0.05, 0.9, 0.9))) == "holds"
    # more hits but no latency change: qualification
    assert affinity.verdict_for(effects(tie_stage(0.05, 1.0, 1.0))) == "holds with qualification"
    # more hits and TTFT p99 20 % higher: a lead the other way
    assert affinity.verdict_for(effects(tie_stage(0.05, 1.0, 1.2))) == "does not hold"
    # half a point of hits is below the 1-point bound for a share
    assert effects(tie_stage(0.005, 1.0, 1.0))[0]["hit rate"][3] == 0


def test_hot_replica_measures_by_hand():
    ds = xr.Dataset({"assigned": (("seed", "replica"), [[10, 30, 10]]),
                     "replica_completed": (("seed", "replica"), [[10, 20, 8]])})
    h = affinity.hot(ds)
    assert list(h.gap.values) == [10 - 2] and list(h.share.values) == [0.6]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return run_reduced(tmp_path_factory.mktemp("affinity"), SWEEPS / "token-routing-affinity.toml",
                       {"warmup_s = 1200": "warmup_s = 100", "measure_s = 60": "measure_s = 30",
                        "count = 16 }": "count = 4 }", "rate_rps = [20, 36]": "rate_rps = [36]"})


def test_claim4_the_tie_break_raises_the_hit_rate(out, tmp_path):
    data = affinity.load(write_results(tmp_path / "results", out))
    e = affinity.tie_effects(affinity.pod(data, 0.5), affinity.pod(data, 0.0))
    assert e["hit rate"][3] == 1


def test_claim4_row_section_and_figure_render(out, tmp_path):
    assert_renders(affinity, write_results(tmp_path / "results", out), tmp_path / "figures")
