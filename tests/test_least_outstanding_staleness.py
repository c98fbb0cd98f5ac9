"""Claim 3 of the least-outstanding-routing study (every signal is stale), rebuilt on issue
23's rule: the verdict logic on hand-built Datasets whose answer is known by construction,
and the comparisons recomputed from a reduced run of the same design
(sweeps/token-routing-staleness.toml: 4 seeds, a 60 s warm-up and a 20 s window instead
of 16 seeds, 1,200 s and 60 s; every stage, the 10 ms period and four routers too). A change to the engine that stops a stale signal from
hurting least_tokens fails here. The claim's row, section and figure are drawn from the
same run. The step-cost sensitivity (prefill ×2, ×4, a 2,048-token chunk budget, at 50 ms
only) is checked the same way: by construction, and from its own stages, reduced."""

import numpy as np
import pytest
import xarray as xr

from conftest import SWEEPS, assert_renders, run_reduced, write_results
from routesim.studies.least_outstanding import staleness
from routesim.studies.least_outstanding.common import MECHANISM, compare, sensitivity_rows, stage_rate, verdicts

N = 16
RNG = np.random.default_rng(5)
FRESH = 400 * (1 + 0.1 * RNG.standard_normal(N))


def noisy(x):
    return x * (1 + 0.005 * RNG.standard_normal(N))


def data_of(lt, pod, lt_local, pod_local, lt_routers, pod_routers=1.0):
    """lt, pod: {period ms: factor on FRESH}; the local arm's factors at 50 ms, with one
    router and with four."""
    pols = ("least_tokens", "power_of_d")
    seeds = np.arange(1, N + 1)
    fresh = xr.Dataset({"ttft_p99": (("policy", "seed"), [noisy(FRESH), noisy(FRESH)])},
                       coords={"policy": list(pols), "seed": seeds})
    ps = sorted(lt)
    per = xr.Dataset({"ttft_p99": (("policy", "period_ms", "seed"),
                                   [[noisy(FRESH * f[p]) for p in ps] for f in (lt, pod)])},
                     coords={"policy": list(pols), "period_ms": ps, "seed": seeds})
    local = xr.Dataset({"ttft_p99": (("policy", "seed"), [noisy(FRESH * lt_local), noisy(FRESH * pod_local)])},
                       coords={"policy": list(pols), "seed": seeds})
    routers = xr.Dataset({"ttft_p99": (("policy", "seed"), [noisy(FRESH * lt_routers), noisy(FRESH * pod_routers)])},
                         coords={"policy": list(pols), "seed": seeds})
    return {"fresh": fresh, "periodic": per, "local": local, "routers": routers}


def test_the_verdict_by_construction():
    # least_tokens +20 %, +50 % and +80 % stale, power of two +5 %, +10 % and +20 %,
    # periodic_local back to +5 %, with four routers +25 % (between): every comparison as
    # predicted
    lt, pod = {10: 1.2, 50: 1.5, 100: 1.8}, {10: 1.05, 50: 1.1, 100: 1.2}
    assert staleness.verdict(data_of(lt, pod, 1.05, 1.0, 1.25)) == "holds"
    # power of two degrades as much as least_tokens: no lead there, the rest stands
    assert staleness.verdict(data_of(lt, lt, 1.05, 1.0, 1.25)) == "holds with qualification"
    # four routers lose all of periodic_local's recovery (+50 %, periodic's): 4 vs 1 is a
    # lead up as predicted, 4 vs periodic no lead: qualification
    assert staleness.verdict(data_of(lt, pod, 1.05, 1.0, 1.5)) == "holds with qualification"
    # a 10 ms signal costs least_tokens 2 % (below the 5 % bound): no lead at 10 ms
    c = staleness.comparisons(data_of({10: 1.02, 50: 1.5, 100: 1.8}, pod, 1.05, 1.0, 1.25))
    assert c["least_tokens at 10 ms vs fresh"][0][3] == 0
    # staleness does not hurt least_tokens and periodic_local is worse: reversed
    assert staleness.verdict(data_of({10: 0.9, 50: 0.9, 100: 0.9}, {10: 1.0, 50: 1.0, 100: 1.0}, 1.2, 1.0,
                                     1.2)) == "does not hold"
    # the ranking: power of two 20 % below least_tokens at 50 ms is a lead (-1)
    d = data_of({10: 1.2, 50: 1.5, 100: 1.8}, {10: 1.2, 50: 1.2, 100: 1.2}, 1.05, 1.0, 1.25)
    assert staleness.ranking(d, 50)[3] == -1 and staleness.ranking(d, 0)[3] == 0


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return run_reduced(tmp_path_factory.mktemp("staleness"), SWEEPS / "token-routing-staleness.toml",
                       {"warmup_s = 1200": "warmup_s = 60", "measure_s = 60": "measure_s = 20",
                        "count = 16 }": "count = 4 }"}, cut_before='[[stages]]\nname = "prefill2"')


