"""Max, Min, Mean and Norm of a contiguous float32/float64/bfloat16/float16 CPU tensor in one pass over its memory.

The plain way costs four reductions (max, min, mean, norm), each reading the whole tensor again; a
dump summarises tens of millions of elements per training step, mostly just written by the kernel
before and already out of the nearest caches, so those passes are bound by memory traffic. Here one
loop reads every element once and keeps four running values per lane: the maximum and the minimum as
order-preserving integer keys of the float bits (integer min/max vectorise; float ones with NaN
semantics do not), the sum and the sum of squares in float64.

Element ``i`` goes to lane ``i % 32`` and the 32 lanes are combined in a fixed order, so the numbers
are the same on every CPU whatever its vector width, and the same from either implementation:

1. :mod:`dumpers.torch_dump.native`, the loop in C, compiled once per user and cached (all four dtypes);
2. numba (float32 and float64 only), when no C compiler is available;
3. neither (or ``MSPROBE_DUMP_JIT=0``): :func:`summarize_memory` returns None and the caller's plain
   torch/numpy reductions run.

For float32, bfloat16 and float16 data every value and every square is exact in float64, so Mean and
Norm are the exact values up to float64 additions (relative error about ``n / 32 * 2**-53`` at worst),
rounded once to the dtype; float64 sums are compensated. Only finite data takes this path: a NaN or
an infinity (or a Norm that overflows the dtype) makes :func:`summarize_memory` return None, so the
caller's NaN-aware path decides.
"""
from __future__ import annotations

import ctypes
import logging
import math
import os
import threading
import warnings
from typing import Any, Optional, Union

import numpy as np

from dumpers.torch_dump import native

log = logging.getLogger("pytest_msprobe.dump")

MIN_ELEMENTS = 64            # below this the call overhead dominates: the plain path is as fast
LANES = 32                   # element i goes to lane i % LANES (native.SOURCE's L)

_kernels: Optional[dict] = None
_local = threading.local()
_NAMES = {True: "float32", False: "float64"}
_NATIVE = {"float32": "msprobe_stats_f32", "float64": "msprobe_stats_f64", "bfloat16": "msprobe_stats_bf16",
           "float16": "msprobe_stats_f16"}


def disabled() -> bool:
    """``MSPROBE_DUMP_JIT=0`` (or false/no/off): no one-pass kernel, the plain reductions only."""
    return os.environ.get("MSPROBE_DUMP_JIT", "1").strip().lower() in ("0", "false", "no", "off")


def _build() -> dict:
    """dtype name -> C-callable ``(address, n, out) -> ok``; empty when no implementation is available."""
    if disabled():
        return {}
    funcs = native.load()
    if funcs:
        out = {name: funcs[symbol] for name, symbol in _NATIVE.items()}
        out["backend"] = "native"
        return out
    return _build_numba()


def kernels() -> dict:
    """The one-pass kernels by dtype name (built on first use; ``"backend"`` names the implementation)."""
    global _kernels
    if _kernels is None:
        try:
            _kernels = _build()
        except Exception as exc:  # noqa: BLE001 - statistics must never fail because of the accelerator
            log.warning("msprobe dump: the one-pass statistics kernel is unavailable (%s); using plain "
                        "reductions", exc)
            _kernels = {}
    return _kernels


