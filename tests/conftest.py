"""Shared fixtures: small sweep files built from the shipped study, run once per session."""

import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import settings

import routesim
import tiers

settings.register_profile("routesim", deadline=None)
settings.load_profile("routesim")
"""No Hypothesis deadline: a per-example time limit (200 ms by default) is a wall-clock
assertion, which the shared, noisy machines fail at random (an example that compiles a
kernel, or runs beside a CI job); the guide keeps speed to benchmarks/."""

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "sweeps" / "exploration.toml"
HEAD = STUDY.read_text().split("[[stages]]")[0]
"""The shipped study without its stages: every docs/model.md constant and the four scenarios."""

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


SWEEPS = ROOT / "sweeps"


def pytest_collection_modifyitems(config, items):
    """Mark every test with its kind and the fast tier's tests ``fast`` (tests/tiers.py)."""
    tiers.classify(items)


def run_reduced(tmp_path, sweep, replace=None, cut_before=None, stages=None) -> dict:
    """Run a shipped sweep file (a Path, e.g. ``SWEEPS / "token-routing.toml"``, or its
    text) reduced: with ``cut_before``, the text from that marker on is dropped first (to
    leave out later stages); then each ``{old: new}`` of ``replace`` is made in turn, and
    each ``old`` must occur. Written to ``tmp_path / "sweep.toml"`` (a trace path relative
    to sweeps/ must be replaced by an absolute one); returns {stage: Dataset} as
    routesim.run does, without progress bars (``stages``: only those, as routesim.run's
    argument)."""
    text = sweep.read_text() if isinstance(sweep, Path) else sweep
    if cut_before is not None:
        assert cut_before in text, cut_before
        text = text[:text.index(cut_before)]
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    p = tmp_path / "sweep.toml"
    p.write_text(text)
    return routesim.run(routesim.load_sweep(p), stages=stages, show_progress=False)


def scenario_events(text: str, name: str) -> list:
    """A scenario's events in sweep-file form, for the reference simulator."""
    return tomllib.loads(text)["scenarios"][name]["events"]


def reference_workload(values: dict) -> dict:
    """A stage's workload parameters (``{name: value}``, names of routesim.config.PARAM)
    as the reference simulator and the SimPy model take them (reference.DEFAULT_WORKLOAD)."""
    wl = {f"{a}_{b}": values[f"{a}_tokens_{b}"]
          for a in ("prompt", "output") for b in ("median", "sigma", "min", "max")}
    wl.update(demand_base=values["demand_ms_base"], demand_per_prompt=values["demand_ms_per_prompt_token"],
              demand_per_output=values["demand_ms_per_output_token"],
              jitter_min=values["jitter_min"], jitter_max=values["jitter_max"])
    return wl


WORKLOAD_VECTORS = ROOT / "docs" / "workload-vectors.md"


def workload_vectors() -> list[dict]:
    """The reference rows of docs/workload-vectors.md, parsed: per block ``seed``,
    ``rate_rps``, ``scenario`` (a scenario of docs/model.md §4, as in the shipped study),
    ``events`` (its events in sweep-file form), ``horizon_ms``, ``arrivals``, ``window``
    ((count, from_ms, to_ms) or None) and ``rows`` ({k: (t_ms, prompt, output, jitter,
    demand_ms)})."""
    text = WORKLOAD_VECTORS.read_text()
    horizon_ms = 1000.0 * int(re.search(r"\(horizon (\d+) s\)", text).group(1))
    blocks = []
    heading = re.compile(r"seed (\d+), rate (\d+) req/s, (\w+)[^:]*: (\d+) arrivals"
                         r"(?:, (\d+) of them in \[(\d+) s, (\d+) s\))?$")
    for line in text.splitlines():
        m = heading.match(line)
        if m:
            seed, rate, scenario, arrivals, count, lo, hi = m.groups()
            blocks.append(dict(seed=int(seed), rate_rps=float(rate), scenario=scenario,
                               events=scenario_events(STUDY.read_text(), scenario),
                               horizon_ms=horizon_ms, arrivals=int(arrivals), rows={},
                               window=None if count is None else (int(count), 1000.0 * int(lo),
                                                                  1000.0 * int(hi))))
        elif line.startswith("| ") and not line.startswith("| k ") and blocks:
            k, t, prompt, output, jitter, demand = (c.strip() for c in line.strip("|").split("|"))
            blocks[-1]["rows"][int(k)] = (float(t), int(prompt), int(output), float(jitter), float(demand))
    return blocks


