"""Verdicts of the least-outstanding-routing study (docs/least-outstanding-routing.md),
recomputed from reduced runs of the same design (fewer seeds, a shorter horizon): the
direction the full study found is asserted, so a change that flips a verdict fails here."""

import pytest

from conftest import SWEEPS, run_reduced
from routesim.least_outstanding import choices, counts, learning, retries, staleness
from routesim.least_outstanding.common import lead, paired, squeeze


def test_worked_example_arithmetic():
    ex = counts.worked_example()
    # The seed: ten against ten by count, "wrong by a factor of eight" in work.
    assert ex["count_a"] == ex["count_b"] == 10
    assert ex["outstanding_b"] / ex["outstanding_a"] == pytest.approx(4450 / 500)
    # Continuous batching: the short requests leave after their 50th iteration, at
    # nearly the same time on both replicas; the long one keeps B busy for thousands.
    assert ex["short_done_ms_b"] == pytest.approx(ex["short_done_ms_a"], rel=0.01)
    assert ex["busy_ms_b"] > 50 * ex["busy_ms_a"]


def test_claim1_tokens_beat_counts_on_ttft(tmp_path):
    out = run_reduced(tmp_path, SWEEPS / "token-routing.toml",
                      {"rate_rps = [30, 45, 55, 65]": "rate_rps = [55]",
                       "measure_s = 50": "measure_s = 30",
                       "count = 16 }": "count = 4 }"})
    ds = squeeze(out["counts"])
    for base in ("least_requests", "round_robin"):
        d = paired(ds, "ttft_p99", "least_tokens", base)
        assert lead(d.sel(rate_rps=55)) == "below", base
    # The full study's verdict is "holds with qualification": a TTFT lead, not TPOT.
    assert counts.verdict(ds) in ("holds with qualification", "holds")


def test_claim2_two_choices_beat_one_and_more_buy_less(tmp_path):
    out = run_reduced(tmp_path, SWEEPS / "token-routing-scale-32.toml",
                      {"measure_s = 20": "measure_s = 12",
                       "count = 6 }": "count = 3 }"})
    pod = squeeze(out["pod"]).isel(policy=0, drop=True).squeeze(drop=True)
    glob = squeeze(out["global"]).isel(policy=0, drop=True).squeeze(drop=True)
    num = choices.numbers(pod, glob)
    assert lead(num["d2_d1"]) == "below"            # two beat one on every seed
    assert choices.verdict({32: (pod, glob)}) in ("holds with qualification", "holds")


def test_claim3_stale_global_minimum_herds(tmp_path):
    out = run_reduced(tmp_path, SWEEPS / "token-routing-staleness.toml",
                      {'mode = ["periodic", "periodic_local"]': 'mode = ["periodic"]',
                       "period_ms = [0, 5, 10, 25, 50, 100, 250]": "period_ms = [0, 100]",
                       "routers = [1, 4]": "routers = [1]",
                       "measure_s = 15": "measure_s = 12",
                       "count = 4 }": "count = 3 }"})
    ds = squeeze(out["staleness"])
    for dim in ("signal_mode", "routers"):
        if dim not in ds.dims:
            ds = ds.expand_dims(dim)
    g = staleness.degradation(ds, "least_tokens").sel(period_ms=100)
    assert lead(g) == "above"                        # the stale global minimum degrades
    assert staleness.verdict(ds) in ("holds with qualification", "holds")


def test_claim7_retry_budget_contains_the_crash(tmp_path):
    out = run_reduced(tmp_path, SWEEPS / "token-routing-retry.toml",
                      {"measure_s = 40": "measure_s = 25",
                       "count = 8 }": "count = 3 }"}, cut_before='[[stages]]\nname = "black-hole"')
    crash = squeeze(out["crash"]).squeeze(drop=True)
    a = retries.amplification(crash)
    assert lead(a.sel(retry_budget=0.2) - a.sel(retry_budget=float("inf"))) == "below"
    assert lead(crash.attainment.sel(retry_budget=0.2)
                   - crash.attainment.sel(retry_budget=float("inf"))) == "above"


def test_claim8_rate_weighted_does_not_over_learn_but_routes_worse(tmp_path):
    out = run_reduced(tmp_path, SWEEPS / "token-routing-hetero.toml",
                      {"measure_s = 40": "measure_s = 25",
                       "count = 8 }": "count = 3 }"})
    ds = squeeze(out["hetero"]).squeeze(drop=True)
    assert learning.verdict(ds) == "does not hold in this model"
    d = ds.ttft_p99.sel(policy="rate_weighted") - ds.ttft_p99.sel(policy="least_tokens")
    assert lead(d) == "above"
