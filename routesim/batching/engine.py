"""The batching model's engine (token-model.md §2–§7), compiled: the event loop.

``run_batch`` is only the loop over runs (Python threads); ``run_one_nb`` simulates one
run in exact event time: at each time T at which anything happens, in the order of
§4 — (1) iteration ends, replicas in id order; (2) scenario events; (3) attempt
failures (crashes, black holes, timeouts), observed in request order: breaker, then
the retry decision; (4) breaker re-admissions; (5) signal publications; (6) routing:
the front door's FIFOs, then retries and arrivals due at T, in request order; (7)
iteration starts of idle replicas with work. Everything up to the stop is processed
(§7 Drain): past the horizon the run goes on while a cohort request is in the system,
to horizon + drain at most; counters of arrivals and final outcomes (``settle_nb``)
say how many are in it, without a scan.

Per-run scratch (requests, running lists, the block table and eviction heaps) is
allocated inside the run, so memory in flight is (threads × one run), whatever the
chunk size; the block table holds only resident id'd blocks (see ``blocks``).
"""

import math
from concurrent.futures import ThreadPoolExecutor

import numba as nb
import numpy as np

from .. import ieee_math
from ..conf import JIT
from ..nrt import hold
from . import blocks as bk
from . import ingress
from . import pd_engine as pe
from . import pools
from . import scheduler as sc
from . import timers as tm
from .dtypes import (CACHED, CLUSTER_SAMPLE, KEPT, REQUEST, SAMPLE, TIMER, VIEW, Admission, EventKind, Fate,
                     Signals, State, start_replica_nb, start_request_nb)
from .metrics import finish_metrics_nb
from .replica import g_now_nb, integrate_nb, segments_most_nb, settle_nb
from .router import add_local_nb, observe_failure_nb, place_nb, route_nb, truth_nb, view_nb

FIRST = np.bool_(False)
"""``route_nb``/``place_nb``'s retry flag for a first attempt: a typed value, not the
literal ``False`` (Numba would compile them again for a literal argument)."""
NONE = np.int64(0)
"""A typed zero, for the same reason."""
UNPUBLISHED = np.int64(1 << 40)
"""``pub_mods``' value for a replica whose segments the view does not hold as they were
at a count of changes: out of an int32's range, so never equal to ``tab[i].mods``."""


@nb.njit(**JIT)
def _end_live(e, r):
    """Is iteration end e (a TIMER record) still replica record r's iteration in
    progress (not abandoned)?"""
    return r.busy and r.started == e.token and r.end_ms == e.t


@nb.njit(**JIT)
def _sort_ints(a, n):
    """Sort a[:n] in place (insertion sort: failures at one time are few)."""
    for k in range(1, n):
        x = a[k]
        m = k - 1
        while m >= 0 and a[m] > x:
            a[m + 1] = a[m]
            m -= 1
        a[m + 1] = x


@nb.njit(**JIT)
def _any_ejected(n_ej):
    """Has any router a replica ejected by its breaker? ``n_ej`` (routers,) counts each
    router's ejected replicas."""
    ejected = False
    for ro in range(n_ej.shape[0]):
        ejected = ejected or n_ej[ro] > 0
    hold(n_ej)
    return ejected


@nb.njit(**JIT)
def _mark_nb(marked, dirty, n_dirty, i):
    """Replica i (none when i < 0) may start an iteration in phase 7 of this time: listed
    once in ``dirty[:n_dirty]`` (``marked`` (replicas,) says who is listed). Returns
    the list's new length."""
    n = n_dirty
    if i >= 0 and not marked[i]:
        marked[i] = True
        dirty[n] = i
        n += 1
    hold((marked, dirty))
    return n


@nb.njit(**JIT)
def _window_nb(rw, rw_head, n_done, done_t, done_ro, done_log, since):
    """rate_weighted's window: the completions ``done_log[:, rw_head:n_done]`` at times
    ``done_t`` <= ``since`` (t - window_ms) leave their router's counts ``rw`` (routers,
    replicas); the window's completions are then those in (t - window, t]. Returns the
    new head."""
    while rw_head < n_done and done_t[rw_head] <= since:
        rw[done_ro[rw_head], done_log[0, rw_head]] -= 1
        rw_head += 1
    hold((rw, done_t, done_ro, done_log))
    return rw_head


@nb.njit(**JIT)
def _joins_nb(rep, req, timers, tn, t, marked, dirty, n_dirty):
    """Phase 7's first part: the attempts in transit whose join time is t join their
    replicas' waiting queues (ingress.join_nb), in (time, request) order, each replica
    then listed to start (``dirty[:n_dirty]``). Returns the list's new length."""
    i = ingress.join_nb(rep, req, timers, tn, t)
    while i >= 0:
        n_dirty = _mark_nb(marked, dirty, n_dirty, i)
        i = ingress.join_nb(rep, req, timers, tn, t)
    hold((rep, req, timers, tn, marked, dirty))
    return n_dirty


@nb.njit(**JIT)
def _completed_nb(done_log, done_ro, done_t, req, rw, brk, ain, rin, i, t, before, n_done, p, timers, tn, wl_next,
                  wl_think):
    """Phase 1: the completions ``done_log[:, before:n_done]`` (replica, request) of replica
    i's iteration ending at t, each with its router (``done_ro``) and time (``done_t``):
    counted in rate_weighted's window (``rw`` (routers, replicas)), resetting the breaker's
    count (``brk``), out of the attempts (``ain``) and retries (``rin``) in flight; a
    conversation's next turn (``wl_next``, empty without conversations) is due
    ``wl_think`` ms after the response reaches the client, if before the horizon
    (docs/model.md "Conversations")."""
    for c in range(before, n_done):
        s = done_log[1, c]
        ro = req[s].router
        done_ro[c] = ro
        done_t[c] = t
        rw[ro, i] += 1
        brk[ro, i] = 0  # a completion resets the breaker's count
        ain[ro] -= 1
        if req[s].tries >= 2:
            rin[ro] -= 1
        nx = wl_next[s] if wl_next.shape[0] > 0 else -1
        if nx >= 0 and (t + p.client_overhead_ms) + wl_think[nx] < p.horizon_ms:
            tm.push_nb(timers, tn, tm.TURNS, (t + p.client_overhead_ms) + wl_think[nx], nx, NONE)
    hold((done_log, done_ro, done_t, req, rw, brk, ain, rin, timers, tn, wl_next, wl_think))


@nb.njit(**JIT)
def _due_nb(timers, tn, kind, req, t, due):
    """Phase 6: the requests whose timer of ``kind`` (tm.RETRIES, tm.TURNS) is due at t
    into ``due``, in request order; their count."""
    n = 0
    while tn[kind] > 0 and tm.top_nb(timers, tn, kind, req) == t:
        due[n] = timers[kind, 0].req
        tm.pop_nb(timers, tn, kind)
        n += 1
    _sort_ints(due, n)
    hold((timers, tn, req, due))
    return n


