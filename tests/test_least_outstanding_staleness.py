"""Claim 3's herd (docs/least-outstanding-routing.md): the herd index by hand, and the
direction the full study found recomputed from a reduced run's timeline."""

import numpy as np
import pytest
import xarray as xr

from conftest import SWEEPS, run_reduced
from routesim.studies.least_outstanding import staleness


def test_herd_index_by_hand():
    # 20 ms samples; warm-up 0.1 s; then two 100 ms windows: the first puts 4 of 5
    # placements on replica 1, the second spreads 4 over four replicas.
    a = np.zeros((15, 4), int)
    a[0:5, 0] = 7                       # before the warm-up's end: ignored
    a[5:9, 0] = 1
    a[9, 1] = 1                         # window 1: 4 of 5 on replica 1
    a[10, 0] = a[11, 1] = a[12, 2] = a[13, 3] = 1     # window 2: 1 of 4 each
    tl = xr.Dataset({"assignments": (("policy", "time", "replica"), a[None])},
                    coords={"policy": ["x"], "time": np.arange(1, 16) * 0.02},
                    attrs={"warmup_s": 0.1})
    assert staleness.herd_index(tl, "x") == pytest.approx((4 + 1) / (5 + 4))


def test_stale_global_minimum_herds_and_power_of_two_does_not(tmp_path):
    ds = run_reduced(tmp_path, SWEEPS / "token-routing-staleness.toml",
                     {'mode = ["periodic", "periodic_local"]': 'mode = ["periodic"]',
                      "period_ms = [0, 5, 10, 25, 50, 100, 250]": "period_ms = [100]",
                      "routers = [1, 4]": "routers = [1]",
                      "measure_s = 15": "measure_s = 6",
                      "count = 4 }": "count = 1 }"})["staleness"]
    tl = staleness.herd_trace(ds)
    # The full study: 0.76 against 0.39; uniform placement of ~5 per window over 8
    # replicas would give about 0.4.
    assert staleness.herd_index(tl, "least_tokens") > 0.6
    assert staleness.herd_index(tl, "power_of_d") < 0.5
