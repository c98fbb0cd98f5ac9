"""The scheduler seam: what the event loop (engine.py) asks of a replica's scheduler, in
one set of operations with one signature, and which module answers for each
``[replica] scheduler``.

A scheduler is a module that gives

- ``STATE``, the namedtuple class of its own per-run arrays (``X`` below),
  ``workload_nb(p, seg_key, seg_len, seg_off, wl_P, wl_O)`` → ``W``: what that state
  takes from the run's workload alone, reading only the PARAMS fields named in the
  module's ``WORKLOAD_FIELDS``, so that it is computed once per workload and those
  fields and shared, read only, by every run that has them (:class:`Shared`; the vllm
  mode's prompt keys), and
  ``state_nb(p, nrep, W, seg_key, seg_len, seg_off, wl_P, wl_O)`` → ``(X, seg_key,
  seg_len, seg_off)``: that state for a run of ``p`` (PARAMS) on ``nrep`` replicas, and
  the prompt segments the run (its routers, the segment table) sees;
- the operations of :data:`OPERATIONS`, each compiled, each taking its state ``X``
  first and the run's shared arrays ``S`` (a :data:`Run`) second:

  ``table_slots_nb(X, p, nrep)``      segment-table slots the run needs from the start
  ``has_work_nb(X, S, i)``            has idle replica i something to start (phase 7)?
  ``start_nb(X, S, i, t, p, mt)``     start an iteration on idle replica i with work
                                       (phase 7); returns 0, or the table entries to
                                       make room for first (nothing done then)
  ``decode_on_nb(X, S, i, t, p, mt)`` the iteration ending at t asks nothing of the
                                       loop between its end and the next start
                                       (reserve: it only emits and the next only
                                       decodes; vllm: it completes no attempt): do
                                       both, True; else False
  ``finish_nb(X, S, i, t, p, mt, n_done)``  end i's iteration at t (phase 1); returns
                                       the new length of ``S.done_log``
  ``cancel_nb(X, S, i, s, t, p)``     take request s's attempt off replica i (phase 3)
  ``crash_nb(X, S, i, t, p)``         replica i goes down (phase 2): its attempts into
                                       ``S.victims``; returns (their number, table
                                       entries deleted)

The loop calls the functions of this module, never a scheduler's; each dispatches on
the type of ``X`` at compile time (Numba's ``overload``: a run's kernel compiles the
one scheduler it is given and none of the others, as the ``vst is None`` test used to).
A new scheduler is one new module and its line in :data:`MODULES`
(tests/test_layout.py checks that each registered module gives every operation with
these parameters, and that nothing else in the engine asks which scheduler runs).
Without the JIT the same functions dispatch in Python.
"""

import inspect
import threading
from collections import OrderedDict, namedtuple

from numba.extending import overload

from ..conf import JIT
from . import replica, vllm_async_replica, vllm_replica
from .dtypes import Scheduler

MODULES = {Scheduler.RESERVE: replica, Scheduler.VLLM: vllm_replica, Scheduler.VLLM_ASYNC: vllm_async_replica}
"""``[replica] scheduler`` code → the module that implements it (the registry)."""

STATES = {module.STATE: module for module in MODULES.values()}
"""A scheduler's state class → its module (the compiled dispatch's key)."""

Run = namedtuple("Run", ["rep", "req", "tab", "heap", "heap_n", "cnt", "seg_key", "seg_len", "seg_off", "most",
                         "done_log", "gap_ms", "gap_n", "n_gap", "victims", "pdx"])
"""The run's arrays every scheduler works on, by name (``S``): ``rep`` (replicas,)
REPLICA, ``req`` (requests,) REQUEST, ``tab`` the segment table (blocks.py; the vllm
mode's hash map), ``heap``/``heap_n`` the eviction heaps, ``cnt`` (2,) table entries in
use and admissions so far, the prompt segments ``seg_key``/``seg_len`` (request k's at
``seg_off[k]:seg_off[k + 1]``), ``most`` the most segments of a prompt, ``done_log``
(2, requests) the completions' (replica, request), the inter-token gaps ``gap_ms``/
``gap_n`` with their count ``n_gap`` (1,), ``victims`` (requests,) a crash's failed
attempts, ``pdx`` the run's disaggregation state (pd_engine.PDX). The engine builds it
again whenever it grows one of these arrays."""


def _of(p):
    return MODULES[Scheduler(int(p["scheduler"]))]


def workload(p, seg_key, seg_len, seg_off, wl_P, wl_O):
    """``W``: what the state of ``p``'s scheduler takes from a run's workload alone (see
    the module's docstring)."""
    return _of(p).workload_nb(p, seg_key, seg_len, seg_off, wl_P, wl_O)


def workload_key(p) -> tuple:
    """What ``W`` depends on besides the workload: the compiled ``workload_nb`` of ``p``'s
    scheduler (the two vllm loops share one) and the values of its ``WORKLOAD_FIELDS``.
    Two runs of one workload with the same key have the same ``W``."""
    m = _of(p)
    return (m.workload_nb, *(p[name].item() for name in m.WORKLOAD_FIELDS))


