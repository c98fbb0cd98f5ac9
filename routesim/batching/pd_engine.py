"""Prefill/decode disaggregation in the compiled engine (issue 42; docs/model.md
"Prefill/decode disaggregation", scheduler = "reserve"): the engine's side of a
request's way through a pair of replicas, as small functions beside the loop's phases.

- phase 6, :func:`route_pair_nb`: the router picks the pair (independent, selective or
  transfer-aware), then :func:`paired_nb` marks the attempt placed on its prefill
  replica as disaggregated;
- the prefill replica computes the prompt (replica.py: ``_pd_prefilled_nb`` at its
  end keeps the blocks held and lists the attempt for its hand-off);
- phase 1, :func:`phase1_nb`, after the iteration ends: the transfers that end (the
  prefill side releases what it held, the decode side's blocks become computed, the
  attempt goes to the front of the decode replica's waiting queue), then the hand-offs
  (the back of the decode replica's waiting queue);
- the decode replica allocates (replica.py: ``pd_allocate_nb``, at an iteration start
  or, idle with nothing running, in phase 7 by :func:`idle_nb`), which starts the
  transfer over the links (:mod:`.pd`), then admits the transferred attempt's
  one-token step (``_pd_admit_nb``), which emits the first token;
- the run's end, :func:`finish_nb`: the TTFT's parts, the transfers, each replica's
  link utilisation and the selective rule's share of pairs.

Failures (docs/model.md "Failures: every request in exactly one outcome"):

- phase 2, :func:`crash_nb`, before the crashed replica's own attempts fail: the pairs
  it is one side of (the read of a prompt it holds fails; an attempt it was to decode
  fails where it is), each failing as a crash of that replica;
- phase 3, :func:`cancel_nb`: a timeout or first-token deadline takes the attempt off
  wherever it is (on its prefill replica, handed off, receiving, transferred, decoding);
- the lease: a prefill replica holding a prompt whose decode side is lost (a crash or a
  cancellation) keeps the blocks ``lease_ms`` more (:func:`phase1_nb` releases them
  first, at that time).

The closed-loop client is the loop's, unchanged (a pair serves one request: one slot);
the front door looks at both pools (:func:`_front_door_nb`, from :func:`route_pair_nb`);
the ingress and a black hole apply at the routing (router.place_nb) and again at the
hand-off (:func:`phase1_nb`): docs/model.md "The closed-loop client with pools" and
after.

The state of one run is a :data:`PDX` (:func:`state_nb`). A co-located run (no prefill
pool) builds an empty one and never calls these functions.
"""

import math
from collections import namedtuple

import numba as nb
import numpy as np

from ..conf import JIT
from ..nrt import hold
from ..ranks import of_selected_nb
from . import pd
from . import scheduler as sc
from .dtypes import Fate, PairRoute, PdStage, State
from .ingress import send_nb
from .lists import push_back_nb, push_front_nb
from .policies.scores import tie_hash_nb
from .replica import in_window_nb, integrate_nb, mark_computed_nb, pd_allocate_nb, release_nb, tau_of_nb
from .timers import in_flight_nb
from .router import EVERY_HIT, black_hole_nb, decide_nb, eligible_nb, front_door_nb, seen_hits_nb, view_nb

PDX = namedtuple("PDX", ["links", "hand", "n_hand", "ended", "ended_t", "pool_p", "pool_d", "cand_d", "one",
                         "found", "count", "touched", "ls_t", "ls_rep", "ls_req", "n_ls", "wake"])
"""One run's disaggregation state: ``links`` (:data:`.pd.Links`); ``hand`` (requests,)
the attempts whose prefill ended at this time (the first ``n_hand[0]``); ``ended``/
``ended_t`` (requests,) scratch for the transfers that end at a time; ``pool_p``/
``pool_d`` the prefill and decode pools' replicas (pools.members_nb); ``cand_d``
(replicas,) the decode pool's eligible at a decision; ``one`` (1,) a single candidate;
``found`` (the most segments of a prompt,) admission's scratch; ``count`` (2,)
placements in [warm-up, horizon) while both pools had an eligible replica, and of them
those sent to a pair; ``touched`` (2 · requests,) the replicas phase 1 gave work; the
leases, the first ``n_ls[0]`` of ``ls_t`` (ms: when the blocks are released), ``ls_rep``
(the prefill replica holding them) and ``ls_req`` (the request whose prompt they are),
each (requests · max_attempts,); ``wake`` (replicas,) the replicas whose blocks a
lease's end, a crash or a cancellation freed at this time (phase 7 looks at them)."""


