"""The metric pass's clean-chunk kernel in C: one fused pass per chunk, bit for bit what the numpy path gives.

:func:`kernel` returns a :class:`Kernel` for a (bench, device) dtype pair it supports (float32/float32,
float64/float64, float64/float32, float32/float64), or None (then :mod:`.metrics_engine` stays on numpy).
For a chunk without inf/nan, one C call computes what ``_Engine._fast`` computes with about thirty numpy
passes, and only what is exact whatever the order: counts, maxima (as integer keys of non-negative float
bits), the relative errors kept in order, the masked squares. Every float operation is the one numpy does,
in the same type (float32 stays float32: x86-64 SSE, no contraction into fused multiply-adds, no fast-math).

The sums are ordered: ``np.sum`` adds pairwise (blocks of at most 128 elements, eight accumulators each)
and ``np.einsum('i,i->')`` of two float64 arrays adds the products in two lanes, eight elements per step
from the last pair to the first. The kernel has C copies of both (``msprobe_pairwise_*``,
``msprobe_dots_*``); :func:`kernel` first checks them against this numpy on prepared arrays and uses them
only if every bit agrees, otherwise the kernel leaves the squares, the kept relative errors and float64
copies in the workspace and numpy sums them as before.

This module does no I/O of its own: whoever uses the metrics with the kernel hands it a builder
(:func:`set_builder`; the checker passes :func:`dumpers.cbuild.build`, which compiles the source once per
user into ``$MSPROBE_CACHE_DIR``). Without a builder, without a C compiler, or with
``MSPROBE_METRICS_NATIVE=0``, the numpy path runs. Chunks with inf/nan, and the ULP group, stay on numpy.
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading
from typing import Any, Callable, Optional

import numpy as np

log = logging.getLogger("pytest_msprobe.metrics")

SOURCE = r"""
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(MSPROBE_NO_CLONES)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif
#define INLINE static inline __attribute__((always_inline))

INLINE int32_t key_f(float x) { int32_t k; memcpy(&k, &x, 4); return k; }
INLINE int64_t key_d(double x) { int64_t k; memcpy(&k, &x, 8); return k; }
INLINE float unkey_f(int32_t k) { float x; memcpy(&x, &k, 4); return x; }
INLINE double unkey_d(int64_t k) { double x; memcpy(&x, &k, 8); return x; }
#define FABS(x) _Generic((x), float: __builtin_fabsf, double: __builtin_fabs)(x)
#define KEY(x) _Generic((x), float: key_f, double: key_d)(x)
#define UNKEY(x, T) _Generic((T)0, float: unkey_f, double: unkey_d)(x)
#define FMAX(T) _Generic((T)0, float: 0x1.fffffep127f, double: 0x1.fffffffffffffp1023)
#define MAXK(m, x) m = (x) > m ? (x) : m

enum { LEGACY = 1, BINARY = 2, SV = 4, ABS = 8, DOTS = 16, COPY64 = 32, SUMS = 64 };
enum { C_BAD, C_R0, C_R1, C_R2, C_BIN, C_NS, C_SVERR, C_EBP, C_EBN, C_KEPT, C_NS2, C_ASERR, C_NERR, C_N };
enum { O_MAE, O_MAB, O_MAD, O_REMAX, O_SQ, O_RE, O_DOT, O_SDD, O_SBB, O_N };

/* np.sum of a contiguous array: numpy's pairwise summation of each block of 8192 elements (its buffer
   size), the blocks added in order to an initial 0 */
#define PAIRWISE(NAME, T) \
static T NAME##_rec(const T *a, int64_t n) { \
    if (n < 8) { T res = 0; for (int64_t i = 0; i < n; i++) res += a[i]; return res; } \
    if (n <= 128) { \
        T r[8]; int64_t i; \
        for (int j = 0; j < 8; j++) r[j] = a[j]; \
        for (i = 8; i < n - (n % 8); i += 8) for (int j = 0; j < 8; j++) r[j] += a[i + j]; \
        T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7])); \
        for (; i < n; i++) res += a[i]; \
        return res; } \
    int64_t n2 = n / 2; n2 -= n2 % 8; \
    return NAME##_rec(a, n2) + NAME##_rec(a + n2, n - n2); } \
