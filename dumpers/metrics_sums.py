"""numpy's sums, made in numpy's order by numba (``cache=True``), bit for bit what numpy gives, without a
temporary array: the metric pass's chunk sums, and the reference figures of
:mod:`pytest_msprobe.precision.expected_error`.

``np.add.reduce`` hands its loop runs of numpy's buffer size (``np.getbufsize()``, 8192 by default), sums each
run pairwise (runs under 8 one by one, up to 128 in 8 interleaved accumulators, longer ones split in two halves,
the first rounded down to a multiple of 8) in the result's type (float16 in float32, rounded to float16 after each
run) and adds the runs' sums in order to 0. ``np.einsum("i,i->")`` of two float64 arrays sums runs of 8192
products in two lanes (see :func:`_dots`).

- :func:`array_sum` and :func:`_dots`: the sums :mod:`dumpers.metrics_kernel` makes of a chunk (masked squares,
  kept relative errors, ULP errors; the cosine's dot products, read straight from the chunk's elements).
- :func:`float64_sum`, :func:`abs_diff_max`, :func:`magnitude_sums`: float64 sums and maxima fused with the terms
  they sum (``|x - y|``, ``|x|``, ``x``, ``x**2``), the reference figures (``observe`` and the tensor magnitudes).
  They are the reference, not the checker's usual path: the metric pass measures the same figures of every output
  it compares while it reads it (``FIGURES``, :func:`dumpers.metrics_kernel._figures`), in its own order, and the
  tests hold those to these within the bound that order allows; these read the arrays the pass did not measure
  (a call's inputs, a replayed output against its recording).
"""
from __future__ import annotations

import numpy as np

from dumpers.metrics_types import _finite, _inline, _jit, _key, _load, _rnd, _unkey

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


# --- np.sum of a float32 or float64 array, in its type ---------------------------------------------------------
_U1, _U2, _U3, _U4, _U5, _U6, _U7, _U8 = (np.uint64(k) for k in range(1, 9))


@_inline
def _leaf_elements(a, lo, n):
    """numpy's sum of ``a[lo:lo + n]`` (1 <= n <= 128) in a's type. (Unsigned indices: numba checks no
    negative index for them, so the eight accumulators vectorise.)"""
    if n < 8:
        res = a[lo]                       # -0.0 + a[lo], exactly
        for i in range(lo + 1, lo + n):
            res += a[i]
        return res
    u = np.uint64(lo)
    r0, r1, r2, r3 = a[u], a[u + _U1], a[u + _U2], a[u + _U3]
    r4, r5, r6, r7 = a[u + _U4], a[u + _U5], a[u + _U6], a[u + _U7]
    stop = np.uint64(lo + n - n % 8)
    u += _U8
    while u < stop:
        r0, r1, r2, r3 = r0 + a[u], r1 + a[u + _U1], r2 + a[u + _U2], r3 + a[u + _U3]
        r4, r5, r6, r7 = r4 + a[u + _U4], r5 + a[u + _U5], r6 + a[u + _U6], r7 + a[u + _U7]
        u += _U8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    end = np.uint64(lo + n)
    while u < end:
        res += a[u]
        u += _U1
    return res


@_inline
def _pairwise_elements(a, lo, n):
    """numpy's pairwise sum of ``a[lo:lo + n]`` (n >= 1) in a's type. (:func:`_pairwise`'s walk, for an array's
    own elements: one walker choosing its leaf at run time compiles both leaves for every signature, which made
    the kernel's first compile 50 s instead of 27 s.)"""
    if n <= 128:
        return _leaf_elements(a, lo, n)
    los, ns = np.empty(_DEPTH, np.int64), np.empty(_DEPTH, np.int64)
    step, sums = np.zeros(_DEPTH, np.int8), np.empty(_DEPTH, a.dtype)
    top, r = 0, 0
    los[0], ns[0] = lo, n
    while top >= 0:
        m = ns[top]
        if m <= 128:
            sums[r] = _leaf_elements(a, los[top], m)
            r += 1
            top -= 1
        elif step[top] < 2:
            top = _descend(los, ns, step, top)
        else:
            r -= 1
            sums[r - 1] = sums[r - 1] + sums[r]
            top -= 1
    return sums[0]


@_jit
def array_sum(a, n, run, z):
    """``np.sum(a[:n])`` of a contiguous float32 or float64 array in type ``z`` (a's, or float16 for float16
    values held in float32), bit for bit: numpy hands the reduction runs of ``run`` elements (its buffer size,
    ``np.getbufsize()``), sums each pairwise (float16 in float32) and adds the runs' sums in order to 0, the
    total rounded to ``z`` after each."""
    total = _rnd(0.0, z)
    start = 0
    while start < n:
        m = min(run, n - start)
        total = _rnd(total + _pairwise_elements(a, start, m), z)
        start += m
    return total


