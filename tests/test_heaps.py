"""routesim/heaps.py and routesim/links.py through their callers, against plain Python.

The heap: the batching timers (key (time, request)) pop in sorted order, ties in time
broken by request, whatever the order of the pushes; the eviction heap's compaction
keeps exactly the live entries and pops them in key order. The lists: the batching
model's waiting and running lists hold what Python lists doing the same operations
hold, in the same order, both ways, with the head, tail and count fields agreeing (the
queue model's FIFO is held to tests/reference.py by tests/test_engine_vs_reference.py).
The segment table's owners' lists (routesim/batching/blocks.py) hold exactly each
owner's entries, through insertions, backward-shift deletions and growth.
"""

import os
import subprocess
import sys

import numpy as np

from routesim.batching import blocks, dtypes, lists, timers


def _pop_all(h, hn, w):
    out = []
    while hn[w] > 0:
        e = h[w, 0]
        out.append((float(e["t"]), int(e["req"]), int(e["token"])))
        timers.pop_nb(h, hn, w)
    return out


def test_timers_pop_in_time_then_request_order():
    rng = np.random.default_rng(7)
    h = np.zeros((timers.HEAPS, 600), dtypes.TIMER)
    hn = np.zeros(timers.HEAPS, np.int64)
    want = []
    for k in range(500):
        t = float(rng.integers(0, 40))  # many ties in time
        s = int(rng.integers(0, 1000))
        timers.push_nb(h, hn, timers.RETRIES, t, np.int64(s), np.int64(k))
        want.append((t, s, k))
    got = _pop_all(h, hn, timers.RETRIES)
    assert [g[:2] for g in got] == sorted(w[:2] for w in want)
    assert sorted(got) == sorted(want)  # every entry once, payload with its key
    assert hn[timers.DEADLINES] == 0   # the other heaps of the array untouched


def test_interleaved_pushes_and_pops_pop_the_minimum():
    rng = np.random.default_rng(3)
    h = np.zeros((timers.HEAPS, 300), dtypes.TIMER)
    hn = np.zeros(timers.HEAPS, np.int64)
    live = []
    for k in range(1000):
        if live and rng.random() < 0.45:
            top = h[timers.DEADLINES, 0]
            assert (float(top["t"]), int(top["req"])) == min(live)
            live.remove(min(live))
            timers.pop_nb(h, hn, timers.DEADLINES)
        elif len(live) < 299:
            t, s = float(rng.integers(0, 20)), int(rng.integers(0, 50))
            timers.push_nb(h, hn, timers.DEADLINES, t, np.int64(s), np.int64(k))
            live.append((t, s))
    assert int(hn[timers.DEADLINES]) == len(live)


def test_iteration_end_tree_gives_the_earliest_end_lower_replica_first():
    """The tournament tree of iteration ends, against a Python dict: after each random
    set or clear (inf) of a replica's end, the root is the (time, replica) minimum of the
    ends set, with its iteration; for fleets of 1, 3 (a tree with empty leaves), 8 and 37."""
    rng = np.random.default_rng(13)
    for nrep in (1, 3, 8, 37):
        leaf, win = timers.ends_nb(np.int64(nrep))
        ends = {}
        for k in range(600):
            i = int(rng.integers(nrep))
            if ends and rng.random() < 0.3:
                i = min((t, j) for j, (t, _) in ends.items())[1] if rng.random() < 0.5 else i
                timers.set_end_nb(leaf, win, np.int64(i), np.inf, np.int64(0))
                ends.pop(i, None)
            else:
                t = float(rng.integers(0, 12))  # many ties in time
                timers.set_end_nb(leaf, win, np.int64(i), t, np.int64(k))
                ends[i] = (t, k)
            top = leaf[win[1]]
            if ends:
                t, j = min((t, j) for j, (t, _) in ends.items())
                assert (float(top["t"]), int(top["req"]), int(top["token"])) == (t, j, ends[j][1]), (nrep, k)
            else:
                assert top["t"] == np.inf, (nrep, k)


