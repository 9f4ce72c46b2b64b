"""Max, Min, Mean and Norm of a dense float32/float64/bfloat16/float16 CPU tensor in one pass (numba).

The plain way costs four reductions (max, min, mean, norm), each reading the whole tensor again; a dump
summarises tens of millions of elements per training step, mostly just written by the kernel before and out
of the nearest caches, so those passes are bound by memory traffic. Here one loop, compiled by numba
(``cache=True``: compiled once, then loaded from numba's cache), reads every element once and keeps four
running values per lane: the maximum and the minimum as order-preserving integer keys of the float bits
(so ``-0.0 < 0.0``, as torch orders them), the sum and the sum of squares in float64.

Element ``i`` goes to lane ``i % 32`` and the 32 lanes are combined in one fixed tree, so the numbers do not
depend on the vector width LLVM or the CPU picks.

* float32, bfloat16, float16: every value and every square is exact in float64 (24, 8 and 11 significant
  bits), so the only roundings are the float64 additions; Mean and Norm are then rounded once to the
  data's dtype (round to nearest even, subnormals included).
* float64: the additions are compensated (Neumaier), per lane.

Only finite data takes this path: a NaN or an infinity (or a Norm that overflows the dtype) makes
:func:`summarize_memory` return None, so the caller's torch reductions decide. ``MSPROBE_DUMP_JIT=0``
turns the kernel off (the torch reductions then serve every tensor).
"""
from __future__ import annotations

import ctypes
import logging
import math
import os
import threading
from typing import Any, Optional, Union

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

log = logging.getLogger("pytest_msprobe.dump")

MIN_ELEMENTS = 64            # below this the call overhead dominates: torch's reductions are as fast
LANES = 32                   # element i goes to lane i % LANES

_lock = threading.Lock()
_entries: Optional[dict] = None
_local = threading.local()
_NAMES = {True: "float32", False: "float64"}
# dtype name -> (code the kernel knows it by, numpy type of its bits)
DTYPES = {"float32": (0, np.uint32), "float64": (3, np.uint64), "bfloat16": (1, np.uint16),
          "float16": (2, np.uint16)}


def disabled() -> bool:
    """``MSPROBE_DUMP_JIT=0`` (or false/no/off): no one-pass kernel, the torch reductions only."""
    return os.environ.get("MSPROBE_DUMP_JIT", "1").strip().lower() in ("0", "false", "no", "off")


def kernels() -> dict:
    """The entry points by dtype name, compiled (or loaded from numba's cache) on first use; empty when off."""
    global _entries
    if _entries is None:
        with _lock:
            if _entries is None:
                try:
                    _entries = {} if disabled() else _build()
                except Exception as exc:  # noqa: BLE001 - statistics must never fail because of the JIT
                    log.warning("msprobe dump: the one-pass statistics kernel is unavailable (%s); using "
                                "torch's reductions", exc)
                    _entries = {}
    return _entries


def _out() -> tuple:
    try:
        return _local.out
    except AttributeError:
        out = (ctypes.c_double * 4)()
        _local.out = out, ctypes.addressof(out)
        return _local.out


def summarize_memory(address: int, n: int, dtype: Union[bool, str]) -> Optional[list]:
    """[Max, Min, Mean, Norm] of ``n`` contiguous values of ``dtype`` at ``address``, or None.

    ``dtype``: ``"float32"``, ``"float64"``, ``"bfloat16"``, ``"float16"`` (True/False: float32/float64).
    None when the data is not finite, ``n`` is below :data:`MIN_ELEMENTS` or the kernel is off.
    For a tensor the caller has checked: dense, on the CPU, alive for the duration of the call.
    """
    if n < MIN_ELEMENTS:
        return None
    fn = (_entries if _entries is not None else kernels()).get(_NAMES.get(dtype, dtype))
    if fn is None:
        return None
    out, where = _out()
    if fn(address, n, where):
        return [out[0], out[1], out[2], out[3]]
    return None


