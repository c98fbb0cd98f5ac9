"""A batching sweep through the shared pipeline (token-interface.md): ``routesim.run``
and ``python -m routesim.sweep`` give one Dataset per stage with every variable of the
results table, the bookkeeping of token-model.md §7 holds on every run, the results do
not depend on repeats, threads, chunk sizes, ``--resume`` or a Dask cluster, and a
hypothesis property test holds the engine to the naive reference on random small
clusters and pools.
"""

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

import routesim
import token_reference as ref
from routesim import batch, cluster
from routesim.batching import runs as br
from routesim.batching.workload import generate
from registered import POLICIES
from routesim.sweep import main
from routesim.arrivals import router_stream

ROOT = Path(__file__).resolve().parents[1]


PIPE = """\
name = "tokpipe"

[replica]
kind = "batching"
waiting_cap = 6
max_batch = 8
kv_blocks = 768
max_batched_tokens = 1024

[simulation]
warmup_s = 1
measure_s = 4

[cluster.heterogeneity]
uniform = [1, 1, 1]
mixed = [1, 1.5, 0.8]

[workload]
p_long = 0.05
chat = { prompt = { median = 300, sigma = 0.8, min = 16, max = 2048 }, output = { median = 40, sigma = 0.8, min = 1, max = 256 } }
long = { prompt = { median = 3000, sigma = 0.4, min = 2048, max = 6000 }, output = { median = 300, sigma = 0.5, min = 64, max = 1024 } }
prefix = { probability = 0.6, groups = 4, zipf = 1.1, tokens = 512 }
context_limit = 8192

[scenarios.steady]
events = []
[scenarios.surge]
events = [{ at_s = 2, rate_multiplier = 2.5 }, { at_s = 3, replica = 2, slowdown = 2.0 }]

[grid]
rate_rps = [4, 14]
heterogeneity = ["uniform", "mixed"]
scenario = ["steady", "surge"]

[[stages]]
name = "policies"
policy = {policies}
drain_s = 0          # stop at the horizon: the surge leaves requests unfinished (the "batch" stage drains)
seeds = { first = 1, count = 2 }

[[stages]]
name = "batch"
policy = ["least_tokens", "power_of_d"]
max_batch = [4, 256]
rate_rps = [14]
heterogeneity = ["uniform"]
seeds = [3]
""".replace("{policies}", "[" + ", ".join(f'"{p}"' for p in POLICIES) + "]")  # every registered policy
"""Three replicas, small queues and a small pool (768 blocks of 16 tokens: the largest
request, 512 + 6000 + 1024 = 7536 tokens, fits), a surge that sheds; the second stage
sweeps max_batch. policies: 9 × 2 × 2 × 2 × 2 = 144 runs; batch: 2 × 2 × 2 = 8 runs."""

DIMS = ("policy", "rate_rps", "heterogeneity", "scenario", "seed")

# token-interface.md, "Results": variable -> units
UNITS = {
    **dict.fromkeys(("arrivals", "completed", "failed", "rejected", "shed", "unfinished"), "requests"),
    **dict.fromkeys(("ttft_p50", "ttft_p90", "ttft_p99"), "ms"),
    **dict.fromkeys(("tpot_p50", "tpot_p90", "tpot_p99"), "ms"),
    **dict.fromkeys(("e2e_p50", "e2e_p90", "e2e_p99", "e2e_mean"), "ms"),
    "attainment": "1",
    "goodput": "requests/s", "throughput": "requests/s",
    "token_throughput": "tokens/s",
    "wasted_tokens": "tokens",
    "preemptions": "count", "breaker_ejections": "count",
    "prefix_hit_rate": "1", "kv_occupancy": "1",
    "batch_mean": "sequences",
    "attempts": "attempts", "retries": "attempts",
    "assigned": "requests", "replica_completed": "requests",
    "replica_tokens": "tokens",
}
PER_REPLICA = ("assigned", "replica_completed", "replica_tokens")


def sweep():
    return routesim.parse_sweep(PIPE, "tokpipe.toml")


@pytest.fixture(scope="module")
def in_process():
    """Both stages in process, default chunk size: what every other way must reproduce."""
    return routesim.run(sweep(), show_progress=False)