def test_eviction_heap_compaction_keeps_the_live_entries_in_key_order():
    """A full eviction heap of replica 0 compacts on the next push: the table's live
    cached segments stay (the stale entries, of segments referenced again or gone, go)
    and pop smallest last_use first."""
    cap = 8
    tab = blocks.table_nb(64)
    rep = np.zeros(1, dtypes.REPLICA)
    heap = np.zeros((1, cap), dtypes.CACHED)
    heap_n = np.zeros(1, np.int64)
    i = np.int64(0)
    keys = [100 * (k + 1) for k in range(cap + 1)]
    last_use = [5.0, 3.0, 9.0, 1.0, 7.0, 2.0, 8.0, 6.0, 4.0]
    for key, t in zip(keys, last_use):
        blocks.add_nb(tab, rep, i, np.int64(key), np.int64(2), np.int64(0), t)
        blocks.computed_nb(tab, i, np.int64(key), np.int64(0), np.int64(2))
    for key, t in zip(keys[:cap], last_use[:cap]):
        blocks.unref_nb(tab, heap, heap_n, rep, i, np.int64(key), t)  # cached: queued
    assert heap_n[0] == cap
    for key in keys[:3]:  # referenced again: their entries are stale
        blocks.ref_nb(tab[blocks.find_nb(tab, i, np.int64(key))], rep[0], 10.0)
    blocks.unref_nb(tab, heap, heap_n, rep, i, np.int64(keys[cap]), last_use[cap])  # full: compacts
    live = sorted((t, key) for key, t in zip(keys[3:], last_use[3:]))
    assert heap_n[0] == len(live)
    got = []
    for _ in range(len(live)):
        e = heap[0, 0]
        got.append((float(e["last"]), int(e["key"])))
        blocks.evict_nb(tab, heap, heap_n, rep, i, np.int64(2))
    assert got == live


def _owner_lists(tab, owners):
    """{owner: keys} by the lists, checking each link both ways."""
    out = {}
    for o in range(owners):
        keys, prev, h = [], -1, int(tab[o]["head"])
        while h >= 0:
            e = tab[h]
            assert e["used"] and int(e["replica"]) == o and int(e["prev"]) == prev
            keys.append(int(e["key"]))
            prev, h = h, int(e["next"])
        out[o] = sorted(keys)
    return out


def test_segment_table_owner_lists_hold_each_owners_entries():
    """Random insertions (set_len_nb), deletions (by slot, and drop_nb of an owner) and
    growth (reserve_nb) in a small table, where probe chains collide and wrap: each
    owner's list holds that owner's entries, as a scan of the table finds them."""
    rng = np.random.default_rng(11)
    owners = 5
    tab = blocks.table_nb(np.int64(8))
    held = {o: set() for o in range(owners)}
    for step in range(3000):
        o = np.int64(rng.integers(owners))
        u = rng.random()
        if u < 0.55:
            tab = blocks.reserve_nb(tab, np.int64(sum(map(len, held.values()))), np.int64(1))
            key = np.int64(rng.integers(40))
            blocks.set_len_nb(tab, o, key, np.int64(1))
            held[int(o)].add(int(key))
        elif u < 0.97 and held[int(o)]:
            key = np.int64(rng.choice(sorted(held[int(o)])))
            blocks._delete_nb(tab, blocks.find_nb(tab, o, key))
            held[int(o)].discard(int(key))
        else:
            assert blocks.drop_nb(tab, o) == len(held[int(o)])
            held[int(o)] = set()
        scan = {o: sorted(int(e["key"]) for e in tab if e["used"] and e["replica"] == o) for o in range(owners)}
        assert _owner_lists(tab, owners) == scan == {o: sorted(k) for o, k in held.items()}, step
    assert tab.shape[0] < 1024  # (the test stays small: chains collide)


