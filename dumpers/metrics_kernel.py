"""The compiled per-chunk pass of the precision metrics (numba, ``cache=True``): every metric group, one kernel.

:func:`chunk_pass` reads one chunk of the prepared bench and device arrays and computes, in one loop per metric
group over the chunk while it is in the cache, everything of spec precision-standard.md section 2 that does not
depend on the order of the elements: counts, NaN-propagating maxima, the masked squares, the kept relative errors
(in order), the ULP errors; then the chunk's sums of those in numpy's order, and the cosine's dot products of the
chunk's float64 values in ``np.einsum``'s (:mod:`dumpers.metrics_sums`), so every sum is numpy's, bit for bit.

One group is no metric of the standard: the figures of the Error / Expected column (``FIGURES``, :func:`_figures`):
the device output's magnitudes and its observed error against the bench, the same terms as the reference
functions the tests hold them to (``observe`` and the tensor magnitudes of
``pytest_msprobe.precision.expected_error_facts``, summed in numpy's order by :mod:`dumpers.metrics_sums`),
summed in the vector lanes in the pass instead: within a stated bound of the reference, not its bits.

Every operation is done in the numpy type the reference computes it in: float32 and float64 natively, so a loop
is the reference's per-element arithmetic, branch-free and vectorised; float16 (numba has none) on float32 values
rounded to float16 after each operation, which is exact (a float32 result of one +, -, * or / of float16 values
rounds to the float16 result). float16 and bfloat16 come as their bits (uint16, int16), widened in the loop, so
no converted copy is made. Exponents come from the bits of the floats; the rare elements whose exponent needs the
rounded logarithm (see :func:`_ulp_fast`) take a second, scalar look.
"""
from __future__ import annotations

import math

import numpy as np
from numba import types
from numba.extending import overload

from dumpers.metrics_sums import _dots, array_sum
from dumpers.metrics_types import (_bits, _bits32, _finite, _from_bits, _from_bits32, _inc, _inline, _jit, _key,
                                   _load, _pow2, _reassoc, _rnd, _start, _type_of, _unkey, _wider)

# metric groups; DOTS: the cosine's dot products of the chunk (SCALED: of the values divided by par's scales)
LEGACY, BINARY, SMALL, ABSOLUTE, ULP, AGREE, CLASS_MATCH, FIGURES, DOTS, SCALED = 1, 2, 4, 8, 16, 32, 64, 128, 256, 512
# par: eps, t0, t1, t2, sv, sv_atol, a_sv, a_atol, a_rtol, a_hi, ulp_min_eb, ulp_exp, ulp_thr, the scales of d and b,
# numpy's buffer size (the runs its sums are made in)
(P_EPS, P_T0, P_T1, P_T2, P_SV, P_SV_ATOL, P_A_SV, P_A_ATOL, P_A_RTOL, P_A_HI, P_MIN_EB, P_EXP, P_THR, P_SCALE_D,
 P_SCALE_B, P_RUN) = range(16)
N_PAR = 16
# cnt: counts
(C_R0, C_R1, C_R2, C_BIN, C_SV, C_SV_ERR, C_MASKED, C_EBP, C_EBN, C_KEPT, C_INF, C_INF_BAD, C_ASV, C_ASV_ERR,
 C_NORMAL, C_NORMAL_ERR, C_ULP_ABOVE, C_AGREED, C_MISMATCH) = range(19)
N_CNT = 19
# mx: maxima (NaN propagates); each slot starts at -1 ("none yet"), every value it takes is >= 0 or NaN
M_AE, M_B, M_D, M_RE, M_ULP = range(5)
N_MAX = 5
# fig (FIGURES): the device's finite elements' sums of squares, magnitudes and values and their largest magnitude;
# the observed error |d - b|: its largest value and sum, and how many non-finite positions mismatch
F_SQ, F_ABS, F_SUM, F_PEAK, F_ERR_MAX, F_ERR_SUM, F_ERR_BAD = range(7)
N_FIG = 7
# out: the chunk's sums: the dot products d.b, d.d, b.b (DOTS), of the masked squares and the kept relative errors
# (SMALL) and of the ULP errors (ULP), each as numpy sums the chunk's array
O_DOT, O_SDD, O_SBB, O_SQ, O_RE, O_ULP = range(6)
N_OUT = 6

