"""The KV block pools of one run's replicas (token-model.md §2), compiled, by segments.

A prompt's id'd blocks come in **segments**: runs of consecutive ids at consecutive
prompt positions that every prompt holding one of them holds whole (a prefix group's
``floor(L/b)`` blocks; a request's own blocks; a trace's runs, split where any other
prompt's run starts or ends — see :func:`routesim.batching.workload.segments`). A
sequence references or releases all its blocks at once, so the blocks of a resident
segment share one refcount and one ``last_use``, and eviction (smallest ``last_use``,
then largest position, then smallest id) takes a cached segment's blocks from its end:
what is resident of a segment is a prefix of it. So a segment is one record
(``SEG``: resident length ℓ, refcount, last_use, position of its first block), and the
pools cost per segment, not per block or per token.

**Computed blocks** (§2): a holder computes its prompt in order from its cached prefix,
so what is computed of a segment is a prefix of it (``comp``), except that a capped hit
(a prompt of whole blocks, all resident) computes the prompt's last block alone
(``tail``). When its refcount drops to 0 the uncomputed blocks become free: the
resident prefix shrinks to ``comp`` and a computed last block beyond the hole stays
resident and cached (an *orphan*: no hit reaches it; eviction takes it first, by its
position). While referenced, a segment is resident whole.

Storage grows with what is resident, never with ``kv_blocks`` as such: one
open-addressing table keyed by (replica, segment key) (``tab``, made by :func:`table_nb`,
grown by :func:`reserve_nb`), and per replica a min-heap (routesim/heaps.py) of cached segments in eviction order
(row ``i`` of ``heap`` (replicas, capacity) CACHED; stale entries dropped lazily). Anonymous blocks are
only counted (``rep.anon``); free blocks are ``kv_blocks − anon − idref − cached``.

**Owners' lists.** A table's entries of one owner (``SEG.replica``: a replica, or a view's
owner, see :func:`set_len_nb`) are also a doubly linked list through the slots
(``prev``/``next``), the first slot of owner o's being ``tab[o].head`` (a field of slot o,
whatever entry it holds; so a table has at least as many slots as owners). Insertion and
deletion keep the lists (an entry moved by backward-shift deletion keeps its place in
its list), so one owner's entries are enumerated, or dropped (:func:`drop_nb`), in time
proportional to their number, not to the table's size.

**Changed entries first.** An entry whose length changes (:func:`_changed_nb`) or that is
put moves to the front of its owner's list and is marked changed in ``plen`` (−1: not in
the owner's published view; ``-2 - l``: changed since it was published with length l;
``l >= 0``: published with its length, unchanged since), so the entries changed since the
owner's last publication are a prefix of its list and a publication walks only them
(:func:`publish_nb`): in time proportional to the changes, not to the owner's entries.
The order of a list is read by nothing else (a view's contents do not depend on it).
"""

import numba as nb
import numpy as np

from .. import heaps
from ..conf import JIT
from ..nrt import hold
from .dtypes import SEG

_ZERO, _ONE, _NO = np.int64(0), np.int64(1), np.bool_(False)  # typed: no literal arguments
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_REPMUL = np.uint64(0x9E3779B97F4A7C15)


@nb.njit(**JIT)
def _home(cap, replica, key):
    """Home slot of (replica, key): splitmix64 of the pair, masked to the table size."""
    z = np.uint64(key) ^ (np.uint64(replica + 1) * _REPMUL)
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    return np.int64(z & np.uint64(cap - 1))


@nb.njit(**JIT)
def find_nb(tab, replica, key):
    """Slot of the resident segment (replica, key), or -1."""
    mask = tab.shape[0] - 1
    h = _home(tab.shape[0], replica, key)
    while tab[h].used:
        if tab[h].key == key and tab[h].replica == replica:
            return h
        h = (h + 1) & mask
    return -1


