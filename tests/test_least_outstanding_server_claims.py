"""The least-outstanding study's claims on the server (issue 44 item 2;
routesim/studies/least_outstanding/server.py, the claims' ``server(data)``): the verdict
table's main cells (the server's verdicts) and its column of the page's replica for a
claim other than claim 1 on hand-built Datasets whose answer follows from the rule (the
same cell rule as the Azure-length column; exchanging two policies' runs flips the
mechanism and the page's cell says it differs),
the words the section writes (a load against the server's capacity, whether a prediction
held), and each claim's server arm recomputed from a reduced run of its own stage (the
claim's sweep file: vLLM's asynchronous loop with the roofline cost, few seeds, a short
warm-up and window), read by the claim's own ``load`` and ``server``, each test able to
fail: the direction the claim's mechanism gives, which a flipped input reverses."""

import re
import types

import numpy as np
import pytest
import xarray as xr

from conftest import SWEEPS, run_reduced, swap_labels, write_results
from routesim.studies.least_outstanding import (admission, affinity, choices, cold_start, counts, learning,
                                                preemption, retries, server, staleness, summary,
                                                workloads)
from routesim.studies.least_outstanding.common import SERVER_ARM, verdict_cells, verdicts
from test_least_outstanding_preemption import arms
from test_least_outstanding_workloads import capacity_stand_in, reduced_doors


def page_cells(claim, d):
    return verdict_cells(verdicts(claim.clauses(d)), claim.ADDED_WORDS)


def on_server(claim, d):
    """The server arm's data as :func:`server.load` gives it, holding ``claim``'s data ``d``."""
    return {"claims": {claim.__name__: d}}


def assert_measured(claim, d):
    """The verdict table's main cells of ``claim``'s server arm in its data ``d``
    (:func:`server.main_cells`): the measured cell reads the arm's own runs (at least one
    paired "mean [low, high]"), and the two verdicts are its clauses'."""
    main = server.main_cells(claim, on_server(claim, d))
    assert re.search(r"[+-]\d[\d.]* \[[+-]", main[0]), main[0]
    assert main[1:] == page_cells(claim, claim.server(d))
    return main


def test_the_main_cells_read_a_claims_server_arm():
    # the page's replica: least_kv and least_cost 5 preemptions and 5 pp of placements
    # above 90 % below least_requests, the mean occupancy 2 pp below, TPOT p99 25 % above:
    # the mechanism (least_kv's preemptions and tail) holds; the added clauses have TPOT
    # the other way: they do not hold
    page = {"preemption": arms(-5, -0.05, -0.02, 1.25)}
    cells = page_cells(preemption, page)
    assert cells[0] == "holds" and cells[1].startswith("does not hold"), cells
    # the server with the same effects: the main cells are the page's, the measured cell
    # the claim's row of the server's runs, and the page's column says no change
    same = on_server(preemption, {**page, "server": page["preemption"]})
    main = server.main_cells(preemption, same)
    assert main == (preemption.row(page)[2], *cells), main
    assert server.page_column(preemption, page, main) == "holds; does not hold — no change"
    # the server where least_kv's and least_requests' runs are exchanged: least_kv now
    # preempts 5 more and places 5 pp more often above 90 % (the mechanism the other way);
    # least_cost's runs equal least_requests' (no lead), least_kv's mean occupancy 2 pp
    # above (the other way): both parts do not hold on the server, so the page's
    # mechanism differs from the server's
    flipped = on_server(preemption, {**page, "server": swap_labels(page["preemption"], "policy", "least_kv",
                                                                    "least_requests")})
    main = server.main_cells(preemption, flipped)
    assert [c.split(" (")[0].split(":")[0] for c in main[1:]] == ["does not hold", "does not hold"], main
    assert server.page_column(preemption, page, main) == "holds; does not hold — **changes** (mechanism)"
    # a claim whose server stage has not run, one that states why it is not run, the arm
    # not run at all
    assert server.main_cells(preemption, on_server(preemption, page)) is None
    assert server.not_run_cells(preemption, on_server(preemption, page))[0] == "not run: the stages have not run"
    costly = types.SimpleNamespace(__name__="costly", SERVER_WHY="96 runs, ~5 CPU min, over budget",
                                   server=lambda d: None)
    assert server.main_cells(costly, {"claims": {}}) is None
    assert server.not_run_cells(costly, {"claims": {}})[0] == "not run: 96 runs, ~5 CPU min, over budget"
    # every claim of the study gives a server arm (none says why not)
    assert all(callable(getattr(c, "server", None)) and not hasattr(c, "SERVER_WHY")
               for c in server.CLAIMS if c is not counts)
    assert server.not_run_cells(preemption, None)[0] == server.NOT_RUN


