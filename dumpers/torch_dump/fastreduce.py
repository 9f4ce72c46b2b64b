"""Max, Min, Mean and Norm of a contiguous float32/float64 CPU tensor in one pass over its memory.

The plain way costs four reductions (max, min, mean, norm), each reading the whole tensor again; a
dump summarises tens of millions of elements per training step, mostly just written by the kernel
before and already out of the nearest caches, so those passes are bound by memory traffic. Here one
numba-compiled loop reads every element once and keeps four running values: the maximum and the
minimum as order-preserving integer keys of the float bits (integer min/max vectorise; float ones
with NaN semantics do not), and the sum and the sum of squares in float64.

Only finite data takes this path: a NaN or an infinity makes the float64 sums non-finite and
:func:`summarize` returns None, so the caller's NaN-aware path decides. Mean and Norm are the
float64 results rounded once to the tensor's dtype (as torch returns them), which is as close to
the exact value as that dtype allows; torch's own float32 reductions differ from it in the last
bits. Without numba (or with ``MSPROBE_DUMP_JIT=0``) :func:`summarize` always returns None.
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

    def make(float_type: Any, key_type: Any, mask: int) -> Any:
        kmask = key_type(mask)
        shift = np.dtype(key_type).itemsize * 8 - 1
        kmin, kmax = key_type(np.iinfo(key_type).min), key_type(np.iinfo(key_type).max)

        def kernel(values, bits):       # pragma: no cover - runs compiled (numba), not as Python
            hi, lo = kmin, kmax
            s = 0.0
            q = 0.0
            for i in range(bits.shape[0]):
                x = np.float64(values[i])
                s += x
                q += x * x
                k = bits[i]
                k = k ^ ((k >> shift) & kmask)
                hi = max(hi, k)
                lo = min(lo, k)
            ends = np.empty(2, key_type)
            ends[0] = hi ^ ((hi >> shift) & kmask)      # the keys back to the bits of the floats
            ends[1] = lo ^ ((lo >> shift) & kmask)
            ends_f = ends.view(float_type)
            return np.float64(ends_f[0]), np.float64(ends_f[1]), s, q
        return kernel

    flags = {"reassoc", "contract"}      # reordering the sums only: NaN/inf semantics stay intact
    out = {}
    for dtype, key_type, mask in ((np.float32, np.int32, 0x7FFFFFFF), (np.float64, np.int64, 0x7FFFFFFFFFFFFFFF)):
        py = make(dtype, key_type, mask)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn = numba.njit(fastmath=flags, nogil=True, boundscheck=False, cache=True)(py)
        except Exception:  # noqa: BLE001 - no writable cache directory: compile per process instead
            fn = numba.njit(fastmath=flags, nogil=True, boundscheck=False)(py)
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
        mx, mn, s, q = fn(carray(vp, (n,)), carray(bp, (n,)))
        out[0] = mx
        out[1] = mn
        out[2] = s
        out[3] = q

    ftype = types.float32 if dtype is np.float32 else types.float64
    ktype = types.int32 if key_type is np.int32 else types.int64
    sig = types.void(types.CPointer(ftype), types.CPointer(ktype), types.intp, types.CPointer(types.float64))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = numba.cfunc(sig, cache=True)(by_pointer)
    except Exception:  # noqa: BLE001 - no writable cache directory
        compiled = numba.cfunc(sig)(by_pointer)
    call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_void_p)(
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
        mx, mn, s, q = entry[0](flat, flat.view(entry[1]))
    except Exception as exc:  # noqa: BLE001
        log.debug("one-pass statistics failed (%s); falling back", exc)
        return None
    return _numbers(mx, mn, s, q, n, entry[2])


_isfinite, _sqrt, _F32 = math.isfinite, math.sqrt, np.float32


def _numbers(mx: float, mn: float, s: float, q: float, n: int, float32: bool) -> Optional[list]:
    """[Max, Min, Mean, Norm] from the loop's results; None when the data held a NaN or an infinity."""
    if not (_isfinite(s) and _isfinite(q)):
        return None
    if float32:
        return [mx, mn, float(_F32(s / n)), float(_F32(_sqrt(q)))]
    return [mx, mn, s / n, _sqrt(q)]


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
    out = getattr(_local, "out", None)
    if out is None:
        out = _local.out = (ctypes.c_double * 4)()
    entry[0](address, address, n, ctypes.addressof(out))
    return _numbers(out[0], out[1], out[2], out[3], n, float32)