T NAME(const T *a, int64_t n) { \
    T res = 0; \
    for (int64_t i = 0; i < n; i += 8192) res += NAME##_rec(a + i, n - i < 8192 ? n - i : 8192); \
    return res; }
PAIRWISE(msprobe_pairwise_f32, float)
PAIRWISE(msprobe_pairwise_f64, double)

/* np.einsum('i,i->', x, y) of two float64 arrays, per block of 8192 elements (numpy's buffer size): two
   lanes, eight elements per step from the last pair to the first, the tail in pairs padded with zeros;
   lane 0 + lane 1 of each block added in order to an initial 0 */
typedef double v2d __attribute__((vector_size(16)));
#define DOTS3(NAME, TB, TD) \
static void NAME##_block(const TB *restrict b, const TD *restrict d, int64_t n, double *out) { \
    v2d p = {0, 0}, q = {0, 0}, s = {0, 0}; int64_t i = 0; \
    for (; n - i >= 8; i += 8) \
        for (int j = 6; j >= 0; j -= 2) { \
            v2d dv = {d[i + j], d[i + j + 1]}, bv = {b[i + j], b[i + j + 1]}; \
            p = dv * bv + p; q = dv * dv + q; s = bv * bv + s; } \
    for (; i < n; i += 2) { \
        v2d dv = {d[i], i + 1 < n ? d[i + 1] : 0.0}, bv = {b[i], i + 1 < n ? b[i + 1] : 0.0}; \
        p = dv * bv + p; q = dv * dv + q; s = bv * bv + s; } \
    out[0] = out[0] + (p[0] + p[1]); out[1] = out[1] + (q[0] + q[1]); out[2] = out[2] + (s[0] + s[1]); } \
void NAME(const TB *b, const TD *d, int64_t n, double *out) { \
    out[0] = out[1] = out[2] = 0.0; \
    for (int64_t i = 0; i < n; i += 8192) NAME##_block(b + i, d + i, n - i < 8192 ? n - i : 8192, out); }

/* re[] without the elements whose mask byte is 1, in order; returns how many are left */
#define COMPACT(NAME, T) \
static int64_t NAME##_scalar(T *restrict re, const uint8_t *restrict mask, int64_t i, int64_t w, int64_t k) { \
    for (; i < k; i++) { re[w] = re[i]; w += mask[i] ^ 1; } \
    return w; }
COMPACT(compact_f32, float)
COMPACT(compact_f64, double)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(MSPROBE_NO_CLONES)
#include <immintrin.h>
#define HAVE_COMPRESS 1
/* AVX-512 compress: each store writes a whole vector at re + w <= re + i, before the next load */
__attribute__((target("avx512f"))) static int64_t compact_f32_avx512(float *re, const uint8_t *mask, int64_t k) {
    int64_t i = 0, w = 0;
    for (; i + 16 <= k; i += 16) {
        __mmask16 keep = _mm512_cmpeq_epi32_mask(_mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)(mask + i))),
                                                 _mm512_setzero_si512());
        __m512 v = _mm512_maskz_compress_ps(keep, _mm512_loadu_ps(re + i));
        _mm512_storeu_ps(re + w, v);
        w += __builtin_popcount(keep); }
    return compact_f32_scalar(re, mask, i, w, k); }
__attribute__((target("avx512f"))) static int64_t compact_f64_avx512(double *re, const uint8_t *mask, int64_t k) {
    int64_t i = 0, w = 0;
    for (; i + 8 <= k; i += 8) {
        __mmask8 keep = _mm512_cmpeq_epi64_mask(_mm512_cvtepu8_epi64(_mm_loadl_epi64((const void *)(mask + i))),
                                                _mm512_setzero_si512());
        __m512d v = _mm512_maskz_compress_pd(keep, _mm512_loadu_pd(re + i));
        _mm512_storeu_pd(re + w, v);
        w += __builtin_popcount(keep); }
    return compact_f64_scalar(re, mask, i, w, k); }
