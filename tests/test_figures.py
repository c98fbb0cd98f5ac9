"""Figures: every figure renders from a small results set, deterministically, within
size, with one colour per policy. ``tiny_results()`` is shared with the report and
script tests."""

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import routesim
from conftest import HEAD, EXTRA_SCENARIOS
from routesim import figures as cli
from routesim.studies import plotting
from routesim.studies.serving import figures as F
from routesim.queue.policies import NAMES
from routesim.results import write_atomic

TINY = HEAD + EXTRA_SCENARIOS + """
[[stages]]
name = "development"
policy = ["adaptive"]
exploration = [0, 0.5]
rate_rps = [100, 250]
scenario = ["steady", "straggler", "failure"]
seeds = [1, 2]
select = { parameter = "exploration", maximize = "attainment" }

[[stages]]
name = "validation"
policy = ["round_robin", "least_queue", "latency_aware", "adaptive"]
rate_rps = [100, 250]
scenario = ["steady", "straggler", "failure"]
seeds = [3, 4, 5]
"""
TINY_LOAD = HEAD + """
[[stages]]
name = "load-curve"
policy = ["round_robin", "least_queue", "latency_aware", "adaptive"]
rate_rps = [50, 150, 250]
scenario = ["steady"]
exploration = 0.35
seeds = [3, 4]
"""


@functools.lru_cache(maxsize=None)
def tiny_results() -> Path:
    """A temporary ``results/`` with ``tiny/`` (development + validation) and
    ``load-curve/``, each written as the sweep command writes them; built once."""
    root = Path(tempfile.mkdtemp(prefix="routesim-tiny-"))
    atexit.register(shutil.rmtree, root, True)
    for name, text in (("tiny", TINY), ("load-curve", TINY_LOAD)):
        (root / f"{name}.toml").write_text(text)
        sweep = routesim.load_sweep(root / f"{name}.toml")
        for stage, ds in routesim.run(sweep, show_progress=False).items():
            write_atomic(ds, root / name / f"{stage}.nc")
    return root


EXPECTED = {F.NAMES[k] for k in ("development", "attainment", "p99", "load_curve", "lag")} | {
    "timeline-straggler", "timeline-failure"}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    root = tiny_results()
    paths = F.render(root / "tiny", out, root / "load-curve")
    return out, paths


def test_every_figure_is_written_as_png_and_svg(rendered):
    out, paths = rendered
    stems = {p.stem for p in paths}
    assert stems == EXPECTED
    for stem in EXPECTED:
        png, svg = (out / f"{stem}.png").read_bytes(), (out / f"{stem}.svg").read_text()
        assert png.startswith(b"\x89PNG") and len(png) < 1_000_000
        assert "<svg" in svg and "Date" not in svg and "Matplotlib v" not in svg
        assert b"Software" not in png
    assert not list(out.glob(".*.tmp"))


@pytest.mark.parametrize("stem", ["validation-p99", "estimate-lag"])
def test_regenerating_gives_identical_bytes(rendered, tmp_path, stem):
    out, _ = rendered
    root = tiny_results()
    make = dict(F.jobs(root / "tiny", root / "load-curve"))[stem]
    plotting.render([(stem, make)], tmp_path)
    for ext in ("png", "svg"):
        assert (tmp_path / f"{stem}.{ext}").read_bytes() == (out / f"{stem}.{ext}").read_bytes(), ext


def test_a_frozen_layout_fits_the_pngs_text(tmp_path):
    """A constrained layout frozen by ``save`` is computed at the PNG's resolution: text
    measured at the figure's own 100 dpi is not the width it renders at 110 dpi, and the
    long tick labels at the left edge overran the PNG (claim 7's figure lost the first
    letters of its arms' names). Every edge of the PNG keeps a margin with no ink."""
    import matplotlib.image as mpimg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(12, 6.4), layout="constrained")
    axes = fig.subplots(1, 3, sharey=True)
    for ax in axes:
        ax.plot([1, 2], [0, 3])
    axes[0].set_yticks(range(4), ["client a, next window, no incident, 20 % budget"] * 4, fontsize=7.5)
    fig.suptitle("a title")
    png, _ = plotting.save(fig, tmp_path, "frozen", 110, freeze_layout=True)
    ink = mpimg.imread(png)[..., :3].min(axis=2) < 0.8      # (rows, columns): darker than light grey
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    assert cols[0] > 0 and cols[-1] < ink.shape[1] - 1 and rows[0] > 0 and rows[-1] < ink.shape[0] - 1, (
        cols[0], cols[-1], rows[0], rows[-1], ink.shape)


def test_one_colour_per_policy_and_the_accent():
    policies = list(NAMES)
    colours = [F.colour(p) for p in policies]
    assert len(set(colours)) == len(colours), "two policies share a colour"
    assert F.colour("adaptive") == F.PALETTE[F.ACCENT]
    # the accent is the most saturated colour of the palette
    import colorsys
    import matplotlib.colors as mc
    sat = {p: colorsys.rgb_to_hsv(*mc.to_rgb(F.colour(p)))[1] for p in policies}
    assert max(sat, key=sat.get) == F.ACCENT
    # a policy without a colour of its own gets a spare one, never one of the palette's,
    # and the same one in every process (not chosen by Python's per-process string hash)
    names = ("unknown_policy", "another", "x")
    spare = [F.colour(q) for q in names]
    assert all(c in F._SPARE and c not in F.PALETTE.values() for c in spare)
    elsewhere = subprocess.run(
        [sys.executable, "-c", f"import routesim.studies.serving.figures as F; print(*map(F.colour, {names!r}))"],
        env={**os.environ, "PYTHONHASHSEED": "12345"}, capture_output=True, text=True, check=True)
    assert elsewhere.stdout.split() == spare


def test_reach_time_of_a_step():
    t = np.arange(0, 2.0001, 0.01)
    true = np.where(t < 1.0, 10.0, 40.0)
    est = np.where(t < 1.0, 10.0, 40.0 - 30.0 * np.exp(-(t - 1.0) / 0.1))
    got = F.reach_time(t, est, true, 1.0)
    assert got == pytest.approx(0.24, abs=0.011)   # 1 - exp(-x/0.1) >= 0.9 at x = 0.23
    assert np.isnan(F.reach_time(t, np.full_like(t, 10.0), true, 1.0))


def test_command_line(tmp_path, capsys):
    root = tiny_results()
    assert cli.main([str(tmp_path / "nothing"), "--out", str(tmp_path / "f")]) == 2
    assert "no result files" in capsys.readouterr().err
    assert not (tmp_path / "f").exists()
    # only the development stage: one figure, the rest left out without an error
    (tmp_path / "dev").mkdir()
    shutil.copy(root / "tiny" / "development.nc", tmp_path / "dev" / "development.nc")
    assert cli.main([str(tmp_path / "dev"), "--out", str(tmp_path / "f"), "--quiet"]) == 0
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == ["development-objective.png",
                                                                 "development-objective.svg"]
