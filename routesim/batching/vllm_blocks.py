"""The KV blocks of a replica with ``scheduler = "vllm"``, compiled: vLLM V1 0.30.0's
``BlockPool`` (conformance/VLLM-SCHEDULER.md §1.1, §1.5, §1.8; /work/spec22b.md 5-9).

Per replica ``i``, physical blocks ``0 … kv_blocks − 1`` in ``bl[i, field, block]``
(int64): ``REF`` (reference count), ``KEY`` (its key, ``NOKEY`` when unhashed), ``PREV`` /
``NEXT`` (the free queue, a doubly linked list of every block with ref 0, head first),
``HNEXT`` (the next block holding the same key, in insertion order) and ``OWN`` (the
block the same attempt took before this one: an attempt's taken blocks are a chain from
its last; a block is taken by one attempt at a time, since only ref-0 blocks are taken).
``vq[i]`` holds the queue's head, tail and length, the referenced blocks, the distinct
keys, and the replica's scheduled and pending-release counts.

The hash map key → blocks is the engine's segment table ``tab`` (routesim/batching/blocks.py's
open addressing on (replica, key)), one entry per distinct key with ``length = 1`` (so
the routers' views read it as they read resident segments, one block a segment),
``pos0`` its first-inserted block, ``full`` its last-inserted one and ``comp`` how many
blocks hold it.
"""

import numba as nb
import numpy as np

from ..conf import JIT
from ..nrt import hold
from . import blocks as bk
from .workload import REQUEST_ID, RESPONSE_ID

REF = 0
KEY = 1
PREV = 2
NEXT = 3
HNEXT = 4
OWN = 5
FIELDS = 6

HEAD = 0
TAIL = 1
QLEN = 2
NREF = 3
NKEYS = 4
NSCHED = 5
NPEND = 6
VQ_FIELDS = 7

NOKEY = np.iinfo(np.int64).min


@nb.njit(**JIT)
def reset_pool_nb(bl, vq, i):
    """Replica i's pool as vLLM starts it: every block free and unhashed, the free queue
    ``0 … kv_blocks − 1`` from the head (a run's start, or a crash)."""
    n = bl.shape[2]
    for x in range(n):
        bl[i, REF, x] = 0
        bl[i, KEY, x] = NOKEY
        bl[i, PREV, x] = x - 1
        bl[i, NEXT, x] = x + 1 if x + 1 < n else -1
        bl[i, HNEXT, x] = -1
        bl[i, OWN, x] = -1
    vq[i, HEAD] = 0 if n > 0 else -1
    vq[i, TAIL] = n - 1
    vq[i, QLEN] = n
    vq[i, NREF] = 0
    vq[i, NKEYS] = 0
    vq[i, NSCHED] = 0
    vq[i, NPEND] = 0


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _unlink_nb(bl, vq, i, x):
    """Take block x out of replica i's free queue, wherever it is."""
    a = bl[i, PREV, x]
    c = bl[i, NEXT, x]
    if a >= 0:
        bl[i, NEXT, a] = c
    else:
        vq[i, HEAD] = c
    if c >= 0:
        bl[i, PREV, c] = a
    else:
        vq[i, TAIL] = a
    vq[i, QLEN] -= 1


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _insert_after_nb(bl, vq, i, a, x):
    """Put block x into the free queue after block a (a = -1: at the head)."""
    c = vq[i, HEAD] if a < 0 else bl[i, NEXT, a]
    bl[i, PREV, x] = a
    bl[i, NEXT, x] = c
    if a >= 0:
        bl[i, NEXT, a] = x
    else:
        vq[i, HEAD] = x
    if c >= 0:
        bl[i, PREV, c] = x
    else:
        vq[i, TAIL] = x
    vq[i, QLEN] += 1


@nb.njit(**JIT)
def first_block_nb(tab, i, key):
    """The first-inserted block holding ``key`` on replica i, or -1 (not in the hash map)."""
    h = bk.find_nb(tab, i, key)
    return tab[h].pos0 if h >= 0 else -1


@nb.njit(**JIT)
def hash_block_nb(tab, bl, vq, i, x, key):
    """Block x (referenced, unhashed) gets ``key``: appended to that key's blocks (a new
    hash-map entry when none holds it; the map has room: vllm_replica.table_slots_nb).
    Returns the table entries added."""
    bl[i, KEY, x] = key
    bl[i, HNEXT, x] = -1
    h = bk.find_nb(tab, i, key)
    added = 0
    if h >= 0:
        e = tab[h]
        bl[i, HNEXT, e.full] = x
        e.full = x
        e.comp += 1
    else:
        bk._put_nb(tab, i, key, np.int64(1), np.int64(0), 0.0, x, np.int64(0), x, np.int64(1), np.bool_(False))
        vq[i, NKEYS] += 1
        added = 1
    hold((tab, bl, vq))
    return added