@pytest.fixture(scope="module")
def sens(tmp_path_factory):
    """The step-cost variants' stages alone, 4 seeds and 60 s of warm-up as :func:`out`, but
    the design's 60 s window: at the variants' lighter loads a 20 s window's TTFT p99 is
    a handful of requests, most of them the long class's prefills, which routing cannot
    shorten."""
    stages = [s for v, _ in staleness.SENSITIVITY for s in (v, f"{v}-routers")]
    return run_reduced(tmp_path_factory.mktemp("staleness-sens"), SWEEPS / "token-routing-staleness.toml",
                       {"warmup_s = 1200": "warmup_s = 60", "count = 16 }": "count = 4 }"}, stages=stages,
                       cut_before="# The Azure-length arm")


def test_claim3_a_stale_signal_hurts_the_global_minimum(out, tmp_path):
    data = staleness.load(write_results(tmp_path / "results", out))
    assert staleness.degradation(data, "least_tokens", 100)[3] == 1


def test_claim3_older_signals_and_more_routers_hurt_more(out, tmp_path):
    data = staleness.load(write_results(tmp_path / "results", out))
    lt = "least_tokens"
    # a 100 ms signal lets ten times the arrivals of a 10 ms one through on the same
    # stale minimum
    assert compare(staleness.at(data, lt, 100), staleness.at(data, lt, 10))[3] == 1
    # with four routers each adds only its own quarter of the placements since the
    # publication: periodic_local's correction is partial, TTFT p99 higher than one router's
    four, one = (staleness.at(data, lt, staleness.LOCAL_MS, m) for m in ("routers", "local"))
    assert compare(four, one)[3] == 1


def test_claim3_mechanism_verdict_recomputed_and_flipped(out, tmp_path):
    # the mechanism's verdict from the reduced run; then with the 100 ms runs standing for
    # the fresh ones, a 10 ms signal is "better than fresh": the herding goes the other way
    data = staleness.load(write_results(tmp_path / "results", out))
    v = verdicts(staleness.clauses(data))
    assert v["whole"] == staleness.verdict(data)
    assert "least_tokens at 10 ms vs fresh" not in v["against"][MECHANISM]
    data["fresh"] = data["periodic"].sel(period_ms=100, drop=True)
    v = verdicts(staleness.clauses(data))
    assert "least_tokens at 10 ms vs fresh" in v["against"][MECHANISM] and v["mechanism"] == "does not hold"


def test_claim3_row_section_and_figure_render(out, tmp_path):
    assert_renders(staleness, write_results(tmp_path / "results", out), tmp_path / "figures")


