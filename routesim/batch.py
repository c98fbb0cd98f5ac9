"""Run a grid through the batch kernel, in chunks of runs of bounded memory.

Runs are independent and the kernel holds no random state, so results do not
depend on the chunk size or the thread count.
"""

from dataclasses import dataclass

import numpy as np

from .dtypes import LEVEL, METRICS, REPLICA, REQUEST, ROUTER, TAIL_LEVELS, WORK
from .engine import run_batch_nb
from .grid import SCRATCH_PER_ARRIVAL, Grid

SCRATCH_BUDGET = 256 * 2**20  # bytes of per-run scratch in one chunk
MIN_CHUNKS = 16               # for a progress display that moves


@dataclass(frozen=True)
class Outcome:
    """Raw results of a grid: metrics (runs,) METRICS; replicas (runs, replicas) REPLICA
    (final state and per-replica counters); router (runs,) ROUTER; tail (runs, levels)
    time-average fraction of replicas holding at least i requests."""

    metrics: np.ndarray
    replicas: np.ndarray
    router: np.ndarray
    tail: np.ndarray


def default_chunk_size(grid: Grid) -> int:
    """Runs per chunk: at most ``SCRATCH_BUDGET`` of scratch, at least ``MIN_CHUNKS`` chunks."""
    per_run = max(1.0, float(grid.arrivals().mean())) * SCRATCH_PER_ARRIVAL if grid.runs else 1.0
    by_memory = max(1, int(SCRATCH_BUDGET // per_run))
    by_progress = max(1, -(-grid.runs // MIN_CHUNKS))
    return max(1, min(by_memory, max(by_progress, 64)))


def simulate(grid: Grid, chunk_size: int | None = None, progress=None) -> Outcome:
    """Simulate every run of ``grid``; ``progress(n)`` is called after each chunk of n runs."""
    runs = grid.runs
    chunk = chunk_size or default_chunk_size(grid)
    metrics = np.zeros(runs, dtype=METRICS)
    replicas = np.zeros((runs, grid.replicas), dtype=REPLICA)
    replicas["base_speed"] = grid.base_speed
    router = np.zeros(runs, dtype=ROUTER)
    levels = np.zeros((runs, TAIL_LEVELS), dtype=LEVEL)
    work = np.zeros((runs, grid.replicas + 1), dtype=WORK)
    arrivals = grid.arrivals()
    for lo in range(0, runs, chunk):
        hi = min(runs, lo + chunk)
        off = np.zeros(hi - lo + 1, dtype=np.int64)
        np.cumsum(arrivals[lo:hi], out=off[1:])
        n = int(off[-1])
        run_batch_nb(grid.params[lo:hi], replicas[lo:hi], router[lo:hi], work[lo:hi],
                     levels[lo:hi], np.empty(n, REQUEST), off, grid.wl_t, grid.wl_demand,
                     grid.wl_jitter, grid.wl_off, grid.ru, grid.ru_off, grid.events,
                     metrics[lo:hi])
        if progress is not None:
            progress(hi - lo)
    return Outcome(metrics=metrics, replicas=replicas, router=router, tail=levels["area"])