def test_a_prediction_held_or_failed():
    v = {"mechanism": "holds", "added": "does not hold"}
    assert server.held(v, ("holds", "does not hold")) == "held"
    assert server.held(v, ("holds", "holds")) == "held in part"
    assert server.held(v, ("does not hold", "holds")) == "failed"
    # a claim that adds nothing: its added part is "none added"
    assert server.held({"mechanism": "does not hold", "added": None}, ("does not hold", "none added")) == "held"


def test_the_steady_state_in_brief_counts_runs_and_cells():
    """routesim.steady's rules (docs/model.md): a run is not steady when its backlog grew
    by more than 5 % of its arrivals, a cell also when its median grew by more than 2 %.
    Policy a: runs of 60 and 0 in 1,000 arrivals (one run over 5 %, median 3 %); policy
    b: 30 and 30 (no run over 5 %, median 3 %); policy c: 0 and 0."""
    dims = ("policy", "seed")
    ds = xr.Dataset({"arrivals": (dims, np.full((3, 2), 1000.0)),
                     "backlog_growth": (dims, [[60.0, 0.0], [30.0, 30.0], [0.0, 0.0]]),
                     "kv_occupancy_first": (dims, np.full((3, 2), 0.5)),
                     "kv_occupancy_last": (dims, np.full((3, 2), 0.5))},
                    coords={"policy": ["a", "b", "c"], "seed": [1, 2]})
    assert server._steady_brief([("s", ds)]) == "runs not steady: 1 of 6; cells not steady: 2 of 3"
    assert server._steady_brief([("s", ds.sel(policy=["c"])), ("t", ds.sel(policy=["c"]))]) == "every arm steady"


def test_a_load_is_named_against_the_servers_capacity():
    cap = xr.Dataset({"capacity_rps": ("policy", [32.0, 48.0])}, coords={"policy": ["least_kv", "least_tokens"]})
    ds = xr.Dataset({"assigned": ("replica", np.ones(8))}, coords={"replica": np.arange(1, 9)},
                    attrs={"rate_rps": 27.0})
    # 27 / 32 = 0.84375
    assert server.placed(preemption, {"preemption": ds}, {"capacity": cap}) == (
        "27 req/s: 0.84 × least_kv's 32 on the server")
    two = xr.Dataset({"assigned": (("rate_rps", "replica"), np.ones((2, 8)))},
                     coords={"rate_rps": [38.0, 45.0], "replica": np.arange(1, 9)})
    # 38 / 48 = 0.79, 45 / 48 = 0.94
    assert server.placed(learning, two, {"capacity": cap}) == "38, 45 req/s: 0.79, 0.94 × least_tokens' 48 on the server"


def reduced(tmp_path, name, stages, replace):
    """Run ``stages`` of sweeps/``name``.toml reduced (``replace``: fewer seeds, a shorter
    warm-up and window) and write them under a results root; returns the root."""
    return write_results(tmp_path / "results", run_reduced(tmp_path, SWEEPS / f"{name}.toml", replace, stages=stages))


AZURE = f'"{SWEEPS.parent / "traces" / "azure-conv.csv"}"'
"""The Azure trace's absolute path (a reduced sweep is written outside sweeps/; the
claims' Azure-length stages name it, not run here)."""
SHORT = {"count = 16 }": "count = 4 }", '"../traces/azure-conv.csv"': AZURE}


def on_the_server(ds):
    """The stage ran on the server: vLLM's asynchronous loop with the roofline cost."""
    assert (ds.attrs["scheduler"], ds.attrs["step_cost"], int(ds.attrs["async_scheduling"])) == ("vllm", "roofline", 1)


