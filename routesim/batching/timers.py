"""Timed entries of one run's requests (token-model.md §6), compiled: min-heaps of
(time, request) over ``TIMER`` records — deadlines (0), black-hole failures (1) and
retries due (2) — each entry valid while its request's attempt number is the one it
was pushed with (stale entries are dropped when they reach the top).
"""

import numba as nb
import numpy as np

from ..conf import JIT
from .dtypes import State

DEADLINES, BLACK_HOLES, RETRIES = 0, 1, 2


@nb.njit(**JIT)
def less_nb(h, a, b):
    if h[a].t != h[b].t:
        return h[a].t < h[b].t
    return h[a].req < h[b].req


@nb.njit(**JIT)
def swap_nb(h, a, b):
    t, q, k = h[a].t, h[a].req, h[a].token
    h[a].t, h[a].req, h[a].token = h[b].t, h[b].req, h[b].token
    h[b].t, h[b].req, h[b].token = t, q, k


@nb.njit(**JIT)
def push_nb(h, hn, which, t, s, token):
    n = hn[which]
    h[n].t = t
    h[n].req = s
    h[n].token = token
    k = n
    while k > 0:
        parent = (k - 1) >> 1
        if not less_nb(h, k, parent):
            break
        swap_nb(h, k, parent)
        k = parent
    hn[which] = n + 1


@nb.njit(**JIT)
def pop_nb(h, hn, which):
    n = hn[which] - 1
    swap_nb(h, 0, n)
    hn[which] = n
    k = 0
    while True:
        c = 2 * k + 1
        if c >= n:
            break
        if c + 1 < n and less_nb(h, c + 1, c):
            c += 1
        if not less_nb(h, c, k):
            break
        swap_nb(h, k, c)
        k = c


@nb.njit(**JIT)
def in_flight_nb(q):
    """Is request record q's attempt on a replica (waiting, running or black-holed)?"""
    return (q.state == State.WAITING or q.state == State.PREFILL or q.state == State.DECODE
            or q.state == State.BLACKHOLE)


@nb.njit(**JIT)
def _live(h, which, req):
    """Is the top entry of timer heap ``which`` (0 deadlines, 1 black holes, 2 retries) live?"""
    q = req[h[0].req]
    if q.tries != h[0].token:
        return False
    if which == DEADLINES:
        return in_flight_nb(q)
    if which == BLACK_HOLES:
        return q.state == State.BLACKHOLE
    return q.state == State.BACKOFF


@nb.njit(**JIT)
def top_nb(timers, tn, which, req):
    """Time of the next live entry of a timer heap (stale tops dropped), or inf."""
    h = timers[which]
    while tn[which] > 0 and not _live(h, which, req):
        pop_nb(h, tn, which)
    return h[0].t if tn[which] > 0 else np.inf
