"""The binary min-heap of both models, once: push (sift up), sift down, pop, compact.

Every heap of routesim is an array of records kept in heap order: the queue model's
completion heap (``queue/engine.py``), and the batching model's eviction heaps
(``batching/blocks.py``), decode schedules (``batching/schedule.py``) and timers
(``batching/timers.py``). Each keeps its own record dtype and its own key order; the
algorithm is here. A heap is row ``w`` of a 2-D record array ``h`` (heaps, capacity),
its first ``n`` entries in heap order, entry 0 the smallest (the queue model's one
heap is a 1-D array: its own two functions ignore ``w``). The caller gives two
compiled functions:

- ``before(h, w, a, b)``: does entry ``a`` of heap ``w`` come strictly before entry
  ``b`` in its key order? Entries that compare equal are never exchanged, so ties
  leave in the order these sifts put them in, as in each heap's own code before;
- ``swap(h, w, a, b)``: exchange entries ``a`` and ``b``, every field;
- ``move(h, w, dst, src)`` (the pop's): copy entry ``src`` over ``dst``, every field.

The caller holds the heap's size (an array ``hn[w]``, or a record field) and sets it.
These functions are not dispatchers of their own (``register_jitable``, inlined at
each call): each call site compiles them with its own ``before`` and ``swap``, so each
heap's code is what it was when written out by hand, every routesim dispatcher keeps
one signature (tests/test_refcounts.py), and Numba's disk cache still holds the
callers (njit functions that pass another njit function as an argument). Loops end by
a flag, not ``break``, and each function ends by ``hold`` of its arrays, so Numba
prunes their reference counts (routesim/nrt.py).

A pop moves the last entry to the top and sifts it down, by moves into a hole. Stale entries
(the batching heaps drop them lazily) go by the same pop when they reach the top, or
all at once by :func:`compact_nb`, which keeps the live ones and heapifies them.
"""

from numba.extending import register_jitable

from .nrt import hold


@register_jitable(inline="always")
def push_nb(h, w, k, before, swap):
    """Entry ``k`` of heap ``w`` (just written by the caller) joins the ``k`` before it,
    moving up while it comes before its parent; the heap then has ``k + 1`` entries."""
    going = True
    while going and k > 0:
        parent = (k - 1) >> 1
        if before(h, w, k, parent):
            swap(h, w, k, parent)
            k = parent
        else:
            going = False
    hold(h)


@register_jitable(inline="always")
def sift_down_nb(h, w, k, n, before, swap):
    """Entry ``k`` of the ``n``-entry heap ``w`` moves down while a child comes before
    it (the smaller child; the left one on a tie)."""
    going = True
    while going and 2 * k + 1 < n:
        c = 2 * k + 1
        if c + 1 < n and before(h, w, c + 1, c):
            c += 1
        if before(h, w, c, k):
            swap(h, w, k, c)
            k = c
        else:
            going = False
    hold(h)


@register_jitable(inline="always")
def pop_nb(h, w, n, before, move):
    """Remove the top of the ``n``-entry heap ``w`` (``n >= 1``); it then has ``n - 1``
    entries (what is left at ``n - 1`` is not an entry). The last entry sifts down from
    the top as in :func:`sift_down_nb`, the same comparisons and the same places, but
    it stays at ``n - 1`` (never inside the ``n - 1`` entries, so the comparisons can
    read it there) while each smaller child moves up into the hole, and it is written
    once, where it stops: ``move(h, w, dst, src)`` copies entry ``src`` over ``dst``,
    every field, one copy per level where a swap is two."""
    last = n - 1
    hole = n - n  # 0, typed as n is: a literal 0 would compile the caller's move once more
    going = True
    while going and 2 * hole + 1 < last:
        c = 2 * hole + 1
        if c + 1 < last and before(h, w, c + 1, c):
            c += 1
        if before(h, w, c, last):
            move(h, w, hole, c)
            hole = c
        else:
            going = False
    if hole != last:
        move(h, w, hole, last)
    hold(h)


@register_jitable(inline="always")
def compact_nb(h, w, n, live, ctx, before, swap):
    """Keep the entries ``e`` of the ``n``-entry heap ``w`` for which ``live(ctx, w, e)``
    (in their order, then heapified); return how many."""
    m = n - n  # 0, typed as n is: a literal 0 would compile the caller's swap once more
    for k in range(n):
        if live(ctx, w, h[w, k]):
            if m != k:
                swap(h, w, m, k)
            m += 1
    for k in range(m // 2 - 1, -1, -1):  # heapify (bottom-up), written out here: a
        # heapify function inlined in turn left reference counts the pruning could not remove
        sift_down_nb(h, w, k, m, before, swap)
    hold((h, ctx))
    return m
