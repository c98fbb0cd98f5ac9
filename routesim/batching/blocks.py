"""The KV block pool of every replica of one run (token-model.md §2), compiled.

Only what is resident is stored: an open-addressing table of resident id'd blocks
keyed by (replica, id) (``tab``, dtype ``SLOT``) and, per replica, a min-heap of its
cached blocks in eviction order (``heap[i]``, dtype ``HEAP``, with lazily dropped
stale entries). Anonymous blocks are only counted (``rep.anon``); free blocks are
``kv_blocks − anon − idref − cached``. Memory grows with what is resident, never with
``kv_blocks`` as such.

Eviction order: smallest ``last_use``, then largest position, then smallest id. A
block's ``last_use`` is set at every refcount change.
"""

import numba as nb
import numpy as np

from ..conf import JIT

_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_REPMUL = np.uint64(0x9E3779B97F4A7C15)


@nb.njit(**JIT)
def _home(tab, replica, bid):
    """Home slot of (replica, id): splitmix64 of the pair, masked to the table size."""
    z = np.uint64(bid) ^ (np.uint64(replica + 1) * _REPMUL)
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    return np.int64(z & np.uint64(tab.shape[0] - 1))


@nb.njit(**JIT)
def find_nb(tab, replica, bid):
    """Slot holding (replica, id), or -1 when that block is not resident."""
    mask = tab.shape[0] - 1
    h = _home(tab, replica, bid)
    while tab[h].used:
        if tab[h].id == bid and tab[h].replica == replica:
            return h
        h = (h + 1) & mask
    return -1


@nb.njit(**JIT)
def _insert_nb(tab, replica, bid, pos, t):
    """Make (replica, id) resident with refcount 1; returns its slot."""
    mask = tab.shape[0] - 1
    h = _home(tab, replica, bid)
    while tab[h].used:
        h = (h + 1) & mask
    e = tab[h]
    e.id = bid
    e.replica = replica
    e.used = True
    e.ref = 1
    e.last = t
    e.pos = pos
    e.gen = 0
    return h


@nb.njit(**JIT)
def _delete_nb(tab, h):
    """Remove slot h (backward-shift deletion keeps every probe chain whole)."""
    mask = tab.shape[0] - 1
    i = h
    j = h
    while True:
        j = (j + 1) & mask
        if not tab[j].used:
            break
        k = _home(tab, tab[j].replica, tab[j].id)
        # leave tab[j] where it is if its home lies cyclically in (i, j]
        if i <= j:
            if i < k <= j:
                continue
        elif i < k or k <= j:
            continue
        a = tab[i]
        b = tab[j]
        a.id = b.id
        a.replica = b.replica
        a.ref = b.ref
        a.last = b.last
        a.pos = b.pos
        a.gen = b.gen
        i = j
    tab[i].used = False


@nb.njit(**JIT)
def _less(hp, a, b):
    """Heap order: entry a is evicted before entry b."""
    x = hp[a]
    y = hp[b]
    if x.last != y.last:
        return x.last < y.last
    if x.negpos != y.negpos:
        return x.negpos < y.negpos
    return x.id < y.id


@nb.njit(**JIT)
def _swap(hp, a, b):
    x = hp[a]
    y = hp[b]
    last, negpos, bid, gen = x.last, x.negpos, x.id, x.gen
    x.last, x.negpos, x.id, x.gen = y.last, y.negpos, y.id, y.gen
    y.last, y.negpos, y.id, y.gen = last, negpos, bid, gen


@nb.njit(**JIT)
def _sift_up(hp, k):
    while k > 0:
        parent = (k - 1) >> 1
        if not _less(hp, k, parent):
            break
        _swap(hp, k, parent)
        k = parent


@nb.njit(**JIT)
def _sift_down(hp, k, n):
    while True:
        c = 2 * k + 1
        if c >= n:
            break
        if c + 1 < n and _less(hp, c + 1, c):
            c += 1
        if not _less(hp, c, k):
            break
        _swap(hp, k, c)
        k = c


@nb.njit(**JIT)
def _valid(tab, replica, e):
    h = find_nb(tab, replica, e.id)
    return h >= 0 and tab[h].ref == 0 and tab[h].gen == e.gen


@nb.njit(**JIT)
def _push_cached(tab, heap, rep, i, h):
    """Slot h of replica i has just become cached: queue it for eviction."""
    hp = heap[i]
    n = rep[i].heap_n
    if n == hp.shape[0]:  # full: keep only the live entries (at most ``cached`` of them)
        m = 0
        for k in range(n):
            if _valid(tab, i, hp[k]):
                if m != k:
                    _swap(hp, m, k)
                m += 1
        for k in range(m // 2 - 1, -1, -1):
            _sift_down(hp, k, m)
        n = m
    e = tab[h]
    x = hp[n]
    x.last = e.last
    x.negpos = -e.pos
    x.id = e.id
    x.gen = e.gen
    _sift_up(hp, n)
    rep[i].heap_n = n + 1


@nb.njit(**JIT)
def free_nb(rep, i, kv_blocks):
    """Free blocks of replica i."""
    r = rep[i]
    return kv_blocks - r.anon - r.idref - r.cached


@nb.njit(**JIT)
def take_nb(tab, heap, rep, i, kv_blocks):
    """Make one block free for the caller to use, evicting the first cached block if
    none is free. False when no block can be had."""
    if free_nb(rep, i, kv_blocks) > 0:
        return True
    if rep[i].cached == 0:
        return False
    hp = heap[i]
    while True:
        n = rep[i].heap_n
        top_id = hp[0].id
        ok = _valid(tab, i, hp[0])
        _swap(hp, 0, n - 1)
        rep[i].heap_n = n - 1
        _sift_down(hp, 0, n - 1)
        if ok:
            _delete_nb(tab, find_nb(tab, i, top_id))
            rep[i].cached -= 1
            return True


@nb.njit(**JIT)
def add_id_nb(tab, rep, i, bid, pos, t):
    """A block just taken (``take_nb``) becomes the resident id'd block ``bid``."""
    _insert_nb(tab, i, bid, pos, t)
    rep[i].idref += 1


@nb.njit(**JIT)
def ref_nb(tab, rep, i, h, t):
    """Reference the resident block in slot h (cached -> referenced when it was unused)."""
    e = tab[h]
    if e.ref == 0:
        rep[i].cached -= 1
        rep[i].idref += 1
    e.ref += 1
    e.last = t


@nb.njit(**JIT)
def unref_nb(tab, heap, rep, i, bid, t):
    """Release one reference of the resident block ``bid`` of replica i."""
    h = find_nb(tab, i, bid)
    e = tab[h]
    e.ref -= 1
    e.last = t
    if e.ref == 0:
        rep[i].idref -= 1
        rep[i].cached += 1
        e.gen += 1
        _push_cached(tab, heap, rep, i, h)


@nb.njit(**JIT)
def clear_replica_nb(tab, rep, i):
    """Empty replica i's cache (a crash): every resident block of it goes."""
    gone = True
    while gone:  # a deletion may shift a later entry of a wrapped chain behind the scan
        gone = False
        h = 0
        while h < tab.shape[0]:
            if tab[h].used and tab[h].replica == i:
                _delete_nb(tab, h)  # the shifted-in slot is looked at again
                gone = True
            else:
                h += 1
    r = rep[i]
    r.anon = 0
    r.idref = 0
    r.cached = 0
    r.heap_n = 0
