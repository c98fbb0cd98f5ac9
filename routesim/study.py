"""Run the stages of a sweep in order: grids, chunks (here or on a cluster, kept for
``--resume``), selection, Datasets."""

import contextlib
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import xarray as xr

from . import batch, chunks, grid as grid_mod
from .config import ConfigError, Selection, Stage, Sweep
from .results import to_dataset


def objective(ds: xr.Dataset, select: Selection) -> xr.DataArray:
    """The selection objective per candidate value: the mean over every other
    dimension (each condition weighted equally) of the mean over seeds of the metric."""
    per_condition = ds[select.metric].mean("seed")
    others = [d for d in per_condition.dims if d != select.parameter]
    return per_condition.mean(others)


def choose(ds: xr.Dataset, select: Selection):
    """The selected value (the first candidate among equals)."""
    obj = objective(ds, select).values
    if np.all(np.isnan(obj)):
        raise ValueError(f"objective {select.metric!r} is undefined for every candidate")
    i = int(np.nanargmax(obj) if select.maximize else np.nanargmin(obj))
    value = ds[select.parameter].values[i]
    return value.item() if hasattr(value, "item") else value


def selecting_stage(sweep: Sweep, stage: str, param: str) -> Stage:
    """The stage whose selection of ``param`` the stage named ``stage`` inherits: the
    last earlier stage that selects it."""
    before = sweep.stages[:[s.name for s in sweep.stages].index(stage)]
    return [s for s in before if s.select and s.select.parameter == param][-1]


def _needed(sweep: Sweep, names):
    """The stages to run for ``names``: those plus the earlier stages whose selection they use."""
    if names is None:
        return list(sweep.stages)
    known = [s.name for s in sweep.stages]
    for n in names:
        if n not in known:
            raise ConfigError(sweep.path, "stages", f"no stage named {n!r} (stages: {', '.join(known)})")
    want = set(names)
    for stage in reversed(sweep.stages):
        if stage.name in want:
            for param in stage.inherit:
                want.add(selecting_stage(sweep, stage.name, param).name)
    return [s for s in sweep.stages if s.name in want]


def check_memory(sweep: Sweep, chunk_size: int | None = None) -> None:
    """Refuse up front a sweep whose stage would not fit in memory, saying what to cut:
    what drives the estimate is the requests its workloads hold (rate × horizon, per
    seed and workload variant), so the advice follows from which part is too large."""
    avail = grid_mod.available_bytes()
    if avail is None:
        return
    limit = 0.8 * avail
    for stage in sweep.stages:
        need, runs = grid_mod.estimate_bytes(sweep, stage, chunk_size or 4096)
        if need > limit:
            raise ConfigError(sweep.path, stage.key,
                              f"stage {stage.name!r} ({runs:,} runs) needs about {need / 2**30:.1f} GiB, "
                              f"more than the {limit / 2**30:.1f} GiB this machine can give it; "
                              + _memory_advice(sweep, stage, chunk_size, limit))


def _memory_advice(sweep: Sweep, stage: Stage, chunk_size: int | None, limit: float) -> str:
    """What to cut in a stage too large for memory: the horizon or the rate when one
    run alone is too large, the axes when one seed is, else the seeds."""
    def need(keep):  # the estimate with every axis but those in ``keep`` cut to its first value
        values = {k: v if k in keep else v[:1] for k, v in stage.values.items()}
        return grid_mod.estimate_bytes(sweep, replace(stage, values=values), chunk_size or 4096)[0]

    one_run = need(())
    if one_run > limit:
        return (f"one run alone needs about {one_run / 2**30:.1f} GiB for the requests it draws "
                "(rate_rps × the horizon, warmup_s + measure_s): shorten the horizon or lower the rate")
    one_seed = need(set(stage.values) - {"seed"})
    if one_seed > limit:
        return (f"one seed needs about {one_seed / 2**30:.1f} GiB: use fewer rates or swept values, "
                "or a shorter horizon (warmup_s + measure_s)")
    size = f"{one_seed / 2**30:.1f} GiB" if one_seed >= 2**30 else f"{one_seed / 2**20:.0f} MiB"
    return f"use fewer seeds (one needs about {size})"


@dataclass(frozen=True)
class ChunkCount:
    """How a stage's chunks were obtained: ``resumed`` read back from a checkpoint,
    ``computed`` simulated now (``runs`` runs in ``seconds``)."""

    stage: str
    chunks: int
    resumed: int
    computed: int
    runs: int
    seconds: float

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.seconds if self.seconds > 0 else float("nan")


