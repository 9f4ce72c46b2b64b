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

/* KT: the integer key type (16-bit keys for 16-bit data), KEY: bits -> key, LOAD: element -> float32 bits */
#define LANES(KT, KMIN, KMAX, KEY, LOAD, ENDS) \
    KT hi[L], lo[L]; double s[L], q[L]; \
    for (int j = 0; j < L; j++) { hi[j] = KMIN; lo[j] = KMAX; s[j] = 0.0; q[j] = 0.0; } \
    int64_t i = 0; \
    for (; i + L <= n; i += L) \
        for (int j = 0; j < L; j++) { \
            KT k = KEY(x[i + j]); double d = (double)asf(LOAD(x[i + j])); \
            hi[j] = hi[j] > k ? hi[j] : k; lo[j] = lo[j] < k ? lo[j] : k; s[j] += d; q[j] += d * d; } \
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

CLONES int msprobe_stats_bf16(const uint16_t *x, int64_t n, double *out) {
    LANES(int16_t, INT16_MIN, INT16_MAX, key16, BF16, ENDS_BF16)
    out[2] = round_to(mean, 8, -133, 0x1.fep127); out[3] = round_to(norm, 8, -133, 0x1.fep127);
    return isfinite(out[3]);
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
    for (; i + L <= n; i += L)
        for (int j = 0; j < L; j++) {
            uint64_t b = x[i + j]; int64_t k = key64(b); double d; memcpy(&d, &b, 8); double p = d * d;
            hi[j] = hi[j] > k ? hi[j] : k; lo[j] = lo[j] < k ? lo[j] : k; ADD(s[j], cs[j], d) ADD(q[j], cq[j], p) }
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