@nb.njit(**JIT)
def _events_nb(sched, S, rep, cnt, victims, events, ev, t, p, fail_req, fail_rep, fail_crash, n_fail):
    """Phase 2: the scenario events at t, in order, from ``events[ev]`` (EVENT). A crash
    (the scheduler's, ``sched`` and ``S``, whose ``rep``, ``cnt`` and ``victims`` these
    are) adds its failed attempts to ``fail_req[n_fail:]`` (``fail_rep``, ``fail_crash``
    by request). Returns the next event, the failures' new count and whether a replica
    recovered (it is not ready before ``ready_ms``)."""
    recovered = False
    while ev < events.shape[0] and events[ev].t_ms == t:
        e = events[ev]
        i = e.replica
        if e.kind == EventKind.SLOWDOWN:
            rep[i].slowdown = e.value
        elif e.kind == EventKind.FAIL:
            if rep[i].healthy:
                integrate_nb(rep[i], t, p)
                if p.prefill_replicas > 0:  # first the pairs it is one side of (pd_engine)
                    n_fail = pe.crash_nb(sched, S, i, t, p, fail_req, fail_rep, fail_crash, n_fail)
                nv, gone = sc.crash_nb(sched, S, i, t, p)  # its failed attempts in victims
                cnt[0] -= gone
                for v in range(nv):
                    s = victims[v]
                    fail_req[n_fail] = s
                    fail_rep[s] = i
                    fail_crash[s] = True
                    n_fail += 1
        elif e.kind == EventKind.FAIL_FAST:
            if rep[i].healthy:
                rep[i].fail_fast = True
        elif e.kind == EventKind.RECOVER:
            r = rep[i]
            if not r.healthy:
                r.healthy = True
                r.fail_fast = False
                r.cold = True
                r.t_up = t
                r.ready_ms = t + p.ready_delay_ms
                r.t_e = r.ready_ms
                recovered = True
            elif r.fail_fast:
                r.fail_fast = False
        ev += 1
    hold((rep, cnt, victims, events, fail_req, fail_rep, fail_crash))
    return ev, n_fail, recovered


@nb.njit(**JIT)
def _timeouts_nb(sched, S, rep, req, timers, tn, t, p, cum, fail_req, fail_rep, fail_crash, n_fail):
    """Phase 3, its first part: the black-hole failures and the deadlines due at t (timer
    heaps ``timers``/``tn``): each failing attempt taken off its replica (the scheduler's
    cancel, ``sched`` and ``S``, whose ``rep`` and ``req`` these are), counted in ``cum``
    (timeouts, first-token timeouts) and added to ``fail_req[n_fail:]``; a first-token
    deadline met leaves the whole deadline. Returns the failures' new count."""
    while tn[tm.BLACK_HOLES] > 0 and tm.top_nb(timers, tn, tm.BLACK_HOLES, req) == t:
        s = timers[tm.BLACK_HOLES, 0].req
        tm.pop_nb(timers, tn, tm.BLACK_HOLES)
        i = req[s].replica
        _cancel_nb(sched, S, i, s, t, p)  # (with pools: a hand-off's prefill side leased)
        fail_req[n_fail] = s
        fail_rep[s] = i
        fail_crash[s] = False
        n_fail += 1
    while tn[tm.DEADLINES] > 0 and tm.top_nb(timers, tn, tm.DEADLINES, req) == t:
        s = timers[tm.DEADLINES, 0].req
        tm.pop_nb(timers, tn, tm.DEADLINES)
        q = req[s]
        fails = True
        if q.ft_deadline < q.deadline and t == q.ft_deadline:  # its first-token deadline
            if not math.isnan(q.first_ms):  # it has its first token: only the whole deadline is left
                if not np.isinf(q.deadline):
                    tm.push_nb(timers, tn, tm.DEADLINES, q.deadline, s, q.tries)
                fails = False
            else:
                cum[5] += 1
        else:
            cum[4] += 1
        if fails:
            i = q.replica
            integrate_nb(rep[i], t, p)
            _cancel_nb(sched, S, i, s, t, p)
            fail_req[n_fail] = s
            fail_rep[s] = i
            fail_crash[s] = False
            n_fail += 1
    hold((rep, req, timers, tn, cum, fail_req, fail_rep, fail_crash))
    return n_fail


@nb.njit(**JIT)
def _cancel_nb(sched, S, i, s, t, p):
    """A deadline or a black hole takes request s's attempt off replica i at t: the
    scheduler's cancel, or with pools pd_engine.cancel_nb (wherever the attempt is on
    its way)."""
    if p.prefill_replicas > 0:
        pe.cancel_nb(sched, S, i, s, t, p)
    else:
        sc.cancel_nb(sched, S, i, s, t, p)


@nb.njit(**JIT)
def _observe_nb(p, t, req, fail_req, fail_rep, fail_crash, n_fail, window_open, past, failed, brk, ej_until,
                times_ej, n_ej, rin, ain, timers, tn, cum, mt):
    """Phase 3, its last part: the ``n_fail`` failures of ``fail_req`` observed at t, in
    request order (sorted here): their wasted tokens of the window, then each one's
    breaker count and retry decision (router.observe_failure_nb)."""
    cum[1] += n_fail
    _sort_ints(fail_req, n_fail)
    for f in range(n_fail):
        s = fail_req[f]
        q = req[s]
        if window_open:  # its tokens of the window: after the warm-up, up to the horizon
            mt.wasted_tokens += (q.gh if past else q.g) - q.gw
        observe_failure_nb(p, s, fail_rep[s], fail_crash[s], t, req, failed, brk, ej_until,
                           times_ej, n_ej, rin, ain, timers, tn, ej_until.shape[1], mt)
    hold((req, fail_req, fail_rep, fail_crash, failed, brk, ej_until, times_ej, n_ej, rin, ain, timers, tn, cum))


@nb.njit(**JIT)
def _readmit_nb(ej_until, brk, n_ej, t):
    """Phase 4: replicas whose ejection ends by t (``ej_until`` (routers, replicas) ms) are
    re-admitted by their router, its breaker's count reset (``brk``, ``n_ej``)."""
    for i in range(ej_until.shape[1]):
        for ro in range(ej_until.shape[0]):
            if ej_until[ro, i] <= t:
                ej_until[ro, i] = np.inf
                brk[ro, i] = 0
                n_ej[ro] -= 1
    hold((ej_until, brk, n_ej))


@nb.njit(**JIT)
def _publish_nb(rep, tab, snap, loc, pub, pub_k, pub_mods, locc, p, t, next_pub, snap_n, loc_n):
    """Phase 5: the signal publications due at t, in replica order, replica ``next_pub``
    first (replicas publish in turn: (i+1)·period/N + k·period, ``pub_k`` (replicas,) k so
    far): ``pub`` (replicas, 4) their (o, τ, referenced, resident) and ``snap`` their
    resident segments (``pub_mods``: the table's count of changes then); with
    periodic_local each router's own additions (``loc``, ``locc``) dropped. Returns the
    next to publish and the entries now in ``snap`` and ``loc`` (room made before)."""
    nrep = rep.shape[0]
    R = locc.shape[0]
    local = p.signal_mode == Signals.PERIODIC_LOCAL
    while ((next_pub + 1) * p.period_ms) / nrep + pub_k[next_pub] * p.period_ms == t:
        i = next_pub
        next_pub = (next_pub + 1) % nrep
        pub_k[i] += 1
        if rep[i].healthy:  # a replica that is down publishes its empty state
            truth_nb(rep, i, pub, i)
            if tab[i].mods != pub_mods[i]:  # its resident segments, if any changed since
                put, gone = bk.publish_nb(snap, tab, i)
                snap_n += put - gone          # (room made before this time)
                pub_mods[i] = tab[i].mods
        else:
            snap_n -= bk.unpublish_nb(snap, tab, i)
            pub_mods[i] = UNPUBLISHED
            for c in range(4):
                pub[i, c] = 0
        if local:
            for ro in range(R):
                loc_n -= bk.drop_nb(loc, ro * nrep + i)
                for c in range(3):
                    locc[ro, i, c] = 0
    hold((rep, tab, snap, loc, pub, pub_k, pub_mods, locc))
    return next_pub, snap_n, loc_n