def test_publish_makes_the_view_the_replicas_entries():
    """publish_nb against its definition: after each publication of an owner, the view
    holds under that owner exactly the replica table's (key, length) pairs, and every
    other owner's view entries are untouched, while the replica table changes at random
    between publications (puts, length changes, deletions, growth) and owners' views are
    emptied (unpublish_nb: a replica down), in small tables whose probe chains collide
    and wrap; the owner lists stay whole, and the counts returned match."""
    rng = np.random.default_rng(5)
    owners = 4
    tab = blocks.table_nb(np.int64(8))
    view = blocks.table_nb(np.int64(8))
    truth = {o: {} for o in range(owners)}   # the replica table, key -> length
    seen = {o: {} for o in range(owners)}    # what the view should hold
    for step in range(2500):
        o = np.int64(rng.integers(owners))
        u = rng.random()
        if u < 0.4:
            tab = blocks.reserve_nb(tab, np.int64(sum(map(len, truth.values()))), np.int64(1))
            key = np.int64(rng.integers(30))
            length = np.int64(rng.integers(1, 9))
            blocks.set_len_nb(tab, o, key, length)
            truth[int(o)][int(key)] = int(length)
        elif u < 0.75 and truth[int(o)]:
            key = np.int64(rng.choice(sorted(truth[int(o)])))
            blocks._delete_nb(tab, blocks.find_nb(tab, o, key))
            del truth[int(o)][int(key)]
        elif u < 0.78:
            assert blocks.unpublish_nb(view, tab, o) == len(seen[int(o)]), step
            seen[int(o)] = {}
        else:
            view = blocks.reserve_nb(view, np.int64(sum(map(len, seen.values()))), np.int64(len(truth[int(o)])))
            put, gone = blocks.publish_nb(view, tab, o)
            old = seen[int(o)]
            new = dict(truth[int(o)])
            assert (put, gone) == (len(new.keys() - old.keys()), len(old.keys() - new.keys())), step
            seen[int(o)] = new
        got = {q: {int(e["key"]): int(e["length"]) for e in view if e["used"] and e["replica"] == q}
               for q in range(owners)}
        assert got == seen, step
        assert _owner_lists(view, owners) == {q: sorted(k) for q, k in seen.items()}, step
    assert view.shape[0] < 1024  # (the test stays small: chains collide)


def test_every_change_a_publication_carries_moves_its_owners_count():
    """The engine publishes a replica's segments only when its slot's ``mods`` moved
    (engine.py, signals): so after every operation of the replica side at random
    (admissions, computing, releases to cached or free, references again and
    extensions, evictions, crashes), each owner whose (key, length) pairs changed has a
    different count, and growing the table changes none."""
    rng = np.random.default_rng(3)
    owners, keys = 3, 24
    full = {k: int(rng.integers(1, 7)) for k in range(keys)}
    tab = blocks.table_nb(np.int64(8))
    rep = np.zeros(owners, dtypes.REPLICA)
    heap = np.zeros((owners, 512), dtypes.CACHED)
    heap_n = np.zeros(owners, np.int64)

    def pairs(o):
        return {int(e["key"]): int(e["length"]) for e in tab if e["used"] and e["replica"] == o}

    changed = 0
    for step in range(4000):
        t = float(step)
        i = np.int64(rng.integers(owners))
        key = np.int64(rng.integers(keys))
        before = [pairs(o) for o in range(owners)]
        mods = [int(tab[o]["mods"]) for o in range(owners)]
        h = blocks.find_nb(tab, i, key)
        u = rng.random()
        if u < 0.05:
            blocks.clear_replica_nb(tab, rep, heap_n, i)
        elif u < 0.2 and rep[i]["cached"] > 0:
            blocks.evict_nb(tab, heap, heap_n, rep, i, np.int64(rng.integers(1, rep[i]["cached"] + 1)))
        elif h < 0:
            used = sum(len(b) for b in before)
            tab = blocks.reserve_nb(tab, np.int64(used), np.int64(1 + 8 * (rng.random() < 0.1)))
            assert [int(tab[o]["mods"]) for o in range(owners)] == mods, step   # growth: no change
            blocks.add_nb(tab, rep, i, key, np.int64(full[int(key)]), np.int64(0), t)
        elif tab[h]["ref"] > 0 and rng.random() < 0.5:
            comp = int(tab[h]["comp"])
            blocks.computed_nb(tab, i, key, np.int64(comp), np.int64(rng.integers(comp, full[int(key)] + 1)))
        elif tab[h]["ref"] > 0:
            blocks.unref_nb(tab, heap, heap_n, rep, i, key, t)
        else:
            blocks.ref_nb(tab[h], rep[i], t)
            if tab[h]["length"] < tab[h]["full"]:
                blocks.extend_nb(tab, h, rep[i])
        for o in range(owners):
            if pairs(o) != before[o]:
                changed += 1
                assert int(tab[o]["mods"]) != mods[o], (step, o)
    assert changed > 1000   # (the operations change the pairs often)


