"""numpy's float64 sums and maxima, fused with the terms they sum (numba, ``cache=True``): the reference
figures of :mod:`pytest_msprobe.precision.expected_error` (``observe`` and the tensor magnitudes), bit for bit
what numpy gives, without a float64 temporary.

``np.add.reduce`` of float64 values sums each run it is handed by pairwise summation (runs under 8 one by
one, runs up to 128 in 8 interleaved accumulators, longer runs split in two halves rounded down to a
multiple of 8) and adds the run's sum to the result. A contiguous float64 array is one run; values cast
from float32 come in runs of numpy's buffer size. The functions below make the terms on the fly (no
temporary array) and sum them in that order, so their sums are numpy's bit for bit.

They are the reference, not the checker's usual path: the metric pass measures the same figures of every output
it compares while it reads it (``FIGURES``, :func:`dumpers.metrics_kernel._figures`), in its own order, and the
tests hold those to these within the bound that order allows; these read the arrays the pass did not measure
(a call's inputs, a replayed output against its recording).
"""
from __future__ import annotations

import numpy as np

from dumpers.metrics_kernel import _inline, _jit, _key, _load, _unkey

T_ABS_DIFF, T_ABS, T_VALUE = 0, 1, 2


@_inline
def _term(x, y, i, mode):
    if mode == T_ABS_DIFF:
        return abs(np.float64(x[i]) - np.float64(y[i]))
    if mode == T_ABS:
        return abs(np.float64(x[i]))
    return np.float64(x[i])


@_inline
def _leaf(x, y, lo, n, mode):
    """numpy's sum of a run of at most 128 terms ``lo .. lo + n - 1`` (the end of its recursion)."""
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += _term(x, y, i, mode)
        return res
    else:
        r0, r1, r2, r3 = _term(x, y, lo, mode), _term(x, y, lo + 1, mode), _term(x, y, lo + 2, mode), \
            _term(x, y, lo + 3, mode)
        r4, r5, r6, r7 = _term(x, y, lo + 4, mode), _term(x, y, lo + 5, mode), _term(x, y, lo + 6, mode), \
            _term(x, y, lo + 7, mode)
        stop = n - n % 8
        i = 8
        while i < stop:
            j = lo + i
            r0 += _term(x, y, j, mode)
            r1 += _term(x, y, j + 1, mode)
            r2 += _term(x, y, j + 2, mode)
            r3 += _term(x, y, j + 3, mode)
            r4 += _term(x, y, j + 4, mode)
            r5 += _term(x, y, j + 5, mode)
            r6 += _term(x, y, j + 6, mode)
            r7 += _term(x, y, j + 7, mode)
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += _term(x, y, lo + i, mode)
            i += 1
    return res


# numpy's pairwise recursion (a run over 128 terms: its two halves, the first rounded down to a multiple of 8,
# added) walked with an explicit stack: numba's cache keeps no recursive function safely across processes.
_DEPTH = 130          # the path from the root to a leaf: at most 64 halvings of a 2**63-term run


@_inline
def _descend(los, ns, step, top):
    """Push the next half of the run at ``top`` (its first half, rounded down to a multiple of 8, then the
    rest) and return the new top of the stack."""
    m = ns[top]
    h = m // 2
    h -= h % 8
    child = top + 1
    los[child] = los[top] + (h if step[top] else 0)
    ns[child] = (m - h) if step[top] else h
    step[child] = 0
    step[top] += 1
    return child


@_jit
def _pairwise(x, y, lo, n, mode):
    """numpy's pairwise sum of the terms ``lo .. lo + n - 1``."""
    if n <= 128:
        return _leaf(x, y, lo, n, mode)
    los, ns = np.empty(_DEPTH, np.int64), np.empty(_DEPTH, np.int64)
    step, sums = np.zeros(_DEPTH, np.int8), np.empty(_DEPTH)
    top, r = 0, 0
    los[0], ns[0] = lo, n
    while top >= 0:
        m = ns[top]
        if m <= 128:                       # a leaf: its sum goes on the result stack
            sums[r] = _leaf(x, y, los[top], m, mode)
            r += 1
            top -= 1
        elif step[top] < 2:                # the first half, then the second
            top = _descend(los, ns, step, top)
        else:                              # both halves done: first + second
            r -= 1
            sums[r - 1] = sums[r - 1] + sums[r]
            top -= 1
    return sums[0]


@_jit
def float64_sum(x, y, mode, run):
    """numpy's float64 sum of the terms ``mode`` makes of ``x`` (and ``y``), handed over in runs of ``run``
    elements (0: one run)."""
    n = x.shape[0]
    step = n if run <= 0 else run
    total = 0.0
    start = 0
    while start < n:
        m = min(step, n - start)
        total += _pairwise(x, y, start, m, mode)
        start += m
    return total


@_jit
def abs_diff_max(x, y):
    """max |x - y| in float64 (NaN when a difference is NaN: then the caller judges the non-finite ones)."""
    k = np.int64(-1)
    for i in range(x.shape[0]):
        k = max(k, _key(abs(np.float64(x[i]) - np.float64(y[i]))))
    return _unkey(k)


@_inline
def _value(x, i):
    """Element ``i`` as float64 (float16 and bfloat16 bits widened as the metric pass widens them)."""
    return np.float64(_load(x, i))