@nb.njit(**JIT)
def _gap_rows_nb(p, nrep):
    """Rows of inter-token gaps one time can add at most: a replica delivers tokens of at
    most ``max_batch`` sequences at a time (one iteration end, or one batch output with
    asynchronous scheduling), each token at most one row (most share one): at most the
    largest replica's ``max_batch`` (``most_batch``) each."""
    return nrep * p.most_batch


@nb.njit(**JIT)
def _gap_room_nb(gap_ms, gap_n, used, extra):
    """The inter-token gap arrays, or twice as large copies, with room for ``extra`` more.
    (Called between times, outside the event loop proper: an array variable reassigned
    inside that loop costs Numba reference counting at every pass.)"""
    if used + extra <= gap_ms.shape[0]:
        return gap_ms, gap_n
    cap = gap_ms.shape[0]
    while used + extra > cap:
        cap *= 2
    ms = np.empty(cap)
    n = np.empty(cap, np.int64)
    ms[:used] = gap_ms[:used]
    n[:used] = gap_n[:used]
    return ms, n


@nb.njit(**JIT)
def _next_time_nb(p, rep, req, events, ev, wl_t, k, nf, closed, freed, rel_t, rel_h, rel_n, ready_pending, prev_t,
                  timers, tn, n_ej, ej_until, periodic, next_pub, pub_k, front_ms, f_head, sent, paired, pdx):
    """The next time anything but an iteration end happens (ms; inf: nothing), and
    whether a recovered replica is still not ready: the next arrival (a closed client
    with N in flight sends when a slot frees), scenario event, readiness, timer,
    re-admission, publication, front-door deadline and, with pools, change on the links
    or end of a lease."""
    nrep = rep.shape[0]
    R = p.routers
    t = np.inf
    if k < nf:  # the next arrival; a closed client with N in flight sends when a slot frees
        if not closed or k - freed < p.max_in_flight:
            t = wl_t[k]
        elif rel_h < rel_n:
            t = rel_t[rel_h]
    if ev < events.shape[0] and events[ev].t_ms < t:
        t = events[ev].t_ms
    if ready_pending:
        ready_pending = False
        for i in range(nrep):
            if rep[i].ready_ms > prev_t:
                ready_pending = True
                t = min(t, rep[i].ready_ms)
    for w in range(tm.HEAPS):
        if tn[w] > 0:
            t = min(t, tm.top_nb(timers, tn, w, req))
    if _any_ejected(n_ej):
        for ro in range(R):
            for i in range(nrep):
                t = min(t, ej_until[ro, i])
    if periodic:
        t = min(t, ((next_pub + 1) * p.period_ms) / nrep + pub_k[next_pub] * p.period_ms)
    if not np.isinf(front_ms):
        for ro in range(R):
            if f_head[ro] >= 0:
                t = min(t, sent[f_head[ro]] + front_ms)
    if paired:
        t = min(t, pe.next_time_nb(pdx))
    hold((rep, req, events, wl_t, rel_t, timers, tn, n_ej, ej_until, pub_k, f_head, sent))
    return t, ready_pending


@nb.njit(**JIT)
def _pd_phase1_nb(S, pdx, t, p, marked, dirty, n_dirty, timers, tn):
    """Phase 1's end with pools (pd_engine.phase1_nb): transfers that end at t, then
    hand-offs (in transit on the ``TRANSIT`` heap with an ingress time); the replicas
    given work are marked for phase 7. Returns the marked count."""
    m = pe.phase1_nb(S, pdx, t, p, timers, tn)
    for k in range(m):
        n_dirty = _mark_nb(marked, dirty, n_dirty, pdx.touched[k])
    return n_dirty


@nb.njit(**JIT)
def _pd_wake_nb(pdx, marked, dirty, n_dirty):
    """With pools, the replicas whose blocks a lease's end, a crash or a cancellation
    freed at this time (pd_engine's ``wake``) are marked for phase 7. Returns the marked
    count."""
    return _wake_nb(pdx.wake, marked, dirty, n_dirty)


@nb.njit(**JIT)
def _wake_nb(wake, marked, dirty, n_dirty):
    """:func:`_pd_wake_nb` with the array as an argument."""
    for i in range(wake.shape[0]):
        if wake[i]:
            wake[i] = False
            n_dirty = _mark_nb(marked, dirty, n_dirty, i)
    hold(wake)
    return n_dirty


@nb.njit(**JIT)
def _route_any_nb(tab, snap, loc, pub, locc, rep, req, p, s, t, retry, sent, wl_P, wl_key, seg_key, seg_len, seg_off,
                  ru, ru_pos, cursor, rw, ej_until, failed, cand, views, pool, paired, pdx):
    """Phase 6's decision for request s: (replica, its decode replica or -1, ru_pos),
    by router.route_nb, or with pools by pd_engine.route_pair_nb."""
    if paired:
        return pe.route_pair_nb(tab, snap, loc, pub, locc, rep, req, p, s, t, retry, wl_P, wl_key, seg_key, seg_len,
                                seg_off, ru, ru_pos, cursor, rw, ej_until, failed, cand, views, pdx)
    i, ru_pos = route_nb(tab, snap, loc, pub, locc, rep, req, p, s, t, retry, sent, wl_P, wl_key, seg_key, seg_len,
                         seg_off, ru, ru_pos, cursor, rw, ej_until, failed, cand, views, pool)
    return i, -1, ru_pos


@nb.njit(**JIT)
def _pd_paired_nb(snap, loc, locc, rep, req, p, s, i_d, t, nrep, seg_key, seg_len, seg_off):
    """Request s placed on its prefill replica at t is paired with decode replica i_d
    (pd_engine.paired_nb); with periodic_local its router counts it there too. Returns
    the view entries added (none when i_d is -1: not paired)."""
    if i_d < 0:
        return np.int64(0)
    pe.paired_nb(rep, req, p, s, i_d, t)
    if p.signal_mode == Signals.PERIODIC_LOCAL:
        return add_local_nb(snap, loc, locc, req, p, s, i_d, nrep, seg_key, seg_len, seg_off)
    return np.int64(0)


@nb.njit(**JIT)
def _close_window_nb(rep, req):
    """The run goes past the horizon: each attempt in flight keeps the tokens it had
    emitted by then (``gh``: wasted tokens count only those of the window)."""
    for s in range(req.shape[0]):
        if tm.in_flight_nb(req[s]):
            req[s].gh = g_now_nb(rep, req, s)


