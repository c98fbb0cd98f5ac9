"""The README's example tables are what a fresh run prints (issue 39, item 5).

Each README block of printed output follows the block that holds its command; every
line of it must be a line the command prints today, in the same order (an excerpt may
leave lines out). Lines are compared cell by cell (split on white space): the README
may show an excerpt of a table whose column widths the left-out rows set. The batching
example runs reduced to the rows the README shows (its rates 23 and 41, so that the
rate column stays, and the five policies shown): every run's numbers depend only on its
own seed and settings, not on which other runs share the grid.
"""

import re

import pytest

import routesim
from conftest import ROOT, SWEEPS, run_reduced
from routesim.summary import render

README = ROOT / "README.md"


def readme_output(command: str) -> list[str]:
    """The lines of the README block that follows the code block starting with ``command``."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)
    k = next((i for i, b in enumerate(blocks) if b.startswith(command)), None)
    assert k is not None and k + 1 < len(blocks), f"README has no block starting {command!r}"
    return blocks[k + 1].splitlines()


def assert_excerpt(shown: list[str], printed: str) -> None:
    """Every non-empty line of ``shown`` is a line of ``printed``, cell by cell, in order."""
    have = [line.split() for line in printed.splitlines()]
    k = 0
    for line in shown:
        if not line.strip():
            continue
        while k < len(have) and have[k] != line.split():
            k += 1
        assert k < len(have), f"the README shows a line a fresh run does not print (or not here):\n{line}"
        k += 1


def printed(results: dict, sweep) -> str:
    """What ``python -m routesim.sweep`` prints for these stages (tables, not progress)."""
    return "\n\n".join(render(ds, stage.select) for stage in sweep.stages
                       for name, ds in results.items() if name == stage.name)


def test_assert_excerpt_catches_a_changed_number():
    text = "a  b\n-  -\n1  2\n3  4"
    assert_excerpt(["a b", "3    4"], text)
    with pytest.raises(AssertionError):
        assert_excerpt(["a b", "3 5"], text)
    with pytest.raises(AssertionError):
        assert_excerpt(["3 4", "1 2"], text)    # out of order


def test_incidents_black_hole_table():
    sweep = routesim.load_sweep(SWEEPS / "incidents.toml")
    results = routesim.run(sweep, stages=["black-hole"], show_progress=False)
    assert_excerpt(readme_output("python -m routesim.sweep sweeps/incidents.toml"), printed(results, sweep))


def test_mooncake_replay_table():
    sweep = routesim.load_sweep(SWEEPS / "mooncake-replay.toml")
    assert_excerpt(readme_output("python -m routesim.sweep sweeps/mooncake-replay.toml"),
                   printed(routesim.run(sweep, show_progress=False), sweep))


def test_conversations_table():
    sweep = routesim.load_sweep(SWEEPS / "conversations.toml")
    assert_excerpt(readme_output("python -m routesim.sweep sweeps/conversations.toml"),
                   printed(routesim.run(sweep, show_progress=False), sweep))


@pytest.mark.slow
def test_batching_example_excerpt(tmp_path):
    shown = readme_output("python -m routesim.sweep sweeps/batching.toml")
    policies = [line.split()[1] for line in shown[2:] if line.strip() and line.split()[0].isdigit()]
    assert len(policies) >= 3, shown
    text = (SWEEPS / "batching.toml").read_text()
    results = run_reduced(tmp_path, text, replace={
        "rate_rps = [23, 41, 60]": "rate_rps = [23, 41]",
        text[text.index('policy = ["round_robin"'):text.index("seeds = { first = 1, count = 16 }")]:
            f"policy = {policies!r}\n".replace("'", '"')})
    sweep = routesim.load_sweep(tmp_path / "sweep.toml")
    assert_excerpt(shown, printed(results, sweep))