@nb.njit(**JIT)
def table_nb(size):
    """An empty table (cap,) SEG of at least ``size`` slots, a power of two; ``size`` at
    least the owners it will hold."""
    cap = 1
    while cap < size:
        cap *= 2
    tab = np.zeros(cap, SEG)
    for h in range(cap):
        tab[h].head = -1
    return tab


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _link_nb(tab, h):
    """Make slot h's list neighbours (``prev``, ``next``; its owner's head when it is
    first) point to it."""
    e = tab[h]
    if e.prev >= 0:
        tab[e.prev].next = h
    else:
        tab[e.replica].head = h
    if e.next >= 0:
        tab[e.next].prev = h


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _unlink_nb(tab, h):
    """Take slot h out of its owner's list: its neighbours (or its owner's head) skip it."""
    e = tab[h]
    if e.prev >= 0:
        tab[e.prev].next = e.next
    else:
        tab[e.replica].head = e.next
    if e.next >= 0:
        tab[e.next].prev = e.prev


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _push_front_nb(tab, h):
    """Make slot h the first of its owner's list."""
    e = tab[h]
    e.prev = -1
    e.next = tab[e.replica].head
    _link_nb(tab, h)


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def published_len_nb(plen):
    """The length an entry's ``plen`` says its owner's view holds it with, -1 none
    (module docstring: "Changed entries first")."""
    return plen if plen >= -1 else -2 - plen


@nb.njit(**JIT)
def _changed_nb(tab, h):
    """Slot h's length has just changed: count the change for its owner (``mods``) and,
    if it was unchanged since its owner's last publication, mark it changed and move it
    to the front of its owner's list (changed entries are a prefix of the list)."""
    e = tab[h]
    tab[e.replica].mods += 1
    if e.plen < 0:  # changed already, or not published: in the prefix
        return
    e.plen = -2 - e.plen
    if e.prev >= 0:  # not first already
        _unlink_nb(tab, h)
        _push_front_nb(tab, h)


@nb.njit(**JIT)
def _put_nb(tab, replica, key, length, ref, last, pos0, gen, full, comp, tail):
    mask = tab.shape[0] - 1
    h = _home(tab.shape[0], replica, key)
    while tab[h].used:
        h = (h + 1) & mask
    e = tab[h]
    e.key = key
    e.replica = replica
    e.used = True
    e.length = length
    e.ref = ref
    e.last = last
    e.pos0 = pos0
    e.gen = gen
    e.full = full
    e.comp = comp
    e.tail = tail
    e.plen = -1  # not published yet
    _push_front_nb(tab, h)  # first of its owner's list
    tab[replica].mods += 1
    return h


@nb.njit(**JIT)
def _delete_nb(tab, h):
    """Remove slot h (backward-shift deletion keeps every probe chain whole, and the
    owners' lists)."""
    cap = tab.shape[0]
    mask = cap - 1
    e = tab[h]  # out of its owner's list
    tab[e.replica].mods += 1
    if e.plen != -1:  # its owner's view holds it: the next publication deletes it there
        tab[e.replica].vgone += 1
    _unlink_nb(tab, h)
    i = h
    j = (h + 1) & mask
    while tab[j].used:
        k = _home(cap, tab[j].replica, tab[j].key)
        if i <= j:
            stays = i < k <= j
        else:
            stays = i < k or k <= j
        if not stays:  # j's entry may move into the hole at i
            a = tab[i]
            b = tab[j]
            a.key = b.key
            a.replica = b.replica
            a.length = b.length
            a.ref = b.ref
            a.last = b.last
            a.pos0 = b.pos0
            a.gen = b.gen
            a.full = b.full
            a.comp = b.comp
            a.tail = b.tail
            a.plen = b.plen
            a.prev = b.prev
            a.next = b.next
            _link_nb(tab, i)
            i = j
        j = (j + 1) & mask
    tab[i].used = False


