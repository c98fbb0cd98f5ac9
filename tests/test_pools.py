"""Pools of replicas (routesim/batching/pools.py, issue 43's pool seam): a replica's
role says its pool, and the routers choose only among the pool's replicas."""

import numpy as np

from routesim.batching.dtypes import PARAMS, REPLICA, REQUEST, Role
from routesim.batching.pools import ROUTED, members_nb
from routesim.batching.router import eligible_nb


def replicas(roles):
    rep = np.zeros(len(roles), REPLICA)
    rep["role"] = roles
    rep["healthy"] = True
    return rep


def test_members_are_the_replicas_of_a_role_in_order():
    rep = replicas([Role.COLOCATED, Role.PREFILL, Role.COLOCATED, Role.DECODE, Role.COLOCATED])
    assert list(members_nb(rep, np.int64(Role.COLOCATED))) == [0, 2, 4]
    assert list(members_nb(rep, np.int64(Role.PREFILL))) == [1]
    assert list(members_nb(rep, np.int64(Role.DECODE))) == [3]


def test_today_every_replica_is_in_the_routed_pool():
    """A run's replicas start COLOCATED (a zeroed record), the pool requests go into."""
    rep = np.zeros(4, REPLICA)
    assert ROUTED == Role.COLOCATED
    assert list(members_nb(rep, ROUTED)) == [0, 1, 2, 3]


def test_the_routers_choose_within_the_pool():
    """Every replica is up, ready and has room: the eligible set is the pool, and a
    replica outside it is never a candidate."""
    rep = replicas([Role.PREFILL, Role.DECODE, Role.PREFILL, Role.DECODE])
    rep["waiting_cap"] = 8  # each replica's own (its pool's, runs.replica_records)
    p = np.zeros(1, PARAMS)[0]
    req = np.zeros(1, REQUEST)
    ej_until = np.full((1, 4), np.inf)
    failed = np.full((1, 1), -1, np.int64)
    cand = np.full(4, -1, np.int64)
    for role, expected in ((Role.PREFILL, [0, 2]), (Role.DECODE, [1, 3])):
        pool = members_nb(rep, np.int64(role))
        ne = eligible_nb(rep, p, ej_until, np.int64(0), 0.0, np.int64(0), req, failed, False, cand, pool)
        assert list(cand[:ne]) == expected


def test_a_replica_is_gated_by_its_own_pools_waiting_cap():
    """The waiting cap a router tests a replica against is the replica's own (its pool's
    ``waiting_cap``), not the run's: a prefill replica whose cap its one waiting attempt
    fills is not eligible, while the decode replicas, whose cap is larger, are."""
    rep = replicas([Role.PREFILL, Role.DECODE, Role.DECODE])
    rep["waiting_cap"] = [1, 4, 4]
    rep["n_wait"] = 1
    p = np.zeros(1, PARAMS)[0]
    p["waiting_cap"] = 8  # the run's [replica] value: not the one read
    req = np.zeros(1, REQUEST)
    ej_until = np.full((1, 3), np.inf)
    failed = np.full((1, 1), -1, np.int64)
    cand = np.full(3, -1, np.int64)
    for role, expected in ((Role.PREFILL, []), (Role.DECODE, [1, 2])):
        pool = members_nb(rep, np.int64(role))
        ne = eligible_nb(rep, p, ej_until, np.int64(0), 0.0, np.int64(0), req, failed, False, cand, pool)
        assert list(cand[:ne]) == expected
