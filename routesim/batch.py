"""Run a grid through its model's batch kernel, in chunks of runs of bounded memory.

Runs are independent and the kernels hold no random state, so results do not
depend on the chunk size or the thread count: a chunk (a contiguous range ``lo:hi`` of
the grid's runs in its model's order, ``grid.order()``, see :mod:`routesim.chunks`) can
be simulated anywhere, in any order, and put back in its place (:func:`put`).
"""

from . import models

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

    def put_at(self, runs, part: "FlatOutcome") -> None:
        """Copy ``part`` (the results of the flat runs ``runs``, shape (k,)) into place."""
        for name in self.FIELDS:
            getattr(self, name)[runs] = getattr(part, name)


def outcome_type(grid):
    """The class of a grid's raw results (its model's ``Outcome``)."""
    return models.of_grid(grid).outcome_type()


def default_chunk_size(grid) -> int:
    """Runs per chunk, as the grid's model sizes them (bounded scratch, and at least
    ``MIN_CHUNKS`` chunks for a progress display that moves)."""
    return models.of_grid(grid).default_chunk_size(grid)


def simulate_range(grid, lo: int, hi: int):
    """Simulate chunk ``lo:hi`` of ``grid`` (its runs ``grid.order()[lo:hi]``, or the flat
    runs ``lo:hi``) through its model's kernel; the part's runs in that order."""
    model, order = models.of_grid(grid), grid.order()
    if order is None:
        return model.simulate_range(grid, lo, hi)
    return model.simulate_range(grid.take(order[lo:hi]), 0, hi - lo)


def put(grid, outcome: FlatOutcome, lo: int, part: FlatOutcome) -> None:
    """Put ``part``, chunk ``lo:lo + part.runs`` of ``grid`` (:func:`simulate_range`), in
    place in ``outcome`` (the grid's, flat order)."""
    order = grid.order()
    if order is None:
        outcome.put(lo, part)
    else:
        outcome.put_at(order[lo:lo + part.runs], part)


def simulate(grid, chunk_size: int | None = None, progress=None):
    """Simulate every run of ``grid``; ``progress(n)`` is called after each chunk of n runs."""
    chunk = chunk_size or default_chunk_size(grid)
    outcome = outcome_type(grid).empty(grid)
    for lo in range(0, grid.runs, chunk):
        hi = min(grid.runs, lo + chunk)
        put(grid, outcome, lo, simulate_range(grid, lo, hi))
        if progress is not None:
            progress(hi - lo)
    return outcome
