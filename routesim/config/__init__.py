"""Sweep file (TOML) -> validated, frozen description of every stage's grid.

Parsing has no side effects: nothing is created or written. Every problem raises
:class:`ConfigError`, which names the file and the key path (``stages[1].seeds``);
the command line prints it as one line and exits with status 2.

``reader`` (typed access to the TOML tree, ``ConfigError``), ``parsed`` (what a parsed
sweep is: ``Sweep``, ``Stage``, ``Event``, ``Selection``), ``parse`` (the file's tables,
scenarios and stages), ``checks`` (what a whole stage must satisfy, its traces, then
its model's own checks).
"""

from .checks import check_stage, trace_file
from .parse import load_sweep, param_value, parse_sweep
from .parsed import Event, Selection, Stage, Sweep
from .reader import ConfigError, Reader

__all__ = ["ConfigError", "Event", "Reader", "Selection", "Stage", "Sweep", "check_stage", "load_sweep",
           "param_value", "parse_sweep", "trace_file"]
