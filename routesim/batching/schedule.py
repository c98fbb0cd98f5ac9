"""A batching replica's schedule of decoding sequences (token-model.md §2), compiled:
the iterations at which something happens to a decoding sequence (its g reaches the
allowance A, its last token) in a min-heap (routesim/heaps.py) by (iteration, kind,
admission), row ``i`` of ``due`` (replicas, capacity) DUE; stale entries are dropped
when they surface."""

import numba as nb

from .. import heaps
from ..conf import JIT
from ..nrt import hold
from .dtypes import Due, State


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _due_less(d, i, a, b):
    """Does entry a of replica i's schedule come before entry b: (iteration, kind, admission)."""
    x = d[i, a]
    y = d[i, b]
    if x.j != y.j:
        return x.j < y.j
    if x.kind != y.kind:
        return x.kind < y.kind
    return x.adm < y.adm


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _due_swap(d, i, a, b):
    x = d[i, a]
    y = d[i, b]
    j, adm, kind, s, epoch = x.j, x.adm, x.kind, x.req, x.epoch
    x.j, x.adm, x.kind, x.req, x.epoch = y.j, y.adm, y.kind, y.req, y.epoch
    y.j, y.adm, y.kind, y.req, y.epoch = j, adm, kind, s, epoch


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _due_move(d, i, dst, src):
    x = d[i, dst]
    y = d[i, src]
    x.j, x.adm, x.kind, x.req, x.epoch = y.j, y.adm, y.kind, y.req, y.epoch


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _due_live(req, i, e):
    q = req[e.req]
    return q.epoch == e.epoch and q.state == State.DECODE and q.replica == i


@nb.njit(**JIT)
def schedule_nb(due, due_n, req, i, j, kind, s):
    """Schedule sequence s (on replica i) for iteration j, entry kind ``kind``."""
    n = due_n[i]
    if n == due.shape[1]:  # full: keep only live entries
        n = heaps.compact_nb(due, i, n, _due_live, req, _due_less, _due_swap)
    e = due[i, n]
    e.j = j
    e.kind = kind
    e.adm = req[s].adm
    e.req = s
    e.epoch = req[s].epoch
    heaps.push_nb(due, i, n, _due_less, _due_swap)
    due_n[i] = n + 1
    hold((due, due_n, req))


@nb.njit(**JIT)
def next_due_nb(due, due_n, req, i, j, kind):
    """Pop and return the next live entry (iteration j, this kind) of replica i's
    schedule, or -1 when there is none."""
    out = -1
    going = True
    while going and due_n[i] > 0:
        e = due[i, 0]
        live = _due_live(req, i, e)
        if live and (e.j != j or e.kind != kind):
            going = False
        else:
            s = e.req
            heaps.pop_nb(due, i, due_n[i], _due_less, _due_move)
            due_n[i] -= 1
            if live:
                out = s
                going = False
    hold((due, due_n, req))
    return out


@nb.njit(**JIT)
def start_decoding_nb(rep, req, due, due_n, grow, i, s, j0, p):
    """Sequence s decodes from iteration j0 with its current kv and g: schedule it."""
    q = req[s]
    r = rep[i]
    q.state = State.DECODE
    q.epoch += 1
    q.j0 = j0
    q.over = False
    r.n_dec += 1
    r.kv_dec += q.kv
    b = p.block_tokens
    last = j0 + q.O - q.g - 1  # the iteration that emits its last token
    q.res = (j0 + (b - q.kv % b) % b) % b  # its first block crossing, then every b iterations
    grow[i, q.res] += 1
    over = j0 + max(0, q.A - q.g)  # never, when A is O ("exact")
    if over <= last:
        schedule_nb(due, due_n, req, i, over, Due.OVER, s)
    schedule_nb(due, due_n, req, i, last, Due.DONE, s)
    hold((rep, req, due, due_n, grow))
