"""Linked lists through record fields, once for both models: the queue model's FIFO
waiting queues (``queue/engine.py``, singly linked) and the batching model's waiting
and running lists (``batching/lists.py``, doubly linked).

A list's members are rows of a record array ``req``, linked by their field named
``NEXT`` (and ``PREV`` when doubly linked); its head, tail and length are the fields
``HEAD``, ``TAIL``, ``COUNT`` of the record ``rep[i]`` (head and tail -1 when it is
empty). The field names are string constants at every call, so each call compiles to
its own list's field accesses. These functions are not dispatchers of their own
(``register_jitable``, inlined at each call; no compiled function is called); each
ends by ``hold`` of its arrays (routesim/nrt.py).
"""

from numba.extending import register_jitable

from .nrt import hold


@register_jitable(inline="always")
def append_nb(rep, req, i, s, NEXT, HEAD, TAIL, COUNT):
    """s joins the end of list i (its ``PREV`` link, if any, is the caller's)."""
    r = rep[i]
    req[s][NEXT] = -1
    if r[COUNT] == 0:
        r[HEAD] = s
    else:
        req[r[TAIL]][NEXT] = s
    r[TAIL] = s
    r[COUNT] += 1
    hold((rep, req))


@register_jitable(inline="always")
def pop_front_nb(rep, req, i, NEXT, HEAD, TAIL, COUNT):
    """The head of the non-empty, singly linked list i leaves it; returns it."""
    r = rep[i]
    s = r[HEAD]
    r[HEAD] = req[s][NEXT]
    r[COUNT] -= 1
    if r[COUNT] == 0:
        r[TAIL] = -1
    hold((rep, req))
    return s


@register_jitable(inline="always")
def append2_nb(rep, req, i, s, PREV, NEXT, HEAD, TAIL, COUNT):
    """s joins the end of the doubly linked list i."""
    r = rep[i]
    req[s][PREV] = r[TAIL] if r[COUNT] > 0 else -1
    append_nb(rep, req, i, s, NEXT, HEAD, TAIL, COUNT)
    hold((rep, req))


@register_jitable(inline="always")
def remove_nb(rep, req, i, s, PREV, NEXT, HEAD, TAIL, COUNT):
    """s leaves the doubly linked list i, wherever it is in it."""
    r = rep[i]
    q = req[s]
    if q[PREV] >= 0:
        req[q[PREV]][NEXT] = q[NEXT]
    else:
        r[HEAD] = q[NEXT]
    if q[NEXT] >= 0:
        req[q[NEXT]][PREV] = q[PREV]
    else:
        r[TAIL] = q[PREV]
    r[COUNT] -= 1
    hold((rep, req))
