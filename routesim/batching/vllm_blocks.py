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
blocks hold it; except for **private keys**, which ``own`` holds.

**Private keys.** Request s's block j has an *own index* ``gbase[s] + j`` (dense, in
``[0, own.shape[0])``), and its own key ``-2 - gbase[s] - j`` is that index's key
(:func:`key_of_nb`). A key only one request's blocks have, which no router ever looks up
while a block holds it, is *private*: its blocks are found again only by that request's
own later steps and re-admissions (after a preemption, on the same replica), and a
private key is held on one replica at a time. These are the own keys no later turn's
prompt holds, and the prompt keys no other prompt holds (:func:`prompt_keys_nb` gives
each the own key of its position: keys are identities only, so the renaming changes
nothing a run does); a request's router looks its prompt's keys up before any attempt of
it has run, when none is held. With retries (``max_attempts > 1``) an earlier attempt's
cached blocks may be on a replica where a retry's router looks them up: so when an
attempt leaves its scheduler unfinished (cancelled, or its replica crashed), its
request's keys stop being private (:func:`unprivate_nb`, before any retry of it is
routed): what its blocks hold enters the segment table, as it would have been there all
along for a router that reads the live table (fresh signals). A published signal is a
copy of the table made earlier, which would have held them: with retries and a
published signal no key is private (``vllm_replica.private_run_nb``). ``own[o]`` (own
indices, ``OWN_FIELDS``) int32 is the hash-map entry of private key o: ``O_REP`` the replica whose blocks hold it
(``FREE`` none; ``SHARED``: not private, the segment table holds it), ``O_FIRST`` /
``O_LAST`` its first- and last-inserted blocks and ``O_N`` how many blocks hold it: an
array access where the segment table hashes, probes and shifts. Private keys count in
``NKEYS`` as any key; they are not in ``tab``, so not in the routers' views (which no
router reads for them).
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

O_REP = 0
O_FIRST = 1
O_LAST = 2
O_N = 3
OWN_FIELDS = 4
FREE = -1    # own[o, O_REP]: no block holds private key o
SHARED = -2  # own[o, O_REP]: key o is not private (the segment table holds it)


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


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def private_nb(own, key):
    """The own index of ``key`` when it is private (``own`` holds it), else -1."""
    o = -2 - key  # (keys >= 0 and fresh keys fall outside [0, own.shape[0]))
    if o >= 0 and o < own.shape[0] and own[o, O_REP] != SHARED:
        return o
    return np.int64(-1)


@nb.njit(**JIT)
def first_block_nb(tab, own, i, key):
    """The first-inserted block holding ``key`` on replica i, or -1 (not in the hash map)."""
    o = private_nb(own, key)
    if o >= 0:
        return np.int64(own[o, O_FIRST]) if own[o, O_REP] == i else np.int64(-1)
    h = bk.find_nb(tab, i, key)
    return tab[h].pos0 if h >= 0 else -1


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _unchain_nb(bl, i, x, first, last):
    """Take block x out of the blocks holding its key on replica i (``first`` …
    ``last``, through ``HNEXT``; x not the only one). Returns the new (first, last)."""
    if first == x:
        first = bl[i, HNEXT, x]
    else:
        a = first
        while bl[i, HNEXT, a] != x:
            a = bl[i, HNEXT, a]
        bl[i, HNEXT, a] = bl[i, HNEXT, x]
        if last == x:
            last = a
    return first, last


@nb.njit(**JIT)
def hash_block_nb(tab, own, bl, vq, i, x, key):
    """Block x (referenced, unhashed) gets ``key``: appended to that key's blocks (a new
    hash-map entry when none holds it; the map has room: vllm_replica.table_slots_nb).
    Returns the table entries added."""
    bl[i, KEY, x] = key
    bl[i, HNEXT, x] = -1
    o = private_nb(own, key)
    added = 0
    if o >= 0:
        if own[o, O_REP] == i:  # (a private key is on one replica at a time: this one, or none)
            bl[i, HNEXT, own[o, O_LAST]] = x
            own[o, O_LAST] = x
            own[o, O_N] += 1
        else:
            own[o, O_REP] = i
            own[o, O_FIRST] = x
            own[o, O_LAST] = x
            own[o, O_N] = 1
            vq[i, NKEYS] += 1
        hold((tab, own, bl, vq))
        return added
    h = bk.find_nb(tab, i, key)
    if h >= 0:
        e = tab[h]
        bl[i, HNEXT, e.full] = x
        e.full = x
        e.comp += 1
    else:
        bk._put_nb(tab, i, key, np.int64(1), np.int64(0), 0.0, x, np.int64(0), x, np.int64(1), np.bool_(False))
        vq[i, NKEYS] += 1
        added = 1
    hold((tab, own, bl, vq))
    return added