#else
#define HAVE_COMPRESS 0
#endif
int msprobe_scalar_only = 0;   /* tests set it to check the portable paths too */
static int64_t compact_f32(float *re, const uint8_t *mask, int64_t k) {
#if HAVE_COMPRESS
    if (!msprobe_scalar_only && __builtin_cpu_supports("avx512f")) return compact_f32_avx512(re, mask, k);
#endif
    return compact_f32_scalar(re, mask, 0, 0, k); }
static int64_t compact_f64(double *re, const uint8_t *mask, int64_t k) {
#if HAVE_COMPRESS
    if (!msprobe_scalar_only && __builtin_cpu_supports("avx512f")) return compact_f64_avx512(re, mask, k);
#endif
    return compact_f64_scalar(re, mask, 0, 0, k); }

#define RUN(NAME, X) NAME##_run##X(pb, pd, k, par, sq, re, mask, c, o)
#define RUNFN(NAME, TB, TD, TAE, X) \
CLONES void NAME##_run##X(const TB *pb, const TD *pd, int64_t k, const double *par, TAE *sq, TAE *re, \
                          uint8_t *mask, int64_t *c, double *o) { NAME##_loop(pb, pd, k, X, par, sq, re, mask, c, o); }

/* One chunk of _Engine._fast. TB, TD: bench and device types; TAE: their numpy result type.
   par: eps_b, the three ratio thresholds, sv, sv_atol, a_sv, a_atol, a_rtol (each already in its type). */
#define BODY(NAME, TB, TD, TAE) \
INLINE void NAME##_loop(const TB *restrict pb, const TD *restrict pd, int64_t k, const int F, const double *par, \
                        TAE *restrict sq, TAE *restrict re, uint8_t *restrict mask, int64_t *c, double *o) { \
    const TB eps = (TB)par[0], sv_b = (TB)par[4], a_sv = (TB)par[6]; \
    const TAE t0 = (TAE)par[1], t1 = (TAE)par[2], t2 = (TAE)par[3], sv_atol = (TAE)par[5]; \
    const TAE a_atol = (TAE)par[7], a_rtol = (TAE)par[8], top = FMAX(TAE); \
    typedef __typeof__(KEY((TAE)0)) CT; /* counters per block: as wide as the error type's compare masks */ \
    CT mae = 0, rmax = 0; __typeof__(KEY((TB)0)) mab = 0; __typeof__(KEY((TD)0)) mad = 0; \
    int64_t t[12] = {0}; \
    for (int64_t lo = 0; lo < k; lo += 1 << 24) { \
        const int64_t hi = k - lo < (1 << 24) ? k : lo + (1 << 24); \
        CT bad = 0, r0 = 0, r1 = 0, r2 = 0, nbin = 0, ns = 0, sverr = 0, ebp = 0, ebn = 0; \
        CT ns2 = 0, aserr = 0, nerr = 0; \
        for (int64_t i = lo; i < hi; i++) { \
            TB b = pb[i]; TD d = pd[i]; \
            TAE ae = FABS((TAE)d - (TAE)b); \
            bad += !(ae <= top); \
            TB ab = FABS(b); \
            MAXK(mae, KEY(ae)); MAXK(mab, KEY(ab)); \
            TB den = ab + eps; \
            TAE r = ae / (TAE)den; \
            if (F & LEGACY) { \
                MAXK(mad, KEY(FABS(d))); r0 += r < t0; r1 += r < t1; r2 += r < t2; } \
            if (F & BINARY) nbin += (TAE)b != (TAE)d; \
            if (F & SV) { \
                CT s = ab <= sv_b, keep = s - 1; /* keep: all ones or 0 */ \
                ns += s; sverr += s & (ae > sv_atol); \
                TAE q = ae * ae; sq[i] = UNKEY(KEY(q) & keep, TAE); mask[i] = (uint8_t)s; re[i] = r; \
                MAXK(rmax, KEY(r) & keep); \
                TD delta = d - (TD)b; ebp += delta > 0; ebn += delta < 0; } \
            if (F & ABS) { \
                CT s = ab <= a_sv; \
                ns2 += s; aserr += s & (ae > a_atol); nerr += (s ^ 1) & (r > a_rtol); } \
        } \
        t[0] += bad; t[1] += r0; t[2] += r1; t[3] += r2; t[4] += nbin; t[5] += ns; t[6] += sverr; t[7] += ebp; \
        t[8] += ebn; t[9] += ns2; t[10] += aserr; t[11] += nerr; \
    } \
    c[C_BAD] = t[0]; o[O_MAE] = UNKEY(mae, TAE); o[O_MAB] = UNKEY(mab, TB); \
    if (F & LEGACY) { c[C_R0] = t[1]; c[C_R1] = t[2]; c[C_R2] = t[3]; o[O_MAD] = UNKEY(mad, TD); } \
    if (F & BINARY) c[C_BIN] = t[4]; \
    if (F & SV) { \
        c[C_NS] = t[5]; c[C_SVERR] = t[6]; c[C_EBP] = t[7]; c[C_EBN] = t[8]; o[O_REMAX] = UNKEY(rmax, TAE); } \
    if (F & ABS) { c[C_NS2] = t[9]; c[C_ASERR] = t[10]; c[C_NERR] = t[11]; } \
} \
DOTS3(msprobe_dots_##NAME, TB, TD) \
RUNFN(NAME, TB, TD, TAE, 0) RUNFN(NAME, TB, TD, TAE, 1) RUNFN(NAME, TB, TD, TAE, 2) RUNFN(NAME, TB, TD, TAE, 3) \
RUNFN(NAME, TB, TD, TAE, 4) RUNFN(NAME, TB, TD, TAE, 5) RUNFN(NAME, TB, TD, TAE, 8) RUNFN(NAME, TB, TD, TAE, 9) \
CLONES int msprobe_metrics_##NAME(const TB *pb, const TD *pd, int64_t k, int F, const double *par, TAE *sq, \
                                  TAE *re, uint8_t *mask, double *b64, double *d64, int64_t *c, double *o) { \
    switch (F & 15) {  /* the usual group combinations: one loop each, its flags constant */ \
    case 0: RUN(NAME, 0); break; case 1: RUN(NAME, 1); break; case 2: RUN(NAME, 2); break; \
    case 3: RUN(NAME, 3); break; case 4: RUN(NAME, 4); break; case 5: RUN(NAME, 5); break; \
    case 8: RUN(NAME, 8); break; case 9: RUN(NAME, 9); break; \
    default: /* the others as passes that each write only their own results */ \
        switch (F & 3) { case 1: RUN(NAME, 1); break; case 2: RUN(NAME, 2); break; case 3: RUN(NAME, 3); break; } \
        if (F & SV) RUN(NAME, 4); \
        if (F & ABS) RUN(NAME, 8); } \
    int64_t kept = k; \
    if ((F & SV) && c[C_NS]) /* the relative errors of the non-small elements, in order */ \
        kept = _Generic((TAE)0, float: compact_f32, double: compact_f64)(re, mask, k); \
    c[C_KEPT] = kept; \
    if (c[C_BAD]) return 0; \
    if ((F & SV) && (F & SUMS)) { \
        o[O_SQ] = _Generic((TAE)0, float: msprobe_pairwise_f32, double: msprobe_pairwise_f64)(sq, k); \
        o[O_RE] = kept ? _Generic((TAE)0, float: msprobe_pairwise_f32, double: msprobe_pairwise_f64)(re, kept) : 0; } \
    if (F & DOTS) msprobe_dots_##NAME(pb, pd, k, o + O_DOT); \
    if (F & COPY64) { \
        if (b64) for (int64_t i = 0; i < k; i++) b64[i] = pb[i]; \
        if (d64) for (int64_t i = 0; i < k; i++) d64[i] = pd[i]; } \
    return 1; \
}