@nb.njit(**JIT)
def _requests_nb(p, wl_t, wl_P, wl_O, wl_key, nf):
    """The run's requests (requests,) REQUEST, each at its start; ``nf`` first turns."""
    n = wl_t.shape[0]
    R = p.routers
    req = np.empty(n, REQUEST)
    for k in range(n):
        q = req[k]
        start_request_nb(q)
        q.P = wl_P[k]
        q.O = wl_O[k]
        q.A = wl_O[k] if p.exact_output else p.allowance
        q.cohort = k < nf and wl_t[k] >= p.warmup_ms  # arrivals are all before the horizon; a follow-up's: sent
        q.router = min(int(math.floor(wl_key[k] * R)), R - 1)
    return req


@nb.njit(**JIT)
def _clock_nb(p, n, nrep):
    """What is due when, for ``n`` requests on ``nrep`` replicas, empty: the timer heaps
    (timers, tn), the iteration ends' tree (ends, e_win), ``dirty``/``marked`` (replicas,)
    and ``cum`` (6,)."""
    # timers: deadlines, black-hole failures, retries due
    timers = np.zeros((tm.HEAPS, max(n * p.max_attempts, nrep) + 16), TIMER)
    tn = np.zeros(tm.HEAPS, np.int64)
    ends, e_win = tm.ends_nb(nrep)  # iteration ends: one per replica at most
    dirty = np.empty(nrep, np.int64)   # replicas that may start an iteration at t
    marked = np.zeros(nrep, np.bool_)
    cum = np.zeros(6, np.int64)  # retries, failures, sheds, rejections, timeouts, first-token timeouts (timelines)
    return timers, tn, ends, e_win, dirty, marked, cum


@nb.njit(**JIT)
def _routers_nb(p, n, rep):
    """The routers' arrays for ``n`` requests on ``rep`` (replicas,), at the start: (cursor,
    brk, ej_until, times_ej, n_ej, rw, ain, rin, f_head, f_tail, failed, cand, views, pool)."""
    nrep = rep.shape[0]
    R = p.routers
    cursor = np.zeros(R, np.int64)
    brk = np.zeros((R, nrep), np.int64)
    ej_until = np.full((R, nrep), np.inf)
    times_ej = np.zeros((R, nrep), np.int64)
    n_ej = np.zeros(R, np.int64)
    rw = np.zeros((R, nrep), np.int64)
    ain = np.zeros(R, np.int64)      # attempts in flight
    rin = np.zeros(R, np.int64)      # retries in flight (placed or waiting out their backoff)
    f_head = np.full(R, -1, np.int64)
    f_tail = np.full(R, -1, np.int64)
    failed = np.full((n, p.max_attempts), -1, np.int64)
    cand = np.empty(nrep, np.int64)
    views = np.zeros(nrep, VIEW)      # a router's view of each candidate at a decision
    pool = pools.members_nb(rep, pools.ROUTED)  # the replicas the routers choose among
    return cursor, brk, ej_until, times_ej, n_ej, rw, ain, rin, f_head, f_tail, failed, cand, views, pool


@nb.njit(**JIT)
def _board_nb(p, nrep):
    """The signals' arrays (§3) for ``nrep`` replicas, nothing published yet: (pub, pub_k,
    pub_mods, locc, snap, loc)."""
    periodic = p.signal_mode != Signals.FRESH
    local = p.signal_mode == Signals.PERIODIC_LOCAL
    pub = np.zeros((nrep, 4), np.int64)          # o, τ, referenced, resident id'd blocks
    pub_k = np.zeros(nrep, np.int64)             # publications so far
    pub_mods = np.full(nrep, UNPUBLISHED)        # tab[i].mods when i's segments were last published
    locc = np.zeros((p.routers, nrep, 3), np.int64)      # o, τ, resident blocks added
    snap = bk.table_nb(max(64, nrep) if periodic else 1)  # published resident segments, owner i
    loc = bk.table_nb(max(64, p.routers * nrep) if local else 1)  # routed segments, owner ro·N + i
    return pub, pub_k, pub_mods, locc, snap, loc


@nb.njit(**JIT)
def _client_nb(p, n, conversations):
    """The client's and the outcomes' arrays for ``n`` requests (``conversations``: with
    follow-up turns): (sent, rel_t, rel_c, due_turn, done_ro, done_t, fail_req, fail_rep,
    fail_crash)."""
    # the client (docs/model.md "Closed-loop clients"): request k's send time, and with
    # max_in_flight = N > 0 the times its slots come free (final outcomes + overhead)
    sent = np.full(n, np.nan)            # ms; wl_t[k] in an open loop
    closed = p.max_in_flight > 0
    rel_t = np.empty(n if closed else 0)  # (time, slots) in time order: each request frees one
    rel_c = np.empty(n if closed else 0, np.int64)
    due_turn = np.empty(n if conversations else 0, np.int64)  # follow-up turns due at one time
    done_ro = np.empty(n, np.int64)         # a completion's router
    done_t = np.empty(n)
    fail_req = np.empty(n, np.int64)     # failures observed at one time, then sorted
    fail_rep = np.full(n, -1, np.int64)  # by request: the replica it failed on, -1 front door
    fail_crash = np.zeros(n, np.bool_)
    return sent, rel_t, rel_c, due_turn, done_ro, done_t, fail_req, fail_rep, fail_crash


@nb.njit(**JIT)
def _route_front_nb(tab, snap, loc, pub, locc, heap, heap_n, rep, req, p, t, sent, wl_P, wl_key, seg_key, seg_len,
                    seg_off, ru, ru_pos, cursor, rw, ej_until, failed, cand, views, pool, pdx, f_head, f_tail, timers,
                    tn, ain, cum, mt, marked, dirty, n_dirty, n_front, loc_n):
    """Phase 6, first: the front doors' FIFOs (``f_head``/``f_tail`` (routers,)), in request
    order of their heads, each routed at t until its router finds no room (blocked).
    Returns (n_front, ru_pos, n_dirty, loc_n) as they become."""
    nrep = rep.shape[0]
    local = p.signal_mode == Signals.PERIODIC_LOCAL
    paired = p.prefill_replicas > 0
    blocked = 0
    best = 0
    while best >= 0:
        best = -1
        for ro in range(p.routers):
            if f_head[ro] >= 0 and (blocked >> ro) & 1 == 0 and (best < 0 or f_head[ro] < f_head[best]):
                best = ro
        if best >= 0:
            s = f_head[best]
            i, i_d, ru_pos = _route_any_nb(tab, snap, loc, pub, locc, rep, req, p, s, t, FIRST, sent, wl_P,
                                           wl_key, seg_key, seg_len, seg_off, ru, ru_pos, cursor, rw, ej_until,
                                           failed, cand, views, pool, paired, pdx)
            if i == -2:
                blocked |= 1 << best
            else:
                f_head[best] = req[s].f_next
                if f_head[best] < 0:
                    f_tail[best] = -1
                n_front -= 1
                place_nb(tab, heap, heap_n, rep, req, p, s, i, t, FIRST, sent, timers, tn, cursor, ain,
                         cum, mt)
                n_dirty = _mark_nb(marked, dirty, n_dirty, i)
                loc_n += _pd_paired_nb(snap, loc, locc, rep, req, p, s, i_d, t, nrep, seg_key, seg_len, seg_off)
                if local and i >= 0:  # room made before this time
                    loc_n += add_local_nb(snap, loc, locc, req, p, s, i, nrep, seg_key, seg_len, seg_off)
    return n_front, ru_pos, n_dirty, loc_n