def workload_of(shared, w, p, seg_key, seg_len, seg_off, wl_P, wl_O):
    """``W`` for a run of ``p`` on workload ``w`` (:func:`workload`): ``shared``'s (a
    :class:`Shared` of the run's workloads), or made for this run alone (``shared`` None)."""
    def make():
        return workload(p, seg_key, seg_len, seg_off, wl_P, wl_O)

    return make() if shared is None else shared.get((w, *workload_key(p)), make)


def state(p, nrep, W, seg_key, seg_len, seg_off, wl_P, wl_O):
    """``(X, seg_key, seg_len, seg_off)``: the state of ``p``'s scheduler for a run, from
    its workload's ``W`` (:func:`workload`), and the segments the run sees (see the
    module's docstring)."""
    return _of(p).state_nb(p, nrep, W, seg_key, seg_len, seg_off, wl_P, wl_O)


class Shared:
    """Each workload's ``W`` (:func:`workload`), computed once and handed to every run that
    has the same workload and :func:`workload_key` (a grid runs each workload under
    several policies and conditions): ``get((w, *workload_key(p)), make)``. Safe across
    the batch kernel's threads (a ``W`` is made once, by the first run that asks; the
    others wait for it). At most ``budget`` bytes of arrays are kept: past it the ``W``s
    asked for least recently are forgotten first (the batching grid takes a workload's
    runs together: ``Grid.order``), and a ``W`` larger than the budget alone is made for
    its run and not kept. A pickled copy (a chunk sent to a Dask worker) starts empty."""

    BUDGET = 256 * 2**20

    def __init__(self, budget: int = BUDGET):
        self.budget = budget
        self.bytes = 0
        self.made = 0  # ``W``s made (kept or not): what the tests count
        self._lock = threading.Lock()
        self._items = OrderedDict()  # key -> [lock, W or None, bytes], least recently asked first

    def get(self, key, make):
        with self._lock:
            entry = self._items.get(key)
            if entry is None:
                entry = self._items[key] = [threading.Lock(), None, 0]
            self._items.move_to_end(key)
        with entry[0]:
            if entry[1] is None:
                W = make()
                size = _nbytes(W)
                with self._lock:
                    self.made += 1
                    if size > self.budget:
                        if self._items.get(key) is entry:
                            del self._items[key]
                        return W
                    self._forget(self.bytes + size - self.budget, keep=key)
                    self.bytes += size
                    entry[2] = size
                entry[1] = W
            return entry[1]

    def _forget(self, excess, keep):
        """Forget the least recently asked ``W``s kept (not ``keep``'s) until ``excess``
        bytes are gone (under the lock)."""
        for key in list(self._items):
            if excess <= 0:
                return
            entry = self._items[key]
            if key != keep and entry[1] is not None:
                del self._items[key]
                self.bytes -= entry[2]
                excess -= entry[2]

    def clear(self):
        """Forget every ``W`` (a benchmark's repeat of a run, which must make its own)."""
        with self._lock:
            self._items.clear()
            self.bytes = 0

    def kept(self) -> int:
        """``W``s kept."""
        with self._lock:
            return sum(e[1] is not None for e in self._items.values())

    def __reduce__(self):
        return (Shared, (self.budget,))


def _nbytes(W) -> int:
    return sum(getattr(x, "nbytes", 8) for x in (W if isinstance(W, tuple) else (W,)))


def _module(X):
    return STATES[type(X)]


def table_slots_nb(X, p, nrep):
    return _module(X).table_slots_nb(X, p, nrep)


def has_work_nb(X, S, i):
    return _module(X).has_work_nb(X, S, i)


def start_nb(X, S, i, t, p, mt):
    return _module(X).start_nb(X, S, i, t, p, mt)


def decode_on_nb(X, S, i, t, p, mt):
    return _module(X).decode_on_nb(X, S, i, t, p, mt)


def finish_nb(X, S, i, t, p, mt, n_done):
    return _module(X).finish_nb(X, S, i, t, p, mt, n_done)


def cancel_nb(X, S, i, s, t, p):
    return _module(X).cancel_nb(X, S, i, s, t, p)


def crash_nb(X, S, i, t, p):
    return _module(X).crash_nb(X, S, i, t, p)


OPERATIONS = {f.__name__: inspect.signature(f) for f in
              (table_slots_nb, has_work_nb, start_nb, decode_on_nb, finish_nb, cancel_nb, crash_nb)}
"""The operations every scheduler implements, with their parameters."""


def _compiled(stub):
    """The compiled form of operation ``stub``: the implementation of the module whose
    ``STATE`` is the type of the first argument, chosen when the caller compiles."""
    name = stub.__name__

    @overload(stub, jit_options=JIT)
    def typed(X, *rest):
        f = getattr(STATES[X.instance_class], name)

        def impl(X, *rest):
            return f(X, *rest)
        return impl


for _stub in (table_slots_nb, has_work_nb, start_nb, decode_on_nb, finish_nb, cancel_nb, crash_nb):
    _compiled(_stub)
