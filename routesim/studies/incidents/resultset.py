"""The black-hole incident's results as its figure reads them: the incidents results
folder beside a study's, its black-hole stage, the stage traced, and the incident's
replica and interval."""

from pathlib import Path

import numpy as np

from ...results import sweep_of
from ..folders import load

BLACK_HOLE_ARMS = ({"retry_avoid_previous": False, "breaker_consecutive": 0},
                   {"retry_avoid_previous": True, "breaker_consecutive": 5})
"""The black-hole figure's arms: without containment, and with the breaker and
retry_avoid_previous (the incident sweep's values)."""


def default_incidents(results_dir):
    """``results/incidents/`` beside ``results/<name>/``, when it holds the black-hole stage."""
    cand = Path(results_dir).resolve().parent / "incidents"
    return cand if cand != Path(results_dir).resolve() and (cand / "black-hole.nc").is_file() else None


def not_incidents(incidents_dir):
    """None when a folder holds the incidents sweep's black-hole stage (sweeps/incidents.toml),
    else why not (one line)."""
    if Path(incidents_dir).is_dir() and black_hole_stage(incidents_dir) is not None:
        return None
    return (f"{incidents_dir}: not the results of sweeps/incidents.toml (no black-hole stage of the batching "
            "model with retry_avoid_previous and breaker_consecutive arms)")


def black_hole_stage(incidents_dir):
    """The black-hole stage's Dataset of an incidents results folder, or None."""
    results = load(incidents_dir)
    for ds in results.values():
        if ds.attrs.get("replica_kind") == "batching" and "retry_avoid_previous" in ds.dims \
                and "breaker_consecutive" in ds.dims:
            return ds
    return None


def black_hole_trace(ds, seed=None):
    """The black-hole incident traced for its first seed (or ``seed``), every arm, every
    10 ms (None without a fail_fast event)."""
    from ...timeline import trace
    sweep = sweep_of(ds)
    scen = str(np.atleast_1d(ds.scenario.values)[0])
    from ...batching.dtypes import EventKind as TokenEvent
    if not any(int(e.kind) == TokenEvent.FAIL_FAST for e in sweep.scenarios[scen]):
        return None
    return trace(ds, seed=int(ds.seed.values[0]) if seed is None else seed)


def black_hole_event(tl):
    """(replica 1-based, start s, end s or None) of a batching trace's first fail_fast."""
    kinds = [str(k) for k in tl.event_kind.values]
    k = kinds.index("fail_fast")
    rep = int(tl.event_replica.values[k])
    end = [float(tl.event_time.values[m]) for m in range(k + 1, len(kinds))
           if kinds[m] == "recover" and int(tl.event_replica.values[m]) == rep]
    return rep, float(tl.event_time.values[k]), (end[0] if end else None)
