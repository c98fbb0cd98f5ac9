"""python -m routesim.figures and routesim.report know only the bundled studies: any
other folder is refused with one line and exit 2 before anything is written, and a
results folder beside the study's (load-curve, incidents) is used only when it holds
that sweep's stage."""

import shutil

import pytest

import routesim
from conftest import parse
from routesim import figures, report
from routesim.results import write_atomic
from test_figures import tiny_results

OTHER = """
[[stages]]
name = "mine"
policy = ["round_robin", "least_queue"]
rate_rps = [100]
scenario = ["steady"]
heterogeneity = ["default"]
seeds = [1, 2]
"""


@pytest.fixture(scope="module")
def other(tmp_path_factory):
    """A queue-model results folder of a custom sweep (stage "mine")."""
    ds = routesim.run(parse(OTHER), show_progress=False)["mine"]
    root = tmp_path_factory.mktemp("other")
    write_atomic(ds, root / "mine" / "mine.nc")
    return root / "mine"


def _batching_like(tmp_path, other):
    """A folder whose stage file says it is a batching stage (the attrs the check reads)."""
    import xarray as xr
    ds = xr.load_dataset(other / "mine.nc")
    ds.attrs.update(replica_kind="batching", stage="policies", sweep_name="batching")
    write_atomic(ds, tmp_path / "batching" / "policies.nc")
    return tmp_path / "batching"


COMMANDS = {"figures": (figures.main, "--out", "figs"), "report": (report.main, "--out", "doc.md")}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("folder", ["custom", "batching"])
def test_a_folder_of_another_sweep_is_refused_before_anything_is_written(command, folder, other, tmp_path,
                                                                          capsys):
    main, opt, name = COMMANDS[command]
    src = other if folder == "custom" else _batching_like(tmp_path, other)
    out = tmp_path / "out" / name
    assert main([str(src), opt, str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: {src}: not the results of sweeps/exploration.toml (its stages development "
                          "and validation"), err
    assert "python -m routesim.plot" in err
    assert ("stage mine" if folder == "custom" else "stage policies of the batching sweep, batching model") in err
    assert not (tmp_path / "out").exists()


@pytest.fixture
def drawn(monkeypatch):
    """The stems python -m routesim.figures would draw (the drawing itself is
    test_figures.py's): its render call records them instead."""
    from routesim.studies import plotting
    stems = []

    def render(jobs, out_dir, show_progress=False):
        stems.extend(stem for stem, _ in jobs)
        return []
    monkeypatch.setattr(plotting, "render", render)
    return stems


def _study_with(tmp_path, neighbours: dict):
    """A copy of the tiny study in ``tmp_path/results/tiny`` with the given folders
    beside it ({name: source folder})."""
    root = tmp_path / "results"
    shutil.copytree(tiny_results() / "tiny", root / "tiny")
    for name, src in neighbours.items():
        shutil.copytree(src, root / name)
    return root


def test_a_foreign_load_curve_beside_the_study_is_skipped_with_a_note(other, tmp_path, capsys, drawn):
    root = _study_with(tmp_path, {"load-curve": other})
    assert figures.main([str(root / "tiny"), "--out", str(tmp_path / "figs")]) == 0
    err = capsys.readouterr().err
    assert "not the results of sweeps/load-curve.toml" in err and "skipping the load-curve figure" in err
    assert "load-curve" not in drawn and "validation-p99" in drawn


def test_the_real_load_curve_beside_the_study_is_drawn(tmp_path, capsys, drawn):
    root = _study_with(tmp_path, {"load-curve": tiny_results() / "load-curve"})
    assert figures.main([str(root / "tiny"), "--out", str(tmp_path / "figs"), "--quiet"]) == 0
    assert "load-curve" in drawn


def test_a_named_folder_that_is_not_the_load_curve_is_refused(other, tmp_path, capsys):
    for main, opt, name in COMMANDS.values():
        out = tmp_path / "out" / name
        assert main([str(tiny_results() / "tiny"), "--load-curve", str(other), opt, str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: --load-curve {other}: not the results of "
                                                       "sweeps/load-curve.toml"), err
        assert not (tmp_path / "out").exists()


def test_incidents_beside_the_study_that_are_not_the_incidents_sweep_are_skipped(other, tmp_path, capsys,
                                                                                 drawn):
    inc = tmp_path / "fake-incidents"
    inc.mkdir()
    shutil.copy(other / "mine.nc", inc / "black-hole.nc")   # the file name the old check looked for
    root = _study_with(tmp_path, {"incidents": inc})
    assert figures.main([str(root / "tiny"), "--out", str(tmp_path / "figs")]) == 0
    err = capsys.readouterr().err
    assert "not the results of sweeps/incidents.toml" in err and "skipping the black-hole figure" in err
    assert "timeline-black-hole" not in drawn and "validation-p99" in drawn
    # named explicitly: refused
    assert figures.main([str(root / "tiny"), "--incidents", str(inc), "--out", str(tmp_path / "f2")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: --incidents {inc}: not the results"), err
    assert not (tmp_path / "f2").exists()


def test_the_study_report_names_a_sweep_it_cannot_read_in_one_line(other, tmp_path, monkeypatch, capsys):
    """The least-outstanding study's Datasets name their sweep file (and it its traces)
    relative to the folder the sweep ran from; run from elsewhere, the report cannot
    read them: one line naming the file and the key, how to run it, exit 2, nothing
    written (it was a traceback)."""
    from routesim.config.reader import ConfigError
    from routesim.studies import least_outstanding

    def unreadable(results, out):
        raise ConfigError("sweeps/token-routing.toml", "stages[8].workload.lengths.trace",
                          "sweeps/../traces/azure-conv.csv: cannot read trace file: No such file or directory")
    monkeypatch.setattr(least_outstanding, "is_study", lambda folder: True)
    monkeypatch.setattr(least_outstanding, "write", unreadable)
    assert report.main([str(other), "--out", str(tmp_path / "out" / "doc.md")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: sweeps/token-routing.toml: stages[8].workload.lengths.trace: ")
    assert "run this command there" in err
    assert not (tmp_path / "out").exists()
