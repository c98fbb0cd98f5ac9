"""Claim 7 of the least-outstanding-routing study (the retry trap), after the incident:
sweeps/token-routing-retry.toml reduced (3 seeds, the 10 and 20 s timeouts only, a
shorter window for the first three stages), and the directions the full study found
asserted, paired by seed against the same seeds with no incident. The claim's row,
section and figures are drawn from the same run (two timeouts, not one: the module reads
the recovery stage's timeout axis, which a single value would drop)."""

import pytest

from conftest import SWEEPS, assert_renders, run_reduced, write_results
from routesim.studies.least_outstanding import retries
from routesim.studies.least_outstanding.common import lead, squeeze

INF = float("inf")
TIMEOUT = 10000.0


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return run_reduced(tmp_path_factory.mktemp("retries"), SWEEPS / "token-routing-retry.toml",
                       {"timeout_ms = [5000, 10000, 20000]": "timeout_ms = [10000, 20000]",
                        "measure_s = 40": "measure_s = 35",
                        "count = 8 }": "count = 3 }"})


def test_claim7_after_the_incident(out):
    crash, hole, control, rec = (squeeze(out[s]).squeeze(drop=True)
                                 for s in ("crash", "black-hole", "no-incident", "recovery"))
    data = (crash, hole, control, rec)
    first = retries.windows(rec)[0][0]
    at = dict(warmup_s=first, timeout_ms=TIMEOUT)

    gap = retries.after(rec, "attainment", "crash-recover").sel(at)
    # Without the budget the system is still below the no-incident control after the
    # crash has ended, and the extra attempts are still being routed ...
    assert lead(gap.sel(retry_budget=INF)) == "below"
    assert lead(retries.after(rec, "routed", "crash-recover").sel(at).sel(retry_budget=INF)) == "above"
    # ... while the budget leaves less of a gap on every seed.
    assert lead(gap.sel(retry_budget=0.2) - gap.sel(retry_budget=INF)) == "above"
    # With no incident at all, retries without the budget already cost attainment (the
    # storm needs no trigger), and a black hole, which fails requests for good, leaves
    # the system better than the control.
    assert lead(retries.storm(rec).sel(at)) == "below"
    assert lead(retries.after(rec, "attainment", "black-hole").sel(at).sel(retry_budget=INF)) == "above"
    # The full study's verdict: qualified (the black-hole containment is not confirmed,
    # and the no-budget control storms by itself).
    assert retries.parts(data)["storm"]
    assert retries.verdict(data) in ("holds with qualification", "holds")


def test_claim7_row_section_and_figures_render(out, tmp_path):
    text = assert_renders(retries, write_results(tmp_path / "results", out), tmp_path / "figures")
    assert "timeouts of 10 and 20 s" in text
