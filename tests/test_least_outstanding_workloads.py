"""The least-outstanding study on real workloads (issue 44 item 4;
routesim/studies/least_outstanding/workloads.py): the verdict table's column "on Azure
lengths" on hand-built Datasets whose answer follows from the rule (a flip gives "does not
hold" and says the verdict changes), and each claim's Azure-length arm recomputed from a
reduced run of its own stages (the claims' sweep files: 4 seeds, a shorter warm-up and
window), read by the claim's own ``load`` and ``azure``, each test able to fail: the
direction the full arm found, or the contrary of the default workload's where the arm
reverses it."""

import numpy as np
import pytest

from conftest import SWEEPS, run_reduced, swap_labels, write_results
from routesim.studies.least_outstanding import (admission, cold_start, counts, learning, retries, staleness,
                                                workloads)
from routesim.studies.least_outstanding.common import verdict_cells, verdicts
from test_least_outstanding_counts import hand_built

AZURE = f'"{SWEEPS.parent / "traces" / "azure-conv.csv"}"'
"""The Azure trace's absolute path (a reduced sweep is written outside sweeps/)."""


def cells_of(d):
    return verdict_cells(verdicts(counts.clauses(d)), counts.ADDED_WORDS)


def test_the_column_says_when_azure_lengths_change_a_verdict(tmp_path):
    # the page's workload: least_tokens 20 % lower TTFT p99 at every load, TPOT 10 % higher
    # at 23 req/s: the mechanism holds, the added clauses do not
    page = hand_built(ttft={r: 0.8 for r in (23.0, 35.0, 41.0)}, tpot={23.0: 1.1})
    data = {"root": tmp_path, "counts": page}
    mech, added = cells_of(data)
    assert (mech, added.split(":")[0]) == ("holds", "does not hold")
    # no Azure stage: the column says so
    assert workloads.column(counts, data, (mech, added)) == "not run: the stages have not run"
    # an Azure arm with the same effects: no change
    same = dict(data, azure=page)
    assert workloads.column(counts, same, (mech, added)) == "holds; does not hold — no change"
    # an Azure arm where least_tokens' and round_robin's runs are exchanged: least_tokens'
    # TTFT p99 25 % above round_robin's (1 / 0.8), against the prediction: the mechanism
    # does not hold, and the column says it changed
    flipped = dict(data, azure=swap_labels(page, "policy", "least_tokens", "round_robin"))
    cell = workloads.column(counts, flipped, (mech, added))
    assert cell.startswith("does not hold; holds with qualification — **changes** (mechanism, added)"), cell


def test_a_claim_that_cannot_run_says_why(tmp_path):
    class Claim:
        AZURE_WHY = "its mechanism needs a long class"
        ADDED_WORDS = ""

        @staticmethod
        def azure(data):
            return None
    assert workloads.column(Claim, {}, ("holds", "none added")) == "not run: its mechanism needs a long class"
    assert workloads.why_not(staleness, "mooncake") == staleness.MOONCAKE_WHY


def test_the_loads_are_named_against_the_azure_capacity():
    import xarray as xr
    cap = xr.Dataset({"capacity_rps": ("policy", [104.0, 100.0])}, coords={"policy": ["round_robin", "least_tokens"]})
    ds = xr.Dataset({"assigned": (("rate_rps", "replica"), np.ones((2, 8)))},
                    coords={"rate_rps": [50.0, 90.0], "replica": np.arange(1, 9)})
    one = xr.Dataset({"assigned": ("seed", np.ones(4))}, attrs={"rate_rps": 25.0})   # one replica: not a load
    assert workloads.rates({"tie": ds, "held": one}) == [50.0, 90.0]
    assert workloads.placed(counts, {"counts": ds}, {"capacity": cap}) == (
        "50, 90 req/s: 0.50, 0.90 × least_tokens' 100 on these lengths")


def test_claim5_says_when_its_cache_never_fills_on_azure_lengths():
    import xarray as xr
    from routesim.studies.least_outstanding import preemption
    pols = list(preemption.POLICIES)
    calm = xr.Dataset({"preemptions": (("policy", "seed"), np.zeros((4, 4))),
                       "placement_occupancy_high": (("policy", "seed"), np.zeros((4, 4))),
                       "kv_occupancy": (("policy", "seed"), np.full((4, 4), 0.5))},
                      coords={"policy": pols, "seed": np.arange(1, 5)})
    assert preemption.azure_note({"azure": calm}).startswith("Claim 5's caches on Azure lengths stay near 50 % full")
    # one preemption in one run: the mechanism had something to act on, no note
    busy = calm.copy(deep=True)
    busy["preemptions"][0, 0] = 1
    assert preemption.azure_note({"azure": busy}) == ""
    assert preemption.azure_note({}) == ""


REDUCE = {"count = 16 }": "count = 4 }", '"../traces/azure-conv.csv"': AZURE}