def variant_of(lt50, pod50, lt_local, lt_routers, pod_local=1.0):
    """A step-cost variant's two stages by hand, as the sweep writes them (one period,
    50 ms, kept in the attrs; the four-router stage of least_tokens alone, its policy axis
    dropped), factors on FRESH as :func:`data_of`'s."""
    seeds = np.arange(1, N + 1)
    ds = xr.Dataset({"ttft_p99": (("policy", "signal_mode", "seed"),
                                  [[noisy(FRESH), noisy(FRESH * lt50), noisy(FRESH * lt_local)],
                                   [noisy(FRESH), noisy(FRESH * pod50), noisy(FRESH * pod_local)]])},
                    coords={"policy": ["least_tokens", "power_of_d"],
                            "signal_mode": ["fresh", "periodic", "periodic_local"], "seed": seeds},
                    attrs={"period_ms": 50, "rate_rps": 26.0})
    routers = xr.Dataset({"ttft_p99": ("seed", noisy(FRESH * lt_routers))}, coords={"seed": seeds})
    return staleness.variant(ds, routers)


def test_the_step_cost_sensitivity_by_construction():
    lt, pod = {10: 1.2, 50: 1.5, 100: 1.8}, {10: 1.05, 50: 1.1, 100: 1.2}
    main = data_of(lt, pod, 1.05, 1.0, 1.25)
    # the main design cut to the 50 ms period: its five 50 ms comparisons, all as predicted
    cut = staleness.restricted(main)
    assert len(staleness.comparisons(cut)) == 5 and staleness.verdict(cut) == "holds"
    # a variant as the main design at 50 ms: the same five comparisons, the same verdict
    same = variant_of(1.5, 1.1, 1.05, 1.25)
    assert list(staleness.comparisons(same)) == list(staleness.comparisons(cut))
    assert staleness.verdict(same) == "holds"
    # power of two herding as much as least_tokens: no lead there, the rest stands;
    # four routers worse than periodic: a lead the other way
    equal = variant_of(1.5, 1.5, 1.05, 1.25)
    worse = variant_of(1.5, 1.1, 1.05, 1.8)
    data = dict(main, sensitivity={"prefill2": same, "prefill4": equal, "chunk2048": worse})
    rows = staleness.sensitivity(data)
    assert [r[3] for r in rows] == ["holds", "holds with qualification", "does not hold"]
    assert [r[1] for r in rows] == [26.0] * 3
    # least_tokens at 50 ms against fresh: +50 %, paired by seed within the variant
    assert rows[0][2][0][1][0] == pytest.approx(50.0, abs=1.0) and rows[0][2][0][1][3] == 1
    table = sensitivity_rows(staleness.verdict(cut), rows)
    assert [line.rsplit("|", 2)[1].strip() for line in table[2:]] == ["yes", "no", "no"]


def test_claim3_the_step_cost_variants(out, sens, tmp_path):
    data = staleness.load(write_results(tmp_path / "results", {**out, **sens}))
    assert set(data["sensitivity"]) == {s for s, _ in staleness.SENSITIVITY}
    rows = {words: r for words, *r in staleness.sensitivity(data)}
    assert len(rows) == 3
    for stage, words in staleness.SENSITIVITY:
        v = data["sensitivity"][stage]
        # the load claim 2 runs that variant at, read from the same sweep's stages
        assert rows[words][0] == stage_rate(v["whole"]) == {"prefill2": 26, "prefill4": 20, "chunk2048": 35}[stage]
        # the verdict recomputed by the same rule from the same five comparisons
        assert rows[words][2] == staleness.verdict(v)
        assert len(rows[words][1]) == 5
        # whatever a step costs, a 50 ms old signal sends a period's arrivals to the
        # replica that looked emptiest: least_tokens' TTFT p99 above its fresh one; and
        # adding the router's own placements since the publication undoes the herd
        c = staleness.comparisons(v)
        assert c["least_tokens at 50 ms vs fresh"][0][3] == 1, (stage, c)
        assert c["least_tokens periodic_local vs periodic, 50 ms"][0][3] == -1, (stage, c)
    text = staleness.section(data)
    assert "**Sensitivity to the step cost**" in text
    assert text.count("| prefill ×") == 2 and "| max_batched_tokens = 2,048 |" in text
