"""python -m routesim.validate (routesim/validate.py): issue 41, item 6."""

import shutil
from pathlib import Path

import numpy as np
import pytest

from routesim import validate
from routesim.calibrate.simfit import Log

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "validate"

GOOD = """
name = "t"
model = "desc.toml"
[replica]
scheduler = "vllm"
prefix_caching = false
max_batch = 256
kv_blocks = 28000
block_tokens = 16
max_batched_tokens = 8192
[[runs]]
log = "a.csv"
name = "1 req/s"
[[runs]]
log = "b.csv"
name = "12 req/s"
"""


def folder(tmp_path, text=GOOD, a="1rps.csv", b="12rps.csv"):
    shutil.copy(EXAMPLES / "harness" / a, tmp_path / "a.csv")
    shutil.copy(EXAMPLES / "harness" / b, tmp_path / "b.csv")
    shutil.copy(EXAMPLES.parent / "llama-3.1-8b-h100.toml", tmp_path / "desc.toml")
    (tmp_path / "v.toml").write_text(text)
    return tmp_path / "v.toml"


def test_in_flight_and_saturation_by_hand():
    # sends at 0, 1, 2, 3 s; E2E 2.5 s each: in flight at each send 1, 2, 3, 3
    log = Log("x", np.array([0.0, 1000, 2000, 3000]), np.ones(4, np.int64), np.full(4, 2, np.int64),
              np.full(4, 100.0), np.full(4, 2500.0))
    assert list(validate.in_flight(log, log.e2e_ms)) == [1, 2, 3, 3]
    assert validate.saturated(log, log.ttft_ms, log.e2e_ms, max_batch=3)          # the server's batch is full
    assert not validate.saturated(log, log.ttft_ms, log.e2e_ms, max_batch=4)
    closed = Log("x", log.send_ms, log.prompt, log.output, log.ttft_ms, log.e2e_ms, max_in_flight=2)
    assert validate.saturated(closed, log.ttft_ms, log.e2e_ms, max_batch=256)     # the client's cap reached
    growing = np.array([100.0, 100.0, 150.0, 201.0])                              # last quarter > 2 x first
    assert validate.saturated(log, growing, log.e2e_ms + 100, max_batch=256)
    assert not validate.saturated(log, np.array([100.0, 100.0, 150.0, 200.0]), log.e2e_ms + 100, max_batch=256)


BAD = [
    ("colour = 1\n" + GOOD, "v.toml: colour: unknown key"),
    (GOOD.replace('log = "b.csv"', 'log = "missing.csv"'), "missing.csv: file: cannot read"),
    (GOOD.replace("max_batch = 256", "max_batch = 0"), "v.toml: replica.max_batch"),
    (GOOD.replace("max_batch = 256", "max_batchh = 256"), "v.toml: replica.max_batchh: unknown key"),
    (GOOD.replace('name = "1 req/s"', 'name = "1 req/s"\nfit = true\nto_s = 30'), "v.toml: runs[0].to_s: 1 req/s is a fitting run"),
    (GOOD.replace('name = "1 req/s"', 'name = "1 req/s"\nfrom_s = 9999'), "v.toml: runs[0].from_s: no request"),
    (GOOD.replace('name = "12 req/s"', 'name = "1 req/s"'), "v.toml: runs: two runs have one name"),
    (GOOD.replace('scheduler = "vllm"', 'scheduler = "vllm"\nstep_cost = "linear"'), "v.toml: replica.step_cost"),
    (GOOD.replace('model = "desc.toml"', 'model = "nope.toml"'), "v.toml: model: "),
    (GOOD.replace('[replica]', '[fit]\naxes = ["memory", "speed"]\n[replica]'), "v.toml: fit.axes: unknown axis 'speed'"),
]