def assert_same(results, reference):
    assert list(results) == list(reference)
    for name, ds in reference.items():
        xr.testing.assert_identical(results[name], ds)


def assert_token_invariants(ds, max_batch):
    """token-model.md §7 on every run of a batching Dataset whose sweep has no failures,
    retries, timeouts or front door (max_attempts = 1, admission off)."""
    counts = ("arrivals", "completed", "failed", "rejected", "shed", "unfinished", "preemptions",
              "attempts", "retries", "wasted_tokens", "breaker_ejections")
    for name in counts + PER_REPLICA:
        assert (ds[name] >= 0).all(), name
    lost = ds.arrivals - (ds.completed + ds.failed + ds.rejected + ds.shed + ds.unfinished)
    assert (lost == 0).all(), "arrivals = completed + failed + rejected + shed + unfinished"
    # nothing can fail or be turned away at the front door, no attempt is retried or cancelled
    for name in ("failed", "rejected", "retries", "wasted_tokens", "breaker_ejections"):
        assert (ds[name] == 0).all(), name
    # one attempt per routed request, routed at its arrival: every cohort request but the
    # shed ones is one attempt, routed in [warm-up, horizon), so assigned counts it too
    assert (ds.attempts == ds.arrivals - ds.shed).all()
    assert (ds.assigned.sum("replica") == ds.attempts).all()
    # without a drain a cohort completion is a completion in (warm-up, horizon], which
    # throughput counts (with one, cohort requests may complete after the horizon)
    measure = ds.attrs["measure_s"]
    done = ds.throughput * measure
    if ds.attrs.get("drain_s", 600.0) == 0:
        assert (ds.completed <= done + 1e-9 * done).all()
    assert (ds.replica_completed.sum("replica") == done.round()).all()
    assert np.allclose(done, done.round(), rtol=1e-12, atol=0)
    tokens = ds.token_throughput * measure
    assert (ds.replica_tokens.sum("replica") == tokens.round()).all()
    assert (ds.replica_tokens.sum("replica") >= ds.replica_completed.sum("replica")).all()
    # goodput: the SLO-meeting cohort completions, at most the completions
    good = ds.goodput * measure
    assert (good <= ds.completed + 1e-9 * good).all()
    assert np.allclose(ds.attainment * ds.arrivals, good, rtol=1e-9, atol=1e-9)
    assert ((ds.attainment >= 0) & (ds.attainment <= 1)).all()
    # percentiles: ordered; defined exactly when a cohort request completed
    completed = ds.completed > 0
    for m in ("ttft", "e2e"):
        p50, p90, p99 = (ds[f"{m}_p{q}"] for q in (50, 90, 99))
        assert p50.where(~completed).isnull().all() and p99.where(~completed).isnull().all()
        assert p99.where(completed).notnull().sum() == completed.sum()
        assert ((p50 <= p90) & (p90 <= p99)).where(completed, True).all(), m
        assert (p50 > 0).where(completed, True).all()
    assert ds.e2e_mean.where(~completed).isnull().all()
    # per request TTFT <= end-to-end, so each order statistic of one is <= the other's
    for q in (50, 90, 99):
        assert (ds[f"ttft_p{q}"] <= ds[f"e2e_p{q}"]).where(completed, True).all()
    tp = [ds[f"tpot_p{q}"] for q in (50, 90, 99)]
    has_tpot = tp[0].notnull()
    assert (has_tpot <= completed).all()
    assert ((tp[0] <= tp[1]) & (tp[1] <= tp[2])).where(has_tpot, True).all()
    assert (tp[0] >= 0).where(has_tpot, True).all()
    # KV occupancy and batch sizes
    assert ((ds.kv_occupancy >= 0) & (ds.kv_occupancy <= 1)).all()
    assert ((ds.prefix_hit_rate >= 0) & (ds.prefix_hit_rate <= 1)).where(ds.prefix_hit_rate.notnull(), True).all()
    # (batch_mean is a ratio of float sums: max_batch exactly, up to rounding, when every iteration is full)
    assert ((ds.batch_mean >= 0) & (ds.batch_mean <= max_batch * (1 + 1e-12))).where(ds.batch_mean.notnull(), True).all()
    # in system at the horizon, per replica: at most waiting_cap never admitted, and the
    # admitted ones (running or preempted) never exceed max_batch
    n = ds.sizes["replica"]
    assert (ds.unfinished <= n * (ds.attrs["waiting_cap"] + max_batch)).all()