DIFFERENTIAL = """
[[stages]]
name = "study"
policy = ["round_robin", "least_queue", "latency_aware", "adaptive"]
rate_rps = [100, 250]
seeds = [1, 2]

[[stages]]
name = "stress"            # overload, small queues, re-route sheds; a finer step and exact mode
policy = ["round_robin", "least_queue", "latency_aware", "adaptive"]
exploration = [0, 0.5]
rate_rps = [420]
scenario = ["early", "failure"]
queue_cap = 3
warmup_s = 1
measure_s = 11
dt_ms = [0.25, 0]
seeds = [3]
"""


EXACT = """
[[stages]]
name = "exact"             # event-time mode, every policy, all demand distributions, every kind of event
policy = ["round_robin", "least_queue", "latency_aware", "adaptive", "random", "power_of_two"]
rate_rps = [250]
scenario = ["steady", "burst", "straggler", "failure", "early"]
workload = { demand = ["tokens", "exponential", "constant"] }
dt_ms = 0
seeds = [5]

[[stages]]
name = "random"            # the randomized policies in both time modes, several choices, small queues
policy = ["random", "power_of_two"]
rate_rps = [300]
scenario = ["early", "failure"]
choices = [1, 2, 3]
queue_cap = 4
dt_ms = [0.5, 0]
warmup_s = 1
measure_s = 11
seeds = [6, 7]
"""


CONSTANTS_HEAD = """
# Every constant of docs/model.md away from its default, and no two of them equal: a
# mix-up of two constants (say the replica speed built from the prior ŝ₀ instead of the
# reference demand, both 11 ms by default) changes the results.
name = "constants"

[simulation]
dt_ms = 0.4
warmup_s = 1.5
measure_s = 3.5
slo_ms = 35

[cluster]
queue_cap = inf
reference_demand_ms = 13
[cluster.heterogeneity]
skewed = [9, 12.5, 20]

[workload]
prompt_tokens = { median = 300, sigma = 0.7, min = 32, max = 2000 }
output_tokens = { median = 64, sigma = 0.9, min = 8, max = 500 }
demand_ms = { base = 0.75, per_prompt_token = 0.0078125, per_output_token = 0.03125 }
jitter = { min = 0.8, max = 1.25 }

[policy]
alpha = 0.3
exploration = 0.2
reward_ceiling_ms = 60
prior_service_ms = 7
choices = 3

[scenarios.mixed]    # slowdowns and rate changes, two of them at t = 0
events = [{ at_s = 0, replica = 2, slowdown = 1.5 }, { at_s = 0, rate_multiplier = 0.8 },
          { at_s = 1.8, replica = 3, slowdown = 3.0 }, { at_s = 2.6, rate_multiplier = 1.6 },
          { at_s = 3.4, replica = 3, slowdown = 1.0 }, { at_s = 3.9, rate_multiplier = 1.0 }]
[scenarios.outage]   # all three fail at once: unbounded queues, yet re-routes and arrivals are shed
events = [{ at_s = 1.9, replica = 1, fail = true }, { at_s = 2.3, replica = 3, fail = true },
          { at_s = 2.45, replica = 2, fail = true }, { at_s = 2.6, replica = 2, recover = true },
          { at_s = 2.9, replica = 1, recover = true }, { at_s = 3.6, replica = 3, recover = true }]

[grid]
rate_rps = [220, 380]
heterogeneity = ["skewed"]
scenario = ["mixed", "outage"]
"""

