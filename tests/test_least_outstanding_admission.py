"""Claim 9 of the least-outstanding-routing study
(routesim/studies/least_outstanding/admission.py), recomputed from a reduced run of
sweeps/token-routing-admission.toml: the threshold is read from the one-replica curve,
the 8-replica arms are then run at that threshold (as the full study must be) for three
loads (1, 1.25, 2 x capacity) and 4 seeds instead of 6 and 8, and the direction the full
study found is asserted; then the claim's row, section and figure from those runs
written as the sweep writes them."""

import pytest

from conftest import SWEEPS, assert_renders, run_reduced, write_results
from routesim.studies.least_outstanding import admission
from routesim.studies.least_outstanding.common import lead

SWEEP = SWEEPS / "token-routing-admission.toml"


def stage(text, name):
    """The sweep's header plus one of its stages."""
    head = text[:text.index("[[stages]]")]
    start = text.index(f'[[stages]]\nname = "{name}"')
    end = text.find("[[stages]]", start + 1)
    return head + text[start:end if end > 0 else len(text)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{stage: Dataset} of every stage, as routesim.run returns them."""
    text = SWEEP.read_text()
    head = text[:text.index("[[stages]]")]
    tmp = tmp_path_factory.mktemp("admission")
    # (a) the one-replica curve as the study runs it (one replica is cheap): its threshold,
    # computed by the module. It sits at a step of the cap grid, and a shorter curve can
    # move it one step, which would test a different door than the study's. Beside it,
    # one replica without a door (the section's grey curve), as the study runs it too.
    one = run_reduced(tmp, head + "".join(stage(text, s)[len(head):] for s in ("held", "rates")))
    x = admission.threshold(admission.prepare(one)["held"])
    # (b) the 8-replica arms at that threshold: 1, 1.25 and 2 x capacity, 4 seeds (the full
    # horizon: a shorter one leaves too little time for 1.25 x to overload); reject also
    # at its neighbours 50k tokens either side, as in the study (the section reads them)
    eight = "".join(stage(text, s)[len(head):] for s in ("open", "reject", "queue"))
    caps = ", ".join(f"{c:.0f}" for c in (x - 50000, x, x + 50000) if c > 0)
    out = run_reduced(tmp, head + eight, {
        "rate_rps = [30, 45, 60, 75, 90, 120]": "rate_rps = [60, 75, 120]",
        "admission_max_tokens = [175000, 225000, 275000]": f"admission_max_tokens = [{caps}]",
        "admission_max_tokens = [225000]": f"admission_max_tokens = [{x:.0f}]",
        "count = 8 }": "count = 4 }"})
    return {**one, **out}


@pytest.fixture(scope="module")
def reduced(runs):
    return admission.prepare({k: v for k, v in runs.items() if k != "rates"})


def test_threshold_is_read_where_tpot_meets_its_target(reduced):
    held = reduced["held"]
    x = admission.threshold(held)
    med = admission.curve(held)
    caps = list(held.admission_max_tokens.values)
    # the curve rises with the cap: a larger held tau means a larger batch
    assert lead(med.batch_mean.diff("admission_max_tokens")) == "above"
    # the SLO is met at the threshold and missed at the next cap (or the grid ends there)
    ok = admission.meets(med, held)
    assert bool(ok.sel(admission_max_tokens=x))
    if x != caps[-1]:
        assert not bool(ok.sel(admission_max_tokens=caps[caps.index(x) + 1]))


def test_every_request_has_one_outcome(reduced):
    n, ok = admission.conserved(reduced)
    assert n > 0 and ok == n
    for name, ds in admission.arms(reduced).items():
        total = sum(v for v in admission.outcomes(ds).values())
        assert (total == ds.arrivals).all(), name


def test_claim9_refusing_holds_goodput_queueing_does_not(reduced):
    num = admission.numbers(reduced)
    a = admission.arms(reduced)
    top = num["top"]
    # routing creates no capacity: without a door goodput at 2 x falls below its value at 1 x
    assert lead(num["falls"]) == "below"
    # rejecting at the curve's threshold beats no door above capacity, on every seed,
    # and holds goodput near capacity; queueing at the same cap does not hold it
    assert admission.holds_goodput(num, "reject")
    assert not admission.holds_goodput(num, "queue")
    # the requests reject loses are turned away at once, not left waiting
    rej = a["reject"].sel(rate_rps=top)
    assert (rej.rejected > rej.unfinished).all()
    assert admission.verdict(reduced) == "holds with qualification"


def test_a_sweep_not_run_at_the_curves_threshold_is_refused(reduced):
    x = admission.threshold(reduced["held"])
    wrong = dict(reduced, queue=reduced["queue"].assign_coords(admission_max_tokens=x + 25000))
    with pytest.raises(admission.Mismatch, match=f"{x:,.0f}"):
        admission.verdict(wrong)


def test_claim9_row_section_and_figure_render(runs, tmp_path):
    # every stage load needs, written as the sweep writes them; the 8-replica stages ran
    # at the curve's threshold, so section and figure pass arms()' Mismatch check
    text = assert_renders(admission, write_results(tmp_path / "results", runs), tmp_path / "figures")
    x = admission.threshold(admission.load(tmp_path / "results")["held"])
    assert f"**{x:,.0f} tokens**" in text