def _max_batch(ds):
    return ds.max_batch if "max_batch" in ds.dims else ds.attrs["max_batch"]


# --- the Dataset ------------------------------------------------------------------------

def test_dataset_has_every_variable_with_units_and_dimensions(in_process):
    assert list(in_process) == ["policies", "batch"]
    for name, ds in in_process.items():
        dims = DIMS + (("max_batch",) if name == "batch" else ())
        for var, units in UNITS.items():
            assert var in ds, var
            assert ds[var].attrs.get("units") == units, var
            assert isinstance(ds[var].attrs.get("description"), str) and ds[var].attrs["description"], var
            want = dims + ("replica",) if var in PER_REPLICA else dims
            assert ds[var].dims == want, var
        assert list(ds.replica.values) == [1, 2, 3]
        assert ds.attrs["replica_kind"] == "batching" and ds.attrs["stage"] == name
    pol = in_process["policies"]
    assert list(pol.policy.values) == list(POLICIES)
    assert list(pol.rate_rps.values) == [4, 14] and list(pol.seed.values) == [1, 2]
    assert list(pol.heterogeneity.values) == ["uniform", "mixed"]
    assert list(pol.scenario.values) == ["steady", "surge"]
    b = in_process["batch"]
    assert list(b.max_batch.values) == [4, 256]  # a list-valued key is a dimension
    assert "max_batch" not in pol.dims and pol.attrs["max_batch"] == 8


def test_bookkeeping_on_every_run(in_process):
    for ds in in_process.values():
        assert_token_invariants(ds, _max_batch(ds))
    pol = in_process["policies"]
    # the grid exercises what the checks are about
    assert int(pol.shed.sum()) > 0 and int(pol.unfinished.sum()) > 0
    assert int(pol.completed.min()) > 0


def test_every_policy_sees_the_same_workload(in_process):
    """Common random numbers: arrivals depend on (rate, scenario, seed) only, not on
    the policy, the replicas or max_batch."""
    for ds in in_process.values():
        first = ds.arrivals.isel(policy=0)
        assert (ds.arrivals == first).all()
        assert (first == first.isel(heterogeneity=0)).all()
        if "max_batch" in ds.dims:
            assert (first == first.isel(max_batch=0)).all()
    pol = in_process["policies"]
    a = pol.arrivals.isel(policy=0, heterogeneity=0)
    # the surge (x 2.5 from 2 s, after the 1 s warm-up) only adds arrivals: Λ is larger pointwise
    assert (a.sel(scenario="surge") > a.sel(scenario="steady")).all()
    assert (a.sel(rate_rps=14) > a.sel(rate_rps=4)).all()


def test_swept_max_batch_limits_the_batch(in_process):
    b = in_process["batch"]
    assert (b.batch_mean.sel(max_batch=4) <= 4 * (1 + 1e-12)).all()
    # the same requests: the larger batch can only be different, never see other arrivals
    assert (b.arrivals.sel(max_batch=4) == b.arrivals.sel(max_batch=256)).all()


# --- determinism ------------------------------------------------------------------------

def test_same_datasets_twice(in_process):
    assert_same(routesim.run(sweep(), show_progress=False), in_process)


@pytest.mark.parametrize("size", [1, 3, None], ids=["1", "3", "default"])
def test_any_chunk_size_gives_the_same_datasets(in_process, size):
    assert_same(routesim.run(sweep(), show_progress=False, chunk_size=size), in_process)


def _cli(tmp_path, name, threads, quiet=True):
    env = dict(os.environ, NUMBA_NUM_THREADS=str(threads))
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "routesim.sweep", str(tmp_path / "tokpipe.toml"),
                           "--out", str(out), *(["--quiet"] if quiet else [])],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, {s: xr.open_dataset(out / f"{s}.nc", engine="netcdf4").load()
                         for s in ("policies", "batch")}


