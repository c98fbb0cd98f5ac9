"""Prefill/decode disaggregation in the compiled engine against the reference
(tests/token_reference.py ``_Sim.pd_*``, the specification), run by run (issue 42;
docs/model.md "Prefill/decode disaggregation").

Every case declares pools (2 prefill and 3 decode replicas unless said otherwise) and is
compared as test_token_engine_vs_reference compares the co-located cases — counts
exactly, floats within 1e-9 relative, per-replica vectors element by element — and on
the disaggregation's own metrics: the TTFT's four parts, the transfers (count, bytes),
each replica's link utilisation and the selective rule's share of pairs. The cases
cover the three pair rules, every policy (for the independent rule; the others with a
sample), different policies for the two pools, chunked and unchunked prefill, a KV
pool small enough that decode-side allocations wait for blocks, a slow link that
transfers queue on, stale signals (periodic and periodic_local with several routers),
heterogeneous replicas and a slowdown; and a hypothesis property test on random small
disaggregated clusters (test_token_pipeline's, with pools). Crashes, fast failures, timeouts, the front door
and the closed loop are refused with pools (pd_keys.check_stage), so no case has them.
"""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import test_token_engine_vs_reference as tv
import test_token_pipeline as tp
import token_reference as ref
from registered import POLICIES
from routesim.batching import runs as br
from routesim.batching.workload import generate

PD = dict(tv.SHORT, prefill_replicas=2, decode_replicas=3, link_bandwidth_gb_s=0.5, kv_bytes_per_token=2000,
          prefix_groups=4)
"""Two prefill and three decode replicas; a 0.5 GB/s link and 2,000 KV bytes a token:
a 300-token prompt takes 1 + 1.2 ms alone, so transfers overlap at these rates."""
FACTORS = [1.0, 1.5, 1.0, 1.0, 2.0]

# name: (parameter overrides, rate req/s, time factors, events)
CASES = {
    "pd-independent": (dict(PD), 12.0, FACTORS, []),
    "pd-selective": (dict(PD, pair_route="selective", threshold_tokens=200), 12.0, FACTORS, []),
    "pd-transfer-aware": (dict(PD, pair_route="transfer_aware"), 12.0, FACTORS, []),
    # decode-side allocations wait for blocks; a slow link (0.05 GB/s: 12 ms for 300 tokens)
    "pd-tight": (dict(PD, kv_blocks=500, max_batch=8, link_bandwidth_gb_s=0.05, link_latency_ms=2.0), 16.0,
                 FACTORS, []),
    "pd-unchunked": (dict(PD, chunked_prefill=False, max_batched_tokens=4096, prefix_probability=0.0), 12.0,
                     FACTORS, [(1500.0, "slowdown", 3, 2.0), (3000.0, "slowdown", 3, 1.0)]),
    "pd-pool-policies": (dict(PD, prefill_policy="least_tokens", decode_policy="least_kv", pair_route="selective",
                              threshold_tokens=120), 12.0, FACTORS, []),
    "pd-periodic-local": (dict(PD, signal_mode="periodic_local", period_ms=50.0, routers=2,
                               pair_route="transfer_aware"), 14.0, FACTORS, []),
    "pd-periodic-1-3": (dict(PD, prefill_replicas=1, signal_mode="periodic", period_ms=20.0), 10.0,
                        [1.0, 1.0, 1.0, 1.0], []),
}
PD_FLOATS = ("ttft_prefill_queue_p50", "ttft_prefill_queue_p99", "ttft_prefill_p50", "ttft_prefill_p99",
             "ttft_transfer_p50", "ttft_transfer_p99", "ttft_decode_queue_p50", "ttft_decode_queue_p99",
             "transfer_bytes", "disaggregated_share")


def _compare(case, policy, seed):
    """The engine and the reference on one case, policy and seed: every difference
    listed; returns the reference's results."""
    wl, values, factors, events = tv._case(case, seed, CASES)   # (never added to tv.CASES: its tests read them all)
    got, rep = tv._engine(wl, values, factors, events, policy, seed)
    want = ref.simulate(tv._reference_workload(wl), values, factors, events, policy, seed, check=False)
    bad = _differences(got, rep, want)
    assert not bad, f"{case} {policy} seed {seed}:\n" + "\n".join(bad)
    return want