@nb.njit(**JIT)
def _evict_nb(tab, bl, vq, i, x):
    """Block x (just popped, hashed) leaves the hash map and loses its key. Returns the
    table entries deleted."""
    key = bl[i, KEY, x]
    h = bk.find_nb(tab, i, key)
    e = tab[h]
    gone = 0
    if e.comp == 1:
        bk._delete_nb(tab, h)
        vq[i, NKEYS] -= 1
        gone = 1
    else:
        e.comp -= 1
        if e.pos0 == x:
            e.pos0 = bl[i, HNEXT, x]
        else:
            a = e.pos0
            while bl[i, HNEXT, a] != x:
                a = bl[i, HNEXT, a]
            bl[i, HNEXT, a] = bl[i, HNEXT, x]
            if e.full == x:
                e.full = a
    bl[i, KEY, x] = NOKEY
    bl[i, HNEXT, x] = -1
    hold((tab, bl, vq))
    return gone


@nb.njit(**JIT)
def take_nb(tab, bl, vq, rep, i, count, tail, ev):
    """Pop ``count`` blocks from the head of replica i's free queue (the caller has
    checked the queue holds them) for an attempt whose last taken block is ``tail``; a
    popped block with a key is evicted. Returns (its new last taken block, table entries
    deleted); ``ev[0]`` counts the evictions."""
    gone = 0
    for _ in range(count):
        x = vq[i, HEAD]
        _unlink_nb(bl, vq, i, x)
        if bl[i, KEY, x] != NOKEY:
            gone += _evict_nb(tab, bl, vq, i, x)
            rep[i].cached -= 1
            ev[0] += 1
        bl[i, REF, x] = 1
        vq[i, NREF] += 1
        bl[i, OWN, x] = tail
        tail = x
    return tail, gone


@nb.njit(**JIT)
def touch_nb(bl, vq, rep, i, x):
    """A hit references block x; with ref 0 it leaves the free queue (cached -> referenced)."""
    if bl[i, REF, x] == 0:
        _unlink_nb(bl, vq, i, x)
        rep[i].cached -= 1
        vq[i, NREF] += 1
    bl[i, REF, x] += 1
    hold((bl, vq, rep))


@nb.njit(**JIT)
def _unref_nb(bl, vq, rep, i, x, front):
    """One reference of block x released (last block first); at ref 0 an unhashed block
    goes to the front of the queue after ``front`` (keeping the walk order), a hashed one
    to the back. Returns the new ``front``."""
    bl[i, REF, x] -= 1
    if bl[i, REF, x] == 0:
        vq[i, NREF] -= 1
        if bl[i, KEY, x] == NOKEY:
            _insert_after_nb(bl, vq, i, front, x)
            front = x
        else:
            _insert_after_nb(bl, vq, i, vq[i, TAIL], x)
            rep[i].cached += 1
    hold((bl, vq, rep))
    return front


@nb.njit(**JIT)
def _release_taken_nb(bl, vq, rep, i, tail):
    """An attempt's taken blocks released, from its last one, ``tail``, back. Returns the
    front for its hit blocks (:func:`_unref_nb`)."""
    front = np.int64(-1)
    x = tail
    while x >= 0:
        nxt = bl[i, OWN, x]
        bl[i, OWN, x] = -1
        front = _unref_nb(bl, vq, rep, i, x, front)
        x = nxt
    hold((bl, vq, rep))
    return front


@nb.njit(**JIT)
def release_nb(bl, vq, rep, i, tail, nhit, hb, base):
    """An attempt releases its blocks, last block first: its taken blocks from ``tail``
    back, then its ``nhit`` hit blocks ``hb[base + j]``, j = nhit − 1 … 0 (as its
    admission found them: the first-inserted block of each key, which stays first while
    referenced)."""
    front = _release_taken_nb(bl, vq, rep, i, tail)
    for j in range(nhit - 1, -1, -1):
        front = _unref_nb(bl, vq, rep, i, hb[base + j], front)
    hold((bl, vq, rep, hb))


@nb.njit(**JIT)
def release_by_key_nb(tab, bl, vq, rep, i, tail, nhit, s, pk, pk_off, gbase):
    """:func:`release_nb` for an attempt of request s whose hit blocks are found again by
    their keys (each the first-inserted block of its key: a referenced block stays
    first, later ones are inserted after it): a release deferred to a step's end, by
    when another attempt of s may have been admitted elsewhere."""
    front = _release_taken_nb(bl, vq, rep, i, tail)
    for j in range(nhit - 1, -1, -1):
        x = first_block_nb(tab, i, key_of_nb(pk, pk_off, gbase, s, j))
        front = _unref_nb(bl, vq, rep, i, x, front)
    hold((tab, bl, vq, rep, pk, pk_off, gbase))


