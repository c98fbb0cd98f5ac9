"""The least-outstanding study's verdict rule (routesim/studies/least_outstanding/common.py,
issue 44 item 3): log-ratios with back-transformed intervals, no degenerate cells, a lead
where none was predicted counted against, and each claim's verdict split into the seed's
mechanism and the clauses the prediction added. Expected values follow from the rule's
arithmetic (a ratio of exactly 2 on every seed is ln 2 on every seed), not from a run."""

import math

import numpy as np
import pytest

from routesim.studies import least_outstanding as study
from routesim.studies.least_outstanding import common
from routesim.studies.least_outstanding.common import ADDED, MECHANISM, compare, show, verdict_of, verdicts

SEEDS = 16


def wobble(seed=3):
    """A per-seed level shared by both arms (so their ratio is exact): 16 values near 1."""
    return 1 + np.random.default_rng(seed).uniform(-0.2, 0.2, SEEDS)


def test_a_ratio_and_its_inverse_are_the_same_size_of_effect():
    b = 100 * wobble()
    up, down = compare(2 * b, b), compare(b, 2 * b)
    # exp(ln 2) - 1 = +100 %, exp(-ln 2) - 1 = -50 %: one effect, each way
    assert up[0] == pytest.approx(100.0) and down[0] == pytest.approx(-50.0)
    assert up[3] == 1 and down[3] == -1
    # the mean of per-seed ratios (the former rule) of a noisy pair is not symmetric; the
    # log-ratio's is: the two means are exactly each other's inverse
    noisy = b * np.exp(np.random.default_rng(5).normal(0.3, 0.5, SEEDS))
    f, g = compare(noisy, b), compare(b, noisy)
    assert (1 + f[0] / 100) * (1 + g[0] / 100) == pytest.approx(1.0)
    with common.rule_version("old"):
        f_old, g_old = compare(noisy, b), compare(b, noisy)
    assert (1 + f_old[0] / 100) * (1 + g_old[0] / 100) > 1.05


def test_the_material_bound_is_symmetric_in_the_log():
    b = 100 * wobble()
    # 1.05 and 1 / 1.05 are leads; 1.04 and 1 / 1.04 are not (every seed agrees, so the
    # interval excludes 0: only the bound decides)
    assert compare(1.0501 * b, b)[3] == 1 and compare(b / 1.0501, b)[3] == -1
    assert compare(1.04 * b, b)[3] == 0 and compare(b / 1.04, b)[3] == 0
    # the back-transformed lower bound for a fall: 1 / 1.05 - 1 = -4.76 %, not -5 %
    assert compare(b * 0.952, b)[3] == -1


def test_no_degenerate_cells():
    b = 100 * wobble()
    assert show(compare(b, b)) == "identical"
    assert show(compare(np.zeros(SEEDS), np.zeros(SEEDS))) == "identical"
    # a ratio to 0 has no log: no seed gives a value
    zero = compare(np.zeros(SEEDS), b)
    assert show(zero) == "no data" and zero[3] == 0
    # one seed with a value is not an interval
    one = np.where(np.arange(SEEDS) == 0, 50.0, 0.0)
    assert show(compare(one, b)) == "no data"
    # every seed the same difference (a trace replayed with a deterministic policy)
    assert show(compare(b + 3, b, "absolute")) == "+3 (no spread)"
    assert "-100" not in show(compare(np.zeros(SEEDS), b))
    # arms apart on half the seeds by less than the decimal asked (0.004 req/s of goodput):
    # the mean is 0.002, and the interval is shown with the decimals that tell its ends
    # apart, never "+0.0 [+0.0, +0.0]"
    tiny = show(compare(b + np.where(np.arange(SEEDS) % 2 == 0, 0.004, 0.0), b, "absolute"), 1)
    low, high = tiny.split(" [")[1].rstrip("]").split(", ")
    assert tiny.startswith("+0.002 [") and low != high, tiny


