"""Max, Min, Mean and Norm of a contiguous float32/float64 CPU tensor in one pass over its memory.

The plain way costs four reductions (max, min, mean, norm), each reading the whole tensor again; a
dump summarises tens of millions of elements per training step, mostly just written by the kernel
before and already out of the nearest caches, so those passes are bound by memory traffic. Here one
numba-compiled loop reads every element once and keeps four running values: the maximum and the
minimum as order-preserving integer keys of the float bits (integer min/max vectorise; float ones
with NaN semantics do not), the sum and the sum of squares.

float32 data goes in blocks of 256 elements, each block's keys first: a block whose magnitudes keep
every square and the block's sums in float32's normal range is summed in float32 (8 lanes, no
conversion; twice as fast as converting every element), and the block sums are added in float64;
any other block is summed in float64. Mean and Norm are rounded once to the dtype (as torch returns
them); they typically come out within about 1e-7 relative of the exact values, and always within the
float32 summation bound of a block of BLOCK elements in any order (the vector width, and so the order,
depends on the CPU): gamma_{BLOCK-1} * sum|x| for the sum, plus the float64 sum of the blocks.
float64 data is summed in float64 throughout.

Only finite data takes this path: a NaN or an infinity makes the sums non-finite and :func:`summarize`
returns None, so the caller's NaN-aware path decides. Without numba (or with ``MSPROBE_DUMP_JIT=0``)
:func:`summarize` always returns None.
"""
from __future__ import annotations

import ctypes
import logging
import math
import os
import threading
import warnings
from typing import Any, Optional

import numpy as np

log = logging.getLogger("pytest_msprobe.dump")

MIN_ELEMENTS = 64            # below this the call overhead dominates: the plain path is as fast
BLOCK = 256                  # float32 elements summed in float32 before the float64 running sums

_kernels: Optional[dict] = None
_POINTER = "address"
_local = threading.local()


def _build() -> dict:
    """dtype -> (kernel, integer key dtype, rounds to float32); empty when numba is missing or disabled."""
    if os.environ.get("MSPROBE_DUMP_JIT", "1").strip().lower() in ("0", "false", "no", "off"):
        return {}
    try:
        import numba
    except ImportError:
        log.debug("numba is not installed: tensor statistics use four torch/numpy reductions")
        return {}

    def make(float_type: Any, key_type: Any, mask: int, jit: Any) -> Any:
        kmask = key_type(mask)
        shift = key_type(np.dtype(key_type).itemsize * 8 - 1)
        kmin, kmax = key_type(np.iinfo(key_type).min), key_type(np.iinfo(key_type).max)
        # float32 data: blocks of BLOCK elements. Each block's keys come first (its extremes); a block
        # whose magnitudes keep every float32 square and sum in the normal range (or that holds only
        # zeros) is summed in float32, vectorised 8 wide with no conversion, and the block sums are
        # added in float64; any other block (tiny or huge values, NaN, inf) is summed in float64.
        # float64 data: float64 throughout.
        block = BLOCK if float_type is np.float32 else 0
        lo_ok_hi, lo_ok_lo = _key32(_SAFE32[1]), _key32(-_SAFE32[1])     # |x| <= 2**59: no overflow
        hi_ok_hi, hi_ok_lo = _key32(_SAFE32[0]), _key32(-_SAFE32[0])     # |x| >= 2**-60: no underflow
        zero_hi, zero_lo = _key32(0.0), _key32(-0.0)

        def kernel(values, bits):       # pragma: no cover - runs compiled (numba), not as Python
            hi, lo = kmin, kmax
            s = 0.0
            q = 0.0
            n = bits.shape[0]
            done = 0
            if block:
                done = n - n % block
                for base in range(0, done, block):
                    bhi, blo = kmin, kmax
                    for i in range(base, base + block):
                        k = bits[i]
                        k = key_type(k ^ key_type(key_type(k >> shift) & kmask))     # 32-bit lanes stay
                        bhi = key_type(max(bhi, k))
                        blo = key_type(min(blo, k))
                    hi = key_type(max(hi, bhi))
                    lo = key_type(min(lo, blo))
                    if bhi <= lo_ok_hi and blo >= lo_ok_lo and (
                            bhi >= hi_ok_hi or blo <= hi_ok_lo or (bhi <= zero_hi and blo >= zero_lo)):
                        bs = float_type(0.0)
                        bq = float_type(0.0)
                        for i in range(base, base + block):
                            x = values[i]
                            bs += x
                            bq += x * x
                        s += np.float64(bs)
                        q += np.float64(bq)
                    else:
                        for i in range(base, base + block):
                            x = np.float64(values[i])
                            s += x
                            q += x * x
            for i in range(done, n):
                x = np.float64(values[i])
                s += x
                q += x * x
                k = bits[i]
                k = key_type(k ^ key_type(key_type(k >> shift) & kmask))
                hi = key_type(max(hi, k))
                lo = key_type(min(lo, k))
            ends = np.empty(2, key_type)
            ends[0] = hi ^ ((hi >> shift) & kmask)      # the keys back to the bits of the floats
            ends[1] = lo ^ ((lo >> shift) & kmask)
            ends_f = ends.view(float_type)
            # Mean and Norm rounded once to the data's dtype, as torch returns them; not usable (the
            # caller's NaN-aware path decides) when the data held a NaN or an infinity
            ok = math.isfinite(s) and math.isfinite(q)
            mean = np.float64(float_type(s / n)) if n else 0.0
            norm = np.float64(float_type(math.sqrt(q)))
            return ok, np.float64(ends_f[0]), np.float64(ends_f[1]), mean, norm
        return jit(kernel)

    flags = {"reassoc", "contract"}      # reordering the sums only: NaN/inf semantics stay intact
    out = {}
    for dtype, key_type, mask in ((np.float32, np.int32, 0x7FFFFFFF), (np.float64, np.int64, 0x7FFFFFFFFFFFFFFF)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn = make(dtype, key_type, mask, numba.njit(fastmath=flags, nogil=True, boundscheck=False,
                                                            cache=True))
        except Exception:  # noqa: BLE001 - no writable cache directory: compile per process instead
            fn = make(dtype, key_type, mask, numba.njit(fastmath=flags, nogil=True, boundscheck=False))
        out[np.dtype(dtype)] = (fn, np.dtype(key_type), dtype is np.float32)
        try:
            out[_POINTER, dtype is np.float32] = _by_pointer(numba, fn, dtype, key_type)
        except Exception as exc:  # noqa: BLE001 - the array entry point still serves
            log.debug("one-pass statistics by address unavailable (%s)", exc)
    return out


def _by_pointer(numba: Any, fn: Any, dtype: Any, key_type: Any) -> tuple:
    """A C entry point over raw memory, called through ctypes: no numpy arrays to build and free, no
    per-call argument typing by numba's dispatcher."""
    from numba import carray, types

    def by_pointer(vp, bp, n, out):     # pragma: no cover - runs compiled (numba), not as Python
        ok, mx, mn, mean, norm = fn(carray(vp, (n,)), carray(bp, (n,)))
        out[0] = mx
        out[1] = mn
        out[2] = mean
        out[3] = norm
        return 1 if ok else 0

    ftype = types.float32 if dtype is np.float32 else types.float64
    ktype = types.int32 if key_type is np.int32 else types.int64
    sig = types.int32(types.CPointer(ftype), types.CPointer(ktype), types.intp, types.CPointer(types.float64))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = numba.cfunc(sig, cache=True)(by_pointer)
    except Exception:  # noqa: BLE001 - no writable cache directory
        compiled = numba.cfunc(sig)(by_pointer)
    call = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_void_p)(
        compiled.address)
    return call, compiled               # the compiled object keeps the code (and so the address) alive


