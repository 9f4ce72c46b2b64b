"""The one-pass statistics kernel in C: compiled once per user into a cache directory, loaded with ctypes.

The kernel reads every element once and keeps, in 32 fixed lanes, the maximum and minimum (as
order-preserving integer keys of the float bits) and the sum and sum of squares in float64. Element
``i`` always goes to lane ``i % 32`` and the lanes are combined in one fixed tree, so the result does
not depend on the vector width the compiler or the CPU picks (SSE2, AVX2, AVX-512, NEON: the same
bits); contraction into fused multiply-adds is off for the same reason.

* float32, bfloat16, float16: every value and every square is exact in float64 (24, 8 and 11
  significant bits), so the only roundings are the float64 additions; Mean and Norm are then rounded
  once to the data's dtype (round to nearest even, subnormals included).
* float64: the additions are compensated (Neumaier), per lane.

bfloat16 on a CPU with AVX-512 takes a hand-written vector loop (the training step's data is mostly
bfloat16): the same lanes, each adding its elements in order; the elements reach the lanes in another
register order (undone before the tree), and each square is added with a fused multiply-add, whose one
rounding is the plain addition's because the square of a bfloat16 value is exact in float64. A test
compares it bit for bit with the unoptimised scalar loop on every kind of bit pattern.

The source is compiled with the system C compiler (``$CC``, else ``cc``, ``gcc`` or ``clang``) on first
use into ``$MSPROBE_CACHE_DIR`` (default ``$XDG_CACHE_HOME/pytest-msprobe`` or
``~/.cache/pytest-msprobe``), under a name derived from the source and flags, and reused by every later
process (loading takes about a millisecond). The directory must belong to the user and be writable by
nobody else; otherwise, or without a compiler, :func:`load` returns None and the caller falls back.
"""
from __future__ import annotations

import ctypes
import logging
import threading
from typing import Optional

from dumpers import cbuild
from dumpers.cbuild import cache_dir  # noqa: F401 - part of this module's interface
from dumpers.cbuild import compiler as _compiler  # noqa: F401 - the tests ask it

log = logging.getLogger("pytest_msprobe.dump")

SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <math.h>

#define L 32
#if defined(__x86_64__) && defined(__GNUC__) && !defined(MSPROBE_NO_CLONES)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

static inline float asf(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static inline uint32_t asb(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }
static inline int32_t key32(uint32_t b) { int32_t k = (int32_t)b; return k ^ ((k >> 31) & 0x7fffffff); }
static inline int16_t key16(uint16_t b) { int16_t k = (int16_t)b; return (int16_t)(k ^ ((k >> 15) & 0x7fff)); }
static inline int64_t key64(uint64_t b) { int64_t k = (int64_t)b; return k ^ ((k >> 63) & 0x7fffffffffffffffLL); }

/* float16 bits -> float32 bits, exactly (subnormals through one exact float32 subtraction) */
static inline uint32_t f16bits(uint16_t h) {
    uint32_t em = (uint32_t)(h & 0x7fffu) << 13, e = em & 0x0f800000u;
    uint32_t sub = asb(asf(em + (113u << 23)) - asf(113u << 23));
    uint32_t r = e == 0x0f800000u ? em + (224u << 23) : (e == 0 ? sub : em + (112u << 23));
    return r | ((uint32_t)(h & 0x8000u) << 16);
}

/* x rounded to nearest even with `bits` significant bits and quanta no finer than 2**qmin */
static double round_to(double x, int bits, int qmin, double max) {
    if (x == 0.0 || !isfinite(x)) return x;
    int e;
    frexp(x, &e);
    int qe = e - bits < qmin ? qmin : e - bits;
    double r = ldexp(nearbyint(ldexp(x, -qe)), qe);
    return fabs(r) > max ? copysign(INFINITY, r) : r;
}

/* KT: the integer key type (16-bit keys for 16-bit data), KEY: bits -> key, LOAD: element -> float32 bits.
   PF: a hint to fetch the memory 8 KiB ahead; the results are unchanged, and data out of the caches is read
   much faster (bfloat16 from memory: 5 -> 8.6 GB/s on a 2-vCPU Xeon, the machine's read bandwidth) */
#define PF(i) { for (int b_ = 0; b_ < L * (int)sizeof(*x); b_ += 64) \
    __builtin_prefetch((const char *)(x + (i)) + 8192 + b_, 0, 3); }