def summarize(array: np.ndarray) -> Optional[list]:
    """[Max, Min, Mean, Norm] of a float32/float64/float16 numpy array, or None (not finite, kernel off).

    The values are Python floats; Mean and Norm are rounded to the array's dtype. The same loop as
    :func:`summarize_memory`, for numpy callers.
    """
    if array.dtype.name not in DTYPES or array.size < MIN_ELEMENTS:
        return None
    flat = np.ascontiguousarray(array).reshape(-1)
    return summarize_memory(flat.ctypes.data, flat.size, array.dtype.name)


# --- the compiled code -------------------------------------------------------------------------------------

@intrinsic
def _as_f32(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


@intrinsic
def _as_f64(typingctx, bits):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.uint64), codegen


@intrinsic
def _f32_bits(typingctx, value):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.uint32(types.float32), codegen


@intrinsic
def _lane_f64(typingctx, n):
    """``n`` float64 accumulators on the stack (LLVM knows they alias nothing else and keeps them close)."""
    if not isinstance(n, types.IntegerLiteral):
        return None

    def codegen(context, builder, signature, args):
        return cgutils.alloca_once(builder, ir.DoubleType(), size=n.literal_value)
    return types.CPointer(types.float64)(n), codegen


@intrinsic
def _lane_i32(typingctx, n):
    """``n`` int32 keys on the stack."""
    if not isinstance(n, types.IntegerLiteral):
        return None

    def codegen(context, builder, signature, args):
        return cgutils.alloca_once(builder, ir.IntType(32), size=n.literal_value)
    return types.CPointer(types.int32)(n), codegen


@intrinsic
def _lane_i64(typingctx, n):
    """``n`` int64 keys on the stack."""
    if not isinstance(n, types.IntegerLiteral):
        return None

    def codegen(context, builder, signature, args):
        return cgutils.alloca_once(builder, ir.IntType(64), size=n.literal_value)
    return types.CPointer(types.int64)(n), codegen


_jit = numba.njit(nogil=True, boundscheck=False, cache=True, error_model="numpy")


@_jit
def _f16_value(h):
    """float16 bits -> float64, exactly (subnormals through one exact float32 subtraction)."""
    h = np.uint32(h)
    em = (h & np.uint32(0x7fff)) << np.uint32(13)
    e = em & np.uint32(0x0f800000)
    if e == np.uint32(0x0f800000):
        r = em + np.uint32(224 << 23)
    elif e == 0:
        r = _f32_bits(np.float32(_as_f32(em + np.uint32(113 << 23)) - _as_f32(np.uint32(113 << 23))))
    else:
        r = em + np.uint32(112 << 23)
    r |= (h & np.uint32(0x8000)) << np.uint32(16)
    return np.float64(_as_f32(r))


@_jit
def _round_to(x, bits, qmin, top):
    """``x`` rounded to nearest even with ``bits`` significant bits, quanta no finer than 2**qmin."""
    if x == 0.0 or not math.isfinite(x):
        return x
    e = math.frexp(x)[1]
    qe = qmin if e - bits < qmin else e - bits
    r = math.ldexp(np.rint(math.ldexp(x, -qe)), qe)
    return math.copysign(math.inf, r) if abs(r) > top else r


@_jit
def _value(b, code):
    """The float64 value of one element's bits (code: 0 float32, 1 bfloat16, 2 float16, 3 float64)."""
    if code == 0:
        return np.float64(_as_f32(np.uint32(b)))
    if code == 1:
        return np.float64(_as_f32(np.uint32(b) << np.uint32(16)))
    if code == 2:
        return _f16_value(b)
    return _as_f64(np.uint64(b))


@_jit
def _key16(b):
    """An order-preserving signed key of a 16-bit float's bits (``-0.0 < 0.0``); its own inverse."""
    k = np.int32(np.int16(b))
    return k ^ ((k >> 15) & np.int32(0x7fff))


@_jit
def _key32(b):
    """The same for a 32-bit float."""
    k = np.int32(b)
    return k ^ ((k >> 31) & np.int32(0x7fffffff))


