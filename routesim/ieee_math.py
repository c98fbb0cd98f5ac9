"""exp, log, log1p, power and the sine and cosine of 2πu in plain IEEE-754 arithmetic.

Why not NumPy's or the C library's: NumPy picks a SIMD implementation of ``exp``,
``log1p``, ``power`` (and kin) at run time from the CPU's features, and those round
differently from each other (AVX-512 against AVX2 on the same machine: thousands of
last-bit differences in 200,000 draws); the C library's (glibc) choose between FMA
and plain variants in the same way, and differ between versions and systems. Every
arrival time and token count inherits such bits, so a sweep would not give the same
Dataset on two machines. These functions use only ``+ - * /``, ``sqrt``, ``floor``,
comparisons, ``frexp`` and a table of powers of two, which IEEE-754 defines exactly
(one correct rounding, or none) and so every machine computes alike; Numba compiles
them without fast-math, so LLVM neither reorders nor fuses them into FMAs
(``tests/test_ieee_math.py`` checks the compiled code against the same functions run
by the Python interpreter, bit for bit, and their accuracy against ``decimal``).

The algorithms are the classic ones of Sun's fdlibm (argument reduction by ln 2 or by
a quarter turn, then minimax polynomials on the reduced range; the coefficients are
fdlibm's, Sun Microsystems 1993, freely redistributable), written afresh here:
errors below one ulp for ``exp``, ``log``, ``log1p`` and the sine and cosine of a
turn (``power``, as ``exp(y·log x)``: below ``|y·log x|`` ulps plus one). Each has a scalar
form for compiled code and, where the workload needs it, an array form whose loop
calls no library function (so LLVM vectorizes it: generation costs what NumPy's own
functions cost, ``python -m benchmarks --only generation``).
"""

import math

import numba as nb
import numpy as np

from .conf import JIT

_LN2_HI = 6.93147180369123816490e-01   # ln 2's leading 32 bits: k·_LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10   # ln 2 - _LN2_HI
_INV_LN2 = 1.44269504088896338700e+00
_EXP_MAX = 709.782712893383973096      # exp overflows above
_EXP_MIN = -745.13321910194110842      # exp underflows to 0 below
_SQRT_HALF = 0.70710678118654752440
_TWO_PI = 6.28318530717958623200       # 2π rounded to a double
_TWO_PI_TAIL = 2.44929359829470635445e-16  # 2π - _TWO_PI
_POW2 = np.array([math.ldexp(1.0, k) for k in range(-1074, 1024)])  # 2^k at k + 1074
_TWO_M54 = 2.0 ** -54
_t = 134217729.0 * _TWO_PI             # Veltkamp's split of _TWO_PI (see _split)
_TWO_PI_HI26 = _t - (_t - _TWO_PI)
_TWO_PI_LO26 = _TWO_PI - _TWO_PI_HI26

# exp(r) = 1 + r + r·c/(2 - c), c = r - r²·P(r²), on |r| <= ln2/2
_P1, _P2, _P3, _P4, _P5 = (1.66666666666666019037e-01, -2.77777777770155933842e-03,
                           6.61375632143793436117e-05, -1.65339022054652515390e-06,
                           4.13813679705723846039e-08)
# log(1 + f) = f - f²/2 + s·(f²/2 + R(s²)), s = f/(2 + f), on sqrt(1/2) <= 1 + f < sqrt(2)
_LG1, _LG2, _LG3, _LG4, _LG5, _LG6, _LG7 = (
    6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
    2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
    1.479819860511658591e-01)
