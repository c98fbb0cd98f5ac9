"""The command line on bad input (interface.md): exit status 2, exactly one line on
stderr naming the file and the key path, no traceback, nothing written.

Bad files are the shipped study with one piece of text replaced. Most cases call
``routesim.sweep.main`` in-process (fast); a few go through a real subprocess.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import xarray as xr

from routesim import grid as grid_mod
from routesim.sweep import main

ROOT = Path(__file__).resolve().parents[1]
STUDY = (ROOT / "sweeps" / "exploration.toml").read_text()
GiB = 2**30


def edit(*changes, text=STUDY):
    """The study's text with each change applied: (old, new) replaces the one `old`."""
    for old, new in changes:
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in the study"
        text = text.replace(old, new)
    return text


def between(start, stop):
    """The study's text from `start` up to (not including) `stop`."""
    i = STUDY.index(start)
    return STUDY[i:STUDY.index(stop, i)]


def bad(id, key, fragment, *changes):
    """A case: the edits, the key path the error must name ('' = none) and a message fragment."""
    return pytest.param(changes, key, fragment, id=id)


ADD_TWO = ("high = [6, 11, 22]", "high = [6, 11, 22]\ntwo = [8, 11]")  # a 2-replica setting
VALIDATION = 'name = "validation"'
DEVELOPMENT = 'name = "development"'