def test_command_line_one_or_two_threads_and_in_process(tmp_path, in_process, monkeypatch):
    """`python -m routesim.sweep` with NUMBA_NUM_THREADS=1 and 2 writes the files that
    main() writes in process, and they hold the in-process Datasets; the printed
    summary table names every policy of each stage."""
    (tmp_path / "tokpipe.toml").write_text(PIPE)
    stdout, one = _cli(tmp_path, "one", 1, quiet=False)
    _, two = _cli(tmp_path, "two", 2)
    monkeypatch.chdir(tmp_path)
    assert main([str(tmp_path / "tokpipe.toml"), "--out", str(tmp_path / "here"), "--quiet"]) == 0
    for name in ("policies", "batch"):
        with xr.open_dataset(tmp_path / "here" / f"{name}.nc", engine="netcdf4") as here:
            here = here.load()
        xr.testing.assert_identical(one[name], two[name])
        xr.testing.assert_identical(one[name], here)
        # the same Dataset as routesim.run's, but for the file name it records
        xr.testing.assert_identical(one[name], in_process[name].assign_attrs(sweep_file=str(tmp_path / "tokpipe.toml")))
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["batch.nc", "policies.nc"]
    # the summary tables: one per stage, every policy named in its own stage's table
    sections = re.split(r"^stage ", stdout, flags=re.M)[1:]
    assert [s.split(":")[0] for s in sections] == ["policies", "batch"], stdout
    for section, policies in zip(sections, (POLICIES, ("least_tokens", "power_of_d"))):
        table = section.split("\nwrote ")[0]
        for pol in policies:
            assert re.search(rf"(?m)^.*(?<![\w]){pol}(?![\w])", table), (pol, table)
        for other in set(POLICIES) - set(policies):
            assert not re.search(rf"(?<![\w]){other}(?![\w])", table), (other, table)
        for head in ("attain", "TTFT", "TPOT", "E2E", "preempt", "prefix"):
            assert head in table, (head, table)


class Interrupted(Exception):
    pass


SIMULATE_RANGE = batch.simulate_range


class Counter:
    """Counts the chunks simulated in this process (wraps batch.simulate_range);
    raises Interrupted once ``fail_after`` chunks have been simulated."""

    def __init__(self, monkeypatch, fail_after=None):
        self.calls, self.fail_after = 0, fail_after
        monkeypatch.setattr(batch, "simulate_range", self)

    def __call__(self, grid, lo, hi):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise Interrupted
        self.calls += 1
        return SIMULATE_RANGE(grid, lo, hi)


def test_resume_after_an_interrupted_run(tmp_path, in_process, monkeypatch):
    """Chunks of 16: policies has one per registered policy (16 runs each), batch 1.
    Interrupted in policies after 4 chunks, resumed: only the others and batch's one are
    simulated, same Datasets."""
    n = len(POLICIES)
    counts = []
    Counter(monkeypatch, fail_after=4)
    with pytest.raises(Interrupted):
        routesim.run(sweep(), show_progress=False, chunk_size=16, checkpoint=tmp_path / "chunks")
    assert len(list((tmp_path / "chunks" / "policies").glob("[0-9]*.npz"))) == 4
    counter = Counter(monkeypatch)
    results = routesim.run(sweep(), show_progress=False, chunk_size=16, checkpoint=tmp_path / "chunks",
                           resume=True, on_chunks=counts.append)
    assert_same(results, in_process)
    assert [(c.stage, c.chunks, c.resumed, c.computed) for c in counts] == [("policies", n, 4, n - 4),
                                                                            ("batch", 1, 0, 1)]
    assert counter.calls == n - 4 + 1
    assert not (tmp_path / "chunks").exists()