@nb.njit(**JIT)
def state_nb(rep, p, n, most, pool_p, pool_d):
    """The disaggregation state of a run of ``p`` on ``rep`` (replicas,) REPLICA with
    ``n`` requests whose prompts have at most ``most`` segments, its prefill and decode
    pools ``pool_p`` and ``pool_d`` (pools.members_nb; the links without room when the
    run has no prefill pool)."""
    nrep = rep.shape[0]
    cap = n if p.prefill_replicas > 0 else 0
    links = pd.new_nb(nrep, cap, p.link_bandwidth, p.link_latency_ms, p.warmup_ms, p.horizon_ms)
    leases = cap * p.max_attempts
    return PDX(links, np.empty(cap, np.int64), np.zeros(1, np.int64), np.empty(cap, np.int64), np.empty(cap),
               pool_p, pool_d,
               np.empty(nrep, np.int64), np.empty(1, np.int64), np.zeros(most, np.bool_), np.zeros(2, np.int64),
               np.empty(2 * cap, np.int64), np.empty(leases), np.empty(leases, np.int64),
               np.empty(leases, np.int64), np.zeros(1, np.int64), np.zeros(nrep, np.bool_))


@nb.njit(**JIT)
def _hit_nb(tab, snap, loc, p, ro, i, nrep, s, seg_key, seg_len, seg_off, v, one, prompt, allowance):
    """Tokens of request s's prompt router ro believes resident on replica i (its view's
    leading blocks, capped at ``floor((P − 1)/b)``), into ``v[i].hit`` too."""
    one[0] = i
    seen_hits_nb(tab, snap, loc, p, ro, one, np.int64(1), nrep, s, seg_key, seg_len, seg_off, (prompt - 1) // p.block_tokens,
                 v, EVERY_HIT, math.inf, prompt, allowance)
    hold((tab, snap, loc, seg_key, seg_len, seg_off, v, one))
    return p.block_tokens * v[i].hit


@nb.njit(**JIT)
def _transfer_aware_nb(tab, snap, loc, pub, locc, rep, p, ro, s, cand, ne, i_d, m_d, wl_key, seg_key, seg_len,
                       seg_off, v, one, links, prompt, allowance):
    """The transfer-aware rule's prefill replica among cand[:ne] for decode replica i_d
    (its hit ``m_d`` tokens): the argmin of ``token_ms · (τ_p + P − m_p) + latency +
    bytes · max(n_out(p) + 1, n_in(d) + 1) / B`` (ms), ties by the hash rule."""
    hd = links.head[0]
    nbytes = (prompt - m_d) * p.kv_bytes_per_token
    best = np.int64(-1)
    best_c = math.inf
    for c in range(ne):
        i = cand[c]
        m_p = _hit_nb(tab, snap, loc, p, ro, i, rep.shape[0], s, seg_key, seg_len, seg_off, v, one, prompt, allowance)
        tau = view_nb(rep, p, ro, i, pub, locc)[1]
        n_out, n_in = pd.in_progress_nb(links, i, i_d)
        cost = (p.transfer_token_ms * (tau + prompt - m_p) + hd.latency
                + nbytes * max(n_out + 1, n_in + 1) / hd.bandwidth)
        if best < 0 or cost < best_c or (cost == best_c and tie_hash_nb(wl_key[s], i) < tie_hash_nb(wl_key[s], best)):
            best = i
            best_c = cost
    hold((tab, snap, loc, pub, locc, rep, cand, wl_key, seg_key, seg_len, seg_off, v, one))
    return best