# The ULP exponent floor(log2|b|), with log2 rounded to the compute type as numpy computes it, is the exponent
# field of a normal b = m * 2**e (1 <= m < 2) unless m is so close to 2 that the rounded logarithm reaches e + 1.
# float32: |e + 1| <= 150, where half a float32 unit is at most 2**-17, and log2(m) <= 1 - 4.4e-5 for
# m <= 2 - 2**-14; float64: |e + 1| <= 1024, half a unit at most 2**-44, log2(m) <= 1 - 6.7e-10 for m <= 2 - 2**-30.
# Above those bounds (about one element in 16000 resp. 1e9), and for subnormals, inf and nan, the logarithm decides.
_BOUND32, _BOUND64 = 0x7ffe00, 0xfffffffc00000       # the mantissa fields of 2 - 2**-14 and 2 - 2**-30


def _ulp_fast(bc, min_eb, exp_num, exact):
    """(whether the exponent of ``bc`` comes from its bits, 2**(exp_num - max(eb, min_eb)) in bc's type);
    ``exact``: the parameters are integers (float32 works them in int32, 8 lanes wide)."""


@overload(_ulp_fast)
def _ulp_fast_typed(bc, min_eb, exp_num, exact):
    if bc == types.float32:
        def impl(bc, min_eb, exp_num, exact):
            bits = np.int32(_bits32(bc) & 0x7fffffff)
            field = np.int32(bits >> 23)
            k = np.int32(np.int32(exp_num) - max(np.int32(0 if bits == 0 else field - 127), np.int32(min_eb)))
            fast = exact & ((bits == 0) | ((field > 0) & (field < 0xff) & (np.int32(bits & 0x7fffff) <= _BOUND32)))
            fast &= (k >= -126) & (k <= 127)                  # 2**k a normal float32
            return fast, _from_bits32(np.int32((min(max(k, -126), 127) + 127) << 23))
        return impl

    def impl(bc, min_eb, exp_num, exact):
        bits = _bits(np.float64(bc)) & 0x7fffffffffffffff
        field, mant = bits >> 52, bits & 0xfffffffffffff
        fast = (bits == 0) | ((field > 0) & (field < 0x7ff) & (mant <= _BOUND64))
        eb = np.float64(0 if bits == 0 else field - 1023)
        k = exp_num - (eb if eb >= min_eb else min_eb)
        fast &= (k >= -1022.0) & (k <= 1023.0)
        k = min(max(k, -1022.0), 1023.0)
        return fast, _from_bits(np.int64(k + 1023) << 52)
    return impl


@_inline
def _ulp_fix(b, d, i, zc, min_eb, exp_num, thr, mark, ulp, above, k_ulp):
    """Element ``i`` the general way if the fast loop marked it; the count above and the maximum's key."""
    if ulp[i] != mark:
        return above, k_ulp
    u = _ulp_slow(_rnd(_load(b, i), zc), _rnd(_load(d, i), zc), zc, min_eb, exp_num)
    ulp[i] = u
    return _inc(above, u > thr), max(k_ulp, _key(u))


@_inline
def _ulp_slow(bc, dc, zc, min_eb, exp_num):
    """One ULP error the general way (2**k of any k, the rounded logarithm)."""
    a = np.float64(abs(bc))
    eb = 0.0 if a == 0 else np.floor(np.float64(_rnd(math.log2(a), zc)))
    eb = eb if eb != eb or eb >= min_eb else min_eb
    return abs(_rnd(_rnd(dc - bc, zc) * _rnd(_pow2(exp_num - eb), zc), zc))


