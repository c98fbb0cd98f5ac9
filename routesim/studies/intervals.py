"""Paired comparisons by seed: the mean of per-seed differences and its bootstrap
interval, the one rule every study that states an interval uses.

**Intervals.** The mean of per-seed differences with a 95 % percentile bootstrap
interval (``scipy.stats.bootstrap``, 9,999 resamples of the seeds, a fixed generator:
deterministic). When every seed gives the same difference (a trace and a deterministic
policy: the seeds repeat one run) the interval is that value: there is no sampling
variation to resample.
"""

import math
import warnings

import numpy as np

LEVEL = 0.95
RESAMPLES = 9999


def interval(d):
    """(mean, low, high) of the per-seed differences ``d`` (1-d, finite values only):
    the mean and its 95 % percentile bootstrap interval; (v, v, v) when every value is
    v; NaNs when fewer than two values are finite."""
    from scipy import stats
    d = np.asarray(d, float)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return (math.nan, math.nan, math.nan)
    m = float(np.mean(d))
    if np.all(d == d[0]):
        return (m, m, m)
    if d.size < 2:
        return (m, math.nan, math.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap((d,), np.mean, confidence_level=LEVEL, n_resamples=RESAMPLES,
                              method="percentile", random_state=np.random.default_rng(0))
    return (m, float(res.confidence_interval.low), float(res.confidence_interval.high))


def excludes_zero(ci) -> int:
    """+1 if the interval lies above 0, -1 if below, 0 otherwise (or NaN)."""
    _, lo, hi = ci
    if lo > 0:
        return 1
    if hi < 0:
        return -1
    return 0


def interval_text(ci, digits=1, same="exact") -> str:
    """``ci`` = (mean, low, high) as a document writes it: "+m [+low, +high]", marked
    **≠** when the interval excludes 0; "+m (``same``)" when every seed gave m; "—" for
    no data."""
    m, lo, hi = ci
    if math.isnan(m):
        return "—"
    if lo == hi == m:
        return f"{m:+.{digits}f} ({same})"
    mark = " **≠**" if excludes_zero(ci) else ""
    return f"{m:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]{mark}"