@nb.njit(**JIT)
def reserve_nb(tab, used, extra):
    """``tab``, or a table twice as large holding the same entries, so that ``extra``
    more entries keep the load at most one half."""
    if 2 * (used + extra) <= tab.shape[0]:
        return tab
    cap = tab.shape[0]
    while 2 * (used + extra) > cap:
        cap *= 2
    out = table_nb(cap)
    for h in range(tab.shape[0]):
        e = tab[h]
        if e.used:
            g = _put_nb(out, e.replica, e.key, e.length, e.ref, e.last, e.pos0, e.gen, e.full, e.comp, e.tail)
            out[g].plen = e.plen if e.plen < 0 else -2 - e.plen  # changed: the lists' order is new
    for h in range(tab.shape[0]):  # (the same entries: no change for a publication to see)
        out[h].mods = tab[h].mods
        out[h].vgone = tab[h].vgone
    return out


# --- the eviction heap of one replica: entries (last, -last position, last id) -----------

@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _less(heap, i, a, b):
    """Does entry a of replica i's eviction heap go before entry b?"""
    x = heap[i, a]
    y = heap[i, b]
    if x.last != y.last:
        return x.last < y.last
    if x.negpos != y.negpos:
        return x.negpos < y.negpos
    return x.lastid < y.lastid


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _swap(heap, i, a, b):
    x = heap[i, a]
    y = heap[i, b]
    last, negpos, lastid, key, gen, length = x.last, x.negpos, x.lastid, x.key, x.gen, x.length
    x.last, x.negpos, x.lastid, x.key, x.gen, x.length = y.last, y.negpos, y.lastid, y.key, y.gen, y.length
    y.last, y.negpos, y.lastid, y.key, y.gen, y.length = last, negpos, lastid, key, gen, length


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _move(heap, i, dst, src):
    x = heap[i, dst]
    y = heap[i, src]
    x.last, x.negpos, x.lastid, x.key, x.gen, x.length = y.last, y.negpos, y.lastid, y.key, y.gen, y.length


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _valid(tab, replica, x):
    """Is heap entry x still the live state of its cached segment?"""
    h = find_nb(tab, replica, x.key)
    e = tab[max(h, 0)]  # (read whether found or not: tab's one use)
    return h >= 0 and e.ref == 0 and e.gen == x.gen and e.length == x.length


@nb.njit(**JIT)
def orphan_nb(e):
    """Is segment entry e's computed last block resident beyond a hole (cached only)?"""
    return e.tail and e.length < e.full


@nb.njit(**JIT)
def resident_nb(e):
    """Resident blocks of segment entry e: its prefix, and an orphan last block."""
    return e.length + (1 if orphan_nb(e) else 0)


@nb.njit(**JIT)
def _set_entry(x, e):
    """Heap entry x for table entry e: its last resident block is the next to go."""
    last = e.full - 1 if orphan_nb(e) else e.length - 1
    x.last = e.last
    x.negpos = -(e.pos0 + last)
    x.lastid = e.key + last
    x.key = e.key
    x.gen = e.gen
    x.length = e.length


@nb.njit(**JIT)
def _push_cached_nb(tab, heap, heap_n, i, h):
    """Segment in slot h of replica i has just become cached: queue it for eviction."""
    n = heap_n[i]
    if n == heap.shape[1]:  # full of stale entries: keep the live ones (at most the cached segments)
        n = heaps.compact_nb(heap, i, n, _valid, tab, _less, _swap)
    _set_entry(heap[i, n], tab[h])
    heaps.push_nb(heap, i, n, _less, _swap)
    heap_n[i] = n + 1
    hold((tab, heap, heap_n))


