"""Claim 7 of the least-outstanding-routing study (the retry trap, realistic clients):
the verdict logic on hand-built Datasets whose answer is known by construction, and the
verdict's directions recomputed from a reduced run of sweeps/token-routing-retry.toml
(4 seeds; the same clients, loads, incidents and window, the warm-up cut from 1,200 s to
200 s with every event moved with it). The claim's row, section and figure are drawn
from the same run."""

import numpy as np
import pytest
import xarray as xr

from conftest import SWEEPS, assert_renders, run_reduced, write_results
from routesim.studies.least_outstanding import retries
from routesim.studies.least_outstanding.common import squeeze

INF = float("inf")
SEEDS = np.arange(1, 9)


def _stage(dims, attempts, attainment, arrivals=1000.0):
    """A stage's Dataset over ``dims`` (+ seed): attempts per request and attainment
    given per cell by functions of the cell's coordinates and the seed."""
    import itertools
    names = list(dims)
    shape = [len(v) for v in dims.values()] + [SEEDS.size]
    att = np.zeros(shape)
    ok = np.zeros(shape)
    for idx in itertools.product(*(range(len(v)) for v in dims.values())):
        cell = {n: dims[n][i] for n, i in zip(names, idx)}
        for k, s in enumerate(SEEDS):
            att[idx + (k,)] = attempts(cell, s) * arrivals
            ok[idx + (k,)] = attainment(cell, s)
    coords = {**dims, "seed": SEEDS}
    ds = xr.Dataset({"attempts": (names + ["seed"], att), "attainment": (names + ["seed"], ok),
                     "arrivals": (names + ["seed"], np.full(shape, arrivals))}, coords=coords)
    return ds


def _data(budget_helps, breaker_helps, lingers, amplifies=True):
    """Hand-built stages: the crash adds 20 % attempts (if ``amplifies``); the budget cuts them to the
    control's and adds 10 pp of attainment if ``budget_helps`` (else changes nothing);
    breaker + avoid add 30 pp in the black hole if ``breaker_helps``; after the crash
    attainment is 5 pp below the control if ``lingers``. Seed noise ±0.5 % / ±0.2 pp."""
    noise = lambda s: (s % 3 - 1) * 0.005  # noqa: E731

    def attempts(c, s):
        extra = 0.2 if amplifies and c["scenario"] == "crash" and not (budget_helps and c["retry_budget"] < INF) else 0.0
        return 1.02 + extra + noise(s)

    def attainment(c, s):
        base = 0.97 + noise(s) * 0.4
        if c["scenario"] == "crash":
            base -= 0.0 if (budget_helps and c["retry_budget"] < INF) else 0.10
        return base

    crash = {"scenario": ["none", "crash"], "retry_budget": [INF, 0.2]}
    hole = {"retry_avoid_previous": [False, True], "breaker_consecutive": [0, 5]}

    def hole_att(c, s):
        both = c["retry_avoid_previous"] and c["breaker_consecutive"] > 0
        return 0.5 + (0.3 if breaker_helps and both else 0.0) + noise(s) * 0.4

    def after_att(c, s):
        return 0.97 + noise(s) * 0.4 - (0.05 if lingers and c["scenario"] == "crash" and c["retry_budget"] == INF
                                        else 0.0)
    return {"crash-a": _stage(crash, attempts, attainment), "crash-b": _stage(crash, attempts, attainment),
            "black-hole": _stage(hole, lambda c, s: 1.5, hole_att),
            "after": _stage(crash, lambda c, s: 1.02, after_att)}


@pytest.mark.parametrize("budget, breaker, lingers, amplifies, expected", [
    (True, True, True, True, "holds"),
    (False, True, False, True, "holds with qualification"),
    (False, False, False, False, "does not hold"),
])
def test_verdict_logic_on_hand_built_stages(budget, breaker, lingers, amplifies, expected):
    data = _data(budget, breaker, lingers, amplifies)
    c = retries.comparisons(data)
    # the crash adds 20 % attempts on every seed (about 1.22 / 1.02 − 1 = 19.6 %): a lead
    assert c["amplify-a"][0][3] == (+1 if amplifies else 0)
    if amplifies:
        assert c["amplify-a"][0][0] == pytest.approx(100 * (1.22 / 1.02 - 1), rel=0.01)
    assert c["budget-a"][0][3] == (-1 if budget and amplifies else 0)
    assert c["attain-b"][0][3] == (+1 if budget else 0)
    assert c["contain"][0][3] == (+1 if breaker else 0)
    assert c["contain"][0][0] == pytest.approx(30.0 if breaker else 0.0, abs=1e-9)
    assert c["lingers"][0][3] == (-1 if lingers else 0)
    assert retries.verdict(data) == expected


def test_calm_is_the_controls_attempts_and_attainment():
    a, t, ok = retries.calm(_data(True, True, True)["crash-a"])
    assert a == pytest.approx(1.02, abs=0.006) and t == pytest.approx(0.97, abs=0.003) and ok
    storm = _stage({"scenario": ["none"], "retry_budget": [INF]}, lambda c, s: 1.93, lambda c, s: 0.27)
    assert not retries.calm(storm)[2]


REDUCE = {"warmup_s = 1200": "warmup_s = 200", "warmup_s = 1260": "warmup_s = 260",
          "at_s = 1200": "at_s = 200", "at_s = 1230": "at_s = 230", "at_s = 1210": "at_s = 210",
          "at_s = 1240": "at_s = 240", "count = 16 }": "count = 4 }"}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return run_reduced(tmp_path_factory.mktemp("retries"), SWEEPS / "token-routing-retry.toml", REDUCE,
                       cut_before="# The Azure-length arm")


def test_claim7_directions_from_a_reduced_run(out):
    data = {s: squeeze(out[s]).squeeze(drop=True) for s in retries.STAGES}
    # the control is calm with these clients (the former 5 s whole-attempt timeout was not)
    for k in ("a", "b"):
        assert retries.calm(data[f"crash-{k}"])[2], k
    c = retries.comparisons(data)
    # the black hole's containment works: breaker + retry_avoid_previous over neither
    assert c["contain"][0][3] == +1
    # the budget raises attainment in the crash with the 2 s first-token timeout
    assert c["attain-a"][0][3] == +1


def test_claim7_row_section_and_figure_render(out, tmp_path):
    text = assert_renders(retries, write_results(tmp_path / "results", out), tmp_path / "figures")
    assert "**The control is calm**" in text
