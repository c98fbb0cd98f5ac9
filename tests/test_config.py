"""The sweep-file parser on valid input: what a file means (interface.md, "Sweep file").

Bad input is covered through the command line in test_cli.py.
"""

import time
from pathlib import Path

import pytest

import routesim
from routesim.config import ConfigError, Selection
from routesim.queue.dtypes import EventKind
from routesim.queue.params import PARAMS, STANDARD_DIMS

ROOT = Path(__file__).resolve().parents[1]
STUDY_PATH = ROOT / "sweeps" / "exploration.toml"
STUDY = STUDY_PATH.read_text()
HEAD = STUDY.split("[[stages]]")[0]  # settings, scenarios and grid, no stages


def edit(*changes, text=STUDY):
    for old, new in changes:
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
        text = text.replace(old, new)
    return text


def parse(text):
    return routesim.parse_sweep(text, "test.toml")


def runs(stage):
    n = 1
    for d in stage.dims:
        n *= len(stage.values[d])
    return n


@pytest.fixture(scope="module")
def study():
    return routesim.load_sweep(STUDY_PATH)


def test_shipped_study_has_two_stages(study):
    assert study.name == "exploration"
    assert study.path == STUDY_PATH and study.text == STUDY
    dev, val = study.stages
    assert (dev.name, dev.key, val.name, val.key) == ("development", "stages[0]", "validation", "stages[1]")
    conditions = 3 * 2 * 4  # rate_rps × heterogeneity × scenario, from [grid]
    assert runs(dev) == 6 * conditions * 8
    assert runs(val) == 4 * conditions * 24
    assert runs(dev) + runs(val) == 3456  # the file's own comment
    for stage in study.stages:
        assert stage.dims == STANDARD_DIMS and stage.swept == ()
        assert stage.values["rate_rps"] == (100, 175, 250)
        assert stage.values["heterogeneity"] == ("default", "high")
        assert stage.values["scenario"] == ("steady", "burst", "straggler", "failure")


def test_shipped_study_axes_and_selection(study):
    dev, val = study.stages
    assert dev.values["policy"] == ("adaptive",)
    assert dev.values["exploration"] == (0, 0.05, 0.1, 0.2, 0.35, 0.5)
    assert tuple(dev.values["seed"]) == tuple(range(1, 9))
    assert dev.select == Selection("exploration", "attainment", maximize=True) and dev.inherit == ()
    assert val.values["policy"] == ("round_robin", "least_queue", "latency_aware", "adaptive")
    assert tuple(val.values["seed"]) == tuple(range(101, 125))
    assert val.select is None and val.inherit == ("exploration",)  # the value development selects


def test_shipped_study_states_every_default(study):
    """Every model parameter is stated in the file at its default (the study is explicit)."""
    for stage in study.stages:
        for p in PARAMS:
            if p.name != "exploration":
                assert stage.values[p.name] == (p.default,), p.name
    assert study.heterogeneity == {"default": (8, 11, 16), "high": (6, 11, 22)}


def test_shipped_study_events(study):
    sc = study.scenarios
    assert list(sc) == ["steady", "burst", "straggler", "failure"] and sc["steady"] == ()
    assert [(e.at_s, e.kind, e.replica, e.value) for e in sc["burst"]] == [
        (7, EventKind.RATE, -1, 2.0), (9, EventKind.RATE, -1, 1.0)]
    assert [(e.at_s, e.kind, e.replica) for e in sc["failure"]] == [  # replica 2 in the file: index 1
        (6, EventKind.FAIL, 1), (11, EventKind.RECOVER, 1)]
    assert sc["straggler"][0].replica == 0 and sc["straggler"][0].key == "scenarios.straggler.events[0]"


def test_stage_overrides_grid_axis():
    sweep = parse(edit(('name = "validation"', 'name = "validation"\nrate_rps = [50, 275]\nscenario = "burst"')))
    dev, val = sweep.stages
    assert dev.values["rate_rps"] == (100, 175, 250)  # the grid's
    assert val.values["rate_rps"] == (50, 275)
    assert val.values["scenario"] == ("burst",)  # a scalar is a one-value axis
    assert val.values["heterogeneity"] == ("default", "high")


def test_stage_overrides_scalar_parameter():
    sweep = parse(edit(('name = "validation"', 'name = "validation"\nqueue_cap = 3\n'
                        'workload = { jitter = { min = 0.5 } }')))
    dev, val = sweep.stages
    assert val.values["queue_cap"] == (3,) and dev.values["queue_cap"] == (50,)
    assert val.values["jitter_min"] == (0.5,) and val.values["jitter_max"] == (1.1,)
    assert val.swept == ()


def test_policy_list_is_an_extra_dimension():
    sweep = parse(edit(("alpha = 0.15", "alpha = [0.1, 0.2]")))
    for stage in sweep.stages:
        assert stage.swept == ("alpha",)
        assert stage.dims == STANDARD_DIMS + ("alpha",)
        assert stage.values["alpha"] == (0.1, 0.2)
    assert runs(sweep.stages[1]) == 2 * 4 * 24 * 24


def test_swept_parameters_follow_parameter_order():
    text = edit(("alpha = 0.15", "alpha = [0.1, 0.2]"), ("dt_ms = 0.5", "dt_ms = [0.5, 0.25]"),
                ("min = 0.9", "min = [0.8, 0.9]"))
    assert parse(text).stages[0].swept == ("dt_ms", "jitter_min", "alpha")