#define LANES(KT, KMIN, KMAX, KEY, LOAD, ENDS) \
    KT hi[L], lo[L]; double s[L], q[L]; \
    for (int j = 0; j < L; j++) { hi[j] = KMIN; lo[j] = KMAX; s[j] = 0.0; q[j] = 0.0; } \
    int64_t i = 0; \
    for (; i + L <= n; i += L) { \
        PF(i) \
        for (int j = 0; j < L; j++) { \
            KT k = KEY(x[i + j]); double d = (double)asf(LOAD(x[i + j])); \
            hi[j] = hi[j] > k ? hi[j] : k; lo[j] = lo[j] < k ? lo[j] : k; s[j] += d; q[j] += d * d; } } \
    TAIL(KT, KEY, LOAD, ENDS)

/* the elements after the last whole block of L, the fixed tree over the lanes, Max and Min */
#define TAIL(KT, KEY, LOAD, ENDS) \
    for (int j = 0; i < n; i++, j++) { \
        KT k = KEY(x[i]); double d = (double)asf(LOAD(x[i])); \
        hi[j] = hi[j] > k ? hi[j] : k; lo[j] = lo[j] < k ? lo[j] : k; s[j] += d; q[j] += d * d; } \
    for (int w = L / 2; w >= 1; w /= 2) \
        for (int j = 0; j < w; j++) { \
            s[j] += s[j + w]; q[j] += q[j + w]; \
            hi[j] = hi[j] > hi[j + w] ? hi[j] : hi[j + w]; lo[j] = lo[j] < lo[j + w] ? lo[j] : lo[j + w]; } \
    out[0] = asf(ENDS(hi[0])); out[1] = asf(ENDS(lo[0])); \
    if (!(isfinite(s[0]) && isfinite(q[0]))) return 0; \
    double mean = s[0] / (double)n, norm = sqrt(q[0]);

#define SAME(b) (b)
#define BF16(h) ((uint32_t)(h) << 16)
#define ENDS32(k) ((uint32_t)key32((uint32_t)(k)))
#define ENDS_BF16(k) BF16((uint16_t)key16((uint16_t)(k)))
#define ENDS_F16(k) f16bits((uint16_t)key16((uint16_t)(k)))

CLONES int msprobe_stats_f32(const uint32_t *x, int64_t n, double *out) {
    LANES(int32_t, INT32_MIN, INT32_MAX, key32, SAME, ENDS32)
    /* volatile: GCC 12 dropped this rounding at -O1 and above */
    volatile float mean32 = (float)mean, norm32 = (float)norm;
    out[2] = mean32; out[3] = norm32;
    return isfinite(out[3]);
}

#define BF16_ROUND \
    out[2] = round_to(mean, 8, -133, 0x1.fep127); out[3] = round_to(norm, 8, -133, 0x1.fep127); \
    return isfinite(out[3]);

