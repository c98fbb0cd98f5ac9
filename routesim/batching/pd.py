"""Prefill/decode disaggregation's KV transfers over the replicas' links, compiled
(issue 42; docs/model.md "The transfer and the link model").

A transfer started at ``t0`` waits ``latency`` (ms) using no bandwidth, then its bytes
flow. Every replica has one outgoing and one incoming link of ``B`` bytes/ms (GB/s ×
10⁶); while ``n_out(p)`` transfers flow out of ``p`` and ``n_in(d)`` into ``d``, each
flows at ``min(B / n_out(p), B / n_in(d))``; rates change only when a transfer starts
or ends flowing, and a transfer ends when its last byte has flowed (no max-min
redistribution). Alone, a transfer takes ``latency + bytes / B``.

The state of one run is a :data:`Links` namedtuple of arrays (:func:`new_nb`):

- ``head`` (1,) ``LINKS``: the clock ``now`` the transfers have been advanced to, the
  count ``n`` in progress, ``B``, the latency, the window ``(w, h]`` and the transfers
  ended in it (count, bytes);
- ``tr`` (capacity,) ``TRANSFER``: rows ``0 … n-1`` are the transfers in progress, in
  start order (the order of ends at one time);
- ``moved`` (replicas, 2) float64: bytes that flowed out of (column 0) and into
  (column 1) each replica within the window;
- ``n_out``, ``n_in`` (replicas,) int64, ``rate`` and ``done`` (capacity,): scratch.

The arithmetic is tests/token_reference.py ``Links``' operation for operation
(piecewise-constant integration from one rate change to the next), so the engine and
the reference agree bit for bit (tests/test_pd_links.py). The caller advances the links
to ``T`` (:func:`advance_nb`, which hands back the transfers that ended) before it
starts (:func:`start_nb`) or stops (:func:`remove_nb`) one at ``T``.
"""

from collections import namedtuple

import numba as nb
import numpy as np

from ..conf import JIT
from .dtypes import LINKS, TRANSFER

Links = namedtuple("Links", ["head", "tr", "moved", "n_out", "n_in", "rate", "done"])
"""One run's links (see the module docstring)."""


@nb.njit(**JIT)
def new_nb(replicas, capacity, bandwidth, latency, w, h):
    """Links for ``replicas`` replicas and at most ``capacity`` transfers in progress at
    once; ``bandwidth`` in bytes/ms, ``latency`` in ms, the window ``(w, h]`` in ms."""
    head = np.zeros(1, LINKS)
    head[0].bandwidth = bandwidth
    head[0].latency = latency
    head[0].w = w
    head[0].h = h
    return Links(head, np.zeros(capacity, TRANSFER), np.zeros((replicas, 2), np.float64),
                 np.zeros(replicas, np.int64), np.zeros(replicas, np.int64),
                 np.zeros(capacity, np.float64), np.zeros(capacity, np.int64))


@nb.njit(**JIT)
def start_nb(L, key, t, src, dst, nbytes):
    """A transfer of ``nbytes`` from replica ``src`` to ``dst`` starts at ``t`` (the
    links advanced to ``t`` first), keyed ``key``."""
    hd = L.head[0]
    x = L.tr[hd.n]
    x.key = key
    x.src = src
    x.dst = dst
    x.start = t
    x.flows_at = t + hd.latency
    x.left = float(nbytes)
    x.nbytes = float(nbytes)
    hd.n += 1


@nb.njit(**JIT)
def rates_nb(L):
    """Each transfer's rate at ``now`` into ``L.rate[:n]`` (bytes/ms; -1 while it waits
    its latency): ``min(B / n_out(src), B / n_in(dst))`` over the flowing ones."""
    hd = L.head[0]
    n, B, now = hd.n, hd.bandwidth, hd.now
    tr, n_out, n_in, rate = L.tr, L.n_out, L.n_in, L.rate
    for j in range(n):
        n_out[tr[j].src] = 0
        n_in[tr[j].dst] = 0
    for j in range(n):
        if tr[j].flows_at <= now:
            n_out[tr[j].src] += 1
            n_in[tr[j].dst] += 1
    for j in range(n):
        if tr[j].flows_at <= now:
            rate[j] = min(B / n_out[tr[j].src], B / n_in[tr[j].dst])
        else:
            rate[j] = -1.0