@_jit
def chunk_pass(b, d, flags, par, sq, re, ulp, cnt, mx, fig, out):
    """One chunk: ``b``/``d`` bench and device (float64, float32, float16 bits as uint16, bfloat16 bits as int16),
    ``flags`` the groups, ``par`` the parameters; ``sq``, ``re`` and ``ulp`` scratch of the chunk's size (float16
    results kept in float32), in the types the sums are made in. Adds to ``cnt``, ``mx`` and (FIGURES) ``fig``;
    sets ``out``: (DOTS) the dot products of the float64 values (agreed non-finite positions zeroed; SCALED:
    d and b divided by ``par``'s scales) as ``np.einsum`` sums them, (SMALL) ``np.sum`` of the masked squares and
    of the kept relative errors, (ULP) of the ULP errors. The types follow from the arrays' element types:
    constants of each compiled version."""
    n = b.shape[0]
    zb, zd = _type_of(b), _type_of(d)
    zae = _wider(zb, zd)                         # numpy's result type of bench and device
    zc = _type_of(ulp)                           # the ULP compute type
    agree = (flags & AGREE) != 0
    eps = _rnd(par[P_EPS], zb)
    t0, t1, t2 = _rnd(par[P_T0], zae), _rnd(par[P_T1], zae), _rnd(par[P_T2], zae)
    agreed = _legacy(b, d, zb, zd, zae, agree, eps, t0, t1, t2, cnt, mx) if flags & (LEGACY | BINARY) else 0
    if flags & DOTS:       # zeroing agreed positions: only where the legacy loop found some (or did not look)
        zero = agree and (agreed > 0 or (flags & (LEGACY | BINARY)) == 0)
        _dots(b, d, zb, zd, zae, zero, (flags & SCALED) != 0, par[P_SCALE_D], par[P_SCALE_B], out)
    if flags & FIGURES:
        _figures(b, d, fig)
    if flags & SMALL:
        kept = _small(b, d, zb, zd, zae, eps, _rnd(par[P_SV], zb), _rnd(par[P_SV_ATOL], zae), sq, re, cnt, mx)
        run = max(int(par[P_RUN]), 1)
        out[O_SQ] = array_sum(sq, n, run, zae)
        out[O_RE] = array_sum(re, kept, run, zae)
    if flags & ABSOLUTE:
        _absolute(b, d, zb, zd, zae, eps, par, (flags & CLASS_MATCH) != 0, cnt)
    if flags & ULP:
        _ulp(b, d, zc, par[P_MIN_EB], par[P_EXP], _rnd(par[P_THR], zc), ulp, cnt, mx)
        out[O_ULP] = array_sum(ulp, n, max(int(par[P_RUN]), 1), zc)


@_jit
def _legacy(b, d, zb, zd, zae, agree, eps, t0, t1, t2, counts, mx):
    """Max abs error, the three ratios, the binary rate and the non-finite agreement (2.1-2.4); returns how many
    non-finite positions agree. A chunk whose differences are all finite (or read without agreement) agrees on
    nothing: its loop looks for no agreement; any other chunk is read again by :func:`_legacy_agreeing`."""
    r0 = r1 = r2 = n_bin = np.int32(0)
    k_ae, k_b, k_d = _start(-1.0, zae), _start(-1.0, zb), _start(-1.0, zd)
    for i in range(b.shape[0]):
        bv, dv = _load(b, i), _load(d, i)
        ae = abs(_rnd(dv - bv, zae))
        r = _rnd(ae / _rnd(abs(bv) + eps, zb), zae)
        r0 = _inc(r0, r < t0)
        r1 = _inc(r1, r < t1)
        r2 = _inc(r2, r < t2)
        k_ae = max(k_ae, _key(ae))
        k_b = max(k_b, _key(bv))
        k_d = max(k_d, _key(dv))
        n_bin = _inc(n_bin, bv != dv)
    n_agreed = n_mismatch = np.int32(0)
    if agree and not _finite(_unkey(k_ae)):
        r0, r1, r2, n_bin, n_agreed, n_mismatch, k_ae, k_b, k_d = _legacy_agreeing(b, d, zb, zd, zae, eps, t0, t1, t2)
    for slot, v in ((C_R0, r0), (C_R1, r1), (C_R2, r2), (C_BIN, n_bin), (C_AGREED, n_agreed),
                    (C_MISMATCH, n_mismatch)):
        counts[slot] += v
    mx[M_AE] = _unkey(max(k_ae, _start(mx[M_AE], zae)))
    mx[M_B] = _unkey(max(k_b, _start(mx[M_B], zb)))
    mx[M_D] = _unkey(max(k_d, _start(mx[M_D], zd)))
    return n_agreed


