"""The steady-state check (routesim/steady.py) and the columns it gives the batching
table: hand-made Datasets whose verdicts follow from the stated thresholds."""

import numpy as np
import xarray as xr

from routesim import steady
from routesim.batching.summary import policy_table, token_policy_rows


def _ds(growth, first, last, unfinished=(0, 0)):
    """Two policies × two seeds at one condition; 1,000 cohort arrivals a run."""
    dims = ("policy", "rate_rps", "heterogeneity", "scenario", "seed")
    shape = (2, 1, 1, 1, 2)

    def var(values):
        return (dims, np.broadcast_to(np.asarray(values, float).reshape(2, 1, 1, 1, -1), shape).copy())

    data = {name: var([[1.0], [1.0]]) for name in (
        "attainment", "ttft_p99", "tpot_p99", "e2e_p99", "preemptions", "prefix_hit_rate", "goodput",
        "itl_p99")}
    data["arrivals"] = var([[1000], [1000]])
    for name in ("shed", "failed"):
        data[name] = var([[0], [0]])
    data["unfinished"] = var([[unfinished[0]], [unfinished[1]]])
    data["backlog_growth"] = var(growth)
    data["kv_occupancy_first"] = var(first)
    data["kv_occupancy_last"] = var(last)
    coords = {"policy": ["a", "b"], "rate_rps": [10.0], "heterogeneity": ["u"], "scenario": ["s"], "seed": [1, 2]}
    return xr.Dataset(data, coords=coords)


def test_thresholds_decide_the_verdict():
    assert steady.is_steady(0.02, 0.05)          # at the thresholds: still steady
    assert not steady.is_steady(0.0201, 0.0)     # backlog grew by more than 2 % of arrivals
    assert not steady.is_steady(0.0, 0.0501)     # occupancy rose by more than 5 points


def test_table_marks_the_row_whose_backlog_grows():
    # policy a: backlog +10 and +30 of 1,000 arrivals (median 2 %: steady); occupancy flat.
    # policy b: +40 and +60 (median 5 %: not steady).
    ds = _ds([[10, 30], [40, 60]], [[0.5, 0.5], [0.5, 0.5]], [[0.52, 0.5], [0.5, 0.5]], unfinished=(0, 25))
    headers, rows = token_policy_rows(ds)
    col = {h: k for k, h in enumerate(headers)}
    assert [r[col["steady"]] for r in rows] == ["yes", "no"]
    assert [r[col["backlog Δ"]] for r in rows] == ["20", "50"]
    assert [r[col["KV occ. Δ pts"]] for r in rows] == ["+1.0", "+0.0"]
    # 25 unfinished on each seed: 50 of 2,000 arrivals, 2.5 %
    assert [r[col["unfinished %"]] for r in rows] == ["0.00", "2.50"]
    assert "ITL p99 ms" in headers
    assert "warning: 1 of 2 rows were not in a steady state" in policy_table(ds)


def test_table_marks_rising_occupancy():
    ds = _ds([[0, 0], [0, 0]], [[0.5, 0.5], [0.30, 0.30]], [[0.5, 0.5], [0.40, 0.36]])
    headers, rows = token_policy_rows(ds)
    k = headers.index("steady")
    assert [r[k] for r in rows] == ["yes", "no"]
    assert rows[1][headers.index("KV occ. Δ pts")] == "+8.0"


def test_a_dataset_without_the_variables_gets_no_check():
    ds = _ds([[0, 0], [0, 0]], [[0, 0], [0, 0]], [[0, 0], [0, 0]]).drop_vars(list(steady.VARIABLES))
    headers, _ = token_policy_rows(ds)
    assert "steady" not in headers and "warning" not in policy_table(ds)