@_inline
def _leaf_magnitudes(x, lo, n):
    """(numpy's sums of x**2, |x|, x; the key of max |x|) of a run of at most 128 elements, in one read."""
    k = np.int64(-1)
    if n < 8:
        q = a = v = -0.0
        for i in range(lo, lo + n):
            t = _value(x, i)
            q += t * t
            a += abs(t)
            v += t
            k = max(k, _key(t))
        return q, a, v, k
    else:
        v0, v1, v2, v3 = _value(x, lo), _value(x, lo + 1), _value(x, lo + 2), _value(x, lo + 3)
        v4, v5, v6, v7 = _value(x, lo + 4), _value(x, lo + 5), _value(x, lo + 6), _value(x, lo + 7)
        q0, q1, q2, q3, q4, q5, q6, q7 = v0 * v0, v1 * v1, v2 * v2, v3 * v3, v4 * v4, v5 * v5, v6 * v6, v7 * v7
        a0, a1, a2, a3, a4, a5, a6, a7 = abs(v0), abs(v1), abs(v2), abs(v3), abs(v4), abs(v5), abs(v6), abs(v7)
        k = max(max(max(_key(v0), _key(v1)), max(_key(v2), _key(v3))),
                max(max(_key(v4), _key(v5)), max(_key(v6), _key(v7))))
        stop = n - n % 8
        i = 8
        while i < stop:
            j = lo + i
            t0, t1, t2, t3 = _value(x, j), _value(x, j + 1), _value(x, j + 2), _value(x, j + 3)
            t4, t5, t6, t7 = _value(x, j + 4), _value(x, j + 5), _value(x, j + 6), _value(x, j + 7)
            q0, q1, q2, q3 = q0 + t0 * t0, q1 + t1 * t1, q2 + t2 * t2, q3 + t3 * t3
            q4, q5, q6, q7 = q4 + t4 * t4, q5 + t5 * t5, q6 + t6 * t6, q7 + t7 * t7
            v0, v1, v2, v3, v4, v5, v6, v7 = v0 + t0, v1 + t1, v2 + t2, v3 + t3, v4 + t4, v5 + t5, v6 + t6, v7 + t7
            a0, a1, a2, a3 = a0 + abs(t0), a1 + abs(t1), a2 + abs(t2), a3 + abs(t3)
            a4, a5, a6, a7 = a4 + abs(t4), a5 + abs(t5), a6 + abs(t6), a7 + abs(t7)
            k = max(k, max(max(max(_key(t0), _key(t1)), max(_key(t2), _key(t3))),
                           max(max(_key(t4), _key(t5)), max(_key(t6), _key(t7)))))
            i += 8
        q = ((q0 + q1) + (q2 + q3)) + ((q4 + q5) + (q6 + q7))
        a = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
        v = ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7))
        while i < n:
            t = _value(x, lo + i)
            q += t * t
            a += abs(t)
            v += t
            k = max(k, _key(t))
            i += 1
    return q, a, v, k


@_jit
def _pairwise_magnitudes(x, lo, n):
    """(numpy's pairwise sums of x**2, |x|, x; the key of max |x|) over ``lo .. lo + n - 1``, in one read."""
    if n <= 128:
        return _leaf_magnitudes(x, lo, n)
    los, ns = np.empty(_DEPTH, np.int64), np.empty(_DEPTH, np.int64)
    step, keys = np.zeros(_DEPTH, np.int8), np.empty(_DEPTH, np.int64)
    sq, ab, va = np.empty(_DEPTH), np.empty(_DEPTH), np.empty(_DEPTH)
    top, r = 0, 0
    los[0], ns[0] = lo, n
    while top >= 0:
        m = ns[top]
        if m <= 128:
            sq[r], ab[r], va[r], keys[r] = _leaf_magnitudes(x, los[top], m)
            r += 1
            top -= 1
        elif step[top] < 2:
            top = _descend(los, ns, step, top)
        else:
            r -= 1
            sq[r - 1], ab[r - 1], va[r - 1] = sq[r - 1] + sq[r], ab[r - 1] + ab[r], va[r - 1] + va[r]
            keys[r - 1] = max(keys[r - 1], keys[r])
            top -= 1
    return sq[0], ab[0], va[0], keys[0]


@_jit
def magnitude_sums(x, run):
    """(sum of x**2, of |x|, of x, max |x|) in float64, in one read of ``x`` (float32, float64, or the bits of
    float16 as uint16 and of bfloat16 as int16, widened exactly), the sums handed over in runs of ``run``
    elements (0: one run) as numpy hands a float64 sum its runs: ``np.square(v, dtype=np.float64).sum()``,
    ``np.abs(v).sum(dtype=np.float64)``, ``v.sum(dtype=np.float64)`` and ``np.abs(v).max()`` of the values
    ``v`` bit for bit (NaN propagates into every figure; the maximum is -1.0 for an empty array)."""
    n = x.shape[0]
    step = n if run <= 0 else run
    q = a = v = 0.0
    k = np.int64(-1)
    start = 0
    while start < n:
        m = min(step, n - start)
        r, s, t, top = _pairwise_magnitudes(x, start, m)
        q += r
        a += s
        v += t
        k = max(k, top)
        start += m
    return q, a, v, _unkey(k)