@nb.njit(**JIT)
def run_one_nb(p, rep, events, wl_t, wl_P, wl_O, wl_key, seg_key, seg_len, seg_off, ru, mt,
               sample_t, samples, cluster, keep, sched, wl_next, wl_think):
    """Simulate one run; fills ``rep``'s counters and the metrics record ``mt``.

    wl_* (requests,) the workload (``wl_t`` ms: arrivals, or with ``p.max_in_flight = N > 0``
    a closed-loop client's intended sends: request k is sent, in phase 6, at ``wl_t[k]`` or
    when one of its N slots frees, in request order; docs/model.md "Closed-loop clients");
    wl_next/wl_think (requests,) or empty: conversations (docs/model.md "Conversations"):
    request k's next turn (-1: none) and a follow-up's think time (ms); a follow-up has
    ``wl_t`` inf, after every first turn, and is sent when its think time is up.
    seg_key/seg_len the requests' prompt segments,
    request k's at ``seg_off[k]:seg_off[k + 1]`` (offsets into the flat arrays).
    A timeline (empty arrays otherwise): at each of ``sample_t`` (ms, ascending) the
    state after everything at times ≤ it goes to ``samples`` (samples, replicas) SAMPLE
    and ``cluster`` (samples,) CLUSTER_SAMPLE, and ``keep`` (requests,) KEPT gets
    what became of each request. ``sched``: the state of the run's scheduler
    (``scheduler.state``, with the segments it gives as seg_key/seg_len/seg_off): the
    loop asks the scheduler through :mod:`.scheduler`'s operations, which Numba picks by
    its type at compile time, so a run compiles its own scheduler's functions only.
    """
    n = wl_t.shape[0]
    nf = np.searchsorted(wl_t, np.inf)  # first turns (open-loop arrivals); then follow-up turns
    nrep = rep.shape[0]
    req = _requests_nb(p, wl_t, wl_P, wl_O, wl_key, nf)
    si = np.int64(0)   # (typed zeros: a literal 0 would compile its callees once more, for Literal[int](0))
    for i in range(nrep):
        start_replica_nb(rep[i])
    # what is resident: a table of segments grown as needed (the vllm mode's sized once),
    # a heap of cached ones per replica (at most one live entry per cached segment; stale
    # ones compacted away)
    tab = bk.table_nb(max(1024, nrep, sc.table_slots_nb(sched, p, nrep)))
    most = segments_most_nb(seg_off)  # admission's scratch, the routers' room (phase 6) per request
    heap = np.zeros((nrep, min(p.most_kv_blocks, max(seg_off[n] - seg_off[0], 1)) + most + 16), CACHED)
    heap_n = np.zeros(nrep, np.int64)
    cnt = np.zeros(2, np.int64)  # table entries in use; admissions so far
    # timers (deadlines, black-hole failures, retries due), iteration ends (one per replica
    # at most), the replicas that may start an iteration at t, the cumulative counts
    timers, tn, ends, e_win, dirty, marked, cum = _clock_nb(p, n, nrep)
    # routers (_routers_nb)
    cursor, brk, ej_until, times_ej, n_ej, rw, ain, rin, f_head, f_tail, failed, cand, views, pool = _routers_nb(
        p, n, rep)
    n_front = np.int64(0)            # requests held at the front doors
    # signals (§3): publications, and each router's own additions since them (_board_nb)
    periodic = p.signal_mode != Signals.FRESH
    local = p.signal_mode == Signals.PERIODIC_LOCAL
    pub, pub_k, pub_mods, locc, snap, loc = _board_nb(p, nrep)
    snap_n = np.int64(0)
    loc_n = np.int64(0)
    paired = p.prefill_replicas > 0             # pools: prefill/decode disaggregation (pd_engine)
    pdx = pe.state_nb(rep, p, n, most, pools.members_nb(rep, pools.PREFILL), pools.members_nb(rep, pools.DECODE))
    # the client, the completions, the failures observed at one time (_client_nb)
    sent, rel_t, rel_c, due_turn, done_ro, done_t, fail_req, fail_rep, fail_crash = _client_nb(
        p, n, wl_next.shape[0] > 0)
    n_fail = NONE  # (typed: a literal would compile _events_nb and _timeouts_nb twice)
    gap_ms = np.empty(1024)             # inter-token gaps in the window: (ms, how many), ...
    gap_n = np.empty(1024, np.int64)
    n_gap = np.zeros(1, np.int64)
    due_req = np.empty(n, np.int64)      # retries due at one time
    done_log = np.empty((2, n), np.int64)   # replica and request of each completion, in time order
    n_done = np.int64(0)
    closed = p.max_in_flight > 0         # a closed-loop client (docs/model.md "Closed-loop clients")
    quick = not closed                   # decoding-only iteration ends may skip the other phases (below)
    rel_n = np.int64(0)                  # (int64 from the start: _next_time_nb compiles once)
    rel_h = np.int64(0)
    freed = np.int64(0)                  # slots freed so far: k - freed requests hold one
    left_seen = np.int64(0)              # final outcomes given a release so far (mt.left)
    rw_head = np.int64(0)   # int64 from the start: _window_nb compiles once (test_refcounts)
    ru_pos = np.int64(0)
    k = np.int64(0)
    ev = NONE
    n_ev = events.shape[0]
    horizon = p.horizon_ms
    front_ms = min(p.timeout_ms, p.ttft_timeout_ms)  # a first attempt held at the front door fails then
    front_ttft = p.ttft_timeout_ms < p.timeout_ms
    window_open = False
    past = False                       # the run has gone past the horizon
    seen_warmup = False                # requests in the system after time warm-up was processed: taken
    backlog_w = 0
    t = -np.inf
    prev_t = -np.inf
    n_dirty = NONE  # (typed: a literal would compile _mark_nb twice)
    c7 = 0                             # the next of them to start (phase 7 resumes there)
    ready_pending = np.bool_(False)    # a recovered replica is not yet ready
    next_pub = np.int64(0)             # the replica publishing next (they take turns)
    stopped = False
    S = sc.Run(rep, req, tab, heap, heap_n, cnt, seg_key, seg_len, seg_off, most, done_log, gap_ms, gap_n, n_gap,
               due_req, pdx)
    # The event loop. No array variable is assigned inside the inner loop (each would
    # cost Numba reference counting at every pass): it is left, between two times or
    # before an iteration start, only to make room in a growable array, here below,
    # and entered again where it left off.
    while not stopped:
        tab_need = 0    # table entries to make room for (phase 7: an iteration start's admissions)
        snap_need = 0   # publication snapshot entries (phase 5)
        loc_need = 0    # routers' own additions (phase 6)
        while True:
            # (7) iteration starts of idle replicas with work, in replica order: only those whose
            # iteration ended or that were given work at t can be idle with work now
            while c7 < n_dirty and tab_need == 0:
                i = dirty[c7]
                r = rep[i]
                if not r.busy and r.healthy and sc.has_work_nb(sched, S, i):
                    tab_need, idle = pe.idle_nb(S, pdx, i, t, p, mt) if paired else (NONE, False)
                    if tab_need == 0 and not idle:
                        tab_need = sc.start_nb(sched, S, i, t, p, mt)  # or the table's room to make first
                    if tab_need == 0 and r.busy:
                        tm.set_end_nb(ends, e_win, i, r.end_ms, r.started)
                if tab_need == 0:
                    marked[i] = False
                    c7 += 1
            if tab_need > 0:
                break
            n_dirty = NONE
            c7 = 0
            if t >= horizon and mt.entered_cohort == mt.left_cohort and not (k < nf and req[nf - 1].cohort):
                stopped = True
                break  # the stop: nothing of the cohort is left in the system
            # the next time t
            # room for the gaps one time can add (_gap_rows)
            if n_gap[0] + _gap_rows_nb(p, nrep) > gap_ms.shape[0]:
                break
            t, ready_pending = _next_time_nb(p, rep, req, events, ev, wl_t, k, nf, closed, freed, rel_t, rel_h, rel_n,
                                             ready_pending, prev_t, timers, tn, n_ej, ej_until, periodic, next_pub,
                                             pub_k, front_ms, f_head, sent, paired, pdx)
            # Iteration ends before t (the next time anything else happens), before the next
            # sample, the warm-up's end, the horizon and the limit, and with no request queued
            # at a front door (routed again at every time): while each is of a replica that only
            # decodes and goes on decoding into free blocks, its time has only phase 1's
            # emission and phase 7's start, done here without the other phases. (The same calls
            # in the same order: the ends of one time and their starts touch disjoint state but
            # for sums added in replica order.)
            if quick and n_front == 0:
                calm = t
                if si < sample_t.shape[0] and sample_t[si] <= horizon:
                    calm = min(calm, sample_t[si])
                if not (seen_warmup and window_open):
                    calm = min(calm, p.warmup_ms)
                calm = min(calm, p.limit_ms if past else horizon)
                while n_gap[0] + _gap_rows_nb(p, nrep) < gap_ms.shape[0]:  # a general time's room left
                    i = e_win[1]
                    r = rep[i]
                    te = ends[i].t
                    if not (te < calm and _end_live(ends[i], r) and r.healthy and r.n_run > 0):
                        break
                    if not sc.decode_on_nb(sched, S, i, te, p, mt):  # emits only, then decodes on: both done
                        break
                    prev_t = te
                    tm.set_end_nb(ends, e_win, i, r.end_ms, r.started)
            while ends[e_win[1]].t < np.inf and not _end_live(ends[e_win[1]], rep[e_win[1]]):
                tm.set_end_nb(ends, e_win, e_win[1], np.inf, NONE)  # abandoned
            t = min(t, ends[e_win[1]].t)
            while si < sample_t.shape[0] and sample_t[si] < t and sample_t[si] <= horizon:
                _sample_nb(rep, p, sample_t[si], ej_until, pub, locc, cum, samples, cluster, si)
                si += 1
            if not seen_warmup and t > p.warmup_ms:
                seen_warmup = True
                backlog_w = mt.entered - mt.left
            if t > horizon:
                if not past:
                    past = True
                    mt.backlog_growth = (mt.entered - mt.left) - backlog_w
                    mt.client_waiting = n - k
                    _close_window_nb(rep, req)
                if (mt.entered_cohort == mt.left_cohort and not (k < nf and req[nf - 1].cohort)) or t > p.limit_ms:
                    stopped = True
                    break
            # room in the views for what this time can add (t is found again on coming back)
            if periodic and ((next_pub + 1) * p.period_ms) / nrep + pub_k[next_pub] * p.period_ms == t:
                if 2 * (snap_n + cnt[0]) > snap.shape[0]:  # each publication at t: at most the table's entries
                    snap_need = snap_n + cnt[0]
                    break
            if local:
                routed = n_front + tn[tm.RETRIES] + tn[tm.TURNS]  # at most these, and the arrivals at t, now
                a = k
                while a < nf and (wl_t[a] == t or (closed and wl_t[a] <= t and a - k < p.max_in_flight)):
                    routed += 1  # (a closed client places at most N new ones at t)
                    a += 1
                if 2 * (loc_n + routed * most) > loc.shape[0]:
                    loc_need = loc_n + routed * most
                    break
            prev_t = t
            if not window_open and t > p.warmup_ms:
                # tokens emitted by the warm-up's end: wasted tokens count only later ones
                window_open = True
                for s in range(n):
                    if tm.in_flight_nb(req[s]):
                        req[s].gw = g_now_nb(rep, req, s)
            # (1) iteration ends, replicas in id order
            while ends[e_win[1]].t == t and t < np.inf:
                i = e_win[1]
                live = _end_live(ends[i], rep[i])
                tm.set_end_nb(ends, e_win, i, np.inf, NONE)
                if live:
                    r = rep[i]
                    n_dirty = _mark_nb(marked, dirty, n_dirty, i)
                    integrate_nb(r, t, p)
                    before = n_done
                    n_done = sc.finish_nb(sched, S, i, t, p, mt, n_done)
                    _completed_nb(done_log, done_ro, done_t, req, rw, brk, ain, rin, i, t, before, n_done, p, timers, tn,
                                  wl_next, wl_think)
            if paired:  # transfers that end, then hand-offs
                n_dirty = _pd_phase1_nb(S, pdx, t, p, marked, dirty, n_dirty, timers, tn)
            # (2) scenario events at t, in order
            if ev < n_ev and events[ev].t_ms == t:
                ev, n_fail, recovered = _events_nb(sched, S, rep, cnt, due_req, events, ev, t, p, fail_req, fail_rep,
                                                   fail_crash, n_fail)
                ready_pending = ready_pending or recovered
            # (3) attempt failures observed at t: black holes, timeouts, front-door timeouts
            if tn[tm.BLACK_HOLES] > 0 or tn[tm.DEADLINES] > 0:
                n_fail = _timeouts_nb(sched, S, rep, req, timers, tn, t, p, cum, fail_req, fail_rep, fail_crash,
                                      n_fail)
            if n_fail > 0:
                for f in range(n_fail):  # they all leave "in flight" first
                    s = fail_req[f]
                    ro = req[s].router
                    ain[ro] -= 1
                    if req[s].tries >= 2:
                        rin[ro] -= 1
            if not np.isinf(front_ms):
                n_fail, n_front = _front_timeouts_nb(req, sent, f_head, f_tail, front_ms, front_ttft, t, cum, fail_req,
                                                     fail_rep, fail_crash, n_fail, n_front)
            if n_fail > 0:
                _observe_nb(p, t, req, fail_req, fail_rep, fail_crash, n_fail, window_open, past, failed, brk,
                            ej_until, times_ej, n_ej, rin, ain, timers, tn, cum, mt)
                n_fail = NONE
            if paired:  # replicas whose blocks came free (a lease's end, a crash, a cancellation)
                n_dirty = _pd_wake_nb(pdx, marked, dirty, n_dirty)
            # (4) breaker re-admissions
            if _any_ejected(n_ej):
                _readmit_nb(ej_until, brk, n_ej, t)
            # (5) signal publications, in replica order
            if periodic and ((next_pub + 1) * p.period_ms) / nrep + pub_k[next_pub] * p.period_ms == t:
                next_pub, snap_n, loc_n = _publish_nb(rep, tab, snap, loc, pub, pub_k, pub_mods, locc, p, t, next_pub,
                                                      snap_n, loc_n)
            rw_head = _window_nb(rw, rw_head, n_done, done_t, done_ro, done_log, t - p.window_ms)
            # (6) routing: the front door's FIFOs first, in request order of their heads ...
            if n_front > 0:  # (none held: every f_head is -1)
                n_front, ru_pos, n_dirty, loc_n = _route_front_nb(
                    tab, snap, loc, pub, locc, heap, heap_n, rep, req, p, t, sent, wl_P, wl_key, seg_key, seg_len,
                    seg_off, ru, ru_pos, cursor, rw, ej_until, failed, cand, views, pool, pdx, f_head, f_tail, timers,
                    tn, ain, cum, mt, marked, dirty, n_dirty, n_front, loc_n)
            # ... then retries and arrivals due at t, in request order
            n_due = _due_nb(timers, tn, np.int64(tm.RETRIES), req, t, due_req)
            n_turn = _due_nb(timers, tn, np.int64(tm.TURNS), req, t, due_turn) if due_turn.shape[0] > 0 else 0
            d = e = 0
            while True:
                if closed:  # a request is sent at its intended time or, N in flight, when a slot frees
                    if mt.left > left_seen:  # final outcomes (phases 1, 3, 6 only) free a slot, overhead later
                        rel_t[rel_n] = t + p.client_overhead_ms
                        rel_c[rel_n] = mt.left - left_seen
                        rel_n += 1
                        left_seen = mt.left
                    while rel_h < rel_n and rel_t[rel_h] <= t:
                        freed += rel_c[rel_h]
                        rel_h += 1
                    arrival = k < n and wl_t[k] <= t and k - freed < p.max_in_flight
                    first, a = True, k
                else:  # a first turn's arrival, else a follow-up turn's send (a higher request)
                    first = k < nf and wl_t[k] == t
                    arrival = first or e < n_turn
                    a = k if first else (due_turn[e] if arrival else n)
                if not (arrival or d < n_due):
                    break
                retry = d < n_due and (not arrival or due_req[d] < a)
                if retry:
                    s = due_req[d]
                    d += 1
                    req[s].state = State.NONE
                else:
                    s = a
                    if first:
                        k += 1
                    else:
                        e += 1
                        req[s].cohort = t >= p.warmup_ms
                    sent[s] = t
                    mt.entered += 1
                    if req[s].cohort:
                        mt.entered_cohort += 1
                i, i_d, ru_pos = _route_any_nb(tab, snap, loc, pub, locc, rep, req, p, s, t, retry, sent, wl_P, wl_key,
                                               seg_key, seg_len, seg_off, ru, ru_pos, cursor, rw, ej_until, failed,
                                               cand, views, pool, paired, pdx)
                if i == -2:
                    if p.admission_mode == Admission.QUEUE:
                        ro = req[s].router
                        req[s].state = State.FRONT
                        req[s].f_next = -1
                        if f_head[ro] < 0:
                            f_head[ro] = s
                        else:
                            req[f_tail[ro]].f_next = s
                        f_tail[ro] = s
                        n_front += 1
                    else:
                        settle_nb(req[s], Fate.REJECTED, mt)
                        cum[3] += 1
                else:
                    if i < 0 and retry:
                        rin[req[s].router] -= 1
                    place_nb(tab, heap, heap_n, rep, req, p, s, i, t, retry, sent, timers, tn, cursor, ain, cum, mt)
                    n_dirty = _mark_nb(marked, dirty, n_dirty, i)
                    loc_n += _pd_paired_nb(snap, loc, locc, rep, req, p, s, i_d, t, nrep, seg_key, seg_len, seg_off)
                    if local and i >= 0:  # room made before this time
                        loc_n += add_local_nb(snap, loc, locc, req, p, s, i, nrep, seg_key, seg_len, seg_off)
            if tn[tm.TRANSIT] > 0:  # phase 7, first: the attempts in transit that join now (ingress)
                n_dirty = _joins_nb(rep, req, timers, tn, t, marked, dirty, n_dirty)
            _sort_ints(dirty, n_dirty)  # phase 7 (at the top of the loop) starts them in replica order
        if not stopped:  # make room, then go on where the loop left off
            gap_ms, gap_n = _gap_room_nb(gap_ms, gap_n, n_gap[0], _gap_rows_nb(p, nrep))
            tab = bk.reserve_nb(tab, cnt[0], tab_need - cnt[0])
            snap = bk.reserve_nb(snap, snap_n, snap_need - snap_n)
            loc = bk.reserve_nb(loc, loc_n, loc_need - loc_n)
            S = sc.Run(rep, req, tab, heap, heap_n, cnt, seg_key, seg_len, seg_off, most, done_log, gap_ms, gap_n,
                       n_gap, due_req, pdx)
    while si < sample_t.shape[0] and sample_t[si] <= horizon:  # stopped just after the horizon
        _sample_nb(rep, p, sample_t[si], ej_until, pub, locc, cum, samples, cluster, si)
        si += 1
    if not past:
        mt.backlog_growth = (mt.entered - mt.left) - backlog_w
        mt.client_waiting = n - k
    for i in range(nrep):
        integrate_nb(rep[i], horizon, p)
    finish_metrics_nb(p, rep, req, wl_t, sent, mt, gap_ms[:n_gap[0]], gap_n[:n_gap[0]])
    if paired:
        pe.finish_nb(p, rep, req, sent, mt, pdx)
    if keep.shape[0] == n:
        _keep_nb(keep, req, sent)