def test_a_lead_where_none_was_predicted_counts_against():
    # the former rule: a lead where the prediction said "no lead" was never wrong
    with common.rule_version("old"):
        assert verdict_of([-1, -1], [-1, 0]) == "holds with qualification"
    assert verdict_of([-1, -1], [-1, 0]) == "does not hold"
    assert verdict_of([-1, +1], [-1, 0]) == "does not hold"
    assert verdict_of([-1, 0], [-1, 0]) == "holds"
    assert verdict_of([0, 0], [-1, 0]) == "holds with qualification"
    assert "the other way: b" in common.tally([("a", (0, 0, 0, -1), -1), ("b", (0, 0, 0, 1), 0)])


def test_the_mechanism_is_judged_apart_from_the_added_clauses():
    lead = lambda x: (0.0, 0.0, 0.0, x)   # noqa: E731
    clauses = [("TTFT", lead(-1), -1, MECHANISM), ("TPOT", lead(+1), -1, ADDED), ("att", lead(0), +1, ADDED)]
    v = verdicts(clauses)
    assert (v["whole"], v["mechanism"], v["added"]) == ("does not hold", "holds", "does not hold")
    assert v["against"] == {MECHANISM: [], ADDED: ["TPOT"]}
    # flip the mechanism's lead: it no longer holds
    clauses[0] = ("TTFT", lead(+1), -1, MECHANISM)
    assert verdicts(clauses)["mechanism"] == "does not hold"
    assert verdicts(clauses[:1])["added"] is None
    mech, added = common.verdict_cells(verdicts(clauses), "TPOT and attainment")
    assert mech == "does not hold (against: TTFT)" and added.startswith("does not hold: TPOT and attainment")


def test_every_claim_with_a_verdict_says_what_the_prediction_added():
    judged = [c for c in study.CLAIMS if hasattr(c, "clauses")]
    assert {c.__name__.rsplit(".", 1)[1] for c in judged} == set(study.OLD_VERDICTS)
    for c in judged:
        assert isinstance(c.ADDED_WORDS, str), c.__name__


def test_the_rule_version_is_restored():
    with pytest.raises(ValueError):
        with common.rule_version("median"):
            pass
    with common.rule_version("old"):
        assert common._VERSION[0] == "old"
    assert common._VERSION[0] == "new"
    assert math.isclose(compare(np.full(4, 2.0), np.full(4, 1.0))[0], 100.0)


def test_the_calibration_note_prices_a_decode_step_both_ways():
    # the study's linear cost by hand (sweeps' step_ms defaults, token-model.md):
    # 6.5 + 0.1 per sequence + 5.4e-5 per KV token, 100 sequences of 1,100 tokens
    note = study.calibration_note()
    assert f"at {6.5 + 0.1 * 100 + 5.4e-5 * 110_000:.1f} ms" in note
    # the roofline at full bandwidth: 16.06 GB of BF16 weights and 128 KiB of KV per token
    # (config.json: 32 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes) over 3,350 GB/s,
    # 4.79 + 4.30 ms (its per-sequence term, 0.03 ms here, is below the rounding)
    weights_ms = 2 * 8_029_995_008 / 3350e9 * 1e3
    kv_ms = 110_000 * 32 * 8 * 128 * 2 * 2 / 3350e9 * 1e3
    assert f"at {weights_ms + kv_ms:.1f} ms, a floor" in note
    # the server's roofline at its default constants (docs/model.md "The step cost": 4 ms
    # overhead + the larger of memory, 5.99 + 4.89e-5 per KV token = 11.37 ms, and compute,
    # 0.0271 per token + 8.84e-7 per pair = 2.81 ms): a memory-bound 15.4 ms
    assert 0.0271 * 100 + 8.84e-7 * 110_000 < 5.99 + 4.89e-5 * 110_000
    assert f"costs {4 + 5.99 + 4.89e-5 * 110_000:.1f} ms on the server" in note
