"""The compiled per-chunk pass of the precision metrics (numba, ``cache=True``): every metric group, one kernel.

:func:`chunk_pass` reads one chunk of the prepared bench and device arrays from memory once and computes, in
one loop per metric group over the chunk while it is in the cache (each group's loop holds only its own code,
so the common ones vectorise), everything of spec precision-standard.md section 2 that does not depend on the
order of the elements: counts, NaN-propagating maxima, the masked squares, the kept relative errors (in
order), the ULP errors and the float64 copies the cosine's dot products read. :mod:`dumpers.metrics_engine` sums those
arrays with numpy (``np.sum``, ``np.einsum``), so the sums keep numpy's own order and bits.

Every operation is done in float64 and rounded to the numpy type the reference computes it in (float16,
float32 or float64; each of these is exact: a float64 result of one +, -, * or / of float16/float32 values
rounds to the same value as the operation in that type), so the numbers are the numpy reference's bit for
bit. float16 arrays are read as their bits (numba has no float16).
"""
from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

# element kinds: what numpy type a value lives in
F64, F32, F16 = 0, 1, 2
# metric groups
LEGACY, BINARY, SMALL, ABSOLUTE, ULP, AGREE, CLASS_MATCH = 1, 2, 4, 8, 16, 32, 64
# par: eps, t0, t1, t2, sv, sv_atol, a_sv, a_atol, a_rtol, a_hi, ulp_min_eb, ulp_exp, ulp_thr, ulp compute kind
(P_EPS, P_T0, P_T1, P_T2, P_SV, P_SV_ATOL, P_A_SV, P_A_ATOL, P_A_RTOL, P_A_HI, P_MIN_EB, P_EXP, P_THR,
 P_KC) = range(14)
N_PAR = 14
# cnt: counts
(C_R0, C_R1, C_R2, C_BIN, C_SV, C_SV_ERR, C_MASKED, C_EBP, C_EBN, C_KEPT, C_INF, C_INF_BAD, C_ASV, C_ASV_ERR,
 C_NORMAL, C_NORMAL_ERR, C_ULP_ABOVE, C_AGREED, C_MISMATCH) = range(19)
N_CNT = 19
# mx: maxima (NaN propagates); each slot starts at -1 ("none yet"), every value it takes is >= 0 or NaN
M_AE, M_B, M_D, M_RE, M_ULP = range(5)
N_MAX = 5


