"""The analysis scripts in scripts/ run on a small results set and print what they say."""

import importlib.util
from pathlib import Path

import pytest
import xarray as xr

from test_figures import tiny_results

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _open(path):
    with xr.open_dataset(path, engine="h5netcdf") as f:
        return f.load()


def test_every_script_is_tested():
    assert {p.stem for p in SCRIPTS.glob("*.py")} == {"compare_policies", "straggler_share", "attainment_vs_rate"}


def test_compare_policies(capsys):
    path = tiny_results() / "tiny" / "validation.nc"
    assert _load("compare_policies").main([str(path)]) == 0
    out = capsys.readouterr().out
    ds = _open(path)
    steady = 100 * ds.attainment.sel(scenario="steady", policy="adaptive").mean()
    assert f"{float(steady):.2f}" in out
    lines = out.splitlines()
    for s in map(str, ds.scenario.values):
        # the best policy of a scenario: the highest mean attainment over all its runs
        means = {str(p): float(ds.attainment.sel(scenario=s, policy=p).mean()) for p in ds.policy.values}
        best = max(means, key=means.get)
        line = next(x for x in lines if x.strip().startswith(f"{s} (best "))
        assert f"{s} (best {best}): " in line
        # then every other policy, seed by seed minus the best: its mean is <= 0, so its min is too
        cells = dict(cell.split(": ") for cell in line.split("): ", 1)[1].split("; "))
        assert set(cells) == set(means) - {best}
        assert all(float(cell.split(" .. ")[0]) <= 0 for cell in cells.values())


def test_straggler_share(capsys):
    path = tiny_results() / "tiny" / "validation.nc"
    assert _load("straggler_share").main([str(path), "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "replica 1 slows at 5 s, recovers at 10 s" in out
    rr = next(line for line in out.splitlines() if "round_robin:" in line)
    # at 250 req/s round robin's share drops during the slowdown only because the queue fills
    before, during, after = (float(x) for x in
                             [rr.split("before")[1].split()[0], rr.split("during")[1].split()[0],
                              rr.split("after")[1].split()[0]])
    assert 0 < during < before and 0 < after


@pytest.mark.parametrize("extra", [[], ["--scenario", "steady"]])
def test_attainment_vs_rate(tmp_path, capsys, extra):
    path = tiny_results() / "load-curve" / "load-curve.nc"
    png = tmp_path / "a.png"
    assert _load("attainment_vs_rate").main([str(path), *extra, "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    ds = _open(path)
    low = 100 * ds.attainment.sel(rate_rps=50, heterogeneity="default", policy="least_queue").mean()
    assert f"{float(low):.2f}" in out and png.read_bytes().startswith(b"\x89PNG")