def test_claim5_on_the_server_least_kv_places_less_often_on_a_full_replica(tmp_path):
    root = reduced(tmp_path, "token-routing-preemption", ["preemption", "server"],
                   {**SHORT, "warmup_s = 1200": "warmup_s = 300"})
    d = preemption.load(root)
    a = preemption.server(d)
    assert_measured(preemption, d)
    on_the_server(a["preemption"])
    assert a["preemption"].attrs["rate_rps"] == 30 and a["preemption"].attrs["kv_blocks"] == 8192
    high = a["preemption"].placement_occupancy_high
    # the half pool is under pressure: least_requests, which does not look at the blocks,
    # places on a replica above 90 % in some run; least_kv places on the replica with the
    # fewest referenced blocks, so less often (a replica above 90 % is chosen only when
    # every replica is)
    assert float(high.sel(policy="least_requests").max()) > 0
    assert float(high.sel(policy="least_kv").mean()) < float(high.sel(policy="least_requests").mean())
    assert float(a["preemption"].preemptions.sel(policy="least_kv").mean()) <= float(
        a["preemption"].preemptions.sel(policy="least_requests").mean())
    # its section: the server's comparisons (the main arm) after the design and before the
    # page's replica's reading, its load against least_kv's capacity on the server (30 / 36);
    # the page's table moves to the appendix; without the main arm it stays in place
    cap = xr.Dataset({"capacity_rps": ("policy", [36.0])}, coords={"policy": ["least_kv"]})
    main = server.section_lines(preemption, {"claims": {preemption.__name__: d}, "capacity": cap})
    kept, appendix = summary.to_appendix([preemption.section(d, main=main)], "twin.md")
    kept, appendix = kept[0], "\n".join(appendix)
    assert "**On the server** (stage `server`, 30 req/s: 0.83 × least_kv's 36 on the server; 4 seeds" in kept
    assert kept.index("**Design.**") < kept.index("**On the server**") < kept.index("**Reading, on the page's replica.**")
    assert all(line in kept for line in workloads.clause_table(preemption, a))
    page_rows = preemption._effect_rows("fresh", d["preemption"], preemption.KV_AWARE)
    assert all(r not in kept and r in appendix.split("### The page's replica's table")[1] for r in page_rows)
    alone = preemption.section(d)
    assert all(r in alone for r in page_rows) and "**On the server**" not in alone and "**Reading.**" in alone
    # the server's figure: drawn from the arm alone (no other claim's arm ran), named
    # after the page's with its suffix, its title saying which arm it shows, and linked
    # in the section after the server's table, the page's figure before the page's reading
    figs = tmp_path / "figures"
    paths = server.claim_figures({"claims": {preemption.__name__: d}, "root": root}, figs)
    assert sorted(p.name for p in paths) == ["lor-claim5-preemption-server.png", "lor-claim5-preemption-server.svg"]
    assert sorted(p.name for p in figs.iterdir()) == sorted(p.name for p in paths)
    titles = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(preemption, "save", lambda fig, stem, _: titles.append((stem, fig.get_suptitle())) or [])
        preemption.main_figure(a, figs, SERVER_ARM)
        preemption.figure(d, figs)
    assert [(stem, t.split(":")[0]) for stem, t in titles] == [("lor-claim5-preemption-server", "Claim 5 on the server"),
                                                                ("lor-claim5-preemption", "Claim 5 on the page's replica")]
    link, page_link = "![On the server](../figures/lor-claim5-preemption-server.png)", "(../figures/lor-claim5-preemption.png)"
    assert kept.index(workloads.clause_table(preemption, a)[-1]) < kept.index(link) < kept.index(page_link) < kept.index(
        "**Reading, on the page's replica.**")
    assert link not in alone and page_link in alone
    # exchanging the two policies' runs: least_kv's tail now above least_requests', a
    # comparison that cannot go as predicted
    flipped = {"preemption": swap_labels(a["preemption"], "policy", "least_kv", "least_requests")}
    assert preemption.effects(flipped["preemption"], "least_kv")["placement_occupancy_high"][0] > 0
    assert verdicts(preemption.clauses(flipped))["mechanism"] != "holds"


def test_claim3_on_the_server_the_global_minimum_herds(tmp_path):
    root = reduced(tmp_path, "token-routing-staleness", ["fresh", "periodic", "local", "routers", "server",
                                                          "server-routers"],
                   {**SHORT, "warmup_s = 1200": "warmup_s = 100", "measure_s = 60": "measure_s = 20",
                    "period_ms = [10, 50, 100]": "period_ms = [50]"})
    d = staleness.load(root)
    a = staleness.server(d)
    assert_measured(staleness, d)
    on_the_server(a["whole"])
    c = staleness.comparisons(a)
    # a 50 ms old view sends a period's arrivals (about 1.75 at 35 req/s) to the replica
    # that looked emptiest: least_tokens' TTFT p99 rises against fresh signals; two random
    # choices spread them, and degrade less
    assert c["least_tokens at 50 ms vs fresh"][0][3] == +1, c
    assert c["power_of_d's degradation vs least_tokens' at 50 ms"][0][3] == -1, c
    # exchanging the fresh and the periodic runs turns the degradation the other way
    swapped = dict(a, fresh=a["periodic"].sel(period_ms=50, drop=True),
                   periodic=a["fresh"].expand_dims(period_ms=[50]))
    assert staleness.comparisons(swapped)["least_tokens at 50 ms vs fresh"][0][3] == -1