def _differences(got, rep, want):
    """Every metric on which the engine's run (``got`` METRICS, ``rep`` its REPLICA
    records) and the reference's (``want``) differ."""
    bad = []
    for name in (*tv.COUNTS, "transfer_count"):
        if int(got[name]) != want[name]:
            bad.append(f"{name}: engine {got[name]} reference {want[name]}")
    for name in (*tv.FLOATS, *PD_FLOATS):
        if not tv._close(float(got[name]), float(want[name])):
            bad.append(f"{name}: engine {got[name]!r} reference {want[name]!r}")
    for name, field in tv.VECTORS.items():
        if list(rep[field]) != list(want[name]):
            bad.append(f"{name}: engine {list(rep[field])} reference {list(want[name])}")
    for name, field in (*tv.FLOAT_VECTORS.items(), ("link_utilization", "link_util")):
        if not all(tv._close(float(x), float(y)) for x, y in zip(rep[field], want[name], strict=True)):
            bad.append(f"{name}: engine {list(rep[field])} reference {list(want[name])}")
    return bad


@pytest.mark.parametrize("policy", POLICIES)
def test_independent_pairs_match_the_reference(policy):
    for seed in (1, 2):
        _compare("pd-independent", policy, seed)


SAMPLE = ("round_robin", "least_tokens", "power_of_d", "prefix_affinity")
"""The policies the other cases run with (every policy runs the independent case)."""


@pytest.mark.parametrize("policy", SAMPLE)
@pytest.mark.parametrize("case", [c for c in CASES if c != "pd-independent"])
def test_pd_cases_match_the_reference(case, policy):
    _compare(case, policy, 1)


def test_the_pd_cases_exercise_what_they_claim():
    """From the reference's own results: every case disaggregates and transfers; the
    selective rule serves some prompts whole on a decode replica and pairs others; in
    the tight case allocations wait (a decode queue beyond the one-token step) and
    transfers share links (a transfer's p99 above its time alone); the four TTFT parts
    are non-negative; every cohort request has exactly one outcome."""
    seen = {case: _compare(case, "least_tokens", 1) for case in CASES}
    for case, out in seen.items():
        assert out["transfer_count"] > 0 and out["completed"] > 0, case
        assert out["arrivals"] == sum(out[k] for k in ("completed", "failed", "rejected", "shed", "unfinished"))
        for part in ("prefill_queue", "prefill", "transfer", "decode_queue"):
            assert out[f"ttft_{part}_p50"] >= 0, (case, part)
    assert 0 < seen["pd-selective"]["disaggregated_share"] < 1
    assert seen["pd-independent"]["disaggregated_share"] == 1
    tight = seen["pd-tight"]
    alone = 2.0 + 300 * 2000 / (0.05 * 1e6)  # latency + a median prompt's bytes / B
    assert tight["ttft_transfer_p99"] > alone
    assert tight["ttft_decode_queue_p99"] > 2 * tight["ttft_decode_queue_p50"]