@nb.njit(**JIT)
def route_pair_nb(tab, snap, loc, pub, locc, rep, req, p, s, t, retry, wl_P, wl_key, seg_key, seg_len, seg_off,
                  ru, ru_pos, cursor, rw, ej_until, failed, cand, v, pdx):
    """Phase 6 with pools: request s's pair at t (docs/model.md "Routing the pair").
    Returns (placement, decode replica, ru_pos): the attempt is placed on the prefill
    replica with the decode replica its pair; or (selective, a prompt mostly cached on
    the decode replica) placed on the decode replica whole, decode replica -1; or shed,
    placement -1 (each pool's policy draws its uniforms as a shed does, in the rule's
    order). The state's arrays are passed on as arguments (borrowed: no reference
    counts, routesim/nrt.py)."""
    return _route_pair_nb(tab, snap, loc, pub, locc, rep, req, p, s, t, retry, wl_P, wl_key, seg_key, seg_len,
                          seg_off, ru, ru_pos, cursor, rw, ej_until, failed, cand, v, pdx.pool_p, pdx.pool_d,
                          pdx.cand_d, pdx.one, pdx.links, pdx.count)


@nb.njit(**JIT)
def _route_pair_nb(tab, snap, loc, pub, locc, rep, req, p, s, t, retry, wl_P, wl_key, seg_key, seg_len, seg_off,
                   ru, ru_pos, cursor, rw, ej_until, failed, cand, v, pool_p, pool_d, cand_d, one, links, count):
    """:func:`route_pair_nb` with :data:`PDX`'s fields as arguments."""
    q = req[s]
    q.pd = PdStage.NONE  # a new attempt: nothing of a failed one's way is left (paired_nb sets its own)
    q.pd_d = -1
    q.held = -1
    ro = q.router
    avoid = retry and p.retry_avoid_previous
    ne_p = eligible_nb(rep, p, ej_until, ro, t, s, req, failed, avoid, cand, pool_p)
    ne_d = eligible_nb(rep, p, ej_until, ro, t, s, req, failed, avoid, cand_d, pool_d)
    pol_p = np.int64(p.prefill_policy)
    pol_d = np.int64(p.decode_policy)
    A = req[s].A
    P = wl_P[s]
    i_p = np.int64(-1)
    i_d = np.int64(-1)
    if ne_p > 0 and ne_d > 0 and not retry and _front_door_nb(rep, p, ro, cand, ne_p, cand_d, ne_d, pub, locc):
        i_p = np.int64(-2)  # stopped at the front door: no decision, no uniform drawn
    elif ne_p == 0 or ne_d == 0:  # shed
        first, second = (pol_p, pol_d) if p.pair_route == PairRoute.INDEPENDENT else (pol_d, pol_p)
        _, ru_pos = decide_nb(tab, snap, loc, pub, locc, rep, p, s, t, np.int64(0), cand, wl_P, wl_key, seg_key, seg_len,
                              seg_off, ru, ru_pos, cursor[ro], rw, ro, v, A, first)
        _, ru_pos = decide_nb(tab, snap, loc, pub, locc, rep, p, s, t, np.int64(0), cand, wl_P, wl_key, seg_key, seg_len,
                              seg_off, ru, ru_pos, cursor[ro], rw, ro, v, A, second)
    else:
        if in_window_nb(t, p):
            count[0] += 1
        whole = False
        if p.pair_route == PairRoute.INDEPENDENT:
            i_p, ru_pos = decide_nb(tab, snap, loc, pub, locc, rep, p, s, t, ne_p, cand, wl_P, wl_key, seg_key,
                                    seg_len, seg_off, ru, ru_pos, cursor[ro], rw, ro, v, A, pol_p)
            i_d, ru_pos = decide_nb(tab, snap, loc, pub, locc, rep, p, s, t, ne_d, cand_d, wl_P, wl_key, seg_key,
                                    seg_len, seg_off, ru, ru_pos, cursor[ro], rw, ro, v, A, pol_d)
        else:
            i_d, ru_pos = decide_nb(tab, snap, loc, pub, locc, rep, p, s, t, ne_d, cand_d, wl_P, wl_key, seg_key,
                                    seg_len, seg_off, ru, ru_pos, cursor[ro], rw, ro, v, A, pol_d)
            m_d = _hit_nb(tab, snap, loc, p, ro, i_d, rep.shape[0], s, seg_key, seg_len, seg_off, v, one, P, A)
            if p.pair_route == PairRoute.SELECTIVE and P - m_d <= p.threshold_tokens:
                whole = True  # served whole on the decode replica
                i_p = i_d
                i_d = np.int64(-1)
            elif p.pair_route == PairRoute.SELECTIVE:
                i_p, ru_pos = decide_nb(tab, snap, loc, pub, locc, rep, p, s, t, ne_p, cand, wl_P, wl_key, seg_key,
                                        seg_len, seg_off, ru, ru_pos, cursor[ro], rw, ro, v, A, pol_p)
            else:
                i_p = _transfer_aware_nb(tab, snap, loc, pub, locc, rep, p, ro, s, cand, ne_p, i_d, m_d, wl_key,
                                         seg_key, seg_len, seg_off, v, one, links, P, A)
        if not whole and in_window_nb(t, p):
            count[1] += 1
    hold((tab, snap, loc, pub, locc, rep, req, wl_P, wl_key, seg_key, seg_len, seg_off, ru, cursor, rw, ej_until,
          failed, cand, v, pool_p, pool_d, cand_d, one, count))
    return i_p, i_d, ru_pos


