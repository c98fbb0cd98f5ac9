"""What both replica models draw the same way: the arrival process of model.md §2
(unit exponentials time-changed through the scenario's piecewise-constant rate
profile, one row of uniforms per arrival) and the router's own stream of uniforms.
"""

import numpy as np

from .ieee_math import log1p_array

_BLOCK_MIN = 1024


def rate_profile(rate_rps: float, rate_events, horizon_ms: float):
    """Piecewise-constant arrival rate.

    ``rate_events`` is a sequence of ``(time_ms, multiplier)`` sorted by time; each
    multiplier is absolute and holds until the next one (a later event at an equal
    time wins). Returns ``(starts_ms, rates_per_ms, cum)``, each of shape
    ``(segments,)``, with ``cum[j] = Λ(starts_ms[j])``, the expected arrivals before
    segment ``j``.
    """
    base = rate_rps / 1000.0
    starts, rates = [0.0], [base]
    for time_ms, multiplier in rate_events:
        if time_ms >= horizon_ms:
            continue
        if time_ms == starts[-1]:
            rates[-1] = base * multiplier
        else:
            starts.append(float(time_ms))
            rates.append(base * multiplier)
    cum = [0.0]
    for j in range(1, len(starts)):
        cum.append(cum[-1] + rates[j - 1] * (starts[j] - starts[j - 1]))
    return np.array(starts), np.array(rates), np.array(cum)


def draw_arrivals(seed: int, rate_rps: float, rate_events, horizon_ms: float, columns: int):
    """Arrival times in ``[0, horizon_ms)`` and their rows of uniforms (model.md §2).

    Arrival ``k`` consumes row ``k`` of ``Generator(PCG64(seed)).random((n, columns))``;
    column 0 is its unit exponential ``-log1p(-U[k,0])`` (routesim.ieee_math, the same
    bits on every machine), time-changed through the rate profile. Returns
    ``(t_ms, u)`` of shapes ``(n,)`` and ``(n, columns)``; row ``k`` does not depend on n.
    """
    starts, rates, cum = rate_profile(rate_rps, rate_events, horizon_ms)
    total = cum[-1] + rates[-1] * (horizon_ms - starts[-1])  # Λ(horizon)
    rng = np.random.Generator(np.random.PCG64(seed))
    blocks, s_blocks = [], []
    s_last = 0.0
    block = int(total + 8.0 * np.sqrt(total) + _BLOCK_MIN)
    while True:
        u = rng.random((block, columns))
        # S_k = E_0 + ... + E_k, summed left to right across blocks
        s = np.add.accumulate(np.concatenate(([s_last], -log1p_array(-u[:, 0]))))[1:]
        blocks.append(u)
        s_blocks.append(s)
        s_last = s[-1]
        if s_last >= total:
            break
        block = _BLOCK_MIN
    u = np.concatenate(blocks)
    s = np.concatenate(s_blocks)
    n = int(np.searchsorted(s, total, side="left"))  # S_k < Λ(H)  <=>  t_k < H
    u, s = u[:n], s[:n]
    seg = np.searchsorted(cum, s, side="right") - 1
    t_ms = starts[seg] + (s - cum[seg]) / rates[seg]
    keep = t_ms < horizon_ms  # guards the last ulp of the inversion
    return t_ms[keep], u[keep]


def rate_events(sweep, scenario) -> tuple:
    """``(time_ms, multiplier)`` of a scenario's rate changes, in order: what
    :func:`rate_profile` takes (``sweep`` a parsed Sweep of either model)."""
    code = sweep.model.event_kinds["rate_multiplier"]
    return tuple((e.at_s * 1000.0, e.value) for e in sweep.scenarios[scenario] if e.kind == code)


def expected_arrivals(rate_rps: float, rate_events, horizon_ms: float) -> float:
    """Λ(horizon): the mean number of arrivals of a profile (for memory estimates)."""
    starts, rates, cum = rate_profile(rate_rps, rate_events, horizon_ms)
    return float(cum[-1] + rates[-1] * (horizon_ms - starts[-1]))


def router_stream(seed: int, count: int) -> np.ndarray:
    """The router's own uniforms for a run with this seed, shape ``(count,)``.

    Independent of the workload stream (a spawned child of the seed's SeedSequence);
    randomized policies consume it in decision order. Its prefix does not depend on
    ``count``.
    """
    child = np.random.SeedSequence(seed).spawn(1)[0]
    return np.random.Generator(np.random.PCG64(child)).random(count)