@pytest.mark.parametrize("text, expected", BAD)
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, text, expected):
    cfg = folder(tmp_path, text)
    out = tmp_path / "out"
    assert validate.main([str(cfg), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and expected in err, err
    assert not out.exists()


def test_a_bad_row_names_the_file_and_row(tmp_path, capsys):
    cfg = folder(tmp_path)
    lines = (tmp_path / "b.csv").read_text().splitlines()
    lines[5] = lines[5].rsplit(",", 1)[0] + ",abc"
    (tmp_path / "b.csv").write_text("\n".join(lines) + "\n")
    assert validate.main([str(cfg), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path / 'b.csv'}: row 6: e2e_ms: expected a number, got 'abc'\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("option", [["--fit", "nope"], ["--cdf", "nope"]])
def test_an_unknown_run_option_is_refused(tmp_path, capsys, option):
    assert validate.main([str(folder(tmp_path)), "--out", str(tmp_path / "out"), *option]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'v.toml'}: {option[0]}: ")


def test_the_default_fitting_runs_are_the_lowest_third_by_load(tmp_path):
    text = GOOD + '[[runs]]\nlog = "b.csv"\nname = "again"\n[[runs]]\nlog = "b.csv"\nname = "more"\n'
    cfg = validate.load(folder(tmp_path, text))
    assert [(r.log.name, r.fit) for r in cfg.runs] == [("1 req/s", True), ("12 req/s", False), ("again", False),
                                                        ("more", False)]
    cfg = validate.load(folder(tmp_path, text), fit_names=("again",))
    assert [r.log.name for r in cfg.runs if r.fit] == ["again"]


def test_the_command_fits_replays_and_writes_its_three_files(tmp_path, capsys):
    """The harness (examples/validate/harness): fit on 1 req/s, replay 12 req/s, whose log
    shows a queue growing (its last quarter's median TTFT is more than twice its first's:
    checked on the log here, independently of the command)."""
    cfg = folder(tmp_path)
    b = validate.load(cfg).runs[1].log
    q = len(b.ttft_ms) // 4
    assert np.median(b.ttft_ms[-q:]) > 2 * np.median(b.ttft_ms[:q])
    out = tmp_path / "out"
    assert validate.main([str(cfg), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["fit.toml", "validate.png", "validate.txt"]
    assert (out / "validate.txt").read_text() in text
    row = next(line for line in text.splitlines() if line.startswith("12 req/s") and " open " in line)
    assert " yes/" in row                                   # measured saturated
    assert "held-out runs: 0 below saturation, 1 saturated (measured)" in text
    import tomllib
    fit = tomllib.loads((out / "fit.toml").read_text())
    assert fit["replica"]["step_cost"] == "roofline" and set(fit["replica"]["roofline_ms"]) == {"base", "weights", "per_kv_token", "per_token", "per_token_pair"}


def test_the_readme_shows_what_the_shipped_harness_runs_print(tmp_path, capsys):
    """README "Validating a fitted server against its runs": its printout is a fresh run's."""
    from test_readme_tables import assert_excerpt, readme_output
    shown = [line for line in readme_output("python -m routesim.validate examples/validate/harness.toml")
             if not line.startswith("wrote ")]                           # its --out is tmp_path here
    assert validate.main([str(EXAMPLES / "harness.toml"), "--out", str(tmp_path / "out"), "-q"]) == 0
    assert_excerpt(shown, capsys.readouterr().out)


@pytest.mark.slow
@pytest.mark.parametrize("gpu, row", [("rtxpro6000", "RTX PRO 6000"), ("rtx4090", "RTX 4090")])
def test_the_readme_gpu_rows_are_what_the_shipped_runs_print(tmp_path, capsys, gpu, row):
    """README's table of the LLMServingSim runs: each cell is the held-out run's error."""
    import re
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    cells = next(line for line in readme.splitlines() if line.startswith(f"| {row} |")).split("|")[2:-1]
    assert validate.main([str(EXAMPLES / f"{gpu}.toml"), "--out", str(tmp_path / "out"), "-q"]) == 0
    out = capsys.readouterr().out
    errors = next(line for line in out.splitlines() if line.startswith("first half ") and "+" in line).split()[2:]
    shown = [c for cell in cells for c in re.split(r"\s*/\s*", cell.strip())]
    assert shown == errors


def test_python_m_routesim_validate_bad_input_is_one_line_exit_2(tmp_path):
    import subprocess
    import sys
    cfg = folder(tmp_path, GOOD.replace('log = "b.csv"', 'log = "missing.csv"'))
    proc = subprocess.run([sys.executable, "-m", "routesim", "validate", str(cfg), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"error: {tmp_path / 'missing.csv'}: file: ")
    assert not (tmp_path / "out").exists()
