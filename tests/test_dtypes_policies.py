"""Record dtypes map to C structs, and every registered policy dispatches."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from routesim.queue import dtypes
from routesim.queue.dtypes import PARAMS, REPLICA, ROUTER, WORK, Policy
from routesim.queue.engine import slot_nb
from routesim.queue.policies import NAMES, bit_add_nb, choose_nb, kth_eligible_nb


@pytest.mark.parametrize("name", ["PARAMS", "REPLICA", "ROUTER", "METRICS", "EVENT", "WORK", "LEVEL", "REQUEST"])
def test_dtypes_are_aligned(name):
    assert getattr(dtypes, name).isalignedstruct


class State:
    """Replica, router and index state of one 3-replica run, as the engine keeps it."""

    def __init__(self, qlen, busy, s_hat, n_obs, healthy=(True, True, True)):
        rep = np.zeros(3, REPLICA)
        rep["qlen"], rep["busy"], rep["s_hat"], rep["n_obs"], rep["healthy"] = qlen, busy, s_hat, n_obs, healthy
        rep["r_bar"] = 1 - rep["s_hat"] / 100.0
        p = np.zeros(1, PARAMS)[0]
        p["queue_cap"], p["alpha"], p["exploration"], p["reward_ceiling_ms"] = 50, 0.15, 0.35, 100.0
        p["choices"] = 2
        self.rep, self.router, self.p, self.work = rep, np.zeros(1, ROUTER)[0], p, np.zeros(4, WORK)
        self.refresh()

    def refresh(self):
        """E from health and queues, as engine._refresh_eligible_nb maintains it."""
        self.work["bit"] = 0
        self.rep["elig"] = self.rep["healthy"] & (self.rep["qlen"] < self.p["queue_cap"])
        for i in np.flatnonzero(self.rep["elig"]):
            bit_add_nb(self.work, i, 1)
        self.router["n_elig"] = self.rep["elig"].sum()

    def choose(self, u=np.linspace(0.01, 0.99, 64)):
        return choose_nb(self.rep, self.router, self.p, u, self.work)


@pytest.mark.parametrize("name", sorted(NAMES))
def test_every_registered_policy_dispatches(name):
    s = State([0, 0, 0], [False] * 3, [11.0] * 3, [0] * 3)
    s.p["policy"] = NAMES[name]
    assert 0 <= s.choose() < 3
    if NAMES[name] not in (Policy.RANDOM, Policy.POWER_OF_TWO):
        assert s.choose() == 0  # all equal: ties go to the lowest id
    s.rep["healthy"] = False
    s.refresh()
    assert s.choose() == -1  # nothing eligible: shed


def test_policy_names_are_the_sweep_file_names():
    assert set(NAMES) == {"round_robin", "least_queue", "latency_aware", "adaptive", "random",
                          "power_of_two"}
    assert all(NAMES[p.name.lower()] == p for p in Policy)


def test_choices_follow_model_md():
    # o = (2, 1, 1); ŝ = (5, 20, 11)
    s = State([1, 1, 0], [True, False, True], [5.0, 20.0, 11.0], [10, 10, 10])
    s.p["policy"] = Policy.LEAST_QUEUE
    assert s.choose() == 1        # argmin o: tie of 1 and 2 -> 1
    s.p["policy"] = Policy.LATENCY_AWARE
    assert s.choose() == 0        # (o+1)ŝ = 15, 40, 22
    s.p["policy"] = Policy.ADAPTIVE  # score = r̄ + bonus - oŝ/L, equal bonus
    assert s.choose() == 0        # 0.95-0.10=0.85, 0.80-0.20=0.60, 0.89-0.11=0.78
    s.p["policy"] = Policy.ROUND_ROBIN
    s.router["cursor"] = 4
    s.rep["qlen"][1] = 50         # full: E = [0, 2], 4 mod 2 = 0
    s.refresh()
    assert s.choose() == 0
    s.router["cursor"] = 5
    assert s.choose() == 2


def test_exploration_bonus_favours_the_unobserved():
    s = State([0, 0, 0], [False] * 3, [11.0] * 3, [50, 50, 0])
    s.p["policy"] = Policy.ADAPTIVE
    assert s.choose() == 2
    s.p["exploration"] = 0.0
    assert s.choose() == 0


def test_random_picks_by_the_uniform_and_consumes_one():
    s = State([0, 0, 0], [False] * 3, [11.0] * 3, [0] * 3, healthy=(True, False, True))
    s.p["policy"] = Policy.RANDOM
    u = np.array([0.2, 0.7, 0.49999, 0.5])
    assert [s.choose(u) for _ in range(4)] == [0, 2, 0, 2]  # E = [0, 2]: floor(u·2) = 0, 1, 0, 1
    assert s.router["draws"] == 4


def test_power_of_two_samples_distinct_and_picks_the_least_loaded():
    s = State([2, 0, 1], [True, False, False], [11.0] * 3, [0] * 3)  # o = (3, 0, 1), E = [0, 1, 2]
    s.p["policy"] = Policy.POWER_OF_TWO
    # u = (0.0, 0.0): e[0] stays 0; then k = 1 + floor(0·2) = 1: candidates {0, 1} -> 1
    assert s.choose(np.array([0.0, 0.0])) == 1
    s.router["draws"] = 0
    # u = (0.0, 0.99): k = 1 + floor(0.99·2) = 2: candidates {0, 2} -> 2 (o = 1 < 3)
    assert s.choose(np.array([0.0, 0.99])) == 2
    assert s.router["draws"] == 2
    s.router["draws"] = 0
    # u = (0.5, 0.0): k0 = floor(1.5) = 1 -> e = [1, 0, 2]; k1 = 1 + 0 = 1 -> 0: {1, 0} -> 1
    assert s.choose(np.array([0.5, 0.0])) == 1
    s.router["draws"] = 0
    s.p["choices"] = 5  # more choices than replicas: least queue over E, still 5 draws
    assert s.choose(np.full(5, 0.3)) == 1
    assert s.router["draws"] == 5


def test_power_of_two_draws_distinct_replicas():
    """Every pair of positions of the partial shuffle is equally likely and distinct:
    with o = (0, 0, 0, ...) the least-id candidate is chosen, so over a grid of u the
    pick is min(pair); its frequencies follow from uniform distinct pairs."""
    n = 6
    s = State([0] * 3, [False] * 3, [11.0] * 3, [0] * 3)
    rep = np.zeros(n, REPLICA)
    rep["healthy"] = True
    s.rep, s.work = rep, np.zeros(n + 1, WORK)
    s.refresh()
    s.p["policy"] = Policy.POWER_OF_TWO
    grid = (np.arange(60) + 0.5) / 60
    picks = []
    for a in grid:
        for b in grid:
            s.router["draws"] = 0
            picks.append(s.choose(np.array([a, b])))
    freq = np.bincount(picks, minlength=n) / len(picks)
    # P(min of a uniform distinct pair = i) = (n - 1 - i) / C(n, 2)
    expect = np.array([(n - 1 - i) / (n * (n - 1) / 2) for i in range(n)])
    assert np.allclose(freq, expect, atol=1e-12)


@pytest.mark.parametrize("mask", [[1, 1, 1, 1, 1], [0, 1, 0, 1, 1], [1, 0, 0, 0, 0], [0, 0, 0, 0, 1]])
def test_kth_eligible_walks_the_fenwick_tree(mask):
    work = np.zeros(len(mask) + 1, WORK)
    for i, m in enumerate(mask):
        if m:
            bit_add_nb(work, i, 1)
    assert [kth_eligible_nb(work, k) for k in range(sum(mask))] == list(np.flatnonzero(mask))


@given(t=st.floats(0.0, 1e7, allow_nan=False), dt=st.sampled_from([0.05, 0.1, 0.25, 0.3, 0.5, 1.0, 0.7, 1e-3]))
def test_slot_is_the_first_grid_time_at_or_after_t(t, dt):
    # model.md §3: something at t is processed at the end of the step containing it, the
    # first k·dt >= t with k >= 1, compared as the floating-point product k * dt.
    k = slot_nb(t, dt) / dt
    k = round(k)
    assert slot_nb(t, dt) == k * dt
    assert k >= 1 and k * dt >= t
    assert k == 1 or (k - 1) * dt < t
    assert slot_nb(t, 0.0) == t


@pytest.mark.parametrize("dt", [0.05, 0.1, 0.3, 0.5, 0.7])
def test_slot_on_and_beside_grid_times(dt):
    # the hard cases: t on a grid time (as the product k * dt) and one ulp either side
    for k in range(1, 200_001, 7):
        on = k * dt
        assert slot_nb(on, dt) == on
        assert slot_nb(np.nextafter(on, np.inf), dt) == (k + 1) * dt
        assert slot_nb(np.nextafter(on, -np.inf), dt) == on
