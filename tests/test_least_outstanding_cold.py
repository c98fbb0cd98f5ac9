"""Claim 6 of the least-outstanding-routing study (cold replicas get flooded), recomputed
from a reduced run of sweeps/token-routing-cold.toml (4 seeds; the same cold factors,
arms, windows and drain): the directions the full study found are asserted, and the
claim's row, section and figure are drawn from the same run (the section reads the warm
control, cold_factor 1, too)."""

import pytest

from conftest import SWEEPS, assert_renders, run_reduced, write_results
from routesim.studies.least_outstanding import cold_start
from routesim.studies.least_outstanding.common import lead, squeeze


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return run_reduced(tmp_path_factory.mktemp("cold"), SWEEPS / "token-routing-cold.toml",
                       {"count = 16 }": "count = 4 }"})


def test_claim6_least_requests_floods_a_cold_replica_and_slow_start_cuts_its_ttft(out):
    data = {name: squeeze(ds).squeeze(drop=True) for name, ds in out.items()}
    cold = data["cold"]
    plain, ready, slow, both = cold_start.arms(cold)
    for cf in (3.0, 5.0):
        # The flood: in its first second back, more than 1/N of the attempts, every seed.
        assert lead(cold_start.first_second(data, cf, 0.0, 0.0) - cold_start.fair(cold)) == "above", cf
        # ... and slow start keeps it below 1/N.
        assert lead(cold_start.first_second(data, cf, 0.0, slow[2]) - cold_start.fair(cold)) == "below", cf
        # Cold, the flooded replica's TTFT p99 is above the warm replicas', every seed.
        c, w = cold_start.ttft(cold, "replica_ttft_p99", cf, 0.0, 0.0)
        assert lead(c - w) == "above", cf
        # Slow start, alone and with the readiness delay, cuts it on every seed.
        for _, rd, ss in (slow, both):
            assert lead(cold_start.ttft(cold, "replica_ttft_p99", cf, rd, ss)[0] - c) == "below", (cf, rd, ss)
    flooded, hurt, cuts = cold_start.findings(data)
    assert flooded and hurt and cuts[slow[0]] and cuts[both[0]]
    # The full study: "holds with qualification" (the readiness delay alone is not lower
    # on all 16 seeds); with 4 seeds it may be, so either verdict is the study's direction.
    assert cold_start.verdict(data) in ("holds with qualification", "holds")


def test_claim6_row_section_and_figure_render(out, tmp_path):
    assert_renders(cold_start, write_results(tmp_path / "results", out), tmp_path / "figures")