def run(sweep: Sweep, stages=None, show_progress: bool = True, chunk_size: int | None = None,
        on_stage: Callable[[Stage, xr.Dataset], None] | None = None, *,
        checkpoint: str | Path | None = None, resume: bool = False, client=None,
        on_chunks: Callable[[ChunkCount], None] | None = None,
        note: Callable[[str], None] | None = None, behind: bool = False) -> dict:
    """Run the sweep's stages in order; return {stage name: Dataset}.

    ``stages`` names a subset (earlier stages whose selection they need run too, and
    are returned as well). ``on_stage(stage, ds)`` is called as each stage finishes.

    Each stage is split into chunks of ``chunk_size`` runs (default: automatic, see
    :func:`routesim.batch.default_chunk_size`); the Dataset does not depend on it.
    ``client`` (a ``dask.distributed.Client``) runs the chunks on its cluster instead
    of in this process. With ``checkpoint`` (a folder), every finished chunk is kept
    there as it completes, one subfolder per stage, and the folder is removed once all
    the stages have finished; ``resume=True`` then reuses the chunks a killed run left
    behind (with, unless ``chunk_size`` is given, their chunk size) when they belong to
    the same sweep text, stage, selection and package, and starts a stage fresh
    otherwise, saying why through ``note(message)`` (default: print to stderr).
    ``on_chunks(ChunkCount)`` is told after each stage how many chunks were resumed.

    With ``behind=True`` the callbacks run on one background thread, in stage order,
    while the next stage computes (a netCDF write holds the interpreter for most of a
    second, the kernels do not: the two overlap), at most one stage behind; ``run``
    returns, or raises, only once every callback has finished, and a callback's error
    is raised before the stage after next starts.
    """
    check_memory(sweep, chunk_size)
    todo = _needed(sweep, stages)
    note = note or (lambda msg: print(msg, file=sys.stderr, flush=True))
    selected, out = {}, {}
    with _Callbacks(behind) as calls:
        for stage in todo:
            calls.check()
            count, ds = _run_stage(sweep, stage, selected, chunk_size, checkpoint, resume, client,
                                   show_progress, note)
            out[stage.name] = ds
            if on_chunks is not None:
                calls.call(on_chunks, count)
            if on_stage is not None:
                calls.call(on_stage, stage, ds)
    if checkpoint is not None:  # every stage is done (and written by on_stage)
        for stage in todo:
            shutil.rmtree(Path(checkpoint) / stage.name, ignore_errors=True)
        with contextlib.suppress(OSError):
            Path(checkpoint).rmdir()  # only if no other stage's chunks are left in it
    return out


def _run_stage(sweep, stage, selected, chunk_size, checkpoint, resume, client, show_progress, note):
    """(ChunkCount, Dataset) of one stage; its selection recorded in ``selected``."""
    grid = grid_mod.build(sweep, stage, selected)
    inherited = {name: selected[name] for name in stage.inherit}
    folder = Path(checkpoint) / stage.name if checkpoint is not None else None
    size = chunk_size or (resume and folder and _stored_chunk_size(folder)) or batch.default_chunk_size(grid)
    outcome, count = _simulate_stage(sweep, stage, grid, inherited, size, folder, resume, client,
                                     show_progress, note)
    ds = to_dataset(sweep, grid, outcome, selected)
    if stage.select:
        value = choose(ds, stage.select)
        selected[stage.select.parameter] = value
        ds.attrs[f"selects_{stage.select.parameter}"] = value
    return count, ds


class _Callbacks:
    """Calls made now, or (``behind``) queued on one background thread in order, at most
    one stage behind: :meth:`check`, before each stage, waits for the calls of the
    stage before the last and raises the first error of any finished call; leaving
    waits for every call (the files of the stages that finished are written whatever
    happens to the next) and raises the first error."""

    def __init__(self, behind: bool):
        self.pool = None
        self.done = []
        self.mark = 0  # calls queued before the last stage
        if behind:
            from concurrent.futures import ThreadPoolExecutor
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="routesim-on-stage")

    def __enter__(self):
        return self

    def call(self, fn, *args):
        if self.pool is None:
            fn(*args)
        else:
            self.done.append(self.pool.submit(fn, *args))

    def check(self):
        for f in self.done[:self.mark]:
            f.result()
        for f in self.done:
            if f.done() and f.exception() is not None:
                raise f.exception()
        self.mark = len(self.done)

    def __exit__(self, kind, exc, tb):
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            if kind is None:
                for f in self.done:
                    f.result()
        return False


def _stored_chunk_size(folder: Path) -> int | None:
    size = (chunks.read_manifest(folder) or {}).get("chunk_size")
    return size if isinstance(size, int) and size >= 1 else None