@nb.njit(**JIT)
def _front_door_nb(rep, p, ro, cand, ne_p, cand_d, ne_d, pub, locc):
    """The front door with pools (docs/model.md "The front door with pools"): True
    when every eligible replica of both pools, cand[:ne_p] and cand_d[:ne_d], has its
    τ_i (as seen) above ``admission_max_tokens``, as the gateway's saturation test
    looks at every pod of the pool, prefill and decode alike."""
    stopped = front_door_nb(rep, p, ro, cand, ne_p, pub, locc) and front_door_nb(rep, p, ro, cand_d, ne_d, pub, locc)
    hold((rep, cand, cand_d, pub, locc))
    return stopped


@nb.njit(**JIT)
def paired_nb(rep, req, p, s, i_d, t):
    """Request s, just placed on its prefill replica at t, is disaggregated with decode
    replica ``i_d``: its way's times from nothing, routed now; counted in the decode
    replica's ``assigned`` in [warm-up, horizon)."""
    q = req[s]
    q.pd = PdStage.PREFILL
    q.pd_d = i_d
    q.held = -1
    q.t_route = t
    q.t_padmit = np.nan
    q.t_pend = np.nan
    q.t_xs = np.nan
    q.t_xe = np.nan
    if in_window_nb(t, p):
        rep[i_d].assigned += 1
    hold((rep, req))


@nb.njit(**JIT)
def _release_held_nb(S, s, t, p):
    """The prefill replica holding request s's prompt blocks releases them at t, as a
    completion does (computed id'd blocks become cached)."""
    q = S.req[s]
    _release_on_nb(S, q.held, s, t, p)
    q.held = -1


@nb.njit(**JIT)
def _release_on_nb(S, i, s, t, p):
    """Prefill replica i releases the blocks of request s's prompt it held (its transfer
    ended, or its lease ran out) at t, as a completion does."""
    q = S.req[s]
    kv = q.kv
    q.kv = q.P  # what it held: the whole prompt (a disaggregated attempt never emits there)
    integrate_nb(S.rep[i], t, p)
    release_nb(S.tab, S.heap, S.heap_n, S.rep, i, s, S.req, t, p, S.seg_key, S.seg_off, S.cnt)
    q.kv = kv


@nb.njit(**JIT)
def _lose_decode_side_nb(q, s, t, p, ls_t, ls_rep, ls_req, n_ls):
    """Request s's attempt (record q) loses its decode side at t (its decode replica
    crashed, or a deadline cancelled it there): if a prefill replica holds its prompt,
    the blocks stay held until ``t + lease_ms`` (a lease; the attempt lets go of them)."""
    if q.held >= 0:
        k = n_ls[0]
        ls_t[k] = t + p.lease_ms
        ls_rep[k] = q.held
        ls_req[k] = s
        n_ls[0] = k + 1
        q.held = -1
    hold((ls_t, ls_rep, ls_req, n_ls))


@nb.njit(**JIT)
def _drop_lease_nb(k, ls_t, ls_rep, ls_req, n_ls):
    """Lease k leaves the list of the first ``n_ls[0]`` (the last takes its place: the
    order of leases means nothing, blocks.py's eviction order does not depend on it)."""
    last = n_ls[0] - 1
    ls_t[k], ls_rep[k], ls_req[k] = ls_t[last], ls_rep[last], ls_req[last]
    n_ls[0] = last
    hold((ls_t, ls_rep, ls_req, n_ls))


