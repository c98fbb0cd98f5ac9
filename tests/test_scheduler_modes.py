"""The scheduler-modes study (docs/scheduler-modes.md; routesim/studies/scheduler_modes/).

Two parts. The derivations (routesim.studies.scheduler_modes.measure) on small
Datasets built by hand, whose right answers follow from their construction: the
bootstrap interval against the exact bootstrap distribution of a mean of four values
(every one of the 4^4 resamples enumerated), the orderings and their changes, the
capacity orderings and each verdict's rule. Then the verdicts recomputed from reduced
runs of the same design (the same sweep files; the example with 30 s + 30 s, three
policies and the capacity search's first round only; Mooncake with 30 s + 60 s and 4
seeds). The full study (docs/scheduler-modes.md) found: P1 (prefix hits lower under vllm)
holds; P2 (vllm preempts at least as much) does not hold, on Mooncake (prefix_affinity
preempts less under vllm) and on the example (some policies preempt less under vllm at
52 req/s); P3 (tails within ±5 % below capacity, the block readers apart) does not
hold, on one cell (rate_weighted's TTFT p99 at 46 req/s); P4 (no routing conclusion
changes) holds with qualification: every material ordering that reverses involves
prefix_affinity. P1, P2 on Mooncake and P4 come out the same from the reduced runs; P2
on the example and P3 rest on cells near or above capacity after a 300 s warm-up that a
reduced run does not reach, so their rules are tested on small Datasets above. The
loops (vllm, asynchronous, against vllm_sync): P5 (TTFT rises most at the tail) does not
hold in the full design, the median rising more, and the reduced runs give the same
(test_p5_from_reduced_runs); P6 (decode tails within 5 %) rests on small differences,
its rule tested above.
"""

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from routesim.studies.scheduler_modes import measure

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = ROOT / "sweeps"


def _ds(values, var="ttft_p99"):
    """A Dataset (scheduler, policy, seed) of one variable from {(arm, policy): [per seed]},
    its arms those ``values`` names, in the study's order."""
    pols = sorted({p for _, p in values})
    arms = [s for s in measure.SCHEDULERS if any(k[0] == s for k in values)]
    seeds = len(next(iter(values.values())))
    a = np.array([[values[(s, p)] for p in pols] for s in arms], float)
    return xr.Dataset({var: (("scheduler", "policy", "seed"), a)},
                      coords={"scheduler": arms, "policy": pols, "seed": np.arange(1, seeds + 1)})


def test_interval_is_the_percentile_bootstrap_of_the_mean():
    d = np.array([1.0, 2.0, 3.0, 7.0])
    m, lo, hi = measure.interval(d)
    assert m == pytest.approx(3.25)
    # the exact bootstrap distribution: every resample of 4 of the 4 values, equally likely
    means = np.sort([np.mean(c) for c in itertools.product(d, repeat=4)])
    q_lo, q_hi = np.quantile(means, 0.025), np.quantile(means, 0.975)
    step = 0.25 * (d.max() - d.min()) / 4 + 1e-9    # the lattice of resample means is 1/4 apart here
    assert abs(lo - q_lo) <= step and abs(hi - q_hi) <= step
    assert d.min() < lo < m < hi < d.max()


def test_interval_of_a_repeated_value_is_that_value():
    assert measure.interval([2.5, 2.5, 2.5, 2.5]) == (2.5, 2.5, 2.5)
    assert all(math.isnan(x) for x in measure.interval([math.nan, math.nan]))


def test_excludes_zero():
    assert measure.excludes_zero((1.0, 0.5, 2.0)) == 1
    assert measure.excludes_zero((-1.0, -2.0, -0.1)) == -1
    assert measure.excludes_zero((0.2, -0.1, 0.5)) == 0
    assert measure.excludes_zero((0.0, 0.0, 0.0)) == 0
    assert measure.excludes_zero((math.nan, math.nan, math.nan)) == 0


def test_relative_difference_per_seed():
    ds = _ds({("reserve", "a"): [100, 200], ("vllm", "a"): [110, 150]})
    np.testing.assert_allclose(measure.per_seed_difference(ds, "ttft_p99").sel(policy="a"), [10.0, -25.0])


