"""A batching replica's two lists of sequences (token-model.md §2), compiled: the
waiting queue (FIFO, preempted sequences back at its front) and the running list in
admission order, both doubly linked through ``REQUEST.r_prev`` / ``r_next``, with
their heads, tails and counts in the replica's record."""

import numba as nb

from ..conf import JIT
from ..nrt import hold
from .dtypes import State


@nb.njit(**JIT)
def push_back_nb(rep, req, i, s):
    """Append s to replica i's waiting FIFO."""
    r = rep[i]
    req[s].w_next = -1
    req[s].w_prev = r.w_tail if r.n_wait > 0 else -1
    if r.n_wait == 0:
        r.w_head = s
    else:
        req[r.w_tail].w_next = s
    r.w_tail = s
    r.n_wait += 1
    req[s].state = State.WAITING
    hold((rep, req))


@nb.njit(**JIT)
def push_front_nb(rep, req, i, s):
    r = rep[i]
    req[s].w_next = r.w_head if r.n_wait > 0 else -1
    req[s].w_prev = -1
    if r.n_wait == 0:
        r.w_tail = s
    else:
        req[r.w_head].w_prev = s
    r.w_head = s
    r.n_wait += 1
    req[s].state = State.WAITING
    hold((rep, req))


@nb.njit(**JIT)
def pop_front_nb(rep, req, i):
    r = rep[i]
    s = r.w_head
    r.w_head = req[s].w_next
    if r.w_head >= 0:
        req[r.w_head].w_prev = -1
    r.n_wait -= 1
    hold((rep, req))
    return s


@nb.njit(**JIT)
def wait_remove_nb(rep, req, i, s):
    r = rep[i]
    q = req[s]
    if q.w_prev >= 0:
        req[q.w_prev].w_next = q.w_next
    else:
        r.w_head = q.w_next
    if q.w_next >= 0:
        req[q.w_next].w_prev = q.w_prev
    else:
        r.w_tail = q.w_prev
    r.n_wait -= 1
    hold((rep, req))


@nb.njit(**JIT)
def run_append_nb(rep, req, i, s):
    r = rep[i]
    req[s].r_next = -1
    req[s].r_prev = r.r_tail
    if r.n_run == 0:
        r.r_head = s
    else:
        req[r.r_tail].r_next = s
    r.r_tail = s
    r.n_run += 1
    hold((rep, req))


@nb.njit(**JIT)
def run_remove_nb(rep, req, i, s):
    r = rep[i]
    q = req[s]
    if q.r_prev >= 0:
        req[q.r_prev].r_next = q.r_next
    else:
        r.r_head = q.r_next
    if q.r_next >= 0:
        req[q.r_next].r_prev = q.r_prev
    else:
        r.r_tail = q.r_prev
    r.n_run -= 1
    hold((rep, req))