def kernels() -> dict:
    global _kernels
    if _kernels is None:
        try:
            _kernels = _build()
        except Exception as exc:  # noqa: BLE001 - statistics must never fail because of the accelerator
            log.warning("msprobe dump: the one-pass statistics kernel is unavailable (%s); using plain "
                        "reductions", exc)
            _kernels = {}
    return _kernels


def summarize(array: np.ndarray) -> Optional[list]:
    """[Max, Min, Mean, Norm] of a C-contiguous float32/float64 array, or None (not finite, no kernel).

    The values are Python floats; Mean and Norm are rounded to the array's dtype. The dumper calls
    :func:`summarize_memory`; this array entry point is the same loop for numpy callers.
    """
    n = array.size
    if n < MIN_ELEMENTS:
        return None
    entry = (_kernels if _kernels is not None else kernels()).get(array.dtype)
    if entry is None:
        return None
    try:
        flat = array.reshape(-1)
        ok, mx, mn, mean, norm = entry[0](flat, flat.view(entry[1]))
    except Exception as exc:  # noqa: BLE001
        log.debug("one-pass statistics failed (%s); falling back", exc)
        return None
    if not ok or not np.isfinite(norm):   # a Norm beyond the dtype's range is left to the general path
        return None
    return [float(mx), float(mn), float(mean), float(norm)]


# float32 magnitudes whose squares, and a block's sum of them, stay in float32's normal range
_SAFE32 = (2.0 ** -60, 2.0 ** 59)


def _key32(x: float) -> int:
    """The order-preserving integer key of a float32 value (the kernel's Max/Min representation)."""
    bits = int(np.array([x], np.float32).view(np.int32)[0])
    return np.int32(bits ^ ((bits >> 31) & 0x7FFFFFFF))


def summarize_memory(address: int, n: int, float32: bool) -> Optional[list]:
    """:func:`summarize` of ``n`` contiguous float32 (or float64) values at ``address``.

    For a tensor the caller has checked: dense, contiguous, on the CPU, of that dtype, alive for the
    duration of the call.
    """
    if n < MIN_ELEMENTS:
        return None
    entry = (_kernels if _kernels is not None else kernels()).get((_POINTER, float32))
    if entry is None:
        return None
    try:
        out, where = _local.out
    except AttributeError:
        out = (ctypes.c_double * 4)()
        where = ctypes.addressof(out)
        _local.out = out, where
    if entry[0](address, address, n, where):
        norm = out[3]
        if norm - norm == 0.0:         # finite data can still have a Norm beyond the dtype's range (inf)
            return [out[0], out[1], out[2], norm]
    return None