def test_claim2_on_the_server_two_choices_beat_one(tmp_path):
    root = reduced(tmp_path, "token-routing-scale-8", ["pod", "global", "server"],
                   {**SHORT, "warmup_s = 1200": "warmup_s = 100", "measure_s = 60": "measure_s = 20",
                    "choices = [1, 2, 3, 4]": "choices = [1, 2, 3]"})
    d = choices.load(root)
    a = choices.server(d)
    assert_measured(choices, d)
    on_the_server(a["8"]["pod"])
    assert a["32"] is None
    d21, _ = choices.steps(a["8"]["pod"])
    # at 35 req/s, above round_robin's 32 req/s capacity on the server, one random choice
    # (which balances worse than a rotation) queues prompts behind busy replicas: two
    # choices cut its TTFT p99 by more than the claim's 1 / 1.2
    assert d21[3] == -1, d21
    flipped = {"8": {"pod": swap_labels(a["8"]["pod"], "choices", 1, 2)}, "32": None}
    assert choices.steps(flipped["8"]["pod"])[0][3] == +1
    assert verdicts(choices.clauses(flipped))["mechanism"] == "does not hold"


def test_claim8_on_the_server_work_in_flight_favours_the_fast_replica(tmp_path):
    root = reduced(tmp_path, "token-routing-hetero", ["hetero", "server"],
                   {**SHORT, "warmup_s = 1200": "warmup_s = 300", "rate_rps = [35, 41]": "rate_rps = [41]"})
    d = learning.load(root)
    a = learning.server(d)
    assert_measured(learning, d)
    on_the_server(a)
    assert list(a.rate_rps.values) == [41.0]
    # least_tokens scores the work in flight: the replica that drains it 30 % faster holds
    # less of it, and gets more than 1/8 of the attempts
    lt = learning.fast_share(a.sel(policy="least_tokens", rate_rps=41.0))
    assert float(lt.mean()) > 1 / 8, lt.values
    c = learning.comparisons(a)
    # exchanging rate_weighted's and least_tokens' runs turns "more" the other way
    f = learning.comparisons(swap_labels(a, "policy", "rate_weighted", "least_tokens"))
    assert f[("more", 41.0)][0][0] == pytest.approx(-c[("more", 41.0)][0][0])


def test_claim4_on_the_server_the_tie_break_raises_the_hit_rate(tmp_path):
    root = reduced(tmp_path, "token-routing-affinity", ["tie", "baselines", "affinity", "server"],
                   {**SHORT, "warmup_s = 1200": "warmup_s = 300", "measure_s = 60": "measure_s = 30",
                    "tie_tolerance = [0, 0.1, 0.5]": "tie_tolerance = [0, 0.1]"})
    d = affinity.load(root)
    a = affinity.server(d)
    assert_measured(affinity, d)
    on_the_server(a["tie"])
    # breaking a near-tie towards the replica holding the request's prefix can only add
    # hits: the hit rate rises at both loads, by a lead at the higher one, where more
    # candidates are near-tied (at the lighter one the page's replica gained +0.9 pp, under the 1 pp a lead needs)
    for r in (20.0, 36.0):
        e = affinity.tie_effects(affinity.pod(a, affinity.TOLERANCE, r), affinity.pod(a, 0.0, r))
        assert e["hit rate"][0] > 0, (r, e)
    assert e["hit rate"][3] == +1, e
    # exchanging the two tolerances' runs turns it the other way
    flipped = {"tie": swap_labels(a["tie"], "tie_tolerance", 0.0, affinity.TOLERANCE)}
    assert verdicts(affinity.clauses(flipped))["mechanism"] == "does not hold"


COLD_SHORT = {**SHORT, "warmup_s = 1200": "warmup_s = 80", "warmup_s = 1202": "warmup_s = 82",
              "warmup_s = 1135": "warmup_s = 60", "at_s = 1200": "at_s = 80"}
"""Claim 6's design reduced: the recovery at 80 s after an 80 s warm-up, 4 seeds."""


