"""The least-outstanding study on the server it speaks of (issue 44 item 2;
routesim/studies/least_outstanding/server.py): the verdict table's main cells and its
page's-replica column on hand-built Datasets whose answer follows from the rule, and the arm recomputed from a reduced run of
its own design (sweeps/token-routing-server.toml: the capacity search and claim 1's stage
on vLLM's asynchronous loop with the roofline cost, short windows, few seeds), the
verdict flipped by exchanging two policies' runs, and the section, figure and verdict
table rendered from it."""

import numpy as np
import pytest

from conftest import SWEEPS, assert_renders, run_reduced, swap_labels, write_results
from routesim.studies import least_outstanding as study
from routesim.studies.least_outstanding import capacities, counts, factorial, server
from routesim.studies.least_outstanding.common import verdict_cells, verdicts
from test_least_outstanding_counts import hand_built


def cells_of(d):
    """The page's verdict cells for claim 1's data ``d`` (mechanism, added)."""
    return verdict_cells(verdicts(counts.clauses(d)), counts.ADDED_WORDS)


def test_the_server_is_the_main_arm_and_the_page_column_says_which_verdicts_change(tmp_path):
    # the page's replica: least_tokens 20 % lower TTFT p99 everywhere, TPOT 10 % higher at
    # 23 req/s: the mechanism holds, the added clauses do not
    page = {"root": tmp_path, "counts": hand_built(ttft={r: 0.8 for r in (23.0, 35.0, 41.0)}, tpot={23.0: 1.1})}
    mech, added = cells_of(page)
    assert (mech, added.split(":")[0]) == ("holds", "does not hold")
    # the server with the same effects: its cells are the page's, and the page's column
    # says no change; the measured cell is claim 1's row of the server's runs
    same = {"root": tmp_path, "counts": page["counts"]}
    main = server.main_cells(counts, same)
    assert main == (counts.row(page)[2], mech, added), main
    assert server.page_column(counts, page, main) == "holds; does not hold — no change"
    # the server where least_tokens' and least_requests' runs are exchanged: least_tokens'
    # TTFT 25 % above least_requests' (1 / 0.8), the mechanism fails; its TPOT now 9 %
    # below least_requests' at 23 req/s (1 / 1.1) and nothing against: the added clauses
    # hold with qualification. Both of the page's verdicts differ from the server's (the
    # cell by the Azure column's rule: the verdicts alone)
    flipped = {"root": tmp_path, "counts": swap_labels(page["counts"], "policy", "least_tokens", "least_requests")}
    assert server.verdicts_of(flipped)["against"]["mechanism"][0] == "TTFT p99 vs least_requests at 23"
    main = server.main_cells(counts, flipped)
    assert main[1].startswith("does not hold (against: TTFT p99 vs least_requests at 23")
    assert main[2].startswith("holds with qualification")
    cell = server.page_column(counts, page, main)
    assert cell == "holds; does not hold — **changes** (mechanism, added)", cell
    # a claim whose server stage the arm has not run, or the arm not run at all: no main
    # cells, "not run" in their place and the page's verdicts alone in its column
    from routesim.studies.least_outstanding import preemption
    assert server.main_cells(preemption, same) is None and server.main_cells(counts, None) is None
    assert server.not_run_cells(preemption, same) == ("not run: the stages have not run", "not run", "not run")
    assert server.not_run_cells(counts, None) == (server.NOT_RUN,) * 3
    assert server.page_column(counts, page, None) == "holds; does not hold"


def test_the_summary_names_the_pages_replica_beside_the_server(tmp_path):
    import xarray as xr
    pols = ["round_robin", "least_tokens", "least_kv"]
    cap = xr.Dataset({"capacity_rps": ("policy", [32.0, 44.0, 30.0])}, coords={"policy": pols},
                     attrs={"capacity_low": 24.0, "capacity_high": 56.0, "capacity_resolution": 4.0})
    folder = tmp_path / capacities.CAPACITY_RESULTS
    folder.mkdir()
    xr.Dataset({"capacity_rps": ("policy", [34.0, 44.0, 42.0])}, coords={"policy": pols}).to_netcdf(
        folder / "default-capacity.nc", engine="netcdf4")
    # claim 1 on the server: least_tokens 20 % lower TTFT p99 than least_requests at every
    # load (the mechanism holds); on the page's replica the runs of the two exchanged
    srv = {"root": tmp_path, "capacity": cap, "claims": {},
           "counts": hand_built(ttft={r: 0.8 for r in (23.0, 35.0, 41.0)})}
    page = {"root": tmp_path, "counts": swap_labels(srv["counts"], "policy", "least_tokens", "least_requests")}
    text = server.page_lines(srv, page, "At 41 req/s the page's words.")[0]
    # the page's capacities highest first, the server's in brackets; least_kv 12 req/s apart
    # (more than the server search's 4 req/s step), above round_robin on the page's
    # replica (42 > 34) and below it on the server (30 < 32)
    assert "req/s (the server's in brackets): least_tokens 44 (44), least_kv 42 (30), round_robin 34 (32)" in text
    assert "apart by more than the server search's 4 req/s step: least_kv higher here" in text
    assert "least_kv above round_robin here and below it on the server" in text
    # the lead the summary gives, then claim 1's verdicts: the mechanism differs from the
    # server's; TPOT p99 and attainment are the same for every policy (hand_built's
    # default), so the added clauses' verdict is the same on both
    assert text.endswith("At 41 req/s the page's words. Verdicts that differ from the server's: claim 1 "
                         "(mechanism)."), text
    assert server.page_lines(srv, srv)[0].endswith("Every verdict as on the server.")
    # nothing of the page's replica to say: no paragraph
    assert server.page_lines({**srv, "root": tmp_path / "elsewhere"}) == []