@nb.njit(**JIT)
def _front_timeouts_nb(req, sent, f_head, f_tail, front_ms, front_ttft, t, cum, fail_req, fail_rep, fail_crash,
                       n_fail, n_front):
    """Phase 3's front door: first attempts still held at a router's front door at their
    send + either deadline fail (a timeout or a first-token timeout), appended to the
    failures observed at t. Returns (failures observed, requests held at front doors)."""
    for ro in range(f_head.shape[0]):
        while f_head[ro] >= 0 and sent[f_head[ro]] + front_ms == t:
            s = f_head[ro]
            f_head[ro] = req[s].f_next
            if f_head[ro] < 0:
                f_tail[ro] = -1
            n_front -= 1
            req[s].tries += 1
            req[s].g = 0
            req[s].gw = 0
            req[s].gh = 0
            cum[5 if front_ttft else 4] += 1
            fail_req[n_fail] = s
            fail_rep[s] = -1
            fail_crash[s] = False
            n_fail += 1
    hold((req, sent, f_head, f_tail, cum, fail_req, fail_rep, fail_crash))
    return n_fail, n_front


@nb.njit(**JIT)
def _keep_nb(keep, req, sent):
    """A timeline's record of what became of each request (keep (requests,) KEPT)."""
    for s in range(keep.shape[0]):
        keep[s].first_ms = req[s].first_ms
        keep[s].done_ms = req[s].done_ms
        keep[s].outcome = req[s].outcome
        keep[s].attempts = req[s].attempts
        keep[s].sent_ms = sent[s]
    hold((keep, req, sent))