@_inline
def _legacy_agreeing(b, d, zb, zd, zae, eps, t0, t1, t2):
    """:func:`_legacy`'s counts and keys of a chunk with non-finite differences, the agreed positions (both NaN,
    or the same infinity) counted as equal and as zeros."""
    r0 = r1 = r2 = n_bin = n_agreed = n_mismatch = np.int32(0)
    k_ae, k_b, k_d = _start(-1.0, zae), _start(-1.0, zb), _start(-1.0, zd)
    for i in range(b.shape[0]):
        bv, dv = _load(b, i), _load(d, i)
        ae = abs(_rnd(dv - bv, zae))
        bt = _rnd(bv, zd)
        nonfinite = ~_finite(ae)
        agreed = nonfinite & (((dv != dv) & (bt != bt)) | (dv == bt))
        n_agreed = _inc(n_agreed, agreed)
        n_mismatch = _inc(n_mismatch, nonfinite != agreed)          # non-finite, not agreed
        r = _rnd(ae / _rnd(abs(bv) + eps, zb), zae)
        r0 = _inc(r0, agreed | (r < t0))
        r1 = _inc(r1, agreed | (r < t1))
        r2 = _inc(r2, agreed | (r < t2))
        k_ae = max(k_ae, _key(_rnd(0.0, zae) if agreed else ae))
        k_b = max(k_b, _key(_rnd(0.0, zb) if agreed else bv))
        k_d = max(k_d, _key(_rnd(0.0, zd) if agreed else dv))
        n_bin = _inc(n_bin, (bv != dv) & ~(agreed & (dv != dv) & (bv != bv)))
    return r0, r1, r2, n_bin, n_agreed, n_mismatch, k_ae, k_b, k_d


@_reassoc
def _figures(b, d, fig):
    """The figures of the Error / Expected column, from the exact float64 values of device ``x`` and bench ``y``:
    the sums of x**2, |x| and x and the largest |x| over the finite ``x`` (the others left out); the largest and
    the sum of |x - y| where both are finite, and the count of the other positions unless both are NaN or both
    the same infinity (a mismatch: the caller makes the error infinite). The terms are those of the reference
    (:mod:`dumpers.metrics_sums`, ``pytest_msprobe.precision.expected_error_facts``); only the order of the
    additions differs: reassociated into the vector lanes here, chunk sums added in order by the caller. Any order
    of ``m`` additions errs by at most ``gamma(m) = m u / (1 - m u)`` times the sum of the terms' magnitudes
    (``u = 2**-53``), plus ``u`` per term where the term is rounded (x**2 of a float64, x - y), so a sum over
    ``n`` elements in chunks of ``c`` is within ``gamma(min(n, c) + ceil(n / c) + 1)`` of the exact one
    relative to that: below 2e-11 for chunks of 2**16 and up to 2**32 elements. A chunk whose differences are all
    finite has no non-finite value on either side, so its loop masks nothing; any other chunk is read again by
    :func:`_figures_masked`."""
    sq = ab = sm = es = 0.0
    k_d = k_e = np.int64(0)                   # the key of 0.0
    for i in range(b.shape[0]):
        x, y = np.float64(_load(d, i)), np.float64(_load(b, i))
        sq += x * x
        ab += abs(x)
        sm += x
        k_d = max(k_d, _key(x))
        e = abs(x - y)
        es += e
        k_e = max(k_e, _key(e))
    bad = np.int32(0)
    if not _finite(_unkey(k_e)):              # NaN or inf on a side (or a difference beyond float64's range)
        sq, ab, sm, k_d, es, k_e, bad = _figures_masked(b, d)
    fig[F_SQ] += sq
    fig[F_ABS] += ab
    fig[F_SUM] += sm
    fig[F_PEAK] = max(fig[F_PEAK], _unkey(k_d))
    fig[F_ERR_SUM] += es
    fig[F_ERR_MAX] = max(fig[F_ERR_MAX], _unkey(k_e))
    fig[F_ERR_BAD] += bad


