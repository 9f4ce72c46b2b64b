"""Per-output metrics of the precision standard (spec precision-standard.md section 2), numpy only.

Every metric is a pure function of the prepared bench array ``B`` and device array ``D`` (section 1.7).
The work is done by :func:`float_metrics`, which walks both arrays in chunks of ``CHUNK`` elements and
accumulates counts, sums and maxima into chunk-sized scratch arrays, so a 1e8-element output never needs
a full-size copy. Cosine similarity sums its dot products in the same pass; an output of one chunk (or
one whose magnitudes could overflow the unscaled squares) takes a second, normalised pass, msprobe's exact
formula. Each metric is computed in the
numeric type the spec prescribes and returns the same scalar type msprobe writes (section 6.3): float32
results stay ``np.float32``, float64 results are ``np.float64`` or Python ``float``, "no data" results
are the integer ``0``.

Inputs may be numpy arrays (any shape; they are flattened) or any object with ``dtype`` (a numpy
dtype), ``size`` and ``read(start, stop) -> np.ndarray`` returning a 1-D slice in that dtype, and
optionally ``read_into(start, stop, out)`` filling a given buffer (the compare layer uses this to convert
bfloat16 torch tensors chunk by chunk).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .metrics_engine import (  # noqa: F401 - the engine's names are part of this module's interface
    ArraySource,
    CosineResult,
    MSG_BENCH_ZERO,
    MSG_BOTH_ZERO,
    MSG_COS_NAN,
    MSG_DEVICE_ZERO,
    MSG_EMPTY_MAX,
    MSG_SCALAR,
    MetricSet,
    RATIO_THRESHOLDS,
    _Engine,
    _nanmax_merge,
    _pow2,
    as_source,
    relative_eps,
)
from .standards import COSINE_ZERO_EPS, FP16, FP32, AbsoluteThreshold, SmallValue, UlpParams

CHUNK = 1 << 16


def float_metrics(bench: Any, device: Any, *, device_dtype: str, eps: float | None = None,
                  legacy: bool = True, binary: bool = False, small_value: SmallValue | None = None,
                  absolute: AbsoluteThreshold | None = None, ulp: UlpParams | None = None,
                  agree_nonfinite: bool = True, absolute_class_match: bool = True,
                  chunk: int | None = None) -> MetricSet:
    """Compute the requested metric groups of two prepared float arrays in one chunked pass.

    Args:
        bench, device: prepared arrays (1.7) or chunk sources, same element count.
        device_dtype: the device output's torch dtype string (keys the tables, picks bf16 eps).
        eps: relative-error epsilon; default :func:`relative_eps`.
        legacy: cosine, max abs error and the double-hundred/thousand/ten-thousand ratios (2.1-2.3).
        binary: binary consistency error rate (2.4).
        small_value: benchmark metrics (2.5) with these thresholds.
        absolute: absolute-threshold metrics (2.6) with these thresholds.
        ulp: ULP metrics (2.7) with these parameters.
        agree_nonfinite: non-finite positions where both sides agree count as equal in the legacy
            metrics and the binary rate (fix of msprobe defect 9 #6); False gives msprobe 1.0.4.
        absolute_class_match: a bench +-inf needs the same device inf in the inf/nan error rate
            (fix of 9 #19); False gives msprobe's clip rule.
        chunk: elements per chunk (default: the module's ``CHUNK``).

    Returns:
        MetricSet whose ``values`` hold the computed cells by DETAIL_METRIC_FIELDS name.
    """
    bs, ds = as_source(bench), as_source(device)
    if bs.size != ds.size:
        raise ValueError(f"bench has {bs.size} elements but device has {ds.size}; compare shapes first")
    eng = _Engine(bs, ds, device_dtype=device_dtype, eps=eps, legacy=legacy, binary=binary,
                  small_value=small_value, absolute=absolute, ulp=ulp, agree_nonfinite=agree_nonfinite,
                  absolute_class_match=absolute_class_match, chunk=chunk or CHUNK)
    return eng.run()


# --------------------------------------------------------------------------------------------------
# one function per metric (thin wrappers over float_metrics, for callers that want one number)
def _eps_for(bench: Any, device_dtype: str, eps: float | None) -> float:
    return eps if eps is not None else relative_eps(as_source(bench).dtype, device_dtype)


def _dtype_str(device: Any, device_dtype: str | None) -> str:
    if device_dtype is not None:
        return device_dtype
    name = np.dtype(as_source(device).dtype).name
    return {"float16": FP16, "float32": FP32, "float64": "torch.float64"}.get(name, name)


def cosine_similarity(bench: Any, device: Any, *, agree_nonfinite: bool = False) -> CosineResult:
    """Cosine similarity with msprobe's special cases (2.1). Lengths differ -> value -1, fails."""
    bs, ds = as_source(bench), as_source(device)
    if bs.size != ds.size:
        return CosineResult(-1, False, "Shape of device and bench outputs don't match. "
                            f"device: {np.shape(device)}, bench: {np.shape(bench)}.")
    return float_metrics(bs, ds, device_dtype=_dtype_str(ds, None),
                         agree_nonfinite=agree_nonfinite).cosine


def _plain_cosine(bench: Any, device: Any) -> float | None:
    """Cosine of two small finite numpy arrays without the full metric pass; None when a special case applies."""
    if not (isinstance(bench, np.ndarray) and isinstance(device, np.ndarray)) or bench.size != device.size \
            or bench.size <= 1 or bench.size > CHUNK or bench.dtype.kind != "f" or device.dtype.kind != "f":
        return None
    b = bench.reshape(-1).astype(np.float64)
    d = device.reshape(-1).astype(np.float64)
    with np.errstate(all="ignore"):
        bmax, dmax = np.max(np.abs(b)), np.max(np.abs(d))
    if not (np.isfinite(bmax) and np.isfinite(dmax)) or bmax <= COSINE_ZERO_EPS or dmax <= COSINE_ZERO_EPS:
        return None
    b /= bmax
    d /= dmax
    value = np.einsum("i,i->", d, b) / (np.sqrt(np.einsum("i,i->", d, d)) * np.sqrt(np.einsum("i,i->", b, b)))
    return float(min(1.0, max(-1.0, value)))


def cosine(bench: Any, device: Any) -> float:
    """Plain cosine similarity as a Python float (1.0 for two all-zero or one-element outputs,
    NaN when an all-zero side, inf/nan or an empty output makes it undefined)."""
    if as_source(bench).size == 0:
        return float("nan")
    fast = _plain_cosine(bench, device)
    if fast is not None:
        return fast
    res = cosine_similarity(bench, device)
    if res.value is None:
        return 1.0 if res.passed else float("nan")
    return float(res.value)


def max_abs_error(bench: Any, device: Any) -> float:
    """max |D - B| as a Python float (NaN propagates; 0.0 for empty arrays)."""
    bs, ds = as_source(bench), as_source(device)
    best: Any = None
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, bs.size, CHUNK):
            stop = min(start + CHUNK, bs.size)
            ae = np.abs(ds.read(start, stop) - bs.read(start, stop))
            best = _nanmax_merge(best, np.max(ae))
    return 0.0 if best is None else float(best)


def max_abs(bench: Any, device: Any) -> Any:
    """Max abs error cell (2.2) in the error's own type (np.float32 / np.float64)."""
    ds = as_source(device)
    return float_metrics(bench, ds, device_dtype=_dtype_str(ds, None), agree_nonfinite=False).values[
        "max_abs_err"]


def error_ratios(bench: Any, device: Any, *, device_dtype: str | None = None,
                 eps: float | None = None) -> dict:
    """Double-hundred / double-thousand / double-ten-thousand ratios (2.3), keyed by field name."""
    dt = _dtype_str(device, device_dtype)
    ms = float_metrics(bench, device, device_dtype=dt, eps=_eps_for(bench, dt, eps), agree_nonfinite=False)
    return {k: ms.values[k] for k in RATIO_THRESHOLDS}


def binary_error_rate(bench: Any, device: Any, *, agree_nonfinite: bool = False) -> Any:
    """count(B != D) / N (2.4); the string "Nan" for empty outputs. Works for every dtype."""
    bs, ds = as_source(bench), as_source(device)
    n = bs.size
    if n == 0:
        return "Nan"
    diff = 0
    for start in range(0, n, CHUNK):
        stop = min(start + CHUNK, n)
        bc, dc = bs.read(start, stop), ds.read(start, stop)
        ne = bc != dc
        if agree_nonfinite and bc.dtype.kind == "f" and dc.dtype.kind == "f":
            ne &= ~(np.isnan(bc) & np.isnan(dc))
        diff += int(np.count_nonzero(ne))
    return diff / n


def benchmark_metrics(bench: Any, device: Any, *, small_value: SmallValue, device_dtype: str | None = None,
                      eps: float | None = None) -> dict:
    """Benchmark-standard cells (2.5): small_value_err_ratio, rmse, error_balance, max/mean_rel_err."""
    dt = _dtype_str(device, device_dtype)
    return float_metrics(bench, device, device_dtype=dt, eps=_eps_for(bench, dt, eps), legacy=False,
                         small_value=small_value).values


def absolute_metrics(bench: Any, device: Any, *, threshold: AbsoluteThreshold,
                     device_dtype: str | None = None, eps: float | None = None,
                     class_match: bool = True) -> dict:
    """Absolute-threshold cells (2.6): inf_nan_error_rate, rel_err_error_rate, abs_err_error_rate."""
    dt = _dtype_str(device, device_dtype)
    return float_metrics(bench, device, device_dtype=dt, eps=_eps_for(bench, dt, eps), legacy=False,
                         absolute=threshold, absolute_class_match=class_match).values


def ulp_metrics(bench: Any, device: Any, *, params: UlpParams, device_dtype: str | None = None) -> dict:
    """ULP cells (2.7): ulp_max, ulp_mean, ulp_above_threshold_ratio."""
    dt = _dtype_str(device, device_dtype)
    return float_metrics(bench, device, device_dtype=dt, legacy=False, ulp=params).values


def ulp_errors(bench: np.ndarray, device: np.ndarray, params: UlpParams) -> np.ndarray:
    """Element-wise ULP error (2.7) of small arrays: |(D - B) * 2^(exponent_num - eb)| in the compute type."""
    tc = np.dtype(params.compute)
    b = np.asarray(bench).astype(tc)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        eb = np.where(b != 0, np.floor(np.log2(np.abs(b))), tc.type(0))
        eb = np.maximum(eb, tc.type(params.min_eb))
        return np.abs((np.asarray(device).astype(tc) - b) * _pow2(tc.type(params.exponent_num) - eb))
