"""Was a window in a steady state? The one rule the printed tables and
``routesim.capacity`` apply to a run's ``backlog_growth``, KV occupancy trend and
attainment trend (token-model.md §7, "Steady state"; docs/model.md "Steady state and
collapse").

Two scales, because one run's figures are noisy (on the example cluster below capacity,
one run's KV occupancy moves by up to 20 points between the window's first and last
quarter as the long class's few requests come and go, and its backlog by up to 4 % of
its arrivals) while a shared trend is not:

- **Per run** (:func:`unsteady_runs`): a run is *not steady* when its backlog grew by
  more than :data:`RUN_BACKLOG_SHARE` of its cohort arrivals, its KV occupancy rose by
  more than :data:`RUN_OCCUPANCY_RISE`, or the attainment of the requests arriving in
  its window's last quarter is more than :data:`ATTAINMENT_FALL` below that of its
  first quarter's (a collapse under way; read only when the run drained, and a Dataset
  written before ``attainment_first``/``_last`` existed is judged on the other two), or
  its KV cache ended the window at least :data:`RUN_FULL` full while it preempted more
  than :data:`RUN_PREEMPTIONS` of its arrivals (a
  collapse already complete: the cache full from the window's start shows no rise, and
  the backlog of a thrashing replica need not grow). Judged on each run alone, never on
  medians, so that a minority of collapsed seeds shows.
- **Per cell** (:func:`trend`, :func:`is_steady`): the median over the cell's runs of
  the backlog growth above :data:`BACKLOG_SHARE` or of the KV rise above
  :data:`OCCUPANCY_RISE`: a trend every run shares (the KV cache still filling after too
  short a warm-up), which the per-run thresholds, set above one run's noise, miss.

A cell is steady (:func:`cell_steady`) when neither flags it.
"""

import numpy as np

RUN_BACKLOG_SHARE = 0.05
"""A run is not steady when its ``backlog_growth`` exceeds this share of its cohort's
arrivals (a run below capacity on the example cluster reaches 4 %)."""
RUN_OCCUPANCY_RISE = 0.30
"""A run is not steady when its ``kv_occupancy_last - kv_occupancy_first`` exceeds this
(30 points; a run below capacity on the example cluster reaches 20: one run's KV rise is
mostly the noise of the long class, and a collapse at a full cache does not show here)."""
ATTAINMENT_FALL = 0.10
"""A run is not steady when its ``attainment_first - attainment_last`` exceeds this (the
last quarter's arrivals met the SLO 10 points less often than the first quarter's; a
run below capacity on the example cluster reaches 2.7 points, a collapsing one 14-28)."""
RUN_FULL = 0.95
"""A run is not steady when its ``kv_occupancy_last`` is at least this and it preempted
more than :data:`RUN_PREEMPTIONS` of its cohort arrivals: a cache that stays full and
evicts running work is a collapse whether or not it is still growing (issue 44:
least_tokens at 46 req/s, seed 14: KV 99 % over the whole window, 286 preemptions of
about 2,760 arrivals, attainment 4 %, its backlog shrinking)."""
RUN_PREEMPTIONS = 0.01
"""The preemptions (over the cohort's arrivals) above which a run at a full cache
(:data:`RUN_FULL`) is collapsed: 1 %, below the 10 % of the collapsed run above and
above an occasional preemption of a run that touches a full cache now and then."""
BACKLOG_SHARE = 0.02
"""A cell is not steady when the median over its runs of ``backlog_growth`` over
arrivals exceeds this (2 % of what arrived)."""
OCCUPANCY_RISE = 0.05
"""A cell is not steady when the median over its runs of the KV occupancy rise exceeds
this (5 points of the KV pool between the window's first and last quarter)."""

VARIABLES = ("backlog_growth", "kv_occupancy_first", "kv_occupancy_last")
"""The variables a Dataset needs for the check (the batching model's)."""
ATTAINMENT_TREND = ("attainment_first", "attainment_last")
"""The attainment trend's variables: used when the Dataset has them."""
READS = ("arrivals", *VARIABLES, *ATTAINMENT_TREND, "preemptions")
"""Every variable the per-run check reads (:func:`run_trends`; those beyond
:data:`VARIABLES` when the Dataset has them)."""


def has_check(ds) -> bool:
    return all(v in ds for v in VARIABLES)