@_reassoc
def _figures_masked(b, d):
    """:func:`_figures`'s sums and keys of a chunk with non-finite values: those left out, the mismatches
    counted."""
    sq = ab = sm = es = 0.0
    k_d = k_e = np.int64(0)
    bad = np.int32(0)
    for i in range(b.shape[0]):
        x, y = np.float64(_load(d, i)), np.float64(_load(b, i))
        fx, fy = _finite(x), _finite(y)
        xf = x if fx else 0.0
        sq += xf * xf
        ab += abs(xf)
        sm += xf
        k_d = max(k_d, _key(xf))
        both = fx & fy
        e = abs(x - y) if both else 0.0
        es += e
        k_e = max(k_e, _key(e))
        bad = _inc(bad, ~both & (x != y) & ((x == x) | (y == y)))   # not finite, not the same inf, not both NaN
    return sq, ab, sm, k_d, es, k_e, bad


@_jit
def _small(b, d, zb, zd, zae, eps, sv, sv_atol, sq, re, counts, mx):
    """The benchmark group (2.5): masked squares, error balance, the kept relative errors; returns how many."""
    n = b.shape[0]
    n_sv = sv_err = masked = ebp = ebn = np.int32(0)
    k_re = _start(mx[M_RE], zae)
    for i in range(n):
        bv, dv = _load(b, i), _load(d, i)
        ae = abs(_rnd(dv - bv, zae))
        ab = abs(bv)
        bp = _rnd(bv, zd)
        fin = _finite(dv) & _finite(bp)
        s = (ab <= sv) & fin
        m = s | ~fin
        n_sv = _inc(n_sv, s)
        sv_err = _inc(sv_err, s & (ae > sv_atol))
        masked = _inc(masked, m)
        sq[i] = 0.0 if m else _rnd(ae * ae, zae)
        delta = dv - bp
        ebp = _inc(ebp, delta > 0)
        ebn = _inc(ebn, delta < 0)
        r = _rnd(ae / _rnd(ab + eps, zb), zae)
        re[i] = -math.inf if m else r         # -inf marks a masked element: a kept one is >= 0 or NaN
        k_re = max(k_re, _start(-1.0, zae) if m else _key(r))
    kept = _compact(re, n) if masked else np.int32(n)
    for slot, v in ((C_SV, n_sv), (C_SV_ERR, sv_err), (C_MASKED, masked), (C_EBP, ebp), (C_EBN, ebn),
                    (C_KEPT, kept)):
        counts[slot] += v
    mx[M_RE] = _unkey(k_re)
    return kept


_BLOCK = 128


@_jit
def _compact(re, n):
    """Move the kept relative errors (not -inf) of ``re[:n]`` to the front, in order; returns how many. Blocks
    without a masked one move whole (through a buffer: both copies vectorise), the others one by one. (Unsigned
    indices: numba checks no negative index for them.)"""
    buf = np.empty(_BLOCK, re.dtype)
    kept, lo, one = np.uint64(0), np.uint64(0), np.uint64(1)
    full, end = np.uint64(n - n % _BLOCK), np.uint64(n)
    while lo < full:
        drop = np.int32(0)
        for i in range(_BLOCK):
            drop = _inc(drop, re[lo + np.uint64(i)] == -math.inf)
        if drop == 0:
            if kept != lo:
                for i in range(_BLOCK):
                    buf[i] = re[lo + np.uint64(i)]
                for i in range(_BLOCK):
                    re[kept + np.uint64(i)] = buf[i]
            kept += np.uint64(_BLOCK)
            lo += np.uint64(_BLOCK)
        else:
            for _ in range(_BLOCK):
                x = re[lo]
                re[kept] = x
                kept += one if x != -math.inf else np.uint64(0)
                lo += one
    while lo < end:
        x = re[lo]
        re[kept] = x
        kept += one if x != -math.inf else np.uint64(0)
        lo += one
    return np.int32(kept)