@nb.njit(**JIT)
def _evict_nb(tab, own, bl, vq, i, x):
    """Block x (just popped, hashed) leaves the hash map and loses its key. Returns the
    table entries deleted."""
    key = bl[i, KEY, x]
    o = private_nb(own, key)
    gone = 0
    if o >= 0:
        if own[o, O_N] == 1:
            own[o, O_REP] = FREE
            vq[i, NKEYS] -= 1
        else:
            own[o, O_N] -= 1
            first, last = _unchain_nb(bl, i, x, np.int64(own[o, O_FIRST]), np.int64(own[o, O_LAST]))
            own[o, O_FIRST] = first
            own[o, O_LAST] = last
    else:
        h = bk.find_nb(tab, i, key)
        e = tab[h]
        if e.comp == 1:
            bk._delete_nb(tab, h)
            vq[i, NKEYS] -= 1
            gone = 1
        else:
            e.comp -= 1
            first, last = _unchain_nb(bl, i, x, e.pos0, e.full)
            e.pos0 = first
            e.full = last
    bl[i, KEY, x] = NOKEY
    bl[i, HNEXT, x] = -1
    hold((tab, own, bl, vq))
    return gone


@nb.njit(**JIT)
def unprivate_nb(tab, own, lo, hi):
    """Own indices ``lo … hi − 1`` (one request's, :func:`key_of_nb`) stop being private: an
    attempt of that request left its scheduler unfinished and may be retried, and a retry's
    router looks the request's keys up on every replica (module docstring). Each key a
    replica's blocks hold enters the segment table as the entry its blocks make (first,
    last, count; its blocks and their ``HNEXT`` chain unchanged), and every one is marked
    ``SHARED``, so that the blocks that hold it later hash into the table. Returns the
    table entries added."""
    added = 0
    for o in range(lo, hi):
        if own[o, O_REP] == SHARED:
            continue
        if own[o, O_REP] >= 0:
            bk._put_nb(tab, np.int64(own[o, O_REP]), np.int64(-2 - o), np.int64(1), np.int64(0), 0.0,
                       np.int64(own[o, O_FIRST]), np.int64(0), np.int64(own[o, O_LAST]), np.int64(own[o, O_N]),
                       np.bool_(False))
            added += 1
        own[o, O_REP] = SHARED
    hold((tab, own))
    return added


@nb.njit(**JIT)
def forget_replica_nb(own, i):
    """Replica i's pool is reset (a crash): no block of it holds a private key."""
    for o in range(own.shape[0]):
        if own[o, O_REP] == i:
            own[o, O_REP] = FREE


@nb.njit(**JIT)
def take_nb(tab, own, bl, vq, rep, i, count, tail, ev):
    """Pop ``count`` blocks from the head of replica i's free queue (the caller has
    checked the queue holds them) for an attempt whose last taken block is ``tail``; a
    popped block with a key is evicted. Returns (its new last taken block, table entries
    deleted); ``ev[0]`` counts the evictions."""
    gone = 0
    for _ in range(count):
        x = vq[i, HEAD]
        _unlink_nb(bl, vq, i, x)
        if bl[i, KEY, x] != NOKEY:
            gone += _evict_nb(tab, own, bl, vq, i, x)
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
def release_by_key_nb(tab, own, bl, vq, rep, i, tail, nhit, s, pk, pk_off, gbase):
    """:func:`release_nb` for an attempt of request s whose hit blocks are found again by
    their keys (each the first-inserted block of its key: a referenced block stays
    first, later ones are inserted after it): a release deferred to a step's end, by
    when another attempt of s may have been admitted elsewhere."""
    front = _release_taken_nb(bl, vq, rep, i, tail)
    for j in range(nhit - 1, -1, -1):
        x = first_block_nb(tab, own, i, key_of_nb(pk, pk_off, gbase, s, j))
        front = _unref_nb(bl, vq, rep, i, x, front)
    hold((tab, own, bl, vq, rep, pk, pk_off, gbase))


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


LINE = 8
"""Consecutive ids a slot of :func:`prompt_keys_nb`'s table keeps together (:func:`_slot_nb`)."""


