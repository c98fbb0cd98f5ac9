"""Claim 2's maximum queue (docs/least-outstanding-routing.md), recomputed from reduced
runs of the same design: with one random choice the fullest replica holds more than with
two on every seed, and the one-choice maximum grows from 8 to 128 replicas more than
the two-choice one (balls into bins: ln n / ln ln n against ln ln n / ln 2)."""

import numpy as np

from conftest import SWEEPS, run_reduced
from routesim.studies.least_outstanding import choices
from routesim.studies.least_outstanding.common import lead, squeeze


def pod(tmp_path, n):
    out = run_reduced(tmp_path, SWEEPS / f"token-routing-scale-{n}.toml",
                      {"choices = [1, 2, 3, 4]": "choices = [1, 2]", "measure_s = 20": "measure_s = 10",
                       "count = 6 }": "count = 3 }"}, cut_before='[[stages]]\nname = "global"')
    return squeeze(out["pod"]).squeeze(drop=True)


def test_one_choice_fills_the_fullest_replica_more_and_it_grows_with_n(tmp_path):
    small, large = pod(tmp_path, 8), pod(tmp_path, 128)
    for ds in (small, large):
        one, two = choices.max_queue(ds.sel(choices=1)), choices.max_queue(ds.sel(choices=2))
        assert lead(one - two) == "above"
    growth = {c: np.median(choices.max_queue(large.sel(choices=c)))
              - np.median(choices.max_queue(small.sel(choices=c))) for c in (1, 2)}
    assert growth[1] > growth[2]


def test_max_queue_is_the_fullest_replica():
    import xarray as xr
    ds = xr.Dataset({"replica_max_outstanding": (("seed", "replica"), [[3, 9, 4], [7, 2, 2]])})
    assert list(choices.max_queue(ds)) == [9, 7]