@nb.njit(**JIT)
def next_time_nb(L):
    """The next time a transfer starts or ends flowing (ms; inf when none is in
    progress)."""
    hd = L.head[0]
    now = hd.now
    t = np.inf
    rates_nb(L)
    for j in range(hd.n):
        x = L.tr[j]
        if x.flows_at > now:
            t = min(t, x.flows_at)
    for j in range(hd.n):
        r = L.rate[j]
        if r >= 0.0:
            t = min(t, now + L.tr[j].left / r)
    return t


@nb.njit(**JIT)
def flow_nb(L, t):
    """Every flowing transfer's bytes from ``now`` to ``t`` at its rate (no rate change
    in between), the window's bytes per replica, then ``now = t``. Returns how many
    transfers' last byte flowed at ``t``; their rows, ascending, in ``L.done``."""
    hd = L.head[0]
    now = hd.now
    overlap = max(0.0, min(t, hd.h) - max(now, hd.w))
    rates_nb(L)
    k = 0
    for j in range(hd.n):
        r = L.rate[j]
        if r < 0.0:
            continue
        x = L.tr[j]
        if now + x.left / r == t:   # this piece's end is this transfer's
            x.left = 0.0
            L.done[k] = j
            k += 1
        else:
            x.left -= r * (t - now)
        if overlap > 0:
            L.moved[x.src, 0] += r * overlap
            L.moved[x.dst, 1] += r * overlap
    hd.now = t
    return k


@nb.njit(**JIT)
def _drop_nb(L, k):
    """Remove the ``k`` rows listed (ascending) in ``L.done``, keeping start order."""
    tr = L.tr
    hd = L.head[0]
    keep = 0
    d = 0
    for j in range(hd.n):
        if d < k and L.done[d] == j:
            d += 1
            continue
        if keep != j:
            y, x = tr[keep], tr[j]
            y.key, y.src, y.dst, y.start = x.key, x.src, x.dst, x.start
            y.flows_at, y.left, y.nbytes = x.flows_at, x.left, x.nbytes
        keep += 1
    hd.n = keep


@nb.njit(**JIT)
def advance_nb(L, t, out, out_t):
    """Everything up to and at ``t``: writes the keys of the transfers that ended into
    ``out`` and their end times (ms) into ``out_t`` (in end order; at one time, in start
    order) and returns their count; those ended in the window ``(w, h]`` are counted with
    their bytes. (The engine advances at every time something ends, :func:`next_time_nb`,
    so all end at ``t`` there.)"""
    hd = L.head[0]
    m = 0
    while True:
        te = next_time_nb(L)
        if te > t:
            break
        k = flow_nb(L, te)
        for i in range(k):
            x = L.tr[L.done[i]]
            out[m] = x.key
            out_t[m] = te
            m += 1
            if hd.w < te <= hd.h:
                hd.ended += 1
                hd.ended_bytes += x.nbytes
        _drop_nb(L, k)
    if t > hd.now:
        flow_nb(L, t)   # nothing ends before the next rate change
    return m


@nb.njit(**JIT)
def remove_nb(L, key):
    """The transfer ``key`` stops (a crash of either end; the links advanced to now
    first): its link shares go to the others from then on. False when there is none."""
    hd = L.head[0]
    for j in range(hd.n):
        if L.tr[j].key == key:
            L.done[0] = j
            _drop_nb(L, np.int64(1))  # (typed: a literal would compile _drop_nb twice)
            return True
    return False


@nb.njit(**JIT)
def in_progress_nb(L, src, dst):
    """(transfers in progress out of ``src``, into ``dst``): started and not ended,
    whether flowing or waiting their latency (the transfer-aware rule's ``n_out(p)``,
    ``n_in(d)``)."""
    a = 0
    b = 0
    for j in range(L.head[0].n):
        if L.tr[j].src == src:
            a += 1
        if L.tr[j].dst == dst:
            b += 1
    return a, b


@nb.njit(**JIT)
def utilization_nb(L, i):
    """Replica ``i``'s link utilisation over the window: (bytes out + in) / (2 B (h - w))."""
    hd = L.head[0]
    return (L.moved[i, 0] + L.moved[i, 1]) / (2 * hd.bandwidth * (hd.h - hd.w))