@intrinsic
def _as_f32(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


def _kind_of(a):
    """The element kind of an array (F16 for the uint16 bits of float16), a constant of the compiled code."""


@overload(_kind_of)
def _kind_of_typed(a):
    kind = F16 if a.dtype == types.uint16 else (F32 if a.dtype == types.float32 else F64)
    return lambda a: kind


_jit = numba.njit(nogil=True, boundscheck=False, cache=True, error_model="numpy")
_inline = numba.njit(nogil=True, boundscheck=False, cache=True, error_model="numpy", inline="always")


@_jit
def _f16_value(h):
    """float16 bits -> float64, exactly."""
    sign = -1.0 if h & 0x8000 else 1.0
    e = (h >> 10) & 0x1f
    m = h & 0x3ff
    if e == 0x1f:
        return sign * math.inf if m == 0 else math.nan
    if e == 0:
        return sign * math.ldexp(float(m), -24)
    return sign * math.ldexp(float(m | 0x400), e - 25)


@_jit
def _to_f16(x):
    """``x`` rounded to the nearest float16 (ties to even, subnormals, overflow to inf), as float64."""
    if x == 0.0 or not math.isfinite(x):
        return x
    e = math.frexp(x)[1]
    qe = -24 if e - 11 < -24 else e - 11
    r = math.ldexp(np.rint(math.ldexp(x, -qe)), qe)
    return math.copysign(math.inf, r) if abs(r) > 65504.0 else r


@_inline
def _rnd(x, kind):
    """``x`` (float64) as the numpy type ``kind`` rounds it."""
    if kind == F64:
        return x
    if kind == F32:
        return np.float64(np.float32(x))
    return _to_f16(x)


@_inline
def _value(a, i, kind):
    """Element ``i`` of a float array (float16 ones as their uint16 bits) as float64."""
    if kind == F16:
        return _f16_value(np.uint16(a[i]))
    return np.float64(a[i])


@intrinsic
def _bits(typingctx, value):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def _from_bits(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@_inline
def _key(x):
    """An order key of a value >= 0 or NaN: its bits with the sign cleared. Every NaN's key is above
    inf's, so the maximum of the keys is numpy's NaN-propagating maximum, as an integer maximum (which,
    unlike a NaN-aware float maximum, does not serialise the loop)."""
    return _bits(abs(x))


@_inline
def _start(m):
    """The key of a running maximum (-1.0: nothing seen yet -> key -1)."""
    return np.int64(-1) if m < 0 else _key(m)


@_inline
def _unkey(k):
    """A running maximum's key back to its value; -1 (nothing seen) stays -1.0."""
    return -1.0 if k < 0 else _from_bits(k)


@_inline
def _pow2(k):
    """2**k of an integral k, exactly; inf/nan pass through as exp2 gives them."""
    if -1022.0 <= k <= 1023.0:          # a normal float64: its exponent field alone
        return _from_bits(np.int64(k + 1023) << 52)
    if not math.isfinite(k):
        return math.pow(2.0, k)
    return math.ldexp(1.0, int(k))


@_inline
def _floor_log2(a, kc):
    """``floor(log2(a))`` with ``log2`` rounded to the compute type, as numpy computes it, for ``a > 0``.

    For a normal ``a = m * 2**e`` (1 <= m < 2) that is ``e`` unless ``m`` is so close to 2 that the rounded
    logarithm reaches ``e + 1`` (only above m = 1.99, whatever ``e``: the type's unit there is below 2**-6);
    those, subnormals, inf and NaN take the logarithm itself."""
    bits = _bits(a)
    field = (bits >> 52) & 0x7ff
    if 0 < field < 0x7ff and (bits & 0xfffffffffffff) <= 0xfd70a3d70a3d7:    # m <= 1.99
        return np.float64(field - 1023)
    return np.floor(_rnd(math.log2(a), kc))


@_jit
def chunk_pass(b, d, kb, kd, flags, par, sq, re, b64, d64, ulp, cnt, mx):
    """One chunk: ``b``/``d`` bench and device (kinds ``kb``/``kd``), ``flags`` the groups, ``par`` the
    parameters. Writes ``sq`` (masked squares), ``re`` (kept relative errors, compacted), ``b64``/``d64``
    (float64 copies for the dot products, agreed non-finite positions zeroed; skipped when empty), ``ulp``
    (ULP errors); adds to ``cnt`` and ``mx``."""
    n = b.shape[0]
    # the kinds follow from the arrays' element types, so they are constants of each compiled version
    kb, kd = _kind_of(b), _kind_of(d)
    kae = kb if kb < kd else kd                  # numpy's result type of bench and device
    legacy, binary, small = flags & LEGACY, flags & BINARY, flags & SMALL
    absolute, ulp_on, agree_on, class_match = flags & ABSOLUTE, flags & ULP, flags & AGREE, flags & CLASS_MATCH
    eps = par[P_EPS]
    t0, t1, t2 = par[P_T0], par[P_T1], par[P_T2]
    sv, sv_atol, a_sv, a_atol, a_rtol, a_hi = (par[P_SV], par[P_SV_ATOL], par[P_A_SV], par[P_A_ATOL],
                                               par[P_A_RTOL], par[P_A_HI])
    kc = int(par[P_KC])                         # the ULP compute type
    min_eb, exp_num, thr = par[P_MIN_EB], par[P_EXP], par[P_THR]
    # counts and maxima in locals (registers), added to cnt/mx once at the end
    r0 = r1 = r2 = n_bin = n_sv = sv_err = masked = ebp = ebn = kept = 0
    n_inf = inf_bad = n_asv = asv_err = n_normal = normal_err = ulp_above = n_agreed = n_mismatch = 0
    k_ae, k_b, k_d = _start(mx[M_AE]), _start(mx[M_B]), _start(mx[M_D])
    k_re, k_ulp = _start(mx[M_RE]), _start(mx[M_ULP])
    # One loop per group over the chunk (in cache by then): each loop holds only its group's code, so the
    # common groups' loops vectorise (a loop holding every group's code does not).
    if legacy or binary:
        for i in range(n):
            bv = _value(b, i, kb)
            dv = _value(d, i, kd)
            ae = abs(_rnd(dv - bv, kae))
            agreed = False
            if agree_on and not math.isfinite(ae):
                bt = _rnd(bv, kd)
                agreed = (dv != dv and bt != bt) or dv == bt
                if agreed:
                    n_agreed += 1
                else:
                    n_mismatch += 1
            if legacy:
                r = _rnd(ae / _rnd(abs(bv) + eps, kb), kae)
                if agreed:
                    k_d, k_b, k_ae = max(k_d, 0), max(k_b, 0), max(k_ae, 0)
                    r0 += 1
                    r1 += 1
                    r2 += 1
                else:
                    k_d, k_b, k_ae = max(k_d, _key(dv)), max(k_b, _key(bv)), max(k_ae, _key(ae))
                    r0 += r < t0
                    r1 += r < t1
                    r2 += r < t2
                b64[i] = 0.0 if agreed else bv
                d64[i] = 0.0 if agreed else dv
            if binary and bv != dv and not (agreed and dv != dv and bv != bv):
                n_bin += 1
    if small:
        for i in range(n):
            bv = _value(b, i, kb)
            dv = _value(d, i, kd)
            ae = abs(_rnd(dv - bv, kae))
            ab = abs(bv)
            bp = _rnd(bv, kd)
            fin = math.isfinite(dv) and math.isfinite(bp)
            s = ab <= sv and fin
            m = s or not fin
            n_sv += s
            sv_err += s and ae > sv_atol
            masked += m
            sq[i] = 0.0 if m else _rnd(ae * ae, kae)
            delta = dv - bp
            ebp += delta > 0
            ebn += delta < 0
            r = _rnd(ae / _rnd(ab + eps, kb), kae)
            re[i] = -math.inf if m else r         # -inf marks a masked element: a kept one is >= 0 or NaN
            k_re = max(k_re, -1 if m else _key(r))
        for i in range(n):                         # the kept ones, in order, to the front
            x = re[i]
            if x != -math.inf:
                re[kept] = x
                kept += 1
    if absolute:
        kq = kb if kb < kd else kd
        for i in range(n):
            bv = _value(b, i, kb)
            dv = _value(d, i, kd)
            ae = abs(_rnd(dv - bv, kae))
            ab = abs(bv)
            abe = _rnd(ab + eps, kb)
            bp = _rnd(bv, kd)
            fin = math.isfinite(dv) and math.isfinite(bp)
            s = ab <= a_sv and fin
            n_asv += s
            asv_err += s and ae > a_atol
            if fin and not s:
                n_normal += 1
                normal_err += _rnd(ae / abe, kae) > a_rtol
            if not fin:
                gc = bp if bp != bp else min(max(bp, -a_hi), a_hi)
                dc = dv if dv != dv else min(max(dv, -a_hi), a_hi)
                ok = _rnd(abs(_rnd(dc - gc, kd)) / abe, kq) <= a_rtol or (dv != dv and gc != gc)
                if class_match and math.isinf(bp):
                    ok = dv == bp
                n_inf += 1
                inf_bad += not ok
    if ulp_on:
        for i in range(n):
            bv = _value(b, i, kb)
            dv = _value(d, i, kd)
            bc = _rnd(bv, kc)
            a = abs(bc)
            eb = 0.0 if bc == 0 else _floor_log2(a, kc)
            eb = eb if eb != eb or eb >= min_eb else min_eb
            u = abs(_rnd(_rnd(_rnd(dv, kc) - bc, kc) * _rnd(_pow2(exp_num - eb), kc), kc))
            ulp[i] = u
            k_ulp = max(k_ulp, _key(u))
            ulp_above += u > thr
    for slot, value in ((C_R0, r0), (C_R1, r1), (C_R2, r2), (C_BIN, n_bin), (C_SV, n_sv), (C_SV_ERR, sv_err),
                        (C_MASKED, masked), (C_EBP, ebp), (C_EBN, ebn), (C_KEPT, kept), (C_INF, n_inf),
                        (C_INF_BAD, inf_bad), (C_ASV, n_asv), (C_ASV_ERR, asv_err), (C_NORMAL, n_normal),
                        (C_NORMAL_ERR, normal_err), (C_ULP_ABOVE, ulp_above), (C_AGREED, n_agreed),
                        (C_MISMATCH, n_mismatch)):
        cnt[slot] += value
    mx[M_AE], mx[M_B], mx[M_D] = _unkey(k_ae), _unkey(k_b), _unkey(k_d)
    mx[M_RE], mx[M_ULP] = _unkey(k_re), _unkey(k_ulp)
    return kept


@_jit
def count_unequal(b, d):
    """``count(b != d)`` of two integer or bool arrays (values compared as numpy compares them)."""
    c = 0
    for i in range(b.shape[0]):
        c += b[i] != d[i]
    return c


# --- numpy's float64 sums, fused with the terms they sum --------------------------------------------------
# ``np.add.reduce`` of float64 values sums each run it is handed by pairwise summation (runs under 8 one by
# one, runs up to 128 in 8 interleaved accumulators, longer runs split in two halves rounded down to a
# multiple of 8) and adds the run's sum to the result. A contiguous float64 array is one run; values cast
# from float32 come in runs of numpy's buffer size. The functions below make the terms on the fly (no
# temporary array) and sum them in that order, so their sums are numpy's bit for bit.
T_ABS_DIFF, T_ABS, T_VALUE = 0, 1, 2


@_inline
def _term(x, y, i, mode):
    if mode == T_ABS_DIFF:
        return abs(np.float64(x[i]) - np.float64(y[i]))
    if mode == T_ABS:
        return abs(np.float64(x[i]))
    return np.float64(x[i])


@_jit
def _pairwise(x, y, lo, n, mode):
    """numpy's pairwise sum of the terms ``lo .. lo + n - 1``."""
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += _term(x, y, i, mode)
        return res
    if n <= 128:
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
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(x, y, lo, n2, mode) + _pairwise(x, y, lo + n2, n - n2, mode)


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


@_jit
def abs_max(x):
    """max |x| as float64 (NaN propagates; -1.0 for an empty array)."""
    k = np.int64(-1)
    for i in range(x.shape[0]):
        k = max(k, _key(np.float64(x[i])))
    return _unkey(k)


@_jit
def _pairwise_abs_value(x, lo, n):
    """(numpy's pairwise sum of |x|, of x) over ``lo .. lo + n - 1``, both in one read, as float64."""
    if n < 8:
        a = v = -0.0
        for i in range(lo, lo + n):
            t = np.float64(x[i])
            a += abs(t)
            v += t
        return a, v
    if n <= 128:
        v0, v1, v2, v3 = np.float64(x[lo]), np.float64(x[lo + 1]), np.float64(x[lo + 2]), np.float64(x[lo + 3])
        v4, v5, v6, v7 = np.float64(x[lo + 4]), np.float64(x[lo + 5]), np.float64(x[lo + 6]), np.float64(x[lo + 7])
        a0, a1, a2, a3, a4, a5, a6, a7 = abs(v0), abs(v1), abs(v2), abs(v3), abs(v4), abs(v5), abs(v6), abs(v7)
        stop = n - n % 8
        i = 8
        while i < stop:
            j = lo + i
            t0, t1, t2, t3 = np.float64(x[j]), np.float64(x[j + 1]), np.float64(x[j + 2]), np.float64(x[j + 3])
            t4, t5, t6, t7 = np.float64(x[j + 4]), np.float64(x[j + 5]), np.float64(x[j + 6]), np.float64(x[j + 7])
            v0, v1, v2, v3, v4, v5, v6, v7 = v0 + t0, v1 + t1, v2 + t2, v3 + t3, v4 + t4, v5 + t5, v6 + t6, v7 + t7
            a0, a1, a2, a3 = a0 + abs(t0), a1 + abs(t1), a2 + abs(t2), a3 + abs(t3)
            a4, a5, a6, a7 = a4 + abs(t4), a5 + abs(t5), a6 + abs(t6), a7 + abs(t7)
            i += 8
        a = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
        v = ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7))
        while i < n:
            t = np.float64(x[lo + i])
            a += abs(t)
            v += t
            i += 1
        return a, v
    n2 = n // 2
    n2 -= n2 % 8
    a, v = _pairwise_abs_value(x, lo, n2)
    b, w = _pairwise_abs_value(x, lo + n2, n - n2)
    return a + b, v + w


@_jit
def abs_value_sums(x, run):
    """(numpy's float64 sum of |x|, of x) in one read, handed over in runs of ``run`` elements (0: one run):
    ``np.abs(x).sum(dtype=np.float64)`` and ``x.sum(dtype=np.float64)`` bit for bit."""
    n = x.shape[0]
    step = n if run <= 0 else run
    a = v = 0.0
    start = 0
    while start < n:
        m = min(step, n - start)
        s, t = _pairwise_abs_value(x, start, m)
        a += s
        v += t
        start += m
    return a, v