def backend() -> Optional[str]:
    """``"native"``, ``"numba"`` or None: which implementation :func:`summarize_memory` uses."""
    return kernels().get("backend")


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
    None when the data is not finite, ``n`` is below :data:`MIN_ELEMENTS` or no kernel serves the dtype.
    For a tensor the caller has checked: dense, contiguous, on the CPU, alive for the duration of the call.
    """
    if n < MIN_ELEMENTS:
        return None
    fn = (_kernels if _kernels is not None else kernels()).get(_NAMES.get(dtype, dtype))
    if fn is None:
        return None
    out, where = _out()
    if fn(address, n, where):
        return [out[0], out[1], out[2], out[3]]
    return None


def summarize(array: np.ndarray) -> Optional[list]:
    """[Max, Min, Mean, Norm] of a float32/float64/float16 numpy array, or None (not finite, no kernel).

    The values are Python floats; Mean and Norm are rounded to the array's dtype. The same loop as
    :func:`summarize_memory`, for numpy callers.
    """
    if array.dtype.name not in _NATIVE or array.size < MIN_ELEMENTS:
        return None
    flat = np.ascontiguousarray(array).reshape(-1)
    return summarize_memory(flat.ctypes.data, flat.size, array.dtype.name)


# --- the numba implementation (float32, float64): the same lanes, the same order, the same bits -----------

def _build_numba() -> dict:
    try:
        import numba
    except ImportError:
        log.debug("neither a C compiler nor numba: tensor statistics use four torch/numpy reductions")
        return {}
    out: dict = {}
    for name, float_type, key_type in (("float32", np.float32, np.int32), ("float64", np.float64, np.int64)):
        try:
            out[name] = _by_pointer(numba, _numba_kernel(numba, float_type, key_type), float_type, key_type)
        except Exception as exc:  # noqa: BLE001 - that dtype takes the plain path
            log.debug("numba one-pass statistics for %s unavailable (%s)", name, exc)
    if out:
        out["backend"] = "numba"
    return out


def _numba_kernel(numba: Any, float_type: Any, key_type: Any) -> Any:
    bits = np.dtype(key_type).itemsize * 8
    kmask = key_type((1 << (bits - 1)) - 1)
    shift = key_type(bits - 1)
    kmin, kmax = key_type(np.iinfo(key_type).min), key_type(np.iinfo(key_type).max)
    compensated = float_type is np.float64
    lanes = LANES

    def kernel(values, keys, out):      # pragma: no cover - runs compiled (numba), not as Python
        n = keys.shape[0]
        hi = np.full(lanes, kmin, key_type)
        lo = np.full(lanes, kmax, key_type)
        s = np.zeros(lanes)
        cs = np.zeros(lanes)
        q = np.zeros(lanes)
        cq = np.zeros(lanes)
        for i in range(n):
            j = i % lanes
            k = keys[i]
            k = key_type(k ^ key_type(key_type(k >> shift) & kmask))
            if k > hi[j]:
                hi[j] = k
            if k < lo[j]:
                lo[j] = k
            d = np.float64(values[i])
            p = d * d
            if compensated:
                t = s[j] + d
                cs[j] += (s[j] - t) + d if abs(s[j]) >= abs(d) else (d - t) + s[j]
                s[j] = t
                t = q[j] + p
                cq[j] += (q[j] - t) + p if q[j] >= p else (p - t) + q[j]
                q[j] = t
            else:
                s[j] += d
                q[j] += p
        if compensated:
            S, CS, Q, CQ = 0.0, 0.0, 0.0, 0.0
            for j in range(lanes):
                t = S + s[j]
                CS += (S - t) + s[j] if abs(S) >= abs(s[j]) else (s[j] - t) + S
                S = t
                t = Q + q[j]
                CQ += (Q - t) + q[j] if Q >= q[j] else (q[j] - t) + Q
                Q = t
                hi[0] = max(hi[0], hi[j])
                lo[0] = min(lo[0], lo[j])
            for j in range(lanes):
                CS += cs[j]
                CQ += cq[j]
            S += CS
            Q += CQ
        else:
            w = lanes // 2
            while w >= 1:
                for j in range(w):
                    s[j] += s[j + w]
                    q[j] += q[j + w]
                    hi[j] = max(hi[j], hi[j + w])
                    lo[j] = min(lo[j], lo[j + w])
                w //= 2
            S, Q = s[0], q[0]
        ends = np.empty(2, key_type)
        ends[0] = hi[0] ^ ((hi[0] >> shift) & kmask)      # the keys back to the bits of the floats
        ends[1] = lo[0] ^ ((lo[0] >> shift) & kmask)
        ends_f = ends.view(float_type)
        out[0] = np.float64(ends_f[0])
        out[1] = np.float64(ends_f[1])
        if not (math.isfinite(S) and math.isfinite(Q)):
            return 0
        out[2] = np.float64(float_type(S / n))
        out[3] = np.float64(float_type(math.sqrt(Q)))
        return 1 if math.isfinite(out[3]) else 0

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return numba.njit(nogil=True, boundscheck=False, cache=True)(kernel)
        except Exception:  # noqa: BLE001 - no writable cache directory: compile per process instead
            return numba.njit(nogil=True, boundscheck=False)(kernel)


def _by_pointer(numba: Any, fn: Any, dtype: Any, key_type: Any) -> Any:
    """A C entry point ``(address, n, out) -> ok`` over raw memory, called through ctypes."""
    from numba import carray, types

    def by_pointer(vp, kp, n, op):      # pragma: no cover - runs compiled (numba), not as Python
        return fn(carray(vp, (n,)), carray(kp, (n,)), carray(op, (4,)))

    ftype = types.float32 if dtype is np.float32 else types.float64
    ktype = types.int32 if key_type is np.int32 else types.int64
    sig = types.int32(types.CPointer(ftype), types.CPointer(ktype), types.intp, types.CPointer(types.float64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = numba.cfunc(sig)(by_pointer)
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_void_p)
    call = proto(compiled.address)

    def entry(address: int, n: int, out: int, _call: Any = call, _keep: Any = compiled) -> int:
        return _call(address, address, n, out)
    return entry
