"""Reference counting in compiled code, out of routesim's hot loops.

Numba counts references to every array a compiled function is given: an increment
when the function starts and a decrement where the array is last used, both atomic
(two atomic operations per array per call). Three things here keep them out:

- **Borrowed arguments** (``_lower_assign``, ``_delvar``): a variable of a routesim
  function that is only ever its argument makes no pair at all (below).
- **Error exits marked as raises** (``_propagate_as_raise``): what pairs remain (array
  views, allocations, reassigned arguments) are removed by Numba's pruning pass
  (refprune) only if every path from the increment reaches the decrement or a raise;
  a call's error exit now counts as a raise.
- ``hold((a, b, …))`` as a function's last statement uses every array there, so each
  is released once, at the exit, where the pruning finds it (an array last used inside
  an ``if`` is otherwise released at two places, and the pruning gives up). It compiles
  to nothing; with borrowed arguments it matters only for a function's other arrays.

Both patches of Numba's lowering apply to routesim's functions only and were written
against Numba 0.68. tests/test_refcounts.py counts what is left in the engine's
functions (none, in the event loop) and checks that every allocation is freed once.
"""

import numba
from llvmlite import ir
from numba import types
from numba.core import callconv, lowering
from numba.core import ir as numba_ir
from numba.extending import intrinsic


@intrinsic
def hold(typingctx, arrays):
    """``hold((a, b, …))``: nothing, at this point (a tuple of arrays, or one array)."""

    def codegen(context, builder, signature, args):
        return context.get_dummy_value()

    return types.none(arrays), codegen

# A call to another compiled function that LLVM does not inline defeats the pruning:
# the caller checks the call's status and returns early on an error, a second exit
# without the decrements. Numba marks the exit of its own ``raise`` (a
# ``numba_exception_output`` store of the exception) and the pruning's fanout_raise
# subpass lets such an exit skip them (an exception leaks the references, as Numba's
# raise always has); a callee's error passed on was not marked. Now it is, in
# routesim's functions. (The pruning still gives up past 15 blocks from the increment
# or 1,000 visited: the small heap helpers are also ``inline="always"``.)


def _propagate_as_raise(self, builder, status):
    """``CPUCallConv.return_status_propagate`` (Numba 0.68), its store of the
    exception marked as a raise's when the function is routesim's."""
    trystatus = self.check_try_status(builder)
    excptr = self._get_excinfo_argument(builder.function)
    store = builder.store(status.excinfoptr, excptr)
    if ROUTESIM in builder.function.name:
        store.set_metadata("numba_exception_output", builder.module.add_metadata([ir.IntType(1)(1)]))
    with builder.if_then(builder.not_(trystatus.in_try)):
        self._return_errcode_raw(builder, status.code)


ROUTESIM = "8routesim"
"""How routesim's functions' mangled names begin (Itanium: the length, then the name)."""

WRITTEN_FOR = "0.68."
"""The Numba releases whose internals the two patches below were written against and
checked on (tests/test_refcounts.py). On any other release they are not applied: the
engine is then Numba's own (correct, with its reference counts; tests/test_refcounts.py
fails on the counts until the patches are checked against that release)."""
PATCHED = numba.__version__.startswith(WRITTEN_FOR)

if PATCHED:
    callconv.CPUCallConv.return_status_propagate = _propagate_as_raise

# Better still, most pairs need not be made. A function's caller holds a reference to
# every argument for the whole call (Numba's calls, and the wrappers that call from
# Python), so a variable that is only ever its argument (one definition, the argument,
# as Numba's SSA form gives every argument that is not reassigned) can borrow it: no
# increment where the argument is assigned, no decrement where the variable dies. A
# copy (``x = a``), a tuple, a returned value and an argument that is reassigned keep
# their own references as before. ``_lower_assign`` and ``_delvar`` do this for
# routesim's functions (not generators, not the ``prange`` bodies Numba outlines).


def _borrowed(lower):
    """The variables of the function being lowered that may borrow their argument."""
    names = getattr(lower, "_routesim_borrowed", None)
    if names is None:
        names = set()
        fd = lower.fndesc
        if (fd.modname.startswith("routesim") and not lower.generator_info
                and "__numba_parfor_gufunc" not in fd.qualname):
            for name, defs in lower.func_ir._definitions.items():
                if len(defs) == 1 and isinstance(defs[0], numba_ir.Arg):
                    names.add(name)
        lower._routesim_borrowed = names
    return names


def _no_refcount(typ, val):
    pass


def _lower_assign(self, ty, inst):
    if isinstance(inst.value, numba_ir.Arg) and inst.target.name in _borrowed(self):
        self.incref = _no_refcount
        try:
            return _LOWER_ASSIGN(self, ty, inst)
        finally:
            del self.incref
    return _LOWER_ASSIGN(self, ty, inst)


def _delvar(self, name):
    if name in _borrowed(self):
        self.decref = _no_refcount
        try:
            return _DELVAR(self, name)
        finally:
            del self.decref
    return _DELVAR(self, name)


_LOWER_ASSIGN, _DELVAR = lowering.Lower.lower_assign, lowering.Lower.delvar
if PATCHED:
    lowering.Lower.lower_assign, lowering.Lower.delvar = _lower_assign, _delvar