@_jit
def _stats_narrow(x, code, lanes, out):
    """float32 (uint32 bits), bfloat16 and float16 (uint16 bits): plain float64 lane sums.

    ``lanes`` is :data:`LANES`, passed at run time so that LLVM vectorises the loop over the lanes instead
    of unrolling it into scalars.
    """
    n = x.shape[0]
    s = numba.carray(_lane_f64(LANES), (LANES,))
    q = numba.carray(_lane_f64(LANES), (LANES,))
    hi = numba.carray(_lane_i32(LANES), (LANES,))
    lo = numba.carray(_lane_i32(LANES), (LANES,))
    for j in range(lanes):
        s[j], q[j], hi[j], lo[j] = 0.0, 0.0, np.iinfo(np.int32).min, np.iinfo(np.int32).max
    blocks = n // lanes
    for blk in range(blocks):
        base = blk * lanes
        for j in range(lanes):
            b = x[base + j]
            k = _key16(b) if x.itemsize == 2 else _key32(b)
            d = _value(b, code)
            h, m = hi[j], lo[j]
            hi[j] = k if k > h else h
            lo[j] = k if k < m else m
            s[j] += d
            q[j] += d * d
    for j in range(n - blocks * lanes):
        b = x[blocks * lanes + j]
        k = _key16(b) if x.itemsize == 2 else _key32(b)
        d = _value(b, code)
        hi[j] = max(hi[j], k)
        lo[j] = min(lo[j], k)
        s[j] += d
        q[j] += d * d
    w = LANES // 2
    while w >= 1:
        for j in range(w):
            s[j] += s[j + w]
            q[j] += q[j + w]
            hi[j] = max(hi[j], hi[j + w])
            lo[j] = min(lo[j], lo[j + w])
        w //= 2
    if x.itemsize == 2:     # the keys back to bits (the key map is its own inverse)
        out[0] = _value(np.uint16(_key16(np.uint16(hi[0] & 0xffff)) & 0xffff), code)
        out[1] = _value(np.uint16(_key16(np.uint16(lo[0] & 0xffff)) & 0xffff), code)
    else:
        out[0] = _value(np.uint32(_key32(np.uint32(hi[0] & 0xffffffff)) & 0xffffffff), code)
        out[1] = _value(np.uint32(_key32(np.uint32(lo[0] & 0xffffffff)) & 0xffffffff), code)
    if not (math.isfinite(s[0]) and math.isfinite(q[0])):
        return 0
    mean, norm = s[0] / n, math.sqrt(q[0])
    if code == 0:
        out[2], out[3] = np.float64(np.float32(mean)), np.float64(np.float32(norm))
    elif code == 1:
        out[2], out[3] = _round_to(mean, 8, -133, 3.3895313892515355e38), _round_to(norm, 8, -133,
                                                                                   3.3895313892515355e38)
    else:
        out[2], out[3] = _round_to(mean, 11, -24, 65504.0), _round_to(norm, 11, -24, 65504.0)
    return 1 if math.isfinite(out[3]) else 0