def _walk(rep, req, head, nxt, i):
    out, s = [], rep[i][head]
    while s >= 0:
        out.append(int(s))
        s = req[s][nxt]
    return out


def test_waiting_and_running_lists_match_a_python_list():
    rng = np.random.default_rng(11)
    n = 40
    rep = np.zeros(2, dtypes.REPLICA)
    for f in ("w_head", "w_tail", "r_head", "r_tail"):
        rep[f] = -1
    req = np.zeros(n, dtypes.REQUEST)
    i = np.int64(1)
    wait, run, free = [], [], list(range(n))
    for _ in range(2000):
        op = rng.integers(0, 5)
        if op == 0 and free:
            s = free.pop(int(rng.integers(0, len(free))))
            lists.push_back_nb(rep, req, i, np.int64(s))
            wait.append(s)
        elif op == 1 and free:
            s = free.pop(int(rng.integers(0, len(free))))
            lists.push_front_nb(rep, req, i, np.int64(s))
            wait.insert(0, s)
        elif op == 2 and wait:
            assert lists.pop_front_nb(rep, req, i) == wait[0]
            run.append(wait.pop(0))
            lists.run_append_nb(rep, req, i, np.int64(run[-1]))
        elif op == 3 and wait:
            s = wait.pop(int(rng.integers(0, len(wait))))
            lists.wait_remove_nb(rep, req, i, np.int64(s))
            free.append(s)
        elif op == 4 and run:
            s = run.pop(int(rng.integers(0, len(run))))
            lists.run_remove_nb(rep, req, i, np.int64(s))
            free.append(s)
        r = rep[1]
        assert _walk(rep, req, "w_head", "w_next", 1) == wait and r["n_wait"] == len(wait)
        assert _walk(rep, req, "r_head", "r_next", 1) == run and r["n_run"] == len(run)
        assert r["w_tail"] == (wait[-1] if wait else -1) and r["r_tail"] == (run[-1] if run else -1)
        assert _walk(rep, req, "w_tail", "w_prev", 1) == wait[::-1]
        assert _walk(rep, req, "r_tail", "r_prev", 1) == run[::-1]
    assert rep[0]["n_wait"] == 0 and rep[0]["n_run"] == 0  # the other replica untouched


def test_the_eviction_loop_compiles_without_numba_warnings(tmp_path):
    """blocks.evict_nb inlines heaps.pop_nb once: with two inlined pops Numba's SSA pass
    warned ("NumbaIRAssumptionWarning: variable 'pop_nb_v…_hole_2.1' is not in scope …
    Please report") six times at every first compile, 130 lines on stderr of a new user's
    first run. Compiled in a fresh process with an empty cache (a compiled or cached
    kernel is not compiled again, and warns nothing)."""
    code = (
        "import warnings, numpy as np\n"
        "warnings.simplefilter('always')\n"
        "from routesim.batching import blocks as bk\n"
        "from routesim.batching.dtypes import CACHED, REPLICA\n"
        "tab = bk.table_nb(1024)\n"
        "bk.evict_nb(tab, np.zeros((2, 64), CACHED), np.zeros(2, np.int64), np.zeros(2, REPLICA),"
        " np.int64(0), np.int64(0))\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "NumbaIRAssumptionWarning" not in done.stderr, done.stderr[:600]
