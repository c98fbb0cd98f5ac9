"""Run a grid through the batch kernel, in chunks of runs of bounded memory.

Runs are independent and the kernel holds no random state, so results do not
depend on the chunk size or the thread count: a chunk (a contiguous range of flat
runs, see :mod:`routesim.chunks`) can be simulated anywhere, in any order, and put
back in its place.
"""

from dataclasses import dataclass

import numpy as np

from .queue.dtypes import LEVEL, METRICS, REPLICA, REQUEST, ROUTER, TAIL_LEVELS, WORK
from .queue.engine import run_batch_nb
from .grid import SCRATCH_PER_ARRIVAL, Grid

SCRATCH_BUDGET = 256 * 2**20  # bytes of per-run scratch in one chunk
MIN_CHUNKS = 16               # for a progress display that moves


class FlatOutcome:
    """Raw results of runs, one array per name in ``FIELDS``, each with runs first."""

    FIELDS = ()

    @property
    def runs(self) -> int:
        return getattr(self, self.FIELDS[0]).shape[0]

    def put(self, lo: int, part: "FlatOutcome") -> None:
        """Copy ``part`` (the results of runs ``lo:lo + part.runs``) into place."""
        hi = lo + part.runs
        for name in self.FIELDS:
            getattr(self, name)[lo:hi] = getattr(part, name)


@dataclass(frozen=True)
class Outcome(FlatOutcome):
    """Raw results of a grid: metrics (runs,) METRICS; replicas (runs, replicas) REPLICA
    (final state and per-replica counters); router (runs,) ROUTER; tail (runs, levels)
    time-average fraction of replicas holding at least i requests."""

    metrics: np.ndarray
    replicas: np.ndarray
    router: np.ndarray
    tail: np.ndarray

    FIELDS = ("metrics", "replicas", "router", "tail")

    @classmethod
    def empty(cls, grid: Grid, lo: int = 0, hi: int | None = None) -> "Outcome":
        """Output arrays for runs ``lo:hi`` of ``grid``, ready for the kernel."""
        hi = grid.runs if hi is None else hi
        replicas = np.zeros((hi - lo, grid.replicas), dtype=REPLICA)
        replicas["base_speed"] = grid.base_speed[lo:hi]
        return cls(metrics=np.zeros(hi - lo, dtype=METRICS), replicas=replicas,
                   router=np.zeros(hi - lo, dtype=ROUTER), tail=np.zeros((hi - lo, TAIL_LEVELS)))


def outcome_type(grid):
    """The class of a grid's raw results (Outcome, or the batching model's TokenOutcome)."""
    if getattr(grid, "kind", "queue") == "batching":
        from .batching.grid import TokenOutcome
        return TokenOutcome
    return Outcome


def default_chunk_size(grid: Grid) -> int:
    """Runs per chunk: at most ``SCRATCH_BUDGET`` of scratch, at least ``MIN_CHUNKS`` chunks.
    (A batching run's scratch lives in the kernel, one run per thread: only progress counts.)"""
    if getattr(grid, "kind", "queue") == "batching":
        return max(1, -(-grid.runs // MIN_CHUNKS))
    per_run = max(1.0, float(grid.arrivals().mean())) * SCRATCH_PER_ARRIVAL if grid.runs else 1.0
    by_memory = max(1, int(SCRATCH_BUDGET // per_run))
    by_progress = max(1, -(-grid.runs // MIN_CHUNKS))
    return max(1, min(by_memory, max(by_progress, 64)))


def simulate_range(grid: Grid, lo: int, hi: int) -> Outcome:
    """Simulate runs ``lo:hi`` of ``grid`` (one chunk); scratch is sized to this chunk."""
    if getattr(grid, "kind", "queue") == "batching":
        from .batching.grid import simulate_range as token_range
        return token_range(grid, lo, hi)
    out = Outcome.empty(grid, lo, hi)
    arrivals = grid.arrivals()[lo:hi]
    off = np.zeros(hi - lo + 1, dtype=np.int64)
    np.cumsum(arrivals, out=off[1:])
    n = int(off[-1])
    levels = np.zeros((hi - lo, TAIL_LEVELS), dtype=LEVEL)
    run_batch_nb(grid.params[lo:hi], out.replicas, out.router,
                 np.zeros((hi - lo, grid.replicas + 1), dtype=WORK), levels,
                 np.empty(n, REQUEST), off, grid.wl_t, grid.wl_demand, grid.wl_jitter,
                 grid.wl_off, grid.ru, grid.ru_off, grid.events, out.metrics)
    out.tail[:] = levels["fraction"]
    return out


def simulate(grid: Grid, chunk_size: int | None = None, progress=None) -> Outcome:
    """Simulate every run of ``grid``; ``progress(n)`` is called after each chunk of n runs."""
    chunk = chunk_size or default_chunk_size(grid)
    outcome = outcome_type(grid).empty(grid)
    for lo in range(0, grid.runs, chunk):
        hi = min(grid.runs, lo + chunk)
        outcome.put(lo, simulate_range(grid, lo, hi))
        if progress is not None:
            progress(hi - lo)
    return outcome
