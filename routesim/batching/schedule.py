"""A batching replica's schedule of decoding sequences (token-model.md §2), compiled:
the iterations at which something happens to a decoding sequence (its g reaches the
allowance A, its last token) in a min-heap by (iteration, kind, admission), ``due[i]``
of dtype DUE; stale entries are dropped when they surface."""

import numba as nb

from ..conf import JIT
from ..nrt import hold
from .dtypes import Due, State


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _due_less(d, a, b):
    x = d[a]
    y = d[b]
    if x.j != y.j:
        return x.j < y.j
    if x.kind != y.kind:
        return x.kind < y.kind
    return x.adm < y.adm


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _due_copy(dst, src):
    dst.j = src.j
    dst.adm = src.adm
    dst.kind = src.kind
    dst.req = src.req
    dst.epoch = src.epoch


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _due_down(d, k, n, tmp):
    going = True
    while going and 2 * k + 1 < n:
        c = 2 * k + 1
        if c + 1 < n and _due_less(d, c + 1, c):
            c += 1
        if _due_less(d, c, k):
            _due_copy(tmp[0], d[k])
            _due_copy(d[k], d[c])
            _due_copy(d[c], tmp[0])
            k = c
        else:
            going = False
    hold((d, tmp))


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _due_live(req, i, e):
    q = req[e.req]
    return q.epoch == e.epoch and q.state == State.DECODE and q.replica == i


@nb.njit(**JIT)
def schedule_nb(due, due_n, req, i, j, kind, s, dtmp):
    d = due[i]
    n = due_n[i]
    if n == d.shape[0]:  # full: keep only live entries
        m = 0
        for k in range(n):
            if _due_live(req, i, d[k]):
                if m != k:
                    _due_copy(d[m], d[k])
                m += 1
        for k in range(m // 2 - 1, -1, -1):
            _due_down(d, k, m, dtmp)
        n = m
    e = d[n]
    e.j = j
    e.kind = kind
    e.adm = req[s].adm
    e.req = s
    e.epoch = req[s].epoch
    k = n
    going = True
    while going and k > 0:
        parent = (k - 1) >> 1
        if _due_less(d, k, parent):
            _due_copy(dtmp[0], d[k])
            _due_copy(d[k], d[parent])
            _due_copy(d[parent], dtmp[0])
            k = parent
        else:
            going = False
    due_n[i] = n + 1
    hold((d, due_n, req, dtmp))


@nb.njit(**JIT)
def next_due_nb(due, due_n, req, i, j, kind, dtmp):
    """Pop and return the next live entry (iteration j, this kind) of replica i's
    schedule, or -1 when there is none."""
    d = due[i]
    out = -1
    going = True
    while going and due_n[i] > 0:
        n = due_n[i]
        e = d[0]
        live = _due_live(req, i, e)
        if live and (e.j != j or e.kind != kind):
            going = False
        else:
            s = e.req
            _due_copy(d[0], d[n - 1])
            due_n[i] = n - 1
            _due_down(d, 0, n - 1, dtmp)
            if live:
                out = s
                going = False
    hold((d, due_n, req, dtmp))
    return out


@nb.njit(**JIT)
def start_decoding_nb(rep, req, due, due_n, grow, i, s, j0, p, dtmp):
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
        schedule_nb(due, due_n, req, i, over, Due.OVER, s, dtmp)
    schedule_nb(due, due_n, req, i, last, Due.DONE, s, dtmp)
    hold((rep, req, due, due_n, grow, dtmp))
