"""routesim.replay: the one-replica replay sweep that calibrate, validate, the conformance
cases and the start-up benchmark write. tomllib (the standard library's TOML reader) is
the independent reference for the text."""

import tomllib

from hypothesis import given
from hypothesis import strategies as st

import routesim
from routesim.replay import replay_sweep, toml_value


@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-2**62, 2**62) | st.booleans()
       | st.text(max_size=20))
def test_a_value_reads_back_as_itself(v):
    back = tomllib.loads(f"x = {toml_value(v)}")["x"]
    assert back == v and type(back) is type(v)


def test_nested_tables_and_lists_read_back():
    v = {"a": [0.1, 2, True], "b": {"c": "q\"\\", "d": 1e-300}}
    assert tomllib.loads(f"x = {toml_value(v)}")["x"] == v


def test_the_sweep_is_one_run_on_one_replica_with_the_given_keys(tmp_path):
    (tmp_path / "t.csv").write_text("arrival_ms,prompt_tokens,output_tokens\n1000.0,10,3\n")
    text = replay_sweep("probe", {"kind": "batching", "max_batch": 7},
                        {"warmup_s": 0.5, "measure_s": 2.0, "drain_s": 1},
                        {"trace": {"path": "t.csv", "format": "csv"}}, header="# a probe\n")
    doc = tomllib.loads(text)
    assert text.startswith("# a probe\n")
    assert doc["replica"] == {"kind": "batching", "max_batch": 7}
    assert doc["cluster"]["heterogeneity"] == {"one": [1]}
    assert doc["stages"] == [{"name": "replay", "policy": ["round_robin"], "seeds": {"first": 1, "count": 1}}]
    sweep = routesim.parse_sweep(text, path=tmp_path / "probe.toml")
    assert (sweep.name, sweep.kind, len(sweep.stages)) == ("probe", "batching", 1)
    assert tuple(sweep.stages[0].values["max_batch"]) == (7,)
    assert tuple(sweep.stages[0].values["policy"]) == ("round_robin",)
