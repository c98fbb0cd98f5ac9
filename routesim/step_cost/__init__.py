"""The step costs of the batching model (docs/model.md "The step cost"): how long one
iteration of a replica lasts, given what it computes.

Each form is one module of this package holding everything about it: ``NAME`` (the
sweep's ``step_cost`` value), ``CODE`` (its integer code in the kernel's parameters),
``TABLE`` (its sweep table) and ``SUMMARY``, ``PARAMS`` (its coefficients as sweep keys,
with their defaults, units and help: the one place those defaults are written),
``duration(c, U, Q, n, K, R)`` (the formula, plain Python over scalars or arrays: what
calibrate evaluates) and ``duration_nb`` (the same function compiled: what the engine
calls), and what a fit needs (``columns``: the design matrix, from the same formula).

``FORMS`` below is the registry: adding a form is one module plus its line there and its
branch in :func:`duration_nb` (tests/test_layout.py checks both). The sweep's keys and
the kernel's parameter record (the batching model's ``params`` and ``runs``) and
calibrate read every form from here.
"""

import numba as nb

from ..conf import JIT
from ..schema import Param
from . import linear, mixed, overlap, roofline

FORMS = (linear, roofline, overlap, mixed)
"""Every step cost, in code order (``FORMS[k].CODE == k``)."""
BY_NAME = {f.NAME: f for f in FORMS}
DEFAULT = linear.NAME
COEFFICIENTS = max(len(f.PARAMS) for f in FORMS)
"""Length of the kernel's coefficient vector (``PARAMS["cost"]``): the longest form's."""

SELECTOR = Param("step_cost", "replica", ("step_cost",), DEFAULT, "",
                 "the step cost: " + ", ".join(f"{f.NAME} ({f.SUMMARY})" for f in FORMS[:-1])
                 + f" or {FORMS[-1].NAME} ({FORMS[-1].SUMMARY})",
                 kind=str, options=tuple(BY_NAME))
"""``[replica] step_cost``: which form a run uses."""

PARAMS = (*linear.PARAMS, SELECTOR, *(p for f in FORMS[1:] for p in f.PARAMS))
"""Every step-cost sweep key (the default form's table first, then ``step_cost``, then
the other forms' tables: the Dataset's attributes keep this order)."""

KEYS = {f.NAME: tuple(p.name for p in f.PARAMS) for f in FORMS}
"""Each form's flat parameter names (``step_cost`` names which one a run uses)."""
LEAVES = {f.TABLE: tuple(p.path[-1] for p in f.PARAMS) for f in FORMS}
"""Each form's sweep table and its keys, in the coefficients' order."""


def defaults(form) -> dict:
    """{table key: default} of form ``form`` (a module of FORMS)."""
    return {p.path[-1]: p.default for p in form.PARAMS}


def coefficients(name, values) -> list:
    """The coefficient vector of form ``name`` from flat parameter values, in PARAMS order."""
    return [values[p.name] for p in BY_NAME[name].PARAMS]


@nb.njit(inline="always", **JIT)
def duration_nb(code, c, U, Q, n, K, R):
    """The iteration's time before the replica's factor (ms) under the form of code
    ``code``, coefficients ``c`` (COEFFICIENTS,): ``U`` prefill tokens computed, ``Q``
    prefill attention pairs, ``n`` decoding sequences, ``K`` their KV tokens, ``R`` KV
    tokens the prefill chunks attend to. (Inlined where it is called, as each form's
    function into it: begin_nb then times an iteration as fast as when the formula was
    written in it.)"""
    if code == roofline.CODE:
        return roofline.duration_nb(c, U, Q, n, K, R)
    if code == overlap.CODE:
        return overlap.duration_nb(c, U, Q, n, K, R)
    if code == mixed.CODE:
        return mixed.duration_nb(c, U, Q, n, K, R)
    return linear.duration_nb(c, U, Q, n, K, R)
