"""What the printed tables' columns are (issue 39, item 4): the shed share pooled over
runs, not a median that hides rare sheds, and a legend under each table that says what
every column is and gives the SLO. Expected values are computed here from the counts
in hand-made Datasets, not copied from a run."""

import numpy as np
import xarray as xr

from routesim.batching.summary import policy_table as token_table, token_policy_rows
from routesim.queue.summary import policy_rows, policy_table


def _queue_ds(shed, arrivals, exploration=(0.35,)):
    """One policy, the given exploration weights, three seeds; ``shed`` and ``arrivals``
    per seed (the same for every weight)."""
    dims = ("policy", "exploration", "rate_rps", "heterogeneity", "scenario", "seed")
    shape = (1, len(exploration), 1, 1, 1, len(shed))

    def var(values):
        return (dims, np.broadcast_to(np.asarray(values, float), shape).copy())

    shed, arrivals = np.asarray(shed, float), np.asarray(arrivals, float)
    data = {"shed": var(shed), "arrivals": var(arrivals), "shed_rate": var(np.divide(shed, arrivals, out=np.full_like(shed, np.nan), where=arrivals > 0)),
            "attainment": var([0.9, 0.8, 0.7]), "latency_p50": var([10.0, 20.0, 30.0]),
            "latency_p99": var([40.0, 50.0, 90.0]), "goodput": var([100.0, 90.0, 80.0])}
    coords = {"policy": ["least_queue"], "exploration": list(exploration), "rate_rps": [250.0],
              "heterogeneity": ["default"], "scenario": ["steady"], "seed": [1, 2, 3]}
    return xr.Dataset(data, coords=coords, attrs={"slo_ms": 50.0})


def _column(headers, rows, name):
    return [r[headers.index(name)] for r in rows]


def test_queue_shed_is_pooled_over_runs():
    # two runs shed nothing, one sheds 25 of 500: the median run sheds 0 %, the mean of
    # the runs' rates is 1.67 %, and 25 of the 2,500 requests that arrived is 1.00 %
    ds = _queue_ds(shed=[0, 0, 25], arrivals=[1000, 1000, 500])
    headers, rows = policy_rows(ds)
    assert _column(headers, rows, "shed %") == [f"{100 * 25 / 2500:.2f}"] == ["1.00"]


def test_queue_shed_of_a_row_without_arrivals_is_undefined():
    ds = _queue_ds(shed=[0, 0, 0], arrivals=[0, 0, 0])
    headers, rows = policy_rows(ds)
    assert _column(headers, rows, "shed %") == ["—"]


def test_queue_table_says_what_each_column_is():
    text = policy_table(_queue_ds(shed=[0, 0, 25], arrivals=[1000, 1000, 500], exploration=(0.1, 0.5)))
    table, legend = text.split("\n\n")
    assert table.splitlines()[0].split()[:2] == ["policy", "c"]
    flat = " ".join(legend.split())
    for words in ("c = adaptive's exploration weight", "within the SLO (50 ms end to end)",
                  "p50 ms, p99 ms, goodput/s = median over runs of each run's value",
                  "p99 min–max ms = lowest and highest run's p99",
                  "shed % = requests shed / requests arrived, all runs pooled",
                  "attain % = mean over runs"):
        assert words in flat, words


def test_queue_legend_names_only_the_columns_shown():
    legend = policy_table(_queue_ds(shed=[0, 0, 0], arrivals=[9, 9, 9])).split("\n\n")[1]
    assert "c =" not in legend and "exploration" not in legend


def test_queue_slo_as_a_swept_key():
    ds = _queue_ds(shed=[0, 0, 0], arrivals=[9, 9, 9])
    ds = ds.drop_attrs().expand_dims(slo_ms=[50.0, 80.0])
    assert "(the row's slo_ms end to end)" in " ".join(policy_table(ds).split())


def _token_ds():
    """One policy, two seeds; a crash arm: 1,000 and 600 arrivals, of which 0 and 30 shed,
    10 and 0 failed."""
    dims = ("policy", "rate_rps", "heterogeneity", "scenario", "seed")

    def var(values):
        return (dims, np.asarray(values, float).reshape(1, 1, 1, 1, 2))

    data = {name: var([1.0, 1.0]) for name in (
        "attainment", "ttft_p99", "tpot_p99", "e2e_p99", "preemptions", "prefix_hit_rate", "goodput")}
    data.update(arrivals=var([1000, 600]), shed=var([0, 30]), failed=var([10, 0]), unfinished=var([0, 0]))
    coords = {"policy": ["least_requests"], "rate_rps": [42.0], "heterogeneity": ["u"], "scenario": ["s"],
              "seed": [1, 2]}
    return xr.Dataset(data, coords=coords, attrs={"slo_ttft_ms": 1000.0, "slo_tpot_ms": 50.0})


def test_token_losses_are_pooled_over_runs():
    headers, rows = token_policy_rows(_token_ds())
    assert _column(headers, rows, "shed %") == [f"{100 * 30 / 1600:.2f}"]
    assert _column(headers, rows, "failed %") == [f"{100 * 10 / 1600:.2f}"]


def test_token_table_says_what_each_column_is():
    text = token_table(_token_ds())
    table, legend = text.split("\n\n")
    flat = " ".join(legend.split())
    for words in ("within the SLO (TTFT ≤ 1000 ms and TPOT ≤ 50 ms)",
                  "shed %, failed %, unfinished % = per request arrived, all runs pooled",
                  "every other column but runs = median over runs of each run's value"):
        assert words in flat, words
    assert "attempts" not in legend and "steady" not in legend    # columns this Dataset does not have


def test_token_legend_gives_the_steady_rule_when_the_table_has_it():
    from test_steady import _ds
    legend = token_table(_ds([[0, 0], [0, 0]], [[0.5, 0.5], [0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]])).split("\n\n")[1]
    flat = " ".join(legend.split())
    assert ("steady = no when a run is not steady or the medians over runs show backlog Δ above 2 % of arrivals "
            "or KV occ. Δ above 5 pts") in flat
    assert ("runs not steady = runs of the row whose own window was not steady: its backlog grew by more than 5 % "
            "of its arrivals, its KV occupancy rose by more than 30 points") in flat
    assert "more than 10 points less often than its first quarter's" in flat
