"""Shared fixtures: small sweep files built from the shipped study, run once per session."""

import tomllib
from pathlib import Path

import pytest

import routesim

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "sweeps" / "exploration.toml"
HEAD = STUDY.read_text().split("[[stages]]")[0]
"""The shipped study without its stages: every model.md constant and the four scenarios."""

EXTRA_SCENARIOS = """
[scenarios.early]   # fits a 4 s horizon: a slowdown from t = 0, a failure and recovery
events = [{ at_s = 0, replica = 3, slowdown = 2.0 }, { at_s = 1.5, replica = 1, fail = true },
          { at_s = 2.5, replica = 1, recover = true }, { at_s = 3, replica = 2, slowdown = 3.0 }]
"""


def sweep_text(stages: str, head: str = HEAD) -> str:
    """A sweep file: the study's settings and scenarios plus the given [[stages]]."""
    return head + EXTRA_SCENARIOS + stages


def parse(stages: str, head: str = HEAD):
    return routesim.parse_sweep(sweep_text(stages, head), "test.toml")


def scenario_events(text: str, name: str) -> list:
    """A scenario's events in sweep-file form, for the reference simulator."""
    return tomllib.loads(text)["scenarios"][name]["events"]


DIFFERENTIAL = """
[[stages]]
name = "study"
policy = ["round_robin", "least_queue", "latency_aware", "adaptive"]
rate_rps = [100, 250]
seeds = [1, 2]

[[stages]]
name = "stress"            # overload, small queues, re-route sheds, a finer step
policy = ["round_robin", "least_queue", "latency_aware", "adaptive"]
exploration = [0, 0.5]
rate_rps = [420]
scenario = ["early", "failure"]
queue_cap = 3
warmup_s = 1
measure_s = 11
dt_ms = 0.25
seeds = [3]
"""


EXACT = """
[[stages]]
name = "exact"             # event-time mode, every policy, all demand distributions
policy = ["round_robin", "least_queue", "latency_aware", "adaptive", "random", "power_of_two"]
rate_rps = [250]
scenario = ["steady", "burst", "failure"]
workload = { demand = ["tokens", "exponential", "constant"] }
dt_ms = 0
seeds = [5]

[[stages]]
name = "random"            # the randomized policies on the grid, several choices, small queues
policy = ["random", "power_of_two"]
rate_rps = [300]
scenario = ["early", "failure"]
choices = [1, 2, 3]
queue_cap = 4
warmup_s = 1
measure_s = 11
seeds = [6, 7]
"""


@pytest.fixture(scope="session")
def differential():
    """(sweep, {stage: Dataset}) of the differential grid, simulated once."""
    sweep = parse(DIFFERENTIAL + EXACT)
    return sweep, routesim.run(sweep, show_progress=False)


def assert_invariants(ds):
    """Model.md §6 bookkeeping on every run of a Dataset: nothing lost, queues bounded."""
    assert (ds.arrivals == ds.completed + ds.shed + ds.unfinished).all(), "a request was lost"
    for name in ("completed", "shed", "unfinished"):
        assert (ds[name] >= 0).all()
    cap = ds.attrs.get("queue_cap")
    if cap is not None:  # waiting + in service, per replica
        assert (ds.unfinished <= ds.sizes["replica"] * (cap + 1)).all()
    # a cohort completion is a completion in the window, which `throughput` counts
    measure = ds.attrs.get("measure_s")
    if measure is not None:
        assert (ds.completed <= ds.throughput * measure + 1e-6).all()
        assert (ds.replica_completed.sum("replica") == (ds.throughput * measure).round()).all()
    done = ds.completed > 0
    assert (ds.latency_p50 <= ds.latency_p99).where(done, True).all()
    assert (ds.latency_p99 <= ds.latency_max).where(done, True).all()
    assert ds.latency_p99.where(~done).isnull().all()
