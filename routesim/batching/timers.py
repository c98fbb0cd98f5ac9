"""Timed entries of one run (token-model.md §2, §6), compiled: min-heaps (routesim/heaps.py)
of (time, request) over ``TIMER`` records, the rows of one array ``timers`` (heaps, capacity)
with their sizes in ``tn`` (heaps,): deadlines (0), black-hole failures (1), retries
due (2), each entry valid while its request's attempt number is the one it was pushed
with, and iteration ends (3: ``req`` the replica, ``token`` its iteration). Stale
entries are dropped when they reach the top.

Every heap function takes the whole 2-D array and a row number, never a row view,
and its loops end by a flag, not ``break``: then Numba prunes every reference count
of its array arguments (tests/test_refcounts.py).
"""

import numba as nb
import numpy as np

from .. import heaps
from ..conf import JIT
from ..nrt import hold
from .dtypes import State

DEADLINES, BLACK_HOLES, RETRIES, ENDS = np.int64(0), np.int64(1), np.int64(2), np.int64(3)  # typed: no literal arguments
HEAPS = 4


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def less_nb(h, w, a, b):
    """Does entry a of heap w come before entry b: (time, request) order."""
    x = h[w, a]
    y = h[w, b]
    if x.t != y.t:
        return x.t < y.t
    return x.req < y.req


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def swap_nb(h, w, a, b):
    x = h[w, a]
    y = h[w, b]
    t, q, k = x.t, x.req, x.token
    x.t, x.req, x.token = y.t, y.req, y.token
    y.t, y.req, y.token = t, q, k


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def move_nb(h, w, dst, src):
    x = h[w, dst]
    y = h[w, src]
    x.t, x.req, x.token = y.t, y.req, y.token


@nb.njit(**JIT)
def push_nb(h, hn, w, t, s, token):
    """Add (t, s, token) to heap w."""
    n = hn[w]
    e = h[w, n]
    e.t = t
    e.req = s
    e.token = token
    heaps.push_nb(h, w, n, less_nb, swap_nb)
    hn[w] = n + 1
    hold((h, hn))


@nb.njit(**JIT)
def pop_nb(h, hn, w):
    """Remove the top of heap w."""
    heaps.pop_nb(h, w, hn[w], less_nb, move_nb)
    hn[w] -= 1
    hold((h, hn))


@nb.njit(**JIT)
def in_flight_nb(q):
    """Is request record q's attempt on a replica (waiting, running or black-holed)?"""
    return (q.state == State.WAITING or q.state == State.PREFILL or q.state == State.DECODE
            or q.state == State.BLACKHOLE)


@nb.njit(**JIT)
def _live(e, w, req):
    """Is entry e (a TIMER record) of timer heap w (0 deadlines, 1 black holes, 2 retries) live?"""
    q = req[e.req]
    live = q.tries == e.token
    if live:
        if w == DEADLINES:
            live = in_flight_nb(q)
        elif w == BLACK_HOLES:
            live = q.state == State.BLACKHOLE
        else:
            live = q.state == State.BACKOFF
    return live


@nb.njit(**JIT)
def top_nb(timers, tn, w, req):
    """Time of the next live entry of timer heap w (stale tops dropped), or inf."""
    while tn[w] > 0 and not _live(timers[w, 0], w, req):
        pop_nb(timers, tn, w)
    t = np.inf
    if tn[w] > 0:
        t = timers[w, 0].t
    hold((timers, tn, req))
    return t
