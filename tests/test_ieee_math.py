"""routesim.ieee_math: accurate (against ``decimal``, correctly rounded at 40 digits) and
compiled without anything that could round differently on another machine (the
compiled code equals the same function run by the Python interpreter, whose float
arithmetic is plain IEEE-754 double, bit for bit)."""

import math
import os
import subprocess
import sys
from decimal import Decimal, localcontext
from pathlib import Path

import numpy as np

from routesim import ieee_math as m

ROOT = Path(__file__).resolve().parent.parent

U = np.random.Generator(np.random.PCG64(20261201)).random(4000)


def ulps(got, exact):
    """|got - exact| in units of the last place of the double nearest ``exact``."""
    nearest = float(exact)
    if nearest == 0.0:
        return abs(got) / math.ulp(0.0)
    return float(abs(Decimal(got) - exact) / Decimal(math.ulp(nearest)))


def worst(f, xs, exact):
    with localcontext() as ctx:
        ctx.prec = 40
        return max(ulps(f(float(x)), exact(Decimal(float(x)))) for x in xs)


def test_exp_within_one_ulp():
    """Also where 2^k is out of range and the scaling takes two steps: results that are
    subnormal (x < -708.4) and k = 1024 (x > 709.09)."""
    xs = np.concatenate((60.0 * U - 30.0, 1e-9 * (U - 0.5), [0.0, 1.0, -1.0, 700.0, -700.0],
                         np.linspace(-745.0, -708.0, 61), np.linspace(709.0, 709.78, 21)))
    assert worst(m.exp, xs, lambda d: d.exp()) < 1.0
    assert m.exp(710.0) == math.inf and m.exp(-746.0) == 0.0 and math.isnan(m.exp(math.nan))


def test_log_within_one_ulp():
    xs = np.concatenate((U + 0.5, 1e6 * U + 1e-300, np.exp2(200.0 * U - 100.0), [1.0, 2.0, 0.5, 5e-324, 1e-310, 1.7e308]))
    assert worst(m.log, xs, lambda d: d.ln()) < 1.0


def test_log1p_of_minus_a_uniform_within_one_ulp():
    """The workload's use: -log1p(-u) for u in [0, 1) (exponential and Box–Muller draws),
    and small arguments where log1p beats log(1 + x)."""
    xs = np.concatenate((-U, 1e-12 * (U - 0.5), [0.0, -0.5, -0.999999]))
    assert worst(m.log1p, xs, lambda d: (1 + d).ln()) < 1.0


def test_sincos_turn_within_one_ulp_or_1e_20():
    """sin and cos of 2πu, u in [0, 1), against decimal's Taylor series of 2πu; near a
    zero of the function the bound is absolute."""
    with localcontext() as ctx:
        ctx.prec = 40
        pi = Decimal("3.141592653589793238462643383279502884197")

        def sincos(d):
            x = 2 * pi * d
            s, c, term, k = Decimal(0), Decimal(0), Decimal(1), 0
            while abs(term) > Decimal(10) ** -45 or k < 3:
                if k % 2 == 0:
                    c += term if k % 4 == 0 else -term
                else:
                    s += term if k % 4 == 1 else -term
                k += 1
                term = term * x / k
            return s, c

        for u in np.concatenate((U[:1500], [0.0, 0.125, 0.25, 0.5, 0.75, 0.999999999])):
            got = m.sincos_turn(float(u))
            for g, e in zip(got, sincos(Decimal(float(u)))):
                assert ulps(g, e) < 1.0 or abs(Decimal(g) - e) < Decimal("1e-20"), (u, g, e)


def test_power():
    assert m.power(2.0, 10.0) == 1024.0
    assert m.power(5.0, 0.0) == 1.0 and m.power(0.0, 2.0) == 0.0
    with localcontext() as ctx:
        ctx.prec = 40
        for x, y in ((256.0, -0.9), (3.0, 0.5), (1000.0, -1.2), (0.3, 2.5)):
            exact = (Decimal(y) * Decimal(x).ln()).exp()
            assert ulps(m.power(x, y), exact) < 1.0 + abs(y * math.log(x))


VALUES = """
import hashlib, numpy as np
from routesim import ieee_math as m
u = np.random.Generator(np.random.PCG64(7)).random(3000)
out = [[m.exp(60.0 * x - 30.0), m.log(1e4 * x), m.log1p(-x), *m.sincos_turn(x),
        m.power(1.0 + 255.0 * x, -0.9)] for x in u]
print(hashlib.sha256(np.array(out).tobytes()).hexdigest())
"""


def test_compiled_equals_interpreted():
    """LLVM compiled the functions as written: no fused multiply-add, no reordering
    (either would change some results' last bits against the interpreter's, whose float
    arithmetic is plain IEEE double). The interpreter's run: NUMBA_DISABLE_JIT=1."""
    def digest(env):
        run = subprocess.run([sys.executable, "-c", VALUES], env=env, capture_output=True,
                             text=True, check=True, cwd=ROOT)
        return run.stdout.strip()
    assert digest(dict(os.environ, NUMBA_DISABLE_JIT="1")) == digest(dict(os.environ))


def test_array_forms_equal_the_scalar_ones():
    rows = np.column_stack((U[::-1], U))
    z1, z2 = m.box_muller(rows, 1, 0)
    for k in range(0, U.size, 97):
        radius = math.sqrt(-2.0 * m.log1p(-U[k]))
        s, c = m.sincos_turn(U[::-1][k])
        assert (z1[k], z2[k]) == (radius * c, radius * s)
    assert m.exp_array(U).tobytes() == np.array([m.exp(x) for x in U]).tobytes()
    assert m.log1p_array(-U).tobytes() == np.array([m.log1p(-x) for x in U]).tobytes()
    assert m.power_array(U + 1.0, -0.9).tobytes() == np.array(
        [m.power(x + 1.0, -0.9) for x in U]).tobytes()
