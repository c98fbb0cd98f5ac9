"""python -m routesim.least_outstanding end to end on a reduced claim-1 sweep: it writes
each sweep's results under --results-root/<name>/, the figures and the document; the
chunk size it passes on does not change the Dataset; a bad sweep file is one line and
exit status 2, with nothing written."""

import re
from pathlib import Path

import pytest
import xarray as xr

from conftest import ROOT, SWEEPS, VERDICTS
from routesim.studies.least_outstanding import OLD_VERDICTS
from routesim.studies.least_outstanding import __main__ as cli
from routesim.studies.least_outstanding import capacities, common, counts, server, workloads
from routesim.studies.least_outstanding.common import verdict_cells, verdict_word, verdicts


def reduced_counts(tmp_path):
    text = (SWEEPS / "token-routing.toml").read_text()
    text = text[:text.index('[[stages]]\nname = "exact"')]   # the counts stage only
    for old, new in {"rate_rps = [23, 35, 41]": "rate_rps = [41]", "warmup_s = 1200": "warmup_s = 2",
                     "measure_s = 60": "measure_s = 4", "count = 16 }": "count = 4 }"}.items():
        assert old in text, old
        text = text.replace(old, new)
    p = tmp_path / "token-routing.toml"
    p.write_text(text)
    return str(p)


def test_runs_the_sweeps_then_writes_figures_and_document(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "SWEEPS", (reduced_counts(tmp_path),))
    outs = {}
    for chunk in ("1", "5"):
        root = tmp_path / f"r{chunk}"
        rc = cli.main(["--quiet", "--results-root", str(root / "results"), "--figures", str(root / "figures"),
                       "--out", str(root / "doc.md"), "--chunk-size", chunk])
        assert rc == 0
        outs[chunk] = xr.load_dataset(root / "results" / "token-routing" / "counts.nc")
        assert (root / "figures" / "lor-claim1-counts.png").is_file()
        assert (root / "figures" / "lor-claim1-cdf.png").is_file()
        doc = (root / "doc.md").read_text()
        assert "## Claim 1: counts lie when costs vary" in doc and "| 1. Counts lie" in doc
        assert "## Claim 2" not in doc          # only what was run is reported
        # claim 1's row gives its mechanism's and its added clauses' verdicts, and every
        # figure the document and its appendix link was drawn (PNG and SVG), and nothing else
        data = counts.load(root / "results")
        row = counts.row(data)
        assert row[3] in VERDICTS and row[3] == counts.verdict(data)
        v = verdicts(counts.clauses(data))
        assert v["mechanism"] in VERDICTS and v["added"] in VERDICTS
        mech, added = verdict_cells(v, counts.ADDED_WORDS)
        # the server arm (the main columns) and the real workloads not run here: the
        # page's replica's verdicts alone in their column
        assert (f"| {' | '.join(row[:2])} | {server.NOT_RUN} | {server.NOT_RUN} | {server.NOT_RUN} | "
                f"{verdict_word(mech)}; {verdict_word(added)} | {workloads.NOT_RUN}: "
                f"{workloads.why_not(counts)} |") in doc.splitlines()
        assert f"**Verdict.** The seed's mechanism: *{mech}*. Clauses the prediction added: *{added}*." in doc
        # the old verdicts against the new: the last column, the server's, not run here
        old = next(line for line in doc.splitlines() if line.startswith(f"| {row[0]} | {OLD_VERDICTS['counts']} |"))
        assert old.endswith(f"| {server.NOT_RUN} |"), old
        # the practitioner's summary comes first, before the verdicts and the claims
        assert doc.index("## What to deploy") < doc.index("## The verdicts") < doc.index("## Claim 1")
        # the appendix beside the document, every pointer of the document resolving there
        appendix = (root / "doc-appendix.md").read_text()
        heads = {"".join(ch for ch in h.strip().lower() if ch.isalnum() or ch in "_- ").replace(" ", "-")
                 for h in re.findall(r"^#+ (.*)$", appendix, re.M)}
        targets = re.findall(r"\]\(doc-appendix\.md#([^)]+)\)", doc)
        assert targets and set(targets) <= heads, (targets, heads)
        assert "## Claim 1: counts lie when costs vary" in appendix and "](doc.md)" in appendix
        links = re.findall(r"!\[[^\]]*\]\(\.\./figures/([^)]+)\.png\)", doc + appendix)
        assert sorted(links) == ["lor-claim1-cdf", "lor-claim1-counts"]
        assert sorted(p.name for p in (root / "figures").iterdir()) == sorted(
            f"{stem}.{ext}" for stem in links for ext in ("png", "svg"))
    xr.testing.assert_identical(outs["1"].drop_attrs(), outs["5"].drop_attrs())