def test_a_pair_compares_its_two_arms():
    # three arms: the default pair is the vllm mode against reserve, LOOP the two loops
    ds = _ds({("reserve", "a"): [100, 200], ("vllm_sync", "a"): [50, 100], ("vllm", "a"): [110, 150],
              ("reserve", "b"): [10, 20], ("vllm_sync", "b"): [300, 400], ("vllm", "b"): [10, 20]})
    np.testing.assert_allclose(measure.per_seed_difference(ds, "ttft_p99").sel(policy="a"), [10.0, -25.0])
    np.testing.assert_allclose(measure.per_seed_difference(ds, "ttft_p99", pair=measure.LOOP).sel(policy="a"),
                               [120.0, 50.0])
    d = measure.differences(ds, pair=measure.LOOP, metrics={"ttft_p99": measure.METRICS["ttft_p99"]})
    assert set(d) == {("ttft_p99", "a", None), ("ttft_p99", "b", None)}
    assert d[("ttft_p99", "a", None)][0] == pytest.approx(85.0)
    # a above b under every arm but vllm_sync, where it is below: LOOP reverses it, MODE keeps it
    assert measure.changes(ds, "ttft_p99", pair=measure.LOOP)["reversed"] == [("a", "b", -1)]
    assert measure.changes(ds, "ttft_p99")["kept"] == 1
    assert set(measure.medians(ds, "ttft_p99")) == {(s, p) for s in measure.SCHEDULERS for p in "ab"}


def test_the_loop_verdict_rules():
    # P5 over two cells at 34 req/s (the 52 req/s cell is not below capacity)
    d = {("ttft_p99", "a", 34.0): (20.0, 5.0, 30.0), ("ttft_p50", "a", 34.0): (1.0, 0.0, 2.0),
         ("ttft_p99", "b", 34.0): (10.0, 2.0, 20.0), ("ttft_p50", "b", 34.0): (0.5, -1.0, 2.0),
         ("ttft_p99", "a", 52.0): (-50.0, -60.0, -40.0), ("ttft_p50", "a", 52.0): (0.0, 0.0, 0.0)}
    assert measure.verdict_loop_ttft(d, [34.0]) == "holds"
    d[("ttft_p99", "b", 34.0)] = (10.0, -2.0, 20.0)      # one of two shown: not more than half
    assert measure.verdict_loop_ttft(d, [34.0]) == "holds with qualification"
    d[("ttft_p50", "b", 34.0)] = (15.0, 10.0, 20.0)      # the median rises more than the tail in b
    assert measure.verdict_loop_ttft(d, [34.0]) == "does not hold"
    assert measure.verdict_loop_ttft(d, [52.0]) == "does not hold"   # the tail falls
    assert measure.verdict_loop_ttft(d, [46.0]) == "nothing to compare"
    # P6 over the decode tails of every policy, the block readers included
    dec = {("itl_p99", "round_robin", 34.0): (1.0, -2.0, 3.0), ("tpot_p99", "least_kv", 34.0): (0.0, -4.0, 4.0),
           ("ttft_p99", "round_robin", 34.0): (40.0, 30.0, 50.0)}     # not a decode tail
    assert measure.verdict_loop_decode(dec, [34.0]) == "holds"
    dec[("tpot_p99", "least_kv", 34.0)] = (3.0, -1.0, 7.0)
    assert measure.verdict_loop_decode(dec, [34.0]) == "holds with qualification"
    dec[("tpot_p99", "least_kv", 34.0)] = (8.0, 6.0, 10.0)
    assert measure.verdict_loop_decode(dec, [34.0]) == "does not hold"


def test_orderings_and_their_changes():
    # a is below b under reserve on every seed and above it under vllm: reversed;
    # a is below c under reserve, tied with it (differences of both signs) under vllm: lost;
    # b and c: no order under reserve (mixed), b above c under vllm on every seed: gained.
    ds = _ds({("reserve", "a"): [10, 11, 12, 13], ("reserve", "b"): [20, 21, 22, 23], ("reserve", "c"): [20, 22, 21, 24],
              ("vllm", "a"): [30, 31, 32, 33], ("vllm", "b"): [20, 21, 22, 23], ("vllm", "c"): [25, 36, 27, 38]})
    assert measure.orderings(ds, "ttft_p99", "reserve") == {("a", "b"): -1, ("a", "c"): -1, ("b", "c"): 0}
    ch = measure.changes(ds, "ttft_p99")
    assert ch["reversed"] == [("a", "b", -1)]
    assert ch["decided"] == 2 and ch["kept"] == 0
    assert ch["lost"] == [("a", "c", -1)]          # vllm's a − c: +5, −5, +5, −5
    vl = measure.orderings(ds, "ttft_p99", "vllm")
    assert vl[("a", "b")] == 1 and vl[("b", "c")] == -1
    assert ch["gained"] == [("b", "c", -1)]
    assert measure.verdict_routing({"s": {"ttft_p99": ch}}, []) == "does not hold"
    # a reversal that involves a policy reading KV blocks qualifies the verdict instead
    kv = {"reversed": [("least_kv", "b", -1)], "lost": [], "gained": [], "kept": 0, "decided": 1}
    assert measure.verdict_routing({"s": {"ttft_p99": kv}}, []) == "holds with qualification"
    assert measure.verdict_routing({"s": {"ttft_p99": kv}}, [("a", "b", 6.0, -2.0)]) == "does not hold"
    # a shown ordering by less than the materiality bound is not a conclusion
    near = _ds({("reserve", "a"): [100, 101, 102, 103], ("reserve", "b"): [102, 103, 104, 105],
                ("vllm", "a"): [100, 101, 102, 103], ("vllm", "b"): [102, 103, 104, 105]})
    assert measure.orderings(near, "ttft_p99", "reserve") == {("a", "b"): 0}
    assert measure.orderings(near, "ttft_p99", "reserve", material=0.0) == {("a", "b"): -1}
    same = measure.changes(_ds({("reserve", "a"): [1, 2, 3], ("reserve", "b"): [5, 6, 8],
                                ("vllm", "a"): [1, 2, 3], ("vllm", "b"): [5, 6, 8]}), "ttft_p99")
    assert same == {"reversed": [], "lost": [], "gained": [], "kept": 1, "decided": 1}
    assert measure.verdict_routing({"s": {"ttft_p99": same}}, []) == "holds"