@nb.njit(**JIT)
def _leases_end_nb(S, t, p, ls_t, ls_rep, ls_req, n_ls, wake):
    """Phase 1, first: the leases that run out at t, their prefill replicas releasing
    the blocks (and woken: phase 7 looks at them)."""
    k = np.int64(0)  # (typed: a literal would compile _drop_lease_nb twice)
    while k < n_ls[0]:
        if ls_t[k] == t:
            _release_on_nb(S, ls_rep[k], ls_req[k], t, p)
            wake[ls_rep[k]] = True
            _drop_lease_nb(k, ls_t, ls_rep, ls_req, n_ls)  # (the order of releases at one time changes nothing)
        else:
            k += 1
    hold((ls_t, ls_rep, ls_req, n_ls, wake))


@nb.njit(**JIT)
def next_time_nb(pdx):
    """The next time anything happens on the links or a lease runs out (ms; inf: none)."""
    return _next_time_nb(pdx.links, pdx.ls_t, pdx.n_ls)


@nb.njit(**JIT)
def _next_time_nb(links, ls_t, n_ls):
    """:func:`next_time_nb` with the arrays as arguments."""
    t = pd.next_time_nb(links)
    for k in range(n_ls[0]):
        t = min(t, ls_t[k])
    hold((ls_t, n_ls))
    return t


@nb.njit(**JIT)
def _unreceive_nb(S, links, i, s, t, p):
    """Request s's attempt, receiving its KV on decode replica i, stops at t: its
    transfer off the links (advanced to t), its blocks there released, out of i's
    ``n_recv`` and τ_i."""
    q = S.req[s]
    r = S.rep[i]
    pd.remove_nb(links, s)
    r.n_recv -= 1
    release_nb(S.tab, S.heap, S.heap_n, S.rep, i, s, S.req, t, p, S.seg_key, S.seg_off, S.cnt)
    r.tau -= tau_of_nb(q)
    q.state = State.NONE
    q.replica = -1


@nb.njit(**JIT)
def cancel_nb(X, S, i, s, t, p):
    """Take request s's attempt off replica i at t wherever it is on its way (phase 3's
    deadlines; a crash of the replica holding its prompt): on its prefill replica, or on
    its decode replica handed off, receiving (its transfer stops), transferred or
    decoding, as the scheduler's cancel (``X``) does; a prompt still held on its prefill
    replica leased. Replica i is woken (phase 7: blocks may have come free)."""
    pdx = S.pdx
    _cancel_nb(X, S, pdx.links, i, s, t, p, pdx.ls_t, pdx.ls_rep, pdx.ls_req, pdx.n_ls, pdx.wake)


@nb.njit(**JIT)
def _cancel_nb(X, S, links, i, s, t, p, ls_t, ls_rep, ls_req, n_ls, wake):
    """:func:`cancel_nb` with the arrays as arguments."""
    q = S.req[s]
    integrate_nb(S.rep[i], t, p)
    if q.pd == PdStage.RECEIVING:
        _unreceive_nb(S, links, i, s, t, p)
    else:
        sc.cancel_nb(X, S, i, s, t, p)
    _lose_decode_side_nb(q, s, t, p, ls_t, ls_rep, ls_req, n_ls)
    wake[i] = True
    hold((ls_t, ls_rep, ls_req, n_ls, wake))


@nb.njit(**JIT)
def crash_nb(X, S, i, t, p, fail_req, fail_rep, fail_crash, n_fail):
    """Phase 2 with pools: replica i crashes at t; before its own attempts fail (the
    scheduler's crash), the pairs it is one side of (docs/model.md "Failures"). Returns
    the failures' new count (``fail_req[n_fail:]``, ``fail_rep``/``fail_crash`` by request)."""
    pdx = S.pdx
    return _crash_nb(X, S, S.req, pdx.links, i, t, p, fail_req, fail_rep, fail_crash, n_fail, pdx.ls_t, pdx.ls_rep,
                     pdx.ls_req, pdx.n_ls, pdx.wake)