@nb.njit(inline="always", **JIT)  # inlined: see routesim/nrt.py
def _slot_nb(bid, mask):
    """The home slot of block id ``bid`` in a table of ``mask + 1`` slots. Ids that differ
    only in their last three bits (a prompt's consecutive blocks: ``seg_key + d``) get
    consecutive slots, so eight of them share one cache line of each int64 field. Hashing
    each id alone would cost a miss from memory for every block, since a long run's
    tables are hundreds of MB."""
    hi = _mix(bid // LINE) * np.uint64(LINE)
    return np.int64((hi + np.uint64(bid % LINE)) & np.uint64(mask))


@nb.njit(**JIT)
def prompt_keys_nb(seg_key, seg_len, seg_off, wl_P, wl_O, b, private):
    """Every request's prompt block keys (spec22b 5): ``intern(parent, id)`` — an id
    seen first under this parent is its own key; the same id under another parent gets a
    fresh key (negative, below every request's own keys). A conversation's response id
    (``workload.RESPONSE_ID + q·2^16 + j``, request q < s) is the key request q's own
    block j has (:func:`key_of_nb`): the same tokens after the same parent, so vLLM's
    chained hash is the same. With ``private`` (no retries: the module's "Private
    keys"), a key of one prompt only is renamed the own key of its position, and the
    own keys no prompt holds are private. Returns (pk, pk_off, gbase, own, kept):
    keys, offsets per request (the routers' views read each key as a one-block segment),
    each request's base of own indices, the private keys' entries (none held), and how many of
    the requests' blocks 0 … (P + O) // b have a key that is not private (the segment
    table's keys, counted once per request whose blocks have it)."""
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
    cap = 16
    while cap < total + total // 2 + 2:  # at most two thirds full
        cap *= 2
    mask = cap - 1
    t_id = np.empty(cap, np.int64)     # id -> the parent key it was first seen under
    t_par = np.empty(cap, np.int64)
    t_n = np.zeros(cap, np.int8)       # prompt blocks with the key bid: 0 (slot unused), 1, 2 (more)
    f_par = np.empty(cap, np.int64)    # (parent, id) seen under another parent -> fresh key
    f_id = np.empty(cap, np.int64)
    f_key = np.empty(cap, np.int64)
    f_n = np.zeros(cap, np.int8)       # prompt blocks with that fresh key: 0 (slot unused), 1, 2 (more)
    at = np.empty(total, np.int64)     # the slot of each prompt block's key (-1: an own key)
    own = np.full((g, OWN_FIELDS), FREE if private else SHARED, np.int32)
    shared = 0  # own keys a prompt holds
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
                    if own[-2 - key, O_REP] != SHARED:  # a later turn's router looks it up
                        own[-2 - key, O_REP] = SHARED
                        shared += 1
                    at[w] = -1
                    pk[w] = key
                    w += 1
                    parent = key
                    continue
                h = _slot_nb(bid, mask)
                while t_n[h] != 0 and t_id[h] != bid:
                    h = (h + 1) & mask
                if t_n[h] == 0:
                    t_n[h] = 1
                    t_id[h] = bid
                    t_par[h] = parent
                    key = bid
                    at[w] = h
                elif t_par[h] == parent:
                    t_n[h] = 2
                    key = bid
                    at[w] = h
                else:
                    h2 = np.int64(_mix(bid ^ np.int64(_mix(parent) >> np.uint64(1))) & np.uint64(mask))
                    while f_n[h2] != 0 and not (f_id[h2] == bid and f_par[h2] == parent):
                        h2 = (h2 + 1) & mask
                    if f_n[h2] != 0:
                        f_n[h2] = 2
                    else:
                        f_n[h2] = 1
                        f_id[h2] = bid
                        f_par[h2] = parent
                        f_key[h2] = fresh
                        fresh -= 1
                    key = f_key[h2]
                    at[w] = cap + h2
                pk[w] = key
                w += 1
                parent = key
    if not private:  # every block's key is in the table
        return pk, pk_off, gbase, own, g - n  # (g: (P + O) // b + 2 a request)
    kept = total + shared  # the prompts' blocks and the own keys a prompt holds, but ...
    for s in range(n):  # ... a key of one prompt only: its position's own key
        for w in range(pk_off[s], pk_off[s + 1]):
            h = at[w]
            if h >= 0 and (t_n[h] if h < cap else f_n[h - cap]) == 1:
                pk[w] = -2 - gbase[s] - (w - pk_off[s])
                kept -= 1
    return pk, pk_off, gbase, own, kept
