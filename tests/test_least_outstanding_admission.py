"""Claim 9 of the least-outstanding-routing study
(routesim/studies/least_outstanding/admission.py): the threshold and the verdict logic on
hand-built Datasets whose answer is known by construction, then the verdict's directions
recomputed from a reduced run of sweeps/token-routing-admission.toml: the one-replica
curve (4 seeds, a 300 s warm-up) gives the threshold, and the 8-replica arms are run at
that threshold (as the full study must be) at 1 and 2 × capacity and under the burst
(moved with the warm-up), 4 seeds; then the claim's row, section and figure from those
runs, written as the sweep writes them. The step-cost sensitivity
(sweeps/token-routing-admission-cost.toml) the same way: each variant's curve, reduced,
gives its threshold, and its door is run at it."""

import numpy as np
import pytest
import xarray as xr

from conftest import SWEEPS, assert_renders, run_reduced, write_results
from routesim.studies.least_outstanding import admission
from routesim.studies.least_outstanding.common import verdicts

SWEEP = SWEEPS / "token-routing-admission.toml"
SEEDS = np.arange(1, 9)
CAPS = np.array([100000.0, 150000.0, 200000.0, 250000.0])
SLO = {"slo_ttft_ms": 1000.0, "slo_tpot_ms": 50.0}


def _held():
    """TPOT p99 30, 40, 50, 60 ms by cap (the SLO's 50 ms met up to 200k), TTFT 500 ms."""
    tpot = np.array([30.0, 40.0, 50.0, 60.0])[:, None] + (SEEDS % 3 - 1)[None, :] * 0.5
    return xr.Dataset({"tpot_p99": (("admission_max_tokens", "seed"), tpot),
                       "ttft_p99": (("admission_max_tokens", "seed"), np.full(tpot.shape, 500.0)),
                       "batch_mean": (("admission_max_tokens", "seed"), tpot)},
                      coords=dict(admission_max_tokens=CAPS, seed=SEEDS), attrs=dict(SLO))


def _arm(goodput, cap=None, root=None):
    """An 8-replica stage over rate_rps × seed with goodput(rate) (± 1 % by seed)."""
    rates = np.array([23.0, 46.0, 69.0, 92.0])
    g = np.array([[goodput(r) * (1 + (s % 3 - 1) * 0.01) for s in SEEDS] for r in rates])
    ds = xr.Dataset({"goodput": (("rate_rps", "seed"), g)}, coords=dict(rate_rps=rates, seed=SEEDS),
                    attrs={**SLO, "results_root": str(root)})
    return ds if cap is None else ds.assign_coords(admission_max_tokens=cap)


def _hand_built(root, queue_helps):
    """No door: goodput = the load up to 46 req/s, then falls by 0.5 req/s per req/s above it;
    reject holds it at 44; queue holds it too if ``queue_helps``, else collapses to half
    of no door's. The burst: no door 30, reject 33, queue 34 (or 15)."""
    nodoor = lambda r: r if r <= 46 else 46 - 0.5 * (r - 46)  # noqa: E731
    q = (lambda r: r if r <= 46 else 44.0) if queue_helps else (lambda r: nodoor(r) * (1 if r <= 46 else 0.5))
    burst = lambda v, cap=None: _arm(lambda r: v, cap, root).isel(rate_rps=0, drop=True)  # noqa: E731
    return {"held": _held(), "open": _arm(nodoor, root=root),
            "reject": _arm(lambda r: r if r <= 46 else 44.0, 200000.0, root), "queue": _arm(q, 200000.0, root),
            "burst-open": burst(30.0), "burst-reject": burst(33.0, 200000.0),
            "burst-queue": burst(34.0 if queue_helps else 15.0, 200000.0)}


def test_threshold_is_the_largest_cap_meeting_the_slo_there_and_below():
    assert admission.threshold(_held()) == 200000.0


@pytest.mark.parametrize("queue_helps, expected", [(True, "holds"), (False, "does not hold")])
def test_verdict_logic_on_hand_built_stages(tmp_path, queue_helps, expected):
    data = _hand_built(tmp_path, queue_helps)
    rates, over, at = admission.loads(data)   # against the provisional 46 req/s: no capacity stage here
    assert over == [69.0, 92.0] and at == 46.0
    c = admission.comparisons(data)
    assert c["falls"][0][0] == pytest.approx(23 - 46, abs=0.1)                 # 23 req/s left at 92, req/s
    assert c["falls"][0][3] == -1
    assert c["reject@69"][0][3] == +1 and c["burst-reject"][0][3] == +1
    assert admission.material(data) == pytest.approx(0.05 * 46)                # 5 % of 46 req/s
    assert c["reject@92"][0][0] == pytest.approx(44 - 23, abs=0.1)             # req/s, paired
    assert c["queue@92"][0][3] == (+1 if queue_helps else -1)
    assert c["burst-queue"][0][3] == (+1 if queue_helps else -1)
    assert admission.verdict(data) == expected
    # refusing is the seed's mechanism, queueing without a deadline a clause the
    # prediction added: the mechanism holds whether or not the queue helps
    v = verdicts(admission.clauses(data))
    assert (v["mechanism"], v["added"]) == ("holds", expected)