@nb.njit(**JIT)
def _crash_nb(X, S, req, links, i, t, p, fail_req, fail_rep, fail_crash, n_fail, ls_t, ls_rep, ls_req, n_ls, wake):
    """:func:`crash_nb` with the arrays as arguments. In flight, by request:

    - its prompt held on i (after its prefill, on its decode replica, handed off or
      receiving): the read fails; it leaves its decode replica, failing as a crash of i;
    - still on its prefill replica with i its decode replica: it leaves the prefill
      replica as a cancellation does, failing as a crash of i;
    - on i with its prompt held elsewhere: that prompt is leased (the scheduler's crash
      fails it); a transfer into i stops.

    The leases on i end with i's cache (nothing to release)."""
    for s in range(req.shape[0]):
        q = req[s]
        if not in_flight_nb(q):
            continue
        fails = False
        if q.held == i:
            q.held = -1  # (nothing to lease: i's cache is emptied)
            _cancel_nb(X, S, links, q.replica, s, t, p, ls_t, ls_rep, ls_req, n_ls, wake)
            fails = True
        elif q.pd == PdStage.PREFILL and q.pd_d == i:
            _cancel_nb(X, S, links, q.replica, s, t, p, ls_t, ls_rep, ls_req, n_ls, wake)
            fails = True
        elif q.replica == i:
            if q.pd == PdStage.RECEIVING:
                pd.remove_nb(links, s)
            _lose_decode_side_nb(q, s, t, p, ls_t, ls_rep, ls_req, n_ls)
        if fails:
            fail_req[n_fail] = s
            fail_rep[s] = i
            fail_crash[s] = True
            n_fail += 1
    k = np.int64(0)
    while k < n_ls[0]:
        if ls_rep[k] == i:
            _drop_lease_nb(k, ls_t, ls_rep, ls_req, n_ls)
        else:
            k += 1
    hold((req, fail_req, fail_rep, fail_crash, ls_t, ls_rep, ls_req, n_ls, wake))
    return n_fail



@nb.njit(**JIT)
def phase1_nb(S, pdx, t, p, timers, tn):
    """Phase 1 after the iteration ends at t: the leases that run out at t (their
    replicas woken); the links advanced to t; the transfers
    that end at t (in end order, then start order) each to the front of its decode
    replica's waiting queue (those of one replica in that order), the prefill replica
    releasing what it held and the received blocks computed; then the hand-offs, in
    request order, to the back of their decode replicas' waiting queues, or with an
    ingress time in transit to them (ingress.send_nb on ``timers``' TRANSIT heap: the
    decode side's API server, as vLLM's proxy sends the request there), or to a
    black-holed decode replica into its black hole (router.black_hole_nb). The replicas
    concerned go into ``pdx.touched`` (they may start an iteration in phase 7); returns
    their count."""
    if pdx.n_ls[0] > 0:
        _leases_end_nb(S, t, p, pdx.ls_t, pdx.ls_rep, pdx.ls_req, pdx.n_ls, pdx.wake)
    return _phase1_nb(S, S.rep, S.req, pdx.links, pdx.ended, pdx.ended_t, pdx.hand, pdx.n_hand, pdx.touched, t, p,
                      timers, tn)


@nb.njit(**JIT)
def _phase1_nb(S, rep, req, links, ended, ended_t, hand, n_hand, touched, t, p, timers, tn):
    """:func:`phase1_nb` with the arrays it uses as arguments (borrowed: no reference
    counts, routesim/nrt.py)."""
    m = pd.advance_nb(links, t, ended, ended_t)
    nt = 0
    for k in range(m):
        s = ended[k]
        q = req[s]
        touched[nt] = q.held
        nt += 1
        _release_held_nb(S, s, t, p)
        d = q.replica
        c = q.c
        q.c = q.u
        mark_computed_nb(S.tab, d, s, q, np.int64(0), p.block_tokens, S.seg_key, S.seg_len, S.seg_off)
        q.c = c
        rep[d].n_recv -= 1
        q.pd = PdStage.TRANSFERRED
        q.t_xe = t
    for k in range(m - 1, -1, -1):  # to the front, keeping their order
        s = ended[k]
        push_front_nb(rep, req, req[s].replica, s)
        touched[nt] = req[s].replica
        nt += 1
    nh = n_hand[0]
    for a in range(1, nh):  # request order (few at a time: insertion sort)
        x = hand[a]
        b = a - 1
        while b >= 0 and hand[b] > x:
            hand[b + 1] = hand[b]
            b -= 1
        hand[b + 1] = x
    for k in range(nh):
        s = hand[k]
        q = req[s]
        d = q.pd_d
        q.replica = d
        if rep[d].fail_fast:  # a black-holed decode replica: the hand-off fails fail_fast_ms later
            black_hole_nb(rep[d], q, s, t, p, timers, tn)
        elif not send_nb(rep, req, p, s, d, t, timers, tn):  # no ingress time: in the waiting queue now
            push_back_nb(rep, req, d, s)
            rep[d].tau += tau_of_nb(q)
            touched[nt] = d
            nt += 1
    n_hand[0] = 0
    hold((rep, req, touched, ended, hand, n_hand, timers, tn))
    return nt