CLONES static int stats_bf16(const uint16_t *x, int64_t n, double *out) {
    LANES(int16_t, INT16_MIN, INT16_MAX, key16, BF16, ENDS_BF16)
    BF16_ROUND
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(MSPROBE_NO_CLONES)
#include <immintrin.h>
#define VECTOR_BF16 1
/* The same lanes with AVX-512 written out: one 64-byte block of 32 elements per step. Unpacking the words
   within each 128-bit quarter puts the elements in the lane order LANE_OF below; every element still goes to
   its lane i % 32 and each lane adds in element order. The square is added with a fused multiply-add: the
   square of a bfloat16 value (8 significant bits) is exact in float64, so the single rounding of the fused
   operation is the rounding of the plain addition: the same bits, one instruction fewer per 8 elements. */
static const int LANE_OF[4][8] = {{0, 1, 2, 3, 8, 9, 10, 11}, {16, 17, 18, 19, 24, 25, 26, 27},
                                  {4, 5, 6, 7, 12, 13, 14, 15}, {20, 21, 22, 23, 28, 29, 30, 31}};

__attribute__((target("avx512f,avx512bw,avx512dq,fma")))
static int stats_bf16_avx512(const uint16_t *x, int64_t n, double *out) {
    __m512d s0 = _mm512_setzero_pd(), s1 = s0, s2 = s0, s3 = s0, q0 = s0, q1 = s0, q2 = s0, q3 = s0;
    __m512i vhi = _mm512_set1_epi16(INT16_MIN), vlo = _mm512_set1_epi16(INT16_MAX);
    const __m512i zero = _mm512_setzero_si512(), mask = _mm512_set1_epi16(0x7fff);
    int64_t i = 0;
    for (; i + L <= n; i += L) {
        _mm_prefetch((const char *)(x + i) + 8192, _MM_HINT_T0);
        __m512i v = _mm512_loadu_si512((const void *)(x + i));
        __m512i k = _mm512_ternarylogic_epi32(v, _mm512_srai_epi16(v, 15), mask, 0x78);  /* v ^ (sign & mask) */
        vhi = _mm512_max_epi16(vhi, k); vlo = _mm512_min_epi16(vlo, k);
        __m512d a = _mm512_castsi512_pd(_mm512_unpacklo_epi16(zero, v));   /* bfloat16 -> float32 bits */
        __m512d b = _mm512_castsi512_pd(_mm512_unpackhi_epi16(zero, v));
        __m512d d0 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_castpd512_pd256(a)));
        __m512d d1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(a, 1)));
        __m512d d2 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_castpd512_pd256(b)));
        __m512d d3 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(b, 1)));
        s0 = _mm512_add_pd(s0, d0); s1 = _mm512_add_pd(s1, d1); s2 = _mm512_add_pd(s2, d2); s3 = _mm512_add_pd(s3, d3);
        q0 = _mm512_fmadd_pd(d0, d0, q0); q1 = _mm512_fmadd_pd(d1, d1, q1);
        q2 = _mm512_fmadd_pd(d2, d2, q2); q3 = _mm512_fmadd_pd(d3, d3, q3);
    }
    double sv[4][8], qv[4][8], s[L], q[L]; int16_t hi[L], lo[L];
    _mm512_storeu_pd(sv[0], s0); _mm512_storeu_pd(sv[1], s1); _mm512_storeu_pd(sv[2], s2); _mm512_storeu_pd(sv[3], s3);
    _mm512_storeu_pd(qv[0], q0); _mm512_storeu_pd(qv[1], q1); _mm512_storeu_pd(qv[2], q2); _mm512_storeu_pd(qv[3], q3);
    _mm512_storeu_si512((void *)hi, vhi); _mm512_storeu_si512((void *)lo, vlo);   /* word j holds lane j */
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 8; c++) { s[LANE_OF[r][c]] = sv[r][c]; q[LANE_OF[r][c]] = qv[r][c]; }
    TAIL(int16_t, key16, BF16, ENDS_BF16)
    BF16_ROUND
}

static int vector_bf16(void) {
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
             && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma");
    }
    return ok;
}
#endif

/* 1 when msprobe_stats_bf16 takes the AVX-512 loop on this CPU */
int msprobe_stats_vector(void) {
#ifdef VECTOR_BF16
    return vector_bf16();
#else
    return 0;
#endif
}

int msprobe_stats_bf16(const uint16_t *x, int64_t n, double *out) {
#ifdef VECTOR_BF16
    if (vector_bf16()) return stats_bf16_avx512(x, n, out);
#endif
    return stats_bf16(x, n, out);
}

CLONES int msprobe_stats_f16(const uint16_t *x, int64_t n, double *out) {
    LANES(int16_t, INT16_MIN, INT16_MAX, key16, f16bits, ENDS_F16)
    out[2] = round_to(mean, 11, -24, 65504.0); out[3] = round_to(norm, 11, -24, 65504.0);
    return isfinite(out[3]);
}