@nb.njit(**JIT)
def key_of_nb(pk, pk_off, gbase, s, j):
    """The key of block j of request s's tokens (spec22b 5-6): its prompt id's key while
    j is within the prompt's ids, else a key of its own (past the ids: the prompt's tail
    and generated tokens, the same for every attempt of s)."""
    lo = pk_off[s]
    if j < pk_off[s + 1] - lo:
        return pk[lo + j]
    return -2 - gbase[s] - j


@nb.njit(**JIT)
def sync_nb(r, vq, i):
    """The replica record's block counts as the routers and metrics read them
    (router.py's ``truth_nb`` / ``view_nb``, ``integrate_nb``, timelines):
    ``anon + idref`` = referenced blocks, ``cached`` = cached blocks (ref 0, hashed) and
    ``idref + cached`` = the distinct keys in the hash map (spec22b 21-22)."""
    r.idref = vq[i, NKEYS] - r.cached
    r.anon = vq[i, NREF] - r.idref


@nb.njit(**JIT)
def _mix(z):
    z = np.uint64(z) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@nb.njit(**JIT)
def prompt_keys_nb(seg_key, seg_len, seg_off, wl_P, wl_O, b):
    """Every request's prompt block keys (spec22b 5): ``intern(parent, id)`` — an id
    seen first under this parent is its own key; the same id under another parent gets a
    fresh key (negative, below every request's own keys). A conversation's response id
    (``workload.RESPONSE_ID + q·2^16 + j``, request q < s) is the key request q's own
    block j has (:func:`key_of_nb`): the same tokens after the same parent, so vLLM's
    chained hash is the same. Returns (pk, pk_off, ones,
    gbase): keys, offsets per request, a length-1 "segment" per block (the routers'
    views), and each request's base of own keys."""
    n = wl_P.shape[0]
    pk_off = np.zeros(n + 1, np.int64)
    gbase = np.zeros(n, np.int64)
    g = 0
    for s in range(n):
        m = 0
        for k in range(seg_off[s], seg_off[s + 1]):
            m += seg_len[k]
        pk_off[s + 1] = pk_off[s] + m
        gbase[s] = g
        g += (wl_P[s] + wl_O[s]) // b + 2
    total = pk_off[n]
    pk = np.empty(total, np.int64)
    ones = np.ones(total, np.int64)
    cap = 16
    while cap < 2 * total + 2:
        cap *= 2
    mask = cap - 1
    t_id = np.empty(cap, np.int64)     # id -> the parent key it was first seen under
    t_par = np.empty(cap, np.int64)
    t_used = np.zeros(cap, np.bool_)
    f_par = np.empty(cap, np.int64)    # (parent, id) seen under another parent -> fresh key
    f_id = np.empty(cap, np.int64)
    f_key = np.empty(cap, np.int64)
    f_used = np.zeros(cap, np.bool_)
    fresh = -2 - g - 1
    root = np.int64(NOKEY)
    for s in range(n):
        parent = root
        w = pk_off[s]
        for k in range(seg_off[s], seg_off[s + 1]):
            for d in range(seg_len[k]):
                bid = seg_key[k] + d
                if bid >= RESPONSE_ID:  # block j of an earlier request q's tokens past its prompt ids
                    q = (bid - RESPONSE_ID) // REQUEST_ID
                    key = -2 - gbase[q] - (bid - RESPONSE_ID) % REQUEST_ID  # key_of_nb(q, j)
                    pk[w] = key
                    w += 1
                    parent = key
                    continue
                h = np.int64(_mix(bid) & np.uint64(mask))
                while t_used[h] and t_id[h] != bid:
                    h = (h + 1) & mask
                if not t_used[h]:
                    t_used[h] = True
                    t_id[h] = bid
                    t_par[h] = parent
                    key = bid
                elif t_par[h] == parent:
                    key = bid
                else:
                    h2 = np.int64(_mix(bid ^ np.int64(_mix(parent) >> np.uint64(1))) & np.uint64(mask))
                    while f_used[h2] and not (f_id[h2] == bid and f_par[h2] == parent):
                        h2 = (h2 + 1) & mask
                    if not f_used[h2]:
                        f_used[h2] = True
                        f_id[h2] = bid
                        f_par[h2] = parent
                        f_key[h2] = fresh
                        fresh -= 1
                    key = f_key[h2]
                pk[w] = key
                w += 1
                parent = key
    return pk, pk_off, ones, gbase