@nb.njit(**JIT)
def idle_nb(S, pdx, i, t, p, mt):
    """Phase 7 with pools, replica i idle: with nothing running, it allocates for the
    handed-off heads of its waiting queue without starting an iteration. Returns
    (segment-table entries to make room for first, 0 when done; whether an iteration
    is not to start: the waiting queue empty or its head still waiting for blocks)."""
    r = S.rep[i]
    if r.n_run > 0:
        return np.int64(0), False
    room = S.cnt[0] + r.n_wait * S.most
    if 2 * room > S.tab.shape[0]:
        return room, False
    integrate_nb(r, t, p)
    while r.n_wait > 0 and S.req[r.w_head].pd == PdStage.HANDOFF:
        if not pd_allocate_nb(S.tab, S.heap, S.heap_n, S.rep, S.req, i, r.w_head, t, p, S.seg_key, S.seg_len,
                              S.seg_off, S.cnt, pdx.found, mt, pdx.links):
            break
    return np.int64(0), r.n_wait == 0 or S.req[r.w_head].pd == PdStage.HANDOFF


@nb.njit(**JIT)
def finish_nb(p, rep, req, sent, mt, pdx):
    """The run's disaggregation metrics: the TTFT's parts (p50, p99, ms) over the
    completed cohort's disaggregated requests, the transfers ended in (warm-up,
    horizon] (count, bytes), each replica's link utilisation, the share of placements
    sent to a pair, and ``placement_occupancy`` over placements (not ``assigned``, which
    counts a pair on both replicas)."""
    n = req.shape[0]
    parts = np.empty((4, n))
    k = 0
    for s in range(n):
        q = req[s]
        if q.cohort and q.outcome == Fate.COMPLETED and q.pd == PdStage.DECODE:
            parts[0, k] = q.t_padmit - q.t_route
            parts[1, k] = q.t_pend - q.t_padmit
            parts[2, k] = q.t_xe - q.t_xs
            parts[3, k] = q.first_ms - q.t_pend - (q.t_xe - q.t_xs)
            k += 1
    a = of_selected_nb(parts[0, :k].copy(), P50_P99)
    mt.ttft_prefill_queue_p50, mt.ttft_prefill_queue_p99 = a[0], a[1]
    a = of_selected_nb(parts[1, :k].copy(), P50_P99)
    mt.ttft_prefill_p50, mt.ttft_prefill_p99 = a[0], a[1]
    a = of_selected_nb(parts[2, :k].copy(), P50_P99)
    mt.ttft_transfer_p50, mt.ttft_transfer_p99 = a[0], a[1]
    a = of_selected_nb(parts[3, :k].copy(), P50_P99)
    mt.ttft_decode_queue_p50, mt.ttft_decode_queue_p99 = a[0], a[1]
    hd = pdx.links.head[0]
    if hd.now < hd.h:   # the window's bytes up to the horizon (docs/model.md): the flows after the last change
        pd.advance_nb(pdx.links, hd.h, pdx.ended, pdx.ended_t)   # (no transfer ends there: all were processed)
    mt.transfer_count = hd.ended
    mt.transfer_bytes = hd.ended_bytes
    for i in range(rep.shape[0]):
        rep[i].link_util = pd.utilization_nb(pdx.links, i)
    c = pdx.count
    mt.disaggregated_share = c[1] / c[0] if c[0] > 0 else np.nan
    occ = 0.0
    high = 0
    for i in range(rep.shape[0]):
        occ += rep[i].occ_sum
        high += rep[i].occ_high
    mt.placement_occupancy = occ / c[0] if c[0] > 0 else np.nan
    mt.placement_occupancy_high = high / c[0] if c[0] > 0 else np.nan
    hold((rep, req, sent))


P50_P99 = np.array([50, 99], np.int64)
"""The nearest ranks of a TTFT part's ``_p50`` and ``_p99``."""
