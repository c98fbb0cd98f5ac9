"""Nearest-rank percentiles, the one definition every metric and timeline uses: the
``p``-th percentile (``p`` a whole number) of ``n`` values is ``sorted[ceil(p·n/100) - 1]``,
NaN when ``n = 0``. Besides the index, four ways to find it: by selection (several ranks
of one unsorted array, each search starting where the last left off), by a scan that
keeps the few largest (a high percentile of a short window), of values with repeat
counts, and in Python (timelines)."""

import numba as nb
import numpy as np

from .conf import JIT


@nb.njit(**JIT)
def rank_nb(p, n):
    """The 0-based index of the nearest-rank percentile ``p`` (an integer) of ``n``
    sorted values, ``ceil(p·n/100) - 1``, computed exactly in integers (-1 when n = 0)."""
    return (p * n + 99) // 100 - 1


@nb.njit(**JIT)
def select_nb(a, lo, k):
    """``sorted(a)[k]`` for ``k >= lo``, when ``a[lo:]`` already holds the largest
    values: quickselect (median-of-three pivot) in place on ``a[lo:]``, leaving nothing
    larger before ``a[k]`` and nothing smaller after it, so that the next, higher rank
    can start its search at ``k``. O(n) on average (O(n²) at worst), where a sort is
    O(n log n).
    """
    hi = a.shape[0] - 1
    while hi > lo:
        mid = (lo + hi) >> 1
        if a[mid] < a[lo]:
            a[mid], a[lo] = a[lo], a[mid]
        if a[hi] < a[lo]:
            a[hi], a[lo] = a[lo], a[hi]
        if a[hi] < a[mid]:
            a[hi], a[mid] = a[mid], a[hi]
        pivot = a[mid]
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while pivot < a[j]:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            break
    return a[k]


NARROW = 4096
"""Buckets of :func:`of_weighted_nb`'s first pass, when it has more values than this."""

INF_BITS = np.int64(0x7FF0000000000000)
"""The bit pattern of +inf: a non-negative float64's is below it unless infinite or NaN."""


@nb.njit(**JIT)
def of_weighted_nb(values, counts, ps):
    """Nearest ranks ``ps`` (ascending integers) of a multiset given as ``values``
    (shape (m,), any order), each repeated ``counts`` times (shape (m,), integers >= 1):
    the same exact integer ranks as :func:`rank_nb` over all ``Σ counts`` of them; NaN
    when empty. By selection on copies (:func:`_weighted_select_nb`), O(m) on average,
    where a sort is O(m log m). More than ``NARROW`` values, none negative, none NaN or
    infinite (inter-token gaps: a run's window has tens of thousands): first one pass
    counts them in ``NARROW`` buckets of their float64 bit patterns (ordered as the values
    are, for these), and the selection runs only on the values of the buckets that hold
    the ranks, with the counts below each. Returns shape (len(ps),)."""
    out = np.full(ps.shape[0], np.nan)
    total = np.int64(0)  # (typed: a literal 0 would compile rank_nb once more)
    for c in counts:
        total += c
    if total == 0:
        return out
    ks = np.empty(ps.shape[0], np.int64)
    for j in range(ps.shape[0]):
        ks[j] = rank_nb(ps[j], total)
    m = values.shape[0]
    bits = values.view(np.int64)
    lo = bits[0]
    hi = bits[0]
    for b in bits:
        lo = min(lo, b)
        hi = max(hi, b)
    if m <= NARROW or lo < 0 or hi >= INF_BITS:  # (negative, -0.0; infinite or NaN)
        _weighted_select_nb(values.copy(), counts.copy(), ks, out)
        return out
    shift = 0
    while (hi - lo) >> shift >= NARROW:
        shift += 1
    weight = np.zeros(NARROW, np.int64)  # counts per bucket
    size = np.zeros(NARROW, np.int64)    # values per bucket
    for i in range(m):
        b = (bits[i] - lo) >> shift
        weight[b] += counts[i]
        size[b] += 1
    where = np.empty(ps.shape[0], np.int64)  # each rank's bucket, and the counts below it
    below = np.empty(ps.shape[0], np.int64)
    b = 0
    acc = np.int64(0)
    for j in range(ps.shape[0]):  # ks ascending: one walk up the buckets
        while acc + weight[b] <= ks[j]:
            acc += weight[b]
            b += 1
        where[j] = b
        below[j] = acc
    held = np.empty(ps.shape[0], np.int64)  # the distinct buckets holding ranks, ascending ...
    off = np.zeros(ps.shape[0] + 1, np.int64)  # ... their values' places in v and w
    nh = 0
    for j in range(ps.shape[0]):
        if nh == 0 or where[j] != held[nh - 1]:
            held[nh] = where[j]
            off[nh + 1] = off[nh] + size[where[j]]
            nh += 1
    v = np.empty(off[nh])
    w = np.empty(off[nh], np.int64)
    fill = off[:nh].copy()
    for i in range(m):  # one pass gathers them all
        b = (bits[i] - lo) >> shift
        for q in range(nh):
            if held[q] == b:
                v[fill[q]] = values[i]
                w[fill[q]] = counts[i]
                fill[q] += 1
    j = 0
    for q in range(nh):  # each bucket's ranks among its values
        e = j
        while e < ps.shape[0] and where[e] == held[q]:
            e += 1
        _weighted_select_nb(v[off[q]:off[q + 1]], w[off[q]:off[q + 1]], ks[j:e] - below[j], out[j:e])
        j = e
    return out