@nb.njit(**JIT)
def _sample_nb(rep, p, t, ej_until, pub, locc, cum, samples, cluster, si):
    """Record the state at t (a timeline sample): per replica in ``samples[si]``, and
    cluster-wide in ``cluster[si]``."""
    for i in range(rep.shape[0]):
        r = rep[i]
        x = samples[si, i]
        x.waiting = r.n_wait
        x.running = r.n_run
        x.blackholed = r.n_bh
        x.kv_referenced = r.anon + r.idref
        x.kv_cached = r.cached
        x.outstanding_tokens = r.tau + r.tau_bh + r.tau_tr
        x.healthy = r.healthy
        x.fail_fast = r.fail_fast
        x.ejected = not np.isinf(ej_until[0, i])
        x.warmth = 1.0
        if r.cold:
            x.warmth = 1.0 + (p.cold_factor - 1.0) * ieee_math.exp(-(t - r.t_up) / p.cold_tau_ms)
        x.view_requests, x.view_tokens, _, _ = view_nb(rep, p, NONE, i, pub, locc)  # router 0's
        x.placed = r.placed
        x.done = r.done_all
        x.tokens = r.tokens_all
    clu = cluster[si]
    clu.retries = cum[0]
    clu.failures = cum[1]
    clu.shed = cum[2]
    clu.rejected = cum[3]
    clu.timeouts = cum[4]
    clu.ttft_timeouts = cum[5]


