"""Verdicts of the least-outstanding-routing study (docs/least-outstanding-routing.md),
recomputed from reduced runs of the same design (fewer seeds, a shorter horizon): the
direction the full study found is asserted, so a change that flips a verdict fails here.
Claim 8's row, section and figure are drawn from the same runs (claims 2 and 3 are
tested in tests/test_least_outstanding_choices.py and _staleness.py)."""

import pytest

from conftest import SWEEPS, assert_renders, run_reduced, write_results
from routesim.studies.least_outstanding import counts, learning, retries
from routesim.studies.least_outstanding.common import lead, paired, squeeze


@pytest.fixture(scope="module")
def claim8(tmp_path_factory):
    return run_reduced(tmp_path_factory.mktemp("claim8"), SWEEPS / "token-routing-hetero.toml",
                       {"measure_s = 40": "measure_s = 25",
                        "count = 8 }": "count = 3 }"})


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


def test_claim7_retry_budget_contains_the_crash(tmp_path):
    out = run_reduced(tmp_path, SWEEPS / "token-routing-retry.toml",
                      {"measure_s = 40": "measure_s = 25",
                       "count = 8 }": "count = 3 }"}, cut_before='[[stages]]\nname = "black-hole"')
    crash = squeeze(out["crash"]).squeeze(drop=True)
    a = retries.amplification(crash)
    assert lead(a.sel(retry_budget=0.2) - a.sel(retry_budget=float("inf"))) == "below"
    assert lead(crash.attainment.sel(retry_budget=0.2)
                   - crash.attainment.sel(retry_budget=float("inf"))) == "above"


def test_claim8_rate_weighted_does_not_over_learn_but_routes_worse(claim8):
    ds = squeeze(claim8["hetero"]).squeeze(drop=True)
    assert learning.verdict(ds) == "does not hold in this model"
    d = ds.ttft_p99.sel(policy="rate_weighted") - ds.ttft_p99.sel(policy="least_tokens")
    assert lead(d) == "above"


@pytest.mark.parametrize("claim, run", [(learning, "claim8")], ids=["claim8"])
def test_row_section_and_figures_render(claim, run, request, tmp_path):
    # claim 1's are drawn by test_least_outstanding_cli.py, through the command itself
    assert_renders(claim, write_results(tmp_path / "results", request.getfixturevalue(run)),
                   tmp_path / "figures")