/* Neumaier: s + c carries the sum of everything added to s */
#define ADD(s, c, x) { double t_ = s + x; c += fabs(s) >= fabs(x) ? (s - t_) + x : (x - t_) + s; s = t_; }

CLONES int msprobe_stats_f64(const uint64_t *x, int64_t n, double *out) {
    int64_t hi[L], lo[L]; double s[L], cs[L], q[L], cq[L];
    for (int j = 0; j < L; j++) { hi[j] = INT64_MIN; lo[j] = INT64_MAX; s[j] = cs[j] = q[j] = cq[j] = 0.0; }
    int64_t i = 0;
    for (; i + L <= n; i += L) {
        PF(i)
        for (int j = 0; j < L; j++) {
            uint64_t b = x[i + j]; int64_t k = key64(b); double d; memcpy(&d, &b, 8); double p = d * d;
            hi[j] = hi[j] > k ? hi[j] : k; lo[j] = lo[j] < k ? lo[j] : k; ADD(s[j], cs[j], d) ADD(q[j], cq[j], p) } }
    for (int j = 0; i < n; i++, j++) {
        uint64_t b = x[i]; int64_t k = key64(b); double d; memcpy(&d, &b, 8); double p = d * d;
        hi[j] = hi[j] > k ? hi[j] : k; lo[j] = lo[j] < k ? lo[j] : k; ADD(s[j], cs[j], d) ADD(q[j], cq[j], p) }
    double S = 0.0, CS = 0.0, Q = 0.0, CQ = 0.0;
    for (int j = 0; j < L; j++) {
        ADD(S, CS, s[j]) ADD(Q, CQ, q[j])
        hi[0] = hi[0] > hi[j] ? hi[0] : hi[j]; lo[0] = lo[0] < lo[j] ? lo[0] : lo[j]; }
    for (int j = 0; j < L; j++) { CS += cs[j]; CQ += cq[j]; }
    uint64_t hb = (uint64_t)key64((uint64_t)hi[0]), lb = (uint64_t)key64((uint64_t)lo[0]);
    memcpy(&out[0], &hb, 8); memcpy(&out[1], &lb, 8);
    S += CS; Q += CQ;
    if (!(isfinite(S) && isfinite(Q))) return 0;
    out[2] = S / (double)n; out[3] = sqrt(Q);
    return isfinite(out[3]);
}
"""

FLAGS = ("-O3", "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-shared")
FUNCTIONS = ("msprobe_stats_f32", "msprobe_stats_f64", "msprobe_stats_bf16", "msprobe_stats_f16")
VARIANTS = ((), ("-DMSPROBE_NO_CLONES",))     # older compilers: no per-CPU clones

_lock = threading.Lock()
_loaded: Optional[dict] = None


def library_path(directory: Optional[str] = None) -> str:
    """The file name of the compiled kernel for this source, these flags and this machine."""
    return cbuild.library_path("stats", SOURCE, FLAGS, directory)


def _open(path: str) -> dict:
    lib = ctypes.CDLL(path)
    funcs = {}
    for name in FUNCTIONS:
        fn = getattr(lib, name)
        fn.restype = ctypes.c_int
        fn.argtypes = (ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)
        funcs[name] = fn
    funcs["_lib"] = lib
    return funcs


def load() -> Optional[dict]:
    """The kernel's functions by name (compiled now if this is the first use), or None if unavailable."""
    global _loaded
    if _loaded is not None:
        return _loaded or None
    with _lock:
        if _loaded is None:
            try:
                _loaded = _load()
            except Exception as exc:  # noqa: BLE001 - the statistics must never fail because of the kernel
                log.debug("the compiled statistics kernel is unavailable (%s)", exc)
                _loaded = {}
    return _loaded or None


def _load() -> dict:
    path = cbuild.build("stats", SOURCE, FLAGS, VARIANTS, "statistics kernel")
    return {} if path is None else _open(path)
