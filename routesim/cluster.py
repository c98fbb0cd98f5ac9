"""Chunks on a ``dask.distributed`` cluster (optional: ``pip install -e '.[cluster]'``).

The client sends each worker a :class:`Job` (the sweep file's text, the stage's index
and the values it inherits) and chunk ranges; the worker rebuilds the stage's grid
once (``grid.build`` is deterministic), keeps it for the following chunks, and
returns each chunk's outcome (the model's ``Outcome``). Kernels load from Numba's
disk cache (or compile) on a worker's first chunk only, since worker processes
persist. A worker that dies mid-chunk has its chunks rerun elsewhere by the
scheduler; the results are the same wherever a chunk runs.
"""

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from . import batch
from .chunks import package_digest

INSTALL = "pip install -e '.[cluster]' in a clone, or pip install 'distributed>=2024.1'"
CONNECT_TIMEOUT_S = 10
GRIDS_KEPT = 2   # grids a worker keeps (a stage's, and the previous one's)


class ClusterError(RuntimeError):
    """No cluster to run on: distributed missing, scheduler unreachable, mismatched workers."""


class SchedulerLost(RuntimeError):
    """The scheduler went away mid-stage (the chunks received so far are kept)."""


def distributed():
    """The ``distributed`` module, or a ClusterError that says how to install it."""
    try:
        import distributed as dist
    except ImportError:
        raise ClusterError(f"running on a Dask cluster needs dask.distributed, which is not installed: "
                           f"{INSTALL}") from None
    return dist


@contextmanager
def connect(scheduler: str | None = None, workers: int | None = None):
    """A ``Client`` of the scheduler at ``scheduler`` (``tcp://HOST:PORT``), or of a new
    local cluster of ``workers`` processes (one thread each; the Numba kernels of each
    share the machine's cores between them). Closed on exit."""
    dist = distributed()
    _quiet(logging.ERROR)  # our own messages say what went wrong
    cluster = None
    if workers is not None:
        threads = max(1, (os.cpu_count() or 1) // workers)
        cluster = dist.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                    dashboard_address=None, silence_logs=logging.ERROR,
                                    env={"NUMBA_NUM_THREADS": str(threads)})
        client = dist.Client(cluster)
    else:
        try:
            client = dist.Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise ClusterError(f"cannot reach a Dask scheduler at {scheduler} "
                               f"within {CONNECT_TIMEOUT_S} s ({type(exc).__name__})") from None
    try:
        yield client
    finally:
        close(client)
        if cluster is not None:
            cluster.close()


def _quiet(level) -> None:
    """Set the level of distributed's loggers (its config gives several their own)."""
    names = [n for n in list(logging.root.manager.loggerDict) if n.split(".")[0] in ("distributed", "tornado")]
    for name in {"distributed", "tornado", *names}:
        logging.getLogger(name).setLevel(level)


def close(client) -> None:
    """Close a client, quickly and quietly even when its scheduler is gone."""
    if client.status != "running":  # cancelled reconnect attempts would log tracebacks
        _quiet(logging.CRITICAL)
    try:
        client.close(timeout=2)
    except Exception:  # noqa: BLE001 - nothing left to do with it
        pass


@dataclass(frozen=True)
class Job:
    """What a worker needs to rebuild a stage's grid: the sweep file's text (``path``
    labels messages), the stage's index, the inherited values as sorted (name, value)
    pairs, and the client's :func:`package_digest`."""

    text: str
    path: str
    stage: int
    selected: tuple
    package: str

    @classmethod
    def of(cls, sweep, stage, selected: dict):
        sel = tuple(sorted((k, v.item() if hasattr(v, "item") else v) for k, v in selected.items()))
        return cls(sweep.text, str(sweep.path), sweep.stages.index(stage), sel, package_digest())


_GRIDS: OrderedDict = OrderedDict()
_LOCK = threading.Lock()
STATS = {"grids_built": 0, "chunks": 0}
"""Per process: grids built and chunks simulated (``client.run(worker_stats)`` reads them)."""


def worker_grid(job: Job):
    """The job's grid, built on this worker's first chunk of the stage and then reused."""
    with _LOCK:
        grid = _GRIDS.get(job)
        if grid is not None:
            _GRIDS.move_to_end(job)
            return grid
        if job.package != package_digest():
            raise ClusterError(f"worker pid {os.getpid()} runs routesim {package_digest()}, the client "
                               f"{job.package}; install the same routesim on every worker")
        from .config import parse_sweep
        from .grid import build
        sweep = parse_sweep(job.text, job.path)
        grid = build(sweep, sweep.stages[job.stage], dict(job.selected))
        _GRIDS[job] = grid
        STATS["grids_built"] += 1
        while len(_GRIDS) > GRIDS_KEPT:
            _GRIDS.popitem(last=False)
        return grid


def run_chunk(job: Job, lo: int, hi: int):
    """Chunk ``lo:hi`` of the job's stage (:func:`routesim.batch.simulate_range`; this runs
    on a worker)."""
    part = batch.simulate_range(worker_grid(job), lo, hi)
    STATS["chunks"] += 1
    return part


def worker_stats() -> dict:
    """This process's grids built, chunks run, and kernel loads: how many times the batch
    kernel was loaded from Numba's disk cache or compiled (once, however many chunks)."""
    from . import models
    loads = sum(model.kernel_loads() for model in models.every())
    return dict(STATS, pid=os.getpid(), kernel_loads=loads)


def compute(client, job: Job, ranges: list, todo: list, tag: str) -> Iterator:
    """Submit chunks ``todo`` (indices into ``ranges``) and yield (i, Outcome) as each
    finishes, in any order. Raises SchedulerLost when the scheduler goes away."""
    dist = distributed()
    pending = {client.submit(run_chunk, job, *ranges[i], key=f"routesim-{tag}-{i}", pure=False): i
               for i in todo}
    try:
        for fut in dist.as_completed(list(pending)):
            try:
                part = fut.result()
            except Exception as exc:
                # a closed connection (CommClosedError is an OSError) or a future cancelled
                # under us: the scheduler is gone, though the client may not know it yet
                if client.status != "running" or isinstance(exc, (OSError, dist.client.FutureCancelledError)):
                    where = getattr(client.scheduler, "address", "") or "the scheduler"
                    raise SchedulerLost(f"lost the Dask scheduler at {where} ({type(exc).__name__})") from None
                raise
            i = pending.pop(fut)
            fut.release()
            yield i, part
    finally:
        if pending and client.status == "running":
            client.cancel(list(pending))