def run_args(params, r, rep, events, wl_t, wl_P, wl_O, wl_key, seg_key, seg_len, seg_off, wl_off, ru, ru_off,
             wl_next=np.zeros(0, np.int64), wl_think=np.zeros(0), shared=None):
    """The arguments of :func:`run_one_nb` for run ``r`` of a batch but the metrics record
    and the timeline's arrays, by name (views, no copies): its PARAMS record, ``rep``
    (replicas,) REPLICA (the run's own), its scenario events, its workload's requests and
    their segment offsets, its workload's router stream, its conversations' turns (``wl_next``,
    ``wl_think``: flat like ``wl_t``, or empty without conversations), and its scheduler's state
    (``sched``, with the segments the scheduler gives). Shapes as in :func:`run_batch`.
    The state's part that depends on the workload alone (``scheduler.workload``) is taken
    from ``shared`` (a ``scheduler.Shared`` of these workloads) when given, else made."""
    p = params[r]
    w = int(p["workload"])
    lo, hi = int(wl_off[w]), int(wl_off[w + 1])
    a = int(p["event_start"])
    args = dict(p=p, rep=rep, events=events[a:a + int(p["event_count"])], wl_t=wl_t[lo:hi], wl_P=wl_P[lo:hi],
                wl_O=wl_O[lo:hi], wl_key=wl_key[lo:hi], seg_key=seg_key, seg_len=seg_len,
                seg_off=seg_off[lo + w:hi + w + 1], ru=ru[int(ru_off[w]):int(ru_off[w + 1])],
                wl_next=wl_next[lo:hi] if wl_next.size else wl_next, wl_think=wl_think[lo:hi] if wl_think.size else wl_think)
    W = sc.workload_of(shared, w, p, seg_key, seg_len, args["seg_off"], args["wl_P"], args["wl_O"])
    args["sched"], args["seg_key"], args["seg_len"], args["seg_off"] = sc.state(
        p, rep.shape[0], W, seg_key, seg_len, args["seg_off"], args["wl_P"], args["wl_O"])
    return args


def no_timeline(nrep):
    """:func:`run_one_nb`'s timeline arguments for a run that records none (empty arrays,
    by name): a run of a grid."""
    return dict(sample_t=np.zeros(0), samples=np.zeros((0, nrep), SAMPLE), cluster=np.zeros(0, CLUSTER_SAMPLE),
                keep=np.zeros(0, KEPT))


def run_batch(params, rep, events, wl_t, wl_P, wl_O, wl_key, seg_key, seg_len, seg_off, wl_off, ru, ru_off,
              metrics, wl_next=np.zeros(0, np.int64), wl_think=np.zeros(0), shared=None):
    """Simulate every run: one call of the compiled :func:`run_one_nb` per run, spread over
    ``numba.get_num_threads()`` Python threads (it releases the GIL), each taking the next
    run of :func:`dispatch_order` when it is free.

    params (runs,) PARAMS; rep (runs, replicas) REPLICA with ``factor`` set; events
    (rows,) EVENT; wl_* flat workload arrays, workload w spanning
    ``wl_off[w]:wl_off[w + 1]``; its requests' segments at ``seg_off[wl_off[w] + w + k]``
    (one more offset per workload, into the flat seg_key/seg_len); ru/ru_off the
    router streams; metrics (runs,) METRICS; wl_next/wl_think conversations' turns (flat, or empty);
    ``shared`` a ``scheduler.Shared`` of these workloads (each workload's part of the
    schedulers' state made once for every run that has it; None: each run makes its own). A run writes only its own rows of ``rep``
    and ``metrics``, so the result is the same whatever the threads.

    Not a ``prange`` kernel: Numba compiles a ``prange`` loop into two more functions,
    each holding the whole event loop again (about a fifth of a cold start), to save a
    Python call per run that costs microseconds against a run's milliseconds.
    """
    none = no_timeline(rep.shape[1])

    def one(r):
        run_one_nb(mt=metrics[r], **none, **run_args(params, r, rep[r], events, wl_t, wl_P, wl_O, wl_key, seg_key,
                                                     seg_len, seg_off, wl_off, ru, ru_off, wl_next, wl_think,
                                                     shared))

    runs = params.shape[0]
    threads = min(nb.get_num_threads(), runs)
    order = dispatch_order(params["workload"], max(threads, 1))
    if threads <= 1:
        for r in order:
            one(r)
        return
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(one, order):  # (re-raises a run's error)
            pass


def dispatch_order(workload, threads):
    """The runs in the order the threads take them: the runs of one workload together
    (``workload`` (runs,) each run's), ``threads`` workloads at a time interleaved, so
    that each thread starts on a workload of its own: its scheduler's part of it
    (``scheduler.Shared``) is made by one run while the others of it wait. A list of
    run indices; the results do not depend on it."""
    groups = {}
    for r, w in enumerate(workload.tolist()):
        groups.setdefault(w, []).append(r)
    groups = list(groups.values())
    out = []
    for k in range(0, len(groups), threads):
        some = groups[k:k + threads]
        for j in range(max(len(g) for g in some)):
            out.extend(g[j] for g in some if j < len(g))
    return out


KERNEL = run_one_nb
"""The compiled function every run goes through (loaded from Numba's cache or compiled
once per process: ``routesim.schema``'s ``kernel_loads``)."""