CONSTANTS = """
[[stages]]
name = "constants"         # both time modes, every policy, two demand distributions
policy = ["round_robin", "least_queue", "latency_aware", "adaptive", "random", "power_of_two"]
dt_ms = [0.4, 0]
workload = { demand = ["tokens", "exponential"] }
seeds = [8, 9]
"""


@pytest.fixture(scope="session")
def differential():
    """{stage: (sweep, Dataset)} of the differential grids, simulated once: the study's
    constants (DIFFERENTIAL, EXACT) and every constant changed (CONSTANTS)."""
    out = {}
    for sweep in (parse(DIFFERENTIAL + EXACT), parse(CONSTANTS, CONSTANTS_HEAD)):
        for name, ds in routesim.run(sweep, show_progress=False).items():
            out[name] = (sweep, ds)
    return out


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


VERDICTS = ("holds", "holds with qualification", "does not hold", "does not hold in this model")


def swap_labels(ds, dim, a, b):
    """``ds`` with the labels ``a`` and ``b`` of its axis ``dim`` exchanged: arm a's runs
    labelled b and b's labelled a (a verdict test's flipped input)."""
    labels = list(ds[dim].values)
    i, j = labels.index(a), labels.index(b)
    labels[i], labels[j] = labels[j], labels[i]
    return ds.assign_coords({dim: labels}).sortby(dim) if ds[dim].dtype.kind in "fiu" else \
        ds.assign_coords({dim: labels})


def write_results(root, datasets) -> Path:
    """Write a run's {stage: Dataset} (as routesim.run returns it) as the sweep command
    does: ``root/<sweep name>/<stage>.nc`` (netCDF4, routesim.results.write_atomic), so
    a claim module's ``load(root)`` reads them. Returns root."""
    from routesim.results import write_atomic
    root = Path(root)
    for stage, ds in datasets.items():
        assert ds.attrs["stage"] == stage, (stage, ds.attrs["stage"])
        write_atomic(ds, root / ds.attrs["sweep_name"] / f"{stage}.nc")
    return root


def assert_renders(claim, root, figures_dir, heading="## Claim"):
    """A claim module's row, section and figure on the results under ``root``, read by its
    own ``load`` (the path python -m routesim.report and routesim.figures take): the row is
    four strings ending in the verdict (or None with the verdict, for a section without a
    row of its own), the section starts with ``heading`` and its figure links
    (``../figures/<stem>.png``) are exactly the figures ``figure`` wrote, PNG and SVG.
    Returns the section's text."""
    data = claim.load(root)
    assert data is not None, f"{claim.__name__}.load found no results under {root}"
    row = claim.row(data)
    if row is None:
        assert claim.verdict(data) is None
    else:
        assert isinstance(row, tuple) and len(row) == 4 and all(isinstance(x, str) and x for x in row), row
        assert row[3] in VERDICTS and row[3] == claim.verdict(data), row
        assert not any("|" in x or "\n" in x for x in row), row      # one table row
    text = claim.section(data)
    assert isinstance(text, str) and text.startswith(heading), text[:80]
    paths = [Path(p) for p in claim.figure(data, figures_dir)]
    assert paths and len(set(paths)) == len(paths), paths
    for p in paths:
        assert p.parent == Path(figures_dir) and p.suffix in (".png", ".svg"), p
        head = p.read_bytes()[:8]
        assert head == b"\x89PNG\r\n\x1a\n" if p.suffix == ".png" else head.startswith((b"<?xml", b"<svg")), p
    stems = {p.stem for p in paths}
    assert {p.name for p in paths} == {f"{s}{ext}" for s in stems for ext in (".png", ".svg")}, paths
    links = re.findall(r"!\[[^\]]*\]\(\.\./figures/([^)]+)\)", text)
    assert sorted(links) == sorted(f"{s}.png" for s in stems), (links, stems)
    return text
