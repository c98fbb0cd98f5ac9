"""Timed entries of one run (token-model.md §2, §6), compiled.

Deadlines (0), black-hole failures (1), retries due (2), conversations' follow-up
turns due (3, docs/model.md "Conversations") and attempts in transit joining their
replica's waiting queue (4, routesim/batching/ingress.py): min-heaps (routesim/heaps.py)
of (time, request) over ``TIMER`` records, the rows of one array ``timers`` (heaps,
capacity) with their sizes in ``tn`` (heaps,), each entry valid while its request's
attempt number is the one it was pushed with; stale entries are dropped when they reach
the top.

Iteration ends: at most one per replica, in a tournament tree (:func:`ends_nb`): a leaf
per replica (a ``TIMER`` record: end time, the replica, its iteration; time inf when
none) and, above them, the replica with the earliest end, ties to the lower replica —
the (time, replica) order. Setting a replica's end replays its path to the root, one
comparison per level and no data-dependent loop.

Every heap function takes the whole 2-D array and a row number, never a row view,
and its loops end by a flag, not ``break``: then Numba prunes every reference count
of its array arguments (tests/test_refcounts.py).
"""

import numba as nb
import numpy as np

from .. import heaps
from ..conf import JIT
from ..nrt import hold
from .dtypes import TIMER, State

DEADLINES, BLACK_HOLES, RETRIES, TURNS, TRANSIT = (np.int64(0), np.int64(1), np.int64(2), np.int64(3),
                                                   np.int64(4))  # typed: no literals
HEAPS = 5


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
    """Is request record q's attempt on a replica (in transit to it, waiting, running or
    black-holed)?"""
    return (q.state == State.WAITING or q.state == State.PREFILL or q.state == State.DECODE
            or q.state == State.BLACKHOLE or q.state == State.TRANSIT)


@nb.njit(**JIT)
def _live(e, w, req):
    """Is entry e (a TIMER record) of timer heap w (0 deadlines, 1 black holes, 2 retries,
    3 follow-up turns: pushed once, with token 0, while never sent; 4 attempts in
    transit) live?"""
    q = req[e.req]
    live = q.tries == e.token
    if live:
        if w == DEADLINES:
            live = in_flight_nb(q)
        elif w == BLACK_HOLES:
            live = q.state == State.BLACKHOLE
        elif w == TURNS:
            live = q.state == State.NONE
        elif w == TRANSIT:
            live = q.state == State.TRANSIT
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


@nb.njit(**JIT)
def ends_nb(nrep):
    """An empty iteration-end tree of ``nrep`` replicas: (leaves (m,) TIMER, winners (m,)
    int64), m the power of two at least max(nrep, 2). Leaf i is replica i's end (``t``
    inf: none; ``req`` = i); winners[k], k in 1..m-1, is the replica with the earliest
    end under node k, whose children are nodes 2k and 2k+1, node m + i being leaf i;
    winners[1] the earliest of all."""
    m = 2
    while m < nrep:
        m *= 2
    leaf = np.zeros(m, TIMER)
    win = np.zeros(m, np.int64)
    for i in range(m):
        leaf[i].t = np.inf
        leaf[i].req = i
    for k in range(m - 1, 0, -1):  # every end inf: each node's leftmost replica
        win[k] = _winner_nb(leaf, win, 2 * k, m)
    return leaf, win


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _winner_nb(leaf, win, node, m):
    """The replica with the earliest end under ``node`` (a leaf: its replica)."""
    return node - m if node >= m else win[node]


@nb.njit(**JIT)
def set_end_nb(leaf, win, i, t, token):
    """Replica i's iteration ``token`` ends at t (inf: none); the winners on its path to
    the root follow: at each node the earlier of its children's, the left one (the lower
    replicas) on a tie."""
    m = leaf.shape[0]
    leaf[i].t = t
    leaf[i].token = token
    k = (m + i) >> 1
    while k >= 1:
        a = _winner_nb(leaf, win, 2 * k, m)
        b = _winner_nb(leaf, win, 2 * k + 1, m)
        win[k] = b if leaf[b].t < leaf[a].t else a
        k >>= 1
    hold((leaf, win))