def reduced(tmp_path, name, stages, replace=None):
    """Run ``stages`` of sweeps/``name``.toml reduced (4 seeds, the Azure trace's
    absolute path, ``replace``) and write them under a results root; returns the root."""
    out = run_reduced(tmp_path, SWEEPS / f"{name}.toml", {**REDUCE, **(replace or {})}, stages=stages)
    return write_results(tmp_path / "results", out)


@pytest.fixture(scope="module")
def counts_root(tmp_path_factory):
    """Claim 1's main design at 41 req/s and its Azure arm at 90 req/s (0.9 × the Azure
    capacity), 60 s of warm-up and a 20 s window."""
    return reduced(tmp_path_factory.mktemp("w-counts"), "token-routing", ["counts", "azure"],
                   {"rate_rps = [23, 35, 41]": "rate_rps = [41]", "rate_rps = [41, 90]": "rate_rps = [90]",
                    "warmup_s = 1200": "warmup_s = 60", "warmup_s = 300": "warmup_s = 60",
                    "measure_s = 60": "measure_s = 20"})


def test_claim1_on_azure_lengths_round_robin_leads(counts_root):
    d = counts.load(counts_root)
    a = counts.azure(d)
    assert a is not None and list(a["counts"].rate_rps.values) == [90.0]
    # the full arm: least_tokens' TTFT p99 +30 % against round_robin's at 90 req/s, a lead
    # against the prediction (the default workload's is -84 % at 41): the mechanism does
    # not hold on Azure lengths, and the column says it changed
    c = counts.comparisons(counts.condition(d, "azure", 90))[("ttft_p99", "round_robin")]
    assert c[3] == +1, c
    v = verdicts(counts.clauses(a))
    assert v["mechanism"] == "does not hold"
    assert "**changes** (mechanism" in workloads.column(counts, d, cells_of(d))


def test_claim3_on_azure_lengths_the_global_minimum_herds(tmp_path):
    root = reduced(tmp_path, "token-routing-staleness", ["fresh", "periodic", "local", "routers", "azure",
                                                          "azure-routers"],
                   {"warmup_s = 1200": "warmup_s = 100", "warmup_s = 300": "warmup_s = 100",
                    "measure_s = 60": "measure_s = 20", "period_ms = [10, 50, 100]": "period_ms = [50]"})
    a = staleness.azure(staleness.load(root))
    c = staleness.comparisons(a)
    # the full arm: least_tokens' TTFT p99 +82 % at a 50 ms scrape against fresh, power of
    # two's degradation 40 % below it
    assert c["least_tokens at 50 ms vs fresh"][0][3] == +1
    assert c["power_of_d's degradation vs least_tokens' at 50 ms"][0][3] == -1
    assert verdicts(staleness.clauses(a))["mechanism"] == "holds"


def test_claim6_on_azure_lengths_the_recovered_replica_is_flooded(tmp_path):
    stages = list(cold_start.STAGES) + list(cold_start.AZURE.values())
    root = reduced(tmp_path, "token-routing-cold", stages,
                   {"warmup_s = 1200": "warmup_s = 80", "warmup_s = 1202": "warmup_s = 82",
                    "warmup_s = 1135": "warmup_s = 60", "at_s = 1200": "at_s = 80",
                    "warmup_s = 300": "warmup_s = 80", "warmup_s = 302": "warmup_s = 82", "at_s = 300": "at_s = 80"})
    a = cold_start.azure(cold_start.load(root))
    c = cold_start.comparisons(a)
    # the full arm: its first-second share +72 pp above the fair 12.5 %, its TTFT p99 far
    # above the warm replicas'
    assert c["flood"][0][3] == +1 and c["hurt"][0][3] == +1, c
    # exchanging the cold replica's share with the fair share's sign: a share below fair
    # goes the other way
    flood = a["flood"].copy()
    flood["assigned"] = flood.assigned.where(flood.replica != cold_start.cold_replica(flood), 0)
    assert cold_start.comparisons(dict(a, flood=flood))["flood"][0][3] == -1


def test_claim7_on_azure_lengths_the_breaker_contains_a_black_hole(tmp_path):
    stages = [retries.AZURE + s for s in retries.STAGES]
    root = reduced(tmp_path, "token-routing-retry", list(retries.STAGES) + stages,
                   {"warmup_s = 1200": "warmup_s = 200", "warmup_s = 1260": "warmup_s = 260",
                    "at_s = 1200": "at_s = 200", "at_s = 1230": "at_s = 230", "at_s = 1210": "at_s = 210",
                    "at_s = 1240": "at_s = 240"})
    a = retries.azure(retries.load(root))
    assert set(a["crash-a"].scenario.values) == {"none", "crash"}
    c = retries.comparisons(a)
    # the full arm: breaker + retry_avoid_previous +44 pp of attainment in the black hole,
    # the crash raising attempts per request
    assert c["contain"][0][3] == +1 and c["amplify-a"][0][0] > 0, c


