"""A TTFT objective scaled to prompt length (issue 44 item 4's ingredient): a request of
P prompt tokens meets it when its TTFT is at most ``slo_ttft_ms +
slo_ttft_ms_per_prompt_token · P``; attainment, goodput, the steady-state check's
attainment trend and ``routesim.capacity``'s criterion all use each request's own
objective, and the default allowance 0 is the flat objective of before.

The hand-worked cases replay two requests, each alone on one replica whose step costs
10 ms + 0.5 ms per prefill token (no other term): a prompt of P tokens is prefilled in
one iteration of 10 + 0.5·P ms, at whose end its single output token is emitted, so
its TTFT is 10 + 0.5·P ms: 60 ms for P = 100, 510 ms for P = 1,000. Every number
below is a binary fraction, so each comparison is exact.
"""

import math

import numpy as np
import pytest

import routesim
from routesim import capacity
from routesim.config import parse_sweep

PROMPTS = (100, 1000)
"""The two requests' prompt tokens (one output token each)."""


def hand_ttft(p):
    """TTFT (ms) of a lone request of ``p`` prompt tokens: one prefill iteration."""
    return 10.0 + 0.5 * p


TRACE = "arrival_ms,prompt_tokens,output_tokens\n1000,100,1\n3000,1000,1\n"

BASES = (9.75, 10.0, 60.0, 65.0, 502.1875)
ALLOWANCES = (0.0, 0.0078125, 0.4375, 0.5)


def _sweep(tmp_path, simulation):
    (tmp_path / "two.csv").write_text(TRACE)
    path = tmp_path / "hw.toml"
    path.write_text(f"""
name = "hw"
[replica]
kind = "batching"
step_ms = {{ base = 10, per_prefill_token = 0.5, per_prefill_token_pair = 0, per_decode_sequence = 0, per_kv_token = 0 }}
[simulation]
warmup_s = 0.5
measure_s = 10
{simulation}
[cluster.heterogeneity]
one = [1]
[workload]
source = "trace"
trace = {{ path = "two.csv", format = "csv" }}
[scenarios.steady]
events = []
[grid]
heterogeneity = ["one"]
scenario = ["steady"]
[[stages]]
name = "s"
policy = ["round_robin"]
seeds = [1]
""")
    return path


def _run(path):
    return routesim.run(routesim.load_sweep(path), show_progress=False)["s"]


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """Every base × allowance of BASES × ALLOWANCES, one run each."""
    path = _sweep(tmp_path_factory.mktemp("scaled"),
                  f"slo_ttft_ms = {list(BASES)}\nslo_ttft_ms_per_prompt_token = {list(ALLOWANCES)}")
    return _run(path).squeeze(drop=True)


def _cell(ds, base, per):
    return ds.sel(slo_ttft_ms=base, slo_ttft_ms_per_prompt_token=per)


def test_the_hand_worked_ttfts(grid):
    """The replay is the hand-worked one: both complete, TTFTs 60 and 510 ms, whatever
    the objective (it only judges)."""
    assert (grid.completed == 2).all()
    assert (grid.ttft_p50 == hand_ttft(100)).all() and (grid.ttft_p99 == hand_ttft(1000)).all()


@pytest.mark.parametrize("base,per,attained,excess", [
    # both exactly on their objective 10 + 0.5·P: inside (TTFT <= objective)
    (10.0, 0.5, 1.0, 0.0),
    # both 0.25 ms outside: 9.75 + 0.5·P
    (9.75, 0.5, 0.0, 0.25),
    # the allowance decides: 65 + 0.4375·P is 108.75 ms for P = 100 (60 inside) and
    # 502.5 ms for P = 1,000 (510 outside by 7.5)
    (65.0, 0.4375, 0.5, 7.5),
    # a large base, a small allowance: 502.1875 + 1000/128 = 510 exactly (inside)
    (502.1875, 0.0078125, 1.0, 0.0),
    # the same base alone (a flat objective, as before the key): 60 inside, 510 outside
    (502.1875, 0.0, 0.5, None),
])
def test_a_request_meets_its_own_objective(grid, base, per, attained, excess):
    c = _cell(grid, base, per)
    assert float(c.attainment) == attained
    assert float(c.goodput) == 2 * attained / 10.0      # two arrivals, a 10 s window
    if excess is None:
        assert math.isnan(float(c.ttft_excess_p99))      # not computed with a flat objective
    else:
        # nearest rank 99 of two requests: the larger of TTFT - objective
        assert float(c.ttft_excess_p99) == excess