def _simulate_stage(sweep, stage, grid, inherited, size, folder, resume, client, show_progress, note):
    """The stage's Outcome, chunk by chunk: resumed from ``folder``, then computed here
    or on ``client``'s cluster, each computed chunk saved to ``folder`` as it arrives."""
    ranges = chunks.plan(grid.runs, size)
    outcome = batch.outcome_type(grid).empty(grid)
    store, resumed = None, set()
    fingerprint = chunks.Fingerprint.of(sweep.text, stage.name, inherited, size, grid.runs,
                                        data_files=_data_files(sweep, stage))
    if folder is not None:
        store = chunks.ChunkStore.open(folder, fingerprint, ranges, resume, note,
                                       outcome=batch.outcome_type(grid))
        for i, part in store.finished():
            batch.put(grid, outcome, ranges[i][0], part)
            resumed.add(i)
    todo = [i for i in range(len(ranges)) if i not in resumed]
    if client is None:
        parts = ((i, batch.simulate_range(grid, *ranges[i])) for i in todo)
    else:
        from . import cluster
        job = cluster.Job.of(sweep, stage, inherited)
        parts = cluster.compute(client, job, ranges, todo, tag=f"{stage.name}-{fingerprint.digest[:8]}")
    runs, t0 = 0, time.perf_counter()
    with _progress(show_progress, len(ranges), len(resumed), stage.name) as bar, \
            compile_note(sweep.model if client is None and todo else None, note):
        for i, part in parts:
            lo, hi = ranges[i]
            batch.put(grid, outcome, lo, part)
            if store is not None:
                store.save(i, part)
            runs += hi - lo
            if bar is not None:
                bar.set_postfix_str(f"{runs / max(time.perf_counter() - t0, 1e-9):,.0f} runs/s", refresh=False)
                bar.update(1)
    count = ChunkCount(stage.name, len(ranges), len(resumed), len(todo), runs, time.perf_counter() - t0)
    return outcome, count


def _data_files(sweep: Sweep, stage: Stage) -> list:
    """The request traces a stage replays or draws lengths from (their content is part
    of what its chunks depend on)."""
    from .config import trace_file
    names = [v for key in ("trace_path", "lengths_trace") for v in stage.values.get(key, ()) if v]
    return sorted({trace_file(sweep.path, v) for v in names})


def results_key(sweep: Sweep) -> dict:
    """What a whole sweep's Datasets depend on, as a chunk's :class:`chunks.Fingerprint`
    has it: {"sweep": hash of the sweep file's text, "package": routesim's source
    (:func:`chunks.package_digest`), "data": hash of every request trace its stages read
    ("" if none)}. Equal keys: the same Datasets (the chunk size, threads and workers do
    not change them)."""
    import hashlib
    files = {str(f) for stage in sweep.stages for f in _data_files(sweep, stage)}
    return {"sweep": hashlib.sha256(sweep.text.encode()).hexdigest(), "package": chunks.package_digest(),
            "data": chunks.data_digest(files)}


COMPILE_NOTE_S = 5.0
"""After this many seconds of a stage with its model's kernel not yet ready in this
process, the stage says that it is compiling (loading the kernel from Numba's cache
takes well under a second)."""


class compile_note:
    """While a stage computes here: if after :data:`COMPILE_NOTE_S` its ``model``'s
    engine is still not ready (:meth:`routesim.schema.ReplicaModel.engine_ready`), Numba is
    compiling it, and ``note`` says so once. Nothing when ``model`` is None (a cluster's
    workers compile, or nothing is left to compute) or the engine is ready at the start."""

    def __init__(self, model, note):
        self.model, self.note, self.timer = model, note, None

    def __enter__(self):
        if self.model is not None and not self.model.engine_ready():
            import threading
            self.timer = threading.Timer(COMPILE_NOTE_S, self._check)
            self.timer.daemon = True
            self.timer.start()

    def _check(self):
        if not self.model.engine_ready():
            self.note(f"compiling the {self.model.kind} model's kernels, once after routesim is installed "
                      f"or changed (up to two minutes on 2 cores); later runs load them from Numba's cache")

    def __exit__(self, *exc):
        if self.timer is not None:
            self.timer.cancel()


def print_note(msg: str) -> None:
    """A command's ``note: msg`` line on stderr, above any progress bar, not through it."""
    from tqdm.auto import tqdm
    tqdm.write(f"note: {msg}", file=sys.stderr)
    sys.stderr.flush()


class _progress:
    """A tqdm bar over a stage's chunks (runs per second in its postfix), or nothing when quiet."""

    def __init__(self, show, total, initial, label):
        self.show, self.total, self.initial, self.label, self.bar = show, total, initial, label, None

    def __enter__(self):
        if self.show:
            from .progress import bar
            self.bar = bar(self.total, self.label, "chunk", initial=self.initial)
        return self.bar

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