def test_a_policy_that_falls_below_round_robin_is_named():
    import xarray as xr
    pols = ["round_robin", "least_requests", "least_kv", "least_cost"]
    cap = xr.Dataset({"capacity_rps": ("policy", [36.0, 44.0, 32.0, np.nan])}, coords={"policy": pols})
    page = {"round_robin": 34.0, "least_requests": 42.0, "least_kv": 42.0, "least_cost": 40.0}
    # least_kv: above round_robin on the page's replica (42 > 34), below it on the server
    # (32 < 36); least_requests stays above; least_cost has no capacity in the searched range
    assert server.reversed_below(cap, page) == ["least_kv"]
    # already below round_robin on the page's replica: not a reversal
    assert server.reversed_below(cap, {**page, "least_kv": 30.0}) == []
    assert server.reversed_below(cap, {}) == []


def factorial_data(effect):
    """A hand-built stage ``factorial``: 8 seeds, round_robin's TTFT p99 and p50 drawn
    (lognormal, sigma 0.3), each KV-aware policy's the same times 1.1 (p99) and 1.5 (p50)
    times ``effect[(scheduler, step_cost)]`` with a per-seed wobble of ±2 %."""
    import xarray as xr
    rng = np.random.default_rng(5)
    pols = [factorial.BASE, *factorial.POLICIES]
    scheds, costs = [s for s, _ in factorial.SCHEDULERS], [c for c, _ in factorial.COSTS]
    shape = (len(pols), len(scheds), len(costs), 8)
    base = rng.lognormal(np.log(600), 0.3, size=(1, len(scheds), len(costs), 8))
    wobble = 1 + 0.02 * rng.uniform(-1, 1, size=shape)
    gain = np.array([[effect[(s, c)] for c in costs] for s in scheds])[None, :, :, None]
    aware = (np.arange(len(pols)) > 0)[:, None, None, None]      # every policy but round_robin
    p99, p50 = np.where(aware, 1.1 * gain, 1.0), np.where(aware, 1.5 * gain, 1.0)
    dims = ("policy", "scheduler", "step_cost", "seed")
    ds = xr.Dataset({"ttft_p99": (dims, base * p99 * wobble), "ttft_p50": (dims, base / 10 * p50 * wobble),
                     "replica_max_outstanding": (dims + ("replica",), np.full(shape + (8,), 30.0))},
                    coords={"policy": pols, "scheduler": scheds, "step_cost": costs, "seed": np.arange(101, 109)})
    ds.attrs["rate_rps"] = 36.0
    return ds


def test_the_factorial_names_the_part_that_moves_the_kv_aware_policies():
    # the roofline multiplies the KV-aware policies' TTFT against round_robin's by 1.3
    # under either scheduler, the scheduler by nothing: the prediction holds
    cost = factorial_data({("reserve", "linear"): 1.0, ("reserve", "roofline"): 1.3,
                           ("vllm", "linear"): 1.0, ("vllm", "roofline"): 1.3})
    cmp = factorial.comparisons(cost)
    for p in factorial.POLICIES:
        assert factorial.verdict(cmp, p) == "holds"
        m = cmp[(p, "cost", "vllm")][0]
        assert 27 < m < 33, m                       # +30 % within the ±2 % wobble
    text = factorial.sentence(cost)
    assert "Not the scheduler" in text and "above it in every cell" in text
    assert factorial.brief(cost).startswith("vLLM's scheduler does not move them; the roofline cost raises their "
                                            "TTFT p99 against round_robin's in 4 of 4")
    # the scheduler carries it instead (vLLM × 1.3 under either cost): a lead where none
    # was predicted, and none where one was: does not hold, and the text says the scheduler
    sched = factorial_data({("reserve", "linear"): 1.0, ("reserve", "roofline"): 1.0,
                            ("vllm", "linear"): 1.3, ("vllm", "roofline"): 1.3})
    cmp = factorial.comparisons(sched)
    assert all(factorial.verdict(cmp, p) == "does not hold" for p in factorial.POLICIES)
    assert "The scheduler, as the last stop guessed, moves them" in factorial.sentence(sched)
    assert factorial.brief(sched).startswith("vLLM's scheduler moves them in 4 of 4 comparisons; the roofline cost "
                                             "raises their TTFT p99 against round_robin's in 0 of 4")
    # the table has a row per cell and per part
    assert factorial.table(sched).count("\n") == 2 + 4 + 2 + 2 - 1