def test_every_cell_follows_the_rule(grid):
    """Each base × allowance against the rule written out on the hand-worked TTFTs."""
    for base in BASES:
        for per in ALLOWANCES:
            c = _cell(grid, base, per)
            over = [hand_ttft(p) - (base + per * p) for p in PROMPTS]
            assert float(c.attainment) == sum(o <= 0 for o in over) / 2, (base, per)
            if per > 0:
                assert float(c.ttft_excess_p99) == max(over), (base, per)
            else:
                assert math.isnan(float(c.ttft_excess_p99))


def test_a_zero_allowance_is_the_flat_objective_of_before(tmp_path):
    """The default (no key) and an explicit 0: the same runs, no ttft_excess_p99 variable and
    no attribute, so a Dataset is what it was before the key existed."""
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
    plain = _run(_sweep(tmp_path / "a", "slo_ttft_ms = 60"))
    zero = _run(_sweep(tmp_path / "b", "slo_ttft_ms = 60\nslo_ttft_ms_per_prompt_token = 0"))
    for ds in (plain, zero):
        assert "ttft_excess_p99" not in ds and "slo_ttft_ms_per_prompt_token" not in ds.attrs
        assert float(ds.attainment.squeeze()) == 0.5     # 60 <= 60 inside, 510 outside
    assert list(plain.data_vars) == list(zero.data_vars)
    for v in plain.data_vars:
        np.testing.assert_array_equal(plain[v].values, zero[v].values, err_msg=v)
    scaled = _run(_sweep(tmp_path, "slo_ttft_ms = 60\nslo_ttft_ms_per_prompt_token = 0.5"))
    assert scaled.attrs["slo_ttft_ms_per_prompt_token"] == 0.5 and float(scaled.attainment.squeeze()) == 1.0