BODY(ff, float, float, float)
BODY(dd, double, double, double)
BODY(df, double, float, double)
BODY(fd, float, double, double)
"""

FLAGS = ("-O3", "-std=gnu11", "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-shared")
VARIANTS = ((), ("-DMSPROBE_NO_CLONES",))

LEGACY, BINARY, SV, ABS, DOTS, COPY64, SUMS = 1, 2, 4, 8, 16, 32, 64
(C_BAD, C_R0, C_R1, C_R2, C_BIN, C_NS, C_SVERR, C_EBP, C_EBN, C_KEPT, C_NS2, C_ASERR, C_NERR, C_N) = range(14)
(O_MAE, O_MAB, O_MAD, O_REMAX, O_SQ, O_RE, O_DOT, O_SDD, O_SBB, O_N) = range(10)

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
COMBOS = {(_F32, _F32): "ff", (_F64, _F64): "dd", (_F64, _F32): "df", (_F32, _F64): "fd"}

_lock = threading.Lock()
_builder: Optional[Callable[..., Optional[str]]] = None   # (stem, source, flags, variants, what) -> path or None
_lib: Optional[Any] = None        # False once known to be unavailable
_ordered_sums = False             # the C sums agree with this numpy's np.sum and np.einsum


def enabled() -> bool:
    """Whether the native metric kernel may be used (``MSPROBE_METRICS_NATIVE=0`` turns it off)."""
    return os.environ.get("MSPROBE_METRICS_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def set_builder(builder: Optional[Callable[..., Optional[str]]]) -> None:
    """Who compiles the kernel: ``builder(stem, source, flags, variants, what)`` returns the path of the
    shared library or None. Setting it again (or to None) forgets a library not loaded yet."""
    global _builder, _lib
    with _lock:
        if builder is not _builder:
            _builder = builder
            if not _lib:
                _lib = None


def library() -> Optional[Any]:
    """The loaded kernel library (compiled on first use), or None when unavailable."""
    global _lib, _ordered_sums
    if _lib is None:
        with _lock:
            if _lib is None:
                try:
                    lib = _load()
                    _ordered_sums = lib is not None and sums_agree(lib)
                    _lib = lib if lib is not None else False
                except Exception as exc:  # noqa: BLE001 - the metrics must never fail because of the kernel
                    log.debug("the compiled metric kernel is unavailable (%s)", exc)
                    _lib = False
    return _lib or None


def _load() -> Optional[Any]:
    if _builder is None:
        return None
    path = _builder("metrics", SOURCE, FLAGS, VARIANTS, "metric kernel")
    if path is None:
        return None
    lib = ctypes.CDLL(path)
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    for name in COMBOS.values():
        fn = getattr(lib, "msprobe_metrics_" + name)
        fn.restype = ctypes.c_int
        fn.argtypes = (vp, vp, i64, ctypes.c_int, vp, vp, vp, vp, vp, vp, vp, vp)
        dots = getattr(lib, "msprobe_dots_" + name)
        dots.restype = None
        dots.argtypes = (vp, vp, i64, vp)
    lib.msprobe_pairwise_f32.restype = ctypes.c_float
    lib.msprobe_pairwise_f64.restype = ctypes.c_double
    for fn in (lib.msprobe_pairwise_f32, lib.msprobe_pairwise_f64):
        fn.argtypes = (vp, i64)
    return lib


def c_sum(lib: Any, a: np.ndarray) -> float:
    """The kernel's copy of ``np.sum`` over a contiguous float32/float64 array."""
    fn = lib.msprobe_pairwise_f32 if a.dtype == _F32 else lib.msprobe_pairwise_f64
    return float(fn(a.ctypes.data, a.size))


