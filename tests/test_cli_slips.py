"""Slips a new user met (issue 39, item 6): an axis value listed twice, a negative
front-end overhead offered for pasting, memory advice that named the wrong cause,
kept chunks discarded without a word, and a trace written where git does not ignore it.
"""

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from routesim import grid as grid_mod
from routesim.calibrate.__main__ import main as calibrate_main, nonnegative_overhead
from routesim.calibrate.logs import LogError
from test_cli import GiB, TINY, assert_refused, edit, run_cli  # noqa: F401  (run_cli: a fixture)

ROOT = Path(__file__).resolve().parents[1]


# --- a value listed twice ---------------------------------------------------------------

TWICE = [
    ("policy", "stages[1].policy", "'adaptive' is listed twice ([3] and [4])",
     ('policy = ["round_robin", "least_queue", "latency_aware", "adaptive"]',
      'policy = ["round_robin", "least_queue", "latency_aware", "adaptive", "adaptive"]')),
    ("rate", "grid.rate_rps", "100 is listed twice ([0] and [2])",
     ("rate_rps = [100, 175, 250]", "rate_rps = [100, 175, 100]")),
    ("rate-int-and-float", "grid.rate_rps", "100.0 is listed twice ([0] and [1])",
     ("rate_rps = [100, 175, 250]", "rate_rps = [100, 100.0, 250]")),
    ("scenario", "grid.scenario", "'steady' is listed twice ([0] and [1])",
     ('scenario = ["steady", "burst", "straggler", "failure"]',
      'scenario = ["steady", "steady", "straggler", "failure"]')),
    ("swept-parameter", "stages[0].exploration", "0.05 is listed twice ([1] and [2])",
     ("exploration = [0, 0.05, 0.1, 0.2, 0.35, 0.5]", "exploration = [0, 0.05, 0.05, 0.2, 0.35, 0.5]")),
    ("seed", "stages[0].seeds", "3 is listed twice ([0] and [1])",
     ("seeds = { first = 1, count = 8 }", "seeds = [3, 3]")),
]


@pytest.mark.parametrize("what,key,fragment,change", TWICE, ids=[t[0] for t in TWICE])
def test_a_value_listed_twice_is_refused(tmp_path, run_cli, what, key, fragment, change):
    """Each value of an axis is a coordinate: twice would run one condition twice and
    write a Dataset whose label selects two runs."""
    path = tmp_path / "twice.toml"
    path.write_text(edit(change))
    assert_refused(*run_cli(path)[:3], path, key, fragment, tmp_path / "out")


# --- the memory check's advice -----------------------------------------------------------

def _refusal(tmp_path, run_cli, monkeypatch, text):
    monkeypatch.setattr(grid_mod, "available_bytes", lambda: 16 * GiB)
    path = tmp_path / "huge.toml"
    path.write_text(text)
    rc, out, err, out_dir = run_cli(path)
    assert_refused(rc, out, err, path, "stages[0]", "GiB", out_dir)
    return err


def test_a_long_horizon_is_told_to_shorten_the_horizon(tmp_path, run_cli, monkeypatch):
    """A 10^8 s window with one seed: the requests of one run are what does not fit
    (50 req/s × 10^8 s = 5·10^9 requests), so 'fewer seeds' would be wrong advice."""
    err = _refusal(tmp_path, run_cli, monkeypatch, TINY.replace("measure_s = 1", "measure_s = 100000000"))
    assert "one run alone needs" in err and "shorten the horizon or lower the rate" in err
    assert "seeds" not in err


def test_many_seeds_are_told_to_use_fewer_seeds(tmp_path, run_cli, monkeypatch):
    """Ten million seeds of the 2-run tiny stage: one seed is small, the count is the cause."""
    err = _refusal(tmp_path, run_cli, monkeypatch, TINY.replace("seeds = [1]", "seeds = { first = 1, count = 10000000 }"))
    assert "use fewer seeds (one needs about" in err and "horizon" not in err


def test_many_rates_are_told_to_use_fewer_rates(tmp_path, run_cli, monkeypatch):
    """One seed over 400 rates at a 10^6 s horizon: each run fits, one seed's runs do not."""
    rates = ", ".join(str(r) for r in range(1, 401))
    text = TINY.replace("rate_rps = [50]", f"rate_rps = [{rates}]").replace("measure_s = 1", "measure_s = 1000000")
    err = _refusal(tmp_path, run_cli, monkeypatch, text)
    assert "one seed needs about" in err and "fewer rates or swept values" in err


# --- calibrate's front-end overhead -------------------------------------------------------

def test_calibrate_refuses_a_negative_overhead(tmp_path, capsys):
    """Two requests of the shipped log: one prefill-bearing step fixes three prefill
    coefficients, and the fit's first step comes out longer than the measured time to
    first token. A sweep takes no client_overhead_ms below 0, and the log cannot support
    the fit: one line, exit 2, nothing written."""
    log = tmp_path / "two.csv"
    log.write_text("".join((ROOT / "examples" / "serving-log.csv").read_text().splitlines(True)[:3]))
    out = tmp_path / "out"
    assert calibrate_main([str(log), "--out", str(out)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("\n") == 1, cap.err
    assert cap.err.startswith(f"error: {log}: overhead: ") and "cannot support the fit" in cap.err
    assert not out.exists()


def test_a_negative_overhead_within_the_jitter_is_zero():
    """Below 0 by less than the timestamps' resolution: no measurable overhead, 0 (the
    measured median kept to be shown); further below: refused."""
    o = {"median_ms": -0.3, "p10_ms": -1.0, "p90_ms": 0.4, "requests": 9}
    assert nonnegative_overhead(o, "log.csv", 0.5, None) == dict(o, median_ms=0.0, measured_ms=-0.3)
    positive = dict(o, median_ms=2.0)
    assert nonnegative_overhead(positive, "log.csv", 0.5, None) is positive
    none = {"median_ms": float("nan"), "p10_ms": float("nan"), "p90_ms": float("nan"), "requests": 0}
    assert nonnegative_overhead(none, "log.csv", 0.5, None) is none

    class Steps:  # what the message counts: prefill-bearing steps with a measured duration
        usable = prefill = np.array([True, False])
    with pytest.raises(LogError, match="cannot support the fit"):
        nonnegative_overhead(dict(o, median_ms=-0.6), "log.csv", 0.5, Steps)


# --- the trace's default output ----------------------------------------------------------

def test_readme_traces_are_written_where_git_ignores_them():
    """Every ``routesim.trace`` command the README shows writes under results/ (its
    default, or an ``--out`` there), which .gitignore ignores."""
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"routesim[. ]trace [^`\n]*(?:\\\n[^`\n]*)*", readme)
    commands = [c for c in commands if " sweeps/" in c]
    assert commands, "the README shows no trace command"
    for c in commands:
        outs = re.findall(r"--out (\S+)", c)
        assert all(o.startswith("results/") for o in outs), c
    ignored = subprocess.run(["git", "check-ignore", "-q", "results/x/trace.nc"], cwd=ROOT)
    assert ignored.returncode == 0, "results/ is not ignored by git"


def test_trace_default_out_is_under_results(tmp_path):
    from routesim import timeline
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    plan = timeline.prepare(path, scenario="steady")
    assert timeline.default_out(plan) == Path("results/exploration/trace-steady-default-50rps-seed1.nc")