@nb.njit(**JIT)
def evict_nb(tab, heap, heap_n, rep, i, need):
    """Evict ``need`` cached blocks of replica i in eviction order (the caller has
    checked that ``rep[i].cached >= need``). Returns the number of table entries deleted."""
    r = rep[i]
    deleted = 0
    while need > 0:
        n = heap_n[i]
        top = heap[i, 0]
        drop = True  # the top entry leaves the heap: stale, or its segment gone (one pop site: see below)
        if _valid(tab, i, top):
            h = find_nb(tab, i, top.key)
            e = tab[h]
            if orphan_nb(e):  # its orphan last block goes alone
                e.tail = False
                r.cached -= 1
                need -= 1
            else:
                # blocks of this segment that go before every other entry: the runner-up is a child
                allowed = e.length
                for c in range(1, 3):
                    if c < n:
                        y = heap[i, c]
                        if y.last == e.last:
                            pos2 = -y.negpos
                            k = e.pos0 + e.length - 1 - pos2  # blocks at positions > pos2
                            if (pos2 >= e.pos0 and pos2 <= e.pos0 + e.length - 1
                                    and e.key + (pos2 - e.pos0) < y.lastid):
                                k += 1
                            allowed = min(allowed, max(k, 1))
                take = min(need, allowed)
                e.length -= take
                _changed_nb(tab, h)
                e.comp = e.length  # cached: every resident block is computed
                e.tail = False
                r.cached -= take
                need -= take
            if e.length == 0:
                _delete_nb(tab, h)
                deleted += 1
            else:
                _set_entry(heap[i, 0], e)
                heaps.sift_down_nb(heap, i, _ZERO, n, _less, _swap)
                drop = False
        if drop:  # (inlined once: a second inlined pop made Numba warn at every first compile)
            heaps.pop_nb(heap, i, n, _less, _move)
            heap_n[i] = n - 1
    hold((tab, heap, heap_n))
    return deleted


@nb.njit(**JIT)
def free_nb(r, kv_blocks):
    """Free blocks of replica record r."""
    return kv_blocks - r.anon - r.idref - r.cached


@nb.njit(**JIT)
def take_nb(tab, heap, heap_n, rep, i, count, kv_blocks):
    """Make ``count`` blocks free for the caller, evicting cached blocks as needed.
    Returns the table entries deleted, or -1 (nothing changed) when they cannot be had."""
    short = count - free_nb(rep[i], kv_blocks)
    fits = short <= rep[i].cached
    deleted = evict_nb(tab, heap, heap_n, rep, i, short if fits else 0)  # (short <= 0: nothing)
    return deleted if fits else -1


@nb.njit(**JIT)
def ref_nb(e, r, t):
    """Reference the resident segment of table entry e of replica record r (cached ->
    referenced when unused)."""
    if e.ref == 0:
        r.cached -= resident_nb(e)
        r.idref += resident_nb(e)
    e.ref += 1
    e.last = t


@nb.njit(**JIT)
def add_nb(tab, rep, i, key, length, pos0, t):
    """Blocks just made free (``take_nb``) become the resident segment ``key`` of
    ``length`` blocks, referenced once, none computed yet. Returns its slot."""
    rep[i].idref += length
    return _put_nb(tab, i, key, length, _ONE, t, pos0, _ZERO, length, _ZERO, _NO)


@nb.njit(**JIT)
def extend_nb(tab, h, r):
    """A referenced, partly resident segment (slot h of ``tab``, of the replica whose
    record is r) gets its missing blocks (already made free, uncomputed; an orphan last
    block is referenced as it is)."""
    e = tab[h]
    r.idref += e.full - resident_nb(e)
    e.length = e.full
    _changed_nb(tab, h)


@nb.njit(**JIT)
def unref_nb(tab, heap, heap_n, rep, i, key, t):
    """Release one reference of the resident segment ``key`` of replica i; at refcount 0
    its computed blocks become cached and its uncomputed ones free (§2 "Computed
    blocks"). Returns the table entries deleted (1 when nothing of it stays resident)."""
    h = find_nb(tab, i, key)
    e = tab[h]
    r = rep[i]
    e.ref -= 1
    e.last = t
    deleted = 0
    if e.ref == 0:
        r.idref -= e.length
        if e.comp < e.full:  # some block is uncomputed: the resident prefix shrinks to the computed one
            e.length = e.comp
            _changed_nb(tab, h)
        res = resident_nb(e)
        r.cached += res
        if res == 0:
            _delete_nb(tab, h)
            deleted = 1
        else:
            e.gen += 1
            _push_cached_nb(tab, heap, heap_n, i, h)
    hold((tab, heap, heap_n))
    return deleted


