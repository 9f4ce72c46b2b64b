"""The building blocks of the compiled metric kernels (numba, ``cache=True``): the decorators, bit casts, and
the numeric types a kernel computes in, fixed per compiled version by its arrays' element types.

A type is named by a zero of it: ``np.float64(0)``, ``np.float32(0)``, or ``np.uint16(0)`` for float16, whose
values are float32 numbers rounded to float16 (numba has no float16: a float32 result of one +, -, * or / of
float16 values, rounded to float16, is the float16 result). float16 arrays come as their bits (uint16) and
bfloat16 arrays as theirs (int16), widened exactly where they are read (:func:`_load`). Maxima are kept as
integer keys of the values' bits (:func:`_key`), which vectorise where a NaN-aware float maximum does not.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

_jit = numba.njit(nogil=True, boundscheck=False, cache=True, error_model="numpy")
_inline = numba.njit(nogil=True, boundscheck=False, cache=True, error_model="numpy", inline="always")
# float additions may be reassociated (the sums of FIGURES only): LLVM then keeps one accumulator per vector lane
_reassoc = numba.njit(nogil=True, boundscheck=False, cache=True, error_model="numpy", fastmath={"reassoc"})


def _bitcast(src: types.Type, dst: types.Type, dst_ir: ir.Type):
    def impl(typingctx, value):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], dst_ir)
        return dst(src), codegen
    return intrinsic(impl)


_bits = _bitcast(types.float64, types.int64, ir.IntType(64))
_from_bits = _bitcast(types.int64, types.float64, ir.DoubleType())
_bits32 = _bitcast(types.float32, types.int32, ir.IntType(32))
_from_bits32 = _bitcast(types.int32, types.float32, ir.FloatType())


# --- the numeric types, fixed per compiled version by the arrays' element types -------------------------------
def _type_of(a):
    """The type the elements of array ``a`` are computed in (float16 comes as uint16 bits, bfloat16 as int16)."""


@overload(_type_of)
def _type_of_typed(a):
    if a.dtype == types.float64:
        return lambda a: np.float64(0.0)
    if a.dtype in (types.float32, types.int16):             # int16: the bits of bfloat16, exact in float32
        return lambda a: np.float32(0.0)
    return lambda a: np.uint16(0)


def _wider(x, y):
    """numpy's result type of two types."""


@overload(_wider)
def _wider_typed(x, y):
    if types.float64 in (x, y):
        return lambda x, y: np.float64(0.0)
    if types.float32 in (x, y):
        return lambda x, y: np.float32(0.0)
    return lambda x, y: np.uint16(0)


def _rnd(x, z):
    """``x`` rounded to the type ``z`` (float16: a float32 holding a float16 value)."""


@overload(_rnd)
def _rnd_typed(x, z):
    if z == types.float64:
        return lambda x, z: np.float64(x)
    if z == types.float32:
        return lambda x, z: np.float32(x)
    return lambda x, z: np.float32(_to_f16(np.float64(x)))


def _load(a, i):
    """Element ``i`` of a float array in its type (float16 and bfloat16 bits as a float32 value)."""


@overload(_load)
def _load_typed(a, i):
    if a.dtype == types.uint16:
        return lambda a, i: _f16_value(a[i])
    if a.dtype == types.int16:
        return lambda a, i: _from_bits32(np.int32(np.int32(a[i]) << 16))
    return lambda a, i: a[i]


def _key(x):
    """An order key of a value >= 0 or NaN: its bits, sign cleared (every NaN's above inf's), so numpy's
    NaN-propagating maximum is an integer maximum, which unlike a NaN-aware float maximum vectorises."""


@overload(_key)
def _key_typed(x):
    if x == types.float32:
        return lambda x: _bits32(abs(x))
    return lambda x: _bits(abs(np.float64(x)))


def _start(m, z):
    """The key of a running maximum ``m`` of values computed in type ``z`` (-1.0: nothing seen yet -> -1)."""


@overload(_start)
def _start_typed(m, z):
    if z == types.float64:
        return lambda m, z: np.int64(-1) if m < 0 else _bits(abs(m))
    return lambda m, z: np.int32(-1) if m < 0 else _bits32(abs(np.float32(m)))


def _unkey(k):
    """A running maximum's key back to its value as float64; -1 (nothing seen) stays -1.0."""


@overload(_unkey)
def _unkey_typed(k):
    if k == types.int32:
        return lambda k: -1.0 if k < 0 else np.float64(_from_bits32(k))
    return lambda k: -1.0 if k < 0 else _from_bits(k)


@_inline
def _f16_value(h):
    """float16 bits -> float32, exactly, without a branch."""
    h = np.int32(h)
    sign = (h & 0x8000) << 16
    e = (h >> 10) & 0x1f
    m = h & 0x3ff
    normal = sign | ((e + 112) << 23) | (m << 13)
    special = sign | 0x7f800000 | (m << 13)                           # inf, nan
    tiny = sign | _bits32(np.float32(m) * np.float32(2.0 ** -24))     # zero, subnormal
    return _from_bits32(np.int32(special if e == 0x1f else (tiny if e == 0 else normal)))


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
def _inc(c, x):
    """A per-chunk count plus ``x`` in int32 (a chunk holds under 2**31 elements): lanes as wide as float32's."""
    return np.int32(c + x)


@_inline
def _finite(x):
    return abs(x) < math.inf                  # False for inf and nan, without a call


@_inline
def _pow2(k):
    """2**k of an integral k, exactly; inf/nan pass through as exp2 gives them."""
    if -1022.0 <= k <= 1023.0:          # a normal float64: its exponent field alone
        return _from_bits(np.int64(k + 1023) << 52)
    if not math.isfinite(k):
        return math.pow(2.0, k)
    return math.ldexp(1.0, int(k))