def c_dots(lib: Any, b: np.ndarray, d: np.ndarray) -> tuple:
    """The kernel's copy of the three float64 einsums (d.b, d.d, b.b) of ``_Engine._dots``."""
    out = np.zeros(3)
    getattr(lib, "msprobe_dots_" + COMBOS[(b.dtype, d.dtype)])(b.ctypes.data, d.ctypes.data, b.size,
                                                                out.ctypes.data)
    return float(out[0]), float(out[1]), float(out[2])


def sums_agree(lib: Any) -> bool:
    """Whether the kernel's ordered sums give this numpy's bits on prepared arrays of many lengths."""
    rng = np.random.default_rng(20240607)
    sizes = (1, 2, 7, 8, 9, 15, 16, 17, 127, 128, 129, 255, 256, 257, 1000, 4097, 8191, 8193, 65535, 65536)
    top = max(sizes)                # each length checks the start of one draw (contiguous, as the kernel reads)
    x64 = rng.standard_normal(top) * np.exp(rng.uniform(-8, 8, top))
    y64 = x64 * (1 + 1e-3 * rng.standard_normal(top))
    x32, y32 = x64.astype(_F32), y64.astype(_F32)
    wide = {"x": x64, "y": y64, "xf": x32.astype(_F64), "yf": y32.astype(_F64)}     # what the einsums read
    for n in sizes:
        arrays = {"x": x64[:n], "y": y64[:n], "xf": x32[:n], "yf": y32[:n]}
        for a in (arrays["xf"], arrays["x"]):
            if c_sum(lib, a) != float(np.sum(a)):
                log.debug("the C pairwise sum differs from np.sum (%s, n=%d): numpy sums", a.dtype, n)
                return False
        for b, d in (("y", "x"), ("yf", "xf"), ("y", "xf"), ("yf", "x")):
            b64, d64 = wide[b][:n], wide[d][:n]
            want = (float(np.einsum("i,i->", d64, b64)), float(np.einsum("i,i->", d64, d64)),
                    float(np.einsum("i,i->", b64, b64)))
            if c_dots(lib, arrays[b], arrays[d]) != want:
                log.debug("the C dot products differ from np.einsum (n=%d): numpy sums", n)
                return False
    return True


