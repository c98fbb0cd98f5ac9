"""What every replica model describes itself with: a sweep key (:class:`Param`), the
trace keys both models share, and :class:`ReplicaModel`, the one interface through
which the pipeline (config, grid, batch, results, summary, timeline) reaches a model.

A model is a package of routesim (``routesim/<model>/``) whose ``params.py`` holds
its ``MODEL``; :mod:`routesim.models` maps a ``[replica] kind`` to
it. Besides its sweep tables, every model package has modules of the same names
holding functions of the same names, which the interface calls (and imports only
then, so that reading a sweep file compiles nothing):

- ``params``: ``check_stage(rd, stage, src, replicas)``, the checks only that model makes (``replicas``: the stage's cluster size);
- ``grid``: ``build``, ``estimate_bytes``, ``Outcome``, ``default_chunk_size``,
  ``simulate_range``, ``to_dataset``;
- ``metrics``: ``VARIABLES`` (units and description of every result variable);
- ``summary``: ``policy_table(ds)``, the table ``python -m routesim.sweep`` prints;
- ``timeline``: ``run`` (a narrowed stage's timelines) and ``summary(ds)``;
- ``engine``: ``KERNEL``, the compiled function every run goes through.
"""

import importlib
import math
import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Param:
    """A scalar model parameter: its place in the sweep file, default, units and help."""

    name: str          # flat name: stage override key, Dataset dimension, attrs key
    section: str       # top-level table
    path: tuple        # keys inside the section
    default: Any
    units: str
    help: str
    kind: type = float  # float, int, bool or str
    low: float = -math.inf
    low_open: bool = False  # True: value must be > low, else >= low
    high: float = math.inf
    options: tuple = ()     # the allowed values of a str parameter
    allow_inf: bool = False  # ``inf`` means unbounded
    words: tuple = ()       # strings a number parameter also takes (allowance_tokens = "exact")
    when: tuple = ()        # (another parameter's name, (its values…)): used only when it has one of them
    default_when: tuple = ()  # (another parameter's name, ((its value, this default), …)): a run's default
                              # when the other has that value and the file sets none (run_defaults)
    inherit: str = ""       # another parameter whose value in the same run this one takes when the file
                            # sets none (a pool's ``kv_blocks``: [replica]'s; run_defaults)

    def run_default(self, flat: dict):
        """This parameter's default for one run (``flat``: the run's values): the
        ``default_when`` entry of the other parameter's value, else ``default``."""
        if self.default_when:
            other, pairs = self.default_when
            for value, default in pairs:
                if flat[other] == value:
                    return default
        return self.default


def run_defaults(params, flat: dict, given) -> dict:
    """One run's values (``flat``) with the default of each parameter that has a
    ``default_when`` and that the file does not set (``given``: the names it sets,
    selected ones included) taken from the other parameter's value in this run, and the
    value of each parameter that ``inherit``s another and is not set: the other's in
    this run (as resolved here: ``params`` lists the other first)."""
    out = dict(flat)
    for p in params:
        if p.default_when and p.name not in given:
            out[p.name] = p.run_default(flat)
        elif p.inherit and p.name not in given:
            out[p.name] = out[p.inherit]
    return out


TRACE_FORMATS = ("azure", "mooncake", "csv")
"""Trace formats (routesim.traces, docs/traces.md)."""

TRACE_PARAMS = (
    Param("source", "workload", ("source",), "synthetic", "", "where requests come from: synthetic, or a trace's rows (docs/traces.md)", kind=str, options=("synthetic", "trace")),
    Param("trace_path", "workload", ("trace", "path"), "", "", "trace file replayed (relative to the sweep file's folder)", kind=str, when=("source", ("trace",))),
    Param("trace_format", "workload", ("trace", "format"), "", "", "trace format: azure, mooncake or csv", kind=str, options=TRACE_FORMATS, when=("source", ("trace",))),
    Param("trace_time_scale", "workload", ("trace", "time_scale"), 1.0, "1", "divides the trace's times (2: twice the rate)", low=0, low_open=True, when=("source", ("trace",))),
    Param("trace_start_s", "workload", ("trace", "start_s"), 0.0, "s", "start of the replayed window of trace time", low=0, when=("source", ("trace",))),
    Param("trace_duration_s", "workload", ("trace", "duration_s"), math.inf, "s", "length of the replayed window of trace time (inf: to the end)", low=0, low_open=True, allow_inf=True, when=("source", ("trace",))),
    Param("trace_hash_block_tokens", "workload", ("trace", "hash_block_tokens"), 0, "tokens", "tokens per trace hash block H (0: the format's: 512 for mooncake, block_tokens for csv)", kind=int, low=0, when=("source", ("trace",))),
)
"""``[workload] source`` and ``trace = { … }`` (token-model.md §1.2), both replica models.
Their flat names are ``source`` and ``trace_<key>``."""

