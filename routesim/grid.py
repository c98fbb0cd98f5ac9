"""What both replica models' grids share: a stage's runs as a flat index over its
dimensions (C order of ``Stage.dims``), its values with inherited selections
resolved, and the machine's free memory; building a stage's grid is each model's
(``routesim/<model>/grid.py``).
"""

import dataclasses
import os

import numpy as np

from . import traces
from .config import ConfigError, Stage, Sweep, trace_file


class FlatGrid:
    """What the pipeline reads of either model's grid: ``kind`` (its model's),
    ``coords`` (dimension -> values) and ``params`` (runs,), hence its shape and number
    of runs."""

    @property
    def shape(self):
        return tuple(len(v) for v in self.coords.values())

    PER_RUN = ("params",)
    """The fields that hold one row per flat run (the rest is shared by every run)."""

    @property
    def runs(self):
        return self.params.shape[0]

    def order(self):
        """The flat runs in the order chunks take them (chunk ``lo:hi`` is runs
        ``order()[lo:hi]``), shape (runs,); None: the flat order itself. Results do not
        depend on it; a model orders its runs to share work between runs of a chunk."""
        return None

    def take(self, runs: np.ndarray):
        """A grid of only these flat runs (indices, shape (k,)), to simulate them alone:
        its ``coords`` still describe the whole stage, and its outcome goes back in
        place with ``FlatOutcome.put_at``."""
        return dataclasses.replace(self, **{name: getattr(self, name)[runs] for name in self.PER_RUN})


def run_index(stage: Stage, values: dict):
    """Per-dimension index arrays of the flat runs, shape (runs,) each."""
    shape = tuple(len(values[d]) for d in stage.dims)
    flat = np.unravel_index(np.arange(int(np.prod(shape)), dtype=np.int64), shape)
    return dict(zip(stage.dims, flat))


def resolve(stage: Stage, selected: dict) -> dict:
    """The stage's values with inherited parameters set from earlier selections."""
    values = dict(stage.values)
    for name in stage.inherit:
        values[name] = (selected[name],)
    return values


def load_trace(sweep: Sweep, flat: dict, path_name: str = "trace_path", format_name: str = "trace_format"):
    """The trace a run names (``flat`` its parameters; the loader caches it per
    process); a problem (say the file changed since the sweep was read) is a
    ConfigError naming the key."""
    try:
        return traces.load_trace(trace_file(sweep.path, flat[path_name]), flat[format_name])
    except traces.TraceError as e:
        raise ConfigError(sweep.path, f"workload.{path_name.replace('_', '.', 1)}", str(e)) from None


def trace_window(sweep: Sweep, flat: dict, block_tokens: int, hash_block_tokens):
    """The window of the trace a run replays (``routesim.traces.Replay``), its prompts
    cut into KV blocks of ``block_tokens`` (``traces.NO_IDS``: none) and hash blocks of
    ``hash_block_tokens`` (None: the format's)."""
    tr = load_trace(sweep, flat)
    try:
        return traces.replay(tr, block_tokens=block_tokens, start_s=float(flat["trace_start_s"]),
                             duration_s=float(flat["trace_duration_s"]),
                             time_scale=float(flat["trace_time_scale"]),
                             horizon_ms=(flat["warmup_s"] + flat["measure_s"]) * 1000.0,
                             hash_block_tokens=hash_block_tokens)
    except traces.TraceError as e:
        raise ConfigError(sweep.path, "workload.trace", str(e)) from None


def available_bytes() -> int | None:
    """Memory this process may still use (Linux ``MemAvailable``), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def build(sweep: Sweep, stage: Stage, selected: dict | None = None):
    """Lay a stage out flat and generate its workloads (the sweep's model's grid)."""
    return sweep.model.build(sweep, stage, selected)


def estimate_bytes(sweep: Sweep, stage: Stage, chunk_runs: int) -> tuple[int, int]:
    """(bytes, runs): peak memory of running a stage, from expected arrivals alone
    (a trace's: its windows' requests)."""
    return sweep.model.estimate_bytes(sweep, stage, chunk_runs)