@_jit
def _absolute(b, d, zb, zd, zae, eps, par, class_match, counts):
    """The absolute-threshold group (2.6); the non-finite elements in a second, scalar loop."""
    a_sv, a_atol, a_rtol = _rnd(par[P_A_SV], zb), _rnd(par[P_A_ATOL], zae), _rnd(par[P_A_RTOL], zae)
    n_asv = asv_err = n_normal = normal_err = n_inf = np.int32(0)
    for i in range(b.shape[0]):
        bv, dv = _load(b, i), _load(d, i)
        ae = abs(_rnd(dv - bv, zae))
        ab = abs(bv)
        fin = _finite(dv) & _finite(_rnd(bv, zd))
        s = (ab <= a_sv) & fin
        normal = fin & ~s
        n_asv = _inc(n_asv, s)
        asv_err = _inc(asv_err, s & (ae > a_atol))
        n_normal = _inc(n_normal, normal)
        normal_err = _inc(normal_err, normal & (_rnd(ae / _rnd(ab + eps, zb), zae) > a_rtol))
        n_inf = _inc(n_inf, ~fin)
    inf_bad = np.int32(0)
    if n_inf:
        hi = _rnd(par[P_A_HI], zd)
        for i in range(b.shape[0]):
            bv, dv = _load(b, i), _load(d, i)
            bp = _rnd(bv, zd)
            if _finite(dv) and _finite(bp):
                continue
            abe = _rnd(abs(bv) + eps, zb)
            gc = bp if bp != bp else min(max(bp, -hi), hi)
            dc = dv if dv != dv else min(max(dv, -hi), hi)
            ok = _rnd(abs(_rnd(dc - gc, zd)) / abe, zae) <= a_rtol or (dv != dv and gc != gc)
            if class_match and math.isinf(bp):
                ok = dv == bp
            inf_bad = _inc(inf_bad, not ok)
    for slot, v in ((C_ASV, n_asv), (C_ASV_ERR, asv_err), (C_NORMAL, n_normal), (C_NORMAL_ERR, normal_err),
                    (C_INF, n_inf), (C_INF_BAD, inf_bad)):
        counts[slot] += v


@_jit
def _ulp(b, d, zc, min_eb, exp_num, thr, ulp, counts, mx):
    """The ULP errors (2.7): the exponent from the bits; the elements that cannot take it, one by one after."""
    n = b.shape[0]
    above = n_slow = np.int32(0)
    k_ulp = _start(mx[M_ULP], zc)
    mark = _rnd(-1.0, zc)
    exact = (np.floor(min_eb) == min_eb) & (np.floor(exp_num) == exp_num) & (abs(min_eb) + abs(exp_num) < 2.0 ** 20)
    for i in range(n):
        bc, dc = _rnd(_load(b, i), zc), _rnd(_load(d, i), zc)
        fast, p = _ulp_fast(bc, min_eb, exp_num, exact)
        u = abs(_rnd(_rnd(dc - bc, zc) * p, zc))
        ulp[i] = u if fast else mark              # an element for the second look (an error is >= 0)
        n_slow = _inc(n_slow, ~fast)
        k_ulp = max(k_ulp, _key(u) if fast else _start(-1.0, zc))
        above = _inc(above, fast & (u > thr))
    full = (n - n % 64) if n_slow else 0
    for lo in range(0, full, 64):                 # the blocks of 64 that hold a marked element, then the tail
        marked = np.int32(0)
        for i in range(64):                       # (a loop of constant length vectorises)
            marked = _inc(marked, ulp[lo + i] == mark)
        for i in range(lo, lo + 64 if marked else lo):
            above, k_ulp = _ulp_fix(b, d, i, zc, min_eb, exp_num, thr, mark, ulp, above, k_ulp)
    for i in range(full, n if n_slow else full):
        above, k_ulp = _ulp_fix(b, d, i, zc, min_eb, exp_num, thr, mark, ulp, above, k_ulp)
    counts[C_ULP_ABOVE] += above
    mx[M_ULP] = _unkey(k_ulp)


@_jit
def count_unequal(b, d):
    """``count(b != d)`` of two integer or bool arrays (values compared as numpy compares them)."""
    c = 0
    for i in range(b.shape[0]):
        c += b[i] != d[i]
    return c