def test_command_line_resume_after_a_completed_chunk_set(tmp_path, in_process, monkeypatch, capsys):
    """--chunk-size 5: policies has ceil(16 · policies / 5) chunks (32 with 10 registered
    policies), batch 2. The command is interrupted once every chunk of policies and one
    of batch are done; `--resume` simulates only batch's other chunk and writes the files
    of an uninterrupted run."""
    m = -(-16 * len(POLICIES) // 5)
    path = tmp_path / "tokpipe.toml"
    path.write_text(PIPE)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    Counter(monkeypatch, fail_after=m + 1)
    with pytest.raises(Interrupted):
        main([str(path), "--out", str(out), "--quiet", "--chunk-size", "5"])
    assert len(list((out / ".chunks" / "policies").glob("[0-9]*.npz"))) == m
    assert len(list((out / ".chunks" / "batch").glob("[0-9]*.npz"))) == 1
    capsys.readouterr()
    counter = Counter(monkeypatch)
    assert main([str(path), "--out", str(out), "--resume"]) == 0
    printed = capsys.readouterr().out
    assert re.search(rf"^policies: {m} chunks, {m} resumed from \S+, 0 computed", printed, re.M), printed
    assert re.search(r"^batch: 2 chunks, 1 resumed from \S+, 1 computed", printed, re.M), printed
    assert counter.calls == 1
    assert sorted(p.name for p in out.iterdir()) == ["batch.nc", "policies.nc"]
    for name, want in in_process.items():
        with xr.open_dataset(out / f"{name}.nc", engine="netcdf4") as got:
            xr.testing.assert_identical(got.load(), want.assign_attrs(sweep_file=str(path)))


# --- Dask -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def client():
    """A LocalCluster of 2 worker processes, as ``--workers 2`` starts it."""
    with cluster.connect(workers=2) as c:
        c.wait_for_workers(2)
        yield c


@pytest.mark.parametrize("size", [7, None], ids=["7", "default"])
def test_dask_cluster_gives_the_in_process_datasets(client, in_process, size):
    assert_same(routesim.run(sweep(), show_progress=False, client=client, chunk_size=size), in_process)


# --- property test against the reference --------------------------------------------------

TINY = dict(
    warmup_s=1.0, measure_s=3.0,
    chat_prompt_median=40, chat_prompt_sigma=0.8, chat_prompt_min=4, chat_prompt_max=200,
    chat_output_median=16, chat_output_sigma=0.8, chat_output_min=1, chat_output_max=64,
    long_prompt_median=300, long_prompt_sigma=0.4, long_prompt_min=100, long_prompt_max=600,
    long_output_median=30, long_output_sigma=0.5, long_output_min=8, long_output_max=100,
    p_long=0.15, prefix_groups=3, prefix_tokens=64, context_limit=2048,
)
"""A tiny workload: the largest prompt 64 + 600 < 2048, the largest request
min(2048, max(64 + 200 + 64, 64 + 600 + 100)) = 764 tokens."""
LARGEST = 764

COUNTS = ("arrivals", "completed", "failed", "rejected", "shed", "unfinished", "preemptions",
          "attempts", "retries", "wasted_tokens", "breaker_ejections", "backlog_growth")
FLOATS = ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99", "e2e_p50",
          "e2e_p90", "e2e_p99", "e2e_mean", "attainment", "goodput", "throughput",
          "token_throughput", "prefix_hit_rate", "kv_occupancy", "batch_mean",
          "itl_p50", "itl_p90", "itl_p99", "itl_max", "kv_occupancy_first", "kv_occupancy_last")
VECTORS = {"assigned": "assigned", "replica_completed": "completed", "replica_tokens": "tokens"}


