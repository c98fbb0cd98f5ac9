"""Record dtypes map to C structs, and every registered policy dispatches."""

import numpy as np
import pytest

from routesim import dtypes
from routesim.dtypes import PARAMS, REPLICA, ROUTER, Policy
from routesim.policies import NAMES, choose_nb


@pytest.mark.parametrize("name", ["PARAMS", "REPLICA", "ROUTER", "METRICS", "EVENT"])
def test_dtypes_are_aligned(name):
    assert getattr(dtypes, name).isalignedstruct


def _state(qlen, busy, s_hat, n_obs, healthy=(True, True, True)):
    rep = np.zeros(3, REPLICA)
    rep["qlen"], rep["busy"], rep["s_hat"], rep["n_obs"], rep["healthy"] = qlen, busy, s_hat, n_obs, healthy
    rep["r_bar"] = 1 - rep["s_hat"] / 100.0
    p = np.zeros(1, PARAMS)[0]
    p["queue_cap"], p["alpha"], p["exploration"], p["reward_ceiling_ms"] = 50, 0.15, 0.35, 100.0
    p["choices"] = 2
    return rep, np.zeros(1, ROUTER)[0], p


U = np.linspace(0.01, 0.99, 64)   # a router stream for the randomized policies
IDS = np.zeros(3, np.int64)


def choose(rep, router, p):
    return choose_nb(rep, router, p, U, IDS)


@pytest.mark.parametrize("name", sorted(NAMES))
def test_every_registered_policy_dispatches(name):
    rep, router, p = _state([0, 0, 0], [False] * 3, [11.0] * 3, [0] * 3)
    p["policy"] = NAMES[name]
    assert 0 <= choose(rep, router, p) < 3
    if NAMES[name] not in (Policy.RANDOM, Policy.POWER_OF_TWO):
        assert choose(rep, router, p) == 0  # all equal: ties go to the lowest id
    rep["healthy"] = False
    assert choose(rep, router, p) == -1  # nothing eligible: shed


def test_policy_names_are_the_sweep_file_names():
    assert set(NAMES) == {"round_robin", "least_queue", "latency_aware", "adaptive", "random",
                          "power_of_two"}
    assert all(NAMES[p.name.lower()] == p for p in Policy)


def test_choices_follow_model_md():
    # o = (2, 1, 1); ŝ = (5, 20, 11)
    rep, router, p = _state([1, 1, 0], [True, False, True], [5.0, 20.0, 11.0], [10, 10, 10])
    p["policy"] = Policy.LEAST_QUEUE
    assert choose(rep, router, p) == 1        # argmin o: tie of 1 and 2 -> 1
    p["policy"] = Policy.LATENCY_AWARE
    assert choose(rep, router, p) == 0        # (o+1)ŝ = 15, 40, 22
    p["policy"] = Policy.ADAPTIVE                # score = r̄ + bonus - oŝ/L, equal bonus
    assert choose(rep, router, p) == 0        # 0.95-0.10=0.85, 0.80-0.20=0.60, 0.89-0.11=0.78
    p["policy"] = Policy.ROUND_ROBIN
    router["cursor"] = 4
    rep["qlen"][1] = 50                          # full: E = [0, 2], 4 mod 2 = 0
    assert choose(rep, router, p) == 0
    router["cursor"] = 5
    assert choose(rep, router, p) == 2


def test_exploration_bonus_favours_the_unobserved():
    rep, router, p = _state([0, 0, 0], [False] * 3, [11.0] * 3, [50, 50, 0])
    p["policy"] = Policy.ADAPTIVE
    assert choose(rep, router, p) == 2
    p["exploration"] = 0.0
    assert choose(rep, router, p) == 0


def test_random_picks_by_the_uniform_and_consumes_one():
    rep, router, p = _state([0, 0, 0], [False] * 3, [11.0] * 3, [0] * 3, healthy=(True, False, True))
    p["policy"] = Policy.RANDOM
    u = np.array([0.2, 0.7, 0.49999, 0.5])
    picks = [choose_nb(rep, router, p, u, IDS) for _ in range(4)]
    assert picks == [0, 2, 0, 2]      # E = [0, 2]: floor(u·2) -> 0, 1, 0, 1
    assert router["draws"] == 4


def test_power_of_two_samples_distinct_and_picks_the_least_loaded():
    # o = (3, 0, 1): E = [0, 1, 2]
    rep, router, p = _state([2, 0, 1], [True, False, False], [11.0] * 3, [0] * 3)
    p["policy"] = Policy.POWER_OF_TWO
    # u = (0.0, 0.0): e[0] stays 0; then k = 1 + floor(0·2) = 1: candidates {0, 1} -> 1
    assert choose_nb(rep, router, p, np.array([0.0, 0.0]), IDS) == 1
    router["draws"] = 0
    # u = (0.0, 0.99): k = 1 + floor(0.99·2) = 2: candidates {0, 2} -> 2 (o = 1 < 3)
    assert choose_nb(rep, router, p, np.array([0.0, 0.99]), IDS) == 2
    assert router["draws"] == 2
    router["draws"] = 0
    p["choices"] = 5  # more choices than replicas: least queue over E, still 5 draws
    assert choose_nb(rep, router, p, np.full(5, 0.3), IDS) == 1
    assert router["draws"] == 5