LENGTHS_PARAMS = (
    Param("lengths_trace", "workload", ("lengths", "trace"), "", "", "trace whose rows give each synthetic request's tokens (token-model.md §1.3; empty: the classes)", kind=str, when=("source", ("synthetic",))),
    Param("lengths_format", "workload", ("lengths", "format"), "", "", "format of the lengths trace: azure, mooncake or csv", kind=str, options=TRACE_FORMATS, when=("source", ("synthetic",))),
)
"""``[workload] lengths = { trace, format }`` (token-model.md §1.3), the batching model;
flat names ``lengths_trace`` and ``lengths_format``."""

TRACE_LEAVES = {"trace": ("path", "format", "time_scale", "start_s", "duration_s", "hash_block_tokens"),
                "lengths": ("trace", "format")}
"""The keys of the inline tables ``trace = { … }`` and ``lengths = { … }``."""


@dataclass(frozen=True)
class ReplicaModel:
    """One replica model, as the pipeline sees it: what its sweeps may say (the first
    fields) and the calls that run them (the methods; see the module docstring)."""

    kind: str                      # ``[replica] kind``
    package: str                   # the Python package that implements it
    params: tuple                  # Param, every key with its default
    section_keys: dict             # top-level table -> keys it may hold
    leaves: dict                   # inline table -> keys it may hold
    dims: tuple                    # dimensions of every stage, in order
    policies: tuple                # policy names
    event_kinds: dict              # event action -> code
    min_max: tuple                 # (min, max) parameter pairs
    heterogeneity: dict            # settings when the file gives none
    help_heterogeneity: str        # what a heterogeneity value is
    block_ids: bool                # requests carry KV block ids: a trace row must fit a replica's pool
    trace_axes: bool               # trace keys may be lists (grid axes)
    typed_set_values: bool         # ``routesim.trace --set`` takes strings and booleans too
    capacity_latency: tuple        # (variable, its SLO parameter): routesim.capacity's default criterion
    writes_behind: bool            # a sweep writes a stage's file while the next computes (study.run's
                                   # ``behind``): when the kernel hands runs to its threads one at a time
    capacity_scaled: tuple = ()    # (variable, the allowance's parameter): the criterion when an SLO is
                                   # scaled per request (the variable, each request's latency minus its
                                   # own objective, at most 0); () when the model has none

    @property
    def param(self) -> dict:
        return {p.name: p for p in self.params}

    def part(self, module: str):
        """One of the model's modules (imported on first use)."""
        return importlib.import_module(f"{self.package}.{module}")

    # the sweep file
    def check_stage(self, rd, stage, src, replicas) -> None:
        self.part("params").check_stage(rd, stage, src, replicas)

    def variables(self) -> dict:
        """Result variable -> (units, description)."""
        return self.part("metrics").VARIABLES

    # a stage's runs
    def build(self, sweep, stage, selected=None):
        return self.part("grid").build(sweep, stage, selected)

    def estimate_bytes(self, sweep, stage, chunk_runs: int) -> tuple[int, int]:
        return self.part("grid").estimate_bytes(sweep, stage, chunk_runs)

    def outcome_type(self):
        return self.part("grid").Outcome

    def default_chunk_size(self, grid) -> int:
        return self.part("grid").default_chunk_size(grid)

    def simulate_range(self, grid, lo: int, hi: int):
        return self.part("grid").simulate_range(grid, lo, hi)

    def engine_ready(self) -> bool:
        """Whether this process holds its engine's ``KERNEL`` ready to run: compiled, or
        loaded from Numba's disk cache (it has an overload only once either is done)."""
        return len(self.part("engine").KERNEL.overloads) > 0

    def kernel_loads(self) -> int:
        """How many times this process loaded its engine's ``KERNEL`` from Numba's disk
        cache or compiled it (0 when the model's engine was never imported here)."""
        engine = sys.modules.get(f"{self.package}.engine")
        if engine is None:
            return 0
        st = engine.KERNEL.stats
        return sum(st.cache_hits.values()) + sum(st.cache_misses.values())

    # results
    def to_dataset(self, sweep, grid, outcome, selected):
        return self.part("grid").to_dataset(sweep, grid, outcome, selected)

    def policy_table(self, ds) -> str:
        return self.part("summary").policy_table(ds)

    def timeline(self, sweep, stage, grid, selected, interval_ms):
        return self.part("timeline").run(sweep, stage, grid, selected, interval_ms)

    def timeline_summary(self, ds) -> str:
        return self.part("timeline").summary(ds)
