"""Was a window in a steady state? The one rule the printed tables and
``routesim.capacity`` apply to a run's ``backlog_growth`` and KV occupancy trend
(token-model.md §7, "Steady state").
"""

import numpy as np

BACKLOG_SHARE = 0.02
"""Not steady when the median over runs of ``backlog_growth`` exceeds this share of the
cohort's arrivals (requests in the system grew by more than 2 % of what arrived)."""
OCCUPANCY_RISE = 0.05
"""Not steady when the median over runs of ``kv_occupancy_last - kv_occupancy_first``
exceeds this (5 points of the KV pool between the window's first and last quarter)."""

VARIABLES = ("backlog_growth", "kv_occupancy_first", "kv_occupancy_last")
"""The variables a Dataset needs for the check (the batching model's)."""


def has_check(ds) -> bool:
    return all(v in ds for v in VARIABLES)


def trend(sub):
    """(median backlog growth over cohort arrivals, median KV occupancy rise) of the
    runs of ``sub`` (a Dataset of some runs: any shape)."""
    growth = sub.backlog_growth.values / np.maximum(sub.arrivals.values, 1)
    rise = sub.kv_occupancy_last.values - sub.kv_occupancy_first.values
    return float(np.nanmedian(growth)), float(np.nanmedian(rise))


def is_steady(growth: float, rise: float) -> bool:
    return not (growth > BACKLOG_SHARE or rise > OCCUPANCY_RISE)


def rule() -> str:
    return (f"backlog growth above {100 * BACKLOG_SHARE:g} % of arrivals, or KV occupancy rising by more "
            f"than {100 * OCCUPANCY_RISE:g} points from the window's first quarter to its last (medians over seeds)")