def test_a_bad_sweep_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text((SWEEPS / "token-routing.toml").read_text().replace("p_long = 0.02", "p_long = 2"))
    monkeypatch.setattr(cli, "SWEEPS", (reduced_counts(tmp_path), str(bad)))   # checked before any runs
    rc = cli.main(["--quiet", "--results-root", str(tmp_path / "results"), "--figures", str(tmp_path / "f"),
                   "--out", str(tmp_path / "doc.md")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "bad.toml" in err[0] and "p_long" in err[0], err
    assert not (tmp_path / "results").exists() and not (tmp_path / "doc.md").exists()
    assert not (tmp_path / "doc-appendix.md").exists()


@pytest.mark.parametrize("option, value", [("--workers", "zero"), ("--workers", "0"), ("--chunk-size", "1.5")])
def test_a_bad_option_is_one_line_and_exit_2_before_any_run(tmp_path, monkeypatch, capsys, option, value):
    """A command-line option the sweeps would refuse is refused before the capacity
    searches run: they take minutes and write their results (as they did)."""
    ran = []
    monkeypatch.setattr(capacities, "run", lambda *a: ran.append(a) or 0)
    monkeypatch.setattr(cli.sweep_cli, "main", lambda argv: ran.append(argv) or 0)
    monkeypatch.setattr(cli, "SWEEPS", (capacities.SWEEP, reduced_counts(tmp_path)))
    rc = cli.main(["--quiet", "--results-root", str(tmp_path / "results"), "--figures", str(tmp_path / "f"),
                   "--out", str(tmp_path / "doc.md"), option, value])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and option in err[0] and "routesim.least_outstanding" in err[0], err
    assert ran == [] and not (tmp_path / "results").exists() and not (tmp_path / "doc.md").exists()


def test_a_results_file_is_read_once_while_it_stays_the_same(tmp_path):
    """common.read: what xarray reads from the file, each caller's own copy (attrs),
    the shared values read-only, and the file read again once it has changed."""
    import numpy as np
    import pytest

    from routesim.studies.least_outstanding.common import read

    path = tmp_path / "stage.nc"
    xr.Dataset({"x": ("seed", np.arange(3.0))}, attrs={"a": 1}).to_netcdf(path, engine="netcdf4")
    first = read(path)
    xr.testing.assert_identical(first, xr.load_dataset(path, engine="netcdf4"))
    first.attrs["results_root"] = "elsewhere"
    assert "results_root" not in read(path).attrs
    with pytest.raises(ValueError):
        first.x.values[0] = 7.0
    xr.Dataset({"x": ("seed", np.arange(4.0))}, attrs={"a": 2}).to_netcdf(path, engine="netcdf4")
    again = read(path)
    assert again.attrs["a"] == 2 and again.x.values.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_script_run_by_its_path_computes_in_its_own_process(tmp_path):
    """common.in_workers from a script run by its path (or from standard input), called
    at its top level with no ``if __name__ == "__main__"`` guard: spawned workers would
    run the script again (or fail to start); the items are computed in the script's
    process instead, once, in order."""
    import subprocess
    import sys

    script = tmp_path / "mine.py"
    script.write_text(
        "from routesim.studies.least_outstanding import common\n"
        "common.os.sched_getaffinity = lambda pid: {0, 1}\n"
        "print(common.in_workers(abs, [-1, -2, -3]))\n")
    for run in ([sys.executable, str(script)], [sys.executable, "-"]):
        out = subprocess.run(run, input=script.read_text() if run[-1] == "-" else None, capture_output=True,
                             text=True, cwd=ROOT, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.splitlines() == ["[1, 2, 3]"]


def _pid_and(x):
    import os
    return os.getpid(), x * x


def test_in_workers_maps_in_order_in_other_processes_or_here(monkeypatch):
    """common.in_workers: the results of fn over the items in the items' order; computed
    in worker processes when there are two cores or more, in this process with one."""
    import os

    from routesim.studies.least_outstanding import common

    monkeypatch.setattr(common, "_can_spawn", lambda: True)   # (however pytest was started)
    monkeypatch.setattr(common.os, "sched_getaffinity", lambda pid: {0, 1})
    out = common.in_workers(_pid_and, range(5))
    assert [x for _, x in out] == [0, 1, 4, 9, 16]
    assert os.getpid() not in {pid for pid, _ in out}
    monkeypatch.setattr(common.os, "sched_getaffinity", lambda pid: {0})
    assert common.in_workers(_pid_and, range(3)) == [(os.getpid(), 0), (os.getpid(), 1), (os.getpid(), 4)]


def test_resume_keeps_a_sweep_it_finished_and_runs_one_that_changed(tmp_path, monkeypatch, capsys):
    """A sweep drops its chunks when it ends, so --resume knows a finished sweep by the
    record the command writes beside its results: kept while the sweep file, routesim and
    every stage's file are as they were; run again when any of them is not."""
    from routesim import chunks
    path = reduced_counts(tmp_path)
    monkeypatch.setattr(cli, "SWEEPS", (path,))
    calls = []
    real = cli.sweep_cli.main
    monkeypatch.setattr(cli.sweep_cli, "main", lambda argv: calls.append(argv) or real(argv))
    root = tmp_path / "results"
    argv = ["--results-root", str(root), "--figures", str(tmp_path / "f"), "--out", str(tmp_path / "doc.md")]
    results = root / "token-routing" / "counts.nc"

    def run(*extra):
        calls.clear()
        assert cli.main(["--quiet", *argv, *extra]) == 0
        return len(calls)

    assert run() == 1 and (root / "token-routing" / common.FINISHED.format("sweep")).is_file()
    written = results.stat().st_mtime_ns
    assert run("--resume") == 0                          # finished, unchanged: kept
    assert results.stat().st_mtime_ns == written and (tmp_path / "doc.md").is_file()
    assert run() == 1                                    # without --resume it runs as before
    (tmp_path / "doc.md").unlink()
    assert run("--resume") == 0 and (tmp_path / "doc.md").is_file()   # the document is written again
    with open(path, "a") as f:
        f.write("# a comment changes the sweep file's text\n")
    assert run("--resume") == 1                          # the sweep file changed
    assert run("--resume") == 0
    monkeypatch.setattr(chunks, "package_digest", lambda: "another routesim")
    assert run("--resume") == 1                          # routesim changed
    assert run("--resume") == 0
    results.unlink()
    assert run("--resume") == 1 and results.is_file()    # a stage's file is missing
    (root / "token-routing" / common.FINISHED.format("sweep")).write_text("{")
    assert run("--resume") == 1                          # a record it cannot read
    # the quiet-less command says which sweep it kept
    calls.clear()
    assert cli.main([*argv, "--resume"]) == 0 and not calls
    assert "token-routing: finished before with this sweep file and routesim; kept" in capsys.readouterr().err


def test_resume_keeps_a_capacity_search_it_finished_with_the_same_arguments(tmp_path, monkeypatch):
    """The capacity searches (the study's and the server arm's) and the server arm's stages
    are kept under --resume by the same record as a sweep: while the sweep file, routesim
    and the search's arguments are as they were, not merely while their file exists."""
    calls = []

    def search(argv):   # a search: its file, named by its stage, in --out
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{argv[argv.index('--stage') + 1]}-capacity.nc").write_text("")
        calls.append(argv[argv.index("--stage") + 1])
        return 0

    def sweep(argv):    # a sweep: a file per stage
        out = Path(argv[argv.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        for i, a in enumerate(argv):
            if a == "--stage":
                (out / f"{argv[i + 1]}.nc").write_text("")
        calls.append("sweep")
        return 0

    monkeypatch.setattr(capacities.capacity_mod, "main", search)
    monkeypatch.setattr(cli.sweep_cli, "main", sweep)
    monkeypatch.setattr(capacities, "mooncake_capacity", lambda out: None)
    import routesim.results
    monkeypatch.setattr(routesim.results, "write_atomic", lambda ds, path: Path(path).write_text(""))

    def run(resume):
        calls.clear()
        assert capacities.run(tmp_path, quiet=True, resume=resume) == 0
        assert server.run(tmp_path, quiet=True, resume=resume) == 0
        return list(calls)

    assert run(False) == ["default", "azure", "sweep", "capacity", "sweep"]
    assert run(True) == []                                        # all finished, unchanged: kept
    (tmp_path / capacities.CAPACITY_RESULTS / "azure-capacity.nc").unlink()
    assert run(True) == ["azure"]                                 # its file is missing
    monkeypatch.setattr(capacities, "SEARCH", capacities.SEARCH + ("--low", "30"))
    assert run(True) == ["default"]                               # the search's arguments changed
    from routesim import chunks
    monkeypatch.setattr(chunks, "package_digest", lambda: "another routesim")
    assert run(True) == ["default", "azure", "sweep", "capacity", "sweep"]   # routesim changed
    assert run(True) == []