BAD = [
    # malformed TOML: no key path, the position instead
    bad("toml-missing-value", "", "malformed TOML", ("dt_ms = 0.5", "dt_ms = ")),
    bad("toml-unclosed-table", "", "malformed TOML", ("[simulation]", "[simulation")),
    bad("toml-duplicate-key", "", "malformed TOML", ("warmup_s = 3", "warmup_s = 3\nwarmup_s = 4")),
    bad("toml-unclosed-string", "", "malformed TOML", ('name = "exploration"', 'name = "exploration')),
    # unknown keys, with the closest valid key
    bad("unknown-simulation.dt", "simulation.dt", "'dt_ms'", ("dt_ms = 0.5", "dt = 0.5")),
    bad("unknown-top-level", "nmae", "'name'", ('name = "exploration"', 'nmae = "exploration"')),
    bad("unknown-section", "simulaton", "'simulation'", ("[simulation]", "[simulaton]")),
    bad("unknown-cluster-key", "cluster.queue_capacity", "'queue_cap'",
        ("queue_cap = 50", "queue_capacity = 50")),
    bad("unknown-workload-leaf", "workload.prompt_tokens.medain", "'median'",
        ("median = 384", "medain = 384")),
    bad("unknown-stage-key", "stages[1].seed", "'seeds'", ("seeds = { first = 101", "seed = { first = 101")),
    bad("unknown-stage-workload-leaf", "stages[0].workload.output_tokens.medain", "'median'",
        (DEVELOPMENT, DEVELOPMENT + "\nworkload = { output_tokens = { medain = 90 } }")),
    bad("unknown-seeds-key", "stages[0].seeds.cuont", "'count'", ("first = 1, count = 8", "first = 1, cuont = 8")),
    bad("unknown-event-key", "scenarios.burst.events[0].rate_multipler", "'rate_multiplier'",
        ("{ at_s = 7, rate_multiplier = 2.0 }", "{ at_s = 7, rate_multipler = 2.0 }")),
    bad("unknown-select-key", "stages[0].select.maximise", "'maximize'",
        ('maximize = "attainment"', 'maximise = "attainment"')),
    # wrong types
    bad("string-for-number", "simulation.dt_ms", "expected a number, got a string", ("dt_ms = 0.5", 'dt_ms = "0.5"')),
    bad("string-in-rate-list", "grid.rate_rps[1]", "expected a number, got a string",
        ("rate_rps = [100, 175, 250]", 'rate_rps = [100, "175", 250]')),
    bad("bool-for-number", "cluster.queue_cap", "expected a number, got a boolean",
        ("queue_cap = 50", "queue_cap = true")),
    bad("bool-for-seed-count", "stages[0].seeds.count", "got a boolean", ("count = 8", "count = true")),
    bad("bool-for-slowdown", "scenarios.straggler.events[0].slowdown", "got a boolean",
        ("replica = 1, slowdown = 4.0", "replica = 1, slowdown = true")),
    bad("list-for-table-tokens", "workload.prompt_tokens", "expected a table, got a list",
        ("prompt_tokens = { median = 384, sigma = 0.8, min = 16, max = 4096 }",
         "prompt_tokens = [384, 0.8, 16, 4096]")),
    bad("list-for-table-select", "stages[0].select", "expected a table, got a list",
        ('select = { parameter = "exploration", maximize = "attainment" }', 'select = ["exploration"]')),
    bad("list-for-table-heterogeneity", "cluster.heterogeneity", "expected a table",
        (between("[cluster.heterogeneity]", "[workload]"), "heterogeneity = [8, 11, 16]\n")),
    bad("number-for-table-scenarios", "scenarios", "expected a table, got int",
        (between("[scenarios.steady]", "[grid]"), ""), ('name = "exploration"', 'name = "exploration"\nscenarios = 5')),
    bad("table-for-number", "policy.alpha", "expected a number, got a table", ("alpha = 0.15", "alpha = { value = 0.15 }")),
    bad("number-for-policy-name", "stages[0].policy[0]", "expected a string", ('policy = ["adaptive"]', "policy = [1]")),
    bad("fraction-for-whole-number", "cluster.queue_cap", "whole number", ("queue_cap = 50", "queue_cap = 2.5")),
    bad("fraction-for-replica", "scenarios.failure.events[0].replica", "whole number",
        ("replica = 2, fail", "replica = 1.5, fail")),
    bad("number-for-fail-flag", "scenarios.failure.events[0].fail", "expected true", ("fail = true", "fail = 1")),
    bad("nan", "simulation.slo_ms", "finite", ("slo_ms = 50", "slo_ms = nan")),
    bad("huge-whole-number", "cluster.queue_cap", "too large", ("queue_cap = 50", "queue_cap = 1e30")),
    # out-of-range values
    bad("rate-zero", "grid.rate_rps[0]", "must be > 0", ("rate_rps = [100, 175, 250]", "rate_rps = [0, 175, 250]")),
    bad("rate-negative-in-stage", "stages[1].rate_rps[0]", "must be > 0", (VALIDATION, VALIDATION + "\nrate_rps = [-5]")),
    bad("dt-negative", "simulation.dt_ms", "must be >= 0", ("dt_ms = 0.5", "dt_ms = -0.5")),
    bad("dt-not-dividing-horizon", "simulation.dt_ms", "does not divide", ("dt_ms = 0.5", "dt_ms = 0.7")),
    bad("dt-not-dividing-horizon-in-stage", "stages[1].dt_ms", "does not divide", (VALIDATION, VALIDATION + "\ndt_ms = 0.7")),
    bad("warmup-zero", "simulation.warmup_s", "must be > 0", ("warmup_s = 3", "warmup_s = 0")),
    bad("measure-negative", "simulation.measure_s", "must be > 0", ("measure_s = 12", "measure_s = -12")),
    bad("measure-zero-in-stage", "stages[0].measure_s", "must be > 0", (DEVELOPMENT, DEVELOPMENT + "\nmeasure_s = 0")),
    bad("queue-cap-zero", "cluster.queue_cap", "must be >= 1", ("queue_cap = 50", "queue_cap = 0")),
    bad("sigma-negative", "workload.prompt_tokens.sigma", "must be >= 0",
        ("sigma = 0.8, min = 16", "sigma = -0.8, min = 16")),
    bad("tokens-min-above-max", "workload.prompt_tokens.min", "min > max", ("min = 16, max = 4096", "min = 5000, max = 4096")),
    bad("tokens-min-above-max-in-stage", "stages[0].workload.output_tokens.min", "min > max",
        (DEVELOPMENT, DEVELOPMENT + "\nworkload = { output_tokens = { min = 2000 } }")),
    bad("tokens-max-below-min-in-stage", "stages[1].workload.prompt_tokens.max", "min > max",
        (VALIDATION, VALIDATION + "\nworkload = { prompt_tokens = { max = 8 } }")),
    bad("jitter-min-zero", "workload.jitter.min", "must be > 0", ("min = 0.9", "min = 0")),
    bad("jitter-min-negative", "workload.jitter.min", "must be > 0", ("min = 0.9", "min = -0.1")),
    bad("jitter-min-above-max", "workload.jitter.min", "min > max", ("min = 0.9", "min = 1.2")),
    bad("alpha-zero", "policy.alpha", "must be > 0 and <= 1", ("alpha = 0.15", "alpha = 0")),
    bad("alpha-above-one", "policy.alpha", "must be > 0 and <= 1", ("alpha = 0.15", "alpha = 1.5")),
    bad("alpha-negative-in-list", "policy.alpha[1]", "must be > 0 and <= 1", ("alpha = 0.15", "alpha = [0.1, -0.1]")),
    bad("exploration-negative", "stages[0].exploration[1]", "must be >= 0",
        ("exploration = [0, 0.05,", "exploration = [0, -0.05,")),
    bad("seed-first-negative", "stages[0].seeds.first", "must be >= 0", ("first = 1, count = 8", "first = -1, count = 8")),
    bad("seed-listed-twice", "stages[0].seeds", "twice", ("seeds = { first = 1, count = 8 }", "seeds = [1, 2, 1]")),
    bad("service-time-zero", "cluster.heterogeneity.high[0]", "must be > 0", ("high = [6, 11, 22]", "high = [0, 11, 22]")),
    bad("rate-multiplier-zero", "scenarios.burst.events[0].rate_multiplier", "must be > 0",
        ("{ at_s = 7, rate_multiplier = 2.0 }", "{ at_s = 7, rate_multiplier = 0 }")),
    # empty axes
    bad("empty-rate", "grid.rate_rps", "empty axis", ("rate_rps = [100, 175, 250]", "rate_rps = []")),
    bad("empty-policy", "stages[1].policy", "empty axis",
        ('policy = ["round_robin", "least_queue", "latency_aware", "adaptive"]', "policy = []")),
    bad("empty-scenario", "grid.scenario", "empty axis",
        ('scenario = ["steady", "burst", "straggler", "failure"]', "scenario = []")),
    bad("empty-heterogeneity", "grid.heterogeneity", "empty axis",
        ('heterogeneity = ["default", "high"]', "heterogeneity = []")),
    bad("empty-exploration", "stages[0].exploration", "empty axis",
        ("exploration = [0, 0.05, 0.1, 0.2, 0.35, 0.5]", "exploration = []")),
    bad("empty-seed-list", "stages[1].seeds", "empty axis", ("seeds = { first = 101, count = 24 }", "seeds = []")),
    bad("seed-count-zero", "stages[0].seeds.count", "empty axis", ("count = 8", "count = 0")),
    bad("no-stages", "stages", "[[stages]]", (STUDY[STUDY.index("[[stages]]"):], "")),
    # unknown names, with a suggestion
    bad("unknown-policy", "stages[0].policy[0]", "did you mean 'adaptive'", ('policy = ["adaptive"]', 'policy = ["adaptiv"]')),
    bad("unknown-heterogeneity", "grid.heterogeneity[1]", "did you mean 'high'",
        ('heterogeneity = ["default", "high"]', 'heterogeneity = ["default", "hihg"]')),
    bad("unknown-scenario", "grid.scenario[1]", "did you mean 'burst'",
        ('"steady", "burst", "straggler"', '"steady", "burts", "straggler"')),
    bad("unknown-metric", "stages[0].select.maximize", "did you mean 'attainment'",
        ('maximize = "attainment"', 'maximize = "attainmnet"')),
    bad("unknown-select-parameter", "stages[0].select.parameter", "did you mean 'exploration'",
        ('parameter = "exploration"', 'parameter = "exploraton"')),
    bad("select-not-swept", "stages[0].select.parameter", "not swept",
        ('parameter = "exploration"', 'parameter = "alpha"')),
    # events: times outside the horizon (15 s), replica numbers outside 1..3
    bad("event-after-horizon", "scenarios.burst.events[1].at_s", "outside the horizon",
        ("{ at_s = 9, rate_multiplier = 1.0 }", "{ at_s = 16, rate_multiplier = 1.0 }")),
    bad("event-at-horizon", "scenarios.failure.events[1].at_s", "outside the horizon",
        ("at_s = 11, replica = 2", "at_s = 15, replica = 2")),
    bad("event-outside-stage-horizon", "scenarios.burst.events[0].at_s", "stage 'validation'",
        (VALIDATION, VALIDATION + "\nwarmup_s = 1\nmeasure_s = 5")),
    bad("event-negative-time", "scenarios.burst.events[0].at_s", "must be >= 0",
        ("{ at_s = 7, rate_multiplier = 2.0 }", "{ at_s = -1, rate_multiplier = 2.0 }")),
    bad("event-missing-time", "scenarios.burst.events[0].at_s", "missing",
        ("{ at_s = 7, rate_multiplier = 2.0 }", "{ rate_multiplier = 2.0 }")),
    bad("event-two-actions", "scenarios.burst.events[0]", "exactly one",
        ("{ at_s = 7, rate_multiplier = 2.0 }", "{ at_s = 7, rate_multiplier = 2.0, slowdown = 2.0 }")),
    bad("replica-zero", "scenarios.straggler.events[0].replica", "start at 1",
        ("{ at_s = 5, replica = 1, slowdown = 4.0 }", "{ at_s = 5, replica = 0, slowdown = 4.0 }")),
    bad("replica-n-plus-one", "scenarios.failure.events[0].replica", "replicas are 1..3",
        ("at_s = 6, replica = 2", "at_s = 6, replica = 4")),
    bad("replica-on-rate-event", "scenarios.burst.events[0].replica", "whole cluster",
        ("{ at_s = 7, rate_multiplier = 2.0 }", "{ at_s = 7, replica = 1, rate_multiplier = 2.0 }")),
    bad("replica-missing", "scenarios.straggler.events[0].replica", "missing",
        ("{ at_s = 5, replica = 1, slowdown = 4.0 }", "{ at_s = 5, slowdown = 4.0 }")),
    # heterogeneities with different replica counts in one stage grid
    bad("replica-counts-differ-in-grid", "grid.heterogeneity", "different replica counts",
        ADD_TWO, ('heterogeneity = ["default", "high"]', 'heterogeneity = ["default", "two"]')),
    bad("replica-counts-differ-in-stage", "stages[1].heterogeneity", "different replica counts",
        ADD_TWO, (VALIDATION, VALIDATION + '\nheterogeneity = ["high", "two"]')),
    bad("stage-name-twice", "stages[1].name", "used twice", (VALIDATION, 'name = "development"')),
]


