"""Claim 8 of the least-outstanding-routing study (count-based capacity learning
over-learns, within sustained capacity): the verdict logic on hand-built Datasets whose
answer is known by construction, and the verdict recomputed from a reduced run of
sweeps/token-routing-hetero.toml (4 seeds, the same cluster, policies and loads, a 300 s
warm-up). The claim's row, section and figure are drawn from the same run."""

import numpy as np
import pytest
import xarray as xr

from conftest import SWEEPS, assert_renders, run_reduced, write_results
from routesim.studies.least_outstanding import learning
from routesim.studies.least_outstanding.common import squeeze

SEEDS = np.arange(1, 9)
FACTORS = np.array([0.769] + [1.0] * 7)


def _hand_built(rw_share):
    """rate_weighted gives replica 1 ``rw_share`` of the attempts (± 0.2 pp by seed),
    least_tokens and round_robin its share of the cluster's speed (1.3 / 8.3 = 15.7 %)
    and 1/8."""
    cs = (1 / 0.769) / (1 / 0.769 + 7)
    shares = {"rate_weighted": rw_share, "least_tokens": cs, "round_robin": 1 / 8}
    pols = list(learning.POLICIES)
    a = np.zeros((len(pols), 2, SEEDS.size, 8))
    for i, p in enumerate(pols):
        s = shares[p] + (SEEDS % 3 - 1) * 0.002
        a[i, :, :, 0] = 1000 * s
        a[i, :, :, 1:] = (1000 * (1 - s) / 7)[None, :, None]
    return xr.Dataset({"assigned": (("policy", "rate_rps", "seed", "replica"), a),
                       "time_factor": (("replica",), FACTORS)},
                      coords=dict(policy=pols, rate_rps=[35.0, 41.0], seed=SEEDS, replica=np.arange(1, 9)))


@pytest.mark.parametrize("rw_share, expected", [(0.20, "holds"), (0.157, "does not hold"),
                                                (0.12, "does not hold")])
def test_verdict_logic_on_hand_built_shares(rw_share, expected):
    ds = _hand_built(rw_share)
    assert learning.capacity_share(ds) == pytest.approx(1.3 / 8.3, rel=1e-3)
    c = learning.comparisons(ds)
    cs = learning.capacity_share(ds)
    assert c[("over", 35.0)][0][0] == pytest.approx(100 * (rw_share - cs) + 100 * np.mean((SEEDS % 3 - 1) * 0.002))
    assert learning.verdict(ds) == expected


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return run_reduced(tmp_path_factory.mktemp("claim8"), SWEEPS / "token-routing-hetero.toml",
                       {"warmup_s = 1200": "warmup_s = 300", "count = 16 }": "count = 4 }"},
                       cut_before="# The Azure-length arm")


def test_claim8_verdict_from_a_reduced_run(out):
    ds = squeeze(out["hetero"]).squeeze(drop=True)
    assert learning.verdict(ds) == "does not hold"


def test_claim8_row_section_and_figure_render(out, tmp_path):
    assert_renders(learning, write_results(tmp_path / "results", out), tmp_path / "figures")