# The dot products in np.einsum's order ("i,i->" of two contiguous float64 arrays): runs of 8192 elements (numpy's
# default buffer size; einsum keeps it whatever np.setbufsize says, unlike np.sum), each summed in two lanes (even
# and odd positions), eight elements a step, the step's pairs added from the last to the first; a tail of under
# eight in pairs, a missing odd element as +0.0; then the two lanes added and the run's sum added to the result.
# Each lane is a chain of dependent additions: the three products are made a block at a time first (a vectorised
# loop) and their three chains then run side by side.
_RUN, _BLOCK_DOTS = 8192, 512


@_inline
def _pair(b, d, i, zb, zd, zae, zero_agreed, scaled, sd, sb):
    """(device, bench) element ``i`` as the cosine reads it: float64, an agreed non-finite position as zeros,
    divided by the scales if ``scaled``."""
    bv, dv = _load(b, i), _load(d, i)
    x, y = np.float64(dv), np.float64(bv)
    if zero_agreed:
        bt = _rnd(bv, zd)
        if ~_finite(_rnd(dv - bv, zae)) & (((dv != dv) & (bt != bt)) | (dv == bt)):
            x, y = 0.0, 0.0
    if scaled:
        x, y = x / sd, y / sb
    return x, y


@_jit
def _products(b, d, zb, zd, zae, zero_agreed, scaled, sd, sb, pdb, pdd, pbb):
    """The products x*y, x*x, y*y of a block (a loop of its own: it vectorises)."""
    for j in range(b.shape[0]):
        x, y = _pair(b, d, j, zb, zd, zae, zero_agreed, scaled, sd, sb)
        pdb[j] = x * y
        pdd[j] = x * x
        pbb[j] = y * y


@_jit
def _dots(b, d, zb, zd, zae, zero_agreed, scaled, sd, sb, out):
    """``out`` = (d.b, d.d, b.b) of the chunk in np.einsum's order (see above); agreed non-finite positions
    zeroed if ``zero_agreed``."""
    n = b.shape[0]
    pdb, pdd, pbb = np.empty(_BLOCK_DOTS), np.empty(_BLOCK_DOTS), np.empty(_BLOCK_DOTS)
    t0 = t1 = t2 = 0.0
    for lo in range(0, n, _RUN):
        hi = min(lo + _RUN, n)
        full = lo + (hi - lo) // 8 * 8
        p0 = p1 = q0 = q1 = r0 = r1 = 0.0
        for blo in range(lo, full, _BLOCK_DOTS):
            m = min(_BLOCK_DOTS, full - blo)
            _products(b[blo:blo + m], d[blo:blo + m], zb, zd, zae, zero_agreed, scaled, sd, sb, pdb, pdd, pbb)
            for k in range(m // 8):
                j = np.uint64(8 * k)          # unsigned: no negative-index wraparound in the loop
                p0 = (((p0 + pdb[j + 6]) + pdb[j + 4]) + pdb[j + 2]) + pdb[j]
                p1 = (((p1 + pdb[j + 7]) + pdb[j + 5]) + pdb[j + 3]) + pdb[j + 1]
                q0 = (((q0 + pdd[j + 6]) + pdd[j + 4]) + pdd[j + 2]) + pdd[j]
                q1 = (((q1 + pdd[j + 7]) + pdd[j + 5]) + pdd[j + 3]) + pdd[j + 1]
                r0 = (((r0 + pbb[j + 6]) + pbb[j + 4]) + pbb[j + 2]) + pbb[j]
                r1 = (((r1 + pbb[j + 7]) + pbb[j + 5]) + pbb[j + 3]) + pbb[j + 1]
        tail = hi - full                      # under 8: in pairs, a missing odd element's products +0.0
        _products(b[full:hi], d[full:hi], zb, zd, zae, zero_agreed, scaled, sd, sb, pdb, pdd, pbb)
        pdb[tail] = pdd[tail] = pbb[tail] = 0.0
        for j in range(0, tail, 2):
            p0, q0, r0 = p0 + pdb[j], q0 + pdd[j], r0 + pbb[j]
            p1, q1, r1 = p1 + pdb[j + 1], q1 + pdd[j + 1], r1 + pbb[j + 1]
        t0 += p0 + p1
        t1 += q0 + q1
        t2 += r0 + r1
    out[0], out[1], out[2] = t0, t1, t2