def test_one_value_list_is_still_a_dimension():
    sweep = parse(edit(('name = "validation"', 'name = "validation"\nalpha = [0.3]\nqueue_cap = 3')))
    dev, val = sweep.stages
    assert val.swept == ("alpha",) and val.values["alpha"] == (0.3,)
    assert dev.swept == ()


def test_stage_sweeps_a_parameter_and_selects_it():
    sweep = parse(edit(('name = "development"', 'name = "development"\nalpha = [0.1, 0.3]'),
                       ('parameter = "exploration"', 'parameter = "alpha"')))
    dev, val = sweep.stages
    assert dev.select.parameter == "alpha" and dev.swept == ("alpha",)
    assert val.inherit == ("alpha",)


def test_seeds_as_list_keep_their_order():
    sweep = parse(edit(("seeds = { first = 1, count = 8 }", "seeds = [5, 3, 11]"),
                       ("seeds = { first = 101, count = 24 }", "seeds = 7")))
    assert sweep.stages[0].values["seed"] == (5, 3, 11)
    assert sweep.stages[1].values["seed"] == (7,)


def test_huge_seed_count_parses_without_building_it():
    """The memory check refuses it from the estimate; parsing must not build 10**12 seeds."""
    t0 = time.perf_counter()
    sweep = parse(edit(("count = 24", "count = 1000000000000")))
    assert time.perf_counter() - t0 < 1.0
    seeds = sweep.stages[1].values["seed"]
    assert len(seeds) == 10**12 and seeds[0] == 101 and seeds[-1] == 101 + 10**12 - 1


def test_events_are_time_sorted():
    scenario = """
[scenarios.shuffled]
events = [{ at_s = 8, replica = 3, slowdown = 1.0 }, { at_s = 2, replica = 3, slowdown = 2.0 },
          { at_s = 4, rate_multiplier = 1.5 }, { at_s = 2, rate_multiplier = 3.0 }]
"""
    sweep = parse(edit(("[grid]", scenario + "\n[grid]")))
    events = sweep.scenarios["shuffled"]
    assert [e.at_s for e in events] == [2, 2, 4, 8]
    # ties keep the file's order; each event keeps its own key path
    assert [e.key for e in events] == [f"scenarios.shuffled.events[{i}]" for i in (1, 3, 2, 0)]
    assert [(e.kind, e.replica, e.value) for e in events] == [
        (EventKind.SLOWDOWN, 2, 2.0), (EventKind.RATE, -1, 3.0), (EventKind.RATE, -1, 1.5),
        (EventKind.SLOWDOWN, 2, 1.0)]


@pytest.mark.parametrize("change", [
    ("alpha = 0.15", "alpha = 1"),                                 # alpha in (0, 1]
    ("min = 0.9", "min = 1e-9"),                                   # jitter in (0, inf)
    ("min = 0.9, max = 1.1", "min = 1.0, max = 1.0"),              # jitter min = max
    ("min = 16, max = 4096", "min = 100, max = 100"),              # tokens min = max
    ("dt_ms = 0.5", "dt_ms = 0"),                                  # exact event-time mode
    ("sigma = 0.8, min = 16", "sigma = 0, min = 16"),
    ("queue_cap = 50", "queue_cap = 1"),
    ("queue_cap = 50", "queue_cap = 50.0"),                        # a whole float is a whole number
    ("at_s = 11, replica = 2", "at_s = 14.9, replica = 3"),        # inside the horizon, replica N
    ("exploration = [0, 0.05,", "exploration = [0.0, 0.05,"),
], ids=["alpha-one", "jitter-min-tiny", "jitter-min-eq-max", "tokens-min-eq-max", "dt-zero",
        "sigma-zero", "queue-cap-one", "queue-cap-whole-float", "event-near-horizon-replica-N",
        "exploration-zero"])
def test_boundary_values_are_accepted(change):
    parse(edit(change))


def test_defaults_fill_a_minimal_file():
    sweep = parse('[[stages]]\npolicy = "round_robin"\nrate_rps = 100\nheterogeneity = "high"\n'
                  'scenario = "steady"\nseeds = [1]\n')
    assert sweep.name == "test"  # the file's stem
    assert sweep.heterogeneity == {"default": (8, 11, 16), "high": (6, 11, 22)}
    assert sweep.scenarios == {"steady": ()}
    (stage,) = sweep.stages
    assert stage.name == "stage1" and stage.swept == () and stage.select is None
    for p in PARAMS:
        assert stage.values[p.name] == (p.default,)


def test_config_error_carries_file_and_key(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(edit(("dt_ms = 0.5", "dt = 0.5")))
    with pytest.raises(ConfigError) as info:
        routesim.load_sweep(path)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.file, err.key) == (str(path), "simulation.dt")
    assert str(err) == f"{path}: simulation.dt: {err.message}" and "'dt_ms'" in err.message


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as info:
        routesim.load_sweep(tmp_path / "nope.toml")
    assert info.value.key == "" and "cannot read" in info.value.message


def test_parsing_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    routesim.load_sweep(STUDY_PATH)
    assert list(tmp_path.iterdir()) == []