def run_trends(sub):
    """Each run's (backlog growth over its cohort arrivals, KV occupancy rise,
    attainment fall, full and preempting) as arrays of the shape of ``sub.arrivals``
    (``sub``: a Dataset of some runs, any shape); the fall is 0 when the Dataset lacks
    the attainment trend and NaN where a quarter had no arrivals (not counted against
    the run); full and preempting (bool) is False when the Dataset lacks
    ``preemptions``."""
    growth = sub.backlog_growth.values / np.maximum(sub.arrivals.values, 1)
    rise = sub.kv_occupancy_last.values - sub.kv_occupancy_first.values
    if all(v in sub for v in ATTAINMENT_TREND):
        fall = np.where(drained(sub), sub.attainment_first.values - sub.attainment_last.values, 0.0)
    else:
        fall = np.zeros_like(rise)
    if "preemptions" in sub:
        with np.errstate(invalid="ignore"):
            full = ((sub.kv_occupancy_last.values >= RUN_FULL)
                    & (sub.preemptions.values > RUN_PREEMPTIONS * sub.arrivals.values))
    else:
        full = np.zeros(rise.shape, bool)
    return growth, rise, fall, full


def drained(sub) -> np.ndarray:
    """Per run of ``sub`` (the shape of ``sub.arrivals``): did it drain (``drain_s > 0``,
    an attr or a swept coordinate; a Dataset without it counts as drained)? Undrained,
    the last quarter's arrivals still in the system at the horizon count as misses, so
    the attainment trend is not read."""
    shape = sub.arrivals.shape
    if "drain_s" in sub.coords:
        d = sub["drain_s"].broadcast_like(sub.arrivals).transpose(*sub.arrivals.dims).values
        return np.asarray(d, float) > 0
    return np.full(shape, float(sub.attrs.get("drain_s", 1.0)) > 0)


def unsteady(growth, rise, fall, full=False):
    """The per-run rule, per element (NumPy broadcasting): does any of a run's figures
    exceed its threshold, or is its cache full while it preempts (``full``, bool)? NaN
    figures (a run that did not run, an empty quarter) do not count."""
    with np.errstate(invalid="ignore"):
        return ((np.asarray(growth) > RUN_BACKLOG_SHARE) | (np.asarray(rise) > RUN_OCCUPANCY_RISE)
                | (np.asarray(fall) > ATTAINMENT_FALL) | np.asarray(full, bool))


def unsteady_runs(sub) -> np.ndarray:
    """Per run of ``sub`` (bool, the shape of ``sub.arrivals``): not steady by the
    per-run rule. A run that did not run (NaN arrivals) is False."""
    return unsteady(*run_trends(sub)) & ~np.isnan(np.asarray(sub.arrivals.values, float))


def count_unsteady(sub) -> tuple[int, int]:
    """(runs of ``sub`` not steady by the per-run rule, runs of ``sub`` that ran)."""
    ran = ~np.isnan(np.asarray(sub.arrivals.values, float))
    return int(unsteady_runs(sub).sum()), int(ran.sum())


def trend(sub):
    """(median backlog growth over cohort arrivals, median KV occupancy rise) of the
    runs of ``sub``: the cell's shared trend."""
    growth, rise, _, _ = run_trends(sub)
    return float(np.nanmedian(growth)), float(np.nanmedian(rise))


def is_steady(growth: float, rise: float) -> bool:
    """The per-cell rule on a cell's medians (:func:`trend`)."""
    return not (growth > BACKLOG_SHARE or rise > OCCUPANCY_RISE)


def cell_steady(sub) -> bool:
    """Neither the cell's medians trend nor any of its runs is not steady."""
    return is_steady(*trend(sub)) and count_unsteady(sub)[0] == 0


def run_rule() -> str:
    return (f"its backlog grew by more than {100 * RUN_BACKLOG_SHARE:g} % of its arrivals, its KV occupancy "
            f"rose by more than {100 * RUN_OCCUPANCY_RISE:g} points from the window's first quarter to its last, "
            f"or its last quarter's arrivals met the SLO more than {100 * ATTAINMENT_FALL:g} points less often "
            f"than its first quarter's, or its KV cache ended the window at least {100 * RUN_FULL:g} % full "
            f"while its preemptions passed {100 * RUN_PREEMPTIONS:g} % of its arrivals")


def rule() -> str:
    return (f"a run is not steady when {run_rule()}; a cell also when the medians over its runs show backlog "
            f"growth above {100 * BACKLOG_SHARE:g} % of arrivals or a KV occupancy rise above "
            f"{100 * OCCUPANCY_RISE:g} points")