def test_best_includes_the_policies_it_cannot_tell_apart():
    ds = _ds({("reserve", "a"): [10, 12, 11, 13], ("reserve", "b"): [11, 11, 12, 12], ("reserve", "c"): [30, 31, 32, 33],
              ("vllm", "a"): [10, 12, 11, 13], ("vllm", "b"): [11, 11, 12, 12], ("vllm", "c"): [30, 31, 32, 33]})
    assert measure.best(ds, "ttft_p99", "reserve") == ["a", "b"]


def _capacity_ds(reserve, vllm, low=34.0, high=52.0):
    pols = list(reserve)
    cap = np.array([[reserve[p] for p in pols], [vllm[p] for p in pols]], float)
    seed = np.repeat(cap[:, :, None], 4, axis=2)
    return xr.Dataset({"capacity_rps": (("scheduler", "policy"), cap),
                       "capacity_rps_seed": (("scheduler", "policy", "seed"), seed)},
                      coords={"scheduler": ["reserve", "vllm"], "policy": pols, "seed": [1, 2, 3, 4]},
                      attrs={"capacity_low": low, "capacity_high": high})


def test_capacity_orderings():
    # a above b by 6 under reserve, below it by 2 under vllm: reversed; c < low in both
    ds = _capacity_ds({"a": 46.0, "b": 40.0, "c": math.nan}, {"a": 44.0, "b": 46.0, "c": math.nan})
    assert measure.capacity_order_changes(ds, 2.0) == [("a", "b", 6.0, -2.0)]
    diff = measure.capacity_differences(ds)
    assert diff["a"][0] == -2.0 and diff["b"][0] == 6.0 and math.isnan(diff["c"][0])
    # a tie broken by one step is not a reversal
    ds = _capacity_ds({"a": 46.0, "b": 46.0}, {"a": 44.0, "b": 46.0})
    assert measure.capacity_order_changes(ds, 2.0) == []


def test_the_verdict_rules():
    diff = {("prefix_hit_rate", "a", 1): (-0.5, -0.8, -0.2), ("prefix_hit_rate", "b", 1): (-0.1, -0.4, 0.2),
            ("prefix_hit_rate", "c", 1): (-0.3, -0.5, -0.1)}
    assert measure.verdict_hits(diff) == "holds"
    diff[("prefix_hit_rate", "c", 1)] = (0.1, -0.1, 0.3)
    assert measure.verdict_hits(diff) == "holds with qualification"
    close = {("ttft_p99", "least_tokens", 34.0): (2.0, 0.0, 4.0), ("ttft_p99", "least_kv", 34.0): (9.0, 6.0, 12.0),
             ("ttft_p99", "least_tokens", 52.0): (30.0, 20.0, 40.0)}
    assert measure.verdict_close(close, [34.0]) == "holds"       # 52 req/s is not below capacity; least_kv reads blocks
    close[("itl_p99", "round_robin", 34.0)] = (-6.0, -8.0, -4.0)  # reaches inside ±5 %: undecided
    assert measure.verdict_close(close, [34.0]) == "holds with qualification"
    close[("itl_p99", "round_robin", 34.0)] = (-7.0, -9.0, -6.0)  # wholly beyond −5 %
    assert measure.verdict_close(close, [34.0]) == "does not hold"
    assert measure.closeness((0.0, -5.0, 5.0)) == "close" and measure.closeness((6.0, 5.5, 7.0)) == "differs"
    pre = _ds({("reserve", "a"): [0, 0, 0, 0], ("vllm", "a"): [0, 0, 0, 0],
               ("reserve", "b"): [1, 0, 2, 0], ("vllm", "b"): [3, 2, 4, 1]}, "preemptions")
    assert measure.verdict_preemptions(pre) == "holds"
    pre["preemptions"].loc[dict(scheduler="vllm", policy="b")] = [0, 0, 1, 0]
    assert measure.verdict_preemptions(pre) == "holds with qualification"
    pre["preemptions"][:] = 0
    assert measure.verdict_preemptions(pre) == "nothing to compare"