def assert_refused(rc, out, err, path, key, fragment, out_dir):
    """Exit status 2, one line naming the file and key, no traceback, nothing written."""
    assert rc == 2, err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    line = lines[0]
    assert "Traceback" not in err
    where = f"error: {path}: {key}: " if key else f"error: {path}: "
    assert line.startswith(where), line
    assert fragment in line, line
    assert not out_dir.exists()


@pytest.fixture
def run_cli(tmp_path, monkeypatch, capsys):
    """main() in-process, in an empty working folder: (rc, stdout, stderr, out folder)."""
    monkeypatch.chdir(tmp_path)  # a default results/ folder would land here, and be noticed

    def run(path, *extra):
        out_dir = tmp_path / "out"
        rc = main([str(path), "--out", str(out_dir), "--quiet", *extra])
        cap = capsys.readouterr()
        assert not (tmp_path / "results").exists()
        return rc, cap.out, cap.err, out_dir

    return run


@pytest.mark.parametrize("changes,key,fragment", BAD)
def test_bad_file(tmp_path, run_cli, changes, key, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(edit(*changes))
    assert_refused(*run_cli(path)[:3], path, key, fragment, tmp_path / "out")


def test_unedited_study_passes_the_checks():
    """The shipped study passes parsing and the memory check, so every refusal above
    comes from its edit."""
    import routesim
    from routesim.study import check_memory
    check_memory(routesim.load_sweep(ROOT / "sweeps" / "exploration.toml"))


def test_sweep_too_large_for_memory(tmp_path, run_cli, monkeypatch):
    monkeypatch.setattr(grid_mod, "available_bytes", lambda: 16 * GiB)
    path = tmp_path / "huge.toml"
    path.write_text(edit(("count = 24", "count = 10000000")))
    rc, out, err, out_dir = run_cli(path)
    assert_refused(rc, out, err, path, "stages[1]", "GiB", out_dir)
    assert "960,000,000 runs" in err and "validation" in err


def test_memory_refusal_reaches_even_absurd_counts(tmp_path, run_cli, monkeypatch):
    """A seed count far beyond memory is refused from the estimate, not by building it."""
    monkeypatch.setattr(grid_mod, "available_bytes", lambda: 16 * GiB)
    path = tmp_path / "huge.toml"
    path.write_text(edit(("count = 8", "count = 1000000000000")))
    assert_refused(*run_cli(path)[:3], path, "stages[0]", "GiB", tmp_path / "out")


def test_missing_file(tmp_path, run_cli):
    path = tmp_path / "nope.toml"
    assert_refused(*run_cli(path)[:3], path, "", "cannot read", tmp_path / "out")


def test_folder_instead_of_file(tmp_path, run_cli):
    path = tmp_path / "folder.toml"
    path.mkdir()
    assert_refused(*run_cli(path)[:3], path, "", "cannot read", tmp_path / "out")


def test_not_utf8(tmp_path, run_cli):
    path = tmp_path / "latin1.toml"
    path.write_bytes(STUDY.replace("# The study", "# Caf\u00e9: the study").encode("latin-1"))
    assert_refused(*run_cli(path)[:3], path, "", "UTF-8", tmp_path / "out")


@pytest.mark.parametrize("value,fragment", [("0", "must be >= 1"), ("-3", "must be >= 1"),
                                            ("abc", "whole number"), ("2.5", "whole number")],
                         ids=["zero", "negative", "word", "fraction"])
def test_bad_chunk_size(tmp_path, run_cli, value, fragment):
    path = tmp_path / "study.toml"
    path.write_text(STUDY)
    assert_refused(*run_cli(path, "--chunk-size", value)[:3], path, "--chunk-size", fragment, tmp_path / "out")


def test_unknown_stage_name(tmp_path, run_cli):
    path = tmp_path / "study.toml"
    path.write_text(STUDY)
    assert_refused(*run_cli(path, "--stage", "validaton")[:3], path, "stages", "no stage named", tmp_path / "out")


@pytest.mark.parametrize("text,extra,key,fragment", [
    (edit(("dt_ms = 0.5", "dt_ms = ")), (), "", "malformed TOML"),
    (edit(("count = 24", "count = 10000000")), (), "stages[1]", "GiB"),
    (STUDY, ("--chunk-size", "abc"), "--chunk-size", "whole number"),
], ids=["malformed-toml", "too-large-for-memory", "chunk-size-word"])
def test_subprocess(tmp_path, text, extra, key, fragment):
    """A real `python -m routesim.sweep`: status 2, one line, no traceback, nothing written."""
    path = tmp_path / "bad.toml"
    path.write_text(text)
    out_dir = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "routesim.sweep", str(path), "--out", str(out_dir), *extra],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert_refused(proc.returncode, proc.stdout, proc.stderr, path, key, fragment, out_dir)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