@_jit
def _stats_f64(x, lanes, out):
    """float64 (uint64 bits): Neumaier-compensated lane sums."""
    n = x.shape[0]
    kmask = np.int64(0x7fffffffffffffff)
    hi = numba.carray(_lane_i64(LANES), (LANES,))
    lo = numba.carray(_lane_i64(LANES), (LANES,))
    s = numba.carray(_lane_f64(LANES), (LANES,))
    cs = numba.carray(_lane_f64(LANES), (LANES,))
    q = numba.carray(_lane_f64(LANES), (LANES,))
    cq = numba.carray(_lane_f64(LANES), (LANES,))
    for j in range(lanes):
        hi[j], lo[j] = np.iinfo(np.int64).min, np.iinfo(np.int64).max
        s[j], cs[j], q[j], cq[j] = 0.0, 0.0, 0.0, 0.0
    blocks = n // lanes
    for blk in range(blocks + 1):
        base = blk * lanes
        for j in range(lanes if blk < blocks else n - base):
            b = x[base + j]
            k = np.int64(b)
            k = k ^ ((k >> 63) & kmask)
            h, m = hi[j], lo[j]
            hi[j] = k if k > h else h
            lo[j] = k if k < m else m
            d = _as_f64(b)
            p = d * d
            a = s[j]
            t = a + d
            cs[j] += (a - t) + d if abs(a) >= abs(d) else (d - t) + a
            s[j] = t
            a = q[j]
            t = a + p
            cq[j] += (a - t) + p if a >= p else (p - t) + a
            q[j] = t
    S, CS, Q, CQ = 0.0, 0.0, 0.0, 0.0
    for j in range(LANES):
        t = S + s[j]
        CS += (S - t) + s[j] if abs(S) >= abs(s[j]) else (s[j] - t) + S
        S = t
        t = Q + q[j]
        CQ += (Q - t) + q[j] if Q >= q[j] else (q[j] - t) + Q
        Q = t
        hi[0] = max(hi[0], hi[j])
        lo[0] = min(lo[0], lo[j])
    for j in range(LANES):
        CS += cs[j]
        CQ += cq[j]
    out[0] = _as_f64(np.uint64(hi[0] ^ ((hi[0] >> 63) & kmask)))
    out[1] = _as_f64(np.uint64(lo[0] ^ ((lo[0] >> 63) & kmask)))
    S += CS
    Q += CQ
    if not (math.isfinite(S) and math.isfinite(Q)):
        return 0
    out[2] = S / n
    out[3] = math.sqrt(Q)
    return 1 if math.isfinite(out[3]) else 0


_OUT = types.CPointer(types.float64)


_SIG16 = types.int32(types.CPointer(types.uint16), types.intp, types.intp, _OUT)


@numba.cfunc(_SIG16, cache=True, nogil=True)
def _entry_bf16(p, n, lanes, op):      # pragma: no cover - runs compiled (numba), not as Python
    return _stats_narrow(numba.carray(p, (n,)), 1, lanes, numba.carray(op, (4,)))


@numba.cfunc(_SIG16, cache=True, nogil=True)
def _entry_f16(p, n, lanes, op):      # pragma: no cover - runs compiled (numba), not as Python
    return _stats_narrow(numba.carray(p, (n,)), 2, lanes, numba.carray(op, (4,)))


@numba.cfunc(types.int32(types.CPointer(types.uint32), types.intp, types.intp, _OUT), cache=True, nogil=True)
def _entry_f32(p, n, lanes, op):      # pragma: no cover - runs compiled (numba), not as Python
    return _stats_narrow(numba.carray(p, (n,)), 0, lanes, numba.carray(op, (4,)))


@numba.cfunc(types.int32(types.CPointer(types.uint64), types.intp, types.intp, _OUT), cache=True, nogil=True)
def _entry_f64(p, n, lanes, op):      # pragma: no cover - runs compiled (numba), not as Python
    return _stats_f64(numba.carray(p, (n,)), lanes, numba.carray(op, (4,)))


def summarize_bits(bits: np.ndarray, dtype: str) -> Optional[list]:
    """The kernel over a contiguous array of the dtype's bits (uint16/uint32/uint64), any size; None if not
    finite."""
    out = np.zeros(4)
    code = DTYPES[dtype][0]
    ok = _stats_f64(bits, LANES, out) if code == 3 else _stats_narrow(bits, code, LANES, out)
    return [float(v) for v in out] if ok else None


def _build() -> dict:
    """dtype name -> ``(address, n, out_address) -> ok``: the numba C callbacks, called through ctypes."""
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_ssize_t, ctypes.c_void_p)
    entries = {}
    for name, compiled in (("bfloat16", _entry_bf16), ("float16", _entry_f16), ("float32", _entry_f32),
                           ("float64", _entry_f64)):
        entries[name] = _bound(proto(compiled.address))
    return entries


def _bound(call: Any) -> Any:
    def entry(address: int, n: int, out: int, _call: Any = call, _lanes: int = LANES) -> int:
        return _call(address, n, _lanes, out)
    return entry