@nb.njit(**JIT)
def computed_nb(tab, i, key, lo, hi):
    """A holder of segment ``key`` on replica i has computed its blocks ``lo:hi``
    (segment positions; ``lo`` where the holder's cached prefix ends, so ``lo`` is the
    computed prefix's end or the segment's last block)."""
    e = tab[find_nb(tab, i, key)]
    if lo <= e.comp:
        e.comp = max(e.comp, hi)
    elif hi == e.full:
        e.tail = True
    if e.tail and e.comp == e.full - 1:
        e.comp = e.full


# --- views: published snapshots and a router's own additions (§3), same table layout -----

@nb.njit(**JIT)
def seen_len_nb(tab, owner, key):
    """Resident length of segment ``key`` in a view table under ``owner``, 0 if absent."""
    h = find_nb(tab, owner, key)
    length = tab[max(h, 0)].length  # (read whether found or not: tab's one use)
    return length if h >= 0 else 0


@nb.njit(**JIT)
def set_len_nb(tab, owner, key, length):
    """Record segment ``key`` under ``owner`` with ``length`` blocks (room reserved by the caller)."""
    h = find_nb(tab, owner, key)
    if h >= 0:
        tab[h].length = length
        _changed_nb(tab, h)
    else:
        _put_nb(tab, owner, key, length, _ZERO, 0.0, _ZERO, _ZERO, length, _ZERO, _NO)


@nb.njit(**JIT)
def publish_nb(view, tab, owner):
    """Make ``view``'s entries under ``owner`` the resident segments of ``tab``'s
    replica ``owner``, key and length (room reserved by the caller), changing only what
    differs: each of the replica's entries changed since the last publication (the
    prefix of its list whose ``plen`` is negative: module docstring, "Changed entries
    first") whose length is not the one it was published with is found in the view (its
    length set) or put there, and every one of them is marked published with its length;
    then, if any entry the view holds has left the table since (``vgone`` of the owner's
    slot), the owner's view entries whose key the table no longer holds are deleted. The
    same entries as deleting all of the owner's and putting the replica's again
    (:func:`drop_nb`, :func:`set_len_nb`), in time proportional to the entries changed
    and, when one left, the view's. Returns (entries put, entries deleted)."""
    put = 0
    h = tab[owner].head
    while h >= 0 and tab[h].plen < 0:  # the entries changed since the last publication
        e = tab[h]
        if published_len_nb(e.plen) != e.length:
            g = find_nb(view, owner, e.key)
            if g >= 0:
                view[g].length = e.length
            else:
                _put_nb(view, owner, e.key, e.length, _ZERO, 0.0, _ZERO, _ZERO, e.length, _ZERO, _NO)
                put += 1
        e.plen = e.length
        h = e.next
    deleted = 0
    if tab[owner].vgone > 0:
        g = view[owner].head
        while g >= 0:
            nxt = view[g].next
            if find_nb(tab, owner, view[g].key) < 0:
                after = view[max(nxt, 0)].key  # a deletion may shift the next entry to another slot
                _delete_nb(view, g)
                deleted += 1
                if nxt >= 0:
                    nxt = find_nb(view, owner, after)
            g = nxt
        tab[owner].vgone = 0
    return put, deleted


@nb.njit(**JIT)
def unpublish_nb(view, tab, owner):
    """Empty ``view`` of ``owner`` (a replica that is down publishes nothing), and mark
    every entry of the replica's as not published. Returns the view entries deleted."""
    h = tab[owner].head
    while h >= 0:
        tab[h].plen = -1
        h = tab[h].next
    tab[owner].vgone = 0
    return drop_nb(view, owner)


@nb.njit(**JIT)
def drop_nb(tab, owner):
    """Delete every entry of ``owner`` (in time proportional to their number). Returns how many."""
    deleted = 0
    while tab[owner].head >= 0:
        _delete_nb(tab, tab[owner].head)
        deleted += 1
    return deleted


@nb.njit(**JIT)
def clear_replica_nb(tab, rep, heap_n, i):
    """Empty replica i's cache (a crash). Returns the table entries deleted."""
    deleted = drop_nb(tab, i)
    r = rep[i]
    r.anon = 0
    r.idref = 0
    r.cached = 0
    heap_n[i] = 0
    return deleted