def _close(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


@st.composite
def small_cluster(draw):
    b = draw(st.sampled_from([4, 8, 16]))
    fit = -(-LARGEST // b)  # the smallest pool that holds the largest request
    values = ref.defaults()
    values.update(TINY)
    values.update(
        block_tokens=b,
        kv_blocks=draw(st.one_of(st.just(fit), st.integers(fit, 2 * fit), st.integers(fit, 2500))),
        max_batch=draw(st.integers(1, 8)),
        waiting_cap=draw(st.integers(1, 6)),
        chunked_prefill=draw(st.booleans()),
        max_batched_tokens=draw(st.integers(64, 4096)),
        prefix_probability=draw(st.sampled_from([0.0, 0.5, 0.9])),
        score=draw(st.sampled_from(["requests", "tokens", "kv", "cost"])),
        choices=draw(st.integers(1, 3)),
        # issue 19: the drain (none, cut short, the page's 600 s), first-token timeouts
        # (with a retry), the clairvoyant allowance
        drain_s=draw(st.sampled_from([0.0, 0.3, 600.0])),
        ttft_timeout_ms=draw(st.sampled_from([math.inf, 40.0, 150.0])),
        max_attempts=draw(st.integers(1, 2)),
        allowance_tokens=draw(st.sampled_from([256, 16, "exact"])),
    )
    factors = draw(st.lists(st.sampled_from([0.5, 1.0, 1.5, 3.0]), min_size=2, max_size=4))
    events = []
    if draw(st.booleans()):
        events.append((draw(st.sampled_from([0.0, 1500.0, 2500.0])), "slowdown",
                       draw(st.integers(0, len(factors) - 1)), draw(st.sampled_from([0.5, 2.0, 4.0]))))
    return values, factors, events, draw(st.sampled_from(POLICIES)), draw(st.sampled_from([5, 20, 40, 80])), \
        draw(st.integers(1, 10_000))


# no shrinking phase: an example costs up to a few seconds in the reference, and
# shrinking a failure took minutes; the failing example is printed as drawn
@settings(max_examples=15, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=small_cluster())
def test_random_small_clusters_keep_the_books_and_match_the_reference(case):
    values, factors, events, policy, rate, seed = case
    horizon = (values["warmup_s"] + values["measure_s"]) * 1000.0
    wl = generate(seed, float(rate), (), horizon, br.workload_params(values))
    assert len(wl) > 0
    # the engine
    p = br.params_row(values, policy, n_replicas=len(factors), event_count=len(events))
    count = br.router_draws(policy, values["choices"], len(wl), values["max_attempts"])
    got, rep = br.simulate(p.reshape(1), np.array([factors], float), br.event_rows(events),
                           br.Packed.of([wl]), router_stream(seed, count), np.array([0, count], np.int64))
    got, rep = got[0], rep[0]
    # the books, on the engine's run
    assert got["arrivals"] == sum(int(got[k]) for k in ("completed", "failed", "rejected", "shed", "unfinished"))
    if values["max_attempts"] == 1:  # one attempt per routed request, routed at its arrival
        assert got["attempts"] == got["arrivals"] - got["shed"] == rep["assigned"].sum()
    else:  # first attempts: every request but the rejected, less those shed on their first
        first = got["attempts"] - got["retries"]
        assert got["arrivals"] - got["shed"] - got["rejected"] <= first <= got["arrivals"] - got["rejected"]
    assert 0 <= got["kv_occupancy"] <= 1
    # (a ratio of float sums: exactly max_batch when every iteration is full, up to rounding)
    assert math.isnan(got["batch_mean"]) or 0 <= got["batch_mean"] <= values["max_batch"] * (1 + 1e-12)
    if values["max_attempts"] == 1:   # (with retries, requests in a backoff are unfinished too)
        assert got["unfinished"] <= len(factors) * (values["waiting_cap"] + values["max_batch"])
    # the reference; on small pools (where blocks are evicted and sequences preempted)
    # with its invariants checked at every step: free + referenced + cached = kv_blocks,
    # refcounts, prefix closure, running <= max_batch, the waiting cap (the check visits
    # every block at every step, too slow for the large pools)
    small_pool = values["kv_blocks"] * values["block_tokens"] <= 4 * LARGEST
    want = ref.simulate(ref.Workload(t=[float(x) for x in wl.t_ms], prompt=[int(x) for x in wl.prompt],
                                     output=[int(x) for x in wl.output], key=[float(x) for x in wl.key],
                                     blocks=[[int(x) for x in wl.block_ids(k)] for k in range(len(wl))]),
                        values, factors, events, policy, seed, check=small_pool)
    bad = [f"{n}: engine {got[n]} reference {want[n]}" for n in COUNTS if int(got[n]) != want[n]]
    bad += [f"{n}: engine {got[n]!r} reference {want[n]!r}" for n in FLOATS
            if not _close(float(got[n]), float(want[n]))]
    bad += [f"{n}: engine {list(rep[f])} reference {list(want[n])}" for n, f in VECTORS.items()
            if list(rep[f]) != list(want[n])]
    assert not bad, f"{policy} seed {seed} rate {rate} factors {factors} events {events}:\n" + "\n".join(bad)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_default_chunks_keep_every_thread_busy(monkeypatch, threads):
    """A chunk's runs are shared by the kernel's threads (engine.run_batch), so the
    default chunk is a multiple of their number: batch's 8 runs on 2 threads are not 8
    chunks of one run (a core idle throughout) but 4 of two; policies' 16 runs per
    registered policy (160 with 10) stay about batch.MIN_CHUNKS chunks: ceil(runs / 16)
    runs a chunk, rounded up to a multiple of the threads (10 runs a chunk on 1 and 2
    threads, 12 on 3)."""
    from routesim import grid as grid_mod
    from routesim.batching import grid as token_grid

    monkeypatch.setattr(token_grid.nb, "get_num_threads", lambda: threads)
    s = sweep()
    sizes = {st_.name: batch.default_chunk_size(grid_mod.build(s, st_)) for st_ in s.stages}
    per = -(-16 * len(POLICIES) // batch.MIN_CHUNKS)
    assert sizes == {"policies": -(-per // threads) * threads, "batch": threads}


def _packed_bytes(g):
    p = g.packed
    return [a.tobytes() for a in (p.t, p.prompt, p.output, p.key, p.seg_key, p.seg_len, p.seg_off, p.off)]


def test_workloads_drawn_for_an_earlier_stage_are_reused_not_drawn_again(monkeypatch):
    """grid.build keeps the workloads it drew (batching/grid.py's _DRAWN): a stage that
    needs the same (seed, rate, scenario, workload) again packs the kept ones, read-only,
    and they are the ones a fresh draw gives."""
    from routesim import grid as grid_mod
    from routesim.batching import grid as token_grid

    s = sweep()
    monkeypatch.setattr(token_grid, "_DRAWN", token_grid.OrderedDict())
    fresh = grid_mod.build(s, s.stages[1])
    drawn = []
    real = token_grid.generate
    monkeypatch.setattr(token_grid, "generate", lambda *a, **k: drawn.append(a) or real(*a, **k))
    again = grid_mod.build(s, s.stages[1])
    assert drawn == [] and _packed_bytes(again) == _packed_bytes(fresh)
    assert not any(w.t_ms.flags.writeable for w in token_grid._DRAWN.values())
    monkeypatch.setattr(token_grid, "_DRAWN", token_grid.OrderedDict())
    assert _packed_bytes(grid_mod.build(s, s.stages[1])) == _packed_bytes(fresh)
    assert len(drawn) == 2   # (seed 3 at 14 req/s, steady and surge)


def test_kept_workloads_follow_a_lengths_trace_that_changed(tmp_path, monkeypatch):
    """§1.3's lengths come from a trace file: once it changes, the workloads drawn from
    it before are not reused; and the kept ones stay within DRAWN_BYTES."""
    from routesim import grid as grid_mod
    from routesim.batching import grid as token_grid

    monkeypatch.setattr(token_grid, "_DRAWN", token_grid.OrderedDict())
    trace = tmp_path / "lengths.csv"
    text = PIPE.replace('[[stages]]\nname = "policies"', '[[stages]]\nname = "policies"\nworkload = { lengths = '
                        '{ trace = "lengths.csv", format = "azure" } }')
    (tmp_path / "s.toml").write_text(text)

    def built(rows):
        trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
            f"2023-11-16 18:15:{k:02d}.0000000,{p},{o}\n" for k, (p, o) in enumerate(rows)))
        s = routesim.load_sweep(tmp_path / "s.toml")
        return grid_mod.build(s, s.stages[0])

    short = built([(100, 10), (200, 20)])
    longer = built([(1000, 100), (2000, 200), (1500, 150)])
    assert set(longer.packed.prompt.tolist()) == {1000, 2000, 1500}
    assert set(short.packed.prompt.tolist()) == {100, 200}
    monkeypatch.setattr(token_grid, "DRAWN_BYTES", 1)
    built([(300, 30)])
    assert len(token_grid._DRAWN) == 1