TINY = STUDY.split("[[stages]]")[0] + """
[scenarios.quick]     # fits a 2 s horizon
events = [{ at_s = 0.5, replica = 2, slowdown = 3.0 }, { at_s = 1.5, rate_multiplier = 2.0 }]

[[stages]]
name = "tiny"
policy = ["least_queue"]
rate_rps = [50]
heterogeneity = ["default"]
scenario = ["steady", "quick"]
seeds = [1]
warmup_s = 1
measure_s = 1
"""


def test_valid_tiny_sweep_writes_one_file(tmp_path, run_cli):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    rc, out, err, out_dir = run_cli(path, "--chunk-size", "2")
    assert rc == 0, err
    assert "Traceback" not in err
    assert sorted(p.name for p in out_dir.iterdir()) == ["tiny.nc"]  # no temporary left behind
    with xr.open_dataset(out_dir / "tiny.nc", engine="netcdf4") as ds:
        want = {"policy": 1, "exploration": 1, "rate_rps": 1, "heterogeneity": 1, "scenario": 2,
                "seed": 1, "replica": 3}
        assert {d: ds.sizes.get(d) for d in want} == want
        assert list(ds.attainment.dims) == list(want)[:-1]
        assert ds.attrs["stage"] == "tiny" and ds.attrs["sweep_text"] == TINY
        assert (ds.arrivals > 0).all()