def test_claim6_on_the_server_the_recovered_replica_is_flooded(tmp_path):
    stages = list(cold_start.STAGES) + list(cold_start.SERVER.values())
    root = reduced(tmp_path, "token-routing-cold", stages, COLD_SHORT)
    d = cold_start.load(root)
    a = cold_start.server(d)
    assert_measured(cold_start, d)
    on_the_server(a["cold"])
    assert a["cold"].attrs["rate_rps"] == 32
    c = cold_start.comparisons(a)
    # a count cannot see a cold replica: least_requests sends the empty one more than
    # its fair 1/8 of the first second's attempts, and at cold_factor 3 its prefills run
    # 3 times slower, so its TTFT p99 is above the warm replicas'; slow start ramps its
    # weight from 0.1, so fewer of the flood's requests wait behind its slow steps
    assert c["flood"][0][3] == +1 and c["hurt"][0][3] == +1, c
    assert c["slow start 10 s"][0][0] < 0, c
    # the replica given none of the first second's attempts: a share below fair
    flood = a["flood"].copy()
    flood["assigned"] = flood.assigned.where(flood.replica != cold_start.cold_replica(flood), 0)
    assert cold_start.comparisons(dict(a, flood=flood))["flood"][0][3] == -1


RETRY_SHORT = {**SHORT, "warmup_s = 1200": "warmup_s = 100", "warmup_s = 1260": "warmup_s = 160",
               "at_s = 1200": "at_s = 100", "at_s = 1230": "at_s = 130", "at_s = 1210": "at_s = 110",
               "at_s = 1240": "at_s = 140"}
"""Claim 7's design reduced: every incident 1,100 s earlier, after a 100 s warm-up, 4 seeds."""


def test_claim7_on_the_server_the_breaker_contains_a_black_hole(tmp_path):
    stages = list(retries.STAGES) + [retries.SERVER + s for s in retries.STAGES]
    root = reduced(tmp_path, "token-routing-retry", stages, RETRY_SHORT)
    d = retries.load(root)
    a = retries.server(d)
    assert_measured(retries, d)
    on_the_server(a["crash-a"])
    assert set(a["crash-a"].scenario.values) == {"none", "crash"}
    c = retries.comparisons(a)
    # the black hole fails every attempt at once, so least_requests' count of it stays
    # lowest and it draws the most attempts: a breaker that ejects it after 5 failures
    # and retries that avoid it raise attainment; 3 of 8 replicas down for 30 s at 0.82 x
    # capacity overload the others, whose 2 s first-token timeouts retry: more attempts
    # per request than without the incident
    assert c["contain"][0][3] == +1 and c["amplify-a"][0][0] > 0, c
    # exchanging the black hole's arms (neither against both) turns containment the other way
    h = swap_labels(swap_labels(a["black-hole"], "retry_avoid_previous", False, True), "breaker_consecutive", 0, 5)
    assert retries.comparisons(dict(a, **{"black-hole": h}))["contain"][0][3] == -1


def test_claim9_on_the_server_refusing_raises_goodput(tmp_path):
    """The threshold recomputed from the server's own one-replica curve (250,000 tokens in
    the full arm, as the page's) and its doors run at it, at 35 and 92 req/s (0.80 and 2.09 × the
    server's capacity), the burst at 100 s; the main design's stages reduced beside it
    (the claim's ``load`` reads both)."""
    short = {**SHORT, "warmup_s = 1200": "warmup_s = 100", "at_s = 1200": "at_s = 100", "at_s = 1230": "at_s = 130",
             "rate_rps = [35, 46, 58, 69, 92]": "rate_rps = [35, 92]", "rate_rps = [35, 46, 92]": "rate_rps = [35, 92]",
             "rate_rps = [2, 3, 4, 4.5, 5, 5.5, 6, 6.5, 7, 8, 10, 12]": "rate_rps = [3]"}
    root, x = reduced_doors(tmp_path, admission.SERVER, short, 250000)
    capacity_stand_in(root / server.RESULTS / "capacity-capacity.nc", 44.0)
    d = admission.load(root)
    a = admission.server(d)
    assert_measured(admission, d)
    on_the_server(a["open"])
    assert admission.loads(a)[1:] == ([92.0], 35.0)        # beyond the server's capacity, and at or below it
    c = admission.comparisons(a)
    # at twice the capacity without a door every replica's waiting list grows and every
    # TTFT with it: goodput falls from 35 to 92 req/s; a door that refuses while a
    # replica's outstanding tokens exceed the curve's threshold keeps the admitted
    # requests within the SLO, so it keeps goodput up
    assert c["reject@92"][0][3] == +1 and c["falls"][0][3] == -1, c
    assert verdicts(admission.clauses(a))["mechanism"] == "holds"
    # exchanging no door's and the refusing door's runs turns it the other way
    swapped = dict(a, open=a["reject"], reject=a["open"].assign_coords(admission_max_tokens=x))
    assert admission.comparisons(dict(swapped))["reject@92"][0][3] == -1
