"""Reference counting in compiled code: ``hold``, to let Numba prune it.

Numba counts references to every array a compiled function is given: an increment
when the function starts and a decrement where the array is last used, both atomic.
Its pruning pass (refprune) removes the pair when the decrement is at one place that
every path reaches. An array last used inside an ``if`` (or before an early
``return``) is released at two places, one of them a phi of the array and a null
pointer, and the pruning gives up: the pair then costs two atomic operations at every
call. ``hold((a, b, …))`` as a function's last statement uses every array there, so
each is released once, at the exit, and the pair is pruned; it compiles to nothing.
tests/test_refcounts.py counts what is left in the engine's functions.
"""

from numba import types
from numba.extending import intrinsic


@intrinsic
def hold(typingctx, arrays):
    """``hold((a, b, …))``: nothing, at this point (a tuple of arrays, or one array)."""

    def codegen(context, builder, signature, args):
        return context.get_dummy_value()

    return types.none(arrays), codegen

# A call to another compiled function that LLVM does not inline also defeats the
# pruning: the caller checks the call's status and returns early on an error, a second
# exit that merges with the normal one. So the small helpers of the hot loops (heap
# sifts and comparisons) are compiled with ``inline="always"``.
