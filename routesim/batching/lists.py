"""A batching replica's two lists of sequences (token-model.md §2), compiled: the
waiting queue (FIFO, preempted sequences back at its front) and the running list in
admission order, both doubly linked through ``REQUEST`` fields (``w_prev`` /
``w_next``, ``r_prev`` / ``r_next``), with their heads, tails and counts in the
replica's record (``w_head``, ``w_tail``, ``n_wait``; ``r_head``, ``r_tail``,
``n_run``; head and tail -1 when the list is empty).

Appending and removing are routesim/links.py's, for either list (its field names
passed as string constants).
"""

import numba as nb

from .. import links
from ..conf import JIT
from ..nrt import hold
from .dtypes import State


@nb.njit(**JIT)
def push_back_nb(rep, req, i, s):
    """Append s to replica i's waiting FIFO."""
    links.append2_nb(rep, req, i, s, "w_prev", "w_next", "w_head", "w_tail", "n_wait")
    req[s].state = State.WAITING
    hold((rep, req))


@nb.njit(**JIT)
def push_front_nb(rep, req, i, s):
    """Put s at the front of replica i's waiting FIFO (a preempted sequence)."""
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
def wait_remove_nb(rep, req, i, s):
    """Take s out of replica i's waiting FIFO."""
    links.remove_nb(rep, req, i, s, "w_prev", "w_next", "w_head", "w_tail", "n_wait")
    hold((rep, req))


@nb.njit(**JIT)
def pop_front_nb(rep, req, i):
    """Take the head out of replica i's (non-empty) waiting FIFO and return it."""
    s = rep[i].w_head
    links.remove_nb(rep, req, i, s, "w_prev", "w_next", "w_head", "w_tail", "n_wait")
    hold((rep, req))
    return s


@nb.njit(**JIT)
def run_append_nb(rep, req, i, s):
    """Append s (just admitted) to replica i's running list."""
    links.append2_nb(rep, req, i, s, "r_prev", "r_next", "r_head", "r_tail", "n_run")
    hold((rep, req))


@nb.njit(**JIT)
def run_remove_nb(rep, req, i, s):
    """Take s out of replica i's running list."""
    links.remove_nb(rep, req, i, s, "r_prev", "r_next", "r_head", "r_tail", "n_run")
    hold((rep, req))