@nb.njit(**JIT)
def _weighted_select_nb(v, w, ks, out):
    """out[j] = the ks[j]-th smallest (0-based; ks ascending) of the multiset of values v
    (shape (m,)) each repeated w (shape (m,), integers >= 1) times, by a weighted
    quickselect with a three-way partition, each rank's search starting where the last
    one's value began; v and w are reordered in place."""
    lo = 0       # v[:lo] hold values no larger than any after them ...
    base = 0     # ... and this many counts
    for j in range(ks.shape[0]):
        k = ks[j] - base  # 0-based, counted from v[lo]
        left = lo
        before = base
        hi = v.shape[0] - 1
        while True:
            if left == hi:
                out[j] = v[left]
                lo, base = left, before
                break
            mid = (left + hi) >> 1
            a, b, c = v[left], v[mid], v[hi]
            pivot = max(min(a, b), min(max(a, b), c))  # the median of three, one of the values
            lt, i, gt = left, left, hi
            below = 0
            equal = 0
            while i <= gt:
                x = v[i]
                if x < pivot:
                    below += w[i]
                    v[lt], v[i] = x, v[lt]
                    w[lt], w[i] = w[i], w[lt]
                    lt += 1
                    i += 1
                elif x > pivot:
                    v[gt], v[i] = x, v[gt]
                    w[gt], w[i] = w[i], w[gt]
                    gt -= 1
                else:
                    equal += w[i]
                    i += 1
            if k < below:
                hi = lt - 1
            elif k < below + equal:
                out[j] = pivot
                lo, base = lt, before + below
                break
            else:
                k -= below + equal
                before += below + equal
                left = gt + 1


@nb.njit(**JIT)
def of_selected_nb(values, ps):
    """Nearest ranks ``ps`` (ascending integers, shape (r,)) of ``values`` (shape (n,),
    any order; permuted in place) by selection, each search starting where the last
    one's rank left the largest values (:func:`select_nb`): the values a sort would
    give, in O(n) on average. Returns shape (r,), NaN when empty."""
    n = values.shape[0]
    out = np.full(ps.shape[0], np.nan)
    lo = n - n  # 0, typed as n is: a literal 0 would compile select_nb once more
    if n > 0:
        for j in range(ps.shape[0]):
            k = rank_nb(ps[j], n)
            out[j] = select_nb(values, lo, k)
            lo = k
    return out


@nb.njit(**JIT)
def ranked_nb(values, p, lo):
    """Nearest rank ``p`` (``sorted[ceil(p·n/100) - 1]``) by selection; NaN when empty.
    ``values[lo:]`` must hold the largest values (see select_nb)."""
    n = values.shape[0]
    if n == 0:
        return np.nan
    return select_nb(values, lo, rank_nb(p, n))


@nb.njit(**JIT)
def top_rank_nb(values, p, top):
    """Nearest-rank percentile ``sorted(values)[ceil(p·m/100) - 1]`` (NaN when empty),
    found as the k-th largest, k = m - rank + 1, by one scan that keeps the k largest
    in ``top`` (descending). For p = 99 and m <= 250 values, k <= 3.
    """
    m = values.shape[0]
    if m == 0:
        return np.nan
    k = m - rank_nb(p, m)  # the k-th largest is sorted[rank_nb]
    for a in range(k):
        top[a] = -np.inf
    for v in values:
        if v > top[k - 1]:
            a = k - 1
            while a > 0 and top[a - 1] < v:
                top[a] = top[a - 1]
                a -= 1
            top[a] = v
    return top[k - 1]


def nearest_rank(values: np.ndarray, p: int = 99) -> float:
    """Nearest rank ``p`` of ``values`` (shape (m,), any order), by partition; NaN when
    empty."""
    m = values.shape[0]
    if m == 0:
        return np.nan
    k = int(rank_nb(p, m))
    return float(np.partition(values, k)[k])