@pytest.mark.parametrize("value,message", [
    ("-0.5", "must be >= 0, got -0.5"),
    ('"fast"', "expected a number, got a string"),
])
def test_bad_allowance_is_one_line_naming_file_and_key(tmp_path, capsys, value, message):
    from routesim import sweep
    path = _sweep(tmp_path, f"slo_ttft_ms_per_prompt_token = {value}")
    out = tmp_path / "out"
    assert sweep.main([str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: {path}: simulation.slo_ttft_ms_per_prompt_token: {message}"), err
    assert not out.exists()


SYNTHETIC = """
name = "cap-scaled"
[replica]
kind = "batching"
[simulation]
warmup_s = 2
measure_s = 8
slo_ttft_ms = {base}
{per}
[cluster.heterogeneity]
uniform = [1, 1]
[scenarios.steady]
events = []
[grid]
rate_rps = [4, 40]
heterogeneity = ["uniform"]
scenario = ["steady"]
[[stages]]
name = "policies"
policy = ["round_robin", "least_tokens"]
seeds = [1, 2]
"""


def _criterion(tmp_path, per, *options):
    path = tmp_path / "sweep.toml"
    path.write_text(SYNTHETIC.format(base=300, per=per))
    sweep = parse_sweep(path.read_text(), path)
    args = capacity._parser().parse_args([str(path), *options])
    return capacity._criterion(args, sweep, sweep.stages[0])


def test_the_capacity_criterion_is_each_requests_own_objective(tmp_path):
    """Without an allowance, TTFT p99 within the base (as before); with one, the tail of
    TTFT minus each request's objective at most 0 (also when the stage sweeps it with 0
    among its values: a run with allowance 0 meets that exactly when its TTFT p99 is
    within its base)."""
    assert _criterion(tmp_path, "") == capacity.Criterion("ttft_p99", 300.0, at_most=True)
    assert _criterion(tmp_path, "slo_ttft_ms_per_prompt_token = 0") == capacity.Criterion("ttft_p99", 300.0, True)
    scaled = capacity.Criterion("ttft_excess_p99", 0.0, at_most=True)
    assert _criterion(tmp_path, "slo_ttft_ms_per_prompt_token = 0.25") == scaled
    assert _criterion(tmp_path, "slo_ttft_ms_per_prompt_token = [0, 0.25]") == scaled
    assert _criterion(tmp_path, "", "--slo-ms", "500") == capacity.Criterion("ttft_p99", 500.0, True)


def test_slo_ms_cannot_replace_a_scaled_objective(tmp_path, capsys):
    path = tmp_path / "sweep.toml"
    path.write_text(SYNTHETIC.format(base=300, per="slo_ttft_ms_per_prompt_token = 0.25"))
    out = tmp_path / "out"
    assert capacity.main([str(path), "--slo-ms", "500", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {path}: --slo-ms: stage 'policies' scales its objective")
    assert not out.exists()


def test_the_tables_state_the_scaled_objective():
    import xarray as xr

    from routesim.batching.summary import ttft_slo_text
    assert ttft_slo_text(xr.Dataset(attrs={"slo_ttft_ms": 1000.0})) == "1000 ms"
    assert (ttft_slo_text(xr.Dataset(attrs={"slo_ttft_ms": 500.0, "slo_ttft_ms_per_prompt_token": 0.25}))
            == "500 ms + 0.25 ms/token × prompt tokens")


def test_a_capacity_search_judges_each_request_by_its_own_objective(tmp_path, capsys):
    """End to end on two replicas: the search's criterion is ttft_excess_p99 <= 0, and at the
    capacity every window (2 of 2 seeds: 0.9 · 2 rounds up) meets it while at the next
    rate evaluated some window does not or is not steady."""
    path = tmp_path / "sweep.toml"
    text = SYNTHETIC.format(base=300, per="slo_ttft_ms_per_prompt_token = 0.25")
    # no long class, a longer window: steady below capacity (as test_capacity's DONE)
    path.write_text(text.replace("warmup_s = 2\nmeasure_s = 8", "warmup_s = 20\nmeasure_s = 60")
                    .replace("[replica]", "[workload]\np_long = 0\n[replica]"))
    out = tmp_path / "out"
    assert capacity.main([str(path), "--points", "4", "--resolution", "4", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "ttft_excess_p99 <= 0 ms in at least 90 % of the seeds' windows" in printed
    import xarray as xr
    ds = xr.open_dataset(out / "policies-capacity.nc").squeeze(drop=True)
    assert ds.attrs["capacity_metric"] == "ttft_excess_p99" and ds.attrs["slo_ttft_ms_per_prompt_token"] == 0.25
    flat = []
    for pol in ds.policy.values:
        one = ds.sel(policy=pol)
        ran = one.rate_rps.values[one.arrivals.notnull().all("seed").values]
        ok = [bool((one.ttft_excess_p99.sel(rate_rps=r) <= 0).all() and not one.unsteady.sel(rate_rps=r).any())
              for r in ran]
        c = float(one.capacity_rps)
        expect = capacity.capacity_of(ran, np.array(ok))
        assert c == expect and 4 <= c < 40, (pol, ran, ok, c)   # a capacity inside the bracket
        flat.append(bool((one.ttft_p99.sel(rate_rps=c) > 300).any()))
    # the allowance matters here: at its capacity some window's TTFT p99 is above the base
    # alone, so a flat 300 ms objective would have put the capacity lower
    assert any(flat)
