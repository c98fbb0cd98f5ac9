"""An attempt's way from its routing to its replica's scheduler (docs/model.md "The
engine loop's timing": ``[replica] ingress_ms`` and ``ingress_ms_per_token``), compiled.

With both keys 0 (the default) an attempt joins its replica's waiting queue when it is
routed, as before them. Otherwise an attempt routed at ``T`` to a replica that is not
failing fast is *in transit* (``State.TRANSIT``) until its join time ``T + (ingress_ms
+ ingress_ms_per_token · P)``: counted in the replica's ``o_i`` and ``τ_i`` (``n_tr``,
``tau_tr``) as a black-holed attempt is, on the ``TRANSIT`` timer heap; a crash of the
replica or a deadline fails it in transit (the scheduler never saw it: the schedulers'
``cancel_nb`` and ``crash_nb`` treat it as a black-holed one); at its join time, in that
time's phase 7 before any iteration starts, it joins the waiting queue, the joins of one
time in (time, request) order, as vLLM's engine loop drains its input queue between
steps. Both schedulers and both vllm loops read the same waiting queue, so each sees
the attempt at its first scheduling after the join.
"""

import numba as nb

from ..conf import JIT
from ..nrt import hold
from . import timers as tm
from .dtypes import State
from .lists import push_back_nb


@nb.njit(**JIT)
def ingress_ms_nb(p, P):
    """An attempt's ingress time (ms) for a prompt of ``P`` tokens: ``ingress_ms +
    ingress_ms_per_token · P``, in that order; not scaled by the replica's time factor."""
    return p.ingress_ms + p.ingress_ms_per_token * P


@nb.njit(**JIT)
def send_nb(rep, req, p, s, i, t, timers, tn):
    """Request s's attempt, routed at t to replica i (not failing fast), goes in transit
    when its ingress time is above 0: counted in ``n_tr``/``tau_tr``, its join on the
    ``TRANSIT`` heap. Returns whether it did (False: it joins the waiting queue now)."""
    q = req[s]
    d = ingress_ms_nb(p, q.P)
    if not d > 0.0:
        return False
    r = rep[i]
    q.state = State.TRANSIT
    r.n_tr += 1
    r.tau_tr += q.P + q.A
    tm.push_nb(timers, tn, tm.TRANSIT, t + d, s, q.tries)
    hold((rep, req, timers, tn))
    return True


@nb.njit(**JIT)
def leave_nb(r, q):
    """Attempt record q in transit to replica record r leaves it (a deadline)."""
    r.n_tr -= 1
    r.tau_tr -= q.P + q.A


@nb.njit(**JIT)
def join_nb(rep, req, timers, tn, t):
    """The next attempt in transit whose join time is t (the ``TRANSIT`` heap's live
    top) joins its replica's waiting queue and ``τ_i``; returns the replica, or -1 when
    none joins at t."""
    i = -1
    if tn[tm.TRANSIT] > 0 and tm.top_nb(timers, tn, tm.TRANSIT, req) == t:
        s = timers[tm.TRANSIT, 0].req
        tm.pop_nb(timers, tn, tm.TRANSIT)
        q = req[s]
        i = q.replica
        leave_nb(rep[i], q)
        push_back_nb(rep, req, i, s)
        rep[i].tau += q.P + q.A
    hold((rep, req, timers, tn))
    return i
