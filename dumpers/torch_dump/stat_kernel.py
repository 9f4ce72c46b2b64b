"""Max, Min, Mean and Norm of a dense float32/float64/bfloat16/float16 CPU tensor in one pass (numba).

The plain way costs four reductions (max, min, mean, norm), each reading the whole tensor again; a dump
summarises tens of millions of elements per training step, mostly just written by the kernel before and out
of the nearest caches, so those passes are bound by memory traffic. Here one loop, compiled by numba
(``cache=True``: compiled once, then loaded from numba's cache), reads every element once and keeps four
running values per lane: the maximum and the minimum as order-preserving integer keys of the float bits
(so ``-0.0 < 0.0``, as torch orders them), the sum and the sum of squares in float64.

Element ``i`` goes to lane ``i % 32`` and the 32 lanes are combined in one fixed tree, so the numbers do not
depend on the vector width LLVM or the CPU picks. The loop over whole blocks of 32 is written as LLVM vector
IR through a numba intrinsic (:func:`_blocks`): numba leaves LLVM's SLP vectoriser off, and a numba loop over
the lanes keeps them in memory (measured 2-6x slower); the vector form keeps the 32 lanes in registers with
the same operations per lane (no fused multiply-add), so the bits are the scalar loop's (:func:`_tail` does
the last partial block the plain way; tests compare both with a numpy copy of the lanes).

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
# dtypes the kernel reads, by name
DTYPES = ("float32", "float64", "bfloat16", "float16")


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
def _lane_i64(typingctx, n):
    """``n`` int64 keys on the stack."""
    if not isinstance(n, types.IntegerLiteral):
        return None

    def codegen(context, builder, signature, args):
        return cgutils.alloca_once(builder, ir.IntType(64), size=n.literal_value)
    return types.CPointer(types.int64)(n), codegen


_I16, _I32, _I64, _F32, _F64 = ir.IntType(16), ir.IntType(32), ir.IntType(64), ir.FloatType(), ir.DoubleType()
_I8P = ir.IntType(8).as_pointer()


def _vec(t: Any) -> Any:
    return ir.VectorType(t, LANES)


def _splat(t: Any, v: Any) -> Any:
    return ir.Constant(_vec(t), [ir.Constant(t, v)] * LANES)


def _f16_to_f32(builder: Any, v: Any) -> Any:
    """float16 bits (a vector of i16) -> float32 values, exactly (subnormals by one exact subtraction)."""
    h = builder.zext(v, _vec(_I32))
    em = builder.shl(builder.and_(h, _splat(_I32, 0x7fff)), _splat(_I32, 13))
    e = builder.and_(em, _splat(_I32, 0x0f800000))
    magic = ir.Constant(_vec(_F32), [ir.Constant(_F32, float(np.uint32(113 << 23).view(np.float32)))] * LANES)
    sub = builder.bitcast(builder.fsub(builder.bitcast(builder.add(em, _splat(_I32, 113 << 23)), _vec(_F32)), magic),
                          _vec(_I32))
    normal = builder.select(builder.icmp_unsigned("==", e, _splat(_I32, 0)), sub,
                            builder.add(em, _splat(_I32, 112 << 23)))
    r = builder.select(builder.icmp_unsigned("==", e, _splat(_I32, 0x0f800000)),
                       builder.add(em, _splat(_I32, 224 << 23)), normal)
    r = builder.or_(r, builder.shl(builder.and_(h, _splat(_I32, 0x8000)), _splat(_I32, 16)))
    return builder.bitcast(r, _vec(_F32))


@intrinsic
def _blocks(typingctx, x, nblocks, code, sums, keys):
    """The whole blocks of ``LANES`` elements of ``x`` (the dtype's bits) added to the lanes, written as vector
    IR so that the lanes stay in vector registers (numba leaves LLVM's SLP vectoriser off). ``sums``: float64
    [sum, sum of squares, and for float64 their compensations], ``keys``: int64 [max key, min key], each
    ``LANES`` long, read and written back. Element ``j`` of a block goes to lane ``j``, each lane adds in
    element order with the scalar code's operations (no fused multiply-add), so the bits are the scalar loop's.
    """
    if not isinstance(code, types.IntegerLiteral):
        return None
    c, width = code.literal_value, x.dtype.bitwidth

    def codegen(context, builder, signature, args):
        xa, nb, _, sa, ka = args
        xp = context.make_array(signature.args[0])(context, builder, xa).data
        sp = context.make_array(signature.args[3])(context, builder, sa).data
        kp = context.make_array(signature.args[4])(context, builder, ka).data
        ity, kty = ir.IntType(width), (_I64 if width == 64 else _I32)
        n_sums = 4 if width == 64 else 2

        def slot(ptr, i, t):
            return builder.bitcast(builder.gep(ptr, [ir.Constant(_I64, i * LANES)]), _vec(t).as_pointer())

        init = [builder.load(slot(sp, i, _F64), align=8) for i in range(n_sums)]
        init += [builder.load(slot(kp, i, _I64), align=8) for i in range(2)]
        if kty is _I32:
            init[-2:] = [builder.trunc(v, _vec(_I32)) for v in init[-2:]]
        pre = builder.block
        loop, after = builder.append_basic_block("blocks"), builder.append_basic_block("blocks.end")
        builder.cbranch(builder.icmp_signed(">", nb, ir.Constant(_I64, 0)), loop, after)
        builder.position_at_end(loop)
        i = builder.phi(_I64)
        acc = [builder.phi(v.type) for v in init]
        ptr = builder.bitcast(builder.gep(xp, [builder.mul(i, ir.Constant(_I64, LANES))]), _vec(ity).as_pointer())
        v = builder.load(ptr, align=width // 8)
        # fetch 8 KiB ahead: data out of the caches is then read at the memory's bandwidth (measured: the
        # bfloat16 loop 6.9 -> 3.1 ms per 16 M elements); a prefetch past the end is harmless
        prefetch = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [_I8P, _I32, _I32, _I32]), "llvm.prefetch.p0i8")
        bytes_ = builder.bitcast(ptr, _I8P)
        for off in range(0, LANES * width // 8, 64):
            builder.call(prefetch, [builder.gep(bytes_, [ir.Constant(_I64, 8192 + off)]), ir.Constant(_I32, 0),
                                    ir.Constant(_I32, 3), ir.Constant(_I32, 1)])
        k = builder.xor(v, builder.and_(builder.ashr(v, _splat(ity, width - 1)), _splat(ity, (1 << (width - 1)) - 1)))
        if width == 16:
            k = builder.sext(k, _vec(_I32))
            if c == 1:
                f = builder.bitcast(builder.shl(builder.zext(v, _vec(_I32)), _splat(_I32, 16)), _vec(_F32))
            else:
                f = _f16_to_f32(builder, v)
            d = builder.fpext(f, _vec(_F64))
        elif width == 32:
            d = builder.fpext(builder.bitcast(v, _vec(_F32)), _vec(_F64))
        else:
            d = builder.bitcast(v, _vec(_F64))
        p = builder.fmul(d, d)
        hi, lo = acc[-2:]
        new_keys = [builder.select(builder.icmp_signed(">", k, hi), k, hi),
                    builder.select(builder.icmp_signed("<", k, lo), k, lo)]
        if width == 64:             # Neumaier: c += |s| >= |x| ? (s - t) + x : (x - t) + s, then s = t
            def fabs(args):             # clear the sign bit
                bits = builder.bitcast(args[0], _vec(_I64))
                return builder.bitcast(builder.and_(bits, _splat(_I64, (1 << 63) - 1)), _vec(_F64))
            s, q, cs, cq = acc[:4]
            ts, tq = builder.fadd(s, d), builder.fadd(q, p)
            big = builder.fcmp_ordered(">=", fabs([s]), fabs([d]))
            cs2 = builder.fadd(cs, builder.select(big, builder.fadd(builder.fsub(s, ts), d),
                                                  builder.fadd(builder.fsub(d, ts), s)))
            bigq = builder.fcmp_ordered(">=", q, p)
            cq2 = builder.fadd(cq, builder.select(bigq, builder.fadd(builder.fsub(q, tq), p),
                                                  builder.fadd(builder.fsub(p, tq), q)))
            new = [ts, tq, cs2, cq2] + new_keys
        else:
            new = [builder.fadd(acc[0], d), builder.fadd(acc[1], p)] + new_keys
        i2 = builder.add(i, ir.Constant(_I64, 1))
        i.add_incoming(ir.Constant(_I64, 0), pre)
        i.add_incoming(i2, loop)
        for phi, a, b in zip(acc, init, new):
            phi.add_incoming(a, pre)
            phi.add_incoming(b, loop)
        builder.cbranch(builder.icmp_signed("<", i2, nb), loop, after)
        builder.position_at_end(after)
        final = []
        for a, b in zip(init, new):
            phi = builder.phi(a.type)
            phi.add_incoming(a, pre)
            phi.add_incoming(b, loop)
            final.append(phi)
        if kty is _I32:
            final[-2:] = [builder.sext(v, _vec(_I64)) for v in final[-2:]]
        for idx in range(n_sums):
            builder.store(final[idx], slot(sp, idx, _F64), align=8)
        for idx in range(2):
            builder.store(final[n_sums + idx], slot(kp, idx, _I64), align=8)
        return context.get_dummy_value()
    return types.none(x, nblocks, code, sums, keys), codegen


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
def _tail(x, code, start, sums, keys):
    """The elements after the last whole block: element ``start + j`` to lane ``j``, scalar."""
    for j in range(x.shape[0] - start):
        b = x[start + j]
        if x.itemsize == 2:
            k = np.int64(_key16(b))
        elif x.itemsize == 4:
            k = np.int64(_key32(b))
        else:
            k = np.int64(b)
            k = k ^ ((k >> 63) & np.int64(0x7fffffffffffffff))
        d = _value(b, code)
        keys[j] = max(keys[j], k)
        keys[LANES + j] = min(keys[LANES + j], k)
        p = d * d
        if code == 3:
            for at, x_ in ((0, d), (LANES, p)):
                acc = sums[at + j]
                t = acc + x_
                sums[2 * LANES + at + j] += (acc - t) + x_ if abs(acc) >= abs(x_) else (x_ - t) + acc
                sums[at + j] = t
        else:
            sums[j] += d
            sums[LANES + j] += p


@_jit
def _stats(x, code, out):
    """Max, Min, Mean, Norm of ``x`` (the dtype's bits; code 0 float32, 1 bfloat16, 2 float16, 3 float64)
    into ``out``; 1 when they are finite, else 0."""
    numba.literally(code)
    n = x.shape[0]
    sums = numba.carray(_lane_f64(128), (4 * LANES,))          # sum, sum of squares, their compensations
    keys = numba.carray(_lane_i64(64), (2 * LANES,))           # max key, min key
    wide = x.itemsize == 8              # keys of narrower data live in 32-bit lanes
    for j in range(LANES):
        sums[j] = sums[LANES + j] = sums[2 * LANES + j] = sums[3 * LANES + j] = 0.0
        keys[j] = np.iinfo(np.int64).min if wide else np.iinfo(np.int32).min
        keys[LANES + j] = np.iinfo(np.int64).max if wide else np.iinfo(np.int32).max
    blocks = n // LANES
    _blocks(x, blocks, code, sums, keys)
    _tail(x, code, blocks * LANES, sums, keys)
    hk, lk = keys[0], keys[LANES]
    for j in range(LANES):
        hk, lk = max(hk, keys[j]), min(lk, keys[LANES + j])
    if code == 3:
        S, CS, Q, CQ = 0.0, 0.0, 0.0, 0.0
        for j in range(LANES):
            t = S + sums[j]
            CS += (S - t) + sums[j] if abs(S) >= abs(sums[j]) else (sums[j] - t) + S
            S = t
            t = Q + sums[LANES + j]
            CQ += (Q - t) + sums[LANES + j] if Q >= sums[LANES + j] else (sums[LANES + j] - t) + Q
            Q = t
        for j in range(LANES):
            CS += sums[2 * LANES + j]
            CQ += sums[3 * LANES + j]
        S += CS
        Q += CQ
        out[0] = _as_f64(np.uint64(hk ^ ((hk >> 63) & np.int64(0x7fffffffffffffff))))
        out[1] = _as_f64(np.uint64(lk ^ ((lk >> 63) & np.int64(0x7fffffffffffffff))))
        if not (math.isfinite(S) and math.isfinite(Q)):
            return 0
        out[2], out[3] = S / n, math.sqrt(Q)
        return 1 if math.isfinite(out[3]) else 0
    w = LANES // 2                    # the fixed tree over the lanes
    while w >= 1:
        for j in range(w):
            sums[j] += sums[j + w]
            sums[LANES + j] += sums[LANES + j + w]
        w //= 2
    if x.itemsize == 2:               # the keys back to bits (the key map is its own inverse)
        out[0] = _value(np.uint16(_key16(np.uint16(hk & 0xffff)) & 0xffff), code)
        out[1] = _value(np.uint16(_key16(np.uint16(lk & 0xffff)) & 0xffff), code)
    else:
        out[0] = _value(np.uint32(_key32(np.uint32(hk & 0xffffffff)) & 0xffffffff), code)
        out[1] = _value(np.uint32(_key32(np.uint32(lk & 0xffffffff)) & 0xffffffff), code)
    S, Q = sums[0], sums[LANES]
    if not (math.isfinite(S) and math.isfinite(Q)):
        return 0
    mean, norm = S / n, math.sqrt(Q)
    if code == 0:
        out[2], out[3] = np.float64(np.float32(mean)), np.float64(np.float32(norm))
    elif code == 1:
        out[2], out[3] = _round_to(mean, 8, -133, 3.3895313892515355e38), _round_to(norm, 8, -133,
                                                                                   3.3895313892515355e38)
    else:
        out[2], out[3] = _round_to(mean, 11, -24, 65504.0), _round_to(norm, 11, -24, 65504.0)
    return 1 if math.isfinite(out[3]) else 0


_OUT = types.CPointer(types.float64)


_SIG16 = types.int32(types.CPointer(types.uint16), types.intp, _OUT)


@numba.cfunc(_SIG16, cache=True, nogil=True)
def _entry_bf16(p, n, op):      # pragma: no cover - runs compiled (numba), not as Python
    return _stats(numba.carray(p, (n,)), 1, numba.carray(op, (4,)))


@numba.cfunc(_SIG16, cache=True, nogil=True)
def _entry_f16(p, n, op):      # pragma: no cover - runs compiled (numba), not as Python
    return _stats(numba.carray(p, (n,)), 2, numba.carray(op, (4,)))


@numba.cfunc(types.int32(types.CPointer(types.uint32), types.intp, _OUT), cache=True, nogil=True)
def _entry_f32(p, n, op):      # pragma: no cover - runs compiled (numba), not as Python
    return _stats(numba.carray(p, (n,)), 0, numba.carray(op, (4,)))


@numba.cfunc(types.int32(types.CPointer(types.uint64), types.intp, _OUT), cache=True, nogil=True)
def _entry_f64(p, n, op):      # pragma: no cover - runs compiled (numba), not as Python
    return _stats(numba.carray(p, (n,)), 3, numba.carray(op, (4,)))


def _build() -> dict:
    """dtype name -> ``(address, n, out_address) -> ok``: the numba C callbacks, called through ctypes."""
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_void_p)
    return {name: proto(compiled.address) for name, compiled in (
        ("bfloat16", _entry_bf16), ("float16", _entry_f16), ("float32", _entry_f32), ("float64", _entry_f64))}