def test_a_sweep_not_run_at_the_curves_threshold_is_refused(tmp_path):
    data = _hand_built(tmp_path, True)
    wrong = dict(data, queue=data["queue"].assign_coords(admission_max_tokens=225000.0))
    with pytest.raises(admission.Mismatch, match="200,000"):
        admission.verdict(wrong)


def stage(text, name):
    """The sweep's header plus one of its stages."""
    head = text[:text.index("[[stages]]")]
    start = text.index(f'[[stages]]\nname = "{name}"')
    end = text.find("[[stages]]", start + 1)
    return head + text[start:end if end > 0 else len(text)]


REDUCE = {"warmup_s = 1200": "warmup_s = 300", "count = 16 }": "count = 4 }"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{stage: Dataset} of every stage, as routesim.run returns them."""
    text = SWEEP.read_text()
    head = text[:text.index("[[stages]]")]
    tmp = tmp_path_factory.mktemp("admission")
    one = run_reduced(tmp, head + "".join(stage(text, s)[len(head):] for s in ("held", "rates")),
                      {**REDUCE, "rate_rps = [2, 3, 4, 4.5, 5, 5.5, 6, 6.5, 7, 8, 10, 12]": "rate_rps = [3, 5, 7]"})
    x = admission.threshold(admission.prepare(one)["held"])
    eight = "".join(stage(text, s)[len(head):] for s in admission.STAGES[2:])
    out = run_reduced(tmp, head + eight, {
        **REDUCE, "at_s = 1200": "at_s = 300", "at_s = 1230": "at_s = 330",
        "rate_rps = [35, 46, 58, 69, 92]": "rate_rps = [46, 92]",
        "admission_max_tokens = [250000]": f"admission_max_tokens = [{x:.0f}]"})
    return {**one, **out}


@pytest.fixture(scope="module")
def reduced(runs):
    return admission.prepare(runs)


def test_every_request_has_one_outcome(reduced):
    n, ok = admission.conserved(reduced)
    assert n > 0 and ok == n
    for name, ds in admission.arms(reduced).items():
        total = sum(v for v in admission.outcomes(ds).values())
        assert (total == ds.arrivals).all(), name


def test_claim9_directions_from_a_reduced_run(reduced):
    c = admission.comparisons(reduced)
    # routing creates no capacity: without a door goodput at 2 x falls below its value at 1 x
    assert c["falls"][0][3] == -1
    # rejecting at the curve's threshold beats no door at 2 x capacity
    assert c["reject@92"][0][3] == +1


def test_claim9_row_section_and_figure_render(runs, tmp_path):
    text = assert_renders(admission, write_results(tmp_path / "results", runs), tmp_path / "figures")
    x = admission.threshold(admission.load(tmp_path / "results")["held"])
    assert f"**{x:,.0f} tokens**" in text


COST = SWEEPS / "token-routing-admission-cost.toml"


@pytest.fixture(scope="module")
def cost_runs(tmp_path_factory):
    """The step-cost sensitivity (sweeps/token-routing-admission-cost.toml), reduced as the
    main design (4 seeds, a 300 s warm-up): each variant's one-replica curve, then no door
    and a door rejecting at the threshold that curve gives (as the full study must),
    beyond capacity."""
    tmp = tmp_path_factory.mktemp("admission-cost")
    held = run_reduced(tmp, COST, REDUCE, stages=[f"held-{v}" for v in admission.VARIANTS])
    x = {}
    for v in admission.VARIANTS:
        try:
            x[v] = admission.threshold(admission.prepare(held)[f"held-{v}"])
        except admission.Mismatch:
            x[v] = None
    text = COST.read_text()
    runs = [s for v in admission.VARIANTS if f'name = "reject-{v}"' in text for s in (f"open-{v}", f"reject-{v}")]
    cap = {"prefill-x2": "admission_max_tokens = [125000]", "chunk-2048": "admission_max_tokens = [275000]"}
    assert all(x[v] is not None for v in cap), x     # the reduced curves give a threshold to reject at
    doors = run_reduced(tmp, COST, {**REDUCE, **{cap[v]: f"admission_max_tokens = [{x[v]:.0f}]" for v in cap}},
                        stages=runs)
    return {**held, **doors}, x


def test_claim9_the_step_cost_variants(runs, cost_runs):
    stages, x = cost_runs
    data = admission.prepare({**runs, **stages})
    rows = admission.sensitivity(data)
    assert set(rows) == set(admission.VARIANTS)
    # with prefill four times as costly one long-class prompt's prefill alone takes about
    # 1.4 s (12,000 tokens: 0.0792 ms a token plus the pair term), above the 1 s TTFT SLO,
    # and the long class is 2 % of requests: the TTFT p99 misses the SLO at every cap, so
    # there is no threshold to reject at
    assert 0.0792 * 12000 + 3.36e-6 * 12000 ** 2 > 1000.0
    assert x["prefill-x4"] is None and rows["prefill-x4"][1] is None and not rows["prefill-x4"][2]
    for v in ("prefill-x2", "chunk-2048"):
        threshold, c, survives = rows[v]
        assert threshold == x[v]
        # at twice capacity without a door the replicas' queues grow for the whole window
        # and few requests finish within the SLO; a door that refuses above the
        # threshold keeps the admitted ones within it: higher goodput, a lead
        assert c[3] == 1 and survives, (v, c)
