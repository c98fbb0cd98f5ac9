"""Claim 1's worked example run in the engine (sweeps/token-routing-example.toml): the
expectations come from token-model.md — a router sees P + A for every request at arrival,
so no policy can tell the long request from a short one; under continuous batching
each decode iteration advances every sequence, and the long request's extra KV adds
per_kv_token · (its KV) ≈ 0.06 ms to an iteration of about 8 ms, so the short requests
beside it run at the same TPOT to within 1 %."""

import numpy as np
import pytest

from conftest import SWEEPS, assert_renders, run_reduced, write_results
from routesim.studies.least_outstanding import counts, example


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return run_reduced(tmp_path_factory.mktemp("ex"), SWEEPS / "token-routing-example.toml",
                       {'path = "../traces/': f'path = "{SWEEPS.parent / "traces"}/'})


@pytest.fixture(scope="module")
def ds(out):
    return out["example"]


def test_no_policy_sees_the_long_generation_at_arrival(ds):
    assert example.placements_equal(ds)
    assert list(np.asarray(ds.assigned.sel(policy="least_tokens")).ravel()) == [10, 10]


def test_short_requests_beside_the_long_one_are_not_slowed(ds):
    r = example.requests(ds)
    short = r["output"] == 50
    a, b = short & (r["replica"] == 1), short & (r["replica"] == 2)
    assert a.sum() == 10 and b.sum() == 9 and r["output"][r["replica"] == 2].max() == 4000
    assert np.median(r["tpot"][b]) == pytest.approx(np.median(r["tpot"][a]), rel=0.01)
    # decode-only arithmetic is a lower bound (the engine also runs the prompts' prefill)
    ex = counts.worked_example()
    assert np.median(r["tpot"][a]) >= ex["tpot_short_ms_a"]
    # B stays busy with the long generation for well over 4,000 decode steps of >= 6.5 ms
    assert r["done"][~short].max() > 4000 * 6.5


def test_section_and_figure_render(out, tmp_path):
    # a section after claim 1's, without a row of its own, all of it details: it moves whole
    # to the appendix document, after claim 1's details, and leaves nothing in the document
    from routesim.studies.least_outstanding import summary
    from routesim.studies.least_outstanding.common import details
    text = assert_renders(example, write_results(tmp_path / "results", out), tmp_path / "figures",
                          heading=details("")[0] + "\n### ")
    kept, appendix = summary.to_appendix([text], "twin.md")
    assert kept == [] and appendix[0] == "### The worked example, run in the engine"