@st.composite
def small_pd_cluster(draw):
    """A random small disaggregated cluster (2 to 5 replicas, any split), any pair rule
    and any policy for each pool, on test_token_pipeline's tiny workload: small KV
    pools (allocations wait, sequences are preempted), small batches and waiting caps
    (sheds), chunked or not, any drain, a slowdown, a slow or fast link."""
    b = draw(st.sampled_from([4, 8, 16]))
    fit = -(-tp.LARGEST // b)  # the smallest pool that holds the largest request
    n = draw(st.integers(2, 5))
    values = ref.defaults()
    values.update(tp.TINY)
    values.update(
        block_tokens=b,
        kv_blocks=draw(st.one_of(st.just(fit), st.integers(fit, 2 * fit), st.integers(fit, 2500))),
        max_batch=draw(st.integers(1, 8)),
        waiting_cap=draw(st.integers(1, 6)),
        chunked_prefill=draw(st.booleans()),
        max_batched_tokens=draw(st.integers(64, 4096)),
        prefix_probability=draw(st.sampled_from([0.0, 0.5, 0.9])),
        choices=draw(st.integers(1, 3)),
        drain_s=draw(st.sampled_from([0.0, 0.3, 600.0])),
        allowance_tokens=draw(st.sampled_from([256, 16, "exact"])),
        prefill_replicas=(n_p := draw(st.integers(1, n - 1))),
        decode_replicas=n - n_p,
        pair_route=draw(st.sampled_from(["independent", "selective", "transfer_aware"])),
        threshold_tokens=draw(st.sampled_from([0, 30, 200])),
        prefill_policy=draw(st.sampled_from(["same", *POLICIES])),
        decode_policy=draw(st.sampled_from(["same", *POLICIES])),
        link_latency_ms=draw(st.sampled_from([0.0, 0.5, 3.0])),
        link_bandwidth_gb_s=draw(st.sampled_from([0.01, 0.1, 50.0])),
        kv_bytes_per_token=draw(st.sampled_from([1000, 131072])),
    )
    factors = draw(st.lists(st.sampled_from([0.5, 1.0, 1.5, 3.0]), min_size=n, max_size=n))
    events = []
    if draw(st.booleans()):
        events.append((draw(st.sampled_from([0.0, 1500.0, 2500.0])), "slowdown", draw(st.integers(0, n - 1)),
                       draw(st.sampled_from([0.5, 2.0, 4.0]))))
    return values, factors, events, draw(st.sampled_from(POLICIES)), draw(st.sampled_from([5, 20, 40, 80])), \
        draw(st.integers(1, 10_000))


# no shrinking phase (as test_token_pipeline's): the failing example is printed as drawn
@settings(max_examples=15, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=small_pd_cluster())
def test_random_small_pd_clusters_keep_the_books_and_match_the_reference(case):
    """The engine on a random small disaggregated cluster: every cohort request in one
    outcome, and every metric the reference's (its invariants checked at every step on
    the small pools: held, receiving and transferred blocks included)."""
    values, factors, events, policy, rate, seed = case
    horizon = (values["warmup_s"] + values["measure_s"]) * 1000.0
    wl = generate(seed, float(rate), (), horizon, br.workload_params(values))
    got, rep = tv._engine(wl, values, factors, events, policy, seed)
    assert got["arrivals"] == sum(int(got[k]) for k in ("completed", "failed", "rejected", "shed", "unfinished"))
    small_pool = values["kv_blocks"] * values["block_tokens"] <= 4 * tp.LARGEST
    want = ref.simulate(tv._reference_workload(wl), values, factors, events, policy, seed, check=small_pool)
    bad = _differences(got, rep, want)
    assert not bad, f"{policy} seed {seed} rate {rate} factors {factors} events {events} {values}:\n" + "\n".join(bad)


def test_the_example_sweep_prints_the_pd_columns(tmp_path, monkeypatch, capsys):
    """sweeps/disaggregation.toml (shrunk to a 2 s warm-up, 4 s window and one seed)
    through the command line in process: its co-located stage's table and Dataset are
    a co-located one's (no disaggregation column or variable), each split's table adds
    the TTFT's parts, the transfers, the link and the pairs, and its Dataset holds them
    with their units; every transfer takes at least the link's 1 ms latency, and with
    the independent rule every placement is a pair."""
    import xarray as xr

    from routesim.batching.metrics import PD_PER_REPLICA, PD_VARIABLES
    from routesim.batching.summary import PD_HEADERS
    from routesim.sweep import main

    text = (Path(__file__).parents[1] / "sweeps" / "disaggregation.toml").read_text()
    for old, new in (("warmup_s = 30 ", "warmup_s = 2 "), ("measure_s = 60", "measure_s = 4"),
                     ("count = 4", "count = 1")):
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "pd.toml"
    path.write_text(text)
    monkeypatch.chdir(tmp_path)
    assert main([str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    out = capsys.readouterr().out
    tables = out.split("stage ")[1:]
    assert [t.split(":")[0] for t in tables] == ["co-located", "1", "2", "3"]  # "1:3", "2:2", "3:1"
    assert not any(h in tables[0] for h in PD_HEADERS)
    for table in tables[1:]:
        assert all(h in table for h in PD_HEADERS)
    colocated = xr.open_dataset(tmp_path / "out" / "co-located.nc")
    assert not set(PD_VARIABLES) & set(colocated.data_vars) and "link_utilization" not in colocated
    for name in ("1:3", "2:2", "3:1"):
        ds = xr.open_dataset(tmp_path / "out" / f"{name}.nc")
        for var in (*PD_VARIABLES, *PD_PER_REPLICA):
            assert var in ds and ds[var].attrs["units"], (name, var)
        assert (ds.transfer_count > 0).all() and (ds.ttft_transfer_p50 >= 1.0).all()
        assert (ds.disaggregated_share == 1.0).all()
        assert ds.link_utilization.dims[-1] == "replica"