# ---------------------------------------------------------------------------------------
# The verdicts from reduced runs of the design
# ---------------------------------------------------------------------------------------

REDUCED_POLICIES = '["round_robin", "least_tokens", "least_kv"]'


def _reduced(tmp, name, replace):
    text = (SWEEPS / name).read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from dataclasses import replace

    from routesim.studies.scheduler_modes import design
    tmp = tmp_path_factory.mktemp("scheduler-modes")
    ex = _reduced(tmp, "scheduler-modes.toml", {
        "warmup_s = 300 ": "warmup_s = 30 ", "measure_s = 60\n": "measure_s = 30\n",
        'policy = ["round_robin", "random", "least_requests", "least_tokens", "least_kv", "least_cost",\n'
        '          "power_of_d", "prefix_affinity", "rate_weighted"]': f"policy = {REDUCED_POLICIES}"})
    mc = _reduced(tmp, "scheduler-modes-mooncake.toml", {
        '"../traces/': f'"{ROOT}/traces/', "measure_s = 360": "measure_s = 60", "count = 8 }": "count = 4 }"})
    search = replace(design.SEARCH, rounds=1)  # round 1 only: the stage's four loads
    return {"example": measure.prepare(design.run_example(ex, search)),
            "mooncake": measure.prepare(design.run_stage(mc))}


def test_reduced_runs_render(data, tmp_path):
    from routesim.studies.scheduler_modes import document, figure
    text = document.document(data)
    assert text.startswith("# What the vLLM scheduler and its asynchronous loop change, measured")
    assert "from `results/scheduler-modes/example.nc`" in text
    assert "from `elsewhere/modes/example.nc`" in document.document(data, Path("elsewhere/modes"))
    assert "| P4. no routing conclusion changes |" in text and "| P5. async raises TTFT, most at the tail |" in text
    assert list(data["example"].scheduler.values) == list(measure.SCHEDULERS)
    paths = figure.figure(data, tmp_path, 2.0, 40.0)
    assert all(p.exists() and p.stat().st_size > 10_000 for p in paths)


def test_verdicts_from_reduced_runs(data):
    from routesim.studies.scheduler_modes import document
    f = document.findings(data)
    assert f["P1"] == "holds"
    assert f["P2_mooncake"] == "does not hold"
    mc = data["mooncake"]
    d = measure.per_seed_difference(mc, "preemptions").sel(policy="prefix_affinity")
    assert bool((d < 0).all())                                    # fewer under vllm, every seed


@pytest.mark.xfail(strict=True, reason="issue 40: under vLLM's asynchronous loop (the vllm mode's default) the "
                   "reduced runs give P4 'holds' where the synchronous loop gave 'holds with qualification', and "
                   "the full design's P4 reverses least_tokens and power_of_d, neither a KV reader: the reduced "
                   "design no longer stands for the full one (docs/scheduler-modes.md says so)")
def test_p4_from_reduced_runs(data):
    from routesim.studies.scheduler_modes import document
    f = document.findings(data)
    assert f["P4"] == "holds with qualification"
    reversed_pairs = document._reversed_pairs(f)
    assert reversed_pairs and all(a in measure.KV_READERS or b in measure.KV_READERS
                                  for _, _, a, b, _ in reversed_pairs)


def test_p5_from_reduced_runs(data):
    """P5 (the asynchronous loop raises TTFT most at the tail) was written from vLLM's loop:
    a request that arrives during a step joins one step later. The full design found the
    one step paid at the median instead (TTFT p50 up 9-40 % below capacity, more than the
    p99 in most cells: "does not hold"); the mechanism says so at any load where requests
    find room: every request that arrives while its replica steps waits one step more, a
    larger share of a short TTFT than of a queued one. At the reduced design's lowest
    load the median rises under vllm for every policy, and by more than the tail."""
    from routesim.studies.scheduler_modes import document
    f = document.findings(data)
    assert f["P5"] == "does not hold"
    d = f["diff_loop_example"]
    low = min(f["rates"])
    for p in map(str, data["example"].policy.values):
        p50, p99 = d[("ttft_p50", p, low)], d[("ttft_p99", p, low)]
        assert measure.excludes_zero(p50) > 0 and p50[0] > p99[0], (p, p50, p99)