def test_claim8_on_azure_lengths_rate_weighted_under_learns(tmp_path):
    root = reduced(tmp_path, "token-routing-hetero", ["hetero", "azure"],
                   {"warmup_s = 1200": "warmup_s = 300", "rate_rps = [35, 41]": "rate_rps = [41]"})
    ds = learning.load(root)
    a = learning.azure(ds)
    assert a is not None and list(a.rate_rps.values) == [93.0]
    # the full arm: rate_weighted's fast-replica share 2 pp below its capacity share at
    # 93 req/s, as on the default workload: the claim does not hold
    c = learning.comparisons(a)
    assert all(v[0][0] < 0 for (k, r), v in c.items() if k == "over"), c
    assert verdicts(learning.clauses(a))["mechanism"] == "does not hold"
    # the study draws its figures in worker processes, each claim's data pickled: the
    # real-workloads data too (it held the claims' modules, and the study command failed)
    import pickle

    from routesim.studies import least_outstanding as study
    azure_capacity(root)
    loaded = dict((claim.__name__, data) for claim, data in study._loaded(root / "token-routing"))
    assert workloads.__name__ in loaded and learning.__name__ in loaded
    for data in loaded.values():
        pickle.dumps(data)


def capacity_stand_in(path, c, policy="least_tokens"):
    """A stand-in for a capacity search's file at ``path`` (the search is
    routesim.capacity's, tested there): ``policy``'s capacity ``c`` req/s on every one of
    4 seeds."""
    import xarray as xr
    from routesim.results import write_atomic
    ds = xr.Dataset({"capacity_rps": ("policy", [c]), "capacity_rps_seed": (("policy", "seed"), [[c] * 4])},
                    coords={"policy": [policy], "seed": np.arange(1, 5)})
    write_atomic(ds, path)


def azure_capacity(root, c=100.0):
    """The Azure capacity search's stand-in under ``root``: least_tokens at ``c`` req/s."""
    capacity_stand_in(root / "token-routing-capacity" / "azure-capacity.nc", c)


def reduced_doors(tmp_path, prefix, replace, cap):
    """Claim 9's arm of stages ``<prefix><stage>`` reduced by ``replace`` (every edit of the
    sweep text), beside the main design's: its one-replica stage ``<prefix>held`` first,
    the threshold from that curve (:func:`admission.threshold`), then its doors at that
    threshold (the sweep's ``admission_max_tokens = [cap]`` of the arm replaced by it).
    Returns (the results root, the threshold)."""
    text = SWEEPS / "token-routing-admission.toml"
    held = run_reduced(tmp_path, text, replace, stages=[prefix + "held"])
    x = admission.threshold(admission.prepare(held)[prefix + "held"])
    stages = list(admission.STAGES) + [prefix + s for s in admission.STAGES if s not in ("rates", "held")]
    out = run_reduced(tmp_path, text, {**replace, f"admission_max_tokens = [{cap}]": f"admission_max_tokens = [{x:.0f}]"},
                      stages=stages)
    root = write_results(tmp_path / "results", out)
    write_results(root, held)
    return root, x


def test_claim9_on_azure_lengths_refusing_raises_goodput(tmp_path):
    """The threshold recomputed from the arm's own one-replica curve (200,000 tokens in
    the full arm) and its doors run at it, at 80 and 209 req/s (0.80 and 2.09 × the Azure
    capacity), the burst at 100 s; the main design's stages reduced beside it (the
    claim's ``load`` reads both)."""
    short = {"warmup_s = 1200": "warmup_s = 100", "warmup_s = 300": "warmup_s = 100",
             "at_s = 1200": "at_s = 100", "at_s = 1230": "at_s = 130", "at_s = 300": "at_s = 100",
             "at_s = 330": "at_s = 130", "rate_rps = [35, 46, 58, 69, 92]": "rate_rps = [35, 92]",
             "rate_rps = [80, 105, 209]": "rate_rps = [80, 209]",
             "rate_rps = [2, 3, 4, 4.5, 5, 5.5, 6, 6.5, 7, 8, 10, 12]": "rate_rps = [3]"}
    root, _ = reduced_doors(tmp_path, admission.AZURE, {**REDUCE, **short}, 200000)
    azure_capacity(root)
    a = admission.azure(admission.load(root))
    assert admission.loads(a)[1:] == ([209.0], 80.0)        # beyond the Azure capacity, and at or below it
    c = admission.comparisons(a)
    # the full arm: refusing at the door +103 req/s of goodput against no door at 209
    # req/s, no door's goodput falling from 80 to 209 req/s
    assert c["reject@209"][0][3] == +1 and c["falls"][0][3] == -1, c
    assert verdicts(admission.clauses(a))["mechanism"] == "holds"
