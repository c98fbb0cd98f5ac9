"""Claim 6 of the least-outstanding-routing study (cold replicas get flooded): the verdict
logic on hand-built Datasets whose answer is known by construction, and the verdict's
directions recomputed from a reduced run of sweeps/token-routing-cold.toml (4 seeds; the
same load, arms, cold factors and windows, the warm-up cut from 1,200 s to 80 s with the
recovery moved with it). The claim's row, section and figures are drawn from the same run."""

import numpy as np
import pytest
import xarray as xr

from conftest import SWEEPS, assert_renders, run_reduced, write_results
from routesim.studies.least_outstanding import cold_start
from routesim.studies.least_outstanding.common import squeeze

SWEEP = SWEEPS / "token-routing-cold.toml"
SEEDS = np.arange(1, 9)
REPLICAS = np.arange(1, 9)
COLD = 3          # the sweep's start_down = [3] (1-based)


def _attrs(stage):
    return {"sweep_text": SWEEP.read_text(), "sweep_file": str(SWEEP), "stage": stage, "warmup_s": 1200.0,
            "measure_s": 8.0}


def _hand_built(ready_cuts):
    """The cold replica's TTFT p99 is 2,000 ms in plain against 500 ms on warm replicas
    (+300 %); slow start and both halve it (−50 %); the readiness delay halves it too if
    ``ready_cuts``, else leaves it as plain's ± 1 %. In the flood's first second it gets
    10 attempts against 1 per warm replica (10/17 = 58.8 %, fair 12.5 %)."""
    cf, rd, ss = [1.0, 3.0], [0.0, 2000.0], [0.0, 10000.0]
    p99 = np.full((2, 2, 2, SEEDS.size, REPLICAS.size), 500.0)
    noise = 1 + (SEEDS % 3 - 1) * 0.01
    for j, r in enumerate(rd):
        for k, s in enumerate(ss):
            plain = r == 0 and s == 0
            cut = s > 0 or (r > 0 and ready_cuts)
            p99[:, j, k, :, COLD - 1] = (1000.0 if cut else 2000.0) * (noise if not (plain or cut) else 1)
    dims = ("cold_factor", "ready_delay_ms", "slow_start_ms", "seed", "replica")
    cold = xr.Dataset({"replica_ttft_p99": (dims, p99)},
                      coords=dict(cold_factor=cf, ready_delay_ms=rd, slow_start_ms=ss, seed=SEEDS, replica=REPLICAS),
                      attrs=_attrs("cold"))
    flood = {}
    for name, delay in (("flood", 0.0), ("flood-ready", 2000.0)):
        a = np.ones((2, SEEDS.size, REPLICAS.size))
        a[0, :, COLD - 1] = 10.0          # plain: the flood
        a[1, :, COLD - 1] = 0.1           # slow start: weight 0.1 of a warm replica's
        flood[name] = xr.Dataset({"assigned": (("slow_start_ms", "seed", "replica"), a)},
                                 coords=dict(slow_start_ms=ss, seed=SEEDS, replica=REPLICAS),
                                 attrs={**_attrs(name), "cold_factor": 3.0})
    return {"cold": cold, **flood}


@pytest.mark.parametrize("ready_cuts, expected", [(True, "holds"), (False, "holds with qualification")])
def test_verdict_logic_on_hand_built_stages(ready_cuts, expected):
    data = _hand_built(ready_cuts)
    assert cold_start.cold_replica(data["cold"]) == COLD
    c = cold_start.comparisons(data)
    assert c["flood"][0][0] == pytest.approx(100 * (10 / 17 - 1 / 8))
    assert c["flood"][0][3] == +1
    assert c["hurt"][0][0] == pytest.approx(300.0) and c["hurt"][0][3] == +1
    _, ready, slow, both = cold_start.arms(data["cold"])
    assert c[slow[0]][0][0] == pytest.approx(-50.0) and c[slow[0]][0][3] == -1
    assert c[both[0]][0][3] == -1
    assert c[ready[0]][0][3] == (-1 if ready_cuts else 0)
    assert cold_start.verdict(data) == expected


REDUCE = {"warmup_s = 1200": "warmup_s = 80", "warmup_s = 1135": "warmup_s = 15",
          "warmup_s = 1202": "warmup_s = 82", "at_s = 1200": "at_s = 80", "count = 16 }": "count = 4 }"}
"""The recovery at 80 s instead of 1,200 s: the timeline figure traces the whole run, so
its cost grows with the warm-up; the flood and slow start's cut do not need the long
class's steady state (the full design shows them at 1,200 s)."""


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return run_reduced(tmp_path_factory.mktemp("cold"), SWEEP, REDUCE, cut_before="# The Azure-length arm")


def test_claim6_directions_from_a_reduced_run(out):
    data = {name: squeeze(ds).squeeze(drop=True) for name, ds in out.items()}
    c = cold_start.comparisons(data)
    _, ready, slow, both = cold_start.arms(data["cold"])
    # the flood: more than 1/N of the first second's attempts; slow start keeps it below 1/N
    assert c["flood"][0][3] == +1
    assert (cold_start.first_second(data, 0.0, slow[2]) < cold_start.fair(data["cold"])).all()
    # slow start cuts the cold replica's TTFT p99
    assert c[slow[0]][0][3] == -1


def test_claim6_row_section_and_figure_render(out, tmp_path):
    assert_renders(cold_start, write_results(tmp_path / "results", out), tmp_path / "figures")