# sin x = x + x³·S(x²) and cos x = 1 - x²/2 + x⁴·C(x²), on |x| <= π/4
_S1, _S2, _S3, _S4, _S5, _S6 = (-1.66666666666666324348e-01, 8.33333333332248946124e-03,
                                -1.98412698298579493134e-04, 2.75573137070700676789e-06,
                                -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_C1, _C2, _C3, _C4, _C5, _C6 = (4.16666666666666019037e-02, -1.38888888888741095749e-03,
                                2.48015872894767294178e-05, -2.75573143513906633035e-07,
                                2.08757232129817482790e-09, -1.13596475577881948265e-11)


@nb.njit(**JIT)
def exp(x):
    """e^x (float64 -> float64)."""
    if x != x:
        return x
    if x > _EXP_MAX:
        return math.inf
    if x < _EXP_MIN:
        return 0.0
    k = math.floor(x * _INV_LN2 + 0.5)
    hi = x - k * _LN2_HI
    lo = k * _LN2_LO
    r = hi - lo
    t = r * r
    c = r - t * (_P1 + t * (_P2 + t * (_P3 + t * (_P4 + t * _P5))))
    y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
    # y·2^k with one rounding (as ldexp): a table's power of two, in two steps where
    # 2^k itself is out of range (the second step is then the only inexact one)
    if k > 1023:
        return (y * 2.0) * _POW2[1023 + 1074]
    if k < -1021:
        return (y * _POW2[k + 54 + 1074]) * _TWO_M54
    return y * _POW2[k + 1074]


@nb.njit(**JIT)
def _log_frexp(m, e):
    """log(m·2^e) for 0.5 <= m < 1 (frexp's parts of a positive finite x)."""
    if m < _SQRT_HALF:
        m = m * 2.0
        e -= 1
    f = m - 1.0                       # exact: m is within a factor 2 of 1
    k = float(e)
    hfsq = 0.5 * f * f
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    r = z * (_LG1 + w * (_LG3 + w * (_LG5 + w * _LG7))) + w * (_LG2 + w * (_LG4 + w * _LG6))
    return k * _LN2_HI - ((hfsq - (s * (hfsq + r) + k * _LN2_LO)) - f)


@nb.njit(**JIT)
def log(x):
    """Natural logarithm (float64 -> float64; NaN below 0, -inf at 0)."""
    if x != x or x < 0.0:
        return math.nan
    if x == 0.0:
        return -math.inf
    if x == math.inf:
        return x
    m, e = math.frexp(x)              # x = m·2^e, 0.5 <= m < 1, exact
    return _log_frexp(m, e)


@nb.njit(**JIT)
def _log1p_correct(x, u, log_u):
    """log1p(x) from u = 1 + x rounded and log(u): corrected by the rounding error."""
    if u == 1.0 or x != x:
        return x
    if u == math.inf:
        return u
    return log_u + (x - (u - 1.0)) / u


@nb.njit(**JIT)
def log1p(x):
    """log(1 + x) (float64 -> float64), accurate for small x: log of the rounded
    u = 1 + x, corrected by the rounding error (x - (u - 1))/u."""
    u = 1.0 + x
    return _log1p_correct(x, u, log(u))


@nb.njit(**JIT)
def power(x, y):
    """x^y for x >= 0 (float64, float64 -> float64), as exp(y·log x); 1 when y == 0."""
    if y == 0.0 or x == 1.0:
        return 1.0
    if x == 0.0:
        return 0.0 if y > 0.0 else math.inf
    return exp(y * log(x))


@nb.njit(**JIT)
def _sin_kernel(x, y):
    """sin(x + y) for |x| <= π/4 and a tail |y| <= ulp(x)."""
    z = x * x
    v = z * x
    r = _S2 + z * (_S3 + z * (_S4 + z * (_S5 + z * _S6)))
    return x - ((z * (0.5 * y - v * r) - y) - v * _S1)


@nb.njit(**JIT)
def _cos_kernel(x, y):
    """cos(x + y) for |x| <= π/4 and a tail |y| <= ulp(x)."""
    z = x * x
    r = z * (_C1 + z * (_C2 + z * (_C3 + z * (_C4 + z * (_C5 + z * _C6)))))
    h = 0.5 * z
    w = 1.0 - h
    return w + (((1.0 - w) - h) + (z * r - x * y))


@nb.njit(**JIT)
def _split(a):
    """Veltkamp's split: a = hi + lo exactly, each with at most 26 significant bits."""
    t = 134217729.0 * a               # 2^27 + 1
    hi = t - (t - a)
    return hi, a - hi


@nb.njit(**JIT)
def _times_two_pi(w):
    """2π·w as x + y, |y| <= ulp(x): Dekker's exact product with 2π's leading double,
    plus w times 2π's tail."""
    x = w * _TWO_PI
    wh, wl = _split(w)
    err = ((wh * _TWO_PI_HI26 - x) + wh * _TWO_PI_LO26 + wl * _TWO_PI_HI26) + wl * _TWO_PI_LO26
    return x, err + w * _TWO_PI_TAIL


@nb.njit(inline="always", **JIT)
def sincos_turn(u):
    """(sin 2πu, cos 2πu) for finite u (float64 -> two float64), reduced in turns:
    u - floor(u) and its distance w to the nearest quarter turn are exact, and 2π·w
    (|w| <= 1/8) is carried as a double and its tail into the kernels."""
    f = u - math.floor(u)
    q = math.floor(4.0 * f + 0.5)     # the nearest quarter turn, 0..4
    x, y = _times_two_pi(f - 0.25 * q)  # f - q/4 exact (Sterbenz); |x| <= π/4
    s, c = _sin_kernel(x, y), _cos_kernel(x, y)
    n = q & 3                         # the quadrant: (s, c), (c, -s), (-s, -c), (-c, s)
    odd = (n & 1) == 1                # (selects, not branches: the loops vectorize)
    sin_x = c if odd else s
    cos_x = s if odd else c
    return (-sin_x if n >= 2 else sin_x), (-cos_x if n == 1 or n == 2 else cos_x)


# Array forms for the workload (shape (n,) float64 -> (n,) float64).

@nb.njit(**JIT)
def exp_array(x):
    out = np.empty(x.size)
    for i in range(x.size):
        out[i] = exp(x[i])
    return out


def log1p_array(x):
    """log1p of each element (shape (n,) float64): NumPy's frexp of 1 + x (exact on
    every machine) outside the compiled loop, which then has no library call."""
    u = 1.0 + x
    m, e = np.frexp(u)
    return _log1p_loop(x, u, m, e)


@nb.njit(**JIT)
def _log1p_loop(x, u, m, e):
    out = np.empty(x.size)
    for i in range(x.size):
        ui = u[i]
        log_u = _log_frexp(m[i], e[i]) if 0.0 < ui < math.inf else log(ui)
        out[i] = _log1p_correct(x[i], ui, log_u)
    return out


@nb.njit(**JIT)
def power_array(x, y):
    """x[i]^y for an array x and a scalar y."""
    out = np.empty(x.size)
    for i in range(x.size):
        out[i] = power(x[i], y)
    return out


def box_muller(u, radius_column, angle_column):
    """The two standard normals of Box–Muller from two columns of uniforms ``u``
    (shape (n, columns)): R = sqrt(-2·log1p(-u[:, radius_column])),
    z1 = R·cos 2πu[:, angle_column], z2 = R·sin 2πu[:, angle_column]; each (n,).
    (NumPy's sqrt and products are correctly rounded on every machine.)"""
    radius = np.sqrt(-2.0 * log1p_array(-u[:, radius_column]))
    s, c = sincos_turn_array(np.ascontiguousarray(u[:, angle_column]))
    return radius * c, radius * s


@nb.njit(**JIT)
def sincos_turn_array(u):
    """(sin 2πu, cos 2πu) of each element (shape (n,) float64 -> two (n,))."""
    s = np.empty(u.size)
    c = np.empty(u.size)
    for i in range(u.size):
        s[i], c[i] = sincos_turn(u[i])
    return s, c