def ordered_sums() -> bool:
    """Whether the loaded kernel also does the sums (see :func:`sums_agree`)."""
    return library() is not None and _ordered_sums


def _address(a: Optional[np.ndarray]) -> Optional[int]:
    return None if a is None else a.ctypes.data


class Kernel:
    """The compiled clean-chunk pass for one (bench, device) dtype pair, with its parameters."""

    def __init__(self, lib: Any, name: str, flags: int, params: np.ndarray, sums: bool) -> None:
        self.fn = getattr(lib, "msprobe_metrics_" + name)
        self.flags = flags | (SUMS if sums else 0)
        self.sums = sums
        self.params = params
        self.cnt = np.zeros(C_N, np.int64)
        self.out = np.zeros(O_N, np.float64)
        self._args: tuple = ()

    def bind(self, sq: np.ndarray, re: np.ndarray, mask: np.ndarray, b64: Optional[np.ndarray],
             d64: Optional[np.ndarray]) -> None:
        """Fix the scratch arrays (chunk-sized, reused for every chunk) the kernel writes."""
        copies = b64 is not None or d64 is not None
        self.flags |= COPY64 if copies else 0
        self._args = (self.flags, self.params.ctypes.data, sq.ctypes.data, re.ctypes.data, mask.ctypes.data,
                      _address(b64), _address(d64), self.cnt.ctypes.data, self.out.ctypes.data)

    def __call__(self, bc: np.ndarray, dc: np.ndarray, k: int) -> bool:
        """One chunk (contiguous, of the bound dtypes): True if it was clean and the results are in cnt/out."""
        return bool(self.fn(bc.ctypes.data, dc.ctypes.data, k, *self._args))


def kernel(tb: np.dtype, td: np.dtype, flags: int, params: list) -> Optional[Kernel]:
    """The kernel for this dtype pair and these metric groups, or None (unsupported, disabled, no compiler)."""
    name = COMBOS.get((np.dtype(tb), np.dtype(td)))
    if name is None or not enabled():
        return None
    lib = library()
    if lib is None:
        return None
    sums = _ordered_sums and np.getbufsize() == 8192      # the block size the C sums assume
    return Kernel(lib, name, flags, np.array(params, np.float64), sums)