@pytest.fixture(scope="module")
def reduced(tmp_path_factory):
    """The server arm reduced: its capacity search on round_robin and least_tokens at 2
    seeds between 24 and 48 req/s (one round of 3 rates, then one inside each bracket),
    and claim 1's stage at its loads, 4 seeds; both at 60 s of warm-up and a 20 s window.
    Returns the results root."""
    from routesim import capacity
    root = tmp_path_factory.mktemp("server") / "results"
    text = (SWEEPS / "token-routing-server.toml").read_text()
    for old, new in (("warmup_s = 1200", "warmup_s = 60"), ("measure_s = 60", "measure_s = 20"),
                     ('policy = ["round_robin", "least_requests", "least_tokens", "power_of_d", "least_kv", '
                      '"least_cost"]\nseeds = { first = 1, count = 16 }',
                      'policy = ["round_robin", "least_tokens"]\nseeds = { first = 1, count = 2 }')):
        assert old in text, old
        text = text.replace(old, new)
    sweep = tmp_path_factory.mktemp("server-sweep") / "token-routing-server.toml"
    sweep.write_text(text)
    args = list(server.SEARCH)
    assert capacity.main([str(sweep), *args, "--out", str(root / server.RESULTS), "--quiet"]) == 0
    ran = run_reduced(sweep.parent, sweep, {"count = 16 }": "count = 4 }", "first = 101, count = 8 }": "first = 101, count = 3 }"},
                      stages=list(server.RUN))
    write_results(root, ran)
    return root


def test_the_reduced_arm_recomputes_claim_1_and_its_column(reduced, tmp_path):
    d = server.load(reduced)
    assert d["counts"].attrs["scheduler"] == "vllm" and d["counts"].attrs["step_cost"] == "roofline"
    assert d["counts"].attrs["async_scheduling"] == 1
    # the seed's mechanism on the server: least_tokens' TTFT p99 materially below
    # least_requests' at the study's loads (as on the page's replica)
    v = server.verdicts_of(d)
    assert v["mechanism"] != "does not hold", v
    # exchanged runs: the lead goes the other way, and the page's column (these runs as
    # the page's) says the verdict differs from the server's
    page = {"root": d["root"], "counts": d["counts"]}
    d["counts"] = swap_labels(d["counts"], "policy", "least_tokens", "least_requests")
    assert server.verdicts_of(d)["mechanism"] == "does not hold"
    assert "**changes** (mechanism" in server.page_column(counts, page, server.main_cells(counts, d))


def test_the_reduced_arm_renders(reduced, tmp_path):
    text = assert_renders(server, reduced, tmp_path / "figures", heading="## On the server it speaks of")
    # claim 1's section did not run here: its prediction on the server stays with this
    # section; where it ran, that section holds it (server.section_lines) and this does not
    assert server.PREDICTION in text
    d = server.load(reduced)
    d["claims"][counts.__name__] = server.claim1(d)
    assert server.PREDICTION not in server.section(d)
    # the capacity search ran round_robin and least_tokens: each has its row
    for p in ("round_robin", "least_tokens"):
        assert f"| {p} |" in text
    # in the document: the verdict table's columns, the server's as its main ones
    doc, appendix = study.document(reduced / "token-routing")
    assert f"| {server.MEASURED} |" in doc and f"| {server.PAGE_COLUMN} |" in doc
    # the summary reads the server, the main arm: its capacities, each with its interval,
    # and claim 1's headline there
    cap = server.load(reduced)["capacity"]
    deploy = next(line for line in doc.splitlines() if line.startswith("**Deploy a work-aware score"))
    assert "Capacity of 8 replicas on the server (vLLM's default loop, a roofline H100 cost)" in deploy
    for p in cap.policy.values:
        c = float(cap.capacity_rps.sel(policy=p))
        assert f"{p} {capacities.cap_text(cap, c)} [{capacities.interval_text(cap, p)}]" in deploy, (p, deploy)
    assert "**By how much, below capacity** (claim 1 on the server" in doc
    assert "## On the server it speaks of" in doc
    # the prediction (fixed before the runs) moves to the appendix, a pointer stays
    assert server.PREDICTION not in doc and server.PREDICTION in appendix
    # claim 1's section did not run here (only the server's stages did): its comparisons on
    # the server stay with this section, in the appendix
    assert "## Claim 1" not in doc
    table = server.comparison_table(server.load(reduced))
    assert table not in doc and table in appendix.split("### Claim 1 on the server (its section did not run)")[1]
    # the factorial's paragraph, its prediction and table in the appendix (no longer a
    # headline: 16 seeds put neither KV-aware policy below round_robin on the server)
    assert "**Which part of the server moves least_kv and least_cost**" in appendix
    assert "**Which part of the server moves least_kv and least_cost**" not in doc
    assert factorial.PREDICTION in appendix and "| vllm against reserve | roofline |" in appendix
